# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepEP V2's JIT cache as an artifact: the key over every input of DeepEP's own digest, the plan (nothing, install
from the artifact, warm-up), the pack and the checked, whole-kernel unpack, and the module end to end over a fake
nvcc, a fake installed deep_ep and a warm-up that compiles (writes) its kernels only when they are missing."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import deepep_jit as jit
from ansible_collections.gpufleet.deepep.plugins.module_utils._tree import UNPACK_PREFIX
from ansible_collections.gpufleet.deepep.plugins.modules import deepep_jit_cache

KEY = "ab" * 32
BASE = dict(deepep_key=KEY, arch_list=["9.0"], nvcc_version="12.9.86", deepep_dir="/usr/lib/python3/dist-packages/deep_ep",
            python="/usr/bin/python3", nccl_root="/opt/deepep/nccl/build-2.30.7", key_env={})
CHANGED = [("deepep_key", "cd" * 32), ("arch_list", ["10.0a"]), ("arch_list", ["9.0", "10.0"]),
           ("nvcc_version", "13.0.88"), ("deepep_dir", "/opt/venv/lib/python3.12/site-packages/deep_ep"),
           ("python", "/opt/venv/bin/python"), ("nccl_root", ""), ("nccl_root", "/opt/nccl-2.31"),
           ("key_env", {"EP_JIT_DEBUG": "1"}), ("key_env", {"EP_NUM_TOPK_IDX_BITS": "16"})]


def test_key_is_stable_and_ignores_arch_order_and_form():
    key, inputs = jit.jit_key(**BASE)

    def with_archs(archs):
        return jit.jit_key(**{**BASE, "arch_list": archs})[0]

    assert key == with_archs("9.0") == with_archs(["9.0", "9.0"])
    assert with_archs("9.0;10.0") == with_archs(["10.0", "9.0"])
    assert inputs["nvcc"] == "12.9.86" and inputs["env"] == {}


@pytest.mark.parametrize("name,value", CHANGED)
def test_every_input_of_deepeps_digest_changes_the_key(name, value):
    assert jit.jit_key(**dict(BASE, **{name: value}))[0] != jit.jit_key(**BASE)[0]


@pytest.mark.parametrize("name,value,named", [
    ("deepep_key", "abc", "deepep_key"), ("deepep_key", "AB" * 32, "deepep_key"), ("arch_list", [], "gpu_arch_list"),
    ("arch_list", ["sm90"], "'sm90'"), ("arch_list", "", "gpu_arch_list"), ("nvcc_version", None, "nvcc version"),
    ("key_env", {"EP_DISABLE_GIN": "1"}, "'EP_DISABLE_GIN'"), ("key_env", {"EP_JIT_DEBUG": True}, "EP_JIT_DEBUG"),
    ("key_env", ["EP_JIT_DEBUG"], "key_env"), ("deepep_key", "ab" * 32 + "\n", "deepep_key")])
def test_bad_key_inputs_are_named_with_the_expected_form(name, value, named):
    with pytest.raises(jit.JitError) as err:
        jit.jit_key(**dict(BASE, **{name: value}))
    assert named in str(err.value) and "expected" in str(err.value)


@pytest.mark.parametrize("value", ["755", "0755", "0750", "0700"])
def test_modes_accepted(value):
    assert jit.check_mode_string(value) == int(value, 8)


@pytest.mark.parametrize("value", ["rwx", "0855", "0055", "7777", "", "0644\n", "0755\n", " 755"])
def test_modes_refused(value):
    with pytest.raises(jit.JitError) as err:
        jit.check_mode_string(value)
    assert repr(value) in str(err.value) and "expected" in str(err.value)


def kernel(cache, name, digest="1f2e3d4c5b6a7980", cubin=True):
    path = cache / "cache" / ("kernel.%s.%s" % (name, digest))
    path.mkdir(parents=True)
    (path / "kernel.cu").write_text("// %s\n" % name)
    if cubin:
        (path / "kernel.cubin").write_bytes(b"\x7fELF" + name.encode())
    return path


