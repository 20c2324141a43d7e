# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The verdict of one verification run: the gate of one parsed ``deepep_bandwidth`` run (``gate``) against the
thresholds ``plugin_utils/_thresholds.py`` selects, and runbook 000's quick connectivity test (``connectivity``);
the hang diagnosis of runbook 001 and the ~6.5 GB/s signature of an unmapped GPU-NIC layout.

Pure logic, standard library only, Python 3.8+.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import METRICS, VerifyInputError

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


# ------------------------------------------------------------------------------------------------------- the gate
def metric_value(parsed, metric):
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
        value = metric_value(parsed, metric)
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
