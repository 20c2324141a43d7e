# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for tools/fleetsim/fakehw.py and tools/fleetsim/fake_nvidia_smi.py."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.fleetsim import fakehw

REPO = Path(__file__).resolve().parents[3]

CAPTURED = REPO / "tests" / "fixtures" / "captured" / "h200x2"
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def smi(hw_json: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLEETSIM_HW_JSON=str(hw_json), LC_ALL="C")
    return subprocess.run([SYSTEM_PYTHON, str(fakehw.FAKE_NVIDIA_SMI), *args], env=env, capture_output=True,
                          text=True, check=False)


# --------------------------------------------------------------------------- profiles


def test_list_profiles_has_the_node_types():
    assert {"gcp_b200", "h100_ib", "h200_nvlink", "a100_roce", "b300_cx8", "aws_p5en_h200"} <= set(fakehw.list_profiles())


@pytest.mark.parametrize("name", ["gcp_b200", "h100_ib", "h200_nvlink", "a100_roce", "b300_cx8", "aws_p5en_h200"])
def test_every_profile_loads_and_renders(name, tmp_path):
    prof = fakehw.load_profile(name)
    assert prof["name"] == name
    summary = fakehw.render_sysfs(prof, tmp_path / "sys")
    assert len(summary["gpus"]) == len(prof["gpus"])
    result = fakehw.render_nvidia_proc(prof, tmp_path / "proc")
    assert result["loaded"] is True and result["warnings"] == []
    assert prof["driver"]["version"] in read(tmp_path / "proc" / "version")


def test_profile_facts_match_the_issue():
    b200 = fakehw.load_profile("gcp_b200")
    assert b200["gpu_model"]["compute_capability"] == "10.0"
    assert b200["gpu_model"]["pci_device_id"] == 0x2901
    assert len(b200["gpus"]) == 8
    assert b200["rdma"]["naming"] == "rocep" and b200["rdma"]["doca_ofed_renames_to_mlx5"] is True
    assert b200["driver"]["version"].startswith("580.")
    h200 = fakehw.load_profile("h200_nvlink")
    assert [g["bdf"] for g in h200["gpus"]] == ["0000:00:06.0", "0000:00:07.0"]
    assert h200["nics"] == [] and h200["nvidia_peermem"]["loads"] is False
    assert fakehw.load_profile("h100_ib")["gpu_model"]["compute_capability"] == "9.0"
    assert fakehw.load_profile("a100_roce")["gpu_model"]["compute_capability"] == "8.0"


def test_the_b300_node_shows_sm103_and_connectx8_at_the_real_paths(tmp_path):
    """What the collection reads to tell a B300 + CX-8 node from a B200 one: the GPU's PCI id (0x3182, the B300 SXM6 AC
    of module_utils/_pci.py), the NIC's (0x1023, ConnectX-8) and its hca_type, XDR rate and InfiniBand link layer."""
    prof = fakehw.load_profile("b300_cx8")
    assert fakehw.gpu_family(prof) == "b300" and prof["gpu_model"]["compute_capability"] == "10.3"
    summary = fakehw.render_sysfs(prof, tmp_path / "sys")
    assert len(summary["gpus"]) == 8
    gpu = tmp_path / "sys" / "bus" / "pci" / "devices" / prof["gpus"][0]["bdf"]
    assert read(gpu / "device").strip() == "0x3182"
    rails = sorted(p.name for p in (tmp_path / "sys" / "class" / "infiniband").iterdir())
    assert rails[:8] == ["mlx5_%d" % i for i in range(8)]
    rail = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0"
    assert read(rail / "hca_type").strip() == "MT4131"
    assert read(rail / "device" / "device").strip() == "0x1023"
    assert read(rail / "ports" / "1" / "rate").strip() == "800 Gb/sec (4X XDR)"
    assert read(rail / "ports" / "1" / "link_layer").strip() == "InfiniBand"


