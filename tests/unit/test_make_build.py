# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpufleet.deepep.make_build against the GDRCopy- and NCCL-shaped fixture sources: real make builds in tmp_path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from unit_helpers import siblings as _siblings

from ansible_collections.gpufleet.deepep.plugins.modules import make_build
from ansible_collections.gpufleet.deepep.plugins.module_utils import _arch
from ansible_collections.gpufleet.deepep.plugins.module_utils import _buildkey as bk

SOURCES = Path(__file__).resolve().parents[2] / "tools" / "fleetsim" / "fixtures" / "sources"

pytestmark = pytest.mark.skipif(not shutil.which("make") or not shutil.which("cc"), reason="needs make and cc")


def _source(tmp_path, name):
    copy = tmp_path / "src" / name
    if not copy.is_dir():
        shutil.copytree(SOURCES / name, copy)
    return copy


def _args(tmp_path, kind, **extra):
    cuda = tmp_path / "cuda"
    cuda.mkdir(exist_ok=True)
    args = {"kind": kind, "src": str(_source(tmp_path, "%s-fixture" % kind)), "cuda_home": str(cuda), "jobs": 2,
            "version": "2.5.1" if kind == "gdrcopy" else "2.30.7", "prefix": str(tmp_path / "opt" / kind)}
    if kind == "nccl":
        args["cuda_arch_list"] = "9.0;10.0+PTX"
    args.update(extra)
    return args


def _tree_snapshot(path):
    return sorted((str(p.relative_to(path)), p.read_bytes() if p.is_file() else b"") for p in Path(path).rglob("*"))


@pytest.mark.parametrize("kind", ["gdrcopy", "nccl"])
def test_build_is_keyed_staged_swapped_and_idempotent(module_runner, tmp_path, kind):
    args = _args(tmp_path, kind)
    source_before = _tree_snapshot(args["src"])
    plan = module_runner(make_build, args, check_mode=True)
    assert not plan.failed, plan.get("msg")
    assert plan["would_build"] and plan["changed"] and not os.path.exists(args["prefix"])
    facts = plan["ansible_facts"]["gpufleet_%s_build" % kind]
    assert facts["current"] and facts["key"] == plan["key"]

    first = module_runner(make_build, args)
    assert not first.failed, first.get("msg")
    assert first["built"] and first["key"] == plan["key"] and first["previous"] is None
    facts = first["ansible_facts"]["gpufleet_%s_build" % kind]
    assert facts["present"] and facts["current"] and facts["missing"] == []
    assert bk.read_stamp(args["prefix"])["key"] == first["key"]
    assert os.path.isfile(os.path.join(args["prefix"], bk.LOG_NAME))
    # The stamp holds the linkage record (the real objects make built; no cuobjdump or nvcc in this cuda_home).
    linkage = bk.read_stamp(args["prefix"])["linkage"]
    library = {"gdrcopy": "lib/libgdrapi.so.2.5", "nccl": "lib/libnccl.so.2.30.7"}[kind]
    assert first["linkage"] == linkage and linkage["schema"] == 1 and linkage["artifact"] == kind
    assert [o["path"] for o in linkage["objects"]] == [library]
    assert linkage["objects"][0]["soname"] == {"gdrcopy": "libgdrapi.so.2", "nccl": "libnccl.so.2"}[kind]
    assert linkage["objects"][0]["sass"] == [] and linkage["objects"][0]["ptx"] == []
    assert linkage["cuda"] is None and linkage["warnings"] == []
    assert linkage["compiler"]["cxx"] == {"gdrcopy": "cc", "nccl": "g++"}[kind]
    assert linkage["compiler"]["version"].startswith(linkage["compiler"]["cxx"] + " ")
    assert linkage["torch"] is None and linkage["nvshmem"] is None and linkage["baked_env"] is None
    if kind == "nccl":
        assert linkage["nccl"] == {"header_version": "2.30.7", "root": args["prefix"],
                                   "library": os.path.join(args["prefix"], library)}
    else:
        assert linkage["nccl"] is None
    assert _siblings(args["prefix"]) == [kind] and _tree_snapshot(args["src"]) == source_before
    if kind == "nccl":
        header = Path(args["prefix"], "include", "nccl.h").read_text()
        assert "#define NCCL_MINOR 30" in header
        assert "-gencode=arch=compute_100,code=compute_100" in first["inputs"]["gencode"]
    else:
        assert first["commands"][0][-2:] == ["lib", "lib_install"]

    again = module_runner(make_build, args)
    assert not again.failed and not again["changed"] and not again["built"] and again["commands"] == []

    changed = module_runner(make_build, dict(args, make_vars={"EXTRA_FLAG": "1"}))
    assert changed["built"] and changed["key"] != first["key"]
    assert changed["previous"] == args["prefix"] + ".previous"
    assert bk.read_stamp(args["prefix"] + ".previous")["key"] == first["key"]


def test_source_id_gives_the_key_before_the_source_is_there(module_runner, tmp_path):
    args = _args(tmp_path, "gdrcopy", source_id="https://example.invalid/gdrcopy-2.5.1.tar.gz#sha256:ab")
    absent = dict(args, src=str(tmp_path / "not-fetched-yet"))
    plan = module_runner(make_build, absent, check_mode=True)
    assert not plan.failed and plan["would_build"]
    built = module_runner(make_build, args)
    assert built["built"] and built["key"] == plan["key"]
    # Converged: the source is not needed.
    assert not module_runner(make_build, absent)["changed"]
    shutil.rmtree(args["prefix"])
    missing = module_runner(make_build, absent)
    assert missing.failed and "src %s is not a source directory" % absent["src"] in missing["msg"]


