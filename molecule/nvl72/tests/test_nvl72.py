# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verifier of the nvl72 scenario: two simulated NVL72 racks of two trays each, a GB200 rack (fleetsim gb200_nvl72,
example profile gb200_nvl72) and a GB300 rack (gb300_nvl72, example profile gb300_nvl72). The trays are Grace
(aarch64) hosts to every program on them; IMEX runs READY with its rack's trays in its nodes config and the driver's
channel; DeepEP V2, built for the tray's arch, verifies across each rack's trays as one scale-up domain (multi-node
NVLink, the family's scale-up gate, provisional) and on each tray; the audit is clean. Faults, last (each put back):
a tray whose GPUs left the rack's fabric fails the preflight and the audit by rule and its domain's verify (the other
rack untouched); a stopped IMEX service is an audit finding; DeepEP V1 is refused for the scale-up domain by name.

Expected values come from the fleetsim hardware profiles, the example profiles and the profile object, never from what
the converge reported. Simulated, not measured: no NVL72 rack was lent.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "molecule" / "shared"))
fakehw = importlib.import_module("tools.fleetsim.fakehw")
fleet_checks = importlib.import_module("fleet_checks")
if str(REPO / ".collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".collections"))
families = importlib.import_module("ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families")
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INVENTORY = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
# domain group -> (its trays, fleetsim hardware profile, example profile): molecule.yml's platforms.
RACKS = {"nvl72_rack1": (["nvl72-rack1-1", "nvl72-rack1-2"], "gb200_nvl72", "gb200_nvl72"),
         "gb300_rack1": (["gb300-rack1-1", "gb300-rack1-2"], "gb300_nvl72", "gb300_nvl72")}
RACK_OF = {tray: group for group, (trays, _hw, _profile) in RACKS.items() for tray in trays}
GROUPS = sorted(RACKS)
TRAYS = [tray for group in GROUPS for tray in RACKS[group][0]]
HARDWARE = {group: fakehw.load_profile(hw) for group, (_trays, hw, _profile) in RACKS.items()}
PROFILE = {group: yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / ("%s.yml" % name)).read_text())
           for group, (_trays, _hw, name) in RACKS.items()}
PLAY_TIMEOUT = 1200
FABRIC_KNOB = "/etc/fleetsim/gpu-fabric.json"

testinfra_hosts = TRAYS


def playbook(name, *extra, log=""):
    return fleet_checks.playbook(REPO, INVENTORY, EPHEMERAL, name, *extra, log=log, timeout=PLAY_TIMEOUT)


def verify_run(run_dir, *extra, groups=GROUPS):
    return fleet_checks.verify_run(REPO, INVENTORY, run_dir, list(groups), *extra)


def audit_run(out_dir):
    return fleet_checks.audit_run(REPO, INVENTORY, out_dir, ":".join(GROUPS))


@pytest.fixture(scope="module")
def verify():
    run, summary = verify_run(EPHEMERAL / "verify")
    assert run.returncode == 0, run.stdout[-4000:]
    return summary


@pytest.fixture(scope="module")
def audit():
    return audit_run(EPHEMERAL / "audit")


def test_the_trays_are_grace_hosts_to_their_programs(host):
    assert host.check_output("uname -m") == "aarch64"
    assert host.check_output("python3 -c 'import sysconfig; print(sysconfig.get_platform())'") == "linux-aarch64"
    # The driver's libcuda where a Grace host's distribution puts it.
    assert host.file("/usr/lib/aarch64-linux-gnu/libcuda.so.1").exists


def test_imex_runs_ready_with_every_tray_of_its_rack(host):
    addresses = host.file("/etc/nvidia-imex/nodes_config.cfg").content_string.split()
    trays = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
    rack = RACKS[RACK_OF[host.backend.get_hostname()]][0]
    expected = sorted(trays.get_variables(name)["ansible_host"] for name in rack)
    assert sorted(addresses) == expected
    assert "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg" in host.file(
        "/etc/nvidia-imex/config.cfg").content_string
    assert host.service("nvidia-imex").is_running and host.service("nvidia-imex").is_enabled
    assert host.check_output("nvidia-imex-ctl -q") == "READY"
    assert host.run("test -c /dev/nvidia-caps-imex-channels/channel0").rc == 0
    # The driver loaded with the option the nvidia_peermapping phase set for the family.
    assert "CreateImexChannel0: 1" in host.file("/proc/driver/nvidia/params").content_string


