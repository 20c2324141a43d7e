# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RDMA facts on sysfs as a real kernel wrote it: soft-RoCE rxe0 of a Debian bookworm guest (tools/vmfleet),
captured in tests/fixtures/captured/realvm/rxe0-sysfs.json. A file the kernel lists but refuses to read
(``EINVAL``: an unused GID's attributes) is rebuilt as a directory, which open() refuses too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _rdma

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "realvm" / "rxe0-sysfs.json"


@pytest.fixture(name="capture")
def fixture_capture():
    return json.loads(CAPTURE.read_text(encoding="utf-8"))


@pytest.fixture(name="sysfs")
def fixture_sysfs(tmp_path, capture):
    dev = tmp_path / "class" / "infiniband" / capture["device"]
    for rel, content in capture["files"].items():
        path = dev / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.mkdir()
    return tmp_path


@pytest.fixture(name="facts")
def fixture_facts(sysfs):
    return _rdma.collect_rdma(str(sysfs))


def test_capture_is_what_the_kernel_wrote(capture):
    files = capture["files"]
    assert capture["kernel"].startswith("6.1.")
    assert files["parent"] == "eth1\n"
    assert "device" not in files  # no PCI device behind a software RDMA device
    assert not any(k.startswith("ports/1/counters/") for k in files)  # no IB port counters on rxe
    assert files["ports/1/gid_attrs/types/2"] == {"error": "Invalid argument"}
    assert capture["gid_table_len"] == 1024


@pytest.mark.parametrize("fact,expected", [
    ("active_devices", ["rxe0"]),
    ("transport", "roce"),
    ("hca_prefix", "rxe"),
    ("recommended_gid_index", 1),
])
def test_fleet_level_facts(facts, fact, expected):
    assert facts[fact] == expected


@pytest.mark.parametrize("fact,expected", [
    ("naming", "other"),
    ("pci_address", None),
    ("pci_path", None),
    ("numa_node", -1),
    ("netdevs", ["eth1"]),
    ("node_type", "1: CA"),
    ("fw_ver", ""),
    ("node_guid", "5054:00ff:fe77:0001"),
    ("active", True),
])
def test_device_facts(facts, fact, expected):
    assert facts["devices"][0][fact] == expected


@pytest.mark.parametrize("fact,expected", [
    ("state", "ACTIVE"), ("state_num", 4), ("phys_state", "LinkUp"), ("phys_state_num", 5),
    ("link_layer", "Ethernet"), ("rate", "2.5 Gb/sec (1X SDR)"), ("rate_gbps", 2.5), ("lid", None),
    ("roce_v2_ipv4_gid_index", 1), ("ipv4_addresses", ["10.77.0.11"]), ("counters", {}),
])
def test_port_facts(facts, fact, expected):
    assert facts["devices"][0]["ports"][0][fact] == expected


def test_gid_table_only_the_used_entries_both_roce_v2(facts):
    gids = facts["devices"][0]["ports"][0]["gids"]
    assert [(g["index"], g["type"], g["ndev"], g["ipv4"], g["link_local"]) for g in gids] == [
        (0, "RoCE v2", "eth1", None, True), (1, "RoCE v2", "eth1", "10.77.0.11", False)]


def test_hw_counters_are_rxe_packet_counters(facts):
    hw = facts["devices"][0]["ports"][0]["hw_counters"]
    assert {"sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs", "duplicate_request"} <= set(hw)
    assert "port_xmit_data" not in hw and "port_rcv_data" not in hw


def test_netdevs_of_a_pci_device_still_come_from_its_device_link(sysfs, capture):
    dev = sysfs / "class" / "infiniband" / capture["device"]
    (dev / "device" / "net" / "ens1f0").mkdir(parents=True)
    (dev / "parent").write_text("ignored\n", encoding="utf-8")
    assert _rdma.read_device(str(sysfs), "rxe0")["netdevs"] == ["ens1f0"]


# ------------------------------------------------------------------------------------------ NIC traffic on rxe
def _sent(facts, packets):
    """The same facts after rxe0 sent ``packets`` more packets (hw_counters/sent_pkts as the kernel counts them)."""
    after = json.loads(json.dumps(facts))
    hw = after["devices"][0]["ports"][0]["hw_counters"]
    hw["sent_pkts"] += packets
    return after


def test_nic_traffic_reads_rxe_packet_counters_where_there_is_no_byte_counter(facts):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.traffic import nic_traffic
    # 1 MiB at most 4096 bytes a packet: 256 packets at least.
    busy = nic_traffic(facts, _sent(facts, 300), min_bytes=1 << 20)
    assert busy["passed"] and busy["busy"] == ["rxe0"] and busy["causes"] == []
    assert busy["nics"] == [{"name": "rxe0", "bytes": None, "packets": 300, "counter": "sent_pkts", "busy": True,
                             "rate_gbps": 2.5}]
    idle = nic_traffic(facts, _sent(facts, 255), min_bytes=1 << 20)
    assert not idle["passed"] and idle["idle"] == ["rxe0"]
    assert idle["nics"][0]["packets"] == 255 and "no NIC carried traffic" in idle["causes"][0]


def test_nic_traffic_names_a_port_with_no_counter_at_all(facts):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.traffic import nic_traffic
    bare = json.loads(json.dumps(facts))
    bare["devices"][0]["ports"][0]["hw_counters"] = {}
    got = nic_traffic(bare, bare)
    assert not got["passed"] and got["nics"][0]["counter"] is None
    assert got["causes"][0].startswith("no traffic counter on rxe0 (neither counters/port_xmit_data nor")