def test_list_kernels_counts_only_complete_kernel_dirs(tmp_path):
    kernel(tmp_path, "dispatch")
    kernel(tmp_path, "combine", cubin=False)  # a compile in progress
    (tmp_path / "cache" / "notakernel").mkdir()
    (tmp_path / "tmp").mkdir()
    os.symlink(str(tmp_path / "cache" / "kernel.dispatch.1f2e3d4c5b6a7980"), str(tmp_path / "cache" / "kernel.x.abcdef12"))
    assert [k["name"] for k in jit.list_kernels(str(tmp_path))] == ["dispatch"]
    assert jit.list_kernels(str(tmp_path / "none")) == []


def test_plan_decisions(tmp_path):
    cache, arts = tmp_path / "cache", tmp_path / "arts"
    assert jit.plan(KEY, str(cache), str(arts))["would_build"] is True  # nothing anywhere: a warm-up
    (arts / KEY).mkdir(parents=True)
    (arts / KEY / jit.ARCHIVE_NAME).write_bytes(b"")
    assert jit.plan(KEY, str(cache), str(arts))["would_build"] is True  # no record: an incomplete artifact
    (arts / KEY / jit.ARTIFACT_RECORD).write_text("{}")
    decision = jit.plan(KEY, str(cache), str(arts))
    assert decision["would_build"] is False and decision["would_install"] is True and decision["artifact"]
    kernel(cache, "dispatch")
    jit.write_record(str(cache), {"key": KEY, "kernels": ["kernel.dispatch.1f2e3d4c5b6a7980"]})
    assert jit.plan(KEY, str(cache), str(arts))["would_install"] is False
    other = "cd" * 32
    assert "filled for key abababab" in jit.plan(other, str(cache), str(arts))["reason"]
    jit.write_record(str(cache), {"key": KEY, "kernels": ["kernel.dispatch.1f2e3d4c5b6a7980", "kernel.combine.00aa11bb"]})
    decision = jit.plan(KEY, str(cache), str(arts))
    assert decision["would_install"] is True and "lacks 1 kernel" in decision["reason"]


def test_pack_then_unpack_gives_whole_kernels_with_the_mode(tmp_path):
    src = tmp_path / "warm"
    kernel(src, "dispatch")
    kernel(src, "combine", "00aa11bb22cc")
    (src / "tmp").mkdir()
    (src / "tmp" / "scratch").write_text("x")
    archive = tmp_path / jit.ARCHIVE_NAME
    assert jit.pack(str(src), str(archive)) == ["kernel.combine.00aa11bb22cc", "kernel.dispatch.1f2e3d4c5b6a7980"]
    with tarfile.open(str(archive)) as tar:
        assert all(m.name.startswith("cache/kernel.") for m in tar.getmembers())
    dest = tmp_path / "node" / "jit"
    assert jit.unpack(str(archive), str(dest), check_mode=True) == (
        ["kernel.combine.00aa11bb22cc", "kernel.dispatch.1f2e3d4c5b6a7980"], [])
    assert not dest.exists()  # check mode writes nothing
    added, present = jit.unpack(str(archive), str(dest), dir_mode=0o750)
    assert len(added) == 2 and present == []
    assert [k["name"] for k in jit.list_kernels(str(dest))] == ["combine", "dispatch"]
    assert oct(os.stat(str(dest)).st_mode & 0o777) == "0o750"
    cubin = dest / "cache" / "kernel.dispatch.1f2e3d4c5b6a7980" / "kernel.cubin"
    assert oct(os.stat(str(cubin)).st_mode & 0o777) == "0o640" and cubin.read_bytes() == b"\x7fELFdispatch"
    assert not [p for p in os.listdir(str(dest)) if p.startswith(UNPACK_PREFIX)]
    assert jit.unpack(str(archive), str(dest)) == ([], added)  # idempotent: kernels it has are kept


