# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet of QEMU guests booted from copy-on-write overlays of the cached image.

Each guest: a qcow2 overlay whose backing file is the image's ``rootfs.img`` (or a captured disk, see below); QEMU's
direct kernel boot with the guest's name, address and login key on the kernel command line (the image's unit sets
them at every boot; the SSH host key and the machine-id belong to the disk and are drawn only when missing);
``eth0`` user-mode networking
used only for the SSH port forward on 127.0.0.1; ``eth1`` on the fleet's private segment (a QEMU socket netdev,
UDP multicast on the loopback interface, reachable only from this machine) carrying soft-RoCE ``rxe0``.
State and overlays live in ``build/vm/fleets/<fleet>/``; ``down`` stops every QEMU process and removes it.

``capture`` powers a guest off (``systemctl poweroff``, bounded) and keeps its overlay as an image layer of the fleet
(``images/<name>/disk.qcow2``, a qcow2 whose backing file is the base image); ``up --from-image`` boots clones as
overlays over that layer. The clones' machine-id and host key are whatever the captured disk holds: new ones only
where a seal removed them.
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

from tools.fleetsim import common as fleetsim_common
from tools.fleetsim import fakehw
from tools.fleetsim import fleet as fleetsim_fleet
from tools.fleetsim import mirror as fleetsim_mirror
from tools.vmfleet.common import STATE_DIR, Stages, VmError, run
from tools.vmfleet.image import ensure_image, variant

QEMU = "qemu-system-x86_64"
MEMORY_MB = 1536
SUBNET = "10.77.0"
MCAST_GROUP = "230.0.77.1"
KVM_PROBE_SECONDS = 20
SSH_WAIT_SECONDS = 600
RXE_WAIT_SECONDS = 180
STOP_GRACE_SECONDS = 20
POWEROFF_WAIT_SECONDS = 300
COPY_TIMEOUT = 600
QMP_TIMEOUT = 30
TOOLS_DIR = Path(__file__).resolve().parents[1]
IMAGE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes"]


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def overlay_argv(backing: Path, backing_format: str, overlay: Path) -> list[str]:
    """``qemu-img create`` of a guest's qcow2 overlay over ``backing`` (the base image's raw rootfs, or a captured
    qcow2 layer)."""
    if backing_format not in ("raw", "qcow2"):
        raise VmError(f"backing format {backing_format!r} is invalid: expected raw or qcow2")
    return ["qemu-img", "create", "-q", "-f", "qcow2", "-F", backing_format, "-b", str(backing), str(overlay)]


def check_image_name(name: str) -> str:
    if not isinstance(name, str) or not IMAGE_NAME_RE.fullmatch(name):
        raise VmError(f"image name {name!r} is invalid: expected 1 to 40 letters, digits, '-' or '_', "
                      "starting with a letter or digit")
    return name


def check_gpu_profile(name: str) -> str:
    profiles = fakehw.list_profiles()
    if name not in profiles:
        raise VmError(f"--gpu-profile {name!r} is invalid: expected one of {profiles} (tools/fleetsim/profiles)")
    return name


