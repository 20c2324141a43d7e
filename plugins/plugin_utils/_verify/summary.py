# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The verification summary: the records of every node and stage as rows, failures and counts (``summarize``),
and their Markdown table with the failures and their diagnosis (``render_markdown``). A row keeps the gate each
figure was held against (``thresholds``) and the transport that really ran with its policy's verdict
(``transport``), so the table shows every figure beside its gate; a DeepEP V2 run also keeps what its JIT did
(``jit``: kernels compiled or loaded, the run's time).

Pure logic, standard library only, Python 3.8+.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import BACKENDS
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import metric_value

__all__ = ["summarize", "render_markdown", "fmt_figure", "side_by_side", "METRIC_LABELS"]

# The modes two EP backends run on one node's GPUs, each as the stage its runs are judged in, with the figures that
# compare them: DeepEP's normal kernels against NCCL EP's high throughput, the decode kernels against its low latency.
SIDE_BY_SIDE_MODES = (
    ("intranode", "normal / high throughput", "dispatch_bf16_nvl_gbps", "combine_nvl_gbps"),
    ("low_latency_intranode", "low latency", "ll_dispatch_gbps", "ll_combine_gbps"),
    ("internode", "normal / high throughput across nodes (RDMA)", "dispatch_bf16_rdma_gbps", "combine_rdma_gbps"),
    ("low_latency_internode", "low latency across nodes", "ll_dispatch_gbps", "ll_combine_gbps"),
)


# ------------------------------------------------------------------------------------------ summary
# The bandwidth figures and their column labels (the fleet report shows the same ones).
METRIC_LABELS = (
    ("dispatch_bf16_nvl_gbps", "BF16 disp NVL"),
    ("dispatch_bf16_rdma_gbps", "BF16 disp RDMA"),
    ("dispatch_fp8_nvl_gbps", "FP8 disp NVL"),
    ("dispatch_fp8_rdma_gbps", "FP8 disp RDMA"),
    ("combine_nvl_gbps", "comb NVL"),
    ("combine_rdma_gbps", "comb RDMA"),
    ("ll_dispatch_gbps", "LL disp"),
    ("ll_combine_gbps", "LL comb"),
)


# The shapes summarize reads, each with the form a refusal names.
_GATE_FORM = "verify_gate's result: a mapping with passed (true/false), status, reasons and diagnosis (lists)"
_NIC_FORM = ("verify_nic_traffic's result: a mapping with passed (true/false) and idle, busy, slow, causes (lists), "
             "or null when the NIC check did not run")
_PARSED_FORM = "deepep_bandwidth's result: a mapping (test, generation, cases, the GB/s figures), or {} for no run"


_TYPE_NAMES = ((bool, "a boolean"), (str, "a string"), (int, "a number"), (float, "a number"), (dict, "a mapping"),
               (list, "a list"), (tuple, "a list"))


def _type(value):
    """The kind of ``value`` as a refusal says it: ``a string``, ``a list``, ``null``..."""
    if value is None:
        return "null"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "a %s" % type(value).__name__


def _check_record(index, record):
    """Refuse a record whose fields summarize reads are of another shape, naming the record, the field, the
    value's type and the form expected (instead of an AttributeError deep in the summary)."""
    def refuse(field, value, expected):
        host = record.get("host")
        raise VerifyInputError("record %d%s: %s is %s (%s); expected %s"
                               % (index, " (host %r)" % (host,) if isinstance(host, str) else "", field, _type(value),
                                  repr(value)[:120], expected))

    for field in ("host", "scope", "stage", "test", "log"):
        value = record.get(field)
        if value is not None and not isinstance(value, str):
            refuse(field, value, "a string")
    parsed = record.get("parsed")
    if parsed not in (None, "") and not isinstance(parsed, dict):
        refuse("parsed", parsed, _PARSED_FORM)
    if isinstance(parsed, dict):
        cases = parsed.get("cases")
        if cases is not None and not isinstance(cases, dict):
            refuse("parsed.cases", cases, "a mapping with passed and failed (counts)")
        for field in ("test", "generation"):
            if parsed.get(field) is not None and not isinstance(parsed[field], str):
                refuse("parsed.%s" % field, parsed[field], "a string")
    verdict = record.get("gate")
    if verdict is not None and not isinstance(verdict, dict):
        refuse("gate", verdict, _GATE_FORM)
    if isinstance(verdict, dict):
        if "passed" in verdict and not isinstance(verdict["passed"], bool):
            refuse("gate.passed", verdict["passed"], "true or false (%s)" % _GATE_FORM)
        if verdict.get("status") is not None and not isinstance(verdict["status"], str):
            refuse("gate.status", verdict["status"], "a string such as pass, fail, timeout or error")
        for field in ("reasons", "diagnosis"):
            if verdict.get(field) is not None and not isinstance(verdict[field], list):
                refuse("gate.%s" % field, verdict[field], "a list of sentences (%s)" % _GATE_FORM)
    nic = record.get("nic")
    if nic is not None and not isinstance(nic, dict):
        refuse("nic", nic, _NIC_FORM)
    if isinstance(nic, dict):
        if "passed" in nic and not isinstance(nic["passed"], bool):
            refuse("nic.passed", nic["passed"], "true or false (%s)" % _NIC_FORM)
        for field in ("idle", "busy", "slow", "causes"):
            if nic.get(field) is not None and not isinstance(nic[field], list):
                refuse("nic.%s" % field, nic[field], "a list (%s)" % _NIC_FORM)
    thresholds = record.get("thresholds")
    if thresholds not in (None, "") and not isinstance(thresholds, dict):
        refuse("thresholds", thresholds, "a mapping of metric to GB/s (verify_thresholds' thresholds)")


def summarize(records, missing_hosts=None):
    """Summary of verification records, one per node and stage.

    A record: ``{host, scope, test, stage, parsed, gate, nic (optional), log (optional), group,
    rank, figures (optional), thresholds (optional), transport (optional), jit (optional)}``; ``scope`` is the node
    (intranode) or the node pair/group (internode).
    ``figures``: a mapping of name to value a check measured or read (a check that is not a DeepEP
    run, e.g. serving: ``{router: smg, latency_ms: 84}``), kept in the row in the record's order and
    shown by :func:`render_markdown`. ``thresholds``: the gate of each figure (metric -> GB/s or null), kept in
    the row. ``transport``: ``transport_verdict``'s result (``{truth, gate, brief, policy}``); a run whose transport
    the profile does not allow fails, its reasons and likely causes added to the row's. ``jit``: ``verify_jit``'s
    result (``{state, compiled, loaded, run_seconds, passed, reasons, brief, ...}``); one that did not pass fails the
    row with its reasons. ``missing_hosts``: nodes that failed or were unreachable before
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
    for index, record in enumerate(records):
        if not record:
            continue
        if not isinstance(record, dict):
            raise VerifyInputError("record %d is %s (%r); expected a verification record, a mapping with host, "
                                   "stage, test, parsed and gate" % (index, _type(record), record))
        _check_record(index, record)
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
            "backend": record.get("backend"),
            "generation": parsed.get("generation"),
            "cases": parsed.get("cases"),
            "gbps": dict((metric, metric_value(parsed, metric)) for metric, dummy in METRIC_LABELS),
            "status": verdict.get("status", "pass" if verdict.get("passed") else "fail"),
            "passed": bool(verdict.get("passed")),
            "reasons": list(verdict.get("reasons") or []),
            "diagnosis": list(verdict.get("diagnosis") or []),
            "log": record.get("log"),
        }
        if record.get("thresholds"):
            row["thresholds"] = dict((metric, (record["thresholds"] or {}).get(metric)) for metric, dummy in METRIC_LABELS)
        basis = record.get("gate_basis")
        if isinstance(basis, dict) and basis.get("provisional"):
            row["gate_provisional"] = "%s: %s" % (basis.get("matched") or "gate", basis["provisional"])
        transport = record.get("transport")
        if transport is not None:
            _add_transport(row, transport)
        jit = record.get("jit")
        if jit is not None:
            _add_jit(row, jit)
        figures = record.get("figures")
        if figures is not None:
            if not isinstance(figures, dict):
                raise VerifyInputError("the figures of a verification record must be a mapping of name to value; "
                                       "got %r for host %r" % (figures, record.get("host")))
            row["figures"] = dict(figures)
        if nic is not None:
            row["nic"] = {"passed": bool(nic.get("passed")), "idle": nic.get("idle") or [],
                          "busy": nic.get("busy") or [], "slow": nic.get("slow") or [],
                          "causes": nic.get("causes") or []}
            if not nic.get("passed"):
                row["passed"] = False
                if row["status"] == "pass":
                    row["status"] = "fail"
                if row["nic"]["idle"] or not row["nic"]["slow"]:
                    row["reasons"].append("NIC traffic check failed: idle %s" % (", ".join(row["nic"]["idle"])
                                                                                 or "(no active NIC)"))
                if row["nic"]["slow"]:
                    row["reasons"].append("NIC check failed: %s slower than the node's other mapped NICs"
                                          % ", ".join(row["nic"]["slow"]))
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
    return {"passed": bool(rows) and not failures, "rows": rows, "failures": failures, "counts": counts,
            "side_by_side": side_by_side(rows)}


def side_by_side(rows):
    """Where more than one EP backend ran a mode on one node (``SIDE_BY_SIDE_MODES``): per node and mode, each
    backend's dispatch and combine GB/s in the order they ran, its result, and its figures over the first backend's
    (``ratio``; None where a figure is missing). A run that was skipped is left out."""
    out = []
    for stage, mode, dispatch, combine in SIDE_BY_SIDE_MODES:
        by_host = {}
        for row in rows:
            if row["stage"] == stage and row.get("backend") and row["status"] != "skipped":
                by_host.setdefault(row["host"], []).append(row)
        for host, runs in by_host.items():
            if len(set(run["backend"] for run in runs)) < 2:
                continue
            first = runs[0]["gbps"]
            entries = []
            for run in runs:
                figures = {"dispatch_gbps": run["gbps"].get(dispatch), "combine_gbps": run["gbps"].get(combine)}
                ratio = {"dispatch_gbps": _ratio(figures["dispatch_gbps"], first.get(dispatch)),
                         "combine_gbps": _ratio(figures["combine_gbps"], first.get(combine))}
                entries.append(dict(figures, backend=run["backend"], passed=run["passed"], ratio=ratio))
            out.append({"host": host, "stage": stage, "mode": mode, "runs": entries})
    return out


def _ratio(value, base):
    return round(value / base, 3) if value is not None and base else None


def _side_by_side_lines(pairs):
    """The Markdown section of :func:`side_by_side`'s result (nothing when no node ran two backends)."""
    if not pairs:
        return []
    lines = ["", "## EP backends side by side (same node, same GPUs)", "",
             "| node | mode | backend | dispatch GB/s | combine GB/s | against the first | result |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for pair in pairs:
        for run in pair["runs"]:
            title = BACKENDS[run["backend"]]["title"] if run["backend"] in BACKENDS else run["backend"]
            against = "%s / %s" % (fmt_figure(run["ratio"]["dispatch_gbps"]), fmt_figure(run["ratio"]["combine_gbps"]))
            lines.append("| %s |" % " | ".join(_cell(cell) for cell in (
                pair["host"], pair["mode"], title, _fmt_figure(run["dispatch_gbps"]), _fmt_figure(run["combine_gbps"]),
                against, "PASS" if run["passed"] else "FAIL")))
    return lines


def _add_transport(row, transport):
    if not isinstance(transport, dict) or not isinstance(transport.get("gate"), dict):
        raise VerifyInputError("the transport of a verification record must be transport_verdict's result (truth, gate, "
                               "brief, policy); got %r for host %r" % (transport, row.get("host")))
    gate = transport["gate"]
    row["transport"] = {"passed": bool(gate.get("passed")), "brief": transport.get("brief"),
                        "reasons": list(gate.get("reasons") or []), "unknown": list(gate.get("unknown") or []),
                        "causes": [c.get("cause") for c in gate.get("causes") or [] if isinstance(c, dict)],
                        "truth": transport.get("truth"), "policy": transport.get("policy")}
    if gate.get("passed"):
        return
    row["passed"] = False
    if row["status"] == "pass":
        row["status"] = "fail"
    for reason in row["transport"]["reasons"]:
        row["reasons"].append("transport: %s" % reason)
    for what in row["transport"]["unknown"]:
        row["reasons"].append("transport unknown: %s" % what)
    for cause in row["transport"]["causes"]:
        if cause not in row["diagnosis"]:
            row["diagnosis"].append("likely cause: %s" % cause)


def fmt_figure(value):
    """A figure as shown in reports: ``-`` for none, a float without trailing zeros."""
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
        return ",".join(fmt_figure(v) for v in value) or "-"
    if isinstance(value, dict):
        return ",".join("%s:%s" % (k, fmt_figure(v)) for k, v in value.items()) or "-"
    return fmt_figure(value)


def _figures_text(row):
    figures = row.get("figures")
    if not figures:
        return "-"
    return ", ".join("%s=%s" % (name, _fmt_figure(value)) for name, value in figures.items())


def _beside_gate(row, metric):
    """A figure and, where the row keeps its gate, the gate beside it: ``340.61 (>=300)``."""
    text = fmt_figure((row.get("gbps") or {}).get(metric))
    gate = (row.get("thresholds") or {}).get(metric)
    return text if gate is None else "%s (>=%s)" % (text, fmt_figure(gate))


def _not_run(reason):
    """A skipped stage's reason without its leading ``not run:``, for the summary's count line."""
    return reason[len("not run: "):] if reason.startswith("not run: ") else reason


def _transport_text(row):
    transport = row.get("transport")
    if transport is None:
        return "-"
    return "%s: %s" % ("ok" if transport["passed"] else "NOT ALLOWED", transport.get("brief") or "-")


def _add_jit(row, jit):
    if not isinstance(jit, dict) or "state" not in jit or "passed" not in jit:
        raise VerifyInputError("the jit of a verification record must be verify_jit's result (state, compiled, loaded, "
                               "passed, reasons, brief); got %r for host %r" % (jit, row.get("host")))
    row["jit"] = dict(jit)
    if jit["passed"]:
        return
    row["passed"] = False
    if row["status"] == "pass":
        row["status"] = "fail"
    for reason in jit.get("reasons") or []:
        row["reasons"].append("JIT: %s" % reason)


def _jit_text(row):
    jit = row.get("jit")
    return "-" if jit is None else jit.get("brief") or jit["state"]


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
    with_transport = any("transport" in row for row in rows)
    with_jit = any("jit" in row for row in rows)
    compact = with_figures and not any(_has_deepep_data(row) for row in rows)
    # The low-latency columns only where a row has a low-latency figure or gate (a run without that stage keeps its
    # table as it was).
    labels = [(metric, label) for metric, label in METRIC_LABELS
              if not metric.startswith("ll_") or any((row.get("gbps") or {}).get(metric) is not None
                                                     or (row.get("thresholds") or {}).get(metric) is not None
                                                     for row in rows)]
    lines = []
    if title:
        lines += ["# " + _cell(title), ""]
    if compact:
        header = ["node", "scope", "check", "figures", "result"]
    else:
        header = ["node / pair", "test", "cases"] + [label for dummy, label in labels] + ["NICs"] \
            + (["transport"] if with_transport else []) + (["V2 JIT"] if with_jit else []) \
            + (["figures"] if with_figures else []) + ["result"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(" --- " for dummy in header) + "|")
    for row in rows:
        test = row.get("test") or "-"
        if row.get("stage") and row["stage"] != "test":
            test = "%s (%s)" % (test, row["stage"])
        result = row["status"].upper() if row["status"] == "skipped" or not row["passed"] else "PASS"
        if compact:
            cells = [row.get("host") or "-", row.get("scope") or row.get("host") or "-", test, _figures_text(row),
                     result]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
            continue
        cases = row.get("cases") or {}
        case_text = "%s/%s" % (cases.get("passed", 0), (cases.get("passed") or 0) + (cases.get("failed") or 0)) \
            if cases else "-"
        nic = row.get("nic")
        nic_text = "-" if nic is None else ("ok" if nic["passed"] else "; ".join(
            (["idle: " + (", ".join(nic["idle"]) or "all")] if nic["idle"] or not nic.get("slow") else [])
            + (["slow: " + ", ".join(nic["slow"])] if nic.get("slow") else [])))
        cells = [row.get("scope") or row.get("host") or "-", test, case_text]
        cells += [_beside_gate(row, metric) for metric, dummy in labels]
        cells += [nic_text] + ([_transport_text(row)] if with_transport else []) \
            + ([_jit_text(row)] if with_jit else []) + ([_figures_text(row)] if with_figures else []) + [result]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    counts = summary.get("counts") or {}
    skipped = [row for row in rows if row["status"] == "skipped" and row["passed"]]
    lines += ["", "%s of %s passed%s." % (counts.get("passed", 0), counts.get("total", 0),
                                          " (%d not run on their hardware: %s)"
                                          % (len(skipped), "; ".join(sorted(set(_not_run(r["reasons"][0])
                                                                                for r in skipped if r["reasons"]))))
                                          if skipped else "")]
    lines += _side_by_side_lines(summary.get("side_by_side") or [])
    provisional = {}
    for row in rows:
        if row.get("gate_provisional"):
            provisional.setdefault(row["gate_provisional"], []).append(row.get("scope") or row.get("host") or "-")
    if provisional:
        lines += ["", "## Provisional gates (nobody measured them on this hardware or backend)", ""]
        lines += ["- %s (%s)" % (_cell(text), _cell(", ".join(where))) for text, where in provisional.items()]
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
