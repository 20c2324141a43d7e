# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter of the serving verification (role verify_serving).

Documented in ``serving_gate.yml`` beside this file. The logic lives in ``plugins/plugin_utils/_serving_gate.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serving_gate import serving_gate as _serving_gate
from ansible_collections.gpufleet.deepep.plugins.module_utils._thresholds import VerifyInputError


def serving_gate(data, check, **kwargs):
    """Judge what the serving checks read: the router, its workers' wait, the engines, the play's records."""
    try:
        return _serving_gate(data, check, **kwargs)
    except VerifyInputError as exc:
        raise AnsibleFilterError("serving_gate: %s" % exc) from exc
    except TypeError as exc:
        raise AnsibleFilterError("serving_gate(check=%r): %s" % (check, exc)) from exc


class FilterModule:
    """Serving verification filter."""

    def filters(self):
        return guard_filters({"serving_gate": serving_gate})
