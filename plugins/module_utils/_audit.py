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
false, not an empty string/list/object). Besides the standard jmespath functions the conditions may use:

``version_cmp(a, b)``
    -1, 0 or 1 comparing two version strings numerically (``2.28.9`` < ``2.30.4``, ``2.11.0+cu130`` ==
    ``2.11.0``); null when either side is missing or has no number.
``arch_covers(built, needed)``
    true when every arch of ``needed`` is in ``built`` (lists or strings such as ``9.0;10.0``, ``9.0a``,
    ``90``, ``sm_90``); null when either side is missing.
``arch_list(value)``
    the normalised arch list (``["9.0", "10.0"]``) of a list or string; null when missing.
``to_int(value)``
    the integer of a number or a decimal string; null otherwise (``to_number`` also accepts floats).
``mod(a, b)``, ``int_div(a, b)``
    ``a % b`` and ``a // b`` of integers (or decimal strings); null when either is missing or ``b`` is 0
    (layout rules: attention heads divisible by the attention TP size, TP by the node count).
``without_prefix(strings, prefix)``
    the strings of a list that do not start with ``prefix`` (``[]`` when the list is missing; every
    string when the prefix is null or empty is not wanted, so then ``[]``).
``unique(list)``
    the list without repeated values, first occurrence kept (``[]`` when missing).
``difference(a, b)``
    the values of list ``a`` that are not in list ``b``, in order (``[]`` when ``a`` is missing).

One engine judges more than the audit: a rule's ``when`` names the contexts it applies in (``audit``, the
default, and ``preflight``, the checks of the preflight role before anything is installed). A rule with
``each`` (a jmespath expression giving a list) is judged once per item, with the item as ``item`` in the
document. A rule with ``message`` (a Python format string over the keys of its evidence, which must then
be a mapping) gives each finding a ``message`` naming the values it found.
"""

from __future__ import annotations

import re
import traceback

from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    VersionError,
    compare_versions,
)

try:
    import jmespath
    from jmespath import functions as _jp_functions

    HAS_JMESPATH = True
    JMESPATH_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised only without jmespath
    jmespath = None
    _jp_functions = None
    HAS_JMESPATH = False
    JMESPATH_IMPORT_ERROR = traceback.format_exc()


SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
RULE_KEYS_REQUIRED = ("id", "title", "severity", "condition", "fix", "source")
RULE_KEYS_OPTIONAL = ("evidence", "description", "tags", "when", "each", "message")
CONTEXTS = ("audit", "preflight")
RULE_ID_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
DRIFT_KEYS_REQUIRED = ("name", "path")
DRIFT_KEYS_OPTIONAL = ("expand", "description")
# Inventory groups never compared for drift: everything is in them, nothing says they are alike.
DEFAULT_DRIFT_SKIP_GROUPS = ("all", "ungrouped")

_VERSION_RE = re.compile(r"(\d+(?:\.\d+)*)")
_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d+)(?:\.(\d+))?([a-z]?)(?:\+ptx)?$", re.IGNORECASE)


class AuditError(Exception):
    """A rule, a drift entry or a facts document is malformed; the message names it."""


def parse_version(value):
    """Return the numeric tuple of a version string (``"2.11.0+cu130"`` -> ``(2, 11, 0)``) or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        return None
    match = _VERSION_RE.search(value)
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def version_cmp(left, right):
    """Compare two version strings: -1, 0, 1, or None when either is not a version.

    Uses the collection's version rules (``_versions.compare_versions``: pre-releases sort before the
    release, ``+cu130`` labels are ignored); values they reject are compared by their leading numbers.
    """
    if left is None or right is None or isinstance(left, bool) or isinstance(right, bool):
        return None
    try:
        return compare_versions(left, right)
    except VersionError:
        pass
    a, b = parse_version(left), parse_version(right)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    a = a + (0,) * (width - len(a))
    b = b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def normalize_arch_list(value):
    """Return the sorted arch list ``["9.0", "10.0"]`` of a list or string, or None when missing.

    Accepts ``9.0``, ``9.0a``, ``90``, ``sm_90``, ``10.0+PTX``, separated by ``;``, ``,`` or spaces.
    Unknown tokens are kept verbatim so a comparison with them fails visibly.
    """
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        tokens = re.split(r"[;,\s]+", value.strip())
    elif isinstance(value, (list, tuple)):
        tokens = []
        for item in value:
            tokens.extend(re.split(r"[;,\s]+", str(item).strip()))
    else:
        return None
    out = set()
    for token in tokens:
        if not token:
            continue
        match = _ARCH_RE.fullmatch(token)
        if not match:
            out.add(token)
            continue
        major, minor = match.group(1), match.group(2)
        if minor is None:
            # "90" / "sm_100": the last digit is the minor version.
            if len(major) < 2:
                out.add(token)
                continue
            major, minor = major[:-1], major[-1]
        out.add("%d.%d" % (int(major), int(minor)))
    if not out:
        return None
    return sorted(out, key=lambda a: parse_version(a) or (999,))


