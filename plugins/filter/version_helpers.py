# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Version filters for playbooks: CUDA tags, the PyTorch wheel index, what an NVSHMEM version needs of rdma-core.

Each filter is documented in ``<filter name>.yml`` beside this file. The logic lives in
``plugins/module_utils/_versions.py`` and ``plugins/module_utils/_comm/nvshmem_rdma.py`` so modules use the same
rules.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import (
    NvshmemRdmaError,
    mlx5dv_verdict as _mlx5dv_verdict,
    nvshmem_rdma_needs as _nvshmem_rdma_needs,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    PYTORCH_INDEX,
    VersionError,
    cuda_tag as _cuda_tag,
    torch_index_url as _torch_index_url,
)


def cuda_tag(cuda_version):
    """``13.0.88`` -> ``cu130``."""
    try:
        return _cuda_tag(cuda_version)
    except VersionError as exc:
        raise AnsibleFilterError("cuda_tag: %s" % exc) from exc


def torch_index_url(cuda_version, base=PYTORCH_INDEX, nightly=False, allow_http=False):
    """``13.0`` -> ``https://download.pytorch.org/whl/cu130``; a plain-http ``base`` only with ``allow_http``."""
    if not isinstance(nightly, bool):
        raise AnsibleFilterError("torch_index_url: nightly must be a boolean, got %r" % (nightly,))
    try:
        return _torch_index_url(cuda_version, base=base, nightly=nightly, allow_http=allow_http)
    except VersionError as exc:
        raise AnsibleFilterError("torch_index_url: %s" % exc) from exc


def nvshmem_rdma_needs(nvshmem_version):
    """``3.4.5-0`` -> what that NVSHMEM needs of rdma-core (header, symbols, libmlx5 versions, reason)."""
    try:
        return _nvshmem_rdma_needs(nvshmem_version)
    except NvshmemRdmaError as exc:
        raise AnsibleFilterError("nvshmem_rdma_needs: %s" % exc) from exc


def mlx5dv_verdict(header, nvshmem_version):
    """node_stack's facts of one header ({present, symbols}) judged for NVSHMEM ``nvshmem_version``."""
    try:
        return _mlx5dv_verdict(header, nvshmem_version)
    except NvshmemRdmaError as exc:
        raise AnsibleFilterError("mlx5dv_verdict: %s" % exc) from exc


class FilterModule:
    """Version helpers."""

    def filters(self):
        return guard_filters({
            "cuda_tag": cuda_tag,
            "torch_index_url": torch_index_url,
            "nvshmem_rdma_needs": nvshmem_rdma_needs,
            "mlx5dv_verdict": mlx5dv_verdict,
        })
