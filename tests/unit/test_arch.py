# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests of plugins/module_utils/_arch.py: CUDA arch lists in the PyTorch and CMake forms."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _arch as ar


@pytest.mark.parametrize("value,expected", [
    ("9.0", "9.0"), ("10.0", "10.0"), ("9.0;10.0", "9.0;10.0"), ("9.0a", "9.0a"), ("10.0+PTX", "10.0+PTX"),
    (" 9.0 10.0 ", "9.0;10.0"), (["9.0", "10.0"], "9.0;10.0"), ("9.0;9.0", "9.0"), ("10.0a;12.0f", "10.0a;12.0f"),
    ("8.0", "8.0"),
])
def test_parse_arch_list(value, expected):
    assert ar.format_arch_list(ar.parse_arch_list(value)) == expected


@pytest.mark.parametrize("value,hint", [
    ("10,0", "'10,0'"), ("9.0;10,0", "'10,0'"), ("sm90", "'sm90'"), ("100", "10.0"), ("", "empty"),
    ("9", "'9'"), ("2.0", "'2.0'"), ("9.0b", "'9.0b'"),
])
def test_parse_arch_list_names_the_bad_entry(value, hint):
    with pytest.raises(ar.ArchError) as err:
        ar.parse_arch_list(value)
    assert hint in str(err.value)
    if value:
        assert "9.0" in str(err.value)  # the expected form is named


def test_arch_forms_convert_both_ways():
    assert ar.torch_to_cmake_arch("10.0") == "100"
    assert ar.torch_to_cmake_arch("9.0a;10.0+PTX") == "90a;100"
    assert ar.cmake_to_torch_arch("100") == "10.0"
    assert ar.cmake_to_torch_arch("90a") == "9.0a"
    assert ar.cmake_to_torch_arch("sm_80") == "8.0"
    assert ar.parse_cmake_arch_list("90;100") == "90;100"
    assert ar.parse_cmake_arch_list("9.0") == "90"
    assert ar.parse_cmake_arch_list(100) == "100"
    assert ar.parse_cmake_arch_list("90-real") == "90-real"
    with pytest.raises(ar.ArchError, match="'10,0'"):
        ar.parse_cmake_arch_list("10,0")


def test_gpu_coverage_and_aggressive_ptx_rule():
    assert ar.uncovered_gpu_archs("9.0", ["9.0", "9.0"]) == []
    assert ar.uncovered_gpu_archs("9.0a", "9.0") == []
    assert ar.uncovered_gpu_archs("9.0", "10.0") == ["10.0"]
    assert ar.uncovered_gpu_archs("9.0+PTX", "10.0") == []
    assert ar.uncovered_gpu_archs("9.0;10.0", "8.0;10.0") == ["8.0"]
    assert ar.needs_disable_aggressive_ptx("9.0") is False
    for arch in ("9.0a", "10.0", "9.0;10.0", "8.0"):
        assert ar.needs_disable_aggressive_ptx(arch) is True


# --------------------------------------------------------------------------------------------
# NVSHMEM helpers
