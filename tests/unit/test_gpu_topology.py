# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_pci.py and the gpu_topology module, on sysfs trees rendered by fakehw."""

from __future__ import annotations

import copy

import pytest

from tools.fleetsim import fakehw
from unit_helpers import render_sysfs_tree as render

from ansible_collections.gpufleet.deepep.plugins.module_utils import _pci
from ansible_collections.gpufleet.deepep.plugins.modules import gpu_topology


MLX5_MAPPING = "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1"


@pytest.fixture
def no_nvidia_smi(tmp_path, monkeypatch):
    """PATH without nvidia-smi (this machine has none; the fixture makes sure)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Install the fleetsim nvidia-smi in a bin directory on PATH; returns a function that points it at a profile."""
    bindir = tmp_path / "bin"
    smi = fakehw.install_fake_nvidia_smi(bindir / "nvidia-smi")
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")

    def use(profile, **kwargs):
        prof = fakehw.load_profile(profile) if isinstance(profile, str) else profile
        hw = tmp_path / f"hw-{prof['name']}.json"
        fakehw.write_hw_json(prof, hw, **kwargs)
        monkeypatch.setenv("FLEETSIM_HW_JSON", str(hw))
        return smi

    return use


def facts_of(result):
    assert not result.failed, result.get("msg")
    assert result["changed"] is False
    return result["ansible_facts"]["gpufleet_gpus"]


def mapping_of(module_runner, root, **args):
    return facts_of(module_runner(gpu_topology, {"sysfs_root": str(root), **args}))


# --------------------------------------------------------------------------- the module on rendered nodes


def test_gcp_b200_rocep_without_nvidia_smi(module_runner, no_nvidia_smi, tree):
    facts = mapping_of(module_runner, tree())
    assert facts["gpu_count"] == 8
    assert facts["deepep_hca_mapping"] == (
        "0:rocep145s0:1,1:rocep146s0:1,2:rocep152s0:1,3:rocep153s0:1,"
        "4:rocep198s0:1,5:rocep199s0:1,6:rocep205s0:1,7:rocep206s0:1")
    assert facts["cuda_arch_list"] == "10.0"
    assert facts["nvidia_smi"] == {"path": None, "used": False, "rc": None, "stdout": "", "stderr": "",
                                   "timed_out": False, "error": None}
    gpu0 = facts["gpus"][0]
    assert gpu0["pci_address"] == "0000:8f:00.0" and gpu0["numa_node"] == 0
    assert gpu0["name"] == "NVIDIA B200" and gpu0["compute_capability"] == "10.0"
    assert gpu0["pci_device_id"] == "0x2901" and gpu0["source"] == "sysfs"
    assert gpu0["memory_total_mib"] is None and gpu0["uuid"] is None and gpu0["nvlink"] is None
    assert [(n["name"], n["distance"]) for n in gpu0["nics"]] == [
        ("rocep145s0", "PIX"), ("rocep146s0", "PIX"), ("rocep152s0", "NODE"), ("rocep153s0", "NODE"),
        ("rocep198s0", "SYS"), ("rocep199s0", "SYS"), ("rocep205s0", "SYS"), ("rocep206s0", "SYS")]
    assert gpu0["hca"] == {"name": "rocep145s0", "port": 1, "pci_address": "0000:91:00.0", "distance": "PIX"}
    assert [g["hca"]["distance"] for g in facts["gpus"]] == ["PIX"] * 8
    gpu6 = facts["gpus"][6]
    assert [n["distance"] for n in gpu6["nics"]][:4] == ["PIX", "PIX", "NODE", "NODE"]
    assert gpu6["nics"][0]["name"] == "rocep205s0" and gpu6["nics"][2]["name"] == "rocep198s0"


def test_gcp_b200_mlx5_after_doca(module_runner, no_nvidia_smi, tree):
    facts = mapping_of(module_runner, tree(nic_naming="mlx5"))
    assert facts["deepep_hca_mapping"] == MLX5_MAPPING
    assert facts["hca_mapping"][:2] == [{"gpu": 0, "hca": "mlx5_0", "port": 1}, {"gpu": 1, "hca": "mlx5_1", "port": 1}]


