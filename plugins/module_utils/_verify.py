# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Judging logic of the fleet verification (roles verify_intranode and verify_internode).

Pure logic, standard library only, Python 3.8+: rank assignment over inventory groups, the choice of
the master's fabric-facing interface, bandwidth thresholds per profile and the gate, the NIC-traffic
judgement of runbook 001 ("PR #466 effect"), and the summary (JSON data and a Markdown table).

The address check itself (netaddr) lives in the ``verify_helpers`` filter plugin, on the controller;
this file only picks the interface and lists its addresses.
"""

from __future__ import annotations

import re

__all__ = [
    "VerifyInputError", "internode_plan", "connectivity", "fabric_interface", "select_thresholds", "gate",
    "nic_traffic", "summarize", "render_markdown", "METRICS", "HANG_DIAGNOSIS", "UNMAPPED_SIGNATURE_GBPS",
]

# Threshold keys: where each one is read in the deepep_bandwidth result.
METRICS = {
    "dispatch_bf16_nvl_gbps": ("dispatch", "bf16", "nvl_gbps"),
    "dispatch_bf16_rdma_gbps": ("dispatch", "bf16", "rdma_gbps"),
    "dispatch_fp8_nvl_gbps": ("dispatch", "fp8", "nvl_gbps"),
    "dispatch_fp8_rdma_gbps": ("dispatch", "fp8", "rdma_gbps"),
    "combine_nvl_gbps": ("combine", "nvl_gbps"),
    "combine_rdma_gbps": ("combine", "rdma_gbps"),
}

# Runbook 001 problem 3: every GPU on mlx5_0 (no GPU-NIC mapping) gives about 6.5 GB/s RDMA.
UNMAPPED_SIGNATURE_GBPS = 6.5
UNMAPPED_SIGNATURE_TOLERANCE = 2.0

# Runbook 001 problems 4 and 8, DeepEP #424, reference pain point 4.
HANG_DIAGNOSIS = [
    "DeepEP built against an NVSHMEM without IBGDA (e.g. the pip or PyTorch-bundled NVSHMEM): the build log "
    "must show '> NVSHMEM path: /opt/deepep/nvshmem', not site-packages/nvidia/nvshmem; rebuild with "
    "NVSHMEM_DIR set to the IBGDA build (runbook 001 problem 8, DeepEP #424)",
    "ranks out of step: every node must start at the same time with the same WORLD_SIZE, MASTER_ADDR and "
    "MASTER_PORT and its own RANK, and run the same DeepEP build",
    "wrong transport: NVSHMEM_REMOTE_TRANSPORT must be ibgda (IBRC does not support GPU-initiated "
    "operations) and the CPU NIC handler can hang internode dispatch: use NVSHMEM_IBGDA_NIC_HANDLER=gpu "
    "(runbook 001 problem 4)",
]


class VerifyInputError(ValueError):
    """An argument is not what the verification expects; the message names it and the expected form."""


# ------------------------------------------------------------------------------------------ ranks
def _as_group_list(groups):
    if isinstance(groups, str):
        groups = [g.strip() for g in groups.split(",")]
    if not isinstance(groups, (list, tuple)) or not groups:
        raise VerifyInputError("groups must be a group name, a comma-separated string or a list of group "
                               "names; got %r" % (groups,))
    names = []
    for group in groups:
        if not isinstance(group, str) or not group.strip():
            raise VerifyInputError("group names must be non-empty strings; got %r in %r" % (group, groups))
        if group.strip() not in names:
            names.append(group.strip())
    return names


def internode_plan(groups, inventory_groups, masters=None, only_hosts=None):
    """Runs of the internode test: one per group, the master first (rank 0), the others in group order.

    ``groups``: a group name, comma-separated names or a list. ``inventory_groups``: the ``groups``
    magic variable (group name -> host list). ``masters``: optional dict group -> host overriding the
    master (default: the group's first host). ``only_hosts``: when given, hosts outside it are left out
    (the play's hosts, e.g. after ``--limit``). Each run: ``{group, master, world_size, hosts (in rank
    order), ranks {host: rank}}``. Raises :class:`VerifyInputError`.
    """
    if not isinstance(inventory_groups, dict):
        raise VerifyInputError("inventory_groups must be the mapping of group names to hosts (the `groups` "
                               "variable); got %s" % type(inventory_groups).__name__)
    masters = masters or {}
    if not isinstance(masters, dict):
        raise VerifyInputError("masters must be a mapping of group name to master host; got %r" % (masters,))
    plan = []
    for group in _as_group_list(groups):
        if group not in inventory_groups:
            raise VerifyInputError("group %r is not in the inventory (groups: %s)"
                                   % (group, ", ".join(sorted(k for k in inventory_groups if k != "all"))))
        hosts = [h for h in inventory_groups[group] if only_hosts is None or h in only_hosts]
        if len(hosts) < 2:
            raise VerifyInputError("group %r has %d host(s)%s; an internode run needs at least 2"
                                   % (group, len(hosts), " in this play" if only_hosts is not None else ""))
        master = masters.get(group) or hosts[0]
        if master not in hosts:
            raise VerifyInputError("master %r of group %r is not a host of that group (hosts: %s)"
                                   % (master, group, ", ".join(hosts)))
        ordered = [master] + [h for h in hosts if h != master]
        plan.append({
            "group": group,
            "master": master,
            "world_size": len(ordered),
            "hosts": ordered,
            "ranks": dict((host, rank) for rank, host in enumerate(ordered)),
        })
    return plan


# ------------------------------------------------------------------------------------------ master address
def _iface_addresses(facts, interface):
    data = facts.get(interface) or facts.get("ansible_" + interface) \
        or facts.get(interface.replace("-", "_")) or facts.get("ansible_" + interface.replace("-", "_"))
    if not isinstance(data, dict):
        return None
    addresses = []
    ipv4 = data.get("ipv4")
    for entry in ([ipv4] if isinstance(ipv4, dict) else []) + list(data.get("ipv4_secondaries") or []):
        if isinstance(entry, dict) and entry.get("address"):
            addresses.append(entry["address"])
    for entry in data.get("ipv6") or []:
        if isinstance(entry, dict) and entry.get("address") and entry.get("scope") != "link":
            addresses.append(entry["address"])
    return addresses


def _facts_view(facts):
    if not isinstance(facts, dict):
        raise VerifyInputError("the master's facts must be a mapping (hostvars[master].ansible_facts); got %s"
                               % type(facts).__name__)
    inner = facts.get("ansible_facts")
    return inner if isinstance(inner, dict) else facts


def fabric_interface(facts, interface=None, ansible_host=None):
    """Pick the master's fabric-facing interface from its facts and list its addresses.

    ``interface`` wins when given; else the interface holding ``ansible_host`` (the address the
    controller reaches the node on); else the interface of the default IPv4 route. Returns
    ``{interface, addresses}``. Raises :class:`VerifyInputError` naming what is missing.
    """
    facts = _facts_view(facts)
    names = facts.get("interfaces") or facts.get("ansible_interfaces") or []
    if interface:
        addresses = _iface_addresses(facts, interface)
        if addresses is None:
            raise VerifyInputError("interface %r is not an interface of the master (interfaces: %s); gather "
                                   "facts on the master or fix the fabric interface variable"
                                   % (interface, ", ".join(sorted(names)) or "none gathered"))
        return {"interface": interface, "addresses": addresses}
    if ansible_host:
        for name in names:
            addresses = _iface_addresses(facts, name) or []
            if ansible_host in addresses:
                return {"interface": name, "addresses": addresses}
    default = facts.get("default_ipv4") or facts.get("ansible_default_ipv4") or {}
    if isinstance(default, dict) and default.get("interface"):
        addresses = _iface_addresses(facts, default["interface"]) or []
        return {"interface": default["interface"], "addresses": addresses}
    raise VerifyInputError("cannot tell the master's fabric-facing interface: no interface holds %r and there "
                           "is no default IPv4 route; set the fabric interface variable (interfaces: %s)"
                           % (ansible_host, ", ".join(sorted(names)) or "none gathered"))


# ------------------------------------------------------------------------------------------ thresholds and gate
def select_thresholds(table, profile=None):
    """The thresholds of ``profile`` from ``table`` (profile -> {metric: min GB/s or null}).

    Exact name first, then the first table key found as a ``_``/``-`` separated token of the profile
    name (``gcp_b200`` and ``b200_cuda13`` take ``b200``), then ``default``. Values of ``default`` fill
    what the chosen entry leaves out. Returns ``{profile, matched, thresholds}``.
    """
    if not isinstance(table, dict) or not table:
        raise VerifyInputError("thresholds must be a mapping of profile name to {metric: GB/s}; got %r" % (table,))
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise VerifyInputError("thresholds[%r] must be a mapping of metric to GB/s; got %r" % (name, entry))
        for metric, value in entry.items():
            if metric not in METRICS:
                raise VerifyInputError("thresholds[%r] has unknown metric %r; expected some of %s"
                                       % (name, metric, ", ".join(sorted(METRICS))))
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise VerifyInputError("thresholds[%r][%r] must be a non-negative number of GB/s or null; got %r"
                                       % (name, metric, value))
    matched = None
    if profile and profile in table:
        matched = profile
    elif profile:
        tokens = [t for t in re.split(r"[_\-.\s]+", str(profile).lower()) if t]
        for key in table:
            if key != "default" and str(key).lower() in tokens:
                matched = key
                break
    if profile is not None and not isinstance(profile, str):
        raise VerifyInputError("profile %r is not a string; expected a profile name out of %s"
                               % (profile, ", ".join(sorted(map(str, table)))))
    if matched is None and "default" not in table:
        raise VerifyInputError("profile %r matches no entry of the thresholds table and it has no 'default' entry, so "
                               "no gate would apply; expected one of the known profiles %s (or a name with one of "
                               "them as a '_'/'-' token), or add a 'default' entry"
                               % (profile, ", ".join(sorted(map(str, table)))))
    thresholds = dict(table.get("default") or {})
    if matched is not None:
        thresholds.update(table[matched])
    return {"profile": profile, "matched": matched or ("default" if "default" in table else None),
            "thresholds": thresholds}


def _metric(parsed, metric):
    value = parsed
    for key in METRICS[metric]:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _near_signature(gbps, signature=UNMAPPED_SIGNATURE_GBPS, tolerance=UNMAPPED_SIGNATURE_TOLERANCE):
    return gbps is not None and abs(float(gbps) - signature) <= tolerance


def gate(parsed, thresholds, rc=0, timed_out=False, timeout_s=None, stage="test"):
    """Hold one parsed run (``deepep_bandwidth`` result) against ``thresholds`` ({metric: min GB/s}).

    A run passes when it exited 0, did not time out, its output is complete, no case failed and every
    threshold that is not null is met. Returns ``{passed, status, checks, reasons, diagnosis}`` where
    status is ``pass``, ``fail``, ``timeout`` or ``error``.
    """
    if thresholds is None:
        thresholds = {}
    if not isinstance(thresholds, dict):
        raise VerifyInputError("thresholds must be a mapping of metric to GB/s; got %r" % (thresholds,))
    if isinstance(thresholds.get("thresholds"), dict):
        thresholds = thresholds["thresholds"]
    parsed = parsed if isinstance(parsed, dict) else {}
    reasons, diagnosis, checks = [], [], []
    status = "pass"
    if timed_out:
        status = "timeout"
        reasons.append("%s did not finish within %ss and was killed (whole process group)"
                       % (stage, timeout_s if timeout_s is not None else "its timeout"))
        diagnosis.append("a hang like DeepEP's 'timeout (dispatch CPU)'; likely causes: " + "; ".join(HANG_DIAGNOSIS))
    elif rc not in (0, None):
        status = "error"
        reasons.append("%s exited with rc=%s" % (stage, rc))
    errors = parsed.get("errors") or []
    if any("timeout (" in str(e) for e in errors) and not timed_out:
        status = "error"
        diagnosis.append("DeepEP reported a timeout; likely causes: " + "; ".join(HANG_DIAGNOSIS))
    if errors:
        reasons.append("errors in the output: " + "; ".join(str(e) for e in errors[:5]))
    if not parsed.get("complete") and status == "pass":
        status = "error"
        reasons.append("the output stops early (no final result)")
    cases = parsed.get("cases") or {}
    if cases.get("failed") and status != "timeout":
        if status == "pass":
            status = "fail"
        total = (cases.get("passed") or 0) + cases.get("failed")
        reasons.append("%s of %s test cases failed" % (cases.get("failed"), total))
    for metric in sorted(thresholds):
        minimum = thresholds[metric]
        if minimum is None:
            continue
        if metric not in METRICS:
            raise VerifyInputError("unknown threshold metric %r; expected some of %s"
                                   % (metric, ", ".join(sorted(METRICS))))
        value = _metric(parsed, metric)
        ok = value is not None and float(value) >= float(minimum)
        checks.append({"metric": metric, "value": value, "min": minimum, "passed": ok})
        if not ok:
            if status == "pass":
                status = "fail"
            if value is None and status in ("timeout", "error"):
                continue  # the run did not get that far: its own reason says why
            reasons.append("%s %s GB/s is below the gate of %s GB/s" % (
                metric, "missing" if value is None else value, minimum))
            if "rdma" in metric and _near_signature(value) and not any("signature" in d for d in diagnosis):
                diagnosis.append("%s %s GB/s is the ~%s GB/s RDMA signature of every GPU using one NIC (mlx5_0, the "
                                 "first HCA): no GPU-NIC mapping (DEEP_EP_DEVICE_TO_HCA_MAPPING not applied, or "
                                 "DeepEP built without PR #466; runbook 001 problem 3)"
                                 % (metric, value, UNMAPPED_SIGNATURE_GBPS))
    return {"passed": status == "pass", "status": status, "checks": checks, "reasons": reasons,
            "diagnosis": diagnosis}


# ------------------------------------------------------------------------------------------ connectivity
_CONN_OK_RE = re.compile(r"\[Rank (\d+)\] Dispatch layout test PASSED")
_CONN_BUFFER_RE = re.compile(r"\[Rank (\d+)\] DeepEP buffer created")
_CONN_ERROR_RE = re.compile(r"\[Rank (\d+)\] ERROR: ([^\n]*)")


def connectivity(output, rc=0, timed_out=False, timeout_s=None):
    """Judge runbook 000's quick connectivity test on one node (buffer creation, dispatch layout).

    Passes when it exited 0 in time and at least one local rank printed "Dispatch layout test PASSED"
    with no rank printing "ERROR". Returns a gate-like ``{passed, status, checks, reasons, diagnosis,
    ranks_passed}``.
    """
    if isinstance(output, (list, tuple)):
        output = "\n".join(str(line) for line in output)
    if not isinstance(output, str):
        raise VerifyInputError("connectivity output must be a string or a list of lines; got %s"
                               % type(output).__name__)
    ok = sorted(set(int(r) for r in _CONN_OK_RE.findall(output)))
    buffers = sorted(set(int(r) for r in _CONN_BUFFER_RE.findall(output)))
    errors = ["rank %s: %s" % (r, text.strip()) for r, text in _CONN_ERROR_RE.findall(output)]
    reasons, diagnosis = [], []
    status = "pass"
    if timed_out:
        status = "timeout"
        reasons.append("connectivity test did not finish within %ss and was killed (whole process group)"
                       % (timeout_s if timeout_s is not None else "its timeout"))
        diagnosis.append("the nodes did not meet: check that MASTER_ADDR is reachable from every node on "
                         "MASTER_PORT (firewall), that every node started (ranks out of step), and "
                         "NVSHMEM's transport (" + HANG_DIAGNOSIS[2] + ")")
    elif rc not in (0, None):
        status = "error"
        reasons.append("connectivity test exited with rc=%s" % rc)
    if errors:
        status = "error" if status == "pass" else status
        reasons.extend(errors[:5])
    if not ok and status == "pass":
        status = "error"
        reasons.append("no rank reported 'Dispatch layout test PASSED'")
    if "built without NVSHMEM" in output:
        diagnosis.append("DeepEP was built without NVSHMEM (NVSHMEM_DIR unset and no pip NVSHMEM at build time), so "
                         "internode and low-latency modes are disabled: rebuild it with NVSHMEM_DIR pointing at the "
                         "IBGDA build (e.g. /opt/deepep/nvshmem)")
    elif not buffers and not timed_out:
        diagnosis.append("no DeepEP buffer was created: NVSHMEM/IBGDA initialisation failed (see the log; "
                         "runbook 000 'Unable to create ah', GID index, PeerMappingOverride)")
    return {"passed": status == "pass", "status": status, "checks": [], "reasons": reasons,
            "diagnosis": diagnosis, "ranks_passed": ok}


# ------------------------------------------------------------------------------------------ NIC traffic
def _active_ports(rdma):
    """{device: {port: counters}} of the ACTIVE ports in a gpufleet_rdma fact."""
    if not isinstance(rdma, dict):
        raise VerifyInputError("RDMA facts must be the gpufleet_rdma mapping (devices with ports); got %s"
                               % type(rdma).__name__)
    if isinstance(rdma.get("gpufleet_rdma"), dict):
        rdma = rdma["gpufleet_rdma"]
    devices = rdma.get("devices")
    if not isinstance(devices, list):
        raise VerifyInputError("RDMA facts have no 'devices' list (gpufleet.deepep.rdma_devices facts expected)")
    ports = {}
    for device in devices:
        if not isinstance(device, dict) or not device.get("name"):
            continue
        for port in device.get("ports") or []:
            if isinstance(port, dict) and port.get("active"):
                ports.setdefault(device["name"], {})[port.get("port", 1)] = port.get("counters") or {}
    return ports


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
    ``min_bytes`` (``port_xmit_data`` counts 4-byte words). ``rdma_gbps``: the run's RDMA figure,
    ``mapping``: the DEEP_EP_DEVICE_TO_HCA_MAPPING the test ran with ("" or None when unset),
    ``mapping_supported``: whether the installed DeepEP applies it (None when unknown). Returns
    ``{passed, nics, busy, idle, causes, signature}``.
    """
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 1:
        raise VerifyInputError("min_bytes must be a positive integer; got %r" % (min_bytes,))
    ports_before = _active_ports(before)
    ports_after = _active_ports(after)
    nics = []
    for name in _natural_sorted(ports_after):
        sent = 0
        counted = False
        for port, counters in sorted(ports_after[name].items()):
            new = counters.get("port_xmit_data")
            old = (ports_before.get(name) or {}).get(port, {}).get("port_xmit_data")
            if new is None or old is None:
                continue
            counted = True
            sent += max(0, int(new) - int(old)) * 4
        nics.append({"name": name, "bytes": sent if counted else None,
                     "busy": counted and sent >= min_bytes})
    busy = [n["name"] for n in nics if n["busy"]]
    idle = [n["name"] for n in nics if not n["busy"]]
    causes = []
    table = _parse_mapping(mapping)
    mapped = set(table.values())
    signature = rdma_gbps is not None and abs(float(rdma_gbps) - signature_gbps) <= tolerance_gbps
    if not nics:
        causes.append("no ACTIVE RDMA port on this node: nothing to check (port down, or no RDMA device)")
    elif any(n["bytes"] is None for n in nics):
        causes.append("no port_xmit_data counter on %s"
                      % ", ".join(n["name"] for n in nics if n["bytes"] is None))
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
    passed = bool(nics) and not idle
    return {"passed": passed, "nics": nics, "busy": busy, "idle": idle, "causes": causes,
            "signature": signature, "mapping": mapping or "", "mapping_supported": mapping_supported}