def test_the_p5en_node_shows_efa_devices_at_the_real_paths(tmp_path):
    """What the collection reads on an AWS EFA node: the PCI function's Amazon ids (0x1d0f:0xefa2) bound to the efa
    driver, an RDMA device named rdmap<bus>s<slot> (decimal) whose port link layer is Unknown, no LID, one GID and
    no net device."""
    prof = fakehw.load_profile("aws_p5en_h200")
    assert fakehw.gpu_family(prof) == "h200" and fakehw.fabric(prof) == "efa"
    assert prof["rdma"]["naming"] == "rdmap" and prof["rdma"]["doca_ofed_renames_to_mlx5"] is False
    assert prof["nvidia_peermem"]["loads"] is True and prof["driver"]["version"] == "580.95.05"
    root = tmp_path / "sys"
    summary = fakehw.render_sysfs(prof, root)
    assert len(summary["gpus"]) == 8
    ib = root / "class" / "infiniband"
    names = sorted(p.name for p in ib.iterdir())
    assert len(names) == 16 and all(n.startswith("rdmap") for n in names)
    efa0 = [n for n in prof["nics"] if n["id"] == "efa0"][0]
    bus, slot = int(efa0["bdf"][5:7], 16), int(efa0["bdf"][8:10], 16)
    name = "rdmap%ds%d" % (bus, slot)
    assert efa0["bdf"] == "0000:14:00.0" and name == "rdmap20s0"
    dev = ib / name
    real = Path(os.path.realpath(dev))
    assert real.parent.name == "infiniband" and real.parent.parent.name == efa0["bdf"]
    pci = dev / "device"
    assert read(pci / "vendor") == "0x1d0f" and read(pci / "device") == "0xefa2"
    assert read(pci / "class") == "0x020000"
    assert os.path.basename(os.readlink(pci / "driver")) == "efa"
    assert os.path.realpath(root / "bus/pci/drivers/efa" / efa0["bdf"]) == os.path.realpath(pci)
    assert not (pci / "net").exists()
    assert read(dev / "node_type") == "7: unspecified" and read(dev / "hca_type") == ""
    port = dev / "ports" / "1"
    assert read(port / "link_layer") == "Unknown"
    assert read(port / "rate") == "200 Gb/sec (4X HDR)"
    assert read(port / "state") == "4: ACTIVE" and read(port / "phys_state") == "5: LinkUp"
    assert read(port / "lid") == "0x0"
    assert sorted(os.listdir(port / "gids")) == ["0"]
    assert read(port / "gids" / "0").startswith("fe80:0000:0000:0000:")
    assert os.listdir(port / "gid_attrs" / "types") == [] and os.listdir(port / "gid_attrs" / "ndevs") == []
    assert read(port / "counters" / "port_xmit_data") == "0"
    info = summary["rdma_devices"][name]
    assert info["netdev"] is None and info["link_layer"] == "Unknown" and info["mac"] is None
    # two EFA devices per GPU, under its PCIe switch
    assert fakehw.pcie_distance(prof, prof["gpus"][0]["bdf"], efa0["bdf"]) == "PIX"
    assert fakehw.pcie_distance(prof, prof["gpus"][0]["bdf"], "0000:15:00.0") == "PIX"
    # the ENA front end: a PCI function with a netdev, no RDMA device
    ena = root / "bus/pci/devices/0000:00:05.0"
    assert read(ena / "vendor") == "0x1d0f" and read(ena / "device") == "0xec20"
    assert os.path.basename(os.readlink(ena / "driver")) == "ena"
    assert read(ena / "net" / "ens32" / "mtu") == "9001" and not (ena / "infiniband").exists()
    lsmod = fakehw.render_lsmod(prof)
    assert any(line.split()[0] == "efa" for line in lsmod.splitlines()[1:]) and "mlx5" not in lsmod
    # GIDs and GUIDs differ per node
    fakehw.render_sysfs(prof, tmp_path / "b", node_index=1)
    assert read(tmp_path / "b/class/infiniband" / name / "ports/1/gids/0") != read(port / "gids" / "0")


