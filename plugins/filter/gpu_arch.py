# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.gpu_arch``: the CUDA arch of a GPU family in the notation a role's setting takes.

A profile declares its GPU family once (``gpufleet_gpu_family: b200``); the roles derive their arch settings from it
in their defaults (``preflight_expected_cuda_arch``, ``deepep_arch_list``: PyTorch's ``10.0``; ``nvshmem_cuda_arch``:
CMake's ``100``), so the arch is written nowhere else and its notations cannot disagree. The families and their
compute capabilities are ``plugin_utils/_gpu_families.py``'s.

Documentation: ``gpu_arch.yml`` beside this file (``ansible-doc -t filter gpufleet.deepep.gpu_arch``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import cmake_arch, torch_arch

# Notation -> how the family's compute capability is spelt in it.
NOTATIONS = {"torch": torch_arch, "cmake": cmake_arch}


def gpu_arch(family, notation, as_list=False):
    """The arch of ``family`` in ``notation`` (``torch``: ``10.0``, ``cmake``: ``100``); ``as_list`` wraps it in a
    list (``["10.0"]``). No family declared (None or empty) gives ``""`` (``[]``): the roles then read the GPUs."""
    if notation not in NOTATIONS:
        raise AnsibleFilterError("gpu_arch: notation %r is not one of %s" % (notation, ", ".join(NOTATIONS)))
    if not isinstance(as_list, bool):
        raise AnsibleFilterError("gpu_arch: as_list must be true or false; got %r" % (as_list,))
    if family is None or family == "":
        return [] if as_list else ""
    if not isinstance(family, str):
        raise AnsibleFilterError("gpu_arch: GPU family %r is a %s, not a family name (gpufleet_gpu_family: b200, "
                                 "h100, ...)" % (family, type(family).__name__))
    try:
        arch = NOTATIONS[notation](family)
    except ValueError as exc:
        raise AnsibleFilterError("gpu_arch: %s (gpufleet_gpu_family names the profile's family; leave it empty to "
                                 "declare none)" % exc) from exc
    return [arch] if as_list else arch


class FilterModule:
    """The arch of a GPU family."""

    def filters(self):
        return guard_filters({"gpu_arch": gpu_arch})
