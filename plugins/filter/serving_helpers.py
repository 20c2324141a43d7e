# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of serving: the serving verification (role verify_serving) and the environment files of sglang_serve.

Documented in ``serving_gate.yml``, ``serve_env_file.yml``, ``serve_files_changed.yml`` and
``router_lock_installed.yml`` beside this file. The logic lives in
``plugins/plugin_utils/_serving_gate.py`` and ``plugins/module_utils/_serve/units.py`` (the one writer of a unit's
environment file, with the checks of ``_serve/unitvalues.py``).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serving_gate import serving_gate as _serving_gate
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import env_file_text
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import UnitValueError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
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


FILE_KEYS = ("env_file", "unit_file")


def serve_files_changed(units, written, which, content_only=False):
    """The instances (each once, in the plan's order) whose ``which`` file (``env_file`` or ``unit_file`` of each of
    ``units``, the plan's) gpufleet.deepep.file_set changed: ``written`` is its ``files`` result (``path``,
    ``changed``, ``content_changed``). With ``content_only``, a file whose mode alone changed counts for nothing (an
    environment file an earlier release wrote 0644 is tightened without a restart). A unit whose file file_set did not
    report (nothing written yet) counts as changed."""
    form = ("expected sglang_serve_plan.units (instance, env_file, unit_file), a file_set result's files (path, "
            "changed, content_changed) and one of %s" % ", ".join(FILE_KEYS))
    if not isinstance(units, list) or not isinstance(written, list) or which not in FILE_KEYS:
        raise AnsibleFilterError("serve_files_changed: %r, %r and %r are not two lists and a file key; %s"
                                 % (type(units).__name__, type(written).__name__, which, form))
    key = "content_changed" if content_only else "changed"
    changed_paths = {}
    for result in written:
        if not isinstance(result, dict) or not isinstance(result.get("path"), str) \
                or not isinstance(result.get(key), bool):
            raise AnsibleFilterError("serve_files_changed: a file_set result without path and %s (%r); %s"
                                     % (key, str(result)[:200], form))
        changed_paths[result["path"]] = result[key]
    changed = []
    for unit in units:
        entry = unit.get(which) if isinstance(unit, dict) else None
        if not isinstance(unit, dict) or not isinstance(unit.get("instance"), str) or not isinstance(entry, dict) \
                or not isinstance(entry.get("path"), str):
            raise AnsibleFilterError("serve_files_changed: a unit without instance and %s.path (%r); %s"
                                     % (which, str(unit)[:200], form))
        if changed_paths.get(entry["path"], True) and unit["instance"] not in changed:
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
                              "serve_files_changed": serve_files_changed,
                              "router_lock_installed": router_lock_installed})