def test_rdmap_names_take_bus_and_slot_in_decimal():
    """rdma-core's PCI name of an EFA device: an EFA function at 10:1b.0 (as on P4d) is rdmap16s27."""
    prof = copy.deepcopy(fakehw.load_profile("aws_p5en_h200"))
    for grp in prof["topology"]:
        if "efa1" in grp["devices"]:
            grp["devices"].remove("efa1")
    prof["nics"][1]["bdf"] = "0000:60:1b.0"
    prof["topology"].append({"host_bridge": "0000:60", "numa_node": 0, "devices": ["efa1"]})
    prof = fakehw.validate_profile(prof)
    names = fakehw.rdma_device_names(prof)
    assert names["efa0"] == "rdmap20s0" and names["efa1"] == "rdmap96s27"
    assert fakehw.rdma_device_names(prof, "rdmap") == names == fakehw.rdma_device_names(prof, "rocep")
    # the same naming gives RoCE and InfiniBand ports their own prefixes
    assert fakehw.rdma_device_names(fakehw.load_profile("gcp_b200"), "rdmap")["nic0"] == "rocep145s0"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["nics"][0].update(link_layer="Unknown"),
         r"nics\[0\]\.link_layer: 'Unknown' is the link layer of an EFA port only, not of driver 'mlx5_core' "
         r"\(expected Ethernet or InfiniBand, or driver: efa with link_layer: Unknown\)"),
        (lambda p: p["nics"][0].update(link_layer="Unknown", driver="ena"),
         r"nics\[0\]\.link_layer: 'Unknown' is the link layer of an EFA port only, not of driver 'ena'"),
        (lambda p: p["nics"][0].update(link_layer="unknown"),
         r"nics\[0\]\.link_layer: 'unknown' is not a link layer \(expected Ethernet, InfiniBand, or Unknown with "
         r"driver efa\)"),
        (lambda p: p["nics"][0].update(driver="efa"),
         r"nics\[0\]\.link_layer: 'Ethernet' is not the link layer of an EFA NIC \(expected Unknown with driver efa\)"),
    ],
)
def test_unknown_link_layer_only_with_the_efa_driver(edit, message):
    bad = copy.deepcopy(fakehw.load_profile("gcp_b200"))
    edit(bad)
    with pytest.raises(fakehw.ProfileError, match=message):
        fakehw.validate_profile(bad)


def test_the_loader_refuses_an_unknown_link_layer_without_the_efa_driver(tmp_path):
    text = (fakehw.PROFILES_DIR / "aws_p5en_h200.yml").read_text()
    assert text.count("  driver: efa\n") == 1
    path = tmp_path / "p5en_mlx5.yml"
    path.write_text(text.replace("  driver: efa\n", "  driver: mlx5_core\n"))
    with pytest.raises(fakehw.ProfileError, match=r"profile aws_p5en_h200: nics\[0\]\.link_layer: 'Unknown' is the link "
                                                  r"layer of an EFA port only, not of driver 'mlx5_core'"):
        fakehw.load_profile(str(path))


def test_an_efa_nic_has_no_netdev():
    bad = copy.deepcopy(fakehw.load_profile("aws_p5en_h200"))
    bad["nics"][3]["netdev"] = "eth3"
    with pytest.raises(fakehw.ProfileError, match=r"nics\[3\]\.netdev: 'eth3': an EFA NIC has no network interface"):
        fakehw.validate_profile(bad)


