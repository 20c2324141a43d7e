# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""DeepEP V2's runtime requirements (module_utils._node.v2runtime, node_stack gather: [deepep_v2]).

From real material: libmlx5-like objects compiled here with gcc and a version script (their ELF version tables are
read, not objdump's text), excerpts of the DeepEP V2 headers at dd758ca, before 76f1427 ("Fix cu128 compilation")
and at 747ea8e (#692) in tests/fixtures/deepep_v2_tree, V2's GIN assert (csrc/kernels/backend/nccl.cu at dd758ca)
and runbook 003's CUDA 12.8 build error.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import (
    ElfError,
    version_definitions,
    version_definitions_of_bytes,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.gather_sets import GatherOptions, gather_node
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.v2runtime import (
    CHECKS,
    cumem_disabled,
    gather_deepep_v2,
    libmlx5_facts,
    stream_memops,
    parse_environment_file,
    tree_markers,
    v2_checks,
)

TREE = FIXTURES / "deepep_v2_tree"
SEEDS = REPO.parent / "shared" / "seeds"
HEADERS = "deep_ep/include/deep_ep/common"
# The change PR #715 describes ("add system-scope release before the GIN barrier"), applied to dd758ca's barrier.
FIX_715 = ("        __syncwarp();\n"
           "        if constexpr (not kIsScaleupNVLink)\n"
           "            ptx::fence_acq_rel_sys();\n")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the ELF objects read here")


def mlx5_object(directory: Path, newest: int, name: str = "libmlx5.so.1") -> Path:
    """A shared object whose version script defines MLX5_1.0 .. MLX5_1.<newest>, each a node inheriting the last
    (the way rdma-core's libmlx5.map is written), with the SONAME libmlx5.so.1."""
    directory.mkdir(parents=True, exist_ok=True)
    lines, source = [], []
    for minor in range(newest + 1):
        source.append("int mlx5_sym_%d(void) { return %d; }" % (minor, minor))
        parent = " MLX5_1.%d" % (minor - 1) if minor else ""
        local = " local: *;" if minor == 0 else ""
        lines.append("MLX5_1.%d { global: mlx5_sym_%d;%s }%s;" % (minor, minor, local, parent))
    (directory / "v.map").write_text("\n".join(lines) + "\n")
    (directory / "v.c").write_text("\n".join(source) + "\n")
    out = directory / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--version-script=%s" % (directory / "v.map"),
                    "-Wl,-soname,libmlx5.so.1", "-o", str(out), str(directory / "v.c")], check=True, timeout=300)
    for helper in ("v.map", "v.c"):
        (directory / helper).unlink()
    return out


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlx5")
    return {newest: mlx5_object(tmp / str(newest), newest) for newest in (7, 17, 19, 24, 25, 28)}


# --- the ELF version table ------------------------------------------------------------------------------------

@pytest.mark.parametrize("newest", [7, 17, 25, 28])
def test_the_version_definitions_are_read_from_the_elf_in_order(libs, newest):
    assert version_definitions(str(libs[newest])) == ["MLX5_1.%d" % m for m in range(newest + 1)]


def test_the_readers_agree_with_objdump(libs):
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump to compare with")
    out = subprocess.run([objdump, "-p", str(libs[25])], stdout=subprocess.PIPE, check=True, timeout=60,
                         universal_newlines=True).stdout
    listed = [line.split()[-1] for line in out.split("Version definitions:")[1].split("\n\n")[0].splitlines()
              if line.strip() and line.split()[0].isdigit()]
    assert listed[0] == "libmlx5.so.1"  # the base entry, which the reader leaves out
    assert version_definitions(str(libs[25])) == listed[1:]


def test_an_object_without_version_definitions_has_none(tmp_path):
    (tmp_path / "p.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "p.so"), str(tmp_path / "p.c")], check=True,
                   timeout=300)
    assert version_definitions(str(tmp_path / "p.so")) == []


@pytest.mark.parametrize("data, message", [
    (b"not an elf at all" * 8, "no \\x7fELF magic"),
    (b"\x7fELF\x09\x01" + b"\0" * 60, "unknown ELF class"),
])
def test_what_is_not_elf_is_refused_by_name(data, message):
    with pytest.raises(ElfError) as err:
        version_definitions_of_bytes(data, "libmlx5.so.1")
    assert "libmlx5.so.1" in str(err.value) and message in str(err.value)


def test_a_truncated_object_is_refused(libs):
    data = libs[25].read_bytes()
    with pytest.raises(ElfError) as err:
        version_definitions_of_bytes(data[:200], "cut.so")
    assert "cut.so is truncated" in str(err.value)


