# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI tree of a node from sysfs: GPUs, PCIe distances, GPU-to-NIC choice, CUDA arch list.

Pure logic on a directory that stands for /sys (sysfs_root); stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import re
import time

NVIDIA_VENDOR = 0x10DE
# PCI class codes (class >> 8): VGA compatible controller, 3D controller. Audio (0x0403), bridges
# (NVSwitch: 0x0680) and other NVIDIA functions are not GPUs.
GPU_CLASSES = (0x0300, 0x0302)
DISTANCE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
BDF_RE = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
HOST_BRIDGE_RE = re.compile(r"pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}")

# PCI device id -> (marketing name, compute capability) for data-centre GPUs the collection targets
# and their close relatives. Used when nvidia-smi cannot tell (driver not loaded, tool missing).
GPU_DEVICE_IDS = {
    0x1DB1: ("Tesla V100-SXM2-16GB", "7.0"),
    0x1DB4: ("Tesla V100-PCIE-16GB", "7.0"),
    0x1DB5: ("Tesla V100-SXM2-32GB", "7.0"),
    0x1DB6: ("Tesla V100-PCIE-32GB", "7.0"),
    0x1EB8: ("Tesla T4", "7.5"),
    0x20B0: ("NVIDIA A100-SXM4-40GB", "8.0"),
    0x20B1: ("NVIDIA A100-PCIE-40GB", "8.0"),
    0x20B2: ("NVIDIA A100-SXM4-80GB", "8.0"),
    0x20B3: ("NVIDIA A100-SXM-64GB", "8.0"),
    0x20B5: ("NVIDIA A100 80GB PCIe", "8.0"),
    0x20B7: ("NVIDIA A30", "8.0"),
    0x20F1: ("NVIDIA A100-PCIE-40GB", "8.0"),
    0x20F3: ("NVIDIA A800-SXM4-80GB", "8.0"),
    0x20F5: ("NVIDIA A800 80GB PCIe", "8.0"),
    0x2236: ("NVIDIA A10", "8.6"),
    0x2237: ("NVIDIA A10G", "8.6"),
    0x25B6: ("NVIDIA A16", "8.6"),
    0x26B5: ("NVIDIA L40", "8.9"),
    0x26B9: ("NVIDIA L40S", "8.9"),
    0x27B8: ("NVIDIA L4", "8.9"),
    0x2321: ("NVIDIA H100 NVL", "9.0"),
    0x2322: ("NVIDIA H800 PCIe", "9.0"),
    0x2324: ("NVIDIA H800", "9.0"),
    0x2330: ("NVIDIA H100 80GB HBM3", "9.0"),
    0x2331: ("NVIDIA H100 PCIe", "9.0"),
    0x2335: ("NVIDIA H200", "9.0"),
    0x2339: ("NVIDIA H100 SXM5 94GB", "9.0"),
    0x233A: ("NVIDIA H800 NVL", "9.0"),
    0x233B: ("NVIDIA H200 NVL", "9.0"),
    0x233D: ("NVIDIA H100 96GB", "9.0"),
    0x2342: ("NVIDIA GH200 480GB", "9.0"),
    0x2348: ("NVIDIA GH200 144G HBM3e", "9.0"),
    0x2900: ("NVIDIA B200 (engineering)", "10.0"),
    0x2901: ("NVIDIA B200", "10.0"),
    0x2941: ("NVIDIA GB200", "10.0"),
    0x3182: ("NVIDIA B300 SXM6 AC", "10.3"),
    0x31C2: ("NVIDIA GB300", "10.3"),
}


def _read(path, default=None):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return default


def _read_int(path, default=None, base=0):
    text = _read(path)
    if text is None:
        return default
    try:
        return int(text, base)
    except ValueError:
        return default


def normalize_bdf(text):
    """'00000000:8F:00.0' (nvidia-smi) or '8f:00.0' -> '0000:8f:00.0'; None when it is not a PCI address."""
    if not text:
        return None
    text = text.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0000"] + parts
    if len(parts) != 3:
        return None
    dom = parts[0][-4:].rjust(4, "0")
    bdf = f"{dom}:{parts[1]}:{parts[2]}"
    return bdf if BDF_RE.fullmatch(bdf) else None


