# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Staged builds swapped into place: ``<prefix>.staging-<key8>`` is built and verified, then exchanged with
``<prefix>`` (Linux ``renameat2`` RENAME_EXCHANGE, else two renames undone on error); the install it replaces is
kept as ``<prefix>.previous`` for rollback. ``replace_tree`` replaces a directory the same way without keeping the
old one (build artifacts). ``PrefixLock`` is the per-prefix build lock (``.<name>.lock`` beside the prefix, fcntl): a second build of
one prefix waits for the first (bounded) or refuses, and never touches the first one's staging directory.
``repair_leftovers`` and ``staged_build`` are the clean-up and the staged build of the prefix build modules
(NVSHMEM, make), which end a failure as the module's ``Failed``.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import BuildError, short_key
from ansible_collections.gpufleet.deepep.plugins.module_utils._lock import FileLock, LockError, LockTimeout, prefix_lock_path
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import Failed, log_tail, StepFailed

__all__ = ["staging_path", "previous_path", "stale_staging_dirs", "clean_stale_staging", "recover_interrupted_swap",
           "swap_in", "rollback", "replace_tree", "PrefixLock", "build_lock", "repair_beside", "repair_leftovers",
           "staged_build", "LOCK_TIMEOUT"]

# How long a second build of one prefix waits for the first by default (an NVSHMEM or DeepEP build takes minutes
# to tens of minutes on a real node).
LOCK_TIMEOUT = 3600


def _clean_prefix(prefix):
    if not isinstance(prefix, str) or not os.path.isabs(prefix):
        raise BuildError("prefix %r must be an absolute path" % (prefix,))
    prefix = os.path.normpath(prefix)
    if prefix == os.path.sep:
        raise BuildError("prefix must not be /")
    return prefix


def staging_path(prefix, key):
    """``<prefix>.staging-<key8>``: where the build for ``key`` happens, beside ``prefix``."""
    return "%s.staging-%s" % (_clean_prefix(prefix), short_key(key))


def previous_path(prefix):
    """``<prefix>.previous``: the install the last swap replaced, kept for rollback."""
    return "%s.previous" % _clean_prefix(prefix)


def stale_staging_dirs(prefix):
    """Every ``<prefix>.staging-*`` / ``<prefix>.discard-*`` directory beside ``prefix``."""
    prefix = _clean_prefix(prefix)
    parent, base = os.path.split(prefix)
    try:
        entries = sorted(os.listdir(parent))
    except (IOError, OSError):
        return []
    pattern = re.compile(r"^%s\.(staging|discard)-[0-9a-f]+$" % re.escape(base))
    return [os.path.join(parent, e) for e in entries
            if pattern.match(e) and os.path.isdir(os.path.join(parent, e))
            and not os.path.islink(os.path.join(parent, e))]


def clean_stale_staging(prefix, keep=None):
    """Remove what killed or failed runs left beside ``prefix`` (all but ``keep``); returns the paths."""
    removed = []
    for path in stale_staging_dirs(prefix):
        if keep is not None and os.path.normpath(path) == os.path.normpath(keep):
            continue
        shutil.rmtree(path)
        removed.append(path)
    return removed


def recover_interrupted_swap(prefix):
    """Repair what a swap killed between its two renames left behind.

    Only the rename fallback (no ``renameat2``) has such a window: ``<prefix>`` missing and
    ``<prefix>.previous`` present. The previous install is moved back. Returns a sentence describing
    the repair, or None when nothing needed repair.
    """
    prefix = _clean_prefix(prefix)
    previous = previous_path(prefix)
    if not os.path.lexists(prefix) and os.path.isdir(previous):
        os.rename(previous, prefix)
        return "restored %s from %s (a swap was interrupted)" % (prefix, previous)
    return None


def repair_beside(prefix, check_mode=False):
    """``(cleaned, recovered)``: the staging directories killed runs left beside ``prefix`` (removed), and the repair
    of a swap one interrupted (or None). In check mode nothing is changed and both say what would be done. Call it
    under the prefix's build lock."""
    prefix = _clean_prefix(prefix)
    if check_mode:
        previous = previous_path(prefix)
        recovered = None
        if not os.path.lexists(prefix) and os.path.isdir(previous):
            recovered = "would restore %s from %s (a swap was interrupted)" % (prefix, previous)
        return stale_staging_dirs(prefix), recovered
    recovered = recover_interrupted_swap(prefix)
    return clean_stale_staging(prefix), recovered


def repair_leftovers(prefix, check_mode=False):
    """:func:`repair_beside` for a build module: ``(cleaned, recovered)``, or Failed naming the prefix."""
    try:
        return repair_beside(prefix, check_mode)
    except (OSError, BuildError) as exc:
        raise Failed("cannot clean up beside %s: %s" % (prefix, exc))


