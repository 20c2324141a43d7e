# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node-ready time of one new node three ways, in one run: from source, from the artifact store, from a golden image.

    .venv/bin/python tools/bench/image_bench.py [--fleet bench-image] [--keep] [--json]

One fleetsim fleet (gcp_b200, torch stand-in), one empty artifact store under build/bench/:

- ``source``: a fresh node converged with ``playbooks/site.yml`` and the empty store: it installs every package,
  reboots once, and builds GDRCopy, NVSHMEM and DeepEP (the fixture sources: seconds, where real builds take minutes);
- ``store``: a second fresh node, the store now filled: the same packages and reboot, the builds installed from the
  store instead;
- ``image``: the first node sealed (``playbooks/image.yml``), its disk captured, a third node booted from the image
  and converged: the first boot of an image-born node (host-specific work only).

For each path: the wall seconds of the converge, the tasks that ran on the node (ok and changed) and were skipped,
what changed, the builds, the package and wheel installs, the artifacts got from the store, and the reboots (the
fleet's boot log). The real-node estimate adds the measured real build times (DeepEP V1 98-108 s on 16 cores; NCCL
2.30.7 148 s and DeepEP V2 117 s on 2 x H100, 32 cores; NVSHMEM 3.4.5 with IBGDA 174.7 s on 64 CPUs) to the simulated
source path, in place of the fixture builds. Results also go to build/bench/image_bench.json.

Run from the repository root as root (the simulated fleet needs namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GROUP = "b200_cluster"
LINE = re.compile(r"^(ok|changed|skipping|fatal): \[([^\]\s]+)(?: -> [^\]]+)?\]")
TASK = re.compile(r"^TASK \[(.*)\] \**$")
# Real build times measured on GPU machines (seconds).
# Real build seconds measured on the lent GPU machines (GPU suite stage times). NVSHMEM 3.4.5 with IBGDA through the
# nvshmem role: 174.7 s on 4 x H100 with 64 CPUs (rerun 11.6 s, install of the key from the store 16.8 s).
REAL_BUILDS = {"deepep_v1_16_cores": (98, 108), "nccl_2_30_7": 148, "deepep_v2_2xh100_32_cores": 117,
               "nvshmem_3_4_5_ibgda_64_cpus": 174.7}


def sh(*args, capture=True, env=None):
    return subprocess.run(list(args), cwd=REPO, check=True, text=True, env=env,
                          stdout=subprocess.PIPE if capture else None).stdout


def fleetsim(fleet, *args):
    return sh(sys.executable, "-m", "tools.fleetsim", "--fleet", fleet, *args)


def playbook(inventory, playbook_name, limit, extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "-i",
           str(REPO / "inventories" / "fleetsim"), str(REPO / "playbooks" / playbook_name), "-l", limit, *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-6000:])
        raise SystemExit(f"{playbook_name} failed on {limit} (rc {proc.returncode})")
    return elapsed, proc.stdout


def tasks_of(output, host):
    """{task name: set of statuses} of ``host`` in the default callback's output, in order."""
    tasks, current = {}, None
    for line in output.splitlines():
        match = TASK.match(line.strip())
        if match:
            current = match.group(1)
            continue
        match = LINE.match(line.strip())
        if match and match.group(2) == host and current is not None:
            tasks.setdefault(current, set()).add(match.group(1))
    return tasks


def summary(tasks):
    ran = [t for t, st in tasks.items() if st & {"ok", "changed"}]
    changed = [t for t, st in tasks.items() if "changed" in st]
    builds = [t for t in changed if re.search(r"Run \w+_build, build|Build and install", t)]
    from_store = [t for t in changed if re.search(r"Run \w+_build, install|from the store", t)]
    installs = [t for t in changed if re.search(r"\bInstall\b", t) and t not in builds + from_store]
    return {"tasks_run": len(ran), "tasks_skipped": len([t for t, st in tasks.items() if st == {"skipping"}]),
            "changed": len(changed), "builds": builds, "installs": installs, "from_store": from_store}


def boots(fleet, node):
    """How many times the node came up (the fleet's boot log: one "up" a boot)."""
    return len([line for line in fleetsim(fleet, "boots", "--node", node).splitlines()
                if line.strip() and json.loads(line).get("event") == "up"])


