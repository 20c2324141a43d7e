# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small simulated fleet, used over SSH: isolation, fake hardware, mirror, faults and reboots."""

from __future__ import annotations

import json
import marshal
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from fleetsim_helpers import REPO, STATE_ROOT, env
from tools import pycode_cache
from tools.fleetsim.common import PYCODE_CACHE_DIR, PYCODE_CACHE_MOUNT


@pytest.fixture(scope="module")
def fleet(module_fleets):
    fl = module_fleets("nodes")
    fl.up("gcp_b200", nodes=2, group="b200_cluster")
    fl.up("h100_ib", nodes=1)
    return fl


def test_nodes_of_several_profiles_and_groups(fleet):
    nodes = fleet.state()["nodes"]
    assert sorted(nodes) == ["b200-cluster-1", "b200-cluster-2", "h100-ib-1"]
    assert {n["group"] for n in nodes.values()} == {"b200_cluster", "h100_ib"}
    status = json.loads(fleet.cli("status", "--json").stdout)
    assert {n: s["state"] for n, s in status["fleet"]["nodes"].items()} == dict.fromkeys(nodes, "up")


def test_ssh_identity_and_isolation(fleet):
    ids = {}
    for node in ("b200-cluster-1", "b200-cluster-2"):
        out = fleet.ssh(node, "hostname; cat /etc/machine-id /var/lib/dbus/machine-id; id -u").stdout.split()
        assert out[0] == node
        assert out[1] == out[2]
        assert out[3] == "0"
        ids[node] = out[1]
    assert len(set(ids.values())) == 2
    # A file written on one node is seen neither by the other node nor by the host.
    fleet.ssh("b200-cluster-1", "echo one > /etc/fleetsim-isolation && echo one > /opt/isolation && echo t > /tmp/t")
    other = fleet.ssh("b200-cluster-2", "cat /etc/fleetsim-isolation /opt/isolation /tmp/t", check=False)
    assert other.returncode != 0
    assert not (REPO / "etc").exists()
    with pytest.raises(FileNotFoundError):
        open("/etc/fleetsim-isolation", encoding="utf-8").close()
    # No route out, no view of the fleet's state, the repository or other nodes' directories.
    routes = fleet.ssh("b200-cluster-1", "ip -4 route show default").stdout
    assert routes.strip() == ""
    hidden = fleet.ssh("b200-cluster-1", "ls -A /srv; ls -A /work 2>/dev/null | wc -l").stdout.split()
    assert hidden == ["fleetsim-mirror", "0"]


def test_numa_balancing_is_the_nodes_own(fleet):
    """kernel.numa_balancing (procfs is the host kernel's): each node reads 0, and a write on one node (sysctl -w, as
    the audit's fix says) changes that node's value only, never the host's."""
    path = Path("/proc/sys/kernel/numa_balancing")
    if not path.exists():
        pytest.skip("this kernel has no kernel.numa_balancing")
    host = path.read_text()
    # The node's file is a mount of its own (never write through to the host's sysctl).
    assert fleet.ssh("b200-cluster-1", "findmnt -n -o TARGET /proc/sys/kernel/numa_balancing").stdout.strip() == \
        "/proc/sys/kernel/numa_balancing"
    fleet.ssh("b200-cluster-1", "echo 1 > /proc/sys/kernel/numa_balancing")
    try:
        assert fleet.ssh("b200-cluster-1", "cat /proc/sys/kernel/numa_balancing").stdout == "1\n"
        assert fleet.ssh("b200-cluster-2", "cat /proc/sys/kernel/numa_balancing").stdout == "0\n"
        assert path.read_text() == host
    finally:
        fleet.ssh("b200-cluster-1", "echo 0 > /proc/sys/kernel/numa_balancing")


def test_fake_hardware_is_read_only(fleet):
    out = fleet.ssh("b200-cluster-1", "ls /sys/class/infiniband; nvidia-smi -L | wc -l; "
                                      "touch /proc/driver/nvidia/params 2>&1; "
                                      "echo 1 2>&1 > /sys/class/infiniband/$(ls /sys/class/infiniband | head -1)"
                                      "/ports/1/state || echo ro-sysfs", check=False).stdout
    assert "rocep" in out
    assert "\n8\n" in out
    assert "Read-only file system" in out
    assert "ro-sysfs" in out
    ib = fleet.ssh("h100-ib-1", "ls /sys/class/infiniband; cat /sys/class/infiniband/mlx5_0/ports/1/link_layer").stdout
    assert "mlx5_0" in ib and "InfiniBand" in ib
    # The node's own network interfaces, not the host's.
    assert fleet.ssh("b200-cluster-1", "ls /sys/class/net").stdout.split() == ["eth0", "lo"]


def test_apt_and_mirror_from_inside_a_node(fleet):
    out = fleet.ssh("b200-cluster-1",
                    "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null && "
                    "apt-get install -y -qq fleetsim-hello >/dev/null && fleetsim-hello && "
                    "ls /srv/fleetsim-mirror/sources/ && touch /srv/fleetsim-mirror/x 2>&1 || true").stdout
    assert "hello from fleetsim-hello 1.0.0 on b200-cluster-1" in out
    assert "fleetsim-hello.tar.gz.sha256" in out
    assert "Read-only file system" in out
    assert fleet.ssh("b200-cluster-2", "command -v fleetsim-hello", check=False).returncode != 0


