# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a simulated node's "kernel" decides at boot, from the node's own files (pure logic).

``plan_boot(root, profile, faults)`` reads the node's view of its file system under ``root`` (``/``
inside the node, a plain directory in unit tests) and returns the boot decisions; ``render_boot``
then writes the fake hardware for that boot with ``fakehw``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tools.fleetsim import fakehw, modprobe_conf

DOCA_MARKERS = ("etc/fleetsim/doca-ofed-installed",)
DOCA_PACKAGES = ("doca-ofed", "doca-all", "doca-roce")
PEERMEM = "nvidia_peermem"


def dpkg_installed(root: str | os.PathLike, package: str) -> bool:
    """True when ``package`` is installed according to ``var/lib/dpkg/status`` under ``root``."""
    status = Path(root) / "var/lib/dpkg/status"
    try:
        text = status.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for stanza in text.split("\n\n"):
        name = state = None
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("Status:"):
                state = line.split(":", 1)[1].strip()
        if name == package and state and state.endswith(" installed") and state.split()[0] == "install":
            return True
    return False


def doca_ofed_installed(root: str | os.PathLike) -> bool:
    if any((Path(root) / marker).exists() for marker in DOCA_MARKERS):
        return True
    return any(dpkg_installed(root, pkg) for pkg in DOCA_PACKAGES)


def plan_boot(root: str | os.PathLike, profile: dict, faults: dict | None = None) -> dict:
    """The boot decisions for a node whose file system is at ``root``.

    Returns ``nvidia_options`` (``[(name, value)]`` pairs for the nvidia module, as the kernel gets
    them from modprobe configuration), ``nic_naming`` (``mlx5`` once DOCA-OFED is installed and the
    profile's NICs rename under it), ``port_states`` (fault knobs), ``doca_ofed`` and
    ``modules_loaded`` (extra modules loaded at boot from ``modules-load.d``; ``nvidia_peermem`` only
    when it can load).
    """
    faults = faults or {}
    params = modprobe_conf.read_module_params("nvidia", root)
    options = [(name, value) for name, value in params.items() if value is not None]
    doca = doca_ofed_installed(root)
    naming = "as-profile"
    if doca and profile.get("rdma", {}).get("doca_ofed_renames_to_mlx5"):
        naming = "mlx5"
    loads = peermem_loads(profile, doca)
    wanted = modprobe_conf.modules_to_load(root)
    loaded = []
    for mod in wanted:
        if mod == PEERMEM and not loads:
            continue
        if mod == PEERMEM or mod in known_modules(profile):
            loaded.append(mod)
    port_states = {dev: "DOWN" for dev in faults.get("port_down", [])}
    return {
        "nvidia_options": options,
        "nic_naming": naming,
        "port_states": port_states,
        "doca_ofed": doca,
        "modules_loaded": loaded,
        "peermem_loads": loads,
    }


def peermem_loads(profile: dict, doca: bool) -> bool:
    """Whether ``modprobe nvidia_peermem`` succeeds: the profile says so, or DOCA-OFED provides it."""
    return bool(profile.get("nvidia_peermem", {}).get("loads")) or doca


def known_modules(profile: dict) -> set:
    return {m["name"] if isinstance(m, dict) else str(m) for m in profile.get("kernel_modules", [])}


def render_boot(profile: dict, plan: dict, sysfs_dir: Path, proc_dir: Path, hw_json: Path,
                node_index: int) -> dict:
    """Write this boot's fake hardware; return what the node's tools need (module state, names)."""
    sysfs = fakehw.render_sysfs(profile, sysfs_dir, nic_naming=plan["nic_naming"],
                                port_states=plan["port_states"], node_index=node_index)
    proc = fakehw.render_nvidia_proc(profile, proc_dir, nvidia_options=plan["nvidia_options"])
    data = fakehw.write_hw_json(profile, hw_json, nic_naming=plan["nic_naming"],
                                port_states=plan["port_states"], node_index=node_index)
    if not proc["loaded"]:
        # A bad option kept the driver from loading: nvidia-smi answers as without a driver.
        data["driver_loaded"] = False
        Path(hw_json).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {
        "nvidia_loaded": proc["loaded"],
        "nvidia_warnings": proc["warnings"],
        "rdma_devices": {name: {"port_dir": info.get("port_dir"), "nic_id": info.get("nic_id")}
                         for name, info in sysfs.get("rdma_devices", {}).items()},
    }


def modules_state(profile: dict, plan: dict) -> dict:
    """The JSON the node's fake ``modprobe``/``lsmod`` read (``/etc/fleetsim/modules.json``)."""
    peer = profile.get("nvidia_peermem", {})
    return {
        "known": sorted(known_modules(profile) | {PEERMEM}),
        "peermem_loads": plan["peermem_loads"],
        "peermem_error": peer.get("error", "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument"),
        "peermem_size": peer.get("size", 16384),
        "profile": profile.get("name"),
    }


def proc_modules(profile: dict, plan: dict) -> str:
    """``/proc/modules`` of the node after boot: the profile's modules plus those loaded at boot."""
    mods = [{"name": m["name"], "size": m.get("size", 16384), "used_by": list(m.get("used_by", []))}
            for m in profile.get("kernel_modules", []) if isinstance(m, dict)]
    names = {m["name"] for m in mods}
    peer = profile.get("nvidia_peermem", {})
    for name in plan["modules_loaded"]:
        if name in names:
            continue
        size = peer.get("size", 16384) if name == PEERMEM else 16384
        if name == PEERMEM:
            for m in mods:
                if m["name"] in ("nvidia", "ib_core"):
                    m["used_by"].append(PEERMEM)
        mods.insert(0, {"name": name, "size": size, "used_by": []})
        names.add(name)
    lines = []
    for m in mods:
        used = ",".join(m["used_by"]) + "," if m["used_by"] else "-"
        lines.append(f"{m['name']} {m['size']} {len(m['used_by'])} {used} Live 0x0000000000000000\n")
    return "".join(lines)
