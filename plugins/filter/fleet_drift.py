# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``fleet_drift``: the facts that differ between nodes of the same inventory group.

Documented in ``fleet_drift.yml`` beside this file; the logic lives in ``plugins/plugin_utils/_audit/engine.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import (
    DEFAULT_DRIFT_SKIP_GROUPS,
    fleet_drift as _fleet_drift,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError


def _plain(value):
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def fleet_drift(documents, groups, drift, skip_groups=None):
    """Rows ``{group, fact, values: [{value, nodes}]}`` for every fact that differs within a group."""
    if not isinstance(documents, dict):
        raise AnsibleFilterError("fleet_drift: expected a mapping of host to facts document, got %s"
                                 % type(documents).__name__)
    if not isinstance(groups, dict):
        raise AnsibleFilterError("fleet_drift: groups must be a mapping of group to hosts, got %s"
                                 % type(groups).__name__)
    skip = DEFAULT_DRIFT_SKIP_GROUPS if skip_groups is None else _plain(skip_groups)
    try:
        return _fleet_drift(_plain(documents), _plain(groups), _plain(drift), skip)
    except AuditError as exc:
        raise AnsibleFilterError("fleet_drift: %s" % exc) from exc


class FilterModule:
    """Fleet drift."""

    def filters(self):
        return guard_filters({"fleet_drift": fleet_drift})
