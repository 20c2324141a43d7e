# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the fleet verification logic (plugin_utils/_verify/plan.py and the verify_* filters)."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import verify_helpers as vf
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import parse_rate_gbps
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import plan as v
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _gpu_families
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _thresholds
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import gate as _verify_gate
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import summary as _verify_summary
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import traffic as _verify_traffic

from unit_helpers import CAPTURED, FIXTURES, REPO

GROUPS = {"all": ["a1", "a2", "b1", "b2", "c1"], "ga": ["a1", "a2"], "gb": ["b1", "b2"], "solo": ["c1"]}


# ------------------------------------------------------------------------------------------ ranks
def test_plan_master_is_first_host_and_ranks_follow_group_order():
    plan = v.internode_plan(["ga", "gb"], GROUPS)
    assert [p["group"] for p in plan] == ["ga", "gb"]
    assert plan[0]["master"] == "a1" and plan[0]["ranks"] == {"a1": 0, "a2": 1} and plan[0]["world_size"] == 2
    assert plan[1]["hosts"] == ["b1", "b2"]


def test_plan_master_override_becomes_rank_zero():
    plan = v.internode_plan("gb", GROUPS, masters={"gb": "b2"})
    assert plan[0]["ranks"] == {"b2": 0, "b1": 1}


def test_plan_accepts_comma_string_and_limits_to_play_hosts():
    groups = dict(GROUPS, big=["x1", "x2", "x3"])
    plan = v.internode_plan("ga, big", groups, only_hosts=["a1", "a2", "x1", "x3"])
    assert plan[1]["ranks"] == {"x1": 0, "x3": 1}


@pytest.mark.parametrize("groups,masters,msg", [
    ("nope", None, "not in the inventory"),
    ("solo", None, "needs at least 2"),
    ("ga", {"ga": "b1"}, "not a host of that group"),
    ([], None, "groups must be"),
])
def test_plan_errors_name_the_problem(groups, masters, msg):
    with pytest.raises(_thresholds.VerifyInputError, match=msg):
        v.internode_plan(groups, GROUPS, masters=masters)


def test_filter_wraps_errors():
    with pytest.raises(AnsibleFilterError, match="verify_ranks: group 'nope'"):
        vf.verify_ranks("nope", GROUPS)


# ------------------------------------------------------------------------------------------ master address
FACTS = {
    "interfaces": ["lo", "eth0", "gpu0rdma0"],
    "lo": {"ipv4": {"address": "127.0.0.1"}},
    "eth0": {"ipv4": {"address": "10.213.0.10", "netmask": "255.255.255.0"},
             "ipv4_secondaries": [{"address": "10.213.0.99"}],
             "ipv6": [{"address": "fe80::1", "scope": "link"}, {"address": "fd00::10", "scope": "global"}]},
    "gpu0rdma0": {"ipv4": {"address": "192.168.0.2"}},
    "default_ipv4": {},
}


def test_master_address_defaults_to_interface_of_ansible_host():
    got = vf.verify_master_address(FACTS, ansible_host="10.213.0.10")
    assert got["address"] == "10.213.0.10" and got["interface"] == "eth0"
    assert "fd00::10" in got["addresses"] and "fe80::1" not in got["addresses"]


def test_master_address_accepts_secondary_and_ipv6_on_the_interface():
    assert vf.verify_master_address(FACTS, address="10.213.0.99", ansible_host="10.213.0.10")["address"] == "10.213.0.99"
    assert vf.verify_master_address(FACTS, address="fd00::10", interface="eth0")["version"] == 6


@pytest.mark.parametrize("address,msg", [
    ("192.168.0.2", "not an address of the master on its fabric-facing interface eth0"),
    ("10.213.0.300", "is not an IP address"),
    ("127.0.0.1", "loopback"),
    ("master-node", "is not an IP address"),
])
def test_master_address_rejects(address, msg):
    with pytest.raises(AnsibleFilterError, match=msg):
        vf.verify_master_address({"ansible_facts": FACTS}, address=address, interface="eth0")


def test_master_address_needs_an_interface():
    with pytest.raises(AnsibleFilterError, match="cannot tell the master's fabric-facing interface"):
        vf.verify_master_address(FACTS, ansible_host="10.9.9.9")
    with pytest.raises(AnsibleFilterError, match="interface 'ib0' is not an interface"):
        vf.verify_master_address(FACTS, interface="ib0")
    facts = dict(FACTS, default_ipv4={"interface": "gpu0rdma0"})
    assert vf.verify_master_address(facts)["address"] == "192.168.0.2"


# ------------------------------------------------------------------------------------------ thresholds and gate
TABLE = {"default": {"dispatch_bf16_nvl_gbps": 100, "combine_nvl_gbps": 100},
         "b200": {"dispatch_bf16_nvl_gbps": 380}, "h200": {"dispatch_bf16_nvl_gbps": 300, "combine_nvl_gbps": 250}}


@pytest.mark.parametrize("profile,matched,bf16,combine", [
    ("h200", "h200", 300, 250), ("gcp_b200", "b200", 380, 100), ("b200_cuda13", "b200", 380, 100),
    ("NVIDIA H200", "h200", 300, 250), ("default", "default", 100, 100), (None, "default", 100, 100),
    ("", "default", 100, 100),
])
def test_select_thresholds(profile, matched, bf16, combine):
    got = _thresholds.select_thresholds(TABLE, profile)
    assert got["matched"] == matched
    assert got["thresholds"]["dispatch_bf16_nvl_gbps"] == bf16 and got["thresholds"]["combine_nvl_gbps"] == combine