def test_pack_refuses_an_empty_warm_up(tmp_path):
    (tmp_path / "warm" / "cache").mkdir(parents=True)
    with pytest.raises(jit.JitError) as err:
        jit.pack(str(tmp_path / "warm"), str(tmp_path / "a.tar"))
    assert "left no kernel" in str(err.value) and not (tmp_path / "a.tar").exists()
    assert os.listdir(str(tmp_path)) == ["warm"]


def _tar(path, members):
    with tarfile.open(str(path), "w") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))


GOOD = "cache/kernel.dispatch.1f2e3d4c/kernel.cubin"
BAD_ARCHIVES = [
    [("/etc/cron.d/x", "file")], [("cache/kernel.dispatch.1f2e3d4c/../../x", "file")], [("../x", "file")],
    [(GOOD, "file"), ("cache/kernel.dispatch.1f2e3d4c/kernel.cu", "link")], [("cache/other/kernel.cubin", "file")],
    [("cache/kernel.dispatch.1f2e3d4c/kernel.cu", "file")], [("cache/kernel.dispatch.1f2e3d4c/sub/x", "file")],
    [(GOOD, "file"), ("tmp/x", "file")], [], [("cache", "dir")]]


@pytest.mark.parametrize("members", BAD_ARCHIVES)
def test_a_bad_archive_is_refused_before_anything_is_written(tmp_path, members):
    archive = tmp_path / "bad.tar"
    _tar(archive, members)
    dest = tmp_path / "jit"
    with pytest.raises(jit.JitError) as err:
        jit.unpack(str(archive), str(dest))
    assert str(archive) in str(err.value) and ("expected" in str(err.value) or "kernel.cubin" in str(err.value))
    assert not dest.exists()


def test_warmup_counts():
    assert jit.warmup_counts([], ["a", "b"]) == {"compiled": 2, "loaded": 0, "compiled_kernels": ["a", "b"]}
    assert jit.warmup_counts(["a", "b"], ["a", "b"]) == {"compiled": 0, "loaded": 2, "compiled_kernels": []}
    assert jit.warmup_counts(["a"], ["a", "b"])["compiled"] == 1


# ------------------------------------------------------------------------------------------------- the module
WARMUP = r'''import hashlib, os, sys, time
cache = os.environ["EP_JIT_CACHE_DIR"]
flags = os.environ.get("EP_JIT_DEBUG", "0")
open(os.environ["WARMUP_LOG"], "a").write("run\n")
if os.environ.get("WARMUP_FAIL"):
    sys.exit(3)
for name in ("dispatch", "combine", "layout"):
    digest = hashlib.sha256((name + flags).encode()).hexdigest()[:16]
    path = os.path.join(cache, "cache", "kernel.%s.%s" % (name, digest))
    if not os.path.isdir(path):
        tmp = os.path.join(cache, "tmp", name)
        os.makedirs(tmp)
        open(os.path.join(tmp, "kernel.cubin"), "wb").write(b"cubin " + name.encode())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.rename(tmp, path)
'''


@pytest.fixture
def node(tmp_path):
    """A node: a fake nvcc, a Python that finds an installed deep_ep, the warm-up script; its options."""
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.86'\n")
    nvcc.chmod(0o755)
    site = tmp_path / "site"
    (site / "deep_ep").mkdir(parents=True)
    (site / "deep_ep" / "__init__.py").write_text("")
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (site, sys.executable))
    python.chmod(0o755)
    (tmp_path / "warmup.py").write_text(WARMUP)
    os.environ["WARMUP_LOG"] = str(tmp_path / "warmup.log")
    yield {"cache_dir": str(tmp_path / "node1" / "jit"), "artifact_dir": str(tmp_path / "node1" / "arts"),
           "deepep_key": KEY, "python": str(python), "gpu_arch_list": "9.0", "cuda_home": str(tmp_path / "cuda"),
           "warmup_argv": [sys.executable, str(tmp_path / "warmup.py")]}
    os.environ.pop("WARMUP_LOG", None)
    os.environ.pop("WARMUP_FAIL", None)


