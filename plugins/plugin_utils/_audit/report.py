# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the audit's fleet document (``_audit.audit_fleet``) as JSON, Markdown (``report_markdown``) or one
self-contained HTML page (``report_html``), and the options of audit_fleet_report.

Pure controller-side logic; what Markdown and HTML share is in ``report_text``.
"""

from __future__ import annotations

import json

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_html import render_html
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_markdown import render_markdown


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
    groups=dict(type="dict"),
    skip_groups=dict(type="list", elements="str", default=["all", "ungrouped"]),
    output_dir=dict(type="path"),
    output_root=dict(type="path"),
    latest_link=dict(type="bool", default=False),
    verify_summary=dict(type="path"),
    meta=dict(type="dict", default={}),
    fail_on=dict(type="str", default="none", choices=["critical", "warning", "info", "none"]),
)
