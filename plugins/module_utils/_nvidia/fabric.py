# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUs' NVLink fabric state as ``nvidia-smi -q`` prints it (node_stack's ``gpufleet_gpu_fabric``).

On a GB200/GB300 NVL72 rack the compute trays' GPUs form one NVLink domain across hosts (multi-node NVLink,
MNNVL). Each GPU registers with the NVLink switch trays' Fabric Manager; ``nvidia-smi -q`` prints the result in
each GPU block's ``Fabric`` section (keys padded to a column with `` : ``)::

    GPU 00000009:01:00.0
        Product Name                          : NVIDIA GB200
        Fabric
            State                             : Completed
            Status                            : Success
            CliqueId                          : 32766
            ClusterUUID                       : 6a130f54-faaa-4b8f-847f-be44ab70f917
            Health
                Summary                       : Healthy
                Bandwidth                     : Full

State runs ``Not Started`` -> ``In Progress`` -> ``Completed``; Status is read only once the state is Completed
(NVML: ``Success``, or e.g. ``Insufficient Resources`` with CliqueId 0 and a zero ClusterUUID). PCIe GPUs and older
drivers print ``N/A`` (or no Fabric section), ``Not Supported`` on others. An HGX H100 with Fabric Manager prints
Completed / Success with an all-zero ClusterUUID: one NVLink domain per node, none across hosts. A GPU is ready for
multi-node NVLink only when State is Completed, Status is Success and the ClusterUUID is not zero - NCCL's own rule
(``src/mnnvl.cc``: a zero UUID turns MNNVL off).

Pure parsing plus :func:`gather_fabric`, which runs ``nvidia-smi -q`` through ``runner(argv, timeout, env) ->
(rc, stdout, stderr)`` (bounded by ``timeout``); a missing nvidia-smi or a failed run is a fact (``error``), never an
exception. Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import re

__all__ = ["ZERO_UUID", "NOT_REPORTED", "smi_q_argv", "parse_smi_q", "gpu_verdict", "fabric_summary",
           "gather_fabric"]

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# Values that say the GPU reports no fabric at all (PCIe GPUs, older drivers, GPUs without NVLink switches).
NOT_REPORTED = ("N/A", "Not Supported")
COMPLETED = "Completed"
SUCCESS = "Success"

_GPU_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KEY_RE = re.compile(r"^(\s*)([^:]*?)\s*:\s?(.*)$")
_HEADER_KEYS = {"Driver Version": "driver_version", "CUDA Version": "cuda_version", "Attached GPUs": "attached_gpus"}
_ZERO_RE = re.compile(r"^[0-]+$")


def smi_q_argv(nvidia_smi):
    """The command that prints every GPU's ``Fabric`` section."""
    return [nvidia_smi, "-q"]


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _value(raw):
    value = raw.strip()
    return value if value else None


def _fabric_section(lines):
    """The Fabric section of one GPU block (its lines after the ``Fabric`` line, deeper than it) as a tree:
    ``{key: value, subsection: {key: value}}``; None when the block has no Fabric section."""
    start = None
    for number, line in enumerate(lines):
        if line.strip() == "Fabric" and ":" not in line:
            start = number
            break
    if start is None:
        return None
    base = _indent(lines[start])
    tree = {}
    stack = [(base, tree)]
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        depth = _indent(line)
        if depth <= base:
            break
        while len(stack) > 1 and depth <= stack[-1][0]:
            stack.pop()
        node = stack[-1][1]
        match = _KEY_RE.match(line)
        if match and ":" in line:
            node[match.group(2).strip()] = _value(match.group(3))
        else:
            child = {}
            node[line.strip()] = child
            stack.append((depth, child))
    return tree


def _clique(value):
    if value is None or value in NOT_REPORTED:
        return None
    text = value.strip()
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text, 16)
    return int(text) if text.isdigit() else None


def _uuid(value):
    """The ClusterUUID, None for N/A, Not Supported or the all-zero UUID (no multi-node domain)."""
    if value is None or value in NOT_REPORTED or _ZERO_RE.match(value):
        return None
    return value.lower()


def gpu_verdict(state, status, cluster_uuid_raw):
    """``(ready, why)``: whether the GPU is ready for multi-node NVLink (State Completed, Status Success, a non-zero
    ClusterUUID), and why not in words (None when ready)."""
    if state is None or state in NOT_REPORTED:
        return False, ("the GPU reports no NVLink fabric (State %s): not a GPU of an NVLink switch domain, or a driver "
                       "that does not report it" % (state or "absent"))
    if state != COMPLETED:
        return False, ("fabric registration is %s, not Completed: Fabric Manager on the NVLink switch trays has not "
                       "registered the GPU" % state)
    if status != SUCCESS:
        return False, ("fabric registration Completed with Status %s, not Success: the GPU is not part of the NVLink "
                       "domain" % (status or "absent"))
    if _uuid(cluster_uuid_raw) is None:
        return False, ("ClusterUUID is %s: the GPU is in no multi-node NVLink domain (NCCL turns MNNVL off)"
                       % ("all zero" if cluster_uuid_raw and _ZERO_RE.match(cluster_uuid_raw)
                          else (cluster_uuid_raw or "absent")))
    return True, None


