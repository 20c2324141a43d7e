# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Transport truth wired into verify: the backends' policies per scope (with a site's merged over them) held against
real captures and
against the fixture DeepEP's debug lines (every fault of its knob), the record's transport in the summary (a run
over a transport its profile does not allow fails, with the cause; every figure shown beside its gate), and the
pairwise sweep that names the bad node or pair of a failed internode group."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import backends
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import summary as _summary
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import gate
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.sweep import sweep_plan, sweep_verdict
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import (
    transport_verdict,
    truth_brief,
)

REPO = Path(__file__).resolve().parents[2]
CAPTURED = REPO / "tests" / "fixtures" / "captured"
V2_H100 = CAPTURED / "h100x2" / "deepep_v2_test_ep_transport_debug.txt"
V1_H100 = CAPTURED / "h100x2" / "deepep_v1_test_low_latency_nvshmem_nccl_debug.txt"
FIXTURE = REPO / "tools" / "fleetsim" / "fixtures" / "shared" / "deepep" / "tests"
DEBUG_ENV = {"NVSHMEM_DEBUG": "INFO", "NVSHMEM_DEBUG_SUBSYS": "INIT,TRANSPORT", "NCCL_DEBUG": "INFO",
             "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV", "EP_BUFFER_DEBUG": "1"}


def role_defaults(role):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())


def policy(role, generation, profile="gcp_b200"):
    """The policy a run of the role's scope is held to with the role's default site policies (none)."""
    scope = role.split("_")[1]
    overrides = role_defaults(role)[role + "_transport_policies"]
    assert overrides == {}, "the collection's policies live in the backends' descriptors, not in role defaults"
    return backends.transport_policy(generation, scope, overrides, profile)["policy"]


# ------------------------------------------------------------------------------------------------- the roles' env
@pytest.mark.parametrize("role", ["verify_intranode", "verify_internode"])
def test_roles_run_with_the_debug_settings_the_truth_needs(role):
    defaults = role_defaults(role)
    assert defaults[role + "_transport_check"] is True
    assert defaults[role + "_transport_env"] == DEBUG_ENV


# ------------------------------------------------------------------------------------------------ policy selection
SITE = {"default": {"allow_cpu_fallback": True},
        "b200": {"allow_networks": ["IB", "Socket"], "by_backend": {"v2": {"allow_gin": ["GDAKI", "PROXY"]}}},
        "mynodes": {"allow_paths": ["p2p", "shm"]}}
NVLINK = {"allow_paths": ["p2p"], "allow_transports": ["p2p"], "allow_cpu_fallback": False}
V1_IB = {"allow_networks": ["IB"], "allow_paths": ["p2p", "shm", "net_gdrdma"], "allow_cpu_fallback": False,
         "require_ibgda": True}
V2_IB = {"allow_networks": ["IB"], "allow_paths": ["p2p", "shm", "net_gdrdma"], "allow_cpu_fallback": False,
         "allow_gin": ["GDAKI"], "require_nccl_match": True}


@pytest.mark.parametrize("backend, scope, profile, family, matched, expected", [
    # No site entry applies: the backend's policy for the scope as it is.
    ("v1", "internode", "gcp_h200", None, None, V1_IB),
    ("deepep_v2", "internode", "h100", None, None, V2_IB),
    ("v1", "intranode", "x", None, None, NVLINK),
    ("v2", "intranode", "x", None, None, dict(NVLINK, require_nccl_match=True)),
    ("v1", "low_latency_internode", "x", None, None, V1_IB),
    ("v2", "low_latency_internode", "x", None, None, V1_IB),
    ("v1", "low_latency_intranode", "x", None, None,
     {"allow_paths": ["p2p"], "allow_transports": ["p2p", "ibgda"], "allow_cpu_fallback": False}),
])
def test_the_backends_policy_applies_where_the_site_has_none(backend, scope, profile, family, matched, expected):
    got = backends.transport_policy(backend, scope, {}, profile, family)
    assert got["matched"] == matched and got["policy"] == expected and got["scope"] == scope
    assert got["backend"] == backends.ALIASES.get(backend, backend)


