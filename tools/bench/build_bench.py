# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node-ready time of the NVSHMEM and DeepEP phases: a build from source against an install from the store.

Brings up two simulated gcp_b200 nodes, converges the phases the builds need on both (CUDA fixture, GDRCopy,
the CPU torch wheel: ``playbooks/site.yml --tags cuda_toolkit,gdrcopy,pytorch``), then times
``playbooks/site.yml --tags nvshmem,deepep`` on the first node with an empty artifact store (it builds both from
source and publishes them) and on the second node (it installs both from the store, as a node added to a built
fleet does), and a no-op run on both. Prints a table; ``--json`` prints JSON.

    .venv/bin/python tools/bench/build_bench.py [--repeat 1] [--keep]

Run from the repository root as root (the simulated fleet needs namespaces). The fixture sources build in
seconds; real NVSHMEM and DeepEP builds take 10 to 30 minutes, so the difference on a real fleet is far larger.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLEET = "bench-build"
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
        raise SystemExit(f"site.yml {' '.join(extra)} failed on {limit} (rc {proc.returncode})")
    return elapsed, proc.stdout


def changed(output: str) -> int:
    return sum(int(m.group(3)) for m in RECAP.finditer(output))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="no-op runs (best is kept)")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    inventory = REPO / "build" / f"{FLEET}.yml"
    store = Path(tempfile.mkdtemp(prefix="gpufleet-bench-store-"))
    phases = ["--tags", "nvshmem,deepep", "-e", f"gpufleet_artifact_store={store}", "-e", "gpufleet_serial=100%"]
    results: dict = {"nodes": 2}
    fleetsim("down", "--purge", "--quiet")
    try:
        start = time.monotonic()
        fleetsim("up", "--profile", "gcp_b200", "--nodes", "2", "--group", GROUP)
        results["fleet_up_s"] = round(time.monotonic() - start, 1)
        fleetsim("inventory", "--output", str(inventory))
        elapsed, dummy = playbook(inventory, GROUP, ["--tags", "cuda_toolkit,gdrcopy,pytorch", "-e", "gpufleet_serial=100%"])
        results["prepare_s"] = round(elapsed, 1)
        first, second = (f"{GROUP.replace('_', '-')}-{n}" for n in (1, 2))
        elapsed, out = playbook(inventory, first, phases)
        results["from_source_s"] = round(elapsed, 1)
        results["from_source_changed"] = changed(out)
        results["store"] = sorted(str(p.relative_to(store))[:16] for p in store.glob("*/*"))
        elapsed, out = playbook(inventory, second, phases)
        results["from_store_s"] = round(elapsed, 1)
        results["from_store_changed"] = changed(out)
        published = [json.loads(p.read_text()) for p in store.glob("*/*/record.json")]
        if sorted(p["kind"] for p in published) != ["deepep", "nvshmem"] or {p["host"] for p in published} != {first}:
            raise SystemExit(f"expected one build of each kind, by {first}, in the store: {published}")
        best = None
        for dummy in range(args.repeat):
            elapsed, out = playbook(inventory, GROUP, phases)
            if changed(out):
                raise SystemExit(f"the no-op run changed {changed(out)} task results")
            best = elapsed if best is None else min(best, elapsed)
        results["noop_both_s"] = round(best, 1)
    finally:
        if not args.keep:
            fleetsim("down", "--purge", "--quiet")
        shutil.rmtree(store, ignore_errors=True)
    results["load_average"] = round(os.getloadavg()[0], 1)
    results["cpus"] = os.cpu_count()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"fleet of 2 gcp_b200 nodes up in {results['fleet_up_s']} s; earlier phases (CUDA fixture, GDRCopy, "
              f"CPU torch) {results['prepare_s']} s")
        print(f"{'node-ready, nvshmem + deepep phases':<44} {'seconds':>8} {'changed':>8}")
        print(f"{'first node, builds from source':<44} {results['from_source_s']:>8.1f} {results['from_source_changed']:>8}")
        print(f"{'second node, installs from the store':<44} {results['from_store_s']:>8.1f} {results['from_store_changed']:>8}")
        print(f"{'both nodes, nothing to do':<44} {results['noop_both_s']:>8.1f} {0:>8}")
        print(f"store: {', '.join(results['store'])}")
        print(f"load average at the end: {results['load_average']:.1f} (on {results['cpus']} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