def test_a_failed_build_leaves_the_previous_build(module_runner, tmp_path):
    args = _args(tmp_path, "gdrcopy")
    good = module_runner(make_build, args)
    broken = tmp_path / "broken"
    shutil.copytree(args["src"], broken)
    with open(broken / "src" / "gdrapi.c", "a") as handle:
        handle.write("\nthis is not C;\n")
    failed = module_runner(make_build, dict(args, src=str(broken)))
    assert failed.failed and failed["rc"] != 0 and "is unchanged" in failed["msg"]
    assert any("gdrapi.c" in line for line in failed["log_tail"])
    assert bk.read_stamp(args["prefix"])["key"] == good["key"]
    again = module_runner(make_build, args)
    assert not again["changed"] and again["cleaned"] == [failed["log"].rsplit("/", 1)[0]]


@pytest.mark.parametrize("args, words", [
    ({"prefix": "/"}, "prefix '/' must be an absolute path other than /"),
    ({"jobs": 0}, "jobs must be 1 or more, got 0"),
    ({"lock_timeout": -1}, "lock_timeout must be 0"),
    ({"make_vars": {"CC\nX": "gcc"}}, "make_vars entry"),
    ({"version": "2.5 .1"}, "version '2.5 .1' must be a release"),
    ({"kind": "nccl", "cuda_arch_list": "10,0"}, "cuda_arch_list: arch list"),
    ({"kind": "nccl"}, "kind nccl needs cuda_arch_list"),
])
def test_bad_options_are_named(module_runner, tmp_path, args, words):
    result = module_runner(make_build, dict(_args(tmp_path, "gdrcopy"), **args))
    assert result.failed and words in result["msg"]
    assert not os.path.exists(tmp_path / "opt")


def test_nvcc_gencode():
    assert _arch.nvcc_gencode("9.0") == "-gencode=arch=compute_90,code=sm_90"
    assert _arch.nvcc_gencode(["9.0a", "10.0+PTX"]) == (
        "-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_100,code=sm_100 "
        "-gencode=arch=compute_100,code=compute_100")
    assert _arch.nvcc_gencode("9.0,10.0") == _arch.nvcc_gencode("9.0;10.0")
    with pytest.raises(_arch.ArchError, match="sm90"):
        _arch.nvcc_gencode("sm90")


CAPTURED_LINKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "h200x4" / "deepep_v2_linkage.txt"


def _captured_section(title):
    text = CAPTURED_LINKAGE.read_text()
    return text.split("== " + title, 1)[1].split("\n", 1)[1].split("\n== ", 1)[0]


@pytest.mark.parametrize("kind", ["gdrcopy", "nccl"])
def test_the_linkage_record_takes_the_archs_from_cuobjdump_and_cuda_from_nvcc(module_runner, tmp_path, kind):
    # A CUDA home whose cuobjdump and nvcc answer with what the real ones printed (4 x H200, CUDA 13.0).
    args = _args(tmp_path, kind)
    bin_dir = Path(args["cuda_home"]) / "bin"
    bin_dir.mkdir()
    elf = tmp_path / "list-elf.txt"
    elf.write_text(_captured_section("cuobjdump --list-elf"))
    ptx = tmp_path / "list-ptx.txt"
    ptx.write_text(_captured_section("cuobjdump --list-ptx"))
    (bin_dir / "cuobjdump").write_text('#!/bin/sh\ncase "$1" in --list-elf) cat %s;; --list-ptx) cat %s;; '
                                       '*) exit 2;; esac\n' % (elf, ptx))
    (bin_dir / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    for tool in ("cuobjdump", "nvcc"):
        (bin_dir / tool).chmod(0o755)
    result = module_runner(make_build, args)
    assert not result.failed, result.get("msg")
    linkage = bk.read_stamp(args["prefix"])["linkage"]
    assert linkage["cuda"] == "13.0.88" and linkage["warnings"] == []
    assert [(o["sass"], o["ptx"]) for o in linkage["objects"]] == [(["sm_90"], [])]
    # cuobjdump ran with a timeout on the staged object, unrecorded (the commands list only the build's).
    assert all("cuobjdump" not in " ".join(argv) for argv in result["commands"])


@pytest.mark.parametrize("layout", ["empty dir", "a file", "no Makefile"])
def test_check_mode_refuses_the_source_the_build_refuses(module_runner, tmp_path, layout):
    """A source that is there but is no make tree: the plan gives the real run's refusal, not would_build."""
    src = tmp_path / "bad-src"
    if layout == "empty dir":
        src.mkdir()
    elif layout == "a file":
        src.write_text("not a tree")
    else:
        (src / "src").mkdir(parents=True)
        (src / "README").write_text("x")
    args = _args(tmp_path, "gdrcopy", src=str(src), source_id="https://example.invalid/gdrcopy.tar.gz#sha256:ab")
    plan = module_runner(make_build, args, check_mode=True)
    real = module_runner(make_build, args)
    for result in (plan, real):
        assert result.failed and not result.get("would_build") and not result.get("built")
        assert "src %s" % src in result["msg"] and "top-level Makefile" in result["msg"]
        assert "nothing was built" in result["msg"]
    assert plan["msg"] == real["msg"]
    assert not os.path.exists(args["prefix"])
