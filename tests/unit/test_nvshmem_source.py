# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_comm/nvshmem.py: nvshmem-info output, the version header, the RoCE ibv_ah_attr fix
and the CMake arguments."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _buildkey as bk
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import nvshmem as nv
from ansible_collections.gpufleet.deepep.plugins.module_utils import _versions as ver

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "tools" / "fleetsim" / "fixtures" / "sources"
IBGDA_CPP = SOURCES / "nvshmem-fixture" / "src" / "modules" / "transport" / "ibgda" / "ibgda.cpp"


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
    info = nv.parse_nvshmem_info(NVSHMEM_INFO)
    assert info["version"] == "3.4.5"
    assert info["ibgda"] is True
    assert info["cuda_api"] == 13000
    assert info["build_variables"]["NVSHMEM_PREFIX"] == "/opt/deepep/nvshmem"
    assert nv.parse_nvshmem_info(NVSHMEM_INFO.replace("IBGDA_SUPPORT=ON", "IBGDA_SUPPORT=OFF"))["ibgda"] is False
    assert nv.parse_nvshmem_info("garbage")["ibgda"] is None


def test_nvshmem_version_from_header():
    text = "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 5\n" \
           "#define NVSHMEM_VENDOR_PATCH_VERSION 19\n#define NVSHMEM_MAJOR_VERSION 1\n"
    assert ver.nvshmem_version_from_header(text) == "3.5.19"
    assert ver.nvshmem_version_from_header("") is None


def test_ah_attr_fix_on_the_fixture_source_is_idempotent_and_compiles(tmp_path):
    text = IBGDA_CPP.read_text()
    fixed_text, fixed, already = nv.apply_ah_attr_fix(text)
    assert fixed == ["ah_attr"] * 3 and already == []
    assert fixed_text.count("memset(&ah_attr, 0, sizeof(ah_attr));") == 3
    # The struct member stays a plain member.
    member = fixed_text.split("struct nvshmemt_ibgda_ep_remote_info {", 1)[1].split("};", 1)[0]
    assert "memset" not in member
    again, fixed2, already2 = nv.apply_ah_attr_fix(fixed_text)
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
    new_text, fixed, already = nv.apply_ah_attr_fix(text)
    assert fixed == ["nested", "in_method"]
    assert "        memset(&nested, 0, sizeof(nested));" in new_text
    assert "memset(&in_method" in new_text and "memset(&field" not in new_text


def test_nvshmem_cmake_args_follow_the_runbooks():
    argv, env, options = nv.nvshmem_cmake_args("/src", "/src/build", "/opt/deepep/nvshmem", "/usr/local/cuda", "10.0",
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
    argv, env, options = nv.nvshmem_cmake_args("/s", "/b", "/p", "/cuda", "90", ibgda=False)
    assert "-DNVSHMEM_IBGDA_SUPPORT=OFF" in argv and "-DNVSHMEM_USE_GDRCOPY=OFF" in argv
    assert "-DNVSHMEM_BUILD_EXAMPLES=OFF" in argv and not any("GDRCOPY_INCLUDE" in a for a in argv)
    with pytest.raises(bk.BuildError, match="not a CMake variable"):
        nv.nvshmem_cmake_args("/s", "/b", "/p", "/cuda", "90", cmake_options={"BAD NAME": 1})


# --------------------------------------------------------------------------------------------
# DeepEP trees