def _natural_key(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(name))]


def _natural_sorted(names):
    return sorted(names, key=_natural_key)


# ------------------------------------------------------------------------------------------ summary
_COLUMNS = (
    ("dispatch_bf16_nvl_gbps", "BF16 disp NVL"),
    ("dispatch_bf16_rdma_gbps", "BF16 disp RDMA"),
    ("dispatch_fp8_nvl_gbps", "FP8 disp NVL"),
    ("dispatch_fp8_rdma_gbps", "FP8 disp RDMA"),
    ("combine_nvl_gbps", "comb NVL"),
    ("combine_rdma_gbps", "comb RDMA"),
)


def summarize(records, missing_hosts=None):
    """Summary of verification records, one per node and stage.

    A record: ``{host, scope, test, stage, parsed, gate, nic (optional), log (optional), group,
    rank, figures (optional)}``; ``scope`` is the node (intranode) or the node pair/group (internode).
    ``figures``: a mapping of name to value a check measured or read (a check that is not a DeepEP
    run, e.g. serving: ``{router: smg, latency_ms: 84}``), kept in the row in the record's order and
    shown by :func:`render_markdown`. ``missing_hosts``: nodes that failed or were unreachable before
    giving a result (each adds a failed row). Returns ``{passed, rows, failures, counts}``; rows keep
    the order of the records.
    """
    if not isinstance(records, (list, tuple)):
        raise VerifyInputError("records must be a list of verification records; got %s" % type(records).__name__)
    if missing_hosts is not None and not isinstance(missing_hosts, (list, tuple)):
        raise VerifyInputError("missing_hosts must be a list of host names; got %r" % (missing_hosts,))
    records = list(records) + [
        {"host": host, "scope": host, "stage": "node", "test": None, "parsed": {},
         "gate": {"passed": False, "status": "error", "diagnosis": [],
                  "reasons": ["the node failed or was unreachable before it gave a result (see the play output)"]}}
        for host in (missing_hosts or [])]
    rows, failures = [], []
    for record in records:
        if not record:
            continue
        if not isinstance(record, dict):
            raise VerifyInputError("a verification record must be a mapping; got %r" % (record,))
        parsed = record.get("parsed") or {}
        verdict = record.get("gate") or {}
        nic = record.get("nic")
        row = {
            "host": record.get("host"),
            "scope": record.get("scope") or record.get("host"),
            "group": record.get("group"),
            "rank": record.get("rank"),
            "stage": record.get("stage") or "test",
            "test": record.get("test") or parsed.get("test"),
            "generation": parsed.get("generation"),
            "cases": parsed.get("cases"),
            "gbps": dict((metric, _metric(parsed, metric)) for metric, dummy in _COLUMNS),
            "status": verdict.get("status", "pass" if verdict.get("passed") else "fail"),
            "passed": bool(verdict.get("passed")),
            "reasons": list(verdict.get("reasons") or []),
            "diagnosis": list(verdict.get("diagnosis") or []),
            "log": record.get("log"),
        }
        figures = record.get("figures")
        if figures is not None:
            if not isinstance(figures, dict):
                raise VerifyInputError("the figures of a verification record must be a mapping of name to value; "
                                       "got %r for host %r" % (figures, record.get("host")))
            row["figures"] = dict(figures)
        if nic is not None:
            row["nic"] = {"passed": bool(nic.get("passed")), "idle": nic.get("idle") or [],
                          "busy": nic.get("busy") or [], "causes": nic.get("causes") or []}
            if not nic.get("passed"):
                row["passed"] = False
                if row["status"] == "pass":
                    row["status"] = "fail"
                row["reasons"].append("NIC traffic check failed: idle %s" % (", ".join(nic.get("idle") or [])
                                                                             or "(no active NIC)"))
                for cause in nic.get("causes") or []:
                    duplicate = "signature" in cause and any("signature" in d for d in row["diagnosis"])
                    if cause not in row["diagnosis"] and not duplicate:
                        row["diagnosis"].append(cause)
        rows.append(row)
        if not row["passed"]:
            failures.append({"host": row["host"], "scope": row["scope"], "test": row["test"],
                             "stage": row["stage"], "status": row["status"], "reasons": row["reasons"],
                             "diagnosis": row["diagnosis"]})
    counts = {"total": len(rows), "passed": sum(1 for r in rows if r["passed"]),
              "failed": sum(1 for r in rows if not r["passed"])}
    return {"passed": bool(rows) and not failures, "rows": rows, "failures": failures, "counts": counts}


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return ("%.2f" % value).rstrip("0").rstrip(".")
    return str(value)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt_figure(value):
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(_fmt(v) for v in value) or "-"
    if isinstance(value, dict):
        return ",".join("%s:%s" % (k, _fmt(v)) for k, v in value.items()) or "-"
    return _fmt(value)


