# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fixture DeepEP tests print what deepep_bandwidth parses, and move traffic only on mapped NICs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import gate
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import select_thresholds
import pytest
import yaml

from tools.fleetsim import mirror
from tools.fleetsim.common import REPO
MAP8 = ",".join("%d:mlx5_%d:1" % (i, i) for i in range(8))
PR466 = '''
import os
class Buffer:
    @staticmethod
    def _setup_device_hca_mapping(local_rank=0):
        table = dict(item.split(":", 1) for item in os.environ["DEEP_EP_DEVICE_TO_HCA_MAPPING"].split(","))
        return table[str(local_rank)]
'''


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """tests/ of the V1 and V2 fixture trees as the mirror packs them (shared files included)."""
    base = tmp_path_factory.mktemp("trees")
    return {gen: mirror.assemble_source("deepep-%s-fixture" % gen, base / gen) / "tests" for gen in ("v1", "v2")}


def node(tmp_path, mapping_support=True):
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo 'NVIDIA B200'; done\n")
    smi.chmod(0o755)
    tool = tmp_path / "bin" / "fleetsim-nic-traffic"
    tool.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, REPO / "tools/fleetsim/node/fleetsim-nic-traffic.py"))
    tool.chmod(0o755)
    pkg = tmp_path / "pkg" / "deep_ep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PR466 if mapping_support else "class Buffer:\n    pass\n")
    for i in range(8):
        port = tmp_path / "sys" / "class" / "infiniband" / ("mlx5_%d" % i) / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")
    return dict(os.environ, PATH="%s:%s" % (tmp_path / "bin", os.environ["PATH"]), PYTHONPATH=str(tmp_path / "pkg"),
                PYTHONDONTWRITEBYTECODE="1",
                FLEETSIM_SYSFS_ROOT=str(tmp_path / "sys"), FLEETSIM_TRAFFIC_SPOOL=str(tmp_path / "spool"))