def with_down_frontend_rdma_nic():
    prof = copy.deepcopy(fakehw.load_profile("gcp_b200"))
    prof["nics"].append({"id": "fe1", "bdf": "0000:0c:00.0", "role": "frontend", "netdev": "enp12s0np0",
                         "ipv4": "10.30.0.5/24", "state": "DOWN"})
    prof["topology"].append({"host_bridge": "0000:0b", "numa_node": 0, "root_port": "0000:0b:00.0",
                             "devices": ["fe1"]})
    return prof


def test_down_frontend_nic_is_never_chosen(tmp_path, module_runner, no_nvidia_smi):
    # The front end (0000:0c:00.0) is mlx5_0; the rails are mlx5_1 .. mlx5_8.
    facts = mapping_of(module_runner, render(tmp_path, with_down_frontend_rdma_nic(), nic_naming="mlx5"))
    assert facts["deepep_hca_mapping"] == ",".join(f"{i}:mlx5_{i + 1}:1" for i in range(8))
    front = [n for n in facts["gpus"][0]["nics"] if n["name"] == "mlx5_0"]
    assert front == [{"name": "mlx5_0", "port": 1, "pci_address": "0000:0c:00.0", "distance": "NODE",
                      "active": False}]


def test_down_frontend_nic_loses_even_when_it_would_win_on_address(tmp_path, module_runner, no_nvidia_smi):
    # Both PIX NICs of GPU0/GPU1 DOWN: the nearest ACTIVE ports are NODE, where the DOWN front end
    # (lowest address) would win if state were ignored. GPU0..3 share the two NICs of switch 2.
    root = render(tmp_path, with_down_frontend_rdma_nic(), nic_naming="mlx5",
                  port_states={"nic0": "DOWN", "nic1": "DOWN"})
    facts = mapping_of(module_runner, root)
    assert facts["deepep_hca_mapping"] == (
        "0:mlx5_3:1,1:mlx5_4:1,2:mlx5_3:1,3:mlx5_4:1,4:mlx5_5:1,5:mlx5_6:1,6:mlx5_7:1,7:mlx5_8:1")
    assert facts["gpus"][0]["hca"]["distance"] == "NODE"
    assert "mlx5_0" not in facts["deepep_hca_mapping"]


