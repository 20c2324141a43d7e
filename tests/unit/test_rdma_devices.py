# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_rdma.py and the rdma_devices module, on sysfs trees rendered by fakehw."""

from __future__ import annotations

import copy
import importlib
import os
import sys

import pytest

from tools.fleetsim import fakehw
from unit_helpers import render_sysfs_tree as render

from ansible_collections.gpufleet.deepep.plugins.module_utils import _rdma
from ansible_collections.gpufleet.deepep.plugins.modules import rdma_devices


def with_down_frontend_rdma_nic(profile_name="gcp_b200"):
    """The profile plus a ConnectX front-end RoCE NIC, port DOWN, on its own host bridge of NUMA node 0.

    Its PCI address (0000:0c:00.0) sorts before every rail NIC, so with mlx5 naming it is mlx5_0.
    """
    prof = copy.deepcopy(fakehw.load_profile(profile_name))
    prof["nics"].append({"id": "fe1", "bdf": "0000:0c:00.0", "role": "frontend", "netdev": "enp12s0np0",
                         "link_layer": "Ethernet", "ipv4": "10.30.0.5/24", "state": "DOWN",
                         "rate": "100 Gb/sec (2X HDR)"})
    prof["topology"].append({"host_bridge": "0000:0b", "numa_node": 0, "root_port": "0000:0b:00.0",
                             "devices": ["fe1"]})
    return fakehw.validate_profile(prof)


