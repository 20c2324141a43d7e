# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit rule engine: functions, validation, evaluation, status, drift, fleet document, filters."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit import expr as _audit_expr
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import (
    AuditError,
    arch_covers,
    compile_expression,
    normalize_arch_list,
    search,
    version_cmp,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report import render
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import (
    audit_fleet,
    evaluate_rules,
    fleet_drift,
    node_status,
    validate_drift,
    validate_rules,
)

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())

RULE = {"id": "TORCH_OLD", "title": "old torch", "severity": "warning",
        "condition": "version_cmp(gpufleet_stack.torch.version, '2.10') == `-1`",
        "fix": "upgrade torch", "source": "test"}


# --- functions ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("left,right,expected", [
    ("2.28.9", "2.30.4", -1),
    ("2.30.7", "2.30.4", 1),
    ("2.30.4", "2.30.4", 0),
    ("2.11.0+cu130", "2.11.0", 0),
    ("2.30.4rc1", "2.30.4", -1),
    ("v3.5.19-1", "3.5.19", 1),
    ("release 2.30", "2.30.0", 0),   # not a version form _versions knows: leading numbers compared
    (None, "2.30.4", None),
    ("abc", "2.30.4", None),
    (True, "1", None),
])
def test_version_cmp(left, right, expected):
    assert version_cmp(left, right) == expected


@pytest.mark.parametrize("value,expected", [
    ("9.0", ["9.0"]),
    ("9.0a;10.0", ["9.0", "10.0"]),
    ("90 sm_100", ["9.0", "10.0"]),
    (["10.0+PTX", "8.0"], ["8.0", "10.0"]),
    ("10.0,9.0", ["9.0", "10.0"]),
    (None, None),
    ("", None),
    ([], None),
])
def test_normalize_arch_list(value, expected):
    assert normalize_arch_list(value) == expected


def test_arch_covers():
    assert arch_covers("9.0;10.0", "10.0") is True
    assert arch_covers("9.0", "10.0") is False
    assert arch_covers("90", "9.0a") is True
    assert arch_covers(None, "9.0") is None
    assert arch_covers("9.0", None) is None


def test_search_custom_functions():
    doc = {"a": "3", "names": ["mlx5_0", "rocep1s0"], "p": "mlx5"}
    assert search("to_int(a)", doc) == 3
    assert search("to_int('x')", doc) is None
    assert search("without_prefix(names, p)", doc) == ["rocep1s0"]
    assert search("without_prefix(missing, p)", doc) == []
    assert search("arch_list('90')", doc) == ["9.0"]


def test_search_bad_expression_names_it():
    with pytest.raises(AuditError, match=r"rule X condition: invalid jmespath expression 'a\.\.b'"):
        search("a..b", {}, "rule X condition")


# --- validation -----------------------------------------------------------------------------------------

def test_catalogue_is_valid():
    rules = validate_rules(CATALOGUE)
    assert len(rules) >= 16
    assert validate_drift(CATALOGUE)
    for rule in rules:
        assert rule["severity"] in ("critical", "warning", "info")


@pytest.mark.parametrize("change,message", [
    ({"severity": "fatal"}, "severity 'fatal' is not one of critical, warning, info"),
    ({"id": "lower_case"}, "must be UPPER_SNAKE_CASE"),
    ({"condition": "a[?"}, "invalid jmespath expression"),
    ({"fix": ""}, "missing required key"),
    ({"colour": "red"}, "unknown key"),
    ({"evidence": "a.."}, "evidence: invalid jmespath"),
])
def test_bad_rule_is_named(change, message):
    rule = dict(RULE, **change)
    with pytest.raises(AuditError, match=message):
        validate_rules([rule])


def test_duplicate_rule_id():
    with pytest.raises(AuditError, match="rule TORCH_OLD: duplicate id"):
        validate_rules([RULE, dict(RULE)])


def test_rules_must_be_a_list():
    with pytest.raises(AuditError, match="expected a list"):
        validate_rules("nope")
    with pytest.raises(AuditError, match="expected a mapping"):
        validate_rules(["nope"])


