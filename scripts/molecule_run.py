#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run Molecule scenarios (``molecule test -s NAME``), each under a time limit, ``--jobs`` at a time.

Every scenario writes its whole output to ``<logs>/<scenario>.log``. One job at a time, the output is also
streamed as it comes; several at a time, only a line per start and end is printed, and the last lines of a
failed scenario's log. Each scenario's time, and the time of each of its Molecule actions (create, prepare,
converge, ...), is printed at the end and written to ``<logs>/timings.json``; the longest scenarios start
first (from the timings of the previous run, else from :data:`EXPECTED_SECONDS`). Every task's wall time goes to
``<logs>/<scenario>.tasks.jsonl`` (the harness callback tools/callbacks/gpufleet_task_times.py, enabled in
.config/molecule/config.yml), and each scenario's slowest tasks are printed with its time.

A scenario that runs past ``--timeout`` (a VM scenario: at least :data:`VM_TIMEOUT`) is stopped (its whole process
group: SIGTERM, then SIGKILL) and its simulated fleet (``mol-<scenario>``) is taken down, so the next run starts clean.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# Seconds each scenario took in `make test` on a loaded 2-core machine, two at a time (the rehearsal of 2026-11-30;
# the order when no earlier timings.json exists: a clean clone, CI). Every scenario under molecule/ has its figure
# (tests/integration/tools/test_molecule_run.py holds it): a scenario missing here was ordered as 300 s, so sglang,
# one of the longest, started eighth and ran alone at the end of the stage.
EXPECTED_SECONDS = {"build": 1240, "verify": 1080, "sglang": 940, "site": 930, "profiles": 680, "serving": 610,
                    "reboot_faults": 410, "infiniband": 380, "nvl72": 420, "efa": 300, "image": 210, "audit": 120, "default": 60,
                    "realvm": 1050, "realvm_image": 900}
ACTION = re.compile(r"\x1b\[[0-9;]*m|\r")
ACTION_LINE = re.compile(r"^INFO\s+(\S+) \S+ (\w+): Executing")
KILL_GRACE = 30
# Scenarios whose nodes are QEMU guests of tools/vmfleet (not fleetsim nodes).
VM_SCENARIOS = ("realvm", "realvm_image")
# Seconds a VM scenario may run at least, whatever --timeout says: from a clean clone it builds its image first
# (debootstrap, about 130 s) and every task starts Python in a guest under software emulation; measured 1,982 s
# on a loaded 2-core machine.
VM_TIMEOUT = 3600
TAIL_LINES = 300
SLOWEST = 8  # tasks printed per scenario
# The lines of a failed scenario's log that say why (Ansible's failures and their messages, Molecule's errors, Python
# tracebacks' last lines, fleetsim's refusals): the last WHY_LINES of them, each cut at WHY_WIDTH characters, go to
# <logs>/<scenario>.why, which `make test` prints after its timings, where a CI log's tail shows it.
WHY = re.compile(r"fatal: |FAILED!|failed: \[|ERROR|CRITICAL|Traceback|Error: |did not boot|not up after|"
                 r"^\s*[A-Za-z_.]*(Error|Exception): |AssertionError|assert ")
BOX = re.compile(r"^\s*[│┌└]\s?")
WHY_LINES = 12
WHY_WIDTH = 700


def clean(line: str) -> str:
    return ACTION.sub("", line)


def why_lines(text: str, count: int = WHY_LINES, width: int = WHY_WIDTH) -> list[str]:
    """The last ``count`` lines of a scenario's log that say why it failed (see :data:`WHY`), without colours or
    Molecule's box, each at most ``width`` characters, none twice."""
    found: list[str] = []
    for raw in text.splitlines():
        line = BOX.sub("", clean(raw)).strip()
        if line and WHY.search(line):
            line = line if len(line) <= width else line[:width - 3] + "..."
            if line in found:
                found.remove(line)
            found.append(line)
    return found[-count:]