@pytest.mark.parametrize("table,msg", [({"x": {"bogus_gbps": 1}}, "unknown metric"),
                                       ({"x": {"combine_nvl_gbps": "fast"}}, "non-negative number"),
                                       ({}, "mapping of profile")])
def test_select_thresholds_rejects(table, msg):
    with pytest.raises(_thresholds.VerifyInputError, match=msg):
        _thresholds.select_thresholds(table, "x")


def _captured_intranode():
    return parse_output((CAPTURED / "deepep_v1_test_intranode_2gpu.txt").read_text(), test="intranode")


def test_gate_passes_the_measured_h200_run():
    verdict = _verify_gate.gate(_captured_intranode(), _thresholds.select_thresholds(TABLE, "h200"))
    assert verdict["passed"] and verdict["status"] == "pass"
    assert {c["metric"]: c["value"] for c in verdict["checks"]} == {"dispatch_bf16_nvl_gbps": 340.61,
                                                                    "combine_nvl_gbps": 293.21}


def test_gate_fails_below_threshold_and_names_metric():
    verdict = _verify_gate.gate(_captured_intranode(), {"dispatch_bf16_nvl_gbps": 380, "dispatch_fp8_nvl_gbps": None})
    assert not verdict["passed"] and verdict["status"] == "fail"
    assert "dispatch_bf16_nvl_gbps 340.61 GB/s is below the gate of 380 GB/s" in verdict["reasons"]
    assert len(verdict["checks"]) == 1


def test_gate_timeout_reports_dispatch_cpu_diagnosis():
    text = (FIXTURES / "deepep_output" / "v1_test_internode_timeout_dispatch_cpu.txt").read_text()
    parsed = parse_output(text, test="internode")
    verdict = _verify_gate.gate(parsed, {"dispatch_bf16_rdma_gbps": 45}, rc=1)
    assert verdict["status"] == "error" and not verdict["passed"]
    assert any("NVSHMEM without IBGDA" in d or "without IBGDA" in d for d in verdict["diagnosis"])
    hung = _verify_gate.gate(parse_output("[config] num_tokens=2048\n", test="internode"), {}, rc=124, timed_out=True,
                             timeout_s=60)
    assert hung["status"] == "timeout" and "within 60s" in hung["reasons"][0]
    assert "ranks out of step" in hung["diagnosis"][0] and "NVSHMEM_IBGDA_NIC_HANDLER=gpu" in hung["diagnosis"][0]


def test_gate_unmapped_signature():
    text = (FIXTURES / "deepep_output" / "v1_test_internode_b200_2node_node0.txt").read_text()
    parsed = parse_output(text, test="internode")
    assert _verify_gate.gate(parsed, {"dispatch_bf16_rdma_gbps": 45})["passed"]
    slow = copy.deepcopy(parsed)
    slow["dispatch"]["bf16"]["rdma_gbps"] = 6.47
    verdict = _verify_gate.gate(slow, {"dispatch_bf16_rdma_gbps": 45})
    assert not verdict["passed"] and "signature of every GPU using one NIC (mlx5_0" in verdict["diagnosis"][0]
    slow["combine"]["rdma_gbps"] = 6.5
    assert len(_verify_gate.gate(slow, {"dispatch_bf16_rdma_gbps": 45, "combine_rdma_gbps": 45})["diagnosis"]) == 1


def test_gate_counts_failed_cases_and_incomplete_output():
    parsed = parse_output("[testing] Running with BF16, without top-k (async=False, previous=False) ... failed\n",
                          test="intranode")
    verdict = _verify_gate.gate(parsed, {})
    assert not verdict["passed"] and any("1 of 1 test cases failed" in r for r in verdict["reasons"])


# ------------------------------------------------------------------------------------------ NIC traffic
MAP8 = ",".join("%d:mlx5_%d:1" % (i, i) for i in range(8))


def rdma(counters, down=(), rates=None):
    """gpufleet_rdma facts of mlx5_0.. with these port_xmit_data counters; ``rates``: {name: rate as sysfs writes
    it} (read through the module's own parser, as rdma_devices does)."""
    devices = []
    for index, value in enumerate(counters):
        name = "mlx5_%d" % index
        active = name not in down
        port = {"port": 1, "active": active, "state": "ACTIVE" if active else "DOWN",
                "counters": {"port_xmit_data": value, "port_rcv_data": value}}
        if rates is not None:
            port["rate"] = rates.get(name, NDR)
            port["rate_gbps"] = parse_rate_gbps(port["rate"])
        devices.append({"name": name, "active": active, "ports": [port]})
    return {"devices": devices, "active_devices": [d["name"] for d in devices if d["active"]]}


WORDS = (256 << 20) // 4


def test_nic_traffic_all_busy_passes():
    got = _verify_traffic.nic_traffic(rdma([0] * 8), rdma([WORDS] * 8), rdma_gbps=81.0, mapping=MAP8, mapping_supported=True)
    assert got["passed"] and got["idle"] == [] and len(got["busy"]) == 8 and got["causes"] == []
    assert got["nics"][0]["bytes"] == 256 << 20


