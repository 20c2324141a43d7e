# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The NIC traffic of an internode run (runbook 001, "PR #466 effect"): the ``gpufleet_rdma`` counters before and
after the run compared per ACTIVE port, and why a NIC stayed idle (no GPU-NIC mapping, a DeepEP without the
mapping support, the one-NIC bandwidth signature).

Pure logic, standard library only, Python 3.8+.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import (
    UNMAPPED_SIGNATURE_GBPS,
    UNMAPPED_SIGNATURE_TOLERANCE,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import active_rate, slow_rails
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["nic_traffic"]


# ------------------------------------------------------------------------------------------ NIC traffic
def _devices(rdma):
    """The devices list of a gpufleet_rdma fact (or of facts holding one)."""
    if not isinstance(rdma, dict):
        raise VerifyInputError("RDMA facts must be the gpufleet_rdma mapping (devices with ports); got %s"
                               % type(rdma).__name__)
    if isinstance(rdma.get("gpufleet_rdma"), dict):
        rdma = rdma["gpufleet_rdma"]
    devices = rdma.get("devices")
    if not isinstance(devices, list):
        raise VerifyInputError("RDMA facts have no 'devices' list (gpufleet.deepep.rdma_devices facts expected)")
    return devices


# The most payload one RoCE/InfiniBand packet carries (the largest IB MTU): a port that sent fewer packets than
# min_bytes / this cannot have carried min_bytes.
MAX_PAYLOAD_BYTES = 4096


def _active_ports(devices):
    """{device: {port: port facts}} of the ACTIVE ports of gpufleet_rdma devices."""
    ports = {}
    for device in devices:
        if not isinstance(device, dict) or not device.get("name"):
            continue
        for port in device.get("ports") or []:
            if isinstance(port, dict) and port.get("active"):
                ports.setdefault(device["name"], {})[port.get("port", 1)] = port
    return ports


def _counter(port, group, name):
    value = (port.get(group) or {}).get(name) if isinstance(port, dict) else None
    return None if value is None or isinstance(value, bool) else int(value)


def _port_sent(old, new):
    """(bytes, packets) one port sent between two readings of its facts; None where it has no such counter.

    Bytes from ``counters/port_xmit_data`` (4-byte words), as every mlx5 port has. A software RDMA device (rxe)
    has no ``counters/`` directory; its ``hw_counters/sent_pkts`` counts packets, and only where there is no byte
    counter are packets read."""
    words = (_counter(old, "counters", "port_xmit_data"), _counter(new, "counters", "port_xmit_data"))
    if None not in words:
        return max(0, words[1] - words[0]) * 4, None
    packets = (_counter(old, "hw_counters", "sent_pkts"), _counter(new, "hw_counters", "sent_pkts"))
    if None not in packets:
        return None, max(0, packets[1] - packets[0])
    return None, None


def _parse_mapping(mapping):
    """``0:mlx5_0:1,1:mlx5_1:1`` -> {gpu: hca}; tolerant (the strict parser is the hca_mapping filter)."""
    table = {}
    if not mapping or not isinstance(mapping, str):
        return table
    for item in mapping.split(","):
        parts = item.strip().split(":")
        if len(parts) >= 2 and parts[0].strip().isdigit():
            table[int(parts[0])] = parts[1].strip()
    return table


def nic_traffic(before, after, min_bytes=1048576, rdma_gbps=None, mapping=None, mapping_supported=None,
                signature_gbps=UNMAPPED_SIGNATURE_GBPS, tolerance_gbps=UNMAPPED_SIGNATURE_TOLERANCE):
    """Judge the NIC counters around an internode run (runbook 001, "PR #466 effect").

    ``before``/``after``: ``gpufleet_rdma`` facts. Every ACTIVE NIC port must have sent at least
    ``min_bytes`` (``port_xmit_data`` counts 4-byte words); a port without it (soft-RoCE rxe) is judged on its
    ``hw_counters/sent_pkts``: at least ``min_bytes`` / 4096 packets. ``rdma_gbps``: the run's RDMA figure,
    ``mapping``: the DEEP_EP_DEVICE_TO_HCA_MAPPING the test ran with ("" or None when unset),
    ``mapping_supported``: whether the installed DeepEP applies it (None when unknown). A NIC the mapping uses whose
    port rate (``after``) is below the highest rate of the mapped NICs is ``slow``: its link trained down (a cable,
    a transceiver, a switch port) and DeepEP's run goes as fast as its slowest rail; it fails the check, named.
    Without a mapping the rates are not compared (a node's other RDMA NICs may rightly run at another speed).
    Returns ``{passed, nics, busy, idle, slow, causes, signature}``; each NIC has ``bytes`` or ``packets`` (the
    other null), the ``counter`` they came from and its ``rate_gbps``.
    """
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 1:
        raise VerifyInputError("min_bytes must be a positive integer; got %r" % (min_bytes,))
    ports_before = _active_ports(_devices(before))
    devices = _devices(after)
    ports_after = _active_ports(devices)
    rates = dict((d["name"], active_rate(d)) for d in devices if isinstance(d, dict) and d.get("name"))
    min_packets = -(-min_bytes // MAX_PAYLOAD_BYTES)
    nics = []
    for name in _natural_sorted(ports_after):
        sent, packets = None, None
        for port, facts in sorted(ports_after[name].items()):
            port_bytes, port_packets = _port_sent((ports_before.get(name) or {}).get(port), facts)
            if port_bytes is not None:
                sent = (sent or 0) + port_bytes
            elif port_packets is not None:
                packets = (packets or 0) + port_packets
        busy = (sent is not None and sent >= min_bytes) or (packets is not None and packets >= min_packets)
        nics.append({"name": name, "bytes": sent, "packets": packets,
                     "counter": "port_xmit_data" if sent is not None else "sent_pkts" if packets is not None else None,
                     "busy": busy, "rate_gbps": rates.get(name)})
    busy = [n["name"] for n in nics if n["busy"]]
    idle = [n["name"] for n in nics if not n["busy"]]
    causes = []
    table = _parse_mapping(mapping)
    mapped = set(table.values())
    rails = slow_rails(devices, sorted(mapped))
    slow = _natural_sorted(r["name"] for r in rails)
    if rails:
        by_name = dict((r["name"], r) for r in rails)
        causes.append("%s run%s at %s Gb/s while the node's other mapped NICs run at %s Gb/s: a link trained down "
                      "(cable, transceiver or switch port; check ibstat's Rate and Active width); the run goes as "
                      "fast as its slowest rail"
                      % (", ".join(slow), "s" if len(slow) == 1 else "",
                         "/".join(_fmt_rate(by_name[name]["rate_gbps"]) for name in slow),
                         _fmt_rate(rails[0]["peers_gbps"])))
    signature = rdma_gbps is not None and abs(float(rdma_gbps) - signature_gbps) <= tolerance_gbps
    if not nics:
        causes.append("no ACTIVE RDMA port on this node: nothing to check (port down, or no RDMA device)")
    elif any(n["counter"] is None for n in nics):
        causes.append("no traffic counter on %s (neither counters/port_xmit_data nor, on a software RDMA device, "
                      "hw_counters/sent_pkts)" % ", ".join(n["name"] for n in nics if n["counter"] is None))
    if idle and nics:
        first_only = busy == [nics[0]["name"]] or (len(busy) == 1 and len(nics) > 1)
        if not busy:
            causes.append("no NIC carried traffic: the internode run did not reach RDMA (it failed or hung "
                          "before dispatch, or NVSHMEM did not use the IBGDA transport)")
        elif not table:
            causes.append("DEEP_EP_DEVICE_TO_HCA_MAPPING is not set in the test's environment (not applied by "
                          "the env script): every GPU used %s; %s stayed idle (runbook 001 problem 3)"
                          % (", ".join(busy), ", ".join(idle)))
        elif mapping_supported is False:
            causes.append("DeepEP is built without the GPU-NIC mapping support (PR #466): it ignores "
                          "DEEP_EP_DEVICE_TO_HCA_MAPPING, so %s stayed idle; rebuild DeepEP with PR #466"
                          % ", ".join(idle))
        else:
            unmapped = [n for n in idle if n not in mapped]
            ignored = [n for n in idle if n in mapped]
            if unmapped:
                causes.append("no GPU is mapped to %s in DEEP_EP_DEVICE_TO_HCA_MAPPING=%s"
                              % (", ".join(unmapped), mapping))
            if ignored:
                if first_only:
                    causes.append("DEEP_EP_DEVICE_TO_HCA_MAPPING lists %s but they carried no traffic: the "
                                  "mapping was not applied (DeepEP built without the PR #466 mapping support, "
                                  "or the variable did not reach the test processes)" % ", ".join(ignored))
                else:
                    causes.append("%s carried no traffic although DEEP_EP_DEVICE_TO_HCA_MAPPING maps GPUs to "
                                  "them (port or link problem on those NICs, or GPUs left out of the run)"
                                  % ", ".join(ignored))
    if signature:
        causes.append("measured RDMA bandwidth %s GB/s is the ~%s GB/s signature of every GPU using one NIC "
                      "(mlx5_0, the first HCA): the GPU-NIC mapping of DeepEP PR #466 is not in effect (runbook 001 "
                      "problem 3)"
                      % (rdma_gbps, signature_gbps))
    passed = bool(nics) and not idle and not slow
    return {"passed": passed, "nics": nics, "busy": busy, "idle": idle, "slow": slow, "causes": causes,
            "signature": signature, "mapping": mapping or "", "mapping_supported": mapping_supported}


def _fmt_rate(value):
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


def _natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(name))]


def _natural_sorted(names):
    return sorted(names, key=_natural_key)
