# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the infiniband scenario: playbooks/site.yml on the InfiniBand profile (h100_ib nodes, profile h100).

Expected values come from the fleetsim profile data (the hardware) and the h100 profile's variables, never
from what the converge reported.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import testinfra.utils.ansible_runner
import yaml

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

sys.path.insert(0, str(PROJECT / "molecule" / "shared"))
fakehw = importlib.import_module("tools.fleetsim.fakehw")
fleet_checks = importlib.import_module("fleet_checks")

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("h100_cluster")

ENV_SCRIPT = "/opt/deepep/unified-env.sh"
HARDWARE = fakehw.load_profile("h100_ib")
NAMES = fakehw.rdma_device_names(HARDWARE)  # {nic id: device name}, mlx5_* on this profile
PROFILE = yaml.safe_load((PROJECT / "inventories" / "example" / "group_vars" / "h100.yml").read_text())
NVSHMEM_DEFAULTS = yaml.safe_load((PROJECT / "roles" / "nvshmem" / "defaults" / "main.yml").read_text())
SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"


def rail_mapping() -> list[str]:
    """GPU i -> the RDMA NIC under the same PCIe switch, in GPU order (the front-end NIC sits on its own root port)."""
    gpu_index = {gpu["id"]: i for i, gpu in enumerate(HARDWARE["gpus"])}
    pairs = []
    for entry in HARDWARE["topology"]:
        gpus = [d for d in entry["devices"] if d in gpu_index]
        nics = [d for d in entry["devices"] if d in NAMES]
        if gpus and nics:
            pairs.append((gpu_index[gpus[0]], NAMES[nics[0]]))
    return [f"{gpu}:{name}:1" for gpu, name in sorted(pairs)]


def test_device_names_stay_mlx5(host):
    assert sorted(host.file("/sys/class/infiniband").listdir()) == sorted(NAMES.values())
    assert all(name.startswith("mlx5_") for name in NAMES.values())


def test_no_doca_ofed_for_the_mlx5dv_symbol_with_nvshmem_345(host):
    # The names were right already and the node's rdma-core lacks MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, but the
    # NVSHMEM the profile builds (the nvshmem role's default 3.4.5-0; the stamp says 3.4.5) defines it itself: no
    # DOCA-OFED, of either flavour, was installed for it, and neither preflight nor the audit call it a gap.
    assert "nvshmem_version" not in PROFILE and NVSHMEM_DEFAULTS["nvshmem_version"] == "3.4.5-0"
    assert PROFILE["doca_ofed_enabled"] is True and PROFILE["doca_ofed_flavor"] == "userspace"
    assert not host.package("doca-ofed-userspace").is_installed
    assert not host.package("doca-ofed").is_installed
    header = host.file("/usr/include/infiniband/mlx5_api.h")
    assert not header.exists or SYMBOL not in header.content_string
    stamp = json.loads(host.file("/opt/deepep/nvshmem/.gpufleet-build.json").content_string)
    assert stamp["version"].startswith("3.4.5")

    record = json.loads(host.file("/var/lib/gpufleet-molecule-mlx5dv.json").content_string)
    # preflight: a note naming the version rule, no failure, nothing left for DOCA-OFED to install
    assert record["preflight"]["mlx5dv_ok"] is True
    assert [f["id"] for f in record["preflight"]["findings"]] == ["PREFLIGHT_MLX5DV_NOT_NEEDED"]
    note = record["preflight"]["findings"][0]
    assert note["severity"] == "info"
    assert note["message"] == (
        "rdma-core: /usr/include/infiniband/mlx5_api.h lacks %s, not needed: NVSHMEM 3.4.5-0 (3.4.5 or newer) defines "
        "%s itself when infiniband/mlx5dv.h lacks it: it needs the header (libibverbs-dev), not the symbol. No "
        "DOCA-OFED for it." % (SYMBOL, SYMBOL))
    # the audit: the installed NVSHMEM's version decides, and RDMA_CORE_NO_MLX5DV stays quiet
    audit = record["audit"]
    assert audit["nvshmem_version"] == stamp["version"]
    assert audit["rdma_core"]["mlx5dv_ok"] is True and audit["rdma_core"]["doca_version"] is None
    assert audit["rdma_core"]["mlx5dv_rule"]["nvshmem_version"] == stamp["version"]
    assert audit["rdma_core"]["mlx5dv_rule"]["waived"] == [SYMBOL]
    assert audit["rdma_core"]["mlx5dv_rule"]["missing"] == []
    # libmlx5: the simulated node has none to read, so NVSHMEM_LIBMLX5_OLD cannot judge it (unknown, not old)
    assert audit["rdma_core"]["libmlx5"]["required"] == "MLX5_1.8"
    assert audit["rdma_core"]["libmlx5"]["required_ok"] in (True, None)
    assert audit["findings"] == []


def test_one_reboot_for_the_override(host):
    name = host.check_output("hostname").strip()
    ups = [e for e in fleet_checks.boot_log() if e["node"] == name and e["event"] == "up"]
    assert len(ups) == 2, ups  # the boot at create, and one reboot: PeerMappingOverride (no DOCA-OFED here)
    params = fleet_checks.live_params(host)
    assert params["RegistryDwords"].strip('"').rstrip(";").split(";") == ["PeerMappingOverride=1"]
    assert params["EnableStreamMemOPs"] == "1"


def test_cuda_and_torch(host):
    version = PROFILE["cuda_toolkit_version"]
    assert host.file("/usr/local/cuda").linked_to == f"/usr/local/cuda-{version}"
    assert f"release {version}" in host.check_output("/usr/local/cuda/bin/nvcc --version")
    torch = host.check_output("/usr/bin/python3 -c %s", "import importlib.metadata as m; print(m.version('torch'))")
    # The mirror's stand-in torch (molecule.yml), at the version of inventories/fleetsim/group_vars/fleetsim_h100.yml.
    assert torch.startswith("2.13.0")


def test_env_script_for_infiniband(host):
    env = fleet_checks.sourced_env(host, ENV_SCRIPT)
    assert env["NVSHMEM_HCA_PREFIX"] == "mlx5"
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda" and env["NVSHMEM_IB_ENABLE_IBGDA"] == "1"
    # InfiniBand has no RoCE GID to pick and no reason to turn CUDA VMM off.
    assert "NVSHMEM_IB_GID_INDEX" not in env
    assert "NVSHMEM_DISABLE_CUDA_VMM" not in env
    mapping = rail_mapping()
    assert len(mapping) == len(HARDWARE["gpus"])
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] == ",".join(mapping)
    frontend = [NAMES[n["id"]] for n in HARDWARE["nics"] if n.get("role") == "frontend" and n["id"] in NAMES]
    assert frontend and not any(f":{name}:" in env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] for name in frontend)
    assert env["NVSHMEM_ENABLE_NIC_PE_MAPPING"] == "1"
    assert env["EP_NIC_NAME"] == mapping[0].split(":")[1]


def test_stamped_converged(host):
    stamp = json.loads(host.file("/var/lib/gpufleet-site-converged.json").content_string)
    assert stamp["watch"]["/sys/class/infiniband"]["entries"] == sorted(f"{n}@" for n in NAMES.values())
    # No DOCA-OFED: nothing of it to watch (the rdma-core header needs none with NVSHMEM 3.4.5).
    assert not stamp["packages"].get("doca-ofed-userspace")
    assert not stamp["packages"].get("doca-ofed")
