#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rdma_devices
short_description: Gather the RDMA (InfiniBand, RoCE and AWS EFA) devices of a node from sysfs
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Reads every entry of C(/sys/class/infiniband), following the symlinks as sysfs does, and
    returns the devices as facts under C(ansible_facts.gpufleet_rdma), without changing anything.
  - For each device, its name and naming scheme (C(mlx5_*) after DOCA-OFED or MLNX_OFED, C(rocep*) of the
    inbox driver, C(rdmap*) of AWS EFA, ...), PCI address, kernel driver and NUMA node, network interfaces,
    firmware and board ids, and for each port its state, physical state, link layer, rate in Gb/s, LID, GID
    table (types, network devices, IPv4-mapped addresses), the index of its RoCE v2 IPv4 GID, and counters.
  - AWS EFA devices (kernel driver C(efa)) are read as the kernel shows them, named C(rdmap<bus>s<slot>) by
    rdma-core's udev rename, with port link layer C(Unknown), no LID, one GID without a RoCE type and no network
    interface.
  - Summarises what NVSHMEM and DeepEP need, from the devices with an ACTIVE port only, so that a down
    front-end NIC never counts. RV(ansible_facts.gpufleet_rdma.hca_prefix) (for C(NVSHMEM_HCA_PREFIX)),
    RV(ansible_facts.gpufleet_rdma.transport) and RV(ansible_facts.gpufleet_rdma.recommended_gid_index)
    (for C(NVSHMEM_IB_GID_INDEX)).
  - A node without RDMA devices gives empty lists and transport C(none); that is not a failure.
  - An entry of C(class/infiniband) that is not an RDMA device directory (a dangling symbolic link, a symbolic link
    loop, a plain file, a directory without C(ports/)) is not listed as a device; nor is a second name of a device
    directory already listed (entries are de-duplicated by their resolved path). Each is a warning naming the
    entry and why, and listed in RV(ansible_facts.gpufleet_rdma.skipped).
  - A port C(rate) file that does not hold a rate (C(<N> Gb/sec (...))) gives the port a null C(rate_gbps)
    (unknown) and a warning naming the device, the port and the text.
  - GID and IPv4 work uses the Python C(netaddr) library when the target has it and the standard
    library otherwise, with identical results.
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.facts
options: {}
notes:
  - Only reads files; runs the same in check mode.
seealso:
  - module: gpufleet.deepep.gpu_topology
"""

EXAMPLES = r"""
- name: Gather the RDMA devices
  gpufleet.deepep.rdma_devices:

- name: Require mlx5 names (DOCA-OFED installed) on every active NIC
  ansible.builtin.assert:
    that:
      - ansible_facts.gpufleet_rdma.hca_prefix == 'mlx5'
    fail_msg: "RDMA devices are named {{ ansible_facts.gpufleet_rdma.active_devices | join(', ') }}"