def arch_covers(built, needed):
    """True when every arch in ``needed`` is in ``built``; None when either is missing."""
    have, want = normalize_arch_list(built), normalize_arch_list(needed)
    if have is None or want is None:
        return None
    return set(want).issubset(have)


def _to_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def without_prefix(strings, prefix):
    if not isinstance(strings, list) or not isinstance(prefix, str) or not prefix:
        return []
    return [s for s in strings if isinstance(s, str) and not s.startswith(prefix)]


def int_mod(left, right):
    """``left % right`` of two integers (or decimal strings); null when either is missing or ``right`` is 0."""
    a, b = _to_int(left), _to_int(right)
    if a is None or not b:
        return None
    return a % b


def int_div(left, right):
    """``left // right`` of two integers (or decimal strings); null when either is missing or ``right`` is 0."""
    a, b = _to_int(left), _to_int(right)
    if a is None or not b:
        return None
    return a // b


def unique(values):
    if not isinstance(values, list):
        return []
    out = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def difference(left, right):
    if not isinstance(left, list):
        return []
    right = right if isinstance(right, list) else []
    return [value for value in left if value not in right]


if HAS_JMESPATH:

    class _AuditFunctions(_jp_functions.Functions):
        """Extra jmespath functions available to rule conditions."""

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_version_cmp(self, left, right):
            return version_cmp(left, right)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_arch_covers(self, built, needed):
            return arch_covers(built, needed)

        @_jp_functions.signature({"types": []})
        def _func_arch_list(self, value):
            return normalize_arch_list(value)

        @_jp_functions.signature({"types": []})
        def _func_to_int(self, value):
            return _to_int(value)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_without_prefix(self, strings, prefix):
            return without_prefix(strings, prefix)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_mod(self, left, right):
            return int_mod(left, right)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_int_div(self, left, right):
            return int_div(left, right)

        @_jp_functions.signature({"types": []})
        def _func_unique(self, values):
            return unique(values)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_difference(self, left, right):
            return difference(left, right)

    _OPTIONS = jmespath.Options(custom_functions=_AuditFunctions())
else:  # pragma: no cover
    _OPTIONS = None


def _require_jmespath():
    if not HAS_JMESPATH:
        raise AuditError("the audit needs the Python library jmespath on the controller: %s" % JMESPATH_IMPORT_ERROR)


_COMPILED = {}


def compile_expression(expression, where):
    """Compile (and cache) a jmespath expression; errors name the rule or drift entry."""
    _require_jmespath()
    if not isinstance(expression, str) or not expression.strip():
        raise AuditError("%s: expected a non-empty jmespath expression string, got %r" % (where, expression))
    cached = _COMPILED.get(expression)
    if cached is None:
        try:
            cached = jmespath.compile(expression)
        except jmespath.exceptions.JMESPathError as exc:
            raise AuditError("%s: invalid jmespath expression %r: %s" % (where, expression, exc))
        _COMPILED[expression] = cached
    return cached


def search(expression, document, where="expression"):
    """Evaluate a jmespath expression (with the audit functions) over a document."""
    compiled = compile_expression(expression, where)
    try:
        return compiled.search(document, options=_OPTIONS)
    except jmespath.exceptions.JMESPathError as exc:
        raise AuditError("%s: evaluating %r failed: %s" % (where, expression, exc))


