# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The serving topology of gpufleet.deepep.serve_plan from the inventory (the sglang_serve role's groups).

``serve_topology``: for each serving role (prefill, decode, router), its group's hosts in inventory order, each
with its inventory name and the address the other nodes reach it at (``sglang_serve_fabric_address``, else
``ansible_host``, else the name), and the role's settings.

Documented in ``serve_topology.yml`` beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters

ADDRESS_VARIABLES = ("sglang_serve_fabric_address", "ansible_host")


def _known(host_vars, name):
    """The value of ``name`` among ``host_vars``, or None where it is not set (or undefined)."""
    try:
        if name not in host_vars:
            return None
        value = host_vars[name]
    except KeyError:
        return None
    return None if value is None or isinstance(value, Undefined) else value


def host_address(name, host_vars):
    """The address the other nodes reach host ``name`` at: the first of :data:`ADDRESS_VARIABLES` it sets, else its
    inventory name."""
    for variable in ADDRESS_VARIABLES:
        value = _known(host_vars, variable)
        if value is not None:
            return value
    return name


def serve_topology(roles, groups, hostvars):
    """``{role: {hosts: [{name, address}], settings}}`` of ``roles`` (``{role: {group, settings}}``): each role's
    hosts are the members of its inventory group (``groups``, none where the group is absent) in inventory order."""
    if not isinstance(roles, dict):
        raise AnsibleFilterError("serve_topology: expected a mapping of role to {group, settings}, got %r" % (roles,))
    out = {}
    for role, entry in roles.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("group"), str):
            raise AnsibleFilterError("serve_topology: %s is %r; expected a mapping with group (an inventory group "
                                     "name) and settings" % (role, entry))
        members = groups.get(entry["group"]) if entry["group"] in groups else None
        hosts = []
        for name in members or []:
            host_vars = hostvars[name] if name in hostvars else {}
            hosts.append({"name": name, "address": host_address(name, host_vars)})
        out[role] = {"hosts": hosts, "settings": entry.get("settings")}
    return out


class FilterModule:
    """The serving topology from the inventory."""

    def filters(self):
        return guard_filters({"serve_topology": serve_topology})
