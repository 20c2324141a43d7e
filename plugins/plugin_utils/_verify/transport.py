# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Transport truth: what NVSHMEM, NCCL and DeepEP really brought up, read from their own debug output (the gate
that holds it against a node profile's policy is ``transport_gate.py``).

``transport_truth(output)`` reads the output of a short DeepEP run made with ``NVSHMEM_DEBUG=INFO`` (subsystems
INIT,TRANSPORT), ``NCCL_DEBUG=INFO`` (``NCCL_DEBUG_SUBSYS=INIT,NET``) and ``EP_BUFFER_DEBUG=1``. Every value is
taken from a line the libraries print (formats in the field notes of 2026-11-26, section 1); what the output
does not say is ``None``, never a guess. Lines may come from several ranks interleaved, with host/pid/device
prefixes, launcher prefixes (``[rank1]:``), ANSI colour codes and NVSHMEM's build-path prefix on plugin lines:
everything is matched by substring.

Pure logic, standard library only, Python 3.8+: used by the ``transport_truth`` filter and the gate.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.testlog import LogInputError, log_text

__all__ = [
    "TransportInputError", "transport_truth", "CAUSES", "PATH_CLASSES", "NVSHMEM_TRANSPORTS", "GIN_TYPES",
    "NIC_HANDLERS", "path_class",
]

IBGDA_STATES = ("initialized", "failed", "disabled")
NIC_HANDLERS = ("gpu", "cpu", "cpu_host_memory", "auto")
TRANSPORT_STATES = ("initialized", "skipped", "disabled", "unavailable", "failed")   # best to worst
NVSHMEM_TRANSPORTS = ("p2p", "ibgda", "ibrc", "ucx", "ibdevx", "libfabric")
GIN_TYPES = ("GDAKI", "EFA_GDA", "PROXY", "GPI", "none")
PATH_CLASSES = ("p2p", "shm", "net", "net_gdrdma")
# NCCL's ncclGinType_t (include/nccl_device/core.h; 5 from NCCL 2.31.2: the EFA GDA backend contributed by AWS).
_GIN_TYPE_NUMBERS = {2: "PROXY", 3: "GDAKI", 4: "GPI", 5: "EFA_GDA"}
_GIN_RANK = {"GDAKI": 0, "EFA_GDA": 0, "GPI": 1, "PROXY": 2, "none": 3}              # worst wins across comms and ranks
_HANDLER_RANK = {"gpu": 0, "cpu": 1, "cpu_host_memory": 2}
_MAX_LINES = 20


class TransportInputError(VerifyInputError):
    """The output or the policy is not something the transport gate can read; the message names it."""