def test_bad_drift_entry():
    with pytest.raises(AuditError, match="drift entry #0: missing required key"):
        validate_drift([{"name": "x"}])
    with pytest.raises(AuditError, match="duplicate name 'x'"):
        validate_drift([{"name": "x", "path": "a"}, {"name": "x", "path": "b"}])


# --- evaluation -----------------------------------------------------------------------------------------

def test_evaluate_fires_and_orders_by_severity():
    rules = [dict(RULE, id="B_INFO", severity="info", condition="`true`"),
             dict(RULE, id="A_CRIT", severity="critical", condition="`true`"),
             dict(RULE, id="C_WARN", severity="warning", condition="`true`", evidence="host"),
             dict(RULE, id="D_QUIET", condition="`false`")]
    found = evaluate_rules({"host": "n1"}, rules)
    assert [f["id"] for f in found] == ["A_CRIT", "C_WARN", "B_INFO"]
    assert found[1]["evidence"] == "n1"
    assert found[0]["evidence"] is None
    assert set(found[0]) == {"id", "title", "severity", "fix", "source", "evidence"}


@pytest.mark.parametrize("value,fires", [
    (None, False), (False, False), ("", False), ([], False), ({}, False),
    (0, True), ("x", True), ([0], True), ({"a": 1}, True), (True, True),
])
def test_truthiness_is_jmespaths(value, fires):
    rule = dict(RULE, condition="v")
    assert bool(evaluate_rules({"v": value}, [rule])) is fires


def test_version_rule_on_documents():
    doc = {"gpufleet_stack": {"torch": {"version": "2.9.1+cu129"}}}
    assert [f["id"] for f in evaluate_rules(doc, [RULE])] == ["TORCH_OLD"]
    doc["gpufleet_stack"]["torch"]["version"] = "2.11.0+cu130"
    assert evaluate_rules(doc, [RULE]) == []
    assert evaluate_rules({}, [RULE]) == []


def test_evaluate_rejects_non_mapping():
    with pytest.raises(AuditError, match="facts document: expected a mapping"):
        evaluate_rules(["x"], [RULE])


def test_node_status():
    assert node_status([], True) == "ok"
    assert node_status([], False) == "unreachable"
    assert node_status([{"severity": "info"}, {"severity": "warning"}]) == "warning"
    assert node_status([{"severity": "info"}, {"severity": "critical"}]) == "critical"
    assert node_status([{"severity": "info"}]) == "info"
    # Nothing wrong found, but something not judged: never plainly ok; a finding still wins.
    assert node_status([], True, [{"id": "NOT_JUDGED_NO_PROFILE"}]) == "not_judged"
    assert node_status([{"severity": "warning"}], True, [{"id": "NOT_JUDGED_NO_PROFILE"}]) == "warning"
    assert node_status([], False, [{"id": "NOT_JUDGED_NO_PROFILE"}]) == "unreachable"


# --- drift ----------------------------------------------------------------------------------------------

def _node(host, **changes):
    doc = copy.deepcopy(HEALTHY)
    doc["host"] = host
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return doc


def test_drift_lists_differing_facts_with_nodes():
    docs = {
        "n1": _node("n1"),
        "n2": _node("n2"),
        "n3": _node("n3", gpufleet_stack__torch={"version": "2.11.0+cu130"},
                    gpufleet_nvidia__params={"EnableStreamMemOPs": 0, "RegistryDwords": "PeerMappingOverride=1;"}),
    }
    rows = fleet_drift(docs, {"b200": ["n1", "n2", "n3"], "all": ["n1", "n2", "n3"]}, CATALOGUE)
    by_fact = {r["fact"]: r for r in rows}
    assert set(by_fact) == {"torch", "driver_params.EnableStreamMemOPs"}
    assert all(r["group"] == "b200" for r in rows)       # "all" is skipped
    torch = by_fact["torch"]["values"]
    assert torch[0] == {"value": "2.9.1+cu129", "nodes": ["n1", "n2"]}   # majority first
    assert torch[1] == {"value": "2.11.0+cu130", "nodes": ["n3"]}
    params = by_fact["driver_params.EnableStreamMemOPs"]["values"]
    assert params == [{"value": 1, "nodes": ["n1", "n2"]}, {"value": 0, "nodes": ["n3"]}]