def bdf_sort_key(bdf):
    """Sort key in PCI bus-id order (domain, bus, device, function)."""
    dom, bus, devfn = bdf.split(":")
    dev, fn = devfn.split(".")
    return (int(dom, 16), int(bus, 16), int(dev, 16), int(fn))


def real_pci_path(sysfs_root, device_dir):
    """Path of a PCI device from its host bridge: ['pci0000:8c', '0000:8c:00.0', ..., '<bdf>'].

    device_dir is any path that resolves (through sysfs symlinks) to the device's directory under
    <sysfs_root>/devices. Returns None when it does not resolve to a PCI device there.
    """
    real = os.path.realpath(device_dir)
    base = os.path.join(os.path.realpath(sysfs_root), "devices")
    try:
        rel = os.path.relpath(real, base)
    except ValueError:
        return None
    if rel.startswith(".."):
        return None
    parts = rel.split(os.sep)
    # The host bridge is usually the first component; under a hypervisor bus (Hyper-V's VMBUS, ...)
    # it comes after the bus's own components.
    start = next((i for i, part in enumerate(parts) if HOST_BRIDGE_RE.fullmatch(part)), None)
    if start is None:
        return None
    path = [parts[start].lower()]
    for part in parts[start + 1:]:
        if not BDF_RE.fullmatch(part):
            break
        path.append(part.lower())
    if len(path) < 2:
        return None
    return path


def read_pci_device(sysfs_root, bdf):
    """Attributes of one PCI device under <sysfs_root>/bus/pci/devices/<bdf>, or None."""
    link = os.path.join(sysfs_root, "bus", "pci", "devices", bdf)
    if not os.path.exists(link):
        return None
    numa = _read_int(os.path.join(link, "numa_node"), default=-1, base=10)
    return {
        "pci_address": bdf.lower(),
        "vendor_id": _read_int(os.path.join(link, "vendor")),
        "device_id": _read_int(os.path.join(link, "device")),
        "class": _read_int(os.path.join(link, "class")),
        "subsystem_vendor_id": _read_int(os.path.join(link, "subsystem_vendor")),
        "subsystem_device_id": _read_int(os.path.join(link, "subsystem_device")),
        "numa_node": numa,
        "local_cpulist": _read(os.path.join(link, "local_cpulist")),
        "driver": (os.path.basename(os.readlink(os.path.join(link, "driver")))
                   if os.path.islink(os.path.join(link, "driver")) else None),
        "path": real_pci_path(sysfs_root, link),
    }