def _gpu_entry(bus_id, lines):
    product = None
    for line in lines:
        match = _KEY_RE.match(line)
        if match and match.group(2).strip() == "Product Name" and _indent(line) > 0:
            product = _value(match.group(3))
            break
    fabric = _fabric_section(lines)
    section = fabric if fabric is not None else {}
    health = section.get("Health") if isinstance(section.get("Health"), dict) else {}
    state, status = section.get("State"), section.get("Status")
    uuid_raw = section.get("ClusterUUID")
    bandwidth = health.get("Bandwidth") if health.get("Bandwidth") is not None else section.get("Bandwidth")
    ready, why = gpu_verdict(state, status, uuid_raw)
    if fabric is None:
        why = "nvidia-smi -q printed no Fabric section for this GPU (a driver older than the fabric query)"
    return {
        "bus_id": bus_id,
        "product_name": product,
        "state": state,
        "status": status,
        "clique_id": _clique(section.get("CliqueId")),
        "cluster_uuid": _uuid(uuid_raw),
        "health_summary": health.get("Summary"),
        "bandwidth": bandwidth if not isinstance(bandwidth, dict) else None,
        "ready": ready,
        "why": why,
    }


def parse_smi_q(text):
    """``(header, gpus)`` of ``nvidia-smi -q`` text: the header's ``driver_version``, ``cuda_version`` and
    ``attached_gpus`` (int) and one entry per GPU block (``GPU 00000000:18:00.0``), in the order printed."""
    header = {"driver_version": None, "cuda_version": None, "attached_gpus": None}
    blocks = []
    current = None
    for line in (text or "").splitlines():
        match = _GPU_RE.match(line)
        if match:
            current = (match.group(1).upper(), [])
            blocks.append(current)
            continue
        if current is not None:
            current[1].append(line)
            continue
        key = _KEY_RE.match(line)
        if key and key.group(2).strip() in _HEADER_KEYS:
            header[_HEADER_KEYS[key.group(2).strip()]] = _value(key.group(3))
    attached = header["attached_gpus"]
    header["attached_gpus"] = int(attached) if attached and attached.isdigit() else None
    return header, [_gpu_entry(bus_id, lines) for bus_id, lines in blocks]


def fabric_summary(gpus):
    """The node's view of its GPUs' fabric: ``all_ready`` (every GPU ready, and at least one), the distinct
    non-zero ``cluster_uuids`` and the distinct ``clique_ids`` (sorted), ``supported`` (a GPU reports a fabric state
    other than N/A or Not Supported) and ``not_ready`` (the bus ids of the GPUs that are not ready)."""
    return {
        "all_ready": bool(gpus) and all(g["ready"] for g in gpus),
        "cluster_uuids": sorted(set(g["cluster_uuid"] for g in gpus if g["cluster_uuid"] is not None)),
        "clique_ids": sorted(set(g["clique_id"] for g in gpus if g["clique_id"] is not None)),
        "supported": any(g["state"] is not None and g["state"] not in NOT_REPORTED for g in gpus),
        "not_ready": [g["bus_id"] for g in gpus if not g["ready"]],
    }


def _tail(text, lines=5):
    text = (text or "").strip()
    return "\n".join(text.splitlines()[-lines:]) if text else ""


def gather_fabric(nvidia_smi, runner, timeout=60):
    """``gpufleet_gpu_fabric``: ``nvidia-smi -q`` of ``nvidia_smi`` (None: not found) read through ``runner``,
    bounded by ``timeout`` seconds.

    Keys: ``nvidia_smi`` (the path run), ``error`` (why nothing could be read: nvidia-smi missing, failed, timed out,
    or no GPU block printed; None otherwise), ``driver_version``, ``cuda_version``, ``attached_gpus``, ``gpus`` (per
    GPU ``bus_id``, ``product_name``, ``state``, ``status``, ``clique_id``, ``cluster_uuid``, ``health_summary``,
    ``bandwidth``, ``ready``, ``why``) and the :func:`fabric_summary` keys."""
    facts = {"nvidia_smi": nvidia_smi, "error": None, "driver_version": None, "cuda_version": None,
             "attached_gpus": None, "gpus": []}
    if not nvidia_smi:
        facts["error"] = "nvidia-smi not found (PATH and the sbin directories): the GPUs' fabric state is unknown"
    else:
        rc, out, err = runner(smi_q_argv(nvidia_smi), timeout=timeout, env=None)
        if rc == 124:
            facts["error"] = "%s -q timed out after %ss" % (nvidia_smi, timeout)
        elif rc != 0:
            facts["error"] = "%s -q failed (rc=%s): %s" % (nvidia_smi, rc, _tail(err or out) or "no output")
        else:
            header, gpus = parse_smi_q(out)
            facts.update(header)
            facts["gpus"] = gpus
            if not gpus:
                facts["error"] = "%s -q printed no GPU block (expected lines such as 'GPU 00000000:18:00.0')" \
                                 % nvidia_smi
    facts.update(fabric_summary(facts["gpus"]))
    return facts
