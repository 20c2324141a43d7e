# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The guest image: Debian bookworm by debootstrap, built once per package list and guest files.

The image lives in ``build/vm/image-<key>/`` (``rootfs.img`` a sparse raw ext4 file system, ``vmlinuz`` and
``initrd.img`` for QEMU's direct kernel boot), where ``key`` is the sha256 of the suite, the package list and the
files installed into the guest: a changed list builds a new image, an unchanged one is reused. The image is
built in a temporary directory and renamed into place when complete, under a lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from tools import pycode_cache, pyzygote
from tools.vmfleet.common import BUILD_DIR, Stages, VmError, run

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
IMAGE_SIZE = "3G"
GUEST = Path(__file__).resolve().parent / "guest"
# A virtualenv of the system Python in every image: the realvm scenario's engines run from it (sglang_serve_python).
SERVING_VENV = "/opt/sglang-venv"
# dbus: ansible.builtin.reboot runs `shutdown -r 0 MSG`, which schedules the reboot through logind over D-Bus
# ("Failed to connect to bus" without it, as on a minbase system).
PACKAGES = (
    "systemd-sysv", "udev", "openssh-server", "iproute2", "python3", "rdma-core", "ibverbs-utils",
    "ibverbs-providers", "perftest", "kmod", "python3-venv", "python3-packaging", "ifupdown", "isc-dhcp-client", "linux-image-amd64", "dbus",
    "initramfs-tools",
)
# Where each guest file goes in the image, and its mode.
GUEST_FILES = {
    "vmfleet-identity": ("usr/local/sbin/vmfleet-identity", 0o755),
    "vmfleet-identity.service": ("etc/systemd/system/vmfleet-identity.service", 0o644),
    "vmfleet-rxe.service": ("etc/systemd/system/vmfleet-rxe.service", 0o644),
    "interfaces": ("etc/network/interfaces", 0o644),
    "sshd.conf": ("etc/ssh/sshd_config.d/vmfleet.conf", 0o644),
    "vmfleet-pyzygote.service": ("etc/systemd/system/vmfleet-pyzygote.service", 0o644),
}
# The bytecode cache of compiled sources (tools/pycode_cache.py), loaded by the guest Python's sitecustomize (every
# Python, virtualenvs' too) and kept in PYCODE_CACHE. Under emulation, compiling each Ansible module's zipped code again
# was most of a module run, and each new virtualenv compiled pip's files: the guest compiles each source once. The image
# build fills the cache natively (a throwaway virtualenv in the chroot: pip's and setuptools' sources), so the guests'
# virtualenvs start warm.
TOOLS = GUEST.parents[1]
TOOLS_FILES = {
    "pycode_cache.py": ("usr/local/lib/vmfleet/pycode_cache.py", 0o644),
    "pyzygote.py": ("usr/local/lib/vmfleet/pyzygote.py", 0o644),
}
# The fork server of module runs (tools/pyzygote.py, unit vmfleet-pyzygote.service) and its client, the guests'
# ansible_python_interpreter (guest/vmfleet-python3.c, built static here): importing ansible-core's module_utils
# was 2.8 s of a 3.8 s `ping` under emulation, every run; the server imports them once from a copy of the
# controller's ansible-core module_utils (ZYGOTE_TREE, compiled natively, its files in the key).
CLIENT_SOURCE = GUEST / "vmfleet-python3.c"
CLIENT = "usr/local/bin/vmfleet-python3"
ZYGOTE_TREE = "usr/local/lib/vmfleet/ansible-core"
PYCODE_CACHE = "var/cache/vmfleet-pycode"
# Units that only slow a disposable guest's boot down.
# e2scrub_reap (it looks for e2scrub's LVM snapshots at each boot): 33-81 s of an emulated guest's one vCPU per boot.
MASKED = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer",
          "systemd-timesyncd.service", "getty@tty1.service")
