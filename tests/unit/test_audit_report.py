# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report: well-formed self-contained HTML, every finding's fix, escaping, Markdown, JSON."""

from __future__ import annotations

import copy
import html.parser
import json

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import audit_fleet
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report import render
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_html import render_html
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_markdown import render_markdown

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())
EVIL = '<script>alert("x")</script>&'
VOID = {"meta", "link", "br", "hr", "img", "input", "col", "area", "base", "wbr", "source", "track", "embed"}


def doc(host, **changes):
    out = copy.deepcopy(HEALTHY)
    out["host"] = host
    for path, value in changes.items():
        node = out
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return out


@pytest.fixture
def fleet():
    docs = {
        "n1": doc("n1"),
        "n2": doc("n2", gpufleet_stack__torch={"version": "2.11.0+cu130"}),
        # A node whose facts carry markup: a device name and an import error with HTML in them.
        EVIL: doc(EVIL, gpufleet_stack__deep_ep_import={"checked": True, "ok": False, "error": EVIL},
                  gpufleet_stack__torch={"version": EVIL}),
        "n4": {"host": "n4", "groups": ["b200"], "reachable": False, "unreachable_reason": "ssh: " + EVIL},
    }
    docs[EVIL]["gpufleet_rdma"]["devices"][0]["name"] = EVIL
    docs[EVIL]["gpufleet_rdma"]["devices"][1]["ports"][0]["state"] = "DOWN"
    return audit_fleet(docs, CATALOGUE, groups={"b200": list(docs)},
                       meta={"generated_at": "2026-11-22T03:00:00Z", "inventory": "inv/" + EVIL, "check_mode": True})


