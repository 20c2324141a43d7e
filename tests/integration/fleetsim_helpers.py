# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the integration tests of the simulated fleet (need root, namespaces and overlayfs).

Imported by conftest.py and the test modules (a module name of its own, so that it never clashes with
another directory's conftest when several test directories run in one session).

Every test fleet gets a unique name (``it-<pid>-<tag>``); fleetsim picks a free subnet and bridge for it,
and the fixtures always tear it down (``down --purge``), whatever the test did.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
STATE_ROOT = Path(os.environ.get("FLEETSIM_STATE_DIR", "/srv/fleetsim"))
VENV_BIN = Path(sys.executable).parent


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network, PID and mount namespaces)"
    for tool in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen", "dpkg-deb", "dpkg-scanpackages"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/bootstrap.sh installs it)"
    if not os.path.exists("/usr/sbin/sshd"):
        return "openssh-server is not installed (scripts/bootstrap.sh installs it)"
    with open("/proc/filesystems", encoding="utf-8") as fh:
        if "overlay" not in fh.read():
            return "the kernel has no overlayfs"
    probe = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--uts", "true"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if probe.returncode != 0:
        return f"unshare does not work here: {probe.stdout.strip()}"
    return None


WHY_NOT = _why_not()


def env() -> dict:
    out = dict(os.environ)
    out["PATH"] = f"{VENV_BIN}:{out.get('PATH', '/usr/sbin:/usr/bin')}"
    out["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    out["ANSIBLE_COLLECTIONS_PATH"] = str(REPO / ".collections")
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    return out


class SimFleet:
    """A fleet made by a test, driven through the CLI."""

    def __init__(self, tag: str):
        self.name = f"it-{os.getpid() % 100000}-{tag}"
        self.dir = STATE_ROOT / self.name

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "tools.fleetsim", "--fleet", self.name, *args],
                              cwd=REPO, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"fleetsim {' '.join(args)}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def up(self, profile: str = "gcp_b200", nodes: int = 1, group: str | None = None) -> None:
        args = ["up", "--profile", profile, "--nodes", str(nodes)]
        if group:
            args += ["--group", group]
        self.cli(*args)

    def state(self) -> dict:
        return json.loads((self.dir / "state.json").read_text())

    def run(self, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a shell command inside ``node`` (through fleetsim exec)."""
        return self.cli("exec", node, "--", "sh", "-c", command, check=check)

    def ssh(self, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
        ip = self.state()["nodes"][node]["ip"]
        proc = subprocess.run(["ssh", "-i", str(self.dir / "id_ed25519"), "-o", "StrictHostKeyChecking=no",
                               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                               "-o", "ConnectTimeout=10", f"root@{ip}", command],
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"ssh {node} {command!r}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def boots(self, node: str | None = None, event: str = "up") -> list[dict]:
        path = self.dir / "boots.log"
        entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e for e in entries if e["event"] == event and (node is None or e["node"] == node)]

    def inventory(self, path: Path, reboot_timeout: int | None = None) -> Path:
        args = ["inventory", "--output", str(path)]
        if reboot_timeout is not None:
            args += ["--reboot-timeout", str(reboot_timeout)]
        self.cli(*args)
        return path

    def down(self) -> None:
        self.cli("down", "--purge", "--quiet", check=False)