def runs(tmp_path):
    path = tmp_path / "warmup.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_module_builds_once_then_a_second_node_installs_from_the_artifact(module_runner, tmp_path, node):
    plan = module_runner(deepep_jit_cache, node, check_mode=True)
    assert plan["would_build"] and plan["changed"] and not (tmp_path / "node1").exists()  # check mode writes nothing
    built = module_runner(deepep_jit_cache, dict(node, measure_loaded=True))
    assert not built.failed, built
    assert built["key"] == plan["key"] and built["warmup"]["compiled"] == 3
    assert built["loaded_warmup"] == dict(built["loaded_warmup"], compiled=0, loaded=3)
    facts = built["ansible_facts"]["gpufleet_deepep_jit"]
    assert facts == dict(facts, current=True, kernels=["combine", "dispatch", "layout"], kernel_count=3, **{"from": "compiled"})
    assert facts["compiled_seconds"] is not None and facts["loaded_seconds"] is not None
    artifact = tmp_path / "node1" / "arts" / built["key"]
    assert sorted(os.listdir(str(artifact))) == [jit.ARCHIVE_NAME, jit.ARTIFACT_RECORD]
    assert runs(tmp_path) == 2
    # Idempotent: nothing to do, no warm-up.
    again = module_runner(deepep_jit_cache, node)
    assert not again["changed"] and runs(tmp_path) == 2
    # A second node of the key: the artifact (as the store delivers it), no warm-up, the kernels from the store.
    node2 = dict(node, cache_dir=str(tmp_path / "node2" / "jit"), artifact_dir=str(tmp_path / "node2" / "arts"))
    os.makedirs(node2["artifact_dir"])
    os.rename(str(artifact), os.path.join(node2["artifact_dir"], built["key"]))
    check = module_runner(deepep_jit_cache, node2, check_mode=True)
    assert check["would_build"] is False and check["would_install"] and len(check["added"]) == 3
    assert not os.path.exists(node2["cache_dir"])
    installed = module_runner(deepep_jit_cache, node2)
    assert installed["changed"] and installed["warmup"] is None and runs(tmp_path) == 2
    facts2 = installed["ansible_facts"]["gpufleet_deepep_jit"]
    assert facts2["from"] == "store" and facts2["kernel_count"] == 3 and facts2["current"]
    assert facts2["compiled_seconds"] == facts["compiled_seconds"]  # the builder's cold time travels with it


def test_a_key_input_change_is_a_new_key_and_a_new_warm_up(module_runner, tmp_path, node):
    first = module_runner(deepep_jit_cache, node)
    second = module_runner(deepep_jit_cache, dict(node, key_env={"EP_JIT_DEBUG": "1"}))
    assert second["key"] != first["key"] and second["warmup"]["compiled"] == 3
    assert sorted(os.listdir(node["artifact_dir"])) == sorted([first["key"], second["key"]])
    assert second["ansible_facts"]["gpufleet_deepep_jit"]["kernel_count"] == 6


def test_a_failed_warm_up_packs_and_installs_nothing(module_runner, tmp_path, node):
    os.environ["WARMUP_FAIL"] = "1"
    result = module_runner(deepep_jit_cache, node)
    assert result.failed and "JIT warm-up failed (rc=3)" in result["msg"] and "nothing was packed" in result["msg"]
    assert os.listdir(node["artifact_dir"]) == [] and not os.path.exists(node["cache_dir"])


def test_check_mode_without_nvcc_says_why_it_cannot_plan(module_runner, tmp_path, node):
    result = module_runner(deepep_jit_cache, dict(node, cuda_home=str(tmp_path / "nocuda")), check_mode=True)
    assert not result.failed and result["key"] is None and "no nvcc release" in result["msg"]
    real = module_runner(deepep_jit_cache, dict(node, cuda_home=str(tmp_path / "nocuda")))
    assert real.failed and "cannot key the JIT cache" in real["msg"]


def test_the_record_says_where_the_kernels_came_from(module_runner, tmp_path, node):
    module_runner(deepep_jit_cache, node)
    record = json.loads((tmp_path / "node1" / "jit" / jit.RECORD_NAME).read_text())
    assert record["from"] == "compiled" and len(record["kernels"]) == 3 and record["compiled"] == 3
