# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ep_test action plugin on this host with the verify roles' launcher: results, the launcher's timeout, the
fetched log, a refusal; and no process of a run left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "integration" / "playbooks" / "ep_test.yml"


def test_ep_test_runs_waits_fetches_and_refuses(tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "ep_test_root=%s" % tmp_path,
                           str(PLAYBOOK)],
                          cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "failed=0" in proc.stdout and "ignored=1" in proc.stdout
    status = {path.name: path.read_text().split() for path in (tmp_path / "verify").glob("*.rc")}
    assert sorted(status) == ["fail.rc", "hang.rc", "pass.rc"]
    assert [status[name][0] for name in ("pass.rc", "fail.rc", "hang.rc")] == ["0", "3", "124"]
    # The hung test's processes were ended by the launcher's timeout: none is left.
    left = subprocess.run(["pgrep", "-f", "fake_test.py --num-processes 2 --hang"], capture_output=True, text=True,
                          check=False)
    assert left.stdout.strip() == ""
