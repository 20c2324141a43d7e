# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Reading and writing files: the one sha256 helper and the one atomic writer of the collection.

Standard library only, Python 3.8+ (this file runs on the managed nodes and on the controller).

* ``read_text`` / ``read_json_dict``: a file's text or JSON object, None when it cannot be read.
* ``file_sha256`` / ``file_digest``: the sha256 of a file read in chunks (optionally only its first ``limit``
  bytes), with the number of bytes read.
* ``write_atomic``: bytes or text to a path by a temp file in the same directory and one rename; an error leaves
  the old file as it was and no temp file behind. ``write_json_file`` is the same for a JSON document,
  ``copy_atomic`` for a copy of another file (optionally checked against its sha256 before the rename).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile

__all__ = ["read_text", "read_json_dict", "file_sha256", "file_digest", "atomic_writer", "write_atomic", "write_json_file", "copy_atomic", "CopyMismatch",
           "LinkRefused", "refuse_write_through_link"]

CHUNK = 1024 * 1024


def read_text(path):
    """The text of ``path`` (undecodable bytes replaced), or None when it cannot be read."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def read_json_dict(path):
    """The JSON object in ``path`` as a dict, or None when absent, unreadable, malformed or not an object."""
    text = read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def file_digest(path, chunk=CHUNK, limit=None):
    """``(hex sha256, bytes read)`` of the file at ``path``, read to its end or to ``limit`` bytes (pseudo files
    such as ``/proc/version`` report size 0, so the count comes from the reading). Raises OSError."""
    digest = hashlib.sha256()
    read = 0
    with open(path, "rb") as handle:
        while limit is None or read < limit:
            block = handle.read(chunk if limit is None else min(chunk, limit - read))
            if not block:
                break
            digest.update(block)
            read += len(block)
    return digest.hexdigest(), read


def file_sha256(path, chunk=CHUNK, limit=None):
    """The hex sha256 of the file at ``path`` (of its first ``limit`` bytes when given). Raises OSError."""
    return file_digest(path, chunk, limit)[0]


@contextlib.contextmanager
def atomic_writer(path, mode=0o644, tmp_prefix=None, tmp_suffix=".tmp"):
    """A binary handle on a temp file in ``path``'s directory (``<tmp_prefix><random><tmp_suffix>``, prefix
    ``.<name>.`` unless given) that becomes ``path`` with ``mode`` by one rename when the block ends. An error in the
    block leaves the old file as it was and no temp file behind."""
    directory = os.path.dirname(path) or "."
    prefix = tmp_prefix if tmp_prefix is not None else ".%s." % os.path.basename(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=tmp_suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def write_atomic(path, data, mode=0o644, tmp_prefix=None, fsync=False):
    """Write ``data`` (bytes or text, UTF-8) to ``path`` by a temp file in the same directory and one rename
    (``atomic_writer``). The file gets ``mode``. An error leaves the old file as it was and no temp file behind.
    Returns ``path``.
    """
    with atomic_writer(path, mode, tmp_prefix) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    return path


def write_json_file(path, data, indent=2, tmp_prefix=".gpufleet-build.", mode=0o644, sort_keys=True):
    """Write ``data`` as JSON (sorted keys unless told, a final newline) to ``path`` atomically; see
    ``write_atomic``."""
    text = json.dumps(data, sort_keys=sort_keys, indent=indent) + "\n"
    return write_atomic(path, text, mode=mode, tmp_prefix=tmp_prefix)


class LinkRefused(ValueError):
    """A path a writer was given is a symlink (or leads through a dangling one); the message names the option."""


def refuse_write_through_link(path, option, what="directory"):
    """Refuse to write at ``path`` (the value of ``option``) through a link: ``path`` itself must not be a symlink,
    and no component above it may be a dangling symlink (creating the missing directories would create its target).
    Symlinked ancestors that lead to an existing directory (``/home`` -> ``/srv/home``) are the site's layout and pass
    (compare ``_store.refuse_any_link``, the artifact store's stricter rule: no link anywhere on the path).
    """
    path = os.path.abspath(path)
    if os.path.islink(path):
        raise LinkRefused("%s %r: is a symlink (to %r); nothing is written through a link - expected a real %s or a "
                          "path that does not exist yet" % (option, path, os.readlink(path), what))
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        if os.path.islink(parent) and not os.path.exists(parent):
            raise LinkRefused("%s %r: its component %r is a dangling symlink (to %r); nothing is written through a "
                              "link - expected a path of real directories"
                              % (option, path, parent, os.readlink(parent)))
        parent = os.path.dirname(parent)
    return path


class CopyMismatch(Exception):
    """A copy whose sha256 is not the one expected (the source changed while it was copied)."""


def copy_atomic(source, path, mode=0o644, expect_sha256=None, tmp_prefix=None):
    """Copy ``source`` to ``path`` by a temp file in ``path``'s directory and one rename, with ``mode``.

    With ``expect_sha256``, the copy is checked before the rename: CopyMismatch when it differs (``path`` is then
    left as it was). Returns ``path``.
    """
    directory = os.path.dirname(path) or "."
    prefix = tmp_prefix if tmp_prefix is not None else ".%s." % os.path.basename(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.chmod(tmp, mode)
        if expect_sha256 is not None and file_sha256(tmp) != expect_sha256:
            raise CopyMismatch("the copy of %s to %s does not match its sha256 %s" % (source, path, expect_sha256))
        os.rename(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path
