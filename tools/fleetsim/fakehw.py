# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fake hardware of a simulated node, rendered from a profile into plain directories.

Pure Python, no root needed. The simulated fleet overlays what this module writes onto a node's real
paths; unit tests use the very same trees as a ``sysfs_root`` in ``tmp_path``.

API
===

``PROFILES_DIR``
    ``tools/fleetsim/profiles``: one ``<name>.yml`` per node type (schema: ``profiles/README.md``).

``FAKE_NVIDIA_SMI``
    Path of ``fake_nvidia_smi.py`` (stdlib only, kept without a shebang in the repository). It answers
    from the JSON that :func:`write_hw_json` writes (env ``FLEETSIM_HW_JSON``, default
    ``/etc/fleetsim/hardware.json``).

``install_fake_nvidia_smi(dest, python="/usr/bin/python3") -> Path``
    Install it as an executable script at ``dest`` (e.g. a node's ``/usr/bin/nvidia-smi``), atomically.

``ProfileError(ValueError)``
    Raised by :func:`load_profile` (and by the renderers for bad arguments). The message names the
    profile, the bad key and the expected form.

``validate_profile(data) -> dict``
    The validation and normalisation of :func:`load_profile`, for a dict (an edited profile).

``list_profiles() -> list[str]``
    Names of the profiles shipped in ``PROFILES_DIR``, sorted.

``load_profile(name_or_path) -> dict``
    Load ``PROFILES_DIR/<name>.yml`` (or a path to a ``.yml`` file), validate it and return a normalised
    dict (ids as strings, PCI ids as ints, defaults filled in). The dict can be deep-copied and edited
    (tests add NICs, change states) and passed to the renderers; they validate it again.

``gpu_family(profile) -> str``
    The GPU family of the profile's GPUs as the collection names it (``gpufleet_gpu_family``): the model word
    of ``gpu_model.name``, lower case (``NVIDIA B200`` -> ``b200``, ``NVIDIA A100-SXM4-80GB`` -> ``a100``).

``render_sysfs(profile, dest_root, *, nic_naming="as-profile", port_states=None, node_index=0) -> dict``
    Write a sysfs-shaped tree under ``dest_root``::

        devices/pci<dom>:<bus>/<root port>/<switch up>/<switch down>/<endpoint>/   PCI devices
        bus/pci/devices/<bdf>        -> ../../../devices/.../<bdf>                 (relative links)
        bus/pci/drivers/<driver>/<bdf> -> the device; <device>/driver -> the driver dir
        class/infiniband/<dev>       -> ../../devices/.../<nic bdf>/infiniband/<dev>
        <nic bdf>/infiniband/<dev>/{node_guid,sys_image_guid,fw_ver,board_id,hca_type,node_type,
                                    node_desc,device -> ../../../<nic bdf>}
        <nic bdf>/infiniband/<dev>/ports/1/{state,phys_state,link_layer,rate,lid,sm_lid,lid_mask_count,
                                    cap_mask,gids/N,gid_attrs/types/N,gid_attrs/ndevs/N,counters/*,
                                    hw_counters/*}
        <nic bdf>/net/<ifname>/{address,operstate,carrier,mtu,type,ifindex}   (Ethernet NICs only)

    An AWS EFA NIC (``driver: efa``, ``link_layer: Unknown``) is rendered as the ``efa`` kernel driver shows
    it: PCI function with the profile's ids (Amazon 0x1d0f, 0xefa0..0xefa3) bound to ``efa``, no netdev
    (no ``net/``), ``node_type`` ``7: unspecified``, port link layer ``Unknown``, ``lid`` 0x0 (``lid_mask_count``
    1, ``cap_mask`` 0x00000000), one GID (index 0, an fe80 address derived from the node and NIC) and no
    ``gid_attrs`` entries.

    Rendering again into the same ``dest_root`` (another naming or port states) replaces the RDMA
    devices of the previous render. All links are relative, so the tree works where it lies and when
    ``dest_root/{class,bus,devices}`` is overlaid onto a node's ``/sys/{class,bus,devices}``.
    ``class/net`` is not written (a node's own network namespace owns it).

    ``nic_naming``: ``"as-profile"`` (the profile's ``rdma.naming``), ``"rocep"`` or ``"rdmap"`` (names
    from the PCI address as rdma-core's udev rename (``rdma_rename``, NAME_PCI) gives them, the prefix
    from the port's link layer: RoCE ``rocep145s0``, InfiniBand ``ibp145s0``, EFA (link layer
    ``Unknown``) ``rdmap16s27``; bus and slot in decimal) or ``"mlx5"`` (``mlx5_0``, ``mlx5_1``, ... in PCI
    address order, as DOCA-OFED/MLNX_OFED name them).
    ``port_states``: ``{key: state}`` with key a NIC id from the profile, a PCI address or a device
    name under any naming (so a key survives the DOCA rename), state one of ``ACTIVE``, ``DOWN``,
    ``INIT``, ``ARMED`` (``"1: DOWN"`` also accepted); overrides the profile's per-NIC ``state``. ``node_index``: makes MACs, GUIDs, IPv4 addresses, GIDs,
    LIDs, serials and UUIDs differ per node (index 0, 1, 2, ...).

    Returns a summary: ``{"gpus": [...], "nics": [...], "rdma_devices": {name: {...}}}`` where every
    RDMA device entry holds ``name``, ``nic_id``, ``pci_address``, ``device_dir`` and ``port_dir``
    (paths relative to ``dest_root``; the harness writes counters under ``port_dir/counters``),
    ``netdev``, ``state``, ``link_layer`` and ``ipv4``.

``rdma_device_names(profile, nic_naming="as-profile") -> dict``
    ``{nic_id: device name}`` for the RDMA NICs, as :func:`render_sysfs` would name them.

``render_nvidia_proc(profile, dest_dir, *, nvidia_options=None) -> dict``
    Write ``dest_dir/params`` and ``dest_dir/version`` as ``/proc/driver/nvidia/`` shows them. Base
    parameters come from the profile (``driver.params_base`` file + ``driver.params`` overrides).
    ``nvidia_options`` are the module options the driver is loaded with: a mapping ``{"NVreg_X": V}``,
    an iterable of ``"NVreg_X=V"`` tokens or of ``(name, value)`` pairs, or ``None``. They are applied as
    the kernel does: integer parameters accept decimal, ``0x`` hex and ``0`` octal and show in decimal
    (``NVreg_EnableStreamMemOPs=1`` -> ``EnableStreamMemOPs: 1``); string parameters show the value as
    given, quoted (``NVreg_RegistryDwords=PeerMappingOverride=1;`` -> ``RegistryDwords:
    "PeerMappingOverride=1;"``); the last occurrence of a name wins; an unknown ``NVreg_`` name (or one
    without the prefix) is ignored with the kernel's warning. A value an integer parameter cannot take
    makes the module fail to load: then nothing is written and ``loaded`` is false.
    Returns ``{"loaded": bool, "warnings": [str], "params": {name: shown value}}``.

``parse_modprobe_nvidia_options(texts) -> list[tuple[str, str]]``
    The ``options nvidia ...`` settings of modprobe configuration texts (the contents of
    ``/etc/modprobe.d/*.conf`` in file-name order), with modprobe's quoting, comments and line
    continuations, ready for ``nvidia_options``.

``write_hw_json(profile, dest, *, nic_naming="as-profile", port_states=None, node_index=0) -> dict``
    Write the JSON the fake ``nvidia-smi`` answers from (GPUs, driver, RDMA NICs under their rendered
    names, the ``topo -m`` matrix computed from the profile's topology) and return it.

``hardware_data(profile, *, nic_naming=..., port_states=None, node_index=0) -> dict``
    The same data without writing it.

``render_lsmod(profile, *, extra_modules=(), peermem_loaded=None) -> str``
    ``lsmod`` output for the profile's loaded kernel modules (``extra_modules`` appended;
    ``nvidia_peermem`` listed when ``peermem_loaded`` is true, default: the profile's
    ``nvidia_peermem.loads``).

``pcie_distance(profile, bdf_a, bdf_b) -> str``
    ``PIX``/``PHB``/``NODE``/``SYS`` between two endpoints, from the profile's topology.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PROFILES_DIR = HERE / "profiles"
FAKE_NVIDIA_SMI = HERE / "fake_nvidia_smi.py"

NIC_NAMINGS = ("as-profile", "rocep", "rdmap", "mlx5")
# The schemes rdma.naming takes: PCI-address names (rocep/ibp/rdmap, the prefix from the link layer) or mlx5_<n>.
PROFILE_NAMINGS = ("rocep", "rdmap", "mlx5")
# The port link layers a NIC declares; Unknown (what the kernel shows for an EFA port) only with driver efa.
LINK_LAYERS = ("Ethernet", "InfiniBand", "Unknown")
EFA_DRIVER = "efa"
PORT_STATES = {
    "DOWN": ("1: DOWN", "3: Disabled"),
    "INIT": ("2: INIT", "5: LinkUp"),
    "ARMED": ("3: ARMED", "5: LinkUp"),
    "ACTIVE": ("4: ACTIVE", "5: LinkUp"),
}
GID_TOKENS = {
    "link_local_v1": ("link_local", "IB/RoCE v1"),
    "link_local_v2": ("link_local", "RoCE v2"),
    "ipv4_v1": ("ipv4", "IB/RoCE v1"),
    "ipv4_v2": ("ipv4", "RoCE v2"),
}
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")
BUS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")

GPU_CLASS = 0x030200
BRIDGE_CLASS = 0x060400
ETH_CLASS = 0x020000
IB_CLASS = 0x020700


class ProfileError(ValueError):
    """A profile (or a renderer argument) is not what the schema expects."""


# --------------------------------------------------------------------------- profiles


def list_profiles() -> list:
    """Names of the profiles shipped in PROFILES_DIR."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yml"))


def load_profile(name_or_path) -> dict:
    """Load and validate a profile by name (PROFILES_DIR/<name>.yml) or by path."""
    text = str(name_or_path)
    if os.sep in text or text.endswith((".yml", ".yaml")):
        path = Path(text)
    else:
        path = PROFILES_DIR / f"{text}.yml"
    if not path.is_file():
        raise ProfileError(
            f"profile {text!r} not found (expected a name out of {', '.join(list_profiles())} "
            f"or a path to a .yml file)"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping at the top level")
    data.setdefault("name", path.stem)
    data["_source"] = str(path)
    return validate_profile(data)


def gpu_family(profile) -> str:
    """The GPU family of the profile's GPUs (``gpufleet_gpu_family``): the model word of nvidia-smi's name, lower
    case, without its variant (``NVIDIA H100 80GB HBM3`` -> ``h100``, ``NVIDIA A100-SXM4-80GB`` -> ``a100``).
    Read from the name rather than the collection's family registry, so that the simulator stays independent of the
    code it tests; a unit test holds the two to each other for every shipped profile."""
    words = str(profile["gpu_model"]["name"]).split()
    model = words[1] if len(words) > 1 and words[0].upper() == "NVIDIA" else (words or [""])[0]
    return model.split("-")[0].lower()


def fabric(profile):
    """The scale-out fabric of the profile's RDMA NICs (``gpufleet_fabric``): ``infiniband``, ``roce`` or ``efa`` from
    the link layer of its NIC model (``Unknown``, with driver ``efa``: AWS EFA), None for a profile without RDMA NICs.
    Read from the hardware rather than the collection's fabric table; a unit test holds the two to each other for
    every shipped profile."""
    if not profile.get("nics") or not profile.get("nic_model"):
        return None
    layer = str(profile["nic_model"].get("link_layer", ""))
    if layer == "Unknown":
        return "efa" if profile["nic_model"].get("driver") == EFA_DRIVER else None
    return {"InfiniBand": "infiniband", "Ethernet": "roce"}.get(layer)


def _err(profile_name, where, msg):
    return ProfileError(f"profile {profile_name}: {where}: {msg}")


def _as_int(value, pname, where):
    if isinstance(value, bool):
        raise _err(pname, where, f"{value!r} is not an integer (expected e.g. 0x10de or 4318)")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    raise _err(pname, where, f"{value!r} is not an integer (expected e.g. 0x10de or 4318)")


def _req(mapping, key, pname, where, kind=None):
    if not isinstance(mapping, dict) or key not in mapping:
        raise _err(pname, where, f"missing required key {key!r}")
    value = mapping[key]
    if kind is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _err(pname, f"{where}.{key}", f"{value!r} has the wrong type (expected {names})")
    return value


def _bdf(value, pname, where):
    text = str(value).lower()
    if len(text) == 7:  # bb:dd.f, domain 0000
        text = "0000:" + text
    if not BDF_RE.match(text):
        raise _err(pname, where, f"{value!r} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:8f:00.0)")
    return text


def _bus(value, pname, where):
    text = str(value).lower()
    if len(text) == 2:
        text = "0000:" + text
    if not BUS_RE.match(text):
        raise _err(pname, where, f"{value!r} is not a PCI bus (expected DDDD:BB, e.g. 0000:8c)")
    return text


def validate_profile(data: dict) -> dict:
    """Validate and normalise a profile dict (as load_profile returns or a caller edited)."""
    prof = copy.deepcopy(data)
    pname = prof.get("name", "<unnamed>")
    if not isinstance(pname, str) or not NAME_RE.match(pname):
        raise ProfileError(f"profile name {pname!r} is not a valid name (expected letters, digits, _ . -)")
    if prof.get("schema", 1) != 1:
        raise _err(pname, "schema", f"{prof.get('schema')!r} is not supported (expected 1)")
    prof["schema"] = 1
    prof.setdefault("description", "")

    # NUMA nodes
    numa = _req(prof, "numa_nodes", pname, "top level", list)
    numa_ids = {}
    for i, node in enumerate(numa):
        where = f"numa_nodes[{i}]"
        nid = _as_int(_req(node, "id", pname, where), pname, f"{where}.id")
        cpus = str(_req(node, "cpus", pname, where))
        if not re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", cpus):
            raise _err(pname, f"{where}.cpus", f"{cpus!r} is not a CPU list (expected e.g. 0-55,112-167)")
        node["id"], node["cpus"] = nid, cpus
        numa_ids[nid] = node
    if not numa_ids:
        raise _err(pname, "numa_nodes", "needs at least one node")

    # GPU model + GPUs
    model = _req(prof, "gpu_model", pname, "top level", dict)
    for key in ("name", "compute_capability"):
        model[key] = str(_req(model, key, pname, "gpu_model"))
    if not re.match(r"^\d+\.\d+$", model["compute_capability"]):
        raise _err(pname, "gpu_model.compute_capability",
                   f"{model['compute_capability']!r} is not a compute capability (expected e.g. 10.0)")
    model["pci_device_id"] = _as_int(_req(model, "pci_device_id", pname, "gpu_model"), pname,
                                     "gpu_model.pci_device_id")
    model["subsystem_vendor_id"] = _as_int(model.get("subsystem_vendor_id", 0x10DE), pname,
                                           "gpu_model.subsystem_vendor_id")
    model["subsystem_device_id"] = _as_int(model.get("subsystem_device_id", 0), pname,
                                           "gpu_model.subsystem_device_id")
    model["memory_mib"] = _as_int(_req(model, "memory_mib", pname, "gpu_model"), pname, "gpu_model.memory_mib")
    model["power_limit_w"] = _as_int(model.get("power_limit_w", 700), pname, "gpu_model.power_limit_w")
    model["idle_power_w"] = _as_int(model.get("idle_power_w", 100), pname, "gpu_model.idle_power_w")
    model.setdefault("vbios_version", "96.00.00.00.01")
    model.setdefault("pcie_link", {"speed": "32.0 GT/s PCIe", "width": 16})
    nvl = model.setdefault("nvlink", {"links": 0, "link_gbps": 0.0})
    nvl["links"] = _as_int(nvl.get("links", 0), pname, "gpu_model.nvlink.links")
    nvl["link_gbps"] = float(nvl.get("link_gbps", 0.0))

    ids = {}
    gpus = _req(prof, "gpus", pname, "top level", list)
    for i, gpu in enumerate(gpus):
        where = f"gpus[{i}]"
        if not isinstance(gpu, dict):
            raise _err(pname, where, f"{gpu!r} is not a mapping (expected {{id: gpu0, bdf: 0000:8f:00.0}})")
        gpu["id"] = str(_req(gpu, "id", pname, where))
        gpu["bdf"] = _bdf(_req(gpu, "bdf", pname, where), pname, f"{where}.bdf")
        for key in ("temperature_c", "power_draw_w"):
            if key in gpu:
                gpu[key] = _as_int(gpu[key], pname, f"{where}.{key}")
        if gpu["id"] in ids:
            raise _err(pname, f"{where}.id", f"duplicate device id {gpu['id']!r}")
        ids[gpu["id"]] = ("gpu", gpu)

    # NICs
    nic_model = prof.setdefault("nic_model", {})
    rdma = prof.setdefault("rdma", {})
    naming = rdma.setdefault("naming", "mlx5")
    if naming not in PROFILE_NAMINGS:
        raise _err(pname, "rdma.naming", f"{naming!r} is not a naming scheme (expected rocep, rdmap or mlx5)")
    rdma["doca_ofed_renames_to_mlx5"] = bool(rdma.get("doca_ofed_renames_to_mlx5", False))
    order = rdma.setdefault("roce_gid_order", ["link_local_v1", "link_local_v2", "ipv4_v1", "ipv4_v2"])
    for tok in order:
        if tok not in GID_TOKENS:
            raise _err(pname, "rdma.roce_gid_order",
                       f"{tok!r} is not a GID kind (expected one of {', '.join(GID_TOKENS)})")
    rdma["gid_table_len"] = _as_int(rdma.get("gid_table_len", 16), pname, "rdma.gid_table_len")
    rdma.setdefault("ipv4_subnet_template", "192.168.{rail}.0/24")
    rdma["ipv4_host_offset"] = _as_int(rdma.get("ipv4_host_offset", 2), pname, "rdma.ipv4_host_offset")
    rdma.setdefault("mac_prefix", "b8:3f:d2")
    rdma.setdefault("guid_prefix", "b83f:d203")
    rdma["lid_base"] = _as_int(rdma.get("lid_base", 1), pname, "rdma.lid_base")
    rdma.setdefault("mtu", 4200)

    nics = prof.setdefault("nics", [])
    rail = 0
    for i, nic in enumerate(nics):
        where = f"nics[{i}]"
        if not isinstance(nic, dict):
            raise _err(pname, where, f"{nic!r} is not a mapping (expected {{id: nic0, bdf: 0000:91:00.0}})")
        nic["id"] = str(_req(nic, "id", pname, where))
        nic["bdf"] = _bdf(_req(nic, "bdf", pname, where), pname, f"{where}.bdf")
        if nic["id"] in ids:
            raise _err(pname, f"{where}.id", f"duplicate device id {nic['id']!r}")
        ids[nic["id"]] = ("nic", nic)
        merged = dict(nic_model)
        merged.update(nic)
        nic.clear()
        nic.update(merged)
        nic.setdefault("role", "rail")
        if nic["role"] not in ("rail", "frontend"):
            raise _err(pname, f"{where}.role", f"{nic['role']!r} is not a role (expected rail or frontend)")
        nic["rdma"] = bool(nic.get("rdma", True))
        nic["vendor_id"] = _as_int(nic.get("vendor_id", 0x15B3), pname, f"{where}.vendor_id")
        nic["pci_device_id"] = _as_int(nic.get("pci_device_id", 0x1021), pname, f"{where}.pci_device_id")
        nic["subsystem_vendor_id"] = _as_int(nic.get("subsystem_vendor_id", nic["vendor_id"]), pname,
                                             f"{where}.subsystem_vendor_id")
        nic["subsystem_device_id"] = _as_int(nic.get("subsystem_device_id", 0x0023), pname,
                                             f"{where}.subsystem_device_id")
        nic.setdefault("driver", "mlx5_core")
        ll = nic.setdefault("link_layer", "Ethernet")
        if ll not in LINK_LAYERS:
            raise _err(pname, f"{where}.link_layer",
                       f"{ll!r} is not a link layer (expected Ethernet, InfiniBand, or Unknown with driver efa)")
        if ll == "Unknown" and nic["driver"] != EFA_DRIVER:
            raise _err(pname, f"{where}.link_layer",
                       f"{ll!r} is the link layer of an EFA port only, not of driver {nic['driver']!r} "
                       f"(expected Ethernet or InfiniBand, or driver: efa with link_layer: Unknown)")
        if nic["driver"] == EFA_DRIVER and ll != "Unknown":
            raise _err(pname, f"{where}.link_layer",
                       f"{ll!r} is not the link layer of an EFA NIC (expected Unknown with driver efa)")
        if nic["driver"] == EFA_DRIVER and nic.get("netdev"):
            raise _err(pname, f"{where}.netdev",
                       f"{nic['netdev']!r}: an EFA NIC has no network interface (expected no netdev)")
        if nic.get("mtu") is not None:
            nic["mtu"] = _as_int(nic["mtu"], pname, f"{where}.mtu")
        state = str(nic.setdefault("state", "ACTIVE")).upper()
        if state not in PORT_STATES:
            raise _err(pname, f"{where}.state", f"{state!r} is not a port state (expected {', '.join(PORT_STATES)})")
        nic["state"] = state
        nic.setdefault("rate", "400 Gb/sec (4X NDR)")
        nic.setdefault("fw_ver", "28.43.2026")
        nic.setdefault("board_id", "MT_0000000838")
        nic.setdefault("hca_type", "MT4129")
        if ll == "Ethernet" and not nic.get("netdev"):
            raise _err(pname, f"{where}.netdev", "an Ethernet NIC needs a netdev name (e.g. gpu0rdma0)")
        if nic["role"] == "rail":
            nic["rail"] = _as_int(nic.get("rail", rail), pname, f"{where}.rail")
            rail += 1
        else:
            nic["rail"] = _as_int(nic.get("rail", 100 + i), pname, f"{where}.rail")
        if "ipv4" in nic and nic["ipv4"] is not None:
            try:
                ipaddress.ip_interface(str(nic["ipv4"]))
            except ValueError as exc:
                raise _err(pname, f"{where}.ipv4", f"{nic['ipv4']!r}: {exc} (expected e.g. 10.0.0.2/24)") from exc

    others = prof.setdefault("other_devices", [])
    for i, dev in enumerate(others):
        where = f"other_devices[{i}]"
        dev["id"] = str(_req(dev, "id", pname, where))
        dev["bdf"] = _bdf(_req(dev, "bdf", pname, where), pname, f"{where}.bdf")
        dev["vendor_id"] = _as_int(_req(dev, "vendor_id", pname, where), pname, f"{where}.vendor_id")
        dev["pci_device_id"] = _as_int(_req(dev, "pci_device_id", pname, where), pname, f"{where}.pci_device_id")
        dev["class"] = _as_int(_req(dev, "class", pname, where), pname, f"{where}.class")
        dev["subsystem_vendor_id"] = _as_int(dev.get("subsystem_vendor_id", dev["vendor_id"]), pname,
                                             f"{where}.subsystem_vendor_id")
        dev["subsystem_device_id"] = _as_int(dev.get("subsystem_device_id", 0), pname, f"{where}.subsystem_device_id")
        dev.setdefault("driver", None)
        if dev["id"] in ids:
            raise _err(pname, f"{where}.id", f"duplicate device id {dev['id']!r}")
        ids[dev["id"]] = ("other", dev)

    # PCIe ids of bridges
    pcie = prof.setdefault("pcie", {})
    for key, default in (("root_port", (0x8086, 0x352A)), ("switch_upstream", (0x1000, 0xC030)),
                         ("switch_downstream", (0x1000, 0xC030))):
        spec = pcie.setdefault(key, {})
        spec["vendor_id"] = _as_int(spec.get("vendor_id", default[0]), pname, f"pcie.{key}.vendor_id")
        spec["pci_device_id"] = _as_int(spec.get("pci_device_id", default[1]), pname, f"pcie.{key}.pci_device_id")

    # Topology
    topo = _req(prof, "topology", pname, "top level", list)
    placed = {}
    all_bdfs = {}
    buses_used = {}
    for i, grp in enumerate(topo):
        where = f"topology[{i}]"
        if not isinstance(grp, dict):
            raise _err(pname, where, "expected a mapping with host_bridge, numa_node, devices")
        grp["host_bridge"] = _bus(_req(grp, "host_bridge", pname, where), pname, f"{where}.host_bridge")
        grp["numa_node"] = _as_int(_req(grp, "numa_node", pname, where), pname, f"{where}.numa_node")
        if grp["numa_node"] not in numa_ids:
            raise _err(pname, f"{where}.numa_node",
                       f"{grp['numa_node']} is not a NUMA node of numa_nodes (expected one of {sorted(numa_ids)})")
        devs = _req(grp, "devices", pname, where, list)
        if not devs:
            raise _err(pname, f"{where}.devices", "needs at least one device id")
        bridges = []
        if grp.get("root_port") is not None:
            grp["root_port"] = _bdf(grp["root_port"], pname, f"{where}.root_port")
            if grp["root_port"][:7] != grp["host_bridge"]:
                raise _err(pname, f"{where}.root_port",
                           f"{grp['root_port']} is not on the host bridge's bus {grp['host_bridge']}")
            bridges.append(grp["root_port"])
        else:
            grp["root_port"] = None
        sw = grp.get("switch")
        if sw is not None:
            if grp["root_port"] is None:
                raise _err(pname, f"{where}.switch", "a PCIe switch needs a root_port above it")
            sw["upstream"] = _bdf(_req(sw, "upstream", pname, f"{where}.switch"), pname, f"{where}.switch.upstream")
            sw["downstream_bus"] = _bus(_req(sw, "downstream_bus", pname, f"{where}.switch"), pname,
                                        f"{where}.switch.downstream_bus")
            bridges.append(sw["upstream"])
        elif grp["root_port"] is not None and len(devs) != 1:
            raise _err(pname, f"{where}.devices",
                       "a root port without a switch holds exactly one device (add a switch: for more)")
        grp["switch"] = sw
        for b in bridges:
            if b in all_bdfs:
                raise _err(pname, where, f"PCI address {b} used twice")
            all_bdfs[b] = where
        for dev_id in devs:
            dev_id = str(dev_id)
            if dev_id not in ids:
                raise _err(pname, f"{where}.devices", f"{dev_id!r} is not the id of a gpu, nic or other device")
            if dev_id in placed:
                raise _err(pname, f"{where}.devices", f"{dev_id!r} is placed twice (also in {placed[dev_id]})")
            placed[dev_id] = where
            bdf = ids[dev_id][1]["bdf"]
            if bdf in all_bdfs:
                raise _err(pname, where, f"PCI address {bdf} used twice")
            all_bdfs[bdf] = where
            if sw is not None:
                bus = bdf[:7]
                if bus in buses_used:
                    raise _err(pname, f"{where}.devices",
                               f"{dev_id} on bus {bus}: each device under a switch needs a bus of its own")
                buses_used[bus] = dev_id
            elif grp["root_port"] is None and bdf[:7] != grp["host_bridge"]:
                raise _err(pname, f"{where}.devices",
                           f"{dev_id} ({bdf}) sits on the host bridge and must be on its bus {grp['host_bridge']}")
        grp["devices"] = [str(d) for d in devs]
    missing = sorted(set(ids) - set(placed))
    if missing:
        raise _err(pname, "topology", f"devices not placed in the PCI tree: {', '.join(missing)}")

    # Driver
    drv = _req(prof, "driver", pname, "top level", dict)
    drv["version"] = str(_req(drv, "version", pname, "driver"))
    if not re.match(r"^\d+\.\d+(\.\d+)?$", drv["version"]):
        raise _err(pname, "driver.version", f"{drv['version']!r} is not a driver version (expected e.g. 580.95.05)")
    drv["min_version"] = str(drv.get("min_version", drv["version"]))
    drv.setdefault("kernel_module", "open")
    if drv["kernel_module"] not in ("open", "proprietary"):
        raise _err(pname, "driver.kernel_module",
                   f"{drv['kernel_module']!r} is not a kernel module flavour (expected open or proprietary)")
    drv["cuda_version"] = str(drv.get("cuda_version", "13.0"))
    drv["libcuda_dev_link"] = drv.get("libcuda_dev_link", True)
    if not isinstance(drv["libcuda_dev_link"], bool):
        raise _err(pname, "driver.libcuda_dev_link",
                   f"{drv['libcuda_dev_link']!r} is not a boolean (expected true or false)")
    drv.setdefault("build", "Release Build  (dvs-builder@U22-I3-AM02-24-3)  Wed Oct  1 03:31:55 UTC 2025")
    drv.setdefault("gcc_version", "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)")
    drv.setdefault("params_base", "driver/nvidia-params-580-open.txt")
    base = PROFILES_DIR / drv["params_base"]
    if not base.is_file():
        raise _err(pname, "driver.params_base", f"{drv['params_base']!r} not found under {PROFILES_DIR}")
    params = drv.setdefault("params", {}) or {}
    if not isinstance(params, dict):
        raise _err(pname, "driver.params", "expected a mapping of parameter name to value")
    drv["params"] = params

    mods = prof.setdefault("kernel_modules", [])
    norm = []
    for i, mod in enumerate(mods):
        if isinstance(mod, str):
            mod = {"name": mod}
        if not isinstance(mod, dict) or "name" not in mod:
            raise _err(pname, f"kernel_modules[{i}]", f"{mod!r}: expected a name or {{name, size, used_by}}")
        mod["size"] = _as_int(mod.get("size", 16384), pname, f"kernel_modules[{i}].size")
        mod["used_by"] = [str(x) for x in mod.get("used_by", [])]
        norm.append(mod)
    prof["kernel_modules"] = norm
    peer = prof.setdefault("nvidia_peermem", {})
    peer["loads"] = bool(peer.get("loads", True))
    peer.setdefault("error", "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument")
    peer["size"] = _as_int(peer.get("size", 16384), pname, "nvidia_peermem.size")

    prof["gpu_fabric"] = _gpu_fabric(prof.get("gpu_fabric"), pname)
    prof["host_arch"] = str(prof.get("host_arch", "x86_64"))
    if prof["host_arch"] not in HOST_ARCHS:
        raise _err(pname, "host_arch", f"{prof['host_arch']!r}: expected one of {', '.join(HOST_ARCHS)}")

    prof["_numa"] = {k: v["cpus"] for k, v in numa_ids.items()}
    return prof


# The CPU a node says it has (uname's machine). x86_64: the host's own. aarch64: a Grace host (GB200/GB300 NVL72
# trays) - an x86 stand-in whose uname(2) answers aarch64 to every program of the node (a preloaded library), so
# what the collection chooses by architecture (Ansible's architecture fact, the CUDA and DOCA repositories, the
# multiarch library directory, pip's platform tag) is chosen as on Grace, while its binaries stay the host's.
HOST_ARCHS = ("x86_64", "aarch64")
# The multiarch directory of each (the distributions' place for the driver's libraries).
HOST_MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}

# What nvidia-smi -q prints in a GPU's Fabric section: N/A on a GPU outside any NVLink fabric (PCIe, a board whose
# NVSwitches the node's Fabric Manager owns prints Completed / Success with a zero ClusterUUID; not simulated).
NO_FABRIC = {"state": "N/A", "status": "N/A", "clique_id": "N/A", "cluster_uuid": "N/A", "health": "N/A",
             "bandwidth": "N/A"}
FABRIC_STATES = ("N/A", "Not Supported", "Not Started", "In Progress", "Completed")


def _gpu_fabric(entry, pname):
    """The profile's gpu_fabric (a GB200/GB300 tray's GPUs registered with the NVLink switch trays of their rack):
    state, status, clique_id, cluster_uuid, health, bandwidth; NO_FABRIC when absent."""
    if entry is None:
        return dict(NO_FABRIC)
    if not isinstance(entry, dict):
        raise _err(pname, "gpu_fabric", f"{entry!r}: expected a mapping (state, status, clique_id, cluster_uuid)")
    out = dict(NO_FABRIC, **{k: str(v) for k, v in entry.items()})
    unknown = sorted(set(out) - set(NO_FABRIC))
    if unknown:
        raise _err(pname, "gpu_fabric", f"unknown key(s) {', '.join(unknown)}: expected {', '.join(NO_FABRIC)}")
    if out["state"] not in FABRIC_STATES:
        raise _err(pname, "gpu_fabric.state", f"{out['state']!r}: expected one of {', '.join(FABRIC_STATES)}")
    return out


# --------------------------------------------------------------------------- helpers


def _placement(prof):
    """{device id: (group index, group)}."""
    out = {}
    for i, grp in enumerate(prof["topology"]):
        for dev_id in grp["devices"]:
            out[dev_id] = (i, grp)
    return out


def _devices_by_bdf(prof):
    out = {}
    for gpu in prof["gpus"]:
        out[gpu["bdf"]] = gpu
    for nic in prof["nics"]:
        out[nic["bdf"]] = nic
    for dev in prof["other_devices"]:
        out[dev["bdf"]] = dev
    return out


def pcie_distance(profile, bdf_a, bdf_b) -> str:
    """PCIe distance between two endpoints, from the profile's topology groups."""
    prof = profile
    by_bdf = {v["bdf"]: k for k, v in ((d["id"], d) for d in prof["gpus"] + prof["nics"] + prof["other_devices"])}
    place = _placement(prof)
    ga_i, ga = place[by_bdf[bdf_a]]
    gb_i, gb = place[by_bdf[bdf_b]]
    if ga_i == gb_i and ga["root_port"] is not None:
        return "PIX"
    if ga["host_bridge"] == gb["host_bridge"]:
        return "PHB"
    if ga["numa_node"] == gb["numa_node"]:
        return "NODE"
    return "SYS"


def _cpulist_to_mask(cpus: str) -> str:
    bits = 0
    top = 0
    for part in cpus.split(","):
        lo, hi = (part.split("-", 1) + [""])[:2]
        lo_i, hi_i = int(lo), int(hi or lo)
        top = max(top, hi_i)
        for c in range(lo_i, hi_i + 1):
            bits |= 1 << c
    words = max(1, (top // 32) + 1)
    return ",".join(f"{(bits >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(str(target), str(link.parent))
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(rel, str(link))


def _rocep_name(bdf: str, link_layer: str) -> str:
    """rdma_rename's NAME_PCI name: <prefix>[P<domain>]p<bus>s<slot>[f<function>], numbers in decimal, the prefix
    from the port's link layer (roce: Ethernet, ib: InfiniBand, rdma: anything else, e.g. EFA's Unknown)."""
    dom, bus, devfn = bdf.split(":")
    slot, fn = devfn.split(".")
    prefix = {"Ethernet": "roce", "InfiniBand": "ib"}.get(link_layer, "rdma")
    name = prefix
    if int(dom, 16):
        name += f"P{int(dom, 16)}"
    name += f"p{int(bus, 16)}s{int(slot, 16)}"
    if int(fn):
        name += f"f{int(fn)}"
    return name


def rdma_device_names(profile, nic_naming="as-profile") -> dict:
    """{nic id: RDMA device name} for the RDMA NICs of a profile under a naming scheme."""
    if nic_naming not in NIC_NAMINGS:
        raise ProfileError(f"nic_naming {nic_naming!r} is not a naming (expected one of {', '.join(NIC_NAMINGS)})")
    scheme = profile["rdma"]["naming"] if nic_naming == "as-profile" else nic_naming
    rdma_nics = sorted((n for n in profile["nics"] if n["rdma"]), key=lambda n: n["bdf"])
    out = {}
    for idx, nic in enumerate(rdma_nics):
        if scheme == "mlx5":
            out[nic["id"]] = f"mlx5_{idx}"
        else:
            out[nic["id"]] = _rocep_name(nic["bdf"], nic["link_layer"])
    return out


def _node_bytes(node_index: int):
    return (node_index >> 8) & 0xFF, node_index & 0xFF


def _nic_mac(prof, nic, node_index):
    hi, lo = _node_bytes(node_index)
    rail = nic["rail"] & 0xFF
    return f"{prof['rdma']['mac_prefix']}:{rail:02x}:{hi:02x}:{(lo + 2) & 0xFF:02x}"


def _mac_link_local_gid(mac: str) -> str:
    octets = [int(x, 16) for x in mac.split(":")]
    octets[0] ^= 0x02
    eui = octets[:3] + [0xFF, 0xFE] + octets[3:]
    groups = ["fe80", "0000", "0000", "0000"] + [f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2)]
    return ":".join(groups)


def _ipv4_gid(addr: str) -> str:
    ip = ipaddress.IPv4Address(addr)
    v = int(ip)
    return f"0000:0000:0000:0000:0000:ffff:{v >> 16:04x}:{v & 0xFFFF:04x}"


def _nic_ipv4(prof, nic, node_index):
    """IPv4 interface (address/prefix) of a RoCE NIC on node node_index, or None."""
    if nic["link_layer"] != "Ethernet":
        return None
    if nic.get("ipv4"):
        base = ipaddress.ip_interface(str(nic["ipv4"]))
        return f"{base.ip + node_index}/{base.network.prefixlen}"
    if nic["role"] != "rail":
        return None
    net = ipaddress.ip_network(prof["rdma"]["ipv4_subnet_template"].format(rail=nic["rail"]), strict=False)
    host = net.network_address + prof["rdma"]["ipv4_host_offset"] + node_index
    return f"{host}/{net.prefixlen}"


def _guid(prof, nic, node_index, salt=0):
    hi, lo = _node_bytes(node_index)
    return f"{prof['rdma']['guid_prefix']}:{(nic['rail'] & 0xFF) | (salt << 8):04x}:{hi:02x}{lo:02x}"


def _resolve_states(prof, names, port_states):
    states = {n["id"]: n["state"] for n in prof["nics"]}
    if not port_states:
        return states
    by_key = {}
    all_names = [names, rdma_device_names(prof, "rocep"), rdma_device_names(prof, "mlx5")]
    for nic in prof["nics"]:
        by_key[nic["id"]] = nic["id"]
        by_key[nic["bdf"]] = nic["id"]
        for scheme in all_names:
            if nic["id"] in scheme:
                by_key[scheme[nic["id"]]] = nic["id"]
    for key, value in port_states.items():
        if key not in by_key:
            raise ProfileError(
                f"port_states: {key!r} is not a NIC of profile {prof['name']} "
                f"(expected a NIC id, PCI address or device name out of {', '.join(sorted(by_key))})"
            )
        text = str(value).rsplit(":", maxsplit=1)[-1].strip().upper()
        if text not in PORT_STATES:
            raise ProfileError(f"port_states[{key!r}]: {value!r} is not a port state "
                               f"(expected one of {', '.join(PORT_STATES)})")
        states[by_key[key]] = text
    return states


# --------------------------------------------------------------------------- sysfs


def _pci_files(dirpath: Path, *, vendor, device, cls, sub_vendor, sub_device, numa, cpus, bdf,
               revision=0xA1, link=None, driver=None):
    _write(dirpath / "vendor", f"0x{vendor:04x}\n")
    _write(dirpath / "device", f"0x{device:04x}\n")
    _write(dirpath / "class", f"0x{cls:06x}\n")
    _write(dirpath / "subsystem_vendor", f"0x{sub_vendor:04x}\n")
    _write(dirpath / "subsystem_device", f"0x{sub_device:04x}\n")
    _write(dirpath / "revision", f"0x{revision:02x}\n")
    _write(dirpath / "numa_node", f"{numa}\n")
    _write(dirpath / "local_cpulist", f"{cpus}\n")
    _write(dirpath / "local_cpus", f"{_cpulist_to_mask(cpus)}\n")
    _write(dirpath / "enable", "1\n")
    link = link or {"speed": "32.0 GT/s PCIe", "width": 16}
    for pre in ("current", "max"):
        _write(dirpath / f"{pre}_link_speed", f"{link['speed']}\n")
        _write(dirpath / f"{pre}_link_width", f"{link['width']}\n")
    uevent = []
    if driver:
        uevent.append(f"DRIVER={driver}")
    uevent += [
        f"PCI_CLASS={cls:X}",
        f"PCI_ID={vendor:04X}:{device:04X}",
        f"PCI_SUBSYS_ID={sub_vendor:04X}:{sub_device:04X}",
        f"PCI_SLOT_NAME={bdf}",
        f"MODALIAS=pci:v{vendor:08X}d{device:08X}sv{sub_vendor:08X}sd{sub_device:08X}"
        f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}",
    ]
    _write(dirpath / "uevent", "\n".join(uevent) + "\n")


def render_sysfs(profile, dest_root, *, nic_naming="as-profile", port_states=None, node_index=0) -> dict:
    """Render the profile's PCI tree and RDMA devices as a sysfs tree under dest_root (see module doc)."""
    prof = validate_profile(profile)
    if not isinstance(node_index, int) or node_index < 0 or node_index > 0xFFFF:
        raise ProfileError(f"node_index {node_index!r} is not a node index (expected an integer 0..65535)")
    root = Path(dest_root)
    root.mkdir(parents=True, exist_ok=True)
    names = rdma_device_names(prof, nic_naming)
    states = _resolve_states(prof, names, port_states)
    devices_dir = root / "devices"
    bus_devices = root / "bus" / "pci" / "devices"
    drivers_dir = root / "bus" / "pci" / "drivers"
    bus_devices.mkdir(parents=True, exist_ok=True)
    ib_class = root / "class" / "infiniband"
    ib_class.mkdir(parents=True, exist_ok=True)
    # Rendering again into the same tree (a reboot, a rename) leaves no stale RDMA device behind.
    for old in ib_class.iterdir():
        if old.is_symlink():
            old.unlink()
    ids = {d["id"]: d for d in prof["gpus"] + prof["nics"] + prof["other_devices"]}
    gpu_ids = {g["id"] for g in prof["gpus"]}
    nic_ids = {n["id"] for n in prof["nics"]}
    summary = {"gpus": [], "nics": [], "rdma_devices": {}}
    ifindex = 10

    def add_pci(path: Path, bdf: str, driver):
        _link(bus_devices / bdf, path)
        _link(path / "subsystem", root / "bus" / "pci")
        if driver:
            ddir = drivers_dir / driver
            ddir.mkdir(parents=True, exist_ok=True)
            _link(ddir / bdf, path)
            _link(path / "driver", ddir)

    for grp in prof["topology"]:
        numa = grp["numa_node"]
        cpus = prof["_numa"][numa]
        hb = devices_dir / f"pci{grp['host_bridge']}"
        hb.mkdir(parents=True, exist_ok=True)
        _write(hb / "uevent", "")
        parent = hb
        if grp["root_port"]:
            rp = prof["pcie"]["root_port"]
            parent = hb / grp["root_port"]
            _pci_files(parent, vendor=rp["vendor_id"], device=rp["pci_device_id"], cls=BRIDGE_CLASS,
                       sub_vendor=rp["vendor_id"], sub_device=0, numa=numa, cpus=cpus, bdf=grp["root_port"],
                       revision=0x04, driver="pcieport")
            add_pci(parent, grp["root_port"], "pcieport")
        sw = grp["switch"]
        if sw:
            up = prof["pcie"]["switch_upstream"]
            usp = parent / sw["upstream"]
            _pci_files(usp, vendor=up["vendor_id"], device=up["pci_device_id"], cls=BRIDGE_CLASS,
                       sub_vendor=up["vendor_id"], sub_device=0xA064, numa=numa, cpus=cpus, bdf=sw["upstream"],
                       revision=0xB0, driver="pcieport")
            add_pci(usp, sw["upstream"], "pcieport")
        for slot, dev_id in enumerate(grp["devices"]):
            dev = ids[dev_id]
            if sw:
                dn = prof["pcie"]["switch_downstream"]
                dsp_bdf = f"{sw['downstream_bus']}:{slot:02x}.0"
                dsp = usp / dsp_bdf
                _pci_files(dsp, vendor=dn["vendor_id"], device=dn["pci_device_id"], cls=BRIDGE_CLASS,
                           sub_vendor=dn["vendor_id"], sub_device=0xA064, numa=numa, cpus=cpus, bdf=dsp_bdf,
                           revision=0xB0, driver="pcieport")
                add_pci(dsp, dsp_bdf, "pcieport")
                dpath = dsp / dev["bdf"]
            else:
                dpath = parent / dev["bdf"]
            if dev_id in gpu_ids:
                m = prof["gpu_model"]
                _pci_files(dpath, vendor=0x10DE, device=m["pci_device_id"], cls=GPU_CLASS,
                           sub_vendor=m["subsystem_vendor_id"], sub_device=m["subsystem_device_id"], numa=numa,
                           cpus=cpus, bdf=dev["bdf"], link=m["pcie_link"], driver="nvidia")
                add_pci(dpath, dev["bdf"], "nvidia")
                summary["gpus"].append({"id": dev_id, "pci_address": dev["bdf"], "numa_node": numa,
                                        "device_dir": str(dpath.relative_to(root))})
            elif dev_id in nic_ids:
                cls = IB_CLASS if dev["link_layer"] == "InfiniBand" else ETH_CLASS
                _pci_files(dpath, vendor=dev["vendor_id"], device=dev["pci_device_id"], cls=cls,
                           sub_vendor=dev["subsystem_vendor_id"], sub_device=dev["subsystem_device_id"],
                           numa=numa, cpus=cpus, bdf=dev["bdf"], revision=0x00, driver=dev["driver"])
                add_pci(dpath, dev["bdf"], dev["driver"])
                ifindex += 1
                info = _render_nic(prof, root, dpath, dev, names.get(dev_id), states[dev_id], node_index, ifindex)
                summary["nics"].append(info)
                if info.get("name"):
                    summary["rdma_devices"][info["name"]] = info
            else:
                _pci_files(dpath, vendor=dev["vendor_id"], device=dev["pci_device_id"], cls=dev["class"],
                           sub_vendor=dev["subsystem_vendor_id"], sub_device=dev["subsystem_device_id"],
                           numa=numa, cpus=cpus, bdf=dev["bdf"], driver=dev["driver"])
                add_pci(dpath, dev["bdf"], dev["driver"])
    return summary


def _render_nic(prof, root, dpath, nic, name, state, node_index, ifindex):
    rel = str(dpath.relative_to(root))
    mac = _nic_mac(prof, nic, node_index)
    ipv4 = _nic_ipv4(prof, nic, node_index)
    info = {"id": nic["id"], "name": name, "nic_id": nic["id"], "pci_address": nic["bdf"], "role": nic["role"],
            "device_dir": rel, "netdev": nic.get("netdev"), "state": state, "link_layer": nic["link_layer"],
            "mac": mac if nic["link_layer"] == "Ethernet" else None, "ipv4": ipv4, "port_dir": None}
    netdev = nic.get("netdev")
    if netdev and nic["link_layer"] == "Ethernet":
        ndir = dpath / "net" / netdev
        _write(ndir / "address", f"{mac}\n")
        up = state == "ACTIVE"
        _write(ndir / "operstate", "up\n" if up else "down\n")
        _write(ndir / "carrier", "1\n" if up else "0\n")
        _write(ndir / "mtu", f"{nic.get('mtu') or (prof['rdma']['mtu'] if nic['rdma'] else 1460)}\n")
        _write(ndir / "type", "1\n")
        _write(ndir / "ifindex", f"{ifindex}\n")
        _link(ndir / "device", dpath)
    if (dpath / "infiniband").is_dir():
        shutil.rmtree(str(dpath / "infiniband"))
    if not nic["rdma"] or not name:
        return info
    ib = dpath / "infiniband" / name
    _link(root / "class" / "infiniband" / name, ib)
    _link(ib / "device", dpath)
    node_guid = _guid(prof, nic, node_index)
    _write(ib / "node_guid", f"{node_guid}\n")
    _write(ib / "sys_image_guid", f"{node_guid}\n")
    _write(ib / "fw_ver", f"{nic['fw_ver']}\n")
    _write(ib / "board_id", f"{nic['board_id']}\n")
    _write(ib / "hca_type", f"{nic['hca_type']}\n")
    _write(ib / "hw_rev", "0x0\n")
    efa = nic["driver"] == EFA_DRIVER
    # The efa driver registers its device as RDMA_NODE_UNSPECIFIED (7); sysfs shows "7: unspecified".
    _write(ib / "node_type", "7: unspecified\n" if efa else "1: CA\n")
    _write(ib / "node_desc", f"{prof['name']}-node{node_index} {name}\n")
    port = ib / "ports" / "1"
    st, phys = PORT_STATES[state]
    _write(port / "state", f"{st}\n")
    _write(port / "phys_state", f"{phys}\n")
    _write(port / "link_layer", f"{nic['link_layer']}\n")
    _write(port / "rate", f"{nic['rate']}\n")
    if efa:
        cap_mask = "0x00000000"  # efa_query_port sets no port capability flags
    else:
        cap_mask = "0x00010000" if nic["link_layer"] == "Ethernet" else "0xa751e848"
    _write(port / "cap_mask", f"{cap_mask}\n")
    if nic["link_layer"] == "InfiniBand":
        lid = prof["rdma"]["lid_base"] + node_index * 64 + nic["rail"]
        _write(port / "lid", f"0x{lid:x}\n")
        _write(port / "sm_lid", "0x1\n")
        _write(port / "lid_mask_count", "0\n")
        _write(port / "sm_sl", "0\n")
    else:
        _write(port / "lid", "0x0\n")
        _write(port / "sm_lid", "0x0\n")
        _write(port / "lid_mask_count", "1\n" if efa else "0\n")  # efa_query_port: lmc = 1
        _write(port / "sm_sl", "0\n")
    table = [ZERO_GID] * prof["rdma"]["gid_table_len"]
    types = {}
    if efa:
        # One GID (gid_tbl_len 1): the device's address; no RoCE GID types, no net devices.
        table = [_mac_link_local_gid(mac)]
    elif nic["link_layer"] == "InfiniBand":
        port_guid = _guid(prof, nic, node_index, salt=1)
        table[0] = "fe80:0000:0000:0000:" + port_guid
        types[0] = "IB/RoCE v1"
    else:
        ll = _mac_link_local_gid(mac)
        for i, tok in enumerate(prof["rdma"]["roce_gid_order"]):
            kind, gtype = GID_TOKENS[tok]
            if kind == "ipv4":
                if not ipv4:
                    continue
                table[i] = _ipv4_gid(ipv4.split("/")[0])
            else:
                table[i] = ll
            types[i] = gtype
    for i, gid in enumerate(table):
        _write(port / "gids" / str(i), f"{gid}\n")
    for i, gtype in types.items():
        _write(port / "gid_attrs" / "types" / str(i), f"{gtype}\n")
        if nic["link_layer"] == "Ethernet" and netdev:
            _write(port / "gid_attrs" / "ndevs" / str(i), f"{netdev}\n")
    (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
    (port / "gid_attrs" / "ndevs").mkdir(parents=True, exist_ok=True)
    for counter in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                    "port_rcv_errors", "port_xmit_discards", "symbol_error", "link_downed",
                    "link_error_recovery", "port_xmit_wait", "local_link_integrity_errors",
                    "excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors",
                    "port_rcv_switch_relay_errors", "port_xmit_constraint_errors",
                    "port_rcv_constraint_errors", "VL15_dropped", "unicast_xmit_packets",
                    "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets"):
        _write(port / "counters" / counter, "0\n")
    for counter in ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err",
                    "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "rx_write_requests",
                    "rx_read_requests", "implied_nak_seq_err", "duplicate_request"):
        _write(port / "hw_counters" / counter, "0\n")
    info["device_dir"] = rel
    info["ib_dir"] = str(ib.relative_to(root))
    info["port_dir"] = str(port.relative_to(root))
    info["node_guid"] = node_guid
    return info


# --------------------------------------------------------------------------- /proc/driver/nvidia


def _read_base_params(prof):
    params = []
    path = PROFILES_DIR / prof["driver"]["params_base"]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        name, value = (line.split(":", 1) + [""])[:2]
        params.append([name.strip(), value.strip()])
    by_name = {p[0]: p for p in params}
    for name, value in prof["driver"]["params"].items():
        if isinstance(value, str) and not re.match(r"^-?\d+$", value):
            shown = value if value.startswith('"') else f'"{value}"'
        else:
            shown = str(int(value))
        if name in by_name:
            by_name[name][1] = shown
        else:
            entry = [name, shown]
            params.append(entry)
            by_name[name] = entry
    return params


def _split_options(tokens):
    if tokens is None:
        return []
    if isinstance(tokens, dict):
        return [(str(k), v) for k, v in tokens.items()]
    if isinstance(tokens, str):
        tokens = _modprobe_tokens(tokens)
    out = []
    for tok in tokens:
        if isinstance(tok, (tuple, list)) and len(tok) == 2:
            out.append((str(tok[0]), tok[1]))
        else:
            name, eq, value = str(tok).partition("=")
            out.append((name, value if eq else ""))
    return out


def _modprobe_tokens(text):
    """Split one option string as modprobe does: whitespace outside double quotes; quotes removed."""
    tokens, cur, quoted, have = [], [], False, False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            have = True
        elif ch.isspace() and not quoted:
            if have:
                tokens.append("".join(cur))
            cur, have = [], False
        else:
            cur.append(ch)
            have = True
    if have:
        tokens.append("".join(cur))
    return tokens


def parse_modprobe_nvidia_options(texts) -> list:
    """Settings of 'options nvidia ...' lines in modprobe config texts (file-name order), in order."""
    if isinstance(texts, str):
        texts = [texts]
    out = []
    for text in texts:
        joined = re.sub(r"\\\n", " ", text)
        for line in joined.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            words = _modprobe_tokens(line)
            if len(words) < 2 or words[0] != "options" or words[1].replace("-", "_") != "nvidia":
                continue
            for tok in words[2:]:
                name, eq, value = tok.partition("=")
                out.append((name, value if eq else ""))
    return out


def render_nvidia_proc(profile, dest_dir, *, nvidia_options=None) -> dict:
    """Write dest_dir/{params,version} as the loaded driver shows them (see module doc)."""
    prof = validate_profile(profile)
    params = _read_base_params(prof)
    by_name = {p[0]: p for p in params}
    warnings = []
    loaded = True
    for name, value in _split_options(nvidia_options):
        name = name.replace("-", "_")
        value = "" if value is None else str(value)
        if not name.startswith("NVreg_") or name[len("NVreg_"):] not in by_name:
            warnings.append(f"nvidia: unknown parameter '{name}' ignored")
            continue
        entry = by_name[name[len("NVreg_"):]]
        if entry[1].startswith('"'):
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            entry[1] = f'"{value}"'
        else:
            try:
                number = int(value, 0) if value.strip() else None
            except ValueError:
                number = None
            if number is None or number < 0 or number > 0xFFFFFFFF:
                warnings.append(f"nvidia: `{value}' invalid for parameter `{name}'")
                loaded = False
                continue
            entry[1] = str(number)
    dest = Path(dest_dir)
    shown = {p[0]: p[1] for p in params}
    if not loaded:
        for fname in ("params", "version"):
            if (dest / fname).exists():
                (dest / fname).unlink()
        return {"loaded": False, "warnings": warnings, "params": shown}
    dest.mkdir(parents=True, exist_ok=True)
    _write(dest / "params", "".join(f"{n}: {v}\n" for n, v in params))
    drv = prof["driver"]
    if drv["kernel_module"] == "open":
        nvrm = f"NVRM version: NVIDIA UNIX Open Kernel Module for {prof['host_arch']}  {drv['version']}  {drv['build']}  "
    else:
        nvrm = f"NVRM version: NVIDIA UNIX {prof['host_arch']} Kernel Module  {drv['version']}  {drv['build']}  "
    _write(dest / "version", f"{nvrm}\nGCC version:  {drv['gcc_version']} \n")
    return {"loaded": True, "warnings": warnings, "params": shown}


# --------------------------------------------------------------------------- nvidia-smi JSON, lsmod


def _uuid(prof, node_index, bdf):
    digest = hashlib.sha256(f"{prof['name']}/{node_index}/{bdf}".encode()).hexdigest()
    return f"GPU-{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _smi_bus_id(bdf):
    dom, rest = bdf.split(":", 1)
    return f"{int(dom, 16):08X}:{rest.upper()}"


def hardware_data(profile, *, nic_naming="as-profile", port_states=None, node_index=0) -> dict:
    """The data write_hw_json writes (without writing it)."""
    prof = validate_profile(profile)
    names = rdma_device_names(prof, nic_naming)
    states = _resolve_states(prof, names, port_states)
    place = _placement(prof)
    model = prof["gpu_model"]
    gpus = []
    for idx, gpu in enumerate(sorted(prof["gpus"], key=lambda g: g["bdf"])):
        numa = place[gpu["id"]][1]["numa_node"]
        gpus.append({
            "index": idx, "id": gpu["id"], "name": model["name"], "pci_address": gpu["bdf"],
            "pci_bus_id": _smi_bus_id(gpu["bdf"]), "pci_device_id": model["pci_device_id"],
            "pci_subsystem_id": (model["subsystem_device_id"] << 16) | model["subsystem_vendor_id"],
            "memory_total_mib": model["memory_mib"], "memory_used_mib": 0,
            "compute_cap": model["compute_capability"], "uuid": _uuid(prof, node_index, gpu["bdf"]),
            "serial": f"{1650000000000 + node_index * 100 + idx}", "vbios_version": model["vbios_version"],
            "power_limit_w": model["power_limit_w"],
            "power_draw_w": gpu.get("power_draw_w", model["idle_power_w"] + (idx % 3) * 3),
            "temperature_c": gpu.get("temperature_c", 30 + (idx * 7 + node_index) % 9),
            "persistence_mode": "Enabled",
            "numa_node": numa, "cpu_affinity": prof["_numa"][numa],
            "nvlink": {"links": model["nvlink"]["links"], "link_gbps": model["nvlink"]["link_gbps"]},
            "pcie": model["pcie_link"], "fabric": dict(prof["gpu_fabric"]),
        })
    nics = []
    for nic in sorted((n for n in prof["nics"] if n["rdma"]), key=lambda n: n["bdf"]):
        nics.append({"name": names[nic["id"]], "id": nic["id"], "pci_address": nic["bdf"],
                     "numa_node": place[nic["id"]][1]["numa_node"], "state": states[nic["id"]]})
    bdfs = [g["pci_address"] for g in gpus] + [n["pci_address"] for n in nics]
    matrix = []
    for i, a in enumerate(bdfs):
        row = []
        for j, b in enumerate(bdfs):
            if i == j:
                row.append("X")
            elif i < len(gpus) and j < len(gpus) and model["nvlink"]["links"]:
                row.append(f"NV{model['nvlink']['links']}")
            else:
                row.append(pcie_distance(prof, a, b))
        matrix.append(row)
    drv = prof["driver"]
    labels = [f"GPU{g['index']}" for g in gpus] + [f"NIC{k}" for k in range(len(nics))]
    return {
        "schema": 1, "profile": prof["name"], "node_index": node_index,
        "driver": {"version": drv["version"], "cuda_version": drv["cuda_version"],
                   "kernel_module": drv["kernel_module"]},
        "gpus": gpus, "nics": nics, "topology": {"labels": labels, "matrix": matrix},
    }


def write_hw_json(profile, dest, *, nic_naming="as-profile", port_states=None, node_index=0) -> dict:
    """Write the JSON the fake nvidia-smi answers from; return it."""
    data = hardware_data(profile, nic_naming=nic_naming, port_states=port_states, node_index=node_index)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(str(tmp), str(dest))
    return data


def install_fake_nvidia_smi(dest, python="/usr/bin/python3") -> Path:
    """Install fake_nvidia_smi.py as an executable script at dest (e.g. <dir>/nvidia-smi) run by python."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    body = FAKE_NVIDIA_SMI.read_text(encoding="utf-8")
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(f"#!{python}\n{body}", encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(str(tmp), str(dest))
    return dest


# --------------------------------------------------------------------------- the driver's libcuda

# The driver's user-space compute library, as the NVIDIA installer and the distributions' libnvidia-compute
# packages lay it out: libcuda.so.<driver version>, the soname link libcuda.so.1 and (profile
# driver.libcuda_dev_link, default true) the link-time name libcuda.so. It is a real ELF shared library
# whose cuInit answers CUDA_ERROR_NO_DEVICE (100), as a driver with no usable GPU would.
LIBCUDA_C = """/* fleetsim: the simulated driver's libcuda; no device answers. */
typedef int CUresult;
CUresult cuInit(unsigned int flags) { (void)flags; return 100; }
CUresult cuDriverGetVersion(int *version) { if (!version) return 1; *version = %d; return 0; }
"""


def libcuda_driver_version(cuda_version: str) -> int:
    """cuDriverGetVersion's value for a CUDA version string: '13.0' -> 13000, '12.9' -> 12090."""
    match = re.fullmatch(r"(\d+)\.(\d+)", str(cuda_version))
    if not match:
        raise ProfileError(f"driver.cuda_version {cuda_version!r}: expected MAJOR.MINOR, e.g. 13.0")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def multiarch_libdir() -> str:
    """/usr/lib/<multiarch> of this host (the distributions' place for the driver's libraries)."""
    try:
        out = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True, timeout=30,
                             check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return "usr/lib/" + (out or "x86_64-linux-gnu")


def build_fake_libcuda(cache_dir, cuda_version: str) -> Path:
    """Compile the fake libcuda for a CUDA version once into cache_dir (atomically); return its path."""
    version = libcuda_driver_version(cuda_version)
    return _compile_shared(cache_dir, f"libcuda-{version}.so", LIBCUDA_C % version, "the simulated driver's libcuda",
                           ["-Wl,-soname,libcuda.so.1"])


UNAME_SHIM_C = """/* fleetsim: uname(2) as a host of another CPU answers it (the node's machine). */
#define _GNU_SOURCE
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
int uname(struct utsname *buf) {
    int rc = (int)syscall(SYS_uname, buf);
    if (rc == 0) { strncpy(buf->machine, "%s", sizeof(buf->machine) - 1); buf->machine[sizeof(buf->machine) - 1] = 0; }
    return rc;
}
"""
UNAME_SHIM = "usr/lib/fleetsim/libfleetsim-uname.so"


def _compile_shared(cache_dir, name, source, what, flags=()) -> Path:
    """Compile ``source`` (C) once into cache_dir/name as a shared library (atomically, with the linker ``flags``);
    return its path. ProfileError names ``what`` when gcc is missing, fails or takes over 120 s."""
    cache_dir = Path(cache_dir)
    out = cache_dir / name
    if out.is_file():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        src = Path(tmp) / "src.c"
        src.write_text(source, encoding="utf-8")
        built = Path(tmp) / "lib.so"
        try:
            subprocess.run(["gcc", "-shared", "-fPIC", "-O1"] + list(flags) + ["-o", str(built), str(src)],
                           capture_output=True, text=True, timeout=120, check=True)
        except FileNotFoundError as exc:
            raise ProfileError(f"{what} needs gcc (apt-get install build-essential)") from exc
        except subprocess.CalledProcessError as exc:
            raise ProfileError(f"building {what} failed: {exc.stderr.strip()[-400:]}") from exc
        except subprocess.TimeoutExpired as exc:
            raise ProfileError(f"building {what} took over 120 s") from exc
        os.replace(str(built), str(out))
    return out


def install_host_arch(root, profile, cache_dir) -> list[str]:
    """Make the node under root (its overlay upper dir) answer its profile's host_arch: for aarch64, the uname shim
    and /etc/ld.so.preload naming it; for the host's own CPU, neither. Returns the paths written, relative to root."""
    prof = validate_profile(profile)
    root = Path(root)
    preload = root / "etc/ld.so.preload"
    shim = root / UNAME_SHIM
    if prof["host_arch"] == "x86_64":
        for path in (preload, shim):
            if path.is_file():
                path.unlink()
        return []
    lib = _compile_shared(cache_dir, f"libfleetsim-uname-{prof['host_arch']}.so",
                          UNAME_SHIM_C % prof["host_arch"], "the simulated host's uname")
    shim.parent.mkdir(parents=True, exist_ok=True)
    tmp = shim.with_name(shim.name + ".fleetsim-tmp")
    shutil.copyfile(lib, tmp)
    tmp.chmod(0o644)
    os.replace(str(tmp), str(shim))
    preload.parent.mkdir(parents=True, exist_ok=True)
    preload.write_text("/" + UNAME_SHIM + "\n", encoding="utf-8")
    return [UNAME_SHIM, "etc/ld.so.preload"]


def complete_host_toolkits(root, host_root="/") -> list[str]:
    """A node sees the host's CUDA toolkits (/usr/local/cuda-X.Y through its /usr overlay) as if preinstalled; where
    one has nvcc but not the cuobjdump every full toolkit has (DeepEP V2's JIT runs it), put the toolkit fixture's
    cuobjdump stand-in beside it in the node's layer under root. Returns the paths written, relative to root."""
    written = []
    for nvcc in sorted(Path(host_root, "usr/local").glob("cuda-*/bin/nvcc")):
        version = nvcc.parent.parent.name[len("cuda-"):]
        if (nvcc.parent / "cuobjdump").exists():
            continue
        fixture = (HERE / "fixtures" / "debs" / f"cuda-toolkit-{version.replace('.', '-')}" / "usr/local"
                   / f"cuda-{version}" / "bin" / "cuobjdump")
        if not fixture.is_file():
            continue
        rel = Path("usr/local") / f"cuda-{version}" / "bin" / "cuobjdump"
        dest = Path(root) / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".fleetsim-tmp")
        shutil.copyfile(fixture, tmp)
        tmp.chmod(0o755)
        os.replace(str(tmp), str(dest))
        written.append(str(rel))
    return written


def install_fake_libcuda(root, profile, cache_dir) -> list[str]:
    """Put the driver's libcuda under root (a node's /usr layer parent) as a driver install does: in the host's
    multiarch directory, and where the profile's host_arch is another CPU, in that one's too (what a node of it
    shows; the library itself is the host's).

    Returns the paths installed, relative to root. Existing links and files of the same names are replaced.
    """
    prof = validate_profile(profile)
    installed = _install_libcuda_in(root, prof, cache_dir, multiarch_libdir())
    other = "usr/lib/" + HOST_MULTIARCH[prof["host_arch"]]
    if other != multiarch_libdir():
        installed += _install_libcuda_in(root, prof, cache_dir, other)
    return installed


def _install_libcuda_in(root, prof, cache_dir, where) -> list[str]:
    drv = prof["driver"]
    lib = build_fake_libcuda(cache_dir, drv["cuda_version"])
    libdir = Path(root) / where
    libdir.mkdir(parents=True, exist_ok=True)
    real = f"libcuda.so.{drv['version']}"
    entries = [(real, None), ("libcuda.so.1", real)]
    if drv["libcuda_dev_link"]:
        entries.append(("libcuda.so", "libcuda.so.1"))
    installed = []
    for old in libdir.glob("libcuda.so*"):
        if old.name not in dict(entries):
            old.unlink()
    for name, target in entries:
        dest = libdir / name
        tmp = libdir / f".{name}.fleetsim-tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        if target is None:
            shutil.copyfile(lib, tmp)
            tmp.chmod(0o644)
        else:
            os.symlink(target, tmp)
        os.replace(str(tmp), str(dest))
        installed.append(str(dest.relative_to(root)))
    return installed


def render_lsmod(profile, *, extra_modules=(), peermem_loaded=None) -> str:
    """lsmod output for the profile's kernel modules."""
    prof = validate_profile(profile)
    mods = [dict(m) for m in prof["kernel_modules"]]
    for extra in extra_modules:
        mods.append(extra if isinstance(extra, dict) else {"name": str(extra), "size": 16384, "used_by": []})
    if peermem_loaded is None:
        peermem_loaded = prof["nvidia_peermem"]["loads"]
    if peermem_loaded and not any(m["name"] == "nvidia_peermem" for m in mods):
        mods.insert(0, {"name": "nvidia_peermem", "size": prof["nvidia_peermem"]["size"], "used_by": []})
        for m in mods:
            if m["name"] in ("nvidia", "ib_core"):
                m["used_by"] = list(m.get("used_by", [])) + ["nvidia_peermem"]
    lines = ["Module                  Size  Used by"]
    for m in mods:
        used = m.get("used_by", [])
        lines.append(f"{m['name']:<19} {m.get('size', 16384):>8}  {len(used)} {','.join(used)}".rstrip())
    return "\n".join(lines) + "\n"
