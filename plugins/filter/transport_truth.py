# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters ``gpufleet.deepep.transport_truth`` and ``gpufleet.deepep.transport_gate``: what NVSHMEM, NCCL and
DeepEP really brought up, read from their debug output, and its gate against a profile's transport policy.

Also ``transport_policy`` (a profile's policy out of a table) and ``transport_verdict`` (truth, gate and a one-line
brief for a verification record). Documentation: the ``transport_*.yml`` files beside this file
(``ansible-doc -t filter gpufleet.deepep.transport_truth``). The logic lives in
``plugins/plugin_utils/_verify/transport.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport import (
    TransportInputError,
    transport_truth as _transport_truth,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import (
    select_transport_policy,
    transport_gate as _transport_gate,
    transport_verdict as _transport_verdict,
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


def transport_policy(table, profile=None, generation=None):
    """The transport policy of a profile (exact name, family token, default), merged for a DeepEP generation."""
    try:
        return select_transport_policy(table, profile, generation)
    except TransportInputError as exc:
        raise AnsibleFilterError("transport_policy: %s" % exc) from exc


def transport_verdict(output, policy=None):
    """A run's output as the transport part of a verification record: truth, gate, one-line brief, policy."""
    try:
        return _transport_verdict(output, policy)
    except TransportInputError as exc:
        raise AnsibleFilterError("transport_verdict: %s" % exc) from exc


class FilterModule:
    """Transport truth and its gate."""

    def filters(self):
        return guard_filters({"transport_truth": transport_truth, "transport_gate": transport_gate,
                             "transport_policy": transport_policy, "transport_verdict": transport_verdict})