@pytest.mark.parametrize("tray", TRAYS)
def test_the_domain_verifies_across_its_trays(verify, tray):
    group = RACK_OF[tray]
    family = PROFILE[group]["gpufleet_gpu_family"]
    rows = [r for r in verify["rows"] if r["host"] == tray and r["stage"] == "scaleup"]
    assert len(rows) == 1, verify["rows"]
    row = rows[0]
    assert row["passed"] and row["status"] == "pass", row
    assert row["test"] == "tests/elastic/test_ep.py" and row["group"] == group, row
    # Every rank a scale-up peer over NVLink: NVLink figures over the family's scale-up gate, none over RDMA.
    gate = families.GATES["scaleup"][family]
    gates = row["thresholds"]
    assert gates["dispatch_bf16_nvl_gbps"] == gate["dispatch_bf16_nvl_gbps"], row
    assert row["gbps"]["dispatch_bf16_nvl_gbps"] >= gates["dispatch_bf16_nvl_gbps"], row
    assert row["gbps"].get("dispatch_bf16_rdma_gbps") is None, row
    assert row.get("gate_provisional", "").startswith("%s: " % family), row
    # The MNNVL clique is the rack's trays only: the other rack is another NVLink domain.
    clique = len(RACKS[group][0]) * len(HARDWARE[group]["gpus"])
    assert "MNNVL clique of %d" % clique in row["transport"]["brief"], row["transport"]


@pytest.mark.parametrize("tray", TRAYS)
def test_each_tray_verifies_on_its_own_gpus(verify, tray):
    rows = [r for r in verify["rows"] if r["host"] == tray and r["stage"] == "intranode"]
    assert len(rows) == 1 and rows[0]["passed"], rows


@pytest.mark.parametrize("tray", TRAYS)
def test_audit_is_clean_and_deepep_is_built_for_the_trays_arch(audit, tray):
    entry = audit["nodes"][tray]
    group = RACK_OF[tray]
    assert entry["reachable"] is True and entry["facts"]["gather_errors"] == {}
    assert entry["findings"] == [], [(f["id"], f.get("evidence")) for f in entry["findings"]]
    assert entry["facts"]["expect"]["gpu_family"] == PROFILE[group]["gpufleet_gpu_family"]
    # SM 10.3 on GB300 is its own arch (never the GB200's 10.0), from the family: what the GPUs report.
    arch = HARDWARE[group]["gpu_model"]["compute_capability"]
    assert families.compute_capability(PROFILE[group]["gpufleet_gpu_family"]) == arch
    assert arch in json.dumps(entry["facts"]["gpufleet_gpus"]["cuda_arch_list"]), entry["facts"]["gpufleet_gpus"]
    built = entry["facts"]["gpufleet_deepep"]["built_against"]["arch_list"]
    assert arch in json.dumps(built) and "10.0" not in json.dumps(built) or arch == "10.0", built


def test_a_tray_out_of_the_fabric_fails_preflight_audit_and_the_domain(host):
    """One tray's GPUs leave the rack's fabric (State In Progress): the preflight refuses it by rule, the audit finds
    it, and the scale-up run across the domain fails for both trays (NCCL refuses multi-node NVLink)."""
    tray = host.backend.get_hostname()
    if tray != RACKS["nvl72_rack1"][0][-1]:
        pytest.skip("the fault is put on one tray")
    host.run_expect([0], "printf '%%s' '{\"state\": \"In Progress\", \"status\": \"N/A\"}' > %s" % FABRIC_KNOB)
    try:
        # gpufleet_site_fast false: the node's converged stamp would otherwise let site.yml skip it (its settings are
        # unchanged; the fault is the hardware's).
        pre = playbook("site.yml", "--tags", "preflight", "-l", tray, "-e", "gpufleet_site_fast=false", log="fault-")
        assert pre.returncode != 0 and "GPUs not ready for multi-node NVLink" in pre.stdout, pre.stdout[-3000:]
        report = audit_run(EPHEMERAL / "audit-fabric")
        ids = [f["id"] for f in report["nodes"][tray]["findings"]]
        assert "NVL72_FABRIC_NOT_READY" in ids, ids
        assert [other for other in TRAYS if other != tray and report["nodes"][other]["findings"]] == []
        run, summary = verify_run(EPHEMERAL / "verify-fabric", "--tags", "internode", "-e", "gpufleet_verify_fail=false",
                                  groups=["nvl72_rack1"])
        rows = [r for r in summary["rows"] if r["stage"] == "scaleup"]
        assert len(rows) == 2 and not any(r["passed"] for r in rows), rows
    finally:
        host.run("rm -f %s" % FABRIC_KNOB)


def test_a_stopped_imex_service_is_an_audit_finding(host):
    tray = host.backend.get_hostname()
    if tray != RACKS["gb300_rack1"][0][0]:
        pytest.skip("the fault is put on one tray")
    host.run_expect([0], "systemctl stop nvidia-imex")
    try:
        report = audit_run(EPHEMERAL / "audit-imex")
        ids = [f["id"] for f in report["nodes"][tray]["findings"]]
        assert ids == ["NVL72_IMEX_INACTIVE"], ids
    finally:
        host.run_expect([0], "systemctl start nvidia-imex")


def test_deepep_v1_is_refused_for_the_scale_up_domain_by_name():
    run, dummy = verify_run(EPHEMERAL / "verify-v1", "--tags", "internode", "-e", "verify_internode_generation=v1",
                            groups=["gb300_rack1"])
    assert run.returncode != 0
    assert "DeepEP V1 has no scaleup test" in run.stdout, run.stdout[-3000:]
