# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serve_topology filter (plugins/filter/serve_topology.py): the sglang_serve role's inventory groups as
serve_plan's topology, each host with the address the other nodes reach it at."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.gpufleet.deepep.plugins.filter import serve_topology as topology_filter
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve

GROUPS = {"sglang_prefill": ["p1", "p2"], "sglang_decode": ["d1"], "sglang_router": ["r1"], "all": ["p1"]}
HOSTVARS = {"p1": {"sglang_serve_fabric_address": "10.9.0.1", "ansible_host": "192.0.2.1"},
            "p2": {"ansible_host": "10.0.0.2"}, "d1": {"sglang_serve_fabric_address": Undefined()},
            "r1": {"ansible_host": "10.0.0.4"}}
ROLES = {"prefill": {"group": "sglang_prefill", "settings": {"nnodes": 2, "tp": 16}},
         "decode": {"group": "sglang_decode", "settings": {"tp": 8}},
         "router": {"group": "sglang_router", "settings": {}}}


def test_groups_become_the_topology_in_inventory_order_with_each_hosts_address():
    topo = topology_filter.serve_topology(ROLES, GROUPS, HOSTVARS)
    assert topo == {
        "prefill": {"hosts": [{"name": "p1", "address": "10.9.0.1"},  # the fabric address before ansible_host
                              {"name": "p2", "address": "10.0.0.2"}], "settings": {"nnodes": 2, "tp": 16}},
        "decode": {"hosts": [{"name": "d1", "address": "d1"}], "settings": {"tp": 8}},  # neither: the name
        "router": {"hosts": [{"name": "r1", "address": "10.0.0.4"}], "settings": {}},
    }
    # what serve_plan plans from it: one two-node prefill instance whose rank 0 is p1 at its fabric address
    planned = _serve.plan(topo, "p1")
    assert [i["name"] for i in planned["instances"]] == ["prefill0", "decode0"]
    assert planned["instances"][0]["dist_init_addr"].startswith("10.9.0.1:")


def test_a_group_missing_from_the_inventory_has_no_hosts():
    topo = topology_filter.serve_topology({"router": {"group": "absent", "settings": {"kind": "smg"}}}, GROUPS, {})
    assert topo == {"router": {"hosts": [], "settings": {"kind": "smg"}}}


def test_a_host_without_variables_is_reached_at_its_name():
    assert topology_filter.serve_topology({"decode": {"group": "sglang_decode", "settings": {}}}, GROUPS, {}) \
        == {"decode": {"hosts": [{"name": "d1", "address": "d1"}], "settings": {}}}


@pytest.mark.parametrize("roles, named", [(["prefill"], "expected a mapping"),
                                          ({"prefill": {"settings": {}}}, "prefill is"),
                                          ({"decode": "sglang_decode"}, "'sglang_decode'")])
def test_a_malformed_role_is_refused_naming_it(roles, named):
    with pytest.raises(AnsibleFilterError, match=named):
        topology_filter.FilterModule().filters()["serve_topology"](roles, GROUPS, HOSTVARS)
