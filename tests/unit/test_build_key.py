# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_build.py: keys, stamps, staging and swaps, arch lists, the
NVSHMEM helpers, DeepEP tree detection and the DeepEP preflight."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _build as b

from tools.fleetsim import mirror

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "tools" / "fleetsim" / "fixtures" / "sources"
IBGDA_CPP = SOURCES / "nvshmem-fixture" / "src" / "modules" / "transport" / "ibgda" / "ibgda.cpp"


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
    key = b.build_key("nvshmem", BASE_INPUTS)
    assert key == b.build_key("nvshmem", reordered)
    assert len(key) == 64 and int(key, 16) >= 0
    assert b.canonical_json({"b": 1, "a": [1, "x"]}) == '{"a":[1,"x"],"b":1}'


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
    assert b.build_key("deepep", changed) != b.build_key("deepep", BASE_INPUTS)


def test_kind_and_missing_input_change_the_key():
    assert b.build_key("deepep", BASE_INPUTS) != b.build_key("nvshmem", BASE_INPUTS)
    fewer = dict(BASE_INPUTS)
    del fewer["nccl"]
    assert b.build_key("deepep", fewer) != b.build_key("deepep", BASE_INPUTS)


@pytest.mark.parametrize("bad", [{"x": object()}, {"x": float("nan")}, {1: "a"}])
def test_key_refuses_inputs_without_a_stable_json_form(bad):
    with pytest.raises(b.BuildError):
        b.build_key("deepep", bad)


def test_short_key_checks_its_input():
    assert b.short_key("0123456789abcdef") == "01234567"
    with pytest.raises(b.BuildError, match="not a build key"):
        b.short_key("../etc")


def test_tree_hash_ignores_build_outputs_and_sees_content_and_mode(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(SOURCES / "deepep-v1-fixture", tree)
    first = b.tree_hash(str(tree))
    (tree / "build").mkdir()
    (tree / "build" / "x.o").write_text("obj")
    (tree / "deep_ep_cpp.cpython-311-x86_64-linux-gnu.so").write_text("so")
    (tree / "deep_ep.egg-info").mkdir()
    assert b.tree_hash(str(tree)) == first
    (tree / "deep_ep" / "utils.py").write_text("changed\n")
    second = b.tree_hash(str(tree))
    assert second != first
    os.chmod(tree / "setup.py", 0o755)
    assert b.tree_hash(str(tree)) != second


# --------------------------------------------------------------------------------------------
# Stamps, staging, swap, rollback


def test_stamp_roundtrip_and_unreadable_stamp(tmp_path):
    prefix = tmp_path / "nvshmem"
    prefix.mkdir()
    assert b.read_stamp(str(prefix)) is None
    b.write_stamp(str(prefix), {"key": "ab" * 32, "inputs": {"a": 1}})
    assert b.read_stamp(str(prefix)) == {"key": "ab" * 32, "inputs": {"a": 1}}
    assert [p.name for p in prefix.iterdir()] == [b.STAMP_NAME]
    (prefix / b.STAMP_NAME).write_text("{not json")
    assert b.read_stamp(str(prefix)) is None


def test_staging_and_previous_paths():
    key = "f" * 64
    assert b.staging_path("/opt/deepep/nvshmem", key) == "/opt/deepep/nvshmem.staging-ffffffff"
    assert b.previous_path("/opt/deepep/nvshmem/") == "/opt/deepep/nvshmem.previous"
    with pytest.raises(b.BuildError, match="absolute"):
        b.staging_path("opt/nvshmem", key)
    with pytest.raises(b.BuildError):
        b.previous_path("/")


def _install(path, marker):
    path.mkdir(parents=True)
    (path / "lib").mkdir()
    (path / "lib" / "libnvshmem_host.so.3").write_text(marker)
    b.write_stamp(str(path), {"key": marker})


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_swap_keeps_one_previous_and_rollback(tmp_path, exchange):
    prefix = tmp_path / "nvshmem"
    _install(tmp_path / "s1" / "tree", "one")
    first = b.swap_in(str(prefix), str(tmp_path / "s1" / "tree"), exchange=exchange)
    assert first["previous"] is None and b.read_stamp(str(prefix))["key"] == "one"

    _install(tmp_path / "s2" / "tree", "two")
    second = b.swap_in(str(prefix), str(tmp_path / "s2" / "tree"), exchange=exchange)
    assert second["previous"] == str(prefix) + ".previous"
    assert b.read_stamp(str(prefix))["key"] == "two"
    assert b.read_stamp(second["previous"])["key"] == "one"

    _install(tmp_path / "s3" / "tree", "three")
    b.swap_in(str(prefix), str(tmp_path / "s3" / "tree"), exchange=exchange)
    assert b.read_stamp(str(prefix))["key"] == "three"
    assert b.read_stamp(str(prefix) + ".previous")["key"] == "two"
    # Exactly one previous is kept, nothing else is left beside the prefix.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("nvshmem")) == [
        "nvshmem", "nvshmem.previous"]

    b.rollback(str(prefix))
    assert b.read_stamp(str(prefix))["key"] == "two"
    assert b.read_stamp(str(prefix) + ".previous")["key"] == "three"


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

    monkeypatch.setattr(b.os, "rename", flaky_rename)
    with pytest.raises(OSError, match="injected"):
        b.swap_in(str(prefix), str(tmp_path / "staged"), exchange=False)
    monkeypatch.setattr(b.os, "rename", real_rename)
    assert b.read_stamp(str(prefix))["key"] == "old"
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
    assert b.recover_interrupted_swap(str(prefix)).startswith("restored")
    assert b.read_stamp(str(prefix))["key"] == "old"
    assert b.recover_interrupted_swap(str(prefix)) is None
    stale = b.stale_staging_dirs(str(prefix))
    assert [os.path.basename(p) for p in stale] == ["nvshmem.staging-0123abcd", "nvshmem.staging-deadbeef"]
    removed = b.clean_stale_staging(str(prefix), keep=str(tmp_path / "nvshmem.staging-deadbeef"))
    assert [os.path.basename(p) for p in removed] == ["nvshmem.staging-0123abcd"]
    assert (tmp_path / "other.staging-0123abcd").is_dir()
    assert (tmp_path / "nvshmem.staging-notakey").is_dir()


