# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Audit time against fleet size: run playbooks/audit.yml on 2, 4 and 8 simulated nodes and print the figures.

    .venv/bin/python tools/bench/audit_bench.py [--sizes 2 4 8] [--repeat 3] [--profile gcp_b200] [--keep]
                                                [--compare DIR [--compare-label NAME]]

One fleetsim fleet (``bench-audit``) is grown to each size in turn (nodes are added, never rebuilt); for each
size the audit playbook runs ``--repeat`` times and the median wall-clock time of ``ansible-playbook`` (start
to exit, report written) is reported with the controller's CPU seconds of that run (``ansible-playbook`` and every
process it waited for: its forks and their ssh clients, ``getrusage(RUSAGE_CHILDREN)``; the detached ControlPersist
masters are not counted) and that per node, and with the load averages of the host (1, 5 and 15 minutes, as ``uptime``
shows them) taken before each run, since the machine may be shared. The goal for 8 nodes is 10 s or less.
Results also go to ``build/bench/audit_bench.json``.

``--compare DIR`` also times the audit of another checkout of the collection (for example an older revision
made with ``git worktree add /tmp/audit-old HEAD``) on the same fleet: the two run alternately, one run of
each per attempt, so both see the same load. Give ``--compare`` more than once to time several checkouts (named by
their folder, or by ``--compare-label`` in the order given). DIR needs ``.collections/ansible_collections/gpufleet/deepep``
pointing at itself (the bench creates that link when it is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def prepare_tree(tree: Path) -> Path:
    """A checkout to time: its collection link is made when missing (the link is git-ignored)."""
    tree = tree.resolve()
    if not (tree / "playbooks" / "audit.yml").is_file():
        raise SystemExit("%s holds no playbooks/audit.yml" % tree)
    link = tree / ".collections" / "ansible_collections" / "gpufleet" / "deepep"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("../../..")
    return tree


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_audit(inventory: Path, out_dir: Path, limit: str, tree: Path = REPO) -> tuple:
    """(wall seconds, controller CPU seconds) of one audit run."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(tree / ".collections"),
               PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "playbooks/audit.yml",
            "-l", limit, "-e", "audit_output_dir=%s" % out_dir, "-e", "audit_import_check=true",
            "-e", "audit_import_when=always"]
    start, cpu_start = time.monotonic(), children_cpu()
    proc = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    elapsed, cpu = time.monotonic() - start, children_cpu() - cpu_start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit("audit failed (rc=%d) on %s" % (proc.returncode, inventory))
    fleet = json.loads((out_dir / "fleet.json").read_text())
    if fleet["summary"]["unreachable"]:
        raise SystemExit("audit reports unreachable nodes: %s" % fleet["summary"])
    return elapsed, cpu


def loads():
    return [round(x, 2) for x in os.getloadavg()]


def summarize(size, label, runs, load_list):
    times = [wall for wall, dummy in runs]
    cpu = statistics.median(cpu for dummy, cpu in runs)
    row = {"nodes": size, "tree": label, "median_s": round(statistics.median(times), 2),
           "min_s": round(min(times), 2), "runs_s": [round(t, 2) for t in times],
           "controller_cpu_s": round(cpu, 2), "controller_cpu_s_per_node": round(cpu / size, 3),
           "load_before_runs": load_list, "load_1min_median": round(statistics.median(one[0] for one in load_list), 2),
           "cpus": os.cpu_count()}
    print("%-8s %d nodes: median %.2f s (min %.2f, runs %s), controller %.2f CPU-s (%.3f a node), load before each "
          "run %s on %d CPUs"
          % (label, size, row["median_s"], row["min_s"], row["runs_s"], cpu, cpu / size,
             " | ".join("%.2f %.2f %.2f" % tuple(one) for one in load_list), os.cpu_count()), flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="gcp_b200")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up afterwards")
    parser.add_argument("--compare", type=Path, action="append", default=[],
                        help="another checkout whose audit is timed alongside (repeatable)")
    parser.add_argument("--compare-label", action="append", default=[],
                        help="its name in the table (repeatable, in the order of --compare)")
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes))
    trees = [("current", REPO)]
    for index, other in enumerate(args.compare):
        if index < len(args.compare_label):
            label = args.compare_label[index]
        else:
            label = "compare" if len(args.compare) == 1 else other.resolve().name
        trees.append((label, prepare_tree(other)))
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
                times = dict((label, []) for label, _tree in trees)
                load_list = dict((label, []) for label, _tree in trees)
                for attempt in range(args.repeat):
                    for label, tree in trees:
                        load_list[label].append(loads())
                        times[label].append(run_audit(inventory, tmp / ("run-%s-%d-%d" % (label, size, attempt)),
                                                      limit, tree))
                for label, _tree in trees:
                    results.append(summarize(size, label, times[label], load_list[label]))
    finally:
        if not args.keep:
            fleetsim("down", "--purge", "--quiet")
    out = REPO / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit_bench.json").write_text(json.dumps({"goal_8_nodes_s": GOAL_8, "results": results}, indent=2) + "\n")
    for label, _tree in trees:
        eight = [r for r in results if r["nodes"] == 8 and r["tree"] == label]
        if eight:
            verdict = "meets" if eight[0]["median_s"] <= GOAL_8 else "misses"
            print("%s: 8 nodes %.2f s %s the goal of %.0f s" % (label, eight[0]["median_s"], verdict, GOAL_8))
    for other, _tree in trees[1:]:
        for size in sizes:
            rows = dict((r["tree"], r) for r in results if r["nodes"] == size)
            print("%d nodes: %s %.2f s vs %s %.2f s: %.2fx faster"
                  % (size, trees[0][0], rows[trees[0][0]]["median_s"], other, rows[other]["median_s"],
                     rows[other]["median_s"] / rows[trees[0][0]]["median_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