def test_unknown_profile_names_the_choices():
    with pytest.raises(fakehw.ProfileError, match=r"'nope' not found.*gcp_b200"):
        fakehw.load_profile("nope")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["gpus"][0].update(bdf="8f:0.0"), r"gpus\[0\]\.bdf: '8f:0\.0' is not a PCI address"),
        (lambda p: p["gpu_model"].update(compute_capability="ten"), r"compute_capability: 'ten'"),
        (lambda p: p["topology"][1]["devices"].remove("gpu0"), r"not placed in the PCI tree: gpu0"),
        (lambda p: p["topology"][1]["devices"].append("gpu2"), r"'gpu2' is placed twice"),
        (lambda p: p["topology"][1]["devices"].append("ghost"), r"'ghost' is not the id of a gpu"),
        (lambda p: p["nics"][0].update(state="UPISH"), r"nics\[0\]\.state: 'UPISH' is not a port state"),
        (lambda p: p["nics"][0].update(link_layer="Ether"), r"'Ether' is not a link layer"),
        (lambda p: p["nics"][0].pop("netdev"), r"nics\[0\]\.netdev: an Ethernet NIC needs a netdev"),
        (lambda p: p["rdma"].update(naming="eth"), r"rdma\.naming: 'eth' is not a naming scheme \(expected rocep, rdmap"),
        (lambda p: p["topology"][1].update(numa_node=7), r"topology\[1\]\.numa_node: 7 is not a NUMA node"),
        (lambda p: p["driver"].update(version="latest"), r"driver\.version: 'latest'"),
    ],
)
def test_bad_profiles_name_the_key_and_expected_form(edit, message):
    prof = fakehw.load_profile("gcp_b200")
    bad = copy.deepcopy(prof)
    edit(bad)
    with pytest.raises(fakehw.ProfileError, match=message):
        fakehw.validate_profile(bad)


def test_profile_from_path_and_bad_yaml(tmp_path):
    good = tmp_path / "mine.yml"
    good.write_text((fakehw.PROFILES_DIR / "h200_nvlink.yml").read_text().replace("name: h200_nvlink", "name: mine"))
    assert fakehw.load_profile(str(good))["name"] == "mine"
    bad = tmp_path / "bad.yml"
    bad.write_text("schema: [1\n")
    with pytest.raises(fakehw.ProfileError, match="not valid YAML"):
        fakehw.load_profile(str(bad))


# --------------------------------------------------------------------------- sysfs


def test_gcp_b200_sysfs_tree(tmp_path):
    root = tmp_path / "sys"
    summary = fakehw.render_sysfs(fakehw.load_profile("gcp_b200"), root, node_index=1)
    ib = root / "class" / "infiniband"
    names = sorted(p.name for p in ib.iterdir())
    assert names == ["rocep145s0", "rocep146s0", "rocep152s0", "rocep153s0",
                     "rocep198s0", "rocep199s0", "rocep205s0", "rocep206s0"]
    dev = ib / "rocep145s0"
    # relative links that resolve inside the tree
    assert not os.path.isabs(os.readlink(dev))
    real = Path(os.path.realpath(dev))
    assert real == (root / "devices/pci0000:8c/0000:8c:00.0/0000:8d:00.0/0000:8e:02.0/0000:91:00.0"
                    / "infiniband/rocep145s0")
    pci = dev / "device"
    assert read(pci / "vendor") == "0x15b3" and read(pci / "device") == "0x1021"
    assert read(pci / "class") == "0x020000" and read(pci / "numa_node") == "0"
    assert os.path.realpath(root / "bus/pci/devices/0000:91:00.0") == os.path.realpath(pci)
    assert os.path.basename(os.readlink(pci / "driver")) == "mlx5_core"
    port = dev / "ports" / "1"
    assert read(port / "state") == "4: ACTIVE"
    assert read(port / "phys_state") == "5: LinkUp"
    assert read(port / "link_layer") == "Ethernet"
    assert read(port / "rate") == "400 Gb/sec (4X NDR)"
    gids = [read(port / "gids" / str(i)) for i in range(4)]
    assert gids[0] == gids[1] and gids[0].startswith("fe80:0000:0000:0000:")
    assert gids[2] == gids[3] == "0000:0000:0000:0000:0000:ffff:c0a8:0003"  # 192.168.0.3 on node 1
    types = [read(port / "gid_attrs" / "types" / str(i)) for i in range(4)]
    assert types == ["IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"]
    assert read(port / "gid_attrs" / "ndevs" / "3") == "gpu0rdma0"
    assert read(pci / "net" / "gpu0rdma0" / "operstate") == "up"
    assert read(port / "counters" / "port_xmit_data") == "0"
    gpu = root / "bus/pci/devices/0000:8f:00.0"
    assert read(gpu / "vendor") == "0x10de" and read(gpu / "device") == "0x2901"
    assert read(gpu / "class") == "0x030200"
    assert read(gpu / "subsystem_vendor") == "0x10de"
    assert summary["rdma_devices"]["rocep145s0"]["port_dir"].endswith("infiniband/rocep145s0/ports/1")
    # the front-end gVNIC is a PCI device but no RDMA device
    assert read(root / "bus/pci/devices/0000:00:04.0/vendor") == "0x1ae0"


