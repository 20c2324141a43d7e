# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepEP V2's other tests (Engram, PP, all-gather/reduce-scatter, barrier) as verify stages: the parser on what the
real tests printed on the lent 1 x H200 (tests/fixtures/captured/h200x1/v2-extras-1gpu.json) and on their formats,
the descriptor's hardware rules (what that node showed), the arguments a node without a NIC runs them with, and the
judge's record (not gated: figures recorded, the run's exit, ranks and correctness decide)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import backends, judge as judge_mod, launch
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import normalize_test, parse_output
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.extras import parse_extras
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.summary import render_markdown, summarize

CAPTURED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "h200x1"
                       / "v2-extras-1gpu.json").read_text())

PP = """Running stress tests:
 > Testing with seed=0 ...
 > All stress tests passed

Profiling PP send and recv:
 > EP:   0/  2 | hide=1, concurrent=1 | send: 30.000 us, 60.000 GB/s | recv: 31.000 us, 58.000 GB/s
 > EP:   1/  2 | hide=1, concurrent=1 | send: 30.500 us, 59.000 GB/s | recv: 31.500 us, 57.000 GB/s
 > EP:   0/  2 | hide=0, concurrent=1 | send: 40.000 us, 45.000 GB/s | recv: 41.000 us, 44.000 GB/s
 > EP:   1/  2 | hide=0, concurrent=1 | send: 42.000 us, 43.000 GB/s | recv: 40.500 us, 44.500 GB/s
"""
AGRS = """Running stress tests:
 > Seed 0 passed (48 ops)
Profiling all-gather:
 > Rank:   0/  2 | 2 x 1 MB | avg: 10.000 us, 200.000 GB/s (inplace=0, batched=0)
 > Rank:   1/  2 | 2 x 67 MB | avg: 400.000 us, 410.500 GB/s (inplace=0, batched=0)
 > Rank:   0/  2 | 2 x 67 MB | avg: 390.000 us, 420.000 GB/s (inplace=1, batched=1)
 > Rank:   0/  1 | 1 x 67 MB | avg: 12.000 us (inplace=0, batched=0)
"""
ENGRAM = """Running performance test ...
 > Rank   0/2 | issue: 6.1 us, wait: 38.0 us, 71.3 GB/s, bytes: 3.0 MB, 0.28 MPPS (256 B/msg)
 > Rank   1/2 | issue: 6.3 us, wait: 39.0 us, 69.4 GB/s, bytes: 3.0 MB, 0.27 MPPS (256 B/msg)
"""


def test_the_real_barrier_on_one_h200_is_read_whole():
    run = CAPTURED["barrier"]
    assert run["rc"] == 0
    parsed = parse_output(run["stdout"] + "\n" + run["stderr"], test="tests/elastic/test_barrier.py")
    assert parsed["generation"] == "v2" and parsed["complete"] and parsed["cases"] == {"passed": 1, "failed": 0}
    assert parsed["extras"] == {"kind": "barrier", "ranks": 1, "num_ranks": 1, "complete": True, "correct": None,
                                "figures": {"barrier_us": 1.402}}


@pytest.mark.parametrize("kind, said", [
    ("agrs", "nccl_context->num_ranks > 1"), ("engram", "CUDA_ERROR_MISALIGNED_ADDRESS"), ("pp", "AssertionError")])
def test_the_real_failures_on_one_h200_are_incomplete_and_say_why(kind, said):
    run = CAPTURED[kind]
    assert run["rc"] == 1 and said in run["stderr"]
    parsed = parse_output(run["stdout"] + "\n" + run["stderr"], test=kind)
    assert not parsed["complete"] and parsed["cases"] == {"passed": 0, "failed": 1}
    assert parsed["extras"]["ranks"] == 0 and parsed["crashed"] or parsed["errors"], parsed


def test_the_formats_give_the_slowest_ranks_figures():
    pp = parse_extras("pp", PP)
    # one tensor in flight, RDMA latency not hidden: the plainest setting's slowest rank
    assert pp["complete"] and pp["correct"] and pp["figures"] == {
        "send_gbps": 43.0, "recv_gbps": 44.0, "send_us": 42.0, "recv_us": 41.0, "settings": 2}
    agrs = parse_extras("agrs", AGRS)
    assert agrs["figures"] == {"size_mb": 67.0, "gbps": 410.5, "avg_us": 400.0, "sizes": 2}
    engram = parse_extras("engram", ENGRAM)
    assert engram["complete"] and engram["figures"] == {"gbps": 69.4, "mpps": 0.27, "issue_us": 6.3, "wait_us": 39.0}
    # a rank missing in between, or the stress tests not passed: not complete
    assert not parse_extras("engram", ENGRAM.replace(" > Rank   0/2", " > Rank   3/4"))["complete"]
    assert not parse_extras("engram", ENGRAM.replace("Running performance test ...", ""))["complete"]
    assert not parse_extras("pp", PP.replace(" > All stress tests passed", ""))["complete"]
    assert not parse_extras("agrs", AGRS.replace(" > Seed 0 passed (48 ops)", ""))["complete"]
    gap = " > EP:   0/  4, barrier time: 3.0 us\n > EP:   2/  4, barrier time: 3.1 us\n"
    assert not parse_extras("barrier", gap)["complete"]
    assert [normalize_test(name) for name in ("tests/elastic/test_pp.py", "test_agrs", "barrier", "test_ep")] == [
        ("pp", "v2"), ("agrs", "v2"), ("barrier", "v2"), ("elastic", "v2")]
    with pytest.raises(ValueError, match="'ep' is not one of DeepEP V2's other tests"):
        parse_extras("ep", "")


