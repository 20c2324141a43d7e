# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""module_utils._linkage: the linkage record, read from real objects compiled here (g++, nvcc) and from the
captured output of a real DeepEP V2 build on 4 x H200 (readelf, cuobjdump, envs.py)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import ElfError
from ansible_collections.gpufleet.deepep.plugins.module_utils._devicecode import (
    DeviceCodeError,
    archs_from_cuobjdump,
    embedded_archs,
    fatbin_archs,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import elf_sections, undefined_symbols
from ansible_collections.gpufleet.deepep.plugins.module_utils._linkage import (
    baked_env_from_text,
    check_record,
    compiler_from_version_output,
    cxx11_abi,
    installed_library,
    linkage_record,
    LinkageError,
    object_record,
    resolve_needed,
    torch_cuda_from_version_py,
    tree_objects,
)

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "h200x4" / "deepep_v2_linkage.txt"
NVCC = "/usr/local/cuda/bin/nvcc"


def captured(title):
    """One ``== <title>`` section of the captured linkage facts of the real V2 build."""
    text = CAPTURED.read_text()
    return text.split("== " + title, 1)[1].split("\n", 1)[1].split("\n== ", 1)[0]


def compile_shared(tmp_path, name, source, *flags, compiler="g++", suffix=".cpp"):
    src = tmp_path / (name + suffix)
    src.write_text(source)
    out = tmp_path / (name + ".so")
    pic = ["-Xcompiler", "-fPIC"] if compiler == NVCC else ["-fPIC"]
    subprocess.run([compiler, *pic, "-shared", str(src), "-o", str(out), *flags], check=True, timeout=300,
                   capture_output=True)
    return out


TAKES_STRING = '#include <string>\nnamespace c10 { void check(const std::string&); }\n' \
               'extern "C" void call() { c10::check("x"); }\n'
DEFINES_STRING = '#include <string>\nnamespace c10 { void check(const std::string& s) { (void)s.size(); } }\n'


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("linkage")
    out = {}
    for abi in (0, 1):
        flag = "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi
        lib = tmp / ("abi%d" % abi)
        lib.mkdir()
        compile_shared(lib, "libc10", DEFINES_STRING, flag, "-Wl,-soname,libc10.so")
        out["torch_abi%d" % abi] = compile_shared(lib, "ext", TAKES_STRING, flag, "-L" + str(lib), "-lc10",
                                                  "-Wl,-rpath," + str(lib), "-Wl,--enable-new-dtags")
        out["plain_abi%d" % abi] = compile_shared(lib, "plain", TAKES_STRING, flag)
    out["c"] = compile_shared(tmp, "c", "int answer(void) { return 42; }\n", compiler="gcc", suffix=".c")
    out["static"] = compile_shared(tmp, "static", '#include <regex>\nextern "C" int ok(const char* s) '
                                   '{ return std::regex_search(s, std::regex("a+")); }\n',
                                   "-static-libstdc++", "-Wl,-rpath,/opt/c", "-Wl,--disable-new-dtags")
    return out


# --- the dynamic section, libstdc++ and the C++ ABI ----------------------------------------------------------


def test_object_record_of_a_torch_extension_shaped_object(objects):
    data = objects["torch_abi1"].read_bytes()
    record = object_record("deep_ep/_C.so", data)
    assert record["path"] == "deep_ep/_C.so" and record["needed"][:2] == ["libc10.so", "libstdc++.so.6"]
    assert record["runpath"] == [str(objects["torch_abi1"].parent)] and record["rpath"] == []
    assert record["soname"] is None and record["libstdcxx"] == "shared"
    assert record["sass"] is None and record["ptx"] is None  # not asked: null, never a guess


@pytest.mark.parametrize("name, expected", [
    ("torch_abi1", True),   # an undefined c10 symbol taking std::__cxx11::basic_string
    ("torch_abi0", False),  # needs libc10.so, takes c10 symbols, none with __cxx11
    ("plain_abi1", True),   # no torch, but __cxx11 in an undefined symbol says ABI 1 all the same
    ("plain_abi0", None),   # no torch and no __cxx11: cannot tell
    ("c", None),
])
def test_cxx11_abi_is_read_from_the_undefined_symbols(objects, name, expected):
    data = objects[name].read_bytes()
    needed = object_record(name, data)["needed"]
    assert cxx11_abi(undefined_symbols(data, name), needed) is expected


def test_undefined_symbols_are_the_ones_the_object_takes(objects):
    data = objects["torch_abi1"].read_bytes()
    undefined = undefined_symbols(data)
    assert any(s.startswith("_ZN3c105check") and "__cxx11" in s for s in undefined)
    assert "call" not in undefined  # defined here


def test_static_libstdcxx_and_plain_c(objects):
    static = object_record("s.so", objects["static"].read_bytes())
    assert static["libstdcxx"] == "static" and static["rpath"] == ["/opt/c"] and static["runpath"] == []
    assert object_record("c.so", objects["c"].read_bytes())["libstdcxx"] == "none"


@pytest.mark.parametrize("data, words", [
    (b"", "not an ELF object"),
    (b"#!/bin/sh\n" * 10, "not an ELF object"),
])
def test_what_is_not_elf_is_named(data, words):
    with pytest.raises(ElfError) as info:
        elf_sections(data, "deep_ep/_C.so")
    assert words in str(info.value) and "deep_ep/_C.so" in str(info.value)


def test_a_truncated_object_is_named(objects):
    data = objects["torch_abi1"].read_bytes()
    with pytest.raises(ElfError) as info:
        elf_sections(data[:4096], "cut.so")
    assert "cut.so" in str(info.value) and "truncated" in str(info.value)


# --- SASS and PTX ---------------------------------------------------------------------------------------------


def test_cuobjdump_lists_of_the_real_v2_build():
    assert archs_from_cuobjdump(captured("cuobjdump --list-elf"), "elf") == ["sm_90"]
    # "cuobjdump info    : No PTX file found to extract from '...'": none embedded.
    assert archs_from_cuobjdump(captured("cuobjdump --list-ptx"), "ptx") == []


@pytest.mark.parametrize("text, what, expected", [
    # The format pytorch's test_cpp_extensions_jit asserts, several archs, sorted by number then suffix.
    ("ELF file    1: x.1.sm_100a.cubin\nELF file    2: x.2.sm_90.cubin\nELF file    3: x.3.sm_90a.cubin\n", "elf",
     ["sm_90", "sm_90a", "sm_100a"]),
    ("PTX file    1: x.1.sm_90.ptx\nPTX file    2: x.2.sm_100f.ptx\n", "ptx", ["sm_90", "sm_100f"]),
    ("ELF file    1: x.1.sm_90.cubin\n", "ptx", None),  # a list of the other kind says nothing about PTX
    ("cuobjdump info    : File 'x.so' does not contain device code\n", "elf", []),
    ("cuobjdump fatal   : Could not open input file 'x.so'\n", "elf", None),
    ("", "ptx", None),
    ("ELF file    1: x.1.cubin\n", "elf", None),  # a listed object without an arch: nothing for sure
])
def test_cuobjdump_output_forms(text, what, expected):
    assert archs_from_cuobjdump(text, what) == expected


def test_cuobjdump_asked_for_something_else_is_named():
    with pytest.raises(DeviceCodeError) as info:
        archs_from_cuobjdump("", "cubin")
    assert "elf or ptx" in str(info.value) and "'cubin'" in str(info.value)


needs_nvcc = pytest.mark.skipif(not os.access(NVCC, os.X_OK), reason="needs nvcc at /usr/local/cuda")
KERNEL = '__global__ void k(int* p) { p[0] = 1; }\nextern "C" void launch(int* p) { k<<<1, 1>>>(p); }\n'


@needs_nvcc
@pytest.mark.parametrize("gencodes, sass, ptx", [
    (["arch=compute_90,code=sm_90"], ["sm_90"], []),
    (["arch=compute_90a,code=sm_90a", "arch=compute_90,code=sm_90", "arch=compute_80,code=compute_80"],
     ["sm_90", "sm_90a"], ["sm_80"]),
    (["arch=compute_100f,code=sm_100f", "arch=compute_100a,code=[sm_100a,compute_100a]"],
     ["sm_100a", "sm_100f"], ["sm_100a"]),
    (["arch=compute_90a,code=compute_90a"], [], ["sm_90a"]),
])
def test_fatbin_entries_of_real_nvcc_objects(tmp_path, gencodes, sass, ptx):
    flags = ["-gencode=" + g for g in gencodes]
    so = compile_shared(tmp_path, "k", KERNEL, *flags, compiler=NVCC, suffix=".cu")
    data = so.read_bytes()
    assert fatbin_archs(data, "k.so") == (sass, ptx)
    # Without cuobjdump in the CUDA home, embedded_archs reads the same from the bytes.
    assert embedded_archs(None, str(tmp_path / "no-cuda"), str(so), data) == (sass, ptx, None)
    assert object_record("k.so", data, sass, ptx)["sass"] == sass


@needs_nvcc
def test_a_fatbin_this_reader_does_not_know_gives_null_never_a_guess(tmp_path):
    so = compile_shared(tmp_path, "k", KERNEL, "-gencode=arch=compute_90,code=sm_90",
                        compiler=NVCC, suffix=".cu")
    data = bytearray(so.read_bytes())
    stype, offset, size, link, entsize = elf_sections(bytes(data))[".nv_fatbin"]
    for position, value in ((offset + 16, b"\x07\x00"),          # an entry kind that is neither PTX nor ELF
                            (offset + 4, b"\x02\x00"),           # a fatbin header version other than 1
                            (offset, b"\x00\x00\x00\x01")):      # not a fatbin header, not padding
        bad = bytearray(data)
        bad[position:position + len(value)] = value
        assert fatbin_archs(bytes(bad), "bad.so") == (None, None)
        sass, ptx, warning = embedded_archs(None, str(tmp_path / "no-cuda"), "bad.so", bytes(bad))
        assert (sass, ptx) == (None, None) and "bad.so" in warning and "not recorded" in warning


def test_an_object_without_device_code_embeds_none(objects):
    assert fatbin_archs(objects["torch_abi1"].read_bytes()) == ([], [])


def test_embedded_archs_runs_cuobjdump_with_a_timeout_where_the_toolkit_has_it(tmp_path, objects):
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "cuobjdump").write_text("#!/bin/sh\nexit 0\n")
    (cuda / "bin" / "cuobjdump").chmod(0o755)
    calls = []

    def run(argv, timeout):
        calls.append((argv, timeout))
        return 0, captured("cuobjdump --list-elf" if argv[1] == "--list-elf" else "cuobjdump --list-ptx"), ""

    assert embedded_archs(run, str(cuda), "/x/_C.so") == (["sm_90"], [], None)
    assert [argv for argv, timeout in calls] == [[str(cuda / "bin" / "cuobjdump"), "--list-elf", "/x/_C.so"],
                                                 [str(cuda / "bin" / "cuobjdump"), "--list-ptx", "/x/_C.so"]]
    assert all(timeout and timeout > 0 for argv, timeout in calls)

    def fails(argv, timeout):
        return 124, "", "timed out after 300s"

    sass, ptx, warning = embedded_archs(fails, str(cuda), "/x/_C.so")
    assert (sass, ptx) == (None, None) and "rc=124" in warning and "/x/_C.so" in warning


