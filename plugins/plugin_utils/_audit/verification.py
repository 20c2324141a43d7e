# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the fleet report shows beside the audit's findings, per node: the linkage of the installed DeepEP build
checked against the node (``gpufleet_linkage``: NCCL and NVSHMEM linked and loaded, the GPU architectures its SASS
covers, torch, libstdc++), and the node's last verification (a ``verify_summary`` result, summary.json of
playbooks/verify.yml): each figure beside its gate, the transport that really ran and its policy's verdict.

``attach_verification(fleet, summary, source)`` puts the verification rows under each node (``verify``), the
summary's EP backends run side by side on that node (``side_by_side``: NCCL EP beside DeepEP on the same GPUs) and a
fleet-level ``verification`` entry; ``linkage_rows(node)``, ``verify_rows(node)`` and ``side_by_side_rows(node)`` are
what the renderers show.

Pure logic (the standard library and the verify summary's figure format).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import BACKENDS
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.summary import METRIC_LABELS, fmt_figure

__all__ = ["VerificationInputError", "attach_verification", "linkage_rows", "verify_rows", "side_by_side_rows",
           "METRICS"]

METRICS = METRIC_LABELS
_FORM = ("the summary.json a verification run wrote (playbooks/verify.yml, verify_intranode, verify_internode): "
         "a mapping with passed, rows (each with host, stage, passed) and counts")


class VerificationInputError(ValueError):
    """The verification summary is not one the report can read; the message names it and the form expected."""


def attach_verification(fleet, summary, source=None):
    """Attach a verify summary's rows to the fleet's nodes (in place) and return the fleet.

    Rows of hosts the audit did not report are kept under ``verification.other_hosts`` (named, not lost).
    """
    if not isinstance(summary, dict) or not isinstance(summary.get("rows"), list):
        raise VerificationInputError("verify summary %s: expected %s; got %s"
                                     % (source or "", _FORM, type(summary).__name__ if not isinstance(summary, dict)
                                        else "keys %s" % sorted(summary)))
    nodes = fleet.setdefault("nodes", {})
    other = []
    for index, row in enumerate(summary["rows"]):
        if not isinstance(row, dict) or not isinstance(row.get("host"), str) or not isinstance(row.get("passed"), bool):
            raise VerificationInputError("verify summary %s: rows[%d] must be a mapping with host (a name) and passed "
                                         "(true/false); got %r" % (source or "", index, row))
        if row["host"] in nodes:
            nodes[row["host"]].setdefault("verify", []).append(row)
        elif row["host"] not in other:
            other.append(row["host"])
    for entry in summary.get("side_by_side") or []:
        if isinstance(entry, dict) and entry.get("host") in nodes and isinstance(entry.get("runs"), list):
            nodes[entry["host"]].setdefault("side_by_side", []).append(entry)
    counts = summary.get("counts") if isinstance(summary.get("counts"), dict) else {}
    fleet["verification"] = {"source": source, "passed": bool(summary.get("passed")), "counts": counts,
                             "other_hosts": other}
    return fleet


def _state(ok):
    return "ok" if ok is True else ("FAIL" if ok is False else "unknown")


def _short(value):
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join("%s=%s" % (k, v) for k, v in sorted(value.items())) or "-"
    return str(value)


def linkage_rows(node):
    """One row per linkage check of the node: ``{check, state, expected, found, note}`` (note, or "-": the fix of a failed
    check, the reason of an unknown one, a warning); [] where ``gpufleet_linkage`` was not gathered."""
    linkage = (node.get("facts") or {}).get("gpufleet_linkage")
    if not isinstance(linkage, dict):
        return []
    rows = []
    for check in linkage.get("checks") or []:
        if not isinstance(check, dict):
            continue
        ok = check.get("ok")
        note = check.get("fix") if ok is False else (check.get("reason") if ok is None else check.get("warning"))
        rows.append({"check": check.get("check"), "state": _state(ok), "expected": _short(check.get("expected")),
                     "found": _short(check.get("found")), "note": note or "-"})
    return rows


def _backend_title(name):
    return BACKENDS[name]["title"] if name in BACKENDS else str(name)


def verify_rows(node):
    """The node's verification rows as shown: ``{stage, scope, figures: [(label, value, gate, ok)], transport,
    transport_ok, result, reasons}``; a figure's ``ok`` is None where no gate applies. Where more than one EP backend
    ran on the node, each row's stage names its backend."""
    out = []
    several = len(set(row.get("backend") for row in node.get("verify") or [] if row.get("backend"))) > 1
    for row in node.get("verify") or []:
        gbps = row.get("gbps") or {}
        gates = row.get("thresholds") or {}
        figures = []
        for metric, label in METRICS:
            value, gate = gbps.get(metric), gates.get(metric)
            if value is None and gate is None:
                continue
            ok = None if gate is None or value is None else value >= gate
            figures.append({"label": label, "value": fmt_figure(value), "gate": None if gate is None else fmt_figure(gate),
                            "ok": ok})
        transport = row.get("transport") if isinstance(row.get("transport"), dict) else None
        stage = row.get("stage") or "test"
        if several and row.get("backend"):
            stage = "%s (%s)" % (stage, _backend_title(row["backend"]))
        out.append({"stage": stage, "scope": row.get("scope") or row.get("host"),
                    "figures": figures,
                    "transport": transport.get("brief") if transport else None,
                    "transport_ok": transport.get("passed") if transport else None,
                    "result": "PASS" if row.get("passed") else str(row.get("status") or "fail").upper(),
                    "reasons": list(row.get("reasons") or []) + list(row.get("diagnosis") or [])})
    return out


def side_by_side_rows(node):
    """The EP backends run on the same GPUs of the node (the verify summary's ``side_by_side``), one row per mode and
    backend: ``{mode, backend, dispatch, combine, against, result}`` (figures in GB/s as the summary writes them;
    ``against`` the first backend's, as dispatch / combine ratios)."""
    out = []
    for entry in node.get("side_by_side") or []:
        for run in entry.get("runs") or []:
            ratio = run.get("ratio") or {}
            out.append({"mode": entry.get("mode") or entry.get("stage"), "backend": _backend_title(run.get("backend")),
                        "dispatch": fmt_figure(run.get("dispatch_gbps")), "combine": fmt_figure(run.get("combine_gbps")),
                        "against": "%s / %s" % (fmt_figure(ratio.get("dispatch_gbps")),
                                                fmt_figure(ratio.get("combine_gbps"))),
                        "result": "PASS" if run.get("passed") else "FAIL"})
    return out