class Checker(html.parser.HTMLParser):
    """Balance of non-void tags, external references, text, ids."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []
        self.errors = []
        self.external = []
        self.text = []
        self.tags = []
        self.ids = []
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)
        for name, value in attrs:
            if name == "id":
                self.ids.append(value)
            if name in ("src", "href", "action", "data") and value:
                if value.startswith("#"):
                    self.hrefs.append(value[1:])
                else:
                    self.external.append(value)
            if name == "style" and "url(" in (value or ""):
                self.external.append(value)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append("unexpected </%s> (open: %s)" % (tag, self.stack[-3:]))
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def check(page):
    checker = Checker()
    checker.feed(page)
    checker.close()
    return checker


def test_html_is_well_formed_and_self_contained(fleet):
    page = render_html(fleet)
    assert page.startswith("<!DOCTYPE html>")
    c = check(page)
    assert c.errors == []
    assert c.stack == []
    assert c.external == []                       # no scripts, stylesheets, fonts or images to fetch
    assert "script" not in c.tags and "link" not in c.tags and "img" not in c.tags
    assert "style" in c.tags                      # the CSS is inline
    assert "@import" not in page and "url(" not in page and "http://" not in page and "https://" not in page
    assert len(c.ids) == len(set(c.ids))
    assert set(c.hrefs) <= set(c.ids)             # every in-page link has its target


def test_html_escapes_node_supplied_strings(fleet):
    page = render_html(fleet)
    assert EVIL not in page
    assert "<script>" not in page
    assert html_escaped(EVIL) in page
    text = " ".join(check(page).text)
    assert EVIL in text                           # shown, as text


def html_escaped(value):
    import html
    return html.escape(value, quote=True)


def test_html_contains_every_fix_and_sections(fleet):
    page = render_html(fleet)
    text = " ".join(check(page).text)
    findings = [f for n in fleet["nodes"].values() for f in n["findings"]]
    assert {f["id"] for f in findings} >= {"DEEPEP_TORCH_ABI", "HCA_PREFIX_MISMATCH", "NIC_PORT_DOWN",
                                           "DEEPEP_IMPORT_FAILS"}
    for finding in findings:
        assert finding["fix"] in text
        assert finding["title"] in text
    for heading in ("Nodes", "Findings by severity", "Drift", "Node details"):
        assert heading in text
    assert "unreachable" in text and "ssh: " + EVIL in text
    assert "2.11.0+cu130" in text                 # drift value
    assert "check mode" in text


def test_html_node_table_order_and_status(fleet):
    page = render_html(fleet)
    # Worst first: the unreachable node, then critical ones, the healthy node last.
    assert page.index('href="#node-n4"') < page.index('href="#node-n2"') < page.index('href="#node-n1"')
    assert 'class="badge s-ok"' in page and 'class="badge s-critical"' in page and 'class="badge s-unreachable"' in page


def test_markdown(fleet):
    md = render_markdown(fleet)
    assert md.startswith("# DeepEP fleet audit")
    assert "**4 nodes: 1 ok, 2 with findings, 0 not fully judged, 1 unreachable** (findings: " in md
    for node in fleet["nodes"].values():
        for finding in node["findings"]:
            assert finding["fix"] in md
    table = [line for line in md.splitlines() if line.startswith("| n1 |")]
    assert len(table) == 1 and "| ok |" in table[0]
    assert "## Drift" in md and "## Unreachable" in md


def test_markdown_escapes_pipes():
    fleet = audit_fleet({"a|b": {"host": "a|b", "reachable": False}}, CATALOGUE)
    md = render_markdown(fleet)
    assert "| a\\|b | unreachable |" in md


def test_json_round_trip(fleet):
    again = json.loads(render(fleet, "json"))
    assert again["summary"] == fleet["summary"]
    assert set(again["nodes"]) == set(fleet["nodes"])


def test_empty_fleet_renders():
    fleet = audit_fleet({}, CATALOGUE)
    assert check(render_html(fleet)).errors == []
    assert "No findings." in render_markdown(fleet)


def test_unknown_format():
    with pytest.raises(ValueError, match="format 'pdf'"):
        render({"nodes": {}}, "pdf")


def test_findings_table_has_one_row_per_rule_with_its_nodes():
    docs = {h: doc(h, gpufleet_stack__torch={"version": "2.11.0+cu130"}) for h in ("n1", "n2", "n3")}
    docs["n4"] = doc("n4")
    fleet = audit_fleet(docs, CATALOGUE)
    md = render_markdown(fleet)
    rows = [line for line in md.splitlines() if line.startswith("| critical | DEEPEP_TORCH_ABI |")]
    assert rows == ["| critical | DEEPEP_TORCH_ABI | DeepEP was built against another torch than the one installed (ABI) "
                    "| n1, n2, n3 |"]
    page = render_html(fleet)
    assert '<a href="#node-n1">n1</a>, <a href="#node-n2">n2</a>, <a href="#node-n3">n3</a> <span class="muted">(3)</span>' in page


def test_html_node_table_names_each_finding_and_links_to_its_fix(fleet):
    page = render_html(fleet)
    nodes_table = page[page.index('id="nodes"'):page.index('id="findings"')]
    # n2 (torch changed under DeepEP): its rule ids in its row, coloured by severity, each linking to the finding
    # in the node details, where the fix is.
    row = next(line for line in nodes_table.splitlines() if 'href="#node-n2"' in line)
    assert row.startswith('<tr class="row-critical">')
    assert '<a class="chip s-critical" href="#node-n2--DEEPEP_TORCH_ABI"' in row
    finding = page[page.index('id="node-n2--DEEPEP_TORCH_ABI"'):]
    finding = finding[:finding.index('<div class="source">')]
    fix = next(f for f in fleet["nodes"]["n2"]["findings"] if f["id"] == "DEEPEP_TORCH_ABI")["fix"]
    assert '<p class="fix"><b>Fix:</b> %s</p>' % html_escaped(fix) in finding
    healthy = next(line for line in nodes_table.splitlines() if 'href="#node-n1"' in line)
    assert healthy.startswith('<tr class="row-ok">') and '<td class="muted">none</td>' in healthy
    down = next(line for line in nodes_table.splitlines() if 'href="#node-n4"' in line)
    assert down.startswith('<tr class="row-unreachable">') and 'not reachable (<a href="#node-n4">why</a>)' in down
    assert 'title="ssh: ' in down


def test_html_drift_marks_the_odd_values(fleet):
    page = render_html(fleet)
    drift = page[page.index('id="drift"'):page.index('id="details"')]
    row = next(line for line in drift.splitlines() if "<code>torch</code>" in line)
    # The value most nodes hold first, then the odd ones, highlighted, each with how many nodes hold it.
    assert row.index('class="majority"') < row.index('class="odd"')
    assert '<span class="count">1 node</span><code>2.11.0+cu130</code> <a href="#node-n2">n2</a>' in row


def test_markdown_node_table_lists_the_rule_ids(fleet):
    md = render_markdown(fleet)
    row = next(line for line in md.splitlines() if line.startswith("| n2 |"))
    assert "DEEPEP_TORCH_ABI" in row


# ----------------------------------------------------------------------------- linkage and verification per node
LINKAGE = {"record": {"present": True, "generation": "v2"}, "ok": False, "failed": ["nccl"], "unknown": ["torch"],
           "warnings": [], "checks": [
               {"check": "nccl", "ok": False, "expected": "2.30.4", "found": "2.30.7",
                "fix": "rebuild DeepEP against the NCCL torch loads, or re-pin NCCL 2.30.4", "reason": None,
                "warning": None},
               {"check": "nvshmem", "ok": True, "expected": "3.4.5", "found": "3.4.5", "fix": None, "reason": None,
                "warning": None},
               {"check": "gpu_arch", "ok": True, "expected": ["sm_90"], "found": ["sm_90a"], "fix": None,
                "reason": None, "warning": None},
               {"check": "libstdcxx", "ok": True, "expected": None, "found": "static", "fix": None, "reason": None,
                "warning": "statically linked libstdc++"},
               {"check": "torch", "ok": None, "expected": None, "found": None, "fix": None,
                "reason": "torch not importable", "warning": None}]}


def _fleet_with_linkage():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.verification import attach_verification

    doc = json.loads(json.dumps(HEALTHY))
    doc["gpufleet_linkage"] = LINKAGE
    fleet = audit_fleet({"n1": doc}, CATALOGUE)
    summary = {"passed": False, "counts": {"total": 1, "passed": 0, "failed": 1}, "rows": [
        {"host": "n1", "scope": "n1", "stage": "intranode", "passed": False, "status": "fail",
         "gbps": {"dispatch_bf16_nvl_gbps": 290.5, "combine_nvl_gbps": 300.0},
         "thresholds": {"dispatch_bf16_nvl_gbps": 300, "combine_nvl_gbps": 250},
         "reasons": ["dispatch_bf16_nvl_gbps 290.5 < 300"], "diagnosis": []}]}
    return attach_verification(fleet, summary, source="/runs/v/summary.json")


@pytest.mark.parametrize("check, state, expected, found, note", [
    ("nccl", "FAIL", "2.30.4", "2.30.7", "rebuild DeepEP against the NCCL torch loads, or re-pin NCCL 2.30.4"),
    ("nvshmem", "ok", "3.4.5", "3.4.5", "-"),
    ("gpu_arch", "ok", "sm_90", "sm_90a", "-"),
    ("libstdcxx", "ok", "-", "static", "statically linked libstdc++"),
    ("torch", "unknown", "-", "-", "torch not importable"),
])
def test_markdown_shows_every_linkage_check_of_the_node(check, state, expected, found, note):
    md = render_markdown(_fleet_with_linkage())
    assert "Linkage of the DeepEP build (checked against this node):" in md
    assert "| %s | %s | %s | %s | %s |" % (check, state, expected, found, note) in md


def test_markdown_and_html_show_the_figures_beside_their_gates_and_name_the_one_under():
    fleet = _fleet_with_linkage()
    md = render_markdown(fleet)
    assert "| intranode | n1 | BF16 disp NVL 290.5 (gate >=300, UNDER); comb NVL 300 (gate >=250) | - | FAIL |" in md
    assert "- n1 (intranode): dispatch_bf16_nvl_gbps 290.5 < 300" in md
    assert "Last verification (/runs/v/summary.json): FAIL, 0 of 1 checks passed" in md
    page = render_html(fleet)
    assert '<div class="under">&ge; 300</div>' in page and "<div>&ge; 250</div>" in page
    assert "<h4>Linkage of the DeepEP build</h4>" in page and "rebuild DeepEP against the NCCL torch loads" in page


def test_a_node_without_linkage_or_verification_shows_neither():
    fleet = audit_fleet({"n1": json.loads(json.dumps(HEALTHY))}, CATALOGUE)
    md = render_markdown(fleet)
    assert "Linkage of the DeepEP build" not in md and "## Verification" not in md and "Last verification" not in md


# --- an audit without a profile on a node whose audit_python has no torch (tests/fixtures/captured/h200x1) ---------

H200X1 = FIXTURES / "captured" / "h200x1"


def role_expect(variables):
    """``audit_expect`` as roles/audit/tasks/main.yml computes it from the node's variables (with the role's
    vars/main.yml and the task's vars)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    def trusted(value):
        if isinstance(value, dict):
            return dict((k, trusted(v)) for k, v in value.items())
        return trust_as_template(value) if isinstance(value, str) and "{{" in value else value

    tasks = yaml.safe_load((REPO / "roles" / "audit" / "tasks" / "main.yml").read_text())
    (task,) = [t for t in tasks if t.get("name") == "Note what the node's profile expects"]
    role_vars = yaml.safe_load((REPO / "roles" / "audit" / "vars" / "main.yml").read_text())
    defaults = {"audit_expected_hca_prefix": "", "audit_expected_fabric": "", "audit_expected_gpu_family": "",
                "audit_profile": "",
                "audit_expected_deepep_v2": False, "audit_expected_nccl_ep": False, "audit_expected_nccl_pin": "",
                "audit_sglang": False, "audit_sglang_expect": {}, "audit_expect_extra": {}}
    templar = Templar(loader=DataLoader(), variables=trusted(dict(defaults, **role_vars, **task["vars"], **variables)))
    return json.loads(json.dumps(templar.template(trust_as_template(task["ansible.builtin.set_fact"]["audit_expect"]))))