RDMA_CORE_UNPACKED = Path(REPO) / ".cache" / "rdma-core"  # scripts/bootstrap.sh


def test_a_real_rdma_core_libmlx5_is_read():
    """rdma-core's own libmlx5: the host's where it is installed, else Debian's ibverbs-providers as
    scripts/bootstrap.sh unpacks it (read through the root prefix the module uses for a node's root)."""
    path = "/usr/lib/x86_64-linux-gnu/libmlx5.so.1"
    root = "/" if os.path.exists(path) else str(RDMA_CORE_UNPACKED)
    if not os.path.exists(os.path.join(root, path.lstrip("/"))):
        pytest.skip("no rdma-core libmlx5 on this machine nor under .cache/rdma-core (run scripts/bootstrap.sh)")
    facts = libmlx5_facts(root, path)
    assert facts["error"] is None and "MLX5_1.0" in facts["versions"] and facts["newest"].startswith("MLX5_1.")


@pytest.mark.parametrize("newest, required, gdaki, optional", [(7, False, False, False), (17, True, False, False),
                                                               (19, True, True, False), (24, True, True, False),
                                                               (25, True, True, True), (28, True, True, True)])
def test_libmlx5_facts_name_the_gin_versions(libs, newest, required, gdaki, optional):
    facts = libmlx5_facts("/", str(libs[newest]))
    assert (facts["required"], facts["gdaki"], facts["optional"], facts["newest"]) == (
        required, gdaki, optional, "MLX5_1.%d" % newest)
    assert facts["error"] is None


def test_a_missing_libmlx5_is_an_error_not_a_guess():
    facts = libmlx5_facts("/", None)
    assert facts["required"] is False and "libmlx5.so.1 not found" in facts["error"]


# --- the V2 tree ------------------------------------------------------------------------------------------------

def make_tree(root: Path, ptx: str, comm: str = None) -> str:
    headers = root / "tree" / HEADERS
    headers.mkdir(parents=True, exist_ok=True)
    (headers / "ptx.cuh").write_text((TREE / ptx).read_text())
    if comm is not None:
        text = (TREE / "comm_dd758ca.cuh").read_text()
        (headers / "comm.cuh").write_text(text.replace("        __syncwarp();\n", FIX_715, 1) if comm == "715"
                                          else text)
    return "/tree"


@pytest.mark.parametrize("ptx, comm, cu128, st_bulk, barrier", [
    ("ptx_dd758ca.cuh", "dd758ca", True, False, False),
    ("ptx_before_cu128_fix.cuh", "dd758ca", False, True, False),
    ("ptx_747ea8e.cuh", "715", True, True, True),
    ("ptx_747ea8e.cuh", None, True, True, None),
])
def test_the_tree_markers_of_real_headers(tmp_path, ptx, comm, cu128, st_bulk, barrier):
    markers = tree_markers(str(tmp_path), make_tree(tmp_path, ptx, comm))
    assert (markers["cuda128_host_code"], markers["sm100_st_bulk"], markers["gin_barrier"]) == (cu128, st_bulk,
                                                                                                barrier)
    assert markers["headers"] == "/tree/" + HEADERS and markers["error"] is None


# csrc/utils/lazy_driver.hpp's lookup of the stream memory operations, at dd758ca and with PR #686 (head 389e8ff).
LAZY_DD758CA = "DECL_LAZY_CUDA_DRIVER_FUNCTION(cuStreamBatchMemOp);\n"
LAZY_686 = "DECL_LAZY_CUDA_DRIVER_FUNCTION(cuStreamBatchMemOp_v2);\n"


@pytest.mark.parametrize("lazy, marker", [(LAZY_DD758CA, False), (LAZY_686, True), (None, None),
                                          ("// no memory operations here\n", None)])
def test_the_agrs_driver_entry_point_is_read_from_the_source_tree(tmp_path, lazy, marker):
    tree = make_tree(tmp_path, "ptx_747ea8e.cuh")
    if lazy is not None:
        (tmp_path / "tree" / "csrc" / "utils").mkdir(parents=True)
        (tmp_path / "tree" / "csrc" / "utils" / "lazy_driver.hpp").write_text(lazy)
    assert tree_markers(str(tmp_path), tree)["agrs_memop"] is marker


@pytest.mark.parametrize("params, value", [("EnableMSI: 1\nEnableStreamMemOPs: 0\n", 0),
                                           ("EnableStreamMemOPs: 1\n", 1), ("EnableMSI: 1\n", None), (None, None),
                                           ("EnableStreamMemOPs: one\n", None)])