def test_fault_knobs_port_down_and_counters(fleet):
    node = "b200-cluster-2"
    devices = fleet.ssh(node, "ls /sys/class/infiniband").stdout.split()
    dev, other = devices[0], devices[1]
    counter = f"/sys/class/infiniband/{other}/ports/1/counters/port_xmit_data"
    before = int(fleet.ssh(node, f"cat {counter}").stdout)
    fleet.cli("fault", node, "--port-down", dev, "--bump-counter", other, "--bytes", "4000")
    assert "DOWN" in fleet.ssh(node, f"cat /sys/class/infiniband/{dev}/ports/1/state").stdout
    assert int(fleet.ssh(node, f"cat {counter}").stdout) == before + 1000
    fleet.cli("fault", node, "--port-up", dev)
    assert "ACTIVE" in fleet.ssh(node, f"cat /sys/class/infiniband/{dev}/ports/1/state").stdout


def test_reboot_applies_modprobe_options_and_doca_rename(fleet):
    node = "b200-cluster-2"
    first = fleet.boots(node)[-1]["boot_id"]
    fleet.ssh(node, "printf '%s\\n' 'options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1' "
                    "'options nvidia NVreg_EnableStreamMemOPs=0x1' > /etc/modprobe.d/nvidia-peermem.conf; "
                    "mkdir -p /etc/fleetsim && touch /etc/fleetsim/doca-ofed-installed; "
                    "echo nvidia-peermem > /etc/modules-load.d/peermem.conf")
    fleet.cli("reboot", node)
    boots = fleet.boots(node)
    assert boots[-1]["boot_id"] != first
    live = fleet.ssh(node, "cat /proc/sys/kernel/random/boot_id; grep -E '^(RegistryDwords|EnableStreamMemOPs):' "
                           "/proc/driver/nvidia/params; ls /sys/class/infiniband; lsmod").stdout
    assert live.split()[0] == boots[-1]["boot_id"]
    assert 'RegistryDwords: "PeerMappingOverride=0x1"' in live
    assert "EnableStreamMemOPs: 1" in live
    assert "mlx5_0" in live and "rocep" not in live
    assert "nvidia_peermem" in live


def test_reboot_from_inside_with_ansible(fleet, tmp_path):
    inventory = fleet.inventory(tmp_path / "hosts.yml", reboot_timeout=60)
    playbook = tmp_path / "reboot.yml"
    playbook.write_text(
        "- hosts: b200_cluster\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.reboot:\n"
        "        reboot_timeout: '{{ gpufleet_reboot_timeout }}'\n"
        "        boot_time_command: '{{ gpufleet_reboot_boot_time_command }}'\n")
    before = {n: fleet.boots(n)[-1]["boot_id"] for n in ("b200-cluster-1", "b200-cluster-2")}
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)], cwd=REPO, env=env(),
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout
    for node, boot_id in before.items():
        after = fleet.boots(node)
        assert after[-1]["boot_id"] != boot_id
        assert [e["boot_id"] for e in after].count(boot_id) == 1
    # The h100 node was not in the play and did not reboot.
    assert len(fleet.boots("h100-ib-1")) == 1


def test_modprobe_wrapper_follows_the_profile(fleet):
    from tools.fleetsim import fakehw

    peermem = fakehw.load_profile("h100_ib")["nvidia_peermem"]
    out = fleet.ssh("h100-ib-1", "modprobe -r nvidia_peermem; modprobe nvidia_peermem 2>&1; echo rc=$?; "
                                 "lsmod | grep -c '^nvidia_peermem '; modprobe no_such_module; echo rc=$?",
                    check=False).stdout.splitlines()
    if peermem["loads"]:
        assert out[:2] == ["rc=0", "1"]
    else:
        assert out[:3] == [peermem["error"], "rc=1", "0"]
    assert out[-1] == "rc=1"


def test_nodes_share_one_bytecode_cache_and_keep_no_trace_of_it_on_disk(fleet):
    """tools/pycode_cache.py in every node's Python: what one node compiled, another loads; nothing in the nodes'
    upper layers (their disks and images)."""
    source = f"MARK = {uuid.uuid4().hex!r}\n"
    script = ("import sys, zipfile, zipimport; path = '/tmp/pcmark-payload.zip'; "
              f"zipfile.ZipFile(path, 'w').writestr('pcmark.py', {source!r}); sys.path.insert(0, path); "
              "import pcmark; print(pcmark.MARK, zipimport._compile_source.pycode_cache_dir)")
    first = fleet.ssh("b200-cluster-1", f"python3 -c {shlex.quote(script)}").stdout.split()
    assert first == [source.split("'")[1], PYCODE_CACHE_MOUNT]
    entry = Path(pycode_cache.cache_path(str(STATE_ROOT / PYCODE_CACHE_DIR), source.encode()))
    assert entry.is_file(), f"b200-cluster-1 compiled {source!r} and left no {entry}"
    # The entry replaced by other code: the second node runs what the cache holds (it did not compile).
    entry.write_bytes(marshal.dumps(compile("MARK = 'from the cache'\n", "pcmark.py", "exec")))
    second = fleet.ssh("b200-cluster-2", f"python3 -c {shlex.quote(script)}").stdout.split()
    assert second[:3] == ["from", "the", "cache"]
    for node in ("b200-cluster-1", "b200-cluster-2"):
        upper = fleet.dir / "nodes" / node / "upper"
        assert not list(upper.glob("etc/python3*/sitecustomize.py")), f"{node}'s disk holds the hook"
