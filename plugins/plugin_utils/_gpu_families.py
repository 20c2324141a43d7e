# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPU families a profile may name (``FAMILIES``: family -> CUDA compute capability), the notations the roles
spell a capability in (``torch_arch``, ``cmake_arch``) and ``family_of``, the family token of a profile name.

The verify roles pick a bandwidth gate by a family token of the profile (``gcp_b200`` -> ``b200``). A profile that
names a family its gate table has no entry for must be refused, not gated by the loose ``default`` entry: that
needs to know which tokens are GPU families, so the families are written down here once, as data. The compute
capability comes with each family because the build roles need it in two spellings: ``deepep_arch_list``,
``nccl_cuda_arch_list`` and ``preflight_expected_cuda_arch`` take PyTorch's ``10.0``; ``nvshmem_cuda_arch`` takes
CMake's ``100``. A profile declares its family once (``gpufleet_gpu_family``) and the roles' defaults derive those
settings from it with the filter ``gpu_arch`` (plugins/filter/gpu_arch.py); the verify roles choose its gate by it.

Shared by controller code (``_thresholds``, the verify filters) and node-side modules (``_settings``), so it lives
in module_utils. Pure logic, standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import torch_to_cmake_arch

__all__ = ["FAMILIES", "profile_tokens", "family_of", "compute_capability", "torch_arch", "cmake_arch"]

# Family -> CUDA compute capability, in PyTorch's notation (major.minor). Sources:
#   a100, a800 8.0; h100, h800, h200 9.0; b200, gb200 10.0; b300, gb300 10.3: the PCI device table of
#   module_utils/_pci.py (GPU_DEVICE_IDS; a unit test holds the two tables together); B300/GB300 as SM 10.3 also in
#   shared/reference/field-2026-11-29.md ("B300/GB300 are SM 10.3") and field-2026-11.md ("10.0/10.3 missing from the
#   arch list"); a100 8.0, h100/h200 9.0, b200 10.0 as the example inventories built them (group_vars a100.yml,
#   h100.yml, h200.yml, b200_*.yml spelt deepep_arch_list, nvshmem_cuda_arch and preflight_expected_cuda_arch
#   until they declared gpufleet_gpu_family; tests/unit/test_gpu_arch.py holds the derived values to those).
#   h20 9.0: a Hopper part (NVIDIA's CUDA GPU compute capability table); no capture of one here.
# A family that shares a capability with another does not share its speed (the H800's and H20's NVLink is capped),
# so each one is a family of its own, and a gate table must name it to gate it.
FAMILIES = {
    "a100": "8.0",
    "a800": "8.0",
    "h100": "9.0",
    "h800": "9.0",
    "h200": "9.0",
    "h20": "9.0",
    "b200": "10.0",
    "gb200": "10.0",
    "b300": "10.3",
    "gb300": "10.3",
}

# What separates the words of a profile name: gcp_b200, b200-cuda13, b200.site, "NVIDIA H200" (nvidia-smi's name).
_SEPARATORS = re.compile(r"[_\-.\s]+")


def profile_tokens(profile):
    """The lower-case words of a profile name, split on ``_``, ``-``, ``.`` and white space (``[]`` for none).

    The one token rule of the collection: a thresholds table or a transport policy matches a profile by one of these
    words, and ``family_of`` finds the family among them, so the two can never disagree about a name."""
    if not isinstance(profile, str):
        return []
    return [token for token in _SEPARATORS.split(profile.lower()) if token]


def family_of(profile):
    """The GPU family the profile name carries as a token (``gcp_b300`` -> ``b300``, ``gb200_nvl72`` -> ``gb200``),
    the first one when it carries several; None when it names none (``mycluster``, ``default``)."""
    return next((token for token in profile_tokens(profile) if token in FAMILIES), None)


def compute_capability(family):
    """The compute capability of ``family`` (``"10.3"``); ValueError naming the known families otherwise."""
    if family not in FAMILIES:
        raise ValueError("%r is no GPU family the collection knows; expected one of %s"
                         % (family, ", ".join(sorted(FAMILIES))))
    return FAMILIES[family]


def torch_arch(family):
    """The family's arch as PyTorch writes it (``10.0``): deepep_arch_list, nccl_cuda_arch_list, and one item of
    preflight_expected_cuda_arch."""
    return compute_capability(family)


def cmake_arch(family):
    """The family's arch as CMake writes it (``100``, ``103``, ``90``): nvshmem_cuda_arch."""
    return torch_to_cmake_arch(compute_capability(family))
