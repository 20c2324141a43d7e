# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit time against fleet size: run playbooks/audit.yml on 2, 4 and 8 simulated nodes and print the figures.

    .venv/bin/python tools/bench/audit_bench.py [--sizes 2 4 8] [--repeat 3] [--profile gcp_b200] [--keep]

One fleetsim fleet (``bench-audit``) is grown to each size in turn (nodes are added, never rebuilt); for each
size the audit playbook runs ``--repeat`` times and the median wall-clock time of ``ansible-playbook`` (start
to exit, report written) is reported, with the load average of the host at the time, since the machine may
be shared. The goal for 8 nodes is 10 s or less. Results also go to ``build/bench/audit_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLEET = "bench-audit"
GOAL_8 = 10.0


def sh(argv, **kw):
    return subprocess.run(argv, cwd=REPO, check=True, text=True, **kw)


def fleetsim(*args, capture=False):
    argv = [sys.executable, "-m", "tools.fleetsim", "--fleet", FLEET] + list(args)
    if capture:
        return sh(argv, stdout=subprocess.PIPE).stdout
    return sh(argv, stdout=subprocess.DEVNULL)


def run_audit(inventory: Path, out_dir: Path, limit: str) -> float:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "playbooks/audit.yml",
            "-l", limit, "-e", "audit_output_dir=%s" % out_dir, "-e", "audit_import_check=true"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit("audit failed (rc=%d) on %s" % (proc.returncode, inventory))
    fleet = json.loads((out_dir / "fleet.json").read_text())
    if fleet["summary"]["unreachable"]:
        raise SystemExit("audit reports unreachable nodes: %s" % fleet["summary"])
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="gcp_b200")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up afterwards")
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes))
    results = []
    fleetsim("down", "--purge", "--quiet")
    try:
        have = 0
        with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
            tmp = Path(tmp)
            for size in sizes:
                if size > have:
                    fleetsim("up", "--profile", args.profile, "--group", "bench", "--nodes", str(size - have))
                    have = size
                inventory = tmp / ("inventory-%d.yml" % size)
                inventory.write_text(fleetsim("inventory", capture=True))
                # The inventory holds every node up so far; the audit runs on the first `size` of them.
                limit = ",".join("bench-%d" % n for n in range(1, size + 1))
                times = [run_audit(inventory, tmp / ("run-%d-%d" % (size, attempt)), limit)
                         for attempt in range(args.repeat)]
                load = os.getloadavg()[0]
                row = {"nodes": size, "median_s": round(statistics.median(times), 2),
                       "min_s": round(min(times), 2), "runs_s": [round(t, 2) for t in times],
                       "load_1min": round(load, 2), "cpus": os.cpu_count()}
                results.append(row)
                print("%d nodes: median %.2f s (min %.2f, runs %s), load %.1f on %d CPUs"
                      % (size, row["median_s"], row["min_s"], row["runs_s"], load, os.cpu_count()), flush=True)
    finally:
        if not args.keep:
            fleetsim("down", "--purge", "--quiet")
    out = REPO / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit_bench.json").write_text(json.dumps({"goal_8_nodes_s": GOAL_8, "results": results}, indent=2) + "\n")
    eight = [r for r in results if r["nodes"] == 8]
    if eight:
        verdict = "meets" if eight[0]["median_s"] <= GOAL_8 else "misses"
        print("8 nodes: %.2f s %s the goal of %.0f s" % (eight[0]["median_s"], verdict, GOAL_8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
