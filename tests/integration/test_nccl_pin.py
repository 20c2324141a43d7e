# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl role over SSH on one simulated H200 node: NCCL pinned in a torch environment from the mirror's
fixture wheel and from the nccl-fixture source tree, a later install refused or undone, check mode writing
nothing, a rerun changing nothing (playbooks/nccl_pin.yml does the node-side checks)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fleetsim_helpers import REPO, env

PLAYBOOK = Path(__file__).resolve().parent / "playbooks" / "nccl_pin.yml"
NODE = "h200-nvlink-1"
LIB = "/opt/torch-src/.venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"


def playbook(inventory: Path, phase: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ansible-playbook", "-i", str(inventory), str(PLAYBOOK), "-e", f"nccl_it_phase={phase}",
                           *extra], cwd=REPO, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)


def recap(proc: subprocess.CompletedProcess) -> dict:
    match = re.search(rf"^{NODE}\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout,
                      re.MULTILINE)
    assert match, proc.stdout
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def test_nccl_pin_on_a_simulated_node(make_fleet, tmp_path):
    fleet = make_fleet("nccl")
    fleet.up("h200_nvlink", nodes=1)
    inventory = fleet.inventory(tmp_path / "hosts.yml")

    setup = playbook(inventory, "setup")
    assert setup.returncode == 0, setup.stdout

    # Check mode: the pins are predicted, nothing is written, nothing is built.
    lib_before = fleet.ssh(NODE, f"sha256sum {LIB}").stdout.split()[0]
    check = playbook(inventory, "check", "--check")
    assert check.returncode == 0, check.stdout
    assert recap(check)["changed"] >= 2, check.stdout
    after = fleet.ssh(NODE, f"sha256sum {LIB}; ls /opt/deepep/nccl /opt/torch/.venv/pip.conf "
                            "/opt/torch-src/.venv/gpufleet-constraints.txt 2>&1; "
                            "/opt/torch/.venv/bin/python -m pip list 2>/dev/null | grep nvidia-nccl", check=False).stdout
    assert after.split()[0] == lib_before
    assert after.count("No such file or directory") == 3, after
    assert re.search(r"nvidia-nccl-cu13\s+2\.28\.9", after), after

    converge = playbook(inventory, "converge")
    assert converge.returncode == 0, converge.stdout
    assert recap(converge)["failed"] == 0

    rerun = playbook(inventory, "rerun")
    assert rerun.returncode == 0, rerun.stdout
    assert recap(rerun)["changed"] == 0, rerun.stdout

    # What DeepEP V2 would build against: the torch environment's own nvidia/nccl, now 2.30.7.
    header = fleet.ssh(NODE, "grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "
                             "/opt/torch-src/.venv/lib/python3.11/site-packages/nvidia/nccl/include/nccl.h").stdout
    assert header.split() == ["#define", "NCCL_MAJOR", "2", "#define", "NCCL_MINOR", "30", "#define", "NCCL_PATCH", "7"]