def test_gcp_b200_rocep_devices(tree):
    facts = _rdma.collect_rdma(str(tree()))
    assert [d["name"] for d in facts["devices"]] == [
        "rocep145s0", "rocep146s0", "rocep152s0", "rocep153s0",
        "rocep198s0", "rocep199s0", "rocep205s0", "rocep206s0"]
    assert facts["active_devices"] == [d["name"] for d in facts["devices"]]
    assert facts["hca_prefix"] == "rocep"
    assert facts["transport"] == "roce"
    assert facts["recommended_gid_index"] == 3
    dev = facts["devices"][0]
    assert dev["naming"] == "rocep"
    assert dev["pci_address"] == "0000:91:00.0"
    assert dev["pci_path"] == ["pci0000:8c", "0000:8c:00.0", "0000:8d:00.0", "0000:8e:02.0", "0000:91:00.0"]
    assert dev["numa_node"] == 0
    assert dev["netdevs"] == ["gpu0rdma0"]
    assert dev["fw_ver"] == "28.43.2026" and dev["hca_type"] == "MT4129" and dev["board_id"] == "GOO0000000002"
    assert facts["devices"][4]["numa_node"] == 1
    port = dev["ports"][0]
    assert port["port"] == 1 and port["state"] == "ACTIVE" and port["state_num"] == 4
    assert port["phys_state"] == "LinkUp" and port["link_layer"] == "Ethernet"
    assert port["rate"] == "400 Gb/sec (4X NDR)" and port["rate_gbps"] == 400
    assert port["lid"] is None
    assert [(g["index"], g["type"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"), (3, "RoCE v2")]
    assert port["gids"][0]["link_local"] is True and port["gids"][0]["ipv4"] is None
    assert port["gids"][0]["address"].startswith("fe80::")
    assert port["gids"][3] == {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:0002",
                               "address": "::ffff:192.168.0.2", "type": "RoCE v2", "ndev": "gpu0rdma0",
                               "ipv4": "192.168.0.2", "link_local": False}
    assert port["roce_v2_ipv4_gid_index"] == 3
    assert port["ipv4_addresses"] == ["192.168.0.2"]
    assert port["counters"]["port_xmit_data"] == 0
    assert "out_of_sequence" in port["hw_counters"]


def test_counters_are_read_live(tmp_path):
    root = render(tmp_path)
    (root / "class/infiniband/rocep146s0/ports/1/counters/port_xmit_data").write_text("123456789\n")
    facts = _rdma.collect_rdma(str(root))
    assert facts["devices"][1]["ports"][0]["counters"]["port_xmit_data"] == 123456789


def test_gcp_b200_after_doca_rename_is_mlx5(tree):
    facts = _rdma.collect_rdma(str(tree(nic_naming="mlx5", node_index=3)))
    assert facts["active_devices"] == [f"mlx5_{i}" for i in range(8)]
    assert facts["hca_prefix"] == "mlx5"
    assert facts["recommended_gid_index"] == 3
    assert facts["devices"][0]["naming"] == "mlx5"
    assert facts["devices"][7]["ports"][0]["ipv4_addresses"] == ["192.168.7.5"]


def test_down_frontend_rdma_nic_is_not_active(tmp_path):
    root = render(tmp_path, with_down_frontend_rdma_nic(), nic_naming="mlx5")
    facts = _rdma.collect_rdma(str(root))
    names = [d["name"] for d in facts["devices"]]
    assert names == [f"mlx5_{i}" for i in range(9)]
    assert facts["devices"][0]["pci_address"] == "0000:0c:00.0"
    assert facts["devices"][0]["active"] is False
    assert facts["devices"][0]["ports"][0]["state"] == "DOWN"
    assert facts["devices"][0]["ports"][0]["phys_state"] == "Disabled"
    assert facts["active_devices"] == [f"mlx5_{i}" for i in range(1, 9)]
    assert facts["recommended_gid_index"] == 3


def test_h100_infiniband(tree):
    facts = _rdma.collect_rdma(str(tree("h100_ib", node_index=1)))
    assert facts["transport"] == "infiniband"
    assert facts["recommended_gid_index"] is None
    assert facts["hca_prefix"] == "mlx5"
    assert facts["active_devices"] == [f"mlx5_{i}" for i in range(8)]
    ib = facts["devices"][2]["ports"][0]
    assert ib["link_layer"] == "InfiniBand" and ib["lid"] == 1 + 64 + 2 and ib["sm_lid"] == 1
    assert ib["rate_gbps"] == 400
    assert ib["gids"][0]["type"] == "IB/RoCE v1" and ib["gids"][0]["link_local"] is True
    assert ib["gids"][0]["ndev"] is None and ib["roce_v2_ipv4_gid_index"] is None
    front = facts["devices"][8]
    assert front["name"] == "mlx5_8" and front["active"] is False and front["netdevs"] == ["enp226s0np0"]
    assert front["ports"][0]["rate_gbps"] == 100


def test_no_rdma_devices(tmp_path, tree):
    empty = {"devices": [], "active_devices": [], "hca_prefix": None, "transport": "none",
             "recommended_gid_index": None, "skipped": [], "warnings": []}
    assert _rdma.collect_rdma(str(tree("h200_nvlink"))) == empty
    (tmp_path / "bare").mkdir()
    assert _rdma.collect_rdma(str(tmp_path / "bare")) == empty


def test_aws_p5en_h200_devices(tree):
    """An AWS p5en node: 16 EFA devices (driver efa, link layer Unknown) named rdmap<bus>s<slot>, transport efa."""
    facts = _rdma.collect_rdma(str(tree("aws_p5en_h200")))
    assert len(facts["devices"]) == 16 and len(facts["active_devices"]) == 16
    assert facts["transport"] == "efa"
    assert facts["hca_prefix"] == "rdmap"
    assert facts["recommended_gid_index"] is None
    assert facts["skipped"] == [] and facts["warnings"] == []
    assert all(d["driver"] == "efa" for d in facts["devices"])
    assert all(d["naming"] == "rdmap" for d in facts["devices"])
    assert [d["name"] for d in facts["devices"]][:4] == ["rdmap20s0", "rdmap21s0", "rdmap36s0", "rdmap37s0"]
    dev = facts["devices"][0]
    assert dev["pci_address"] == "0000:14:00.0" and dev["numa_node"] == 0 and dev["netdevs"] == []
    assert dev["hca_type"] == "" and dev["node_type"] == "7: unspecified"
    assert dev["pci_path"] == ["pci0000:10", "0000:10:00.0", "0000:11:00.0", "0000:12:01.0", "0000:14:00.0"]
    port = dev["ports"][0]
    assert port["link_layer"] == "Unknown" and port["active"] is True
    assert port["rate"] == "200 Gb/sec (4X HDR)" and port["rate_gbps"] == 200
    assert port["lid"] is None and port["sm_lid"] is None
    assert len(port["gids"]) == 1
    gid = port["gids"][0]
    assert gid["index"] == 0 and gid["link_local"] is True and gid["type"] is None and gid["ndev"] is None
    assert port["roce_v2_ipv4_gid_index"] is None and port["ipv4_addresses"] == []
    assert len({d["ports"][0]["gids"][0]["gid"] for d in facts["devices"]}) == 16


@pytest.mark.parametrize("profile, transport, driver", [
    ("gcp_b200", "roce", "mlx5_core"), ("h100_ib", "infiniband", "mlx5_core"), ("a100_roce", "roce", "mlx5_core"),
    ("b300_cx8", "infiniband", "mlx5_core"), ("h200_nvlink", "none", None)])
def test_the_other_profiles_keep_their_transport(tree, profile, transport, driver):
    facts = _rdma.collect_rdma(str(tree(profile)))
    assert facts["transport"] == transport
    assert {d["driver"] for d in facts["devices"]} == ({driver} if driver else set())


def test_efa_transport_needs_active_efa_ports(tmp_path):
    """Only ACTIVE ports count; with every EFA port DOWN there is no transport. One ACTIVE EFA port still is efa."""
    prof = fakehw.load_profile("aws_p5en_h200")
    down = {nic["id"]: "DOWN" for nic in prof["nics"] if nic["rdma"]}
    facts = _rdma.collect_rdma(str(render(tmp_path, prof, port_states=down)))
    assert facts["transport"] == "none" and facts["active_devices"] == [] and facts["hca_prefix"] is None
    del down["efa5"]
    facts = _rdma.collect_rdma(str(render(tmp_path, prof, name="sys2", port_states=down)))
    assert facts["transport"] == "efa" and facts["active_devices"] == ["rdmap53s0"]


def test_an_unknown_link_layer_without_the_efa_driver_is_not_efa(tmp_path):
    """The efa transport needs both the efa driver and the Unknown link layer: without a bound driver the ports count
    as neither InfiniBand nor Ethernet, and the transport is what it was before EFA was known."""
    root = render(tmp_path, "aws_p5en_h200")
    for dev in (root / "class" / "infiniband").iterdir():
        (dev / "device" / "driver").unlink()
    facts = _rdma.collect_rdma(str(root))
    assert all(d["driver"] is None for d in facts["devices"])
    assert facts["transport"] == "infiniband"


def test_module_reports_efa(module_runner, tree):
    result = module_runner(rdma_devices, {"sysfs_root": str(tree("aws_p5en_h200"))})
    assert not result.failed, result.get("msg")
    facts = result["ansible_facts"]["gpufleet_rdma"]
    assert facts["transport"] == "efa" and facts["hca_prefix"] == "rdmap"
    assert facts["devices"][0]["driver"] == "efa"
    assert not result.get("warnings")


def test_gid_index_differs_between_ports_gives_none(tmp_path):
    root = render(tmp_path, nic_naming="mlx5")
    types = root / "class/infiniband/mlx5_5/ports/1/gid_attrs/types"
    (types / "3").write_text("IB/RoCE v1\n")
    facts = _rdma.collect_rdma(str(root))
    assert facts["devices"][5]["ports"][0]["roce_v2_ipv4_gid_index"] is None
    assert facts["recommended_gid_index"] is None


def test_gid_index_follows_the_table_layout(tmp_path):
    prof = copy.deepcopy(fakehw.load_profile("a100_roce"))
    prof["rdma"]["roce_gid_order"] = ["link_local_v1", "ipv4_v1", "link_local_v2", "ipv4_v2"]
    facts = _rdma.collect_rdma(str(render(tmp_path, prof)))
    assert facts["recommended_gid_index"] == 3
    prof["rdma"]["roce_gid_order"] = ["link_local_v2", "ipv4_v2", "link_local_v1", "ipv4_v1"]
    facts = _rdma.collect_rdma(str(render(tmp_path, prof, name="sys2")))
    assert facts["recommended_gid_index"] == 1
    assert facts["devices"][0]["ports"][0]["rate_gbps"] == 200


def test_mixed_names_have_no_common_prefix(tmp_path):
    root = render(tmp_path, nic_naming="mlx5")
    ib = root / "class" / "infiniband"
    target = (ib / "mlx5_0").readlink()
    (ib / "mlx5_0").unlink()
    (ib / "rocep145s0").symlink_to(target)
    facts = _rdma.collect_rdma(str(root))
    assert facts["hca_prefix"] is None
    assert "rocep145s0" in facts["active_devices"]


@pytest.mark.parametrize(
    "names, prefix",
    [
        (["mlx5_0", "mlx5_1"], "mlx5"),
        (["rocep145s0", "rocep206s0"], "rocep"),
        (["ibp24s0", "ibp41s0"], "ibp"),
        (["bnxt_re0", "bnxt_re1"], "bnxt_re"),
        (["irdma0"], "irdma"),
        (["rdmap16s27", "rdmap32s27"], "rdmap"),
        (["rdmap20s0"], "rdmap"),
        (["mlx5_0", "rocep145s0"], None),
        ([], None),
    ],
)
def test_hca_prefix(names, prefix):
    assert _rdma.hca_prefix(names) == prefix


def test_natural_order_and_parsers():
    assert sorted(["mlx5_10", "mlx5_2", "mlx5_1"], key=_rdma.natural_key) == ["mlx5_1", "mlx5_2", "mlx5_10"]
    assert _rdma.parse_state("4: ACTIVE") == (4, "ACTIVE")
    assert _rdma.parse_state("1: DOWN") == (1, "DOWN")
    assert _rdma.parse_state(None) == (None, None)
    assert _rdma.parse_rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert _rdma.parse_rate_gbps("200 Gb/sec (4X HDR)") == 200
    assert _rdma.parse_rate_gbps("garbage") is None
    assert _rdma.naming_scheme("mlx5_12") == "mlx5"
    assert _rdma.naming_scheme("roceP2p3s0f1") == "rocep"
    assert _rdma.naming_scheme("efa_0") == "other"
    assert _rdma.naming_scheme("rdmap16s27") == "rdmap"
    assert _rdma.naming_scheme("rdmaP1p16s27f1") == "rdmap"
    assert _rdma.naming_scheme("rdma0") == "other"


GIDS = [
    "0000:0000:0000:0000:0000:ffff:c0a8:0002",
    "0000:0000:0000:0000:0000:ffff:0a0a:070b",
    "fe80:0000:0000:0000:4001:c0ff:fe00:0002",
    "fe80:0000:0000:0000:a088:c203:0001:0002",
    "2001:0db8:0000:0000:0001:0000:0000:0001",
    "0000:0000:0000:0000:0000:0000:0000:0000",
    "not-a-gid",
    "",
]


@pytest.mark.parametrize("gid", GIDS)
def test_gid_info_same_with_and_without_netaddr(gid):
    pytest.importorskip("netaddr")
    assert _rdma.gid_info(gid, use_netaddr=True) == _rdma.gid_info(gid, use_netaddr=False)


def test_gid_info_values():
    assert _rdma.gid_info(GIDS[1], use_netaddr=False) == {"address": "::ffff:10.10.7.11", "ipv4": "10.10.7.11",
                                                          "link_local": False}
    assert _rdma.gid_info(GIDS[4], use_netaddr=False) == {"address": "2001:db8::1:0:0:1", "ipv4": None,
                                                          "link_local": False}
    assert _rdma.gid_info(GIDS[5]) is None and _rdma.gid_info("not-a-gid") is None


@pytest.mark.parametrize("profile, kwargs", [("gcp_b200", {}), ("h100_ib", {"node_index": 4}),
                                             ("a100_roce", {"node_index": 2})])
def test_whole_facts_same_with_and_without_netaddr(profile, kwargs, tree):
    pytest.importorskip("netaddr")
    root = str(tree(profile, **kwargs))
    assert _rdma.collect_rdma(root, use_netaddr=True) == _rdma.collect_rdma(root, use_netaddr=False)


def test_module_without_netaddr_gives_identical_facts(module_runner, monkeypatch, tree):
    """On a target without netaddr (its import fails) the module falls back to ipaddress, same facts."""
    pytest.importorskip("netaddr")
    root = str(tree(node_index=1))
    with_netaddr = module_runner(rdma_devices, {"sysfs_root": root})
    monkeypatch.setitem(sys.modules, "netaddr", None)
    try:
        assert importlib.reload(_rdma).HAS_NETADDR is False
        bare = module_runner(rdma_devices, {"sysfs_root": root})
    finally:
        monkeypatch.delitem(sys.modules, "netaddr")
        importlib.reload(_rdma)
    assert _rdma.HAS_NETADDR is True
    assert not bare.failed
    facts = bare["ansible_facts"]["gpufleet_rdma"]
    assert facts["devices"][0]["ports"][0]["gids"][3]["address"] == "::ffff:192.168.0.3"
    assert facts == with_netaddr["ansible_facts"]["gpufleet_rdma"]


def test_module_reports_facts_and_changes_nothing(module_runner, tree):
    root = tree(nic_naming="mlx5")
    before = sorted(str(p) for p in root.rglob("*"))
    for check in (False, True):
        result = module_runner(rdma_devices, {"sysfs_root": str(root)}, check_mode=check)
        assert not result.failed and result["changed"] is False
        facts = result["ansible_facts"]["gpufleet_rdma"]
        assert facts["hca_prefix"] == "mlx5" and facts["transport"] == "roce"
        assert facts["recommended_gid_index"] == 3
    assert sorted(str(p) for p in root.rglob("*")) == before


def test_module_without_devices(module_runner, tree):
    result = module_runner(rdma_devices, {"sysfs_root": str(tree("h200_nvlink"))})
    assert not result.failed
    assert result["ansible_facts"]["gpufleet_rdma"]["devices"] == []
    assert result["ansible_facts"]["gpufleet_rdma"]["transport"] == "none"


def test_module_bad_sysfs_root(tmp_path, module_runner):
    result = module_runner(rdma_devices, {"sysfs_root": str(tmp_path / "missing")})
    assert result.failed
    assert "missing' is not a directory" in result["msg"]


# ------------------------------------------------------------------- entries that are not devices, garbled rates


def _warnings(result):
    # ansible-core 2.19 returns warnings as structured summaries; older ones as strings
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


def _spoil_class_dir(root):
    """class/infiniband of a rendered gcp_b200 node (mlx5 names) plus every kind of entry that is not a device."""
    ib = root / "class" / "infiniband"
    (ib / "mlx5_dangling").symlink_to("../../devices/pci0000:ff/0000:ff:00.0/infiniband/mlx5_dangling")
    (ib / "mlx5_file").write_text("not a device\n")
    (ib / "loop_a").symlink_to("loop_b")
    (ib / "loop_b").symlink_to("loop_a")
    (ib / "mlx5_alias").symlink_to((ib / "mlx5_3").readlink())
    (ib / "mlx5_empty").mkdir()
    return ib


def test_entries_that_are_not_device_directories_are_skipped_and_named(tmp_path):
    root = render(tmp_path, nic_naming="mlx5")
    _spoil_class_dir(root)
    facts = _rdma.collect_rdma(str(root))
    assert [d["name"] for d in facts["devices"]] == [f"mlx5_{i}" for i in range(8)]
    assert facts["active_devices"] == [f"mlx5_{i}" for i in range(8)] and facts["hca_prefix"] == "mlx5"
    reasons = dict((e["name"], e["reason"]) for e in facts["skipped"])
    assert sorted(reasons) == ["loop_a", "loop_b", "mlx5_alias", "mlx5_dangling", "mlx5_empty", "mlx5_file"]
    assert reasons["mlx5_dangling"].startswith("a dangling symbolic link")
    assert "mlx5_dangling" in reasons["mlx5_dangling"]  # the target is named
    assert reasons["mlx5_file"].startswith("not a directory")
    assert reasons["loop_a"].startswith("a symbolic link loop") and reasons["loop_b"].startswith("a symbolic link loop")
    assert reasons["mlx5_alias"].startswith("the same device directory as mlx5_3")
    assert "without ports/" in reasons["mlx5_empty"]
    assert len(facts["warnings"]) == 6
    assert all(w.startswith("class/infiniband/") for w in facts["warnings"])


def test_one_device_under_two_names_is_listed_once_under_its_own_name(tmp_path):
    root = render(tmp_path, nic_naming="mlx5")
    ib = root / "class" / "infiniband"
    target = (ib / "mlx5_0").readlink()
    # "a_first" sorts before mlx5_0 but is not the directory's own name: mlx5_0 stays the device.
    (ib / "a_first").symlink_to(target)
    facts = _rdma.collect_rdma(str(root))
    assert [d["name"] for d in facts["devices"]] == [f"mlx5_{i}" for i in range(8)]
    assert facts["skipped"] == [{"name": "a_first",
                                 "reason": "the same device directory as mlx5_0 (%s)"
                                           % os.path.realpath(str(ib / "mlx5_0"))}]


@pytest.mark.parametrize("text", ["garbage", "9999999 Gb/sec (4X NDR)", "400 Gb/sec (4X NDR) 12", "400Gbps",
                                  "\xff\xfe\x00", "-5 Gb/sec", "400 Gb/sec 200 Gb/sec"])
def test_garbled_rate_is_unknown_with_a_warning(tmp_path, module_runner, text):
    root = render(tmp_path, nic_naming="mlx5")
    rate = root / "class/infiniband/mlx5_2/ports/1/rate"
    rate.write_bytes(text.encode("latin-1"))
    result = module_runner(rdma_devices, {"sysfs_root": str(root)})
    assert not result.failed, result.get("msg")
    facts = result["ansible_facts"]["gpufleet_rdma"]
    assert facts["devices"][2]["ports"][0]["rate_gbps"] is None
    assert facts["devices"][1]["ports"][0]["rate_gbps"] == 400
    warnings = _warnings(result)
    assert any("RDMA device mlx5_2 port 1: rate" in w and "reported as unknown" in w for w in warnings), warnings
    assert facts["warnings"] == [w for w in warnings if w.startswith("RDMA device")]
    # an unknown rate is no rate: the slow-rail check does not see a number read from garbage
    assert _rdma.active_rate(facts["devices"][2]) is None


def test_rate_parser_takes_only_the_kernel_form():
    assert _rdma.parse_rate_gbps("400 Gb/sec (4X NDR)") == 400
    assert _rdma.parse_rate_gbps("  14 Gb/sec (1X FDR)\n") == 14
    assert _rdma.parse_rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert _rdma.parse_rate_gbps("800 Gb/sec") == 800
    for bad in ("400 Gb/secXYZ", "400.0.0 Gb/sec", "1e3 Gb/sec", "400 Gb/sec (4X NDR) trailing", "", None,
                "%d Gb/sec" % (_rdma.RATE_MAX_GBPS + 1)):
        assert _rdma.parse_rate_gbps(bad) is None, bad


def test_module_warns_naming_each_skipped_entry(tmp_path, module_runner):
    root = render(tmp_path, nic_naming="mlx5")
    _spoil_class_dir(root)
    result = module_runner(rdma_devices, {"sysfs_root": str(root)})
    assert not result.failed, result.get("msg")
    facts = result["ansible_facts"]["gpufleet_rdma"]
    assert len(facts["devices"]) == 8
    warnings = _warnings(result)
    for name in ("mlx5_dangling", "mlx5_file", "loop_a", "loop_b", "mlx5_alias", "mlx5_empty"):
        assert any(w.startswith("class/infiniband/%s is not listed as an RDMA device: " % name) for w in warnings), \
            (name, warnings)