@pytest.mark.parametrize("backend, profile, family, matched, changed", [
    # The exact name, then the declared family, then a token of the name, then default; by_backend for one backend.
    ("v1", "mynodes", None, "mynodes", {"allow_paths": ["p2p", "shm"]}),
    ("v1", "cluster7", "b200", "b200", {"allow_networks": ["IB", "Socket"]}),
    ("v2", "gcp_b200", None, "b200", {"allow_networks": ["IB", "Socket"], "allow_gin": ["GDAKI", "PROXY"]}),
    ("deepep_v2", "b200-cuda13", None, "b200", {"allow_networks": ["IB", "Socket"], "allow_gin": ["GDAKI", "PROXY"]}),
    ("v2", "h100", None, "default", {"allow_cpu_fallback": True}),
    ("v1", None, None, "default", {"allow_cpu_fallback": True}),
])
def test_the_sites_entry_is_merged_over_the_backends_policy(backend, profile, family, matched, changed):
    got = backends.transport_policy(backend, "internode", SITE, profile, family)
    base = V1_IB if backend == "v1" else V2_IB
    assert got["matched"] == matched and got["policy"] == dict(base, **changed)


@pytest.mark.parametrize("fabric", ["infiniband", "roce"])
@pytest.mark.parametrize("backend", ["v1", "v2"])
def test_the_profiles_fabric_gives_the_networks_across_nodes_and_nothing_within_one(fabric, backend):
    got = backends.transport_policy(backend, "internode", {}, "gcp_b200", fabric=fabric)
    assert got["fabric"] == fabric and got["policy"]["allow_networks"] == ["IB"]
    assert got["policy"] == backends.transport_policy(backend, "internode", {}, "gcp_b200")["policy"]
    within = backends.transport_policy(backend, "intranode", {}, "gcp_b200", fabric=fabric)
    assert "allow_networks" not in within["policy"]
    # the site's entry still has the last word
    mine = backends.transport_policy(backend, "internode", {"b200": {"allow_networks": ["IB", "Socket"]}}, "gcp_b200",
                                     fabric=fabric)
    assert mine["policy"]["allow_networks"] == ["IB", "Socket"]


def test_on_efa_v2_is_held_to_libfabric_and_efa_gda_and_v1_is_refused_with_the_reason():
    """EFA: NCCL's network is aws-ofi-nccl's Libfabric and V2's GPU-initiated GIN is EFA-GDA (type 5), never the CPU
    proxy; DeepEP V1 needs NVSHMEM's mlx5-only IBGDA and is refused naming the sources; one node is NVLink as
    anywhere."""
    got = backends.transport_policy("v2", "internode", {}, "p5en", fabric="efa")
    assert got["policy"]["allow_networks"] == ["Libfabric"] and got["policy"]["allow_gin"] == ["EFA_GDA"]
    assert got["policy"]["allow_cpu_fallback"] is False
    assert "allow_networks" not in backends.transport_policy("v2", "intranode", {}, "p5en", fabric="efa")["policy"]
    with pytest.raises(backends.BackendError, match=r"DeepEP V1 cannot run internode on the fabric AWS EFA \(Elastic "
                                                    r"Fabric Adapter\): DeepEP V1 runs across nodes over NVSHMEM's "
                                                    r"IBGDA, which drives mlx5 NICs only \(DeepEP #759"):
        backends.transport_policy("v1", "internode", {}, "p5en", fabric="efa")
    # one node needs no NIC: V1 intranode on an EFA node is NVLink only and runs
    assert backends.transport_policy("v1", "intranode", {}, "p5en", fabric="efa")["policy"]["allow_paths"] == ["p2p"]


def test_a_backend_that_needs_what_the_fabric_lacks_is_refused_by_name(monkeypatch):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _fabrics

    monkeypatch.setitem(_fabrics.FABRICS, "nogpu", {"title": "A fabric without GPU-driven NICs", "rdma_transport": "x",
                                                    "nccl_networks": ["Libfabric"], "ibgda": False, "gin": ["PROXY"],
                                                    "gin_gpu": "GDAKI", "refuses": {}})
    with pytest.raises(backends.BackendError, match="DeepEP V1 runs internode over NVSHMEM IBGDA, which the fabric A "
                                                    "fabric without GPU-driven NICs does not have"):
        backends.transport_policy("v1", "internode", {}, "x", fabric="nogpu")
    with pytest.raises(backends.BackendError, match="DeepEP V2 runs internode over NCCL GIN GDAKI, which the fabric"):
        backends.transport_policy("v2", "internode", {}, "x", fabric="nogpu")
    monkeypatch.delitem(_fabrics.FABRICS, "nogpu")
    with pytest.raises(_fabrics.FabricError, match="fabric 'ib' is not one the collection knows; expected one of "
                                                   "efa, infiniband, roce"):
        backends.transport_policy("v1", "internode", {}, "x", fabric="ib")


