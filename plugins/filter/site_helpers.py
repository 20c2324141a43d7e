# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of playbooks/site.yml; each is documented in ``<filter name>.yml`` beside this file. The logic lives in
``plugins/plugin_utils/_site_plan.py`` (with the site_plan action's)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._site_plan import SitePlanError, play_hosts


def site_play_hosts(groups):
    """The hosts of site.yml's converge play: steady nodes, then changing ones without an image, in inventory order."""
    try:
        return play_hosts(groups)
    except SitePlanError as exc:
        raise AnsibleFilterError("site_play_hosts: %s" % exc) from exc


class FilterModule:
    """Filters of site.yml."""

    def filters(self):
        return guard_filters({"site_play_hosts": site_play_hosts})
