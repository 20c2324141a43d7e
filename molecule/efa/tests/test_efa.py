# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verifier of the efa scenario: two AWS p5en nodes (fleetsim aws_p5en_h200: 8 x H200 and 16 EFA devices each)
converged with the example profile h200_p5en (fabric efa, DeepEP V2 over NCCL GIN). The efa phase left the EFA
installer's stack at the fabric's floors and no DOCA-OFED; the env script exports the fabric's variables and none of
NVSHMEM's IBGDA ones; DeepEP V2 verifies on each node and across the two over aws-ofi-nccl's Libfabric network with
GIN as EFA-GDA, every EFA device carrying traffic, gated on the h200 family's figures; the audit is clean. Faults,
last (each put back): an env script without NCCL_GIN_TYPE=5 is an audit finding by name and its run across nodes fails
the transport gate (GIN over the CPU proxy); DeepEP V1 across EFA nodes is refused by name.

Expected values come from the fleetsim hardware profile, the example profile and the profile object, never from what
the converge reported. Simulated, not measured: no EFA node was lent (what the stand-ins are: tools/fleetsim).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
for path in (REPO, REPO / ".collections"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
sys.path.insert(0, str(REPO / "molecule" / "shared"))
fakehw = importlib.import_module("tools.fleetsim.fakehw")
fleet_checks = importlib.import_module("fleet_checks")
families = importlib.import_module("ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families")
fabrics = importlib.import_module("ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics")
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INVENTORY = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
GROUP = "p5en_cluster"
NODES = ["p5en-cluster-1", "p5en-cluster-2"]
HARDWARE = fakehw.load_profile("aws_p5en_h200")
EFA_DEVICES = sorted(fakehw.rdma_device_names(HARDWARE).values())
PROFILE = yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / "h200_p5en.yml").read_text())
FABRIC = fabrics.FABRICS[PROFILE["gpufleet_fabric"]]
ENV_SCRIPT = "/opt/deepep/unified-env.sh"
PLAY_TIMEOUT = 1200

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts(GROUP)


def playbook(name, *extra, log=""):
    return fleet_checks.playbook(REPO, INVENTORY, EPHEMERAL, name, *extra, log=log, timeout=PLAY_TIMEOUT)


def verify_run(run_dir, *extra):
    return fleet_checks.verify_run(REPO, INVENTORY, run_dir, [GROUP], *extra)


def audit_run(out_dir):
    return fleet_checks.audit_run(REPO, INVENTORY, out_dir, GROUP)


def exports_of(host):
    return dict(re.findall(r"^export ([A-Z_0-9]+)=(\S*)$", host.file(ENV_SCRIPT).content_string, re.MULTILINE))


@pytest.fixture(scope="module")
def verify():
    run, summary = verify_run(EPHEMERAL / "verify")
    assert run.returncode == 0, run.stdout[-4000:]
    return summary


@pytest.fixture(scope="module")
def audit():
    return audit_run(EPHEMERAL / "audit")


def test_the_efa_stack_is_at_the_fabric_floors_and_no_doca(host):
    installed = host.file("/opt/amazon/efa_installed_packages").content_string.splitlines()[0]
    assert installed == "# EFA installer version: %s" % PROFILE["efa_installer_version"]
    assert "provider: efa" in host.check_output("/opt/amazon/efa/bin/fi_info -p efa")
    assert host.file("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so").exists
    # EFA NICs take no DOCA-OFED (the profile leaves it off; its userspace is mlx5's).
    assert host.run("dpkg-query -W doca-ofed-userspace").rc != 0
    names = host.check_output("ls /sys/class/infiniband").split()
    assert sorted(names) == EFA_DEVICES and len(names) == 16


def test_the_env_script_exports_the_fabric_and_no_ibgda(host):
    exports = exports_of(host)
    assert {name: exports.get(name) for name, _value, _why in FABRIC["env"]} == {
        name: value for name, value, _why in FABRIC["env"]}
    assert exports["NCCL_GIN_TYPE"] == "5"
    assert exports["EP_NIC_NAME"] in EFA_DEVICES
    assert not [name for name in exports if name.startswith("NVSHMEM_IB") or name == "NVSHMEM_REMOTE_TRANSPORT"
                or name == "DEEP_EP_DEVICE_TO_HCA_MAPPING"], exports


