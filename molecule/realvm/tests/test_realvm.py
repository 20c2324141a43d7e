# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the realvm scenario, on the real guests: each has its own identity, soft-RoCE rxe0 is ACTIVE on
the private network with a RoCE v2 IPv4 GID, the modprobe.d option is live and came with a new boot."""

from __future__ import annotations

import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

MODULE = os.environ.get("REALVM_MODULE", "ib_core")
PARAM = os.environ.get("REALVM_PARAM", "recv_queue_size")
VALUE = os.environ.get("REALVM_VALUE", "1024")


def test_identity_is_the_guests_own(host):
    name = host.check_output("hostname")
    assert name == host.backend.get_hostname()
    machine_id = host.file("/etc/machine-id").content_string.strip()
    assert len(machine_id) == 32 and machine_id != "0" * 32
    assert host.file("/etc/ssh/ssh_host_ed25519_key").exists


def test_machine_ids_differ_between_guests(host):
    ids = {h: testinfra.get_host(f"ansible://{h}?ansible_inventory={os.environ['MOLECULE_INVENTORY_FILE']}")
           .file("/etc/machine-id").content_string.strip() for h in testinfra_hosts}
    assert len(set(ids.values())) == len(ids), ids


def test_rxe0_active_with_roce_v2_ipv4_gid(host):
    link = host.check_output("rdma link show rxe0/1")
    assert "state ACTIVE" in link and "netdev eth1" in link
    port = "/sys/class/infiniband/rxe0/ports/1"
    assert host.file(f"{port}/link_layer").content_string.strip() == "Ethernet"
    types = {}
    for index in range(int(host.check_output(f"ls {port}/gid_attrs/types | wc -l"))):
        text = host.run(f"cat {port}/gid_attrs/types/{index}")
        if text.rc == 0:
            types[index] = text.stdout.strip()
    gids = {i: host.file(f"{port}/gids/{i}").content_string.strip() for i in types}
    v2_ipv4 = [i for i, t in types.items() if t == "RoCE v2" and gids[i].startswith("0000:0000:0000:0000:0000:ffff:")]
    assert v2_ipv4, (types, gids)


def test_option_live_after_a_new_boot(host):
    assert host.file(f"/sys/module/{MODULE}/parameters/{PARAM}").content_string.strip() == VALUE
    assert f"options {MODULE} {PARAM}={VALUE}" in host.file("/etc/modprobe.d/gpufleet-realvm.conf").content_string
    before = host.file("/var/lib/gpufleet-realvm.boot-id-before-reboot").content_string.strip()
    assert before and before != host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
