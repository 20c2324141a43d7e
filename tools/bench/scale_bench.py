# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Converge and audit time against fleet size: 8, 16, 32 and 64 simulated gcp_b200 nodes, the cost per added node,
the controller's CPU and memory per run and the memory each simulated node holds.

    .venv/bin/python tools/bench/scale_bench.py [--sizes 8 16 32 64] [--repeat 1] [--fleet bench-scale]
        [--reuse] [--keep] [--skip-every-phase] [--json] [--time-limit 5400] [--run-timeout 1800]
        [--mitogen DIR]

One fleetsim fleet is grown to each size in turn (nodes are added, never rebuilt); only the added nodes are
converged (untimed, ``gpufleet_serial=100%``). At each size three runs that change nothing are timed:

- ``no-op``: ``playbooks/site.yml`` on the whole group; every node is intact and runs no phase (the fast path);
- ``audit``: ``playbooks/audit.yml`` (read-only, one round trip per node);
- ``every phase``: ``site.yml -e gpufleet_site_fast=false`` (what a drifted node, a ``--tags`` run and Molecule's
  idempotence step pay).

The median of ``--repeat`` runs is kept, with the host's 1-minute load before each run (the machine may be
shared). The cost per added node is the slope between consecutive sizes. Goals on 2 cores: 32 nodes no-op
converge <= 10 s, audit of 32 nodes <= 10 s; 64 nodes no-op converge <= 10 s, audit of 64 nodes <= 15 s.

Each timed run also records the controller's side: the CPU seconds of ``ansible-playbook`` and every process it
waited for (``getrusage(RUSAGE_CHILDREN)``: the forks and their ssh clients; the detached ControlPersist masters are
not counted), the CPU seconds of its main process alone (the strategy and the processing of every result: the one
process that does not scale with forks; sampled every 0.2 s, so the last 0.2 s may be missed) and the peak
resident memory of its process tree (sampled every 0.2 s from /proc). At each size the memory of the simulated
nodes is read the same way: the proportional set size (PSS, ``smaps_rollup``) of each node's supervisor tree (its
PID 1, sshd, and whatever the node runs), summed and divided by the node count, and the host's MemAvailable before
the first node and after each size (that one moves with whatever else the machine runs).

``--mitogen DIR`` (optional, never needed): DIR holds an installed Mitogen (``pip install --target DIR mitogen``);
the no-op converge and the audit are then timed a second time with its ``mitogen_linear`` strategy.

``--reuse`` keeps a fleet of that name that is up (its nodes are converged again, untimed, in case another checkout
converged them); ``--keep`` leaves the fleet up, otherwise it is torn down at the end, also after a failure.
``--time-limit`` bounds the whole bench (seconds): a size that would start after it is left out and said so.
Results also go to ``build/bench/scale_bench.json``, written after each size.

Run from the repository root as root (the simulated fleet needs namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GROUP = "b200_cluster"
PROFILE = "gcp_b200"
GOALS = {32: {"noop": 10.0, "audit": 10.0}, 64: {"noop": 10.0, "audit": 15.0}}
STATE_ROOT = Path(os.environ.get("FLEETSIM_STATE_DIR", "/srv/fleetsim"))
RUN_TIMEOUT = [1800.0]  # seconds one playbook run may take (--run-timeout)
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
RUNS = (("noop", "no-op converge"), ("audit", "audit"), ("every_phase", "every-phase converge"))
RUN_KINDS = tuple(run[0] for run in RUNS)
MITOGEN_KINDS = ("noop_mitogen", "audit_mitogen")
MITOGEN: list = [None]  # the directory of an installed Mitogen (--mitogen)


def fleetsim(fleet: str, *args: str, check: bool = True, capture: bool = False) -> str:
    proc = subprocess.run([sys.executable, "-m", "tools.fleetsim", "--fleet", fleet, *args], cwd=REPO, check=check,
                          text=True, stdout=subprocess.PIPE if capture else None, timeout=1800)
    return proc.stdout if capture else ""


def node_count(fleet: str) -> int:
    try:
        data = json.loads(fleetsim(fleet, "status", "--json", capture=True, check=False))["fleet"]
    except (ValueError, KeyError, TypeError):
        return 0
    if not data.get("up"):
        return 0
    return sum(1 for node in (data.get("nodes") or {}).values() if node.get("state") == "up")


def _children() -> dict:
    """Parent pid -> child pids, of every process now (from /proc)."""
    out: dict = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, encoding="utf-8", errors="replace") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(entry))
    return out