def test_drift_missing_fact_counts_and_unreachable_nodes_do_not():
    docs = {"n1": _node("n1"), "n2": _node("n2"), "n3": {"host": "n3", "reachable": False}}
    docs["n2"]["gpufleet_nvidia"]["params"]["NewParam"] = 7
    rows = fleet_drift(docs, {"g": ["n1", "n2", "n3"]}, CATALOGUE)
    assert rows == [{"group": "g", "fact": "driver_params.NewParam",
                     "values": [{"value": None, "nodes": ["n1"]}, {"value": 7, "nodes": ["n2"]}]}]


def test_drift_identical_nodes_and_small_groups():
    docs = {"n1": _node("n1"), "n2": _node("n2")}
    assert fleet_drift(docs, {"g": ["n1", "n2"]}, CATALOGUE) == []
    docs["n2"]["gpufleet_stack"]["env_script"]["sha256"] = "d" * 64
    assert fleet_drift(docs, {"solo": ["n1"], "other": ["n2", "absent-host"]}, CATALOGUE) == []
    rows = fleet_drift(docs, {"g": ["n1", "n2"]}, CATALOGUE)
    assert [r["fact"] for r in rows] == ["env_script_sha256"]


def test_drift_compares_nodes_of_one_profile_only():
    """A group holding nodes on two profiles (b200_cuda13 with its child profile b200_late2026, a newer stack) does not
    report their designed differences as drift; nodes of the same profile in it still drift, and so do nodes that
    name no profile."""
    late = {"expect": {"profile": "b200_late2026"}}
    docs = {
        "mid-1": _node("mid-1"), "mid-2": _node("mid-2", gpufleet_stack__torch={"version": "2.11.0+cu130"}),
        "late-1": _node("late-1", gpufleet_stack__torch={"version": "2.15.0+cu130"}, **{"expect": late["expect"]}),
        "late-2": _node("late-2", gpufleet_stack__torch={"version": "2.15.0+cu130"}, **{"expect": late["expect"]}),
    }
    for host in ("mid-1", "mid-2"):
        docs[host]["expect"] = {"profile": "b200_cuda13"}
    rows = fleet_drift(docs, {"b200_cuda13": ["mid-1", "mid-2", "late-1", "late-2"]}, CATALOGUE)
    assert [(r["fact"], [v["nodes"] for v in r["values"]]) for r in rows] == [("torch", [["mid-1"], ["mid-2"]])]
    docs["mid-2"]["gpufleet_stack"]["torch"]["version"] = "2.9.1+cu129"
    assert fleet_drift(docs, {"b200_cuda13": ["mid-1", "mid-2", "late-1", "late-2"]}, CATALOGUE) == []
    for doc in docs.values():
        doc.pop("expect")
    assert [r["fact"] for r in fleet_drift(docs, {"g": ["mid-1", "late-1"]}, CATALOGUE)] == ["torch"]


def test_drift_values_compare_structures_by_content():
    docs = {"n1": {"x": {"a": 1, "b": [1, 2]}}, "n2": {"x": {"b": [1, 2], "a": 1}}}
    assert fleet_drift(docs, {"g": ["n1", "n2"]}, [{"name": "x", "path": "x"}]) == []
    docs["n2"]["x"]["b"] = [2, 1]
    assert len(fleet_drift(docs, {"g": ["n1", "n2"]}, [{"name": "x", "path": "x"}])) == 1


# --- fleet document -------------------------------------------------------------------------------------