def truthy(value):
    """jmespath's notion of truth: false, null, empty strings, lists and objects are false."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict)) and not value:
        return False
    return True


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
    or null) and, for a rule with a message, the message. ``order``: ``severity`` (most severe first, then
    by id) or ``catalogue`` (the order of the rules, then of their items).
    """
    if not isinstance(document, dict):
        raise AuditError("facts document: expected a mapping, got %s" % type(document).__name__)
    if context not in CONTEXTS:
        raise AuditError("context %r is not one of %s" % (context, ", ".join(CONTEXTS)))
    if order not in ("severity", "catalogue"):
        raise AuditError("order %r is not severity or catalogue" % (order,))
    findings = []
    for rule in validate_rules(rules):
        if not applies(rule, context):
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
            findings.append(finding)
    if order == "severity":
        findings.sort(key=lambda f: (SEVERITY_RANK[f["severity"]], f["id"]))
    return findings


def severity_counts(findings):
    counts = dict((severity, 0) for severity in SEVERITIES)
    for finding in findings or []:
        counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
    return counts


def node_status(findings, reachable=True):
    """``unreachable``, ``critical``, ``warning``, ``info`` or ``ok`` (the worst finding wins)."""
    if not reachable:
        return "unreachable"
    if not findings:
        return "ok"
    return min((f["severity"] for f in findings), key=lambda s: SEVERITY_RANK[s])


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
        members = [h for h in (groups[group] or [])
                   if h in documents and documents[h].get("reachable", True) is not False]
        if len(members) < 2:
            continue
        per_fact = {}
        order = []
        for host in members:
            seen_here = set()
            for entry in entries:
                for fact, value in _drift_values(documents[host], entry):
                    seen_here.add(fact)
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
    return _one_row_per_difference(rows, documents, groups)