# ------------------------------------------------------------------------------------------------- the patterns
_NUM_VERSION = r"(\d+\.\d+\.\d+)"
# NVSHMEM (host INFO/WARN, transport-plugin INFO with a build path prefix, WARN: lines, ERROR_PRINT lines)
_NV_SUCCESS_RE = re.compile(r"Successfully initialized the transport: ([A-Za-z0-9_]+)")
_NV_INIT_FAILED_RE = re.compile(r"init failed for (?:remote )?transport: ([A-Za-z0-9_]+)")
_NV_SKIPPED_RE = re.compile(r"\b(IBRC|UCX|IBDEVX|Libfabric) transport skipped in favor of: ([A-Za-z0-9_]+)")
_NV_UNABLE_OPEN_RE = re.compile(r"Unable to open the (\S+) transport\.")
_NV_PLUGIN_NAME_RE = re.compile(r"nvshmem_transport_([A-Za-z0-9]+)\.so")
_NV_IBGDA_DISABLED = "IBGDA Disabled by the environment."
_NV_P2P_DISABLED = "P2P access was disabled in the environment"
_NV_P2P_LIST_RE = re.compile(r"NVSHMEM INFO P2P list:((?:[ \t]+\d+)*)")
_NV_NONE_INIT = "Unable to initialize any transports"
_NV_VERSION_RE = re.compile(r"\bNVSHMEM v" + _NUM_VERSION)
_NV_HANDLER_REQ_RE = re.compile(r"NVSHMEM_IBGDA_NIC_HANDLER: ([A-Za-z_]+)")
_NV_HANDLER_RE = re.compile(r"NIC handler will be (GPU|CPU with gdrcopy backend|CPU with host memory backend)\.")
_NV_HANDLER_WORDS = {"GPU": "gpu", "CPU with gdrcopy backend": "cpu", "CPU with host memory backend": "cpu_host_memory"}
_NV_BUFFER_RE = re.compile(r"NIC buffer will be on (GPU|host) memory\.")
_NV_FALLBACK_RES = (
    re.compile(r"WARN: cudaHostRegister with IoMemory failed with error=-?\d+\. We may need to use a fallback path\."),
    re.compile(r"WARN: ibgda_nic_mem_gpu_map failed\. We may need to use the CPU fallback path\."),
    re.compile(r"WARN: ibgda_alloc_and_map_qp_uar with GPU as handler failed\. We may need to enter the CPU "
               r"fallback path\."),
)
_NV_GDR_FOUND_RE = re.compile(r"GDR driver version: \((\d+), (\d+)\)")
_NV_DEVICE_ENUM_RE = re.compile(r"Enumerated IB devices in the system - device id=\d+ \(of \d+\), name=([^\s,]+)")
# NCCL
_NCCL_VERSION_RE = re.compile(r"NCCL INFO NCCL version " + _NUM_VERSION + r"[^\s+]*(?:\+cuda(\d+\.\d+))?")
_NCCL_NETWORK_RE = re.compile(r"NCCL INFO Using network (\S+)")
_NCCL_IB_USING_RE = re.compile(r"NET/IB : Using((?: \[\d+\][^\s;]+)*)(?: \[RO\])?; OOB")
_NCCL_IB_DEV_RE = re.compile(r"\[\d+\]([^\s;\[]+)")
_NCCL_PLUGIN_RES = (
    ("loaded", re.compile(r"NET/Plugin: Loaded net plugin (\S+)"), "net"),
    ("initialized", re.compile(r"Initialized (NET|GIN|RMA) plugin (\S+)"), None),
    ("failed", re.compile(r"Failed to initialize (NET|GIN|RMA) plugin (\S+)"), None),
    ("assigned", re.compile(r"Assigned (NET) plugin (\S+) to comm"), None),
    ("assigned", re.compile(r"GIN/Plugin: Assigned plugin (\S+) type (\d+) to comm"), "gin"),
    ("assigned", re.compile(r"Assigned GIN plugin (\S+) to comm"), "gin"),
    ("failed", re.compile(r"(GIN|RMA)/Plugin: Failed to initialize any (?:GIN )?plugin"), None),
    ("not_found", re.compile(r"\b(ENV|NET|GIN|RMA|TUNER|PROFILER)/Plugin: Could not find: (\S+)"), None),
)
_NCCL_GIN_ASSIGNED_RE = re.compile(r"GIN/Plugin: Assigned plugin (\S+) type (\d+) to comm|Assigned GIN plugin (\S+) to comm")
_NCCL_GIN_NONE = "GIN/Plugin: Failed to initialize any GIN plugin"
_NCCL_CHANNEL_RE = re.compile(
    r"NCCL INFO Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\](?: \[(?:send|receive)\])? via "
    r"(P2P/direct pointer|P2P/indirect|\S+)")
_NCCL_SYMMETRIC_RE = re.compile(r"Symmetric memory is not supported\.")
# Multi-node NVLink (NCCL 2.25.2+, src/mnnvl.cc): "MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 0 nvlDomainSize 8"
# where NCCL brought it up across hosts; its refusal names the IMEX channel.
_NCCL_MNNVL_RE = re.compile(r"NCCL INFO MNNVL ([01]) cliqueId \S+ cliqueSize (\d+)")
_NCCL_MNNVL_BROKEN_RE = re.compile(r"MNNVL \(cliqueSize \d+\) is available but not working on this system[^\n]*")
# DeepEP (EP_BUFFER_DEBUG=1, asserts)
_EP_NCCL_RE = re.compile(r"DeepEP initialized with NCCL version: " + _NUM_VERSION + r" \(loaded library\)")
_EP_QPS_RE = re.compile(r"EP NCCL device communicator has (\d+) allocated QPs")

