# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_tree: the one deterministic pack and whole-entry unpack of the DeepGEMM and DeepEP V2 JIT caches."""

from __future__ import annotations

import os
import tarfile

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _tree


def _members(tmp_path):
    (tmp_path / "f").write_bytes(b"file")
    return [("top", None), ("top/a", b"bytes"), ("top/sub/b", str(tmp_path / "f")), ("loose", b"x")]


@pytest.mark.parametrize("compress", [False, True])
def test_pack_tree_is_deterministic_and_leaves_no_temp_file(tmp_path, compress):
    one, two = tmp_path / "one", tmp_path / "two"
    _tree.pack_tree(str(one), _members(tmp_path), ".t.", compress=compress)
    os.utime(str(tmp_path / "f"), (1, 1))
    _tree.pack_tree(str(two), _members(tmp_path), ".t.", compress=compress)
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(str(one)) as tar:
        assert [(m.name, m.mode, m.uid, m.mtime, m.uname) for m in tar.getmembers()] == [
            ("top", 0o755, 0, 0, ""), ("top/a", 0o644, 0, 0, ""), ("top/sub/b", 0o644, 0, 0, ""), ("loose", 0o644, 0, 0, "")]
    assert not [p for p in os.listdir(str(tmp_path)) if p.startswith(".t.")]


def test_pack_tree_failure_keeps_the_old_archive(tmp_path):
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"old")
    with pytest.raises(OSError):
        _tree.pack_tree(str(archive), [("x", str(tmp_path / "absent"))], ".t.")
    assert archive.read_bytes() == b"old" and os.listdir(str(tmp_path)) == ["a.tar"]


def test_unpack_tree_renames_each_entry_whole_and_keeps_what_is_there(tmp_path):
    archive = tmp_path / "a.tar"
    _tree.pack_tree(str(archive), _members(tmp_path), ".t.")
    dest = tmp_path / "dest"
    (dest / "cache" / "loose").mkdir(parents=True)
    with tarfile.open(str(archive)) as tar:
        entries = {}
        for m in tar.getmembers():
            top, dummy, rel = m.name.partition("/")
            entries.setdefault(top, []).append((rel, m))
        assert _tree.unpack_tree(tar, entries, str(dest), {"loose"}, ValueError, check_mode=True) == (["top"], ["loose"])
        assert not (dest / "cache" / "top").exists()
        assert _tree.unpack_tree(tar, entries, str(dest), {"loose"}, ValueError, dir_mode=0o750) == (["top"], ["loose"])
    assert (dest / "cache" / "top" / "sub" / "b").read_bytes() == b"file"
    assert (dest / "cache" / "loose").is_dir()
    assert oct((dest / "cache" / "top" / "sub").stat().st_mode & 0o777) == oct(0o750)
    assert sorted(os.listdir(str(dest))) == ["cache"]


def test_unpack_tree_refuses_a_linked_destination(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    archive = tmp_path / "a.tar"
    _tree.pack_tree(str(archive), [("top/a", b"a")], ".t.")
    with tarfile.open(str(archive)) as tar:
        with pytest.raises(ValueError, match="is a link; expected a directory"):
            _tree.unpack_tree(tar, {"top": [("a", tar.getmember("top/a"))]}, str(tmp_path / "link"), set(), ValueError)
    assert os.listdir(str(tmp_path / "real")) == []