# --- what the build baked in, the compiler, torch's CUDA, resolution --------------------------------------------


def test_baked_env_of_the_real_v2_build():
    assert baked_env_from_text(captured("/opt/torch/.venv/lib/python3.12/site-packages/deep_ep/envs.py")) == {
        "EP_NCCL_ROOT_DIR": "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl"}
    assert baked_env_from_text("# Pre-installed environment variables\npersistent_envs = dict()\n") == {}
    assert baked_env_from_text(None) is None


@pytest.mark.parametrize("text, words", [
    ("persistent_envs = dict(\n", "not valid Python"),
    ("persistent_envs = dict()\npersistent_envs['EP_JIT_CACHE_DIR'] = os.environ['HOME']\n", "line 2"),
    ("persistent_envs = dict()\npersistent_envs['not a name'] = '1'\n", "not an environment variable name"),
    ("persistent_envs = dict()\npersistent_envs[3] = '1'\n", "not an environment variable name"),
    ("persistent_envs = dict()\npersistent_envs['EP_X\\n'] = '1'\n", "not an environment variable name"),
])
def test_a_malformed_envs_py_is_refused_naming_the_line_and_the_form(text, words):
    with pytest.raises(LinkageError) as info:
        baked_env_from_text(text)
    assert words in str(info.value) and "deep_ep/envs.py" in str(info.value)


