# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The artifact store's file system (``_store.py`` holds its requests, records and operations): nothing read or
written through a symbolic link, regular files opened with ``O_NOFOLLOW | O_NONBLOCK``, copies with the store's
modes (``& 0o755``), a file verified against its record entry (size, then sha256), and the store lock
(``<store>/.lock``, fcntl) with the message of a store that cannot hold it.

Standard library only, Python 3.8+; runs on the controller (action ``artifact_store``) and on a node (module
``artifact_store``).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_digest
from ansible_collections.gpufleet.deepep.plugins.module_utils._lock import FileLock, LockError, LockTimeout

__all__ = [
    "StoreError", "MODE_MASK", "LOCK_TIMEOUT", "CHUNK", "O_DIR", "lstat_or_none", "link_target", "refuse_any_link",
    "open_regular", "fd_sha256", "store_mode", "copy_fd", "copy_file", "create_new", "check_dir", "check_entry",
    "verify_file", "unlockable_message", "StoreLock", "Incoming",
]

LOCK_NAME = ".lock"
LOCK_TIMEOUT = 600
LOCK_VARIABLE = "lock_timeout (gpufleet_artifact_lock_timeout for the roles)"
STORE_VARIABLE = "gpufleet_artifact_store for the roles"
MODE_MASK = 0o755
CHUNK = 1024 * 1024

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


class StoreError(Exception):
    """A request, a store or an artifact the store refuses; the message names the bad value or file."""


# --------------------------------------------------------------------------------------------
# Links


def lstat_or_none(path):
    try:
        return os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise StoreError("cannot read %s: %s" % (path, exc.strerror or exc))


def link_target(path):
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def refuse_any_link(path, what):
    """Refuse ``path`` (absolute) when it or any directory above it is a symbolic link, naming the link; the part of
    ``path`` that does not exist yet is not checked. The store's rule: no link anywhere on the path (compare
    ``_fileio.refuse_write_through_link``, which lets a report follow a site's symlinked directories)."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise StoreError("%s %r must be an absolute path" % (what, path))
    current = os.sep
    for part in os.path.normpath(path).split(os.sep):
        if not part:
            continue
        current = os.path.join(current, part)
        info = lstat_or_none(current)
        if info is None:
            return
        if stat.S_ISLNK(info.st_mode):
            raise StoreError("%s %s: %s is a symbolic link (to %s); the artifact store never follows links: give the "
                             "real path" % (what, path, current, link_target(current)))


def open_regular(path, shown, missing):
    """``(fd, stat)`` of the regular file ``path`` opened without following a link; StoreError naming ``shown``
    otherwise (``missing``: the message when it is absent)."""
    try:
        fd = os.open(path, _O_READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError("%s is a symbolic link (to %s); the artifact store never follows links"
                             % (shown, link_target(path)))
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise StoreError(missing)
        raise StoreError("cannot read %s: %s" % (shown, exc.strerror or exc))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise StoreError("%s is not a regular file; %s" % (shown, missing))
    return fd, info


def fd_sha256(fd):
    """The sha256 and length of what the open file ``fd`` holds (read through a duplicate, from its start)."""
    os.lseek(fd, 0, os.SEEK_SET)
    return file_digest(os.dup(fd))


def store_mode(mode):
    """The permission bits a stored or installed copy of a file of ``mode`` gets: ``mode & 0o755``."""
    return stat.S_IMODE(mode) & MODE_MASK


def copy_fd(src_fd, out_fd, mode):
    """Copy the open file ``src_fd`` from its start into ``out_fd`` (closed here), with ``mode``."""
    os.lseek(src_fd, 0, os.SEEK_SET)
    with os.fdopen(out_fd, "wb") as out:
        while True:
            block = os.read(src_fd, CHUNK)
            if not block:
                break
            out.write(block)
        out.flush()
        os.fchmod(out.fileno(), mode)


def copy_file(path, shown, out_fd, mode=None):
    """Copy the regular file ``path`` (never through a link) into ``out_fd``, with ``mode`` or its own
    ``store_mode``."""
    try:
        fd, info = open_regular(path, shown, "%s is missing" % shown)
    except BaseException:
        os.close(out_fd)
        raise
    try:
        copy_fd(fd, out_fd, store_mode(info.st_mode) if mode is None else mode)
    finally:
        os.close(fd)


def create_new(path):
    """A new file ``path`` opened for writing (never an existing file or a link), mode 0600 until copied into."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600)


def check_dir(path, what):
    """Whether the directory ``path`` exists; StoreError when it is a link or not a directory."""
    info = lstat_or_none(path)
    if info is None:
        return False
    if stat.S_ISLNK(info.st_mode):
        raise StoreError("%s %s is a symbolic link (to %s); the artifact store never follows links: remove it and "
                         "publish the key again" % (what, path, link_target(path)))
    if not stat.S_ISDIR(info.st_mode):
        raise StoreError("%s %s is not a directory; remove it" % (what, path))
    return True


