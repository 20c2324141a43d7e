# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Audit filters: judge facts documents against the rule catalogue and render the fleet report.

``audit_findings`` (one node), ``audit_fleet`` (every node, drift, summary) and ``audit_report``
(Markdown/HTML/JSON of a fleet document). Each is documented in ``<filter name>.yml`` beside this file;
the logic lives in ``plugins/plugin_utils/_audit/engine.py`` and ``plugin_utils/_audit/report.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import (
    DEFAULT_DRIFT_SKIP_GROUPS,
    audit_fleet as _audit_fleet,
    evaluate_rules,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import plain_data
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report import render


_plain = plain_data


def audit_findings(facts, rules, context="audit", order="severity"):
    """The findings of one node's facts document under the ``rules`` of ``context`` (a catalogue or a rule list)."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError("audit_findings: expected a facts document (mapping), got %s" % type(facts).__name__)
    try:
        return evaluate_rules(_plain(facts), _plain(rules), context=context, order=order)
    except AuditError as exc:
        raise AnsibleFilterError("audit_findings: %s" % exc) from exc


def audit_fleet(documents, catalogue, groups=None, skip_groups=None, meta=None):
    """The fleet document: every node judged, drift per group, summary."""
    if not isinstance(documents, dict):
        raise AnsibleFilterError("audit_fleet: expected a mapping of host to facts document, got %s"
                                 % type(documents).__name__)
    if groups is not None and not isinstance(groups, dict):
        raise AnsibleFilterError("audit_fleet: groups must be a mapping of group to hosts, got %s"
                                 % type(groups).__name__)
    skip = DEFAULT_DRIFT_SKIP_GROUPS if skip_groups is None else _plain(skip_groups)
    try:
        return _audit_fleet(_plain(documents), _plain(catalogue), groups=_plain(groups or {}),
                            skip_groups=skip, meta=_plain(meta or {}))
    except AuditError as exc:
        raise AnsibleFilterError("audit_fleet: %s" % exc) from exc


def audit_report(fleet, fmt="html"):
    """A fleet document rendered as ``html``, ``md`` or ``json``; ``all`` gives every rendering at once with
    the summary and each node's status (one pass over the document, for playbooks that write every file)."""
    if not isinstance(fleet, dict) or "nodes" not in fleet:
        raise AnsibleFilterError("audit_report: expected a fleet document (the result of audit_fleet)")
    plain = _plain(fleet)
    try:
        if fmt == "all":
            return {
                "summary": plain.get("summary") or {},
                "status": dict((host, node.get("status")) for host, node in (plain.get("nodes") or {}).items()),
                "json": render(plain, "json"),
                "md": render(plain, "md"),
                "html": render(plain, "html"),
            }
        return render(plain, fmt)
    except ValueError as exc:
        raise AnsibleFilterError("audit_report: %s" % exc) from exc


class FilterModule:
    """Audit filters."""

    def filters(self):
        return guard_filters({
            "audit_findings": audit_findings,
            "audit_fleet": audit_fleet,
            "audit_report": audit_report,
        })
