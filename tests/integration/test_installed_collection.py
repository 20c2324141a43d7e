# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as users install it: built with ansible-galaxy, installed, its audit run by FQCN.

The audit's report must land in the directory ansible-playbook runs from (or gpufleet_report_dir), never
inside the installed collection. The audit is read-only; it runs against this host over the local
connection, so no simulated fleet is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(argv, cwd, env, timeout=600):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    why = "%s failed (rc %s):\n%s\n%s" % (argv[0], proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, why
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the tarball from the checkout and install it into a private collections path."""
    if not (BIN / "ansible-galaxy").exists():
        pytest.fail("ansible-galaxy is not beside %s (make bootstrap installs it)" % sys.executable)
    work = tmp_path_factory.mktemp("galaxy")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(work / "collections"), LC_ALL="C.UTF-8")
    env.pop("ANSIBLE_CONFIG", None)
    _run([str(BIN / "ansible-galaxy"), "collection", "build", str(REPO), "--output-path", str(work)], work, env)
    tarballs = sorted(work.glob("gpufleet-deepep-*.tar.gz"))
    assert len(tarballs) == 1, tarballs
    _run([str(BIN / "ansible-galaxy"), "collection", "install", str(tarballs[0]), "-p", str(work / "collections")],
         work, env)
    root = work / "collections" / "ansible_collections" / "gpufleet" / "deepep"
    assert (root / "playbooks" / "audit.yml").is_file()
    return work, env, root


def _audit(installed, cwd, *extra):
    work, env, root = installed
    cwd.mkdir(parents=True, exist_ok=True)
    argv = [str(BIN / "ansible-playbook"), "gpufleet.deepep.audit", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "audit_import_check=false", *extra]
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    proc = _run(argv, cwd, env)
    after = sorted(str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts)
    assert after == [p for p in before if "__pycache__" not in p], "the audit wrote into the installed collection"
    return proc


def _one_report(base: Path) -> Path:
    runs = sorted((base / "audit").iterdir())
    assert len(runs) == 1, runs
    for name in ("fleet.json", "fleet.md", "fleet.html"):
        assert (runs[0] / name).is_file(), name
    return runs[0]


def test_installed_audit_writes_its_report_where_the_user_runs_it(installed, tmp_path):
    cwd = tmp_path / "site"
    proc = _audit(installed, cwd)
    run = _one_report(cwd / "gpufleet-reports")
    fleet = json.loads((run / "fleet.json").read_text(encoding="utf-8"))
    assert list(fleet["nodes"]) == ["localhost"]
    assert str(run / "fleet.html") in proc.stdout  # the summary line names the report


def test_installed_audit_honours_gpufleet_report_dir(installed, tmp_path):
    cwd = tmp_path / "elsewhere"
    proc = _audit(installed, cwd, "-e", "gpufleet_report_dir=reports-here")
    _one_report(cwd / "reports-here")
    assert not (cwd / "gpufleet-reports").exists()
    assert "reports-here/audit/" in proc.stdout