def test_compiler_and_torch_cuda():
    assert compiler_from_version_output("\ng++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022\n") == \
        "g++ (Debian 12.2.0-14+deb12u1) 12.2.0"
    assert compiler_from_version_output("") is None
    assert torch_cuda_from_version_py("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                      "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n") == "13.0"
    assert torch_cuda_from_version_py("__version__ = '2.11.0+cpu'\ncuda: Optional[str] = None\n") is None
    assert torch_cuda_from_version_py('cuda = "12.9"\n') == "12.9"
    assert torch_cuda_from_version_py(None) is None


def test_resolve_needed_follows_the_search_path_not_origin(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second):
        directory.mkdir()
    (second / "libnccl.so.2.30.7").write_text("")
    os.symlink("libnccl.so.2.30.7", str(second / "libnccl.so.2"))
    assert resolve_needed("libnccl.so.2", [str(first), str(second)]) == str(second / "libnccl.so.2.30.7")
    assert resolve_needed("libnccl.so.2", ["$ORIGIN/../lib", str(first)]) is None


@pytest.mark.parametrize("origin", ["$ORIGIN/../lib", "${ORIGIN}/lib"])
def test_resolve_needed_as_the_node_check_uses_it_keeps_the_path_and_looks_under_a_root(tmp_path, origin):
    """The node's check of a record resolves through the same function: the path as found (not followed), existence
    asked of the node's root, $ORIGIN skipped in both spellings."""
    root = tmp_path / "root"
    (root / "opt" / "nccl" / "lib").mkdir(parents=True)
    (root / "opt" / "nccl" / "lib" / "libnccl.so.2").write_text("")
    seen = []

    def exists(path):
        seen.append(path)
        return os.path.isfile(str(root) + path)

    got = resolve_needed("libnccl.so.2", [origin, "/usr/lib", "/opt/nccl/lib"], exists=exists, real=False)
    assert got == "/opt/nccl/lib/libnccl.so.2"
    assert seen == ["/usr/lib/libnccl.so.2", "/opt/nccl/lib/libnccl.so.2"]


def test_tree_objects_and_installed_library(tmp_path, objects):
    lib = tmp_path / "staged" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(str(objects["c"]), str(lib / "libgdrapi.so.2.5"))
    os.symlink("libgdrapi.so.2.5", str(lib / "libgdrapi.so.2"))
    (lib / "libgdrapi.a").write_bytes(b"!<arch>\n")
    (lib / "broken.so").write_bytes(b"\x7fELF" + b"\0" * 10)
    found, warnings = tree_objects(None, str(tmp_path / "no-cuda"), str(tmp_path / "staged"))
    assert [o["path"] for o in found] == ["lib/libgdrapi.so.2.5"]  # the link and the archive are left out
    assert found[0]["sass"] == [] and len(warnings) == 1 and "lib/broken.so" in warnings[0]
    assert installed_library(str(tmp_path / "staged"), "/opt/gdrcopy", "libgdrapi.so.2") == \
        "/opt/gdrcopy/lib/libgdrapi.so.2.5"
    assert installed_library(str(tmp_path / "staged"), "/opt/gdrcopy", "libnccl.so*") is None


# --- the record -----------------------------------------------------------------------------------------------


def good_record():
    return linkage_record(
        "deepep",
        [{"path": "deep_ep/_C.so", "needed": ["libnccl.so.2"], "runpath": ["/opt/nccl/lib"], "rpath": [],
          "soname": None, "libstdcxx": "shared", "sass": ["sm_90"], "ptx": []}],
        torch={"version": "2.11.0+cu130", "cxx11_abi": True, "cuda": "13.0"}, cuda="13.0.88",
        compiler={"cxx": "g++", "version": "g++ 12.2.0"},
        nccl={"header_version": "2.30.7", "root": "/opt/nccl", "library": "/opt/nccl/lib/libnccl.so.2.30.7"},
        nvshmem={"host_version": "3.4.5", "host_library": None, "device_version": None, "device_library": None},
        baked_env={"EP_NCCL_ROOT_DIR": "/opt/nccl"})


def test_a_record_has_exactly_the_schema():
    record = good_record()
    assert sorted(record) == ["artifact", "baked_env", "compiler", "cuda", "nccl", "nvshmem", "objects", "schema",
                              "torch", "warnings"]
    assert record["schema"] == 1 and record["warnings"] == [] and check_record(copy.deepcopy(record)) == record
    bare = linkage_record("gdrcopy", [])
    assert bare["torch"] is None and bare["nccl"] is None and bare["compiler"] == {"cxx": None, "version": None}


def _set(record, path, value):
    target = record
    for part in path[:-1]:
        target = target[part]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value


@pytest.mark.parametrize("path, value, words", [
    (("schema",), 2, "linkage.schema is 2, expected 1"),
    (("artifact",), "torch", "linkage.artifact is 'torch', expected one of deepep, nvshmem, nccl, gdrcopy"),
    (("objects",), {}, "linkage.objects must be a list"),
    (("objects", 0, "path"), "/abs/_C.so", "linkage.objects[0].path is '/abs/_C.so', expected a path relative"),
    (("objects", 0, "needed"), "libc.so.6", "linkage.objects[0].needed is 'libc.so.6', expected list"),
    (("objects", 0, "runpath"), None, "linkage.objects[0].runpath is None, expected list"),
    (("objects", 0, "rpath"), "/x", "linkage.objects[0].rpath is '/x', expected list"),
    (("objects", 0, "soname"), 3, "linkage.objects[0].soname is 3, expected str or null"),
    (("objects", 0, "libstdcxx"), "dynamic", "linkage.objects[0].libstdcxx is 'dynamic', expected shared, static"),
    (("objects", 0, "sass"), ["90"], "linkage.objects[0].sass holds '90', expected sm_<digits>[a|f]"),
    (("objects", 0, "sass"), ["sm_90\n"], "linkage.objects[0].sass holds 'sm_90\\n', expected sm_<digits>[a|f]"),
    (("objects", 0, "ptx"), "sm_90", "linkage.objects[0].ptx is 'sm_90', expected list or null"),
    (("objects", 0, "extension"), "x", "linkage.objects[0] must be a dict with exactly"),
    (("torch", "cxx11_abi"), 1, "linkage.torch.cxx11_abi is 1, expected bool or null"),
    (("torch", "version"), 2.11, "linkage.torch.version is 2.11, expected str or null"),
    (("torch", "cuda"), 13, "linkage.torch.cuda is 13, expected str or null"),
    (("cuda",), 13.0, "linkage.cuda is 13.0, expected a version string or null"),
    (("compiler",), None, "linkage.compiler must be a dict with exactly ['cxx', 'version']"),
    (("compiler", "version"), ["g++"], "linkage.compiler.version is ['g++'], expected str or null"),
    (("compiler", "cxx"), 1, "linkage.compiler.cxx is 1, expected str or null"),
    (("nccl", "header_version"), 23007, "linkage.nccl.header_version is 23007, expected str or null"),
    (("nccl", "root"), False, "linkage.nccl.root is False, expected str or null"),
    (("nccl", "library"), ["x"], "linkage.nccl.library is ['x'], expected str or null"),
    (("nccl", "version"), "2.30.7", "linkage.nccl must be null or a dict with exactly"),
    (("nvshmem", "host_version"), 3, "linkage.nvshmem.host_version is 3, expected str or null"),
    (("nvshmem", "host_library"), 1, "linkage.nvshmem.host_library is 1, expected str or null"),
    (("nvshmem", "device_version"), 3, "linkage.nvshmem.device_version is 3, expected str or null"),
    (("nvshmem", "device_library"), True, "linkage.nvshmem.device_library is True, expected str or null"),
    (("baked_env",), {"EP_X": 1}, "linkage.baked_env is {'EP_X': 1}, expected null or a dict of names to string"),
    (("warnings",), "none", "linkage.warnings must be a list of strings"),
    (("extra",), 1, "expected exactly"),
    (("torch",), KeyError, "expected exactly"),
])
def test_a_record_of_the_wrong_shape_is_refused_naming_the_field_and_the_form(path, value, words):
    record = good_record()
    _set(record, path, value)
    with pytest.raises(LinkageError) as info:
        check_record(record)
    assert words in str(info.value)


def test_the_record_of_a_collection_v2_build_on_h100_is_well_formed_and_links_shared_libstdcxx():
    # deepep_build's record of V2 dd758ca on 2 x H100 (the machines' g++ has a dangling libstdc++.so link; the
    # build's private link made the extension take the shared runtime).
    build = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "h100x2"
                        / "deepep_v2_build_record.json").read_text())
    record = build["linkage"]
    assert check_record(copy.deepcopy(record)) == record
    (ext,) = record["objects"]
    assert ext["libstdcxx"] == "shared" and "libstdc++.so.6" in ext["needed"]
    assert ext["sass"] == ["sm_90"] and ext["ptx"] == []
    assert "libnccl.so.2" in ext["needed"] and record["nccl"]["header_version"] == "2.30.7"
    assert ext["runpath"][-1] == record["nccl"]["root"] + "/lib"
