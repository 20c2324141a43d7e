# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verifier of the profiles scenario: every example profile, converged on one simulated node of its hardware,
passes DeepEP's intranode verification and audits clean (no finding, no drift). The stack of late 2026
(b200_late2026) runs what it says (NVSHMEM 3.8.0, NCCL 2.32.3, a V1 tree with DeepEP #564), and the stack catalogue's
refusals show on it once each, last (they change the node): a V1 tree without #564 and NVSHMEM 3.8.0 on CUDA 12 are
refused before anything builds, and an install that brings another NCCL back is an audit finding until the nccl
phase re-pins it. Last, three nodes move from their mid-2026 profile to its late-2026 child: the B200 and the H200
converge to the new stack and audit clean; the H100 (driver 570) is refused, as CUDA 13 needs 580.

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
    "b200-next-1": ("b200_late2026", "gcp_b200", "b200_next"),
    "b200-cluster-1": ("b200_gcp_cuda129", "gcp_b200", "b200_cluster"),
    "h100-cluster-1": ("h100", "h100_ib", "h100_cluster"),
    "h200-nvlink-1": ("h200", "h200_nvlink", "h200_nvlink"),
    "a100-cluster-1": ("a100", "a100_roce", "a100_cluster"),
    "b300-cluster-1": ("b300", "b300_cx8", "b300_cluster"),
}
GROUPS = [spec[2] for spec in NODES.values()]
# A child profile (its group below its parent's in the inventories) -> the parent whose settings it inherits.
PARENTS = {"b200_late2026": "b200_cuda13"}
PLAY_TIMEOUT = 1200


def profile(name):
    """The profile's settings as its node sees them: its parent's, overridden by its own."""
    own = yaml.safe_load((EXAMPLE / f"{name}.yml").read_text())
    return dict(profile(PARENTS[name]), **own) if name in PARENTS else own


def find_group(tree, name):
    """The subtree of group ``name`` anywhere in the hosts.yml tree ``tree`` (None if absent)."""
    for child, sub in ((tree or {}).get("children") or {}).items():
        if child == name:
            return sub or {}
        found = find_group(sub, name)
        if found is not None:
            return found
    return None


def playbook(name, *extra, inventory=INVENTORY, log=""):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                          str(REPO / "playbooks" / name)] + list(extra),
                         check=False, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=PLAY_TIMEOUT)
    (EPHEMERAL / f"{log}{Path(name).stem}.log").write_text(run.stdout)
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
    hosts = yaml.safe_load((REPO / "inventories" / "fleetsim" / "hosts.yml").read_text())["all"]
    for name, dummy, group in NODES.values():
        fleetsim_vars = REPO / "inventories" / "fleetsim" / "group_vars" / f"{name}.yml"
        assert fleetsim_vars.resolve() == (EXAMPLE / f"{name}.yml").resolve(), name
        assert group in find_group(hosts, name)["children"][f"fleetsim_{name}"]["children"], (name, group)
        if name in PARENTS:
            assert name in find_group(hosts, PARENTS[name])["children"], (name, PARENTS[name])


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


# The B300 with ConnectX-8 (issue 51): a platform of its own on the profile object, never the default gate.
B300 = "b300-cluster-1"


def test_the_b300_runs_sm103_under_its_own_provisional_gate(verify, audit):
    """The B300 node's DeepEP is built for 10.3 (what its GPUs report), its intranode run is judged by the b300 gate (the
    B200's figures, marked provisional with the reason), not the loose default's 100 GB/s; the audit reads the CX-8
    rails at 800 Gb/s on InfiniBand, as the profile declares."""
    hardware = fakehw.load_profile("b300_cx8")
    assert hardware["gpu_model"]["compute_capability"] == "10.3"
    key = dict((k["name"], k["value"]) for k in audit["nodes"][B300]["key_facts"])
    assert key["GPUs"] == "8 x sm 10.3" and key["NICs"] == "8/9 active, mlx5 infiniband", key
    built = audit["nodes"][B300]["facts"]["gpufleet_deepep"]["built_against"]["arch_list"]
    assert str(built).replace("a", "") in ("10.3", "['10.3']"), built
    row = next(r for r in verify["rows"] if r["host"] == B300 and r["stage"] == "intranode")
    assert row["status"] == "pass", row
    assert row["thresholds"]["dispatch_bf16_nvl_gbps"] == 380, row["thresholds"]
    assert row.get("gate_provisional", "").startswith("b300: "), row
    rdma = fleetsim("exec", B300, "--", "sh", "-c", "cat /sys/class/infiniband/mlx5_0/ports/1/rate "
                    "/sys/class/infiniband/mlx5_0/ports/1/link_layer /sys/class/infiniband/mlx5_0/hca_type")
    assert rdma.stdout.split("\n")[:3] == ["800 Gb/sec (4X XDR)", "InfiniBand", "MT4131"], rdma.stdout