def test_the_driver_s_stream_memops_setting_is_read_from_its_params(tmp_path, params, value):
    if params is not None:
        (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
        (tmp_path / "proc" / "driver" / "nvidia" / "params").write_text(params)
    assert stream_memops(str(tmp_path)) == value


@pytest.mark.parametrize("tree, error", [(None, "no DeepEP V2 tree"), ("/v1", "holds no V2 headers")])
def test_a_tree_that_is_not_there_or_not_v2_is_unknown_with_the_reason(tmp_path, tree, error):
    (tmp_path / "v1" / "csrc").mkdir(parents=True)
    markers = tree_markers(str(tmp_path), tree)
    assert markers["cuda128_host_code"] is None and markers["gin_barrier"] is None and error in markers["error"]


# --- environment files ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("NCCL_CUMEM_ENABLE=0\n", "0"),
    ('export NCCL_CUMEM_ENABLE="0"\n', "0"),
    ("NCCL_CUMEM_ENABLE='0'  # breaks V2\n", "0"),
    ("# NCCL_CUMEM_ENABLE=0\n", None),
    ("NCCL_CUMEM_ENABLE=1\n", "1"),
])
def test_environment_files_are_read_as_data(text, value):
    assert parse_environment_file(text).get("NCCL_CUMEM_ENABLE") == value


def test_cumem_disabled_names_every_place_it_is_zero():
    found = cumem_disabled({"env_script /opt/deepep/unified-env.sh": {"NCCL_CUMEM_ENABLE": "0"},
                            "/etc/environment": {"NCCL_CUMEM_ENABLE": "1"}, "login": {"NCCL_CUMEM_ENABLE": "0"}})
    assert [f["where"] for f in found] == ["env_script /opt/deepep/unified-env.sh", "login"]


# --- the decisions ---------------------------------------------------------------------------------------------

def base_facts(**changes):
    facts = {
        "nvcc": {"path": "/usr/local/cuda/bin/nvcc", "present": True, "release": "12.9", "version": "12.9.86",
                 "error": None},
        "cuobjdump": {"path": "/usr/local/cuda/bin/cuobjdump", "present": True},
        "ibstat": {"path": "/usr/sbin/ibstat", "present": True},
        "dev_infiniband": {"present": True, "uverbs": ["uverbs0"]},
        "libmlx5": {"path": "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
                    "versions": ["MLX5_1.8", "MLX5_1.19", "MLX5_1.25"], "newest": "MLX5_1.25", "required": True,
                    "gdaki": True, "optional": True, "error": None},
        "nic": {"name": "mlx5_0", "source": "env_script", "present": True, "active": True,
                "active_devices": ["mlx5_0", "mlx5_1"]},
        "cumem_disabled": [],
        "tree": {"path": "/t", "headers": "/t/h", "cuda128_host_code": True, "sm100_st_bulk": True,
                 "gin_barrier": True, "agrs_memop": True, "error": None},
        "stream_memops": 1,
        "compute_capabilities": ["9.0"],
        "nccl": {"built": "2.30.7", "loaded": "2.30.7"},
        "over_rdma": True,
        "across_nodes": True,
    }
    for path, value in changes.items():
        target = facts
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return facts


def decided(facts, name):
    return next(c for c in v2_checks(facts) if c["check"] == name)


def test_a_ready_node_passes_every_check_in_catalogue_order():
    checks = v2_checks(base_facts())
    assert [c["check"] for c in checks] == list(CHECKS)
    assert {c["status"] for c in checks} == {"pass", "not_applicable"}
    assert all(c["fix"] is None for c in checks)