def test_h100_infiniband_node(module_runner, no_nvidia_smi, tree):
    facts = mapping_of(module_runner, tree("h100_ib"))
    assert facts["gpu_count"] == 8  # the four NVSwitch functions (NVIDIA, bridge class) are not GPUs
    assert facts["deepep_hca_mapping"] == MLX5_MAPPING
    assert facts["cuda_arch_list"] == "9.0"
    assert [g["pci_address"] for g in facts["gpus"]] == [
        "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
        "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    gpu3 = facts["gpus"][3]
    assert gpu3["name"] == "NVIDIA H100 80GB HBM3"
    assert [(n["name"], n["distance"]) for n in gpu3["nics"][:4]] == [
        ("mlx5_3", "PIX"), ("mlx5_0", "NODE"), ("mlx5_1", "NODE"), ("mlx5_2", "NODE")]
    assert gpu3["nics"][-1]["name"] == "mlx5_8" and gpu3["nics"][-1]["active"] is False


def test_a100_roce_node(module_runner, no_nvidia_smi, tree):
    facts = mapping_of(module_runner, tree("a100_roce"))
    assert facts["deepep_hca_mapping"] == MLX5_MAPPING
    assert facts["cuda_arch_list"] == "8.0"
    assert facts["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_b300_connectx8_node(module_runner, no_nvidia_smi, tree):
    """A B300 (PCI 0x3182) is arch 10.3, not the B200's 10.0, from the PCI id alone (no nvidia-smi); its ConnectX-8
    rails pair with the GPUs as CX-7 rails do (PIX, one per GPU), the DOWN front-end NIC last."""
    facts = mapping_of(module_runner, tree("b300_cx8"))
    assert facts["gpu_count"] == 8
    assert facts["cuda_arch_list"] == "10.3"
    assert facts["deepep_hca_mapping"] == MLX5_MAPPING
    gpu0 = facts["gpus"][0]
    assert gpu0["name"] == "NVIDIA B300 SXM6 AC" and gpu0["compute_capability"] == "10.3"
    assert (gpu0["nics"][0]["name"], gpu0["nics"][0]["distance"]) == ("mlx5_0", "PIX")
    assert gpu0["nics"][-1]["name"] == "mlx5_8" and gpu0["nics"][-1]["active"] is False


def test_aws_p5en_h200_node(module_runner, no_nvidia_smi, tree):
    """An AWS p5en node: each H200 has two EFA devices (rdmap<bus>s<slot>) under its PCIe switch; its nearest NIC is
    one of them (PIX), the lower PCI address first, so that every GPU gets an EFA device of its own."""
    prof = fakehw.load_profile("aws_p5en_h200")
    facts = mapping_of(module_runner, tree("aws_p5en_h200"))
    assert facts["gpu_count"] == 8
    assert facts["cuda_arch_list"] == "9.0"
    switch_of = {}
    for grp in prof["topology"]:
        for dev_id in grp["devices"]:
            switch_of[dev_id] = grp["host_bridge"]
    by_bdf = {d["bdf"]: d["id"] for d in prof["gpus"] + prof["nics"]}
    names = fakehw.rdma_device_names(prof)
    for gpu in facts["gpus"]:
        gpu_switch = switch_of[by_bdf[gpu["pci_address"]]]
        pix = [nic_id for nic_id, bridge in switch_of.items() if bridge == gpu_switch and nic_id.startswith("efa")]
        assert len(pix) == 2
        hca = gpu["hca"]
        assert hca["distance"] == "PIX" and hca["port"] == 1
        assert hca["name"].startswith("rdmap") and hca["name"] == names[by_bdf[hca["pci_address"]]]
        assert by_bdf[hca["pci_address"]] in pix
        assert [(n["name"], n["distance"]) for n in gpu["nics"][:2]] == sorted(
            (names[nic_id], "PIX") for nic_id in pix)
        assert all(n["distance"] != "PIX" for n in gpu["nics"][2:])
        assert len(gpu["nics"]) == 16
    assert len({g["hca"]["name"] for g in facts["gpus"]}) == 8
    assert facts["deepep_hca_mapping"] == (
        "0:rdmap20s0:1,1:rdmap36s0:1,2:rdmap52s0:1,3:rdmap68s0:1,"
        "4:rdmap148s0:1,5:rdmap164s0:1,6:rdmap180s0:1,7:rdmap196s0:1")
    gpu0 = facts["gpus"][0]
    assert gpu0["name"] == "NVIDIA H200" and gpu0["pci_address"] == "0000:13:00.0"
    assert gpu0["hca"] == {"name": "rdmap20s0", "port": 1, "pci_address": "0000:14:00.0", "distance": "PIX"}


def test_node_without_nics(module_runner, no_nvidia_smi, tree):
    facts = mapping_of(module_runner, tree("h200_nvlink"))
    assert facts["gpu_count"] == 2
    assert facts["deepep_hca_mapping"] == "" and facts["hca_mapping"] == []
    assert [g["pci_address"] for g in facts["gpus"]] == ["0000:00:06.0", "0000:00:07.0"]
    assert all(g["hca"] is None and g["nics"] == [] for g in facts["gpus"])
    assert facts["cuda_arch_list"] == "9.0"
    assert facts["gpus"][1]["pci_path"] == ["pci0000:00", "0000:00:07.0"]


def test_fewer_nics_than_gpus_share_round_robin(tmp_path, module_runner, no_nvidia_smi):
    prof = copy.deepcopy(fakehw.load_profile("gcp_b200"))
    keep = {"nic0", "nic2", "fe0"}
    prof["nics"] = [n for n in prof["nics"] if n["id"] in keep]
    for grp in prof["topology"]:
        grp["devices"] = [d for d in grp["devices"] if d.startswith("gpu") or d in keep]
    facts = mapping_of(module_runner, render(tmp_path, prof, nic_naming="mlx5"))
    # nic0 (mlx5_0) is PIX to GPU0/1, nic2 (mlx5_1) PIX to GPU2/3; GPU4..7 are SYS to both and alternate.
    assert facts["deepep_hca_mapping"] == (
        "0:mlx5_0:1,1:mlx5_0:1,2:mlx5_1:1,3:mlx5_1:1,4:mlx5_0:1,5:mlx5_1:1,6:mlx5_0:1,7:mlx5_1:1")
    assert [g["hca"]["distance"] for g in facts["gpus"]] == ["PIX"] * 4 + ["SYS"] * 4


def test_one_nic_for_eight_gpus(tmp_path, module_runner, no_nvidia_smi):
    facts = mapping_of(module_runner, render(tmp_path, nic_naming="mlx5", port_states={
        f"nic{i}": "DOWN" for i in range(1, 8)}))
    assert facts["deepep_hca_mapping"] == ",".join(f"{i}:mlx5_0:1" for i in range(8))


def test_gpu_detection_skips_audio_and_unknown_ids_have_no_arch(tmp_path, module_runner, no_nvidia_smi):
    prof = copy.deepcopy(fakehw.load_profile("h200_nvlink"))
    prof["other_devices"] = [{"id": "audio", "bdf": "0000:00:08.0", "vendor_id": 0x10DE, "pci_device_id": 0x22E8,
                              "class": 0x040300}]
    prof["topology"][0]["devices"].append("audio")
    facts = mapping_of(module_runner, render(tmp_path, prof))
    assert [g["pci_address"] for g in facts["gpus"]] == ["0000:00:06.0", "0000:00:07.0"]
    prof["gpu_model"]["pci_device_id"] = 0x9999
    facts = mapping_of(module_runner, render(tmp_path, prof, name="sys2"))
    assert facts["gpus"][0]["compute_capability"] is None and facts["gpus"][0]["name"] is None
    assert facts["cuda_arch_list"] == ""


def test_nvidia_smi_enriches(module_runner, fake_smi, tree):
    smi = fake_smi("h200_nvlink")
    for args in ({}, {"nvidia_smi": str(smi)}):
        facts = mapping_of(module_runner, tree("h200_nvlink"), **args)
        assert facts["nvidia_smi"]["path"] == str(smi) and facts["nvidia_smi"]["used"] is True
        assert facts["nvidia_smi"]["rc"] == 0
        assert facts["driver_version"] == "580.159.04"
        gpu = facts["gpus"][1]
        assert gpu["source"] == "nvidia-smi"
        assert gpu["name"] == "NVIDIA H200" and gpu["memory_total_mib"] == 143771
        assert gpu["compute_capability"] == "9.0" and gpu["uuid"].startswith("GPU-")
        assert gpu["nvlink"] == {"links": 18, "bandwidth_gbps": 478.116}
        assert facts["cuda_arch_list"] == "9.0"


def test_nvidia_smi_on_b200_keeps_the_sysfs_mapping(module_runner, fake_smi, tree):
    fake_smi("gcp_b200", nic_naming="mlx5")
    facts = mapping_of(module_runner, tree(nic_naming="mlx5"))
    assert facts["deepep_hca_mapping"] == MLX5_MAPPING
    assert facts["gpus"][7]["memory_total_mib"] == 183359
    assert facts["gpus"][7]["nvlink"]["links"] == 18


def test_nvidia_smi_failing_falls_back_to_sysfs(tmp_path, module_runner, fake_smi, monkeypatch, tree):
    smi = fake_smi("h200_nvlink")
    monkeypatch.setenv("FLEETSIM_HW_JSON", str(tmp_path / "no-driver.json"))
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")), "nvidia_smi": str(smi)})
    facts = facts_of(result)
    assert facts["nvidia_smi"]["rc"] == 9 and facts["nvidia_smi"]["used"] is False
    assert "couldn't communicate with the NVIDIA driver" in facts["nvidia_smi"]["stdout"]
    # ansible-core 2.19 returns warnings as structured summaries; older ones as strings
    warnings = [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]
    assert any("GPU facts come from sysfs alone" in w for w in warnings)
    assert facts["gpus"][0]["source"] == "sysfs" and facts["gpus"][0]["name"] == "NVIDIA H200"
    assert facts["cuda_arch_list"] == "9.0"


def test_missing_nvidia_smi_path_fails(tmp_path, module_runner, tree):
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")),
                                          "nvidia_smi": str(tmp_path / "nope")})
    assert result.failed
    assert "nope' is not an executable file" in result["msg"]


