# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the site scenario: every phase of playbooks/site.yml left its mark, with one reboot a node."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("b200_cluster")

ENV_SCRIPT = "/opt/deepep/unified-env.sh"
sys.path.insert(0, str(Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "molecule" / "shared"))
fleet_checks = importlib.import_module("fleet_checks")


def boot_log() -> list[dict]:
    return fleet_checks.boot_log()


def sourced_env(host) -> dict:
    return fleet_checks.sourced_env(host, ENV_SCRIPT)


def test_cuda_toolkit_and_symlink(host):
    link = host.file("/usr/local/cuda")
    assert link.is_symlink
    assert link.linked_to == "/usr/local/cuda-12.9"
    assert "release 12.9, V12.9" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_rdma_devices_are_mlx5_after_doca(host):
    names = sorted(host.file("/sys/class/infiniband").listdir())
    assert names == [f"mlx5_{i}" for i in range(8)]
    assert host.package("doca-ofed").is_installed


def test_mft_is_pinned(host):
    assert host.package("mft").version == "4.30.0-139"
    assert "Pin: version 4.30.0-139" in host.file("/etc/apt/preferences.d/gpufleet-mft").content_string


def test_override_is_live(host):
    params = fleet_checks.live_params(host)
    assert params["RegistryDwords"].strip('"').rstrip(";").split(";") == ["PeerMappingOverride=1"]
    assert params["EnableStreamMemOPs"] == "1"


def test_nvidia_peermem_loaded_once_doca_provides_it(host):
    modules = [line.split()[0] for line in host.check_output("lsmod").splitlines()[1:] if line.strip()]
    assert "nvidia_peermem" in modules


def test_one_reboot_per_node(host):
    name = host.check_output("hostname").strip()
    ups = [e for e in boot_log() if e["node"] == name and e["event"] == "up"]
    assert len(ups) == 2, ups  # the boot at create, and exactly one reboot for DOCA-OFED + PeerMappingOverride
    assert host.file("/proc/sys/kernel/random/boot_id").content_string.strip() == ups[1]["boot_id"]


def test_gdrcopy_library(host):
    assert host.file("/opt/deepep/gdrcopy/lib/libgdrapi.so.2").exists
    assert host.file("/opt/deepep/gdrcopy/include/gdrapi.h").exists


def test_torch_from_the_mirror(host):
    version = host.check_output("/usr/bin/python3 -c %s", "import importlib.metadata as m; print(m.version('torch'))")
    assert version.startswith("2.13.0")


def test_env_script_file(host):
    script = host.file(ENV_SCRIPT)
    assert script.is_file
    assert script.user == "root"
    assert script.mode == 0o644
    assert host.run("bash -n %s", ENV_SCRIPT).rc == 0


def test_env_script_content(host):
    env = sourced_env(host)
    assert env["CUDA_HOME"] == "/usr/local/cuda"
    assert env["NVSHMEM_HOME"] == "/opt/deepep/nvshmem"
    assert env["GDRCOPY_HOME"] == "/opt/deepep/gdrcopy"
    assert env["LD_LIBRARY_PATH"].split(":") == ["/opt/deepep/nvshmem/lib", "/opt/deepep/gdrcopy/lib", "/usr/local/cuda/lib64"]
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda"
    assert env["NVSHMEM_IB_ENABLE_IBGDA"] == "1"
    assert env["NVSHMEM_IBGDA_NIC_HANDLER"] == "gpu"
    assert env["NVSHMEM_HCA_PREFIX"] == "mlx5"  # from the facts after the reboot, not the inbox rocep
    assert env["NVSHMEM_IB_GID_INDEX"] == "3"
    assert env["NVSHMEM_DISABLE_CUDA_VMM"] == "1"
    assert env["NVSHMEM_ENABLE_NIC_PE_MAPPING"] == "1"
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] == ",".join(f"{i}:mlx5_{i}:1" for i in range(8))
    assert env["EP_NIC_NAME"] == "mlx5_0"
    # DeepEP is installed as a package by its phase (deepep_pythonpath empty): nothing on PYTHONPATH.
    assert "PYTHONPATH" not in env
    assert "LD_PRELOAD" not in env  # the CPU torch wheel bundles no NVSHMEM: nothing to win over


def test_stamped_with_the_converged_state(host):
    # Written at the end of the full converge: the settings key and the fingerprint of what the phases manage.
    stamp = json.loads(host.file("/var/lib/gpufleet-site-converged.json").content_string)
    assert len(stamp["key"]) == 64 and int(stamp["key"], 16) >= 0
    watch = stamp["watch"]
    assert watch["/usr/local/cuda"] == {"kind": "link", "target": "/usr/local/cuda-12.9"}
    assert watch["/sys/class/infiniband"]["entries"] == [f"mlx5_{i}@" for i in range(8)]
    assert watch[ENV_SCRIPT]["kind"] == "file"
    assert any(name.startswith("torch-2.13.0") for name in watch["/usr/local/lib/python3.11/dist-packages"]["entries"])
    assert stamp["packages"]["doca-ofed"] and stamp["packages"]["mft"] == "4.30.0-139"
    assert stamp["packages"]["cuda-toolkit-12-9"]


