# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters ``gpufleet.deepep.transport_truth`` and ``gpufleet.deepep.transport_gate``: what NVSHMEM, NCCL and
DeepEP really brought up, read from their debug output, and its gate against a profile's transport policy.

Documentation: ``transport_truth.yml`` and ``transport_gate.yml`` beside this file
(``ansible-doc -t filter gpufleet.deepep.transport_truth``). The logic lives in
``plugins/plugin_utils/_verify/transport.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport import (
    TransportInputError,
    transport_gate as _transport_gate,
    transport_truth as _transport_truth,
)


def transport_truth(output):
    """Parse NVSHMEM/NCCL/DeepEP debug output into the transports that really came up."""
    try:
        return _transport_truth(output)
    except TransportInputError as exc:
        raise AnsibleFilterError("transport_truth: %s" % exc) from exc


def transport_gate(truth, policy=None):
    """Hold a transport_truth result (or the raw output) against a profile's transport policy."""
    try:
        return _transport_gate(truth, policy)
    except TransportInputError as exc:
        raise AnsibleFilterError("transport_gate: %s" % exc) from exc


class FilterModule:
    """Transport truth and its gate."""

    def filters(self):
        return guard_filters({"transport_truth": transport_truth, "transport_gate": transport_gate})