def test_nodes_differ_by_node_index(tmp_path):
    prof = fakehw.load_profile("gcp_b200")
    fakehw.render_sysfs(prof, tmp_path / "a", node_index=0)
    fakehw.render_sysfs(prof, tmp_path / "b", node_index=1)
    gid = "class/infiniband/rocep145s0/ports/1/gids/3"
    guid = "class/infiniband/rocep145s0/node_guid"
    assert read(tmp_path / "a" / gid) != read(tmp_path / "b" / gid)
    assert read(tmp_path / "a" / guid) != read(tmp_path / "b" / guid)
    assert read(tmp_path / "a" / gid).endswith("c0a8:0002")


def test_doca_rename_and_port_states(tmp_path):
    prof = fakehw.load_profile("gcp_b200")
    root = tmp_path / "sys"
    fakehw.render_sysfs(prof, root, nic_naming="mlx5", port_states={"rocep146s0": "DOWN", "nic7": "1: DOWN"})
    names = sorted(p.name for p in (root / "class" / "infiniband").iterdir())
    assert names == [f"mlx5_{i}" for i in range(8)]
    assert read(root / "class/infiniband/mlx5_0/device/uevent").count("PCI_SLOT_NAME=0000:91:00.0") == 1
    assert read(root / "class/infiniband/mlx5_1/ports/1/state") == "1: DOWN"
    assert read(root / "class/infiniband/mlx5_1/ports/1/phys_state") == "3: Disabled"
    assert read(root / "class/infiniband/mlx5_7/ports/1/state") == "1: DOWN"
    assert read(root / "class/infiniband/mlx5_0/ports/1/state") == "4: ACTIVE"
    # rendering again (the next boot, back to inbox names) leaves no stale device behind
    fakehw.render_sysfs(prof, root, nic_naming="rocep")
    assert sorted(p.name for p in (root / "class" / "infiniband").iterdir())[0] == "rocep145s0"
    assert len(list((root / "class" / "infiniband").iterdir())) == 8
    assert [p.name for p in (root / "bus/pci/devices/0000:91:00.0/infiniband").iterdir()] == ["rocep145s0"]
    with pytest.raises(fakehw.ProfileError, match="'mlx5_9' is not a NIC"):
        fakehw.render_sysfs(prof, tmp_path / "x", port_states={"mlx5_9": "DOWN"})
    with pytest.raises(fakehw.ProfileError, match="nic_naming 'ib'"):
        fakehw.render_sysfs(prof, tmp_path / "y", nic_naming="ib")


def test_h100_infiniband_ports(tmp_path):
    root = tmp_path / "sys"
    fakehw.render_sysfs(fakehw.load_profile("h100_ib"), root, node_index=2)
    port = root / "class/infiniband/mlx5_3/ports/1"
    assert read(port / "link_layer") == "InfiniBand"
    assert read(port / "lid") == hex(1 + 2 * 64 + 3)
    assert read(port / "gids/0").startswith("fe80:0000:0000:0000:a088:c203")
    assert read(root / "class/infiniband/mlx5_3/device/class") == "0x020700"
    assert read(root / "class/infiniband/mlx5_8/ports/1/state") == "1: DOWN"
    assert read(root / "class/infiniband/mlx5_8/ports/1/link_layer") == "Ethernet"
    assert read(root / "bus/pci/devices/0000:08:00.0/class") == "0x068000"


def test_h200_has_no_rdma_devices(tmp_path):
    root = tmp_path / "sys"
    fakehw.render_sysfs(fakehw.load_profile("h200_nvlink"), root)
    assert list((root / "class" / "infiniband").iterdir()) == []
    assert os.readlink(root / "bus/pci/devices/0000:00:06.0") == "../../../devices/pci0000:00/0000:00:06.0"


