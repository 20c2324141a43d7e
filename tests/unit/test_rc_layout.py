# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVSHMEM's IBGDA RC QP layout against the DeepEP tree that indexes it: the tree read by content, the build's
preflight, the audit's document and rule (DEEPEP_NVSHMEM_RC_LAYOUT), on the versions and trees the field met."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils import _catalogue
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.deepep import deepep_preflight
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.rc_layout import (
    TREE_FILES,
    catalogued_tree_check,
    compiled_rc_layout,
    nvshmem_rc_layout,
    rc_layout_check,
    tree_rc_layout,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import (
    deepep_rc_layout,
    loaded_nvshmem_version,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())

# The shape of each file at the trees the field met (the lines that matter; DeepEP 9af0e0d / 29d31c0 / dd758ca /
# refs/pull/696/head).
V1_UNFIXED = """__device__ static __forceinline__ nvshmemi_ibgda_device_qp_t* ibgda_get_rc(int pe, int id) {
    auto state = ibgda_get_state();
    const auto num_rc_per_pe = ibgda_get_state()->num_rc_per_pe;
    return &state->globalmem.rcs[pe * num_rc_per_pe * state->num_devices_initialized + id % (num_rc_per_pe * state->num_devices_initialized)];
}
"""
V1_564 = """template <typename StateType>
__device__ static __forceinline__ nvshmemi_ibgda_device_qp_t* ibgda_get_rc_impl(StateType* state, int pe, int id) {
    if constexpr (std::is_same_v<StateType, nvshmemi_ibgda_device_state_v1>) {
        return &state->globalmem.rcs[pe * num_rc_per_pe * state->num_devices_initialized + id % num_rcs];
    } else {
        return &state->globalmem.rcs[pe + nvshmemi_device_state_d.npes * id];
    }
}
__device__ static __forceinline__ nvshmemi_ibgda_device_qp_t* ibgda_get_rc(int pe, int id) {
    return ibgda_get_rc_impl(ibgda_get_state(), pe, id);
}
"""
LEGACY_696 = """__device__ static __forceinline__ nvshmemi_ibgda_device_qp_t* ibgda_get_rc(int pe, int id) {
#if NVSHMEM_VENDOR_MAJOR_VERSION > 3 || (NVSHMEM_VENDOR_MAJOR_VERSION == 3 && NVSHMEM_VENDOR_MINOR_VERSION > 5) || \\
    (NVSHMEM_VENDOR_MAJOR_VERSION == 3 && NVSHMEM_VENDOR_MINOR_VERSION == 5 && NVSHMEM_VENDOR_PATCH_VERSION >= 19)
    return &state->globalmem.rcs[qp * num_pes + pe];
#else
    return &state->globalmem.rcs[pe * num_rcs + qp];
#endif
}
"""
BACKEND_696 = "static void check_rc_layout_compatibility() { /* nvshmemx_vendor_get_version_info */ }\n"

TREES = {
    "v1.2.1 (9af0e0d)": {"v1_device": V1_UNFIXED},
    "567632d / 8a07e7e (#564)": {"v1_device": V1_564},
    "V2 main dd758ca": {"legacy_device": V1_UNFIXED, "legacy_backend": "void init() {}\n"},
    "PR #696 (2c70ee1)": {"legacy_device": LEGACY_696, "legacy_backend": BACKEND_696},
}


def tree(name):
    return tree_rc_layout(TREES[name])


def test_each_tree_is_read_by_its_content():
    assert tree("v1.2.1 (9af0e0d)") == {"fix": None, "selects": None, "runtime_check": False,
                                        "file": "csrc/kernels/ibgda_device.cuh"}
    assert tree("567632d / 8a07e7e (#564)") == {"fix": "#564", "selects": "state_type", "runtime_check": False,
                                                "file": "csrc/kernels/ibgda_device.cuh"}
    assert tree("V2 main dd758ca")["fix"] is None
    assert tree("V2 main dd758ca")["file"] == "csrc/kernels/legacy/ibgda_device.cuh"
    assert tree("PR #696 (2c70ee1)") == {"fix": "#696", "selects": "vendor_version", "runtime_check": True,
                                         "file": "csrc/kernels/legacy/ibgda_device.cuh"}
    # #696's device change without its runtime check (a partial cherry-pick) still picks the layout by version.
    assert tree_rc_layout({"legacy_device": LEGACY_696})["runtime_check"] is False
    # A tree without IBGDA device code (or files the build could not read) indexes nothing.
    assert tree_rc_layout({}) is None and tree_rc_layout(dict.fromkeys(TREE_FILES)) is None


@pytest.mark.parametrize("version, layout", [
    ("3.2.5-1", "pe_major"), ("3.4.5", "pe_major"), ("3.4.5-0", "pe_major"), ("v3.4.5-0", "pe_major"),
    ("3.5.18", "pe_major"), ("3.5.19", "qp_major"), ("3.5.19-1", "qp_major"), ("v3.5.19-1", "qp_major"),
    ("3.6.5", "qp_major"), ("3.7.2", "qp_major"), ("3.8.0", "qp_major"), (None, None), ("", None), ("soon", None)])
def test_nvshmem_layout_changes_at_3_5_19(version, layout):
    assert nvshmem_rc_layout(version) == layout


def test_the_catalogue_holds_the_boundary_with_its_evidence():
    entry = _catalogue.breakage("nvshmem_rc_layout")
    assert entry["boundary"] == "3.5.19" and "ce9d487" in entry["checked"] and "#696" in entry["source"]
    assert {k for k, v in _catalogue.DEEPEP_TREES.items() if v["rc_layout_fix"]} == {"29d31c0", "567632d", "8a07e7e",
                                                                                     "2c70ee1"}
    with pytest.raises(KeyError, match="unknown breakage 'nope' .known: gin_gdaki_libmlx5, numa_balancing, "
                                       "nvshmem_build_run_layout, nvshmem_rc_layout, nvshmem_source_cuda13, "):
        _catalogue.breakage("nope")


@pytest.mark.parametrize("name, build, run, status", [
    # Runbook 001: V1 with #466 (head 8a07e7e, #564 inside) built and run on NVSHMEM v3.5.19-1: passed internode.
    ("567632d / 8a07e7e (#564)", "3.5.19-1", "3.5.19-1", "pass"),
    ("567632d / 8a07e7e (#564)", "3.4.5", "3.4.5", "pass"),            # the b200_cuda13 profile's tree and NVSHMEM
    ("v1.2.1 (9af0e0d)", "3.4.5-0", None, "pass"),                     # the old layout on the old NVSHMEM
    ("v1.2.1 (9af0e0d)", "3.8.0", None, "fail"),                       # DeepEP #553/#707
    ("V2 main dd758ca", "3.7.2", None, "fail"),                        # #764: the legacy copy lost #564
    ("PR #696 (2c70ee1)", "3.7.2", "3.7.2", "pass"),
    ("567632d / 8a07e7e (#564)", "3.4.5", "3.6.5", "fail"),            # NeMo Automodel #2614: built old, runs new
    ("567632d / 8a07e7e (#564)", "3.5.19-1", "3.4.5", "fail"),         # and the other way round
    ("567632d / 8a07e7e (#564)", None, None, "unknown"),
])
def test_a_build_is_judged_against_the_nvshmem_it_loads(name, build, run, status):
    check = rc_layout_check(tree(name), build, run, recorded=True)
    assert check["status"] == status, check
    assert check["found"]["tree_fix"] == tree(name)["fix"]
    if status == "fail" and tree(name)["fix"] is None:
        assert "lacks DeepEP #564 and #696" in check["reason"] and "#553" in check["reason"]
        assert "29d31c0" in check["fix"] and "#696" in check["fix"] and "#553" in check["source"]
    elif status == "fail":
        assert "compiled against NVSHMEM %s" % build in check["reason"] and "loads NVSHMEM %s" % run in check["reason"]
        assert check["fix"].startswith("rebuild DeepEP against the NVSHMEM the node loads")


def test_a_tree_without_ibgda_code_and_an_unrecorded_build_are_told_apart():
    assert rc_layout_check(None, "3.8.0", recorded=True)["status"] == "not_applicable"
    assert rc_layout_check(None, "3.8.0")["status"] == "unknown"
    assert compiled_rc_layout(None, "3.8.0") is None
    assert compiled_rc_layout(tree("v1.2.1 (9af0e0d)"), "3.8.0") == "pe_major"
    assert compiled_rc_layout(tree("567632d / 8a07e7e (#564)"), "3.8.0") == "qp_major"


# --- the build's preflight ----------------------------------------------------------------------------------------

BUILD = {"generation": "v1", "arch_list": "10.0", "gpu_arch_list": ["10.0"], "cuda_home": "/usr/local/cuda",
         "cuda_version": "12.9.86", "cccl_exists": True, "torch_version": "2.9.1+cu129", "nccl_version": "2.27.3",
         "nvshmem_root": "/opt/deepep/nvshmem", "nvshmem_exists": True, "nvshmem_ibgda": True, "internode": True}


def preflight(name, version, **extra):
    obs = dict(BUILD, rc_record={"tree": tree(name)}, nvshmem_version=version, **extra)
    return deepep_preflight(obs)


def test_a_v1_build_for_across_nodes_is_refused_on_an_unfixed_tree_and_newer_nvshmem():
    result = preflight("v1.2.1 (9af0e0d)", "3.8.0")
    assert [f["check"] for f in result["failures"]] == ["nvshmem_rc_layout"]
    assert "NVSHMEM 3.8.0 stores them QP-major since 3.5.19" in result["failures"][0]["message"]
    # The runbook's tree on the runbook's NVSHMEM builds; the unfixed tree on 3.4.5 builds.
    assert preflight("567632d / 8a07e7e (#564)", "3.5.19-1")["ok"]
    assert preflight("v1.2.1 (9af0e0d)", "3.4.5")["ok"]


def test_intranode_and_v2_builds_are_warned_not_refused():
    intranode = preflight("v1.2.1 (9af0e0d)", "3.8.0", internode=False)
    assert intranode["ok"] and any("this build: v1, intranode only" in w for w in intranode["warnings"])
    v2 = preflight("V2 main dd758ca", "3.7.2", generation="v2", nccl_version="2.30.7", torch_version="2.11.0+cu130",
                   cuda_version="13.0.88")
    assert not [f for f in v2["failures"] if f["check"] == "nvshmem_rc_layout"]
    assert any("this build: v2, internode" in w for w in v2["warnings"])
    # Not read (a wheel without a record): nothing judged.
    assert deepep_preflight(dict(BUILD, rc_record=None, nvshmem_version="3.8.0"))["ok"]


# --- the audit -----------------------------------------------------------------------------------------------------

def node(record, built="3.5.19", bundled=None, would_win=False, root="/opt/deepep/nvshmem", intranode_only=None):
    doc = copy.deepcopy(HEALTHY)
    deepep = doc["gpufleet_deepep"]
    deepep["built_against"]["nvshmem"] = built
    deepep["nvshmem_build"].update(version=built, root=root)
    if record is not None:
        deepep["nvshmem_rc_layout"] = record
    doc["gpufleet_bundled_nvshmem"] = {"bundled_would_win": would_win,
                                       "bundled": [{"package": "nvidia-nvshmem-cu12", "version": v} for v in bundled or []]}
    if intranode_only is not None:
        doc["expect"]["intranode_only"] = intranode_only
    doc["gpufleet_deepep_rc_layout"] = deepep_rc_layout(doc)
    return doc


def findings(doc):
    return [f for f in evaluate_rules(doc, CATALOGUE) if f["id"] == "DEEPEP_NVSHMEM_RC_LAYOUT"]


def test_the_loaded_nvshmem_is_the_bundled_one_where_it_wins_or_the_build_used_pip():
    assert loaded_nvshmem_version(node(None, "3.4.5", ["3.6.5"])) == "3.4.5"
    assert loaded_nvshmem_version(node(None, "3.4.5", ["3.6.5"], would_win=True)) == "3.6.5"
    pip_root = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem"
    assert loaded_nvshmem_version(node(None, "3.4.5", ["3.6.5"], root=pip_root)) == "3.6.5"
    assert loaded_nvshmem_version(node(None, "3.4.5", [], would_win=True)) == "3.4.5"


def test_the_audit_passes_the_runbooks_node_and_names_the_broken_ones():
    fixed = {"tree": tree("567632d / 8a07e7e (#564)"), "compiled": "qp_major"}
    unfixed = {"tree": tree("v1.2.1 (9af0e0d)"), "compiled": "pe_major"}
    assert findings(node(fixed)) == [] and node(fixed)["gpufleet_deepep_rc_layout"]["status"] == "pass"
    assert findings(node(None)) == [] and node(None)["gpufleet_deepep_rc_layout"]["status"] == "unknown"
    (broken,) = findings(node(unfixed))
    assert broken["severity"] == "critical"
    assert broken["message"].startswith("DeepEP V1 (nvshmem_rc_layout): the tree (csrc/kernels/ibgda_device.cuh) "
                                        "indexes NVSHMEM's IBGDA RC QPs PE-major")
    assert broken["evidence"]["found"]["loads"] == "3.5.19"
    # A fixed tree built on 3.4.5, where torch's bundled 3.6.5 wins at run time.
    (straddle,) = findings(node(fixed, "3.4.5", ["3.6.5"], would_win=True))
    assert "compiled against NVSHMEM 3.4.5" in straddle["message"] and "loads NVSHMEM 3.6.5" in straddle["message"]
    # Intranode only: nothing indexes the RC QPs.
    assert findings(node(unfixed, intranode_only=True)) == []
    # V2 crosses nodes over NCCL GIN: the rule judges V1 only.
    v2 = node(unfixed)
    v2["gpufleet_deepep"]["generation"] = "v2"
    assert findings(v2) == []


# --- the preflight, before anything builds: a commit the catalogue knows ----------------------------------------

@pytest.mark.parametrize("commit, nvshmem, status", [
    ("8a07e7e7ed57cfc63005f670d64d410cb30b061b", "3.5.19-1", "pass"),   # b200_gcp_cuda129 (runbook 001)
    ("567632dd59810d77b3cc05553df953cc0f779799", "3.4.5-0", "pass"),    # b200_cuda13
    ("567632dd59810d77b3cc05553df953cc0f779799", "3.8.0", "pass"),      # #564 picks QP-major against 3.8 headers
    ("9af0e0d", "3.8.0", "fail"),                                       # v1.2.1
    ("9af0e0d", "3.4.5-0", "pass"),
    ("dd758ca", "3.7.2", "fail"),                                       # V2 main's legacy copy (the rule is V1's)
])
def test_a_catalogued_commit_is_judged_before_the_build(commit, nvshmem, status):
    judged = catalogued_tree_check(commit, nvshmem)
    assert judged["known"] and judged["check"]["status"] == status
    assert judged["generation"] == ("v2" if commit == "dd758ca" else "v1")


@pytest.mark.parametrize("ref", ["", None, "main", "refs/pull/466/head", "v1.2.1", "1234567", "9af0e0"])
def test_a_ref_or_unknown_commit_is_left_to_the_build(ref):
    assert catalogued_tree_check(ref, "3.8.0") == {"commit": ref or None, "known": False, "generation": None,
                                                   "check": None}


@pytest.mark.parametrize("arch, warned", [("10.0", None), ("10.0a", "10.0"), ("9.0;10.0a", "10.0"),
                                          ("10.0a;10.3a", "10.0, 10.3"), ("9.0a", None)])
def test_a_v1_build_for_an_arch_specific_blackwell_target_is_warned(arch, warned):
    """DeepEP #576 (thread only): V1 for 10.0a failed at its first layout kernel where 10.0 worked."""
    result = deepep_preflight(dict(BUILD, arch_list=arch, gpu_arch_list=["10.0"], rc_record=None,
                                   nvshmem_version="3.4.5"))
    found = [w for w in result["warnings"] if "#576" in w]
    assert (found[0].endswith("build for %s instead" % warned) if warned else found == [])
    v2 = deepep_preflight(dict(BUILD, generation="v2", arch_list=arch, gpu_arch_list=["10.0"], rc_record=None,
                               nvshmem_version="3.4.5", nccl_version="2.30.7", torch_version="2.11.0+cu130",
                               cuda_version="13.0.88"))
    assert not [w for w in v2["warnings"] if "#576" in w]


def test_the_mapped_nvshmem_host_library_says_which_nvshmem_runs():
    """The import probe's /proc/self/maps reading outranks the inference from the bundled copies' search order."""
    lib_dir = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib"
    doc = node(None, "3.4.5", ["3.6.5"])
    doc["gpufleet_bundled_nvshmem"]["bundled"][0]["lib_dir"] = lib_dir
    assert loaded_nvshmem_version(doc) == "3.4.5"  # by inference: the custom build wins
    doc["gpufleet_stack"]["deep_ep_import"] = {"mapped": {"nccl": [], "nvshmem_host": [lib_dir + "/libnvshmem_host.so.3"]}}
    assert loaded_nvshmem_version(doc) == "3.6.5"  # but the process mapped the bundled one
    doc["gpufleet_stack"]["deep_ep_import"]["mapped"]["nvshmem_host"] = ["/opt/deepep/nvshmem/lib/libnvshmem_host.so.3"]
    doc["gpufleet_bundled_nvshmem"]["bundled_would_win"] = True
    assert loaded_nvshmem_version(doc) == "3.4.5"  # the custom build's, whatever the search order says