# --------------------------------------------------------------------------------------------
# Arch lists


@pytest.mark.parametrize("value,expected", [
    ("9.0", "9.0"), ("10.0", "10.0"), ("9.0;10.0", "9.0;10.0"), ("9.0a", "9.0a"), ("10.0+PTX", "10.0+PTX"),
    (" 9.0 10.0 ", "9.0;10.0"), (["9.0", "10.0"], "9.0;10.0"), ("9.0;9.0", "9.0"), ("10.0a;12.0f", "10.0a;12.0f"),
    ("8.0", "8.0"),
])
def test_parse_arch_list(value, expected):
    assert b.format_arch_list(b.parse_arch_list(value)) == expected


@pytest.mark.parametrize("value,hint", [
    ("10,0", "'10,0'"), ("9.0;10,0", "'10,0'"), ("sm90", "'sm90'"), ("100", "10.0"), ("", "empty"),
    ("9", "'9'"), ("2.0", "'2.0'"), ("9.0b", "'9.0b'"),
])
def test_parse_arch_list_names_the_bad_entry(value, hint):
    with pytest.raises(b.ArchError) as err:
        b.parse_arch_list(value)
    assert hint in str(err.value)
    if value:
        assert "9.0" in str(err.value)  # the expected form is named


def test_arch_forms_convert_both_ways():
    assert b.torch_to_cmake_arch("10.0") == "100"
    assert b.torch_to_cmake_arch("9.0a;10.0+PTX") == "90a;100"
    assert b.cmake_to_torch_arch("100") == "10.0"
    assert b.cmake_to_torch_arch("90a") == "9.0a"
    assert b.cmake_to_torch_arch("sm_80") == "8.0"
    assert b.parse_cmake_arch_list("90;100") == "90;100"
    assert b.parse_cmake_arch_list("9.0") == "90"
    assert b.parse_cmake_arch_list(100) == "100"
    assert b.parse_cmake_arch_list("90-real") == "90-real"
    with pytest.raises(b.ArchError, match="'10,0'"):
        b.parse_cmake_arch_list("10,0")


