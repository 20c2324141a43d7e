# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The profile object's fabric: what the collection knows of each scale-out fabric a profile may declare
(``gpufleet_fabric``), written once, beside the GPU families of ``_gpu_families.py``.

A profile whose nodes talk across nodes over RDMA NICs declares the fabric's kind in one line; a profile of NVLink
only declares ``gpufleet_intranode_only: true`` instead (no fabric). Per fabric: the RDMA transport the node's
devices report (``gpufleet_rdma.transport``: the link layer of the active ports, which the audit holds against the
declaration), the NCCL networks a run across nodes may use (what the backends' policies allow across nodes), and
whether the GPU can drive its NICs (NVSHMEM IBGDA for DeepEP V1, NCCL GIN's GDAKI for V2). A backend whose policy
needs what a fabric lacks is refused by name before a test runs (``_verify/backends.transport_policy``). The 2026
platforms add their own entry here (EFA: libfabric's network, no IBGDA).

Sources: NCCL names its verbs transport ``IB`` for InfiniBand and RoCE alike (``NCCL INFO NET/IB``); NVSHMEM's IBGDA
and NCCL's GDAKI drive mlx5 NICs on either link layer (DeepEP README, "Network configurations": InfiniBand and RoCE
both supported); the link layer per port is ``/sys/class/infiniband/<dev>/ports/<n>/link_layer``.

Read by controller code alone; pure logic, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["FABRICS", "FabricError", "fabric"]

FABRICS = {
    "infiniband": {
        "title": "InfiniBand",
        "rdma_transport": "infiniband",
        "nccl_networks": ["IB"],
        "ibgda": True,
        "gin": ["GDAKI", "PROXY"],
    },
    "roce": {
        "title": "RoCE (RDMA over Converged Ethernet)",
        "rdma_transport": "roce",
        "nccl_networks": ["IB"],
        "ibgda": True,
        "gin": ["GDAKI", "PROXY"],
    },
}


class FabricError(VerifyInputError):
    """A fabric the collection does not know, named with the ones it does."""


def fabric(name):
    """The entry of fabric ``name`` with its ``name``; FabricError naming it and the known ones."""
    if name not in FABRICS:
        raise FabricError("fabric %r is not one the collection knows; expected one of %s (gpufleet_fabric), or "
                          "gpufleet_intranode_only: true for a profile of NVLink only" % (name, ", ".join(sorted(FABRICS))))
    return dict(FABRICS[name], name=name)