@contextlib.contextmanager
def staged_build(prefix, staging, runner, result, header, log_lines, failure, errors=()):
    """The staging directory of a build module's build, around the code that builds into it and swaps it in.

    Creates the parent of ``prefix`` and ``staging``, starts the build log ``<staging>/build.log`` (the
    CommandLog ``runner`` writes to it, ``result['log']`` names it) with ``header``, and gives its path. A
    StepFailed, or an OSError, BuildError or one of ``errors`` raised inside ends as Failed with the message
    ``failure(text, step)`` (``text`` the step's message or the error, ``step`` whether a step failed), the
    step's ``rc`` and ``cmd``, and the last ``log_lines`` lines of the log; the install at ``prefix`` is
    unchanged. Once the code inside has swapped its build in, the staging directory is removed.
    """
    log_path = os.path.join(staging, "build.log")
    try:
        if not os.path.isdir(os.path.dirname(prefix)):
            os.makedirs(os.path.dirname(prefix), 0o755)
        os.makedirs(staging, 0o755)
        runner.log_path = log_path
        result["log"] = log_path
        runner.log(header)
        yield log_path
    except StepFailed as exc:
        raise Failed(failure(exc.msg, True), rc=exc.rc, cmd=exc.cmd, log_tail=log_tail(log_path, log_lines))
    except (OSError, IOError, BuildError) + tuple(errors) as exc:
        raise Failed(failure(exc, False), log_tail=log_tail(log_path, log_lines))
    shutil.rmtree(staging, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a, b):
    """Atomically exchange two paths (Linux renameat2 RENAME_EXCHANGE); False when unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return False
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    rc = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EXDEV, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), a)


def _discard(path, key_hint="0"):
    """Move ``path`` out of the way (to a ``.discard-*`` name) and remove it."""
    parent, base = os.path.split(path)
    base = base[:-len(".previous")] if base.endswith(".previous") else base
    target = os.path.join(parent, "%s.discard-%s" % (base, key_hint))
    suffix = 0
    while os.path.lexists(target):
        suffix += 1
        target = os.path.join(parent, "%s.discard-%s%d" % (base, key_hint, suffix))
    os.rename(path, target)
    shutil.rmtree(target)


def swap_in(prefix, staged, exchange=True):
    """Put the verified tree ``staged`` at ``prefix``; the old install becomes ``<prefix>.previous``.

    ``staged`` must be on the same filesystem as ``prefix`` (it lives in ``<prefix>.staging-*``).
    With ``renameat2`` the swap is one atomic exchange, so ``prefix`` always holds a complete install;
    without it, two renames, undone on error and repaired by :func:`recover_interrupted_swap` after a
    kill. Returns ``{'prefix', 'previous', 'method'}`` (``previous`` None when nothing was replaced).
    """
    prefix = _clean_prefix(prefix)
    if not os.path.isdir(staged):
        raise BuildError("staged tree %s does not exist" % staged)
    previous = previous_path(prefix)
    parent = os.path.dirname(prefix)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    if not os.path.lexists(prefix):
        os.rename(staged, prefix)
        return {"prefix": prefix, "previous": None, "method": "rename"}
    if exchange and _exchange(staged, prefix):
        # ``staged`` now holds the old install.
        if os.path.lexists(previous):
            _discard(previous)
        os.rename(staged, previous)
        return {"prefix": prefix, "previous": previous, "method": "exchange"}
    if os.path.lexists(previous):
        _discard(previous)
    os.rename(prefix, previous)
    try:
        os.rename(staged, prefix)
    except OSError:
        os.rename(previous, prefix)
        raise
    return {"prefix": prefix, "previous": previous, "method": "rename"}


def rollback(prefix):
    """Exchange ``prefix`` and ``<prefix>.previous`` (the rolled-back build becomes the previous one)."""
    prefix = _clean_prefix(prefix)
    previous = previous_path(prefix)
    if not os.path.isdir(previous):
        raise BuildError("no previous install at %s to roll back to" % previous)
    if _exchange(previous, prefix):
        return {"prefix": prefix, "previous": previous, "method": "exchange"}
    hold = "%s.discard-rollback" % prefix
    os.rename(prefix, hold)
    os.rename(previous, prefix)
    os.rename(hold, previous)
    return {"prefix": prefix, "previous": previous, "method": "rename"}


def replace_tree(path, new):
    """Put the directory ``new`` at ``path`` (same filesystem), replacing what is there, never delete-then-rename.

    One ``renameat2`` exchange where the kernel has it; else the old tree is renamed aside, ``new`` renamed in,
    and the old one renamed back if that fails. The replaced tree is removed only once ``new`` is in place.
    Returns the method (``rename``, ``exchange``).
    """
    path = os.path.normpath(path)
    if not os.path.isdir(new):
        raise BuildError("new tree %s does not exist" % new)
    if not os.path.lexists(path):
        os.rename(new, path)
        return "rename"
    if _exchange(new, path):
        shutil.rmtree(new)  # ``new`` now holds the old tree
        return "exchange"
    parent, base = os.path.split(path)
    aside = os.path.join(parent, ".%s.replaced-%d" % (base, os.getpid()))
    os.rename(path, aside)
    try:
        os.rename(new, path)
    except OSError:
        os.rename(aside, path)
        raise
    shutil.rmtree(aside)
    return "rename"


class PrefixLock(FileLock):
    """The build lock of ``prefix`` (``.<name>.lock`` beside it), held while a build cleans, stages and swaps.

    A second build waits for at most ``timeout`` seconds (0: refuses at once), then raises BuildError naming the
    lock file, its holder and the way out.
    """

    def __init__(self, prefix, timeout=LOCK_TIMEOUT, poll=0.5, what="build"):
        FileLock.__init__(self, prefix_lock_path(_clean_prefix(prefix)), timeout, poll=poll, what="build lock")
        self.prefix = _clean_prefix(prefix)
        self.build = what

    def __enter__(self):
        try:
            return FileLock.__enter__(self)
        except LockTimeout as exc:
            raise BuildError("another %s of %s is running (%s); its staging directory was left alone. Run again "
                             "once it ended, or raise lock_timeout to wait longer" % (self.build, self.prefix, exc))
        except LockError as exc:
            raise BuildError(str(exc))


class _NoLock(object):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def build_lock(prefix, timeout, what, check_mode=False):
    """The PrefixLock of ``prefix``, or, in check mode (which only reads), a context that locks nothing."""
    return _NoLock() if check_mode else PrefixLock(prefix, timeout, what=what)
