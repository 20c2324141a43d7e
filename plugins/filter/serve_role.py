# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of what the sglang_serve and sglang roles decide from their variables: the router's lock, its refusal and
pip environment, whether the fleet rolls, which instances restart, the messages of a roll and of a refused layout,
the DeepGEMM precompile's arguments and whether it runs.

Documented in ``serve_router_lock.yml``, ``serve_router_lock_refusal.yml``, ``serve_pip_environment.yml``,
``serve_router_ready.yml``, ``serve_changed_here.yml``, ``serve_roll_note.yml``, ``serve_layout_refusal.yml``,
``sglang_deepgemm_args.yml`` and ``sglang_deepgemm_wanted.yml`` beside this file. The logic lives in
``plugins/plugin_utils/_serve/role_values.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import to_bool
from jinja2 import Undefined

from ansible_collections.gpufleet.deepep.plugins.filter.serving_helpers import serve_files_changed
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import role_values as _values


def _refusing(name, func):
    """``func`` with a RoleValueError as an AnsibleFilterError naming the filter."""
    def filtered(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except _values.RoleValueError as exc:
            raise AnsibleFilterError("%s: %s" % (name, exc)) from None
    filtered.__name__ = name
    filtered.__doc__ = func.__doc__
    return filtered


def serve_router_lock(hashes, locks, pin, python_version, require_hashes):
    """The router's lock: ``hashes`` when given, else the shipped lock of ``pin`` and ``python_version``."""
    return _values.router_lock(hashes, locks, pin, python_version, to_bool(require_hashes))


def serve_router_lock_refusal(locks, pin, python_version):
    """The refusal of a router without a lock."""
    return _values.router_lock_refusal(locks, pin, python_version)


def serve_pip_environment(hashed, no_index, find_links, index_url):
    """pip's variables of the router's install."""
    return _values.pip_environment(to_bool(hashed), to_bool(no_index), find_links, index_url)


def serve_router_ready(router_hosts, play_hosts, hostvars):
    """Whether a router host of the play answered /readiness with 200 before this run (sglang_serve_router_before
    among ``hostvars``)."""
    def before_of(host):
        if host not in hostvars:
            return None
        host_vars = hostvars[host]
        try:
            if "sglang_serve_router_before" not in host_vars:
                return None
            value = host_vars["sglang_serve_router_before"]
        except KeyError:
            return None
        return None if isinstance(value, Undefined) else value
    return _values.router_ready(router_hosts, play_hosts, before_of)


def serve_changed_here(units, unit_written, env_changed, secrets_changed):
    """This node's instances that restart: a changed unit file (``unit_written``: file_set's files), a changed
    environment file (``env_changed``) or, every one, a changed secrets file."""
    unit_changed = serve_files_changed(units, unit_written, "unit_file")
    return _values.changed_here(unit_changed, env_changed, units, to_bool(secrets_changed))


class FilterModule:
    """The sglang_serve and sglang roles' decisions."""

    def filters(self):
        return guard_filters(dict((name, _refusing(name, func)) for name, func in (
            ("serve_router_lock", serve_router_lock),
            ("serve_router_lock_refusal", serve_router_lock_refusal),
            ("serve_pip_environment", serve_pip_environment),
            ("serve_router_ready", serve_router_ready),
            ("serve_changed_here", serve_changed_here),
            ("serve_roll_note", _values.roll_note),
            ("serve_layout_refusal", _values.layout_refusal),
            ("sglang_deepgemm_args", lambda server, model_path: _values.deepgemm_args(server, model_path, to_bool)),
            ("sglang_deepgemm_wanted",
             lambda mode, moe, server: _values.deepgemm_wanted(mode, moe, server, to_bool)),
        )))
