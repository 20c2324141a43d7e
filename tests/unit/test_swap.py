# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_swap.py: staging paths, the renameat2 / two-rename swap, rollback and the
repair of interrupted swaps."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _buildkey as bk
from ansible_collections.gpufleet.deepep.plugins.module_utils import _swap as sw


def test_staging_and_previous_paths():
    key = "f" * 64
    assert sw.staging_path("/opt/deepep/nvshmem", key) == "/opt/deepep/nvshmem.staging-ffffffff"
    assert sw.previous_path("/opt/deepep/nvshmem/") == "/opt/deepep/nvshmem.previous"
    with pytest.raises(bk.BuildError, match="absolute"):
        sw.staging_path("opt/nvshmem", key)
    with pytest.raises(bk.BuildError):
        sw.previous_path("/")


def _install(path, marker):
    path.mkdir(parents=True)
    (path / "lib").mkdir()
    (path / "lib" / "libnvshmem_host.so.3").write_text(marker)
    bk.write_stamp(str(path), {"key": marker})


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_swap_keeps_one_previous_and_rollback(tmp_path, exchange):
    prefix = tmp_path / "nvshmem"
    _install(tmp_path / "s1" / "tree", "one")
    first = sw.swap_in(str(prefix), str(tmp_path / "s1" / "tree"), exchange=exchange)
    assert first["previous"] is None and bk.read_stamp(str(prefix))["key"] == "one"

    _install(tmp_path / "s2" / "tree", "two")
    second = sw.swap_in(str(prefix), str(tmp_path / "s2" / "tree"), exchange=exchange)
    assert second["previous"] == str(prefix) + ".previous"
    assert bk.read_stamp(str(prefix))["key"] == "two"
    assert bk.read_stamp(second["previous"])["key"] == "one"

    _install(tmp_path / "s3" / "tree", "three")
    sw.swap_in(str(prefix), str(tmp_path / "s3" / "tree"), exchange=exchange)
    assert bk.read_stamp(str(prefix))["key"] == "three"
    assert bk.read_stamp(str(prefix) + ".previous")["key"] == "two"
    # Exactly one previous is kept, nothing else is left beside the prefix.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("nvshmem")) == [
        "nvshmem", "nvshmem.previous"]

    sw.rollback(str(prefix))
    assert bk.read_stamp(str(prefix))["key"] == "two"
    assert bk.read_stamp(str(prefix) + ".previous")["key"] == "three"


def test_swap_failure_midway_restores_the_old_install(tmp_path, monkeypatch):
    prefix = tmp_path / "nvshmem"
    _install(prefix, "old")
    _install(tmp_path / "staged", "new")
    real_rename = os.rename
    calls = []

    def flaky_rename(src, dst):
        calls.append((src, dst))
        if str(src).endswith("staged"):
            raise OSError(5, "I/O error (injected)")
        return real_rename(src, dst)

    monkeypatch.setattr(sw.os, "rename", flaky_rename)
    with pytest.raises(OSError, match="injected"):
        sw.swap_in(str(prefix), str(tmp_path / "staged"), exchange=False)
    monkeypatch.setattr(sw.os, "rename", real_rename)
    assert bk.read_stamp(str(prefix))["key"] == "old"
    assert (prefix / "lib" / "libnvshmem_host.so.3").read_text() == "old"


def test_interrupted_swap_and_stale_staging_are_repaired(tmp_path):
    prefix = tmp_path / "nvshmem"
    # A run killed between its two renames: prefix gone, previous holds the old install.
    _install(tmp_path / "nvshmem.previous", "old")
    # A build killed midway: a half-filled staging dir; a failed one: another.
    (tmp_path / "nvshmem.staging-0123abcd" / "build").mkdir(parents=True)
    (tmp_path / "nvshmem.staging-deadbeef").mkdir()
    (tmp_path / "nvshmem.staging-notakey").mkdir()
    (tmp_path / "other.staging-0123abcd").mkdir()
    assert sw.recover_interrupted_swap(str(prefix)).startswith("restored")
    assert bk.read_stamp(str(prefix))["key"] == "old"
    assert sw.recover_interrupted_swap(str(prefix)) is None
    stale = sw.stale_staging_dirs(str(prefix))
    assert [os.path.basename(p) for p in stale] == ["nvshmem.staging-0123abcd", "nvshmem.staging-deadbeef"]
    removed = sw.clean_stale_staging(str(prefix), keep=str(tmp_path / "nvshmem.staging-deadbeef"))
    assert [os.path.basename(p) for p in removed] == ["nvshmem.staging-0123abcd"]
    assert (tmp_path / "other.staging-0123abcd").is_dir()
    assert (tmp_path / "nvshmem.staging-notakey").is_dir()