# What the initramfs loads to mount the root file system (QEMU's virtio disk, ext4), with their dependencies: only
# these (MODULES=list), where Debian's MODULES=most made a 36 MB initramfs whose unpacking under emulation made the
# kernel's part of a boot 54 s instead of 30 s (measured on a loaded machine).
INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "ext4")
# The GPU variant (`vmfleet image --gpu`, guests of `vmfleet up --gpu-profile`): a real guest that runs fleetsim's
# simulated GPU hardware (tools/vmfleet/gpuboot.py renders it at each boot), so that playbooks/site.yml converges it
# whole. It adds what a GPU node's builds need (the collection's build phases and fleetsim's fixture builds), PyYAML for
# the profiles, and the boot unit; soft-RoCE is not enabled there (the profile's NICs are the node's RDMA devices).
GPU_PACKAGES = PACKAGES + (
    "build-essential", "cmake", "ninja-build", "git", "python3-dev", "python3-yaml", "python3-pip", "pciutils",
    "procps", "libibverbs-dev", "librdmacm-dev", "file", "python3-apt", "python3-setuptools", "unzip", "xz-utils",
)
GPU_GUEST_FILES = {
    "vmfleet-gpu.service": ("etc/systemd/system/vmfleet-gpu.service", 0o644),
}
LOCK_TIMEOUT = 1800
DEBOOTSTRAP_TIMEOUT = 1200


def variant(gpu: bool = False) -> tuple[tuple[str, ...], dict]:
    """The package list and guest files of the base image, or of its GPU variant."""
    if gpu:
        return GPU_PACKAGES, {**GUEST_FILES, **GPU_GUEST_FILES}
    return PACKAGES, GUEST_FILES


def _units(files: dict) -> list[str]:
    """The units an image enables: the identity unit always; soft-RoCE on the base image, the GPU unit instead."""
    if "vmfleet-gpu.service" in files:
        return ["vmfleet-identity.service", "vmfleet-pyzygote.service", "vmfleet-gpu.service"]
    return ["vmfleet-identity.service", "vmfleet-pyzygote.service", "vmfleet-rxe.service"]


def image_key(packages: tuple[str, ...] = PACKAGES, files: dict | None = None) -> str:
    files = GUEST_FILES if files is None else files
    digest = hashlib.sha256()
    digest.update(json.dumps({"suite": SUITE, "mirror": MIRROR, "size": IMAGE_SIZE,
                              "packages": sorted(packages), "masked": MASKED, "venv": SERVING_VENV,
                              "initramfs": INITRAMFS_MODULES}).encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + (GUEST / name).read_bytes() + b"\0")
    for name in sorted(TOOLS_FILES):
        digest.update(b"tools/" + name.encode() + b"\0" + (TOOLS / name).read_bytes() + b"\0")
    digest.update(b"client\0" + CLIENT_SOURCE.read_bytes() + b"\0")
    digest.update(b"ansible-core\0" + pyzygote.tree_key(pyzygote.ansible_core_tree()).encode() + b"\0")
    if _units(files) != _units(GUEST_FILES):
        digest.update(json.dumps(_units(files)).encode())
    return digest.hexdigest()[:16]


def image_dir(packages: tuple[str, ...] = PACKAGES, files: dict | None = None) -> Path:
    return BUILD_DIR / f"image-{image_key(packages, files)}"


def _lock(path: Path, timeout: float):
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise VmError(f"another image build holds {path} for more than {timeout:.0f} s") from None
            time.sleep(2)


def ensure_image(stages: Stages, packages: tuple[str, ...] = PACKAGES, files: dict | None = None) -> Path:
    """The image directory for packages and guest files, built when missing."""
    files = GUEST_FILES if files is None else files
    final = image_dir(packages, files)
    if (final / "DONE").exists():
        stages.say(f"vmfleet: image {final.name} cached")
        return final
    with _lock(BUILD_DIR / ".image.lock", LOCK_TIMEOUT):
        if (final / "DONE").exists():
            return final
        work = BUILD_DIR / f"tmp-{final.name}"
        shutil.rmtree(work, ignore_errors=True)
        root = work / "root"
        root.mkdir(parents=True)
        try:
            _build(stages, packages, files, work, root)
            shutil.rmtree(root)
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        finally:
            if work.exists():
                _umount_all(root)
                shutil.rmtree(work, ignore_errors=True)
    # Older images (other package lists) are left for `vmfleet prune`.
    return final


def _umount_all(root: Path) -> None:
    for sub in ("dev/pts", "dev", "proc", "sys"):
        run(["umount", "-l", str(root / sub)], timeout=30, check=False)


