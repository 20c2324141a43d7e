# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit rule engine: judge one node's facts document against rules kept as data, and find drift.

Pure controller-side logic (no Ansible objects). The conditions are jmespath expressions evaluated
over one node's facts document::

    {"host": "b200-1", "groups": ["b200_cluster"], "reachable": true,
     "expect": {"hca_prefix": "mlx5", ...},            # profile expectations (inventory variables)
     "gather_errors": {"gpufleet_deepep": "..."},       # facts modules that failed on this node
     "gpufleet_nvidia": {...}, "gpufleet_rdma": {...}, "gpufleet_gpus": {...},
     "gpufleet_nvshmem": {...}, "gpufleet_bundled_nvshmem": {...}, "gpufleet_deepep": {...},
     "gpufleet_stack": {...}}

A rule fires when its ``condition`` evaluates to a true value in the jmespath sense (not null, not
false, not an empty string/list/object). The conditions may use the audit's own jmespath functions besides the
standard ones (``version_cmp``, ``arch_covers``, ``arch_list``, ``to_int``, ``mod``, ``int_div``,
``without_prefix``, ``unique``, ``difference``, ``cuda_floor``, ``fabric_refusal``, ``fabric_nccl_floor``,
``fabric_env_gaps``, ``fabric_offers``): they and the jmespath evaluation are in
``expr``; one node's facts document, built from the registered node_stack result, is made in ``document``.