def test_bad_sysfs_root_fails(tmp_path, module_runner):
    result = module_runner(gpu_topology, {"sysfs_root": str(tmp_path / "missing")})
    assert result.failed and "is not a directory" in result["msg"]


def test_empty_tree_and_check_mode(tmp_path, module_runner, no_nvidia_smi, tree):
    (tmp_path / "bare").mkdir()
    facts = facts_of(module_runner(gpu_topology, {"sysfs_root": str(tmp_path / "bare")}, check_mode=True))
    assert facts["gpus"] == [] and facts["gpu_count"] == 0
    assert facts["deepep_hca_mapping"] == "" and facts["cuda_arch_list"] == ""
    root = tree()
    assert mapping_of(module_runner, root) == facts_of(
        module_runner(gpu_topology, {"sysfs_root": str(root)}, check_mode=True))


# --------------------------------------------------------------------------- pure logic


HB = "pci0000:8c"


@pytest.mark.parametrize(
    "a, b, numa, label",
    [
        ([HB, "0000:8c:00.0", "0000:8d:00.0", "0000:8e:00.0", "0000:8f:00.0"],
         [HB, "0000:8c:00.0", "0000:8d:00.0", "0000:8e:02.0", "0000:91:00.0"], (0, 0), "PIX"),
        ([HB, "0000:8c:00.0", "0000:8d:00.0"], [HB, "0000:8c:00.0", "0000:8e:00.0"], (0, 0), "PIX"),
        ([HB, "0000:8c:00.0", "0000:8d:00.0", "0000:8e:00.0", "0000:8f:00.0", "0000:90:00.0", "0000:91:00.0"],
         [HB, "0000:8c:00.0", "0000:8d:00.0", "0000:8e:02.0", "0000:95:00.0"], (0, 0), "PXB"),
        ([HB, "0000:8c:00.0", "0000:8d:00.0"], [HB, "0000:8c:01.0", "0000:9d:00.0"], (0, 0), "PHB"),
        (["pci0000:00", "0000:00:06.0"], ["pci0000:00", "0000:00:07.0"], (0, 0), "PHB"),
        ([HB, "0000:8c:00.0", "0000:8d:00.0"], ["pci0000:93", "0000:93:00.0"], (0, 0), "NODE"),
        ([HB, "0000:8c:00.0", "0000:8d:00.0"], ["pci0000:c1", "0000:c1:00.0"], (0, 1), "SYS"),
        ([HB, "0000:8c:00.0"], ["pci0000:c1", "0000:c1:00.0"], (-1, -1), "NODE"),
        ([HB, "0000:8c:00.0"], ["pci0000:c1", "0000:c1:00.0"], (-1, 0), "SYS"),
        (None, ["pci0000:c1", "0000:c1:00.0"], (0, 0), None),
    ],
)
def test_pcie_distance(a, b, numa, label):
    assert _pci.pcie_distance(a, b, *numa) == label


