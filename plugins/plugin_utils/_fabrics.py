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

Per fabric besides: ``gin_gpu``, the GPU-initiated GIN type it offers (a backend policy's ``GDAKI`` stands for it:
GDAKI on mlx5, EFA-GDA on EFA); ``kernel_module``, the NIC driver the preflight requires; ``mlx5dv``, whether builds
and GIN need rdma-core's mlx5 direct verbs; ``nccl_min``, the first NCCL whose GIN runs on it (None: any the
backends accept); ``env``, the variables the env script exports for it (``[name, value, why]``); ``refuses``, the
backends that cannot run across nodes on it, each with the reason (refused by the preflight before anything builds,
and by the verify roles before a test runs); ``test_args``, the arguments a backend's test of a scope needs on it
(backend -> scope -> argv, put before the caller's own: EFA's ``--num-sms`` for DeepEP V2); ``stack_min``, the
floors of the fabric's own software (EFA: the EFA installer, libfabric, aws-ofi-nccl, the efa kernel module; the efa
role installs and holds them).

EFA (AWS P5/P5en/P6): the RDMA devices are ``rdmap<bus>s<slot>``, driver ``efa``, port link layer ``Unknown``
(the kernel's IB_LINK_LAYER_UNSPECIFIED). NCCL reaches them through the aws-ofi-nccl plugin, which NCCL names
``Libfabric`` ("Using network Libfabric"; aws-ofi-nccl src/nccl_ofi_net.cpp logs "NET/OFI Selected provider is efa").
GIN over EFA is NCCL 2.31.2's EFA-GDA (GIN type 5, release notes: "Adds the EFA GDA backend for GIN ... contributed
by the AWS EFA team"; aws-ofi-nccl >= 1.21.0 with libfabric >= 2.6.0, EFA installer >= 1.50.0 (aws-ofi-nccl #1369);
its doc/gin-getting-started.md: ``NCCL_GIN_TYPE=5`` "otherwise NCCL 2.31 defaults to proxy for EFA", and
``NCCL_SYM_GIN_KERNELS_ENABLE=0``, symmetric GIN kernels "not currently supported for EFA-GDA"). DeepEP V1 needs
NVSHMEM's IBGDA, which drives mlx5 NICs only (DeepEP #759: "mlx5dv_open_device(...) -> FAIL (not an mlx5 device)";
#369; NCCL's own GDAKI is mlx5-only too), so V1 across EFA nodes is refused.

Read by controller code alone; pure logic, standard library only.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["FABRICS", "FabricError", "fabric", "refusal", "nccl_floor", "test_args"]

_MLX5 = {"nccl_networks": ["IB"], "ibgda": True, "gin": ["GDAKI", "PROXY"], "gin_gpu": "GDAKI",
         "kernel_module": "mlx5_core", "mlx5dv": True, "nccl_min": None, "env": [], "refuses": {}, "stack_min": {},
         "test_args": {}}
_V1_NEEDS_IBGDA = ("DeepEP V1 runs across nodes over NVSHMEM's IBGDA, which drives mlx5 NICs only (DeepEP #759: "
                   "\"mlx5dv_open_device(...) -> FAIL (not an mlx5 device)\"; #369); run DeepEP V2 over NCCL GIN "
                   "(EFA-GDA, NCCL >= 2.31.2) on EFA")
FABRICS = {
    "infiniband": dict(_MLX5, title="InfiniBand", rdma_transport="infiniband"),
    "roce": dict(_MLX5, title="RoCE (RDMA over Converged Ethernet)", rdma_transport="roce"),
    "efa": {
        "title": "AWS EFA (Elastic Fabric Adapter)",
        "rdma_transport": "efa",
        "nccl_networks": ["Libfabric"],
        "ibgda": False,
        "gin": ["EFA_GDA", "PROXY"],
        "gin_gpu": "EFA_GDA",
        "kernel_module": "efa",
        "mlx5dv": False,
        "nccl_min": "2.31.2",
        "env": [
            ["NCCL_GIN_TYPE", "5", "EFA: GIN as EFA-GDA (NCCL 2.31 defaults to the CPU proxy on EFA; aws-ofi-nccl "
                                   "doc/gin-getting-started.md)"],
            ["NCCL_SYM_GIN_KERNELS_ENABLE", "0", "EFA: NCCL's symmetric GIN kernels are not supported over EFA-GDA"],
            ["FI_PROVIDER", "efa", "EFA: libfabric's EFA provider for aws-ofi-nccl"],
        ],
        "refuses": {"deepep_v1": _V1_NEEDS_IBGDA},
        # DeepEP V2 sizes its SM count from the NIC's rate, which it reads from ibstat for EP_NIC_NAME (dd758ca
        # deep_ep/utils/envs.py get_rdma_gbs: 0 where ibstat has no such device, as on EFA); across nodes
        # get_theoretical_num_sms then divides by it (deep_ep/buffers/elastic.py: rdma_traffic / rdma_gbs) and the
        # test dies of "float division by zero". An explicit count skips it (tests/elastic/test_ep.py: --num-sms):
        # 64, V2's own floor when it does not overlap with compute (max(num_sms, 64)).
        "test_args": {"deepep_v2": {"internode": ["--num-sms", "64"]}},
        # aws-ofi-nccl #1369 (maintainer): EFA installer 1.50.0 "provides all required versions of Libfabric,
        # rdma-core, efa driver, and aws-ofi-nccl plugin", efa.ko >= 3.3.0; aws-ofi-nccl v1.21.0's release notes: GIN
        # on EFA, with libfabric 2.6.0+ for EFA-GDA.
        "stack_min": {"efa_installer": "1.50.0", "libfabric": "2.6.0", "aws_ofi_nccl": "1.21.0", "efa_kmod": "3.3.0"},
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


def refusal(name, backend):
    """Why ``backend`` (``deepep_v1``, ``deepep_v2``, ``nccl_ep``) cannot run across nodes on fabric ``name``, or None
    (no fabric declared, or one the backend runs on). FabricError names an unknown fabric."""
    if not name:
        return None
    return fabric(name)["refuses"].get(backend)


def nccl_floor(name):
    """The first NCCL whose GIN runs on fabric ``name`` (``2.31.2`` on EFA), or None. FabricError names an unknown
    fabric."""
    if not name:
        return None
    return fabric(name)["nccl_min"]


def test_args(name, backend, scope):
    """The arguments ``backend``'s test of ``scope`` needs on fabric ``name`` (``["--num-sms", "64"]`` for DeepEP V2
    across EFA nodes), [] for none or no fabric. FabricError names an unknown fabric."""
    if not name:
        return []
    return list(fabric(name)["test_args"].get(backend, {}).get(scope, []))
