# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host side of the simulated fleet: create, start, stop, inspect and fault nodes.

A fleet lives in ``<state root>/<fleet>/`` (``state.json``, the SSH client key, ``boots.log`` and
``nodes/<node>/``). The host-only bridge carries the fleet's private /24; each node has a network
namespace ``fsim-<fleet>-<node>`` holding the ``eth0`` end of a veth pair and no default route.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tools import pyzygote
from tools.fleetsim import fakehw, mirror
from tools.fleetsim.common import (AUTO_BRIDGE, AUTO_SUBNET, NODE_IP_OFFSET, PYCODE_CACHE_DIR, PYZYGOTE_DIR,
                                   REBOOT_DEFAULTS, REPO,
                                   TORCH_CHOICES, FleetError, FleetPaths, NodePaths, check_name, host_veth, netns_name,
                                   node_name, now, peer_veth, proc_alive, read_json, write_json)

SUPERVISOR_NEEDLE = "tools.fleetsim.supervisor"
# The supervisors this process started, by PID: held so that subprocess's clean-up of dropped Popen objects (run at
# every later Popen) never reaps one behind _supervisor_exit's back, which then could not say how it ended.
_SUPERVISORS: dict[int, subprocess.Popen] = {}


def supervisor_needle(fleet_dir: Path | str, node: str) -> str:
    """What the command line of one node's supervisor holds (module, fleet directory, node): with PIDs reused (the
    host's pid_max may be 32768), a PID kept in a state file is that supervisor's only while this matches, never
    another fleet's or another node's (the trailing space ends the node's name: /proc's command line ends in one)."""
    return f"{SUPERVISOR_NEEDLE} {fleet_dir} {node} "


SSHD_CONFIG = """\
# fleetsim node sshd: key-only root login on the node's own address.
Port 22
ListenAddress {ip}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PidFile /run/sshd.pid
MaxStartups 100:30:200
MaxSessions 100
LogLevel ERROR
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""

# A port's rate as the kernel writes it in sysfs (ib_core's rate_show): "400 Gb/sec (4X NDR)", "25 Gb/sec (1X EDR)".
RATE_RE = re.compile(r"\d+(\.\d+)? Gb/sec \(\d+X [A-Z]+\)")


def sh(*argv: str, check: bool = True, capture: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), input=input_text, text=True, check=False,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None)
    if check and proc.returncode != 0:
        raise FleetError(f"{' '.join(argv)} failed (rc={proc.returncode}): {(proc.stderr or '').strip()}")
    return proc


def link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def netns_list() -> list[str]:
    try:
        return sorted(os.listdir("/run/netns"))
    except FileNotFoundError:
        return []


def netns_pids(ns: str) -> list[int]:
    proc = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


@contextlib.contextmanager
def root_locked(root: Path):
    """Hold the state root's lock (every fleet's state changes and mirror builds under one root take it)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    fh = open(root / ".lock", "a+", encoding="utf-8")  # pylint: disable=consider-using-with
    try:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


