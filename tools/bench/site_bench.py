# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No-op converge time of playbooks/site.yml on 2, 4 and 8 simulated gcp_b200 nodes.

Brings up one simulated fleet of the largest size, converges it once (the first converge installs
everything: CUDA fixture, DOCA-OFED, the reboot, GDRCopy, the CPU torch wheel), then times converges that
change nothing on the first 2, 4 and 8 nodes (``-l``), with the play's default batches (one canary node,
then a quarter of the group) and with all nodes in one batch. Prints a table; ``--json`` prints JSON.

    .venv/bin/python tools/bench/site_bench.py [--sizes 2 4 8] [--repeat 1] [--keep]

Run from the repository root as root (the simulated fleet needs namespaces). The goal: 8 nodes in 30 s or
less for a no-op converge on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLEET = "bench-site"
GROUP = "b200_cluster"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def fleetsim(*args: str, capture: bool = False) -> str:
    cmd = [sys.executable, "-m", "tools.fleetsim", "--fleet", FLEET, *args]
    proc = subprocess.run(cmd, cwd=REPO, check=True, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return proc.stdout if capture else ""


def playbook(inventory: Path, limit: str, extra: list[str]) -> tuple[float, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "-i",
           str(REPO / "inventories" / "fleetsim"), str(REPO / "playbooks" / "site.yml"), "-l", limit, *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"site.yml failed on {limit} (rc {proc.returncode})")
    return elapsed, proc.stdout


def changed(output: str) -> int:
    return sum(int(m.group(3)) for m in RECAP.finditer(output))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=1, help="no-op runs per size and batching (best is kept)")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    nodes = max(args.sizes)
    inventory = REPO / "build" / f"{FLEET}.yml"
    results = {"nodes": nodes, "noop": []}
    fleetsim("down", "--purge", "--quiet")
    try:
        start = time.monotonic()
        fleetsim("up", "--profile", "gcp_b200", "--nodes", str(nodes), "--group", GROUP)
        results["fleet_up_s"] = round(time.monotonic() - start, 1)
        fleetsim("inventory", "--output", str(inventory))
        first, out = playbook(inventory, GROUP, ["-e", "gpufleet_serial=100%"])
        results["first_converge_s"] = round(first, 1)
        results["first_converge_changed"] = changed(out)
        for size in sorted(args.sizes):
            limit = f"{GROUP}[0:{size - 1}]"
            for label, extra in (("default batches", []), ("one batch", ["-e", "gpufleet_serial=100%"])):
                best = None
                for dummy in range(args.repeat):
                    elapsed, out = playbook(inventory, limit, extra)
                    if changed(out):
                        raise SystemExit(f"no-op converge of {limit} changed {changed(out)} task results")
                    best = elapsed if best is None else min(best, elapsed)
                results["noop"].append({"nodes": size, "batching": label, "seconds": round(best, 1)})
    finally:
        if not args.keep:
            fleetsim("down", "--purge", "--quiet")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"fleet of {nodes} gcp_b200 nodes up in {results['fleet_up_s']} s; first converge (all at once) "
              f"{results['first_converge_s']} s, {results['first_converge_changed']} changed")
        print(f"{'nodes':>5}  {'batching':<16} {'no-op converge':>15}")
        for row in results["noop"]:
            print(f"{row['nodes']:>5}  {row['batching']:<16} {row['seconds']:>13.1f} s")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
