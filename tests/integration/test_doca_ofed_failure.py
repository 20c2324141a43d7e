# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The doca_ofed role when DOCA-OFED's kernel drivers do not build for the node's kernel (runbook 000: DOCA 3.0.0
on kernel 6.14): the fixture package's configure step fails (knob /etc/fleetsim/doca-ofed-build-fails); the
role fails on that node naming the cause and the fix, and leaves the node as it was; without the fault, the same
play installs DOCA-OFED."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fleetsim_helpers import REPO, env

PLAYBOOK = Path(__file__).resolve().parent / "playbooks" / "doca_ofed.yml"
NODE = "gcp-b200-1"
KNOB = "/etc/fleetsim/doca-ofed-build-fails"
STATE = ("dpkg-query -W -f='${Package} ${Status}\\n' | sort; "
         "ls -1 /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/keyrings /etc/fleetsim 2>&1; true")


def playbook(inventory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["ansible-playbook", "-i", str(inventory), str(PLAYBOOK)], cwd=REPO, env=env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=900)


def test_doca_ofed_build_failure_names_cause_and_fix_and_leaves_the_node_as_it_was(make_fleet, tmp_path):
    fleet = make_fleet("doca")
    fleet.up("gcp_b200", nodes=1)
    inventory = fleet.inventory(tmp_path / "hosts.yml")
    fleet.ssh(NODE, f"echo 6.14.0-1017-gcp > {KNOB}")
    before = fleet.ssh(NODE, STATE).stdout

    failed = playbook(inventory)
    assert failed.returncode == 2, failed.stdout
    text = " ".join(failed.stdout.split())
    assert "DOCA-OFED 3.2.1 (doca-ofed) failed to install on kernel" in text
    assert "Bad return status for module build on kernel: 6.14.0-1017-gcp" in text  # apt's own words
    assert "DOCA-OFED 3.0.0 on kernel 6.14 (runbook 000)" in text
    assert "doca_ofed_version" in text and "doca_ofed_flavor: userspace" in text
    assert fleet.ssh(NODE, STATE).stdout == before  # no package, half-configured or not, no repository file
    assert "doca-ofed-installed" not in before

    # The fault gone, the same play installs DOCA-OFED (and asks for the reboot that renames the devices).
    fleet.ssh(NODE, f"rm {KNOB}")
    ok = playbook(inventory)
    assert ok.returncode == 0, ok.stdout
    status = fleet.ssh(NODE, "dpkg-query -W -f='${Status}' doca-ofed mft").stdout
    assert status.count("install ok installed") == 2, status
    assert fleet.ssh(NODE, "test -f /etc/fleetsim/doca-ofed-installed", check=False).returncode == 0
