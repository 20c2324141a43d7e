# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse and render DEEP_EP_DEVICE_TO_HCA_MAPPING strings (gpu:hca:port,...).

One implementation for the gpu_topology module, node_stack and the hca_mapping filter, plus the
gpufleet_gpus facts both modules return (topology_facts). Pure logic, stdlib only.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import cuda_arch_list, gpu_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import rdma_ports

EXPECTED = "gpu:hca:port[,gpu:hca:port...], e.g. 0:mlx5_0:1,1:mlx5_1:1"
_INT_RE = re.compile(r"^[0-9]+$")
_HCA_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class HcaMappingError(ValueError):
    """A mapping string or entry is malformed; the message names the bad part and the expected form."""


def _fail(msg):
    raise HcaMappingError(f"{msg}; expected {EXPECTED}")


def parse_hca_mapping(text):
    """Parse 'gpu:hca:port,...' into a list of {'gpu': int, 'hca': str, 'port': int}, in the given order.

    Rejects an empty string, empty entries (doubled or trailing commas), entries that are not exactly
    three colon-separated parts, a GPU index or port that is not a non-negative integer (port >= 1),
    an empty or odd HCA name, and a GPU that appears twice.
    """
    if not isinstance(text, str):
        _fail(f"HCA mapping must be a string, got {type(text).__name__} {text!r}")
    if any(c in text for c in "\n\r\0"):
        _fail(f"HCA mapping {text!r} holds a line break or NUL (it would end the line of the env script)")
    body = text.strip()
    if not body:
        _fail("HCA mapping is empty")
    entries = []
    seen = {}
    for pos, raw in enumerate(body.split(",")):
        entry = raw.strip()
        if not entry:
            _fail(f"HCA mapping {text!r}: entry {pos + 1} is empty (doubled or trailing ',')")
        for sep in (";", "|", "=", "/", " ", "\t"):
            if sep in entry:
                _fail(f"HCA mapping entry {entry!r} contains {sep!r}: separate entries with ',' and the "
                      f"parts of an entry with ':'")
        parts = entry.split(":")
        if len(parts) != 3:
            what = "is missing the port" if len(parts) == 2 else f"has {len(parts)} ':'-separated parts, not 3"
            _fail(f"HCA mapping entry {entry!r} {what}")
        gpu, hca, port = (p.strip() for p in parts)
        if not _INT_RE.fullmatch(gpu):
            _fail(f"HCA mapping entry {entry!r}: GPU {gpu!r} is not a non-negative integer")
        if not hca:
            _fail(f"HCA mapping entry {entry!r}: the HCA name is empty")
        if not _HCA_RE.fullmatch(hca):
            _fail(f"HCA mapping entry {entry!r}: HCA {hca!r} is not a device name (letters, digits, _ . -)")
        if not _INT_RE.fullmatch(port) or int(port) < 1:
            _fail(f"HCA mapping entry {entry!r}: port {port!r} is not a positive integer")
        gpu_i = int(gpu)
        if gpu_i in seen:
            _fail(f"HCA mapping {text!r}: GPU {gpu_i} appears twice ({seen[gpu_i]!r} and {entry!r})")
        seen[gpu_i] = entry
        entries.append({"gpu": gpu_i, "hca": hca, "port": int(port)})
    return entries


def _coerce_int(value, what, entry):
    if isinstance(value, bool):
        _fail(f"HCA mapping entry {entry!r}: {what} {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        return int(value.strip())
    _fail(f"HCA mapping entry {entry!r}: {what} {value!r} is not an integer")
    return None  # not reached


def normalize_entries(value):
    """Entries from a list of {'gpu','hca','port'} mappings or a dict {gpu: {'hca','port'} | 'hca:port'}."""
    items = []
    if isinstance(value, dict):
        for gpu, spec in value.items():
            if isinstance(spec, dict):
                items.append({"gpu": gpu, "hca": spec.get("hca"), "port": spec.get("port")})
            elif isinstance(spec, str) and spec.count(":") == 1:
                hca, port = spec.split(":")
                items.append({"gpu": gpu, "hca": hca, "port": port})
            else:
                _fail(f"HCA mapping value for GPU {gpu!r} is {spec!r}, not 'hca:port' or {{hca, port}}")
    elif isinstance(value, (list, tuple)):
        for entry in value:
            if not isinstance(entry, dict):
                _fail(f"HCA mapping entry {entry!r} is not a mapping with gpu, hca and port")
            items.append(entry)
    else:
        _fail(f"cannot render an HCA mapping from {type(value).__name__} {value!r}")
    out = []
    seen = set()
    for entry in items:
        missing = [k for k in ("gpu", "hca", "port") if entry.get(k) is None or entry.get(k) == ""]
        if missing:
            _fail(f"HCA mapping entry {entry!r} lacks {', '.join(missing)}")
        gpu = _coerce_int(entry["gpu"], "GPU", entry)
        port = _coerce_int(entry["port"], "port", entry)
        hca = str(entry["hca"]).strip()
        if gpu < 0:
            _fail(f"HCA mapping entry {entry!r}: GPU {gpu} is negative")
        if port < 1:
            _fail(f"HCA mapping entry {entry!r}: port {port} is not a positive integer")
        if not _HCA_RE.fullmatch(hca):
            _fail(f"HCA mapping entry {entry!r}: HCA {hca!r} is not a device name (letters, digits, _ . -)")
        if gpu in seen:
            _fail(f"HCA mapping: GPU {gpu} appears twice")
        seen.add(gpu)
        out.append({"gpu": gpu, "hca": hca, "port": port})
    if not out:
        _fail("HCA mapping has no entries")
    return out


def render_hca_mapping(value):
    """Render entries (list or dict, see normalize_entries) as 'gpu:hca:port,...' in GPU order."""
    entries = sorted(normalize_entries(value), key=lambda e: e["gpu"])
    return ",".join(f"{e['gpu']}:{e['hca']}:{e['port']}" for e in entries)


def mapping_as_dict(entries):
    """{gpu: {'hca': str, 'port': int}} from parsed entries."""
    return {e["gpu"]: {"hca": e["hca"], "port": e["port"]} for e in entries}


def topology_facts(gpus, rdma, smi_rows=None, nvlink=None, smi_info=None, unreadable=None):
    """``ansible_facts.gpufleet_gpus``: the GPUs of ``list_gpus`` (enriched by nvidia-smi rows and NVLink
    status), each with its nearest ACTIVE NIC from ``collect_rdma``'s ``rdma``, the mapping string DeepEP
    reads, the CUDA arch list and the driver version. ``smi_info`` is how nvidia-smi was used."""
    facts_gpus = gpu_facts(gpus, rdma_ports(rdma), all_ports=rdma_ports(rdma, active_only=False),
                           smi_rows=smi_rows, nvlink=nvlink)
    entries = [{"gpu": g["index"], "hca": g["hca"]["name"], "port": g["hca"]["port"]}
               for g in facts_gpus if g["hca"] is not None]
    mapping = render_hca_mapping(entries) if entries else ""
    driver = None
    for row in smi_rows or []:
        driver = row.get("driver_version") or driver
    return {
        "gpus": facts_gpus,
        "gpu_count": len(facts_gpus),
        "deepep_hca_mapping": mapping,
        "hca_mapping": parse_hca_mapping(mapping) if mapping else [],
        "cuda_arch_list": cuda_arch_list(g["compute_capability"] for g in facts_gpus),
        "driver_version": driver,
        "nvidia_smi": smi_info,
        "unreadable": list(unreadable or []),
    }
