# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The EFA platform on one simulated AWS p5en node (tools/fleetsim profile aws_p5en_h200: 8 x H200, 16 EFA devices)
of the example profile h200_p5en (inventories/fleetsim wires it), over SSH with site.yml:

- the preflight refuses DeepEP V1 across EFA nodes naming why (NVSHMEM's IBGDA is mlx5-only), and DeepEP V2 on an NCCL
  without EFA-GDA (older than 2.31.2), before anything is installed;
- the efa phase predicts its install in check mode and writes nothing, installs the EFA installer (the mirror's
  stand-in, checked against its sha256) where the facts fall short of the efa fabric's floors, and a rerun changes
  nothing;
- the env script exports the fabric's variables (NCCL_GIN_TYPE=5, NCCL_SYM_GIN_KERNELS_ENABLE=0, FI_PROVIDER=efa) and
  an ACTIVE EFA device as EP_NIC_NAME, and none of NVSHMEM's IBGDA variables.

DeepEP V2's run across EFA nodes (the profile converged whole on two nodes, verified and audited) is the Molecule
scenario efa's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fleetsim_helpers import REPO, env

GROUP = "p5en_cluster"
NODE = "p5en-cluster-1"


def site(inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ansible-playbook", "-i", str(inventory), "-i", str(REPO / "inventories" / "fleetsim"),
                           str(REPO / "playbooks" / "site.yml"), "-l", GROUP, *extra], cwd=REPO, env=env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=1200)


def changed(proc: subprocess.CompletedProcess) -> int:
    match = re.search(rf"^{NODE}\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", proc.stdout, re.MULTILINE)
    assert match, proc.stdout[-4000:]
    return int(match.group(1))


def test_an_efa_node_refuses_v1_installs_efa_once_and_exports_its_gin(make_fleet, tmp_path):
    fleet = make_fleet("efa")
    fleet.up("aws_p5en_h200", nodes=1, group=GROUP)
    inventory = fleet.inventory(tmp_path / "hosts.yml")

    # The fabric decides what runs across nodes, before anything is installed.
    v1 = site(inventory, "--tags", "preflight", "-e", "deepep_generation=v1")
    assert v1.returncode != 0
    told = " ".join(v1.stdout.split())
    assert "DeepEP V1 across nodes is refused on the fabric efa: DeepEP V1 runs across nodes over NVSHMEM" in told, told
    assert "IBGDA, which drives mlx5 NICs only (DeepEP #759" in told, told
    old = site(inventory, "--tags", "preflight", "-e", "nccl_version=2.30.7")
    assert old.returncode != 0
    assert "NCCL 2.30.7 has no GIN on the fabric efa (its GIN needs NCCL 2.31.2 or newer" in " ".join(old.stdout.split())
    assert fleet.ssh(NODE, "test -e /opt/amazon", check=False).returncode != 0

    # The efa phase: predicted, then installed from the checked tarball, then left alone.
    check = site(inventory, "--tags", "efa", "--check")
    assert check.returncode == 0 and changed(check) >= 1, check.stdout[-4000:]
    assert fleet.ssh(NODE, "test -e /opt/amazon", check=False).returncode != 0
    first = site(inventory, "--tags", "efa")
    assert first.returncode == 0 and changed(first) >= 1, first.stdout[-4000:]
    assert "installer: found None, expected >= 1.50.0" in first.stdout
    packages = fleet.ssh(NODE, "head -1 /opt/amazon/efa_installed_packages; /opt/amazon/efa/bin/fi_info -p efa").stdout
    assert packages.startswith("# EFA installer version: 1.50.0") and "provider: efa" in packages, packages
    again = site(inventory, "--tags", "efa")
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-4000:]

    # The env script follows the fabric.
    script = site(inventory, "--tags", "env_script")
    assert script.returncode == 0, script.stdout[-4000:]
    exports = dict(re.findall(r"^export ([A-Z_0-9]+)=(\S*)$", fleet.ssh(NODE, "cat /opt/deepep/unified-env.sh").stdout,
                              re.MULTILINE))
    assert (exports["NCCL_GIN_TYPE"], exports["NCCL_SYM_GIN_KERNELS_ENABLE"], exports["FI_PROVIDER"]) == ("5", "0", "efa")
    assert re.fullmatch(r"rdmap\d+s\d+", exports["EP_NIC_NAME"]), exports
    assert not [name for name in exports if name.startswith("NVSHMEM_IB") or name == "DEEP_EP_DEVICE_TO_HCA_MAPPING"]