# --------------------------------------------------------------------------------------------
# Arch lists


@pytest.mark.parametrize("exchange", [True, False])
def test_replace_tree_never_deletes_before_the_new_tree_is_in(tmp_path, monkeypatch, exchange):
    target = tmp_path / "artifacts" / "key"
    _install(target, "old")
    _install(tmp_path / "artifacts" / "new", "new")
    if not exchange:
        monkeypatch.setattr(sw, "_exchange", lambda a, b: False)
    assert sw.replace_tree(str(target), str(tmp_path / "artifacts" / "new")) in ("exchange", "rename")
    assert bk.read_stamp(str(target))["key"] == "new"
    assert sorted(os.listdir(tmp_path / "artifacts")) == ["key"]


def test_replace_tree_failure_puts_the_old_tree_back(tmp_path, monkeypatch):
    target = tmp_path / "key"
    _install(target, "old")
    _install(tmp_path / "new", "new")
    monkeypatch.setattr(sw, "_exchange", lambda a, b: False)
    real_rename = os.rename

    def flaky_rename(src, dst):
        if str(src).endswith("new"):
            raise OSError(5, "I/O error (injected)")
        return real_rename(src, dst)

    monkeypatch.setattr(sw.os, "rename", flaky_rename)
    with pytest.raises(OSError, match="injected"):
        sw.replace_tree(str(target), str(tmp_path / "new"))
    monkeypatch.setattr(sw.os, "rename", real_rename)
    assert bk.read_stamp(str(target))["key"] == "old" and (tmp_path / "new").is_dir()
    assert sorted(os.listdir(tmp_path)) == ["key", "new"]


HOLD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpufleet.deepep.plugins.module_utils import _swap as sw
with sw.PrefixLock(sys.argv[2], timeout=0):
    os.makedirs(sys.argv[3])  # the first build's staging directory
    open(sys.argv[4], "w").close()
    sys.stdin.read()  # hold the lock until the test closes stdin
"""


class _Holder(object):
    """A second process that takes the prefix lock, creates its staging directory and holds the lock."""

    def __init__(self, prefix, staging, tmp_path):
        ready = tmp_path / "holder.ready"
        collections = str(Path(__file__).resolve().parents[2] / ".collections")
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, collections, prefix, staging, str(ready)],
                                     stdin=subprocess.PIPE)
        for dummy in range(600):  # bounded: at most about 60 s for the holder to start
            if ready.exists() or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists(), "the lock holder did not start"

    def release(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


def test_a_second_build_refuses_and_leaves_the_first_ones_staging(tmp_path):
    prefix = str(tmp_path / "opt" / "nvshmem")
    staging = sw.staging_path(prefix, "ab" * 32)
    holder = _Holder(prefix, staging, tmp_path)
    try:
        with pytest.raises(bk.BuildError) as info:
            with sw.PrefixLock(prefix, timeout=0, what="NVSHMEM build"):
                sw.clean_stale_staging(prefix)
        message = str(info.value)
        assert "another NVSHMEM build of %s is running" % prefix in message
        assert str(tmp_path / "opt" / ".nvshmem.lock") in message and "pid %d" % holder.proc.pid in message
        assert "lock_timeout" in message and os.path.isdir(staging)
    finally:
        holder.release()
    # Once the first run ended, the next one takes the lock (and may clean what the first left).
    with sw.PrefixLock(prefix, timeout=0):
        assert sw.clean_stale_staging(prefix) == [staging]


def test_a_second_build_waits_for_the_first(tmp_path):
    prefix = str(tmp_path / "nvshmem")
    holder = _Holder(prefix, sw.staging_path(prefix, "cd" * 32), tmp_path)
    polls = []

    def sleep(seconds):  # the waiter's poll: the first build ends while the second waits
        polls.append(seconds)
        if len(polls) == 3:
            holder.release()
        time.sleep(seconds)

    lock = sw.PrefixLock(prefix, timeout=600, poll=0.05)
    lock._sleep = sleep
    with lock:
        assert len(polls) >= 3 and os.path.isdir(sw.staging_path(prefix, "cd" * 32))


def test_the_build_lock_is_beside_the_prefix_and_outlives_swaps(tmp_path):
    prefix = tmp_path / "nvshmem"
    _install(tmp_path / "staged", "new")
    with sw.PrefixLock(str(prefix), timeout=0) as lock:
        sw.swap_in(str(prefix), str(tmp_path / "staged"))
        assert lock.path == str(tmp_path / ".nvshmem.lock")
    assert sorted(os.listdir(tmp_path)) == [".nvshmem.lock", "nvshmem"]
