# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.nvlink_spans_hosts``: whether a GPU family's NVLink domain spans hosts (GB200/GB300 NVL72
trays), from the GPU profile object (``plugin_utils/_gpu_families.spans_hosts``, which the audit's expression function
``family_spans_hosts`` reads too, so the roles and the rules decide alike).

Documentation: ``nvlink_spans_hosts.yml`` beside this file (``ansible-doc -t filter gpufleet.deepep.nvlink_spans_hosts``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import SPECS, spans_hosts


def nvlink_spans_hosts(family):
    """True where ``family``'s NVLink domain spans hosts; false for the other families and for none declared (None or
    empty). An unknown family is refused naming the known ones."""
    if family is None or family == "":
        return False
    if not isinstance(family, str) or family not in SPECS:
        raise AnsibleFilterError("nvlink_spans_hosts: GPU family %r is not one of %s (gpufleet_gpu_family names the "
                                 "profile's family; leave it empty to declare none)"
                                 % (family, ", ".join(sorted(SPECS))))
    return spans_hosts(family)


class FilterModule:
    """Whether a GPU family's NVLink domain spans hosts."""

    def filters(self):
        return guard_filters({"nvlink_spans_hosts": nvlink_spans_hosts})
