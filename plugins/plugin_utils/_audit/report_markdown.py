# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's fleet document (``_audit.audit_fleet``) as Markdown: one function per section of the report.

Each node's details show, beside its findings, what could not be judged on it, the linkage of its DeepEP build
checked against it and its last verification (``_audit.verification``).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_text import (
    _findings_by_severity, _key_names, _label, _not_judged_by_rule, _pretty, _sorted_hosts, _text, _value,
    summary_line)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.verification import (
    linkage_rows,
    side_by_side_rows,
    verify_rows,
)


def _md_cell(value):
    return _text(value).replace("|", "\\|").replace("\n", " ")


def _serving_markdown(nodes):
    """The serving section: every SGLang unit (instance, rank, state, restarts, SGLang version) and every router's
    readiness and workers; nothing where no node is audited for serving."""
    units, routers = [], []
    for host in sorted(nodes):
        serving = (nodes[host].get("facts") or {}).get("gpufleet_serving")
        if not isinstance(serving, dict):
            continue
        for unit in serving.get("units") or []:
            units.append([host, unit.get("instance"), unit.get("rank"), unit.get("unit"),
                          "%s/%s" % (unit.get("active_state"), unit.get("sub_state")), unit.get("restarts"),
                          unit.get("sglang_version"), unit.get("error") or ""])
        router = serving.get("router")
        if isinstance(router, dict):
            unhealthy = [w.get("url") for w in router.get("workers") or [] if not w.get("is_healthy")]
            routers.append([host, router.get("url"), "yes" if router.get("ready") else "no (%s)" % (
                router.get("error") or router.get("readiness_status")), router.get("prefill_count"),
                router.get("decode_count"), ", ".join(unhealthy) or "none"])
    if not units and not routers:
        return []
    out = ["## Serving", ""]
    if units:
        out.append("| node | instance | rank | unit | state | restarts | SGLang | error |")
        out.append("|---|---|---|---|---|---|---|---|")
        out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in units]
        out.append("")
    if routers:
        out.append("| router node | url | ready | prefill workers | decode workers | unhealthy workers |")
        out.append("|---|---|---|---|---|---|")
        out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in routers]
        out.append("")
    return out


def _linkage_markdown(node):
    rows = linkage_rows(node)
    if not rows:
        return []
    out = ["Linkage of the DeepEP build (checked against this node):", "",
           "| check | state | expected | found | note |", "|---|---|---|---|---|"]
    for row in rows:
        out.append("| %s |" % " | ".join(_md_cell(row[k]) for k in ("check", "state", "expected", "found", "note")))
    return out + [""]


def _figure_text(figure):
    if figure["gate"] is None:
        return "%s %s" % (figure["label"], figure["value"])
    return "%s %s (gate >=%s%s)" % (figure["label"], figure["value"], figure["gate"],
                                    "" if figure["ok"] is not False else ", UNDER")


def _verify_markdown(node):
    rows = verify_rows(node)
    if not rows:
        return []
    out = ["Last verification (figures in GB/s beside their gates):", "",
           "| stage | scope | figures | transport | result |", "|---|---|---|---|---|"]
    for row in rows:
        transport = "-" if row["transport"] is None else "%s: %s" % (
            "ok" if row["transport_ok"] else "NOT ALLOWED", row["transport"])
        out.append("| %s |" % " | ".join(_md_cell(v) for v in (
            row["stage"], row["scope"], "; ".join(_figure_text(f) for f in row["figures"]) or "-", transport,
            row["result"])))
    for row in rows:
        for reason in row["reasons"] if row["result"] != "PASS" else []:
            out.append("- %s (%s): %s" % (_md_cell(row["scope"]), row["stage"], _md_cell(reason)))
    return out + [""]


def _side_by_side_markdown(node):
    rows = side_by_side_rows(node)
    if not rows:
        return []
    out = ["EP backends side by side (same node, same GPUs; GB/s):", "",
           "| mode | backend | dispatch | combine | against the first | result |", "|---|---|---|---|---|---|"]
    for row in rows:
        cells = [row[key] for key in ("mode", "backend", "dispatch", "combine", "against", "result")]
        out.append("| %s |" % " | ".join(_md_cell(cell) for cell in cells))
    return out + [""]


def _verification_summary_markdown(fleet):
    verification = fleet.get("verification")
    if not verification:
        return []
    counts = verification.get("counts") or {}
    out = ["## Verification", "",
           "Last verification%s: %s, %s of %s checks passed (per node under Node details)."
           % (" (%s)" % verification["source"] if verification.get("source") else "",
              "PASS" if verification.get("passed") else "FAIL", counts.get("passed", 0), counts.get("total", 0))]
    if verification.get("other_hosts"):
        out.append("Verified but not in this audit: %s." % ", ".join(verification["other_hosts"]))
    return out + [""]


def _title_markdown(fleet):
    meta = fleet.get("meta") or {}
    out = ["# DeepEP fleet audit", ""]
    if meta.get("generated_at"):
        out.append("Generated %s%s." % (meta["generated_at"],
                                        " from inventory %s" % meta["inventory"] if meta.get("inventory") else ""))
        out.append("")
    line = summary_line(fleet.get("summary") or {})
    head, tail = line.split(" (findings: ", 1)
    out.append("**%s** (findings: %s" % (head, tail))
    out.append("")
    return out


