# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No-op converge time of playbooks/site.yml on 2, 4 and 8 simulated gcp_b200 nodes.

Brings up one simulated fleet of the largest size, converges it once (the first converge installs
everything: CUDA fixture, DOCA-OFED, the reboot, GDRCopy, the CPU torch wheel, the later phases), then
times converges that change nothing on the first 2, 4 and 8 nodes (``-l``): the default run (the plan
play finds every node intact, as its last full converge left it, and runs no phase) and a run of every
phase on every node (``-e gpufleet_site_fast=false``: what a no-op costs where the fast path is not taken,
e.g. on a node that drifted). Prints a table with the load average beside every figure; ``--json`` prints
JSON.

    .venv/bin/python tools/bench/site_bench.py [--sizes 2 4 8] [--repeat 1] [--keep] [--reuse]
        [--compare OTHER_CHECKOUT [--compare-fleet NAME]] [--skip-tags TAGS] [--profile-dir DIR] [--runs every]

``--compare`` times another checkout of the collection (e.g. ``git worktree add /tmp/site-old HEAD``) on
its own fleet, converged by that checkout, run for run interleaved with this one, so both see the same
load; give it more than once to time several checkouts in the same run (old, intermediate and new), each
on its own fleet (``--compare-fleet``, then that name with 2, 3 ... appended) and named by its folder.
``--reuse`` keeps a fleet that is up (and its inventory) instead of starting and converging it again.
``--profile-dir`` writes the per-task timings of every run there (the ``junit`` callback of ansible-core).

Run from the repository root as root (the simulated fleet needs namespaces). The goal: 8 nodes in 30 s or
less for a no-op converge on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GROUP = "b200_cluster"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Tree:
    """A checkout of the collection and the fleet it is timed on."""

    label: str
    root: Path
    fleet: str
    collections: Path

    @property
    def inventory(self) -> Path:
        return self.root / "build" / f"{self.fleet}.yml"


def fleetsim(tree: Tree, *args: str, capture: bool = False, check: bool = True) -> str:
    cmd = [sys.executable, "-m", "tools.fleetsim", "--fleet", tree.fleet, *args]
    proc = subprocess.run(cmd, cwd=tree.root, check=check, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return proc.stdout if capture else ""


def playbook(tree: Tree, limit: str, extra: list[str], junit_dir: Path | None = None) -> tuple[float, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree.root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_COLLECTIONS_PATH=str(tree.collections),
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if junit_dir is not None:
        junit_dir.mkdir(parents=True, exist_ok=True)
        env.update(ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit", JUNIT_OUTPUT_DIR=str(junit_dir),
                   JUNIT_TASK_CLASS="yes")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tree.inventory), "-i",
           str(tree.root / "inventories" / "fleetsim"), str(tree.root / "playbooks" / "site.yml"), "-l", limit, *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tree.root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"{tree.label}: site.yml failed on {limit} (rc {proc.returncode})")
    return elapsed, proc.stdout


def changed(output: str) -> int:
    return sum(int(m.group(3)) for m in RECAP.finditer(output))


def batches(output: str) -> int:
    """How many batches the converge play ran (its PLAY banner repeats once per batch)."""
    return output.count("PLAY [Converge GPU nodes to a DeepEP-ready state]")


def intact(output: str) -> int:
    """How many nodes the plan play found intact (they run no phase)."""
    return output.count("intact: the node is as its last full converge left it")


# The no-op runs: the default (intact nodes run no phase), and every phase on every node (what a no-op costs
# when the fast path cannot be taken: a drifted node, a --tags run), in the default batches.
RUNS = (("fast path", []), ("every phase", ["-e", "gpufleet_site_fast=false"]))


def load() -> float:
    return round(os.getloadavg()[0], 1)


def set_up(tree: Tree, nodes: int, skip_tags: list[str], reuse: bool) -> dict:
    out: dict = {}
    if reuse and tree.inventory.exists() and "not up" not in fleetsim(tree, "status", capture=True, check=False):
        # Converge it once more (untimed): a fleet converged by other settings or another checkout changes here.
        out["reused"] = True
    else:
        fleetsim(tree, "down", "--purge", "--quiet")
        start = time.monotonic()
        fleetsim(tree, "up", "--profile", "gcp_b200", "--nodes", str(nodes), "--group", GROUP)
        out["fleet_up_s"] = round(time.monotonic() - start, 1)
        tree.inventory.parent.mkdir(parents=True, exist_ok=True)
        fleetsim(tree, "inventory", "--output", str(tree.inventory))
    first, text = playbook(tree, GROUP, ["-e", "gpufleet_serial=100%", *skip_tags])
    out.update(first_converge_s=round(first, 1), first_converge_changed=changed(text), first_converge_load=load())
    return out