def list_pci_devices(sysfs_root):
    """Every PCI device of <sysfs_root>/bus/pci/devices, in bus-id order."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in sorted((n for n in names if BDF_RE.fullmatch(n)), key=bdf_sort_key):
        dev = read_pci_device(sysfs_root, name)
        if dev is not None:
            out.append(dev)
    return out


def is_gpu(dev):
    """NVIDIA vendor and a display (VGA) or 3D controller class."""
    cls = dev.get("class")
    return dev.get("vendor_id") == NVIDIA_VENDOR and cls is not None and (cls >> 8) in GPU_CLASSES


def suspect_gpus(sysfs_root):
    """PCI functions that look like NVIDIA GPUs but cannot be read as one: [(bdf, why)], in bus-id order.

    An NVIDIA function (vendor readable, or a known GPU device id) whose class file is missing or garbled, and a
    function with the nvidia driver bound whose vendor or class cannot be read. is_gpu() does not count them, so
    the caller warns: a GPU is never dropped without a word.
    """
    out = []
    for dev in list_pci_devices(sysfs_root):
        if is_gpu(dev):
            continue
        vendor, cls, driver = dev.get("vendor_id"), dev.get("class"), dev.get("driver")
        nvidia = vendor == NVIDIA_VENDOR or (vendor is None and dev.get("device_id") in GPU_DEVICE_IDS)
        if nvidia and cls is None:
            out.append((dev["pci_address"], "its class file is missing or not a hexadecimal number"))
        elif driver == "nvidia" and (vendor is None or cls is None):
            out.append((dev["pci_address"], "the nvidia driver is bound but its vendor or class cannot be read"))
        elif vendor is None and cls is not None and (cls >> 8) in GPU_CLASSES:
            out.append((dev["pci_address"], "a display controller whose vendor file cannot be read"))
    return out


def gpu_count_problem(gpus, rows):
    """Why the GPUs of sysfs (``list_gpus``) and of nvidia-smi (parsed query rows) disagree, or None.

    Without rows (nvidia-smi missing or failed) there is nothing to compare. A disagreement would shift the
    GPU-to-NIC mapping by the missing GPU, so callers fail instead of returning one."""
    if not rows:
        return None
    smi = sorted(b for b in (normalize_bdf(r.get("pci.bus_id")) for r in rows) if b)
    unparsed = [r.get("pci.bus_id") for r in rows if not normalize_bdf(r.get("pci.bus_id"))]
    seen = sorted(g["pci_address"] for g in gpus)
    if not unparsed and smi == seen:
        return None
    only_smi = sorted(set(smi) - set(seen))
    only_sysfs = sorted(set(seen) - set(smi))
    text = ("nvidia-smi lists %d GPUs but sysfs shows %d (only in nvidia-smi: %s; only in sysfs: %s"
            % (len(rows), len(gpus), ", ".join(only_smi) or "none", ", ".join(only_sysfs) or "none"))
    if unparsed:
        text += "; bus ids nvidia-smi gave that are not PCI addresses: %s" % ", ".join(map(repr, unparsed))
    return (text + "); the GPU-to-NIC mapping would be shifted, so none is returned. Expected one sysfs GPU per "
            "nvidia-smi GPU: check the PCI tree (lspci -d 10de:) and the driver")


def list_gpus(sysfs_root):
    """NVIDIA GPUs from the PCI tree, indexed in PCI bus-id order as nvidia-smi does."""
    gpus = [d for d in list_pci_devices(sysfs_root) if is_gpu(d)]
    for index, gpu in enumerate(gpus):
        gpu["index"] = index
        known = GPU_DEVICE_IDS.get(gpu["device_id"])
        gpu["name"] = known[0] if known else None
        gpu["compute_capability"] = known[1] if known else None
    return gpus


def pcie_distance(path_a, path_b, numa_a=-1, numa_b=-1):
    """nvidia-smi style distance between two PCI devices from their real paths (see real_pci_path).

    PIX: both below one bridge, each at most one bridge further down (one PCIe switch, or one bridge).
    PXB: below one bridge, through more bridges (nested switches), without the host bridge.
    PHB: same host bridge, no common bridge below it.
    NODE: different host bridges of one NUMA node.  SYS: different NUMA nodes.
    A NUMA node of -1 (unknown) counts as the same node only when both are unknown.
    Returns None when a path is unknown.
    """
    if not path_a or not path_b:
        return None
    if path_a[0] != path_b[0]:
        if numa_a == numa_b:
            return "NODE"
        return "SYS"
    common = 0
    for x, y in zip(path_a, path_b):
        if x != y:
            break
        common += 1
    if common <= 1:
        return "PHB"
    depth = max(len(path_a) - common, len(path_b) - common)
    return "PIX" if depth <= 2 else "PXB"


def distance_rank(label):
    """Sort rank of a distance label; unknown distances sort last."""
    try:
        return DISTANCE_ORDER.index(label)
    except ValueError:
        return len(DISTANCE_ORDER)


def assign_nics(gpus, candidates):
    """Choose one NIC port per GPU.

    gpus: list of dicts with 'index' and 'distances' ({candidate key: label}).
    candidates: list of dicts with 'key', 'name', 'port', 'pci_address' (ACTIVE ports only).
    Each GPU, in index order, takes the nearest candidate; among equally near ones the one used by
    the fewest GPUs so far, then the lowest PCI address (then port). With fewer NICs than GPUs this
    shares them round-robin. Returns {gpu index: candidate or None}.
    """
    uses = {c["key"]: 0 for c in candidates}
    chosen = {}
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        best = None
        best_key = None
        for cand in candidates:
            key = (distance_rank(gpu["distances"].get(cand["key"])), uses[cand["key"]],
                   bdf_sort_key(cand["pci_address"]) if cand.get("pci_address") else (0xFFFF,), cand["port"],
                   cand["name"])
            if best_key is None or key < best_key:
                best, best_key = cand, key
        chosen[gpu["index"]] = best
        if best is not None:
            uses[best["key"]] += 1
    return chosen


def cuda_arch_list(capabilities):
    """TORCH_CUDA_ARCH_LIST value ('9.0', '8.0;9.0') from compute capabilities; '' when none known."""
    seen = set()
    for cap in capabilities:
        if cap and re.fullmatch(r"\d+\.\d+", str(cap)):
            seen.add(str(cap))
    return ";".join(sorted(seen, key=lambda c: tuple(int(x) for x in c.split("."))))


def parse_nvidia_smi_query(text, fields):
    """Rows of 'nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits' as dicts."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            continue
        row = {}
        for name, value in zip(fields, values):
            row[name] = None if value in ("[N/A]", "N/A", "[Not Supported]", "") else value
        rows.append(row)
    return rows


