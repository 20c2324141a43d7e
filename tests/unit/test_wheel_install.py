# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_comm/wheel.py: a wheel install into site-packages that a failed check or a kill at any
rename rolls back. The wheel's unpacked files are put in the stage by hand (pip's part is tested with real wheels
in tests/integration/builds/test_deepep_build.py); the import is checked in a fresh interpreter with the site directory on its path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import wheel as wh


def _dist(site, version, with_ext=True):
    """A deep_ep distribution as pip lays it out: the package, the extension beside it, the dist-info and RECORD."""
    pkg = site / "deep_ep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VERSION = %r\n" % version)
    names = ["deep_ep/__init__.py"]
    if with_ext:
        (site / "deep_ep_cpp.so").write_text(version)
        names.append("deep_ep_cpp.so")
    info = site / ("deep_ep-%s.dist-info" % version)
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deep_ep\nVersion: %s\n" % version)
    names += ["deep_ep-%s.dist-info/METADATA" % version, "deep_ep-%s.dist-info/RECORD" % version]
    (info / "RECORD").write_text("".join("%s,,\n" % n for n in names))


def _imported_version(site):
    proc = subprocess.run([sys.executable, "-S", "-c", "import deep_ep; print(deep_ep.VERSION)"],
                          env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "")},
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _staged(site, version):
    install = wh.WheelInstall(None, sys.executable, str(site), "deep_ep", "/wheels/deep_ep-%s.whl" % version)
    os.makedirs(install.stage)
    _dist(type(site)(install.stage), version, with_ext=False)
    install.new = sorted(os.listdir(install.stage))
    return install


def _leftovers(site):
    return sorted(n for n in os.listdir(site) if n.startswith("."))


def test_dist_entries_come_from_the_record(tmp_path):
    _dist(tmp_path, "1.0")
    (tmp_path / "other").mkdir()
    assert wh.dist_entries(str(tmp_path), "deep_ep") == ["deep_ep", "deep_ep-1.0.dist-info", "deep_ep_cpp.so"]


def test_swap_commit_replaces_every_old_entry(tmp_path):
    _dist(tmp_path, "1.0")
    install = _staged(tmp_path, "2.0")
    install.swap(install.new)
    assert _imported_version(tmp_path) == "2.0"
    install.commit()
    # The old extension the new wheel does not bring is gone too: nothing of 1.0 is left to shadow 2.0.
    assert sorted(os.listdir(tmp_path)) == ["deep_ep", "deep_ep-2.0.dist-info"]


def test_failed_check_rolls_back_to_the_old_install(tmp_path):
    _dist(tmp_path, "1.0")
    install = _staged(tmp_path, "2.0")
    install.swap(install.new)
    assert install.rollback() == ["deep_ep", "deep_ep-1.0.dist-info", "deep_ep_cpp.so"]
    assert _imported_version(tmp_path) == "1.0" and _leftovers(tmp_path) == []


def test_rollback_of_a_first_install_removes_it(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    install = _staged(tmp_path, "2.0")
    install.swap(install.new)
    assert install.rollback() == [] and _imported_version(tmp_path) is None and os.listdir(tmp_path) == []


class Killed(BaseException):
    """Stands for SIGKILL: nothing in the install catches it, so no cleanup runs."""


@pytest.mark.parametrize("renames_before_kill", [0, 1, 2, 3, 4, 5])
def test_a_kill_at_any_rename_is_rolled_back_by_the_next_run(tmp_path, monkeypatch, renames_before_kill):
    _dist(tmp_path, "1.0")
    install = _staged(tmp_path, "2.0")
    real_rename = os.rename
    done = []

    def rename(src, dst):
        if len(done) == renames_before_kill:
            raise Killed()
        done.append(src)
        real_rename(src, dst)

    monkeypatch.setattr(wh.os, "rename", rename)
    with pytest.raises(Killed):
        install.swap(install.new)
    monkeypatch.setattr(wh.os, "rename", real_rename)
    # The next run, before it looks at the install (as deepep_build does, under its lock):
    message = wh.recover(str(tmp_path), "deep_ep")
    for stale in wh.stale_stages(str(tmp_path), "deep_ep"):
        shutil.rmtree(stale)
    if renames_before_kill == 0:  # killed before the journal's rename: nothing had moved
        assert message is None
    else:
        assert message.startswith("rolled back an interrupted install of deep_ep in %s" % tmp_path)
        assert "deep_ep_cpp.so" in message
    assert _imported_version(tmp_path) == "1.0"
    assert sorted(os.listdir(tmp_path)) == ["deep_ep", "deep_ep-1.0.dist-info", "deep_ep_cpp.so"]
    assert wh.recover(str(tmp_path), "deep_ep") is None


def test_a_kill_while_pip_unpacks_leaves_the_old_install_and_a_stale_stage(tmp_path):
    _dist(tmp_path, "1.0")
    install = _staged(tmp_path, "2.0")  # pip killed here: the stage is half written, no journal yet
    assert _imported_version(tmp_path) == "1.0"
    assert wh.recover(str(tmp_path), "deep_ep") is None
    assert wh.stale_stages(str(tmp_path), "deep_ep") == [install.stage]


def test_a_journal_of_the_wrong_shape_is_named(tmp_path):
    (tmp_path / ".gpufleet-deep_ep-install.json").write_text('{"site": "/x"}\n')
    with pytest.raises(OSError, match=r"install journal .*\.gpufleet-deep_ep-install\.json lacks stage"):
        wh.recover(str(tmp_path), "deep_ep")