def test_pcie_distance_from_profile():
    prof = fakehw.load_profile("gcp_b200")
    assert fakehw.pcie_distance(prof, "0000:8f:00.0", "0000:92:00.0") == "PIX"
    assert fakehw.pcie_distance(prof, "0000:8f:00.0", "0000:98:00.0") == "NODE"
    assert fakehw.pcie_distance(prof, "0000:8f:00.0", "0000:c6:00.0") == "SYS"
    assert fakehw.pcie_distance(prof, "0000:8f:00.0", "0000:00:04.0") == "NODE"
    h200 = fakehw.load_profile("h200_nvlink")
    assert fakehw.pcie_distance(h200, "0000:00:06.0", "0000:00:07.0") == "PHB"


# --------------------------------------------------------------------------- /proc/driver/nvidia


def test_h200_proc_files_match_the_capture(tmp_path):
    result = fakehw.render_nvidia_proc(fakehw.load_profile("h200_nvlink"), tmp_path)
    assert (tmp_path / "params").read_text() == (CAPTURED / "proc_driver_nvidia_params").read_text()
    assert (tmp_path / "version").read_text() == (CAPTURED / "proc_driver_nvidia_version").read_text()
    assert result["params"]["RegistryDwords"] == '""'


@pytest.mark.parametrize(
    "options, stream, dwords",
    [
        ({"NVreg_EnableStreamMemOPs": 1, "NVreg_RegistryDwords": "PeerMappingOverride=1;"}, "1",
         '"PeerMappingOverride=1;"'),
        (["NVreg_RegistryDwords=PeerMappingOverride=0x1"], "0", '"PeerMappingOverride=0x1"'),
        ([("NVreg_EnableStreamMemOPs", "0x1"), ("NVreg_RegistryDwords", '"A=1;B=2"')], "1", '"A=1;B=2"'),
        ('NVreg_EnableStreamMemOPs=1 NVreg_EnableStreamMemOPs=0', "0", '""'),
    ],
)
def test_nvidia_options_applied_as_the_driver_reads_them(tmp_path, options, stream, dwords):
    result = fakehw.render_nvidia_proc(fakehw.load_profile("gcp_b200"), tmp_path, nvidia_options=options)
    text = (tmp_path / "params").read_text()
    assert f"EnableStreamMemOPs: {stream}\n" in text
    assert f"RegistryDwords: {dwords}\n" in text
    assert result["warnings"] == []


def test_unknown_and_invalid_nvidia_options(tmp_path):
    prof = fakehw.load_profile("gcp_b200")
    result = fakehw.render_nvidia_proc(prof, tmp_path, nvidia_options=["NVreg_PeerMappingOverride=1", "Foo=1"])
    assert result["loaded"] is True
    assert result["warnings"] == ["nvidia: unknown parameter 'NVreg_PeerMappingOverride' ignored",
                                  "nvidia: unknown parameter 'Foo' ignored"]
    assert "PeerMappingOverride" not in (tmp_path / "params").read_text()
    bad = fakehw.render_nvidia_proc(prof, tmp_path, nvidia_options=["NVreg_EnableStreamMemOPs=yes"])
    assert bad["loaded"] is False
    assert bad["warnings"] == ["nvidia: `yes' invalid for parameter `NVreg_EnableStreamMemOPs'"]
    assert not (tmp_path / "params").exists()


def test_parse_modprobe_nvidia_options():
    texts = [
        "# comment\noptions nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords=\"PeerMappingOverride=1;\"\n",
        "options nvidia-drm modeset=1\noptions nvidia \\\n  NVreg_RegistryDwords=PeerMappingOverride=0x1\n",
        "options nvidia NVreg_PeerMappingOverride=1\n",
    ]
    assert fakehw.parse_modprobe_nvidia_options(texts) == [
        ("NVreg_EnableStreamMemOPs", "1"),
        ("NVreg_RegistryDwords", "PeerMappingOverride=1;"),
        ("NVreg_RegistryDwords", "PeerMappingOverride=0x1"),
        ("NVreg_PeerMappingOverride", "1"),
    ]


