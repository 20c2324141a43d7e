#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: site_state
short_description: Record and check the converged state of a node (the fast path of site.yml)
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - With O(state=record), writes the node's converged stamp O(path) atomically, with the settings key O(key) the
    node converged with and a fingerprint of every path in O(watch) and every Debian package in
    O(packages). C(playbooks/site.yml) records it at the end of a full converge, with the paths and packages
    its phases manage.
  - With O(state=check), reads the stamp and fingerprints the same paths and packages again, in one pass,
    without importing anything heavy. RV(intact) is true only when the stamp's key equals O(key) and every
    fingerprint still matches; RV(drift) names each difference. C(playbooks/site.yml) skips the phases on
    an intact node and sends every other node through all of them, which corrects the drift.
  - "Fingerprints: a missing path; a symlink's target text; a regular file's size and sha256 (size and
    mtime above O(hash_limit)); a directory's entry names (not recursive, C(__pycache__) and C(*.pyc) left
    out); a glob pattern's matches, each fingerprinted. Files of C(/proc) and C(/sys) are read whatever
    size they report."
  - A check never writes. A record writes only when the key or a fingerprint differs from the stamp there
    (the record time alone is not a reason to write).
options:
  path:
    description:
      - The stamp file. Its directory is created (mode C(0755)) when missing; the file is written with mode
        C(0644).
      - With O(state=record), a path that is a symlink or a directory, or whose parent exists as a file, is refused
        naming it (in check mode too); the stamp is never written over or through a link.
    type: path
    default: /var/lib/gpufleet-site-converged.json
  key:
    description:
      - The settings key of the converge (site.yml hashes the phases' variables and the collection's
        content). 1 to 128 characters of C([0-9A-Za-z._-]).
    type: str
    required: true
  state:
    description:
      - C(check) reports whether the node is as its last full converge left it; C(record) writes the stamp.
    type: str
    choices: [check, record]
    default: check
  watch:
    description:
      - With O(state=record), the absolute paths (or glob patterns) to fingerprint. Ignored with
        O(state=check), which fingerprints what the stamp recorded.
    type: list
    elements: str
    default: []
  packages:
    description:
      - With O(state=record), the Debian packages whose installed version is part of the state (a package
        that is not installed is recorded as such). Ignored with O(state=check).
      - When packages are recorded (or the stamp records some), a O(dpkg_status) that is missing or cannot be read
        fails the task naming the file; nothing is recorded as not installed from a file that could not be read.
    type: list
    elements: str
    default: []
  hash_limit:
    description:
      - Files larger than this many bytes are fingerprinted by size and mtime instead of their sha256.
    type: int
    default: 8388608
  dpkg_status:
    description:
      - dpkg's status file, where package versions are read.
    type: path
    default: /var/lib/dpkg/status
notes:
  - Supports check mode; with O(state=record) nothing is written and C(changed) says whether it would be.
  - The fingerprint covers what the phases write, not everything on the node; C(-e gpufleet_site_fast=false)
    runs every phase on every node whatever the stamp says, and the audit playbook reads the whole stack.
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Is the node as its last full converge left it?
  gpufleet.deepep.site_state:
    key: "{{ ansible_facts.gpufleet_site_key }}"
  register: site_state

- name: Record the converged state
  gpufleet.deepep.site_state:
    key: "{{ ansible_facts.gpufleet_site_key }}"
    state: record
    watch:
      - /usr/local/cuda
      - /opt/deepep/unified-env.sh
      - /opt/deepep/nvshmem/lib/libnvshmem_host.so*
    packages: [cuda-toolkit-12-9, doca-ofed]
"""

RETURN = r"""
steady:
  description: The stamp's key equals O(key) (the node converged last with these settings and this collection).
  returned: always
  type: bool
intact:
  description: Steady, and every recorded fingerprint still matches (after a record, always true).
  returned: always
  type: bool
drift:
  description: Each difference between the stamp and the node, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["/opt/deepep/unified-env.sh: content changed (file of 1290 bytes, was 1311 bytes)"]
reason:
  description: One sentence on the outcome.
  returned: always
  type: str
recorded_at:
  description: When the stamp was recorded (UTC, ISO 8601), or null without a stamp.
  returned: always
  type: str
watched:
  description: How many paths (glob matches counted) and packages the stamp covers.
  returned: always
  type: int
path:
  description: The stamp file.
  returned: always
  type: str
"""

import datetime
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded

KEY_RE = re.compile(r"^[0-9A-Za-z._-]{1,128}$")


def run(module):
    p = module.params
    if not KEY_RE.fullmatch(p["key"]):
        module.fail_json(msg="key %r is not a settings key (expected 1 to 128 characters of [0-9A-Za-z._-], "
                             "such as a sha256 hex digest)" % p["key"])
    if p["hash_limit"] < 0:
        module.fail_json(msg="hash_limit %r is negative (expected a number of bytes, 0 or more)" % p["hash_limit"])
    result = {"changed": False, "path": p["path"]}
    try:
        if p["state"] == "check":
            result.update(ss.check(p["path"], p["key"], p["hash_limit"], p["dpkg_status"]))
            return result
        # Where the stamp cannot go (a symlink, a directory, a parent that is a file) is refused before anything is
        # read or written, in check mode too, so a check run predicts the refusal a real record would give.
        problem = ss.stamp_target_problem(p["path"])
        if problem:
            raise ss.SiteStateError(problem)
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
        content = ss.record_content(p["key"], p["watch"], p["packages"], now, p["hash_limit"], p["dpkg_status"])
        old, dummy = ss.read_stamp(p["path"])
        result.update(steady=True, intact=True, drift=[], recorded_at=now, watched=ss.watched_count(content))
        if ss.same_record(old, content):
            result.update(recorded_at=old.get("recorded_at"), reason="the stamp already records this state")
            return result
        result.update(changed=True, reason="recorded the state of the node after a full converge")
        if not module.check_mode:
            ss.write_stamp(p["path"], content)
        return result
    except ss.SiteStateError as exc:
        module.fail_json(msg=str(exc), **result)
    except OSError as exc:
        module.fail_json(msg="cannot write the stamp %s: %s" % (p["path"], exc.strerror or exc), **result)


def _main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/gpufleet-site-converged.json"),
            key=dict(type="str", required=True, no_log=False),
            state=dict(type="str", choices=["check", "record"], default="check"),
            watch=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            hash_limit=dict(type="int", default=ss.HASH_LIMIT),
            dpkg_status=dict(type="path", default="/var/lib/dpkg/status"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


def main():
    guarded("site_state", _main)


if __name__ == "__main__":
    main()
