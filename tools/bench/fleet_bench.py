# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures of the simulated fleet: for 2, 4 and 8 nodes, the fleet's start and stop time, one Ansible
ping round, and a no-op converge of the default Molecule scenario's converge playbook (run once to
converge, with its reboot, then timed on the second run).

    python tools/bench/fleet_bench.py [--sizes 2,4,8] [--profile gcp_b200]

Run as root from anywhere; it uses the fleets ``bench-<n>`` and tears each down.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONVERGE = REPO / "molecule" / "default" / "converge.yml"


def env() -> dict:
    out = dict(os.environ)
    out["PATH"] = f"{Path(sys.executable).parent}:{out.get('PATH', '/usr/sbin:/usr/bin')}"
    out.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    out.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    return out


def timed(cmd: list[str], what: str) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"fleet_bench: {what} failed (rc={proc.returncode}):\n{proc.stdout[-4000:]}")
    return elapsed


def bench(size: int, profile: str, workdir: Path) -> dict:
    fleet = f"bench-{size}"
    fleetsim = [sys.executable, "-m", "tools.fleetsim", "--fleet", fleet]
    subprocess.run(fleetsim + ["down", "--purge", "--quiet"], cwd=REPO, env=env(), check=False)
    row = {"nodes": size}
    try:
        row["start"] = timed(fleetsim + ["up", "--profile", profile, "--nodes", str(size)], "fleetsim up")
        inventory = workdir / f"{fleet}.yml"
        timed(fleetsim + ["inventory", "--output", str(inventory)], "fleetsim inventory")
        row["ping"] = timed(["ansible", "-i", str(inventory), "all", "-m", "ansible.builtin.ping"], "ansible ping")
        row["converge"] = timed(["ansible-playbook", "-i", str(inventory), str(CONVERGE)], "first converge")
        row["noop"] = timed(["ansible-playbook", "-i", str(inventory), str(CONVERGE)], "no-op converge")
    finally:
        start = time.monotonic()
        subprocess.run(fleetsim + ["down", "--purge", "--quiet"], cwd=REPO, env=env(), check=False)
        row["stop"] = time.monotonic() - start
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2,4,8", help="fleet sizes, comma-separated (default: 2,4,8)")
    parser.add_argument("--profile", default="gcp_b200", help="node profile (default: gcp_b200)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("fleet_bench: needs root (the simulated fleet uses namespaces)", file=sys.stderr)
        return 1
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        for size in sizes:
            rows.append(bench(size, args.profile, Path(tmp)))
            r = rows[-1]
            print(f"{size} nodes: start {r['start']:.1f} s, ping {r['ping']:.1f} s, converge with reboot "
                  f"{r['converge']:.1f} s, no-op converge {r['noop']:.1f} s, stop {r['stop']:.1f} s", flush=True)
    print()
    print(f"Simulated fleet ({args.profile}, {os.cpu_count()} CPUs), seconds:")
    print("| nodes | start | stop | ansible ping | converge (with reboot) | no-op converge |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['nodes']} | {r['start']:.1f} | {r['stop']:.1f} | {r['ping']:.1f} | {r['converge']:.1f} "
              f"| {r['noop']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
