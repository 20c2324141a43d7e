# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's fleet document (``_audit.audit_fleet``) as one self-contained HTML page, one function per section.

The page has its CSS inline and loads nothing (no scripts, fonts or images), so it opens offline. Every string that
comes from a node (host names, fact values, error text) is escaped. Each node's details show, beside its findings,
what could not be judged on it (rules of kind ``not_judged``: such a node is "not fully judged", never plainly ok),
the linkage of its DeepEP build checked against it and its last verification (every figure beside its gate, the
transport that ran): ``_audit.verification``.
"""

from __future__ import annotations

import html

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_text import (
    _findings_by_severity, _key_names, _label, _not_judged_by_rule, _pretty, _sorted_hosts, _text, _value,
    summary_line)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.verification import (
    linkage_rows,
    side_by_side_rows,
    verify_rows,
)

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


def _side_by_side_html(node):
    rows = side_by_side_rows(node)
    if not rows:
        return []
    out = ['<h4>EP backends side by side (same node, same GPUs)</h4>', '<table class="sub"><thead><tr><th>mode</th>'
           '<th>backend</th><th>dispatch (GB/s)</th><th>combine (GB/s)</th><th>against the first</th><th>result</th>'
           '</tr></thead><tbody>']
    for row in rows:
        out.append('<tr class="row-%s">%s</tr>' % ("ok" if row["result"] == "PASS" else "critical", "".join(
            "<td>%s</td>" % _e(row[key]) for key in ("mode", "backend", "dispatch", "combine", "against", "result"))))
    return out + ["</tbody></table>"]


def _head_html(fleet, gaps):
    """From the doctype to the page's header: the title, what the run was (time, inventory, limit, mode, rules) and
    the section links."""
    meta = fleet.get("meta") or {}
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>DeepEP fleet audit</title>", "<style>%s</style>" % CSS, "</head>", "<body>", "<header>",
             "<h1>DeepEP fleet audit</h1>"]
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
    parts.append("<p>%s</p>" % " &middot; ".join(sub))
    parts.append('<nav><a href="#nodes">Nodes</a><a href="#findings">Findings by severity</a>%s<a href="#drift">'
                 'Drift</a><a href="#details">Node details</a></nav>'
                 % ('<a href="#not-judged">Not fully judged</a>' if gaps else ""))
    parts.append("</header>")
    return parts


def _summary_html(summary):
    """The summary line and one card per count."""
    parts = ['<p class="muted" id="summary">%s</p>' % html.escape(summary_line(summary)), '<div class="cards">']
    cards = [("nodes", summary.get("nodes", 0), ""), ("ok", summary.get("ok", 0), "ok"),
             ("with findings", summary.get("with_findings", 0), ""),
             ("not fully judged", summary.get("not_judged", 0), "not_judged"),
             ("unreachable", summary.get("unreachable", 0), "unreachable"),
             ("critical findings", summary.get("critical", 0), "critical"),
             ("warning findings", summary.get("warning", 0), "warning"),
             ("info findings", summary.get("info", 0), "info")]
    for label, value, cls in cards:
        parts.append('<div class="card %s"><b>%d</b><span>%s</span></div>'
                     % (cls if value else "", int(value or 0), html.escape(label)))
    parts.append("</div>")
    return parts


def _node_row_html(host, node, key_names):
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
    return '<tr class="row-%s">%s</tr>' % (html.escape(status), "".join(cells))


def _nodes_html(fleet):
    """The node table: what is wrong where, at a glance (worst first), then the key versions."""
    nodes = fleet.get("nodes") or {}
    key_names = _key_names(nodes)
    parts = ['<h2 id="nodes">Nodes<span class="muted">worst first; a rule id links to its finding</span></h2>',
             "<table>",
             "<thead><tr><th>node</th><th>status</th><th>findings</th>%s</tr></thead>"
             % "".join("<th>%s</th>" % html.escape(n) for n in key_names),
             "<tbody>"]
    parts += [_node_row_html(host, nodes[host], key_names) for host in _sorted_hosts(fleet)]
    parts.append("</tbody></table>")
    return parts


def _findings_html(fleet):
    """Findings by rule, most severe first, with what to do once per rule."""
    parts = ['<h2 id="findings">Findings by severity</h2>']
    rows = _findings_by_severity(fleet)
    if not rows:
        return parts + ['<p class="muted">No findings.</p>']
    rules_by_id = dict((r.get("id"), r) for r in fleet.get("rules") or [])
    parts.append("<table><thead><tr><th>severity</th><th>rule</th><th>title and fix</th><th>nodes</th></tr></thead>"
                 "<tbody>")
    fixes = {}
    for node in (fleet.get("nodes") or {}).values():
        for finding in node.get("findings") or []:
            fixes.setdefault(finding["id"], finding.get("fix"))
    for severity, rule_id, title, hosts in rows:
        parts.append('<tr class="row-%s"><td>%s</td><td><code>%s</code></td><td>%s<div class="rulefix">%s</div></td>'
                     '<td class="hosts">%s <span class="muted">(%d)</span></td></tr>'
                     % (html.escape(severity), _badge(severity), _e(rule_id), _e(title),
                        _e(fixes.get(rule_id) or (rules_by_id.get(rule_id) or {}).get("fix")), _host_links(hosts),
                        len(hosts)))
    parts.append("</tbody></table>")
    return parts


def _not_judged_html(gaps):
    """What could not be judged, by rule, with how to supply it."""
    if not gaps:
        return []
    parts = ['<h2 id="not-judged">Not fully judged<span class="muted">what the audit could not judge; these nodes '
             'are not counted ok until it can</span></h2>',
             "<table><thead><tr><th>rule</th><th>what was not judged, and the fix</th><th>nodes</th></tr></thead>"
             "<tbody>"]
    for rule_id, title, fix, hosts in gaps:
        parts.append('<tr class="row-not_judged"><td><code>%s</code></td><td>%s<div class="rulefix">%s</div></td>'
                     '<td class="hosts">%s <span class="muted">(%d)</span></td></tr>'
                     % (_e(rule_id), _e(title), _e(fix), _host_links(hosts), len(hosts)))
    parts.append("</tbody></table>")
    return parts


def _drift_html(fleet):
    """Per group and fact, the value most nodes hold, then the odd values with their nodes."""
    parts = ['<h2 id="drift">Drift<span class="muted">facts that differ between nodes of the same group; the '
             'highlighted values are held by fewer nodes</span></h2>']
    drift = fleet.get("drift") or []
    if not drift:
        return parts + ['<p class="muted">No drift: the nodes of each group agree on every compared fact.</p>']
    parts.append("<table><thead><tr><th>group</th><th>fact</th><th>values and the nodes that hold them</th></tr>"
                 "</thead><tbody>")
    for row in drift:
        lines = []
        for index, held in enumerate(row["values"]):
            lines.append('<div class="%s"><span class="count">%s</span><code>%s</code> %s</div>'
                         % ("odd" if index else "majority", _plural(len(held["nodes"]), "node"),
                            html.escape(_value(held["value"])), _host_links(held["nodes"])))
        parts.append('<tr><td>%s</td><td><code>%s</code></td><td class="values">%s</td></tr>'
                     % (_e(row["group"]), _e(row["fact"]), "".join(lines)))
    parts.append("</tbody></table>")
    return parts


def _finding_html(host, finding, status, body):
    """One finding (or one not-judged gap, ``status`` not_judged) of a node: badge, title, ``body`` (its evidence or
    message, preformatted, or None), fix and source."""
    parts = ['<div class="finding %s" id="%s">' % (html.escape(status), _anchor(host, finding["id"])),
             '<div>%s <span class="title">%s</span><span class="id">%s</span></div>'
             % (_badge(status), _e(finding["title"]), _e(finding["id"]))]
    if body is not None:
        parts.append("<pre>%s</pre>" % html.escape(body))
    parts.append('<p class="fix"><b>Fix:</b> %s</p>' % _e(finding["fix"]))
    parts.append('<div class="source">Source: %s</div>' % _e(finding["source"]))
    parts.append("</div>")
    return parts


def _node_html(host, node):
    """One node's section: its key facts, why it is unreachable or that it has no findings, what was not judged, its
    findings, the linkage and the last verification."""
    status = node.get("status") or "ok"
    groups = ", ".join(node.get("groups") or [])
    parts = ['<section class="node %s" id="%s">' % (html.escape(status), _anchor(host)),
             "<h3>%s</h3> %s%s" % (_e(host), _badge(status),
                                   '<span class="groups">%s</span>' % html.escape(groups) if groups else "")]
    if node.get("reachable", True) and node.get("key_facts"):
        parts.append('<div class="facts">%s</div>' % "".join(
            "<span><b>%s</b> %s</span>" % (_e(k["name"]), _e(k["value"])) for k in node["key_facts"]))
    if not node.get("reachable", True):
        reason = (node.get("facts") or {}).get("unreachable_reason")
        parts.append('<p class="muted">Not reachable: no facts gathered.%s</p>'
                     % (" %s" % _e(reason) if reason else ""))
    elif not node.get("findings"):
        parts.append('<p class="muted">No findings.</p>')
    for gap in node.get("not_judged") or []:
        parts += _finding_html(host, gap, "not_judged", gap["message"] if gap.get("message") else None)
    for finding in node.get("findings") or []:
        evidence = finding.get("evidence")
        parts += _finding_html(host, finding, finding["severity"],
                               _pretty(evidence) if evidence not in (None, "", [], {}) else None)
    return parts + _linkage_html(node) + _verify_html(node) + _side_by_side_html(node) + ["</section>"]


def render_html(fleet):
    nodes = fleet.get("nodes") or {}
    gaps = _not_judged_by_rule(fleet)
    parts = _head_html(fleet, gaps) + ["<main>"]
    parts += _summary_html(fleet.get("summary") or {})
    parts += _nodes_html(fleet) + _findings_html(fleet) + _not_judged_html(gaps) + _drift_html(fleet)
    parts.append('<h2 id="details">Node details</h2>')
    for host in _sorted_hosts(fleet):
        parts += _node_html(host, nodes[host])
    parts += ["</main>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"