def test_real_pci_path_follows_links_and_finds_the_host_bridge(tmp_path):
    dev = tmp_path / "devices/LNXSYSTM:00/VMBUS:00/47505500-0001-0000-3130-444531303244/pci0001:00/0001:00:00.0"
    dev.mkdir(parents=True)
    link = tmp_path / "bus/pci/devices/0001:00:00.0"
    link.parent.mkdir(parents=True)
    link.symlink_to("../../../" + str(dev.relative_to(tmp_path)))
    assert _pci.real_pci_path(str(tmp_path), str(link)) == ["pci0001:00", "0001:00:00.0"]
    assert _pci.real_pci_path(str(tmp_path), str(tmp_path / "devices/LNXSYSTM:00")) is None
    assert _pci.real_pci_path(str(tmp_path), str(tmp_path.parent)) is None


def test_assign_nics_ties_by_address_then_round_robin():
    cands = [{"key": k, "name": k, "port": 1, "pci_address": addr}
             for k, addr in (("b", "0000:20:00.0"), ("a", "0000:10:00.0"), ("c", "0000:30:00.0"))]
    gpus = [{"index": i, "distances": {"a": "SYS", "b": "SYS", "c": "SYS"}} for i in range(5)]
    chosen = _pci.assign_nics(gpus, cands)
    assert [chosen[i]["name"] for i in range(5)] == ["a", "b", "c", "a", "b"]
    gpus[0]["distances"]["c"] = "PIX"
    chosen = _pci.assign_nics(gpus, cands)
    assert [chosen[i]["name"] for i in range(5)] == ["c", "a", "b", "a", "b"]
    assert _pci.assign_nics(gpus, []) == {i: None for i in range(5)}


