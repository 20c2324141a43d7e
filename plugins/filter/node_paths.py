# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Decisions from the path facts of gpufleet.deepep.node_stack (``gather: [paths]``), so a role skips a task whose
module would change nothing instead of paying its round trip.

``path_is``: a path entry is a directory/file/link with the mode and owner a task would set (a path that was not
read is not).
``download_record``: the record written beside a tarball once get_url verified it (its sha256 and the checksum
setting it was verified against).
``download_verified``: the tarball is there, with its mode and owner, and its sha256 and the checksum setting are
those of its record: get_url would download nothing.

Each filter is documented in ``<filter name>.yml`` beside this file.
"""

from __future__ import annotations

import hashlib
import re

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters

_TYPES = ("file", "directory", "link")
_MODE_RE = re.compile(r"0?[0-7]{3,4}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS = ("exists", "type", "mode", "uid", "gid")


def _entry(value, name):
    """The entry, or None for a path that was not read (nothing known: the task it guards then runs)."""
    if value is None or value == {} or isinstance(value, Undefined):
        return None
    if not isinstance(value, dict) or any(key not in value for key in _ENTRY_KEYS):
        raise AnsibleFilterError("%s: expected an entry of node_stack's gpufleet_paths (a mapping with %s), got %r"
                                 % (name, ", ".join(_ENTRY_KEYS), value))
    return value


def path_is(entry, kind, mode=None, uid=0, gid=0):
    """Whether the path entry ``entry`` is a ``kind`` (file, directory, link) with ``mode`` (when given) and owner."""
    entry = _entry(entry, "path_is")
    if kind not in _TYPES:
        raise AnsibleFilterError("path_is: kind %r is not one of %s" % (kind, ", ".join(_TYPES)))
    if mode is not None and not (isinstance(mode, str) and _MODE_RE.fullmatch(mode)):
        raise AnsibleFilterError("path_is: mode %r is not an octal mode string such as '0755'" % (mode,))
    if entry is None or entry["type"] != kind:
        return False
    if mode is not None and entry["mode"] != "%04o" % int(mode, 8):
        return False
    return entry["uid"] == uid and entry["gid"] == gid


def download_record(sha256, checksum):
    """The text of a tarball's download record: its sha256, then the checksum setting it was verified against."""
    if not isinstance(sha256, str) or not _SHA256_RE.fullmatch(sha256):
        raise AnsibleFilterError("download_record: %r is not a sha256 (64 lowercase hex digits)" % (sha256,))
    checksum = "" if checksum is None else str(checksum)
    if "\n" in checksum:
        raise AnsibleFilterError("download_record: the checksum setting %r has a line break" % (checksum,))
    return "%s\n%s\n" % (sha256, checksum)


def download_verified(paths, tarball, checksum, mode="0644"):
    """Whether ``paths`` (node_stack's gpufleet_paths, with ``tarball`` hashed and ``tarball``.verified listed) show
    the tarball as its record says get_url verified it, with ``mode`` and root's ownership."""
    if not isinstance(paths, dict):
        raise AnsibleFilterError("download_verified: expected node_stack's gpufleet_paths (a mapping), got %r" % (paths,))
    record = "%s.verified" % tarball
    got = paths.get(tarball)
    # Not read, or read without its sha256: nothing is known, get_url runs.
    if not path_is(got, "file", mode) or not got.get("sha256") or not path_is(paths.get(record), "file"):
        return False
    expected = hashlib.sha1(download_record(got["sha256"], checksum).encode("utf-8")).hexdigest()
    return paths[record].get("sha1") == expected


class FilterModule:
    """Decisions from node_stack's path facts."""

    def filters(self):
        return guard_filters({
            "path_is": path_is,
            "download_record": download_record,
            "download_verified": download_verified,
        })
