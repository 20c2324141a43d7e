# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of serving: the serving verification (role verify_serving) and the environment files of sglang_serve.

Documented in ``serving_gate.yml``, ``serve_env_file.yml``, ``serve_env_changed.yml`` and
``router_lock_installed.yml`` beside this file. The logic lives in
``plugins/plugin_utils/_serving_gate.py`` and ``plugins/module_utils/_serve/units.py`` (the one writer of a unit's
environment file, with the checks of ``_serve/unitvalues.py``).
"""

from __future__ import annotations

import hashlib
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serving_gate import serving_gate as _serving_gate
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import env_file_text
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import UnitValueError
from ansible_collections.gpufleet.deepep.plugins.module_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import normalize_project_name


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


def serve_env_changed(units, found):
    """The instances (each once, in the plan's order) whose environment file's content is not the plan's: ``units``
    are the plan's units (``instance``, ``env_path``, ``env_text``), ``found`` what ``ansible.builtin.stat`` with a
    sha1 checksum read of those paths before the write (a registered loop's ``results``). A file not there, or one
    whose checksum is not the sha1 of the planned text, counts; a file whose mode alone differs does not."""
    form = "expected sglang_serve_plan.units (instance, env_path, env_text) and a stat loop's results"
    if not isinstance(units, list) or not isinstance(found, list):
        raise AnsibleFilterError("serve_env_changed: %r and %r are not two lists; %s"
                                 % (type(units).__name__, type(found).__name__, form))
    sums = {}
    for result in found:
        path = (result.get("item") or {}).get("env_path") if isinstance(result, dict) else None
        stat = result.get("stat") if isinstance(result, dict) else None
        if not isinstance(path, str) or not isinstance(stat, dict):
            raise AnsibleFilterError("serve_env_changed: a stat result without item.env_path and stat (%r); %s"
                                     % (str(result)[:200], form))
        sums[path] = stat.get("checksum") if stat.get("exists") else None
    changed = []
    for unit in units:
        if not isinstance(unit, dict) or not all(isinstance(unit.get(k), str) for k in ("instance", "env_path",
                                                                                        "env_text")):
            raise AnsibleFilterError("serve_env_changed: a unit without instance, env_path and env_text (%r); %s"
                                     % (str(unit)[:200], form))
        planned = hashlib.sha1(unit["env_text"].encode("utf-8")).hexdigest()  # what stat's checksum reads
        if sums.get(unit["env_path"]) != planned and unit["instance"] not in changed:
            changed.append(unit["instance"])
    return changed


_DIST_INFO = re.compile(r"^(?P<name>[^-/]+)-(?P<version>[^-/]+)\.dist-info$")


def router_lock_installed(dist_infos, lock):
    """True when every ``project==version`` of ``lock`` is installed: among ``dist_infos`` (the paths or names of a
    site-packages' ``*.dist-info`` directories) at exactly that version. pip given the lock as hash-pinned
    requirements would then install nothing; anything missing or at another version (or a lock entry that is not
    ``project==version``) gives False, and the role runs pip."""
    if not isinstance(dist_infos, list) or not all(isinstance(item, str) for item in dist_infos):
        raise AnsibleFilterError("router_lock_installed: the input is %r; expected a list of *.dist-info paths "
                                 "(the files of ansible.builtin.find, mapped to their path)" % (dist_infos,))
    if not isinstance(lock, dict) or not lock:
        raise AnsibleFilterError("router_lock_installed: lock %r; expected a non-empty mapping project==version: "
                                 "[sha256, ...]" % (lock,))
    installed = set()
    for path in dist_infos:
        match = _DIST_INFO.match(path.rstrip("/").rsplit("/", 1)[-1])
        if match:
            installed.add((normalize_project_name(match.group("name")), match.group("version").lower()))
    for pin in lock:
        name, sep, version = str(pin).partition("==")
        if not sep or not name or not version:
            return False
        if (normalize_project_name(name), version.strip().lower()) not in installed:
            return False
    return True


class FilterModule:
    """Serving filters."""

    def filters(self):
        return guard_filters({"serving_gate": serving_gate, "serve_env_file": serve_env_file,
                              "serve_env_changed": serve_env_changed,
                              "router_lock_installed": router_lock_installed})