def test_helpers():
    assert _pci.normalize_bdf("00000000:8F:00.0") == "0000:8f:00.0"
    assert _pci.normalize_bdf("8f:00.0") == "0000:8f:00.0"
    assert _pci.normalize_bdf("junk") is None and _pci.normalize_bdf(None) is None
    assert sorted(["0000:c4:00.0", "0000:10:00.0", "0001:00:00.0", "0000:8f:00.0"], key=_pci.bdf_sort_key) == [
        "0000:10:00.0", "0000:8f:00.0", "0000:c4:00.0", "0001:00:00.0"]
    assert _pci.cuda_arch_list(["10.0", "9.0", "8.0", "9.0", None, "x"]) == "8.0;9.0;10.0"
    assert _pci.is_gpu({"vendor_id": 0x10DE, "class": 0x030000})
    assert not _pci.is_gpu({"vendor_id": 0x10DE, "class": 0x040300})
    assert not _pci.is_gpu({"vendor_id": 0x10DE, "class": 0x068000})
    assert not _pci.is_gpu({"vendor_id": 0x1002, "class": 0x030200})
    rows = _pci.parse_nvidia_smi_query("0, 00000000:8F:00.0, NVIDIA B200, [N/A]\nbad line\n",
                                       ["index", "pci.bus_id", "name", "memory.total"])
    assert rows == [{"index": "0", "pci.bus_id": "00000000:8F:00.0", "name": "NVIDIA B200", "memory.total": None}]


def test_parse_nvlink_status_from_fake_tool(fake_smi):
    import subprocess

    smi = fake_smi("a100_roce")
    out = subprocess.run([str(smi), "nvlink", "-s"], capture_output=True, text=True, check=True).stdout
    status = _pci.parse_nvlink_status(out)
    assert sorted(status) == list(range(8))
    assert status[0] == {"links": 12, "bandwidth_gbps": 300.0}


# --------------------------------------------------------------------------- faults: a wedged tool, hardware never dropped


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_wedged_nvidia_smi_fails_within_its_bound(tmp_path, module_runner, tree):
    """A driver that hangs nvidia-smi: the module kills it at ``timeout`` and fails naming the command and the bound."""
    smi = _script(tmp_path / "nvidia-smi", "exec sleep 600\n")
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")), "nvidia_smi": str(smi),
                                          "timeout": 1})
    assert result.failed
    assert "did not answer the GPU query within timeout=1s and was killed" in result["msg"]
    assert str(smi) in result["msg"] and result["nvidia_smi"]["rc"] == 124


@pytest.mark.parametrize("timeout", [0, -5])
def test_timeout_must_be_positive(tmp_path, module_runner, tree, timeout):
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")), "timeout": timeout})
    assert result.failed and "timeout=%d: expected a positive number of seconds" % timeout in result["msg"]


def _break_class(root, bdf, text):
    (root / "bus" / "pci" / "devices" / bdf / "class").write_text(text)


def test_unreadable_gpu_is_a_warning_naming_it(tmp_path, module_runner, no_nvidia_smi):
    root = render(tmp_path, "gcp_b200")
    gpus = facts_of(module_runner(gpu_topology, {"sysfs_root": str(root)}))["gpus"]
    victim = gpus[3]["pci_address"]
    _break_class(root, victim, "\x00\xff garbage")
    result = module_runner(gpu_topology, {"sysfs_root": str(root)})
    facts = facts_of(result)
    assert facts["gpu_count"] == 7 and facts["unreadable"] == [victim]
    warnings = [str(w) for w in result["warnings"]]
    assert any(victim in w and "looks like an NVIDIA GPU but cannot be read" in w for w in warnings), warnings