def test_a_b300_profile_on_a_toolkit_without_sm103_is_refused_before_anything_installs():
    """CUDA 12.8 has sm_100 but not sm_103: the preflight refuses the B300 node naming the floor (12.9), before the
    cuda_toolkit phase; the node's toolkit link is unchanged."""
    before = fleetsim("exec", B300, "--", "readlink", "/usr/local/cuda").stdout
    run = playbook("site.yml", "-l", "b300_cluster", "--tags", "preflight", "-e", "cuda_toolkit_version=12.8",
                   log="b300-cuda128-")
    assert run.returncode != 0, run.stdout[-3000:]
    assert ("CUDA 12.8 cannot compile for compute capability 10.3 (NVIDIA B300 SXM6 AC; its first toolkit is CUDA "
            "12.9)") in run.stdout, run.stdout[-3000:]
    assert fleetsim("exec", B300, "--", "readlink", "/usr/local/cuda").stdout == before


# The stack of late 2026 (b200_late2026 on b200-next-1): what it runs, then the refusals (last: they change the node).
LATE = "b200-next-1"


def test_the_late_2026_stack_is_what_the_node_runs(audit):
    """The audit's key facts of the node: NVSHMEM 3.8.0 (the mirror's 3.8.0 fixture), NCCL 2.32.3 pinned, and a V1 tree
    whose DeepEP #564 indexes 3.8.0's QP-major RC queue pairs (the catalogue's rule judged it and it passed)."""
    key = dict((k["name"], k["value"]) for k in audit["nodes"][LATE]["key_facts"])
    expected = profile("b200_late2026")
    assert key["NVSHMEM"] == expected["nvshmem_version"].split("-")[0] == "3.8.0", key
    assert key["NCCL"] == expected["nccl_version"] == "2.32.3", key
    assert key["RC layout"] == "pass #564", key
    assert audit["nodes"]["b200-lab-1"]["key_facts"] != audit["nodes"][LATE]["key_facts"]


def test_the_catalogue_refuses_before_anything_builds():
    """One preflight run of the late-2026 node with a V1 tree without DeepEP #564 (v1.2.1, 9af0e0d) and a CUDA 12.9
    toolkit: both refusals name their source; nothing is built (the DeepEP and NVSHMEM stamps are unchanged)."""
    stamps = ("cat /opt/deepep/nvshmem/.gpufleet-build.json \"$(python3 -c 'import importlib.util, os; print(os.path."
              "dirname(importlib.util.find_spec(\"deep_ep\").origin))')/.gpufleet-build.json\"")
    before = fleetsim("exec", LATE, "--", "sh", "-c", stamps)
    assert before.returncode == 0 and before.stdout.count("{") >= 2, before.stderr
    run = playbook("site.yml", "-l", "b200_next", "--tags", "preflight", "-e", json.dumps(
        {"deepep_src_git_commit": "9af0e0d", "cuda_toolkit_version": "12.9"}))
    assert run.returncode != 0, run.stdout[-3000:]
    assert "DeepEP 9af0e0d on NVSHMEM 3.8.0-0" in run.stdout and "DeepEP #564" in run.stdout, run.stdout[-3000:]
    assert "NVSHMEM 3.8.0-0 (3.8.0 or newer) built from source needs CUDA 13.0 or newer" in run.stdout, \
        run.stdout[-3000:]
    assert fleetsim("exec", LATE, "--", "sh", "-c", stamps).stdout == before.stdout


def test_an_install_that_brings_nccl_back_is_found_and_the_nccl_phase_re_pins_it():
    """A later install puts nvidia-nccl-cu13 2.30.7 into the torch environment (DeepEP #710's way): the audit names the
    pin and what loads (NCCL_PIN_MOVED); site.yml's nccl phase puts 2.32.3 back and the audit is clean again."""
    install = fleetsim("exec", LATE, "--", "python3", "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                       "/srv/fleetsim-mirror/wheels", "--no-deps", "--break-system-packages",
                       "nvidia-nccl-cu13==2.30.7")
    assert install.returncode == 0, install.stdout + install.stderr
    out = EPHEMERAL / "audit-nccl-moved"
    run = playbook("audit.yml", "-l", "b200_next", "-e", "audit_output_dir=%s" % out)
    assert run.returncode == 0, run.stdout[-3000:]
    findings = json.loads((out / "fleet.json").read_text())["nodes"][LATE]["findings"]
    assert [f["id"] for f in findings] == ["NCCL_PIN_MOVED"], findings
    assert findings[0]["message"].startswith("The profile pins NCCL 2.32.3 (the nccl phase); the torch environment "
                                             "loads NCCL 2.30.7 (nvidia-nccl-cu13==2.30.7)"), findings[0]["message"]
    repin = playbook("site.yml", "-l", "b200_next", "--tags", "nccl")
    assert repin.returncode == 0, repin.stdout[-3000:]
    out = EPHEMERAL / "audit-nccl-repinned"
    run = playbook("audit.yml", "-l", "b200_next", "-e", "audit_output_dir=%s" % out)
    assert run.returncode == 0, run.stdout[-3000:]
    assert json.loads((out / "fleet.json").read_text())["nodes"][LATE]["findings"] == []


