# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/molecule_run.py (make molecule): scenarios under a time limit, several at a time, a log and timings
per scenario, the failed ones named; run against a stand-in ``molecule`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FAKE_MOLECULE = r"""#!/bin/bash
s=$3
echo "INFO     $s ➜ create: Executing"
echo "INFO     $s ➜ converge: Executing"
case $s in
  hangs) exec sleep 600 ;;
  fails) printf '%b\n' "  \033[2m│\033[0m TASK [Start the nodes]" \
           "  \033[2m│\033[0m fatal: [localhost]: FAILED! => {\"msg\": \"node b200-cluster-2 did not boot (no supervisor)\"}" \
           "CRITICAL Ansible return code was 2, command was: ansible-playbook create.yml"; exit 3 ;;
esac
echo "INFO     $s ➜ converge: Executed: Successful"
"""


def runner(tmp_path, *argv):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "molecule").write_text(FAKE_MOLECULE)
    (bindir / "molecule").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FLEETSIM_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([sys.executable, str(REPO / "scripts" / "molecule_run.py"), "--logs", str(tmp_path / "logs"),
                           *argv], cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120)


def test_a_hung_scenario_is_stopped_at_its_limit_and_every_failure_is_named(tmp_path):
    proc = runner(tmp_path, "--jobs", "2", "--timeout", "3", "passes", "hangs", "fails")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "== molecule: failed: " in proc.stdout
    failed = proc.stdout.split("== molecule: failed: ")[1].split(" (logs")[0].split()
    assert sorted(failed) == ["fails", "hangs"]
    assert "TIMED OUT after 3 s" in proc.stdout and "FAILED (rc 3)" in proc.stdout
    assert "did not boot (no supervisor)" in proc.stdout  # the failed scenario's log is printed
    # ... and why each failed, in <logs>/<scenario>.why (make test prints these after its timings): how it ended and
    # the log's lines that name the error, without colours or Molecule's box; none for a scenario that passed.
    why = (tmp_path / "logs" / "fails.why").read_text().splitlines()
    assert why[0].startswith("molecule fails") and "FAILED (rc 3)" in why[0] and "fails.log" in why[0]
    assert why[1:] == ['  fatal: [localhost]: FAILED! => {"msg": "node b200-cluster-2 did not boot (no supervisor)"}',
                       "  CRITICAL Ansible return code was 2, command was: ansible-playbook create.yml"]
    assert "TIMED OUT after 3 s" in (tmp_path / "logs" / "hangs.why").read_text()
    assert not (tmp_path / "logs" / "passes.why").exists()
    timings = json.loads((tmp_path / "logs" / "timings.json").read_text())
    assert {k: v["ok"] for k, v in timings.items()} == {"passes": True, "hangs": False, "fails": False}
    assert set(timings["hangs"]["actions"]) == {"create", "converge"}
    assert (tmp_path / "logs" / "passes.log").read_text().count("Executing") == 2


def test_all_passing_exits_zero_and_the_longest_known_scenario_starts_first(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "timings.json").write_text(json.dumps({"short": {"seconds": 5}, "long": {"seconds": 500}}))
    proc = runner(tmp_path, "--jobs", "1", "short", "long")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    starts = [line.split()[4] for line in proc.stdout.splitlines() if line.startswith("== molecule test -s")]
    assert starts == ["long", "short"]
    assert "INFO     long ➜ create: Executing" in proc.stdout  # one at a time: streamed as it comes


def test_bad_arguments_are_named(tmp_path):
    proc = runner(tmp_path, "--jobs", "0", "x")
    assert proc.returncode == 2 and "positive integer, got 0" in proc.stderr


def test_a_vm_scenario_gets_at_least_the_vm_limit(tmp_path):
    """realvm builds its image and runs under software emulation: --timeout below VM_TIMEOUT does not cut it."""
    proc = runner(tmp_path, "--jobs", "1", "--timeout", "3", "realvm", "passes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    limits = {line.split()[4]: line.split("limit ")[1] for line in proc.stdout.splitlines()
              if line.startswith("== molecule test -s")}
    assert limits == {"realvm": "3600 s)", "passes": "3 s)"}


def test_every_scenario_has_its_expected_seconds():
    """A clean clone orders the scenarios by EXPECTED_SECONDS (longest first): a scenario without a figure there
    would be placed by a guess, and the longest one running alone at the end of the stage costs its whole length."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import molecule_run  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(str(REPO / "scripts"))
    scenarios = {p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")}
    assert scenarios - set(molecule_run.EXPECTED_SECONDS) == set()
    assert set(molecule_run.EXPECTED_SECONDS) - scenarios == set()
    assert molecule_run.order(sorted(scenarios), REPO / "no-such-timings.json")[:2] == ["build", "verify"]