def tree(root: int, children: dict | None = None) -> list:
    """``root`` and every process below it."""
    children = _children() if children is None else children
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def memory_kib(pid: int, field: str = "Rss") -> int:
    """A process's resident (``Rss``) or proportional (``Pss``) memory in KiB; 0 when it is gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def mem_available_mib() -> float:
    with open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    return 0.0


def node_memory(fleet: str) -> dict:
    """PSS of every up node's supervisor tree (PID 1, sshd, what the node runs): total and per node, in MiB."""
    try:
        nodes = json.loads((STATE_ROOT / fleet / "state.json").read_text())["nodes"]
    except (OSError, ValueError, KeyError):
        return {}
    children = _children()
    per = []
    for node in nodes.values():
        pid = node.get("supervisor_pid")
        if isinstance(pid, int) and os.path.exists("/proc/%d" % pid):
            per.append(sum(memory_kib(p, "Pss") for p in tree(pid, children)) / 1024.0)
    if not per:
        return {}
    return {"nodes": len(per), "total_mib": round(sum(per), 1), "per_node_mib": round(sum(per) / len(per), 1),
            "max_node_mib": round(max(per), 1)}


def cpu_seconds(pid: int) -> float | None:
    """The user + system CPU seconds of one process (not its children); None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, IndexError, ValueError):
        return None


class PeakRss(threading.Thread):
    """The peak of the summed resident memory of a process tree, sampled every 0.2 s until stopped, and the CPU
    seconds of its root process alone (ansible-playbook's main process: the strategy, the results it processes)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_kib, self.main_cpu_s, self.done = pid, 0, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak_kib = max(self.peak_kib, sum(memory_kib(p) for p in tree(self.pid)))
            self.main_cpu_s = max(self.main_cpu_s, cpu_seconds(self.pid) or 0.0)
            self.done.wait(0.2)


def env() -> dict:
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
                PATH="%s:%s" % (Path(sys.executable).parent, os.environ.get("PATH", "")))


LAST_RUN: dict = {}  # the controller's CPU seconds and peak memory of the last playbook run