# Lines that name a likely cause: (source, kind, pattern). The gate turns kinds into causes.
_FINDINGS = (
    ("nvshmem", "regkey", _NV_FALLBACK_RES[0]),
    ("nvshmem", "regkey", _NV_FALLBACK_RES[1]),
    ("nvshmem", "regkey", _NV_FALLBACK_RES[2]),
    ("nvshmem", "gdrcopy_missing", re.compile(r"GDRCopy library not found\. disabling GDRCopy\.")),
    ("nvshmem", "gdrcopy_old", re.compile(r"GDRCopy library is older than v2\.0\. Disabling GDRCopy\.")),
    ("nvshmem", "gdrcopy_incompatible", re.compile(r"GDRCopy library version is not compatible with gdrapi\.h")),
    ("nvshmem", "gdrdrv_not_loaded", re.compile(r"GDRCopy open call failed, disabling GDRCopy\.")),
    ("nvshmem", "handler_cpu_needs_gdrcopy", re.compile(r"NVSHMEM_IBGDA_NIC_HANDLER=cpu requires GDRCopy\.")),
    ("nvshmem", "peermem_missing", re.compile(r"neither nv_peer_mem, or nvidia_peermem detected\. Skipping transport\.")),
    ("nvshmem", "peermem_control", re.compile(r"does not support registering the NIC control buffers with DMABUF")),
    ("nvshmem", "ibverbs_missing", re.compile(r"Unable to dlopen libibverbs\.")),
    ("nvshmem", "mlx5dv_missing", re.compile(r"Unable to dlopen libmlx5dv\.")),
    ("nvshmem", "nic_name", re.compile(r"device \S+ is not supported \(expected HCA interface: [^)]*\)")),
    ("nvshmem", "nic_not_mlx5", re.compile(r"device \S+ is not enumerated as an mlx5 device")),
    ("nvshmem", "nic_memtype", re.compile(r"device \S+ cannot allocate buffer on the specified memory type")),
    ("nvshmem", "nic_atomics", re.compile(r"device \S+ does not support all necessary atomic operations")),
    ("nvshmem", "no_ib_device", re.compile(r"no active IB device (?:that supports GPU-initiated communication )?"
                                           r"(?:is )?found, exiting")),
    ("nvshmem", "ibgda_not_requested", re.compile(re.escape(_NV_IBGDA_DISABLED))),
    ("nvshmem", "transport_missing", _NV_UNABLE_OPEN_RE),
    ("nvshmem", "p2p_disabled", re.compile(re.escape(_NV_P2P_DISABLED))),
    ("nvshmem", "version_mismatch", re.compile(r"NVSHMEM (?:device library|version in CUmodule or CUlibrary) "
                                               r"(?:version )?does not match with NVSHMEM host library version")),
    ("nccl", "nccl_no_ib_device", re.compile(r"NET/IB : No device found\.")),
    ("nccl", "nccl_net_plugin_failed", re.compile(r"Failed to initialize NET plugin \S+")),
    ("nccl", "nccl_gdr_disabled", re.compile(r"GPU Direct RDMA Disabled for HCA \d+ '[^']*'")),
    ("nccl", "nccl_gin_peermem", re.compile(r"Unable to use GIN: Peermem is not supported[^\n]*")),
    ("nccl", "nccl_gin_none", re.compile(re.escape(_NCCL_GIN_NONE))),
    ("nccl", "nccl_gin_failed", re.compile(r"NCCL WARN (?:GIN is disabled\.|GIN not supported\.|No GIN-capable devices "
                                           r"found\.|Communicator does not support symmetric memory!|GIN Proxy: RMA "
                                           r"backend not found|User requested GIN[^\n]*)")),
    ("nccl", "mlx5_old", re.compile(r"dlvsym failed on mlx5dv_\w+ - [^\n]*version MLX5_1\.\d+")),
    ("nccl", "nccl_symmetric", _NCCL_SYMMETRIC_RE),
    ("nccl", "mnnvl_imex", _NCCL_MNNVL_BROKEN_RE),
    ("nccl", "nccl_version_guard", re.compile(r"NCCL library is (?:too old|not backwards compatible)[^\n]*")),
    ("deepep", "deepep_gin_unavailable", re.compile(r"NCCL GIN is unavailable\.")),
    ("deepep", "deepep_nccl_mismatch", re.compile(r"Prior to NCCL 2\.31, NCCL compile-time and runtime versions must be "
                                                  r"the same\.|Invalid NCCL versions: [^\n]*")),
)