def captured_result():
    """The registered node_stack result of the captured node (node_stack-no-profile.txt)."""
    return yaml.safe_load((H200X1 / "node_stack-no-profile.txt").read_text().split("=>", 1)[1])


def captured_fleet(expect=None, result=None):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document

    doc = node_document("gpu-node-1", ["h200_cluster"], result or captured_result(),
                        role_expect({}) if expect is None else expect)
    return audit_fleet({"gpu-node-1": doc}, CATALOGUE, groups={"h200_cluster": ["gpu-node-1"]},
                       meta={"generated_at": "2026-11-29T01:20:04Z"})


def test_the_role_names_the_profile_variables_a_node_without_a_profile_lacks():
    assert role_expect({})["unset"] == ["gpufleet_profile", "gpufleet_intranode_only", "deepep_generation",
                                        "audit_expected_hca_prefix"]
    h200 = yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / "h200.yml").read_text())
    expect = role_expect(dict(h200, audit_profile="h200"))
    assert expect["profile"] == "h200" and expect["intranode_only"] is True
    assert expect["unset"] == ["deepep_generation", "audit_expected_hca_prefix"]
    # The profile's GPU family (the NVL72_* rules judge where it spans hosts); null when none is declared.
    assert role_expect({})["gpu_family"] is None
    assert role_expect({"audit_expected_gpu_family": "gb200"})["gpu_family"] == "gb200"


