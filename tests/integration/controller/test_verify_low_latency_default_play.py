# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify roles' low-latency stages default to what the node serves (filter serves_ep_low_latency over
hostvars[inventory_hostname]): the roles' own defaults rendered by the controller for nodes of the sglang role and of
the serving role's prefill and decode groups. A decode group served with DeepEP's low-latency kernels gets them
verified; a prefill group in normal mode, a node without SGLang and a profile that says no do not."""

from __future__ import annotations

import json

from play_helpers import dump_task, run_play
from unit_helpers import REPO

DEEPEP = {"moe_a2a_backend": "deepep"}


def decided(tmp_path, inventory):
    out = tmp_path / "decided.json"
    tasks = [
        {"name": "The verify roles' defaults",
         "ansible.builtin.include_vars": str(REPO / "roles" / role / "defaults" / "main.yml")}
        for role in ("verify_intranode", "verify_internode")
    ] + [
        {"name": "Decide", "ansible.builtin.set_fact": {
            "intra": "{{ verify_intranode_low_latency | bool }}",
            "inter": "{{ verify_internode_low_latency | bool }}"}},
        dump_task("dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'intra') | zip("
                  "ansible_play_hosts | map('extract', hostvars, 'inter'))))", out),
    ]
    run_play(tmp_path, inventory, tasks)
    return {host: tuple(pair) for host, pair in json.loads(out.read_text()).items()}


def test_the_low_latency_stages_follow_what_each_node_serves(tmp_path):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "/nonexistent/python"},
        "hosts": {
            "engine-1": {"sglang_server": dict(DEEPEP, deepep_mode="low_latency")},
            "engine-2": {"sglang_server": dict(DEEPEP, deepep_mode="normal")},
            "plain-1": None,
            "forced-1": {"sglang_server": dict(DEEPEP, deepep_mode="normal"), "gpufleet_ep_low_latency": True},
        },
        "children": {
            # the serving role's decode instance: deepep, mode left at SGLang's auto (decode batches run LL)
            "sglang_decode": {"hosts": {"decode-1": None, "decode-off": {"gpufleet_ep_low_latency": False}},
                              "vars": {"sglang_serve_decode": DEEPEP}},
            "sglang_prefill": {"hosts": {"prefill-1": None},
                               "vars": {"sglang_serve_prefill": dict(DEEPEP, deepep_mode="normal")}},
            # a site's own group name for its decode instances
            "my_decode": {"hosts": {"custom-1": {"sglang_serve_decode_group": "my_decode"}},
                          "vars": {"sglang_serve_decode": dict(DEEPEP, deepep_mode="low_latency")}},
        },
    }}
    found = decided(tmp_path, inventory)
    assert found == {
        "engine-1": (True, True), "engine-2": (False, False), "plain-1": (False, False), "forced-1": (True, True),
        "decode-1": (True, True), "decode-off": (False, False), "prefill-1": (False, False), "custom-1": (True, True),
    }, found