def test_lsmod_and_peermem():
    b200 = fakehw.load_profile("gcp_b200")
    text = fakehw.render_lsmod(b200)
    assert text.splitlines()[0].split() == ["Module", "Size", "Used", "by"]
    assert any(line.split()[0] == "nvidia_peermem" for line in text.splitlines()[1:])
    ib_core = [line for line in text.splitlines() if line.startswith("ib_core ")][0]
    assert ib_core.endswith("mlx5_ib,ib_uverbs,nvidia_peermem")
    h200 = fakehw.render_lsmod(fakehw.load_profile("h200_nvlink"))
    assert "nvidia_peermem" not in h200 and "mlx5_core" not in h200


# --------------------------------------------------------------------------- fake nvidia-smi


@pytest.fixture
def h200_json(tmp_path):
    path = tmp_path / "hardware.json"
    fakehw.write_hw_json(fakehw.load_profile("h200_nvlink"), path)
    return path


def test_smi_table_and_topo_match_the_capture(h200_json):
    table = smi(h200_json)
    assert table.returncode == 0
    assert table.stdout.splitlines()[1:] == (CAPTURED / "nvidia-smi.txt").read_text().splitlines()[1:]
    topo = smi(h200_json, "topo", "-m")
    assert topo.stdout == (CAPTURED / "nvidia-smi_topo_-m.txt").read_text()


def test_smi_query_gpu(h200_json):
    res = smi(h200_json, "--query-gpu=index,name,pci.bus_id,memory.total,compute_cap,driver_version",
              "--format=csv,noheader")
    assert res.returncode == 0
    assert res.stdout.splitlines() == [
        "0, NVIDIA H200, 00000000:00:06.0, 143771 MiB, 9.0, 580.159.04",
        "1, NVIDIA H200, 00000000:00:07.0, 143771 MiB, 9.0, 580.159.04",
    ]
    res = smi(h200_json, "--query-gpu=memory.total,power.limit", "--format=csv,nounits")
    assert res.stdout.splitlines() == ["memory.total, power.limit", "143771, 700.00", "143771, 700.00"]
    res = smi(h200_json, "--query-gpu", "index,pci.device_id", "--format", "csv", "-i", "1")
    assert res.stdout.splitlines() == ["index, pci.device_id", "1, 0x233510DE"]


def test_smi_errors(h200_json, tmp_path):
    res = smi(h200_json, "--query-gpu=index,bogus", "--format=csv")
    assert res.returncode == 2
    assert res.stdout.startswith('Field "bogus" is not a valid field to query.')
    assert smi(h200_json, "--frobnicate").returncode == 2
    gone = smi(tmp_path / "missing.json")
    assert gone.returncode == 9 and "couldn't communicate with the NVIDIA driver" in gone.stdout


def test_installed_fake_smi_runs_by_its_own_shebang(h200_json, tmp_path):
    tool = fakehw.install_fake_nvidia_smi(tmp_path / "bin" / "nvidia-smi", python=SYSTEM_PYTHON)
    assert tool.read_text().startswith(f"#!{SYSTEM_PYTHON}\n") and os.access(tool, os.X_OK)
    res = subprocess.run([str(tool), "--query-gpu=count", "--format=csv,noheader"], capture_output=True, text=True,
                         env=dict(os.environ, FLEETSIM_HW_JSON=str(h200_json)), check=False)
    assert res.returncode == 0 and res.stdout == "2\n2\n"


def test_smi_list_and_nvlink(h200_json):
    lines = smi(h200_json, "-L").stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("GPU 0: NVIDIA H200 (UUID: GPU-")
    nvl = smi(h200_json, "nvlink", "-s").stdout.splitlines()
    assert nvl[1] == "\t Link 0: 26.562 GB/s"
    assert sum(1 for line in nvl if "Link" in line) == 36


