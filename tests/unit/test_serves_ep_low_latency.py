# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter serves_ep_low_latency: what a node serves decides the verify roles' low-latency stages (their play-level
behaviour: tests/integration/controller/test_verify_low_latency_default_play.py)."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.serves_ep_low_latency import FilterModule

serves = FilterModule().filters()["serves_ep_low_latency"]


@pytest.mark.parametrize("node, expected", [
    ({}, False),
    ({"sglang_server": {"moe_a2a_backend": "deepep"}}, True),                       # SGLang's default mode: auto
    ({"sglang_server": {"moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}}, True),
    ({"sglang_server": {"moe_a2a_backend": "deepep", "deepep_mode": "normal"}}, False),
    ({"sglang_server": {"moe_a2a_backend": "none", "deepep_mode": "low_latency"}}, False),
    ({"sglang_server": None}, False),
    # the serving role's instance counts only on a node of its group
    ({"group_names": ["sglang_decode"], "sglang_serve_decode": {"moe_a2a_backend": "deepep"}}, True),
    ({"group_names": ["sglang_prefill"], "sglang_serve_decode": {"moe_a2a_backend": "deepep"}}, False),
    ({"group_names": ["sglang_prefill"], "sglang_serve_prefill": {"moe_a2a_backend": "deepep",
                                                                  "deepep_mode": "normal"}}, False),
    ({"group_names": ["edge"], "sglang_serve_decode_group": "edge",
      "sglang_serve_decode": {"moe_a2a_backend": "deepep", "deepep_mode": "low_latency"}}, True),
    # either source is enough
    ({"group_names": ["sglang_decode"], "sglang_serve_decode": {"moe_a2a_backend": "deepep"},
      "sglang_server": {"moe_a2a_backend": "deepep", "deepep_mode": "normal"}}, True),
])
def test_what_the_node_serves(node, expected):
    assert serves(node) is expected


def test_bad_settings_are_refused_by_name():
    with pytest.raises(AnsibleFilterError, match=re.escape("sglang_serve_decode is 'deepep', not a mapping")):
        serves({"group_names": ["sglang_decode"], "sglang_serve_decode": "deepep"})
    with pytest.raises(AnsibleFilterError, match="expected the node's variables"):
        serves(["sglang_server"])