def test_gpu_coverage_and_aggressive_ptx_rule():
    assert b.uncovered_gpu_archs("9.0", ["9.0", "9.0"]) == []
    assert b.uncovered_gpu_archs("9.0a", "9.0") == []
    assert b.uncovered_gpu_archs("9.0", "10.0") == ["10.0"]
    assert b.uncovered_gpu_archs("9.0+PTX", "10.0") == []
    assert b.uncovered_gpu_archs("9.0;10.0", "8.0;10.0") == ["8.0"]
    assert b.needs_disable_aggressive_ptx("9.0") is False
    for arch in ("9.0a", "10.0", "9.0;10.0", "8.0"):
        assert b.needs_disable_aggressive_ptx(arch) is True


# --------------------------------------------------------------------------------------------
# NVSHMEM helpers

NVSHMEM_INFO = """NVSHMEM v3.4.5

Build Information:
  CUDA API                     13000
  CUDA Driver                  13000
  Build Timestamp              Nov 22 2026 01:02:03
  Build Variables
\tNVSHMEM_DEBUG=OFF NVSHMEM_IBGDA_SUPPORT=ON NVSHMEM_USE_GDRCOPY=ON CUDA_HOME=/usr/local/cuda NVSHMEM_PREFIX=/opt/deepep/nvshmem

Standard options:
  NVSHMEM_VERSION              false   (type: bool, default: false)
"""


def test_parse_nvshmem_info():
    info = b.parse_nvshmem_info(NVSHMEM_INFO)
    assert info["version"] == "3.4.5"
    assert info["ibgda"] is True
    assert info["cuda_api"] == 13000
    assert info["build_variables"]["NVSHMEM_PREFIX"] == "/opt/deepep/nvshmem"
    assert b.parse_nvshmem_info(NVSHMEM_INFO.replace("IBGDA_SUPPORT=ON", "IBGDA_SUPPORT=OFF"))["ibgda"] is False
    assert b.parse_nvshmem_info("garbage")["ibgda"] is None


def test_nvshmem_version_from_header():
    text = "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 5\n" \
           "#define NVSHMEM_VENDOR_PATCH_VERSION 19\n#define NVSHMEM_MAJOR_VERSION 1\n"
    assert b.nvshmem_version_from_header(text) == "3.5.19"
    assert b.nvshmem_version_from_header("") is None


