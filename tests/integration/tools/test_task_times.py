# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The harness callback tools/callbacks/gpufleet_task_times.py in a real ansible-playbook run: one JSON line per
task with its wall time (a loop counted once, to its last item), failures and skips included, nothing written
without GPUFLEET_TASK_TIMES."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = [{"name": "Timed", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable},
             "tasks": [{"name": "Sleep a little", "ansible.builtin.command": {"argv": ["sleep", "0.6"]},
                        "changed_when": False},
                       {"name": "Loop", "ansible.builtin.command": {"argv": ["sleep", "0.3"]},
                        "loop": [1, 2], "changed_when": False},
                       {"name": "Skipped", "ansible.builtin.debug": {"msg": "no"}, "when": False},
                       {"name": "Fails but goes on", "ansible.builtin.command": {"argv": ["false"]},
                        "ignore_errors": True}]}]


def run(tmp_path: Path, times: Path | None) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tools" / "callbacks"),
               ANSIBLE_CALLBACKS_ENABLED="gpufleet_task_times", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    env.pop("GPUFLEET_TASK_TIMES", None)
    if times is not None:
        env["GPUFLEET_TASK_TIMES"] = str(times)
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(book)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300)


def test_every_task_gets_one_line_with_its_wall_time(tmp_path):
    times = tmp_path / "times.jsonl"
    proc = run(tmp_path, times)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [r["task"] for r in rows] == ["Sleep a little", "Loop", "Skipped", "Fails but goes on"]
    assert all(r["playbook"] == "play.yml" and r["play"] == "Timed" and r["hosts"] == 1 for r in rows)
    by_name = {r["task"]: r for r in rows}
    assert by_name["Sleep a little"]["seconds"] >= 0.6 and by_name["Sleep a little"]["action"] == \
        "ansible.builtin.command"
    assert by_name["Loop"]["seconds"] >= 0.6  # both items, one line


def test_nothing_is_written_without_the_variable(tmp_path):
    proc = run(tmp_path, None)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not list(tmp_path.glob("*.jsonl")) and "gpufleet_task_times" not in proc.stdout + proc.stderr
