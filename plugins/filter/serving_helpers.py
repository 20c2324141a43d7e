# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of serving: the serving verification (role verify_serving) and the environment files of sglang_serve.

Documented in ``serving_gate.yml`` and ``serve_env_file.yml`` beside this file. The logic lives in
``plugins/plugin_utils/_serving_gate.py`` and ``plugins/module_utils/_serve/units.py`` (the one writer of a unit's
environment file, with the checks of ``_serve/unitvalues.py``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serving_gate import serving_gate as _serving_gate
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import env_file_text
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import UnitValueError
from ansible_collections.gpufleet.deepep.plugins.module_utils._thresholds import VerifyInputError


def serving_gate(data, check, **kwargs):
    """Judge what the serving checks read: the router, its workers' wait, the engines, the play's records."""
    try:
        return _serving_gate(data, check, **kwargs)
    except VerifyInputError as exc:
        raise AnsibleFilterError("serving_gate: %s" % exc) from exc
    except TypeError as exc:
        raise AnsibleFilterError("serving_gate(check=%r): %s" % (check, exc)) from exc


def serve_env_file(env, where="environment", secret=False):
    """A systemd EnvironmentFile of ``env`` (NAME: value), every name and value checked the way the plan checks
    the units' own; ``secret`` leaves the value out of a refusal (it names the variable ``where`` only)."""
    if not isinstance(env, dict):
        raise AnsibleFilterError("serve_env_file: the input is %s; expected a mapping NAME: value"
                                 % ("a secret value" if secret else repr(env)[:200]))
    try:
        return env_file_text(env, where)
    except UnitValueError as exc:
        if secret:
            raise AnsibleFilterError("serve_env_file: %s is not one line of text (a newline, NUL or other control "
                                     "character); expected a value of one line (the value is secret and not shown)"
                                     % where) from None
        raise AnsibleFilterError("serve_env_file: %s" % exc) from exc


class FilterModule:
    """Serving filters."""

    def filters(self):
        return guard_filters({"serving_gate": serving_gate, "serve_env_file": serve_env_file})
