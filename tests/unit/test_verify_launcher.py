# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/verify_common/templates/run_deepep.sh.j2, the one launcher of verify_intranode and verify_internode,
rendered and run with a stand-in test script: the log, the settings after the environment script, the
timeout of the whole process group, and the refusals of malformed arguments."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import jinja2
import pytest

from unit_helpers import REPO

TEMPLATE = REPO / "roles" / "verify_common" / "templates" / "run_deepep.sh.j2"

FAKE_TEST = r"""
import os, sys, time
print("args", " ".join(sys.argv[1:]))
for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "EP_DISABLE_GIN", "FROM_ENV_SCRIPT"):
    print(name, os.environ.get(name, "-"))
print("cwd", os.getcwd())
if "--sleep" in sys.argv:
    time.sleep(60)
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def launcher(tmp_path):
    verify_dir = tmp_path / "verify"
    verify_dir.mkdir()
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = shlex.quote
    text = env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="managed", verify_common_dir=str(verify_dir))
    path = verify_dir / "run_deepep.sh"
    path.write_text(text)
    path.chmod(0o755)
    src = tmp_path / "DeepEP"
    src.mkdir()
    (src / "test_fake.py").write_text(FAKE_TEST)
    env_script = tmp_path / "unified-env.sh"
    env_script.write_text("export FROM_ENV_SCRIPT=yes\nexport RANK=from-env-script\n")
    return path, verify_dir, src, env_script


def _run(path, argv, timeout=30, **env):
    full_env = dict(os.environ, MASTER_ADDR="stale", WORLD_SIZE="9", **env)
    return subprocess.run([str(path)] + argv, capture_output=True, text=True, timeout=timeout, env=full_env,
                          check=False)


def test_intranode_run_clears_the_rendezvous_and_exports_the_settings(launcher):
    path, verify_dir, src, env_script = launcher
    proc = _run(path, ["intranode", str(env_script), str(src), "5", "30", "EP_DISABLE_GIN=1", "--",
                       sys.executable, "test_fake.py", "8", "--allow-hybrid-mode", "0"])
    assert proc.returncode == 0, proc.stderr
    log = (verify_dir / "intranode.log").read_text()
    assert proc.stdout == log
    assert "args --num-processes 8 --allow-hybrid-mode 0" in log
    assert "MASTER_ADDR -" in log and "WORLD_SIZE -" in log and "RANK -" in log
    assert "EP_DISABLE_GIN 1" in log and "FROM_ENV_SCRIPT yes" in log
    assert "cwd %s" % src in log
    assert log.splitlines()[0].startswith("[verify] ") and "intranode EP_DISABLE_GIN=1:" in log.splitlines()[0]
    assert log.splitlines()[-1] == "[verify] exit status 0"


def test_internode_settings_win_over_the_environment_script(launcher):
    path, verify_dir, src, env_script = launcher
    proc = _run(path, ["connectivity", str(env_script), str(src), "5", "30", "MASTER_ADDR=10.0.0.1",
                       "MASTER_PORT=8361", "WORLD_SIZE=2", "RANK=1", "--", sys.executable, "test_fake.py", "4"],
                FAKE_RC="3")
    assert proc.returncode == 3
    log = (verify_dir / "connectivity.log").read_text()
    assert "MASTER_ADDR 10.0.0.1" in log and "MASTER_PORT 8361" in log and "WORLD_SIZE 2" in log
    assert "RANK 1" in log and "EP_DISABLE_GIN -" in log
    assert log.splitlines()[-1] == "[verify] exit status 3"


def test_missing_environment_script_is_skipped(launcher, tmp_path):
    path, verify_dir, src = launcher[:3]
    proc = _run(path, ["internode", str(tmp_path / "absent.sh"), str(src), "5", "30", "--",
                       sys.executable, "test_fake.py", "1"])
    assert proc.returncode == 0, proc.stderr
    assert "FROM_ENV_SCRIPT -" in (verify_dir / "internode.log").read_text()


def test_timeout_ends_the_test_with_124(launcher):
    path, verify_dir, src, env_script = launcher
    proc = _run(path, ["internode", str(env_script), str(src), "1", "1", "--", sys.executable, "test_fake.py", "1",
                       "--sleep"], timeout=30)
    assert proc.returncode == 124
    assert (verify_dir / "internode.log").read_text().splitlines()[-1] == "[verify] exit status 124"


@pytest.mark.parametrize("argv, message", [
    (["../escape", "E", "S", "5", "30", "--", "py", "t", "1"], "bad log name '../escape'"),
    (["intranode", "E", "S", "5", "30", "not-a-setting", "--", "py", "t", "1"], "bad setting 'not-a-setting'"),
    (["intranode", "E", "S", "5", "30", "--", "py"], "usage: run_deepep.sh"),
])
def test_malformed_arguments_are_refused(launcher, argv, message):
    path, verify_dir = launcher[:2]
    proc = _run(path, argv)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not list(verify_dir.glob("*.log"))
