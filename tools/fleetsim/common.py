# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths, names and small helpers shared by the fleetsim CLI, the node supervisor and the node init."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
NODE_TOOLS = HERE / "node"

DEFAULT_STATE_DIR = "/srv/fleetsim"
DEFAULT_FLEET = "default"
# Auto-chosen subnets: 10.213.<k>.0/24 with bridge fsim<k>, k the first index no other fleet uses.
AUTO_SUBNET = "10.213.{k}.0/24"
AUTO_BRIDGE = "fsim{k}"
NODE_IP_OFFSET = 10
MIRROR_MOUNT = "/srv/fleetsim-mirror"
# What a node finds as torch in the mirror's wheels/ (fleetsim up --torch): the real CPU wheel or a stand-in.
TORCH_CHOICES = ("real", "stand-in")
# Host paths a node must never see (masked inside the node); the state dir is added at run time.
MASKED_PATHS = ("/srv", "/home", "/mnt", "/media", "/work", "/opt/wheels")
OVERLAID = ("etc", "opt", "usr", "var")
# The nodes' shared bytecode cache of module payloads, under the state dir (content-addressed: never stale), and
# where a node sees it.
PYCODE_CACHE_DIR = "pycode-cache"
PYCODE_CACHE_MOUNT = "/run/fleetsim/pycode"
# The fork server of module runs (tools/pyzygote.py): the controller's ansible-core copy under the state dir (one
# directory per content, never stale), where a node sees it, and the server's socket.
PYZYGOTE_DIR = "pyzygote"
PYZYGOTE_MOUNT = "/run/fleetsim/pyzygote"
PYZYGOTE_SOCKET = "/run/fleetsim/pyzygote.sock"
FORBIDDEN_STATE_PREFIXES = ("/etc", "/opt", "/usr", "/var", "/root", "/tmp", "/run", "/proc", "/sys", "/dev")

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
BOOTED_TAG = "FLEETSIM-BOOTED"
HALT_EXIT = 100

# Inventory defaults for ansible.builtin.reboot against simulated nodes.
REBOOT_DEFAULTS = {
    "gpufleet_reboot_timeout": 120,
    "gpufleet_reboot_connect_timeout": 5,
    "gpufleet_reboot_pre_reboot_delay": 0,
    "gpufleet_reboot_post_reboot_delay": 0,
    "gpufleet_reboot_test_command": "cat /proc/sys/kernel/random/boot_id",
    "gpufleet_reboot_boot_time_command": "cat /proc/sys/kernel/random/boot_id",
    "gpufleet_reboot_msg": "Reboot initiated by Ansible (gpufleet.deepep)",
}


class FleetError(RuntimeError):
    """An error the CLI reports as one line and exit status 1."""


def state_root(value: str | None = None) -> Path:
    root = Path(value or os.environ.get("FLEETSIM_STATE_DIR") or DEFAULT_STATE_DIR).resolve()
    text = str(root)
    for prefix in FORBIDDEN_STATE_PREFIXES:
        if text == prefix or text.startswith(prefix + "/"):
            raise FleetError(f"state dir {text!r} lies under {prefix}, which nodes overlay or own; "
                             "choose a path such as /srv/fleetsim")
    if text == "/":
        raise FleetError("state dir '/' is not allowed")
    return root


def check_name(kind: str, value: str) -> str:
    if not NAME_RE.match(value):
        raise FleetError(f"{kind} {value!r} is not valid: expected 1-31 of [a-z0-9-], starting with a letter or digit")
    return value


def node_name(group: str, n: int) -> str:
    return f"{group.replace('_', '-')}-{n}"


def short_hash(*parts: str, length: int = 8) -> str:
    return hashlib.sha1("/".join(parts).encode()).hexdigest()[:length]


def netns_name(fleet: str, node: str) -> str:
    return f"fsim-{fleet}-{node}"


def host_veth(fleet: str, node: str) -> str:
    return "fsv" + short_hash(fleet, node)


def peer_veth(fleet: str, node: str) -> str:
    return "fsp" + short_hash(fleet, node)


def write_json(path: Path, data) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def read_json(path: Path, default=None):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (FileNotFoundError, json.JSONDecodeError):
        return default


def append_line(path: Path, data: dict) -> None:
    """Append one JSON line (O_APPEND: concurrent writers do not interleave short lines)."""
    line = (json.dumps(data, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def now() -> float:
    return round(time.time(), 3)


def proc_alive(pid: int | None, needle: str | None = None) -> bool:
    """True when ``pid`` runs and is not a zombie (and its command line holds ``needle``)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    if needle:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        return needle in cmdline
    return True


class FleetPaths:
    """Where one fleet keeps its state (``<state root>/<fleet>``)."""

    def __init__(self, root: Path, fleet: str):
        self.root = Path(root)
        self.fleet = fleet
        self.dir = self.root / fleet
        self.state = self.dir / "state.json"
        self.key = self.dir / "id_ed25519"
        self.boots = self.dir / "boots.log"
        self.nodes = self.dir / "nodes"

    def node(self, name: str) -> "NodePaths":
        return NodePaths(self.nodes / name)


class NodePaths:
    """One node's directories: overlay upper/work dirs, /root, /tmp, rendered hardware, status."""

    def __init__(self, base: Path):
        self.dir = Path(base)
        self.upper = self.dir / "upper"
        self.work = self.dir / "work"
        self.root_home = self.dir / "root"
        self.tmp = self.dir / "tmp"
        self.hw = self.dir / "hw"
        self.sysfs = self.hw / "sysfs"
        self.proc = self.hw / "proc"
        self.boot_id = self.dir / "boot_id"
        self.status = self.dir / "status.json"
        self.faults = self.dir / "faults.json"
        self.boot_info = self.dir / "boot.json"
        self.console = self.dir / "console.log"
        self.stop = self.dir / "stop"
        self.config = self.dir / "node.json"
