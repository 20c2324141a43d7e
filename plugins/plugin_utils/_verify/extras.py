# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse the output of DeepEP V2's other tests (``tests/elastic/``, dd758ca): Engram, PP, all-gather/reduce-scatter
(CP, ``test_agrs.py``) and the barrier.

Pure logic, standard library only: read by ``bandwidth.parse_output`` for these tests. The formats, from the tests'
own ``dist_print`` lines (every rank prints its figure line; ``once_in_node`` lines once per node):

* ``test_engram.py``: `` > Rank   0/4 | issue: 12.3 us, wait: 45.6 us, 78.9 GB/s, bytes: 12.0 MB, 1.23 MPPS (256 B/msg)``
  after its correctness check (an assertion ``data mismatch`` fails it) and ``Running performance test ...``.
* ``test_pp.py``: stress tests `` > Testing with seed=... ...`` then `` > All stress tests passed``; then per rank and
  setting `` > EP:   0/  4 | hide=1, concurrent=2 | send: 12.345 us, 67.890 GB/s | recv: 12.345 us, 67.890 GB/s``.
* ``test_agrs.py``: stress `` > Seed 0 passed (123 ops)``; then per rank and size
  `` > Rank:   0/  8 | 8 x 67 MB | avg: 123.456 us, 789.012 GB/s (inplace=0, batched=1)`` (no GB/s on one rank).
* ``test_barrier.py``: `` > EP:   0/  8, barrier time: 12.345 us``.

Each test's figures are the slowest rank's (the lowest GB/s, the highest µs); ``complete`` says every rank between the
lowest and the highest printed its figure line (and, where the test has one, its correctness stage passed).
"""

from __future__ import annotations

import re

__all__ = ["KINDS", "parse_extras"]

KINDS = ("engram", "pp", "agrs", "barrier")

_N = r"(\d+(?:\.\d+)?)"
_ENGRAM = re.compile(r">\s*Rank\s+(\d+)/\s*(\d+)\s*\|\s*issue:\s*" + _N + r" us, wait:\s*" + _N + r" us, " + _N
                     + r" GB/s, bytes:\s*" + _N + r" MB, " + _N + r" MPPS")
_PP = re.compile(r">\s*EP:\s+(\d+)/\s*(\d+)\s*\|\s*hide=(\d), concurrent=(\d+)\s*\|\s*send:\s*" + _N + r" us, " + _N
                 + r" GB/s\s*\|\s*recv:\s*" + _N + r" us, " + _N + r" GB/s")
_AGRS = re.compile(r">\s*Rank:\s+(\d+)/\s*(\d+)\s*\|\s*(\d+) x (\d+) (MB|KB)\s*\|\s*avg:\s*" + _N
                   + r" us(?:, " + _N + r" GB/s)? \(inplace=(\d), batched=(\d)\)")
_BARRIER = re.compile(r">\s*EP:\s+(\d+)/\s*(\d+), barrier time:\s*" + _N + r" us")
_PP_STRESS_OK = re.compile(r"> All stress tests passed")
_AGRS_SEED_OK = re.compile(r"> Seed (\d+) passed \((\d+) ops\)")
_ENGRAM_CHECKED = re.compile(r"Running performance test \.\.\.")


def _ranks_complete(ranks):
    return bool(ranks) and set(range(min(ranks), max(ranks) + 1)) <= set(ranks)


def _low(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _high(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


# Each reader takes the figure lines' groups (rank and rank count first) and the whole text, and returns the slowest
# rank's figures and whether the correctness stage passed (None where the test has none).
def _engram(rows, text):
    figures = {"gbps": _low(float(r[4]) for r in rows), "mpps": _low(float(r[6]) for r in rows),
               "issue_us": _high(float(r[2]) for r in rows), "wait_us": _high(float(r[3]) for r in rows)}
    return figures, bool(_ENGRAM_CHECKED.search(text))


def _pp(rows, text):
    # The send/recv bandwidth of a single tensor in flight with the RDMA latency not hidden: the plainest setting.
    plain = [r for r in rows if r[2] == "0" and r[3] == "1"] or rows
    figures = {"send_gbps": _low(float(r[5]) for r in plain), "recv_gbps": _low(float(r[7]) for r in plain),
               "send_us": _high(float(r[4]) for r in plain), "recv_us": _high(float(r[6]) for r in plain),
               "settings": len(set((r[2], r[3]) for r in rows))}
    return figures, bool(_PP_STRESS_OK.search(text))


def _agrs(rows, text):
    def size_mb(row):
        return float(row[3]) * (1.0 if row[4] == "MB" else 1e-3)

    largest = max((size_mb(r) for r in rows), default=None)
    top = [r for r in rows if size_mb(r) == largest]
    figures = {"size_mb": largest, "gbps": _low(float(r[6]) for r in top if r[6] is not None),
               "avg_us": _high(float(r[5]) for r in top), "sizes": len(set(size_mb(r) for r in rows))}
    return figures, bool(_AGRS_SEED_OK.search(text))


def _barrier(rows, text):
    del text
    return {"barrier_us": _high(float(r[2]) for r in rows)}, None


# Each test's figure line and its reader.
_READERS = {"engram": (_ENGRAM, _engram), "pp": (_PP, _pp), "agrs": (_AGRS, _agrs), "barrier": (_BARRIER, _barrier)}


def parse_extras(kind, text):
    """``{kind, ranks, num_ranks, complete, correct, figures}`` of one extras test's (cleaned) output: ``correct`` is
    whether its correctness stage passed (None for the barrier, which has none), ``complete`` whether every rank
    between the lowest and the highest printed its figure line and the correctness stage passed."""
    if kind not in _READERS:
        raise ValueError("%r is not one of DeepEP V2's other tests; expected one of %s" % (kind, ", ".join(KINDS)))
    line, reader = _READERS[kind]
    rows = [m.groups() for m in line.finditer(text)]
    ranks = set(int(r[0]) for r in rows)
    figures, correct = reader(rows, text)
    complete = _ranks_complete(ranks) and correct is not False
    return {"kind": kind, "ranks": len(ranks), "num_ranks": max((int(r[1]) for r in rows), default=None),
            "complete": complete, "correct": correct, "figures": figures}