One engine judges more than the audit: a rule's ``when`` names the contexts it applies in (``audit``, the
default, and ``preflight``, the checks of the preflight role before anything is installed). A rule's ``kind`` is
``finding`` (the default: something wrong on the node) or ``not_judged`` (something the audit could not judge there,
such as a node without a profile or without torch at the interpreter the audit used): the fleet document keeps those
apart from the findings, and a node with one is "not fully judged" instead of ok. A rule with
``each`` (a jmespath expression giving a list) is judged once per item, with the item as ``item`` in the
document. A rule with ``message`` (a Python format string over the keys of its evidence, which must then
be a mapping) gives each finding a ``message`` naming the values it found. A rule with ``backends`` (EP backend
names) is judged only on a node that runs one of them, as each backend's descriptor says (``audit_runs``, in
``_verify/backends.py``), so the rules of a backend do not each spell where it runs.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import (
    AuditError,
    compile_expression,
    search,
    truthy,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import BACKENDS

__all__ = [
    "SEVERITIES", "SEVERITY_RANK", "RULE_KEYS_REQUIRED", "RULE_KEYS_OPTIONAL", "CONTEXTS", "KINDS", "RULE_ID_RE",
    "DRIFT_KEYS_REQUIRED", "DRIFT_KEYS_OPTIONAL", "DEFAULT_DRIFT_SKIP_GROUPS", "validate_rules", "applies",
    "validate_drift", "evaluate_rules", "severity_counts", "node_status", "split_not_judged", "fleet_drift",
    "key_facts", "split_catalogue", "audit_fleet",
]

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
RULE_KEYS_REQUIRED = ("id", "title", "severity", "condition", "fix", "source")
RULE_KEYS_OPTIONAL = ("evidence", "description", "tags", "when", "each", "message", "kind", "backends")
CONTEXTS = ("audit", "preflight")
# finding: something wrong on the node; not_judged: something the audit could not judge on it (no expectations, a
# fact it could not read where it looked), reported apart so that such a node is not counted plainly ok.
KINDS = ("finding", "not_judged")
NOT_JUDGED = "not_judged"
RULE_ID_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
DRIFT_KEYS_REQUIRED = ("name", "path")
DRIFT_KEYS_OPTIONAL = ("expand", "description")
# Inventory groups never compared for drift: everything is in them, nothing says they are alike.
DEFAULT_DRIFT_SKIP_GROUPS = ("all", "ungrouped")


def validate_rules(rules):
    """Check a rule list (or a catalogue dict with ``rules``); return the list of rule dicts.

    Every rule needs id (UPPER_SNAKE, unique), title, severity (critical/warning/info), condition (a
    compilable jmespath expression), fix and source; ``evidence`` (jmespath) is optional.
    """
    if isinstance(rules, dict):
        rules = rules.get("rules")
    if not isinstance(rules, list):
        raise AuditError("rules: expected a list of rule mappings (or a catalogue with a 'rules' list), got %s"
                         % type(rules).__name__)
    seen = set()
    out = []
    for index, rule in enumerate(rules):
        where = "rule #%d" % index
        if not isinstance(rule, dict):
            raise AuditError("%s: expected a mapping, got %s" % (where, type(rule).__name__))
        rule_id = rule.get("id")
        if isinstance(rule_id, str):
            where = "rule %s" % rule_id
        missing = [key for key in RULE_KEYS_REQUIRED if not rule.get(key)]
        if missing:
            raise AuditError("%s: missing required key(s) %s" % (where, ", ".join(missing)))
        unknown = sorted(set(rule) - set(RULE_KEYS_REQUIRED) - set(RULE_KEYS_OPTIONAL))
        if unknown:
            raise AuditError("%s: unknown key(s) %s; expected %s" % (
                where, ", ".join(unknown), ", ".join(RULE_KEYS_REQUIRED + RULE_KEYS_OPTIONAL)))
        if not isinstance(rule_id, str) or not RULE_ID_RE.fullmatch(rule_id):
            raise AuditError("%s: id %r must be UPPER_SNAKE_CASE (e.g. NIC_PORT_DOWN)" % (where, rule_id))
        if rule_id in seen:
            raise AuditError("%s: duplicate id" % where)
        seen.add(rule_id)
        if rule["severity"] not in SEVERITIES:
            raise AuditError("%s: severity %r is not one of %s" % (where, rule["severity"], ", ".join(SEVERITIES)))
        compile_expression(rule["condition"], "%s condition" % where)
        if rule.get("evidence") is not None:
            compile_expression(rule["evidence"], "%s evidence" % where)
        if rule.get("each") is not None:
            compile_expression(rule["each"], "%s each" % where)
        if rule.get("kind", "finding") not in KINDS:
            raise AuditError("%s: kind %r is not one of %s" % (where, rule.get("kind"), ", ".join(KINDS)))
        backends = rule.get("backends")
        if backends is not None and (not isinstance(backends, list) or not backends
                                     or [b for b in backends if b not in BACKENDS]):
            raise AuditError("%s: backends %r must be a non-empty list of %s" % (where, backends, ", ".join(BACKENDS)))
        when = rule.get("when", ["audit"])
        if not isinstance(when, list) or not when or [c for c in when if c not in CONTEXTS]:
            raise AuditError("%s: when %r must be a non-empty list of %s" % (where, when, ", ".join(CONTEXTS)))
        if rule.get("message") is not None:
            if not isinstance(rule["message"], str) or not rule["message"].strip():
                raise AuditError("%s: message must be a non-empty format string, got %r" % (where, rule["message"]))
            if rule.get("evidence") is None:
                raise AuditError("%s: a message needs an evidence mapping to take its values from" % where)
        out.append(rule)
    return out


def applies(rule, context):
    """Whether a (validated) rule is judged in ``context`` (``audit`` unless its ``when`` says otherwise)."""
    return context in rule.get("when", ["audit"])


def _runs_a_backend_of(rule, document, runs):
    """Whether the node of ``document`` runs one of the rule's ``backends`` (every rule without any applies);
    ``runs`` keeps each backend's answer for the document."""
    for name in rule.get("backends") or ():
        if name not in runs:
            runs[name] = truthy(search(BACKENDS[name]["audit_runs"], document, "backend %s audit_runs" % name))
        if runs[name]:
            return True
    return not rule.get("backends")


def _message(rule, evidence, where):
    if not isinstance(evidence, dict):
        raise AuditError("%s: the evidence of a rule with a message must be a mapping, got %r" % (where, evidence))
    values = dict((key, "" if value is None else value) for key, value in evidence.items())
    try:
        return rule["message"].format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise AuditError("%s: message %r names a value the evidence lacks or is malformed: %s"
                         % (where, rule["message"], exc))


def validate_drift(entries):
    """Check the drift entries (name + jmespath path, optional ``expand`` for dict-valued facts)."""
    if isinstance(entries, dict):
        entries = entries.get("drift")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise AuditError("drift: expected a list of {name, path} mappings, got %s" % type(entries).__name__)
    seen = set()
    for index, entry in enumerate(entries):
        where = "drift entry #%d" % index
        if not isinstance(entry, dict):
            raise AuditError("%s: expected a mapping, got %s" % (where, type(entry).__name__))
        missing = [key for key in DRIFT_KEYS_REQUIRED if not entry.get(key)]
        if missing:
            raise AuditError("%s: missing required key(s) %s" % (where, ", ".join(missing)))
        unknown = sorted(set(entry) - set(DRIFT_KEYS_REQUIRED) - set(DRIFT_KEYS_OPTIONAL))
        if unknown:
            raise AuditError("%s: unknown key(s) %s" % (where, ", ".join(unknown)))
        if entry["name"] in seen:
            raise AuditError("%s: duplicate name %r" % (where, entry["name"]))
        seen.add(entry["name"])
        compile_expression(entry["path"], "drift %s" % entry["name"])
    return entries


def evaluate_rules(document, rules, context="audit", order="severity"):
    """Return the findings of one node: the rules of ``context`` whose condition holds.

    Each finding: id, title, severity, fix, source, evidence (the value of the rule's evidence expression,
    or null), for a rule with a message, the message, and for a rule of kind ``not_judged``, ``kind``. ``order``:
    ``severity`` (most severe first, then by id) or ``catalogue`` (the order of the rules, then of their items).
    """
    if not isinstance(document, dict):
        raise AuditError("facts document: expected a mapping, got %s" % type(document).__name__)
    if context not in CONTEXTS:
        raise AuditError("context %r is not one of %s" % (context, ", ".join(CONTEXTS)))
    if order not in ("severity", "catalogue"):
        raise AuditError("order %r is not severity or catalogue" % (order,))
    findings = []
    runs = {}
    for rule in validate_rules(rules):
        if not applies(rule, context) or not _runs_a_backend_of(rule, document, runs):
            continue
        where = "rule %s" % rule["id"]
        if rule.get("each") is None:
            docs = [document]
        else:
            items = search(rule["each"], document, "%s each" % where)
            docs = [dict(document, item=item) for item in (items if isinstance(items, list) else [])]
        for doc in docs:
            if not truthy(search(rule["condition"], doc, "%s condition" % where)):
                continue
            evidence = None
            if rule.get("evidence"):
                evidence = search(rule["evidence"], doc, "%s evidence" % where)
            finding = {
                "id": rule["id"],
                "title": rule["title"],
                "severity": rule["severity"],
                "fix": rule["fix"],
                "source": rule["source"],
                "evidence": evidence,
            }
            if rule.get("message") is not None:
                finding["message"] = _message(rule, evidence, where)
            if rule.get("kind", "finding") != "finding":
                finding["kind"] = rule["kind"]
            findings.append(finding)
    if order == "severity":
        findings.sort(key=lambda f: (SEVERITY_RANK[f["severity"]], f["id"]))
    return findings


def severity_counts(findings):
    counts = dict((severity, 0) for severity in SEVERITIES)
    for finding in findings or []:
        counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
    return counts


def node_status(findings, reachable=True, not_judged=()):
    """``unreachable``, ``critical``, ``warning``, ``info`` (the worst finding wins), ``not_judged`` (no finding, but
    something could not be judged) or ``ok``."""
    if not reachable:
        return "unreachable"
    if not findings:
        return NOT_JUDGED if not_judged else "ok"
    return min((f["severity"] for f in findings), key=lambda s: SEVERITY_RANK[s])


def split_not_judged(findings):
    """(the findings, what could not be judged) of :func:`evaluate_rules`' list."""
    return ([f for f in findings if f.get("kind") != NOT_JUDGED], [f for f in findings if f.get("kind") == NOT_JUDGED])


def _canonical(value):
    """A hashable, order-independent key for a fact value (dicts and lists compared by content)."""
    if isinstance(value, dict):
        return "{" + ",".join("%r:%s" % (k, _canonical(value[k])) for k in sorted(value, key=str)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    return repr(value)


def _drift_values(document, entry):
    """Yield (fact name, value) for one drift entry over one node's document."""
    value = search(entry["path"], document, "drift %s" % entry["name"])
    if entry.get("expand"):
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                yield "%s.%s" % (entry["name"], key), value[key]
        return
    yield entry["name"], value


def fleet_drift(documents, groups, drift_entries, skip_groups=DEFAULT_DRIFT_SKIP_GROUPS):
    """Every drift fact whose value differs between reachable nodes of the same group.

    ``documents``: host -> facts document (unreachable ones carry ``reachable: false`` and are skipped).
    ``groups``: group -> list of hosts (the inventory's groups; ``all``/``ungrouped`` are skipped).
    ``drift_entries``: the catalogue's drift list. A fact present on some nodes and absent on others is
    drift too (the absent nodes hold null).

    Returns a list of ``{group, fact, values: [{value, nodes}]}``, values ordered by how many nodes hold
    them (the majority first), sorted by group then fact. A difference seen the same way in several groups
    (nested groups holding the same nodes: cluster, profile, site overrides) is one row, for the group the
    nodes name as their profile (``expect.profile`` of their documents), else the smallest group, else the
    first by name.
    """
    entries = validate_drift(drift_entries)
    skip = set(skip_groups or ())
    rows = []
    for group in sorted(groups or {}):
        if group in skip:
            continue
        reachable = [h for h in (groups[group] or [])
                     if h in documents and documents[h].get("reachable", True) is not False]
        for members in _by_profile(documents, reachable):
            rows.extend(_group_drift(group, members, documents, entries))
    return _one_row_per_difference(rows, documents, groups)


def _by_profile(documents, hosts):
    """``hosts`` split by the profile their documents name (``expect.profile``; none is one more profile): nodes a
    group holds on different profiles (a child profile such as a newer stack under its parent's group) differ by
    design, so only nodes of one profile are compared."""
    parts = {}
    for host in hosts:
        parts.setdefault(_profile_of(documents.get(host)), []).append(host)
    return list(parts.values())


def _profile_of(document):
    """The profile a node's facts document names (``expect.profile``), or None."""
    expect = document.get("expect") if isinstance(document, dict) else None
    profile = expect.get("profile") if isinstance(expect, dict) else None
    return profile if isinstance(profile, str) else None


def _group_drift(group, members, documents, entries):
    """The drift rows of ``group`` among ``members`` (nodes of one profile)."""
    rows = []
    if len(members) < 2:
        return rows
    per_fact = {}
    order = []
    for host in members:
        for entry in entries:
            for fact, value in _drift_values(documents[host], entry):
                if fact not in per_fact:
                    per_fact[fact] = {}
                    order.append(fact)
                per_fact[fact][host] = value
    for fact in order:
        held = per_fact[fact]
        buckets = {}
        for host in members:
            value = held.get(host)
            key = _canonical(value)
            if key not in buckets:
                buckets[key] = {"value": value, "nodes": []}
            buckets[key]["nodes"].append(host)
        if len(buckets) < 2:
            continue
        values = sorted(buckets.values(), key=lambda b: (-len(b["nodes"]), b["nodes"][0]))
        rows.append({"group": group, "fact": fact, "values": values})
    return rows


def _profile_names(documents, hosts):
    return set(_profile_of(documents.get(host)) for host in hosts) - {None}


def _one_row_per_difference(rows, documents, groups):
    """Collapse rows that show one difference (same fact, same values on the same nodes) in several groups."""
    chosen = {}
    for index, row in enumerate(rows):
        signature = (row["fact"], tuple((_canonical(b["value"]), tuple(b["nodes"])) for b in row["values"]))
        hosts = [host for b in row["values"] for host in b["nodes"]]
        rank = (0 if row["group"] in _profile_names(documents, hosts) else 1,
                len(groups.get(row["group"]) or []), row["group"])
        if signature not in chosen or rank < chosen[signature][0]:
            chosen[signature] = (rank, index)
    kept = set(index for dummy, index in chosen.values())
    return [row for index, row in enumerate(rows) if index in kept]


def key_facts(document, entries):
    """The catalogue's ``key_facts`` (name, path) evaluated over one node's document: [{name, value}]."""
    out = []
    for entry in validate_drift(entries or []):
        value = search(entry["path"], document, "key fact %s" % entry["name"])
        out.append({"name": entry["name"], "value": value})
    return out


def split_catalogue(catalogue):
    """(rules, drift entries, key facts) of a catalogue mapping, or of a bare rule list."""
    if isinstance(catalogue, dict):
        return (validate_rules(catalogue.get("rules")), validate_drift(catalogue.get("drift") or []),
                validate_drift(catalogue.get("key_facts") or []))
    return validate_rules(catalogue), [], []


def audit_fleet(documents, catalogue, groups=None, skip_groups=DEFAULT_DRIFT_SKIP_GROUPS, meta=None):
    """Judge every node and find drift: the fleet document the report renders.

    ``documents``: host -> facts document (``reachable: false`` for nodes that could not be reached);
    ``catalogue``: the rules catalogue (``rules``, ``drift``, ``key_facts``) or a bare rule list;
    ``groups``: group -> hosts for drift. Returns ``{meta, nodes: {host: {status, reachable, groups,
    findings, not_judged, counts, key_facts, facts}}, drift: [...], summary: {nodes, ok, with_findings, not_judged,
    unreachable, critical, warning, info}, rules: [{id, title, severity, source, kind}]}``.

    ``not_judged`` of a node: the findings of the rules of kind ``not_judged`` (what could not be judged there, each
    with its message and fix); they are not counted by severity. ``ok`` counts the reachable nodes with neither
    findings nor anything not judged; ``not_judged`` every reachable node with something not judged (with findings or
    not), so that a node the audit could not fully judge is never reported plainly ok.
    """
    if not isinstance(documents, dict):
        raise AuditError("documents: expected a mapping of host to facts document, got %s"
                         % type(documents).__name__)
    rules, drift_entries, key_entries = split_catalogue(catalogue)
    rules = [rule for rule in rules if applies(rule, "audit")]
    nodes = {}
    summary = {"nodes": 0, "ok": 0, "with_findings": 0, "not_judged": 0, "unreachable": 0,
               "critical": 0, "warning": 0, "info": 0}
    for host in sorted(documents):
        doc = documents[host]
        if not isinstance(doc, dict):
            raise AuditError("documents[%r]: expected a mapping, got %s" % (host, type(doc).__name__))
        reachable = doc.get("reachable", True) is not False
        findings, not_judged = split_not_judged(evaluate_rules(doc, rules) if reachable else [])
        counts = severity_counts(findings)
        nodes[host] = {
            "status": node_status(findings, reachable, not_judged),
            "reachable": reachable,
            "groups": list(doc.get("groups") or []),
            "findings": findings,
            "not_judged": not_judged,
            "counts": counts,
            "key_facts": key_facts(doc, key_entries) if reachable else [],
            "facts": doc,
        }
        summary["nodes"] += 1
        if not reachable:
            summary["unreachable"] += 1
        elif findings:
            summary["with_findings"] += 1
        elif not not_judged:
            summary["ok"] += 1
        if reachable and not_judged:
            summary["not_judged"] += 1
        for severity in SEVERITIES:
            summary[severity] += counts[severity]
    drift = fleet_drift(documents, groups or {}, drift_entries, skip_groups) if groups else []
    return {
        "meta": dict(meta or {}),
        "summary": summary,
        "nodes": nodes,
        "drift": drift,
        "rules": [{"id": r["id"], "title": r["title"], "severity": r["severity"], "source": r["source"],
                   "kind": r.get("kind", "finding")} for r in rules],
    }
