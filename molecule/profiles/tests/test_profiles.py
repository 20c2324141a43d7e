# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verifier of the profiles scenario: every example profile, converged on one simulated node of its hardware,
passes DeepEP's intranode verification and audits clean (no finding, no drift).

Expected values come from the example profiles (inventories/example/group_vars) and the fleetsim hardware
profiles, never from what the converge reported. The table of the run (profile, hardware, converge seconds,
verify, audit) is written to <ephemeral>/profiles.md and printed.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
fakehw = importlib.import_module("tools.fleetsim.fakehw")
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INVENTORY = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
FLEET = os.environ["FLEETSIM_FLEET"]
EXAMPLE = REPO / "inventories" / "example" / "group_vars"

# node -> (example profile, fleetsim hardware profile, node group): molecule.yml's platforms.
NODES = {
    "b200-lab-1": ("b200_cuda13", "gcp_b200", "b200_lab"),
    "b200-cluster-1": ("b200_gcp_cuda129", "gcp_b200", "b200_cluster"),
    "h100-cluster-1": ("h100", "h100_ib", "h100_cluster"),
    "h200-nvlink-1": ("h200", "h200_nvlink", "h200_nvlink"),
    "a100-cluster-1": ("a100", "a100_roce", "a100_cluster"),
}
GROUPS = [spec[2] for spec in NODES.values()]
PLAY_TIMEOUT = 1200


def profile(name):
    return yaml.safe_load((EXAMPLE / f"{name}.yml").read_text())


def playbook(name, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", INVENTORY,
                          str(REPO / "playbooks" / name)] + list(extra),
                         check=False, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=PLAY_TIMEOUT)
    (EPHEMERAL / f"{Path(name).stem}.log").write_text(run.stdout)
    return run


def fleetsim(*argv):
    return subprocess.run([sys.executable, "-m", "tools.fleetsim", "--fleet", FLEET] + list(argv), check=False,
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120)


@pytest.fixture(scope="module")
def verify():
    run = playbook("verify.yml", "--tags", "intranode", "-e", json.dumps({"gpufleet_verify_groups": GROUPS}),
                   "-e", "gpufleet_verify_run_dir=%s" % (EPHEMERAL / "verify"))
    assert run.returncode == 0, run.stdout[-4000:]
    return json.loads((EPHEMERAL / "verify" / "summary.json").read_text())


@pytest.fixture(scope="module")
def audit():
    run = playbook("audit.yml", "-l", ":".join(GROUPS), "-e", "audit_output_dir=%s" % (EPHEMERAL / "audit"))
    assert run.returncode == 0, run.stdout[-4000:]
    return json.loads((EPHEMERAL / "audit" / "fleet.json").read_text())


def test_every_profile_is_wired_in_the_fleetsim_inventory():
    """inventories/fleetsim holds every example profile (the same file) and the node group joining it."""
    hosts = yaml.safe_load((REPO / "inventories" / "fleetsim" / "hosts.yml").read_text())
    profiles = hosts["all"]["children"]
    for name, dummy, group in NODES.values():
        fleetsim_vars = REPO / "inventories" / "fleetsim" / "group_vars" / f"{name}.yml"
        assert fleetsim_vars.resolve() == (EXAMPLE / f"{name}.yml").resolve(), name
        assert group in profiles[name]["children"][f"fleetsim_{name}"]["children"], (name, group)


@pytest.mark.parametrize("node", sorted(NODES))
def test_intranode_verification_passes(verify, node):
    rows = [r for r in verify["rows"] if r["host"] == node and r["stage"] == "intranode"]
    assert len(rows) == 1, verify["rows"]
    row = rows[0]
    assert row["passed"] and row["status"] == "pass", row
    assert row["cases"]["failed"] == 0 and row["cases"]["passed"] > 0, row
    assert row["gbps"]["dispatch_bf16_nvl_gbps"] > 0, row


@pytest.mark.parametrize("node", sorted(NODES))
def test_audit_is_clean(audit, node):
    entry = audit["nodes"][node]
    assert entry["reachable"] is True
    assert entry["facts"]["gather_errors"] == {}
    assert entry["findings"] == [], [(f["id"], f.get("evidence")) for f in entry["findings"]]
    expected = profile(NODES[node][0])
    assert entry["facts"]["expect"]["intranode_only"] is bool(expected.get("gpufleet_intranode_only", False))


def test_audit_has_no_drift(audit):
    assert audit["summary"]["nodes"] == len(NODES) and audit["summary"]["unreachable"] == 0, audit["summary"]
    assert audit["drift"] == []


@pytest.mark.parametrize("node", sorted(NODES))
def test_driver_meets_the_profile_floor(node):
    """The simulated hardware's driver is at or above the profile's floor (the preflight passed on it)."""
    expected = profile(NODES[node][0])
    hardware = fakehw.load_profile(NODES[node][1])
    have = [int(x) for x in str(hardware["driver"]["version"]).split(".")]
    floor = [int(x) for x in str(expected["preflight_driver_min_version"]).split(".")]
    assert have >= floor, (node, hardware["driver"]["version"], expected["preflight_driver_min_version"])


@pytest.mark.parametrize("node", sorted(NODES))
def test_profile_installed_what_it_says(node):
    expected = profile(NODES[node][0])
    cuda = expected["cuda_toolkit_version"]
    link = fleetsim("exec", node, "--", "readlink", "/usr/local/cuda")
    assert link.stdout.strip() == f"/usr/local/cuda-{cuda}", (node, link.stdout, link.stderr)
    nvshmem = fleetsim("exec", node, "--", "test", "-d", "/opt/deepep/nvshmem")
    assert (nvshmem.returncode == 0) == expected.get("nvshmem_enabled", True), node


def test_table():
    """The run's table: profile, hardware, converge seconds (stamp time minus the converge's start: the five nodes
    run in one batch in lock-step, so this is the batch's time), verify, audit."""
    start = float((Path(os.environ.get("FLEETSIM_STATE_DIR") or "/srv/fleetsim") / FLEET / "converge-start").read_text())
    verify_data = json.loads((EPHEMERAL / "verify" / "summary.json").read_text())
    audit_data = json.loads((EPHEMERAL / "audit" / "fleet.json").read_text())
    lines = ["| profile | hardware | converge s (one batch) | verify | audit |", "| --- | --- | --- | --- | --- |"]
    for node, (name, hardware, dummy) in NODES.items():
        stamp = json.loads(fleetsim("exec", node, "--", "cat", "/var/lib/gpufleet-site-converged.json").stdout)
        done = datetime.datetime.fromisoformat(stamp["recorded_at"]).timestamp()
        assert done > start
        row = next(r for r in verify_data["rows"] if r["host"] == node and r["stage"] == "intranode")
        findings = audit_data["nodes"][node]["findings"]
        lines.append(f"| {name} | {hardware} | {done - start:.0f} | {row['status']} | {len(findings)} findings |")
    table = "\n".join(lines) + "\n"
    (EPHEMERAL / "profiles.md").write_text(table)
    print(table)