# The cause each finding points to.
CAUSES = {
    "regkey": "the NIC doorbell could not be mapped into GPU memory: the PeerMappingOverride=1 regkey "
              "(NVreg_RegistryDwords, role nvidia_peermapping) is likely not live; reload the nvidia module or reboot",
    "gdrcopy_missing": "GDRCopy missing: libgdrapi.so.2 was not found (role gdrcopy)",
    "gdrcopy_old": "GDRCopy too old: the library is older than v2.0 (role gdrcopy)",
    "gdrcopy_incompatible": "GDRCopy library does not match the gdrapi.h NVSHMEM was built with (rebuild NVSHMEM or "
                            "re-pin GDRCopy)",
    "gdrdrv_not_loaded": "GDRCopy's gdrdrv kernel module is not loaded (gdr_open failed)",
    "handler_cpu_needs_gdrcopy": "NVSHMEM_IBGDA_NIC_HANDLER=cpu was requested without GDRCopy",
    "peermem_missing": "nvidia_peermem not loaded (neither nv_peer_mem nor nvidia_peermem) and DMA-BUF unusable",
    "peermem_control": "DMA-BUF cannot register the NIC control buffers: nvidia_peermem is needed for them",
    "ibverbs_missing": "libibverbs could not be loaded (rdma-core / DOCA-OFED userspace missing)",
    "mlx5dv_missing": "libmlx5 (mlx5dv) could not be loaded (rdma-core / DOCA-OFED userspace missing)",
    "nic_name": "NIC names are not ones NVSHMEM accepts (mlx5*/ibp*): set NVSHMEM_HCA_PREFIX or NVSHMEM_HCA_LIST",
    "nic_not_mlx5": "a NIC is not an mlx5 device: IBGDA needs mlx5 NICs (DeepEP #759)",
    "nic_memtype": "a NIC cannot allocate buffers on the requested memory type (DeepEP #128)",
    "nic_atomics": "a NIC lacks the atomics IBGDA needs: check PCI_ATOMIC_MODE in the NIC firmware",
    "no_ib_device": "no active IB/RoCE device: no NIC, its ports down, or NVSHMEM_HCA_LIST names NICs that do not exist",
    "ibgda_not_requested": "IBGDA disabled by the environment (NVSHMEM_IB_ENABLE_IBGDA not set to 1)",
    "transport_missing": "an NVSHMEM transport plugin (nvshmem_transport_<name>.so) is missing from the install",
    "p2p_disabled": "P2P disabled in the environment (NVSHMEM_DISABLE_P2P)",
    "version_mismatch": "NVSHMEM device and host libraries of different versions (rebuild against one NVSHMEM)",
    "nccl_no_ib_device": "NCCL found no IB device (NET/IB : No device found.): no NIC, ports down or NCCL_IB_HCA wrong",
    "nccl_net_plugin_failed": "an NCCL network plugin failed to initialize",
    "nccl_gdr_disabled": "GPUDirect RDMA disabled for a NIC: nvidia_peermem not loaded or DMA-BUF unusable",
    "nccl_gin_peermem": "NCCL GIN unusable: neither peermem nor DMA-BUF is supported (load nvidia_peermem)",
    "nccl_gin_none": "no NCCL GIN plugin initialized (no GDAKI-capable mlx5 NIC and no proxy backend)",
    "nccl_gin_failed": "NCCL refused GIN (see the NCCL WARN line)",
    "mlx5_old": "libmlx5 lacks the MLX5_1.25 symbols: rdma-core/MLNX_OFED older than NCCL's GIN expects (DeepEP #628)",
    "nccl_symmetric": "NCCL symmetric memory unsupported (NCCL_CUMEM_ENABLE=0, or no GIN across nodes)",
    "mnnvl_imex": "multi-node NVLink found but not usable: the IMEX channel (/dev/nvidia-caps-imex-channels, "
                  "NVreg_CreateImexChannel0=1) is missing or the nvidia-imex service is not READY (role imex)",
    "nccl_version_guard": "NCCL runtime older than, or incompatible with, the version the application was built with",
    "deepep_gin_unavailable": "DeepEP found no NCCL GIN (ginType NONE): network configuration or allow_hybrid_mode",
    "deepep_nccl_mismatch": "DeepEP built against another NCCL than the one loaded (rebuild DeepEP or re-pin NCCL)",
}


# ------------------------------------------------------------------------------------------------------ helpers
def _worst(current, new, order):
    """The worse of two states by ``order`` (a tuple best to worst, or a rank mapping)."""
    if current is None:
        return new
    rank = order if isinstance(order, dict) else dict((s, i) for i, s in enumerate(order))
    return new if rank[new] > rank[current] else current


