# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_swap.py: staging paths, the renameat2 / two-rename swap, rollback and the
repair of interrupted swaps."""

from __future__ import annotations

import os

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
