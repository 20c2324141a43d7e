# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sglang_serve role around serve_plan, run through ansible-playbook on localhost:

- the units' environment files (tasks/env_files.yml, with a plan of serve_plan): 0600 (an instance's
  ``environment`` may carry a token), nothing written in check mode, nothing changed by a second run, and an
  instance restarts (``sglang_serve_env_changed``) when its file's content changes - not when a file an earlier
  release wrote 0644 is only tightened;
- the role's numbers of seconds (tasks/plan.yml's first task): out of range, refused by the role's own name before
  anything is read or written."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
import yaml

from play_helpers import VENV_PYTHON, run_play
from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve


def _plan(config_dir, token="hf_secret"):
    """serve_plan's plan of a node with one prefill unit whose environment carries a token."""
    topology = {"prefill": {"hosts": [{"name": "p-1", "address": "10.0.0.10"}],
                            "settings": {"environment": {"HF_TOKEN": token}}},
                "decode": {"hosts": [{"name": "d-1", "address": "10.0.0.20"}], "settings": {"port": 30001}},
                "router": {"hosts": [{"name": "r-1", "address": "10.0.0.30"}]}}
    return _serve.plan(topology, "p-1", config_dir=str(config_dir))


@pytest.fixture
def play(tmp_path):
    inventory = {"all": {"hosts": {"p-1": {"ansible_connection": "local", "ansible_python_interpreter": VENV_PYTHON}}}}

    def run(plan, *extra):
        out = tmp_path / "result.json"
        role = {"name": "gpufleet.deepep.sglang_serve", "tasks_from": "env_files", "public": True}
        tasks = [{"name": "Write the environment files", "ansible.builtin.include_role": role,
                  "vars": {"sglang_serve_plan": plan}},
                 {"name": "Dump", "ansible.builtin.copy": {
                     "content": "{{ {'changed': sglang_serve_envs.files | map(attribute='changed') | list,"
                                " 'restart': sglang_serve_env_changed} | to_json }}", "dest": str(out)},
                  "vars": {"sglang_serve_plan": plan}, "check_mode": False}]
        run_play(tmp_path, inventory, tasks, *extra)
        return json.loads(out.read_text())

    return run


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_environment_files_are_0600_check_mode_writes_none_and_a_second_run_changes_nothing(play, tmp_path):
    config_dir = tmp_path / "sglang-serve"
    config_dir.mkdir()
    plan = _plan(config_dir)
    (unit,) = plan["units"]
    env_file = config_dir / "sglang-prefill0-rank0.env"
    assert unit["env_path"] == str(env_file) and 'HF_TOKEN="hf_secret"' in unit["env_text"]

    checked = play(plan, "--check")
    assert checked == {"changed": [True], "restart": ["prefill0"]}
    assert list(config_dir.iterdir()) == []

    first = play(plan)
    assert first == {"changed": [True], "restart": ["prefill0"]}
    assert env_file.read_text() == unit["env_text"] and _mode(env_file) == 0o600

    assert play(plan) == {"changed": [False], "restart": []}
    assert play(plan, "--check") == {"changed": [False], "restart": []}
    assert _mode(env_file) == 0o600


def test_a_file_an_earlier_release_wrote_0644_is_tightened_without_a_restart(play, tmp_path):
    config_dir = tmp_path / "sglang-serve"
    config_dir.mkdir()
    plan = _plan(config_dir)
    env_file = config_dir / "sglang-prefill0-rank0.env"
    env_file.write_text(plan["units"][0]["env_text"])
    env_file.chmod(0o644)

    assert play(plan, "--check") == {"changed": [True], "restart": []}
    assert _mode(env_file) == 0o644
    assert play(plan) == {"changed": [True], "restart": []}
    assert _mode(env_file) == 0o600
    assert play(plan) == {"changed": [False], "restart": []}


def test_a_changed_environment_restarts_its_instance(play, tmp_path):
    config_dir = tmp_path / "sglang-serve"
    config_dir.mkdir()
    play(_plan(config_dir))
    plan = _plan(config_dir, token="hf_rotated")
    assert play(plan) == {"changed": [True], "restart": ["prefill0"]}
    env_file = config_dir / "sglang-prefill0-rank0.env"
    assert 'HF_TOKEN="hf_rotated"' in env_file.read_text() and _mode(env_file) == 0o600


@pytest.mark.parametrize("name, value, words", [
    ("sglang_serve_start_timeout", -1, "whole seconds, 1 or more (TimeoutStartSec="),
    ("sglang_serve_start_timeout", 0, "whole seconds, 1 or more (TimeoutStartSec="),
    ("sglang_serve_restart_sec", -5, "whole seconds, 0 or more (RestartSec="),
    ("sglang_serve_poll_delay", 0, "whole seconds, 1 or more"),
    ("sglang_serve_exchange_timeout", 0, "whole seconds, 1 or more (the longest one exchange"),
])
def test_the_roles_seconds_out_of_range_are_refused_by_name_before_anything_runs(tmp_path, name, value, words):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"p-1": {
        "ansible_connection": "local", "ansible_python_interpreter": "/nonexistent/python"}}}}))
    path = tmp_path / "play.yml"
    tasks = [{"name": "Plan", "ansible.builtin.include_role": {"name": "gpufleet.deepep.sglang_serve",
                                                               "tasks_from": "plan"},
              "vars": {name: value}}]
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(path)],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                          check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert "%s is %s; expected %s" % (name, value, words) in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    # an assert runs on the controller: nothing reached the host (its interpreter does not exist)
    assert "nonexistent" not in proc.stdout
