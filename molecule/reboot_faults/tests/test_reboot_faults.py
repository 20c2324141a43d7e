# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the reboot_faults scenario, from the harness boot log and the nodes that came back."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import testinfra.utils.ansible_runner
import yaml

HERE = Path(__file__).resolve().parent
SETTINGS = yaml.safe_load((HERE.parent / "vars" / "settings.yml").read_text(encoding="utf-8"))
FAULTY = SETTINGS["reboot_faults_node"]
sys.path.insert(0, str(Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "molecule" / "shared"))
fleet_checks = importlib.import_module("fleet_checks")
BATCH = int(SETTINGS["reboot_faults_serial"])

# Only the nodes that came back can be reached.
testinfra_hosts = [h for h in testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("b200_cluster") if not h.endswith(FAULTY)]


def reboot_windows() -> dict[str, list[tuple[float, float]]]:
    """Per node, each (down, next up) interval after its first boot; an endless one for a node that stayed down."""
    out: dict[str, list[tuple[float, float]]] = {}
    down: dict[str, float] = {}
    for event in sorted(fleet_checks.boot_log(), key=lambda e: float(e["time"])):
        node, when = event["node"], float(event["time"])
        if event["event"] == "down":
            down[node] = when
        elif event["event"] == "up" and node in down:
            out.setdefault(node, []).append((down.pop(node), when))
    for node, when in down.items():
        out.setdefault(node, []).append((when, float("inf")))
    return out


def test_every_node_rebooted_once_and_the_faulty_one_stayed_down():
    windows = reboot_windows()
    assert sorted(windows) == [f"b200-cluster-{i}" for i in range(1, 5)]
    assert all(len(w) == 1 for w in windows.values()), windows
    assert windows[FAULTY][0][1] == float("inf")
    assert all(w[0][1] != float("inf") for node, w in windows.items() if node != FAULTY)


def test_never_more_nodes_rebooting_at_once_than_the_batch():
    points = []
    for intervals in reboot_windows().values():
        for start, end in intervals:
            points += [(start, 1), (end, -1)]
    busy = peak = 0
    for dummy, step in sorted(points, key=lambda p: (p[0], p[1])):
        busy += step
        peak = max(peak, busy)
    assert 1 <= peak <= BATCH, peak


def test_batches_reboot_one_after_the_other():
    windows = reboot_windows()
    first = [windows[f"b200-cluster-{i}"][0] for i in range(1, BATCH + 1)]
    second = [windows[f"b200-cluster-{i}"][0] for i in range(BATCH + 1, 2 * BATCH + 1)]
    assert max(end for dummy, end in first) <= min(start for start, dummy in second)


def test_the_nodes_that_came_back_converged(host):
    params = host.file("/proc/driver/nvidia/params").content_string
    assert 'RegistryDwords: "PeerMappingOverride=1;"' in params
    assert sorted(host.file("/sys/class/infiniband").listdir()) == [f"mlx5_{i}" for i in range(8)]
    out = host.check_output("env -i bash -c %s", "source /opt/deepep/unified-env.sh && echo $NVSHMEM_HCA_PREFIX")
    assert out.strip() == "mlx5"


def test_the_play_named_the_faulty_node():
    log = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "site-run.log"
    text = log.read_text(encoding="utf-8")
    assert f"1 of 4 nodes did not converge: {FAULTY}" in text
