# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PID 1 of a simulated node: one boot, from mounts to sshd, then reap children until power-off.

Started by the node's supervisor as
``ip netns exec NS unshare --mount --propagation private --pid --fork --mount-proc --uts --kill-child
<python> -m tools.fleetsim.nodeinit NODE_DIR``. Everything it mounts lives in the node's private mount
namespace and disappears with it, so each boot starts from the host's view again.

Signals (sent by the node's ``reboot``/``shutdown``/``poweroff`` or by the host): SIGTERM powers the
node off for a reboot, SIGUSR1 powers it off for good (exit status ``HALT_EXIT``). When PID 1 exits,
the kernel kills every other process of the node.
"""

from __future__ import annotations

import encodings.idna
import glob
import json
import os
import shutil
import stat
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

from tools import pycode_cache, pyzygote
from tools.fleetsim import boot, fakehw, systemd
from tools.fleetsim.common import (BOOTED_TAG, HALT_EXIT, MASKED_PATHS, MIRROR_MOUNT, OVERLAID, PYCODE_CACHE_MOUNT,
                                   PYZYGOTE_MOUNT, PYZYGOTE_SOCKET, NodePaths, read_json, write_json)

# Loaded now because the host's Python library is masked once the node has booted (socket needs it).
PRELOADED = (encodings.idna,)
SSHD_PATH = "/usr/sbin/sshd"
UPPER_FD: list[int] = []
# Where a boot puts the hooks its sitecustomize imports (pycode_cache.py, pyzygote.py).
HOOK_DIR = os.path.join(os.path.dirname(PYCODE_CACHE_MOUNT), "pycode-hook")
# How often a boot starts the fork server of module runs again after it ended (start_zygote).
ZYGOTE_RESTARTS = 3
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def log(msg: str) -> None:
    sys.stderr.write(f"[init] {msg}\n")
    sys.stderr.flush()


def run(*argv: str) -> None:
    proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=CLEAN_ENV, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc={proc.returncode}: {proc.stdout.strip()}")


def mount(*args: str) -> None:
    run("mount", *args)


def ro_remount(path: str, bind: bool = True) -> None:
    opts = "remount,bind,ro" if bind else "remount,ro"
    mount("-o", opts, path)


def first_boot_identity(name: str, etc: str = "/etc") -> bool:
    """What systemd and sshd do at the first boot of an image: an empty (or missing) machine-id gets a fresh one
    (systemd-machine-id-setup), missing host keys are generated (sshd-keygen). True when anything was made."""
    made = False
    mid = Path(etc) / "machine-id"
    if not mid.exists() or not mid.read_text(encoding="utf-8").strip():
        mid.write_text(uuid.uuid4().hex + "\n", encoding="utf-8")
        made = True
    key = Path(etc) / "ssh/ssh_host_ed25519_key"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(key))
        made = True
    return made


def install_pycode_cache(host_dir: str | None, stdlib_glob: str = "/usr/lib/python3.*/sitecustomize.py",
                         zygote_tree: str | None = None) -> list[str]:
    """The fleet's shared bytecode cache of module payloads (tools/pycode_cache.py) in this boot: the host's cache dir
    at PYCODE_CACHE_MOUNT, and each system Python's sitecustomize (Debian's, a link to /etc/python3.X/) extended to
    install the hook, both as bind mounts of this boot (nothing lands in the node's disk or its images). With
    ``zygote_tree`` (the host's copy of ansible-core for tools/pyzygote.py, at PYZYGOTE_MOUNT), the sitecustomize also
    hands module runs of the system Python to the node's fork server (start_zygote). Returns the sitecustomize files
    extended; none where the host's Python has no sitecustomize to extend (nodes then compile every payload and import
    ansible-core at every run, as without the hooks)."""
    use_cache = bool(host_dir) and os.path.isdir(host_dir)
    use_zygote = bool(zygote_tree) and os.path.isdir(zygote_tree)
    if not use_cache and not use_zygote:
        return []
    sites = sorted({os.path.realpath(p) for p in glob.glob(stdlib_glob) if os.path.isfile(p)})
    if not sites:
        return []
    hook = HOOK_DIR
    os.makedirs(hook, exist_ok=True)
    if use_cache:
        os.makedirs(PYCODE_CACHE_MOUNT, exist_ok=True)
        mount("--bind", host_dir, PYCODE_CACHE_MOUNT)
        shutil.copyfile(pycode_cache.__file__, os.path.join(hook, "pycode_cache.py"))
    if use_zygote:
        os.makedirs(PYZYGOTE_MOUNT, exist_ok=True)
        mount("--bind", zygote_tree, PYZYGOTE_MOUNT)
        ro_remount(PYZYGOTE_MOUNT)
        shutil.copyfile(pyzygote.__file__, os.path.join(hook, "pyzygote.py"))
    for n, site in enumerate(sites):
        extended = os.path.join(os.path.dirname(PYCODE_CACHE_MOUNT), f"sitecustomize-{n}.py")
        with open(site, encoding="utf-8") as src, open(extended, "w", encoding="utf-8") as dst:
            text = src.read()
            if use_cache:
                text = pycode_cache.site_hook(text, hook, PYCODE_CACHE_MOUNT, "fleetsim, this boot only")
            if use_zygote:
                text = pyzygote.site_hook(text, hook, PYZYGOTE_SOCKET, "fleetsim, this boot only")
            dst.write(text)
        mount("--bind", extended, site)
        ro_remount(site)
    return sites


def start_zygote(console_fd: int, python: str = "/usr/bin/python3") -> subprocess.Popen | None:
    """The node's fork server of module runs (tools/pyzygote.py), when this boot mounted its ansible-core copy: the
    system Python's module runs (the sitecustomize's hook) start from its preloaded imports. None without it."""
    script = os.path.join(HOOK_DIR, "pyzygote.py")
    if not os.path.isfile(os.path.join(PYZYGOTE_MOUNT, pyzygote.RELEASE)) or not os.path.isfile(script):
        return None
    return subprocess.Popen([python, script, "--socket", PYZYGOTE_SOCKET, "--tree", PYZYGOTE_MOUNT],
                            stdin=subprocess.DEVNULL, stdout=console_fd, stderr=console_fd, env=CLEAN_ENV,
                            close_fds=True, cwd="/")


# The verbs character devices (ib_uverbs' misc class, major 231, minors from 192) of the node's RDMA devices, in a
# /dev/infiniband of the node's own: the host's /dev is shared by every node (no device of its own otherwise), so an
# empty directory is made there once as the mount point and each node mounts a tmpfs of its own over it.
UVERBS_MAJOR, UVERBS_MINOR_BASE = 231, 192


def render_dev_infiniband(devices):
    """/dev/infiniband/uverbs<N> for each of the node's RDMA devices (none: the directory stays empty)."""
    os.makedirs("/dev/infiniband", exist_ok=True)
    mount("-t", "tmpfs", "-o", "size=64k,mode=755", "fsim-infiniband", "/dev/infiniband")
    for index, dummy in enumerate(devices):
        os.mknod("/dev/infiniband/uverbs%d" % index, 0o666 | stat.S_IFCHR,
                 os.makedev(UVERBS_MAJOR, UVERBS_MINOR_BASE + index))


