# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The profile object's host architectures: how each CPU architecture a GPU node may have names its artifacts, written
once, beside the GPU families (``_gpu_families.SPECS[...]["host_arch"]``: HGX boards are x86_64, Grace hosts of the
GB200/GB300 NVL72 racks aarch64).

Per architecture (``ansible_facts.architecture``; ``arm64`` is read as ``aarch64``): the directory of NVIDIA's CUDA
apt repository (``x86_64``; ``sbsa``, NVIDIA's name for Arm servers: .../compute/cuda/repos/ubuntu2404/sbsa/), of the
DOCA repository (``x86_64``; ``arm64-sbsa``: .../public/repo/doca/<version>/ubuntu24.04/arm64-sbsa/), Debian's
multiarch triplet (``x86_64-linux-gnu``, ``aarch64-linux-gnu``: where the driver's ``libcuda.so`` lies) and dpkg's
architecture (``amd64``, ``arm64``). The roles' defaults read them through the filter ``host_arch``, so a Grace node
gets the sbsa repositories without a profile spelling them.

Read by controller code alone; pure logic, standard library only.
"""

from __future__ import annotations

__all__ = ["HOST_ARCHES", "ALIASES", "HostArchError", "host_arch", "normalize"]

HOST_ARCHES = {
    "x86_64": {"cuda_repo": "x86_64", "doca_repo": "x86_64", "multiarch": "x86_64-linux-gnu", "deb": "amd64"},
    "aarch64": {"cuda_repo": "sbsa", "doca_repo": "arm64-sbsa", "multiarch": "aarch64-linux-gnu", "deb": "arm64"},
}
ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}
SETTINGS = ("cuda_repo", "doca_repo", "multiarch", "deb")


class HostArchError(ValueError):
    """An architecture or setting the collection does not know, named with the ones it does."""


def normalize(arch):
    """``aarch64`` for ``arm64``, ``x86_64`` for ``amd64``; HostArchError for another."""
    name = ALIASES.get(arch, arch) if isinstance(arch, str) else arch
    if name not in HOST_ARCHES:
        raise HostArchError("host architecture %r is not one the collection knows; expected one of %s (the node's "
                            "ansible_facts.architecture)" % (arch, ", ".join(sorted(HOST_ARCHES))))
    return name


def host_arch(arch, setting):
    """Setting ``setting`` (``cuda_repo``, ``doca_repo``, ``multiarch``, ``deb``) of architecture ``arch``."""
    if setting not in SETTINGS:
        raise HostArchError("setting %r is not one of %s" % (setting, ", ".join(SETTINGS)))
    return HOST_ARCHES[normalize(arch)][setting]
