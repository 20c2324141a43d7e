# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One AnsiballZ payload cache for every ``ansible-playbook`` process of a test run (test harness).

ansible-core builds each module's payload (the module, every module_util it imports, found by parsing each of them)
once per process, into ``ansiballz_cache`` under the process's own local temporary directory, and throws it away
at the end. A test run starts hundreds of playbook processes (Molecule's converge, idempotence, check and verify
of every scenario, the controller tests) that build the same payloads from the same sources again: profiled, the
parsing alone was a quarter of the controller's CPU in a scenario.

This callback keeps the payloads ansible-core built in the directory ``GPUFLEET_ANSIBALLZ_CACHE`` names, under a
fingerprint of everything a payload is made from: ansible-core's version and every file of its package (path, size,
modification time), and every file under the ``plugins/modules`` and ``plugins/module_utils`` directories of every
collection on the collections path. A process whose fingerprint has entries starts with them in its own
``ansiballz_cache`` (ansible-core then uses them as it uses its own); at the end of the playbook, the payloads the
process built are added. A changed source changes the fingerprint, so a stale payload is never used: the payload
a module runs is the one ansible-core builds from the current sources. Unset, it does nothing; a cache it cannot
read or write costs the time it would have saved, never a run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile

import ansible
from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_VERSION

DOCUMENTATION = """
name: gpufleet_ansiballz_cache
type: aggregate
short_description: one AnsiballZ payload cache for the playbook processes of a test run (test harness)
description:
  - Seeds this process's AnsiballZ cache from the directory named by the environment variable
    GPUFLEET_ANSIBALLZ_CACHE (entries under a fingerprint of ansible-core and the collections' modules and
    module_utils) and adds the payloads it built at the end of the playbook; does nothing when it is unset.
requirements:
  - enable in callbacks_enabled
"""

# Fingerprint directories kept (the newest by modification time): one per source state a run has seen.
KEEP = 8
SUFFIXES = (".lock", "-part")


def _walk(root):
    """(relative path, size, mtime_ns) of every file under root, links followed, sorted; not __pycache__ (no payload
    holds bytecode, and an import that writes it would otherwise change the fingerprint of unchanged sources)."""
    found = []
    for here, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(here, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            found.append("%s\0%d\0%d" % (os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
    return found


def source_roots(collections_paths):
    """The directories a payload's sources come from: ansible-core's package, then the modules and module_utils
    of every collection on the collections path and on sys.path (where ansible-core also looks), unique, sorted."""
    found = set()
    for base in list(collections_paths) + sys.path:
        top = os.path.join(base or ".", "ansible_collections")
        if not os.path.isdir(top):
            continue
        for namespace in os.listdir(top):
            if not os.path.isdir(os.path.join(top, namespace)):
                continue
            for name in os.listdir(os.path.join(top, namespace)):
                for kind in ("modules", "module_utils"):
                    path = os.path.join(top, namespace, name, "plugins", kind)
                    if os.path.isdir(path):
                        found.add(os.path.realpath(path))
    return [os.path.dirname(os.path.realpath(ansible.__file__))] + sorted(found)


def fingerprint(roots):
    """sha256 of ansible-core's version and each root's path and files (path, size, mtime): any change of a source
    a payload can include gives another fingerprint."""
    digest = hashlib.sha256(("ansible-core %s\n" % ANSIBLE_VERSION).encode())
    for root in roots:
        digest.update(("root %s\n" % root).encode())
        for line in _walk(root):
            digest.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


def _entries(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n for n in names if not n.endswith(SUFFIXES) and not n.startswith("."))


def seed(store, local):
    """Link (copy across file systems) every entry of store into local that local lacks; the names seeded."""
    seeded = []
    os.makedirs(local, exist_ok=True)
    for name in _entries(store):
        target = os.path.join(local, name)
        if os.path.exists(target):
            continue
        try:
            try:
                os.link(os.path.join(store, name), target)
            except OSError:
                shutil.copyfile(os.path.join(store, name), target)
        except OSError:
            continue
        seeded.append(name)
    return seeded


def keep(local, store, known):
    """Add to store every entry of local not in known (written to a temporary name, then renamed: a reader never
    sees half a file); the names added."""
    added = []
    for name in _entries(local):
        if name in known or os.path.exists(os.path.join(store, name)):
            continue
        try:
            os.makedirs(store, exist_ok=True)
            handle, tmp = tempfile.mkstemp(dir=store, prefix=".%s." % name)
            try:
                with os.fdopen(handle, "wb") as out, open(os.path.join(local, name), "rb") as src:
                    shutil.copyfileobj(src, out)
                os.replace(tmp, os.path.join(store, name))
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            continue
        added.append(name)
    return added


def prune(cache, current, limit=KEEP):
    """Remove the oldest fingerprint directories beyond limit (never current)."""
    try:
        dirs = [os.path.join(cache, d) for d in os.listdir(cache) if len(d) == 64]
    except OSError:
        return
    dirs = sorted((d for d in dirs if os.path.basename(d) != current), key=os.path.getmtime, reverse=True)
    for old in dirs[limit - 1:]:
        shutil.rmtree(old, ignore_errors=True)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_ansiballz_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._store = None
        self._local = None
        self._seeded = set()
        cache = os.environ.get("GPUFLEET_ANSIBALLZ_CACHE") or None
        if cache is None:
            return
        try:
            # The workers this process forks build into its local temporary directory's ansiballz_cache.
            self._local = os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")
            key = fingerprint(source_roots(C.COLLECTIONS_PATHS))
            self._store = os.path.join(os.path.abspath(cache), key)
            self._seeded = set(seed(self._store, self._local))
            if os.path.isdir(self._store):
                os.utime(self._store)
            prune(os.path.abspath(cache), key)
        except OSError as exc:  # a harness aid: a run never fails for it
            self._display.warning("gpufleet_ansiballz_cache: %s" % exc)
            self._store = None

    def v2_playbook_on_stats(self, stats):
        if self._store is None:
            return
        keep(self._local, self._store, self._seeded)
