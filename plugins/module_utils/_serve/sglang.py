# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""SGLang in a DeepEP-ready torch environment: versions, package names and what the node can register;
the error every part of ``sglang_env``'s logic raises.

Standard library only, Python 3.8+ (this file runs on the managed nodes).

The trap: sglang >= 0.5.19 depends on ``sgl-deep-ep``, which installs its own top-level ``deep_ep`` (built
against torch 2.14.1), so a plain ``pip install sglang`` shadows or overwrites the DeepEP the collection built
for the node's NVSHMEM/IBGDA, and may move torch and NCCL (DeepEP #710). The install therefore goes in two
steps - the sglang wheel with ``--no-deps``, then its requirements less the excluded projects - with torch,
NCCL, cuDNN and ``deep_ep`` held by the environment's pip constraints, and every result is proved from the
environment's own metadata afterwards (``sglang_install.moved``). The other parts: ``sglang_probe`` (what the
environment holds), ``sglang_install`` (holds, requirements, wheelhouse), ``sglang_request`` (the request's shapes,
hash-checked installs); ``model`` reads model directories.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import normalize_project_name

__all__ = [
    "SglangError",
    "PROJECT_NAME_RE",
    "normalize",
    "version_tuple",
    "version_lt",
    "kernel_package_for",
    "torch_cuda",
    "nixl_package_for",
    "dmabuf_capable",
    "transfer_engine_check",
]

KERNEL_RENAMED_AT = (0, 5, 15)

_VERSION_RE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
PROJECT_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_TORCH_CUDA_RE = re.compile(r"\+cu(\d{2,3})$")


class SglangError(Exception):
    """A value the SGLang logic cannot accept; the message names it and the expected form."""


def normalize(name):
    """PEP 503 project name: ``Flashinfer_Python`` -> ``flashinfer-python`` (``_versions.normalize_project_name``)."""
    return normalize_project_name(name)


def version_tuple(value):
    """The numeric release of a version string (``0.5.19.post1`` -> ``(0, 5, 19)``); SglangError otherwise."""
    match = _VERSION_RE.match(str(value or ""))
    if not match:
        raise SglangError("version %r is not a release such as 0.5.19" % (value,))
    return tuple(int(p) for p in match.group(1).split("."))


def version_lt(left, right):
    a, b = list(version_tuple(left)), list(version_tuple(right))
    width = max(len(a), len(b))
    return a + [0] * (width - len(a)) < b + [0] * (width - len(b))


def kernel_package_for(sglang_version):
    """``sgl-kernel`` before sglang 0.5.15, ``sglang-kernel`` from it on (the package was renamed)."""
    return "sgl-kernel" if version_tuple(sglang_version) < KERNEL_RENAMED_AT else "sglang-kernel"


def torch_cuda(torch_version, version_py_text=None):
    """The CUDA release torch was built for: ``2.9.1+cu129`` -> ``12.9``; ``torch/version.py``'s ``cuda`` as a
    fallback; None for a CPU build."""
    match = _TORCH_CUDA_RE.search(str(torch_version or ""))
    if match:
        digits = match.group(1)
        return "%s.%s" % (digits[:-1], digits[-1])
    if version_py_text:
        found = re.search(r"^cuda\s*(?::\s*\w+)?\s*=\s*['\"](\d+\.\d+)", version_py_text, re.M)
        if found:
            return found.group(1)
    return None


def nixl_package_for(cuda_release):
    """The NIXL build for a CUDA release (``12.9`` -> ``nixl-cu12``), not the ``nixl`` meta package (which pulls
    both builds)."""
    major = str(cuda_release or "").split(".", 1)[0]
    if major not in ("12", "13"):
        raise SglangError("CUDA %r has no NIXL build; expected a CUDA 12.x or 13.x release such as 12.9"
                          % (cuda_release,))
    return "nixl-cu%s" % major


def dmabuf_capable(kernel_release, open_kernel_module):
    """DMA-BUF registration of GPU memory: the NVIDIA open kernel module on Linux >= 5.12."""
    try:
        release = version_tuple(kernel_release)
    except SglangError:
        return False
    return bool(open_kernel_module) and release >= (5, 12)


def transfer_engine_check(engine, peermem_loaded, dmabuf, mooncake_dmabuf):
    """None when ``engine`` can register GPU memory on this node, else the refusal (naming the fix)."""
    if engine != "mooncake":
        return None
    if peermem_loaded:
        return None
    if dmabuf and mooncake_dmabuf:
        return None
    why = ("nvidia_peermem is not loaded (with the NVIDIA open kernel module it does not load: 'could not insert "
           "nvidia_peermem: Invalid argument')")
    if dmabuf and not mooncake_dmabuf:
        why += " and this Mooncake build is not set to register through DMA-BUF (sglang_mooncake_dmabuf)"
    elif not dmabuf:
        why += " and DMA-BUF registration is not available (needs the open kernel module on Linux >= 5.12)"
    return ("Mooncake cannot register GPU memory here: %s; RDMA transfers fail with 'RdmaTransport: Failed to "
            "register memory'. Use NIXL (sglang_transfer_engine: nixl, launch with --disaggregation-transfer-backend "
            "nixl), which registers through DMA-BUF." % why)
