# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The plan of the fleet verification (roles verify_intranode and verify_internode): rank assignment over
inventory groups for the internode runs, and the choice of the master's fabric-facing interface with its
addresses.

The verdict of one run (the gate, the connectivity test) is in ``gate``, the thresholds it applies in
``plugin_utils/_thresholds``, the NIC-traffic judgement in ``traffic``, the summary (JSON data and a Markdown table)
in ``summary``.

Pure logic, standard library only, Python 3.8+. The address check itself (netaddr) lives in the
``verify_helpers`` filter plugin, on the controller; this file only picks the interface and lists its addresses.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = [
    "internode_plan", "fabric_interface",
]


# ------------------------------------------------------------------------------------------ ranks
def _as_group_list(groups):
    if isinstance(groups, str):
        groups = [g.strip() for g in groups.split(",")]
    if not isinstance(groups, (list, tuple)) or not groups:
        raise VerifyInputError("groups must be a group name, a comma-separated string or a list of group "
                               "names; got %r" % (groups,))
    names = []
    for group in groups:
        if not isinstance(group, str) or not group.strip():
            raise VerifyInputError("group names must be non-empty strings; got %r in %r" % (group, groups))
        if group.strip() not in names:
            names.append(group.strip())
    return names


def internode_plan(groups, inventory_groups, masters=None, only_hosts=None):
    """Runs of the internode test: one per group, the master first (rank 0), the others in group order.

    ``groups``: a group name, comma-separated names or a list. ``inventory_groups``: the ``groups``
    magic variable (group name -> host list). ``masters``: optional dict group -> host overriding the
    master (default: the group's first host). ``only_hosts``: when given, hosts outside it are left out
    (the play's hosts, e.g. after ``--limit``). Each run: ``{group, master, world_size, hosts (in rank
    order), ranks {host: rank}}``. Raises :class:`VerifyInputError`.
    """
    if not isinstance(inventory_groups, dict):
        raise VerifyInputError("inventory_groups must be the mapping of group names to hosts (the `groups` "
                               "variable); got %s" % type(inventory_groups).__name__)
    masters = masters or {}
    if not isinstance(masters, dict):
        raise VerifyInputError("masters must be a mapping of group name to master host; got %r" % (masters,))
    plan = []
    for group in _as_group_list(groups):
        if group not in inventory_groups:
            raise VerifyInputError("group %r is not in the inventory (groups: %s)"
                                   % (group, ", ".join(sorted(k for k in inventory_groups if k != "all"))))
        hosts = [h for h in inventory_groups[group] if only_hosts is None or h in only_hosts]
        if len(hosts) < 2:
            raise VerifyInputError("group %r has %d host(s)%s; an internode run needs at least 2"
                                   % (group, len(hosts), " in this play" if only_hosts is not None else ""))
        master = masters.get(group) or hosts[0]
        if master not in hosts:
            raise VerifyInputError("master %r of group %r is not a host of that group (hosts: %s)"
                                   % (master, group, ", ".join(hosts)))
        ordered = [master] + [h for h in hosts if h != master]
        plan.append({
            "group": group,
            "master": master,
            "world_size": len(ordered),
            "hosts": ordered,
            "ranks": dict((host, rank) for rank, host in enumerate(ordered)),
        })
    return plan


# ------------------------------------------------------------------------------------------ master address
def _iface_addresses(facts, interface):
    data = facts.get(interface) or facts.get("ansible_" + interface) \
        or facts.get(interface.replace("-", "_")) or facts.get("ansible_" + interface.replace("-", "_"))
    if not isinstance(data, dict):
        return None
    addresses = []
    ipv4 = data.get("ipv4")
    for entry in ([ipv4] if isinstance(ipv4, dict) else []) + list(data.get("ipv4_secondaries") or []):
        if isinstance(entry, dict) and entry.get("address"):
            addresses.append(entry["address"])
    for entry in data.get("ipv6") or []:
        if isinstance(entry, dict) and entry.get("address") and entry.get("scope") != "link":
            addresses.append(entry["address"])
    return addresses


def _facts_view(facts):
    if not isinstance(facts, dict):
        raise VerifyInputError("the master's facts must be a mapping (hostvars[master].ansible_facts); got %s"
                               % type(facts).__name__)
    inner = facts.get("ansible_facts")
    return inner if isinstance(inner, dict) else facts


def fabric_interface(facts, interface=None, ansible_host=None):
    """Pick the master's fabric-facing interface from its facts and list its addresses.

    ``interface`` wins when given; else the interface holding ``ansible_host`` (the address the
    controller reaches the node on); else the interface of the default IPv4 route. Returns
    ``{interface, addresses}``. Raises :class:`VerifyInputError` naming what is missing.
    """
    facts = _facts_view(facts)
    names = facts.get("interfaces") or facts.get("ansible_interfaces") or []
    if interface:
        addresses = _iface_addresses(facts, interface)
        if addresses is None:
            raise VerifyInputError("interface %r is not an interface of the master (interfaces: %s); gather "
                                   "facts on the master or fix the fabric interface variable"
                                   % (interface, ", ".join(sorted(names)) or "none gathered"))
        return {"interface": interface, "addresses": addresses}
    if ansible_host:
        for name in names:
            addresses = _iface_addresses(facts, name) or []
            if ansible_host in addresses:
                return {"interface": name, "addresses": addresses}
    default = facts.get("default_ipv4") or facts.get("ansible_default_ipv4") or {}
    if isinstance(default, dict) and default.get("interface"):
        addresses = _iface_addresses(facts, default["interface"]) or []
        return {"interface": default["interface"], "addresses": addresses}
    raise VerifyInputError("cannot tell the master's fabric-facing interface: no interface holds %r and there "
                           "is no default IPv4 route; set the fabric interface variable (interfaces: %s)"
                           % (ansible_host, ", ".join(sorted(names)) or "none gathered"))