def collections_dir(root: Path, tmp: Path) -> Path:
    """An ANSIBLE_COLLECTIONS_PATH whose gpufleet.deepep is the checkout at root."""
    base = tmp / root.name.replace("/", "_")
    link = base / "ansible_collections" / "gpufleet" / "deepep"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(root)
    return base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=1,
                        help="no-op runs per size and batching (best and median are kept)")
    parser.add_argument("--fleet", default="bench-site")
    parser.add_argument("--keep", action="store_true", help="leave the fleet(s) up")
    parser.add_argument("--reuse", action="store_true", help="use the fleet(s) already up and converged")
    parser.add_argument("--compare", type=Path, action="append", default=[],
                        help="another checkout of the collection, timed interleaved (repeatable)")
    parser.add_argument("--compare-fleet", default="bench-site-cmp")
    parser.add_argument("--skip-tags", default="", help="passed to every ansible-playbook run")
    parser.add_argument("--profile-dir", type=Path, help="per-task timings (JUnit XML) of every run")
    parser.add_argument("--runs", choices=["both", "fast", "every"], default="both",
                        help="time the fast path, the every-phase run, or both (default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = [run for run in RUNS if args.runs == "both" or run[0].startswith(args.runs)]

    nodes = max(args.sizes)
    skip = ["--skip-tags", args.skip_tags] if args.skip_tags else []
    with tempfile.TemporaryDirectory(prefix="site-bench-") as tmp:
        trees = [Tree("this", REPO, args.fleet, collections_dir(REPO, Path(tmp)))]
        for index, other in enumerate(args.compare):
            root = other.resolve()
            fleet = args.compare_fleet if index == 0 else f"{args.compare_fleet}{index + 1}"
            label = f"compare {root}" if len(args.compare) == 1 else root.name
            trees.append(Tree(label, root, fleet, collections_dir(root, Path(tmp))))
        results: dict = {"nodes": nodes, "cpus": os.cpu_count(), "trees": {}, "noop": []}
        try:
            for tree in trees:
                results["trees"][tree.label] = set_up(tree, nodes, skip, args.reuse)
            for size in sorted(args.sizes):
                limit = f"{GROUP}[0:{size - 1}]"
                for label, extra in runs:
                    best: dict = {}
                    every: dict = {}
                    for run in range(args.repeat):
                        for tree in trees:
                            junit = (args.profile_dir / f"{tree.fleet}-{size}-{label.replace(' ', '-')}-{run}"
                                     if args.profile_dir else None)
                            before = load()
                            elapsed, out = playbook(tree, limit, [*extra, *skip], junit)
                            if changed(out):
                                raise SystemExit(f"{tree.label}: no-op converge of {limit} changed {changed(out)} "
                                                 "task results")
                            row = {"tree": tree.label, "nodes": size, "batching": label, "seconds": round(elapsed, 1),
                                   "batches": batches(out), "intact": intact(out), "load_before": before,
                                   "load_after": load()}
                            every.setdefault(tree.label, []).append(row)
                            if tree.label not in best or row["seconds"] < best[tree.label]["seconds"]:
                                best[tree.label] = row
                    for tree in trees:
                        seconds = sorted(row["seconds"] for row in every[tree.label])
                        best[tree.label].update(median=round(statistics.median(seconds), 1), runs=seconds,
                                                loads=[row["load_before"] for row in every[tree.label]])
                    results["noop"].extend(best[tree.label] for tree in trees)
        finally:
            if not args.keep:
                for tree in trees:
                    fleetsim(tree, "down", "--purge", "--quiet", check=False)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for label, info in results["trees"].items():
        up = "fleet reused" if info.get("reused") else f"fleet of {nodes} gcp_b200 nodes up in {info['fleet_up_s']} s"
        print(f"{label}: {up}; first converge (all at once) {info['first_converge_s']} s, "
              f"{info['first_converge_changed']} changed, load {info['first_converge_load']}")
    print(f"{'tree':<10} {'nodes':>5}  {'run':<16} {'intact':>6} {'batches':>7} {'best':>8} {'median':>8}  "
          f"runs (s); load 1-min before each run (on {os.cpu_count()} CPUs)")
    for row in results["noop"]:
        print(f"{row['tree'][:10]:<10} {row['nodes']:>5}  {row['batching']:<16} {row['intact']:>6} {row['batches']:>7} "
              f"{row['seconds']:>6.1f} s {row['median']:>6.1f} s  {row['runs']}; load {row['loads']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