def test_nic_traffic_one_idle_named():
    after = [WORDS] * 8
    after[5] = 10
    got = _verify_traffic.nic_traffic(rdma([0] * 8), rdma(after), mapping=MAP8, mapping_supported=True)
    assert not got["passed"] and got["idle"] == ["mlx5_5"]
    assert "mlx5_5 carried no traffic although DEEP_EP_DEVICE_TO_HCA_MAPPING maps GPUs to them" in got["causes"][0]


def test_nic_traffic_all_on_mlx5_0_without_mapping():
    got = _verify_traffic.nic_traffic(rdma([0] * 8), rdma([WORDS * 8] + [0] * 7), rdma_gbps=6.44, mapping="")
    assert not got["passed"] and got["busy"] == ["mlx5_0"] and len(got["idle"]) == 7
    assert "DEEP_EP_DEVICE_TO_HCA_MAPPING is not set" in got["causes"][0]
    assert got["signature"] and "~6.5 GB/s signature" in got["causes"][-1]


def test_nic_traffic_all_on_mlx5_0_without_mapping_support():
    got = _verify_traffic.nic_traffic(rdma([0] * 8), rdma([WORDS * 8] + [0] * 7), mapping=MAP8, mapping_supported=False)
    assert "built without the GPU-NIC mapping support (PR #466)" in got["causes"][0]
    unknown = _verify_traffic.nic_traffic(rdma([0] * 8), rdma([WORDS * 8] + [0] * 7), mapping=MAP8)
    assert "the mapping was not applied" in unknown["causes"][0]


def test_nic_traffic_skips_down_ports_and_flags_no_traffic():
    got = _verify_traffic.nic_traffic(rdma([0] * 8, down=["mlx5_3"]), rdma([WORDS] * 8, down=["mlx5_3"]), mapping=MAP8)
    assert got["passed"] and "mlx5_3" not in [n["name"] for n in got["nics"]]
    none = _verify_traffic.nic_traffic(rdma([0] * 2), rdma([0] * 2))
    assert not none["passed"] and "no NIC carried traffic" in none["causes"][0]
    empty = _verify_traffic.nic_traffic({"devices": []}, {"devices": []})
    assert not empty["passed"] and "no ACTIVE RDMA port" in empty["causes"][0]


NDR = "400 Gb/sec (4X NDR)"


@pytest.mark.parametrize("rates, mapping, slow", [
    ({}, MAP8, []),                                                            # every rail at 400
    ({"mlx5_3": "200 Gb/sec (2X NDR)"}, MAP8, ["mlx5_3"]),                      # one link trained down
    ({"mlx5_3": "200 Gb/sec (2X NDR)", "mlx5_6": "100 Gb/sec (1X NDR)"}, MAP8, ["mlx5_3", "mlx5_6"]),
    ({"mlx5_7": "100 Gb/sec (4X EDR)"}, ",".join("%d:mlx5_%d:1" % (i, i) for i in range(7)), []),  # not mapped
    ({"mlx5_3": "200 Gb/sec (2X NDR)"}, "", []),                                # no mapping: not compared
])
def test_nic_traffic_names_a_slow_rail(rates, mapping, slow):
    got = _verify_traffic.nic_traffic(rdma([0] * 8, rates=rates), rdma([WORDS] * 8, rates=rates), mapping=mapping,
                                      mapping_supported=True)
    assert got["slow"] == slow and got["idle"] == []
    assert got["passed"] == (not slow)
    assert got["nics"][3]["rate_gbps"] == (200.0 if "mlx5_3" in rates else 400.0)
    if slow:
        assert got["causes"][0].startswith("%s run%s at " % (", ".join(slow), "s" if len(slow) == 1 else ""))
        assert "while the node's other mapped NICs run at 400 Gb/s: a link trained down" in got["causes"][0]


def test_the_summary_names_the_slow_nic():
    rates = {"mlx5_3": "200 Gb/sec (2X NDR)"}
    nic = vf.verify_nic_traffic(rdma([0] * 8, rates=rates), rdma([WORDS] * 8, rates=rates), mapping=MAP8,
                                mapping_supported=True)
    record = {"host": "b200-b-1", "scope": "b200-b-1", "stage": "internode", "test": "tests/test_internode.py",
              "parsed": {"cases": {"passed": 24, "failed": 0}},
              "gate": {"passed": True, "status": "pass", "reasons": [], "diagnosis": []}, "nic": nic}
    summary = vf.verify_summary([record])
    (row,) = summary["rows"]
    assert not row["passed"] and row["nic"]["slow"] == ["mlx5_3"]
    assert row["reasons"] == ["NIC check failed: mlx5_3 slower than the node's other mapped NICs"]
    assert any("mlx5_3 runs at 200 Gb/s" in d for d in row["diagnosis"])
    assert "| slow: mlx5_3 |" in vf.verify_summary_markdown(summary)


def test_nic_traffic_rejects_bad_input():
    with pytest.raises(AnsibleFilterError, match="no 'devices' list"):
        vf.verify_nic_traffic({}, {})
    with pytest.raises(AnsibleFilterError, match="min_bytes must be a positive integer"):
        vf.verify_nic_traffic(rdma([0]), rdma([0]), min_bytes=0)


