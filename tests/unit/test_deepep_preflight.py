# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_comm/deepep.py: DeepEP tree detection, the preflight and the build environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import deepep as dp

from tools.fleetsim import mirror

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "tools" / "fleetsim" / "fixtures" / "sources"


def _tree_texts(tmp_path, name):
    root = tmp_path / name if (tmp_path / name).is_dir() else mirror.assemble_source(name, tmp_path / name)
    setup = (root / "setup.py").read_text()
    init = (root / "deep_ep" / "__init__.py").read_text()
    return setup, init, (root / "tests" / "elastic").is_dir()


def test_generation_detection_on_the_fixture_trees(tmp_path):
    assert dp.detect_deepep_generation(*_tree_texts(tmp_path, "deepep-v1-fixture"))[0] == "v1"
    assert dp.detect_deepep_generation(*_tree_texts(tmp_path, "deepep-v1-pr466-fixture"))[0] == "v1"
    generation, why = dp.detect_deepep_generation(*_tree_texts(tmp_path, "deepep-v2-fixture"))
    assert generation == "v2" and "2.1.0" in why
    assert dp.detect_deepep_generation("setup(version='1.1.0' + revision)", "")[0] == "v1"
    assert dp.detect_deepep_generation("os.getenv('EP_NCCL_ROOT_DIR')", "")[0] == "v2"
    assert dp.detect_deepep_generation("", "", has_elastic_tests=True)[0] == "v2"
    assert dp.detect_deepep_generation("print('hello')", "")[0] is None
    assert dp.deepep_version_from_tree(*_tree_texts(tmp_path, "deepep-v2-fixture")[:2]) == "2.1.0"
    assert dp.deepep_version_from_tree(*_tree_texts(tmp_path, "deepep-v1-fixture")[:2]) == "1.2.1"


def test_hca_mapping_support_detection(tmp_path):
    pr466 = mirror.assemble_source("deepep-v1-pr466-fixture", tmp_path / "pr466")
    assert dp.has_hca_mapping_support((pr466 / "deep_ep" / "buffer.py").read_text())
    assert not dp.has_hca_mapping_support((SOURCES / "deepep-v1-fixture" / "deep_ep" / "buffer.py").read_text())
    assert dp.has_hca_mapping_support("os.environ['DEEP_EP_DEVICE_TO_HCA_MAPPING']")


# --------------------------------------------------------------------------------------------
# Preflight

GOOD_V2 = {
    "generation": "v2", "arch_list": "9.0", "gpu_arch_list": ["9.0", "9.0"], "cuda_home": "/usr/local/cuda",
    "cuda_version": "13.0.88", "cccl_exists": True, "torch_version": "2.11.0+cu130", "nccl_version": "2.30.7",
    "nccl_source": "/opt/nccl/include/nccl.h", "nvshmem_root": "/opt/deepep/nvshmem", "nvshmem_exists": True,
    "nvshmem_ibgda": True, "internode": True, "disable_sm90_features": False,
}


def test_preflight_passes_and_reports_automatic_fixes():
    result = dp.deepep_preflight(GOOD_V2)
    assert result["ok"] and result["failures"] == [] and result["arch_list"] == "9.0"
    assert [a["check"] for a in result["automatic"]] == ["cccl_include"]
    assert result["automatic"][0]["env"] == {"CPATH": "/usr/local/cuda/include/cccl",
                                             "NVCC_APPEND_FLAGS": "-I/usr/local/cuda/include/cccl"}
    b10 = dict(GOOD_V2, arch_list="10.0", gpu_arch_list="10.0")
    result = dp.deepep_preflight(b10)
    assert result["ok"]
    assert {"check": "aggressive_ptx", "env": {"DISABLE_AGGRESSIVE_PTX_INSTRS": "1"}}.items() <= \
        result["automatic"][0].items()
    cuda12 = dp.deepep_preflight(dict(GOOD_V2, cuda_version="12.9.86", cccl_exists=False))
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
    result = dp.deepep_preflight(dict(GOOD_V2, **change))
    assert not result["ok"]
    assert [f["check"] for f in result["failures"]] == [check]
    failure = result["failures"][0]
    assert fix_word in failure["fix"] or fix_word in failure["message"]
    assert failure["message"] and failure["fix"]


