# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVSHMEM's source build against the CUDA toolkit (the stack catalogue's nvshmem_source_cuda13): 3.8.0 and later
need CUDA 13 (NVIDIA/nvshmem#95), older releases build on CUDA 12; nothing is judged without a build or a version;
a value that is not a version fails naming it."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._catalogue import breakage
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import NvshmemRdmaError
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_source import source_cuda_check, tree_version


@pytest.mark.parametrize("nvshmem, cuda, status", [
    ("3.8.0-0", "12.9", "fail"), ("v3.8.0-0", "12.8", "fail"), ("3.9.0", "12.9", "fail"), ("4.0", "12.4", "fail"),
    ("3.8.0-0", "13.0", "ok"), ("3.8.0", "13.4", "ok"), ("3.8.0-0", "14.0", "ok"),
    # Below the boundary CUDA 12 builds: runbook 001 (v3.5.19-1 on 12.9), the h100 profile (v3.4.5-0 on 12.9),
    # and 3.7.x, which the thread built on 12.8.
    ("3.5.19-1", "12.9", "ok"), ("3.4.5-0", "12.9", "ok"), ("3.7.2", "12.8", "ok"), ("3.7.99", "12.9", "ok"),
])
def test_the_boundary_over_versions(nvshmem, cuda, status):
    check = source_cuda_check(nvshmem, cuda)
    assert check["status"] == status, check
    assert check["source"] == breakage("nvshmem_source_cuda13")["source"] == "NVIDIA/nvshmem#95"
    if status == "fail":
        assert "needs CUDA 13.0 or newer" in check["reason"] and cuda in check["reason"]
        assert "CUDA 13 toolkit" in check["fix"]
    else:
        assert check["fix"] is None


@pytest.mark.parametrize("nvshmem, cuda, builds, why", [
    ("3.8.0-0", "12.9", False, "the play builds no NVSHMEM"),
    ("", "12.9", True, "no NVSHMEM version"),
    ("3.8.0-0", "", True, "no CUDA version"),
])
def test_nothing_to_judge(nvshmem, cuda, builds, why):
    check = source_cuda_check(nvshmem, cuda, builds=builds)
    assert check["status"] == "unknown" and why in check["reason"]


@pytest.mark.parametrize("nvshmem, cuda, named", [
    ("3.8.x", "13.0", "nvshmem_version: '3.8.x'"), (3.8, "13.0", "nvshmem_version: 3.8"),
    ("3.8.0", "13", "cuda_version: '13'"), ("3.8.0", "thirteen.0", "cuda_version: 'thirteen.0'"),
])
def test_a_bad_value_is_named(nvshmem, cuda, named):
    with pytest.raises(NvshmemRdmaError) as exc:
        source_cuda_check(nvshmem, cuda)
    assert named in str(exc.value)


# The project() call of NVIDIA/nvshmem v3.4.5-0's top-level CMakeLists.txt (over several lines, four parts), and the
# simulated fleet's fixture (one line, three parts).
REAL_V345 = "project(\n  NVSHMEM\n  LANGUAGES CUDA CXX C\n  VERSION 3.4.5.0\n)\n"


@pytest.mark.parametrize("text, version", [
    (REAL_V345, "3.4.5"), ("project(NVSHMEM VERSION 3.8.0 LANGUAGES C CXX)", "3.8.0"),
    ("cmake_minimum_required(VERSION 3.19)\nproject(NVSHMEM LANGUAGES C)\n", None),
    ("cmake_minimum_required(VERSION 3.19)\nproject(other VERSION 1.2.3)\n", None), ("", None), (None, None),
])
def test_the_tree_names_its_release(text, version):
    assert tree_version(text) == version