def test_gpu_count_disagreeing_with_nvidia_smi_fails_instead_of_shifting(tmp_path, module_runner, fake_smi):
    root = render(tmp_path, "gcp_b200")
    smi = fake_smi("gcp_b200")
    victim = facts_of(module_runner(gpu_topology, {"sysfs_root": str(root), "nvidia_smi": str(smi)}))["gpus"][3]
    _break_class(root, victim["pci_address"], "")
    result = module_runner(gpu_topology, {"sysfs_root": str(root), "nvidia_smi": str(smi)})
    assert result.failed
    assert "nvidia-smi lists 8 GPUs but sysfs shows 7" in result["msg"]
    assert "only in nvidia-smi: %s" % victim["pci_address"] in result["msg"]
    assert "ansible_facts" not in result


# ------------------------------------------------------------------- a slow or wedged nvidia-smi: one bound in all


def _warnings(result):
    # ansible-core 2.19 returns warnings as structured summaries; older ones as strings
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


def _logging_smi(tmp_path, body):
    """A fake nvidia-smi that appends its arguments to calls.log, then runs ``body``."""
    log = tmp_path / "calls.log"
    smi = _script(tmp_path / "nvidia-smi", 'echo "$*" >> %s\n%s' % (log, body))
    return smi, log


def test_wedged_nvidia_smi_is_reported_timed_out_and_run_once(tmp_path, module_runner, tree):
    smi, log = _logging_smi(tmp_path, "exec sleep 600\n")
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")), "nvidia_smi": str(smi),
                                          "timeout": 1})
    assert result.failed
    info = result["nvidia_smi"]
    assert info["timed_out"] is True and info["used"] is False and info["rc"] == 124
    assert str(smi) in info["error"] and "timeout=1s" in info["error"] and "--query-gpu=" in info["error"]
    assert "timeout=1s" in result["msg"] and "raise timeout" in result["msg"]
    # killed once at its bound; neither the query nor the NVLink status ran again
    assert log.read_text().splitlines() == [" ".join(_pci.nvidia_smi_query_argv(str(smi))[1:])]


def test_nvidia_smi_answering_nothing_warns_and_is_not_asked_again(tmp_path, module_runner, tree):
    smi, log = _logging_smi(tmp_path, "exit 0\n")
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")), "nvidia_smi": str(smi)})
    facts = facts_of(result)
    info = facts["nvidia_smi"]
    assert info["used"] is False and info["rc"] == 0 and info["timed_out"] is False
    assert "with no GPU line" in info["error"] and str(smi) in info["error"]
    assert any("with no GPU line" in w and "GPU facts come from sysfs alone" in w for w in _warnings(result))
    assert len(log.read_text().splitlines()) == 1  # no nvlink -s after a query that gave nothing
    assert facts["gpus"][0]["source"] == "sysfs"


def test_slow_nvlink_status_gets_only_what_the_query_left(tmp_path, module_runner, fake_smi, tree):
    """The query answers; nvlink -s hangs: it is killed within the rest of the one bound, a warning says so."""
    real = fake_smi("h200_nvlink")
    smi, log = _logging_smi(tmp_path, 'if [ "$1" = nvlink ]; then exec sleep 600; fi\nexec %s "$@"\n' % real)
    result = module_runner(gpu_topology, {"sysfs_root": str(tree("h200_nvlink")), "nvidia_smi": str(smi),
                                          "timeout": 3})
    facts = facts_of(result)
    info = facts["nvidia_smi"]
    assert info["used"] is True and info["timed_out"] is False
    assert "nvlink -s did not answer within the" in info["error"] and "left of timeout=3s" in info["error"]
    assert any("NVLink facts left out" in w and "timeout=3s" in w for w in _warnings(result))
    assert facts["gpus"][0]["source"] == "nvidia-smi" and facts["gpus"][0]["nvlink"] is None
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["--query-gpu=" + ",".join(
        _pci.NVIDIA_SMI_QUERY_FIELDS), "nvlink"]


class _Clock(object):
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _fake_runner(clock, answers, took):
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv[1], timeout))
        clock.now += took.get(argv[1], 0)
        return answers[argv[1]]
    return runner, calls


ROW = "0, 00000000:18:00.0, NVIDIA H200, 143771, 9.0, GPU-1, 580.1\n"


