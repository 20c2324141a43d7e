# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fleet report's Markdown and HTML share: statuses and their labels, the summary line, fact values as
text, and the fleet document's rows (hosts worst first, findings by severity, not-judged rules, key fact names)."""

from __future__ import annotations

import json

SEVERITIES = ("critical", "warning", "info")
STATUS_ORDER = {"unreachable": 0, "critical": 1, "warning": 2, "info": 3, "not_judged": 4, "ok": 5}
STATUS_LABEL = {"unreachable": "unreachable", "critical": "critical", "warning": "warning", "info": "info",
                "not_judged": "not fully judged", "ok": "ok"}


def _label(status):
    return STATUS_LABEL.get(status, status)


def summary_line(summary):
    """The fleet's one line: nodes ok, with findings, not fully judged, unreachable, and the findings by severity."""
    summary = summary or {}
    return ("%d nodes: %d ok, %d with findings, %d not fully judged, %d unreachable "
            "(findings: %d critical, %d warning, %d info)"
            % (summary.get("nodes", 0), summary.get("ok", 0), summary.get("with_findings", 0),
               summary.get("not_judged", 0), summary.get("unreachable", 0), summary.get("critical", 0),
               summary.get("warning", 0), summary.get("info", 0)))


def _text(value):
    """A fact value as one line of text (null as an em dash, lists and dicts as compact JSON)."""
    if value is None or value == "":
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return str(value)


def _value(value):
    """A fact value where absent and empty must not look alike (drift cells, evidence)."""
    if value is None:
        return "(absent)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return str(value)


def _pretty(value):
    """Evidence as short lines: ``key: value`` for a mapping, one item per line for a list of mappings."""
    if isinstance(value, dict):
        return "\n".join("%s: %s" % (k, _value(value[k])) for k in sorted(value, key=str))
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "\n".join(", ".join("%s: %s" % (k, _value(v[k])) for k in sorted(v, key=str)) for v in value)
    if isinstance(value, list):
        return "\n".join(_value(v) for v in value)
    return _value(value)


def _sorted_hosts(fleet):
    nodes = fleet.get("nodes") or {}
    return sorted(nodes, key=lambda h: (STATUS_ORDER.get(nodes[h].get("status"), 9), h))


def _findings_by_severity(fleet):
    """One row per rule that fired anywhere: (severity, rule id, title, [hosts]), most severe first."""
    rules = {}
    nodes = fleet.get("nodes") or {}
    for host in sorted(nodes):
        for finding in nodes[host].get("findings") or []:
            row = rules.setdefault(finding["id"], [finding["severity"], finding["id"], finding["title"], []])
            row[3].append(host)
    order = dict((s, i) for i, s in enumerate(SEVERITIES))
    return sorted((tuple(r) for r in rules.values()), key=lambda r: (order.get(r[0], 9), r[1]))


def _not_judged_by_rule(fleet):
    """One row per not-judged rule that fired anywhere: (rule id, title, fix, [hosts]), by rule id."""
    rules = {}
    nodes = fleet.get("nodes") or {}
    for host in sorted(nodes):
        for gap in nodes[host].get("not_judged") or []:
            rules.setdefault(gap["id"], [gap["id"], gap["title"], gap.get("fix"), []])[3].append(host)
    return [tuple(rules[key]) for key in sorted(rules)]


def _key_names(nodes):
    """The names of the key facts of every node, in the order they are first met."""
    names = []
    for host in nodes:
        for item in nodes[host].get("key_facts") or []:
            if item["name"] not in names:
                names.append(item["name"])
    return names