# The fast path, once for the whole fleet (no host fixture): a no-op converge with the default gpufleet_site_fast
# runs no phase on a node as its last converge left it; a node that drifted goes through the phases, which put
# it right, while the others still run nothing.
def run_site(*extra: str) -> subprocess.CompletedProcess:
    project = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i",
           str(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "inventory"),
           str(project / "playbooks" / "site.yml"), "-l", "b200_cluster", *extra]
    # One line per result: messages are matched as they are, not as YAML folds them.
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run(cmd, cwd=project, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)


def recap(output: str) -> dict:
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", output, re.M)}


def node_host(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={os.environ['MOLECULE_INVENTORY_FILE']}")


NODES = [f"b200-cluster-{i}" for i in range(1, 5)]


def test_fast_path_runs_no_phase_on_intact_nodes_and_fixes_drift():
    boots_before = boot_log()
    # The idempotence run stamped the nodes; a run with the default settings keys them the same unless the collection
    # changed since (a developer editing while the scenario runs): then this run goes through the phases, changes
    # nothing, and stamps them again.
    settle = run_site()
    assert settle.returncode == 0 and recap(settle.stdout) == {n: (0, 0) for n in NODES}, settle.stdout[-4000:]
    quiet = run_site()
    assert quiet.returncode == 0, quiet.stdout[-4000:]
    assert recap(quiet.stdout) == {n: (0, 0) for n in NODES}
    assert quiet.stdout.count("intact: the node is as its last full converge left it") == 4
    assert "TASK [gpufleet.deepep." not in quiet.stdout  # no task of any phase role ran
    assert "All 4 nodes converged." in quiet.stdout

    drifted = node_host("b200-cluster-2")
    script = drifted.file(ENV_SCRIPT).content_string
    drifted.run_expect([0], "echo 'export NVSHMEM_IB_GID_INDEX=0' >> %s", ENV_SCRIPT)
    drifted.run_expect([0], "rm /usr/local/cuda")
    fixed = run_site()
    assert fixed.returncode == 0, fixed.stdout[-4000:]
    counts = recap(fixed.stdout)
    assert counts["b200-cluster-2"][0] == 2 and counts["b200-cluster-2"][1] == 0, counts  # the symlink and the script
    assert {n: counts[n] for n in NODES if n != "b200-cluster-2"} == {n: (0, 0) for n in NODES if n != "b200-cluster-2"}
    assert "steady: the node drifted since its last full converge: /opt/deepep/unified-env.sh: content changed" in fixed.stdout
    assert "/usr/local/cuda: now missing (was link to /usr/local/cuda-12.9)" in fixed.stdout
    assert fixed.stdout.count("intact: the node is as its last full converge left it") == 3
    assert drifted.file(ENV_SCRIPT).content_string == script
    assert drifted.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.9"
    assert boot_log() == boots_before  # nothing rebooted

    again = run_site()
    assert again.returncode == 0 and recap(again.stdout) == {n: (0, 0) for n in NODES}
    assert again.stdout.count("intact: the node is as its last full converge left it") == 4


def test_every_phase_run_downloads_only_what_is_not_the_verified_tarball():
    """An every-phase run of a converged node skips get_url for a tarball its record says was verified, with the same
    checksum setting; a tampered tarball, or one without a record, goes through get_url again (and is recorded)."""
    node = node_host("b200-cluster-3")
    downloads = "/opt/deepep/src/downloads"
    tarballs = node.check_output("ls %s/*.tar.gz", downloads).split()
    deepep = [t for t in tarballs if "deepep" in t][0]
    nvshmem = [t for t in tarballs if "nvshmem" in t][0]
    for tarball in (deepep, nvshmem):  # the record of the converge: the tarball's sha256, then the checksum setting
        lines = node.file(tarball + ".verified").content_string.splitlines()
        assert lines[0] == node.check_output("sha256sum %s", tarball).split()[0] and lines[1].startswith("sha256:")
    original = node.check_output("sha256sum %s", deepep).split()[0]
    node.run_expect([0], "echo tampered >> %s && rm %s.verified", deepep, nvshmem)
    fixed = run_site("-l", "b200-cluster-3", "-e", "gpufleet_site_fast=false")
    assert fixed.returncode == 0, fixed.stdout[-4000:]
    assert recap(fixed.stdout)["b200-cluster-3"] == (1, 0), fixed.stdout[-4000:]  # the tampered tarball, only
    assert node.check_output("sha256sum %s", deepep).split()[0] == original
    assert node.file(nvshmem + ".verified").exists  # verified again by get_url (unchanged), recorded again
    again = run_site("-l", "b200-cluster-3", "-e", "gpufleet_site_fast=false")
    assert again.returncode == 0 and recap(again.stdout)["b200-cluster-3"] == (0, 0), again.stdout[-4000:]
    for role in ("deepep", "nvshmem"):  # the download include of each phase is skipped as a whole
        task = re.search(r"TASK \[gpufleet\.deepep\.%s : Download the tarball\][^\n]*\n(\S+)" % role, again.stdout)
        assert task and task.group(1) == "skipping:", (role, task and task.group(0))
