# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_plan as an action plugin in real ansible-playbook runs: the plan computed in the
controller's process from the engine nodes' facts (node_stack ``gather: [serve_node]``), with the module's result,
warnings and refusals.

The hosts of the play have an interpreter that does not exist: a module sent anywhere would fail to start, so a
pass proves no module ran and no node's facts travelled to another node. The plan itself and the module are
unit-tested in tests/unit/test_serve_plan_action.py and test_serve_plan.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from test_serve_node import DSV3, node, nodes, topo
from test_serve_plan_action import module_result
from play_helpers import dump_task, run_play
from unit_helpers import REPO


@pytest.fixture
def play(tmp_path):
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "/nonexistent/python"},
                         "hosts": {"p1": None, "p2": None, "d1": None, "r1": None}}}

    def run(args, *extra):
        out = tmp_path / "result.json"
        tasks = [{"name": "Plan", "gpufleet.deepep.serve_plan": dict(args, host="{{ inventory_hostname }}"),
                  "register": "planned", "ignore_errors": True},
                 {"name": "Keep", "ansible.builtin.set_fact": {
                     "kept": "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, "
                             "'planned'))) }}"}, "run_once": True},
                 dump_task("kept", out)]
        output = run_play(tmp_path, inventory, tasks, *extra)
        return json.loads(out.read_text()), output

    return run


@pytest.mark.parametrize("check", [False, True])
def test_every_host_gets_the_modules_plan_without_any_module(play, check):
    facts = nodes(p2=node("10.0.0.2", env={"NVSHMEM_IB_ENABLE_IBGDA": "1"}))
    args = {"topology": topo(), "model": DSV3, "nodes": facts, "engine_version": "0.5.19", "deepgemm_required": False}
    results, _out = play(args, *(["--check"] if check else []))
    assert sorted(results) == ["d1", "p1", "p2", "r1"]
    for host, result in results.items():
        expected = module_result(dict(args, host=host))
        assert result.get("failed") is not True and result["changed"] is False
        for key in ("instances", "units", "rank0_of", "instance", "router", "expected_workers", "problems",
                    "warnings_found"):
            assert result[key] == expected[key], (host, key)
    (unit,) = results["p2"]["units"]
    assert unit["env"]["GLOO_SOCKET_IFNAME"] == "enp0s19" and unit["env"]["NVSHMEM_IB_ENABLE_IBGDA"] == "1"
    assert [u["kind"] for u in results["r1"]["units"]] == ["router"]


def test_a_refused_layout_fails_every_host_with_the_modules_problems(play):
    args = {"topology": topo(prefill={"nnodes": 2, "tp": 3}), "model": DSV3}
    results, _out = play(args)
    for host, result in results.items():
        expected = module_result(dict(args, host=host))
        assert result["failed"] is True and expected["problems"]
        assert result["problems"] == expected["problems"]
        assert result["msg"] == "serving preflight refused the layout: " + " | ".join(expected["problems"])


def test_the_plans_warnings_are_task_warnings(play):
    warned_node = node("10.0.0.3")
    warned_node["interfaces"], warned_node["interfaces_error"] = None, "ip -j addr show exited 124: timed out"
    args = {"topology": topo(), "model": DSV3, "nodes": nodes(d1=warned_node), "deepgemm_required": False}
    results, out = play(args)
    expected = module_result(dict(args, host="d1"))
    assert expected["warnings_found"] and results["d1"]["warnings_found"] == expected["warnings_found"]
    assert "[WARNING]" in out and "timed out" in out


@pytest.mark.parametrize("args, word", [
    ({"topology": {}}, "host"),
    ({"host": "p1"}, "topology"),
    ({"host": "p1", "topology": {}, "state": "facts"}, "state"),
    ({"host": "p1", "topology": {}, "start_timeout": "soon"}, "'soon'"),
    ({"host": "p1", "topology": {}, "start_timeout": -1}, "start_timeout is -1; expected a whole number of seconds"),
    ({"host": "p1", "topology": {}, "restart_sec": "-5"}, "restart_sec is -5; expected a whole number of seconds"),
    ({"host": "p1", "topology": {}, "nodes": "d1"}, "nodes='d1'"),
])
def test_bad_arguments_are_refused_naming_them(tmp_path, args, word):
    inventory = tmp_path / "one.yml"
    inventory.write_text("all: {hosts: {n1: {ansible_connection: local}}}\n")
    path = tmp_path / "args.yml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "tasks": [{"gpufleet.deepep.serve_plan": args}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(path)],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                          check=False)
    assert proc.returncode != 0
    assert word in proc.stdout and "Traceback" not in proc.stdout
