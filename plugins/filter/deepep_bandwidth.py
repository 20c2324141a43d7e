# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.deepep_bandwidth``: DeepEP test output -> bandwidth data.

Documentation: ``deepep_bandwidth.yml`` beside this file (``ansible-doc -t filter gpufleet.deepep.deepep_bandwidth``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import (
    BandwidthInputError,
    parse_output,
)


def deepep_bandwidth(output, test=None, generation=None):
    """Parse the output of a DeepEP test (V1 intranode/internode/low-latency, V2 elastic test_ep)."""
    try:
        return parse_output(output, test=test, generation=generation)
    except BandwidthInputError as exc:
        raise AnsibleFilterError("deepep_bandwidth: %s" % exc) from exc


class FilterModule:
    """DeepEP test output parsing."""

    def filters(self):
        return guard_filters({"deepep_bandwidth": deepep_bandwidth})
