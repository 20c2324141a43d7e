# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host-side power supply of one simulated node: boots it, and boots it again after a reboot.

``python -m tools.fleetsim.supervisor FLEET_DIR NODE`` (started detached by ``fleetsim up``). Each boot
is a fresh ``unshare`` (PID + mount + UTS namespaces) inside the node's network namespace, running
``tools.fleetsim.nodeinit`` as PID 1. When PID 1 exits (the node's ``reboot``), the node is booted
again, unless it was powered off, a fault says it never comes back, or the fleet is going down.

Signals: SIGTERM stops the node and the supervisor; SIGUSR1 powers a halted or dead node on again;
SIGUSR2 power-cycles a running node (faults apply as to any reboot).

Every boot and every power-off is appended to the fleet's ``boots.log`` (one JSON object a line):
``{"event": "up"|"down", "node", "boot_id", "time"}``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tools.fleetsim import fakehw, traffic
from tools.fleetsim.common import (BOOTED_TAG, HALT_EXIT, NODE_TOOLS, FleetPaths, append_line, now, read_json,
                                   write_json)

# Node tools: path in the node's /usr layer -> file under tools/fleetsim/node/. Python tools get the
# node's interpreter line when installed.
NODE_TOOLS_INSTALLED = {
    "usr/sbin/reboot": "reboot",
    "usr/sbin/shutdown": "reboot",
    "usr/sbin/poweroff": "reboot",
    "usr/sbin/halt": "reboot",
    "usr/bin/systemctl": "systemctl.py",
    "usr/sbin/modprobe": "modprobe.py",
    "usr/sbin/lsmod": "modprobe.py",
    "usr/local/bin/fleetsim-nic-traffic": "fleetsim-nic-traffic.py",
}
NODE_PYTHON = "#!/usr/bin/python3\n"


def install_tools(root: Path, tools: dict) -> None:
    """Install node tools (``{path under root: file of tools/fleetsim/node}``) under ``root``, replacing what is there
    (a simulated node's /usr layer, or a vmfleet GPU guest's own root: tools/vmfleet/gpuboot.py)."""
    for rel, tool in tools.items():
        source = NODE_TOOLS / tool
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        text = source.read_text(encoding="utf-8")
        dest.write_text(NODE_PYTHON + text if tool.endswith(".py") else text, encoding="utf-8")
        dest.chmod(0o755)


class Supervisor:
    def __init__(self, fleet_dir: Path, node: str):
        self.fleet = FleetPaths(fleet_dir.parent, fleet_dir.name)
        self.node = node
        self.paths = self.fleet.node(node)
        self.cfg = read_json(self.paths.config)
        self.child: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.stopping = False
        self.power_on = False

    # ------------------------------------------------------------------ signals
    def on_term(self, _signum, _frame):
        self.stopping = True
        self.kill_node()

    def on_usr1(self, _signum, _frame):
        self.power_on = True

    def on_usr2(self, _signum, _frame):
        if self.init_pid:
            try:
                os.kill(self.init_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill_node(self):
        """Power off at once: kill the node's PID 1 (its namespace dies with it; unshare reaps it and
        exits). Before PID 1 is known, kill unshare, whose --kill-child takes PID 1 along."""
        pid = self.init_pid or (self.child.pid if self.child else None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------ status
    def set_status(self, state: str, **extra):
        data = {"state": state, "since": now(), "supervisor_pid": os.getpid(), "init_pid": self.init_pid}
        data.update(extra)
        write_json(self.paths.status, data)

    def event(self, event: str, boot_id: str | None):
        append_line(self.fleet.boots, {"event": event, "node": self.node, "boot_id": boot_id, "time": now()})

    # ------------------------------------------------------------------ boot
    def install_node_tools(self):
        """Put the node's power, module and nvidia-smi tools into its /usr layer (node is off now)."""
        upper = self.paths.upper
        install_tools(upper, NODE_TOOLS_INSTALLED)
        fakehw.install_fake_nvidia_smi(upper / "usr/bin/nvidia-smi")
        profile = fakehw.load_profile(self.cfg["profile"])
        fakehw.install_fake_libcuda(upper, profile, self.fleet.dir / "cache")
        fakehw.install_host_arch(upper, profile, self.fleet.dir / "cache")
        fakehw.complete_host_toolkits(upper)

    def clean_work_dirs(self):
        """Empty the overlays' work dirs (node off): a volatile overlay refuses a used one."""
        for sub in self.paths.work.glob("*"):
            for entry in sub.iterdir():
                shutil.rmtree(entry, ignore_errors=True)

    def clean_tmp(self):
        tmp = self.paths.tmp
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o1777, parents=True, exist_ok=True)
        tmp.chmod(0o1777)

    def find_init_pid(self, unshare_pid: int) -> int | None:
        try:
            with open(f"/proc/{unshare_pid}/task/{unshare_pid}/children", encoding="utf-8") as fh:
                kids = fh.read().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

    def boot_once(self) -> int:
        self.install_node_tools()
        self.clean_work_dirs()
        self.clean_tmp()
        cmd = ["ip", "netns", "exec", self.cfg["netns"],
               "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc", "--uts",
               "--kill-child",
               self.cfg["python"], "-m", "tools.fleetsim.nodeinit", str(self.paths.dir)]
        console = open(self.paths.console, "ab")
        self.set_status("booting")
        self.child = subprocess.Popen(cmd, cwd=self.cfg["repo"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=console, env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin"),
                                                           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"})
        console.close()
        boot_id = None
        for raw in self.child.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith(BOOTED_TAG):
                record = json.loads(line[len(BOOTED_TAG):])
                boot_id = record["boot_id"]
                self.init_pid = self.find_init_pid(self.child.pid)
                self.set_status("up", boot_id=boot_id, nic_naming=record.get("nic_naming"))
                self.event("up", boot_id)
                break
        self.child.stdout.close()
        rc = self.child.wait()
        self.init_pid = None
        if boot_id:
            self.event("down", boot_id)
        return rc if boot_id else -1

    def wait_for(self, state: str) -> bool:
        """Stay off in ``state`` until powered on (True) or stopped (False)."""
        self.set_status(state)
        self.power_on = False
        while not self.stopping and not self.power_on:
            time.sleep(0.2)
        self.power_on = False
        return not self.stopping

    def traffic_loop(self):
        """Apply the node's simulated RDMA traffic requests (fleetsim-nic-traffic) every 0.5 s while it is up."""
        while not self.stopping:
            if self.init_pid:
                devices = (read_json(self.paths.boot_info, {}) or {}).get("rdma_devices", {})
                ports = {dev: self.paths.sysfs / info["port_dir"] for dev, info in devices.items()
                         if info.get("port_dir")}
                try:
                    traffic.apply_traffic(self.paths.upper / "var", ports,
                                          offset_file=self.paths.dir / traffic.OFFSET_NAME)
                except OSError as exc:
                    print(f"fleetsim traffic: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.5)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        signal.signal(signal.SIGUSR1, self.on_usr1)
        signal.signal(signal.SIGUSR2, self.on_usr2)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        threading.Thread(target=self.traffic_loop, name="traffic", daemon=True).start()
        while not self.stopping:
            rc = self.boot_once()
            if self.stopping:
                break
            faults = read_json(self.paths.faults, {}) or {}
            if rc == -1:
                if not self.wait_for("failed"):
                    break
            elif faults.get("never_return"):
                if not self.wait_for("down"):
                    break
            elif rc == HALT_EXIT:
                if not self.wait_for("halted"):
                    break
        self.set_status("stopped")
        return 0


def main() -> int:
    fleet_dir = Path(sys.argv[1])
    node = sys.argv[2]
    return Supervisor(fleet_dir, node).run()


if __name__ == "__main__":
    sys.exit(main())
