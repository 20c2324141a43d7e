# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL EP as the third backend on the verify seam: its descriptor, its launcher's output as the real 1 x H200 gave it
(tests/fixtures/captured/h200x1/nccl-ep-*.log, two runs on two lent machines) parsed and judged against NCCL EP's own
gates, what a slow, wrong or dead run gives, and the launcher itself run end to end on stand-ins of its Python stack
(fleetsim's nccl-extensions fixture wheel, tools/fleetsim/fixtures/wheels/nccl_extensions-0.1.0)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _gpu_families
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import select_thresholds
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import backends, launch
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import judge as judge_mod
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output

REPO = Path(__file__).resolve().parents[2]
CAPTURED = REPO / "tests" / "fixtures" / "captured" / "h200x1"
LAUNCHER = REPO / "roles" / "verify_common" / "files" / "nccl_ep_bench.py"
# NCCL EP's stack as fleetsim's fixture wheels (nccl-extensions, nccl4py, cuda-core, cuda-bindings, cuda-pathfinder).
STANDIN = os.pathsep.join(str(REPO / "tools" / "fleetsim" / "fixtures" / "wheels" / name) for name in (
    "nccl_extensions-0.1.0", "nccl4py-0.6.0", "cuda_core-1.2.2", "cuda_bindings-13.5.0", "cuda_pathfinder-1.9.1"))
# A bound for a launcher run on stand-ins, so a hung rendezvous fails the test instead of hanging it (not a limit on
# how fast it runs: the runs take seconds).
BOUND_S = 300

# What the two runs printed (rank 0's summary: the slowest rank of one).
RUNS = {
    "nccl-ep-ll-1gpu.log": ("low_latency", 247.42, 382.71),
    "nccl-ep-ll-1gpu-run2.log": ("low_latency", 235.03, 365.54),
    "nccl-ep-ll288-1gpu.log": ("low_latency", 259.33, 375.85),
    "nccl-ep-ll288-1gpu-run2.log": ("low_latency", 251.80, 378.37),
    "nccl-ep-ht-1gpu.log": ("intranode", 217.06, 326.66),
    "nccl-ep-ht-1gpu-run2.log": ("intranode", 202.40, 308.86),
}
STAGE = {"low_latency": "low_latency_intranode", "intranode": "intranode"}


def log(name):
    return (CAPTURED / name).read_text()


def spec(stage, **over):
    base = {"stage": stage, "thresholds": {}, "table_name": "verify_intranode_nccl_ep_thresholds", "profile": "h200",
            "family": "h200", "gpus": 1, "transport_policies": {}, "record": {}}
    base.update(over)
    return base


def judged(text, stage, **over):
    return judge_mod.judge(spec(stage, **over), text, 0, False, 600, "nccl_ep_bench.py", host="h200-1",
                           backend="nccl_ep")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_captured_run_parses_as_nccl_ep_with_the_figures_it_printed(name):
    test, dispatch, combine = RUNS[name]
    parsed = parse_output(log(name), test="nccl_ep_bench.py")
    assert (parsed["generation"], parsed["test"], parsed["complete"]) == ("nccl_ep", test, True)
    assert parsed["cases"] == {"passed": 1, "failed": 0} and parsed["errors"] == []
    if test == "low_latency":
        assert (parsed["low_latency"]["dispatch_gbps"], parsed["low_latency"]["combine_gbps"]) == (dispatch, combine)
        assert parsed["low_latency"]["ranks"] == 1 and parsed["low_latency"]["slowest_rank"] == 0
    else:
        assert parsed["dispatch"]["bf16"] == {"nvl_gbps": dispatch, "rdma_gbps": None}
        assert parsed["combine"] == {"nvl_gbps": combine, "rdma_gbps": None}
        assert parsed["low_latency"] is None


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_captured_run_passes_nccl_eps_own_gate_with_its_transport_truth(name):
    test = RUNS[name][0]
    record = judged(log(name), STAGE[test])
    assert record["gate"]["passed"], record["gate"]["reasons"]
    assert record["gate_basis"]["matched"] == "h200" and record["gate_basis"]["shape"] == "measured"
    if test == "low_latency":
        assert record["thresholds"] == {"ll_dispatch_gbps": 150, "ll_combine_gbps": 245}
        assert record["gate_basis"]["provisional"] is None
    else:
        assert record["thresholds"] == {"dispatch_bf16_nvl_gbps": 145, "dispatch_fp8_nvl_gbps": None,
                                        "combine_nvl_gbps": 230}
    # one H200 without a NIC: NCCL 2.30.7 (the build NCCL EP needs), no network beyond sockets, no GIN
    assert record["transport"]["brief"] == "NCCL 2.30.7 net Socket GIN none"
    assert record["transport"]["gate"]["passed"] and record["transport"]["basis"]["backend"] == "nccl_ep"


def test_nccl_ep_is_judged_by_its_own_gate_not_deepeps():
    # DeepEP V1's low-latency kernels gave 420 / 685 GB/s on the same H200; NCCL EP's 235 / 366 would fail that gate
    deepep = select_thresholds({}, "h200", gpus=1, scope="low_latency_intranode")
    assert deepep["thresholds"] == {"ll_dispatch_gbps": 330, "ll_combine_gbps": 495}
    text = log("nccl-ep-ll-1gpu-run2.log")
    figures = parse_output(text, test="nccl_ep_bench.py")["low_latency"]
    assert figures["dispatch_gbps"] < deepep["thresholds"]["ll_dispatch_gbps"]
    assert figures["combine_gbps"] < deepep["thresholds"]["ll_combine_gbps"]
    assert judged(text, "low_latency_intranode")["gate"]["passed"]
    # 8 GPUs: the lower of NVIDIA's published H100 figure (224.3 / 185.2, 0.85 of it) and the one-GPU gate
    eight = select_thresholds({}, "h100", gpus=8, scope="low_latency_intranode", backend="nccl_ep")
    assert eight["thresholds"] == {"ll_dispatch_gbps": 150, "ll_combine_gbps": 155}
    assert eight["shape"] == "family" and "224.3 / 185.2" in eight["source"]


def test_a_slow_a_wrong_and_a_dead_run_fail_naming_why():
    text = log("nccl-ep-ll-1gpu.log")
    slow = re.sub(r"throughput: avg=([0-9.]+) GB/s, min=[0-9.]+ GB/s", "throughput: avg=90.00 GB/s, min=90.00 GB/s",
                  text)
    record = judged(slow, "low_latency_intranode")
    assert not record["gate"]["passed"]
    assert any("ll_dispatch_gbps" in reason and "90" in reason for reason in record["gate"]["reasons"])
    wrong = text.replace("Validation: passed", "Validation: FAILED (1)\n  rank 0: token 3: combined 0.0000..0.0000, "
                                               "expected 1.0000")
    record = judged(wrong, "low_latency_intranode")
    assert not record["gate"]["passed"] and record["parsed"]["cases"] == {"passed": 0, "failed": 1}
    dead = text.split("=== Summary")[0] + "rank 0: RuntimeError: NCCL error: unhandled cuda error\n"
    record = judged(dead, "low_latency_intranode")
    assert not record["gate"]["passed"] and not record["parsed"]["complete"]


def test_the_families_nccl_ep_does_not_run_are_refused_and_blackwell_is_a_provisional_floor():
    with pytest.raises(judge_mod.JudgeError, match="NCCL EP v0.1 runs on Hopper or Blackwell GPUs only"):
        judge_mod.check(spec("low_latency_intranode", profile="a100", family="a100", gpus=8), backend="nccl_ep")
    b300 = select_thresholds({}, "b300", gpus=8, scope="low_latency_intranode", backend="nccl_ep")
    assert b300["provisional"] and "NVLink 5" in b300["provisional"] and b300["thresholds"]["ll_dispatch_gbps"] == 150
    # across nodes: NVIDIA's published H100 figures (64 GPUs 48.8 / 43.8) measured for H100, provisional for H200
    h100 = select_thresholds({}, "h100", scope="low_latency_internode", backend="nccl_ep")
    assert h100["thresholds"] == {"ll_dispatch_gbps": 41, "ll_combine_gbps": 37} and h100["provisional"] is None
    assert select_thresholds({}, "h200", scope="low_latency_internode", backend="nccl_ep")["provisional"]
    # a scope NCCL EP has no gate of its own for takes DeepEP's, and the record says nobody measured it with NCCL EP
    chosen = judge_mod.check(spec("internode", profile="b200", family="b200", gpus=None), backend="nccl_ep")
    basis = judge_mod.gate_basis(chosen, "nccl_ep")
    assert "measured with DeepEP V1" in basis["provisional"] and "no NCCL EP run" in basis["provisional"]
    # every backend gate names its source, and no family of NCCL EP falls back to 'default'
    for scope, table in _gpu_families.BACKEND_GATES["nccl_ep"].items():
        assert "default" not in table and all(entry.get("source") for entry in table.values()), scope


def test_the_descriptor_runs_the_launcher_beside_run_deepep_in_both_modes():
    descriptor = backends.backend("nccl_ep")
    assert descriptor["generation"] == "nccl_ep" and not descriptor["jit"]
    assert set(descriptor["scopes"]) == {"intranode", "internode", "low_latency_intranode", "low_latency_internode"}
    params = launch.validate({
        "launcher": "/opt/deepep/verify/run_deepep.sh", "name": "nccl-ep-ll", "env_script": "/etc/profile.d/x.sh",
        "src": "/opt/deepep/src", "python": "/opt/venv/bin/python", "script": None, "backend": "nccl_ep",
        "scope": "low_latency_intranode", "num_processes": 8, "rdma": None, "args": ["--iters", "20"], "env": {},
        "timeout": 600, "kill_after": 30, "poll": 10})
    assert params["src"] == "/opt/deepep/verify" and params["script"] == "nccl_ep_bench.py"
    # low latency on DeepEP's test_low_latency.py shape (288 experts), so the two backends run the same work
    assert params["args"] == ["--algorithm", "ll", "--experts", "288", "--iters", "20"]
    assert launch.test_path(params) == "/opt/deepep/verify/nccl_ep_bench.py"
    assert backends.scope_of("nccl_ep", "internode")["args"] == ["--algorithm", "ht"]
    assert backends.scope_of("nccl_ep", "low_latency_internode")["env"] == {"NCCL_GIN_TYPE": "3"}
    policy = backends.transport_policy("nccl_ep", "internode")["policy"]
    assert policy["allow_gin"] == ["GDAKI"] and policy["allow_networks"] == ["IB"] and not policy["allow_cpu_fallback"]
    assert backends.skip_reason("nccl_ep", "intranode", 8) is None
    assert backends.skip_reason("nccl_ep", "intranode", 1) is None
    assert "splits 256 experts evenly" in backends.skip_reason("nccl_ep", "intranode", 6)
    assert backends.skip_reason("nccl_ep", "low_latency_intranode", 6) is None
    assert "splits 288 experts evenly" in backends.skip_reason("nccl_ep", "low_latency_intranode", 5)
    with pytest.raises(backends.BackendError, match="NCCL EP has no engram test"):
        backends.scope_of("nccl_ep", "engram")


# ---------------------------------------------------------------------------------------------------------------
# The launcher, end to end on stand-ins (no GPU here): processes, rendezvous, routing, checks, summary, exit status
# ---------------------------------------------------------------------------------------------------------------

def run_launcher(*args, env=None):
    environ = dict(os.environ, PYTHONPATH=STANDIN)
    for key in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        environ.pop(key, None)
    environ.update(env or {})
    done = subprocess.run([sys.executable, str(LAUNCHER)] + list(args), capture_output=True, text=True, env=environ,
                          timeout=BOUND_S, check=False)
    return done.returncode, done.stdout + done.stderr


def run_two_nodes(args, env=None, scratch=None):
    """Two launchers of 2 ranks each on loopback, as two nodes of one group (WORLD_SIZE 2, RANK 0 and 1, the
    rendezvous on a free port), each with its own TMPDIR where ``scratch`` names them: ``[node 0's output, node 1's,
    [return codes]]``. Every process started is ended."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = dict(os.environ, PYTHONPATH=STANDIN, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   **(env or {}))
    argv = [sys.executable, str(LAUNCHER), "--num-processes", "2"] + list(args)
    nodes = []
    for rank in (0, 1):
        node_env = dict(environ, RANK=str(rank))
        if scratch:
            scratch[rank].mkdir()
            node_env["TMPDIR"] = str(scratch[rank])
        nodes.append(subprocess.Popen(argv, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    try:
        outputs = [node.communicate(timeout=BOUND_S)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    return outputs + [[node.returncode for node in nodes]]


@pytest.mark.parametrize("algorithm,ranks", [("ll", 1), ("ll", 2), ("ht", 2), ("ht", 4)])
def test_the_launcher_runs_its_ranks_and_prints_what_the_parser_reads(algorithm, ranks):
    rc, out = run_launcher("--num-processes", str(ranks), "--algorithm", algorithm, "--iters", "4", "--warmup", "1",
                           "--tokens", "32")
    assert rc == 0, out
    parsed = parse_output(out, test="nccl_ep_bench.py")
    assert parsed["generation"] == "nccl_ep" and parsed["complete"] and parsed["cases"]["passed"] == 1
    assert "Ranks:           %d" % ranks in out and "NCCL:            2.30.7" in out
    if algorithm == "ll":
        assert parsed["test"] == "low_latency" and parsed["low_latency"]["ranks"] == ranks
        # the stand-in's virtual GPU clock runs each call at the node's figure, so the launcher's bytes over its
        # events' time give that figure back (the stand-in's defaults: about what the real H200 gave)
        assert (parsed["low_latency"]["dispatch_gbps"], parsed["low_latency"]["combine_gbps"]) == (235.0, 365.0)
        # 32 tokens x top-8, ten selections masked (some may fall on one slot twice): 246 to 256 - 10 valid
        selections = int(re.search(r"selections=(\d+)", out).group(1))
        assert 246 <= selections <= 255
    else:
        assert parsed["test"] == "intranode"
        assert (parsed["dispatch"]["bf16"]["nvl_gbps"], parsed["combine"]["nvl_gbps"]) == (202.0, 308.0)


def test_a_slow_node_of_the_simulated_fleet_gives_its_figure_and_fails_nccl_eps_gate():
    rc, out = run_launcher("--num-processes", "2", "--algorithm", "ll", "--iters", "3", "--warmup", "1",
                           "--tokens", "16", "--hidden", "512", env={"FLEETSIM_NCCL_EP_GBPS": '{"ll": {"dispatch": 90}}'})
    assert rc == 0, out
    record = judged(out, "low_latency_intranode", gpus=2, profile="b200", family="b200")
    assert (record["parsed"]["low_latency"]["dispatch_gbps"], record["parsed"]["low_latency"]["combine_gbps"]) \
        == (90.0, 365.0)
    assert not record["gate"]["passed"] and any("ll_dispatch_gbps" in r for r in record["gate"]["reasons"])
    assert record["gate_basis"]["provisional"] and "NVLink 5" in record["gate_basis"]["provisional"]


def test_the_launchers_check_catches_a_combine_that_returns_wrong_tokens():
    rc, out = run_launcher("--num-processes", "2", "--algorithm", "ll", "--iters", "2", "--warmup", "0",
                           env={"FLEETSIM_NCCL_EP_CORRUPT": "1"})
    assert rc == 1 and "Validation: FAILED (2)" in out and "combined 0.0000..0.0000, expected" in out
    assert not judged(out, "low_latency_intranode", gpus=2)["gate"]["passed"]


def test_the_launcher_refuses_a_shape_ep_bench_refuses_and_a_rendezvous_it_cannot_reach():
    rc, out = run_launcher("--num-processes", "3", "--algorithm", "ll")
    assert rc == 2 and "num_experts (256) must be divisible by nRanks (3)" in out
    rc, out = run_launcher("--num-processes", "1", env={"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"})
    assert rc == 2 and "MASTER_PORT is not set" in out
    rc, out = run_launcher("--num-processes", "1", env={"WORLD_SIZE": "2", "RANK": "5"})
    assert rc != 0 and "is not a node layout" in out


# ---------------------------------------------------------------------------------------------------------------
# Beside DeepEP: the records say their backend and the summary puts both backends' runs of a mode side by side
# ---------------------------------------------------------------------------------------------------------------

def test_the_summary_shows_deepep_and_nccl_ep_side_by_side_on_the_same_gpus():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import records, summary

    deepep_ll = judge_mod.judge(spec("low_latency_intranode"), log("../h200x1/verify-low-latency-1gpu.log"), 0, False,
                                900, "tests/test_low_latency.py", host="h200-1", backend="v1")
    skipped = judge_mod.not_run(spec("intranode"), "not run: DeepEP V1's intranode kernels exist for 2, 4, 8 local "
                                "ranks (DeepEP's SWITCH_RANKS), and this node runs 1", "tests/test_intranode.py",
                                host="h200-1", backend="v1")
    nccl_ep = [judged(log("nccl-ep-ht-1gpu.log"), "intranode"),
               judged(log("nccl-ep-ll-1gpu.log"), "low_latency_intranode")]
    assert (deepep_ll["backend"], skipped["backend"], nccl_ep[0]["backend"]) == ("deepep_v1", "deepep_v1", "nccl_ep")
    hostvars = {"h200-1": {"verify_intranode_record": skipped, "verify_intranode_ll_record": deepep_ll,
                           "verify_intranode_nccl_ep_records": nccl_ep}}
    rows = records.play_records(hostvars, ["h200-1"], internode=False)
    assert [r["backend"] for r in rows] == ["deepep_v1", "deepep_v1", "nccl_ep", "nccl_ep"]
    result = summary.summarize(rows)
    assert result["passed"] and result["counts"] == {"total": 4, "passed": 4, "failed": 0}
    # DeepEP's intranode stage did not run on one GPU: only low latency has two backends on this node
    assert len(result["side_by_side"]) == 1
    pair = result["side_by_side"][0]
    assert (pair["host"], pair["stage"], pair["mode"]) == ("h200-1", "low_latency_intranode", "low latency")
    first, second = pair["runs"]
    assert (first["backend"], first["dispatch_gbps"], first["combine_gbps"]) == ("deepep_v1", 420.14, 685.34)
    assert (second["backend"], second["dispatch_gbps"], second["combine_gbps"]) == ("nccl_ep", 247.42, 382.71)
    assert second["ratio"] == {"dispatch_gbps": round(247.42 / 420.14, 3), "combine_gbps": round(382.71 / 685.34, 3)}
    text = summary.render_markdown(result, title="intranode")
    assert "## EP backends side by side (same node, same GPUs)" in text
    assert "| h200-1 | low latency | NCCL EP | 247.42 | 382.71 | 0.59 / 0.56 | PASS |" in text
    assert "| h200-1 | low latency | DeepEP V1 | 420.14 | 685.34 | 1 / 1 | PASS |" in text


def test_the_audit_report_shows_the_two_backends_side_by_side_under_the_node():
    """The fleet report (audit_fleet_report's verify_summary) puts the summary's side_by_side under the node, and names
    each verification row's backend where the node ran two."""
    import yaml

    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import audit_fleet
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_html import render_html
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_markdown import render_markdown
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.verification import attach_verification
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import records, summary

    deepep_ll = judge_mod.judge(spec("low_latency_intranode"), log("../h200x1/verify-low-latency-1gpu.log"), 0, False,
                                900, "tests/test_low_latency.py", host="h200-1", backend="v1")
    skipped = judge_mod.not_run(spec("intranode"), "not run: DeepEP V1's intranode kernels exist for 2, 4, 8 local "
                                "ranks (DeepEP's SWITCH_RANKS), and this node runs 1", "tests/test_intranode.py",
                                host="h200-1", backend="v1")
    nccl_ep = [judged(log("nccl-ep-ll-1gpu.log"), "low_latency_intranode")]
    rows = records.play_records({"h200-1": {"verify_intranode_record": skipped, "verify_intranode_ll_record": deepep_ll,
                                            "verify_intranode_nccl_ep_records": nccl_ep}}, ["h200-1"], internode=False)
    result = json.loads(json.dumps(summary.summarize(rows)))
    doc = json.loads((REPO / "tests" / "fixtures" / "audit" / "healthy_node.json").read_text())
    catalogue = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
    fleet = attach_verification(audit_fleet({"h200-1": doc}, catalogue), result, source="summary.json")
    md = render_markdown(fleet)
    assert "EP backends side by side (same node, same GPUs; GB/s):" in md
    assert "| low latency | DeepEP V1 | 420.14 | 685.34 | 1 / 1 | PASS |" in md
    assert "| low latency | NCCL EP | 247.42 | 382.71 | 0.59 / 0.56 | PASS |" in md
    assert "| low_latency_intranode (NCCL EP) | h200-1 |" in md and "| low_latency_intranode (DeepEP V1) |" in md
    page = render_html(fleet)
    assert "<h4>EP backends side by side (same node, same GPUs)</h4>" in page
    assert "<td>NCCL EP</td><td>247.42</td><td>382.71</td><td>0.59 / 0.56</td><td>PASS</td>" in page


def test_a_run_of_one_backend_alone_has_no_side_by_side_section():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import summary

    result = summary.summarize([judged(log("nccl-ep-ll-1gpu.log"), "low_latency_intranode")])
    assert result["side_by_side"] == [] and "side by side" not in summary.render_markdown(result)


def test_the_verify_roles_run_on_the_real_h200_judged_again_gives_its_records():
    """tests/gpu/test_nccl_ep_gpu.py's run (verify_intranode with NCCL EP as its backend, NCCL 2.30.7 pinned by the
    nccl role): each captured log judged again gives the figures, the gate shape and the transport the node recorded,
    and passes today's gates."""
    import json

    captured = json.loads((CAPTURED / "nccl-ep-verify-role-1gpu.json").read_text())
    assert captured["versions"]["nccl"] == "2.30.7" and captured["versions"]["nccl_ep"] == "0.2.0"
    for key, stage, name in (("intranode", "intranode", "nccl-ep-verify-role-ht-1gpu.log"),
                             ("low_latency", "low_latency_intranode", "nccl-ep-verify-role-ll-1gpu.log")):
        node = captured["records"][key]
        record = judged(log(name), stage)
        assert record["parsed"]["low_latency"] == node["parsed"]["low_latency"]
        assert record["parsed"]["dispatch"] == node["parsed"]["dispatch"]
        assert record["parsed"]["combine"] == node["parsed"]["combine"]
        assert record["gate"]["passed"] and node["gate"]["passed"] and node["backend"] == "nccl_ep"
        assert record["transport"]["brief"] == node["transport"]["brief"] == "NCCL 2.30.7 net Socket GIN none"
        assert node["gate_basis"]["shape"] == record["gate_basis"]["shape"] == "measured"
    role = captured["report"]["low_latency_intranode"]["role"]
    assert role == {"ll_dispatch_gbps": 247.9, "ll_combine_gbps": 355.72}


def test_two_nodes_on_loopback_meet_at_the_rendezvous_and_report_the_rdma_share():
    """Across nodes the launcher takes DeepEP's tests' settings (WORLD_SIZE nodes, RANK this node, MASTER_ADDR and
    MASTER_PORT the rendezvous): two launchers of 2 ranks each on loopback make 4 ranks, the second node's tokens to
    the first count as RDMA, and the output parses as internode."""
    outputs = run_two_nodes(["--algorithm", "ht", "--tokens", "32", "--hidden", "256", "--warmup", "1", "--iters", "3"])
    assert outputs[2] == [0, 0], outputs
    first, second = outputs[:2]
    assert "Ranks:           4" in first and "Nodes:           2" in first
    # each node's log holds the group's figures (its local rank 0 prints them): each node judges its own log
    assert second.split("=== NCCL EP Performance Benchmark ===")[1] == first.split("=== NCCL EP Performance Benchmark ===")[1]
    parsed = parse_output(first, test="nccl_ep_bench.py")
    assert parsed["test"] == "internode" and parsed["complete"] and parsed["cases"]["passed"] == 1
    rdma = parsed["dispatch"]["bf16"]["rdma_gbps"]
    # half the experts live on the other node: a real share of each rank's tokens leaves it
    assert 0 < rdma < parsed["dispatch"]["bf16"]["nvl_gbps"] + rdma, parsed["dispatch"]
    # NCCL EP has no high-throughput gates of its own across nodes: DeepEP's B200 gate, less its FP8 dispatch (NCCL EP
    # v0.1 has no FP8), and the record says the gate was measured with DeepEP
    record = judged(first, "internode", gpus=4, profile="b200", family="b200", fabric="roce")
    assert record["thresholds"]["dispatch_fp8_rdma_gbps"] is None and record["thresholds"]["dispatch_bf16_rdma_gbps"] == 45
    assert record["gate"]["passed"], record["gate"]
    assert _gpu_families.GATES["internode"]["b200"]["dispatch_fp8_rdma_gbps"] == 40


def _sysfs_with_an_active_nic(root):
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    return root


@pytest.mark.parametrize("gin_type, passed", [("3", True), ("2", False)])
def test_two_nodes_sharing_only_the_network_run_low_latency_with_transport_truth(tmp_path, gin_type, passed):
    """The stand-in's ranks share nothing but the network (each node its own TMPDIR): LL dispatch's counters go through
    the exchange the unique id names, as NCCL's bootstrap does. With NCCL_DEBUG=INFO each rank prints NCCL's bring-up
    (IB with GPUDirect RDMA on a node with an ACTIVE NIC, GIN as the type asked): the backend's transport policy across
    nodes passes GIN GDAKI and refuses the CPU proxy (NCCL_GIN_TYPE=2)."""
    sysfs = _sysfs_with_an_active_nic(tmp_path / "sys")
    scratch = [tmp_path / "node0", tmp_path / "node1"]
    outputs = run_two_nodes(["--algorithm", "ll", "--experts", "288", "--tokens", "16", "--hidden", "256", "--warmup",
                             "1", "--iters", "3"], env={"NCCL_DEBUG": "INFO", "NCCL_GIN_TYPE": gin_type,
                                                        "FLEETSIM_SYSFS_ROOT": str(sysfs)}, scratch=scratch)
    assert outputs[2] == [0, 0], outputs
    assert "Validation: passed" in outputs[0]
    assert all(not list((tmp_path / ("node%d" % rank)).iterdir()) for rank in (0, 1))
    assert "NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:192.0.2.2<0>" in outputs[1]
    record = judged(outputs[0], "low_latency_internode", gpus=4, fabric="roce")
    assert record["parsed"]["low_latency"]["ranks"] == 4
    assert record["transport"]["gate"]["passed"] is passed, record["transport"]
    assert record["transport"]["brief"].startswith("NCCL 2.30.7 net IB"), record["transport"]
    assert ("GIN GDAKI" if passed else "GIN PROXY") in record["transport"]["brief"], record["transport"]
    if not passed:
        assert any("PROXY" in reason for reason in record["transport"]["gate"]["reasons"]), record["transport"]
