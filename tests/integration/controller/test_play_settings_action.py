# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.play_settings as an action plugin: judged in the controller's process, with the module's result.

The host of these plays has an interpreter that does not exist: a module sent anywhere would fail to start, so a
pass proves no module ran. The refusals are the module's, word for word (tests/unit/test_bad_inputs.py covers the
forms one by one through the module)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from play_helpers import dump_task, run_play
from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.modules import play_settings

SETTINGS = [
    {"name": "gpufleet_serial", "value": [1, "25%"], "form": "serial"},
    {"name": "gpufleet_max_fail_percentage", "value": "50", "form": "percentage"},
    {"name": "env_script_gid_index", "value": "auto", "form": "gid_index"},
]


@pytest.fixture
def play(tmp_path):
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "/nonexistent/python"},
                         "hosts": {"n1": None, "n2": None}}}

    def run(settings, *extra):
        out = tmp_path / "result.json"
        tasks = [{"name": "Check", "gpufleet.deepep.play_settings": {"settings": settings},
                  "delegate_to": "localhost", "register": "checked", "ignore_errors": True},
                 {"name": "Keep", "ansible.builtin.set_fact": {"kept": "{{ checked }}"}, "run_once": True},
                 dump_task("kept", out)]
        output = run_play(tmp_path, inventory, tasks, *extra)
        return json.loads(out.read_text()), output

    return run


@pytest.mark.parametrize("check", [False, True])
def test_good_values_pass_normalised_without_any_module(play, check):
    result = play(SETTINGS, *(["--check"] if check else []))[0]
    expected = play_settings.judge([dict(s, choices=None, table=None) for s in SETTINGS])
    assert result.get("failed") is not True
    assert result["changed"] is False
    assert result["settings"] == expected["settings"] == {"gpufleet_serial": [1, "25%"],
                                                          "gpufleet_max_fail_percentage": 50,
                                                          "env_script_gid_index": "auto"}


def test_bad_values_are_refused_as_the_module_refuses_them(play):
    bad = SETTINGS + [{"name": "gpufleet_reboot_throttle", "value": "-1", "form": "count"},
                      {"name": "env_script_gid_index", "value": "300", "form": "gid_index"}]
    result = play(bad)[0]
    expected = play_settings.judge([dict(s, choices=None, table=None) for s in bad])
    assert result["failed"] is True and expected["failed"] is True
    assert result["msg"] == expected["msg"] and result["errors"] == expected["errors"]
    assert result["msg"].startswith("2 settings refused before any host runs")
    assert "gpufleet_reboot_throttle" in result["msg"] and "-1" in result["msg"]
    assert "env_script_gid_index" in result["msg"] and "300" in result["msg"]


@pytest.mark.parametrize("args, word", [
    ({}, "settings"),
    ({"settings": [{"name": "x", "value": 1, "form": "sideways"}]}, "sideways"),
    ({"settings": [], "other": 1}, "other"),
])
def test_bad_arguments_fail_with_a_message(play, tmp_path, args, word):
    inventory = tmp_path / "one.yml"
    inventory.write_text("all: {hosts: {n1: {ansible_connection: local}}}\n")
    path = tmp_path / "args.yml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "tasks": [{"gpufleet.deepep.play_settings": args}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(path)],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                          check=False)
    assert proc.returncode != 0
    assert word in proc.stdout and "Traceback" not in proc.stdout


def test_a_profile_that_falls_back_to_the_default_gate_warns_naming_it_and_the_known_families(play):
    """The verify roles' first task: a profile the table knows by no name and no family token passes (the larger
    refusal is a later change) but warns loudly, naming the variable, the profile, the known families and the gate;
    a profile matched by its family token, and the plain 'default', do not warn."""
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    table = defaults["verify_intranode_thresholds"]
    settings = [{"name": "verify_intranode_profile", "value": "mycluster", "form": "profile", "table": table}]
    result, output = play(settings)
    assert result.get("failed") is not True and result["settings"] == {"verify_intranode_profile": "default"}
    text = " ".join(output.split())
    assert "[WARNING]" in output and "verify_intranode_profile='mycluster' is no profile or GPU family" in text
    assert "known: a100, b200, h100, h200" in text and "dispatch_bf16_nvl_gbps >= 100" in text, text
    for quiet in ("gcp_b200", "h100_ib", "default"):
        assert "warnings" not in play_settings.judge([dict(settings[0], value=quiet)]), quiet
    assert play_settings.judge(settings)["warnings"][0].startswith("verify_intranode_profile='mycluster'")
