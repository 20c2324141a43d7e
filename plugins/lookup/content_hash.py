# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: content_hash
short_description: One sha256 over the files of controller directories (what a converge rolls out)
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Returns one sha256 hex digest over the relative paths, executable bits and contents of every file under the
    given controller paths, walked recursively in sorted order. A file given directly counts by its name and
    content.
  - Byte-compiled Python (C(__pycache__), C(*.pyc)) and VCS data (C(.git)) are left out, so running the
    collection does not change its own hash.
  - The site plan keys a converge on the same digest (its action calls the same function, in
    C(plugin_utils/_site_plan.py)), so a node converged by another version of the collection goes through the phases
    again.
  - Unlike C(ansible.builtin.fileglob), which expands wildcards in file names only, this reads whole trees.
options:
  _terms:
    description: Directories or files on the controller, as absolute paths.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Key the collection content
  ansible.builtin.set_fact:
    content_key: "{{ lookup('gpufleet.deepep.content_hash', playbook_dir ~ '/../roles', playbook_dir ~ '/../plugins') }}"
"""

RETURN = r"""
_raw:
  description: The sha256 hex digest, as a one-element list.
  type: list
  elements: str
  sample: ["3f5a0c1e9b7d2a4f6e8c0b1d3a5f7e9c1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a"]
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._site_plan import SitePlanError, content_hash


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return [content_hash(list(terms))]
        except SitePlanError as exc:
            raise AnsibleLookupError(str(exc)) from exc
