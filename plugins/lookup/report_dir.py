# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: report_dir
short_description: Where the collection's reports go on the controller (audit, verify, serving)
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Returns the absolute controller directory of one kind of report, C(<base>/<kind>), where C(<base>) is the
    variable C(gpufleet_report_dir) when it is set, else C(gpufleet-reports) in the directory
    C(ansible-playbook) was started from. A relative C(gpufleet_report_dir) is taken from that directory too.
  - Reports therefore land where the user runs the playbook, never inside the collection's install path
    (C(ansible_collections/gpufleet/deepep/...)), which may be read-only in an execution environment.
options:
  _terms:
    description: The kind of report, a plain name such as C(audit) or C(verify).
    type: list
    elements: str
    required: true
notes:
  - The lookup only computes the path; the role that writes the report creates it.
"""

EXAMPLES = r"""
- name: Where the audit's run directories go
  ansible.builtin.debug:
    msg: "{{ lookup('gpufleet.deepep.report_dir', 'audit') }}"   # /home/me/site/gpufleet-reports/audit
"""

RETURN = r"""
_raw:
  description: The absolute directory, one per term.
  type: list
  elements: str
  sample: ["/home/me/site/gpufleet-reports/audit"]
"""

import os
import re

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.lookup import LookupBase

DEFAULT_BASE = "gpufleet-reports"
KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def report_dir(kind, base=None, cwd=None):
    """Absolute ``<base>/<kind>``; ``base`` defaults to ``<cwd>/gpufleet-reports``, a relative base is under cwd."""
    if not isinstance(kind, str) or not KIND.fullmatch(kind):
        raise AnsibleLookupError("report_dir: %r is not a report kind (expected a lowercase name such as audit or "
                                 "verify)" % (kind,))
    if base is None or (isinstance(base, str) and not base.strip()):
        base = DEFAULT_BASE
    if not isinstance(base, str) or "\n" in base or "\0" in base:
        raise AnsibleLookupError("report_dir: gpufleet_report_dir %r is not a directory path (expected e.g. "
                                 "/srv/reports or reports)" % (base,))
    base = os.path.expanduser(base)
    if not os.path.isabs(base):
        base = os.path.join(cwd or os.getcwd(), base)
    return os.path.normpath(os.path.join(base, kind))


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        base = None
        if variables and variables.get("gpufleet_report_dir") is not None:
            base = self._templar.template(variables["gpufleet_report_dir"])
        try:
            return [report_dir(to_native(term) if isinstance(term, str) else term, base) for term in terms]
        except OSError as exc:
            raise AnsibleLookupError("report_dir: %s" % to_native(exc))
