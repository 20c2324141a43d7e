# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The env script's variables follow the profile's fabric (plugins/plugin_utils/_fabrics.py): the role's own template
(roles/env_script/templates/env.json.j2) rendered by the controller with the role's defaults and a node's RDMA facts.

On EFA (DeepEP V2 over NCCL GIN, no NVSHMEM IBGDA) the NVSHMEM IBGDA variables and DeepEP V1's HCA mapping are left out
and the fabric's own are exported (NCCL_GIN_TYPE=5 for EFA-GDA, NCCL_SYM_GIN_KERNELS_ENABLE=0, FI_PROVIDER=efa);
EP_NIC_NAME is an ACTIVE EFA device. On RoCE the IBGDA variables are there and none of EFA's."""

from __future__ import annotations

import json

import pytest

from play_helpers import dump_task, run_play
from unit_helpers import REPO

EFA_RDMA = {"active_devices": ["rdmap16s27", "rdmap32s27"], "hca_prefix": "rdmap", "transport": "efa",
            "recommended_gid_index": None, "devices": []}
ROCE_RDMA = {"active_devices": ["mlx5_0", "mlx5_1"], "hca_prefix": "mlx5", "transport": "roce",
             "recommended_gid_index": 3, "devices": []}
MAPPING = "0:mlx5_0:1,1:mlx5_1:1"


def rendered(tmp_path, fabric, rdma):
    out = tmp_path / "env.json"
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "/nonexistent/python"},
                         "hosts": {"n1": None}}}
    tasks = [
        {"name": "The role's defaults", "ansible.builtin.include_vars": str(REPO / "roles/env_script/defaults/main.yml")},
        {"name": "The node's facts", "ansible.builtin.set_fact": {
            "gpufleet_rdma": rdma, "gpufleet_gpus": {"deepep_hca_mapping": MAPPING}}},
        {"name": "As facts", "ansible.builtin.set_fact": {"ansible_facts": {
            "gpufleet_rdma": "{{ gpufleet_rdma }}", "gpufleet_gpus": "{{ gpufleet_gpus }}"}}},
        {"name": "Render", "ansible.builtin.set_fact": {
            "decided": "{{ lookup('ansible.builtin.template', '%s') | from_json }}"
                       % (REPO / "roles/env_script/templates/env.json.j2")},
         "vars": {"gpufleet_fabric": fabric}},
        dump_task("decided", out),
    ]
    run_play(tmp_path, inventory, tasks)
    return dict((name, value) for name, value, dummy in json.loads(out.read_text())["env"])


def test_efa_exports_its_gin_and_no_nvshmem_ibgda(tmp_path):
    env = rendered(tmp_path, "efa", EFA_RDMA)
    assert (env["NCCL_GIN_TYPE"], env["NCCL_SYM_GIN_KERNELS_ENABLE"], env["FI_PROVIDER"]) == ("5", "0", "efa")
    assert env["EP_NIC_NAME"] == "rdmap16s27"
    assert not [name for name in env if name.startswith("NVSHMEM_IB") or name in (
        "NVSHMEM_REMOTE_TRANSPORT", "NVSHMEM_HCA_PREFIX", "DEEP_EP_DEVICE_TO_HCA_MAPPING")], env


@pytest.mark.parametrize("fabric", ["roce", ""])
def test_mlx5_fabrics_keep_ibgda_and_export_nothing_of_efa(tmp_path, fabric):
    env = rendered(tmp_path, fabric, ROCE_RDMA)
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda" and env["NVSHMEM_IB_GID_INDEX"] == "3"
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] == MAPPING
    assert not set(env) & {"NCCL_GIN_TYPE", "NCCL_SYM_GIN_KERNELS_ENABLE", "FI_PROVIDER"}