def test_audit_fleet_document():
    docs = {"n1": _node("n1"), "n2": _node("n2", gpufleet_stack__torch={"version": "2.11.0+cu130"}),
            "n3": {"host": "n3", "groups": ["b200"], "reachable": False, "unreachable_reason": "ssh refused"}}
    fleet = audit_fleet(docs, CATALOGUE, groups={"b200": ["n1", "n2", "n3"]}, meta={"generated_at": "now"})
    assert fleet["summary"] == {"nodes": 3, "ok": 1, "with_findings": 1, "not_judged": 0, "unreachable": 1,
                                "critical": 1, "warning": 0, "info": 0}
    assert fleet["nodes"]["n1"]["not_judged"] == [] and fleet["nodes"]["n2"]["not_judged"] == []
    assert fleet["nodes"]["n1"]["status"] == "ok"
    assert fleet["nodes"]["n2"]["status"] == "critical"
    assert [f["id"] for f in fleet["nodes"]["n2"]["findings"]] == ["DEEPEP_TORCH_ABI"]
    assert fleet["nodes"]["n3"]["status"] == "unreachable"
    assert fleet["nodes"]["n3"]["findings"] == []
    assert [r["fact"] for r in fleet["drift"]] == ["torch"]
    assert fleet["meta"] == {"generated_at": "now"}
    key = dict((k["name"], k["value"]) for k in fleet["nodes"]["n1"]["key_facts"])
    assert key["torch"] == "2.9.1+cu129"
    assert key["GPUs"] == "8 x sm 10.0"
    assert key["NICs"] == "8/8 active, mlx5 roce"
    # The audit's rules (the catalogue's preflight rules are judged by the preflight role, not by the audit).
    assert {r["id"] for r in fleet["rules"]} == {r["id"] for r in CATALOGUE["rules"] if "audit" in r.get("when", ["audit"])}
    json.dumps(fleet)


def test_audit_fleet_with_a_bare_rule_list_has_no_drift():
    fleet = audit_fleet({"n1": {"gpufleet_stack": {"torch": {"version": "2.0"}}}}, [RULE], groups={"g": ["n1"]})
    assert fleet["nodes"]["n1"]["status"] == "warning"
    assert fleet["drift"] == []


def test_audit_fleet_rejects_bad_documents():
    with pytest.raises(AuditError, match="expected a mapping of host"):
        audit_fleet([], CATALOGUE)
    with pytest.raises(AuditError, match=r"documents\['n1'\]: expected a mapping"):
        audit_fleet({"n1": "x"}, CATALOGUE)


# --- filters --------------------------------------------------------------------------------------------

def test_filters():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.deepep.plugins.filter import audit_findings, fleet_drift as drift_filter

    filters = audit_findings.FilterModule().filters()
    assert set(filters) == {"audit_findings"}
    doc = _node("n1", gpufleet_stack__torch={"version": "2.11.0+cu130"})
    assert [f["id"] for f in filters["audit_findings"](doc, CATALOGUE)] == ["DEEPEP_TORCH_ABI"]
    with pytest.raises(AnsibleFilterError, match="audit_findings: rule #0: expected a mapping"):
        filters["audit_findings"](doc, ["x"])
    with pytest.raises(AnsibleFilterError, match="expected a facts document"):
        filters["audit_findings"]("x", CATALOGUE)
    # The fleet document and its renderings (the audit_fleet_report action's steps).
    fleet = audit_fleet({"n1": doc, "n2": _node("n2")}, CATALOGUE, groups={"g": ["n1", "n2"]})
    assert fleet["summary"]["with_findings"] == 1
    assert {host: node["status"] for host, node in fleet["nodes"].items()} == {"n1": "critical", "n2": "ok"}
    assert json.loads(render(fleet, "json"))["summary"] == fleet["summary"]
    assert render(fleet, "md").startswith("# DeepEP fleet audit") and "<!DOCTYPE html>" in render(fleet, "html")
    with pytest.raises(ValueError, match="format 'pdf'"):
        render(fleet, "pdf")

    fd = drift_filter.FilterModule().filters()["fleet_drift"]
    assert [r["fact"] for r in fd({"n1": doc, "n2": _node("n2")}, {"g": ["n1", "n2"]}, CATALOGUE)] == ["torch"]
    with pytest.raises(AnsibleFilterError, match="fleet_drift: drift entry #0"):
        fd({}, {}, [{"name": "x"}])


def test_jmespath_missing_is_reported(monkeypatch):
    monkeypatch.setattr(_audit_expr, "HAS_JMESPATH", False)
    monkeypatch.setattr(_audit_expr, "_COMPILED", {})
    with pytest.raises(AuditError, match="needs the Python library jmespath"):
        validate_rules([RULE])