def test_ah_attr_fix_on_the_fixture_source_is_idempotent_and_compiles(tmp_path):
    text = IBGDA_CPP.read_text()
    fixed_text, fixed, already = b.apply_ah_attr_fix(text)
    assert fixed == ["ah_attr"] * 3 and already == []
    assert fixed_text.count("memset(&ah_attr, 0, sizeof(ah_attr));") == 3
    # The struct member stays a plain member.
    member = fixed_text.split("struct nvshmemt_ibgda_ep_remote_info {", 1)[1].split("};", 1)[0]
    assert "memset" not in member
    again, fixed2, already2 = b.apply_ah_attr_fix(fixed_text)
    assert again == fixed_text and fixed2 == [] and already2 == ["ah_attr"] * 3
    if shutil.which("g++"):
        out = tmp_path / "ibgda.cpp"
        out.write_text(fixed_text)
        proc = subprocess.run(["g++", "-fsyntax-only", "-I", str(IBGDA_CPP.parent), str(out)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_ah_attr_fix_scopes():
    text = (
        "namespace n {\nstruct ibv_ah_attr in_namespace;\n}\n"
        "struct ibv_ah_attr at_file_scope;\n"
        "typedef struct {\n    struct ibv_ah_attr member;\n} holder_t;\n"
        "static int f(struct ibv_ah_attr *p) {\n    if (p) {\n        struct ibv_ah_attr nested;\n    }\n"
        "    struct ibv_ah_attr zeroed = {};\n    return 0;\n}\n"
        "class C {\n    int m() {\n        struct ibv_ah_attr in_method;  // comment\n        return 0;\n    }\n"
        "    struct ibv_ah_attr field;\n};\n"
    )
    new_text, fixed, already = b.apply_ah_attr_fix(text)
    assert fixed == ["nested", "in_method"]
    assert "        memset(&nested, 0, sizeof(nested));" in new_text
    assert "memset(&in_method" in new_text and "memset(&field" not in new_text


def test_nvshmem_cmake_args_follow_the_runbooks():
    argv, env, options = b.nvshmem_cmake_args("/src", "/src/build", "/opt/deepep/nvshmem", "/usr/local/cuda", "10.0",
                                              gdrcopy_home="/opt/deepep/gdrcopy",
                                              cmake_options={"NVSHMEM_BUILD_EXAMPLES": True, "EXTRA:STRING": "x"},
                                              generator="Ninja")
    assert argv[:7] == ["cmake", "-G", "Ninja", "-S", "/src", "-B", "/src/build"]
    for flag in ("-DNVSHMEM_IBGDA_SUPPORT=ON", "-DNVSHMEM_SHMEM_SUPPORT=OFF", "-DNVSHMEM_UCX_SUPPORT=OFF",
                 "-DNVSHMEM_USE_NCCL=OFF", "-DNVSHMEM_MPI_SUPPORT=OFF", "-DCMAKE_CUDA_ARCHITECTURES=100",
                 "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc", "-DCMAKE_INSTALL_PREFIX=/opt/deepep/nvshmem",
                 "-DGDRCOPY_INCLUDE=/opt/deepep/gdrcopy/include", "-DNVSHMEM_USE_GDRCOPY=ON",
                 "-DNVSHMEM_BUILD_EXAMPLES=ON", "-DEXTRA:STRING=x"):
        assert flag in argv
    assert env["CUDACXX"] == "/usr/local/cuda/bin/nvcc" and env["NVSHMEM_IBGDA_SUPPORT"] == "1"
    assert options["NVSHMEM_BUILD_EXAMPLES"] == "ON"
    argv, env, options = b.nvshmem_cmake_args("/s", "/b", "/p", "/cuda", "90", ibgda=False)
    assert "-DNVSHMEM_IBGDA_SUPPORT=OFF" in argv and "-DNVSHMEM_USE_GDRCOPY=OFF" in argv
    assert "-DNVSHMEM_BUILD_EXAMPLES=OFF" in argv and not any("GDRCOPY_INCLUDE" in a for a in argv)
    with pytest.raises(b.BuildError, match="not a CMake variable"):
        b.nvshmem_cmake_args("/s", "/b", "/p", "/cuda", "90", cmake_options={"BAD NAME": 1})


# --------------------------------------------------------------------------------------------
# DeepEP trees


def _tree_texts(tmp_path, name):
    root = tmp_path / name if (tmp_path / name).is_dir() else mirror.assemble_source(name, tmp_path / name)
    setup = (root / "setup.py").read_text()
    init = (root / "deep_ep" / "__init__.py").read_text()
    return setup, init, (root / "tests" / "elastic").is_dir()


def test_generation_detection_on_the_fixture_trees(tmp_path):
    assert b.detect_deepep_generation(*_tree_texts(tmp_path, "deepep-v1-fixture"))[0] == "v1"
    assert b.detect_deepep_generation(*_tree_texts(tmp_path, "deepep-v1-pr466-fixture"))[0] == "v1"
    generation, why = b.detect_deepep_generation(*_tree_texts(tmp_path, "deepep-v2-fixture"))
    assert generation == "v2" and "2.1.0" in why
    assert b.detect_deepep_generation("setup(version='1.1.0' + revision)", "")[0] == "v1"
    assert b.detect_deepep_generation("os.getenv('EP_NCCL_ROOT_DIR')", "")[0] == "v2"
    assert b.detect_deepep_generation("", "", has_elastic_tests=True)[0] == "v2"
    assert b.detect_deepep_generation("print('hello')", "")[0] is None
    assert b.deepep_version_from_tree(*_tree_texts(tmp_path, "deepep-v2-fixture")[:2]) == "2.1.0"
    assert b.deepep_version_from_tree(*_tree_texts(tmp_path, "deepep-v1-fixture")[:2]) == "1.2.1"


def test_hca_mapping_support_detection(tmp_path):
    pr466 = mirror.assemble_source("deepep-v1-pr466-fixture", tmp_path / "pr466")
    assert b.has_hca_mapping_support((pr466 / "deep_ep" / "buffer.py").read_text())
    assert not b.has_hca_mapping_support((SOURCES / "deepep-v1-fixture" / "deep_ep" / "buffer.py").read_text())
    assert b.has_hca_mapping_support("os.environ['DEEP_EP_DEVICE_TO_HCA_MAPPING']")


# --------------------------------------------------------------------------------------------
# Preflight

GOOD_V2 = {
    "generation": "v2", "arch_list": "9.0", "gpu_arch_list": ["9.0", "9.0"], "cuda_home": "/usr/local/cuda",
    "cuda_version": "13.0.88", "cccl_exists": True, "torch_version": "2.11.0+cu130", "nccl_version": "2.30.7",
    "nccl_source": "/opt/nccl/include/nccl.h", "nvshmem_root": "/opt/deepep/nvshmem", "nvshmem_exists": True,
    "nvshmem_ibgda": True, "internode": True, "disable_sm90_features": False,
}


def test_preflight_passes_and_reports_automatic_fixes():
    result = b.deepep_preflight(GOOD_V2)
    assert result["ok"] and result["failures"] == [] and result["arch_list"] == "9.0"
    assert [a["check"] for a in result["automatic"]] == ["cccl_include"]
    assert result["automatic"][0]["env"] == {"CPATH": "/usr/local/cuda/include/cccl",
                                             "NVCC_APPEND_FLAGS": "-I/usr/local/cuda/include/cccl"}
    b10 = dict(GOOD_V2, arch_list="10.0", gpu_arch_list="10.0")
    result = b.deepep_preflight(b10)
    assert result["ok"]
    assert {"check": "aggressive_ptx", "env": {"DISABLE_AGGRESSIVE_PTX_INSTRS": "1"}}.items() <= \
        result["automatic"][0].items()
    cuda12 = b.deepep_preflight(dict(GOOD_V2, cuda_version="12.9.86", cccl_exists=False))
    assert cuda12["ok"] and cuda12["automatic"] == []


# Each entry: a change to a good V2 observation, the failed check it must cause, a word of the fix.
FAILURES = [
    ({"nccl_version": "2.28.9"}, "nccl_too_old", "nvidia-nccl-cu13>=2.30.4"),
    ({"nccl_version": None}, "nccl_missing", "nccl_root"),
    ({"torch_version": "2.9.1+cu129"}, "torch_too_old", ">= 2.10"),
    ({"torch_version": None, "torch_error": "torch is not installed"}, "torch_missing", "install PyTorch"),
    ({"nvshmem_root": None, "nvshmem_exists": False, "nvshmem_ibgda": None}, "nvshmem_missing", "nvshmem_root"),
    ({"nvshmem_exists": False}, "nvshmem_root_missing", "nvshmem_build"),
    ({"cccl_exists": False}, "cccl_missing", "cuda-cccl"),
    ({"cuda_version": None}, "cuda_missing", "cuda_toolkit"),
    ({"arch_list": "10.0"}, "arch_mismatch", "9.0"),
    ({"arch_list": "10,0"}, "arch_list_malformed", "TORCH_CUDA_ARCH_LIST"),
    ({"arch_list": None, "gpu_arch_list": None}, "arch_list_missing", "gpu_arch_list"),
    ({"nvshmem_ibgda": False}, "nvshmem_no_ibgda", "ibgda: true"),
    ({"arch_list": "10.0", "gpu_arch_list": "10.0", "disable_aggressive_ptx": False}, "aggressive_ptx",
     "DISABLE_AGGRESSIVE_PTX_INSTRS=1"),
]


@pytest.mark.parametrize("change,check,fix_word", FAILURES, ids=[f[1] for f in FAILURES])
def test_each_failed_requirement_alone_names_its_fix(change, check, fix_word):
    result = b.deepep_preflight(dict(GOOD_V2, **change))
    assert not result["ok"]
    assert [f["check"] for f in result["failures"]] == [check]
    failure = result["failures"][0]
    assert fix_word in failure["fix"] or fix_word in failure["message"]
    assert failure["message"] and failure["fix"]


def test_nccl_2_28_9_is_refused_for_v2_with_the_fix_text():
    result = b.deepep_preflight(dict(GOOD_V2, nccl_version="2.28.9"))
    failure = result["failures"][0]
    assert "NCCL >= 2.30.4" in failure["message"] and "2.28.9" in failure["message"]
    assert "ncclGetLsaDevicePointer" in failure["message"]
    assert "pip install 'nvidia-nccl-cu13>=2.30.4' --no-deps" in failure["fix"]
    # V1 does not build against NCCL: the same node passes for a V1 tree.
    assert b.deepep_preflight(dict(GOOD_V2, generation="v1", nccl_version="2.28.9"))["ok"]


def test_all_failures_are_reported_at_once():
    everything = dict(GOOD_V2, nccl_version="2.28.9", torch_version="2.9.1", cccl_exists=False, arch_list="10.0",
                      nvshmem_ibgda=False)
    result = b.deepep_preflight(everything)
    assert sorted(f["check"] for f in result["failures"]) == sorted(
        ["nccl_too_old", "torch_too_old", "cccl_missing", "arch_mismatch", "nvshmem_no_ibgda"])
    assert all(f["fix"] for f in result["failures"])


def test_v1_specific_rules():
    v1 = dict(GOOD_V2, generation="v1", internode=False, nccl_version=None)
    assert b.deepep_preflight(v1)["ok"]
    no_nvshmem = dict(v1, nvshmem_root=None, nvshmem_exists=False)
    result = b.deepep_preflight(no_nvshmem)
    assert result["ok"] and "intranode kernels only" in result["warnings"][0]
    result = b.deepep_preflight(dict(no_nvshmem, internode=True))
    assert [f["check"] for f in result["failures"]] == ["nvshmem_missing"]
    # pip NVSHMEM without IBGDA (torch's bundled copy) for internode: runbook 001 problem 8.
    result = b.deepep_preflight(dict(no_nvshmem, internode=True, nvshmem_pip_dir="/venv/nvidia/nvshmem",
                                     nvshmem_ibgda=False))
    assert [f["check"] for f in result["failures"]] == ["nvshmem_no_ibgda"]


def test_a100_rules():
    a100 = dict(GOOD_V2, generation="v1", arch_list="8.0", gpu_arch_list="8.0", internode=False,
                nvshmem_root=None, nvshmem_exists=False, nvshmem_ibgda=None)
    result = b.deepep_preflight(a100)
    assert [f["check"] for f in result["failures"]] == ["sm90_features_on_pre_hopper"]
    assert "disable_sm90_features: true" in result["failures"][0]["fix"]
    assert b.deepep_preflight(dict(a100, disable_sm90_features=True))["ok"]
    result = b.deepep_preflight(dict(a100, disable_sm90_features=True, nvshmem_root="/opt/deepep/nvshmem",
                                     nvshmem_exists=True))
    assert [f["check"] for f in result["failures"]] == ["sm90_features_with_nvshmem"]
    result = b.deepep_preflight(dict(a100, disable_sm90_features=True, nvshmem_pip_dir="/v/nvidia/nvshmem"))
    assert [f["check"] for f in result["failures"]] == ["sm90_features_with_nvshmem"]
    assert "pip uninstall" in result["failures"][0]["fix"]


def test_build_env_for_each_generation():
    fixes = b.deepep_preflight(dict(GOOD_V2, arch_list="10.0", gpu_arch_list="10.0"))["automatic"]
    env = b.deepep_build_env("v2", "10.0", "/usr/local/cuda", nvshmem_root="/opt/deepep/nvshmem",
                             nccl_root="/opt/nccl", jobs=8, automatic=fixes,
                             base_env={"PATH": "/usr/bin", "CPATH": "/x/include", "NVCC_APPEND_FLAGS": "-O2"})
    assert env["TORCH_CUDA_ARCH_LIST"] == "10.0"
    assert env["EP_NVSHMEM_ROOT_DIR"] == "/opt/deepep/nvshmem" and "NVSHMEM_DIR" not in env
    assert env["EP_NCCL_ROOT_DIR"] == "/opt/nccl"
    assert env["CPATH"] == "/usr/local/cuda/include/cccl:/x/include"
    assert env["NVCC_APPEND_FLAGS"] == "-O2 -I/usr/local/cuda/include/cccl"
    assert env["DISABLE_AGGRESSIVE_PTX_INSTRS"] == "1" and env["MAX_JOBS"] == "8"
    assert env["LIBRARY_PATH"] == "/usr/local/cuda/lib64/stubs"
    assert env["PATH"] == "/usr/local/cuda/bin:/usr/bin"
    env = b.deepep_build_env("v1", "9.0", "/usr/local/cuda", nvshmem_root="/opt/deepep/nvshmem",
                             nccl_root="/opt/nccl", disable_sm90_features=True)
    assert env["NVSHMEM_DIR"] == "/opt/deepep/nvshmem" and "EP_NCCL_ROOT_DIR" not in env
    assert env["DISABLE_SM90_FEATURES"] == "1"