CASES = [
    # check, changes, status, words in the reason, words in the fix
    ("nvcc", {"nvcc__present": False}, "fail", "JIT", "cuda_toolkit"),
    ("nvcc", {"nvcc__release": None, "nvcc__error": "rc=1"}, "fail", "rc=1", "nvcc --version"),
    ("nvcc", {"nvcc__release": "12.2"}, "fail", "NVCC version should be >= 12.3", "CUDA >= 12.3"),
    ("nvcc", {"nvcc__release": "12.3"}, "pass", "12.3 >= 12.3", None),
    ("cuobjdump", {"cuobjdump__present": False}, "fail", "cuobjdump", "cuda-cuobjdump"),
    ("sm100_cuda", {}, "not_applicable", "no SM100", None),
    ("sm100_cuda", {"compute_capabilities": ["10.0"], "nvcc__release": "13.1"}, "pass", "13.1 > 13.0", None),
    ("sm100_cuda", {"compute_capabilities": ["10.0"], "nvcc__release": "13.0", "tree__sm100_st_bulk": False},
     "fail", "#692", "13.1"),
    ("sm100_cuda", {"compute_capabilities": ["9.0", "10.3"], "nvcc__release": "12.9",
                    "tree__sm100_st_bulk": False}, "fail", "ptxas", "747ea8e"),
    ("sm100_cuda", {"compute_capabilities": ["10.0"], "nvcc__release": "13.0"}, "pass", "st.bulk fix", None),
    ("sm100_cuda", {"compute_capabilities": ["10.0"], "nvcc__release": "13.0", "tree__sm100_st_bulk": None,
                    "tree__error": "no tree"}, "warn", "no tree", "747ea8e"),
    ("sm100_cuda", {"compute_capabilities": ["10.0"], "nvcc__release": None}, "not_applicable", "unknown", None),
    ("cuda128_host_code", {}, "not_applicable", "not 12.8", None),
    ("cuda128_host_code", {"nvcc__release": "12.8", "tree__cuda128_host_code": False}, "fail",
     "__cvta_generic_to_shared", "76f1427"),
    ("cuda128_host_code", {"nvcc__release": "12.8"}, "pass", "host code", None),
    ("cuda128_host_code", {"nvcc__release": "12.8", "tree__cuda128_host_code": None, "tree__error": "gone"},
     "warn", "gone", "76f1427"),
    ("ibstat", {"ibstat__present": False}, "fail", "silently", "infiniband-diags"),
    ("ibstat", {"ibstat__present": False, "over_rdma": False}, "not_applicable", "NVLink only", None),
    ("nic_name", {"nic__name": "mlx5_9", "nic__present": False}, "fail", "not an RDMA device", "mlx5_0"),
    ("nic_name", {"nic__active": False}, "fail", "no ACTIVE port", "EP_NIC_NAME"),
    ("nic_name", {"nic__active": False, "over_rdma": False}, "not_applicable", "NVLink only", None),
    ("libmlx5", {"libmlx5__required": False, "libmlx5__optional": False, "libmlx5__newest": "MLX5_1.7"}, "fail",
     "no MLX5_1.8", "DOCA-OFED"),
    # NCCL 2.30.7's GIN GDAKI loads mlx5dv_devx_umem_reg_ex (MLX5_1.19); #628's node had MLX5_1.17.
    ("libmlx5", {"libmlx5__gdaki": False, "libmlx5__optional": False, "libmlx5__newest": "MLX5_1.17"}, "fail",
     "ginType NONE", "MLX5_1.19"),
    # Ubuntu 24.04's rdma-core 50 (MLX5_1.24): GIN GDAKI works; only Data Direct (MLX5_1.25) is off.
    ("libmlx5", {"libmlx5__optional": False, "libmlx5__newest": "MLX5_1.24"}, "pass", "Data Direct stays off", None),
    ("libmlx5", {}, "pass", "MLX5_1.25 too (Data Direct)", None),
    ("libmlx5", {"libmlx5__error": "libmlx5.so.1 not found"}, "fail", "not found", "DOCA-OFED"),
    ("libmlx5", {"libmlx5__required": False, "over_rdma": False}, "not_applicable", "NVLink only", None),
    # AWS EFA: GIN runs through aws-ofi-nccl, no mlx5 NIC, so no libmlx5 is wanted (the efa phase checks the plugin).
    ("libmlx5", {"libmlx5__error": "libmlx5.so.1 not found", "gin_mlx5": False}, "not_applicable", "aws-ofi-nccl",
     None),
    # ... and ibstat reads no EFA device: V2 runs there with an explicit --num-sms, so its absence is no failure.
    ("ibstat", {"ibstat__present": False, "gin_mlx5": False}, "not_applicable", "--num-sms", None),
    ("dev_infiniband", {"dev_infiniband__present": False, "dev_infiniband__uverbs": []}, "fail", "NCCL GIN is unavailable", "--device"),
    # The directory with no verbs device in it (no RDMA device of the node has one): no GIN either.
    ("dev_infiniband", {"dev_infiniband__uverbs": []}, "fail", "has no uverbs device", "ib_uverbs"),
    ("dev_infiniband", {"dev_infiniband__present": False, "dev_infiniband__uverbs": [], "over_rdma": False}, "not_applicable", "NVLink", None),
    ("nccl_cumem", {"cumem_disabled": [{"where": "/etc/environment", "value": "0"}]}, "fail", "symmetric memory",
     "/etc/environment"),
    ("nccl_build_runtime", {"nccl__built": "2.30.7", "nccl__loaded": "2.28.9"}, "fail",
     "Prior to NCCL 2.31", "2.30.7"),
    ("nccl_build_runtime", {"nccl__built": "2.30.7", "nccl__loaded": "2.31.2"}, "fail", "loads 2.31.2", "rebuild"),
    ("nccl_build_runtime", {"nccl__built": "2.31.2", "nccl__loaded": "2.30.7"}, "fail", "at least", "2.31.2"),
    ("nccl_build_runtime", {"nccl__built": "2.31.0", "nccl__loaded": "2.31.2"}, "pass", "loads 2.31.2", None),
    ("nccl_build_runtime", {"nccl__built": None}, "not_applicable", "not built yet", None),
    ("nccl_build_runtime", {"nccl__loaded": None}, "not_applicable", "unknown", None),
    ("gin_barrier", {"tree__gin_barrier": False}, "fail", "Gin barrier timeout", "#715"),
    ("gin_barrier", {"tree__gin_barrier": False, "across_nodes": False}, "not_applicable", "across nodes", None),
    ("gin_barrier", {"tree__gin_barrier": None, "tree__error": "no tree"}, "warn", "no tree", "#715"),
    # DeepEP PR #686: the deprecated v1 entry point returns 801 with NVreg_EnableStreamMemOPs=0 (measured, H200).
    ("agrs_memop", {"tree__agrs_memop": False, "stream_memops": 0}, "warn", "CUDA_ERROR_NOT_SUPPORTED", "#686"),
    ("agrs_memop", {"tree__agrs_memop": False, "stream_memops": None}, "warn", "EnableStreamMemOPs=None",
     "NVreg_EnableStreamMemOPs=1"),
    ("agrs_memop", {"tree__agrs_memop": False}, "pass", "works while NVreg_EnableStreamMemOPs=1", None),
    ("agrs_memop", {}, "pass", "cuStreamBatchMemOp_v2", None),
    ("agrs_memop", {"tree__agrs_memop": None}, "not_applicable", "installed package", None),
]


