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
  - C(playbooks/site.yml) keys a converge on it (roles, plugins, the playbook itself), so a node converged by
    another version of the collection goes through the phases again.
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

import hashlib
import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import BuildError, tree_hash
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256

SKIP_DIRS = (".git", "__pycache__")
SKIP_SUFFIXES = (".pyc", ".pyo")


def content_hash(paths):
    """sha256 over each path's identity: a tree hash for a directory, the content hash for a file."""
    digest = hashlib.sha256()
    for path in paths:
        if not isinstance(path, str) or not os.path.isabs(path):
            raise AnsibleLookupError("content_hash: %r is not an absolute path (expected a directory or file on the "
                                     "controller, such as playbook_dir ~ '/../roles')" % (path,))
        name = os.path.normpath(path)
        if os.path.isdir(name):
            try:
                part = "D " + tree_hash(name, exclude_dirs=SKIP_DIRS, exclude_suffixes=SKIP_SUFFIXES)
            except (BuildError, OSError) as exc:
                raise AnsibleLookupError("content_hash: cannot read %s: %s" % (name, exc))
        elif os.path.isfile(name):
            part = "F " + file_sha256(name)
        else:
            raise AnsibleLookupError("content_hash: %s is neither a directory nor a file" % name)
        digest.update(("%s %s\n" % (os.path.basename(name), part)).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [content_hash(list(terms))]
