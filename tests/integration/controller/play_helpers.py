# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One way to run a play of the controller tier: an inventory and one play's tasks written under the test's
directory, run by the repository's ansible-playbook with its config and collections."""

from __future__ import annotations

import os
import subprocess

import yaml

from unit_helpers import REPO

VENV_PYTHON = str(REPO / ".venv" / "bin" / "python")


def run_play(tmp_path, inventory: dict, tasks: list, *extra: str) -> str:
    """Run ``tasks`` as one play over ``inventory`` (``--check`` and such in ``extra``); assert that it passed without
    a traceback and return its output."""
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump(inventory))
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"),
               PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(hosts), str(path), *extra],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "Traceback" not in proc.stdout
    return proc.stdout


def dump_task(var_expression: str, dest) -> dict:
    """A task that writes ``var_expression`` (a Jinja expression) as JSON to ``dest`` on the controller, once."""
    return {"name": "Dump", "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % var_expression,
                                                     "dest": str(dest)},
            "delegate_to": "localhost", "run_once": True, "check_mode": False,
            "vars": {"ansible_python_interpreter": VENV_PYTHON}}