def playbook(inventory: Path, name: str, limit: str, extra: list[str], mitogen: bool = False) -> tuple[float, str]:
    variables = env()
    if mitogen:
        variables.update(PYTHONPATH=str(MITOGEN[0]), ANSIBLE_STRATEGY="mitogen_linear",
                         ANSIBLE_STRATEGY_PLUGINS=str(Path(MITOGEN[0]) / "ansible_mitogen" / "plugins" / "strategy"))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "-i",
            str(REPO / "inventories" / "fleetsim"), str(REPO / "playbooks" / name), "-l", limit, *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=variables, text=True, stdout=log, stderr=subprocess.STDOUT)
        sampler = PeakRss(proc.pid)
        sampler.start()
        try:
            returncode = proc.wait(timeout=RUN_TIMEOUT[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            returncode = None
        finally:
            sampler.done.set()
            sampler.join()
        elapsed = time.monotonic() - start
        log.seek(0)
        output = log.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_RUN.clear()
    LAST_RUN.update(cpu_s=round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
                    peak_rss_mib=round(sampler.peak_kib / 1024.0, 1), main_cpu_s=round(sampler.main_cpu_s, 1))
    if returncode != 0:
        failed = REPO / "build" / "bench" / ("failed-%s-%d.log" % (name.replace(".yml", ""), int(time.time())))
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(output)
        sys.stderr.write("the whole output: %s\n" % failed)
    if returncode is None:
        sys.stderr.write(output[-4000:])
        raise SystemExit("%s on %s ran past --run-timeout %.0f s and was stopped" % (name, limit, RUN_TIMEOUT[0]))
    if returncode != 0:
        sys.stderr.write(output[-4000:])
        raise SystemExit("%s failed on %s (rc %d)" % (name, limit, returncode))
    return elapsed, output


def changed(output: str) -> int:
    return sum(int(m.group(3)) for m in RECAP.finditer(output))


def timed(kind: str, inventory: Path, size: int, report_dir: Path) -> float:
    limit = "%s[0:%d]" % (GROUP, size - 1)
    mitogen = kind.endswith("_mitogen")
    kind = kind.replace("_mitogen", "")
    if kind == "audit":
        out = report_dir / ("audit-%d%s" % (size, "-mitogen" if mitogen else ""))
        elapsed = playbook(inventory, "audit.yml", limit, ["-e", "audit_output_dir=%s" % out], mitogen)[0]
        summary = json.loads((out / "fleet.json").read_text())["summary"]
        if summary.get("unreachable"):
            raise SystemExit("the audit of %d nodes found unreachable nodes: %s" % (size, summary))
        return elapsed
    extra = ["-e", "gpufleet_site_fast=false"] if kind == "every_phase" else []
    elapsed, text = playbook(inventory, "site.yml", limit, extra, mitogen)
    if changed(text):
        raise SystemExit("the %s of %d nodes changed %d task results (expected none)" % (kind, size, changed(text)))
    if kind == "noop" and text.count("intact: the node is as its last full converge left it") != size:
        raise SystemExit("the no-op converge of %d nodes did not find every node intact" % size)
    return elapsed


def write_results(results: dict) -> Path:
    out = REPO / "build" / "bench" / "scale_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(".json.part")
    part.write_text(json.dumps(results, indent=2) + "\n")
    part.replace(out)
    return out


def slopes(rows: list[dict], kind: str) -> list:
    out = [None]
    for before, after in zip(rows, rows[1:]):
        if before.get(kind) is None or after.get(kind) is None:
            out.append(None)
        else:
            out.append(round((after[kind] - before[kind]) / (after["nodes"] - before["nodes"]), 2))
    return out


def print_table(results: dict) -> None:
    rows = results["rows"]
    per = dict((kind, slopes(rows, kind)) for kind in RUN_KINDS)
    header = ("nodes", "no-op s", "audit s", "every-phase s", "per added node (no-op/audit/every)",
              "load 1-min before runs")
    print("%5s  %9s  %8s  %12s  %-27s  %s" % header)
    for index, row in enumerate(rows):
        slope = "/".join("-" if per[kind][index] is None else "%.2f" % per[kind][index] for kind in RUN_KINDS)
        cell = dict((kind, "-" if row.get(kind) is None else "%.1f" % row[kind]) for kind in RUN_KINDS)
        loads = " ".join("%.1f" % x for x in row["loads"])
        print("%5d  %9s  %8s  %12s   %-33s  %s" % (row["nodes"], cell["noop"], cell["audit"], cell["every_phase"],
                                                   slope, loads))
    print()
    print("controller per run: CPU s of ansible-playbook and its forks (of its main process alone) / peak RSS MiB "
          "of its process tree; simulated nodes: PSS per node")
    print("%5s  %-21s  %-21s  %-21s  %-14s  %s" % ("nodes", "no-op cpu(main)/rss", "audit cpu(main)/rss",
                                                   "every cpu(main)/rss", "node PSS MiB", "host MemAvailable MiB"))
    for row in rows:
        cells = []
        for kind in RUN_KINDS:
            ctl = (row.get("controller") or {}).get(kind)
            if ctl:
                cells.append("%.1f (%s) / %.0f" % (ctl["cpu_s"], ctl.get("main_cpu_s", "-"), ctl["peak_rss_mib"]))
            else:
                cells.append("-")
        mem = row.get("node_memory") or {}
        node_mib = "-" if not mem else "%.1f" % mem["per_node_mib"]
        print("%5d  %-21s  %-21s  %-21s  %-14s  %s" % (row["nodes"], cells[0], cells[1], cells[2], node_mib,
                                                       row.get("mem_available_mib", "-")))
    for row in rows:
        if any(row.get(kind) is not None for kind in MITOGEN_KINDS):
            print("%d nodes with mitogen_linear: no-op %s s, audit %s s" % (
                row["nodes"], row.get("noop_mitogen", "-"), row.get("audit_mitogen", "-")))
    for size, goals in sorted(GOALS.items()):
        row = next((r for r in rows if r["nodes"] == size), None)
        for kind, goal in goals.items():
            if row is not None and row.get(kind) is not None:
                print("goal %s of %d nodes <= %.0f s: %.1f s (%s)" % (kind, size, goal, row[kind],
                                                                      "met" if row[kind] <= goal else "missed"))
    for note in results["notes"]:
        print("note: %s" % note)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--fleet", default="bench-scale")
    parser.add_argument("--reuse", action="store_true", help="use the fleet of that name when it is up")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up")
    parser.add_argument("--skip-every-phase", action="store_true", help="time only the no-op converge and the audit")
    parser.add_argument("--time-limit", type=float, default=5400.0, help="seconds; no new size starts after it")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="seconds one playbook run may take")
    parser.add_argument("--mitogen", metavar="DIR", help="time no-op and audit again with Mitogen installed in DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = sorted(set(args.sizes))
    if sizes[0] < 1 or sizes[-1] > 200 or args.repeat < 1 or args.run_timeout <= 0:
        parser.error("--sizes: 1 to 200 nodes; --repeat: at least 1; --run-timeout: seconds above 0")
    RUN_TIMEOUT[0] = args.run_timeout
    if args.mitogen and not (Path(args.mitogen) / "ansible_mitogen" / "plugins" / "strategy").is_dir():
        parser.error("--mitogen %s: no ansible_mitogen/plugins/strategy there (pip install --target DIR mitogen)"
                     % args.mitogen)
    MITOGEN[0] = args.mitogen
    started = time.monotonic()
    inventory = REPO / "build" / ("%s.yml" % args.fleet)
    inventory.parent.mkdir(parents=True, exist_ok=True)
    results = {"cpus": os.cpu_count(), "fleet": args.fleet, "rows": [], "converge": [], "notes": [],
               "mem_available_mib_before": mem_available_mib()}
    kinds = [kind for kind in RUN_KINDS if not (kind == "every_phase" and args.skip_every_phase)]
    kinds += list(MITOGEN_KINDS) if args.mitogen else []
    try:
        up = node_count(args.fleet) if args.reuse else 0
        if not up:
            fleetsim(args.fleet, "down", "--purge", "--quiet")
        converged = 0
        with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
            for size in sizes:
                if time.monotonic() - started > args.time_limit:
                    results["notes"].append("%d nodes left out: the bench ran past --time-limit %.0f s"
                                            % (size, args.time_limit))
                    continue
                start = time.monotonic()
                if up < size:
                    fleetsim(args.fleet, "up", "--profile", PROFILE, "--nodes", str(size - up), "--group", GROUP)
                    up = size
                fleet_up = time.monotonic() - start
                fleetsim(args.fleet, "inventory", "--output", str(inventory))
                # Converge what is new (all of a reused fleet, once), untimed: the timed runs change nothing.
                first = 0 if (args.reuse and converged == 0) else converged
                start = time.monotonic()
                playbook(inventory, "site.yml", "%s[%d:%d]" % (GROUP, first, size - 1),
                         ["-e", "gpufleet_serial=100%"])
                results["converge"].append({"nodes": size, "converged": size - first,
                                            "fleet_up_s": round(fleet_up, 1),
                                            "converge_s": round(time.monotonic() - start, 1)})
                converged = size
                row = {"nodes": size, "loads": [], "controller": {}, "node_memory": node_memory(args.fleet),
                       "mem_available_mib": mem_available_mib()}
                for kind in kinds:
                    times, runs = [], []
                    for attempt in range(args.repeat):
                        row["loads"].append(round(os.getloadavg()[0], 1))
                        times.append(timed(kind, inventory, size, Path(tmp)))
                        runs.append(dict(LAST_RUN))
                    row[kind] = round(statistics.median(times), 1)
                    row["controller"][kind] = {
                        "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 1),
                        "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1),
                        "main_cpu_s": round(statistics.median(r["main_cpu_s"] for r in runs), 1)}
                results["rows"].append(row)
                # After each size: a bench stopped later keeps the sizes it finished.
                write_results(results)
                print("%d nodes: %s" % (size, ", ".join("%s %.1f s" % (k, row[k]) for k in kinds)), flush=True)
    finally:
        if not args.keep:
            fleetsim(args.fleet, "down", "--purge", "--quiet", check=False)
    write_results(results)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for conv in results["converge"]:
            print("grew to %(nodes)d nodes: fleet up %(fleet_up_s)s s, converge of %(converged)d nodes "
                  "%(converge_s)s s" % conv)
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