NVIDIA_SMI_QUERY_FIELDS = ["index", "pci.bus_id", "name", "memory.total", "compute_cap", "uuid", "driver_version"]


def nvidia_smi_query_argv(nvidia_smi):
    """The GPU query of gpu_topology (and node_stack's ``gpus``)."""
    return [nvidia_smi, "--query-gpu=" + ",".join(NVIDIA_SMI_QUERY_FIELDS), "--format=csv,noheader,nounits"]


def empty_smi_info(path):
    """How nvidia-smi was used when it was not run: the ``nvidia_smi`` facts of gpufleet_gpus."""
    return {"path": path, "used": False, "rc": None, "stdout": "", "stderr": "", "timed_out": False, "error": None}


def query_nvidia_smi(path, runner, timeout, env=None, clock=time.monotonic):
    """Run nvidia-smi's GPU query, then its NVLink status, within ``timeout`` seconds in all.

    ``runner(argv, timeout=..., env=env)`` returns ``(rc, stdout, stderr)``, rc 124 when it killed the command at
    its bound. Returns ``{"rows", "nvlink", "info", "warnings", "fatal"}``: the parsed query rows (None when
    nvidia-smi gave none), the NVLink status (None without it), the ``nvidia_smi`` facts (``timed_out`` and
    ``error`` name the command and the bound that was not met), sentences to warn with, and the refusal when the GPU
    query ran past ``timeout`` (a wedged driver: the caller fails). The NVLink status gets what the query left of
    the bound, so a slow nvidia-smi is never waited out twice; a timed-out query is never run again.
    """
    info = empty_smi_info(path)
    out = {"rows": None, "nvlink": None, "info": info, "warnings": [], "fatal": None}
    if path is None:
        return out
    argv = nvidia_smi_query_argv(path)
    started = clock()
    rc, stdout, stderr = runner(argv, timeout=timeout, env=env)
    used_s = clock() - started
    info["rc"] = rc
    info["stderr"] = stderr
    if rc == 124:
        info["timed_out"] = True
        info["stdout"] = stdout
        info["error"] = "%s did not answer the GPU query within timeout=%ss and was killed: %s" % (
            path, timeout, " ".join(argv))
        out["fatal"] = ("%s (a wedged driver?); check the driver (dmesg, nvidia-smi by hand) or raise timeout "
                        "(seconds, a positive integer)" % info["error"])
        return out
    if rc != 0:
        info["stdout"] = stdout
        info["error"] = "%s --query-gpu failed (rc=%s): %s" % (path, rc, (stdout + stderr).strip()[:300])
        out["warnings"].append("%s; GPU facts come from sysfs alone" % info["error"])
        return out
    rows = parse_nvidia_smi_query(stdout, NVIDIA_SMI_QUERY_FIELDS)
    if not rows:
        info["stdout"] = stdout
        info["error"] = ("%s answered the GPU query (rc=0) with no GPU line in %d field(s) (output: %r)"
                         % (path, len(NVIDIA_SMI_QUERY_FIELDS), stdout.strip()[:200]))
        out["warnings"].append("%s; GPU facts come from sysfs alone, NVLink status not asked" % info["error"])
        return out
    out["rows"] = rows
    info["used"] = True
    left = timeout - used_s
    nvlink_argv = [path, "nvlink", "-s"]
    if left < 1:
        info["error"] = ("%s not run: the GPU query took %.1fs of timeout=%ss, less than a second is left"
                         % (" ".join(nvlink_argv), used_s, timeout))
        out["warnings"].append("%s; NVLink facts left out" % info["error"])
        return out
    rc2, out2, dummy = runner(nvlink_argv, timeout=left, env=env)
    if rc2 == 124:
        info["error"] = ("%s did not answer within the %.1fs the GPU query left of timeout=%ss and was killed"
                         % (" ".join(nvlink_argv), left, timeout))
        out["warnings"].append("%s; NVLink facts left out" % info["error"])
    elif rc2 == 0:
        out["nvlink"] = parse_nvlink_status(out2)
    return out