@pytest.mark.parametrize("check, changes, status, reason, fix", CASES,
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(CASES)])
def test_each_check_decides_with_its_reason_and_fix(check, changes, status, reason, fix):
    result = decided(base_facts(**changes), check)
    assert result["status"] == status
    assert reason in result["reason"]
    if fix is None:
        assert result["fix"] is None or status != "pass"
    else:
        assert fix in result["fix"]


def test_the_gin_failures_quote_v2_s_own_assert():
    """The reason quotes what V2 prints (csrc/kernels/backend/nccl.cu:87 at dd758ca), so an operator finds it."""
    source = (TREE / "nccl_dd758ca.cu").read_text()
    assert '"NCCL GIN is unavailable.' in source
    for check, changes in (("dev_infiniband", {"dev_infiniband__present": False, "dev_infiniband__uverbs": []}),
                           ("libmlx5", {"libmlx5__required": False, "libmlx5__optional": False})):
        reason = decided(base_facts(**changes), check)["reason"]
        assert "NCCL GIN is unavailable" in reason
    assert "Prior to NCCL 2.31, NCCL compile-time and runtime versions must be the same" in source
    reason = decided(base_facts(nccl__loaded="2.28.9"), "nccl_build_runtime")["reason"]
    assert "Prior to NCCL 2.31, NCCL compile-time and runtime versions must be the same" in reason


def test_the_cuda_12_8_failure_quotes_runbook_003():
    seed = next(SEEDS.glob("003_*.txt"), None)
    if seed is None:
        pytest.skip("the runbooks are not beside this checkout")
    lines = [line.replace("\u2018", "'").replace("\u2019", "'") for line in seed.read_text().splitlines()
             if "__cvta_generic_to_shared" in line and "error:" in line]
    assert lines
    reason = decided(base_facts(nvcc__release="12.8", tree__cuda128_host_code=False), "cuda128_host_code")["reason"]
    quoted = reason.split('"')[1]
    assert any(quoted in line for line in lines)


# --- the facts of a node (a fixture root) -------------------------------------------------------------------