def run(argv, env):
    return subprocess.run([sys.executable] + [str(a) for a in argv], check=False, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def test_intranode_v1_and_v2_legacy_parse(trees, tmp_path):
    env = node(tmp_path)
    for script in (trees["v1"] / "test_intranode.py", trees["v2"] / "legacy" / "test_intranode.py"):
        proc = run([script, "--num-processes", "8"], env)
        assert proc.returncode == 0, proc.stderr
        parsed = parse_output(proc.stdout, test="intranode")
        assert parsed["complete"] and parsed["cases"] == {"passed": 24, "failed": 0}
        assert 430 < parsed["dispatch"]["bf16"]["nvl_gbps"] < 460 and parsed["combine"]["nvl_gbps"] > 340


def test_intranode_refuses_more_processes_than_gpus(trees, tmp_path):
    proc = run([trees["v1"] / "test_intranode.py", "--num-processes", "9"], node(tmp_path))
    assert proc.returncode == 1 and "invalid device ordinal" in proc.stderr


def test_low_latency_and_elastic_parse(trees, tmp_path):
    env = node(tmp_path)
    parsed = parse_output(run([trees["v1"] / "test_low_latency.py", "--num-processes", "2"], env).stdout, test="low_latency")
    assert parsed["complete"] and parsed["low_latency"]["ranks"] == 2
    parsed = parse_output(run([trees["v2"] / "elastic" / "test_ep.py", "--num-processes", "4"], env).stdout, test="elastic")
    assert parsed["complete"] and parsed["cases"] == {"passed": 2, "failed": 0}
    assert parsed["dispatch"]["bf16"]["rdma_gbps"] is None and parsed["dispatch"]["bf16"]["nvl_gbps"] > 600


@pytest.mark.parametrize("gen, script", [("v1", "test_low_latency.py"), ("v2", "legacy/test_low_latency.py")])
def test_low_latency_on_one_node_passes_its_gate_and_a_slow_or_proxied_node_fails(trees, tmp_path, gen, script):
    """The low-latency test of either tree on one node: 8 B200 ranks over NVLink pass the profile object's gate for 8
    GPUs (provisional, the Hopper floor); the slow knob puts the node under it; with NVSHMEM's debug on, the proxied
    fault prints the host-memory CPU handler, which the transport policy of the scope refuses by name."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import transport_policy
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import transport_verdict

    env = node(tmp_path)
    chosen = select_thresholds({}, "b200", gpus=8, scope="low_latency_intranode")
    proc = run([trees[gen] / script, "--num-processes", "8"], env)
    assert proc.returncode == 0, proc.stderr
    parsed = parse_output(proc.stdout, test="tests/%s" % script)
    assert parsed["test"] == "low_latency" and parsed["complete"] and parsed["low_latency"]["ranks"] == 8
    assert gate(parsed, chosen["thresholds"])["passed"] and chosen["provisional"]
    slow = run([trees[gen] / script, "--num-processes", "8"], dict(env, FLEETSIM_LL_GBPS='{"dispatch": 90}'))
    verdict = gate(parse_output(slow.stdout, test="low_latency"), chosen["thresholds"])
    assert not verdict["passed"] and "ll_dispatch_gbps 90.0 GB/s is below the gate of 115 GB/s" in verdict["reasons"]
    policy = transport_policy(gen, "low_latency_intranode")["policy"]
    healthy = run([trees[gen] / script, "--num-processes", "2"], dict(env, NVSHMEM_DEBUG="INFO", NCCL_DEBUG="INFO"))
    assert transport_verdict(healthy.stdout, policy)["gate"]["passed"]
    proxied = run([trees[gen] / script, "--num-processes", "2"],
                  dict(env, NVSHMEM_DEBUG="INFO", FLEETSIM_TRANSPORT_FAULT="cpu_fallback_host"))
    verdict = transport_verdict(proxied.stdout, policy)["gate"]
    assert not verdict["passed"] and any("fell back to the CPU-assisted path" in r for r in verdict["reasons"])
    ibgda = transport_policy(gen, "low_latency_internode")["policy"]
    assert "NIC handler is CPU with the host memory backend" in " ".join(transport_verdict(proxied.stdout, ibgda)["gate"]["reasons"])


@pytest.mark.parametrize("kind", ["engram", "pp", "agrs", "barrier"])
def test_v2_extras_print_what_the_parser_reads_and_fail_where_the_real_ones_did(trees, tmp_path, kind):
    """Each stand-in of V2's other tests: on 8 B200 ranks with NICs it finishes, read whole by the parser; on one rank
    agrs and pp fail as the real tests did on the lent H200 (their assertions), without an ACTIVE NIC engram's fetch
    dies as it did there; the correctness knob fails the test's own check."""
    env = node(tmp_path)
    script = trees["v2"] / "elastic" / ("test_%s.py" % kind)
    proc = run([script, "--num-processes", "8"], env)
    assert proc.returncode == 0, proc.stderr
    parsed = parse_output(proc.stdout, test="tests/elastic/test_%s.py" % kind)
    assert parsed["generation"] == "v2" and parsed["complete"] and parsed["extras"]["ranks"] == 8, parsed
    assert all(value is not None for value in parsed["extras"]["figures"].values()), parsed["extras"]
    one = run([script, "--num-processes", "1"], env)
    assert (one.returncode != 0) == (kind in ("agrs", "pp")), one.stderr
    if kind == "agrs":
        assert "nccl_context->num_ranks > 1" in one.stderr
    for port in (tmp_path / "sys" / "class" / "infiniband").glob("*/ports/1/state"):
        port.write_text("1: DOWN\n")
    bare = run([script, "--num-processes", "8"], env)
    assert (bare.returncode != 0) == (kind in ("engram", "pp")), bare.stderr
    if kind == "engram":
        assert "CUDA_ERROR_MISALIGNED_ADDRESS" in bare.stderr
    if kind != "barrier":
        for port in (tmp_path / "sys" / "class" / "infiniband").glob("*/ports/1/state"):
            port.write_text("4: ACTIVE\n")
        bad = run([script, "--num-processes", "8"], dict(env, FLEETSIM_EXTRAS_FAIL=kind))
        assert bad.returncode == 1 and not parse_output(bad.stdout + bad.stderr, test=kind)["complete"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def internode(trees, tmp_path, mapping, support=True):
    env = node(tmp_path, support)
    port = free_port()
    procs = []
    for rank in (0, 1):
        node_env = dict(env, WORLD_SIZE="2", RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        FLEETSIM_RENDEZVOUS_TIMEOUT="60")
        if mapping:
            node_env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] = mapping
        procs.append(subprocess.Popen([sys.executable, str(trees["v1"] / "test_internode.py")], env=node_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True))
    outs = [p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    spool = (tmp_path / "spool").read_text().split()
    sent = {}
    for dev, nbytes in zip(spool[0::2], spool[1::2]):
        sent[dev] = sent.get(dev, 0) + int(nbytes)
    return [parse_output(out, test="internode") for out, dummy in outs], sent


def test_internode_with_mapping_uses_every_nic(trees, tmp_path):
    parsed, sent = internode(trees, tmp_path, MAP8)
    assert sorted(sent) == ["mlx5_%d" % i for i in range(8)]
    assert all(p["complete"] and p["dispatch"]["bf16"]["rdma_gbps"] > 75 for p in parsed)


def test_internode_without_mapping_uses_mlx5_0_at_the_signature(trees, tmp_path):
    parsed, sent = internode(trees, tmp_path, "")
    assert list(sent) == ["mlx5_0"]
    assert all(6.0 < p["dispatch"]["bf16"]["rdma_gbps"] < 7.0 for p in parsed)


def test_internode_mapping_ignored_without_pr466(trees, tmp_path):
    parsed, sent = internode(trees, tmp_path, MAP8, support=False)
    assert list(sent) == ["mlx5_0"]


def test_internode_wrong_master_address_fails_like_torch(trees, tmp_path):
    env = dict(node(tmp_path), WORLD_SIZE="2", RANK="0", MASTER_ADDR="192.0.2.1", MASTER_PORT=str(free_port()))
    proc = run([trees["v1"] / "test_internode.py"], env)
    assert proc.returncode == 1 and "failed to bind to 192.0.2.1" in proc.stderr


def gpu_node(tmp_path, name, count):
    env = node(tmp_path)
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\nfor i in $(seq %d); do echo '%s'; done\n" % (count, name))
    return env


@pytest.mark.parametrize("ranks", [1, 3, 5, 6, 7])
def test_intranode_refuses_rank_counts_deepep_has_no_kernels_for(trees, tmp_path, ranks):
    env = gpu_node(tmp_path, "NVIDIA H100 80GB HBM3", 8)
    for script in (trees["v1"] / "test_intranode.py", trees["v2"] / "legacy" / "test_intranode.py"):
        proc = run([script, "--num-processes", ranks], env)
        assert proc.returncode == 1 and "Unsupported ranks" in proc.stderr, (ranks, proc.stderr)
        assert "[tuning]" not in proc.stdout


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_intranode_runs_on_2_4_or_8_ranks(trees, tmp_path, ranks):
    proc = run([trees["v1"] / "test_intranode.py", "--num-processes", ranks],
               gpu_node(tmp_path, "NVIDIA H200", 8))
    assert proc.returncode == 0, proc.stderr
    assert parse_output(proc.stdout, test="intranode")["complete"]


@pytest.mark.parametrize("gpu", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
def test_hopper_intranode_figures_follow_the_nv18_measurement_not_the_h800_table(trees, tmp_path, gpu):
    # captured/h200x2: BF16 340.6, FP8 247.8, combine 293.2 GB/s; the fixture jitters by at most 1.5%.
    proc = run([trees["v1"] / "test_intranode.py", "--num-processes", "2"], gpu_node(tmp_path, gpu, 2))
    parsed = parse_output(proc.stdout, test="intranode")
    for got, measured in ((parsed["dispatch"]["bf16"]["nvl_gbps"], 340.6),
                          (parsed["dispatch"]["fp8"]["nvl_gbps"], 247.8), (parsed["combine"]["nvl_gbps"], 293.2)):
        assert abs(got / measured - 1) <= 0.0151, (gpu, got, measured)


@pytest.mark.parametrize("gpu,measured", [("NVIDIA H100 80GB HBM3", (258.3, 253.9, 354.9)),
                                          ("NVIDIA H200", (261.4, 255.3, 355.6))])
def test_hopper_intranode_figures_on_4_gpus_follow_the_4_gpu_measurement(trees, tmp_path, gpu, measured):
    # captured/h100x4 and h200x4: with 4 peers BF16 dispatch falls and combine rises against the 2-GPU figures,
    # and the role's 4-GPU gate holds for them.
    proc = run([trees["v1"] / "test_intranode.py", "--num-processes", "4"], gpu_node(tmp_path, gpu, 4))
    parsed = parse_output(proc.stdout, test="intranode")
    for got, want in zip((parsed["dispatch"]["bf16"]["nvl_gbps"], parsed["dispatch"]["fp8"]["nvl_gbps"],
                          parsed["combine"]["nvl_gbps"]), measured):
        assert abs(got / want - 1) <= 0.0151, (gpu, got, want)
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    chosen = select_thresholds(defaults["verify_intranode_thresholds"], gpu.split()[1].lower(), gpus=4,
                               scope="intranode")
    assert chosen["shape"] == "measured" and gate(parsed, chosen["thresholds"])["passed"]


def test_intranode_knob_sets_exact_figures_and_a_bad_value_is_named(trees, tmp_path):
    env = dict(gpu_node(tmp_path, "NVIDIA B200", 8), FLEETSIM_INTRANODE_GBPS='{"BF16": 368.6}')
    parsed = parse_output(run([trees["v1"] / "test_intranode.py"], env).stdout, test="intranode")
    assert parsed["dispatch"]["bf16"]["nvl_gbps"] == 368.6
    assert parsed["combine"]["nvl_gbps"] > 340  # the others keep the family's figures
    bad = run([trees["v1"] / "test_intranode.py"], dict(env, FLEETSIM_INTRANODE_GBPS="fast"))
    assert bad.returncode == 2 and "expected JSON" in bad.stderr and "'fast'" in bad.stderr


def role_gates(family):
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    return select_thresholds(defaults["verify_intranode_thresholds"], family, scope="intranode")["thresholds"]


@pytest.mark.parametrize("gpu,family", [("NVIDIA B200", "gcp_b200"), ("NVIDIA H200", "h200_nvlink"),
                                        ("NVIDIA H100 80GB HBM3", "h100_ib")])
def test_a_node_a_few_percent_under_its_gate_fails_on_exactly_that_figure(trees, tmp_path, gpu, family):
    gates = role_gates(family)
    healthy = parse_output(run([trees["v1"] / "test_intranode.py", "--num-processes", "2"],
                               gpu_node(tmp_path, gpu, 2)).stdout, test="intranode")
    assert gate(healthy, gates)["passed"], (family, gates)
    slow = 0.97 * gates["dispatch_bf16_nvl_gbps"]
    (tmp_path / "slow").mkdir()
    env = dict(gpu_node(tmp_path / "slow", gpu, 2), FLEETSIM_INTRANODE_GBPS='{"BF16": %.1f}' % slow)
    parsed = parse_output(run([trees["v1"] / "test_intranode.py", "--num-processes", "2"], env).stdout,
                          test="intranode")
    verdict = gate(parsed, gates)
    assert not verdict["passed"] and verdict["status"] == "fail"
    assert len(verdict["reasons"]) == 1 and "dispatch_bf16_nvl_gbps" in verdict["reasons"][0], verdict


def test_the_hopper_gate_fails_a_node_at_half_its_nvlink_speed(trees, tmp_path):
    # The review's case: the old h100 gate (130 GB/s, from DeepEP's H800 table) passed a node at half speed.
    env = dict(gpu_node(tmp_path, "NVIDIA H100 80GB HBM3", 2),
               FLEETSIM_INTRANODE_GBPS='{"BF16": 170.3, "FP8": 123.9, "combine": 146.6}')
    parsed = parse_output(run([trees["v1"] / "test_intranode.py", "--num-processes", "2"], env).stdout,
                          test="intranode")
    assert not gate(parsed, role_gates("h100_ib"))["passed"]


# ----------------------------------------------------------------------------- a GB200 NVL72 domain across trays
def fake_smi(root, profile):
    """The fleet's fake nvidia-smi on the node's PATH (root/bin), answering from the profile's hardware JSON."""
    from tools.fleetsim import fakehw
    fakehw.write_hw_json(profile, root / "hardware.json")
    smi = root / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, REPO / "tools/fleetsim/fake_nvidia_smi.py"))
    smi.chmod(0o755)


def tray(tmp_path, name, fabric=None):
    """A GB200 tray of the simulated rack: the fake nvidia-smi over the gb200_nvl72 hardware (its GPUs' fabric state,
    ``fabric`` over it), the V2 fixture's deep_ep stand-in."""
    from tools.fleetsim import fakehw
    root = tmp_path / name
    root.mkdir()
    env = node(root)
    profile = fakehw.load_profile("gb200_nvl72")
    profile["gpu_fabric"].update(fabric or {})
    fake_smi(root, profile)
    return dict(env, FLEETSIM_HW_JSON=str(root / "hardware.json"), EP_DISABLE_GIN="1", NCCL_MNNVL_ENABLE="1",
                NCCL_DEBUG="INFO", EP_BUFFER_DEBUG="1", EP_NCCL_ROOT_DIR=str(root / "no-nccl"))


def v2_across(trees, envs, *args):
    """V2's elastic test on every node of ``envs`` at once (one rendezvous); [(rc, stdout, stderr)] per node."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(trees["v2"] / "elastic" / "test_ep.py"), "--num-tokens", "2048",
                               "--hidden", "7168", "--num-experts", "256"] + list(args),
                              env=dict(env, WORLD_SIZE=str(len(envs)), RANK=str(rank), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), FLEETSIM_RENDEZVOUS_TIMEOUT="60"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
             for rank, env in enumerate(envs)]
    outs = [p.communicate() for p in procs]
    return [(p.returncode,) + out for p, out in zip(procs, outs)]


def across_trays(trees, envs):
    return v2_across(trees, envs, "--num-processes", "4", "--allow-hybrid-mode", "0")


def v2_record(rc, out, err, stage, profile, family, fabric):
    """The collection's judge of one node's V2 run in ``stage`` (the scope of that name), with the profile's gates."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.judge import judge
    spec = {"stage": stage, "test": None, "thresholds": {}, "table_name": "verify_internode_%s_thresholds" % stage,
            "profile": profile, "family": family, "gpus": None, "transport_policy": None,
            "transport_policies": {}, "fabric": fabric, "record": {}}
    return judge(spec, out + err, rc, False, 900, "tests/elastic/test_ep.py", host=profile, backend="v2", scope=stage)


def scaleup_record(rc, out, err):
    return v2_record(rc, out, err, "scaleup", "gb200_nvl72", "gb200", "infiniband")


def test_trays_of_one_nvlink_domain_run_v2_over_multi_node_nvlink_and_pass_the_scale_up_gate(trees, tmp_path):
    """Two GB200 trays of one rack (same ClusterUUID and clique): V2's elastic test across them is one scale-up
    domain of 8 ranks (SU figures, no scale-out, no NIC traffic), NCCL's MNNVL lines say so, and the collection's
    judge passes it against the gb200 scale-up gate (provisional) with the transport held to MNNVL."""
    runs = across_trays(trees, [tray(tmp_path, "tray-1"), tray(tmp_path, "tray-2")])
    for rc, out, err in runs:
        assert rc == 0, err[-2000:]
        assert " > Ranks: 1 x 8" in out and "MNNVL 1 cliqueId" in out and "via P2P/MNNVL" in out
        record = scaleup_record(rc, out, err)
        assert record["gate"]["passed"], record["gate"]
        assert record["parsed"]["dispatch"]["bf16"]["rdma_gbps"] is None
        assert record["parsed"]["dispatch"]["bf16"]["nvl_gbps"] > 380 and record["parsed"]["combine"]["nvl_gbps"] > 300
        transport = record["transport"]
        assert transport["gate"]["passed"] and transport["truth"]["nccl"]["mnnvl"] is True, transport
        assert "MNNVL clique of 8" in transport["brief"] and transport["basis"]["scope"] == "scaleup"
        assert "provisional" in record["gate_basis"] or record["thresholds"].get("provisional"), record
    assert not (tmp_path / "tray-1" / "spool").exists() and not (tmp_path / "tray-2" / "spool").exists()


@pytest.mark.parametrize("fabric", [{"state": "In Progress"}, {"status": "Insufficient Resources"},
                                    {"cluster_uuid": "00000000-0000-0000-0000-000000000000"},
                                    {"cluster_uuid": "0b1d2c3e-0000-4000-8000-000000000001"}])
def test_a_tray_outside_the_domain_fails_the_scale_up_run_naming_multi_node_nvlink(trees, tmp_path, fabric):
    """A tray whose GPUs are not registered with the rack's fabric (or belong to another rack): NCCL refuses
    NCCL_MNNVL_ENABLE=1 on every rank, the run fails and the judge says so."""
    runs = across_trays(trees, [tray(tmp_path, "tray-1"), tray(tmp_path, "tray-2", fabric)])
    for rc, out, err in runs:
        assert rc == 1 and "MNNVL is not supported on this system" in err
        record = scaleup_record(rc, out, err)
        assert not record["gate"]["passed"]


# ------------------------------------------------------------------------------- DeepEP V2 across AWS EFA nodes
def efa_node(tmp_path, name, gin_type="5"):
    """An AWS p5en node of the simulated fleet: the aws_p5en_h200 hardware's sysfs (16 EFA devices, driver efa) and
    fake nvidia-smi, the V2 fixture's deep_ep stand-in, the env script's EFA settings (NCCL_GIN_TYPE)."""
    from tools.fleetsim import fakehw
    root = tmp_path / name
    root.mkdir()
    env = node(root)
    profile = fakehw.load_profile("aws_p5en_h200")
    fakehw.render_sysfs(profile, root / "efa-sys")
    fake_smi(root, profile)
    env = dict(env, FLEETSIM_SYSFS_ROOT=str(root / "efa-sys"), FLEETSIM_HW_JSON=str(root / "hardware.json"),
               NCCL_DEBUG="INFO", EP_BUFFER_DEBUG="1", EP_NCCL_ROOT_DIR=str(root / "no-nccl"), FI_PROVIDER="efa",
               NCCL_SYM_GIN_KERNELS_ENABLE="0")
    if gin_type:
        env["NCCL_GIN_TYPE"] = gin_type
    return env


def across_efa(trees, envs):
    return v2_across(trees, envs, "--num-processes", "8", "--num-sms", "24")


def efa_record(rc, out, err):
    return v2_record(rc, out, err, "internode", "h200_p5en", "h200", "efa")


def test_v2_across_efa_nodes_runs_over_libfabric_with_gin_as_efa_gda(trees, tmp_path):
    """Two p5en nodes: V2's elastic test across them goes over aws-ofi-nccl's Libfabric network with GIN type 5
    (EFA-GDA, NCCL_GIN_TYPE=5 as the env script sets it), its traffic on the EFA devices; the collection's judge
    passes it on the h200 internode gate held to the efa fabric's policy."""
    runs = across_efa(trees, [efa_node(tmp_path, "p5en-1"), efa_node(tmp_path, "p5en-2")])
    for rc, out, err in runs:
        assert rc == 0, err[-2000:]
        assert "Using network Libfabric" in out and "type 5 to comm" in out and "NET/Libfabric/0/GDRDMA" in out
        record = efa_record(rc, out, err)
        transport = record["transport"]
        assert record["gate"]["passed"], record["gate"]
        assert transport["gate"]["passed"], transport
        assert transport["truth"]["nccl"]["networks"] == ["Libfabric"] and transport["truth"]["nccl"]["gin"] == "EFA_GDA"
        assert transport["policy"]["allow_networks"] == ["Libfabric"] and transport["policy"]["allow_gin"] == ["EFA_GDA"]
        assert record["parsed"]["dispatch"]["bf16"]["rdma_gbps"] > 0
    sent = set((tmp_path / "p5en-1" / "spool").read_text().split()[0::2])
    # every EFA device of the node carries traffic (two a GPU on p5en: aws-ofi-nccl stripes over both)
    from tools.fleetsim import fakehw
    assert sent == set(fakehw.rdma_device_names(fakehw.load_profile("aws_p5en_h200")).values()), sent


def test_v2_across_efa_nodes_on_the_cpu_proxy_fails_naming_the_gin(trees, tmp_path):
    """Without NCCL_GIN_TYPE=5 NCCL 2.31+ runs GIN through the CPU proxy on EFA: the run completes, and the transport
    gate fails it naming the GIN the efa fabric's policy wants."""
    runs = across_efa(trees, [efa_node(tmp_path, "p5en-1", gin_type=None), efa_node(tmp_path, "p5en-2", gin_type=None)])
    for rc, out, err in runs:
        assert rc == 0, err[-2000:]
        record = efa_record(rc, out, err)
        assert not record["transport"]["gate"]["passed"]
        assert "NCCL GIN is PROXY; the profile allows EFA_GDA" in record["transport"]["gate"]["reasons"], record["transport"]


def test_v2_across_efa_nodes_without_an_sm_count_dies_as_deepep_does(trees, tmp_path):
    """V2 sizes its SM count from ibstat's rate of EP_NIC_NAME, which EFA has not: across nodes without --num-sms the
    elastic test dies of a division by zero (deep_ep/buffers/elastic.py get_theoretical_num_sms), on every node; the
    argument the efa fabric gives the test (plugins/plugin_utils/_fabrics.py test_args) runs it."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _fabrics
    envs = [efa_node(tmp_path, "p5en-1"), efa_node(tmp_path, "p5en-2")]
    for rc, out, err in v2_across(trees, envs, "--num-processes", "8"):
        assert rc == 1 and "ZeroDivisionError: float division by zero" in err, (rc, err[-2000:])
        assert "Failed to get RDMA connection speed" in out
        assert not efa_record(rc, out, err)["gate"]["passed"]
    args = _fabrics.test_args("efa", "deepep_v2", "internode")
    assert args == ["--num-sms", "64"]
    for rc, out, err in v2_across(trees, envs, "--num-processes", "8", *args):
        assert rc == 0 and " > #SM: 64," in out, err[-2000:]
