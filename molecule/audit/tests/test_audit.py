# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the audit scenario: each injected fault is a finding on its node and nowhere else, the drift
is listed with the nodes that hold each value, the report files exist (from --check too), and no file under
/etc, /opt or /usr/local changed on any node during the audit (listing taken through the harness)."""

from __future__ import annotations

import html.parser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
FLEET = os.environ["FLEETSIM_FLEET"]
NODES = ["b200-cluster-1", "b200-cluster-2", "b200-cluster-3", "b200-cluster-4"]
GHOST = "b200-cluster-9"          # added to the group by converge.yml; its SSH port refuses connections

# The fault each node carries -> the findings it must produce (and no other node may show).
EXPECTED = {
    "b200-cluster-1": {"PEERMAP_NOT_LIVE", "REBOOT_PENDING"},         # override configured, not live
    "b200-cluster-2": {"HCA_PREFIX_MISMATCH"},                        # rocep* where mlx5_* is expected
    # stale DeepEP build (torch changed); and the libmlx5 without MLX5_1.8 that prepare.yml lays for V2 (below) is the
    # one NVSHMEM's IBGDA loads mlx5dv_is_supported at, so its rule names it too, on this node only
    "b200-cluster-3": {"DEEPEP_TORCH_ABI", "DEEPEP_IMPORT_FAILS", "NVSHMEM_LIBMLX5_OLD"},
    "b200-cluster-4": {"NIC_PORT_DOWN"},                              # a DOWN NIC port
}
# The group runs DeepEP V2 (audit_expected_deepep_v2): each node lacks one piece of V2's runtime (prepare.yml); every
# node has its own /dev/infiniband with a verbs device per RDMA device (fleetsim), so no node lacks that; the V2 tree
# cannot be read (the installed build is a V1 fixture), so the SM100 check (B200, CUDA 12.9) and the GIN barrier check
# are warnings on every node.
V2_EVERYWHERE = {"DEEPEP_V2_CHECK_WARN"}
EXPECTED_V2 = {
    "b200-cluster-1": V2_EVERYWHERE | {"DEEPEP_V2_IBSTAT"},         # no ibstat (infiniband-diags)
    "b200-cluster-2": V2_EVERYWHERE | {"DEEPEP_V2_NIC_NAME"},       # EP_NIC_NAME=mlx5_0 (V2's default), rocep* NICs
    "b200-cluster-3": V2_EVERYWHERE | {"DEEPEP_V2_LIBMLX5"},        # libmlx5 without MLX5_1.8
    # NCCL_CUMEM_ENABLE=0 in /etc/environment, and a libmlx5 at MLX5_1.18 (rdma-core 34): NVSHMEM's MLX5_1.8 is there
    # (no NVSHMEM_LIBMLX5_OLD), NCCL GIN GDAKI's MLX5_1.19 is not
    "b200-cluster-4": V2_EVERYWHERE | {"DEEPEP_V2_NCCL_CUMEM", "DEEPEP_V2_LIBMLX5"},
}
# Drift facts -> the node that holds the odd value.
EXPECTED_DRIFT = {
    "driver_params.RegistryDwords": "b200-cluster-1",
    "peer_mapping_override_active": "b200-cluster-1",
    "hca_prefix": "b200-cluster-2",
    "torch": "b200-cluster-3",
    "active_nics": "b200-cluster-4",
}


def load(run):
    return json.loads((EPHEMERAL / run / "fleet.json").read_text())


@pytest.fixture(scope="module", params=["audit-report", "audit-check"])
def fleet(request):
    return load(request.param)


def test_every_node_audited(fleet):
    assert sorted(fleet["nodes"]) == NODES + [GHOST]
    assert fleet["summary"]["nodes"] == 5
    assert fleet["summary"]["with_findings"] == 4
    assert fleet["summary"]["ok"] == 0
    for node in NODES:
        assert fleet["nodes"][node]["reachable"] is True
        assert fleet["nodes"][node]["facts"]["gather_errors"] == {}


def test_unreachable_node_reported_not_fatal(fleet):
    assert fleet["summary"]["unreachable"] == 1
    ghost = fleet["nodes"][GHOST]
    assert ghost["status"] == "unreachable" and ghost["reachable"] is False
    assert ghost["findings"] == []
    assert ghost["facts"]["unreachable_reason"]
    assert all(GHOST not in v["nodes"] for row in fleet["drift"] for v in row["values"])


def v2_ids(findings):
    return {f["id"] for f in findings if f["id"].startswith("DEEPEP_V2_") and f["id"] != "DEEPEP_V2_NCCL_OLD"}


@pytest.mark.parametrize("node", NODES)
def test_findings_on_the_right_node_only(fleet, node):
    found = {f["id"] for f in fleet["nodes"][node]["findings"]} - v2_ids(fleet["nodes"][node]["findings"])
    assert found == EXPECTED[node]
    others = set().union(*(EXPECTED[n] for n in NODES if n != node))
    assert not found & (others - EXPECTED[node])


@pytest.mark.parametrize("node", NODES)
def test_linkage_is_gathered_and_unknown_without_a_record(fleet, node):
    """The audit gathers gpufleet_linkage on every node; a DeepEP build without a linkage record (schema 1) yet gives
    every check ok: null with the reason, and no LINKAGE_* finding."""
    linkage = fleet["nodes"][node]["facts"]["gpufleet_linkage"]
    assert [c["check"] for c in linkage["checks"]][:2] == ["nccl", "nvshmem"]
    if not linkage["record"]["present"]:
        assert linkage["ok"] is None and linkage["failed"] == [] and linkage["record"]["reason"]
        assert all(c["ok"] is None and c["reason"] == linkage["record"]["reason"] for c in linkage["checks"])
        assert not [f for f in fleet["nodes"][node]["findings"] if f["id"].startswith("LINKAGE_")]


@pytest.mark.parametrize("node", NODES)
def test_v2_readiness_per_node(fleet, node):
    """Each node's V2 findings: its own missing piece and what no simulated node has, nothing of another node's."""
    findings = fleet["nodes"][node]["findings"]
    assert v2_ids(findings) == EXPECTED_V2[node]
    facts = fleet["nodes"][node]["facts"]["gpufleet_deepep_v2"]
    assert facts["nvcc"]["release"] == "12.9" and facts["cuobjdump"]["present"] is True
    failed = {"DEEPEP_V2_" + name.upper() for name in facts["failed"]}
    assert failed == EXPECTED_V2[node] - {"DEEPEP_V2_CHECK_WARN"}
    assert sorted(facts["warnings"]) == ["gin_barrier", "sm100_cuda"]
    for finding in findings:
        if finding["id"] in EXPECTED_V2[node] - {"DEEPEP_V2_CHECK_WARN"}:
            assert finding["severity"] == "critical" and "Fix: " in finding["message"]
    if node == "b200-cluster-3":
        assert facts["libmlx5"]["newest"] == "MLX5_1.7" and facts["libmlx5"]["required"] is False
    elif node == "b200-cluster-4":
        assert facts["libmlx5"]["newest"] == "MLX5_1.18" and facts["libmlx5"]["required"] is True
        assert facts["libmlx5"]["gdaki"] is False
        (gdaki,) = [f for f in findings if f["id"] == "DEEPEP_V2_LIBMLX5"]
        assert "defines MLX5_1.8 but not MLX5_1.19 (newest MLX5_1.18)" in gdaki["message"], gdaki["message"]
        assert "gin_gdaki_libmlx5" in gdaki["source"] and "DeepEP #628" in gdaki["message"]
    else:
        assert facts["libmlx5"]["newest"] == "MLX5_1.25" and facts["libmlx5"]["optional"] is True
    if node == "b200-cluster-2":
        assert facts["nic"]["source"] == "default" and facts["nic"]["present"] is False
    if node == "b200-cluster-4":
        assert [c["where"] for c in facts["cumem_disabled"]] == ["/etc/environment"]


def test_findings_carry_fix_and_evidence(fleet):
    node = fleet["nodes"]["b200-cluster-2"]
    finding = next(f for f in node["findings"] if f["id"] == "HCA_PREFIX_MISMATCH")
    assert finding["fix"] and finding["source"]
    assert finding["evidence"]["expected"] == "mlx5"
    assert all(name.startswith("rocep") for name in finding["evidence"]["devices"])
    down = next(f for f in fleet["nodes"]["b200-cluster-4"]["findings"] if f["id"] == "NIC_PORT_DOWN")
    assert [d["device"] for d in down["evidence"]] == ["mlx5_3"]


def test_drift_lists_the_odd_node(fleet):
    rows = {r["fact"]: r for r in fleet["drift"] if r["group"] == "b200_cluster"}
    for fact, odd in EXPECTED_DRIFT.items():
        assert fact in rows, sorted(rows)
        minority = rows[fact]["values"][-1]
        assert minority["nodes"] == [odd], rows[fact]
        assert sorted(rows[fact]["values"][0]["nodes"]) == sorted(n for n in NODES if n != odd)


def test_check_mode_run_says_so():
    assert load("audit-check")["meta"]["check_mode"] is True
    assert load("audit-report")["meta"]["check_mode"] is False


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.external = []
        self.text = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("#"):
                self.external.append(value)

    def handle_data(self, data):
        self.text.append(data)


def test_report_files():
    run = EPHEMERAL / "audit-report"
    fleet = load("audit-report")
    page = (run / "fleet.html").read_text()
    parser = _Parser()
    parser.feed(page)
    assert parser.external == []
    text = " ".join(parser.text)
    markdown = (run / "fleet.md").read_text()
    for node in fleet["nodes"].values():
        for finding in node["findings"]:
            assert finding["fix"] in text
            assert finding["fix"] in markdown


def listing(node):
    script = (SCENARIO / "files" / "listing.py").read_text()
    out = subprocess.run([sys.executable, "-m", "tools.fleetsim", "--fleet", FLEET, "exec", node, "--",
                          "python3", "-c", script], cwd=REPO, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.mark.parametrize("node", NODES)
def test_no_file_changed_on_the_node(node):
    before = (EPHEMERAL / "audit-listing-before" / ("%s.txt" % node)).read_text().strip().splitlines()
    after = listing(node).splitlines()
    assert len(before) > 100
    assert sorted(set(before) ^ set(after)) == []