def test_captured_no_profile_node_is_not_fully_judged():
    fleet = captured_fleet()
    assert fleet["summary"] == {"nodes": 1, "ok": 0, "with_findings": 0, "not_judged": 1, "unreachable": 0,
                                "critical": 0, "warning": 0, "info": 0}
    node = fleet["nodes"]["gpu-node-1"]
    assert node["status"] == "not_judged" and node["findings"] == []
    gaps = dict((g["id"], g) for g in node["not_judged"])
    assert list(gaps) == ["NOT_JUDGED_NO_PROFILE", "NOT_JUDGED_TORCH_NOT_FOUND"]
    assert gaps["NOT_JUDGED_NO_PROFILE"]["message"].startswith(
        "The node has no profile (not set: gpufleet_profile, gpufleet_intranode_only, deepep_generation, "
        "audit_expected_hca_prefix), so the audit has no expectations for it")
    assert "CUDA, torch, NVSHMEM or DeepEP versions, GPU architecture or bandwidth gates" in \
        gaps["NOT_JUDGED_NO_PROFILE"]["message"]
    assert gaps["NOT_JUDGED_TORCH_NOT_FOUND"]["message"].startswith(
        "torch was not found with /usr/bin/python3, the interpreter the audit used (it runs, but has no torch "
        "package), so torch, the NCCL torch loads, DeepEP")
    assert "Set audit_python to the interpreter of the node's torch environment" in \
        gaps["NOT_JUDGED_TORCH_NOT_FOUND"]["fix"]
    assert all(g["fix"] and g["source"] and g["kind"] == "not_judged" for g in gaps.values())


