# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.serves_ep_low_latency``: whether a node serves SGLang with DeepEP's low-latency kernels
(the decode path), from its SGLang settings - the sglang role's ``sglang_server`` and, where the node is in the
serving role's prefill or decode group, that instance's settings (``sglang_serve_prefill`` / ``sglang_serve_decode``).
The verify roles' low-latency stages default to it (``verify_intranode_low_latency``, ``verify_internode_low_latency``),
so the one decision lives here and not in each role's Jinja.

Documentation: ``serves_ep_low_latency.yml`` beside this file (``ansible-doc -t filter
gpufleet.deepep.serves_ep_low_latency``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve.inputs import INSTANCE_DEFAULTS, ROLES

# The deepep modes that run DeepEP's low-latency kernels: SGLang's auto runs them for decode batches.
LOW_LATENCY_MODES = ("low_latency", "auto")


def _uses_low_latency(server, where):
    if server is None:
        return False
    if not isinstance(server, Mapping):
        raise AnsibleFilterError("serves_ep_low_latency: %s is %r, not a mapping of server settings (expected e.g. "
                                 "{moe_a2a_backend: deepep, deepep_mode: low_latency})" % (where, server))
    backend = server.get("moe_a2a_backend", INSTANCE_DEFAULTS["moe_a2a_backend"])
    return backend == "deepep" and server.get("deepep_mode", INSTANCE_DEFAULTS["deepep_mode"]) in LOW_LATENCY_MODES


def serves_ep_low_latency(node_vars):
    """True where the node's SGLang runs DeepEP's low-latency kernels: ``sglang_server``, or the serving role's
    instance of a group the node is in (``sglang_serve_<role>_group``, default ``sglang_<role>``), says
    ``moe_a2a_backend: deepep`` with ``deepep_mode`` low_latency or auto. ``node_vars`` is the node's variables
    (``hostvars[inventory_hostname]``)."""
    if not isinstance(node_vars, Mapping):
        raise AnsibleFilterError("serves_ep_low_latency: expected the node's variables (hostvars[inventory_hostname]), "
                                 "got %s" % type(node_vars).__name__)
    groups = node_vars.get("group_names") or []
    found = _uses_low_latency(node_vars.get("sglang_server"), "sglang_server")
    for role in ROLES:
        group = node_vars.get("sglang_serve_%s_group" % role) or "sglang_%s" % role
        if group in groups:
            found = _uses_low_latency(node_vars.get("sglang_serve_%s" % role), "sglang_serve_%s" % role) or found
    return found


class FilterModule:
    """Whether a node serves SGLang with DeepEP's low-latency kernels."""

    def filters(self):
        return guard_filters({"serves_ep_low_latency": serves_ep_low_latency})
