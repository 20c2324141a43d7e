# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the GPU profile object (plugins/plugin_utils/_gpu_families.py): the families and their hardware, the
token a profile names one by, the arch notations the roles spell a family's compute capability in, and the gates
every family carries (or the reason it has none). How a profile's gate is chosen is tests/unit/test_verify.py's
(test_every_gpu_family_is_gated_in_both_scopes_or_refused_in_both); the
family a profile declares (gpufleet_gpu_family) and the arch settings the roles derive from it, tests/unit/
test_gpu_arch.py's."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _gpu_families as gf
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import META, METRICS
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import BACKENDS
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import GPU_DEVICE_IDS


def test_the_families_and_their_compute_capabilities():
    assert gf.FAMILIES == {"a100": "8.0", "a800": "8.0", "h100": "9.0", "h800": "9.0", "h200": "9.0", "h20": "9.0",
                           "b200": "10.0", "gb200": "10.0", "b300": "10.3", "gb300": "10.3"}


@pytest.mark.parametrize("profile,family", [
    ("gcp_b200", "b200"), ("b200_cuda13", "b200"), ("b200-site.eu", "b200"), ("gcp_b300", "b300"),
    ("gb200_nvl72", "gb200"), ("GB300-NVL72", "gb300"), ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("h20_cluster", "h20"), ("h200", "h200"), ("a800_roce", "a800"),
    # no family: the token must be a whole word, not a part of one
    ("mycluster", None), ("default", None), ("", None), (None, None), ("b2000", None), ("xb200", None),
    ("NVIDIA GH200 480GB", None),
])
def test_family_of_finds_the_family_word_of_a_profile(profile, family):
    assert gf.family_of(profile) == family


def test_the_first_family_word_wins_and_words_split_as_the_thresholds_do():
    assert gf.family_of("h100_to_b200") == "h100"
    assert gf.profile_tokens(" GCP__B200-cuda13.site x ") == ["gcp", "b200", "cuda13", "site", "x"]
    assert gf.profile_tokens(5) == [] and gf.profile_tokens(None) == []


@pytest.mark.parametrize("family,torch,cmake", [
    ("a100", "8.0", "80"), ("a800", "8.0", "80"), ("h100", "9.0", "90"), ("h20", "9.0", "90"), ("h200", "9.0", "90"),
    ("b200", "10.0", "100"), ("gb200", "10.0", "100"), ("b300", "10.3", "103"), ("gb300", "10.3", "103"),
])
def test_the_arch_notations_derive_from_the_compute_capability(family, torch, cmake):
    # deepep_arch_list / nccl_cuda_arch_list / preflight_expected_cuda_arch take 10.0; nvshmem_cuda_arch takes 100
    assert gf.torch_arch(family) == gf.compute_capability(family) == torch
    assert gf.cmake_arch(family) == cmake


def test_an_unknown_family_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"'gh200' is no GPU family the collection knows; expected one of a100, a800"):
        gf.compute_capability("gh200")
    with pytest.raises(ValueError, match="'B200' is no GPU family"):
        gf.cmake_arch("B200")


def test_the_registry_agrees_with_the_pci_device_table():
    """Every GPU of module_utils/_pci.py's device table whose name carries a family word has that family's compute
    capability, and every family but the H20 (not in that table) has a device there."""
    seen = set()
    for name, capability in GPU_DEVICE_IDS.values():
        family = gf.family_of(name)
        if family is not None:
            assert capability == gf.FAMILIES[family], (name, capability, family)
            seen.add(family)
    assert set(gf.FAMILIES) - seen == {"h20"}


# ------------------------------------------------------------------------------------------ the profile object
def test_every_family_declares_its_whole_hardware_once():
    keys = {"arch", "min_cuda", "nvlink", "nvlink_gbps", "gpus_per_node", "nvlink_domain_gpus", "host_arch"}
    for family, spec in gf.SPECS.items():
        assert set(spec) == keys, family
        assert spec["host_arch"] in ("x86_64", "aarch64") and spec["nvlink"] in (3, 4, 5), family
        assert spec["gpus_per_node"] <= spec["nvlink_domain_gpus"], family
    # the NVL72 racks: 4 GPUs per Grace tray, 72 in one NVLink domain across 18 trays
    for family in ("gb200", "gb300"):
        assert (gf.SPECS[family]["gpus_per_node"], gf.SPECS[family]["nvlink_domain_gpus"],
                gf.SPECS[family]["host_arch"]) == (4, 72, "aarch64")
        assert gf.SPECS[family]["nvlink_domain_gpus"] // gf.SPECS[family]["gpus_per_node"] == 18


def test_families_of_one_capability_share_one_toolkit_floor():
    """The preflight's floor is per compute capability (what the GPUs report), so two families of one capability with
    two floors would make one of them wrong; the floors rise with the capability (a newer arch never needs less)."""
    for family, spec in gf.SPECS.items():
        assert gf.MIN_CUDA_BY_ARCH[spec["arch"]] == spec["min_cuda"], family
    ordered = sorted(gf.MIN_CUDA_BY_ARCH.items(), key=lambda item: tuple(int(p) for p in item[0].split(".")))
    floors = [tuple(int(p) for p in floor.split(".")) for dummy, floor in ordered]
    assert floors == sorted(floors)
    assert (gf.MIN_CUDA_BY_ARCH["10.3"], gf.MIN_CUDA_BY_ARCH["10.0"]) == ("12.9", "12.8")


