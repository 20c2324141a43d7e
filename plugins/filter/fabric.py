# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.fabric``: one setting of the scale-out fabric a profile declares (``gpufleet_fabric``).

The fabrics and what each needs (the NIC driver the preflight requires, whether rdma-core's mlx5 direct verbs are
needed, the NCCL floor of its GIN, the variables the env script exports, the backends it refuses) are
``plugin_utils/_fabrics.py``'s, written once; the roles' defaults read them with this filter.

Documentation: ``fabric.yml`` beside this file (``ansible-doc -t filter gpufleet.deepep.fabric``).
"""

from __future__ import annotations

import copy

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS, FabricError, fabric as fabric_of
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters

_NO_DEFAULT = object()
SETTINGS = ("title", "rdma_transport", "nccl_networks", "ibgda", "gin", "gin_gpu", "kernel_module", "mlx5dv", "nccl_min",
            "env", "refuses", "stack_min")


def fabric(name, setting, default=_NO_DEFAULT):
    """Setting ``setting`` of fabric ``name``; ``default`` where no fabric is declared (None or empty: a profile of NVLink
    only, or one that predates the declaration). An unknown fabric or setting is refused naming it and the known
    ones."""
    if setting not in SETTINGS:
        raise AnsibleFilterError("fabric: setting %r is not one of %s" % (setting, ", ".join(SETTINGS)))
    if name is None or name == "":
        if default is _NO_DEFAULT:
            raise AnsibleFilterError("fabric: no fabric declared (gpufleet_fabric is empty) and no default given for %r"
                                     % (setting,))
        return default
    if not isinstance(name, str):
        raise AnsibleFilterError("fabric: %r is a %s, not a fabric name (gpufleet_fabric: one of %s)"
                                 % (name, type(name).__name__, ", ".join(sorted(FABRICS))))
    try:
        return copy.deepcopy(fabric_of(name)[setting])
    except FabricError as exc:
        raise AnsibleFilterError("fabric: %s" % exc) from exc


class FilterModule:
    """One setting of a scale-out fabric."""

    def filters(self):
        return guard_filters({"fabric": fabric})
