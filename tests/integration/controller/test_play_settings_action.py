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

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _settings

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
    expected = _settings.judge([dict(s, choices=None, table=None) for s in SETTINGS])
    assert result.get("failed") is not True
    assert result["changed"] is False
    assert result["settings"] == expected["settings"] == {"gpufleet_serial": [1, "25%"],
                                                          "gpufleet_max_fail_percentage": 50,
                                                          "env_script_gid_index": "auto"}


def test_bad_values_are_refused_as_the_module_refuses_them(play):
    bad = SETTINGS + [{"name": "gpufleet_reboot_throttle", "value": "-1", "form": "count"},
                      {"name": "env_script_gid_index", "value": "300", "form": "gid_index"}]
    result = play(bad)[0]
    expected = _settings.judge([dict(s, choices=None, table=None) for s in bad])
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


def test_a_profile_without_a_gate_of_its_own_is_refused_before_any_host_runs(play):
    """The verify roles' first task, as the roles call it (the role's overrides over the profile object's gates of
    the scope): the loose 'default' gate applies only to the profile 'default'. A profile naming a GPU family the
    collection has no gate for is refused naming the family, the reason and the entry to add to the table; one
    naming no family is refused asking to name it after its family or to set 'default'. Profiles matched by name or
    family token (a B300 now by the provisional B200 gate, where it took the 100 GB/s default), and 'default', pass
    quietly."""
    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    item = {"name": "verify_intranode_profile", "form": "profile", "table": defaults["verify_intranode_thresholds"],
            "table_name": "verify_intranode_thresholds", "scope": "intranode"}
    result = play([dict(item, value="gcp_h20")])[0]
    assert result["failed"] is True, result
    text = " ".join(result["msg"].split())
    assert text.startswith("1 setting refused before any host runs: verify_intranode_profile: profile 'gcp_h20' "
                           "names the GPU family h20 (compute capability 9.0), and the collection has no intranode "
                           "gate for h20 (its compute is capped"), text
    assert "nor does verify_intranode_thresholds give one" in text, text
    assert "Add an entry for h20 to verify_intranode_thresholds" in text, text
    result = play([dict(item, value="gcp_b300")])[0]
    assert result.get("failed") is not True and result["settings"] == {"verify_intranode_profile": "b300"}, result
    result = play([dict(item, value="mycluster")])[0]
    text = " ".join(result["msg"].split())
    assert result["failed"] is True and "profile 'mycluster' matches no entry of verify_intranode_thresholds" in text
    assert "names no GPU family" in text and "<family>_<site>" in text and "set it to 'default'" in text, text
    result, output = play([dict(item, value="default")])
    assert result.get("failed") is not True and result["settings"] == {"verify_intranode_profile": "default"}
    assert "[WARNING]" not in output
    # The GPU family a profile declares (gpufleet_gpu_family, the roles pass it as family) picks its entry: a profile
    # named after its site is gated as its hardware; a declared family the table has no gate for is refused by name.
    result = play([dict(item, value="mycluster", family="h200"), dict(item, name="other", value="lab", family="a800")])[0]
    text = " ".join(result["msg"].split())
    assert result["failed"] is True and text.startswith("1 setting refused before any host runs: other: profile 'lab' "
                                                        "declares (gpufleet_gpu_family) the GPU family a800"), text
    result = play([dict(item, value="mycluster", family="h200")])[0]
    assert result.get("failed") is not True and result["settings"] == {"verify_intranode_profile": "h200"}, result
    for asked, matched in (("gcp_b200", "b200"), ("h100_ib", "h100"), ("default", "default"), ("", "default")):
        assert _settings.judge([dict(item, value=asked)]) == \
            {"changed": False, "settings": {"verify_intranode_profile": matched}}, asked