def _distinct(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def _clip(line):
    line = line.strip()
    return line if len(line) <= 300 else line[:297] + "..."


def path_class(path):
    """The class of an NCCL per-channel path: ``p2p``, ``shm``, ``net_gdrdma``, ``net`` or None."""
    if path.startswith("P2P/"):
        return "p2p"
    if path.startswith("SHM/"):
        return "shm"
    if path.startswith("NET/"):
        return "net_gdrdma" if "/GDRDMA" in path else "net"
    return None


def _normal_path(raw):
    """``NET/IB/0/GDRDMA(PCI)`` -> ``NET/IB/GDRDMA``; P2P and SHM paths are kept as printed."""
    raw = raw.rstrip(",.")
    if raw.startswith("NET/"):
        parts = [p for p in re.split(r"/", re.sub(r"\(.*?\)", "", raw)) if p and not p.isdigit()]
        return "/".join(parts)
    return raw


# ------------------------------------------------------------------------------------------------------ parsing
def _nvshmem(text):
    transports = {}

    def mark(name, state):
        key = name.lower()
        transports[key] = _worst(transports.get(key), state, TRANSPORT_STATES)

    for m in _NV_SUCCESS_RE.finditer(text):
        mark(m.group(1), "initialized")
    for m in _NV_SKIPPED_RE.finditer(text):
        mark(m.group(1), "skipped")
    for m in _NV_UNABLE_OPEN_RE.finditer(text):
        plugin = _NV_PLUGIN_NAME_RE.search(m.group(1))
        mark(plugin.group(1) if plugin else m.group(1), "unavailable")
    for m in _NV_INIT_FAILED_RE.finditer(text):
        mark(m.group(1), "failed")
    if _NV_IBGDA_DISABLED in text:
        mark("ibgda", "disabled")
    peers = [len(m.group(1).split()) for m in _NV_P2P_LIST_RE.finditer(text)]
    if peers:
        mark("p2p", "initialized")
    if _NV_P2P_DISABLED in text:
        mark("p2p", "disabled")

    ibgda = {"initialized": "initialized", "disabled": "disabled"}.get(transports.get("ibgda"))
    if transports.get("ibgda") in ("failed", "unavailable"):
        ibgda = "failed"

    requested = None
    for m in _NV_HANDLER_REQ_RE.finditer(text):
        value = m.group(1).lower()
        requested = value if value in NIC_HANDLERS else requested
    decided = None
    for m in _NV_HANDLER_RE.finditer(text):
        decided = _worst(decided, _NV_HANDLER_WORDS[m.group(1)], _HANDLER_RANK)
    buffers = _distinct(m.group(1).lower() for m in _NV_BUFFER_RE.finditer(text))

    warnings = _distinct(_clip(m.group(0)) for pattern in _NV_FALLBACK_RES for m in pattern.finditer(text))
    if warnings or (decided in ("cpu", "cpu_host_memory") and requested in ("auto", "gpu")):
        cpu_fallback = True
    elif decided is not None or ibgda == "initialized":
        # the fallback warnings are always printed (NVSHMEMI_WARN_PRINT): an initialized IBGDA without them, or a
        # printed handler decision that is the one asked for, is no fallback
        cpu_fallback = False
    else:
        cpu_fallback = None

    gdrcopy = None
    for kind, state in (("gdrcopy_missing", "not_found"), ("gdrcopy_old", "too_old"),
                        ("gdrcopy_incompatible", "incompatible"), ("gdrdrv_not_loaded", "open_failed")):
        pattern = dict((k, p) for _s, k, p in _FINDINGS)[kind]
        if pattern.search(text):
            gdrcopy = state
    if gdrcopy is None and _NV_GDR_FOUND_RE.search(text):
        gdrcopy = "found"

    versions = _distinct(m.group(1) for m in _NV_VERSION_RE.finditer(text))
    return {
        "ibgda": ibgda,
        "nic_handler": decided or requested,
        "nic_handler_requested": requested,
        "nic_buffer": buffers[0] if len(buffers) == 1 else ("host" if "host" in buffers else None),
        "cpu_fallback": cpu_fallback,
        "fallback_warnings": warnings,
        "transports": transports,
        "p2p_peers": max(peers) if peers else None,
        "gdrcopy": gdrcopy,
        "devices": _distinct(m.group(1) for m in _NV_DEVICE_ENUM_RE.finditer(text)),
        "none_initialized": True if _NV_NONE_INIT in text else None,
        "version": versions[0] if len(versions) == 1 else None,
    }


def _nccl(text):
    versions = _distinct(m.group(1) for m in _NCCL_VERSION_RE.finditer(text))
    cudas = _distinct(m.group(2) for m in _NCCL_VERSION_RE.finditer(text) if m.group(2))
    networks = _distinct(m.group(1) for m in _NCCL_NETWORK_RE.finditer(text))

    plugins = {}
    for state, pattern, fixed_kind in _NCCL_PLUGIN_RES:
        for m in pattern.finditer(text):
            if fixed_kind:
                kind, name = fixed_kind, m.group(1)
            else:
                kind = m.group(1).lower()
                name = m.group(2) if m.lastindex and m.lastindex >= 2 else "all"
            entry = plugins.setdefault(kind, {})
            names = entry.setdefault(state, [])
            if name not in names:
                names.append(name)

    gin = None
    gin_plugins = []
    for m in _NCCL_GIN_ASSIGNED_RE.finditer(text):
        name = m.group(1) or m.group(3)
        gin_plugins = _distinct(gin_plugins + [name])
        kind = _GIN_TYPE_NUMBERS.get(int(m.group(2))) if m.group(2) else None
        if kind is None:
            kind = "GDAKI" if "GDAKI" in name.upper() else ("PROXY" if "PROXY" in name.upper() else None)
        if kind is not None:
            gin = _worst(gin, kind, _GIN_RANK)
    if _NCCL_GIN_NONE in text:
        gin = _worst(gin, "none", _GIN_RANK)

    raw_paths = [_normal_path(m.group(1)) for m in _NCCL_CHANNEL_RE.finditer(text)]
    paths = sorted(set(raw_paths))
    net_paths = [p for p in paths if path_class(p) in ("net", "net_gdrdma")]
    cliques = [(m.group(1) == "1", int(m.group(2))) for m in _NCCL_MNNVL_RE.finditer(text)]
    ib_devices = []
    for m in _NCCL_IB_USING_RE.finditer(text):
        ib_devices = _distinct(ib_devices + _NCCL_IB_DEV_RE.findall(m.group(1)))
    return {
        "version": versions[0] if len(versions) == 1 else None,
        "versions": versions,
        "cuda": cudas[0] if len(cudas) == 1 else None,
        "network": networks[0] if len(networks) == 1 else None,
        "networks": networks,
        "ib_devices": ib_devices,
        "gin": gin,
        "gin_plugin": gin_plugins[0] if len(gin_plugins) == 1 else None,
        "paths": paths,
        "path_classes": sorted(set(c for c in (path_class(p) for p in paths) if c)),
        "gdrdma": (all(path_class(p) == "net_gdrdma" for p in net_paths)) if net_paths else None,
        "plugins": plugins,
        "symmetric_memory": False if _NCCL_SYMMETRIC_RE.search(text) else None,
        # Multi-node NVLink: True where every rank's line says NCCL brought it up, False where one says not (or NCCL
        # refused it), None where the output does not say; the smallest clique a rank reported.
        "mnnvl": (False if _NCCL_MNNVL_BROKEN_RE.search(text) or not all(up for up, dummy in cliques) else True)
        if cliques or _NCCL_MNNVL_BROKEN_RE.search(text) else None,
        "mnnvl_clique_size": min(size for dummy, size in cliques) if cliques else None,
    }


def _deepep(text):
    versions = _distinct(m.group(1) for m in _EP_NCCL_RE.finditer(text))
    qps = [int(m.group(1)) for m in _EP_QPS_RE.finditer(text)]
    return {
        "nccl_version": versions[0] if len(versions) == 1 else None,
        "nccl_versions": versions,
        "qps": min(qps) if qps else None,
        "gin_unavailable": True if "NCCL GIN is unavailable" in text else None,
    }


def _findings(text):
    found = []
    seen = set()
    for source, kind, pattern in _FINDINGS:
        for m in pattern.finditer(text):
            line = _clip(m.group(0))
            if (kind, line) in seen:
                continue
            seen.add((kind, line))
            found.append({"source": source, "kind": kind, "line": line, "cause": CAUSES[kind]})
            if len(found) >= 100:
                return found
    return found


def transport_truth(output):
    """Parse libraries' debug output into what really came up; see the module docstring and the filter's docs.

    ``output``: a string, a list of lines, or a command result holding ``stdout``/``stderr``.
    """
    try:
        text = log_text(output)
    except LogInputError as exc:
        raise TransportInputError(str(exc).replace("test output", "output")) from exc
    return {
        "nvshmem": _nvshmem(text),
        "nccl": _nccl(text),
        "deepep": _deepep(text),
        "findings": _findings(text),
    }