def converge(fleet, inventory, node, store):
    before = boots(fleet, node)
    elapsed, out = playbook(inventory, "site.yml", node, ["-e", f"gpufleet_artifact_store={store}"])
    row = {"node": node, "seconds": round(elapsed, 1), "reboots": boots(fleet, node) - before,
           "load": round(os.getloadavg()[0], 1)}
    row.update(summary(tasks_of(out, node)))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="bench-image")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out_dir = REPO / "build" / "bench"
    store = out_dir / "image-bench-store"
    inventory = out_dir / f"{args.fleet}.yml"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    results = {"cpus": os.cpu_count(), "paths": {}}
    fl = args.fleet
    try:
        fleetsim(fl, "down", "--purge", "--quiet")
        fleetsim(fl, "up", "--profile", "gcp_b200", "--group", GROUP, "--nodes", "2", "--torch", "stand-in")
        fleetsim(fl, "inventory", "--output", str(inventory))
        results["paths"]["source"] = converge(fl, inventory, "b200-cluster-1", store)
        results["paths"]["store"] = converge(fl, inventory, "b200-cluster-2", store)
        seal_s, dummy = playbook(inventory, "image.yml", "b200-cluster-1",
                                 ["-e", f"gpufleet_artifact_store={store}", "-e", f"image_manifest_dir={out_dir}/images"])
        fleetsim(fl, "image", "capture", "b200-cluster-1", "--name", "golden")
        start = time.monotonic()
        fleetsim(fl, "up", "--profile", "gcp_b200", "--group", GROUP, "--nodes", "1", "--torch", "stand-in",
                 "--image", "golden", "--no-mirror")
        boot_s = time.monotonic() - start
        fleetsim(fl, "inventory", "--output", str(inventory))
        results["paths"]["image"] = converge(fl, inventory, "b200-cluster-3", store)
        results["paths"]["image"].update(seal_seconds=round(seal_s, 1), boot_seconds=round(boot_s, 1))
    finally:
        if not args.keep:
            fleetsim(fl, "down", "--purge", "--quiet")
    src, sto, img = (results["paths"][k]["seconds"] for k in ("source", "store", "image"))
    # Real nodes: the fixture builds take seconds; the real ones minutes. The source path pays them, the others not.
    nvshmem = REAL_BUILDS["nvshmem_3_4_5_ibgda_64_cpus"]
    v1 = nvshmem + sum(REAL_BUILDS["deepep_v1_16_cores"]) / 2
    v2 = nvshmem + REAL_BUILDS["nccl_2_30_7"] + REAL_BUILDS["deepep_v2_2xh100_32_cores"]
    results["real_estimate"] = {
        "source_v1_s": round(src + v1, 1), "source_v2_s": round(src + v2, 1), "store_s": sto, "image_s": img,
        "ratio_source_v1_to_image": round((src + v1) / img, 1), "ratio_source_v2_to_image": round((src + v2) / img, 1),
        "ratio_store_to_image": round(sto / img, 1),
        "ratio_simulated_source_to_image": round(src / img, 1),
        "left_out": "the real package downloads and installs (CUDA, DOCA-OFED) and the real reboot of the source and "
                    "store paths, and NVSHMEM's build on fewer than 64 CPUs: every ratio is a lower bound",
    }
    (out_dir / "image_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"node-ready time of one new gcp_b200 node (simulated, {results['cpus']} cpus)")
    print(f"  {'path':<7} {'seconds':>8} {'tasks run':>10} {'skipped':>8} {'changed':>8} {'builds':>7} "
          f"{'installs':>9} {'from store':>11} {'reboots':>8}")
    for name, row in results["paths"].items():
        print(f"  {name:<7} {row['seconds']:>8} {row['tasks_run']:>10} {row['tasks_skipped']:>8} {row['changed']:>8} "
              f"{len(row['builds']):>7} {len(row['installs']):>9} {len(row['from_store']):>11} {row['reboots']:>8}")
    print(f"  image: seal {results['paths']['image']['seal_seconds']} s, boot from the image "
          f"{results['paths']['image']['boot_seconds']} s (before the converge)")
    est = results["real_estimate"]
    print(f"simulated: source/image {est['ratio_simulated_source_to_image']}x, store/image {est['ratio_store_to_image']}x")
    print(f"real nodes (+ measured builds): source V1 ~{est['source_v1_s']} s, source V2 ~{est['source_v2_s']} s, "
          f"store {est['store_s']} s, image {est['image_s']} s; source/image >= {est['ratio_source_v1_to_image']}x "
          f"(V1), >= {est['ratio_source_v2_to_image']}x (V2); {est['left_out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