def test_captured_no_profile_markdown_says_what_it_could_not_judge():
    md = render_markdown(captured_fleet())
    captured = (H200X1 / "audit-no-profile-fleet.md").read_text()
    assert "**1 nodes: 1 ok, 0 with findings, 0 unreachable**" in captured      # what the node's audit said
    assert "**1 nodes: 0 ok, 0 with findings, 1 not fully judged, 0 unreachable** (findings: 0 critical, 0 warning, " \
           "0 info)" in md
    assert "1 ok" not in md and "### gpu-node-1 (not fully judged)" in md
    row = [line for line in md.splitlines() if line.startswith("| gpu-node-1 |")][0]
    assert row.startswith("| gpu-node-1 | not fully judged | 0 | 0 | 0 | not judged: NOT_JUDGED_NO_PROFILE, "
                          "NOT_JUDGED_TORCH_NOT_FOUND |")
    # The key facts the capture's report showed from the stack (CUDA, torch, NCCL, NVSHMEM, DeepEP) are unchanged.

    def cells(text, start):
        return [c.strip() for c in [line for line in text.splitlines() if line.startswith(start)][0].split("|")]

    header, old, new = cells(captured, "| node |"), cells(captured, "| gpu-node-1 |"), cells(md, "| gpu-node-1 |")
    for name in ("CUDA", "torch", "NCCL", "NVSHMEM", "DeepEP"):
        assert new[header.index(name)] == old[header.index(name)], name
    assert "## Not fully judged" in md
    assert "- **NOT JUDGED** `NOT_JUDGED_TORCH_NOT_FOUND` torch was not found with the interpreter the audit used" in md
    assert "  - why: torch was not found with /usr/bin/python3" in md
    assert "  - fix: Set audit_python to the interpreter" in md


def test_captured_no_profile_html_and_json_agree_with_the_markdown():
    fleet = captured_fleet()
    page = render_html(fleet)
    c = check(page)
    assert c.errors == [] and c.stack == [] and c.external == []
    assert set(c.hrefs) <= set(c.ids) and len(c.ids) == len(set(c.ids))
    text = " ".join(c.text)
    assert "1 nodes: 0 ok, 0 with findings, 1 not fully judged, 0 unreachable" in text
    assert "not fully judged" in text and 'class="badge s-not_judged"' in page
    assert '<div class="card not_judged"><b>1</b><span>not fully judged</span></div>' in page
    assert '<div class="card ok"' not in page                    # no node counted ok
    for gap in fleet["nodes"]["gpu-node-1"]["not_judged"]:
        assert gap["fix"] in text and gap["message"] in text and gap["title"] in text
    again = json.loads(render(fleet, "json"))
    assert again["summary"] == fleet["summary"] and again["summary"]["not_judged"] == 1
    assert [g["id"] for g in again["nodes"]["gpu-node-1"]["not_judged"]] == [
        "NOT_JUDGED_NO_PROFILE", "NOT_JUDGED_TORCH_NOT_FOUND"]


def test_the_same_node_with_its_profile_and_torch_environment_is_judged():
    h200 = yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / "h200.yml").read_text())
    expect = role_expect(dict(h200, audit_profile="h200"))
    result = captured_result()
    result["ansible_facts"]["gpufleet_stack"]["python"]["path"] = "/opt/torch/.venv/bin/python"
    result["ansible_facts"]["gpufleet_stack"]["torch"] = {
        "version": "2.9.1+cu130", "cuda": "13.0", "location": "/opt/torch/.venv/lib/python3.12/site-packages"}
    fleet = captured_fleet(expect, result)
    node = fleet["nodes"]["gpu-node-1"]
    assert node["not_judged"] == [] and node["status"] == "ok"
    assert fleet["summary"]["ok"] == 1 and fleet["summary"]["not_judged"] == 0
    assert "**1 nodes: 1 ok, 0 with findings, 0 not fully judged, 0 unreachable**" in render_markdown(fleet)


def test_not_judged_beside_findings_counts_the_node_both_ways():
    fleet = captured_fleet()
    doc = fleet["nodes"]["gpu-node-1"]["facts"]
    doc["gather_errors"] = {"gpufleet_rdma": "boom"}
    fleet = audit_fleet({"gpu-node-1": doc}, CATALOGUE)
    node = fleet["nodes"]["gpu-node-1"]
    assert node["status"] == "warning" and [f["id"] for f in node["findings"]] == ["FACTS_INCOMPLETE"]
    assert (fleet["summary"]["with_findings"], fleet["summary"]["not_judged"], fleet["summary"]["ok"]) == (1, 1, 0)
    md = render_markdown(fleet)
    assert "| FACTS_INCOMPLETE; not judged: NOT_JUDGED_NO_PROFILE, NOT_JUDGED_TORCH_NOT_FOUND |" in md