# ------------------------------------------------------------------------------------------ connectivity
def test_connectivity():
    ok = "[Rank 0] DeepEP buffer created!\n[Rank 0] Dispatch layout test PASSED!\n"
    assert _verify_gate.connectivity(ok)["passed"]
    bad = _verify_gate.connectivity("[Rank 1] ERROR: Unable to create ah\n", rc=1)
    assert bad["status"] == "error" and "rank 1: Unable to create ah" in bad["reasons"]
    assert "no DeepEP buffer was created" in bad["diagnosis"][0]
    nonv = _verify_gate.connectivity("[Rank 0] ERROR: DeepEP was built without NVSHMEM: internode and low-latency modes are "
                                     "disabled\n", rc=1)
    assert "rebuild it with NVSHMEM_DIR" in nonv["diagnosis"][0]
    hung = _verify_gate.connectivity("[Rank 0] Starting\n", rc=124, timed_out=True, timeout_s=30)
    assert hung["status"] == "timeout"


# ------------------------------------------------------------------------------------------ summary
def test_summary_rows_and_markdown():
    parsed = _captured_intranode()
    good = {"host": "n1", "scope": "n1", "stage": "intranode", "test": "tests/test_intranode.py", "parsed": parsed,
            "gate": _verify_gate.gate(parsed, {"dispatch_bf16_nvl_gbps": 300})}
    nic = _verify_traffic.nic_traffic(rdma([0] * 8), rdma([WORDS * 8] + [0] * 7), rdma_gbps=6.5, mapping="")
    bad = {"host": "n2", "scope": "n2 (rank 1 of g: n1 + n2)", "stage": "internode", "test": "tests/test_internode.py",
           "parsed": parsed, "gate": _verify_gate.gate(parsed, {}), "nic": nic}
    summary = vf.verify_summary([good, bad, None])
    assert not summary["passed"] and summary["counts"] == {"total": 2, "passed": 1, "failed": 1}
    assert summary["rows"][0]["gbps"]["dispatch_bf16_nvl_gbps"] == 340.61
    assert summary["failures"][0]["host"] == "n2"
    assert any("DEEP_EP_DEVICE_TO_HCA_MAPPING is not set" in d for d in summary["failures"][0]["diagnosis"])
    text = vf.verify_summary_markdown(summary, title="t")
    lines = text.splitlines()
    assert lines[0] == "# t"
    assert lines[2].startswith("| node / pair | test | cases | BF16 disp NVL")
    assert "| n1 | tests/test_intranode.py (intranode) | 24/24 | 340.61 |" in text
    assert "idle: mlx5_1, mlx5_2" in text and "| FAIL |" in text and "1 of 2 passed." in text
    assert "- **n2 (rank 1 of g: n1 + n2) on n2**" in text


def test_summary_all_pass_and_errors():
    parsed = _captured_intranode()
    summary = _verify_summary.summarize([{"host": "n1", "parsed": parsed, "gate": _verify_gate.gate(parsed, {})}])
    assert summary["passed"] and "## Failures" not in _verify_summary.render_markdown(summary)
    assert not _verify_summary.summarize([])["passed"]
    lost = _verify_summary.summarize([{"host": "n1", "parsed": parsed, "gate": _verify_gate.gate(parsed, {})}], missing_hosts=["n9"])
    assert not lost["passed"] and lost["failures"][0]["host"] == "n9" and "unreachable" in lost["failures"][0]["reasons"][0]
    with pytest.raises(AnsibleFilterError, match="expected the result of verify_summary"):
        vf.verify_summary_markdown({})


# ------------------------------------------------------------------------------------------ gates by GPU count
SHAPED = {"default": {"dispatch_bf16_nvl_gbps": 100, "combine_nvl_gbps": 100},
          "h100": {"dispatch_bf16_nvl_gbps": 205, "combine_nvl_gbps": 220,
                   "by_gpus": {2: {"dispatch_bf16_nvl_gbps": 300, "combine_nvl_gbps": 250},
                               "4": {"dispatch_bf16_nvl_gbps": 225, "combine_nvl_gbps": 310}}}}


@pytest.mark.parametrize("gpus,bf16,combine,shape", [
    (2, 300, 250, "measured"), (4, 225, 310, "measured"), ("4", 225, 310, "measured"), (8, 205, 220, "family"),
    (None, 205, 220, "any"),
])
def test_select_thresholds_by_gpu_count(gpus, bf16, combine, shape):
    got = _thresholds.select_thresholds(SHAPED, "h100_ib", gpus=gpus)
    assert got["matched"] == "h100" and got["shape"] == shape
    assert got["thresholds"] == {"dispatch_bf16_nvl_gbps": bf16, "combine_nvl_gbps": combine}
    assert "by_gpus" not in got["thresholds"]


@pytest.mark.parametrize("table,gpus,msg", [
    ({"h100": {"by_gpus": [300]}}, None, "by_gpus must be a mapping of GPU count"),
    ({"h100": {"by_gpus": {"four": {}}}}, None, "'four' is not a GPU count"),
    ({"h100": {"by_gpus": {0: {}}}}, None, "0 is not a GPU count"),
    ({"h100": {"by_gpus": {True: {}}}}, None, "True is not a GPU count"),
    ({"h100": {"by_gpus": {4: {"fast_gbps": 1}}}}, None, r"by_gpus\[4\] has unknown metric 'fast_gbps'"),
    ({"h100": {"by_gpus": {4: {"combine_nvl_gbps": "fast"}}}}, None, "must be a non-negative number"),
    ({"h100": {"by_gpus": {4: 300}}}, None, r"by_gpus\[4\] must be a mapping of metric"),
    ({"h100": {}}, "x", "gpus: 'x' is not a GPU count"),
    ({"h100": {}}, -4, "gpus: -4 is not a GPU count"),
    ({"h100": {}}, False, "gpus: False is not a GPU count"),
])
def test_select_thresholds_refuses_bad_shapes_by_name(table, gpus, msg):
    with pytest.raises(_thresholds.VerifyInputError, match=msg):
        _thresholds.select_thresholds(table, "h100", gpus=gpus)


