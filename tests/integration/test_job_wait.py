# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job_wait action plugin on this host: results, bounds, refusals, and no "FAILED - RETRYING" lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "integration" / "playbooks" / "job_wait.yml"


def test_job_wait_returns_results_bounds_waits_and_prints_no_retries():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(PLAYBOOK)],
                          cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "failed=0" in proc.stdout and "ignored=2" in proc.stdout
    assert "RETRYING" not in proc.stdout
    assert "ASYNC POLL" not in proc.stdout