def parse_nvlink_status(text):
    """{gpu index: {'links': n, 'bandwidth_gbps': total}} from 'nvidia-smi nvlink -s'."""
    out = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+):", line)
        if head:
            current = int(head.group(1))
            out[current] = {"links": 0, "bandwidth_gbps": 0.0}
            continue
        link = re.match(r"^\s*Link \d+: ([0-9.]+) GB/s", line)
        if link and current is not None:
            out[current]["links"] += 1
            out[current]["bandwidth_gbps"] = round(out[current]["bandwidth_gbps"] + float(link.group(1)), 3)
    return out


def gpu_facts(gpus, candidates, all_ports=None, smi_rows=None, nvlink=None):
    """The gpufleet_gpus facts without the mapping string.

    gpus: list_gpus() output. candidates: ACTIVE RDMA ports (_rdma.active_ports). all_ports: every RDMA
    port (active or not) for the per-GPU NIC list; defaults to candidates. smi_rows: parsed
    nvidia-smi --query-gpu rows (keys index, pci.bus_id, name, memory.total, compute_cap, uuid,
    driver_version) or None. nvlink: parse_nvlink_status() output or None.
    """
    by_bus = {}
    for row in smi_rows or []:
        bdf = normalize_bdf(row.get("pci.bus_id"))
        if bdf:
            by_bus[bdf] = row
    ports = all_ports if all_ports is not None else candidates
    out = []
    for gpu in gpus:
        row = by_bus.get(gpu["pci_address"])
        name = gpu["name"]
        cap = gpu["compute_capability"]
        memory = None
        uuid = None
        link = None
        if row is not None:
            name = row.get("name") or name
            cap = row.get("compute_cap") or cap
            memory = int(row["memory.total"]) if (row.get("memory.total") or "").isdigit() else None
            uuid = row.get("uuid")
            smi_index = int(row["index"]) if (row.get("index") or "").isdigit() else None
            if nvlink is not None and smi_index in nvlink:
                link = nvlink[smi_index]
        nics = []
        distances = {}
        for port in ports:
            label = pcie_distance(gpu["path"], port["pci_path"], gpu["numa_node"], port["numa_node"])
            distances[port["key"]] = label
            nics.append({"name": port["name"], "port": port["port"], "pci_address": port["pci_address"],
                         "distance": label, "active": bool(port.get("active", True))})
        nics.sort(key=lambda n: (distance_rank(n["distance"]),
                                 bdf_sort_key(n["pci_address"]) if n["pci_address"] else (0xFFFF,), n["port"]))
        out.append({
            "index": gpu["index"],
            "pci_address": gpu["pci_address"],
            "pci_path": gpu["path"],
            "numa_node": gpu["numa_node"],
            "local_cpulist": gpu["local_cpulist"],
            "pci_device_id": f"0x{gpu['device_id']:04x}" if gpu.get("device_id") is not None else None,
            "name": name,
            "compute_capability": cap,
            "memory_total_mib": memory,
            "uuid": uuid,
            "nvlink": link,
            "source": "nvidia-smi" if row is not None else "sysfs",
            "nics": nics,
            "distances": distances,
        })
    chosen = assign_nics(out, candidates)
    for gpu in out:
        pick = chosen.get(gpu["index"])
        gpu["hca"] = ({"name": pick["name"], "port": pick["port"], "pci_address": pick["pci_address"],
                       "distance": gpu["distances"][pick["key"]]} if pick else None)
        del gpu["distances"]
    return out