def _suite_figures(path):
    """The collection build's figures the GPU suite printed: 'intranode on N GPUs, collection {...}'."""
    import ast
    import re
    line = next(line for line in path.read_text().splitlines() if re.match(r"intranode on \d+ GPUs, collection", line))
    count = int(re.match(r"intranode on (\d+) GPUs", line).group(1))
    figures = ast.literal_eval(re.search(r"collection (\{[^}]*\})", line).group(1))
    parsed = {"complete": True, "cases": {"passed": 24, "failed": 0},
              "dispatch": {"bf16": {"nvl_gbps": figures["dispatch_bf16_nvl_gbps"], "rdma_gbps": None},
                           "fp8": {"nvl_gbps": figures["dispatch_fp8_nvl_gbps"], "rdma_gbps": None}},
              "combine": {"nvl_gbps": figures["combine_nvl_gbps"], "rdma_gbps": None}}
    return count, parsed


@pytest.mark.parametrize("capture,family", [("h100x4/gpu_suite_v1_pytest.txt", "h100"),
                                            ("h200x4/gpu_suite_v1_pytest.txt", "h200")])
def test_the_role_gate_holds_for_the_4_gpu_runs_the_2_gpu_gate_failed(capture, family):
    import yaml
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    table = defaults["verify_intranode_thresholds"]
    count, parsed = _suite_figures(FIXTURES / "captured" / capture)
    assert count == 4
    chosen = _thresholds.select_thresholds(table, family, gpus=count, scope="intranode")
    assert chosen["shape"] == "measured" and chosen["measured_with"] == ["deepep_v1"] and not chosen["provisional"]
    assert _verify_gate.gate(parsed, chosen["thresholds"])["passed"]
    two = _thresholds.select_thresholds(table, family, gpus=2, scope="intranode")["thresholds"]
    failed = _verify_gate.gate(parsed, two)
    assert not failed["passed"] and len(failed["reasons"]) == 1 and "dispatch_bf16_nvl_gbps" in failed["reasons"][0]
    # A 4-GPU node a tenth under its measured BF16 dispatch fails on exactly that figure.
    slow = copy.deepcopy(parsed)
    slow["dispatch"]["bf16"]["nvl_gbps"] = round(parsed["dispatch"]["bf16"]["nvl_gbps"] * 0.85, 2)
    verdict = _verify_gate.gate(slow, chosen["thresholds"])
    assert not verdict["passed"] and "dispatch_bf16_nvl_gbps" in verdict["reasons"][0]


def test_v2_legacy_on_4_h100_passes_the_4_gpu_gate_beside_v1():
    # V2 dd758ca tests/legacy/test_intranode.py on 4 x H100, built by the collection: 24/24 cases, and its figures
    # within 2 % of the collection's V1 on the same machine kind (captured/h100x4/gpu_suite_v1_pytest.txt), so the
    # 4-GPU gate measured on V1 holds for V2's legacy path.
    import yaml
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    table = defaults["verify_intranode_thresholds"]
    v2 = parse_output((FIXTURES / "captured" / "h100x4" / "deepep_v2_legacy_test_intranode_4gpu.txt").read_text())
    assert v2["generation"] == "v2" and v2["complete"] and v2["cases"] == {"passed": 24, "failed": 0}
    assert (v2["dispatch"]["bf16"]["nvl_gbps"], v2["dispatch"]["fp8"]["nvl_gbps"], v2["combine"]["nvl_gbps"]) == \
        (260.17, 253.55, 352.85)
    chosen = _thresholds.select_thresholds(table, "h100", gpus=4, scope="intranode")
    assert chosen["shape"] == "measured" and _verify_gate.gate(v2, chosen["thresholds"])["passed"]
    count, v1 = _suite_figures(FIXTURES / "captured" / "h100x4" / "gpu_suite_v1_pytest.txt")
    assert count == 4
    for path in (("dispatch", "bf16"), ("dispatch", "fp8"), ("combine",)):
        one, two = v1, v2
        for key in path:
            one, two = one[key], two[key]
        assert abs(two["nvl_gbps"] / one["nvl_gbps"] - 1) < 0.02, path


def test_the_2_gpu_capture_passes_its_measured_gate():
    import yaml
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    chosen = _thresholds.select_thresholds(defaults["verify_intranode_thresholds"], "h200", gpus=2, scope="intranode")
    assert chosen["shape"] == "measured" and chosen["thresholds"]["dispatch_bf16_nvl_gbps"] == 300
    assert _verify_gate.gate(_captured_intranode(), chosen["thresholds"])["passed"]


# ------------------------------------------------------------------------------------------ hardening: record shapes
_GOOD_GATE = {"passed": True, "status": "pass", "reasons": [], "diagnosis": []}
_GOOD_NIC = {"passed": True, "idle": [], "busy": ["mlx5_0"], "slow": [], "causes": []}