def qmp_command(path: Path, command: str, timeout: float = QMP_TIMEOUT) -> dict:
    """One QMP command to a guest's QEMU (its greeting read, capabilities negotiated); its answer, or VmError."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            stream = sock.makefile("rwb")
            answers = [json.loads(stream.readline())]
            for execute in ("qmp_capabilities", command):
                stream.write(json.dumps({"execute": execute}).encode() + b"\n")
                stream.flush()
                while True:  # events may come before the answer
                    answers.append(json.loads(stream.readline()))
                    if "return" in answers[-1] or "error" in answers[-1]:
                        break
                if "error" in answers[-1]:
                    raise VmError(f"QMP {execute} at {path}: {answers[-1]['error']}")
            return answers[-1]
    except (OSError, ValueError) as exc:
        raise VmError(f"QMP {command} at {path} failed: {exc}") from exc


def _kind(gpu_profile: str | None) -> str:
    return f"GPU guests of profile {gpu_profile}" if gpu_profile else "plain guests (no --gpu-profile)"


def gpu_mirror() -> Path:
    """fleetsim's local mirror (built or brought up to date under fleetsim's state root lock), which GPU guests mount."""
    root = fleetsim_common.state_root(None)
    with fleetsim_fleet.root_locked(root):
        return fleetsim_mirror.build(fleetsim_mirror.fleet_mirror_dir(root), quiet=True, cache=root / ".cache")


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
    def up(self, group: str, count: int, accel: str = "auto", from_image: str | None = None,
           gpu_profile: str | None = None) -> dict:
        if count < 1 or count > 200:
            raise VmError(f"--nodes {count} is out of range: expected 1 to 200")
        if accel not in ("auto", "kvm", "tcg"):
            raise VmError(f"--accel {accel!r} is invalid: expected auto, kvm or tcg")
        known = self.load()
        if gpu_profile is not None:
            check_gpu_profile(gpu_profile)
        if known:
            # One kind of guest a fleet; clones of a GPU fleet's image are GPU guests of its profile.
            running = known.get("gpu_profile")
            if from_image is not None and gpu_profile is None:
                gpu_profile = running
            if gpu_profile != running:
                raise VmError(f"fleet {self.name} runs {_kind(running)}, not {_kind(gpu_profile)}: take it down first")
        if from_image is not None:
            disk = self.captured(from_image)
            image = Path(known["image"])
        else:
            image = ensure_image(self.stages, *variant(gpu_profile is not None))
        self.dir.mkdir(parents=True, exist_ok=True)
        state = known or {"fleet": self.name, "nodes": {},
                          "mcast_port": _free_port(socket.SOCK_DGRAM), "image": str(image)}
        if state["image"] != str(image):
            raise VmError(f"fleet {self.name} runs image {state['image']}, not {image}: take it down first")
        if gpu_profile is not None and "gpu_profile" not in state:
            state["gpu_profile"] = gpu_profile
            with self.stages.stage("fleetsim mirror"):
                state["gpu_mirror"] = str(gpu_mirror())
        backing = (disk, "qcow2") if from_image is not None else (image / "rootfs.img", "raw")
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
        label = f" from image {from_image}" if from_image else ""
        with self.stages.stage(f"boot {count} guest(s){label} ({state['accel']})"):
            for index in range(count):
                seq = base + index + 1
                name = f"{group.replace('_', '-')}-{sum(1 for n in state['nodes'].values() if n['group'] == group) + 1}"
                node = {"group": group, "seq": seq, "ssh_port": _free_port(socket.SOCK_STREAM),
                        "private_ip": f"{SUBNET}.{10 + seq}", "from_image": from_image}
                state["nodes"][name] = node
                node["pid"] = self._start(state, image, name, node, pubkey, backing)
                self.save(state)
                new.append(name)
            for name in new:
                self._wait_ssh(name, state["nodes"][name], time.monotonic() + SSH_WAIT_SECONDS)
        if state.get("gpu_profile"):
            with self.stages.stage("simulated GPU hardware on every guest"):
                for name in new:
                    self._wait_gpu(name)
        else:
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

    def _start(self, state: dict, image: Path, name: str, node: dict, pubkey: str,
               backing: tuple[Path, str]) -> int:
        ndir = self.dir / name
        shutil.rmtree(ndir, ignore_errors=True)
        ndir.mkdir(parents=True)
        overlay = ndir / "overlay.qcow2"
        run(overlay_argv(backing[0], backing[1], overlay), timeout=60)
        seq = node["seq"]
        append = (f"root=/dev/vda rw console=ttyS0 net.ifnames=0 biosdevname=0 systemd.show_status=1 "
                  f"vmfleet.hostname={name} vmfleet.ip={node['private_ip']}/24 vmfleet.key={pubkey}")
        accel = state["accel"]
        shares = []
        if state.get("gpu_profile"):
            # fleetsim's hardware of this guest's index (vmfleet-gpu.service, tools/vmfleet/gpuboot.py), from the
            # host's tools/ tree and the fleetsim mirror, both read-only.
            append += f" vmfleet.gpu={state['gpu_profile']}:{seq}"
            for tag, path in (("vmfleet-tools", TOOLS_DIR), ("fleetsim-mirror", state["gpu_mirror"])):
                shares += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=none,readonly=on"]
        argv = [QEMU, "-name", self.needle(name), "-machine", f"q35,accel={accel}",
                *(["-cpu", "host"] if accel == "kvm" else []),
                "-m", str(MEMORY_MB), "-smp", "1", "-nodefaults", "-display", "none",
                "-serial", f"file:{ndir / 'console.log'}", "-daemonize", "-pidfile", str(ndir / "qemu.pid"),
                "-qmp", f"unix:{ndir / 'qmp.sock'},server=on,wait=off",
                "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"), "-append", append,
                "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
                # The host's entropy: without it the first boot's key generation waits minutes for the guest's.
                "-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-pci,rng=rng0",
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{node['ssh_port']}-:22",
                "-device", f"virtio-net-pci,netdev=n0,mac=52:54:00:00:00:{seq:02x}",
                "-netdev", f"socket,id=n1,mcast={MCAST_GROUP}:{state['mcast_port']},localaddr=127.0.0.1",
                "-device", f"virtio-net-pci,netdev=n1,mac=52:54:00:77:00:{seq:02x}", *shares]
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

    def _wait_gpu(self, name: str) -> None:
        """The GPU unit's result (it runs before sshd, so it has ended once SSH answers): refused with its log."""
        node = self.load()["nodes"][name]
        # One argument: ssh hands the command line to the guest's shell as one string.
        proc = run(self.ssh_argv(name, node) + ["cat /run/vmfleet-gpu/boot.json || "
                                                "journalctl -b -u vmfleet-gpu.service --no-pager | tail -n 20"],
                   timeout=60, check=False)
        try:
            record = json.loads(proc.stdout)
        except ValueError:
            raise VmError(f"guest {name}: no simulated GPU hardware (vmfleet-gpu.service): "
                          f"{(proc.stdout + proc.stderr).strip()[-1200:]}") from None
        self.stages.say(f"vmfleet: {name}: {record['profile']} index {record['index']}, driver loaded "
                        f"{record['nvidia_loaded']}, RDMA devices {', '.join(record['rdma_devices'])}")

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
    def node(self, state: dict, name: str) -> dict:
        """The state of guest ``name``, refused with the fleet's guests named when it has none of that name."""
        node = state.get("nodes", {}).get(name)
        if node is None:
            raise VmError(f"no guest {name!r} in fleet {self.name}: expected one of {sorted(state.get('nodes', {}))}")
        return node

    def exec(self, name: str, command: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        node = self.node(self.load(), name)
        if node.get("stopped"):
            raise VmError(f"guest {name} of fleet {self.name} is stopped (captured as {node.get('captured_as')})")
        return run(self.ssh_argv(name, node) + command, timeout=timeout, check=False)

    def inventory(self, reboot_timeout: int = 300) -> dict:
        state = self.load()
        if not state:
            raise VmError(f"fleet {self.name} is not up")
        groups: dict[str, dict] = {}
        for name, node in sorted(state["nodes"].items(), key=lambda kv: kv[1]["seq"]):
            if node.get("stopped"):
                continue
            groups.setdefault(node["group"], {"hosts": {}})["hosts"][name] = {
                "ansible_host": "127.0.0.1", "ansible_port": node["ssh_port"],
                "vmfleet_private_ip": node["private_ip"]}
        return {"all": {"vars": {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o LogLevel=ERROR "
            "-o ConnectTimeout=5",
            # The image's fork server client (tools/pyzygote.py): /usr/bin/python3 for anything but a module run.
            "ansible_python_interpreter": "/usr/local/bin/vmfleet-python3",
            "ansible_control_path_dir": str(self.dir / "cp"),
            "gpufleet_allow_reboot": True,
            "gpufleet_reboot_timeout": reboot_timeout,
            "gpufleet_reboot_connect_timeout": 5,
            "gpufleet_reboot_test_command": "cat /proc/sys/kernel/random/boot_id",
            "gpufleet_reboot_boot_time_command": "cat /proc/sys/kernel/random/boot_id",
            "vmfleet_fleet": self.name,
            "vmfleet_accel": state.get("accel", "unknown"),
        }, "children": groups}}

    # ------------------------------------------------------------------ capture / clones
    def image_path(self, image: str) -> Path:
        return self.dir / "images" / check_image_name(image)

    def captured(self, image: str) -> Path:
        """The disk of a captured image of this fleet, refused when there is none or its base is gone."""
        idir = self.image_path(image)
        state = self.load()
        record = state.get("images", {}).get(image)
        if not record or not (idir / "disk.qcow2").exists():
            raise VmError(f"fleet {self.name} has no captured image {image!r}: expected one of "
                          f"{sorted(state.get('images', {}))} (python -m tools.vmfleet --fleet {self.name} capture NODE "
                          f"--image {image})")
        if not Path(record["base"], "rootfs.img").exists():
            raise VmError(f"image {image!r} is a layer over {record['base']}, which is gone: capture it again")
        return idir / "disk.qcow2"

    def capture(self, name: str, image: str) -> dict:
        """Power the guest off (systemctl poweroff, QEMU's exit awaited, bounded) and keep its overlay as the fleet's
        image ``image``: a copy of the qcow2 layer over the base image (the guest stays stopped, its disk intact)."""
        idir = self.image_path(image)
        state = self.load()
        node = self.node(state, name)
        if image in state.get("images", {}) or idir.exists():
            raise VmError(f"fleet {self.name} has an image {image!r} already: pick another name, or take the fleet down")
        overlay = self.dir / name / "overlay.qcow2"
        if not overlay.exists():
            raise VmError(f"guest {name} has no disk at {overlay}")
        with self.stages.stage(f"power off {name}"):
            if _alive(node.get("pid"), self.needle(name)):
                qmp = self.dir / name / "qmp.sock"
                if qmp.exists():
                    # The ACPI power button, as a cloud's stop does: a sealed guest has no SSH host key, so sshd takes
                    # no new connection; systemd-logind powers the guest off.
                    qmp_command(qmp, "system_powerdown")
                else:
                    # The connection drops while the guest goes down: its exit status says nothing; QEMU's exit does.
                    run(self.ssh_argv(name, node) + ["systemctl", "poweroff"], timeout=60, check=False)
                self._wait_exit(name, node, time.monotonic() + POWEROFF_WAIT_SECONDS)
        node.update(pid=None, stopped=True, captured_as=image)
        self.save(state)
        with self.stages.stage(f"capture {name} as image {image}"):
            idir.mkdir(parents=True)
            try:
                run(["cp", "--sparse=always", str(overlay), str(idir / "disk.qcow2")], timeout=COPY_TIMEOUT)
                info = json.loads(run(["qemu-img", "info", "--output=json", str(idir / "disk.qcow2")], timeout=60).stdout)
            except VmError:
                shutil.rmtree(idir, ignore_errors=True)
                raise
        record = {"source": name, "base": state["image"], "backing": info.get("backing-filename"),
                  "disk_bytes": info.get("actual-size"), "virtual_bytes": info.get("virtual-size"),
                  "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        state.setdefault("images", {})[image] = record
        self.save(state)
        return record

    def _wait_exit(self, name: str, node: dict, deadline: float) -> None:
        while _alive(node.get("pid"), self.needle(name)):
            if time.monotonic() > deadline:
                raise VmError(f"guest {name} did not power off within {POWEROFF_WAIT_SECONDS} s (QEMU pid "
                              f"{node['pid']} still runs); its disk is not captured: see {self.dir / name / 'console.log'}")
            time.sleep(1)

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
