# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters ``gpufleet.deepep.transport_truth`` and ``gpufleet.deepep.transport_gate``: what NVSHMEM, NCCL and
DeepEP really brought up, read from their debug output, and its gate against a profile's transport policy.

Also ``transport_policy`` (the policy a backend's run in a scope is held to, the site's entry for a profile merged
over the backend's descriptor) and ``transport_verdict`` (truth, gate and a one-line
brief for a verification record). Documentation: the ``transport_*.yml`` files beside this file
(``ansible-doc -t filter gpufleet.deepep.transport_truth``). The logic lives in
``plugins/plugin_utils/_verify/transport.py``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import (
    ALIASES,
    BACKENDS,
    BackendError,
    transport_policy as select_transport_policy,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport import (
    TransportInputError,
    transport_truth as _transport_truth,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import (
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


def transport_policy(table, profile=None, backend=None, scope="intranode", family=None):
    """The transport policy a backend's run in a scope is held to, with the site's entry for the profile merged."""
    try:
        if not backend:
            raise BackendError("backend is not given; expected one of %s (a policy belongs to a backend and a scope)"
                               % ", ".join(sorted(BACKENDS) + sorted(ALIASES)))
        return select_transport_policy(backend, scope, table, profile=profile, family=family)
    except (TransportInputError, BackendError) as exc:
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
