# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet of QEMU guests booted from copy-on-write overlays of the cached image.

Each guest: a qcow2 overlay whose backing file is the image's ``rootfs.img``; QEMU's direct kernel boot with
the guest's identity on the kernel command line (the image's first-boot unit sets hostname, SSH host keys,
root's authorized key and the private address; systemd draws the machine-id); ``eth0`` user-mode networking
used only for the SSH port forward on 127.0.0.1; ``eth1`` on the fleet's private segment (a QEMU socket netdev,
UDP multicast on the loopback interface, reachable only from this machine) carrying soft-RoCE ``rxe0``.
State and overlays live in ``build/vm/fleets/<fleet>/``; ``down`` stops every QEMU process and removes it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tools.vmfleet.common import STATE_DIR, Stages, VmError, run
from tools.vmfleet.image import ensure_image

QEMU = "qemu-system-x86_64"
MEMORY_MB = 1536
SUBNET = "10.77.0"
MCAST_GROUP = "230.0.77.1"
KVM_PROBE_SECONDS = 20
SSH_WAIT_SECONDS = 600
RXE_WAIT_SECONDS = 180
STOP_GRACE_SECONDS = 20
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes"]


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int | None, needle: str) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return needle in cmdline


class Fleet:
    def __init__(self, name: str, stages: Stages | None = None):
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name or ""):
            raise VmError(f"fleet name {name!r} is invalid: expected letters, digits, '-' or '_'")
        self.name = name
        self.dir = STATE_DIR / name
        self.state_path = self.dir / "state.json"
        self.key = self.dir / "id_ed25519"
        self.stages = stages or Stages()

    # ------------------------------------------------------------------ state
    def load(self) -> dict:
        if not self.state_path.exists():
            return {}
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def save(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.rename(self.state_path)

    def needle(self, node: str) -> str:
        return f"vmfleet-{self.name}-{node}"

    # ------------------------------------------------------------------ up
    def up(self, group: str, count: int, accel: str = "auto") -> dict:
        if count < 1 or count > 200:
            raise VmError(f"--nodes {count} is out of range: expected 1 to 200")
        if accel not in ("auto", "kvm", "tcg"):
            raise VmError(f"--accel {accel!r} is invalid: expected auto, kvm or tcg")
        image = ensure_image(self.stages)
        self.dir.mkdir(parents=True, exist_ok=True)
        state = self.load() or {"fleet": self.name, "nodes": {},
                                "mcast_port": _free_port(socket.SOCK_DGRAM), "image": str(image)}
        if state["image"] != str(image):
            raise VmError(f"fleet {self.name} runs image {state['image']}, not {image}: take it down first")
        if not self.key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vmfleet-{self.name}", "-f", str(self.key)],
                timeout=30)
        if "accel" not in state:
            with self.stages.stage("accelerator probe"):
                state["accel"] = self._probe_accel(image) if accel == "auto" else accel
            self.stages.say(f"vmfleet: accelerator {state['accel']}")
        self.save(state)
        pubkey = base64.b64encode(self.key.with_suffix(".pub").read_bytes().strip()).decode()
        base = len(state["nodes"])
        new = []
        with self.stages.stage(f"boot {count} guest(s) ({state['accel']})"):
            for index in range(count):
                seq = base + index + 1
                name = f"{group.replace('_', '-')}-{sum(1 for n in state['nodes'].values() if n['group'] == group) + 1}"
                node = {"group": group, "seq": seq, "ssh_port": _free_port(socket.SOCK_STREAM),
                        "private_ip": f"{SUBNET}.{10 + seq}"}
                state["nodes"][name] = node
                node["pid"] = self._start(state, image, name, node, pubkey)
                self.save(state)
                new.append(name)
            for name in new:
                self._wait_ssh(name, state["nodes"][name], time.monotonic() + SSH_WAIT_SECONDS)
        with self.stages.stage("soft-RoCE rxe0 active on every guest"):
            for name in new:
                self._wait_rxe(name, time.monotonic() + RXE_WAIT_SECONDS)
        return state

    def _probe_accel(self, image: Path) -> str:
        """KVM when a guest kernel really runs under it (it reaches its panic without a root), else TCG."""
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return "tcg"
        argv = [QEMU, "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults", "-display", "none",
                "-serial", "stdio", "-no-reboot", "-kernel", str(image / "vmlinuz"),
                "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent rootwait=0 rdinit=/nonexistent"]
        try:
            proc = subprocess.run(argv, timeout=KVM_PROBE_SECONDS, capture_output=True, text=True, errors="replace",
                                  check=False)
            out = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            self.stages.say(f"vmfleet: KVM guest did not finish its probe within {KVM_PROBE_SECONDS} s")
            return "tcg"
        if "Kernel panic" in out:
            return "kvm"
        self.stages.say("vmfleet: KVM does not run a guest here: " + " ".join(out.strip().splitlines()[-2:])[:300])
        return "tcg"

    def _start(self, state: dict, image: Path, name: str, node: dict, pubkey: str) -> int:
        ndir = self.dir / name
        shutil.rmtree(ndir, ignore_errors=True)
        ndir.mkdir(parents=True)
        overlay = ndir / "overlay.qcow2"
        run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image / "rootfs.img"), str(overlay)],
            timeout=60)
        seq = node["seq"]
        append = (f"root=/dev/vda rw console=ttyS0 net.ifnames=0 biosdevname=0 systemd.show_status=1 "
                  f"vmfleet.hostname={name} vmfleet.ip={node['private_ip']}/24 vmfleet.key={pubkey}")
        accel = state["accel"]
        argv = [QEMU, "-name", self.needle(name), "-machine", f"q35,accel={accel}",
                *(["-cpu", "host"] if accel == "kvm" else []),
                "-m", str(MEMORY_MB), "-smp", "1", "-nodefaults", "-display", "none",
                "-serial", f"file:{ndir / 'console.log'}", "-daemonize", "-pidfile", str(ndir / "qemu.pid"),
                "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"), "-append", append,
                "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
                # The host's entropy: without it the first boot's key generation waits minutes for the guest's.
                "-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-pci,rng=rng0",
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{node['ssh_port']}-:22",
                "-device", f"virtio-net-pci,netdev=n0,mac=52:54:00:00:00:{seq:02x}",
                "-netdev", f"socket,id=n1,mcast={MCAST_GROUP}:{state['mcast_port']},localaddr=127.0.0.1",
                "-device", f"virtio-net-pci,netdev=n1,mac=52:54:00:77:00:{seq:02x}"]
        run(argv, timeout=60)
        return int((ndir / "qemu.pid").read_text().strip())

    def ssh_argv(self, name: str, node: dict) -> list[str]:
        return ["ssh", *SSH_OPTIONS, "-i", str(self.key), "-p", str(node["ssh_port"]), "root@127.0.0.1"]

    def _wait_ssh(self, name: str, node: dict, deadline: float) -> None:
        while True:
            if not _alive(node["pid"], self.needle(name)):
                raise VmError(f"guest {name} stopped while booting; see {self.dir / name / 'console.log'}")
            proc = run(self.ssh_argv(name, node) + ["true"], timeout=30, check=False)
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise VmError(f"guest {name} did not answer SSH on 127.0.0.1:{node['ssh_port']} within "
                              f"{SSH_WAIT_SECONDS} s; see {self.dir / name / 'console.log'}")
            time.sleep(2)

    def _wait_rxe(self, name: str, deadline: float) -> None:
        node = self.load()["nodes"][name]
        while True:
            proc = run(self.ssh_argv(name, node) + ["rdma", "link", "show", "rxe0/1"], timeout=30, check=False)
            if "ACTIVE" in proc.stdout:
                return
            if time.monotonic() > deadline:
                raise VmError(f"guest {name}: rxe0 not ACTIVE within {RXE_WAIT_SECONDS} s: {proc.stdout.strip()}"
                              f"{proc.stderr.strip()}")
            time.sleep(2)

    # ------------------------------------------------------------------ exec / inventory / down
    def exec(self, name: str, command: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        state = self.load()
        if name not in state.get("nodes", {}):
            raise VmError(f"no guest {name!r} in fleet {self.name}: expected one of {sorted(state.get('nodes', {}))}")
        return run(self.ssh_argv(name, state["nodes"][name]) + command, timeout=timeout, check=False)

    def inventory(self, reboot_timeout: int = 300) -> dict:
        state = self.load()
        if not state:
            raise VmError(f"fleet {self.name} is not up")
        groups: dict[str, dict] = {}
        for name, node in sorted(state["nodes"].items(), key=lambda kv: kv[1]["seq"]):
            groups.setdefault(node["group"], {"hosts": {}})["hosts"][name] = {
                "ansible_host": "127.0.0.1", "ansible_port": node["ssh_port"],
                "vmfleet_private_ip": node["private_ip"]}
        return {"all": {"vars": {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR "
            "-o ConnectTimeout=5",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_control_path_dir": str(self.dir / "cp"),
            "gpufleet_allow_reboot": True,
            "gpufleet_reboot_timeout": reboot_timeout,
            "gpufleet_reboot_connect_timeout": 5,
            "gpufleet_reboot_test_command": "cat /proc/sys/kernel/random/boot_id",
            "gpufleet_reboot_boot_time_command": "cat /proc/sys/kernel/random/boot_id",
            "vmfleet_fleet": self.name,
            "vmfleet_accel": state.get("accel", "unknown"),
        }, "children": groups}}

    def down(self) -> list[str]:
        state = self.load()
        stopped = []
        for name, node in state.get("nodes", {}).items():
            if _alive(node.get("pid"), self.needle(name)):
                os.kill(node["pid"], signal.SIGTERM)
                stopped.append(name)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for name, node in state.get("nodes", {}).items():
            while _alive(node.get("pid"), self.needle(name)) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _alive(node.get("pid"), self.needle(name)):
                os.kill(node["pid"], signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)
        return stopped