def _nodes_markdown(fleet):
    """The node table, worst first: status, counts by severity, the findings' rule ids, then the key facts."""
    nodes = fleet.get("nodes") or {}
    key_names = _key_names(nodes)
    out = ["## Nodes", ""]
    header = ["node", "status", "critical", "warning", "info", "findings"] + key_names
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for host in _sorted_hosts(fleet):
        node = nodes[host]
        values = dict((k["name"], k["value"]) for k in node.get("key_facts") or [])
        counts = node.get("counts") or {}
        listed = [f["id"] for f in node.get("findings") or []]
        if node.get("not_judged"):
            listed.append("not judged: " + ", ".join(g["id"] for g in node["not_judged"]))
        row = [host, _label(node.get("status")), counts.get("critical", 0), counts.get("warning", 0),
               counts.get("info", 0), "; ".join(listed)]
        row += [values.get(name) for name in key_names]
        out.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    out.append("")
    return out


def _findings_markdown(fleet):
    out = ["## Findings by severity", ""]
    rows = _findings_by_severity(fleet)
    if not rows:
        return out + ["No findings.", ""]
    out.append("| severity | rule | title | nodes |")
    out.append("|---|---|---|---|")
    for severity, rule_id, title, hosts in rows:
        out.append("| %s | %s | %s | %s |" % (severity, rule_id, _md_cell(title), _md_cell(", ".join(hosts))))
    out.append("")
    return out


def _not_judged_markdown(fleet):
    gaps = _not_judged_by_rule(fleet)
    if not gaps:
        return []
    out = ["## Not fully judged", "",
           "What the audit could not judge; these nodes are not counted ok until it can.", "",
           "| rule | what was not judged | fix | nodes |", "|---|---|---|---|"]
    for rule_id, title, fix, hosts in gaps:
        out.append("| %s | %s | %s | %s |" % (rule_id, _md_cell(title), _md_cell(fix), _md_cell(", ".join(hosts))))
    out.append("")
    return out


def _drift_markdown(fleet):
    out = ["## Drift", ""]
    drift = fleet.get("drift") or []
    if not drift:
        return out + ["No drift between nodes of the same group.", ""]
    out.append("| group | fact | values (nodes) |")
    out.append("|---|---|---|")
    for row in drift:
        held = "; ".join("%s: %s" % (_value(v["value"]), ", ".join(v["nodes"])) for v in row["values"])
        out.append("| %s | %s | %s |" % (_md_cell(row["group"]), _md_cell(row["fact"]), _md_cell(held)))
    out.append("")
    return out


def _unreachable_markdown(nodes):
    unreachable = [h for h in sorted(nodes) if not nodes[h].get("reachable", True)]
    if not unreachable:
        return []
    out = ["## Unreachable", ""]
    for host in unreachable:
        reason = (nodes[host].get("facts") or {}).get("unreachable_reason")
        out.append("- %s%s" % (host, ": %s" % _md_cell(reason) if reason else ""))
    out.append("")
    return out


def _findings_of_node_markdown(node):
    out = []
    for finding in node.get("findings") or []:
        out.append("- **%s** `%s` %s" % (finding["severity"].upper(), finding["id"], finding["title"]))
        if finding.get("evidence") not in (None, "", [], {}):
            out.append("  - evidence: `%s`" % _pretty(finding["evidence"]).replace("\n", "; ").replace("`", "'"))
        out.append("  - fix: %s" % finding["fix"])
        out.append("  - source: %s" % finding["source"])
    if node.get("findings"):
        out.append("")
    return out


def _not_judged_of_node_markdown(node):
    if not node.get("not_judged"):
        return []
    out = ["Not judged on this node:", ""]
    for gap in node["not_judged"]:
        out.append("- **NOT JUDGED** `%s` %s" % (gap["id"], gap["title"]))
        if gap.get("message"):
            out.append("  - why: %s" % _md_cell(gap["message"]))
        out.append("  - fix: %s" % gap["fix"])
        out.append("  - source: %s" % gap["source"])
    out.append("")
    return out


def _node_markdown(host, node):
    """One node's details: its groups, then (reachable) its findings, what was not judged and the linkage, then its
    last verification."""
    out = ["### %s (%s)" % (host, _label(node.get("status"))), ""]
    if node.get("groups"):
        out += ["Groups: %s" % ", ".join(node["groups"]), ""]
    if not node.get("reachable", True):
        return out + ["Not reachable: no facts gathered.", ""] + _verify_markdown(node) + _side_by_side_markdown(node)
    if not node.get("findings"):
        out += ["No findings.", ""]
    out += _findings_of_node_markdown(node) + _not_judged_of_node_markdown(node)
    return out + _linkage_markdown(node) + _verify_markdown(node) + _side_by_side_markdown(node)


def render_markdown(fleet):
    nodes = fleet.get("nodes") or {}
    out = _title_markdown(fleet) + _nodes_markdown(fleet)
    out += _serving_markdown(nodes)
    out += _verification_summary_markdown(fleet)
    out += _findings_markdown(fleet) + _not_judged_markdown(fleet) + _drift_markdown(fleet)
    out += _unreachable_markdown(nodes)
    out += ["## Node details", ""]
    for host in _sorted_hosts(fleet):
        out += _node_markdown(host, nodes[host])
    return "\n".join(out).rstrip("\n") + "\n"
