# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Build once, distribute: which host of a batch builds (or publishes) each build key.

``build_leaders`` is documented in ``build_leaders.yml`` beside this file. The role ``build_once`` (fed by
``nvshmem`` and ``deepep``) gives it one record per host of the current batch, in batch order, and build (or publish) only
on the host it names for the record's key; every other host of that key installs from the artifact store.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters

_KEY_RE = re.compile(r"^[0-9a-f]{8,}$")


def build_leaders(records, want="want"):
    """``{key: host}``: per build key, the first host (in record order) that wants it and whose key is not stored.

    ``records`` is a list of mappings with ``host``, ``key``, ``stored`` (the artifact store holds the key)
    and the flag named by ``want`` (this host needs the key built, or has it to publish). Records without
    a key (a host that skipped the phase) are ignored.
    """
    if not isinstance(records, (list, tuple)):
        raise AnsibleFilterError("build_leaders: expected a list of host records, got %s" % type(records).__name__)
    if not isinstance(want, str) or not want:
        raise AnsibleFilterError("build_leaders: want must name a flag of the records, got %r" % (want,))
    leaders = {}
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise AnsibleFilterError("build_leaders: record %d is a %s, expected a mapping with host, key, stored and %s"
                                     % (index, type(record).__name__, want))
        key = record.get("key")
        if not key:
            continue
        key = str(key)
        if not _KEY_RE.fullmatch(key):
            raise AnsibleFilterError("build_leaders: record %d has key %r, expected a hex build key" % (index, key))
        host = record.get("host")
        if not host:
            raise AnsibleFilterError("build_leaders: record %d (key %s) names no host" % (index, key[:8]))
        if key in leaders or record.get("stored") or not record.get(want):
            continue
        leaders[key] = str(host)
    return leaders


class FilterModule(object):
    def filters(self):
        return guard_filters({"build_leaders": build_leaders})