def test_smi_b200_topo_with_nics_after_doca(tmp_path):
    path = tmp_path / "hw.json"
    fakehw.write_hw_json(fakehw.load_profile("gcp_b200"), path, nic_naming="mlx5")
    out = smi(path, "topo", "-m").stdout.splitlines()
    header = out[0].split("\t")
    assert header[1:9] == [f"GPU{i}" for i in range(8)] and header[9:17] == [f"NIC{i}" for i in range(8)]
    gpu0 = out[1].split("\t")
    assert gpu0[2] == "NV18" and gpu0[9:13] == ["PIX", "PIX", "NODE", "NODE"] and gpu0[13] == "SYS"
    assert "  NIC0: mlx5_0" in out and "  NIC7: mlx5_7" in out
    res = smi(path, "--query-gpu=name,compute_cap,pci.bus_id", "--format=csv,noheader")
    assert res.stdout.splitlines()[0] == "NVIDIA B200, 10.0, 00000000:8F:00.0"


# --------------------------------------------------------------------------- the driver's libcuda


@pytest.mark.parametrize("name", ["gcp_b200", "h100_ib", "h200_nvlink", "a100_roce", "b300_cx8"])
def test_fake_libcuda_is_laid_out_as_a_driver_install_does(tmp_path, name):
    ctypes = pytest.importorskip("ctypes")
    prof = fakehw.load_profile(name)
    installed = fakehw.install_fake_libcuda(tmp_path / "root", prof, tmp_path / "cache")
    libdir = tmp_path / "root" / fakehw.multiarch_libdir()
    version = prof["driver"]["version"]
    assert sorted(Path(p).name for p in installed) == sorted(
        ["libcuda.so.%s" % version, "libcuda.so.1", "libcuda.so"])
    assert os.readlink(libdir / "libcuda.so.1") == "libcuda.so.%s" % version
    assert os.readlink(libdir / "libcuda.so") == "libcuda.so.1"
    elf = (libdir / ("libcuda.so.%s" % version)).read_bytes()
    assert elf[:4] == b"\x7fELF" and b"libcuda.so.1" in elf  # the soname a linker records
    lib = ctypes.CDLL(str(libdir / "libcuda.so.1"))
    got = ctypes.c_int()
    assert lib.cuInit(0) == 100  # CUDA_ERROR_NO_DEVICE: no GPU answers in the simulation
    assert lib.cuDriverGetVersion(ctypes.byref(got)) == 0
    assert got.value == fakehw.libcuda_driver_version(prof["driver"]["cuda_version"])


def test_fake_libcuda_without_the_dev_link_and_a_new_driver_replaces_the_old(tmp_path):
    prof = fakehw.load_profile("gcp_b200")
    root = tmp_path / "root"
    fakehw.install_fake_libcuda(root, prof, tmp_path / "cache")
    newer = copy.deepcopy(prof)
    newer["driver"]["version"] = "580.105.08"
    newer["driver"]["libcuda_dev_link"] = False
    fakehw.install_fake_libcuda(root, fakehw.validate_profile(newer), tmp_path / "cache")
    names = sorted(p.name for p in (root / fakehw.multiarch_libdir()).iterdir())
    assert names == ["libcuda.so.1", "libcuda.so.580.105.08"]  # the runbook's "cannot find -lcuda" node


@pytest.mark.parametrize("value, expected", [("13.0", 13000), ("12.9", 12090), ("11.8", 11080)])
def test_libcuda_driver_version(value, expected):
    assert fakehw.libcuda_driver_version(value) == expected


@pytest.mark.parametrize("bad", ["13", "13.0.1", "x"])
def test_libcuda_driver_version_refuses_bad_values(bad):
    with pytest.raises(fakehw.ProfileError, match="expected MAJOR.MINOR"):
        fakehw.libcuda_driver_version(bad)


def test_profile_refuses_a_non_boolean_libcuda_dev_link():
    prof = copy.deepcopy(fakehw.load_profile("gcp_b200"))
    prof["driver"]["libcuda_dev_link"] = "yes"
    with pytest.raises(fakehw.ProfileError, match="libcuda_dev_link"):
        fakehw.validate_profile(prof)
