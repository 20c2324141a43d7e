# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the figures of verification records (checks that are not DeepEP runs: serving).

verify_summary keeps a record's ``figures`` in its row; verify_summary_markdown shows them, in a compact table
when no row carries DeepEP data, as one more column beside the DeepEP columns otherwise, and not at all (the
DeepEP table unchanged) when no record has figures.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import verify_helpers as vf
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import summary as _verify_summary
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import gate as _verify_gate

from unit_helpers import CAPTURED


def _gate(passed, reasons=(), status=None):
    return {"passed": passed, "status": status or ("pass" if passed else "fail"), "reasons": list(reasons),
            "diagnosis": []}


def _serving_records():
    return [
        {"host": "router-1", "scope": "router smg", "stage": "router", "test": "readiness",
         "gate": _gate(True), "figures": {"router": "smg", "status": 200}},
        {"host": "router-1", "scope": "router smg", "stage": "router", "test": "workers",
         "gate": _gate(True), "figures": {"prefill": "1/1", "decode": "2/2", "healthy": "3/3",
                                          "bootstrap_ports": [8998]}},
        {"host": "router-1", "scope": "router smg", "stage": "router", "test": "chat completion",
         "gate": _gate(True), "figures": {"router": "smg", "status": 200, "latency_ms": 84, "answered": True}},
        {"host": "prefill-1", "scope": "prefill0", "stage": "prefill", "test": "direct request refused",
         "gate": _gate(False, ["prefill0 answered 200 to a request without bootstrap_room: it serves without "
                               "the router"]),
         "figures": {"status": 200}},
    ]


def test_summary_keeps_figures_in_record_order():
    summary = vf.verify_summary(_serving_records())
    assert summary["counts"] == {"total": 4, "passed": 3, "failed": 1} and not summary["passed"]
    chat = summary["rows"][2]
    assert list(chat["figures"]) == ["router", "status", "latency_ms", "answered"]
    assert chat["figures"]["latency_ms"] == 84
    assert summary["failures"][0]["host"] == "prefill-1" and summary["failures"][0]["stage"] == "prefill"


def test_summary_rows_without_figures_keep_their_shape():
    parsed = parse_output((CAPTURED / "deepep_v1_test_intranode_2gpu.txt").read_text(), test="intranode")
    summary = _verify_summary.summarize([{"host": "n1", "parsed": parsed, "gate": _verify_gate.gate(parsed, {})}])
    assert "figures" not in summary["rows"][0]


def test_markdown_of_serving_checks_is_the_compact_table():
    text = vf.verify_summary_markdown(vf.verify_summary(_serving_records(), missing_hosts=["decode-2"]),
                                      title="SGLang serving verification")
    lines = text.splitlines()
    assert lines[0] == "# SGLang serving verification"
    assert lines[2] == "| node | scope | check | figures | result |"
    assert "GB/s" not in text and "BF16" not in text
    assert "| router-1 | router smg | chat completion (router) | router=smg, status=200, latency_ms=84, answered=yes " \
           "| PASS |" in lines
    assert "| router-1 | router smg | workers (router) | prefill=1/1, decode=2/2, healthy=3/3, bootstrap_ports=8998 " \
           "| PASS |" in lines
    assert "| prefill-1 | prefill0 | direct request refused (prefill) | status=200 | FAIL |" in lines
    # A node gone before its checks: no figures, still a row of the compact table.
    assert "| decode-2 | decode-2 | - (node) | - | ERROR |" in lines
    assert "3 of 5 passed." in lines
    assert "- **prefill0 on prefill-1** direct request refused (fail): prefill0 answered 200 to a request without " \
           "bootstrap_room: it serves without the router" in lines


def test_markdown_of_deepep_and_figures_adds_a_column():
    parsed = parse_output((CAPTURED / "deepep_v1_test_intranode_2gpu.txt").read_text(), test="intranode")
    deepep = {"host": "n1", "scope": "n1", "stage": "intranode", "test": "tests/test_intranode.py", "parsed": parsed,
              "gate": _verify_gate.gate(parsed, {})}
    text = _verify_summary.render_markdown(_verify_summary.summarize([deepep] + _serving_records()[:1]))
    header = text.splitlines()[0]
    assert header.startswith("| node / pair | test | cases | BF16 disp NVL") and header.endswith("| NICs | figures | result |")
    assert "| n1 | tests/test_intranode.py (intranode) | 24/24 | 340.61 |" in text
    assert "| - | router=smg, status=200 | PASS |" in text
    # Without figures the DeepEP table is as it was: no figures column.
    assert "figures" not in _verify_summary.render_markdown(_verify_summary.summarize([deepep]))


@pytest.mark.parametrize("value,text", [
    (True, "yes"), (False, "no"), (12.50, "12.5"), (None, "-"), ([], "-"), ([8998, 8999], "8998,8999"),
    ({"prefill": 1, "decode": 2}, "prefill:1,decode:2"), ("a|b", "a|b"),
])
def test_figure_values(value, text):
    assert _verify_summary._fmt_figure(value) == text


def test_figure_cells_escape_pipes():
    records = [{"host": "r", "test": "chat", "gate": _gate(True), "figures": {"answer": "a|b"}}]
    assert "| answer=a\\|b | PASS |" in _verify_summary.render_markdown(_verify_summary.summarize(records))


def test_figures_must_be_a_mapping():
    with pytest.raises(AnsibleFilterError, match="figures of a verification record must be a mapping"):
        vf.verify_summary([{"host": "r", "gate": _gate(True), "figures": ["latency_ms", 84]}])