def _profile_names(documents, hosts):
    names = set()
    for host in hosts:
        expect = documents.get(host, {}).get("expect") if isinstance(documents.get(host), dict) else None
        if isinstance(expect, dict) and isinstance(expect.get("profile"), str):
            names.add(expect["profile"])
    return names


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
    findings, counts, key_facts, facts}}, drift: [...], summary: {nodes, ok, with_findings, unreachable,
    critical, warning, info}, rules: [{id, title, severity, source}]}``.
    """
    if not isinstance(documents, dict):
        raise AuditError("documents: expected a mapping of host to facts document, got %s"
                         % type(documents).__name__)
    rules, drift_entries, key_entries = split_catalogue(catalogue)
    rules = [rule for rule in rules if applies(rule, "audit")]
    nodes = {}
    summary = {"nodes": 0, "ok": 0, "with_findings": 0, "unreachable": 0,
               "critical": 0, "warning": 0, "info": 0}
    for host in sorted(documents):
        doc = documents[host]
        if not isinstance(doc, dict):
            raise AuditError("documents[%r]: expected a mapping, got %s" % (host, type(doc).__name__))
        reachable = doc.get("reachable", True) is not False
        findings = evaluate_rules(doc, rules) if reachable else []
        counts = severity_counts(findings)
        nodes[host] = {
            "status": node_status(findings, reachable),
            "reachable": reachable,
            "groups": list(doc.get("groups") or []),
            "findings": findings,
            "counts": counts,
            "key_facts": key_facts(doc, key_entries) if reachable else [],
            "facts": doc,
        }
        summary["nodes"] += 1
        if not reachable:
            summary["unreachable"] += 1
        elif findings:
            summary["with_findings"] += 1
        else:
            summary["ok"] += 1
        for severity in SEVERITIES:
            summary[severity] += counts[severity]
    drift = fleet_drift(documents, groups or {}, drift_entries, skip_groups) if groups else []
    return {
        "meta": dict(meta or {}),
        "summary": summary,
        "nodes": nodes,
        "drift": drift,
        "rules": [{"id": r["id"], "title": r["title"], "severity": r["severity"], "source": r["source"]}
                  for r in rules],
    }


# Facts of the node_stack result that go into the facts document as they are.
DOCUMENT_FACTS = ("gpufleet_nvidia", "gpufleet_rdma", "gpufleet_gpus", "gpufleet_bundled_nvshmem", "gpufleet_stack")
NOT_GATHERED = "the play failed on this node before its facts were gathered"


def _sglang_value(value):
    """``gpufleet_sglang`` of an environment without the sglang distribution is null, so the SGLANG_* rules judge only
    nodes that have SGLang."""
    return value if ((value or {}).get("versions") or {}).get("sglang") else None


def _registered_facts(name, result, doc):
    """Put the registered result of a facts module the audit runs on some nodes only (``model_config``,
    ``serve_state``; ``sglang_env`` where a play reads SGLang in its own task) into ``doc``.

    Not run (None, skipped): the node has nothing of it to audit and the key stays null. Failed: the reason goes under
    ``gather_errors``. ``gpufleet_sglang`` of an environment without the sglang distribution stays null too.
    """
    if not isinstance(result, dict) or not result or result.get("skipped"):
        return
    if result.get("failed") or result.get("unreachable"):
        doc["gather_errors"][name] = result.get("msg") or "failed"
        return
    facts = result.get("ansible_facts") if isinstance(result.get("ansible_facts"), dict) else {}
    value = facts.get(name)
    doc[name] = _sglang_value(value) if name == "gpufleet_sglang" else value


def node_document(host, groups, result, expect=None, sglang=None, model=None, serving=None):
    """One node's facts document from the registered result of ``node_stack`` (``gather`` of every set).

    ``gpufleet_sglang``: the ``gpufleet_sglang`` facts of ``result`` where node_stack gathered ``sglang`` (the audit
    role does on nodes the inventory gives SGLang; a failure to read them is already under its ``gather_errors``).
    ``sglang``: the registered result of a separate ``sglang_env`` (state facts), used only where ``result`` did not
    gather ``sglang``. ``model``: the registered result of ``model_config`` on a node the audit reads SGLang on
    (``gpufleet_model``). ``serving``: the registered result of ``serve_state`` on a node of the serving groups
    (``gpufleet_serving``). Each is null elsewhere.

    ``result`` None or empty: the node never got to the gathering task (reported as not reachable). An
    unreachable result gives ``reachable: false`` with the connection's message; a failed one keeps
    ``reachable: true`` and names the failure under ``gather_errors.node_stack``. ``gpufleet_nvshmem`` and
    ``gpufleet_deepep`` are the stack's ``nvshmem`` and ``deepep`` (the shapes of the build modules' facts).
    """
    result = result if isinstance(result, dict) else {}
    doc = {"host": host, "groups": list(groups or []), "reachable": True, "unreachable_reason": None,
           "expect": dict(expect or {}), "gather_errors": {}}
    if not result:
        doc.update(reachable=False, unreachable_reason=NOT_GATHERED)
    elif result.get("unreachable"):
        doc.update(reachable=False, unreachable_reason=result.get("msg") or "unreachable")
    facts = result.get("ansible_facts") if isinstance(result.get("ansible_facts"), dict) else {}
    if doc["reachable"]:
        errors = dict(result.get("gather_errors") or {})
        if result.get("failed") or result.get("skipped"):
            errors["node_stack"] = result.get("msg") or ("skipped" if result.get("skipped") else "failed")
        doc["gather_errors"] = errors
    for name in DOCUMENT_FACTS:
        doc[name] = facts.get(name) if doc["reachable"] else None
    stack = doc["gpufleet_stack"] if isinstance(doc["gpufleet_stack"], dict) else {}
    doc["gpufleet_nvshmem"] = stack.get("nvshmem")
    doc["gpufleet_deepep"] = stack.get("deepep")
    doc["gpufleet_sglang"] = doc["gpufleet_model"] = doc["gpufleet_serving"] = None
    if doc["reachable"]:
        if "gpufleet_sglang" in facts or "gpufleet_sglang" in doc["gather_errors"]:
            doc["gpufleet_sglang"] = _sglang_value(facts.get("gpufleet_sglang"))
        else:
            _registered_facts("gpufleet_sglang", sglang, doc)
        _registered_facts("gpufleet_model", model, doc)
        _registered_facts("gpufleet_serving", serving, doc)
    return doc


def plain_data(value):
    """Ansible's lazy containers and tagged strings -> plain dict/list/str (for jmespath, json and yaml)."""
    if isinstance(value, dict):
        return dict((str(k), plain_data(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value