class Run:
    def __init__(self, scenario: str, logs: Path, timeout: int, stream: bool, repo: Path):
        self.scenario = scenario
        self.log = logs / f"{scenario}.log"
        self.tasks = logs / f"{scenario}.tasks.jsonl"
        self.why = logs / f"{scenario}.why"
        self.timeout = timeout
        self.stream = stream
        self.repo = repo
        self.actions: list[list] = []  # [name, started (monotonic), seconds]
        self.rc: int | None = None
        self.timed_out = False
        self.seconds = 0.0

    def _note(self, line: str, now: float) -> None:
        match = ACTION_LINE.match(clean(line).strip())
        # (Molecule says "verify: Executing" twice: once for the action, once for the Testinfra run.)
        if match and match.group(1) == self.scenario and not (self.actions and self.actions[-1][0] == match.group(2)):
            if self.actions:
                self.actions[-1][2] = now - self.actions[-1][1]
            self.actions.append([match.group(2), now, 0.0])

    def run(self) -> None:
        start = time.monotonic()
        self.tasks.unlink(missing_ok=True)
        self.why.unlink(missing_ok=True)
        env = dict(os.environ, GPUFLEET_TASK_TIMES=str(self.tasks.resolve()))
        with open(self.log, "w", encoding="utf-8", errors="replace") as log:
            proc = subprocess.Popen(["molecule", "test", "-s", self.scenario], cwd=self.repo, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
                                    env=env)
            timer = threading.Timer(self.timeout, self._stop, args=(proc,))
            timer.daemon = True
            timer.start()
            try:
                for line in proc.stdout:
                    self._note(line, time.monotonic())
                    log.write(line)
                    log.flush()
                    if self.stream:
                        sys.stdout.write(line)
                        sys.stdout.flush()
                self.rc = proc.wait()
            finally:
                timer.cancel()
        now = time.monotonic()
        if self.actions:
            self.actions[-1][2] = now - self.actions[-1][1]
        self.seconds = now - start
        if self.timed_out:
            self._take_down_fleet()
        if not self.ok:
            self.write_why()

    def write_why(self) -> None:
        """<logs>/<scenario>.why: the scenario, how it ended, and the lines of its log that say why."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        lines = why_lines(text) or ["(no line of the log names an error: read the log)"]
        head = f"molecule {self.summary()} (log: {self.log})"
        self.why.write_text("\n".join([head] + [f"  {line}" for line in lines]) + "\n", encoding="utf-8")

    def _stop(self, proc: subprocess.Popen) -> None:
        self.timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=KILL_GRACE)
                return
            except subprocess.TimeoutExpired:
                continue

    def _take_down_fleet(self) -> None:
        # The VM scenarios run QEMU guests (tools/vmfleet), the others the simulated fleet.
        tool = ["tools.vmfleet", "--quiet", "--fleet", f"mol-{self.scenario}", "down"] if self.scenario in VM_SCENARIOS \
            else ["tools.fleetsim", "--fleet", f"mol-{self.scenario}", "down", "--purge", "--quiet"]
        try:
            subprocess.run([sys.executable, "-m", *tool], cwd=self.repo, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=180, check=False)
        except subprocess.TimeoutExpired:
            print(f"== molecule {self.scenario}: fleet mol-{self.scenario} did not go down within 180 s", flush=True)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def slowest(self, count: int = SLOWEST) -> list[str]:
        """The scenario's ``count`` slowest tasks from its task times (none where the file is missing or bad)."""
        rows = []
        try:
            for line in self.tasks.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                rows.append((float(row["seconds"]), f"{row['playbook']} / {row['play']} / {row['task']}",
                             int(row["hosts"])))
        except (OSError, ValueError, KeyError, TypeError):
            return []
        total = sum(r[0] for r in rows)
        rows.sort(key=lambda r: -r[0])
        return [f"{secs:7.1f} s {hosts:2d} hosts  {name}" for secs, name, hosts in rows[:count]] + \
            [f"{total:7.1f} s in {len(rows)} tasks"]

    def summary(self) -> str:
        state = "passed" if self.ok else (f"TIMED OUT after {self.timeout} s" if self.timed_out
                                          else f"FAILED (rc {self.rc})")
        steps = ", ".join(f"{name} {secs:.0f}" for name, dummy, secs in self.actions)
        return f"{self.scenario:<14} {self.seconds:6.0f} s  {state}  [{steps}]"


def order(scenarios: list[str], timings: Path) -> list[str]:
    known = dict(EXPECTED_SECONDS)
    try:
        known.update({k: v["seconds"] for k, v in json.loads(timings.read_text()).items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return sorted(scenarios, key=lambda s: -float(known.get(s, max(EXPECTED_SECONDS.values()))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="scenarios at a time (default 1)")
    parser.add_argument("--timeout", type=int, default=2400, help="seconds one scenario may run (default 2400)")
    parser.add_argument("--logs", type=Path, default=Path("build/molecule-logs"), help="directory of the logs")
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.timeout < 1:
        parser.error(f"--jobs and --timeout take a positive integer, got {args.jobs} and {args.timeout}")
    repo = Path.cwd()
    args.logs.mkdir(parents=True, exist_ok=True)
    timings = args.logs / "timings.json"
    queue = order(args.scenarios, timings)
    jobs = min(args.jobs, len(queue))
    stream = jobs == 1  # one at a time: the output as it comes
    runs: list[Run] = []
    lock = threading.Lock()
    started = time.monotonic()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                scenario = queue.pop(0)
                limit = max(args.timeout, VM_TIMEOUT) if scenario in VM_SCENARIOS else args.timeout
                run = Run(scenario, args.logs, limit, stream, repo)
                runs.append(run)
                print(f"== molecule test -s {run.scenario} (log: {run.log}, limit {limit} s)", flush=True)
            run.run()
            with lock:
                print(f"== molecule {run.summary()}", flush=True)
                for line in run.slowest():
                    print(f"     {line}", flush=True)
                if not run.ok and not stream:
                    lines = run.log.read_text(errors="replace").splitlines()
                    print(f"== last {min(TAIL_LINES, len(lines))} lines of {run.log}:")
                    print("\n".join(lines[-TAIL_LINES:]), flush=True)

    threads = [threading.Thread(target=worker) for dummy in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started

    previous = {}
    try:
        previous = json.loads(timings.read_text())
    except (OSError, ValueError):
        pass
    previous = previous if isinstance(previous, dict) else {}
    previous.update({r.scenario: {"seconds": round(r.seconds), "ok": r.ok,
                                  "actions": {name: round(secs) for name, dummy, secs in r.actions}} for r in runs})
    timings.write_text(json.dumps(previous, indent=1, sort_keys=True) + "\n")
    print(f"== molecule timings ({jobs} at a time), seconds per scenario [per action]:")
    for run in runs:
        print(f"   {run.summary()}")
    print(f"   {'sum':<14} {sum(r.seconds for r in runs):6.0f} s;  wall {wall:.0f} s", flush=True)
    failed = [r.scenario for r in runs if not r.ok]
    if failed:
        print(f"== molecule: failed: {' '.join(failed)} (logs in {args.logs})", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