def test_query_nvidia_smi_gives_nvlink_the_rest_of_the_bound():
    clock = _Clock()
    runner, calls = _fake_runner(clock, {"--query-gpu=" + ",".join(_pci.NVIDIA_SMI_QUERY_FIELDS): (0, ROW, ""),
                                         "nvlink": (0, "GPU 0: x\n\t Link 0: 26.562 GB/s\n", "")},
                                 {"--query-gpu=" + ",".join(_pci.NVIDIA_SMI_QUERY_FIELDS): 45})
    answer = _pci.query_nvidia_smi("/usr/bin/nvidia-smi", runner, 60, clock=clock)
    assert [c[1] for c in calls] == [60, 15]  # never 60 twice
    assert answer["info"]["used"] is True and answer["info"]["error"] is None and answer["warnings"] == []
    assert answer["nvlink"] == {0: {"links": 1, "bandwidth_gbps": 26.562}}


def test_query_nvidia_smi_skips_nvlink_when_the_bound_is_spent():
    clock = _Clock()
    query = "--query-gpu=" + ",".join(_pci.NVIDIA_SMI_QUERY_FIELDS)
    runner, calls = _fake_runner(clock, {query: (0, ROW, "")}, {query: 59.5})
    answer = _pci.query_nvidia_smi("/usr/bin/nvidia-smi", runner, 60, clock=clock)
    assert [c[0] for c in calls] == [query]
    assert answer["rows"] and answer["nvlink"] is None and answer["fatal"] is None
    assert "nvlink -s not run: the GPU query took 59.5s of timeout=60s" in answer["info"]["error"]
    assert answer["warnings"] == [answer["info"]["error"] + "; NVLink facts left out"]


def test_query_nvidia_smi_timed_out_is_fatal_and_named():
    clock = _Clock()
    query = "--query-gpu=" + ",".join(_pci.NVIDIA_SMI_QUERY_FIELDS)
    runner, calls = _fake_runner(clock, {query: (124, "", "\ntimed out after 45s")}, {query: 45})
    answer = _pci.query_nvidia_smi("/usr/bin/nvidia-smi", runner, 45, clock=clock)
    assert len(calls) == 1
    assert answer["info"]["timed_out"] is True and answer["info"]["used"] is False
    assert "did not answer the GPU query within timeout=45s" in answer["fatal"]
    assert "/usr/bin/nvidia-smi --query-gpu=" in answer["info"]["error"]


# --------------------------------------------------------------------------- NIC entries that are not devices


def test_dangling_and_looping_nic_entries_are_no_nics_and_warned(tmp_path, module_runner, no_nvidia_smi):
    root = render(tmp_path, "gcp_b200", nic_naming="mlx5")
    ib = root / "class" / "infiniband"
    (ib / "mlx5_8").symlink_to("../../devices/pci0000:ff/0000:ff:00.0/infiniband/mlx5_8")
    (ib / "mlx5_9").symlink_to("mlx5_10")
    (ib / "mlx5_10").symlink_to("mlx5_9")
    (ib / "mlx5_11").write_text("")
    result = module_runner(gpu_topology, {"sysfs_root": str(root)})
    facts = facts_of(result)
    assert facts["deepep_hca_mapping"] == MLX5_MAPPING
    assert sorted({n["name"] for n in facts["gpus"][0]["nics"]}) == sorted("mlx5_%d" % i for i in range(8))
    warnings = _warnings(result)
    for name in ("mlx5_8", "mlx5_9", "mlx5_10", "mlx5_11"):
        assert any(w.startswith("class/infiniband/%s is not listed" % name) for w in warnings), (name, warnings)


def test_node_stack_gpus_set_reports_a_timed_out_nvidia_smi_as_its_error(tmp_path, tree):
    """node_stack's gpufleet_gpus runs nvidia-smi as gpu_topology does: a timeout is the set's error, named."""
    from ansible_collections.gpufleet.deepep.plugins.module_utils._node import fact_sets
    from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma

    root = str(tree("h200_nvlink"))
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append(argv)
        return 124, "", "\ntimed out after %ss: %s" % (timeout, " ".join(argv))

    with pytest.raises(fact_sets.GatherError, match=r"did not answer the GPU query within timeout=7s"):
        fact_sets.gather_gpus(root, collect_rdma(root), "/x/nvidia-smi", runner, timeout=7)
    assert len(calls) == 1
