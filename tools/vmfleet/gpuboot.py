# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inside a vmfleet GPU guest, at every boot: fleetsim's simulated GPU node hardware on a real Debian guest.

Run by the image's ``vmfleet-gpu.service`` (GPU variant, ``vmfleet image --gpu``) as
``python3 -m tools.vmfleet.gpuboot`` from the host's ``tools/`` tree (virtio-9p, read-only), only on guests booted
with ``vmfleet.gpu=PROFILE:INDEX`` on the kernel command line (``vmfleet up --gpu-profile``). It does in the guest
what fleetsim's PID 1 does in a simulated node (``tools/fleetsim/nodeinit.py``), with the same code
(``tools.fleetsim.boot``): the boot plan read from the guest's own disk (the nvidia options of its modprobe.d, DOCA-OFED
installed or not, modules-load.d), the profile's PCI tree, GPUs, NICs and RDMA devices rendered and layered over
``/sys/{class,bus,devices}`` (read-only overlays above the real sysfs), ``/proc/driver/nvidia`` on a read-only tmpfs,
the profile's kernel modules as ``/proc/modules``, ``nvidia-smi``, ``modprobe``/``lsmod`` and the driver's libcuda
installed, and the fleetsim mirror (virtio-9p tag ``fleetsim-mirror``, read-only) at ``/srv/fleetsim-mirror`` as the
only apt source. Everything else is the real guest: its kernel, systemd, journald, sshd, dpkg, the machine-id and
host key of its disk, real reboots.

The boot record goes to ``/run/vmfleet-gpu/boot.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools.fleetsim import boot, fakehw
from tools.fleetsim.common import MIRROR_MOUNT, write_json
from tools.fleetsim.supervisor import NODE_TOOLS_INSTALLED, install_tools

RUN = Path("/run/vmfleet-gpu")
HW_JSON = Path("/etc/fleetsim/hardware.json")
MODULES_JSON = Path("/etc/fleetsim/modules.json")
PROC_MODULES = Path("/run/fleetsim/proc-modules")
LIBCUDA_CACHE = Path("/var/cache/vmfleet-gpu")
MIRROR_TAG = "fleetsim-mirror"
APT_SOURCES = ("# vmfleet GPU guest: packages come from the fleetsim mirror only (tools/vmfleet/gpuboot.py)\n"
               f"deb [trusted=yes] file:{MIRROR_MOUNT}/apt ./\n")
# The guest keeps its real systemctl, reboot and shutdown: only the hardware's tools are simulated.
GUEST_TOOLS = {rel: tool for rel, tool in NODE_TOOLS_INSTALLED.items()
               if tool in ("modprobe.py", "fleetsim-nic-traffic.py")}
COMMAND_TIMEOUT = 120


class GpuBootError(RuntimeError):
    pass


def cmdline_arg(cmdline: str, name: str) -> str | None:
    """The last ``vmfleet.<name>=VALUE`` of a kernel command line (None when absent)."""
    value = None
    for token in cmdline.split():
        if token.startswith(f"vmfleet.{name}="):
            value = token.split("=", 1)[1]
    return value


def parse_gpu(value: str | None) -> tuple[str, int]:
    """``PROFILE:INDEX`` (vmfleet.gpu) as (profile, index); refused naming the value and the expected form."""
    profile, sep, index = (value or "").partition(":")
    if not sep or not profile or not index.isdigit() or int(index) < 1:
        raise GpuBootError(f"vmfleet.gpu={value!r} is invalid: expected PROFILE:INDEX, e.g. gcp_b200:1 "
                           f"(one of the profiles {fakehw.list_profiles()}, INDEX a positive integer)")
    if profile not in fakehw.list_profiles():
        raise GpuBootError(f"vmfleet.gpu={value!r}: no profile {profile!r}: expected one of {fakehw.list_profiles()}")
    return profile, int(index)


def run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise GpuBootError(f"{' '.join(argv)}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")


def mounted(path: str) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return any(line.split()[4] == path for line in fh)


def mount_mirror(stand_in_torch: bool) -> None:
    os.makedirs(MIRROR_MOUNT, exist_ok=True)
    if not mounted(MIRROR_MOUNT):
        run("mount", "-t", "9p", "-o", "trans=virtio,version=9p2000.L,ro", MIRROR_TAG, MIRROR_MOUNT)
    wheels, standin = f"{MIRROR_MOUNT}/wheels", f"{MIRROR_MOUNT}/wheels-standin"
    if stand_in_torch and os.path.isdir(standin) and not mounted(wheels):
        run("mount", "--bind", standin, wheels)


def render(profile_name: str, index: int) -> dict:
    profile = fakehw.load_profile(profile_name)
    plan = boot.plan_boot("/", profile, {})
    sysfs, proc = RUN / "sysfs", RUN / "proc"
    for sub in (sysfs, proc):
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir(parents=True)
    HW_JSON.parent.mkdir(parents=True, exist_ok=True)
    rendered = boot.render_boot(profile, plan, sysfs, proc, HW_JSON, index)
    write_json(MODULES_JSON, boot.modules_state(profile, plan))
    for sub in ("class", "bus", "devices"):
        lower = sysfs / sub
        if lower.is_dir() and not mounted(f"/sys/{sub}"):
            run("mount", "-t", "overlay", f"vmfleet-sys-{sub}", "-o", f"ro,lowerdir={lower}:/sys/{sub}", f"/sys/{sub}")
    if not mounted("/proc/driver"):
        run("mount", "-t", "tmpfs", "-o", "size=1m,mode=755", "vmfleet-driver", "/proc/driver")
        if rendered["nvidia_loaded"]:
            os.makedirs("/proc/driver/nvidia", mode=0o755)
            for item in proc.iterdir():
                shutil.copyfile(item, f"/proc/driver/nvidia/{item.name}")
                os.chmod(f"/proc/driver/nvidia/{item.name}", 0o444)
        run("mount", "-o", "remount,ro", "/proc/driver")
    PROC_MODULES.parent.mkdir(parents=True, exist_ok=True)
    PROC_MODULES.write_text(boot.proc_modules(profile, plan), encoding="utf-8")
    if not mounted("/proc/modules"):
        run("mount", "--bind", str(PROC_MODULES), "/proc/modules")
    install_tools(Path("/"), GUEST_TOOLS)
    fakehw.install_fake_nvidia_smi("/usr/bin/nvidia-smi")
    fakehw.install_fake_libcuda("/", profile, LIBCUDA_CACHE)
    Path("/etc/apt/sources.list").write_text(APT_SOURCES, encoding="utf-8")
    return {"profile": profile_name, "index": index, "nic_naming": plan["nic_naming"], "doca_ofed": plan["doca_ofed"],
            "nvidia_options": plan["nvidia_options"], "nvidia_loaded": rendered["nvidia_loaded"],
            "nvidia_warnings": rendered["nvidia_warnings"], "modules_loaded": plan["modules_loaded"],
            "rdma_devices": sorted(rendered["rdma_devices"])}


def main() -> int:
    cmdline = Path("/proc/cmdline").read_text(encoding="utf-8")
    try:
        profile, index = parse_gpu(cmdline_arg(cmdline, "gpu"))
        mount_mirror(cmdline_arg(cmdline, "torch") != "real")
        record = render(profile, index)
    except (GpuBootError, fakehw.ProfileError, OSError, subprocess.SubprocessError) as exc:
        print(f"vmfleet-gpu: {exc}", file=sys.stderr)
        return 1
    RUN.mkdir(parents=True, exist_ok=True)
    write_json(RUN / "boot.json", record)
    print("vmfleet-gpu: " + json.dumps(record, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