def _figures_text(row):
    figures = row.get("figures")
    if not figures:
        return "-"
    return ", ".join("%s=%s" % (name, _fmt_figure(value)) for name, value in figures.items())


def _has_deepep_data(row):
    gbps = row.get("gbps") or {}
    return bool(row.get("cases") or row.get("nic") is not None or row.get("generation")
                or any(value is not None for value in gbps.values()))


def render_markdown(summary, title=None):
    """A Markdown table of :func:`summarize`'s result, followed by the failures and their diagnosis.

    Without figures in any row, the DeepEP table (cases, GB/s per path, NICs). When rows carry
    ``figures`` (even empty ones) and none carries DeepEP data (a serving check, say), a compact
    table: node, scope, check, figures, result. Both kinds together: the DeepEP table with a figures
    column.
    """
    if not isinstance(summary, dict) or "rows" not in summary:
        raise VerifyInputError("expected the result of verify_summary (a mapping with 'rows')")
    rows = summary["rows"]
    with_figures = any("figures" in row for row in rows)
    compact = with_figures and not any(_has_deepep_data(row) for row in rows)
    lines = []
    if title:
        lines += ["# " + _cell(title), ""]
    if compact:
        header = ["node", "scope", "check", "figures", "result"]
    else:
        header = ["node / pair", "test", "cases"] + [label for dummy, label in _COLUMNS] + ["NICs"] \
            + (["figures"] if with_figures else []) + ["result"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(" --- " for dummy in header) + "|")
    for row in rows:
        test = row.get("test") or "-"
        if row.get("stage") and row["stage"] != "test":
            test = "%s (%s)" % (test, row["stage"])
        result = "PASS" if row["passed"] else row["status"].upper()
        if compact:
            cells = [row.get("host") or "-", row.get("scope") or row.get("host") or "-", test, _figures_text(row),
                     result]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
            continue
        cases = row.get("cases") or {}
        case_text = "%s/%s" % (cases.get("passed", 0), (cases.get("passed") or 0) + (cases.get("failed") or 0)) \
            if cases else "-"
        nic = row.get("nic")
        nic_text = "-" if nic is None else ("ok" if nic["passed"] else "idle: " + (", ".join(nic["idle"]) or "all"))
        cells = [row.get("scope") or row.get("host") or "-", test, case_text]
        cells += [_fmt((row.get("gbps") or {}).get(metric)) for metric, dummy in _COLUMNS]
        cells += [nic_text] + ([_figures_text(row)] if with_figures else []) + [result]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    counts = summary.get("counts") or {}
    lines += ["", "%s of %s passed." % (counts.get("passed", 0), counts.get("total", 0))]
    if summary.get("failures"):
        lines += ["", "## Failures", ""]
        for failure in summary["failures"]:
            where = failure["scope"]
            if failure["scope"] != failure["host"]:
                where = "%s on %s" % (failure["scope"], failure["host"])
            reasons = "; ".join(failure["reasons"]) or "no reason recorded"
            fields = (_cell(where), _cell(failure["test"] or "-"), failure["status"], _cell(reasons))
            lines.append("- **%s** %s (%s): %s" % fields)
            for text in failure["diagnosis"]:
                lines.append("  - %s" % _cell(text))
    return "\n".join(lines) + "\n"