def test_every_family_has_a_gate_in_every_scope_or_a_reason_for_none():
    """A family added to SPECS without a gate fails here, not silently in the field under the loose default."""
    for scope in gf.SCOPES:
        gated = set(gf.GATES[scope]) - {"default"}
        ungated = set(family for family in gf.FAMILIES if gf.ungated_reason(family, scope))
        assert gated | ungated == set(gf.FAMILIES), scope
        assert not gated & ungated, scope
    reasons = list(gf.UNGATED.values()) + [r for by in gf.UNGATED_BY_SCOPE.values() for r in by.values()]
    assert all(isinstance(reason, str) and len(reason) > 20 for reason in reasons)
    assert set(gf.UNGATED_BY_SCOPE) <= set(gf.SCOPES)


@pytest.mark.parametrize("scope", gf.SCOPES)
def test_every_gate_says_where_it_comes_from_and_what_it_rests_on(scope):
    def right_metric(key):
        if scope.startswith("low_latency"):
            return key.startswith("ll_")
        return key.endswith(("nvl" if scope in ("intranode", "scaleup") else "rdma") + "_gbps")

    for family, entry in gf.GATES[scope].items():
        assert isinstance(entry.get("source"), str) and entry["source"], (scope, family)
        metrics = dict((key, value) for key, value in entry.items() if key not in META)
        assert metrics and all(key in METRICS and right_metric(key) for key in metrics), (scope, family)
        assert any(value for value in metrics.values()), (scope, family)
        if family == "default":
            continue
        # measured by a backend's runs, or provisional with the reason: never both, never neither
        assert bool(entry.get("measured_with")) != bool(entry.get("provisional")), (scope, family)
        assert set(entry.get("measured_with") or []) <= set(BACKENDS), (scope, family)


def test_no_nvlink_gate_exceeds_what_the_hardware_can_carry():
    """DeepEP's own NVLink ceiling is 0.9 of the summed link speeds (field-2026-11.md); a gate above it is a typo
    (an RDMA figure in an NVLink field, a B200 gate on an H800)."""
    for family, entry in list(gf.GATES["intranode"].items()) + list(gf.GATES["low_latency_intranode"].items()):
        if family == "default":
            continue
        ceiling = 0.9 * gf.SPECS[family]["nvlink_gbps"]
        values = [value for key, value in entry.items() if key not in META and value] + \
            [value for shape in (entry.get("by_gpus") or {}).values() for value in shape.values() if value]
        assert values and max(values) < ceiling, (family, max(values), ceiling)


def test_a_provisional_gate_borrows_from_a_family_of_the_same_nvlink():
    """b300, gb200 and gb300 take the B200 gate (NVLink 5), never the loose default: the failure the shape issue
    measured (a B300 at a quarter of its NVLink speed passed at 100 GB/s)."""
    for family in ("b300", "gb200", "gb300"):
        for scope in ("intranode", "internode"):
            entry, b200 = gf.GATES[scope][family], gf.GATES[scope]["b200"]
            assert gf.SPECS[family]["nvlink"] == gf.SPECS["b200"]["nvlink"]
            assert dict((k, v) for k, v in entry.items() if k not in META) == \
                dict((k, v) for k, v in b200.items() if k not in META), (scope, family)
            assert entry["provisional"] and entry["source"] == "the B200 gate", (scope, family)


def test_low_latency_gates_per_gpu_count_and_the_blackwell_floor():
    """One node: the figures fall with more peers, so each measured count has its gate and the family gate (counts
    nobody measured) is lower than every one of them; the Blackwell families take the Hopper gate as a provisional
    floor (NVLink 5 is faster), never the loose default; A100 is refused with the SM90 reason."""
    hopper = gf.GATES["low_latency_intranode"]["h200"]
    assert sorted(hopper["by_gpus"]) == [1, 2, 4] and hopper["measured_with"] == ["deepep_v1"]
    for metric in ("ll_dispatch_gbps", "ll_combine_gbps"):
        counts = [hopper["by_gpus"][n][metric] for n in (1, 2, 4)]
        assert counts == sorted(counts, reverse=True) and hopper[metric] < counts[-1], metric
    for family in ("b200", "b300", "gb200", "gb300"):
        entry = gf.GATES["low_latency_intranode"][family]
        assert entry["provisional"] and entry["by_gpus"] == hopper["by_gpus"], family
        assert gf.GATES["low_latency_internode"][family]["provisional"], family
    assert "SM90" in gf.ungated_reason("a100", "low_latency_internode")
    assert gf.ungated_reason("a100", "intranode") is None and gf.ungated_reason("h20") == gf.UNGATED["h20"]


def test_gate_table_is_a_copy():
    table = gf.gate_table("intranode")
    table["b200"]["combine_nvl_gbps"] = 1
    table["x"] = {}
    assert gf.GATES["intranode"]["b200"]["combine_nvl_gbps"] == 300 and "x" not in gf.GATES["intranode"]
    with pytest.raises(ValueError, match="scope 'low_latency' has no gates; expected one of intranode, internode, scaleup, low_latency_intranode"):
        gf.gate_table("low_latency")