def test_nccl_2_28_9_is_refused_for_v2_with_the_fix_text():
    result = dp.deepep_preflight(dict(GOOD_V2, nccl_version="2.28.9"))
    failure = result["failures"][0]
    assert "NCCL >= 2.30.4" in failure["message"] and "2.28.9" in failure["message"]
    assert "ncclGetLsaDevicePointer" in failure["message"]
    assert "pip install 'nvidia-nccl-cu13>=2.30.4' --no-deps" in failure["fix"]
    # V1 does not build against NCCL: the same node passes for a V1 tree.
    assert dp.deepep_preflight(dict(GOOD_V2, generation="v1", nccl_version="2.28.9"))["ok"]


def test_all_failures_are_reported_at_once():
    everything = dict(GOOD_V2, nccl_version="2.28.9", torch_version="2.9.1", cccl_exists=False, arch_list="10.0",
                      nvshmem_ibgda=False)
    result = dp.deepep_preflight(everything)
    assert sorted(f["check"] for f in result["failures"]) == sorted(
        ["nccl_too_old", "torch_too_old", "cccl_missing", "arch_mismatch", "nvshmem_no_ibgda"])
    assert all(f["fix"] for f in result["failures"])


def test_v1_specific_rules():
    v1 = dict(GOOD_V2, generation="v1", internode=False, nccl_version=None)
    assert dp.deepep_preflight(v1)["ok"]
    no_nvshmem = dict(v1, nvshmem_root=None, nvshmem_exists=False)
    result = dp.deepep_preflight(no_nvshmem)
    assert result["ok"] and "intranode kernels only" in result["warnings"][0]
    result = dp.deepep_preflight(dict(no_nvshmem, internode=True))
    assert [f["check"] for f in result["failures"]] == ["nvshmem_missing"]
    # pip NVSHMEM without IBGDA (torch's bundled copy) for internode: runbook 001 problem 8.
    result = dp.deepep_preflight(dict(no_nvshmem, internode=True, nvshmem_pip_dir="/venv/nvidia/nvshmem",
                                      nvshmem_ibgda=False))
    assert [f["check"] for f in result["failures"]] == ["nvshmem_no_ibgda"]


def test_a100_rules():
    a100 = dict(GOOD_V2, generation="v1", arch_list="8.0", gpu_arch_list="8.0", internode=False,
                nvshmem_root=None, nvshmem_exists=False, nvshmem_ibgda=None)
    result = dp.deepep_preflight(a100)
    assert [f["check"] for f in result["failures"]] == ["sm90_features_on_pre_hopper"]
    assert "disable_sm90_features: true" in result["failures"][0]["fix"]
    assert dp.deepep_preflight(dict(a100, disable_sm90_features=True))["ok"]
    result = dp.deepep_preflight(dict(a100, disable_sm90_features=True, nvshmem_root="/opt/deepep/nvshmem",
                                      nvshmem_exists=True))
    assert [f["check"] for f in result["failures"]] == ["sm90_features_with_nvshmem"]
    result = dp.deepep_preflight(dict(a100, disable_sm90_features=True, nvshmem_pip_dir="/v/nvidia/nvshmem"))
    assert [f["check"] for f in result["failures"]] == ["sm90_features_with_nvshmem"]
    assert "pip uninstall" in result["failures"][0]["fix"]


