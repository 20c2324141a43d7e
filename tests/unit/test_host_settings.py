# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet_stack.host: the kernel settings DeepEP's own checks read (kernel.numa_balancing, DeepEP #624 and pull
requests 644 and 679; the stack catalogue's numa_balancing), read from a node root as the lent H200 had them
(tests/fixtures/captured/h200x1/stack-rules-host.txt: numa_balancing 0, uvm_disable_hmm N) and as a two-socket node
with balancing on has them; the audit warns of the second only."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import gather_host_settings
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())


def _root(tmp_path, numa=None, online=None, hmm=None):
    for rel, text in (("proc/sys/kernel/numa_balancing", numa), ("sys/devices/system/node/online", online),
                      ("sys/module/nvidia_uvm/parameters/uvm_disable_hmm", hmm)):
        if text is not None:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
    return str(tmp_path)


def _captured_host():
    """The lent H200's reads, from the capture's command/output lines."""
    lines = (FIXTURES / "captured" / "h200x1" / "stack-rules-host.txt").read_text().splitlines()
    after = dict((lines[i][2:], lines[i + 1]) for i in range(len(lines) - 1) if lines[i].startswith("# cat "))
    return after["cat /proc/sys/kernel/numa_balancing"], after["cat /sys/module/nvidia_uvm/parameters/uvm_disable_hmm"]


@pytest.mark.parametrize("numa, online, hmm, expected", [
    (_captured_host()[0] + "\n", "0\n", _captured_host()[1] + "\n",
     {"numa_balancing": 0, "numa_nodes": 1, "uvm_disable_hmm": "N"}),
    ("1\n", "0-1\n", "Y\n", {"numa_balancing": 1, "numa_nodes": 2, "uvm_disable_hmm": "Y"}),
    ("3\n", "0-1,3\n", None, {"numa_balancing": 3, "numa_nodes": 3, "uvm_disable_hmm": None}),
    (None, None, None, {"numa_balancing": None, "numa_nodes": None, "uvm_disable_hmm": None}),
    ("garbage", "a-b", "", {"numa_balancing": None, "numa_nodes": None, "uvm_disable_hmm": None}),
])
def test_host_settings_read_from_a_node_root(tmp_path, numa, online, hmm, expected):
    assert gather_host_settings(_root(tmp_path, numa, online, hmm)) == expected


def _findings(host, intranode_only=False):
    doc = copy.deepcopy(HEALTHY)
    doc["gpufleet_stack"]["host"] = host
    doc["expect"]["intranode_only"] = intranode_only
    return [f for f in evaluate_rules(doc, CATALOGUE) if f["id"] == "HOST_NUMA_BALANCING"]


def test_the_audit_warns_of_numa_balancing_on_and_names_the_fix(tmp_path):
    (finding,) = _findings(gather_host_settings(_root(tmp_path, "1\n", "0-1\n", "N\n")))
    assert finding["severity"] == "warning"
    assert finding["message"].startswith("kernel.numa_balancing=1 on a node with 2 NUMA node(s)")
    assert "sysctl -w kernel.numa_balancing=0" in finding["message"] and "#624" in finding["message"]
    assert "#644" in finding["source"] and "numa_balancing" in finding["source"]


def test_the_captured_host_and_an_intranode_only_node_are_quiet(tmp_path):
    numa, hmm = _captured_host()
    assert _findings(gather_host_settings(_root(tmp_path, numa, "0", hmm))) == []
    assert _findings({"numa_balancing": 1, "numa_nodes": 2, "uvm_disable_hmm": "N"}, intranode_only=True) == []
    assert _findings({"numa_balancing": None, "numa_nodes": None, "uvm_disable_hmm": None}) == []
