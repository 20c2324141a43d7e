# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the audit's fleet document (``_audit.audit_fleet``) as Markdown and as one self-contained HTML page.

Pure controller-side logic. The HTML page has its CSS inline and loads nothing (no scripts, fonts or
images), so it opens offline. Every string that comes from a node (host names, fact values, error text)
is escaped. Each node's details show, beside its findings, what could not be judged on it (rules of kind
``not_judged``: such a node is "not fully judged", never plainly ok), the linkage of its DeepEP build checked against it
and its last verification (every figure beside its gate, the transport that ran): ``_audit.verification``.
"""

from __future__ import annotations

import html
import json

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.verification import linkage_rows, verify_rows

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


# --- Markdown ------------------------------------------------------------------------------------------

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


def render_markdown(fleet):
    meta = fleet.get("meta") or {}
    summary = fleet.get("summary") or {}
    nodes = fleet.get("nodes") or {}
    out = ["# DeepEP fleet audit", ""]
    if meta.get("generated_at"):
        out.append("Generated %s%s." % (meta["generated_at"],
                                        " from inventory %s" % meta["inventory"] if meta.get("inventory") else ""))
        out.append("")
    line = summary_line(summary)
    head, tail = line.split(" (findings: ", 1)
    out.append("**%s** (findings: %s" % (head, tail))
    out.append("")

    key_names = []
    for host in nodes:
        for item in nodes[host].get("key_facts") or []:
            if item["name"] not in key_names:
                key_names.append(item["name"])
    out += ["## Nodes", ""]
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

    out += _serving_markdown(nodes)
    out += _verification_summary_markdown(fleet)

    out += ["## Findings by severity", ""]
    rows = _findings_by_severity(fleet)
    if not rows:
        out += ["No findings.", ""]
    else:
        out.append("| severity | rule | title | nodes |")
        out.append("|---|---|---|---|")
        for severity, rule_id, title, hosts in rows:
            out.append("| %s | %s | %s | %s |" % (severity, rule_id, _md_cell(title), _md_cell(", ".join(hosts))))
        out.append("")

    gaps = _not_judged_by_rule(fleet)
    if gaps:
        out += ["## Not fully judged", "",
                "What the audit could not judge; these nodes are not counted ok until it can.", "",
                "| rule | what was not judged | fix | nodes |", "|---|---|---|---|"]
        for rule_id, title, fix, hosts in gaps:
            out.append("| %s | %s | %s | %s |" % (rule_id, _md_cell(title), _md_cell(fix), _md_cell(", ".join(hosts))))
        out.append("")

    out += ["## Drift", ""]
    drift = fleet.get("drift") or []
    if not drift:
        out += ["No drift between nodes of the same group.", ""]
    else:
        out.append("| group | fact | values (nodes) |")
        out.append("|---|---|---|")
        for row in drift:
            held = "; ".join("%s: %s" % (_value(v["value"]), ", ".join(v["nodes"])) for v in row["values"])
            out.append("| %s | %s | %s |" % (_md_cell(row["group"]), _md_cell(row["fact"]), _md_cell(held)))
        out.append("")

    unreachable = [h for h in sorted(nodes) if not nodes[h].get("reachable", True)]
    if unreachable:
        out += ["## Unreachable", ""]
        for host in unreachable:
            reason = (nodes[host].get("facts") or {}).get("unreachable_reason")
            out.append("- %s%s" % (host, ": %s" % _md_cell(reason) if reason else ""))
        out.append("")

    out += ["## Node details", ""]
    for host in _sorted_hosts(fleet):
        node = nodes[host]
        out.append("### %s (%s)" % (host, _label(node.get("status"))))
        out.append("")
        if node.get("groups"):
            out += ["Groups: %s" % ", ".join(node["groups"]), ""]
        if not node.get("reachable", True):
            out += ["Not reachable: no facts gathered.", ""]
            out += _verify_markdown(node)
            continue
        if not node.get("findings"):
            out += ["No findings.", ""]
        for finding in node.get("findings") or []:
            out.append("- **%s** `%s` %s" % (finding["severity"].upper(), finding["id"], finding["title"]))
            if finding.get("evidence") not in (None, "", [], {}):
                out.append("  - evidence: `%s`" % _pretty(finding["evidence"]).replace("\n", "; ").replace("`", "'"))
            out.append("  - fix: %s" % finding["fix"])
            out.append("  - source: %s" % finding["source"])
        if node.get("findings"):
            out.append("")
        if node.get("not_judged"):
            out += ["Not judged on this node:", ""]
            for gap in node["not_judged"]:
                out.append("- **NOT JUDGED** `%s` %s" % (gap["id"], gap["title"]))
                if gap.get("message"):
                    out.append("  - why: %s" % _md_cell(gap["message"]))
                out.append("  - fix: %s" % gap["fix"])
                out.append("  - source: %s" % gap["source"])
            out.append("")
        out += _linkage_markdown(node) + _verify_markdown(node)
    return "\n".join(out).rstrip("\n") + "\n"


# --- HTML ----------------------------------------------------------------------------------------------

CSS = """
:root { --crit: #b42318; --crit-bg: #fef3f2; --warn: #b54708; --warn-bg: #fffaeb; --info: #175cd3;
  --info-bg: #eff8ff; --ok: #067647; --ok-bg: #ecfdf3; --down: #475467; --down-bg: #f2f4f7;
  --line: #d0d5dd; --muted: #667085; --ink: #101828; --nj: #6941c6; --nj-bg: #f4f3ff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--ink); margin: 0; background: #f9fafb; }
header { background: #101828; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header p { margin: 0; color: #d0d5dd; font-size: 13px; }
header nav { margin-top: 8px; font-size: 13px; } header nav a { color: #b2ddff; margin-right: 14px; }
main { padding: 20px 28px 40px; max-width: 1600px; }
h2 { font-size: 17px; margin: 28px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h2 .muted { font-size: 13px; font-weight: normal; margin-left: 8px; }
h3 { font-size: 15px; margin: 0; display: inline; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin-top: 4px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 16px; min-width: 120px; }
.card b { display: block; font-size: 24px; }
.card span { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card.ok b { color: var(--ok); } .card.critical b { color: var(--crit); } .card.warning b { color: var(--warn); }
.card.info b { color: var(--info); } .card.unreachable b { color: var(--down); }
.card.critical { border-top: 4px solid var(--crit); } .card.warning { border-top: 4px solid #f79009; }
.card.info { border-top: 4px solid #2e90fa; } .card.unreachable { border-top: 4px solid #98a2b3; }
.card.ok { border-top: 4px solid #17b26a; }
.card.not_judged b { color: var(--nj); } .card.not_judged { border-top: 4px solid #9e77ed; }
table { border-collapse: collapse; background: #fff; width: 100%; border: 1px solid var(--line); }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid #eaecf0; vertical-align: top; }
th { background: #f2f4f7; font-size: 12px; text-transform: uppercase; letter-spacing: .03em; color: #344054; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.zero { color: #98a2b3; }
tr.row-critical td:first-child { box-shadow: inset 4px 0 var(--crit); }
tr.row-warning td:first-child { box-shadow: inset 4px 0 #f79009; }
tr.row-info td:first-child { box-shadow: inset 4px 0 #2e90fa; }
tr.row-ok td:first-child { box-shadow: inset 4px 0 #17b26a; }
tr.row-unreachable td:first-child { box-shadow: inset 4px 0 #98a2b3; }
tr.row-not_judged td:first-child { box-shadow: inset 4px 0 #9e77ed; }
tr.row-critical { background: #fffbfa; } tr.row-unreachable { background: #f9fafb; }
td.host { font-weight: 600; white-space: nowrap; }
td.facts { white-space: nowrap; }
td.hosts { min-width: 180px; } td.hosts a { white-space: nowrap; }
.chips { display: flex; flex-wrap: wrap; gap: 4px; }
.chip { display: inline-block; padding: 0 6px; border-radius: 4px; font: 11px/18px ui-monospace, SFMono-Regular,
  Menlo, Consolas, monospace; white-space: nowrap; }
a.chip:hover { text-decoration: none; filter: brightness(.95); }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
pre { background: #f2f4f7; border-radius: 6px; padding: 8px 10px; margin: 6px 0 0; white-space: pre-wrap;
  word-break: break-word; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  white-space: nowrap; }
.s-critical { color: var(--crit); background: var(--crit-bg); border: 1px solid #fda29b; }
.s-warning { color: var(--warn); background: var(--warn-bg); border: 1px solid #fec84b; }
.s-info { color: var(--info); background: var(--info-bg); border: 1px solid #b2ddff; }
.s-ok { color: var(--ok); background: var(--ok-bg); border: 1px solid #75e0a7; }
.s-unreachable { color: var(--down); background: var(--down-bg); border: 1px solid #98a2b3; }
.s-not_judged { color: var(--nj); background: var(--nj-bg); border: 1px solid #bdb4fe; }
.node { background: #fff; border: 1px solid var(--line); border-radius: 8px; margin: 12px 0; padding: 12px 16px; }
.node.critical { border-left: 5px solid var(--crit); } .node.warning { border-left: 5px solid #f79009; }
.node.info { border-left: 5px solid #2e90fa; } .node.ok { border-left: 5px solid #17b26a; }
.node.unreachable { border-left: 5px solid #98a2b3; }
.node.not_judged { border-left: 5px solid #9e77ed; }
.node .groups { color: var(--muted); font-size: 12px; margin-left: 8px; }
.node .facts { color: #344054; font-size: 12px; margin: 6px 0 0; }
.node .facts span { margin-right: 14px; white-space: nowrap; } .node .facts b { color: var(--muted); font-weight: 500; }
.finding { border-left: 4px solid var(--line); padding: 6px 12px; margin: 10px 0; }
.finding.critical { border-color: var(--crit); background: #fffbfa; } .finding.warning { border-color: #f79009; }
.finding.info { border-color: #2e90fa; }
.finding.not_judged { border-color: #9e77ed; background: var(--nj-bg); }
.finding .title { font-weight: 600; }
.finding .id { color: var(--muted); font-size: 12px; margin-left: 6px; }
.fix { margin: 6px 0 0; } .fix b { color: var(--ok); }
.rulefix { color: #344054; font-size: 12px; margin-top: 2px; }
.source { color: var(--muted); font-size: 12px; margin-top: 4px; }
.values div { margin: 2px 0; } .values code { background: #f2f4f7; padding: 0 4px; border-radius: 4px; }
.values .odd code { background: var(--warn-bg); border: 1px solid #fec84b; }
.values .count { display: inline-block; min-width: 58px; color: var(--muted); font-size: 12px; }
.muted { color: var(--muted); }
h4 { font-size: 13px; margin: 14px 0 6px; color: #344054; }
table.sub { font-size: 12px; } .under { color: var(--crit); font-weight: 600; }
a { color: #175cd3; text-decoration: none; } a:hover { text-decoration: underline; }
"""


def _e(value):
    return html.escape(_text(value), quote=True)


def _anchor(host, rule_id=None):
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in str(host))
    if rule_id is None:
        return "node-" + safe
    return "node-%s--%s" % (safe, "".join(c if c.isalnum() or c in "-_" else "-" for c in str(rule_id)))


def _badge(status):
    status = status or "ok"
    return '<span class="badge s-%s">%s</span>' % (html.escape(status), html.escape(_label(status)))


def _chips(host, findings):
    """The node's findings as small severity-coloured rule ids, each linking to the finding's details."""
    return '<div class="chips">%s</div>' % "".join(
        '<a class="chip s-%s" href="#%s" title="%s">%s</a>'
        % (html.escape(f["severity"]), _anchor(host, f["id"]), _e(f["title"]), _e(f["id"])) for f in findings)


def _host_links(hosts):
    return ", ".join('<a href="#%s">%s</a>' % (_anchor(h), _e(h)) for h in hosts)


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def _linkage_html(node):
    rows = linkage_rows(node)
    if not rows:
        return []
    out = ['<h4>Linkage of the DeepEP build</h4>', '<table class="sub"><thead><tr><th>check</th><th>state</th>'
           '<th>expected</th><th>found</th><th>note</th></tr></thead><tbody>']
    for row in rows:
        cls = {"ok": "ok", "FAIL": "critical"}.get(row["state"], "unreachable")
        out.append('<tr class="row-%s"><td><code>%s</code></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>'
                   % (cls, _e(row["check"]), _e(row["state"]), _e(row["expected"]), _e(row["found"]),
                      _e(row["note"])))
    return out + ["</tbody></table>"]


def _verify_html(node):
    rows = verify_rows(node)
    if not rows:
        return []
    out = ['<h4>Last verification</h4>', '<table class="sub"><thead><tr><th>stage</th><th>scope</th>'
           '<th>figure (GB/s)</th><th>gate</th><th>transport</th><th>result</th></tr></thead><tbody>']
    for row in rows:
        cls = "ok" if row["result"] == "PASS" else "critical"
        figures = "".join("<div>%s <b>%s</b></div>" % (_e(f["label"]), _e(f["value"])) for f in row["figures"]) \
            or "-"
        gates = "".join("<div%s>%s</div>" % (' class="under"' if f["ok"] is False else "",
                                             "&ge; %s" % _e(f["gate"]) if f["gate"] is not None else "-")
                        for f in row["figures"]) or "-"
        transport = "-" if row["transport"] is None else "%s %s" % (
            _badge("ok") if row["transport_ok"] else '<span class="badge s-critical">not allowed</span>',
            _e(row["transport"]))
        reasons = "".join("<div class=\"rulefix\">%s</div>" % _e(r) for r in row["reasons"]) \
            if row["result"] != "PASS" else ""
        out.append('<tr class="row-%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s%s</td></tr>'
                   % (cls, _e(row["stage"]), _e(row["scope"]), figures, gates, transport, _e(row["result"]),
                      reasons))
    return out + ["</tbody></table>"]


def render_html(fleet):
    meta = fleet.get("meta") or {}
    summary = fleet.get("summary") or {}
    nodes = fleet.get("nodes") or {}
    rules_by_id = dict((r.get("id"), r) for r in fleet.get("rules") or [])
    parts = []
    add = parts.append
    add("<!DOCTYPE html>")
    add('<html lang="en">')
    add("<head>")
    add('<meta charset="utf-8">')
    add('<meta name="viewport" content="width=device-width, initial-scale=1">')
    add("<title>DeepEP fleet audit</title>")
    add("<style>%s</style>" % CSS)
    add("</head>")
    add("<body>")
    add("<header>")
    add("<h1>DeepEP fleet audit</h1>")
    sub = []
    if meta.get("generated_at"):
        sub.append("generated %s" % _e(meta["generated_at"]))
    if meta.get("inventory"):
        sub.append("inventory %s" % _e(meta["inventory"]))
    if meta.get("limit"):
        sub.append("limit %s" % _e(meta["limit"]))
    if meta.get("check_mode") is not None:
        sub.append("check mode" if meta.get("check_mode") else "read-only run")
    sub.append("%d rules" % len(fleet.get("rules") or []))
    add("<p>%s</p>" % " &middot; ".join(sub))
    gaps = _not_judged_by_rule(fleet)
    add('<nav><a href="#nodes">Nodes</a><a href="#findings">Findings by severity</a>%s<a href="#drift">Drift</a>'
        '<a href="#details">Node details</a></nav>' % ('<a href="#not-judged">Not fully judged</a>' if gaps else ""))
    add("</header>")
    add("<main>")

    add('<p class="muted" id="summary">%s</p>' % html.escape(summary_line(summary)))
    add('<div class="cards">')
    cards = [("nodes", summary.get("nodes", 0), ""), ("ok", summary.get("ok", 0), "ok"),
             ("with findings", summary.get("with_findings", 0), ""),
             ("not fully judged", summary.get("not_judged", 0), "not_judged"),
             ("unreachable", summary.get("unreachable", 0), "unreachable"),
             ("critical findings", summary.get("critical", 0), "critical"),
             ("warning findings", summary.get("warning", 0), "warning"),
             ("info findings", summary.get("info", 0), "info")]
    for label, value, cls in cards:
        add('<div class="card %s"><b>%d</b><span>%s</span></div>'
            % (cls if value else "", int(value or 0), html.escape(label)))
    add("</div>")

    # Node table: what is wrong where, at a glance (worst first), then the key versions.
    key_names = []
    for host in nodes:
        for item in nodes[host].get("key_facts") or []:
            if item["name"] not in key_names:
                key_names.append(item["name"])
    add('<h2 id="nodes">Nodes<span class="muted">worst first; a rule id links to its finding</span></h2>')
    add("<table>")
    add("<thead><tr><th>node</th><th>status</th><th>findings</th>%s</tr></thead>"
        % "".join("<th>%s</th>" % html.escape(n) for n in key_names))
    add("<tbody>")
    for host in _sorted_hosts(fleet):
        node = nodes[host]
        status = node.get("status") or "ok"
        values = dict((k["name"], k["value"]) for k in node.get("key_facts") or [])
        cells = ['<td class="host"><a href="#%s">%s</a></td>' % (_anchor(host), _e(host)),
                 "<td>%s</td>" % _badge(status)]
        if not node.get("reachable", True):
            reason = (node.get("facts") or {}).get("unreachable_reason")
            cells.append('<td class="muted" title="%s">not reachable (<a href="#%s">why</a>)</td>'
                         % (_e(reason or "unreachable"), _anchor(host)))
        elif node.get("findings") or node.get("not_judged"):
            gaps_here = [dict(g, severity="not_judged") for g in node.get("not_judged") or []]
            cells.append("<td>%s</td>" % _chips(host, list(node.get("findings") or []) + gaps_here))
        else:
            cells.append('<td class="muted">none</td>')
        for name in key_names:
            cells.append('<td class="facts">%s</td>' % _e(values.get(name)) if node.get("reachable", True)
                         else '<td class="muted">\u2014</td>')
        add('<tr class="row-%s">%s</tr>' % (html.escape(status), "".join(cells)))
    add("</tbody></table>")

    # Findings by rule, most severe first, with what to do once per rule.
    add('<h2 id="findings">Findings by severity</h2>')
    rows = _findings_by_severity(fleet)
    if not rows:
        add('<p class="muted">No findings.</p>')
    else:
        add("<table><thead><tr><th>severity</th><th>rule</th><th>title and fix</th><th>nodes</th></tr></thead><tbody>")
        fixes = {}
        for node in nodes.values():
            for finding in node.get("findings") or []:
                fixes.setdefault(finding["id"], finding.get("fix"))
        for severity, rule_id, title, hosts in rows:
            add('<tr class="row-%s"><td>%s</td><td><code>%s</code></td><td>%s<div class="rulefix">%s</div></td>'
                '<td class="hosts">%s <span class="muted">(%d)</span></td></tr>'
                % (html.escape(severity), _badge(severity), _e(rule_id), _e(title),
                   _e(fixes.get(rule_id) or (rules_by_id.get(rule_id) or {}).get("fix")), _host_links(hosts),
                   len(hosts)))
        add("</tbody></table>")

    # What could not be judged, by rule, with how to supply it.
    if gaps:
        add('<h2 id="not-judged">Not fully judged<span class="muted">what the audit could not judge; these nodes are '
            'not counted ok until it can</span></h2>')
        add("<table><thead><tr><th>rule</th><th>what was not judged, and the fix</th><th>nodes</th></tr></thead>"
            "<tbody>")
        for rule_id, title, fix, hosts in gaps:
            add('<tr class="row-not_judged"><td><code>%s</code></td><td>%s<div class="rulefix">%s</div></td>'
                '<td class="hosts">%s <span class="muted">(%d)</span></td></tr>'
                % (_e(rule_id), _e(title), _e(fix), _host_links(hosts), len(hosts)))
        add("</tbody></table>")

    # Drift: per group and fact, the value most nodes hold, then the odd values with their nodes.
    add('<h2 id="drift">Drift<span class="muted">facts that differ between nodes of the same group; the '
        'highlighted values are held by fewer nodes</span></h2>')
    drift = fleet.get("drift") or []
    if not drift:
        add('<p class="muted">No drift: the nodes of each group agree on every compared fact.</p>')
    else:
        add("<table><thead><tr><th>group</th><th>fact</th><th>values and the nodes that hold them</th></tr></thead>"
            "<tbody>")
        for row in drift:
            lines = []
            for index, held in enumerate(row["values"]):
                lines.append('<div class="%s"><span class="count">%s</span><code>%s</code> %s</div>'
                             % ("odd" if index else "majority", _plural(len(held["nodes"]), "node"),
                                html.escape(_value(held["value"])), _host_links(held["nodes"])))
            add('<tr><td>%s</td><td><code>%s</code></td><td class="values">%s</td></tr>'
                % (_e(row["group"]), _e(row["fact"]), "".join(lines)))
        add("</tbody></table>")

    # Node details
    add('<h2 id="details">Node details</h2>')
    for host in _sorted_hosts(fleet):
        node = nodes[host]
        status = node.get("status") or "ok"
        add('<section class="node %s" id="%s">' % (html.escape(status), _anchor(host)))
        groups = ", ".join(node.get("groups") or [])
        add("<h3>%s</h3> %s%s" % (_e(host), _badge(status),
                                  '<span class="groups">%s</span>' % html.escape(groups) if groups else ""))
        if node.get("reachable", True) and node.get("key_facts"):
            add('<div class="facts">%s</div>' % "".join(
                "<span><b>%s</b> %s</span>" % (_e(k["name"]), _e(k["value"])) for k in node["key_facts"]))
        if not node.get("reachable", True):
            reason = (node.get("facts") or {}).get("unreachable_reason")
            add('<p class="muted">Not reachable: no facts gathered.%s</p>'
                % (" %s" % _e(reason) if reason else ""))
        elif not node.get("findings"):
            add('<p class="muted">No findings.</p>')
        tail = _linkage_html(node) + _verify_html(node)
        for gap in node.get("not_judged") or []:
            add('<div class="finding not_judged" id="%s">' % _anchor(host, gap["id"]))
            add('<div>%s <span class="title">%s</span><span class="id">%s</span></div>'
                % (_badge("not_judged"), _e(gap["title"]), _e(gap["id"])))
            if gap.get("message"):
                add("<pre>%s</pre>" % html.escape(gap["message"]))
            add('<p class="fix"><b>Fix:</b> %s</p>' % _e(gap["fix"]))
            add('<div class="source">Source: %s</div>' % _e(gap["source"]))
            add("</div>")
        for finding in node.get("findings") or []:
            add('<div class="finding %s" id="%s">' % (html.escape(finding["severity"]), _anchor(host, finding["id"])))
            add('<div>%s <span class="title">%s</span><span class="id">%s</span></div>'
                % (_badge(finding["severity"]), _e(finding["title"]), _e(finding["id"])))
            if finding.get("evidence") not in (None, "", [], {}):
                add("<pre>%s</pre>" % html.escape(_pretty(finding["evidence"])))
            add('<p class="fix"><b>Fix:</b> %s</p>' % _e(finding["fix"]))
            add('<div class="source">Source: %s</div>' % _e(finding["source"]))
            add("</div>")
        for line in tail:
            add(line)
        add("</section>")

    add("</main>")
    add("</body>")
    add("</html>")
    return "\n".join(parts) + "\n"


def render(fleet, fmt):
    """``fmt``: ``md``/``markdown``, ``html`` or ``json``."""
    if fmt in ("md", "markdown"):
        return render_markdown(fleet)
    if fmt == "html":
        return render_html(fleet)
    if fmt == "json":
        return json.dumps(fleet, sort_keys=True, indent=2, default=str) + "\n"
    raise ValueError("format %r: expected one of md, html, json" % (fmt,))


# The options of audit_fleet_report (modules/audit_fleet_report.py documents them), validated by its action.
ARGUMENT_SPEC = dict(
    rules_file=dict(type="path", required=True),
    extra_rules=dict(type="list", elements="dict", default=[]),
    disabled_rules=dict(type="list", elements="str", default=[]),
    hosts=dict(type="list", elements="str"),
    result_var=dict(type="str", default="audit_r_node"),
    expect_var=dict(type="str", default="audit_expect"),
    model_var=dict(type="str", default="audit_r_model"),
    serving_var=dict(type="str", default="audit_r_serving"),
    groups=dict(type="dict"),
    skip_groups=dict(type="list", elements="str", default=["all", "ungrouped"]),
    output_dir=dict(type="path"),
    output_root=dict(type="path"),
    latest_link=dict(type="bool", default=False),
    verify_summary=dict(type="path"),
    meta=dict(type="dict", default={}),
    fail_on=dict(type="str", default="none", choices=["critical", "warning", "info", "none"]),
)