def _install_pycode_cache(root: Path) -> None:
    """The cache's hook in each system Python's sitecustomize of the image (Debian's, a link into /etc/python3.X/),
    then the cache filled by the serving virtualenv (SERVING_VENV) made in the chroot."""
    (root / PYCODE_CACHE).mkdir(mode=0o700, parents=True, exist_ok=True)
    sites = sorted(root.glob("usr/lib/python3.*/sitecustomize.py"))
    if not sites:
        raise VmError(f"no sitecustomize.py under {root / 'usr/lib'} to load the bytecode cache from")
    for site in sites:
        target = site
        if site.is_symlink():  # Debian's points into /etc/python3.X/ (absolute: inside the image, not the host)
            link = Path(os.readlink(site))
            target = root / link.relative_to("/") if link.is_absolute() else site.parent / link
        target.write_text(pycode_cache.site_hook(target.read_text(encoding="utf-8"),
                                                 "/" + os.path.dirname(TOOLS_FILES["pycode_cache.py"][0]),
                                                 "/" + PYCODE_CACHE,
                                                 "vmfleet image"), encoding="utf-8")
    # Made natively here, it fills the cache (pip's and setuptools' modules, 649 entries) and stays as the serving
    # virtualenv of the realvm scenario: made on an emulated guest, its ensurepip run took ~100 s (the engines'
    # SGLang is then installed into it by the scenario's prepare, as on any node).
    run(["chroot", str(root), "/usr/bin/python3", "-m", "venv", SERVING_VENV], timeout=600)


def client_build(output: Path) -> list[str]:
    """The command that builds the client (static, warnings as errors) into ``output``."""
    return ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o", str(output), str(CLIENT_SOURCE)]


def _install_zygote(root: Path) -> None:
    """The fork server's ansible-core copy (compiled natively in the chroot) and its client (static, from
    CLIENT_SOURCE)."""
    pyzygote.write_tree(str(root / ZYGOTE_TREE), pyzygote.ansible_core_tree())
    run(["chroot", str(root), "/usr/bin/python3", "-m", "compileall", "-q", "/" + ZYGOTE_TREE], timeout=600)
    client = root / CLIENT
    client.parent.mkdir(parents=True, exist_ok=True)
    run(client_build(client), timeout=300)
    client.chmod(0o755)


def _build(stages: Stages, packages: tuple[str, ...], files: dict, work: Path, root: Path) -> None:
    with stages.stage("image: debootstrap"):
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages), SUITE, str(root), MIRROR],
            timeout=DEBOOTSTRAP_TIMEOUT)
    with stages.stage("image: configure"):
        sources = [(GUEST / name, dest, mode) for name, (dest, mode) in files.items()]
        sources += [(TOOLS / name, dest, mode) for name, (dest, mode) in TOOLS_FILES.items()]
        for source, dest, mode in sources:
            target = root / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            target.chmod(mode)
        _install_pycode_cache(root)
        _install_zygote(root)
        (root / "etc/fstab").write_text("/dev/vda / ext4 defaults,errors=remount-ro 0 1\n", encoding="utf-8")
        (root / "etc/hostname").write_text("vmfleet\n", encoding="utf-8")
        # An empty machine-id: systemd draws a new one at each overlay's first boot and keeps it.
        (root / "etc/machine-id").write_text("", encoding="utf-8")
        dbus_id = root / "var/lib/dbus/machine-id"
        if dbus_id.exists() or dbus_id.is_symlink():
            dbus_id.unlink()
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        run(["chroot", str(root), "systemctl", "enable", *_units(files)], timeout=60)
        run(["chroot", str(root), "systemctl", "mask", *MASKED], timeout=60)
        (root / "etc/initramfs-tools/conf.d/vmfleet.conf").write_text("MODULES=list\n", encoding="utf-8")
        with open(root / "etc/initramfs-tools/modules", "a", encoding="utf-8") as modules:
            modules.write("".join(name + "\n" for name in INITRAMFS_MODULES))
        run(["chroot", str(root), "update-initramfs", "-u", "-k", "all"], timeout=600)
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        initrds = sorted((root / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise VmError(f"no kernel or initramfs under {root / 'boot'} after debootstrap")
        shutil.copyfile(kernels[-1], work / "vmlinuz")
        shutil.copyfile(initrds[-1], work / "initrd.img")
        run(["chroot", str(root), "apt-get", "clean"], timeout=120)
    with stages.stage("image: mkfs.ext4 -d"):
        run(["mkfs.ext4", "-q", "-L", "vmroot", "-d", str(root), str(work / "rootfs.img"), IMAGE_SIZE], timeout=600)
    (work / "packages.txt").write_text("\n".join(sorted(packages)) + "\n", encoding="utf-8")
    (work / "kernel.txt").write_text(kernels[-1].name.removeprefix("vmlinuz-") + "\n", encoding="utf-8")
    (work / "DONE").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n", encoding="utf-8")
