# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the GPU test modules share: run one stage (a tagged ansible-playbook run) and read what it recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "tests" / "gpu" / "playbooks"
# Seconds each stage took: figures for the record, never a pass/fail criterion.
TIMINGS: dict[str, float] = {}


def ansible_playbook() -> list[str]:
    exe = shutil.which("ansible-playbook")
    if exe:
        return [exe]
    pytest.skip("ansible-playbook is not installed for this interpreter")
    return []


def run_stage(stage: str, results: Path, python: str, extra: dict, playbook: str = "deepep.yml",
              label: str = "") -> subprocess.CompletedProcess:
    """Run ``playbook`` with ``--tags stage`` on localhost; the log goes to ``results/ansible-<label>.log``."""
    label = label or stage
    env = dict(os.environ)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    variables = {"gpu_python": python, "gpu_results": str(results), "ansible_python_interpreter": python}
    variables.update(extra)
    cmd = ansible_playbook() + ["-i", "localhost,", str(PLAYBOOKS / playbook), "--tags", stage,
                                "-e", json.dumps(variables)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    TIMINGS[label] = time.monotonic() - start
    (results / f"ansible-{label}.log").write_text(proc.stdout + proc.stderr)
    return proc


def load(results: Path, name: str) -> dict:
    return json.loads((results / name).read_text())


def tail(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-4000:] + proc.stderr[-2000:]
