# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_buildkey.py: build keys, source tree hashes and stamps."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _buildkey as bk

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "tools" / "fleetsim" / "fixtures" / "sources"


# --------------------------------------------------------------------------------------------
# Keys

BASE_INPUTS = {
    "source": {"kind": "tarball", "sha256": "a" * 64},
    "fixes": {"roce_ah_attr_fix": 1},
    "configure": {"NVSHMEM_IBGDA_SUPPORT": True, "GDRCOPY_HOME": "/opt/deepep/gdrcopy"},
    "cuda": "13.0.88",
    "compiler": "c++ (Debian 12.2.0-14) 12.2.0",
    "torch": "2.11.0+cu130",
    "nccl": "2.30.7",
    "nvshmem": "3.4.5",
    "arch_list": "9.0",
    "generation": "v1",
}


def test_key_is_stable_and_independent_of_dict_order():
    reordered = dict(reversed(list(copy.deepcopy(BASE_INPUTS).items())))
    reordered["configure"] = dict(reversed(list(reordered["configure"].items())))
    key = bk.build_key("nvshmem", BASE_INPUTS)
    assert key == bk.build_key("nvshmem", reordered)
    assert len(key) == 64 and int(key, 16) >= 0
    assert bk.canonical_json({"b": 1, "a": [1, "x"]}) == '{"a":[1,"x"],"b":1}'


def _mutations():
    yield "source", {"kind": "tarball", "sha256": "b" * 64}
    yield "fixes", {"roce_ah_attr_fix": False}
    yield "configure", {"NVSHMEM_IBGDA_SUPPORT": False, "GDRCOPY_HOME": "/opt/deepep/gdrcopy"}
    yield "cuda", "12.9.86"
    yield "compiler", "c++ (Ubuntu 13.2.0) 13.2.0"
    yield "torch", "2.9.1+cu129"
    yield "nccl", "2.28.9"
    yield "nvshmem", "3.5.19"
    yield "arch_list", "10.0"
    yield "generation", "v2"


@pytest.mark.parametrize("name,value", list(_mutations()), ids=[m[0] for m in _mutations()])
def test_every_input_changes_the_key(name, value):
    changed = copy.deepcopy(BASE_INPUTS)
    changed[name] = value
    assert bk.build_key("deepep", changed) != bk.build_key("deepep", BASE_INPUTS)


def test_kind_and_missing_input_change_the_key():
    assert bk.build_key("deepep", BASE_INPUTS) != bk.build_key("nvshmem", BASE_INPUTS)
    fewer = dict(BASE_INPUTS)
    del fewer["nccl"]
    assert bk.build_key("deepep", fewer) != bk.build_key("deepep", BASE_INPUTS)


@pytest.mark.parametrize("bad", [{"x": object()}, {"x": float("nan")}, {1: "a"}])
def test_key_refuses_inputs_without_a_stable_json_form(bad):
    with pytest.raises(bk.BuildError):
        bk.build_key("deepep", bad)


def test_short_key_checks_its_input():
    assert bk.short_key("0123456789abcdef") == "01234567"
    with pytest.raises(bk.BuildError, match="not a build key"):
        bk.short_key("../etc")


def test_tree_hash_ignores_build_outputs_and_sees_content_and_mode(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(SOURCES / "deepep-v1-fixture", tree)
    first = bk.tree_hash(str(tree))
    (tree / "build").mkdir()
    (tree / "build" / "x.o").write_text("obj")
    (tree / "deep_ep_cpp.cpython-311-x86_64-linux-gnu.so").write_text("so")
    (tree / "deep_ep.egg-info").mkdir()
    assert bk.tree_hash(str(tree)) == first
    (tree / "deep_ep" / "utils.py").write_text("changed\n")
    second = bk.tree_hash(str(tree))
    assert second != first
    os.chmod(tree / "setup.py", 0o755)
    assert bk.tree_hash(str(tree)) != second


# --------------------------------------------------------------------------------------------
# Stamps, staging, swap, rollback


def test_stamp_roundtrip_and_unreadable_stamp(tmp_path):
    prefix = tmp_path / "nvshmem"
    prefix.mkdir()
    assert bk.read_stamp(str(prefix)) is None
    bk.write_stamp(str(prefix), {"key": "ab" * 32, "inputs": {"a": 1}})
    assert bk.read_stamp(str(prefix)) == {"key": "ab" * 32, "inputs": {"a": 1}}
    assert [p.name for p in prefix.iterdir()] == [bk.STAMP_NAME]
    (prefix / bk.STAMP_NAME).write_text("{not json")
    assert bk.read_stamp(str(prefix)) is None