@pytest.mark.parametrize("change, named", [
    ({"gate": "pass"}, "record 0 (host 'n1'): gate is a string ('pass'); expected verify_gate's result"),
    ({"nic": ["mlx5_0"]}, "record 0 (host 'n1'): nic is a list (['mlx5_0']); expected verify_nic_traffic's result"),
    ({"parsed": "garbage"}, "record 0 (host 'n1'): parsed is a string ('garbage'); expected deepep_bandwidth's result"),
    ({"gate": dict(_GOOD_GATE, reasons="slow")}, "gate.reasons is a string ('slow'); expected a list"),
    ({"gate": dict(_GOOD_GATE, passed="false")}, "gate.passed is a string ('false'); expected true or false"),
    ({"nic": dict(_GOOD_NIC, idle="mlx5_1")}, "nic.idle is a string ('mlx5_1'); expected a list"),
    ({"nic": dict(_GOOD_NIC, passed=1)}, "nic.passed is a number (1); expected true or false"),
    ({"parsed": {"cases": 3}}, "parsed.cases is a number (3); expected a mapping with passed and failed"),
    ({"thresholds": ["dispatch_bf16_nvl_gbps"]}, "thresholds is a list"),
    ({"host": ["n1"]}, "record 0: host is a list (['n1']); expected a string"),
])
def test_a_record_of_the_wrong_shape_is_refused_naming_the_field_its_type_and_the_form(change, named):
    record = dict({"host": "n1", "stage": "test", "test": "intranode", "parsed": {}, "gate": _GOOD_GATE}, **change)
    with pytest.raises(AnsibleFilterError) as info:
        vf.verify_summary([record])
    message = str(info.value)
    assert message.startswith("verify_summary: ") and named in message, message
    assert "unexpected" not in message and "AttributeError" not in message


def test_a_record_that_is_not_a_mapping_is_refused_naming_its_position():
    good = {"host": "n1", "parsed": {}, "gate": _GOOD_GATE}
    with pytest.raises(AnsibleFilterError, match=r"record 1 is a string \('n2'\); expected a verification record"):
        vf.verify_summary([good, "n2"])


def test_records_of_the_documented_shapes_still_summarize():
    records = [{"host": "n1", "parsed": {}, "gate": _GOOD_GATE, "nic": None},
               {"host": "n2", "parsed": None, "gate": None, "nic": _GOOD_NIC, "thresholds": None, "log": None},
               {}]
    summary = vf.verify_summary(records, missing_hosts=["n3"])
    assert summary["counts"] == {"total": 3, "passed": 1, "failed": 2}
    assert [row["host"] for row in summary["rows"]] == ["n1", "n2", "n3"]


# ------------------------------------------------------------------------------------------ profiles without a gate
def _role_tables():
    """(the role's thresholds variable, its default overrides, the scope of the collection's gates it overrides)."""
    import yaml
    return [(role + "_thresholds",
             yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())[role + "_thresholds"],
             role.split("_")[1])
            for role in ("verify_intranode", "verify_internode")]


@pytest.mark.parametrize("profile,family", [("gcp_b300", "b300"), ("b300", "b300"), ("gb200_nvl72", "gb200"),
                                            ("gb300", "gb300"), ("GB300-NVL72", "gb300"), ("a100", "a100")])
def test_a_profile_naming_a_family_without_an_entry_is_refused_naming_the_family_and_the_table(profile, family):
    """Before: the loose default gate (100 GB/s NVL, no FP8 gate) with a warning, so a B300 or GB200 node at a
    quarter of its NVLink speed passed. A named family never takes 'default': against a table of its own that lacks
    it (TABLE, no scope) it is refused naming the table."""
    name, table = "verify_intranode_thresholds", dict(TABLE)
    with pytest.raises(_thresholds.VerifyInputError) as info:
        _thresholds.select_thresholds(table, profile, gpus=8, table_name=name)
    message = str(info.value)
    assert message.startswith("profile %r names the GPU family %s (compute capability %s)"
                              % (profile, family, _gpu_families.FAMILIES[family])), message
    assert "%s has no %s entry (it gates %s)" % (name, family, ", ".join(sorted(set(table) - {"default"}))) \
        in message, message
    assert "Add an entry for %s to %s" % (family, name) in message and "set the profile to 'default'" in message
    # without a table name, the refusal still says which table it means
    with pytest.raises(_thresholds.VerifyInputError, match="Add an entry for %s to the thresholds table" % family):
        _thresholds.select_thresholds(table, profile)
    with pytest.raises(AnsibleFilterError, match="verify_thresholds: profile %r names the GPU family %s"
                       % (profile, family)):
        vf.verify_thresholds(TABLE, profile)