def test_drift_seen_in_nested_groups_is_one_row_for_the_profile_group():
    """Cluster, profile and site-override groups holding the same nodes report one difference once."""
    docs = {h: _node(h) for h in ("n1", "n2", "n3")}
    for doc in docs.values():
        doc["expect"] = {"profile": "b200_gcp_cuda129"}
    docs["n3"]["gpufleet_stack"]["torch"] = {"version": "2.11.0+cu130"}
    groups = {"b200_cluster": ["n1", "n2", "n3"], "b200_gcp_cuda129": ["n1", "n2", "n3"],
              "fleetsim_b200_gcp_cuda129": ["n1", "n2", "n3"], "all": ["n1", "n2", "n3"]}
    rows = fleet_drift(docs, groups, CATALOGUE)
    assert [(r["group"], r["fact"]) for r in rows] == [("b200_gcp_cuda129", "torch")]
    assert rows[0]["values"][1] == {"value": "2.11.0+cu130", "nodes": ["n3"]}


def test_drift_without_a_profile_goes_to_the_smallest_group_and_other_differences_stay():
    docs = {h: _node(h) for h in ("n1", "n2", "n3", "n4")}
    docs["n2"]["gpufleet_stack"]["torch"] = {"version": "2.11.0+cu130"}
    docs["n4"]["gpufleet_stack"]["env_script"]["sha256"] = "d" * 64
    groups = {"site": ["n1", "n2", "n3", "n4"], "rack1": ["n1", "n2"], "rack1_copy": ["n1", "n2"]}
    rows = fleet_drift(docs, groups, CATALOGUE)
    got = sorted((r["group"], r["fact"]) for r in rows)
    # torch differs between n1 and n2: seen alike in rack1 and rack1_copy (kept once: rack1, by name), and
    # in site with other node lists (kept: a different view of the fleet); the env script differs in site only.
    assert got == [("rack1", "torch"), ("site", "env_script_sha256"), ("site", "torch")]


# --- rules of a backend -----------------------------------------------------------------------------------------

def test_a_rule_of_a_backend_is_judged_only_where_the_node_runs_it():
    rule = dict(RULE, id="V2_ONLY", backends=["deepep_v2"], condition="`true`")
    v2_expected = dict(HEALTHY, expect=dict(HEALTHY.get("expect") or {}, deepep_v2=True))
    v2_installed = dict(HEALTHY, gpufleet_deepep=dict(HEALTHY.get("gpufleet_deepep") or {}, generation="v2"))
    v1_installed = dict(HEALTHY, gpufleet_deepep=dict(HEALTHY.get("gpufleet_deepep") or {}, generation="v1"),
                        expect=dict(HEALTHY.get("expect") or {}, deepep_v2=False))
    assert [f["id"] for f in evaluate_rules(v2_expected, [rule])] == ["V2_ONLY"]
    assert [f["id"] for f in evaluate_rules(v2_installed, [rule])] == ["V2_ONLY"]
    assert evaluate_rules(v1_installed, [rule]) == []
    both = dict(rule, backends=["deepep_v1", "deepep_v2"])
    assert [f["id"] for f in evaluate_rules(v1_installed, [both])] == ["V2_ONLY"]


@pytest.mark.parametrize("backends", [[], "deepep_v2", ["mori_ep"], ["v2"]])
def test_a_rule_naming_no_known_backend_is_refused(backends):
    with pytest.raises(AuditError, match=r"rule TORCH_OLD: backends .* must be a non-empty list of deepep_v1, deepep_v2, nccl_ep"):
        validate_rules([dict(RULE, backends=backends)])


def test_the_v2_rules_say_their_backend_instead_of_spelling_where_it_runs():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import BACKENDS

    for name, descriptor in BACKENDS.items():
        compile_expression(descriptor["audit_runs"], name)
    for rule in CATALOGUE["rules"]:
        text = json.dumps(rule)
        assert "expect.deepep_v2 == `true` || gpufleet_deepep.generation" not in text, rule["id"]
        if "gpufleet_deepep_v2.checks" in text:
            assert rule.get("backends") == ["deepep_v2"], rule["id"]
