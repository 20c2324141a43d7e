# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""findings_pipeline: one node's facts to its findings for the preflight and sglang roles (documented in
findings_pipeline.yml beside this file; the logic is in plugins/plugin_utils/_audit/pipeline.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import plain_data
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.pipeline import run_pipeline


def findings_pipeline(facts, rules, context, host, settings, groups=None, fail_on="critical", profile="-",
                      kernel="?"):
    """The facts document of ``context``, its findings, those at or above ``fail_on`` and (preflight) the report."""
    try:
        return run_pipeline(plain_data(facts), plain_data(rules), context, plain_data(host), plain_data(settings),
                            groups=plain_data(groups), fail_on=plain_data(fail_on), profile=plain_data(profile),
                            kernel=plain_data(kernel))
    except AuditError as exc:
        raise AnsibleFilterError("findings_pipeline: %s" % exc) from exc


class FilterModule:
    """Facts-to-findings filter."""

    def filters(self):
        return guard_filters({"findings_pipeline": findings_pipeline})
