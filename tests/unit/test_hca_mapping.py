# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the HCA mapping parser (module_utils/_hca_mapping.py) and the hca_mapping filter."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.hca_mapping import FilterModule, hca_mapping
from ansible_collections.gpufleet.deepep.plugins.module_utils._hca_mapping import (
    HcaMappingError,
    mapping_as_dict,
    parse_hca_mapping,
    render_hca_mapping,
)

RUNBOOK = "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1"


def test_parse_the_runbook_mapping():
    entries = parse_hca_mapping(RUNBOOK)
    assert len(entries) == 8
    assert entries[0] == {"gpu": 0, "hca": "mlx5_0", "port": 1}
    assert entries[7] == {"gpu": 7, "hca": "mlx5_7", "port": 1}
    assert render_hca_mapping(entries) == RUNBOOK


def test_parse_keeps_order_and_tolerates_spaces_around_entries():
    entries = parse_hca_mapping(" 1:rocep146s0:1, 0:rocep145s0:2 ")
    assert entries == [{"gpu": 1, "hca": "rocep146s0", "port": 1}, {"gpu": 0, "hca": "rocep145s0", "port": 2}]
    assert render_hca_mapping(entries) == "0:rocep145s0:2,1:rocep146s0:1"
    assert mapping_as_dict(entries) == {0: {"hca": "rocep145s0", "port": 2}, 1: {"hca": "rocep146s0", "port": 1}}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("0:mlx5_0:1,0:mlx5_1:1", "GPU 0 appears twice ('0:mlx5_0:1' and '0:mlx5_1:1')"),
        ("0::1", "entry '0::1': the HCA name is empty"),
        ("0:mlx5_0:x", "entry '0:mlx5_0:x': port 'x' is not a positive integer"),
        ("0:mlx5_0:0", "port '0' is not a positive integer"),
        ("0:mlx5_0:1.5", "port '1.5' is not a positive integer"),
        ("0:mlx5_0", "entry '0:mlx5_0' is missing the port"),
        ("0:mlx5_0:1:2", "has 4 ':'-separated parts, not 3"),
        ("gpu0:mlx5_0:1", "GPU 'gpu0' is not a non-negative integer"),
        ("-1:mlx5_0:1", "GPU '-1' is not a non-negative integer"),
        ("0:mlx5_0:1;1:mlx5_1:1", "contains ';': separate entries with ','"),
        ("0:mlx5_0:1 1:mlx5_1:1", "contains ' '"),
        ("0:mlx5_0:1,,1:mlx5_1:1", "entry 2 is empty"),
        ("0:mlx5_0:1,", "entry 2 is empty"),
        ("", "HCA mapping is empty"),
        ("   ", "HCA mapping is empty"),
        ("0:mlx5$0:1", "HCA 'mlx5$0' is not a device name"),
    ],
)
def test_malformed_mappings_are_rejected_with_the_expected_form(text, fragment):
    with pytest.raises(HcaMappingError) as err:
        parse_hca_mapping(text)
    assert fragment in str(err.value)
    assert "expected gpu:hca:port[,gpu:hca:port...], e.g. 0:mlx5_0:1,1:mlx5_1:1" in str(err.value)


def test_non_string_is_rejected():
    with pytest.raises(HcaMappingError, match="must be a string, got int 5"):
        parse_hca_mapping(5)


def test_render_from_dicts_and_lists():
    assert render_hca_mapping({1: "mlx5_1:1", 0: {"hca": "mlx5_0", "port": "1"}}) == "0:mlx5_0:1,1:mlx5_1:1"
    assert render_hca_mapping([{"gpu": "2", "hca": "mlx5_2", "port": 1}]) == "2:mlx5_2:1"


@pytest.mark.parametrize(
    "value, fragment",
    [
        ([{"gpu": 0, "hca": "mlx5_0"}], "lacks port"),
        ([{"gpu": 0, "hca": "", "port": 1}], "lacks hca"),
        ([{"gpu": 0, "hca": "mlx5_0", "port": 1}, {"gpu": 0, "hca": "mlx5_1", "port": 1}], "GPU 0 appears twice"),
        ([{"gpu": 0, "hca": "mlx5_0", "port": "one"}], "port 'one' is not an integer"),
        ([{"gpu": True, "hca": "mlx5_0", "port": 1}], "GPU True is not an integer"),
        ([{"gpu": -2, "hca": "mlx5_0", "port": 1}], "GPU -2 is negative"),
        ([{"gpu": 0, "hca": "mlx5_0", "port": 0}], "port 0 is not a positive integer"),
        ({0: "mlx5_0"}, "not 'hca:port' or {hca, port}"),
        (["0:mlx5_0:1"], "is not a mapping with gpu, hca and port"),
        ([], "has no entries"),
        (3.5, "cannot render an HCA mapping from float"),
    ],
)
def test_render_rejects_bad_entries(value, fragment):
    with pytest.raises(HcaMappingError) as err:
        render_hca_mapping(value)
    assert fragment in str(err.value)


def test_filter_directions():
    assert hca_mapping(RUNBOOK)[3] == {"gpu": 3, "hca": "mlx5_3", "port": 1}
    assert hca_mapping(RUNBOOK, output="dict")[5] == {"hca": "mlx5_5", "port": 1}
    assert hca_mapping(" 1:mlx5_1:1,0:mlx5_0:1", output="string") == "0:mlx5_0:1,1:mlx5_1:1"
    assert hca_mapping(hca_mapping(RUNBOOK)) == RUNBOOK
    assert hca_mapping({0: "mlx5_0:1"}, output="list") == [{"gpu": 0, "hca": "mlx5_0", "port": 1}]
    # The filter is the function behind the collection's last-resort handler (same answers, same name).
    wrapped = FilterModule().filters()["hca_mapping"]
    assert wrapped.__name__ == "hca_mapping" and wrapped(RUNBOOK) == hca_mapping(RUNBOOK)


def test_filter_errors_are_ansible_filter_errors():
    with pytest.raises(AnsibleFilterError, match=r"hca_mapping: HCA mapping '0:mlx5_0:1,0:mlx5_1:1': GPU 0 appears twice"):
        hca_mapping("0:mlx5_0:1,0:mlx5_1:1")
    with pytest.raises(AnsibleFilterError, match="output 'yaml' is not one of list, dict, string"):
        hca_mapping(RUNBOOK, output="yaml")
    with pytest.raises(AnsibleFilterError, match="lacks port"):
        hca_mapping([{"gpu": 0, "hca": "mlx5_0"}])