# The IMEX channel (GB200/GB300 NVL72): the driver registers the nvidia-caps-imex-channels character device and, with
# NVreg_CreateImexChannel0=1, makes channel 0 at load (open-gpu-kernel-modules). The node's /proc/devices says so
# (procfs is the host's: a file of the node's own is bound over it) and its /dev/nvidia-caps-imex-channels holds it.
IMEX_MAJOR, IMEX_DEVICES = 509, "nvidia-caps-imex-channels"


def imex_channel_asked(params_path):
    """Whether the driver's parameters (the node's rendered /proc/driver/nvidia/params) say CreateImexChannel0: 1."""
    try:
        with open(params_path, encoding="utf-8") as fh:
            return any(line.split(":", 1)[1].strip() == "1" for line in fh if line.startswith("CreateImexChannel0:"))
    except OSError:
        return False


def render_imex_channel(made):
    """/proc/devices with the IMEX channels' device where the driver is loaded; channel0 where ``made``."""
    try:
        with open("/proc/devices", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return
    if made and IMEX_DEVICES not in text:
        text = text.replace("\n\nBlock devices:", "\n%3d %s\n\nBlock devices:" % (IMEX_MAJOR, IMEX_DEVICES), 1)
    with open("/run/fleetsim/proc-devices", "w", encoding="utf-8") as fh:
        fh.write(text)
    mount("--bind", "/run/fleetsim/proc-devices", "/proc/devices")
    ro_remount("/proc/devices")
    os.makedirs("/dev/nvidia-caps-imex-channels", exist_ok=True)
    mount("-t", "tmpfs", "-o", "size=64k,mode=755", "fsim-imex", "/dev/nvidia-caps-imex-channels")
    if made:
        os.mknod("/dev/nvidia-caps-imex-channels/channel0", 0o666 | stat.S_IFCHR, os.makedev(IMEX_MAJOR, 0))


def setup(paths: NodePaths, cfg: dict) -> dict:
    """Everything of a boot up to (not including) sshd. Returns the boot record."""
    mount("--make-rprivate", "/")

    # Copy-on-write views of the host's /etc /opt /usr /var: this node's writes go to its upper dirs.
    for name in OVERLAID:
        upper = paths.upper / name
        work = paths.work / name
        # volatile: no sync of the host's file system when the node powers off (a simulated disk
        # need not survive a host crash), which makes reboots and `down` fast on a busy host.
        mount("-t", "overlay", f"fsim-{name}", "-o",
              f"lowerdir=/{name},upperdir={upper},workdir={work},volatile", f"/{name}")

    first_boot = first_boot_identity(cfg["name"])

    # The boot: read the node's own configuration (now visible at the real paths) and render hardware.
    profile = fakehw.load_profile(cfg["profile"])
    faults = read_json(paths.faults, {}) or {}
    plan = boot.plan_boot("/", profile, faults)
    for sub in (paths.sysfs, paths.proc):
        if sub.exists():
            shutil.rmtree(sub)
        sub.mkdir(parents=True)
    rendered = boot.render_boot(profile, plan, paths.sysfs, paths.proc, Path("/etc/fleetsim/hardware.json"),
                                cfg["index"])
    write_json(Path("/etc/fleetsim/modules.json"), boot.modules_state(profile, plan))

    # Fake hardware at the real paths, read-only to the node (the host may still change the files).
    # /sys is the node network namespace's own sysfs (mounted by `ip netns exec`), so /sys/class/net
    # shows the node's interfaces; the rendered tree is layered on top of it.
    for sub in ("class", "bus", "devices"):
        lower = paths.sysfs / sub
        if lower.is_dir():
            mount("-t", "overlay", f"fsim-sys-{sub}", "-o", f"ro,lowerdir={lower}:/sys/{sub}", f"/sys/{sub}")
    mount("-t", "tmpfs", "-o", "size=1m,mode=755", "fsim-driver", "/proc/driver")
    if rendered["nvidia_loaded"]:
        os.makedirs("/proc/driver/nvidia", mode=0o755)
        for item in paths.proc.iterdir():
            shutil.copyfile(item, f"/proc/driver/nvidia/{item.name}")
            os.chmod(f"/proc/driver/nvidia/{item.name}", 0o444)
    mount("-o", "remount,ro", "/proc/driver")

    render_dev_infiniband(sorted(rendered["rdma_devices"]))

    boot_id = str(uuid.uuid4())
    paths.boot_id.write_text(boot_id + "\n", encoding="utf-8")
    mount("--bind", str(paths.boot_id), "/proc/sys/kernel/random/boot_id")
    ro_remount("/proc/sys/kernel/random/boot_id")

    # Per-boot /run, the node's own /tmp and /root.
    mount("-t", "tmpfs", "-o", "mode=755,size=64m", "fsim-run", "/run")
    for d in ("/run/sshd", "/run/lock", "/run/fleetsim"):
        os.makedirs(d, exist_ok=True)
    os.chmod("/run/sshd", 0o755)
    install_pycode_cache(cfg.get("pycode_cache"), zygote_tree=cfg.get("pyzygote_tree"))
    with open("/run/fleetsim/proc-modules", "w", encoding="utf-8") as fh:
        fh.write(boot.proc_modules(profile, plan))
    if os.path.exists("/proc/modules"):  # absent on kernels without module support
        mount("--bind", "/run/fleetsim/proc-modules", "/proc/modules")
        ro_remount("/proc/modules")
    # kernel.numa_balancing is the host kernel's own (procfs is not namespaced): each node reads and writes a file of
    # its own there, 0 (as DeepEP asks) unless the node's faults say otherwise ({"numa_balancing": 1}).
    if os.path.exists("/proc/sys/kernel/numa_balancing"):
        with open("/run/fleetsim/numa_balancing", "w", encoding="utf-8") as fh:
            fh.write("%d\n" % int(faults.get("numa_balancing", 0)))
        mount("--bind", "/run/fleetsim/numa_balancing", "/proc/sys/kernel/numa_balancing")
    render_imex_channel(rendered["nvidia_loaded"] and imex_channel_asked(paths.proc / "params"))
    mount("--bind", str(paths.tmp), "/tmp")
    os.chmod("/tmp", 0o1777)
    mount("--bind", str(paths.root_home), "/root")

    record = {
        "boot_id": boot_id,
        "nic_naming": plan["nic_naming"],
        "doca_ofed": plan["doca_ofed"],
        "nvidia_options": plan["nvidia_options"],
        "nvidia_loaded": rendered["nvidia_loaded"],
        "nvidia_warnings": rendered["nvidia_warnings"],
        "port_states": plan["port_states"],
        "modules_loaded": plan["modules_loaded"],
        "rdma_devices": rendered["rdma_devices"],
        "first_boot": first_boot,
    }
    write_json(paths.boot_info, record)

    # The mirror, read-only, and nothing else of the host's /srv, /home, ... nor any fleet's state.
    mirror = cfg.get("mirror")
    staged = "/run/fleetsim/mirror"
    if mirror and os.path.isdir(mirror):
        os.makedirs(staged)
        mount("--bind", mirror, staged)
    # The node's own upper layer, kept open for the service manager (the state dir is masked below): units enabled in
    # the node are those whose links lie there.
    UPPER_FD.append(os.open(str(paths.upper), os.O_RDONLY | os.O_DIRECTORY))
    masked = []
    for path in list(MASKED_PATHS) + [cfg["state_root"]]:
        if os.path.isdir(path) and os.path.realpath(path) != "/":
            mount("-t", "tmpfs", "-o", "size=1m,mode=755", "fsim-masked", path)
            masked.append(path)
    os.makedirs(MIRROR_MOUNT, exist_ok=True)
    if os.path.isdir(staged):
        mount("--move", staged, MIRROR_MOUNT)
        ro_remount(MIRROR_MOUNT)
        os.rmdir(staged)
        # A node started with `fleetsim up --torch stand-in` finds the stand-in torch in wheels/ (mirror.py).
        standin = os.path.join(MIRROR_MOUNT, "wheels-standin")
        if cfg.get("torch") == "stand-in" and os.path.isdir(standin):
            mount("--bind", standin, os.path.join(MIRROR_MOUNT, "wheels"))
            ro_remount(os.path.join(MIRROR_MOUNT, "wheels"))
    for path in masked:
        ro_remount(path, bind=False)

    socket.sethostname(cfg["name"])
    run("ip", "link", "set", "lo", "up")
    return record


def start_sshd(console_fd: int) -> subprocess.Popen:
    return subprocess.Popen([SSHD_PATH, "-D", "-e", "-f", "/etc/ssh/sshd_config"], stdin=subprocess.DEVNULL,
                            stdout=console_fd, stderr=console_fd, env=CLEAN_ENV, close_fds=True,
                            cwd="/")


def wait_listening(port: int = 22) -> None:
    """Wait until a socket of this network namespace listens on ``port`` (read from /proc/net/tcp)."""
    want = f":{port:04X}".encode()
    while True:
        with open("/proc/net/tcp", "rb") as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[1].endswith(want) and fields[3] == b"0A":
                    return
        time.sleep(0.02)


def main() -> int:
    node_dir = Path(sys.argv[1])
    paths = NodePaths(node_dir)
    cfg = read_json(paths.config)

    def power_off(signum, _frame):
        os._exit(HALT_EXIT if signum == signal.SIGUSR1 else 0)

    signal.signal(signal.SIGTERM, power_off)
    signal.signal(signal.SIGUSR1, power_off)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    console_fd = os.open(paths.console, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        record = setup(paths, cfg)
    except Exception:  # report any boot failure on the console; the node stays "off"
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    os.chdir("/")
    zygote = start_zygote(console_fd)
    zygote_restarts = 0
    sshd = start_sshd(console_fd)
    wait_listening()
    # The systemd stand-in (tools/fleetsim/systemd.py): systemctl's socket, then the units enabled for boot.
    # Units enabled inside this node (their links are in its own /etc layer) start at boot, from a thread once the
    # reaper below runs; the host image's own enabled units (ssh, cron, ...) are not the node's.
    manager = systemd.ServiceManager("/", log=log)
    manager.serve()

    def start_enabled():
        try:
            manager.boot(enabled_in=Path(f"/proc/self/fd/{UPPER_FD[0]}"))
        except Exception:  # pylint: disable=broad-except  # a bad unit must not keep the node from booting
            traceback.print_exc()

    threading.Thread(target=start_enabled, name="systemd-boot", daemon=True).start()
    sys.stdout.write(f"{BOOTED_TAG} {json.dumps(record, sort_keys=True)}\n")
    sys.stdout.flush()
    # The supervisor reads nothing more from us; keep stdout from blocking if it stops reading.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(1)
            continue
        except InterruptedError:
            continue
        if pid == sshd.pid:
            time.sleep(1)
            sshd = start_sshd(console_fd)
            sshd.returncode = None
        elif zygote is not None and pid == zygote.pid:  # module runs go to python3 meanwhile (the hook's fallback)
            zygote_restarts += 1
            if zygote_restarts > ZYGOTE_RESTARTS:  # a server that cannot start must not burn the node's CPU
                log(f"the module runs' fork server ended {zygote_restarts} times; module runs use python3 itself")
                zygote = None
                continue
            time.sleep(1)
            zygote = start_zygote(console_fd)
        else:
            manager.child_exited(pid, status)


if __name__ == "__main__":
    sys.exit(main())