def test_every_backend_scope_has_a_valid_policy_and_no_role_default_holds_one():
    for name in backends.BACKENDS:
        for scope in backends.backend(name)["scopes"]:
            run = backends.scope_of(name, scope)
            assert run["test"] and run["transport"] is not None
            assert transport_verdict("", run["transport"])["policy"]      # the gate's own check of its keys
    for role in ("verify_intranode", "verify_internode"):
        text = (REPO / "roles" / role / "tasks" / "main.yml").read_text()
        assert "v2" not in text.replace("v2_probe", "").replace("v2_tests", "").replace("/elastic/", ""), role


# -------------------------------------------------------------------------------------- the defaults on captures
def test_v2_on_h100_passes_the_intranode_policy_and_says_what_ran():
    verdict = transport_verdict(V2_H100.read_text(), policy("verify_intranode", "v2"))
    assert verdict["gate"] == {"passed": True, "reasons": [], "causes": [], "unknown": []}
    assert verdict["brief"] == "NCCL 2.30.7 net Socket GIN none paths p2p; DeepEP on NCCL 2.30.7, 17 QPs"


def test_v1_on_h100_without_nic_passes_intranode_but_fails_internode_naming_the_causes():
    text = V1_H100.read_text()
    assert transport_verdict(text, policy("verify_intranode", "v1"))["gate"]["passed"]
    verdict = transport_verdict(text, policy("verify_internode", "v1"))
    assert not verdict["gate"]["passed"]
    assert "NVSHMEM IBGDA failed; the profile requires it initialized" in verdict["gate"]["reasons"]
    assert "NCCL used network Socket; the profile allows IB" in verdict["gate"]["reasons"]
    kinds = {c["kind"] for c in verdict["gate"]["causes"]}
    assert {"no_ib_device", "nccl_no_ib_device"} <= kinds
    assert verdict["brief"].startswith("NVSHMEM p2p, IBGDA failed; NCCL 2.28.9 net Socket paths p2p")


def test_v2_internode_policy_refuses_no_gin_and_requires_the_deepep_line():
    verdict = transport_verdict(V2_H100.read_text(), policy("verify_internode", "v2"))
    assert "NCCL GIN is none; the profile allows GDAKI" in verdict["gate"]["reasons"]
    assert any(c["kind"] == "nccl_gin_none" for c in verdict["gate"]["causes"])


def test_an_empty_output_says_nothing_and_the_brief_says_so():
    verdict = transport_verdict("", {})
    assert verdict["gate"]["passed"] and verdict["brief"] == "nothing said (no debug output)"
    assert truth_brief(verdict["truth"]) == verdict["brief"]