def check_entry(directory):
    """Refuse a key directory that holds a link, a hard-linked file or anything but regular files (a publication
    copies each file: it holds none of these)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise StoreError("cannot list %s: %s" % (directory, exc.strerror or exc))
    for name in names:
        path = os.path.join(directory, name)
        info = lstat_or_none(path)
        if info is None:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise StoreError("%s is a symbolic link (to %s) inside the store entry; the artifact store never follows "
                             "links: remove %s and publish the key again" % (path, link_target(path), directory))
        if not stat.S_ISREG(info.st_mode):
            raise StoreError("%s is not a regular file (a store entry holds only the files it published); remove %s "
                             "and publish the key again" % (path, directory))
        if info.st_nlink > 1:
            raise StoreError("%s has %d hard links (a published file has one: it may be changed through another "
                             "name); remove %s and publish the key again" % (path, info.st_nlink, directory))


# --------------------------------------------------------------------------------------------
# Files


def verify_file(path, entry, shown=None):
    """Refuse ``path`` unless it is a regular file (not a link) whose size and sha256 are those of the record
    ``entry``; the message names ``shown`` (default ``path``)."""
    shown = shown or path
    fd, info = open_regular(path, shown, "%s is missing (the record lists it)" % shown)
    try:
        size = info.st_size
        if size < entry["size"]:
            raise StoreError("%s is truncated: %d of the %d bytes its record lists" % (shown, size, entry["size"]))
        if size != entry["size"]:
            raise StoreError("%s has %d bytes, its record lists %d: the file changed after publication"
                             % (shown, size, entry["size"]))
        try:
            digest = fd_sha256(fd)[0]
        except (IOError, OSError) as exc:
            raise StoreError("cannot read %s: %s" % (shown, exc))
    finally:
        os.close(fd)
    if digest != entry["sha256"]:
        raise StoreError("%s does not match its record (sha256 %s, the record says %s): the file was altered after "
                         "publication" % (shown, digest, entry["sha256"]))


def _blocking_component(path):
    """What stands where ``path`` needs a directory: ``(the deepest existing path at or above it, what it is)`` when
    that is not a directory (nor a link to one), else None."""
    current = os.path.normpath(path)
    while True:
        info = lstat_or_none(current)
        if info is not None:
            if stat.S_ISDIR(info.st_mode) or (stat.S_ISLNK(info.st_mode) and os.path.isdir(current)):
                return None
            if stat.S_ISLNK(info.st_mode):
                return current, "a symbolic link (to %s) that does not lead to a directory" % link_target(current)
            return current, "a file, not a directory"
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def unlockable_message(store, lock_path, exc):
    """Why ``store`` cannot hold its lock ``lock_path`` (``exc``: the LockError), naming the option and the path."""
    reason = os.strerror(exc.code) if exc.code else str(exc)
    if exc.step == "lock":
        return ("store %s cannot hold a lock: flock on %s failed (%s); the store's file system must support flock "
                "(an NFS mount needs locking, not 'nolock'): give store (%s) a path on such a file system"
                % (store, lock_path, reason, STORE_VARIABLE))
    blocking = _blocking_component(store)
    if blocking is not None:
        why = "%s is %s" % ("it" if blocking[0] == os.path.normpath(store) else blocking[0], blocking[1])
    elif exc.code == errno.EROFS:
        why = "it lies on a read-only file system"
    elif exc.code in (errno.EACCES, errno.EPERM):
        why = "this user (uid %d) may not create or write files there (%s)" % (os.geteuid(), reason)
    else:
        why = "the lock file cannot be created there (%s)" % reason
    return ("store %s is not a writable directory and cannot hold the store lock %s: %s. Expected a directory (or "
            "a path where one can be created) that this user can write, on a file system that is not read-only and "
            "supports flock (not /proc or /sys): set store (%s) to such a path"
            % (store, lock_path, why, STORE_VARIABLE))


class StoreLock(FileLock):
    """``<store>/.lock`` held with fcntl (exclusive), waited for at most ``timeout`` seconds."""

    def __init__(self, store, timeout=LOCK_TIMEOUT, poll=0.1):
        FileLock.__init__(self, os.path.join(store, LOCK_NAME), timeout, poll=poll, what="store lock")
        self.store = store

    def __enter__(self):
        try:
            return FileLock.__enter__(self)
        except LockTimeout as exc:
            raise StoreError("the store lock %s stayed locked for %s s (%s): another publication holds it or hangs; "
                             "run again once it ended, or raise %s"
                             % (self.path, self.timeout, "held by %s" % exc.holder if exc.holder
                                else "its holder wrote no pid", LOCK_VARIABLE))
        except LockError as exc:
            if exc.code == errno.ELOOP or exc.step not in ("open", "lock"):
                raise StoreError(str(exc))
            raise StoreError(unlockable_message(self.store, self.path, exc))


class Incoming(object):
    """A publication being assembled in ``path`` (under ``<store>/.incoming``), held with ``flock`` on the
    directory for as long as it lives: one that nobody holds is a killed publisher's (``clean_incoming``)."""

    def __init__(self, path, fd):
        self.path = path
        self.fd = fd

    def discard(self):
        """Remove the directory when it is still there (not published) and let it go."""
        info = lstat_or_none(self.path)
        if info is not None and stat.S_ISDIR(info.st_mode):
            shutil.rmtree(self.path, ignore_errors=True)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
