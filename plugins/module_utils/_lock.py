# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Exclusive locks on a lock file (fcntl ``flock``), waited for a bounded time.

Standard library only, Python 3.8+ (this file runs on the managed nodes and on the controller).

The kernel drops a ``flock`` when its holder exits, killed or not, so a lock never outlives the run that took it.
The holder writes its pid and start time into the file; a waiter that gives up names them.

* ``FileLock(path, timeout)``: the artifact store's publication lock and the build locks.
* ``prefix_lock_path(prefix)``: ``<parent>/.<name>.lock``, the hidden lock file beside a build prefix (it survives
  the swaps that replace the prefix itself, and is never removed: removing a lock file races with its next taker).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import now

__all__ = ["LockError", "LockTimeout", "FileLock", "prefix_lock_path"]


class LockError(Exception):
    """The lock file cannot be opened or locked; ``code`` is the errno of the call that failed (None when no call
    did) and ``step`` what failed: ``open`` (creating the lock file or its directory) or ``lock`` (``flock``)."""

    def __init__(self, msg, code=None, step=None):
        super(LockError, self).__init__(msg)
        self.code = code
        self.step = step


class LockTimeout(LockError):
    """Another process held the lock for longer than the timeout; ``holder`` is what it wrote into the file."""

    def __init__(self, msg, holder=""):
        super(LockTimeout, self).__init__(msg)
        self.holder = holder


def prefix_lock_path(prefix):
    """``<parent>/.<name>.lock``: the lock file beside ``prefix`` (normalised, without a trailing slash)."""
    parent, name = os.path.split(os.path.normpath(prefix))
    return os.path.join(parent, ".%s.lock" % name)


class FileLock(object):
    """``path`` locked exclusively; waited for at most ``timeout`` seconds (0: refuse at once), polled every ``poll``.

    Raises LockTimeout (naming ``path`` and its holder) when the wait ran out, LockError when the file cannot be
    opened or locked. ``what`` names the lock in the messages.
    """

    def __init__(self, path, timeout, poll=0.1, what="lock", sleep=time.sleep):
        self.path = path
        self.timeout = timeout
        self.poll = poll
        self.what = what
        self.fd = None
        self.waited = 0.0
        self._sleep = sleep

    def _holder(self):
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except (IOError, OSError):
            return ""
        try:
            return os.read(fd, 200).decode("utf-8", "replace").strip()
        except (IOError, OSError):
            return ""
        finally:
            os.close(fd)

    def __enter__(self):
        parent = os.path.dirname(self.path) or "."
        try:
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o755, exist_ok=True)  # two first takers race to create it
            # Never through a link: a lock file planted as a symlink would make the holder truncate its target.
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                              | getattr(os, "O_CLOEXEC", 0), 0o644)
        except (IOError, OSError) as exc:
            if exc.errno == errno.ELOOP:
                raise LockError("cannot open the %s %s: it is a symbolic link (a lock file is never followed; "
                                "remove the link)" % (self.what, self.path), exc.errno, "open")
            raise LockError("cannot open the %s %s: %s" % (self.what, self.path, exc.strerror or exc),
                            exc.errno, "open")
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    self._close()
                    raise LockError("cannot lock %s: %s" % (self.path, exc.strerror or exc), exc.errno, "lock")
            self.waited = time.monotonic() - start
            if self.waited >= self.timeout:
                holder = self._holder()
                self._close()
                raise LockTimeout("%s stayed locked for %s s%s" % (
                    self.path, self.timeout, " (held by %s)" % holder if holder else ""), holder)
            self._sleep(self.poll)
        self.waited = time.monotonic() - start
        try:
            os.ftruncate(self.fd, 0)
            os.write(self.fd, ("pid %d since %s\n" % (os.getpid(), now())).encode("ascii"))
        except (IOError, OSError):
            pass  # the note is informative only
        return self

    def _close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __exit__(self, *exc):
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
            except (IOError, OSError):
                pass
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self._close()
        return False
