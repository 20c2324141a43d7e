# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify role's low-latency stage as the real 1 x H200 gave it (tests/fixtures/captured/h200x1): the captured log
judged again gives the record the node gave (figures, gate, transport), and what a wrong node would give fails."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import judge as judge_mod

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "h200x1"
LOG = (CAPTURED / "verify-low-latency-1gpu.log").read_text()
RECORDS = json.loads((CAPTURED / "verify-low-latency-1gpu.json").read_text())
SPEC = {"stage": "low_latency_intranode", "thresholds": {}, "table_name": "verify_intranode_low_latency_thresholds",
        "profile": "h200", "family": "h200", "gpus": 1, "transport_policies": {}, "record": {}}


def judged(text, spec=None):
    return judge_mod.judge(dict(SPEC, **(spec or {})), text, 0, False, 900, "tests/test_low_latency.py",
                           host="localhost", backend="deepep_v1", scope="low_latency_intranode")


def test_the_captured_log_judged_again_gives_the_nodes_record():
    record, node = judged(LOG), RECORDS["low_latency"]
    assert record["parsed"]["low_latency"] == node["parsed"]["low_latency"]
    assert record["parsed"]["low_latency"]["dispatch_gbps"] == 420.14
    assert record["gate"] == node["gate"] and record["gate"]["passed"]
    assert record["thresholds"] == {"ll_dispatch_gbps": 330, "ll_combine_gbps": 495} == node["thresholds"]
    assert record["gate_basis"] == node["gate_basis"] and record["gate_basis"]["shape"] == "measured"
    assert record["transport"]["brief"] == node["transport"]["brief"] == "NVSHMEM p2p, IBGDA failed; NCCL 2.28.9 net Socket"
    assert record["transport"]["gate"]["passed"] and record["transport"]["basis"] == node["transport"]["basis"]


def test_the_gate_follows_the_gpu_count_and_the_log_is_refused_across_nodes_without_ibgda():
    # judged as a 2-GPU node's run, 420 GB/s passes (2-GPU gate 205 / 285); the point is the gate follows the count
    assert judged(LOG, {"gpus": 2})["thresholds"] == {"ll_dispatch_gbps": 205, "ll_combine_gbps": 285}
    # the run across nodes is held to IBGDA with the GPU handler: this node had no NIC, so it is refused, by name
    across = judge_mod.judge(dict(SPEC, stage="low_latency_internode", gpus=None), LOG, 0, False, 900,
                             "tests/test_low_latency.py", host="localhost", backend="deepep_v1",
                             scope="low_latency_internode")
    assert not across["transport"]["gate"]["passed"]
    assert any("IBGDA failed" in reason for reason in across["transport"]["gate"]["reasons"])


def test_a_slower_node_of_the_same_log_fails_its_measured_gate():
    slow = LOG.replace("Dispatch bandwidth: 420.14 GB/s", "Dispatch bandwidth: 300.00 GB/s")
    record = judged(slow)
    assert not record["gate"]["passed"]
    assert "ll_dispatch_gbps 300.0 GB/s is below the gate of 330 GB/s" in record["gate"]["reasons"]


def test_the_skipped_intranode_record_says_why():
    gate = RECORDS["intranode"]["gate"]
    assert gate["status"] == "skipped" and gate["passed"]
    assert "exist for 2, 4, 8 local ranks" in gate["reasons"][0]
