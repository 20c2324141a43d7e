# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A directory tree as a deterministic tar and back: the one pack and the one whole-entry unpack of the caches.

The standard library and _fileio only, Python 3.8+ (this file runs on the managed nodes).

* ``tar_info``: a member with owners, names and time zeroed and the fixed modes (0755 directories, 0644 files).
* ``pack_tree``: the members, in the order given (the caller sorts), into one archive (plain tar or gzip with a
  zero header time, PAX format) written under a temporary name in the archive's directory and renamed
  (``_fileio.atomic_writer``): the same members give the same bytes, and the archive is complete or absent.
* ``unpack_tree``: the checked members of an opened archive into ``<dest>/<subdir>/``, one top-level entry at a
  time, each whole: everything is written under a staging directory of ``dest`` (same filesystem) and each entry
  is then renamed into place; an entry ``dest`` already holds is kept. What may be in an archive, and what counts
  as present, is the caller's (DeepGEMM's cache, DeepEP V2's JIT cache): it checks every member before this runs,
  and writes its marker after it.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import tempfile

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import atomic_writer

__all__ = ["UNPACK_PREFIX", "tar_info", "pack_tree", "unpack_tree"]

UNPACK_PREFIX = ".gpufleet-unpack."


def tar_info(name, kind=tarfile.REGTYPE, size=0):
    """A member ``name`` of ``kind`` (``tarfile.REGTYPE`` or ``DIRTYPE``): uid/gid 0, no owner names, mtime 0,
    mode 0755 for a directory and 0644 for a file."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _add(tar, name, source):
    if source is None:
        tar.addfile(tar_info(name, tarfile.DIRTYPE))
    elif isinstance(source, bytes):
        tar.addfile(tar_info(name, tarfile.REGTYPE, len(source)), io.BytesIO(source))
    else:
        with open(source, "rb") as handle:
            tar.addfile(tar_info(name, tarfile.REGTYPE, os.fstat(handle.fileno()).st_size), handle)


def pack_tree(archive, members, tmp_prefix, tmp_suffix="", compress=False):
    """Write ``members``, ``[(name in the archive, source)]`` with source None (a directory), bytes (a file of
    that content) or a path (a regular file copied), into ``archive`` in that order.

    ``compress``: gzip with an empty name and mtime 0 in its header. The archive is written under
    ``<tmp_prefix><random><tmp_suffix>`` in its own directory, given mode 0644 and renamed; an error leaves no
    temporary file behind and the old archive, if any, as it was."""
    with atomic_writer(archive, 0o644, tmp_prefix, tmp_suffix) as raw:
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if compress else None
        try:
            with tarfile.open(fileobj=gz or raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name, source in members:
                    _add(tar, name, source)
        finally:
            if gz is not None:
                gz.close()
    return archive


def _prepare(path, error, dir_mode, uid, gid, set_mode):
    if os.path.islink(path):
        raise error("cache_dir: %s is a link; expected a directory (links are not followed)" % path)
    if not os.path.isdir(path):
        os.makedirs(path, dir_mode)
    if set_mode:
        os.chmod(path, dir_mode)
        os.chown(path, uid, gid)


def unpack_tree(tar, entries, dest, present, error, subdir="cache", check_mode=False, dir_mode=0o755,
                file_mode=0o644, uid=-1, gid=-1, set_dest_mode=False):
    """Put the top-level entries of an opened, checked archive into ``<dest>/<subdir>/``: ``(added, kept)``, the
    sorted names of the entries written and of those ``present`` (the names ``dest`` already holds) kept.

    ``entries``: ``{top-level name: [(path below the entry, member)]}``, every member a directory or a regular
    file the caller has checked (no link, no path that climbs); a directory member's path may be empty (the entry
    itself, or a file's: the entry is a file). Nothing is written in check mode or when every entry is present. Otherwise ``dest`` and
    ``<dest>/<subdir>`` are made where missing (``error`` when one is a link; with ``set_dest_mode`` they get
    ``dir_mode`` and ``uid``/``gid``), the new entries are extracted under a staging directory of ``dest``
    (directories ``dir_mode``, files ``file_mode``, owner ``uid``/``gid``, -1 unchanged) and each is renamed into
    place whole unless something took its name meanwhile. The staging directory is removed whatever happens."""
    added = sorted(top for top in entries if top not in present)
    kept = sorted(top for top in entries if top in present)
    if check_mode or not added:
        return added, kept
    base = os.path.join(dest, subdir)
    for path in (dest, base):
        _prepare(path, error, dir_mode, uid, gid, set_dest_mode)
    staging = tempfile.mkdtemp(prefix=UNPACK_PREFIX, dir=dest)
    try:
        for top in added:
            root = os.path.join(staging, top)
            for rel, member in entries[top]:
                path = os.path.join(root, rel) if rel else root
                if member.isdir():
                    os.makedirs(path, dir_mode, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(path), dir_mode, exist_ok=True)
                with open(path, "wb") as handle:
                    shutil.copyfileobj(tar.extractfile(member), handle)
                os.chmod(path, file_mode)
                os.chown(path, uid, gid)
            for path, dummy_dirs, dummy_files in os.walk(root):  # nothing when the entry is a file
                os.chmod(path, dir_mode)
                os.chown(path, uid, gid)
        for top in added:
            final = os.path.join(base, top)
            if not os.path.lexists(final):
                os.rename(os.path.join(staging, top), final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return added, kept
