# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an NVSHMEM version needs of rdma-core (plugins/module_utils/_comm/nvshmem_rdma.py and its filters): from 3.4.5
on NVSHMEM defines MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT itself when infiniband/mlx5dv.h lacks it
(transport_ib_common.h of v3.4.5-0); before it, and for an unknown version, the symbol is required."""

from __future__ import annotations

import shutil

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.filter import version_helpers
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import (
    NvshmemRdmaError,
    mlx5dv_verdict,
    nvshmem_rdma_needs,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.stack import nvshmem_libmlx5
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules

SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"
FILTERS = version_helpers.FilterModule().filters()
CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())

# version given -> the version the result names
SINCE_345 = {"3.4.5-0": "3.4.5-0", "3.4.5": "3.4.5", "v3.4.5-0": "3.4.5-0", "V3.4.5": "3.4.5", "3.5.1": "3.5.1",
             "3.5.19-1": "3.5.19-1", "3.10": "3.10", "4.0.0": "4.0.0", "3.4.10": "3.4.10"}
OLDER = {"3.2.5-1": "3.2.5-1", "3.3.9": "3.3.9", "3.4.4-1": "3.4.4-1", "v3.4": "3.4", "2.11.0-5": "2.11.0-5",
         "3.3.20": "3.3.20"}
UNKNOWN = [None, ""]
BAD = ["latest", "3", "3.4.x", "3.4.5rc1", "3.4.5-0\n", " 3.4.5", "3.4.5+cu129", "v", "3.4.5-0-1", "3.4.5.1", "-1"]


def test_the_libmlx5_and_header_needs_are_the_same_for_every_version():
    for version in list(SINCE_345) + list(OLDER) + UNKNOWN:
        needs = nvshmem_rdma_needs(version)
        assert needs["header"] == "infiniband/mlx5dv.h"
        assert needs["libmlx5_required"] == "MLX5_1.8" and needs["libmlx5_optional"] == "MLX5_1.25"


@pytest.mark.parametrize("version", sorted(SINCE_345))
def test_345_and_newer_define_the_symbol_themselves(version):
    needs = nvshmem_rdma_needs(version)
    named = SINCE_345[version]
    assert needs["nvshmem_version"] == named and needs["known"] is True
    assert needs["symbols"] == [] and needs["defines_itself"] == [SYMBOL]
    assert needs["reason"] == ("NVSHMEM %s (3.4.5 or newer) defines %s itself when infiniband/mlx5dv.h lacks it: it "
                               "needs the header (libibverbs-dev), not the symbol" % (named, SYMBOL))


@pytest.mark.parametrize("version", sorted(OLDER))
def test_older_versions_need_the_symbol(version):
    needs = nvshmem_rdma_needs(version)
    named = OLDER[version]
    assert needs["nvshmem_version"] == named and needs["known"] is True
    assert needs["symbols"] == [SYMBOL] and needs["defines_itself"] == []
    assert needs["reason"].startswith("NVSHMEM %s (older than 3.4.5) needs %s from rdma-core's headers" % (named, SYMBOL))


@pytest.mark.parametrize("version", UNKNOWN)
def test_an_unknown_version_needs_the_symbol(version):
    needs = nvshmem_rdma_needs(version)
    assert needs["nvshmem_version"] is None and needs["known"] is False
    assert needs["symbols"] == [SYMBOL] and needs["defines_itself"] == []
    assert needs["reason"].startswith("the NVSHMEM version is unknown, so %s is required" % SYMBOL)


@pytest.mark.parametrize("version", BAD + [3.4, 345, True, ["3.4.5"]])
def test_bad_versions_name_the_value_and_the_form(version):
    with pytest.raises(NvshmemRdmaError) as err:
        nvshmem_rdma_needs(version)
    text = str(err.value)
    assert text.startswith("nvshmem_version: %r is not an NVSHMEM version such as 3.4.5-0, 3.4.5 or v3.4.5-0" % (version,))
    assert "major.minor[.patch][-package]" in text
    with pytest.raises(AnsibleFilterError, match="^nvshmem_rdma_needs: nvshmem_version: "):
        FILTERS["nvshmem_rdma_needs"](version)


# --- the verdict over a header's facts (node_stack's gpufleet_symbols entry) --------------------------------------

HEADERS = {
    "rdma-core 50 (no symbol)": ({"present": True, "symbols": {SYMBOL: False}}, False),
    "no header": ({"present": False, "symbols": {SYMBOL: False}}, False),
    "DOCA's rdma-core": ({"present": True, "symbols": {SYMBOL: True}}, True),
}


@pytest.mark.parametrize("name", sorted(HEADERS))
@pytest.mark.parametrize("version", sorted(SINCE_345) + sorted(OLDER) + [""])
def test_verdict_follows_the_version(version, name):
    header, has_symbol = HEADERS[name]
    verdict = mlx5dv_verdict(header, version)
    assert verdict == FILTERS["mlx5dv_verdict"](header, version)
    assert verdict["needs"] == nvshmem_rdma_needs(version) and verdict["reason"] == verdict["needs"]["reason"]
    if version in SINCE_345:
        assert verdict["ok"] is True and verdict["required"] == [] and verdict["missing"] == []
        assert verdict["waived"] == ([] if has_symbol else [SYMBOL])
    else:
        assert verdict["ok"] is has_symbol
        assert verdict["required"] == [SYMBOL] and verdict["waived"] == []
        assert verdict["missing"] == ([] if has_symbol else [SYMBOL])


@pytest.mark.parametrize("version, ok", [("3.4.5-0", False), ("3.2.5-1", False)])
def test_another_symbol_stays_required(version, ok):
    header = {"present": True, "symbols": {SYMBOL: False, "MLX5DV_OTHER": False}}
    verdict = mlx5dv_verdict(header, version)
    assert verdict["ok"] is ok and "MLX5DV_OTHER" in verdict["missing"] and "MLX5DV_OTHER" in verdict["required"]


@pytest.mark.parametrize("version, ok", [("3.4.5-0", False), ("3.2.5-1", False), ("", False)])
def test_a_missing_header_with_other_symbols_is_not_ok(version, ok):
    verdict = mlx5dv_verdict({"present": False, "symbols": {"MLX5DV_OTHER": False}}, version)
    assert verdict["ok"] is ok and verdict["missing"] == ["MLX5DV_OTHER"]


@pytest.mark.parametrize("present", [True, False])
@pytest.mark.parametrize("version", ["3.4.5-0", "3.2.5-1"])
def test_no_symbol_checked_asks_the_header(version, present):
    verdict = mlx5dv_verdict({"present": present, "symbols": {}}, version)
    assert verdict["ok"] is present and verdict["required"] == [] and verdict["waived"] == []


# --- libmlx5 at run time: MLX5_1.8 required (mlx5dv_is_supported), MLX5_1.25 optional (data-direct, dma-buf) -------
# node_stack's rdma_core.libmlx5 over libmlx5-like objects compiled here, and the audit's NVSHMEM_LIBMLX5_OLD over it.

@pytest.fixture(scope="module")
def mlx5_libs(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc builds the ELF objects read here")
    from test_deepep_v2_runtime import mlx5_object

    tmp = tmp_path_factory.mktemp("nvshmem-mlx5")
    return {newest: mlx5_object(tmp / str(newest), newest) for newest in (7, 8, 24, 25)}


def node_with_libmlx5(tmp_path, lib):
    libdir = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    if lib is not None:
        shutil.copy(str(lib), str(libdir / "libmlx5.so.1"))
    return str(tmp_path)


# newest MLX5_1.<n> -> (required_ok, optional_ok); 24 is Ubuntu 24.04's rdma-core 50 (libmlx5.so.1.24)
LIBMLX5_CASES = {7: (False, False), 8: (True, False), 24: (True, False), 25: (True, True)}


@pytest.mark.parametrize("newest", sorted(LIBMLX5_CASES))
def test_libmlx5_facts_name_what_nvshmem_needs(tmp_path, mlx5_libs, newest):
    facts = nvshmem_libmlx5(node_with_libmlx5(tmp_path, mlx5_libs[newest]), {})
    assert facts["path"] == "/usr/lib/x86_64-linux-gnu/libmlx5.so.1" and facts["newest"] == "MLX5_1.%d" % newest
    assert (facts["required"], facts["optional"]) == ("MLX5_1.8", "MLX5_1.25")
    assert (facts["required_ok"], facts["optional_ok"]) == LIBMLX5_CASES[newest]
    assert facts["error"] is None


def test_no_libmlx5_is_unknown_not_old(tmp_path):
    facts = nvshmem_libmlx5(node_with_libmlx5(tmp_path, None), {})
    assert facts["path"] is None and facts["required_ok"] is None and facts["optional_ok"] is None
    assert "libmlx5.so.1 not found" in facts["error"]


@pytest.mark.parametrize("ibgda", [True, False])
@pytest.mark.parametrize("newest", sorted(LIBMLX5_CASES) + [None])
def test_audit_names_a_libmlx5_too_old_for_nvshmem_ibgda(tmp_path, mlx5_libs, newest, ibgda):
    facts = nvshmem_libmlx5(node_with_libmlx5(tmp_path, mlx5_libs.get(newest)), {})
    doc = {"host": "n1", "expect": {"intranode_only": False},
           "gpufleet_stack": {"nvshmem": {"present": True, "ibgda": ibgda, "version": "3.4.5-0"},
                              "rdma_core": {"libmlx5": facts}}}
    found = [f for f in evaluate_rules(doc, CATALOGUE) if f["id"] == "NVSHMEM_LIBMLX5_OLD"]
    if ibgda and newest == 7:
        assert len(found) == 1 and found[0]["severity"] == "critical"
        assert found[0]["message"] == (
            "libmlx5 /usr/lib/x86_64-linux-gnu/libmlx5.so.1 defines symbol versions up to MLX5_1.7, but NVSHMEM 3.4.5-0 "
            "IBGDA loads mlx5dv_is_supported at MLX5_1.8. Fix: install an rdma-core (libibverbs1, ibverbs-providers) "
            "or the DOCA-OFED userspace whose libmlx5 defines MLX5_1.8.")
    else:
        assert found == []
    # an intranode-only profile never judges it
    doc["expect"]["intranode_only"] = True
    assert [f for f in evaluate_rules(doc, CATALOGUE) if f["id"] == "NVSHMEM_LIBMLX5_OLD"] == []