@pytest.mark.parametrize("profile,family", [("h20_site", None), ("mycluster", "a800"), ("a800-lab", None)])
def test_a_family_the_profile_object_has_no_gate_for_is_refused_with_the_reason(profile, family):
    """The profile object knows the A800 and the H20 and has no figure for either: a profile of one is refused by
    name, in both scopes, with the reason and the fix, never handed the loose default gate; the site's own entry
    for the family (the role's table) gates it."""
    fam = family or _gpu_families.family_of(profile)
    for name, table, scope in _role_tables():
        with pytest.raises(_thresholds.VerifyInputError) as info:
            _thresholds.select_thresholds(table, profile, family=family, table_name=name, scope=scope)
        message = str(info.value)
        assert "the GPU family %s (compute capability %s), and the collection has no %s gate for %s (%s;" \
            % (fam, _gpu_families.FAMILIES[fam], scope, fam, _gpu_families.UNGATED[fam]) in message, message
        assert "nor does %s give one" % name in message and "Add an entry for %s to %s" % (fam, name) in message
        with pytest.raises(AnsibleFilterError, match="the collection has no %s gate for %s" % (scope, fam)):
            vf.verify_thresholds({}, profile, family=family, scope=scope)
        own = {fam: {"combine_nvl_gbps": 90, "source": "site acceptance run"}}
        chosen = _thresholds.select_thresholds(own, profile, family=family, scope=scope)
        assert chosen["matched"] == fam and chosen["thresholds"]["combine_nvl_gbps"] == 90
        assert chosen["source"] == "site acceptance run" and chosen["provisional"] is None


def test_a_profile_naming_no_family_is_refused_instead_of_taking_the_default_gate():
    """'mycluster' used to take the default gate with a warning (test_a_profile_that_falls_back_to_default_is_marked_
    with_the_known_families, now gone with the warning): default gates apply only to a profile that asks for them."""
    with pytest.raises(_thresholds.VerifyInputError) as info:
        _thresholds.select_thresholds(TABLE, "mycluster", table_name="verify_intranode_thresholds")
    message = str(info.value)
    assert message.startswith("profile 'mycluster' matches no entry of verify_intranode_thresholds, by name or by a "
                              "'_'/'-' token (known profiles b200, h200), and names no GPU family (a100, a800, b200, "
                              "b300, gb200, gb300, h100, h20, h200, h800)"), message
    assert "the loose 'default' gate (combine_nvl_gbps >= 100, dispatch_bf16_nvl_gbps >= 100) applies only to a " \
           "profile that asks for it" in message, message
    assert "(<family>_<site>, e.g. h200_mycluster), or set it to 'default' to accept that gate" in message, message
    with pytest.raises(AnsibleFilterError, match="verify_thresholds: profile 'mycluster' matches no entry"):
        vf.verify_thresholds(TABLE, "mycluster")
    for name, table, scope in _role_tables():
        with pytest.raises(_thresholds.VerifyInputError, match="profile 'mycluster' matches no entry of %s" % name):
            _thresholds.select_thresholds(table, "mycluster", table_name=name, scope=scope)
    for profile in ("gcp_b200", "h200", "default", None, ""):
        keys = set(_thresholds.select_thresholds(TABLE, profile))
        assert keys == {"profile", "matched", "thresholds", "gpus", "shape", "source", "measured_with",
                        "provisional"}, profile


def test_default_still_gives_the_loose_gate_of_both_roles():
    """Asked for by name (or left empty), 'default' is the loose gate, as before, and no error."""
    loose = {"intranode": {"dispatch_bf16_nvl_gbps": 100, "dispatch_fp8_nvl_gbps": None, "combine_nvl_gbps": 100},
             "internode": {"dispatch_bf16_rdma_gbps": 30, "dispatch_fp8_rdma_gbps": None, "combine_rdma_gbps": 30}}
    for name, table, scope in _role_tables():
        for profile in ("default", "", None):
            chosen = _thresholds.select_thresholds(table, profile, gpus=4, table_name=name, scope=scope)
            assert chosen["matched"] == "default" and chosen["thresholds"] == loose[scope], (name, profile)
    # a table without 'default' has nothing to give even to the profile that asks for it
    with pytest.raises(_thresholds.VerifyInputError, match="it has no 'default' entry"):
        _thresholds.select_thresholds({"b200": {}}, "default")


def test_the_roles_tables_are_overrides_of_the_profile_objects_gates():
    """The roles ship no gates of their own (an empty table each); the site's entry replaces the collection's entry of
    its name in that scope only, and the collection's tables are never changed by it."""
    before = copy.deepcopy(_gpu_families.GATES)
    for name, table, scope in _role_tables():
        assert table == {}, name
        own = {"b200": {"dispatch_bf16_nvl_gbps": 1, "combine_nvl_gbps": 1, "combine_rdma_gbps": 1}}
        chosen = _thresholds.select_thresholds(own, "gcp_b200", scope=scope)
        assert chosen["matched"] == "b200" and chosen["measured_with"] is None and chosen["source"] is None
        assert chosen["thresholds"]["combine_%s_gbps" % ("nvl" if scope == "intranode" else "rdma")] == 1
        # the metrics the site's entry leaves out come from default, not from the collection's b200 entry
        assert chosen["thresholds"].get("dispatch_fp8_%s_gbps" % ("nvl" if scope == "intranode" else "rdma")) is None
    assert _gpu_families.GATES == before
    with pytest.raises(_thresholds.VerifyInputError, match="scope 'rdma' has no gates; expected one of intranode, "
                       "internode"):
        _thresholds.select_thresholds({}, "gcp_b200", scope="rdma")
    with pytest.raises(_thresholds.VerifyInputError, match=r"thresholds\['b200'\].provisional must be text"):
        _thresholds.select_thresholds({"b200": {"provisional": True}}, "b200", scope="intranode")
    with pytest.raises(_thresholds.VerifyInputError, match=r"measured_with must be a list of backend names"):
        _thresholds.select_thresholds({"b200": {"measured_with": "deepep_v1"}}, "b200", scope="intranode")


