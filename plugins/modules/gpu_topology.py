#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_topology
short_description: Gather the GPUs of a node, their PCIe distance to the RDMA NICs and the GPU-to-NIC mapping
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Finds the NVIDIA GPUs in the PCI tree under C(/sys) (vendor C(0x10de), class VGA or 3D
    controller; audio functions, NVSwitches and other NVIDIA functions are not GPUs) and indexes them in
    PCI bus-id order, as C(nvidia-smi) and CUDA (C(CUDA_DEVICE_ORDER=PCI_BUS_ID)) do.
  - For every GPU, lists the RDMA NIC ports by PCIe distance (C(PIX), C(PXB), C(PHB), C(NODE), C(SYS),
    computed from the common ancestors of the devices' real sysfs paths), and chooses one NIC per GPU.
    Nearest first; among equally near ports the one the fewest GPUs already use, then the lowest PCI
    address. Only ACTIVE ports are chosen, so a down front-end NIC never is. With fewer NICs than GPUs
    the NICs are shared round-robin.
  - Returns the choice as RV(ansible_facts.gpufleet_gpus.deepep_hca_mapping), the
    C(DEEP_EP_DEVICE_TO_HCA_MAPPING) string (C(gpu:hca:port,...)) of DeepEP's GPU-NIC mapping, and
    RV(ansible_facts.gpufleet_gpus.cuda_arch_list) for C(TORCH_CUDA_ARCH_LIST).
  - When C(nvidia-smi) is available it only enriches the GPUs (name, memory, UUID, compute capability,
    NVLink). Without it (tool missing, driver not loaded) everything comes from sysfs, the compute
    capability from the PCI device id.
  - Reads only; a node without GPUs or NICs gives empty lists and no failure.
  - Hardware is never dropped silently. An NVIDIA PCI function that looks like a GPU but cannot be read (an
    unreadable class, or an NVIDIA driver bound to a function whose class is not a display controller) is a
    warning naming its address, listed in RV(ansible_facts.gpufleet_gpus.unreadable). When C(nvidia-smi) lists
    GPUs that sysfs does not (or the other way round), the module fails instead of returning a GPU-to-NIC
    mapping shifted by the missing GPU.
  - The NICs are read as M(gpufleet.deepep.rdma_devices) reads them. An entry of C(class/infiniband) that is not an
    RDMA device directory (dangling link, link loop, plain file) or is a second name of one is never a NIC, and
    the module warns naming it; so it does for a port rate that is not a rate.
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.facts
options:
  nvidia_smi:
    description:
      - Path of C(nvidia-smi). Default, the one found on E(PATH); when none is found the module works
        from sysfs alone.
      - A path given here must exist. When it fails to run (for example the driver is not loaded), the
        module warns, records the failure in RV(ansible_facts.gpufleet_gpus.nvidia_smi) and goes on
        from sysfs. When it answers the query with no GPU line, the module warns the same way (not silently).
    type: path
  timeout:
    description:
      - Seconds C(nvidia-smi) may run in all before it is killed (a wedged driver can hang it). The GPU query gets
        the whole bound and fails the module when it runs past it, naming the command and the bound (it is not
        run again). The NVLink status (C(nvidia-smi nvlink -s)) gets what the query left; past that it is killed
        and a warning says so (NVLink facts left out), so a slow C(nvidia-smi) is never waited out twice.
    type: int
    default: 60
notes:
  - Only reads files and runs C(nvidia-smi) queries (with E(LC_ALL=C)); runs the same in check mode.
seealso:
  - module: gpufleet.deepep.rdma_devices
"""

EXAMPLES = r"""
- name: Gather GPUs, NIC distances and the DeepEP GPU-NIC mapping
  gpufleet.deepep.gpu_topology:

- name: Show the mapping DeepEP will use
  ansible.builtin.debug:
    msg: "DEEP_EP_DEVICE_TO_HCA_MAPPING={{ ansible_facts.gpufleet_gpus.deepep_hca_mapping }}"

- name: Every GPU must have a NIC under its own PCIe switch
  ansible.builtin.assert:
    that:
      - ansible_facts.gpufleet_gpus.gpus | map(attribute='hca.distance') | unique == ['PIX']
    fail_msg: GPU-NIC pairs are not all PIX

- name: With an nvidia-smi that is not on PATH
  gpufleet.deepep.gpu_topology:
    nvidia_smi: /opt/nvidia/bin/nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    gpufleet_gpus:
      description: The GPUs of the node, their NICs and the settings that follow.
      returned: always
      type: complex
      contains:
        gpus:
          description: The GPUs in PCI bus-id order.
          returned: always
          type: list
          elements: dict
          sample:
            - index: 0
              pci_address: "0000:8f:00.0"
              pci_path: ["pci0000:8c", "0000:8c:00.0", "0000:8d:00.0", "0000:8e:00.0", "0000:8f:00.0"]
              numa_node: 0
              local_cpulist: 0-55,112-167
              pci_device_id: "0x2901"
              name: NVIDIA B200
              compute_capability: "10.0"
              memory_total_mib: 183359
              uuid: GPU-4c1ee8f8-7b6b-1b1c-9c1b-3a6a4b1c2d3e
              nvlink: {links: 18, bandwidth_gbps: 956.25}
              source: nvidia-smi
              hca: {name: mlx5_0, port: 1, pci_address: "0000:91:00.0", distance: PIX}
              nics:
                - {name: mlx5_0, port: 1, pci_address: "0000:91:00.0", distance: PIX, active: true}
                - {name: mlx5_1, port: 1, pci_address: "0000:92:00.0", distance: PIX, active: true}
                - {name: mlx5_2, port: 1, pci_address: "0000:98:00.0", distance: NODE, active: true}
          contains:
            index:
              description: GPU index (PCI bus-id order, the CUDA device ordinal with C(CUDA_DEVICE_ORDER=PCI_BUS_ID)).
              type: int
              sample: 0
            pci_address:
              description: PCI address.
              type: str
              sample: "0000:8f:00.0"
            pci_path:
              description: The GPU's path in the PCI tree from its host bridge.
              type: list
              elements: str
              sample: ["pci0000:00", "0000:00:06.0"]
            numa_node:
              description: NUMA node (-1 when unknown).
              type: int
              sample: 0
            local_cpulist:
              description: CPUs local to the GPU.
              type: str
              sample: 0-55,112-167
            pci_device_id:
              description: PCI device id.
              type: str
              sample: "0x2335"
            name:
              description: Name from C(nvidia-smi), else from the PCI device id table; null when unknown.
              type: str
              sample: NVIDIA H200
            compute_capability:
              description: Compute capability from C(nvidia-smi), else from the PCI device id; null when unknown.
              type: str
              sample: "9.0"
            memory_total_mib:
              description: Total memory in MiB (C(nvidia-smi) only; null without it).
              type: int
              sample: 143771
            uuid:
              description: GPU UUID (C(nvidia-smi) only; null without it).
              type: str
              sample: GPU-9a6f8228-ad80-9b06-2cc7-ac9181c9cc15
            nvlink:
              description: Active NVLink links and their summed bandwidth (C(nvidia-smi nvlink -s)); null without it.
              type: dict
              sample: {links: 18, bandwidth_gbps: 478.116}
            source:
              description: C(nvidia-smi) when nvidia-smi described the GPU, else C(sysfs).
              type: str
              sample: sysfs
            hca:
              description: The NIC port chosen for the GPU (name, port, pci_address, distance); null without an ACTIVE NIC.
              type: dict
              sample: {name: mlx5_0, port: 1, pci_address: "0000:91:00.0", distance: PIX}
            nics:
              description: Every RDMA NIC port by distance (nearest first, then PCI address), with whether it is ACTIVE.
              type: list
              elements: dict
              sample:
                - {name: mlx5_0, port: 1, pci_address: "0000:91:00.0", distance: PIX, active: true}
        gpu_count:
          description: Number of GPUs.
          returned: always
          type: int
          sample: 8
        deepep_hca_mapping:
          description:
            - The C(DEEP_EP_DEVICE_TO_HCA_MAPPING) string, C(gpu:hca:port) per GPU that has an ACTIVE NIC,
              comma-separated in GPU order; empty when no GPU has one.
          returned: always
          type: str
          sample: "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1"
        hca_mapping:
          description: The same mapping as a list (what the C(gpufleet.deepep.hca_mapping) filter parses it into).
          returned: always
          type: list
          elements: dict
          sample: [{gpu: 0, hca: mlx5_0, port: 1}, {gpu: 1, hca: mlx5_1, port: 1}]
        cuda_arch_list:
          description:
            - C(TORCH_CUDA_ARCH_LIST) for the GPUs, the distinct compute capabilities in ascending order joined by
              C(;) (C(10.0) for B200, C(9.0) for H100/H200, C(8.0) for A100); empty when none is known.
          returned: always
          type: str
          sample: "10.0"
        driver_version:
          description: Driver version from C(nvidia-smi); null without it.
          returned: always
          type: str
          sample: 580.159.04
        unreadable:
          description: PCI addresses of NVIDIA functions that look like GPUs but could not be read (each also a warning).
          returned: always
          type: list
          elements: str
          sample: []
        nvidia_smi:
          description: How C(nvidia-smi) was used.
          returned: always
          type: dict
          sample: {path: /usr/bin/nvidia-smi, used: true, rc: 0, stderr: "", timed_out: false, error: null}
          contains:
            path:
              description: The C(nvidia-smi) run; null when none was found.
              type: str
              sample: /usr/bin/nvidia-smi
            used:
              description: Whether its answers enriched the GPUs.
              type: bool
              sample: true
            rc:
              description: Exit status of the GPU query; null when not run.
              type: int
              sample: 0
            stdout:
              description: Output of a failed query (empty when it succeeded or did not run).
              type: str
              sample: ""
            stderr:
              description: Error output of the GPU query.
              type: str
              sample: ""
            timed_out:
              description: Whether the GPU query ran past O(timeout) and was killed (the module then fails).
              type: bool
              sample: false
            error:
              description:
                - What went wrong, naming the command (and the bound of a timeout) - the GPU query failed, timed
                  out or gave no GPU line, or the NVLink status timed out; null when nothing did. Each is also a
                  warning or the failure message.
              type: str
              sample: null
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._hca_mapping import topology_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import (
    empty_smi_info,
    gpu_count_problem,
    list_gpus,
    query_nvidia_smi as smi_query,
    suspect_gpus,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import run_bounded

# Where sysfs is read; private (no option): unit tests set it to a rendered tree.
_SYSFS_ROOT = "/sys"


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )


def query_nvidia_smi(module, path):
    """Run the GPU query, then the NVLink status, within the timeout option in all; returns (rows or None,
    nvlink or None, info dict). A query that runs past the bound fails the module; what else goes wrong warns."""
    answer = smi_query(path, run_bounded, module.params["timeout"], env={"LC_ALL": "C", "LANG": "C"})
    if answer["fatal"]:
        module.fail_json(msg=answer["fatal"], nvidia_smi=answer["info"])
    for warning in answer["warnings"]:
        module.warn(warning)
    return answer["rows"], answer["nvlink"], answer["info"]


def check_gpu_count(module, gpus, rows, smi_info):
    """Fail when nvidia-smi and sysfs disagree on the GPUs (the mapping would shift by the missing one)."""
    problem = gpu_count_problem(gpus, rows)
    if problem:
        module.fail_json(msg=problem, nvidia_smi=smi_info)


def collect(module):
    sysfs_root = _SYSFS_ROOT
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout={module.params['timeout']!r}: expected a positive number of seconds")
    if not os.path.isdir(sysfs_root):
        module.fail_json(msg=f"sysfs {sysfs_root!r} is not a directory (expected sysfs mounted there)")
    smi = module.params["nvidia_smi"]
    if smi is not None:
        if not (os.path.isfile(smi) and os.access(smi, os.X_OK)):
            module.fail_json(msg=f"nvidia_smi {smi!r} is not an executable file (expected the path of "
                                 f"nvidia-smi, or leave the option out to search PATH)")
    else:
        smi = module.get_bin_path("nvidia-smi", required=False)
    gpus = list_gpus(sysfs_root)
    unreadable = suspect_gpus(sysfs_root)
    for bdf, why in unreadable:
        module.warn(f"PCI device {bdf} looks like an NVIDIA GPU but cannot be read ({why}); it is not counted "
                    f"among the GPUs")
    rows, nvlink, smi_info = None, None, empty_smi_info(smi)
    if gpus or unreadable:
        rows, nvlink, smi_info = query_nvidia_smi(module, smi)
        check_gpu_count(module, gpus, rows, smi_info)
    rdma = collect_rdma(sysfs_root)
    for warning in rdma["warnings"]:
        module.warn(warning)
    return topology_facts(gpus, rdma, smi_rows=rows, nvlink=nvlink, smi_info=smi_info,
                          unreadable=[bdf for bdf, dummy in unreadable])


def _main():
    module = build_module()
    facts = collect(module)
    module.exit_json(changed=False, ansible_facts={"gpufleet_gpus": facts})


def main():
    guarded("gpu_topology", _main)


if __name__ == "__main__":
    main()