def test_build_env_for_each_generation():
    fixes = dp.deepep_preflight(dict(GOOD_V2, arch_list="10.0", gpu_arch_list="10.0"))["automatic"]
    env = dp.deepep_build_env("v2", "10.0", "/usr/local/cuda", nvshmem_root="/opt/deepep/nvshmem",
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
    env = dp.deepep_build_env("v1", "9.0", "/usr/local/cuda", nvshmem_root="/opt/deepep/nvshmem",
                              nccl_root="/opt/nccl", disable_sm90_features=True)
    assert env["NVSHMEM_DIR"] == "/opt/deepep/nvshmem" and "EP_NCCL_ROOT_DIR" not in env
    assert env["DISABLE_SM90_FEATURES"] == "1"


# --------------------------------------------------------------------------------------------
# The C++ runtime the extension links (4 x H200: a compiler with a dangling libstdc++.so link made every extension
# carry libstdc++.a, and DeepEP V2's JIT died in std::regex at the first dispatch)

DANGLING = dict(GOOD_V2, cxx="/opt/gcc/bin/g++", cxx_libstdcxx_so="libstdc++.so", cxx_libstdcxx_shared=False)


@pytest.mark.parametrize("shared", [True, None])
def test_a_compiler_with_a_shared_libstdcxx_or_an_unknown_one_changes_nothing(shared):
    result = dp.deepep_preflight(dict(GOOD_V2, cxx="c++", cxx_libstdcxx_shared=shared,
                                      runtime_libstdcxx="/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
                                      libstdcxx_link_dir="/a/.toolchain/libstdcxx-1"))
    assert result["ok"]
    assert not [fix for fix in result["automatic"] if fix["check"] == "libstdcxx_static"]


@pytest.mark.parametrize("generation", ["v1", "v2"])
def test_a_static_fallback_links_the_runtime_libstdcxx_through_a_private_dir(generation):
    obs = dict(DANGLING, generation=generation, runtime_libstdcxx="/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
               libstdcxx_link_dir="/var/a/.toolchain/libstdcxx-0123")
    result = dp.deepep_preflight(obs)
    assert result["ok"], result["failures"]
    fix = next(fix for fix in result["automatic"] if fix["check"] == "libstdcxx_static")
    assert fix["env"] == {"LDFLAGS": "-L/var/a/.toolchain/libstdcxx-0123"}
    assert fix["link"] == {"dir": "/var/a/.toolchain/libstdcxx-0123", "name": "libstdc++.so",
                           "target": "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33"}
    assert "/opt/gcc/bin/g++" in fix["message"] and "std::regex" in fix["message"]
    env = dp.deepep_build_env(generation, "9.0", "/usr/local/cuda", automatic=result["automatic"],
                              base_env={"LDFLAGS": "-Wl,-O1"})
    assert env["LDFLAGS"] == "-L/var/a/.toolchain/libstdcxx-0123 -Wl,-O1"


def test_a_static_fallback_without_a_readable_runtime_is_refused_with_the_fix():
    result = dp.deepep_preflight(dict(DANGLING, runtime_libstdcxx=None, libstdcxx_link_dir=None))
    assert not result["ok"]
    failure = next(f for f in result["failures"] if f["check"] == "libstdcxx_static")
    assert "/opt/gcc/bin/g++" in failure["message"] and "libstdc++.so" in failure["message"]
    assert "CXX" in failure["fix"] and "libstdc++" in failure["fix"]


@pytest.mark.parametrize("change,option", [
    ({"arch_list": None, "gpu_arch_list": "10,0"}, "gpu_arch_list"),
    ({"arch_list": "", "gpu_arch_list": ["9.0", "sm90"]}, "gpu_arch_list"),
    ({"arch_list": "10,0", "gpu_arch_list": "9.0"}, "arch_list"),
])
def test_a_malformed_arch_list_is_named_by_the_option_the_user_set(change, option):
    result = dp.deepep_preflight(dict(GOOD_V2, **change))
    failures = [f for f in result["failures"] if f["check"] == "arch_list_malformed"]
    assert len(failures) == 1, result["failures"]
    assert failures[0]["message"].startswith("%s: " % option)
    assert failures[0]["fix"].startswith("write %s as TORCH_CUDA_ARCH_LIST does" % option)
    other = "arch_list" if option == "gpu_arch_list" else "gpu_arch_list"
    assert not failures[0]["message"].startswith(other)