class Fleet:
    """One fleet: its state file and every operation on it. Mutations hold the state root's lock."""

    def __init__(self, root: Path, name: str):
        self.root = Path(root)
        self.name = check_name("fleet name", name)
        self.paths = FleetPaths(self.root, name)
        self._lock_fh = None
        self._pyzygote_tree: str | None = None

    # ------------------------------------------------------------------ lock and state
    def locked(self):
        return root_locked(self.root)

    def load(self) -> dict | None:
        return read_json(self.paths.state)

    def save(self, state: dict) -> None:
        write_json(self.paths.state, state)

    def pycode_cache_dir(self) -> str | None:
        """The host directory of the nodes' shared bytecode cache (tools/pycode_cache.py), made when missing;
        None when ``FLEETSIM_PYCODE_CACHE=0`` turns it off (nodes then compile every module payload, as before)."""
        if os.environ.get("FLEETSIM_PYCODE_CACHE", "1") == "0":
            return None
        path = self.root / PYCODE_CACHE_DIR
        path.mkdir(mode=0o700, exist_ok=True)
        return str(path)

    def pyzygote_tree(self) -> str | None:
        """The host directory of the ansible-core copy the nodes' fork server preloads (tools/pyzygote.py: the
        controller's, keyed by its content), written when missing; None when ``FLEETSIM_PYZYGOTE=0`` turns the
        server off (every module run then imports ansible-core's module_utils itself, as before)."""
        if os.environ.get("FLEETSIM_PYZYGOTE", "1") == "0":
            return None
        if self._pyzygote_tree is None:
            files = pyzygote.ansible_core_tree()
            path = self.root / PYZYGOTE_DIR / pyzygote.tree_key(files)[:16]
            path.parent.mkdir(mode=0o700, exist_ok=True)
            pyzygote.write_tree(str(path), files)
            self._pyzygote_tree = str(path)
        return self._pyzygote_tree

    def require(self) -> dict:
        state = self.load()
        if not state:
            raise FleetError(f"fleet {self.name!r} is not up (no {self.paths.state})")
        return state

    @staticmethod
    def all_states(root: Path) -> dict[str, dict]:
        out = {}
        if not Path(root).is_dir():
            return out
        for entry in sorted(Path(root).iterdir()):
            if entry.name.startswith("."):
                continue
            data = read_json(entry / "state.json")
            if data:
                out[entry.name] = data
        return out

    # ------------------------------------------------------------------ network
    def _choose_network(self, subnet: str | None, bridge: str | None) -> tuple[str, str]:
        others = {k: v for k, v in self.all_states(self.root).items() if k != self.name}
        used_bridges = {v["bridge"] for v in others.values()}
        used_nets = [ipaddress.ip_network(v["subnet"]) for v in others.values()]
        if subnet is None or bridge is None:
            for k in range(256):
                cand_net = subnet or AUTO_SUBNET.format(k=k)
                cand_br = bridge or AUTO_BRIDGE.format(k=k)
                net = ipaddress.ip_network(cand_net)
                if cand_br in used_bridges or any(net.overlaps(u) for u in used_nets):
                    continue
                if not self._subnet_free(net, cand_br):
                    continue
                subnet, bridge = cand_net, cand_br
                break
            else:
                raise FleetError("no free subnet/bridge pair; pass --subnet and --bridge")
        net = ipaddress.ip_network(subnet)
        if net.prefixlen > 28 or not net.is_private:
            raise FleetError(f"subnet {subnet!r}: expected a private IPv4 network of /28 or larger, e.g. 10.213.0.0/24")
        if len(bridge) > 15:
            raise FleetError(f"bridge name {bridge!r} is longer than 15 characters")
        if bridge in used_bridges:
            raise FleetError(f"bridge {bridge!r} belongs to another fleet")
        if any(net.overlaps(u) for u in used_nets):
            raise FleetError(f"subnet {subnet} overlaps another fleet's subnet")
        if not self._subnet_free(net, bridge):
            raise FleetError(f"subnet {subnet} is already routed on this host (outside bridge {bridge})")
        return str(net), bridge

    @staticmethod
    def _subnet_free(net, bridge: str) -> bool:
        proc = sh("ip", "-j", "-4", "addr", "show", check=False)
        try:
            links = json.loads(proc.stdout or "[]")
        except json.JSONDecodeError:
            return True
        for link in links:
            if link.get("ifname") == bridge:
                continue
            for addr in link.get("addr_info", []):
                other = ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
                if other.overlaps(net):
                    return False
        return True

    def ensure_bridge(self, state: dict) -> None:
        bridge = state["bridge"]
        net = ipaddress.ip_network(state["subnet"])
        if not link_exists(bridge):
            sh("ip", "link", "add", bridge, "type", "bridge")
        sh("sysctl", "-qw", f"net.ipv6.conf.{bridge}.disable_ipv6=1", check=False)
        addr = f"{state['host_ip']}/{net.prefixlen}"
        have = sh("ip", "-4", "-o", "addr", "show", "dev", bridge).stdout
        if f" {addr} " not in have:
            sh("ip", "addr", "add", addr, "dev", bridge)
        sh("ip", "link", "set", bridge, "up")

    # ------------------------------------------------------------------ up
    def up(self, profile: str, count: int, group: str | None, subnet: str | None, bridge: str | None,
           wait: float, build_mirror: bool = True, torch: str = "real", image: str | None = None) -> list[str]:
        fakehw.load_profile(profile)  # fail early on an unknown profile
        if image is not None:
            self._image_dir(image, must_exist=True)
        if torch not in TORCH_CHOICES:
            raise FleetError(f"--torch {torch}: expected one of {', '.join(TORCH_CHOICES)}")
        group = group or profile
        if not group.replace("_", "-").replace("-", "").isalnum():
            raise FleetError(f"group {group!r}: expected letters, digits, '_' and '-'")
        if count < 1:
            raise FleetError(f"--nodes {count}: expected 1 or more")
        with self.locked():
            state = self.load()
            if state and not self._alive(state):
                # A fleet whose supervisors are gone (host rebooted, killed): start over.
                self._teardown(state, quiet=True)
                state = None
            if state is None:
                if self.paths.dir.exists():
                    shutil.rmtree(self.paths.dir)
                subnet, bridge = self._choose_network(subnet, bridge)
                net = ipaddress.ip_network(subnet)
                state = {"fleet": self.name, "subnet": subnet, "bridge": bridge, "host_ip": str(net[1]),
                         "python": sys.executable, "repo": str(REPO), "state_root": str(self.root),
                         "created": now(), "nodes": {}}
                self.paths.dir.mkdir(parents=True, exist_ok=True)
                self.paths.nodes.mkdir(exist_ok=True)
                self.paths.boots.touch()
                sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"fleetsim-{self.name}",
                   "-f", str(self.paths.key))
            else:
                if subnet and subnet != state["subnet"] or bridge and bridge != state["bridge"]:
                    raise FleetError(f"fleet {self.name!r} is up on {state['bridge']} {state['subnet']}; "
                                     "--subnet/--bridge apply only to a new fleet")
            self.save(state)
            mirror_dir = mirror.fleet_mirror_dir(self.root)
            if build_mirror:
                mirror.build(mirror_dir, quiet=True, cache=self.root / ".cache")
            state["mirror"] = str(mirror_dir)
            self.ensure_bridge(state)
            net = ipaddress.ip_network(state["subnet"])
            taken_ips = {d["ip"] for d in state["nodes"].values()}
            new_nodes = []
            next_n = max([d["n"] for d in state["nodes"].values() if d["group"] == group] or [0]) + 1
            seq = max([d["seq"] for d in state["nodes"].values()] or [-1]) + 1
            hosts = list(net.hosts())
            for i in range(count):
                name = node_name(group, next_n + i)
                check_name("node name", name)
                ip = next((str(h) for h in hosts[NODE_IP_OFFSET:] if str(h) not in taken_ips), None)
                if ip is None:
                    raise FleetError(f"subnet {state['subnet']} has no free address for {name}")
                taken_ips.add(ip)
                node = {"name": name, "group": group, "profile": profile, "n": next_n + i, "seq": seq + i,
                        "ip": ip, "netns": netns_name(self.name, name), "veth": host_veth(self.name, name),
                        "torch": torch}
                if image is not None:
                    node["image"] = image
                state["nodes"][name] = node
                new_nodes.append(node)
            self.save(state)
            for node in new_nodes:
                self._create_node(state, node)
                self._start_supervisor(state, node)
            self.save(state)
            self._hosts_files(state)
            self._wait_up(state, [n["name"] for n in new_nodes], wait)
            return [n["name"] for n in new_nodes]

    def _create_node(self, state: dict, node: dict) -> None:
        np = self.paths.node(node["name"])
        for d in (np.upper, np.work, np.root_home, np.tmp, np.hw):
            d.mkdir(parents=True, exist_ok=True)
        for sub in ("etc", "opt", "usr", "var"):
            (np.upper / sub).mkdir(exist_ok=True)
            (np.work / sub).mkdir(exist_ok=True)
        np.root_home.chmod(0o700)
        etc = np.upper / "etc"
        if node.get("image"):
            # Born from a captured disk: its layer (and /root) as sealed; no machine-id, no host keys (nodeinit makes
            # them at first boot, as systemd and sshd's keygen do). The fleet's own files below are this node's.
            src = self._image_dir(node["image"], must_exist=True)
            sh("cp", "-a", "--reflink=auto", f"{src / 'upper'}/.", f"{np.upper}/")
            sh("cp", "-a", "--reflink=auto", f"{src / 'root'}/.", f"{np.root_home}/")
            (etc / "hosts").unlink(missing_ok=True)
        for sub in ("modprobe.d", "modules-load.d"):  # kmod's directories, as on a real node
            (etc / sub).mkdir(exist_ok=True)
        (etc / "hostname").write_text(node["name"] + "\n")
        ssh_dir = etc / "ssh"
        ssh_dir.mkdir(exist_ok=True)
        if not node.get("image"):
            machine_id = os.urandom(16).hex()
            (etc / "machine-id").write_text(machine_id + "\n")
            dbus = np.upper / "var/lib/dbus"
            dbus.mkdir(parents=True, exist_ok=True)
            (dbus / "machine-id").write_text(machine_id + "\n")
            for old in ssh_dir.glob("ssh_host_*"):
                old.unlink()
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node['name']}",
               "-f", str(ssh_dir / "ssh_host_ed25519_key"))
        (ssh_dir / "sshd_config").write_text(SSHD_CONFIG.format(ip=node["ip"]))
        # The node's only package source is the local mirror; the host's sources are hidden (whiteouts).
        apt = etc / "apt"
        (apt / "sources.list.d").mkdir(parents=True, exist_ok=True)
        (apt / "sources.list").write_text("# fleetsim node: packages come from the local mirror only\n"
                                          "deb [trusted=yes] file:/srv/fleetsim-mirror/apt ./\n")
        for entry in Path("/etc/apt/sources.list.d").glob("*"):
            target = apt / "sources.list.d" / entry.name
            if not target.exists():
                os.mknod(target, 0o600 | 0o020000, os.makedev(0, 0))
        fs = etc / "fleetsim"
        fs.mkdir(exist_ok=True)
        write_json(fs / "node.json", {"name": node["name"], "fleet": self.name, "profile": node["profile"],
                                      "group": node["group"], "ip": node["ip"]})
        ssh_home = np.root_home / ".ssh"
        ssh_home.mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(str(self.paths.key) + ".pub", ssh_home / "authorized_keys")
        (ssh_home / "authorized_keys").chmod(0o600)
        write_json(np.config, {"name": node["name"], "profile": node["profile"], "index": node["seq"],
                               "ip": node["ip"], "netns": node["netns"], "python": state["python"],
                               "repo": state["repo"], "state_root": state["state_root"],
                               "mirror": state.get("mirror"), "fleet": self.name,
                               "torch": node.get("torch", "real"), "pycode_cache": self.pycode_cache_dir(),
                               "pyzygote_tree": self.pyzygote_tree()})
        write_json(np.faults, {"never_return": False, "port_down": []})
        # Network: a veth pair, the node end renamed eth0 inside the node's namespace.
        ns = node["netns"]
        if ns in netns_list():
            sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", ns)
        peer = peer_veth(self.name, node["name"])
        for name in (node["veth"], peer):
            if link_exists(name):
                sh("ip", "link", "del", name, check=False)
        prefix = ipaddress.ip_network(state["subnet"]).prefixlen
        batch = "\n".join([
            f"link add {node['veth']} type veth peer name {peer}",
            f"link set {peer} netns {ns}",
            f"link set {node['veth']} master {state['bridge']}",
            f"link set {node['veth']} up",
        ]) + "\n"
        sh("ip", "-batch", "-", input_text=batch)
        nsbatch = "\n".join([
            f"link set {peer} name eth0",
            f"addr add {node['ip']}/{prefix} dev eth0",
            "link set eth0 up",
            "link set lo up",
        ]) + "\n"
        sh("ip", "-n", ns, "-batch", "-", input_text=nsbatch)

    def _hosts_files(self, state: dict) -> None:
        """/etc/hosts of every node names every node of the fleet (read at the node's next boot too)."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{d['ip']}\t{n}" for n, d in sorted(state["nodes"].items(), key=lambda kv: kv[1]["seq"])]
        text = "\n".join(lines) + "\n"
        for name in state["nodes"]:
            target = self.paths.node(name).upper / "etc/hosts"
            if not target.exists():
                target.write_text(text)

    def _start_supervisor(self, state: dict, node: dict) -> None:
        np = self.paths.node(node["name"])
        log = open(np.console, "ab")
        proc = subprocess.Popen([state["python"], "-m", SUPERVISOR_NEEDLE, str(self.paths.dir), node["name"]],
                                cwd=state["repo"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True,
                                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                                     "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"})
        log.close()
        _SUPERVISORS[proc.pid] = proc
        node["supervisor_pid"] = proc.pid

    def _supervisor_alive(self, node: dict) -> bool:
        """True while the node's recorded supervisor runs: where this process started it, while its child has not
        ended (its command line is not read: a node failed to boot once with its supervisor running, the command
        line read before it held the needle); otherwise its PID, with this fleet's and node's command line."""
        proc = _SUPERVISORS.get(node.get("supervisor_pid"))
        if proc is not None:
            return proc.poll() is None
        return proc_alive(node.get("supervisor_pid"), supervisor_needle(self.paths.dir, node["name"]))

    def node_status(self, name: str) -> dict:
        return read_json(self.paths.node(name).status, {}) or {}

    def _wait_up(self, state: dict, names: list[str], wait: float, previous: dict | None = None) -> None:
        deadline = time.monotonic() + wait
        pending = set(names)
        while pending:
            for name in sorted(pending):
                st = self.node_status(name)
                if st.get("state") == "up" and (not previous or st.get("boot_id") != previous.get(name)):
                    pending.discard(name)
                elif st.get("state") in ("failed", "stopped") or not self._supervisor_alive(state["nodes"][name]):
                    raise FleetError(f"node {name} did not boot ({st.get('state', 'no supervisor')}"
                                     f"{self._supervisor_exit(state['nodes'][name].get('supervisor_pid'))}); the "
                                     f"fleet stays for inspection (`down` removes it); console: "
                                     f"{self.paths.node(name).console}\n{self.console_tail(name)}")
            if not pending:
                break
            if time.monotonic() > deadline:
                raise FleetError(f"nodes not up after {wait:.0f} s: {', '.join(sorted(pending))} "
                                 "(`status` shows them, `down` removes the fleet)")
            time.sleep(0.05)

    @staticmethod
    def _supervisor_exit(pid: int | None) -> str:
        """How a supervisor this process started ended, for the error that names its node: its exit status or the
        signal that killed it (it is this process's child until reaped; empty when it is not, or still runs)."""
        if not pid:
            return ""
        proc = _SUPERVISORS.get(pid)
        if proc is not None:
            if proc.poll() is None:
                return ""
            if proc.returncode < 0:
                return f"; its supervisor was killed by signal {signal.Signals(-proc.returncode).name}"
            return f"; its supervisor exited with status {proc.returncode}"
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return ""
        if not done:
            return ""
        if os.WIFSIGNALED(status):
            return f"; its supervisor was killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
        return f"; its supervisor exited with status {os.WEXITSTATUS(status)}"

    def console_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = self.paths.node(name).console.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _alive(self, state: dict) -> bool:
        return any(self._supervisor_alive(d) for d in state["nodes"].values())

    # ------------------------------------------------------------------ down
    def down(self, purge: bool = False, quiet: bool = False) -> list[str]:
        with self.locked():
            state = self.load()
            done = self._teardown(state, quiet=quiet) if state else []
            if purge and self.paths.dir.exists():
                shutil.rmtree(self.paths.dir)
            elif self.paths.state.exists():
                self.paths.state.unlink()
            return done

    def _teardown(self, state: dict, quiet: bool) -> list[str]:
        nodes = state.get("nodes", {})
        for name, node in nodes.items():
            if self._supervisor_alive(node):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node["supervisor_pid"], signal.SIGTERM)
        deadline = time.monotonic() + 10
        for name, node in nodes.items():
            pid = node.get("supervisor_pid")
            while self._supervisor_alive(node) and time.monotonic() < deadline:
                time.sleep(0.02)
            if self._supervisor_alive(node):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for name, node in nodes.items():
            ns = node.get("netns")
            if ns in netns_list():
                for pid in netns_pids(ns):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while netns_pids(ns) and time.monotonic() < deadline:
                    time.sleep(0.02)
                sh("ip", "netns", "del", ns, check=False)
            for link in (node.get("veth"), peer_veth(self.name, name)):
                if link and link_exists(link):
                    sh("ip", "link", "del", link, check=False)
        bridge = state.get("bridge")
        others = {k: v for k, v in self.all_states(self.root).items() if k != self.name}
        if bridge and link_exists(bridge) and all(v.get("bridge") != bridge for v in others.values()):
            sh("ip", "link", "del", bridge, check=False)
        if not quiet:
            print(f"fleet {self.name}: down ({len(nodes)} nodes)")
        return sorted(nodes)

    # ------------------------------------------------------------------ images
    def _image_dir(self, name: str, must_exist: bool = False) -> Path:
        check_name("image name", name)
        path = self.paths.dir / "images" / name
        if must_exist and not (path / "image.json").is_file():
            have = sorted(p.name for p in (self.paths.dir / "images").glob("*")) if (self.paths.dir / "images").is_dir() else []
            raise FleetError(f"fleet {self.name!r} has no image {name!r} (images: {', '.join(have) or 'none'}; "
                             "expected one made by `image capture`)")
        return path

    def capture(self, node_name: str, image: str) -> dict:
        """The node's disk as an image: its copy-on-write layer and /root, copied (the cloud's image of a stopped
        disk). Only a sealed node (an empty /etc/machine-id, as node_seal leaves it) is captured."""
        with self.locked():
            state = self.require()
            node = self._node(state, node_name)
            np = self.paths.node(node_name)
            mid = np.upper / "etc/machine-id"
            if not mid.is_file() or mid.read_text().strip():
                raise FleetError(f"{node_name} is not sealed (its /etc/machine-id is not empty): seal it first "
                                 "(playbooks/image.yml), so that its clones get their own identity")
            dest = self._image_dir(image)
            if dest.exists():
                raise FleetError(f"image {image!r} exists in fleet {self.name!r} (expected a new name)")
            dest.mkdir(parents=True)
            try:
                for sub, src in (("upper", np.upper), ("root", np.root_home)):
                    (dest / sub).mkdir()
                    sh("cp", "-a", "--reflink=auto", f"{src}/.", f"{dest / sub}/")
            except BaseException:
                shutil.rmtree(dest, ignore_errors=True)
                raise
            info = {"name": image, "node": node_name, "profile": node["profile"], "torch": node.get("torch", "real"),
                    "captured": now()}
            write_json(dest / "image.json", info)
            return info

    # ------------------------------------------------------------------ reboot, exec, faults
    def _node(self, state: dict, name: str) -> dict:
        if name not in state["nodes"]:
            raise FleetError(f"fleet {self.name!r} has no node {name!r} (nodes: {', '.join(sorted(state['nodes']))})")
        return state["nodes"][name]

    def reboot(self, name: str, wait: float, no_wait: bool = False) -> dict:
        with self.locked():
            state = self.require()
            node = self._node(state, name)
            before = self.node_status(name)
            pid = node.get("supervisor_pid")
            if not self._supervisor_alive(node):
                raise FleetError(f"node {name}: its supervisor is gone; run `down` and `up` again")
            sig = signal.SIGUSR2 if before.get("state") == "up" else signal.SIGUSR1
            os.kill(pid, sig)
        if no_wait:
            return before
        faults = read_json(self.paths.node(name).faults, {}) or {}
        if faults.get("never_return"):
            return before
        self._wait_up(state, [name], wait, previous={name: before.get("boot_id")})
        return self.node_status(name)

    def init_pid(self, name: str) -> int:
        state = self.require()
        self._node(state, name)
        st = self.node_status(name)
        pid = st.get("init_pid")
        if st.get("state") != "up" or not proc_alive(pid):
            raise FleetError(f"node {name} is not up ({st.get('state', 'unknown')})")
        return pid

    def exec(self, name: str, command: list[str]) -> int:
        pid = self.init_pid(name)
        env = ["env", "-i", "HOME=/root", "USER=root", "LOGNAME=root", "LANG=C.UTF-8",
               "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               f"TERM={os.environ.get('TERM', 'dumb')}"]
        argv = ["nsenter", "-t", str(pid), "-m", "-u", "-n", "-p", "--wd=/root", "--"] + env + (command or ["bash", "-l"])
        return subprocess.call(argv)

    def fault(self, name: str, never_return: bool | None = None, port_down: list[str] = (),
              port_up: list[str] = (), bump: list[str] = (), nbytes: int = 4096, clear: bool = False,
              port_rate: list[str] = ()) -> dict:
        with self.locked():
            state = self.require()
            self._node(state, name)
            np = self.paths.node(name)
            faults = read_json(np.faults, {}) or {"never_return": False, "port_down": []}
            if clear:
                faults = {"never_return": False, "port_down": []}
            if never_return is not None:
                faults["never_return"] = never_return
            live = read_json(np.boot_info, {}) or {}
            devices = live.get("rdma_devices", {})
            for dev in list(port_down) + list(port_up):
                self._device(name, devices, dev)
            rates = []
            for item in port_rate:
                dev, sep, rate = item.partition("=")
                if not sep or not RATE_RE.fullmatch(rate):
                    raise FleetError(f"--port-rate {item!r}: expected DEV=RATE as sysfs writes a port's rate, "
                                     "such as rocep145s0=200 Gb/sec (2X NDR)")
                self._device(name, devices, dev)
                if self.node_status(name).get("state") != "up":
                    raise FleetError(f"--port-rate: node {name} is not up (the rate lasts until its next boot)")
                rates.append((dev, rate))
            for dev in port_down:
                if dev not in faults["port_down"]:
                    faults["port_down"].append(dev)
            faults["port_down"] = [d for d in faults["port_down"] if d not in port_up]
            write_json(np.faults, faults)
            if self.node_status(name).get("state") == "up":
                for dev in port_down:
                    self._write_port_state(np, devices[dev], down=True)
                for dev in port_up:
                    self._write_port_state(np, devices[dev], down=False)
            for dev in bump:
                info = self._device(name, devices, dev)
                self._bump(np, info, nbytes)
            for dev, rate in rates:
                self._write_in_place(np.sysfs / devices[dev]["port_dir"] / "rate", rate + "\n")
            return faults

    @staticmethod
    def _device(node: str, devices: dict, dev: str) -> dict:
        if dev not in devices:
            raise FleetError(f"node {node} has no RDMA device {dev!r} in its current boot "
                             f"(devices: {', '.join(sorted(devices)) or 'none'})")
        return devices[dev]

    @staticmethod
    def _write_in_place(path: Path, text: str) -> None:
        # The file is an overlay lower-layer file the node has open: change its content, not its inode.
        with open(path, "r+", encoding="utf-8") as fh:
            fh.seek(0)
            fh.write(text)
            fh.truncate()

    def _write_port_state(self, np: NodePaths, info: dict, down: bool) -> None:
        port = np.sysfs / info["port_dir"]
        self._write_in_place(port / "state", "1: DOWN\n" if down else "4: ACTIVE\n")
        if (port / "phys_state").exists():
            self._write_in_place(port / "phys_state", "3: Disabled\n" if down else "5: LinkUp\n")

    def _bump(self, np: NodePaths, info: dict, nbytes: int) -> None:
        counters = np.sysfs / info["port_dir"] / "counters"
        words = max(1, nbytes // 4)
        packets = max(1, nbytes // 4096)
        for fname, add in (("port_xmit_data", words), ("port_rcv_data", words),
                           ("port_xmit_packets", packets), ("port_rcv_packets", packets)):
            path = counters / fname
            if path.exists():
                value = int(path.read_text().strip() or 0)
                self._write_in_place(path, f"{value + add}\n")

    # ------------------------------------------------------------------ inventory
    def inventory(self, reboot_timeout: int | None = None) -> dict:
        state = self.require()
        common_args = ("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes "
                       "-o LogLevel=ERROR -o ConnectTimeout=5")
        reboot = dict(REBOOT_DEFAULTS)
        if reboot_timeout is not None:
            reboot["gpufleet_reboot_timeout"] = reboot_timeout
        all_vars = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.paths.key),
            "ansible_ssh_common_args": common_args,
            "ansible_python_interpreter": "/usr/bin/python3",
            # SSH masters per fleet instance: a new fleet reusing an address never meets a stale master.
            "ansible_control_path_dir": str(self.paths.dir / "cp"),
            # Simulated nodes are disposable: the collection's roles may reboot them.
            "gpufleet_allow_reboot": True,
            "fleetsim_fleet": self.name,
            "fleetsim_boot_log": str(self.paths.boots),
        }
        all_vars.update(reboot)
        groups: dict[str, dict] = {}
        hardware: dict[str, set] = {}
        for name, node in sorted(state["nodes"].items(), key=lambda kv: kv[1]["seq"]):
            # fleetsim_profile: the simulated hardware of the node, for people and the harness; no role reads it.
            groups.setdefault(node["group"], {"hosts": {}})["hosts"][name] = {
                "ansible_host": node["ip"], "fleetsim_profile": node["profile"]}
            hardware.setdefault(node["group"], set()).add(node["profile"])
        for group, profiles in hardware.items():
            if len(profiles) == 1:
                with contextlib.suppress(fakehw.ProfileError):  # a profile file gone since `up`: no profile vars
                    groups[group]["vars"] = profile_vars(next(iter(profiles)))
        return {"all": {"vars": all_vars, "children": groups}}

    def write_inventory(self, output: str | None, reboot_timeout: int | None = None) -> str:
        text = "# Inventory of the simulated fleet %r (written by `python -m tools.fleetsim inventory`).\n" % self.name
        text += yaml.safe_dump(self.inventory(reboot_timeout), sort_keys=False, default_flow_style=False)
        if output:
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            Path(output).write_text(text, encoding="utf-8")
        return text

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        state = self.load()
        if not state:
            return {"fleet": self.name, "up": False, "nodes": {}}
        nodes = {}
        for name, node in sorted(state["nodes"].items(), key=lambda kv: kv[1]["seq"]):
            st = self.node_status(name)
            alive = self._supervisor_alive(node)
            nodes[name] = {"group": node["group"], "profile": node["profile"], "ip": node["ip"],
                           "state": st.get("state", "unknown") if alive else "dead",
                           "boot_id": st.get("boot_id"), "since": st.get("since")}
        return {"fleet": self.name, "up": True, "bridge": state["bridge"], "subnet": state["subnet"],
                "nodes": nodes}


def profile_vars(profile: str) -> dict:
    """The collection's profile of a harness group whose nodes share one hardware profile: ``gpufleet_profile`` (the
    hardware profile's name), ``gpufleet_gpu_family`` (its GPUs' family) and, where it has RDMA NICs,
    ``gpufleet_fabric`` (their link layer's fabric), so that the verify gates, the transport policies, the audit's
    expectations and the arch settings follow the simulated hardware. Written as group vars of the inventory file, the weakest variables of
    an inventory: a group that joins a profile of inventories/fleetsim takes that profile's group_vars instead."""
    prof = fakehw.load_profile(profile)
    out = {"gpufleet_profile": prof["name"], "gpufleet_gpu_family": fakehw.gpu_family(prof)}
    if fakehw.fabric(prof):
        out["gpufleet_fabric"] = fakehw.fabric(prof)
    return out


def boot_log(root: Path, fleet: str) -> list[dict]:
    path = FleetPaths(root, fleet).boots
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def leftovers(root: Path) -> dict:
    """Namespaces, links, mounts and processes of fleetsim that no live fleet accounts for."""
    live_ns, live_links, live_pids = set(), set(), set()
    for fleet, state in Fleet.all_states(root).items():
        fl = Fleet(root, fleet)
        if not fl._alive(state):
            continue
        live_links.add(state["bridge"])
        for name, node in state["nodes"].items():
            live_ns.add(node["netns"])
            live_links.add(node["veth"])
            live_links.add(peer_veth(fleet, name))
            if node.get("supervisor_pid"):
                live_pids.add(node["supervisor_pid"])
    out = {"netns": [], "links": [], "mounts": [], "processes": []}
    stale_ns = [ns for ns in netns_list() if ns.startswith("fsim-") and ns not in live_ns]
    out["netns"] = stale_ns
    for ns in netns_list():
        for pid in netns_pids(ns):
            if ns in live_ns:
                live_pids.add(pid)
            elif ns.startswith("fsim-"):
                out["processes"].append({"pid": pid, "netns": ns, "cmd": _cmdline(pid)})
    for name in sorted(os.listdir("/sys/class/net")):
        if name.startswith(("fsv", "fsp", "fsim")) and name not in live_links:
            out["links"].append(name)
    root_text = str(root) + "/"
    seen = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        cmd = _cmdline(pid)
        in_live = pid in live_pids or _in_live_ns(pid, live_ns)
        if (SUPERVISOR_NEEDLE in cmd or "tools.fleetsim.nodeinit" in cmd) and not in_live and proc_alive(pid):
            out["processes"].append({"pid": pid, "netns": None, "cmd": cmd})
        if in_live:
            continue
        try:
            mnt_ns = os.stat(f"/proc/{pid}/ns/mnt").st_ino
            with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            if " - " not in line:
                continue
            pre, post = line.split(" - ", 1)
            fields = pre.split(" ")
            mountpoint = fields[4] if len(fields) > 4 else ""
            source = post.split(" ")[1] if len(post.split(" ")) > 1 else ""
            if mountpoint.startswith("/run/netns/") and mountpoint[len("/run/netns/"):] in live_ns:
                continue
            ours = source.startswith("fsim-") or root_text in line or mountpoint.startswith("/run/netns/fsim-")
            if ours and (mnt_ns, mountpoint) not in seen:
                seen.add((mnt_ns, mountpoint))
                out["mounts"].append({"pid": pid, "mountpoint": mountpoint, "source": source})
    return out


def _in_live_ns(pid: int, live_ns: set) -> bool:
    try:
        mine = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return False
    for ns in live_ns:
        try:
            if os.stat(f"/run/netns/{ns}").st_ino == mine:
                return True
        except OSError:
            continue
    return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