@pytest.mark.parametrize("node", NODES)
def test_each_node_verifies_deepep_v2_on_its_gpus(verify, node):
    rows = [r for r in verify["rows"] if r["host"] == node and r["stage"] == "intranode"]
    assert len(rows) == 1 and rows[0]["passed"], rows
    row = rows[0]
    gate = families.GATES["intranode"][PROFILE["gpufleet_gpu_family"]]
    assert row["thresholds"]["dispatch_bf16_nvl_gbps"] == gate["dispatch_bf16_nvl_gbps"], row
    assert row["test"] == "tests/elastic/test_ep.py", row


@pytest.mark.parametrize("node", NODES)
def test_v2_runs_across_the_nodes_over_efa_gda(verify, node):
    """16 ranks over the two nodes: NCCL's Libfabric network (aws-ofi-nccl) and GIN as EFA-GDA (type 5), the RDMA
    figures over the h200 family's internode gate, and every EFA device of the node busy (aws-ofi-nccl stripes a
    rank over the two a GPU has)."""
    rows = [r for r in verify["rows"] if r["host"] == node and r["stage"] == "internode"]
    assert len(rows) == 1, verify["rows"]
    row = rows[0]
    assert row["passed"] and row["group"] == GROUP and row["transport"]["passed"], row
    brief = row["transport"]["brief"]
    assert "net Libfabric" in brief and "GIN EFA_GDA" in brief, brief
    gate = families.GATES["internode"][PROFILE["gpufleet_gpu_family"]]
    for key in ("dispatch_bf16_rdma_gbps", "combine_rdma_gbps"):
        assert row["thresholds"][key] == gate[key] and row["gbps"][key] >= gate[key], (key, row)
    assert row["nic"]["idle"] == [] and sorted(row["nic"]["busy"]) == EFA_DEVICES, row["nic"]


@pytest.mark.parametrize("node", NODES)
def test_audit_is_clean(audit, node):
    entry = audit["nodes"][node]
    assert entry["reachable"] is True and entry["facts"]["gather_errors"] == {}
    assert entry["findings"] == [], [(f["id"], f.get("evidence")) for f in entry["findings"]]
    assert entry["facts"]["expect"]["fabric"] == "efa"


def test_an_env_script_without_efa_gda_is_named_and_fails_across_nodes(host):
    """One node's env script loses NCCL_GIN_TYPE=5: the audit names the variable (FABRIC_ENV_MISSING, the other node
    clean), and that node's part of the V2 run across the nodes fails its transport gate: its ranks' GIN is the CPU
    proxy (NCCL 2.31's default on EFA), not EFA-GDA."""
    node = host.backend.get_hostname()
    if node != NODES[-1]:
        pytest.skip("the fault is put on one node")
    host.run_expect([0], "cp -p {0} {0}.orig && sed -i '/^export NCCL_GIN_TYPE=/d' {0}".format(ENV_SCRIPT))
    try:
        report = audit_run(EPHEMERAL / "audit-gin")
        found = report["nodes"][node]["findings"]
        assert [f["id"] for f in found] == ["FABRIC_ENV_MISSING"], found
        assert "NCCL_GIN_TYPE=5" in found[0]["message"], found[0]
        assert report["nodes"][NODES[0]]["findings"] == []
        run, summary = verify_run(EPHEMERAL / "verify-gin", "--tags", "internode", "-e", "gpufleet_verify_fail=false")
        (row,) = [r for r in summary["rows"] if r["stage"] == "internode" and r["host"] == node]
        assert not row["passed"] and not row["transport"]["passed"], row
        assert "GIN PROXY" in row["transport"]["brief"], row["transport"]
    finally:
        host.run_expect([0], "mv {0}.orig {0}".format(ENV_SCRIPT))


def test_deepep_v1_across_efa_nodes_is_refused_by_name():
    run, dummy = verify_run(EPHEMERAL / "verify-v1", "--tags", "internode", "-e", "verify_internode_generation=v1")
    assert run.returncode != 0
    told = " ".join(run.stdout.split())
    assert "NVSHMEM's IBGDA, which drives mlx5 NICs only (DeepEP #759" in told, run.stdout[-3000:]