- name: Use the RoCE v2 IPv4 GID index for NVSHMEM
  ansible.builtin.set_fact:
    nvshmem_ib_gid_index: "{{ ansible_facts.gpufleet_rdma.recommended_gid_index }}"
  when: ansible_facts.gpufleet_rdma.transport == 'roce'
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    gpufleet_rdma:
      description: The RDMA devices of the node and what NVSHMEM/DeepEP settings follow from them.
      returned: always
      type: complex
      contains:
        devices:
          description: Every entry of C(class/infiniband), in natural name order (C(mlx5_2) before C(mlx5_10)).
          returned: always
          type: list
          elements: dict
          sample:
            - name: mlx5_0
              naming: mlx5
              pci_address: "0000:91:00.0"
              pci_path: ["pci0000:8c", "0000:8c:00.0", "0000:8d:00.0", "0000:8e:02.0", "0000:91:00.0"]
              numa_node: 0
              netdevs: [gpu0rdma0]
              node_guid: "4201:c0ff:0000:0002"
              sys_image_guid: "4201:c0ff:0000:0002"
              fw_ver: 28.43.2026
              board_id: GOO0000000002
              hca_type: MT4129
              node_type: "1: CA"
              driver: mlx5_core
              active: true
              ports:
                - port: 1
                  state: ACTIVE
                  state_num: 4
                  phys_state: LinkUp
                  phys_state_num: 5
                  active: true
                  link_layer: Ethernet
                  rate: 400 Gb/sec (4X NDR)
                  rate_gbps: 400
                  lid: null
                  sm_lid: null
                  roce_v2_ipv4_gid_index: 3
                  ipv4_addresses: [192.168.0.2]
                  gids:
                    - index: 3
                      gid: "0000:0000:0000:0000:0000:ffff:c0a8:0002"
                      address: "::ffff:192.168.0.2"
                      type: RoCE v2
                      ndev: gpu0rdma0
                      ipv4: 192.168.0.2
                      link_local: false
                  counters: {port_rcv_data: 0, port_xmit_data: 0}
                  hw_counters: {out_of_sequence: 0}
          contains:
            name:
              description: The RDMA device name.
              type: str
              sample: mlx5_0
            naming:
              description: >-
                Naming scheme of the name: C(mlx5) (C(mlx5_<n>)), C(rocep) (C(rocep<bus>s<slot>), inbox
                driver), C(ibp) (C(ibp<bus>s<slot>)), C(rdmap) (C(rdmap<bus>s<slot>), AWS EFA) or C(other).
              type: str
              sample: rocep
            pci_address:
              description: PCI address of the NIC function (C(device) link), or null when it does not resolve.
              type: str
              sample: "0000:91:00.0"
            pci_path:
              description: The device's path in the PCI tree, from its host bridge (real path of the C(device) link).
              type: list
              elements: str
              sample: ["pci0000:8c", "0000:8c:00.0", "0000:8d:00.0", "0000:8e:02.0", "0000:91:00.0"]
            numa_node:
              description: NUMA node of the PCI device (-1 when unknown).
              type: int
              sample: 0
            netdevs:
              description: Network interfaces of the PCI function (C(device/net)).
              type: list
              elements: str
              sample: [gpu0rdma0]
            node_guid:
              description: Node GUID.
              type: str
              sample: "a088:c203:0000:0001"
            sys_image_guid:
              description: System image GUID.
              type: str
              sample: "a088:c203:0000:0001"
            fw_ver:
              description: Firmware version.
              type: str
              sample: 28.39.1002
            board_id:
              description: Board id (PSID).
              type: str
              sample: MT_0000000838
            hca_type:
              description: HCA type.
              type: str
              sample: MT4129
            node_type:
              description: >-
                Node type as sysfs shows it (C(1: CA); C(7: unspecified) for EFA).
              type: str
              sample: "1: CA"
            driver:
              description: >-
                Kernel driver of the PCI function (the name of the directory its C(device/driver) link resolves to:
                C(mlx5_core), C(efa), ...); null when the device has no bound PCI driver.
              type: str
              sample: mlx5_core
            active:
              description: Whether any port of the device is ACTIVE.
              type: bool
              sample: true
            ports:
              description: The ports of the device.
              type: list
              elements: dict
              contains:
                port:
                  description: Port number.
                  type: int
                  sample: 1
                state:
                  description: Logical port state (C(ACTIVE), C(DOWN), C(INIT), C(ARMED)).
                  type: str
                  sample: ACTIVE
                state_num:
                  description: Numeric logical state.
                  type: int
                  sample: 4
                phys_state:
                  description: Physical port state (C(LinkUp), C(Disabled), C(Polling), ...).
                  type: str
                  sample: LinkUp
                phys_state_num:
                  description: Numeric physical state.
                  type: int
                  sample: 5
                active:
                  description: Whether the port is ACTIVE.
                  type: bool
                  sample: true
                link_layer:
                  description: C(InfiniBand), C(Ethernet) (RoCE) or C(Unknown) (AWS EFA) as sysfs shows it.
                  type: str
                  sample: InfiniBand
                rate:
                  description: The rate as sysfs shows it.
                  type: str
                  sample: 400 Gb/sec (4X NDR)
                rate_gbps:
                  description: The rate in Gb/s; null when the rate file is missing or does not hold a rate (a warning).
                  type: float
                  sample: 400
                lid:
                  description: Port LID on InfiniBand; null on Ethernet and EFA.
                  type: int
                  sample: 4
                sm_lid:
                  description: Subnet manager LID on InfiniBand; null on Ethernet and EFA.
                  type: int
                  sample: 1
                gids:
                  description: The used GID table entries (all-zero entries are left out).
                  type: list
                  elements: dict
                  contains:
                    index:
                      description: GID index.
                      type: int
                      sample: 3
                    gid:
                      description: The GID as sysfs shows it.
                      type: str
                      sample: "0000:0000:0000:0000:0000:ffff:c0a8:0002"
                    address:
                      description: The GID as a compressed IPv6 address.
                      type: str
                      sample: "::ffff:192.168.0.2"
                    type:
                      description: GID type (C(IB/RoCE v1) or C(RoCE v2)); null when sysfs does not say.
                      type: str
                      sample: RoCE v2
                    ndev:
                      description: Network device of the GID (RoCE); null on InfiniBand.
                      type: str
                      sample: gpu0rdma0
                    ipv4:
                      description: The IPv4 address of an IPv4-mapped GID (C(::ffff:a.b.c.d)), else null.
                      type: str
                      sample: 192.168.0.2
                    link_local:
                      description: Whether the GID is an IPv6 link-local address (C(fe80::/10)).
                      type: bool
                      sample: false
                roce_v2_ipv4_gid_index:
                  description: The lowest index of a RoCE v2 GID holding an IPv4 address; null when none.
                  type: int
                  sample: 3
                ipv4_addresses:
                  description: IPv4 addresses found in the GID table.
                  type: list
                  elements: str
                  sample: [192.168.0.2]
                counters:
                  description: The port counters (C(counters/*)) as integers.
                  type: dict
                  sample: {port_xmit_data: 0, port_rcv_data: 0, symbol_error: 0}
                hw_counters:
                  description: The hardware counters (C(hw_counters/*)) as integers.
                  type: dict
                  sample: {out_of_sequence: 0, np_cnp_sent: 0}
        active_devices:
          description: Names of the devices with at least one ACTIVE port.
          returned: always
          type: list
          elements: str
          sample: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
        hca_prefix:
          description:
            - The prefix of the ACTIVE device names, for C(NVSHMEM_HCA_PREFIX)
              (C(mlx5), C(rocep), C(ibp), C(rdmap), or the common prefix of other names); null when no device is
              active or the names share no prefix.
          returned: always
          type: str
          sample: mlx5
        transport:
          description:
            - C(infiniband) or C(roce) from the link layer of the ACTIVE ports (the more frequent one;
              InfiniBand on a tie), C(none) without an ACTIVE port.
            - C(efa) when the ACTIVE AWS EFA ports (driver C(efa), link layer C(Unknown)) outnumber both the
              InfiniBand and the Ethernet ones.
          returned: always
          type: str
          choices: [infiniband, roce, efa, none]
          sample: roce
        recommended_gid_index:
          description:
            - For RoCE, the RoCE v2 IPv4 GID index when it is the same on every ACTIVE RoCE port (for
              C(NVSHMEM_IB_GID_INDEX)); null on InfiniBand and EFA, without RDMA devices, or when the ports differ.
          returned: always
          type: int
          sample: 3
        skipped:
          description:
            - Entries of C(class/infiniband) not listed as devices, each with the reason (not a device directory, or
              the same device directory as a listed name). Each is also a warning.
          returned: always
          type: list
          elements: dict
          sample: [{name: mlx5_9, reason: "a dangling symbolic link (its target ../../devices/x does not exist)"}]
          contains:
            name:
              description: The entry's name.
              type: str
              sample: mlx5_9
            reason:
              description: Why it is not listed.
              type: str
              sample: "a dangling symbolic link (its target ../../devices/x does not exist)"
        warnings:
          description: The sentences the module warned with (skipped entries, rates that are not rates); empty if none.
          returned: always
          type: list
          elements: str
          sample: []
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma

# Where sysfs is read; private (no option): unit tests set it to a rendered tree.
_SYSFS_ROOT = "/sys"


def build_module():
    return AnsibleModule(
        argument_spec=dict(),
        supports_check_mode=True,
    )


def run(module):
    sysfs_root = _SYSFS_ROOT
    if not os.path.isdir(sysfs_root):
        module.fail_json(msg=f"sysfs {sysfs_root!r} is not a directory (expected sysfs mounted there)")
    facts = collect_rdma(sysfs_root)
    for warning in facts["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"gpufleet_rdma": facts})


def _main():
    run(build_module())


def main():
    guarded("rdma_devices", _main)


if __name__ == "__main__":
    main()
