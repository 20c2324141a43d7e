# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter ``gpufleet.deepep.host_arch``: how a node's CPU architecture names its artifacts (``plugin_utils/_host_arch.py``).

Documentation: ``host_arch.yml`` beside this file (``ansible-doc -t filter gpufleet.deepep.host_arch``).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._host_arch import HostArchError, host_arch as _host_arch


def host_arch(arch, setting):
    """Setting ``setting`` of architecture ``arch`` (``x86_64``, ``aarch64``; ``amd64``, ``arm64`` read as them)."""
    try:
        return _host_arch(arch, setting)
    except HostArchError as exc:
        raise AnsibleFilterError("host_arch: %s" % exc) from exc


class FilterModule:
    """How a node's CPU architecture names its artifacts."""

    def filters(self):
        return guard_filters({"host_arch": host_arch})