# ------------------------------------------------------------------------------------------ the fixture's lines
def fixture_lines(fault, num_nodes, env_extra=None):
    env = dict(os.environ, **DEBUG_ENV)
    env.pop("FLEETSIM_TRANSPORT_FAULT", None)
    if fault:
        env["FLEETSIM_TRANSPORT_FAULT"] = fault
    env.update(env_extra or {})
    code = ("import sys; sys.path.insert(0, %r); import fleetsim_fixture as fx; "
            "fx.transport_debug(8, num_nodes=%d, node_rank=%d, nvshmem=%r)"
            % (str(FIXTURE), num_nodes, num_nodes - 1, num_nodes > 1))
    return subprocess.run([sys.executable, "-c", code], env=env, check=False, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


FAULTS = [
    # fault, stage (role), reason in the gate, kind of the cause named
    (None, "verify_intranode", None, None),
    (None, "verify_internode", None, None),
    ("nvlink_off", "verify_intranode", "NCCL channel path(s) SHM/direct/direct; the profile allows p2p", None),
    ("cpu_fallback", "verify_internode", "NVSHMEM IBGDA NIC handler is CPU with the gdrcopy backend; the profile requires gpu", "regkey"),
    ("socket", "verify_internode", "NCCL used network Socket; the profile allows IB", "nccl_no_ib_device"),
    ("ibgda_failed", "verify_internode", "NVSHMEM IBGDA failed; the profile requires it initialized",
     "peermem_missing"),
]


@pytest.mark.parametrize("fault, role, reason, kind", FAULTS, ids=["%s-%s" % (f[0], f[1]) for f in FAULTS])
def test_every_fixture_fault_fails_its_stage_with_the_cause(fault, role, reason, kind):
    run = fixture_lines(fault, 2 if role == "verify_internode" else 1)
    assert run.returncode == 0, run.stderr
    verdict = transport_verdict(run.stdout, policy(role, "v1"))
    if reason is None:
        assert verdict["gate"]["passed"], verdict["gate"]
        return
    assert not verdict["gate"]["passed"] and reason in verdict["gate"]["reasons"], verdict["gate"]
    if kind:
        assert kind in {c["kind"] for c in verdict["gate"]["causes"]}, verdict["gate"]


def v2_fixture_lines(fault, env_extra=None, gin=True):
    env = dict(os.environ, **DEBUG_ENV)
    env.pop("FLEETSIM_TRANSPORT_FAULT", None)
    if fault:
        env["FLEETSIM_TRANSPORT_FAULT"] = fault
    env.update(env_extra or {})
    code = ("import sys; sys.path.insert(0, %r); import fleetsim_fixture as fx; "
            "fx.v2_transport_debug(2, '2.30.7', gin=%r)" % (str(FIXTURE), gin))
    return subprocess.run([sys.executable, "-c", code], env=env, check=False, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


@pytest.mark.parametrize("fault, reason", [
    (None, None),
    ("nccl_mismatch", "DeepEP loaded NCCL 2.30.7 but NCCL reported 2.27.5"),
    ("nvlink_off", "NCCL channel path(s) SHM/direct/direct; the profile allows p2p"),
])
def test_the_v2_fixture_prints_what_v2_prints_and_its_faults_fail_intranode(fault, reason):
    """DeepEP V2's lines as the real 2 x H100 run printed them (a node without an ACTIVE NIC: no GIN plugin)."""
    run = v2_fixture_lines(fault, {"FLEETSIM_SYSFS_ROOT": "/nonexistent"})
    assert run.returncode == 0, run.stderr
    verdict = transport_verdict(run.stdout, policy("verify_intranode", "v2"))
    assert verdict["truth"]["deepep"]["nccl_version"] == "2.30.7"
    assert verdict["truth"]["nccl"]["gin"] == "none"
    if reason is None:
        assert verdict["gate"]["passed"], verdict["gate"]
        assert verdict["brief"] == "NCCL 2.30.7 net IB GIN none paths p2p; DeepEP on NCCL 2.30.7"
    else:
        assert not verdict["gate"]["passed"] and reason in verdict["gate"]["reasons"], verdict["gate"]


def test_the_v2_fixture_without_buffer_debug_leaves_the_deepep_line_out_and_the_gate_says_so():
    run = v2_fixture_lines(None, {"FLEETSIM_SYSFS_ROOT": "/nonexistent", "EP_BUFFER_DEBUG": ""})
    verdict = transport_verdict(run.stdout, policy("verify_intranode", "v2"))
    assert "DeepEP initialized" not in run.stdout and not verdict["gate"]["passed"]
    assert any("EP_BUFFER_DEBUG=1" in what for what in verdict["gate"]["unknown"])


def test_fixture_prints_nothing_without_the_debug_settings():
    run = fixture_lines("socket", 2, {"NCCL_DEBUG": "", "NVSHMEM_DEBUG": ""})
    assert run.returncode == 0 and run.stdout == ""


def test_fixture_refuses_an_unknown_fault_naming_the_expected_words():
    run = fixture_lines("slow", 2)
    assert run.returncode == 2 and run.stdout == ""
    assert ("bad transport fault 'slow' (expected one of cpu_fallback, cpu_fallback_host, socket, ibgda_failed, "
            "nvlink_off, nccl_mismatch, mnnvl_imex)") in run.stderr


# ---------------------------------------------------------------------------------------------------- the summary
def record(host, text, role="verify_internode", thresholds=None):
    parsed = parse_output((CAPTURED / "h200x2" / "deepep_v1_test_intranode_2gpu.txt").read_text(), test="intranode")
    thresholds = thresholds if thresholds is not None else {"dispatch_bf16_nvl_gbps": 300, "combine_nvl_gbps": 250}
    return {"host": host, "scope": host, "stage": "intranode", "test": "tests/test_intranode.py", "parsed": parsed,
            "gate": gate(parsed, thresholds), "thresholds": thresholds,
            "transport": transport_verdict(text, policy(role, "v1"))}


def test_a_run_that_passed_over_a_wrong_transport_fails_in_the_summary_with_its_cause():
    good = record("n1", fixture_lines(None, 2).stdout)
    bad = record("n2", fixture_lines("cpu_fallback", 2).stdout)
    summary = _summary.summarize([good, bad])
    assert not summary["passed"] and [f["host"] for f in summary["failures"]] == ["n2"]
    row = summary["rows"][1]
    assert row["transport"]["passed"] is False and row["status"] == "fail"
    assert "transport: NVSHMEM IBGDA NIC handler is CPU with the gdrcopy backend; the profile requires gpu" in row["reasons"]
    assert any(d.startswith("likely cause: the NIC doorbell could not be mapped") for d in row["diagnosis"])
    assert row["transport"]["truth"]["nvshmem"]["nic_handler"] == "cpu"
    assert summary["rows"][0]["transport"]["passed"] and summary["rows"][0]["passed"]


def test_markdown_shows_the_transport_and_every_figure_beside_its_gate():
    summary = _summary.summarize([record("n1", fixture_lines(None, 2).stdout),
                                  record("n2", fixture_lines("socket", 2).stdout)])
    text = _summary.render_markdown(summary)
    header = text.splitlines()[0]
    assert header.endswith("| NICs | transport | result |")
    assert "| 340.61 (>=300) | - | 247.83 | - | 293.21 (>=250) | - |" in text
    assert "| ok: NVSHMEM ibgda+p2p, IBGDA initialized, NIC handler gpu; NCCL 2.27.5 net IB paths net_gdrdma+p2p |" \
        in text
    assert "NOT ALLOWED: NVSHMEM ibgda+p2p, IBGDA initialized, NIC handler gpu; NCCL 2.27.5 net Socket" in text
    assert "likely cause: NCCL found no IB device" in text


def test_an_unknown_transport_fails_with_what_was_not_said():
    summary = _summary.summarize([record("n1", "")])
    row = summary["rows"][0]
    assert not row["passed"] and any(r.startswith("transport unknown: nvshmem.ibgda") for r in row["reasons"])


def test_a_malformed_transport_is_refused_naming_the_host():
    with pytest.raises(_summary.VerifyInputError, match="transport of a verification record must be .* host 'n1'"):
        _summary.summarize([{"host": "n1", "parsed": {}, "gate": {"passed": True}, "transport": {"brief": "x"}}])


# ------------------------------------------------------------------------------------------------------ the sweep
@pytest.mark.parametrize("size", [3, 4, 5, 6, 8])
def test_sweep_is_a_chain_of_n_minus_1_pairs_in_two_rounds_of_disjoint_pairs(size):
    hosts = ["n%d" % i for i in range(size)]
    plan = sweep_plan(hosts)
    assert len(plan["pairs"]) == size - 1 and plan["rounds"] == 2
    for number in (1, 2):
        members = [h for p in plan["pairs"] if p["round"] == number for h in p["hosts"]]
        assert len(members) == len(set(members))
    assert all(p["ranks"] == {p["hosts"][0]: 0, p["hosts"][1]: 1} and p["master"] == p["hosts"][0]
               for p in plan["pairs"])
    assert {h for p in plan["pairs"] for h in p["hosts"]} == set(hosts)


@pytest.mark.parametrize("size", [1, 2])
def test_a_group_of_two_is_its_own_pair(size):
    hosts = ["n%d" % i for i in range(size)]
    assert sweep_plan(hosts) == {"pairs": [], "rounds": 0}
    assert sweep_verdict(hosts, {})["verdict"] == "no sweep: a group of %d node(s) is its own pair" % size


def results_with_bad(hosts, bad):
    return dict((p["name"], bad not in p["hosts"]) for p in sweep_plan(hosts)["pairs"])


@pytest.mark.parametrize("size, bad", [(n, b) for n in (3, 4, 5) for b in range(1, n - 1)])
def test_an_inner_bad_node_is_named_alone(size, bad):
    hosts = ["n%d" % i for i in range(size)]
    verdict = sweep_verdict(hosts, results_with_bad(hosts, hosts[bad]))
    assert verdict["nodes"] == [hosts[bad]] and verdict["pairs"] == []
    assert verdict["verdict"] == "slow or broken: node %s (every pair with it failed)" % hosts[bad]


@pytest.mark.parametrize("size, end", list(itertools.product((3, 4, 5), (0, -1))))
def test_an_end_node_is_named_with_its_pair(size, end):
    hosts = ["n%d" % i for i in range(size)]
    verdict = sweep_verdict(hosts, results_with_bad(hosts, hosts[end]))
    (pair,) = verdict["pairs"]
    assert hosts[end] in pair.split("+") and verdict["nodes"] == []
    assert "pair %s (their link, or a NIC of one of the two)" % pair in verdict["verdict"]


def test_every_pair_failed_or_passed_is_said_so():
    hosts = ["n1", "n2", "n3", "n4"]
    names = [p["name"] for p in sweep_plan(hosts)["pairs"]]
    failed = sweep_verdict(hosts, dict.fromkeys(names, False))
    assert failed["verdict"].startswith("every pair failed: a fabric-wide")
    passed = sweep_verdict(hosts, dict.fromkeys(names, True))
    assert passed["verdict"].startswith("every pair passed") and passed["nodes"] == passed["pairs"] == []
    assert sweep_verdict(hosts, {})["verdict"] == "the sweep gave no result"


def test_reports_of_both_members_are_anded_per_pair():
    hosts = ["n1", "n2", "n3"]
    reports = [{"pair": "n1+n2", "passed": True}, {"pair": "n1+n2", "passed": False},
               {"pair": "n2+n3", "passed": False}, {"pair": "n2+n3", "passed": True}]
    assert sweep_verdict(hosts, reports)["nodes"] == ["n2"]
    records = {"n1+n2": {"passed": False}, "n2+n3": {"passed": True}}
    assert sweep_verdict(hosts, records)["pairs"] == ["n1+n2"]


@pytest.mark.parametrize("results,implicated", [
    ({"n1+n2": True, "n2+n3": False, "n3+n4": False}, ["n3"]),            # a node, both of its pairs failed
    ({"n1+n2": True, "n2+n3": True, "n3+n4": False}, ["n3", "n4"]),       # the chain's end pair
    ({"n1+n2": False, "n2+n3": False, "n3+n4": False}, ["n1", "n2", "n3", "n4"]),   # every pair failed
    ({"n1+n2": True, "n2+n3": True, "n3+n4": True}, []),                  # the failure needs the whole group
])
def test_the_sweep_names_the_hosts_it_implicates_and_writes_each_hosts_record(results, implicated):
    hosts = ["n1", "n2", "n3", "n4"]
    verdict = sweep_verdict(hosts, results, group="g")
    assert verdict["implicated"] == implicated
    for host in hosts:
        record = verdict["records"][host]
        named = host in implicated
        assert record["host"] == host and record["group"] == "g" and record["stage"] == "isolation"
        assert record["scope"] == "g (pairwise sweep)" and record["test"] == "pairwise sweep"
        assert record["gate"]["passed"] is not named and record["gate"]["status"] == ("fail" if named else "pass")
        assert record["gate"]["reasons"] == (["pairwise sweep of g: " + verdict["verdict"]] if named else [])
        assert record["isolation"]["verdict"] == verdict["verdict"] and "records" not in record["isolation"]
    assert "records" not in sweep_verdict(hosts, results)