def node_root(tmp_path: Path, libs, ibstat=True, dev_ib=True, newest=25, environment=""):
    root = tmp_path / "root"
    for tool in (["usr/local/cuda/bin/cuobjdump", "usr/local/cuda/bin/nvcc"] + (["usr/sbin/ibstat"] if ibstat else [])):
        path = root / tool
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    if dev_ib:
        (root / "dev/infiniband").mkdir(parents=True)
        (root / "dev/infiniband/uverbs0").write_text("")
    if newest is not None:
        (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
        shutil.copy(str(libs[newest]), str(root / "usr/lib/x86_64-linux-gnu/libmlx5.so.1"))
    (root / "etc").mkdir()
    (root / "etc/environment").write_text(environment)
    return root


RDMA = {"devices": [{"name": "mlx5_0", "active": False}, {"name": "mlx5_1", "active": True}],
        "active_devices": ["mlx5_1"]}
CUDA = {"release": "12.9", "version": "12.9.86", "nvcc_present": True, "error": None}


def statuses(facts):
    return {c["check"]: c["status"] for c in facts["checks"]}


@pytest.mark.parametrize("variant, check, status", [
    ({}, "libmlx5", "pass"),
    ({"ibstat": False}, "ibstat", "fail"),
    ({"dev_ib": False}, "dev_infiniband", "fail"),
    ({"newest": 17}, "libmlx5", "fail"),
    ({"newest": 19}, "libmlx5", "pass"),
    ({"newest": 24}, "libmlx5", "pass"),
    ({"newest": 7}, "libmlx5", "fail"),
    ({"newest": None}, "libmlx5", "fail"),
    ({"environment": "PATH=/usr/bin\nNCCL_CUMEM_ENABLE=0\n"}, "nccl_cumem", "fail"),
])
def test_node_variants_get_their_finding(tmp_path, libs, variant, check, status):
    root = node_root(tmp_path, libs, **variant)
    facts = gather_deepep_v2(root=str(root), cuda=CUDA, rdma=RDMA, gpus=[{"index": 0, "compute_capability": "9.0"}],
                             env_exports={"EP_NIC_NAME": "mlx5_1"}, environ={})
    assert statuses(facts)[check] == status
    assert facts["ready"] is (status != "fail" and not [c for c in facts["checks"] if c["status"] == "fail"])
    assert check in facts["failed"] if status == "fail" else check not in facts["failed"]


@pytest.mark.parametrize("option, exports, name, source, status", [
    (None, {}, "mlx5_0", "default", "fail"),          # V2's default names an inactive device here
    (None, {"EP_NIC_NAME": "mlx5_1"}, "mlx5_1", "env_script", "pass"),
    ("mlx5_0", {"EP_NIC_NAME": "mlx5_1"}, "mlx5_0", "option", "fail"),
    ("ibp3s0", {}, "ibp3s0", "option", "fail"),
])
def test_ep_nic_name_comes_from_the_option_the_env_script_or_v2_s_default(tmp_path, libs, option, exports, name,
                                                                          source, status):
    root = node_root(tmp_path, libs)
    facts = gather_deepep_v2(root=str(root), cuda=CUDA, rdma=RDMA, env_exports=exports, environ={},
                             nic_name=option)
    assert (facts["nic"]["name"], facts["nic"]["source"], statuses(facts)["nic_name"]) == (name, source, status)


def test_cumem_is_looked_for_in_the_env_script_etc_environment_and_the_login(tmp_path, libs):
    root = node_root(tmp_path, libs, environment='NCCL_CUMEM_ENABLE="0"\n')
    facts = gather_deepep_v2(root=str(root), cuda=CUDA, rdma=RDMA, env_exports={"NCCL_CUMEM_ENABLE": "0"},
                             environ={"NCCL_CUMEM_ENABLE": "0"})
    assert [f["where"] for f in facts["cumem_disabled"]] == [
        "/etc/environment", "env_script /opt/deepep/unified-env.sh", "the environment of the node's login"]


def test_gather_node_reads_the_set_with_the_stack_s_commands_only(tmp_path, libs, tree):
    """gather: [deepep_v2] runs no command of its own: nvcc, ldconfig and the Python probe are the stack's."""
    sysfs = tree("h100_ib")
    root = node_root(tmp_path, libs)
    make_tree(root, "ptx_dd758ca.cuh", "dd758ca")
    seen = []

    def runner(argv, timeout=None, env=None):
        assert timeout is not None
        seen.append(argv[0] if argv[0] != "-c" else argv[1])
        if argv[-1] == "--version":
            return 0, "Cuda compilation tools, release 12.9, V12.9.86\n", ""
        return 1, "", "not here"

    options = GatherOptions(root=str(root), sysfs_root=str(sysfs), python="/nope/python3", nvidia_smi=None,
                            deepep_v2_tree="/tree", deepep_v2_across_nodes=True)
    facts, errors = gather_node(["deepep_v2"], options, runner=runner)
    assert errors == {}
    v2 = facts["gpufleet_deepep_v2"]
    assert v2["nvcc"]["release"] == "12.9" and v2["tree"]["gin_barrier"] is False
    assert statuses(v2)["gin_barrier"] == "fail"
    assert {os.path.basename(a) for a in seen} <= {"nvcc", "ldconfig", "python3", "nvidia-smi"}


def test_the_facts_are_plain_data(tmp_path, libs):
    facts = gather_deepep_v2(root=str(node_root(tmp_path, libs)), cuda=CUDA, rdma=RDMA, environ={})
    assert copy.deepcopy(facts) == facts


# --- the rules (audit and preflight) -----------------------------------------------------------------------------

import yaml  # noqa: E402
from test_preflight_rules import HEALTHY as PREFLIGHT_HEALTHY  # noqa: E402

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import (  # noqa: E402
    evaluate_rules,
    validate_rules,
)

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
RULE_OF_CHECK = {"nvcc": "DEEPEP_V2_NVCC", "cuobjdump": "DEEPEP_V2_CUOBJDUMP", "sm100_cuda": "DEEPEP_V2_SM100_CUDA",
                 "cuda128_host_code": "DEEPEP_V2_CUDA128_HOST_CODE", "ibstat": "DEEPEP_V2_IBSTAT",
                 "nic_name": "DEEPEP_V2_NIC_NAME", "libmlx5": "DEEPEP_V2_LIBMLX5",
                 "dev_infiniband": "DEEPEP_V2_DEV_INFINIBAND", "nccl_cumem": "DEEPEP_V2_NCCL_CUMEM",
                 "nccl_build_runtime": "DEEPEP_V2_NCCL_BUILD_RUNTIME", "gin_barrier": "DEEPEP_V2_GIN_BARRIER"}
# Checks that warn at most (the generic DEEPEP_V2_CHECK_WARN surfaces them): V2's AGRS path, not its dispatch.
WARN_ONLY = {"agrs_memop"}
FAILING = {check: next(c for c in CASES if c[0] == check and c[2] == "fail") for check in RULE_OF_CHECK}


def v2_doc(facts=None, v2=True, generation=None, linkage=None, **expect):
    """A node's document with ``gpufleet_deepep_v2``: for preflight it is completed with the preflight document of a
    healthy node (test_preflight_rules.HEALTHY), whose own rules stay quiet."""
    facts = facts if facts is not None else base_facts()
    facts = dict(facts, checks=v2_checks(facts))
    return {"host": "h100-1", "gather_errors": {}, "gpufleet_deepep_v2": facts,
            "gpufleet_deepep": {"installed": bool(generation), "generation": generation},
            "gpufleet_linkage": linkage, "expect": dict({"deepep_v2": v2}, **expect)}


def v2_findings(document, context):
    if context == "preflight":
        document = dict(copy.deepcopy(PREFLIGHT_HEALTHY), **{k: v for k, v in document.items() if k != "expect"},
                        expect=dict(PREFLIGHT_HEALTHY["expect"], **document["expect"]))
    found = evaluate_rules(document, CATALOGUE, context=context, order="catalogue")
    return [f for f in found if f["id"].startswith("DEEPEP_V2_") and f["id"] != "DEEPEP_V2_NCCL_OLD"]


def test_every_check_has_its_rule_and_every_rule_a_case():
    rules = {r["id"] for r in validate_rules(CATALOGUE) if r["id"].startswith("DEEPEP_V2_")}
    assert rules - {"DEEPEP_V2_NCCL_OLD"} == set(RULE_OF_CHECK.values()) | {"DEEPEP_V2_CHECK_WARN"}
    assert set(RULE_OF_CHECK) | WARN_ONLY == set(CHECKS)
    assert not [c for c in CASES if c[0] in WARN_ONLY and c[2] == "fail"]


@pytest.mark.parametrize("context", ["audit", "preflight"])
def test_a_ready_v2_node_has_no_finding(context):
    assert v2_findings(v2_doc(), context) == []
    if context == "preflight":
        document = dict(copy.deepcopy(PREFLIGHT_HEALTHY), gpufleet_deepep_v2=v2_doc()["gpufleet_deepep_v2"])
        document["expect"]["deepep_v2"] = True
        assert evaluate_rules(document, CATALOGUE, context="preflight") == []


@pytest.mark.parametrize("context", ["audit", "preflight"])
@pytest.mark.parametrize("check", sorted(RULE_OF_CHECK))
def test_each_failed_check_is_its_rule_s_critical_finding_with_the_fix(context, check):
    dummy, changes, dummy2, reason, fix = FAILING[check]
    facts = base_facts(**changes)
    found = v2_findings(v2_doc(facts), context)
    assert [f["id"] for f in found] == [RULE_OF_CHECK[check]]
    assert found[0]["severity"] == "critical"
    decision = decided(facts, check)
    assert found[0]["message"] == "DeepEP V2 (%s): %s. Fix: %s." % (check, decision["reason"], decision["fix"])
    assert reason in found[0]["message"] and fix in found[0]["message"]


@pytest.mark.parametrize("check", sorted(RULE_OF_CHECK))
def test_a_node_that_does_not_run_v2_is_not_judged(check):
    dummy, changes, dummy2, dummy3, dummy4 = FAILING[check]
    assert v2_findings(v2_doc(base_facts(**changes), v2=False), "audit") == []
    # an installed V2 build makes it judged even where the profile does not say so
    assert v2_findings(v2_doc(base_facts(**changes), v2=False, generation="v2"), "audit") != []


@pytest.mark.parametrize("context", ["audit", "preflight"])
def test_warnings_are_one_rule_at_warning_severity(context):
    facts = base_facts(compute_capabilities=["10.0"], nvcc__release="13.0", tree__sm100_st_bulk=None,
                       tree__gin_barrier=None, tree__error="no tree")
    found = v2_findings(v2_doc(facts), context)
    assert [(f["id"], f["severity"]) for f in found] == [("DEEPEP_V2_CHECK_WARN", "warning")] * 2
    assert "DeepEP V2 (sm100_cuda)" in found[0]["message"] and "747ea8e" in found[0]["message"]
    assert "DeepEP V2 (gin_barrier)" in found[1]["message"]


@pytest.mark.parametrize("check, changes, expect, fires", [
    # preflight: a gap a later phase fills is no failure yet
    ("nvcc", {"nvcc__present": False}, {"cuda_by_play": True, "cuda_version": "12.9"}, False),
    ("nvcc", {"nvcc__present": False}, {"cuda_by_play": True, "cuda_version": "12.2"}, True),
    ("nvcc", {"nvcc__present": False}, {"cuda_by_play": False, "cuda_version": "12.9"}, True),
    ("cuobjdump", {"cuobjdump__present": False, "nvcc__present": False},
     {"cuda_by_play": True, "cuda_version": "13.0"}, False),
    # nvcc there without cuobjdump (a partial toolkit): the play's cuda_toolkit phase installs the whole toolkit
    ("cuobjdump", {"cuobjdump__present": False}, {"cuda_by_play": True, "cuda_version": "13.0"}, False),
    ("cuobjdump", {"cuobjdump__present": False}, {"cuda_by_play": False, "cuda_version": "13.0"}, True),
    ("ibstat", {"ibstat__present": False}, {"rdma_stack_by_play": True}, False),
    ("libmlx5", {"libmlx5__required": False}, {"rdma_stack_by_play": True}, False),
    ("dev_infiniband", {"dev_infiniband__present": False, "dev_infiniband__uverbs": []}, {"rdma_stack_by_play": True}, False),
    ("ibstat", {"ibstat__present": False}, {"rdma_stack_by_play": False}, True),
    ("nic_name", {"nic__active": False, "nic__source": "default"}, {"env_script_sets_nic_name": True}, False),
    ("nic_name", {"nic__active": False, "nic__source": "env_script"}, {"env_script_sets_nic_name": True}, True),
    ("nic_name", {"nic__active": False, "nic__source": "default"}, {"env_script_sets_nic_name": False}, True),
])
def test_preflight_leaves_what_a_later_phase_installs(check, changes, expect, fires):
    found = v2_findings(v2_doc(base_facts(**changes), **expect), "preflight")
    assert [f["id"] for f in found] == ([RULE_OF_CHECK[check]] if fires else [])


@pytest.mark.parametrize("linkage, fires", [
    (None, True),
    ({"checks": [{"check": "nccl", "ok": False}]}, False),  # LINKAGE_NCCL_MISMATCH reports it already
    ({"checks": [{"check": "torch", "ok": True}]}, True),
])
def test_the_nccl_rule_stands_down_where_the_linkage_record_judges_nccl(linkage, fires):
    facts = base_facts(nccl__loaded="2.28.9")
    ids = [f["id"] for f in v2_findings(v2_doc(facts, linkage=linkage), "audit")]
    assert ids == (["DEEPEP_V2_NCCL_BUILD_RUNTIME"] if fires else [])
