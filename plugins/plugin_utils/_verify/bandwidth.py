# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Parse the output of DeepEP's own tests into bandwidth data.

Pure logic, standard library only, Python 3.8+: used by the ``deepep_bandwidth`` filter, the verify
roles and the audit.

Understood outputs:

* V1 ``tests/test_intranode.py`` (and V2's ``tests/legacy/test_intranode.py``, same format):
  ``[testing] Running with BF16, ... passed``, ``[tuning] Best dispatch (FP8): SMs 24, NVL chunk 24,
  247.83 GB/s (NVL), t: 243.45 us``, ``[tuning] Best combine: SMs 24, NVL chunk 7: 293.21 GB/s (NVL)``.
* V1 ``tests/test_internode.py``: the same with ``RDMA chunk N: X GB/s (RDMA), Y GB/s (NVL)``.
* V1 ``tests/test_low_latency.py``: ``[rank r] Dispatch bandwidth: X GB/s, avg_t=... | Combine
  bandwidth: Y GB/s, ...`` and ``[rank r] Dispatch + combine bandwidth: Z GB/s, ...``, one per rank.
* V2 ``tests/elastic/test_ep.py``: `` > Testing with ..., use_fp8_dispatch=1, ...`` followed by per-rank
  lines ``* EP:   3/16 | dispatch: 81 GB/s (SO), 263 GB/s (SU), 162.4 us, N bytes | copy: ...``
  (``*`` dispatch, ``-`` expanded dispatch, ``#`` cached dispatch, ``@`` combine, ``+`` reduced combine;
  SO = scale-out/RDMA, SU = scale-up/NVLink).
* NCCL EP (generation ``nccl_ep``): the summary NCCL EP's ``ep_bench`` prints and the collection's launcher over
  ``nccl.ep`` (roles/verify_common/files/nccl_ep_bench.py) prints the same way: ``=== Summary (Low Latency, across N
  ranks) ===`` with ``Dispatch (BF16):  avg=... us`` and ``throughput: avg=X GB/s, min=Y GB/s (rank r), max=...``
  (read as the low-latency figures, the slowest rank's), or ``=== Summary (High Throughput BF16, across N ranks)
  ===`` with ``send: total_bw=X  nvl_bw=Y  rdma_bw=Z GB/s`` per dispatch and combine (read as the normal kernels'
  BF16 dispatch and combine, NVLink and RDMA); the launcher's ``Validation: passed`` / ``FAILED`` is its
  correctness case.

Output from several ranks or nodes may be interleaved, carry ``[rank r]``-style prefixes added by a
launcher, ANSI colour codes and carriage returns. Where several figures exist for one metric (one per
node or rank), the slowest is reported, since the slowest rank bounds an all-to-all.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.extras import KINDS as EXTRAS_KINDS
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.extras import parse_extras
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.testlog import (
    LogInputError,
    crashed,
    error_lines,
    fatal as fatal_signs,
    log_text,
)

__all__ = ["BandwidthInputError", "parse_output", "TESTS", "ELASTIC_KINDS", "normalize_test"]

TESTS = ("intranode", "internode", "low_latency", "elastic") + EXTRAS_KINDS
GENERATIONS = ("v1", "v2", "nccl_ep")

# V2 case kinds: the word printed after the rank, keyed by the marker that starts the line.
ELASTIC_KINDS = {
    "*": "dispatch",
    "-": "expanded_dispatch",
    "#": "cached_dispatch",
    "@": "combine",
    "+": "reduced_combine",
}
_ELASTIC_WORDS = {
    "dispatch": "dispatch",
    "expanded dispatch": "expanded_dispatch",
    "cached dispatch": "cached_dispatch",
    "combine": "combine",
    "reduced combine": "reduced_combine",
}


# The input or an argument is not something this parser can read; the message names it (the log reader's error,
# so a log that is no log is refused the same way here and by the transport truth).
BandwidthInputError = LogInputError

_NUM = r"(\d+(?:\.\d+)?)"

_TESTING_RE = re.compile(r"\[testing\] Running with (BF16|FP8)\b")
_PASSED_RE = re.compile(r"(?:\.\.\.|^|[\]:>])[ \t]*passed\b", re.MULTILINE)
_FAILED_RE = re.compile(r"\.\.\.[ \t]*failed\b")
_BEST_RE = re.compile(r"\[tuning\] Best (dispatch|combine)(?: \((BF16|FP8)\))?:([^\n]*)")
_GBPS_RE = re.compile(_NUM + r"\s*GB/s\s*\((RDMA|NVL)\)")

_LL_SPLIT_RE = re.compile(
    r"\[rank\s*(\d+)\]\s*Dispatch bandwidth:\s*" + _NUM + r"\s*GB/s[^|\n]*\|\s*Combine bandwidth:\s*" + _NUM + r"\s*GB/s")
_LL_BOTH_RE = re.compile(r"\[rank\s*(\d+)\]\s*Dispatch \+ combine bandwidth:\s*" + _NUM + r"\s*GB/s")
_LL_SENDRECV_RE = re.compile(r"\[rank\s*(\d+)\]\s*Dispatch send/recv time:")

_EP_RE = re.compile(
    r"([*\-#@+])\s*EP:\s*(\d+)\s*/\s*(\d+)\s*\|\s*"
    r"(expanded dispatch|cached dispatch|reduced combine|dispatch|combine):\s*"
    + _NUM + r"\s*GB/s\s*\(SO\),\s*" + _NUM + r"\s*GB/s\s*\(SU\)(?:,\s*" + _NUM + r"\s*us)?")
_EP_HEADER_RE = re.compile(r">\s*Testing with ([^\n]*?)(?:\.\.\.|$)", re.MULTILINE)
_EP_RANKS_RE = re.compile(r"Ranks:\s*(\d+)\s*x\s*(\d+)")

# NCCL EP's summary (ep_bench.cu, and the collection's launcher in the same format).
_NEP_SUMMARY_RE = re.compile(r"=== Summary \((Low Latency|High Throughput[^,]*), across (\d+) ranks\) ===")
_NEP_NODES_RE = re.compile(r"^\s*Nodes:\s*(\d+)", re.MULTILINE)
_NEP_LL_RE = re.compile(r"^(Dispatch|Combine|Total) \((?:BF16|D\+C)\):[^\n]*\n\s*throughput: avg=" + _NUM
                        + r" GB/s, min=" + _NUM + r" GB/s \(rank (\d+)\)", re.MULTILINE)
_NEP_HT_RE = re.compile(r"^(Dispatch|Combine):\s+total=" + _NUM + r" us[^\n]*\n(?:\s*recv:[^\n]*\n)?"
                        r"\s*send: total_bw=" + _NUM + r"\s+nvl_bw=" + _NUM + r"\s+rdma_bw=" + _NUM + r" GB/s",
                        re.MULTILINE)
_NEP_VALIDATION_RE = re.compile(r"^Validation: (passed|FAILED)", re.MULTILINE)

_TEST_ALIASES = {
    # NCCL EP's benchmark (the collection's launcher or ep_bench): which mode ran is in its summary.
    "nccl_ep_bench": (None, "nccl_ep"),
    "ep_bench": (None, "nccl_ep"),
    "intranode": ("intranode", None),
    "test_intranode": ("intranode", None),
    "tests/test_intranode.py": ("intranode", "v1"),
    "legacy/test_intranode": ("intranode", "v2"),
    "tests/legacy/test_intranode.py": ("intranode", "v2"),
    "internode": ("internode", None),
    "test_internode": ("internode", None),
    "tests/test_internode.py": ("internode", "v1"),
    "legacy/test_internode": ("internode", "v2"),
    "tests/legacy/test_internode.py": ("internode", "v2"),
    "low_latency": ("low_latency", None),
    "test_low_latency": ("low_latency", None),
    "tests/test_low_latency.py": ("low_latency", "v1"),
    "legacy/test_low_latency": ("low_latency", "v2"),
    "tests/legacy/test_low_latency.py": ("low_latency", "v2"),
    "elastic": ("elastic", "v2"),
    "test_ep": ("elastic", "v2"),
    "elastic/test_ep": ("elastic", "v2"),
    "tests/elastic/test_ep.py": ("elastic", "v2"),
}
# DeepEP V2's other tests (plugin_utils/_verify/extras.py): tests/elastic/test_<kind>.py.
for _kind in EXTRAS_KINDS:
    for _name in (_kind, "test_" + _kind, "elastic/test_" + _kind, "tests/elastic/test_%s.py" % _kind):
        _TEST_ALIASES[_name] = (_kind, "v2")


def normalize_test(test):
    """Map a test name or path to ``(test, generation or None)``.

    Accepts the short names (``intranode``, ``internode``, ``low_latency``, ``elastic``) and the test
    files (``tests/test_intranode.py``, ``tests/legacy/test_intranode.py``, ``tests/elastic/test_ep.py``,
    with or without ``tests/``, ``.py`` or a leading path). Raises :class:`BandwidthInputError`.
    """
    if not isinstance(test, str) or not test.strip():
        raise BandwidthInputError("test %r is not a test name; expected one of %s or a test file such as "
                                  "tests/legacy/test_intranode.py" % (test, ", ".join(TESTS)))
    key = test.strip().replace("\\", "/").replace("-", "_")
    candidates = [key]
    if "/tests/" in key:
        candidates.append("tests/" + key.rsplit("/tests/", 1)[1])
    if not key.endswith(".py"):
        candidates.append("tests/%s.py" % key)
    else:
        candidates.append(key[:-3])
    for candidate in candidates:
        if candidate in _TEST_ALIASES:
            return _TEST_ALIASES[candidate]
    raise BandwidthInputError("test %r is not a DeepEP test this parser reads; expected one of %s or a test file "
                              "such as tests/test_intranode.py, tests/legacy/test_intranode.py, "
                              "tests/elastic/test_ep.py" % (test, ", ".join(TESTS)))


def _infer_test(text):
    summary = _NEP_SUMMARY_RE.search(text)
    if summary:
        if summary.group(1) == "Low Latency":
            return "low_latency"
        nodes = _NEP_NODES_RE.search(text)
        return "internode" if nodes and int(nodes.group(1)) > 1 else "intranode"
    if _EP_RE.search(text) or "tests/elastic/test_ep.py" in text or "construct_elastic_buffer" in text \
            or re.search(r">\s*Testing with do_handle_copy", text):
        return "elastic"
    if "RDMA chunk" in text or "num_topk_groups=" in text or "num_rdma_recv_tokens" in text \
            or "test_internode.py" in text:
        return "internode"
    if _TESTING_RE.search(text) or "[tuning]" in text or "test_intranode.py" in text:
        return "intranode"
    if _LL_SPLIT_RE.search(text) or _LL_BOTH_RE.search(text) or "Allocating buffer size:" in text \
            or "test_low_latency.py" in text:
        return "low_latency"
    return None


def _infer_generation(text, test):
    if _NEP_SUMMARY_RE.search(text) or "NCCL EP Performance Benchmark" in text:
        return "nccl_ep"
    if test == "elastic" or test in EXTRAS_KINDS or "deep_ep/buffers/" in text or "ElasticBuffer" in text or "tests/legacy/" in text:
        return "v2"
    if test is not None:
        return "v1"
    return None


def _num(value):
    number = float(value)
    return int(number) if number.is_integer() and "." not in value else number


def _min_or_none(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _empty_pair():
    return {"nvl_gbps": None, "rdma_gbps": None}


def _parse_v1_normal(text, result):
    started = len(_TESTING_RE.findall(text))
    passed = len(_PASSED_RE.findall(text))
    failed = len(_FAILED_RE.findall(text))
    if started:
        passed = min(passed, started)
        failed = min(failed, started - passed)
        failed += max(0, started - passed - failed)
    result["cases"] = {"passed": passed, "failed": failed}

    best = {"bf16": {"NVL": [], "RDMA": []}, "fp8": {"NVL": [], "RDMA": []}, "combine": {"NVL": [], "RDMA": []}}
    saw_combine = False
    for match in _BEST_RE.finditer(text):
        what, dtype, rest = match.group(1), match.group(2), match.group(3)
        slot = "combine" if what == "combine" else dtype.lower()
        if what == "combine":
            saw_combine = True
        seen = set()
        for gbps in _GBPS_RE.finditer(rest):
            link = gbps.group(2)
            if link in seen:
                continue
            seen.add(link)
            best[slot][link].append(_num(gbps.group(1)))
    for dtype in ("bf16", "fp8"):
        result["dispatch"][dtype] = {"nvl_gbps": _min_or_none(best[dtype]["NVL"]),
                                     "rdma_gbps": _min_or_none(best[dtype]["RDMA"])}
    result["combine"] = {"nvl_gbps": _min_or_none(best["combine"]["NVL"]),
                         "rdma_gbps": _min_or_none(best["combine"]["RDMA"])}
    return saw_combine and started > 0 and passed == started


def _parse_low_latency(text):
    """Per-rank low-latency figures, slowest first; None when the output has none."""
    ranks = {}
    for match in _LL_SPLIT_RE.finditer(text):
        entry = ranks.setdefault(int(match.group(1)), {})
        for key, value in (("dispatch_gbps", _num(match.group(2))), ("combine_gbps", _num(match.group(3)))):
            entry[key] = value if key not in entry else min(entry[key], value)
    for match in _LL_BOTH_RE.finditer(text):
        entry = ranks.setdefault(int(match.group(1)), {})
        value = _num(match.group(2))
        entry["dispatch_combine_gbps"] = value if "dispatch_combine_gbps" not in entry \
            else min(entry["dispatch_combine_gbps"], value)
    if not ranks:
        return None, set(ranks)

    def lowest(key):
        candidates = [(entry[key], rank) for rank, entry in ranks.items() if entry.get(key) is not None]
        return min(candidates) if candidates else (None, None)

    dispatch, dispatch_rank = lowest("dispatch_gbps")
    combine, combine_rank = lowest("combine_gbps")
    both, both_rank = lowest("dispatch_combine_gbps")
    slowest = both_rank if both_rank is not None else dispatch_rank
    if slowest is None:
        slowest = combine_rank
    summary = {
        "dispatch_gbps": dispatch,
        "combine_gbps": combine,
        "dispatch_combine_gbps": both,
        "slowest_rank": slowest,
        "dispatch_slowest_rank": dispatch_rank,
        "combine_slowest_rank": combine_rank,
        "ranks": len(ranks),
    }
    return summary, set(ranks)


def _parse_elastic(text, result, fatal):
    headers = list(_EP_HEADER_RE.finditer(text))
    ranks_match = _EP_RANKS_RE.search(text)
    scaleout = int(ranks_match.group(1)) if ranks_match else None

    # Split into cases: lines before the first header belong to no case (dtype unknown).
    bounds = [(h.start(), h.group(1)) for h in headers]
    sections = []
    if not bounds:
        sections.append((None, text))
    else:
        if bounds[0][0] > 0:
            sections.append((None, text[:bounds[0][0]]))
        for index, (start, settings) in enumerate(bounds):
            end = bounds[index + 1][0] if index + 1 < len(bounds) else len(text)
            sections.append((settings, text[start:end]))

    lines = []       # (fp8 or None, case index or None, record)
    counts = []      # EP lines per case, in order
    for settings, chunk in sections:
        fp8 = None
        if settings is not None:
            flag = re.search(r"use_fp8_dispatch\s*=\s*(\d)", settings)
            fp8 = bool(int(flag.group(1))) if flag else None
        found = 0
        for match in _EP_RE.finditer(chunk):
            marker, rank, num_ranks, word = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
            kind = _ELASTIC_WORDS.get(word, ELASTIC_KINDS.get(marker))
            record = {
                "kind": kind,
                "rank": rank,
                "num_ranks": num_ranks,
                "so_gbps": _num(match.group(5)),
                "su_gbps": _num(match.group(6)),
                "time_us": _num(match.group(7)) if match.group(7) else None,
            }
            lines.append((fp8, record))
            found += 1
        if settings is not None:
            counts.append(found)

    any_so = any(record["so_gbps"] > 0 for dummy, record in lines)
    scale_out = scaleout > 1 if scaleout is not None else any_so

    def slowest(records):
        if not records:
            return None
        bottleneck = "so_gbps" if scale_out else "su_gbps"
        chosen = min(records, key=lambda r: (r[bottleneck], -(r["time_us"] or 0.0)))
        return {"so_gbps": chosen["so_gbps"], "su_gbps": chosen["su_gbps"], "rank": chosen["rank"],
                "num_ranks": chosen["num_ranks"], "time_us": chosen["time_us"]}

    elastic = {}
    for kind in ELASTIC_KINDS.values():
        elastic[kind] = slowest([r for dummy, r in lines if r["kind"] == kind])
    result["elastic"] = elastic

    def as_pair(entry):
        if entry is None:
            return _empty_pair()
        return {"nvl_gbps": entry["su_gbps"], "rdma_gbps": entry["so_gbps"] if scale_out else None}

    for dtype, flag in (("bf16", False), ("fp8", True)):
        result["dispatch"][dtype] = as_pair(slowest([r for f, r in lines if f is flag and r["kind"] == "dispatch"]))
    result["combine"] = as_pair(elastic["combine"])

    # A case is done when the next one started; the last one when it printed as many lines as the first.
    total = len(counts)
    done = max(0, total - 1)
    last_done = False
    if total:
        expected = max(1, counts[0])
        last_done = (not fatal) and counts[-1] >= expected
        done += 1 if last_done else 0
    result["cases"] = {"passed": done, "failed": total - done}
    return total > 0 and last_done


def _parse_nccl_ep(text, result, test, fatal):
    """NCCL EP's summary into the result: LL figures as ``low_latency`` (the slowest rank's), HT's as the BF16 dispatch
    and the combine (NVLink, and RDMA across nodes); its validation line as the one case. True when it finished."""
    summary = _NEP_SUMMARY_RE.search(text)
    validation = _NEP_VALIDATION_RE.search(text)
    correct = validation is not None and validation.group(1) == "passed"
    result["cases"] = {"passed": 1 if correct and not fatal else 0,
                       "failed": 0 if correct and not fatal else 1}
    if summary is None:
        return False
    ranks = int(summary.group(2))
    if test == "low_latency":
        figures = dict((m.group(1).lower(), (_num(m.group(3)), int(m.group(4)))) for m in _NEP_LL_RE.finditer(text))
        if figures:
            dispatch, combine, both = (figures.get(k, (None, None)) for k in ("dispatch", "combine", "total"))
            result["low_latency"] = {
                "dispatch_gbps": dispatch[0], "combine_gbps": combine[0], "dispatch_combine_gbps": both[0],
                "slowest_rank": both[1] if both[1] is not None else dispatch[1],
                "dispatch_slowest_rank": dispatch[1], "combine_slowest_rank": combine[1], "ranks": ranks}
        return validation is not None and "dispatch" in figures and "combine" in figures
    across = test == "internode"
    found = {}
    for match in _NEP_HT_RE.finditer(text):
        total, nvl, rdma = _num(match.group(3)), _num(match.group(4)), _num(match.group(5))
        found[match.group(1).lower()] = {"nvl_gbps": nvl if across else total, "rdma_gbps": rdma if across else None}
    result["dispatch"]["bf16"] = found.get("dispatch") or _empty_pair()
    result["combine"] = found.get("combine") or _empty_pair()
    return validation is not None and "dispatch" in found and "combine" in found


def parse_output(output, test=None, generation=None):
    """Parse DeepEP test output; see the module docstring and the filter's documentation.

    ``output``: a string, a list of lines, or a command result holding ``stdout``/``stderr``.
    ``test``: the test when it cannot be inferred from the output (see :func:`normalize_test`).
    ``generation``: ``v1`` or ``v2`` to override what the output suggests.
    """
    text = log_text(output)
    forced_generation = None
    if test is not None:
        test, forced_generation = normalize_test(test)
    if generation is not None:
        if not isinstance(generation, str) or generation.strip().lower() not in GENERATIONS:
            raise BandwidthInputError("generation %r is not one of %s" % (generation, ", ".join(GENERATIONS)))
        forced_generation = generation.strip().lower()
    if test is None:
        test = _infer_test(text)

    result = {
        "generation": forced_generation or _infer_generation(text, test),
        "test": test,
        "complete": False,
        "cases": {"passed": 0, "failed": 0},
        "dispatch": {"bf16": _empty_pair(), "fp8": _empty_pair()},
        "combine": _empty_pair(),
        "low_latency": None,
        "elastic": None,
        "extras": None,
        "errors": error_lines(text),
        "crashed": crashed(text),
    }
    fatal = fatal_signs(text)

    low_latency, ll_ranks = _parse_low_latency(text)
    result["low_latency"] = low_latency

    if result["generation"] == "nccl_ep" and test in ("intranode", "internode", "low_latency"):
        finished = _parse_nccl_ep(text, result, test, fatal)
        result["complete"] = finished and not fatal
    elif test in ("intranode", "internode"):
        finished = _parse_v1_normal(text, result)
        result["complete"] = finished and not fatal
    elif test == "low_latency":
        finished_ranks = set(int(m.group(1)) for m in _LL_SENDRECV_RE.finditer(text))
        all_ranks = ll_ranks | finished_ranks
        # One node's output across nodes prints its own (global) ranks, 8-15 on the second node of two: the ranks
        # between the lowest and the highest it printed must all have finished.
        expected = set(range(min(all_ranks), max(all_ranks) + 1)) if all_ranks else set()
        result["complete"] = bool(expected) and expected <= finished_ranks and not fatal
        passed = len(ll_ranks)
        dead = set(int(n) for n in re.findall(r"Process (\d+) terminated", text))
        failed = len(dead) if dead else (1 if fatal else 0)
        if expected and not fatal:
            failed = max(failed, len(expected - ll_ranks))
        result["cases"] = {"passed": passed, "failed": failed}
    elif test == "elastic":
        finished = _parse_elastic(text, result, fatal)
        result["complete"] = finished and not fatal
    elif test in EXTRAS_KINDS:
        extras = parse_extras(test, text)
        result["extras"] = extras
        result["complete"] = extras["complete"] and not fatal
        failed = 1 if fatal or extras["correct"] is False or not extras["complete"] else 0
        result["cases"] = {"passed": 0 if failed else 1, "failed": failed}
    return result
