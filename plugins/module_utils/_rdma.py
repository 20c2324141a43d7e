# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RDMA devices of a node from sysfs (<sysfs_root>/class/infiniband): ports, GID tables, counters.

Pure logic, Python 3.8+. GID and IPv4 work uses netaddr when it is importable and falls back to the
standard library's ipaddress module otherwise, with identical results.

An entry of class/infiniband that is not an RDMA device directory (a dangling or looping symbolic link, a plain
file, a directory without ``ports/``) is left out of ``devices`` and listed in ``skipped`` with the reason; two
entries that resolve to one device directory are one device (the second is skipped, naming the first). A port
rate that is not sysfs's ``<N> Gb/sec (...)`` is reported as unknown (``rate_gbps`` null). ``warnings`` says each
of these in a sentence, for the modules to warn with.

AWS EFA devices (kernel driver ``efa``) are RDMA devices whose port link layer the kernel shows as ``Unknown``;
rdma-core's udev rename names them ``rdmap<bus>s<slot>``. They have no LID, no RoCE GID types and no net device.
"""

from __future__ import annotations

import errno
import os
import re

try:
    import netaddr
    HAS_NETADDR = True
except ImportError:  # a bare target without python3-netaddr
    netaddr = None
    HAS_NETADDR = False

import ipaddress

from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import bdf_sort_key, real_pci_path

ROCE_V2 = "RoCE v2"
# The kernel driver of AWS EFA devices and the link layer the kernel shows for their ports.
EFA_DRIVER = "efa"
EFA_LINK_LAYER = "Unknown"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
# The kernel's rate file: "%d%s Gb/sec (%dX%s)" ("400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)").
_RATE_RE = re.compile(r"^([0-9]{1,6}(?:\.[0-9]{1,3})?)\s*Gb/sec(?:\s*\([^()]*\))?$")
# No port runs faster; a larger number in the rate file is garbage, not a rate.
RATE_MAX_GBPS = 100000
RATE_FORM = "a rate such as '400 Gb/sec (4X NDR)'"
_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_NATURAL_RE = re.compile(r"(\d+)")


def _read(path, default=None):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return default


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def natural_key(name):
    """Sort mlx5_2 before mlx5_10."""
    return [int(p) if p.isdigit() else p for p in _NATURAL_RE.split(name)]


def naming_scheme(name):
    """'mlx5' (mlx5_<n>), 'rocep' (rocep<bus>s<slot>...), 'ibp' (ibp<bus>s<slot>...), 'rdmap' (rdmap<bus>s<slot>...,
    rdma-core's name for a device whose link layer is neither InfiniBand nor Ethernet: AWS EFA) or 'other'."""
    if re.fullmatch(r"mlx5_\d+", name):
        return "mlx5"
    if re.match(r"^roce[Pp]", name):
        return "rocep"
    if re.match(r"^ib[Pp]\d", name):
        return "ibp"
    if re.match(r"^rdma(?:P\d+)?p\d+s\d+", name):
        return "rdmap"
    return "other"


def hca_prefix(names):
    """The prefix NVSHMEM_HCA_PREFIX takes for these device names: 'mlx5', 'rocep', 'rdmap', ... or None.

    One naming scheme for all: its prefix. Otherwise the longest common prefix with trailing digits and
    '_' removed, or None when there is none.
    """
    names = list(names)
    if not names:
        return None
    schemes = {naming_scheme(n) for n in names}
    if len(schemes) == 1 and "other" not in schemes:
        return schemes.pop()
    prefix = os.path.commonprefix(names)
    prefix = prefix.rstrip("0123456789_")
    return prefix or None


def parse_state(text):
    """'4: ACTIVE' -> (4, 'ACTIVE'); None -> (None, None)."""
    if not text:
        return None, None
    match = _STATE_RE.match(text)
    if not match:
        return None, text.strip()
    return int(match.group(1)), match.group(2)


def parse_rate_gbps(text):
    """'400 Gb/sec (4X NDR)' -> 400; '2.5 Gb/sec (1X SDR)' -> 2.5; None when missing or not a rate.

    The whole text must be the kernel's form (trailing garbage, a second number or a rate above
    RATE_MAX_GBPS make it unknown, never a number read from garbage)."""
    if not text or not isinstance(text, str):
        return None
    match = _RATE_RE.match(text.strip())
    if not match:
        return None
    value = float(match.group(1))
    if value > RATE_MAX_GBPS:
        return None
    return int(value) if value.is_integer() else value


def active_rate(device):
    """The highest rate_gbps of a gpufleet_rdma device's ACTIVE ports; None without one."""
    rates = [port.get("rate_gbps") for port in device.get("ports") or []
             if isinstance(port, dict) and port.get("active")]
    rates = [r for r in rates if isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0]
    return max(rates) if rates else None


def slow_rails(devices, names):
    """The NICs of ``names`` (a node's GPU NICs: its GPU-NIC mapping) whose ACTIVE port rate is below the highest
    rate among them: ``[{name, rate_gbps, peers_gbps}]`` in the order of ``devices`` (gpufleet_rdma's). A link trained
    down (a cable, a transceiver, a switch port) shows here; DeepEP's run goes as fast as its slowest rail. NICs
    outside ``names`` are not compared (a node's other RDMA NICs may rightly run at another speed); [] when either
    is missing."""
    if not isinstance(devices, list) or not isinstance(names, list):
        return []
    wanted = set(n for n in names if isinstance(n, str))
    rates = [(device["name"], active_rate(device)) for device in devices
             if isinstance(device, dict) and device.get("name") in wanted]
    rates = [(name, rate) for name, rate in rates if rate is not None]
    if not rates:
        return []
    top = max(rate for dummy, rate in rates)
    return [{"name": name, "rate_gbps": rate, "peers_gbps": top} for name, rate in rates if rate < top]


def gid_info(gid, use_netaddr=None):
    """Facts about one GID string: address (compressed IPv6), ipv4 (for ::ffff:a.b.c.d), link_local.

    Returns None for the all-zero (unused) GID and for text that is not a GID. use_netaddr: None =
    netaddr when importable; False forces the ipaddress fallback (True requires netaddr).
    """
    text = (gid or "").strip().lower()
    if not text or text == ZERO_GID:
        return None
    if use_netaddr is None:
        use_netaddr = HAS_NETADDR
    if use_netaddr:
        try:
            addr = netaddr.IPAddress(text, 6)
        except (netaddr.AddrFormatError, ValueError, TypeError):
            return None
        if int(addr) == 0:
            return None
        ipv4 = str(addr.ipv4()) if addr.is_ipv4_mapped() else None
        return {"address": str(addr), "ipv4": ipv4, "link_local": bool(addr.is_link_local())}
    try:
        addr6 = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if int(addr6) == 0:
        return None
    mapped = addr6.ipv4_mapped
    ipv4 = str(mapped) if mapped is not None else None
    # The same text netaddr gives: '::ffff:a.b.c.d' for IPv4-mapped addresses on every Python version.
    address = f"::ffff:{ipv4}" if ipv4 else addr6.compressed
    return {"address": address, "ipv4": ipv4, "link_local": bool(addr6.is_link_local)}


def _int_or_none(text, base=10):
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def read_counters(directory):
    out = {}
    for name in sorted(_listdir(directory)):
        value = _int_or_none(_read(os.path.join(directory, name)))
        if value is not None:
            out[name] = value
    return out


def _read_text(path):
    """The stripped text of ``path`` with undecodable bytes replaced (so garbage can be named), None when unreadable."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None


def read_port(port_dir, number, use_netaddr=None):
    state_num, state = parse_state(_read(os.path.join(port_dir, "state")))
    phys_num, phys = parse_state(_read(os.path.join(port_dir, "phys_state")))
    rate = _read_text(os.path.join(port_dir, "rate"))
    link_layer = _read(os.path.join(port_dir, "link_layer"))
    lid = _int_or_none(_read(os.path.join(port_dir, "lid")), 16)
    sm_lid = _int_or_none(_read(os.path.join(port_dir, "sm_lid")), 16)
    gids = []
    gid_dir = os.path.join(port_dir, "gids")
    for name in sorted((n for n in _listdir(gid_dir) if n.isdigit()), key=int):
        raw = _read(os.path.join(gid_dir, name))
        info = gid_info(raw, use_netaddr=use_netaddr)
        if info is None:
            continue
        index = int(name)
        entry = {
            "index": index,
            "gid": raw,
            "address": info["address"],
            "type": _read(os.path.join(port_dir, "gid_attrs", "types", name)),
            "ndev": _read(os.path.join(port_dir, "gid_attrs", "ndevs", name)),
            "ipv4": info["ipv4"],
            "link_local": info["link_local"],
        }
        gids.append(entry)
    v2_ipv4 = [g["index"] for g in gids if g["type"] == ROCE_V2 and g["ipv4"]]
    return {
        "port": number,
        "state": state,
        "state_num": state_num,
        "phys_state": phys,
        "phys_state_num": phys_num,
        "active": state == "ACTIVE",
        "link_layer": link_layer,
        "rate": rate,
        "rate_gbps": parse_rate_gbps(rate),
        "lid": lid if link_layer == "InfiniBand" else None,
        "sm_lid": sm_lid if link_layer == "InfiniBand" else None,
        "gids": gids,
        "roce_v2_ipv4_gid_index": v2_ipv4[0] if v2_ipv4 else None,
        "ipv4_addresses": sorted({g["ipv4"] for g in gids if g["ipv4"]}),
        "counters": read_counters(os.path.join(port_dir, "counters")),
        "hw_counters": read_counters(os.path.join(port_dir, "hw_counters")),
    }


def entry_problem(path):
    """Why the class/infiniband entry ``path`` is not an RDMA device directory, or None when it is one."""
    try:
        is_link = os.path.islink(path)
        target = os.readlink(path) if is_link else None
    except OSError:
        is_link, target = False, None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop (%s -> %s)" % (os.path.basename(path), target)
        if is_link and exc.errno == errno.ENOENT:
            return "a dangling symbolic link (its target %s does not exist)" % target
        return "cannot be read (%s)" % (exc.strerror or exc)
    if not os.path.isdir(path):
        behind = " behind a link to %s" % target if is_link else ""
        return "not a directory (a plain file or other non-directory%s)" % behind
    if not os.path.isdir(os.path.join(path, "ports")):
        return "a directory without ports/ (not an RDMA device)"
    return None


def list_device_entries(sysfs_root):
    """``(names, skipped)``: the entries of <sysfs_root>/class/infiniband that are RDMA devices, in natural order,
    one name per device directory; and ``[{name, reason}]`` for the others (not a device directory, or a second
    name of a device already listed)."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    names, skipped, seen = [], [], {}
    entries = sorted(_listdir(base), key=natural_key)
    real_of = {}
    for name in entries:
        path = os.path.join(base, name)
        problem = entry_problem(path)
        if problem:
            skipped.append({"name": name, "reason": problem})
            continue
        real_of[name] = os.path.realpath(path)
    # One device directory under two names: keep the name the kernel gave it (its directory's own name), else the
    # first in natural order.
    by_real = {}
    for name in entries:
        if name in real_of:
            by_real.setdefault(real_of[name], []).append(name)
    for real, group in by_real.items():
        own = [n for n in group if n == os.path.basename(real)]
        seen[real] = own[0] if own else group[0]
    for name in entries:
        if name not in real_of:
            continue
        keep = seen[real_of[name]]
        if keep == name:
            names.append(name)
        else:
            skipped.append({"name": name, "reason": "the same device directory as %s (%s)" % (keep, real_of[name])})
    return names, skipped


def rate_warnings(devices):
    """A sentence per port whose rate file holds text that is not a rate (its ``rate_gbps`` is null)."""
    out = []
    for dev in devices:
        for port in dev.get("ports") or []:
            if port.get("rate") and port.get("rate_gbps") is None:
                out.append("RDMA device %s port %s: rate %r is not %s (at most %d Gb/sec); its rate is reported as "
                           "unknown (rate_gbps null)" % (dev["name"], port["port"], port["rate"][:80], RATE_FORM,
                                                         RATE_MAX_GBPS))
    return out


def read_device(sysfs_root, name, use_netaddr=None):
    """One entry of <sysfs_root>/class/infiniband, following its symlinks as sysfs does."""
    dev_dir = os.path.join(sysfs_root, "class", "infiniband", name)
    pci_link = os.path.join(dev_dir, "device")
    pci_path = real_pci_path(sysfs_root, pci_link) if os.path.exists(pci_link) else None
    pci_address = pci_path[-1] if pci_path else None
    numa = _int_or_none(_read(os.path.join(pci_link, "numa_node")))
    driver_link = os.path.join(pci_link, "driver")
    driver = os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else None
    netdevs = sorted(_listdir(os.path.join(pci_link, "net")))
    if not netdevs and not os.path.exists(pci_link):
        # A software RDMA device (soft-RoCE rxe, siw) has no PCI device: the kernel names its net device in
        # <dev>/parent instead.
        parent = _read(os.path.join(dev_dir, "parent"))
        netdevs = [parent] if parent else []
    ports = []
    ports_dir = os.path.join(dev_dir, "ports")
    for pname in sorted((n for n in _listdir(ports_dir) if n.isdigit()), key=int):
        ports.append(read_port(os.path.join(ports_dir, pname), int(pname), use_netaddr=use_netaddr))
    return {
        "name": name,
        "naming": naming_scheme(name),
        "pci_address": pci_address,
        "pci_path": pci_path,
        "numa_node": numa if numa is not None else -1,
        "netdevs": netdevs,
        "node_guid": _read(os.path.join(dev_dir, "node_guid")),
        "sys_image_guid": _read(os.path.join(dev_dir, "sys_image_guid")),
        "fw_ver": _read(os.path.join(dev_dir, "fw_ver")),
        "board_id": _read(os.path.join(dev_dir, "board_id")),
        "hca_type": _read(os.path.join(dev_dir, "hca_type")),
        "node_type": _read(os.path.join(dev_dir, "node_type")),
        "driver": driver,
        "ports": ports,
        "active": any(p["active"] for p in ports),
    }


def collect_rdma(sysfs_root, use_netaddr=None):
    """The gpufleet_rdma facts: devices, active_devices, hca_prefix, transport, recommended_gid_index, skipped
    (entries that are not devices, with the reason) and warnings (a sentence per skipped entry or garbled rate).

    ``transport``: ``efa`` when the ACTIVE EFA ports (driver efa, link layer Unknown) outnumber both the InfiniBand
    and the Ethernet ones; otherwise ``infiniband`` or ``roce``, the more frequent (InfiniBand on a tie); ``none``
    without an ACTIVE port."""
    names, skipped = list_device_entries(sysfs_root)
    devices = [read_device(sysfs_root, n, use_netaddr=use_netaddr) for n in names]
    active = [d for d in devices if d["active"]]
    layers = [p["link_layer"] for d in active for p in d["ports"] if p["active"]]
    n_ib = sum(1 for ll in layers if ll == "InfiniBand")
    n_eth = sum(1 for ll in layers if ll == "Ethernet")
    n_efa = sum(1 for d in active for p in d["ports"]
                if p["active"] and d.get("driver") == EFA_DRIVER and p["link_layer"] == EFA_LINK_LAYER)
    if not layers:
        transport = "none"
    elif n_efa > n_ib and n_efa > n_eth:
        transport = "efa"
    elif n_ib >= n_eth:
        transport = "infiniband"
    else:
        transport = "roce"
    gid_index = None
    if transport == "roce":
        indexes = set()
        for dev in active:
            for port in dev["ports"]:
                if port["active"] and port["link_layer"] == "Ethernet":
                    indexes.add(port["roce_v2_ipv4_gid_index"])
        if len(indexes) == 1 and None not in indexes:
            gid_index = indexes.pop()
    return {
        "devices": devices,
        "active_devices": [d["name"] for d in active],
        "hca_prefix": hca_prefix(d["name"] for d in active),
        "transport": transport,
        "recommended_gid_index": gid_index,
        "skipped": skipped,
        "warnings": ["class/infiniband/%s is not listed as an RDMA device: %s" % (e["name"], e["reason"])
                     for e in skipped] + rate_warnings(devices),
    }


def rdma_ports(rdma_facts, active_only=True):
    """(device, port) candidates for NIC choice, in PCI address order; only ACTIVE ones by default."""
    out = []
    for dev in rdma_facts["devices"]:
        for port in dev["ports"]:
            if port["active"] or not active_only:
                out.append({
                    "key": f"{dev['name']}:{port['port']}",
                    "name": dev["name"],
                    "port": port["port"],
                    "pci_address": dev["pci_address"],
                    "pci_path": dev["pci_path"],
                    "numa_node": dev["numa_node"],
                    "link_layer": port["link_layer"],
                    "active": port["active"],
                })
    out.sort(key=lambda c: (bdf_sort_key(c["pci_address"]) if c["pci_address"] else (0xFFFF,), c["port"]))
    return out