def test_nodes_move_from_the_mid_2026_stacks_to_the_late_2026_ones():
    """b200-lab-1 (b200_cuda13), h200-nvlink-1 (h200) and h100-cluster-1 (h100) move into their late-2026 profiles'
    node groups (b200_next, h200_next, h100_next: hosts.yml edited as a site would). The next site.yml takes the B200
    and the H200 to the new stack (NVSHMEM 3.8.0, NCCL 2.32.3, DeepEP rebuilt against them, or installed from the store
    where b200-next-1 published the same build) and they audit clean, the B200 with no drift against b200-next-1, the
    node that was on that profile from the start. The H100's hardware runs driver 570: h100_late2026's CUDA 13 needs
    580, so its preflight refuses the move before anything changes (its CUDA stays 12.9)."""
    moved = EPHEMERAL / "moved"
    moved.mkdir(exist_ok=True)
    connection = yaml.safe_load((Path(INVENTORY) / "ansible_inventory.yml").read_text())
    for node, old, new in (("b200-lab-1", "b200_lab", "b200_next"), ("h200-nvlink-1", "h200_nvlink", "h200_next"),
                           ("h100-cluster-1", "h100_cluster", "h100_next")):
        connection.setdefault(new, {}).setdefault("hosts", {})[node] = connection[old]["hosts"].pop(node)
    (moved / "ansible_inventory.yml").write_text(yaml.safe_dump(connection))
    (moved / "hosts.yml").write_text((REPO / "inventories" / "fleetsim" / "hosts.yml").read_text())
    if not (moved / "group_vars").exists():
        (moved / "group_vars").symlink_to(REPO / "inventories" / "fleetsim" / "group_vars")
    before = fleetsim("exec", "b200-lab-1", "--", "cat", "/opt/deepep/nvshmem/include/nvshmem_version.h").stdout
    assert "#define NVSHMEM_VENDOR_MINOR_VERSION 4" in before, before

    def play(name, *extra):
        return playbook(name, *extra, inventory=moved, log="moved-")

    converge = play("site.yml", "-l", "b200-lab-1:h200-nvlink-1", "-e", "gpufleet_serial=2")
    assert converge.returncode == 0, converge.stdout[-4000:]
    refused = play("site.yml", "-l", "h100-cluster-1")
    assert refused.returncode != 0, refused.stdout[-4000:]
    assert "NVIDIA driver 570.172.08 is older than 580" in refused.stdout, refused.stdout[-4000:]
    link = fleetsim("exec", "h100-cluster-1", "--", "readlink", "/usr/local/cuda")
    assert link.stdout.strip() == "/usr/local/cuda-12.9", link.stdout + link.stderr

    out = EPHEMERAL / "audit-moved"
    run = play("audit.yml", "-l", "b200-lab-1:b200-next-1:h200-nvlink-1", "-e", "audit_output_dir=%s" % out)
    assert run.returncode == 0, run.stdout[-4000:]
    fleet_report = json.loads((out / "fleet.json").read_text())
    for node, name in (("b200-lab-1", "b200_late2026"), ("h200-nvlink-1", "h200_late2026")):
        entry = fleet_report["nodes"][node]
        assert entry["findings"] == [], (node, [(f["id"], f.get("evidence")) for f in entry["findings"]])
        key = dict((k["name"], k["value"]) for k in entry["key_facts"])
        assert (key["NVSHMEM"], key["NCCL"]) == ("3.8.0", "2.32.3"), (node, key)
        assert entry["facts"]["expect"]["profile"] == name
    key = dict((k["name"], k["value"]) for k in fleet_report["nodes"]["b200-lab-1"]["key_facts"])
    assert key["RC layout"] == "pass #564", key
    assert fleet_report["drift"] == [], fleet_report["drift"]