# Which families of the profile object (plugin_utils/_gpu_families.py) have gates in both scopes, which of them rest on
# figures nobody measured on that hardware, and which have none. A family added to the registry, or a gate added to
# one scope only, fails the test below until it is listed here.
GATED_FAMILIES = {"a100", "b200", "h100", "h200", "h800", "b300", "gb200", "gb300"}
PROVISIONAL = {"intranode": {"a100", "b300", "gb200", "gb300"},
               "internode": {"a100", "b300", "gb200", "gb300", "h100", "h200"}}
REFUSED_FAMILIES = {"a800", "h20"}


def test_every_gpu_family_is_gated_in_both_scopes_or_refused_in_both():
    assert GATED_FAMILIES | REFUSED_FAMILIES == set(_gpu_families.FAMILIES)
    assert not GATED_FAMILIES & REFUSED_FAMILIES and set(_gpu_families.UNGATED) == REFUSED_FAMILIES
    for name, table, scope in _role_tables():
        assert set(_gpu_families.GATES[scope]) - {"default"} == GATED_FAMILIES, scope
        for family in sorted(_gpu_families.FAMILIES):
            for profile in (family, "site_" + family, family.upper() + "-cluster"):
                if family in GATED_FAMILIES:
                    chosen = _thresholds.select_thresholds(table, profile, table_name=name, scope=scope)
                    assert chosen["matched"] == family, (name, profile)
                    assert chosen["thresholds"] != _gpu_families.GATES[scope]["default"], (name, profile)
                    assert chosen["source"], (scope, family)
                    assert bool(chosen["provisional"]) == (family in PROVISIONAL[scope]), (scope, family)
                else:
                    with pytest.raises(_thresholds.VerifyInputError, match="the collection has no %s gate for %s"
                                       % (scope, family)):
                        _thresholds.select_thresholds(table, profile, table_name=name, scope=scope)


def test_a_b300_or_gb200_node_at_a_quarter_of_its_nvlink_speed_fails():
    """The measured failure of the issue: b300, gcp_b300 and gb200_nvl72 matched 'default' (100 GB/s, no FP8 gate).
    Now they take the B200 gate (NVLink 5) marked provisional, and a node at a quarter of the B200's figures fails."""
    quarter = {"dispatch": {"bf16": {"nvl_gbps": 112.0}, "fp8": {"nvl_gbps": 77.0}}, "combine": {"nvl_gbps": 88.0},
               "complete": True, "cases": {"passed": 24, "failed": 0}}
    for profile in ("b300", "gcp_b300", "gb200_nvl72", "GB300-NVL72"):
        chosen = _thresholds.select_thresholds({}, profile, gpus=8, scope="intranode")
        assert chosen["thresholds"] == {"dispatch_bf16_nvl_gbps": 380, "dispatch_fp8_nvl_gbps": 260,
                                        "combine_nvl_gbps": 300}, profile
        assert "NVLink 5 as the B200's" in chosen["provisional"], profile
        verdict = _verify_gate.gate(quarter, chosen["thresholds"], rc=0)
        assert not verdict["passed"] and len(verdict["reasons"]) == 3, verdict


def test_every_profile_the_inventories_scenarios_and_fleetsim_use_has_a_gate_of_its_own():
    """No shipped inventory, Molecule scenario or fleetsim profile is refused (nor takes 'default'): each names, or
    declares (gpufleet_gpu_family), a family gated in both scopes."""
    import glob
    import re

    import yaml
    used = set()
    for path in glob.glob(str(REPO / "inventories" / "**" / "*.yml"), recursive=True) + \
            glob.glob(str(REPO / "molecule" / "**" / "molecule.yml"), recursive=True):
        used.update(re.findall(r"^\s*(?:gpufleet_profile|profile):\s*([A-Za-z0-9_.-]+)\s*$", open(path).read(),
                               re.MULTILINE))
    for path in glob.glob(str(REPO / "tools" / "fleetsim" / "profiles" / "*.yml")):
        profile = yaml.safe_load(open(path).read())
        used.update([profile["name"], profile["gpu_model"]["name"]])
    assert {"gcp_b200", "h100_ib", "h200_nvlink", "a100_roce", "b200_cuda13", "h200", "NVIDIA B200"} <= used
    declared = set()
    for path in glob.glob(str(REPO / "inventories" / "**" / "*.yml"), recursive=True) + \
            glob.glob(str(REPO / "molecule" / "**" / "molecule.yml"), recursive=True):
        declared.update(re.findall(r"^\s*gpufleet_gpu_family:\s*([A-Za-z0-9_.-]+)\s*$", open(path).read(),
                                   re.MULTILINE))
    assert {"b200", "h100", "h200", "a100"} <= declared
    for name, table, scope in _role_tables():
        for profile in sorted(used):
            chosen = _thresholds.select_thresholds(table, profile, table_name=name, scope=scope)
            family = _gpu_families.family_of(profile)
            assert family in GATED_FAMILIES and chosen["matched"] == family, (name, profile)
        for family in sorted(declared):
            chosen = _thresholds.select_thresholds(table, "mycluster", table_name=name, family=family, scope=scope)
            assert family in GATED_FAMILIES and chosen["matched"] == family, (name, family)
