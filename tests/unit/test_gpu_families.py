# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the GPU family registry (plugins/plugin_utils/_gpu_families.py): the families, the token a profile
names one by, and the arch notations the roles spell a family's compute capability in. Which families the verify
roles' gate tables gate is tests/unit/test_verify.py's (test_every_gpu_family_is_gated_by_both_role_tables_...); the
family a profile declares (gpufleet_gpu_family) and the arch settings the roles derive from it, tests/unit/
test_gpu_arch.py's."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _gpu_families as gf
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
