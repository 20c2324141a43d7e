# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.hca_mapping``: parse and render DEEP_EP_DEVICE_TO_HCA_MAPPING strings.

Documentation: ``hca_mapping.yml`` beside this file (``ansible-doc -t filter gpufleet.deepep.hca_mapping``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.module_utils._hca_mapping import (
    HcaMappingError,
    mapping_as_dict,
    normalize_entries,
    parse_hca_mapping,
    render_hca_mapping,
)

OUTPUTS = ("list", "dict", "string")


def hca_mapping(value, output=None):
    """Parse a mapping string or render mapping entries; see hca_mapping.yml.

    A string gives a list of {gpu, hca, port} by default; a list or dict of entries gives the string.
    output ('list', 'dict', 'string') asks for one form whatever the input.
    """
    if output is not None and output not in OUTPUTS:
        raise AnsibleFilterError(f"hca_mapping: output {output!r} is not one of {', '.join(OUTPUTS)}")
    try:
        if isinstance(value, str):
            entries = parse_hca_mapping(value)
        else:
            entries = normalize_entries(value)
    except HcaMappingError as exc:
        raise AnsibleFilterError(f"hca_mapping: {exc}") from exc
    if output is None:
        output = "list" if isinstance(value, str) else "string"
    if output == "dict":
        return mapping_as_dict(entries)
    if output == "string":
        return render_hca_mapping(entries)
    return sorted(entries, key=lambda e: e["gpu"]) if not isinstance(value, str) else entries


class FilterModule:
    """GPU-to-HCA mapping strings."""

    def filters(self):
        return guard_filters({"hca_mapping": hca_mapping})