@pytest.mark.parametrize("scope, ranks, rdma, reason", [
    ("pp", 1, True, "not run: DeepEP V2's pp test needs at least 2 ranks, and this node runs 1"),
    ("agrs", 1, False, "not run: DeepEP V2's agrs test needs at least 2 ranks, and this node runs 1"),
    ("engram", 8, False, "not run: the node has no RDMA NIC, and DeepEP V2's engram test needs one (Engram fetches "
                         "over RDMA"),
    ("pp", 8, False, "not run: the node has no RDMA NIC, and DeepEP V2's pp test needs one (PP sends and receives"),
    ("engram", 1, True, None), ("agrs", 8, False, None), ("barrier", 1, False, None), ("engram", 8, None, None),
])
def test_the_descriptor_says_what_the_hardware_must_have(scope, ranks, rdma, reason):
    got = backends.skip_reason("v2", scope, ranks, rdma=rdma)
    assert got == reason if reason is None else got.startswith(reason), got


def _params(**changes):
    params = {"launcher": "/opt/deepep/verify/run_deepep.sh", "name": "barrier", "env_script": "/opt/e.sh",
              "src": "/opt/deepep/DeepEP", "python": "/usr/bin/python3", "script": None, "backend": "v2",
              "scope": "barrier", "num_processes": 8, "rdma": None, "args": [], "env": {}, "timeout": 900,
              "kill_after": 30, "poll": 10, "fetch_to": None, "judge": None}
    params.update(changes)
    return params


def test_a_node_without_a_nic_runs_them_with_gin_off_and_no_hybrid_kernels():
    bare = launch.validate(_params(rdma=False))
    assert bare["script"] == "tests/elastic/test_barrier.py"
    assert bare["args"] == ["--allow-hybrid-mode", "0"] and bare["env"] == {"EP_DISABLE_GIN": "1"}
    nic = launch.validate(_params(rdma=True))
    assert nic["args"] == [] and nic["env"] == {}
    # the caller's own settings win
    mine = launch.validate(_params(rdma=False, env={"EP_DISABLE_GIN": "0"}, args=["--num-allocated-qps", "4"]))
    assert mine["env"] == {"EP_DISABLE_GIN": "0"} and mine["args"][-2:] == ["--num-allocated-qps", "4"]
    assert launch.skip_reason(_params(scope="engram", rdma=False)).startswith("not run: the node has no RDMA NIC")


def test_the_judge_records_the_figures_ungated_and_a_skip_passes_with_the_reason():
    spec = {"stage": "pp", "thresholds": {}, "table_name": "t", "profile": "gcp_b200", "family": "b200", "gpus": 8,
            "transport_policies": {}, "record": {}}
    record = judge_mod.judge(spec, PP, 0, False, 900, "tests/elastic/test_pp.py", host="n1", backend="v2", scope="pp")
    assert record["gate"]["passed"] and record["thresholds"] == {} and record["figures"]["send_gbps"] == 43.0
    assert "recorded, not gated" in record["gate_basis"]["provisional"]
    assert record["transport"]["basis"]["scope"] == "pp"
    failed = judge_mod.judge(spec, "Traceback (most recent call last):\nAssertionError", 1, False, 900,
                             "tests/elastic/test_pp.py", host="n1", backend="v2", scope="pp")
    assert not failed["gate"]["passed"] and failed["gate"]["status"] == "error"
    skipped = judge_mod.not_run(spec, backends.skip_reason("v2", "pp", 1), "tests/elastic/test_pp.py", host="n1")
    summary = summarize([record, failed, skipped])
    assert summary["counts"] == {"total": 3, "passed": 2, "failed": 1}
    table = render_markdown(summary, title="t")
    assert "send_gbps=43" in table and "| SKIPPED |" in table
    assert re.search(r"2 of 3 passed \(1 not run on their hardware: DeepEP V2's pp test needs at least 2 ranks", table)
