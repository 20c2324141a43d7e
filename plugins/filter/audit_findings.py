# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Audit filter: judge one node's facts document against the rule catalogue (``audit_findings``, documented in
``audit_findings.yml`` beside this file; the logic lives in ``plugins/plugin_utils/_audit/engine.py``). The fleet's
report is the ``audit_fleet_report`` action's; the preflight's and sglang's judgement the ``findings_pipeline``
filter's.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import plain_data
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError


_plain = plain_data


def audit_findings(facts, rules, context="audit", order="severity"):
    """The findings of one node's facts document under the ``rules`` of ``context`` (a catalogue or a rule list)."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError("audit_findings: expected a facts document (mapping), got %s" % type(facts).__name__)
    try:
        return evaluate_rules(_plain(facts), _plain(rules), context=context, order=order)
    except AuditError as exc:
        raise AnsibleFilterError("audit_findings: %s" % exc) from exc


class FilterModule:
    """Audit filter."""

    def filters(self):
        return guard_filters({"audit_findings": audit_findings})
