#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: file_set
short_description: Write a set of small text files on a node in one round trip, each atomically with its mode
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Writes each file of O(files) whose content differs (by a temporary file in its directory and one rename, so a
    reader sees the old file or the new one, never a part), and sets the mode of each whose mode alone differs.
  - One module run per node for the whole set, where a loop of C(ansible.builtin.copy) costs two per file (its
    C(stat), then C(copy) or C(file)); a role writing a unit and its environment file per instance pays one.
  - Tells a changed content from a changed mode for each file (RV(files[].content_changed),
    RV(files[].mode_changed)), so that a caller restarts a service for the one and not for the other.
  - Every entry is checked before anything is written; a bad one fails the task naming it and writes nothing.
  - A file that exists keeps its owner and group (and SELinux context); a new one belongs to the user the module
    runs as.
options:
  files:
    description: The files to write.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Absolute path of the file. Its directory must exist (in check mode a missing one is taken as made by an
            earlier task, and the file is reported as to be written); the path must not be a directory or a
            symbolic link (nothing is written through a link). Two entries with one path are refused.
        type: path
        required: true
      content:
        description: The file's text (written as UTF-8, as given; no newline is added).
        type: str
        required: true
      mode:
        description: The file's permission bits as an octal string, e.g. V(0600) or V(0644).
        type: str
        required: true
      diff:
        description:
          - Show the old and the new text in diff mode. V(false) for a file that may carry a secret (an environment
            file with a token); diff mode then shows only that its content changes.
        type: bool
        default: true
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
"""

EXAMPLES = r"""
- name: Write the unit and its environment file
  gpufleet.deepep.file_set:
    files:
      - path: /etc/systemd/system/sglang-decode0-rank0.service
        content: "{{ unit_text }}"
        mode: "0644"
      - path: /etc/gpufleet/sglang-serve/sglang-decode0-rank0.env
        content: "{{ env_text }}"
        mode: "0600"
        diff: false
  register: written
"""

RETURN = r"""
files:
  description: One entry a file, in the order of O(files).
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file's path.
      type: str
      sample: /etc/systemd/system/sglang-decode0-rank0.service
    existed:
      description: Whether the file was there before.
      type: bool
      sample: true
    content_changed:
      description: Whether its content was (in check mode, would be) written; true for a file that was not there.
      type: bool
      sample: false
    mode_changed:
      description: Whether its mode was (would be) set, on a file whose content stayed.
      type: bool
      sample: true
    changed:
      description: C(content_changed) or C(mode_changed).
      type: bool
      sample: true
"""

import os
import re
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded

MODE = re.compile(r"0?[0-7]{3}")


class FileSetError(ValueError):
    """An entry of ``files`` that cannot be written; the message names it and the expected form."""


def check_entries(files, check_mode=False):
    """``[(path, bytes, mode int, diff)]`` from the ``files`` option, or FileSetError naming the first bad entry.
    Nothing on the node is changed here; directories and links are looked at. In check mode a missing directory is
    one an earlier task of the run would make (that task did not run either): its files are reported to be written."""
    out = []
    seen = set()
    for index, entry in enumerate(files):
        path, mode = entry["path"], entry["mode"]
        where = "files[%d] path %r" % (index, path)
        if not os.path.isabs(path) or "\0" in path:
            raise FileSetError("%s: expected an absolute path" % where)
        path = os.path.normpath(path)
        if path in seen:
            raise FileSetError("%s: the path is given twice; expected each file once" % where)
        seen.add(path)
        if not isinstance(mode, str) or not MODE.fullmatch(mode):
            raise FileSetError("files[%d] mode %r (of %s): expected permission bits as an octal string such as "
                               "'0600' or '0644'" % (index, mode, path))
        if os.path.islink(path):
            raise FileSetError("%s: is a symbolic link (to %r); nothing is written through a link - expected a "
                               "regular file or a path that does not exist yet" % (where, os.readlink(path)))
        if os.path.lexists(path) and not os.path.isfile(path):
            raise FileSetError("%s: exists and is not a regular file" % where)
        if not check_mode and not os.path.isdir(os.path.dirname(path)):
            raise FileSetError("%s: its directory %r does not exist; expected it made first"
                               % (where, os.path.dirname(path)))
        out.append((path, entry["content"].encode("utf-8", errors="surrogateescape"), int(mode, 8),
                    entry["diff"]))
    return out


def plan_file(path, data, mode):
    """``(existed, before bytes or None, content_changed, mode_changed)`` of one file as it is now."""
    try:
        with open(path, "rb") as handle:
            before = handle.read()
        current = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return False, None, True, False
    content_changed = before != data
    return True, before, content_changed, not content_changed and current != mode


def write_file(module, path, data, mode):
    """``data`` to ``path`` by a temporary file in its directory and AnsibleModule.atomic_move (which keeps an
    existing file's owner, group and SELinux context), then ``mode``. An error leaves the old file and no temporary
    file behind."""
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
        os.chmod(path, mode)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _text(data):
    return data.decode("utf-8", errors="replace") if data is not None else ""


def _main():
    module = AnsibleModule(argument_spec=dict(
        files=dict(type="list", elements="dict", required=True, options=dict(
            path=dict(type="path", required=True),
            content=dict(type="str", required=True),
            mode=dict(type="str", required=True),
            diff=dict(type="bool", default=True),
        )),
    ), supports_check_mode=True)
    try:
        entries = check_entries(module.params["files"], module.check_mode)
    except FileSetError as exc:
        module.fail_json(msg="file_set: %s" % exc)
    results, diffs = [], []
    for path, data, mode, show in entries:
        existed, before, content_changed, mode_changed = plan_file(path, data, mode)
        if content_changed or mode_changed:
            if module._diff:
                diffs.append({"before_header": path, "after_header": path,
                              "before": _text(before) if show else ("(content not shown)\n" if existed else ""),
                              "after": _text(data) if show else "(content not shown)\n"}
                             if content_changed else
                             {"before_header": path, "after_header": path,
                              "before": "mode %04o\n" % stat.S_IMODE(os.stat(path).st_mode),
                              "after": "mode %04o\n" % mode})
            if not module.check_mode:
                try:
                    if content_changed:
                        write_file(module, path, data, mode)
                    else:
                        os.chmod(path, mode)
                except OSError as exc:
                    module.fail_json(msg="file_set: writing %s failed: %s (the files before it in the list are "
                                         "written; it and the ones after are as they were)" % (path, exc),
                                     files=results)
        results.append({"path": path, "existed": existed, "content_changed": content_changed,
                        "mode_changed": mode_changed, "changed": content_changed or mode_changed})
    module.exit_json(changed=any(r["changed"] for r in results), files=results, diff=diffs)


def main():
    guarded("file_set", _main)


if __name__ == "__main__":
    main()
