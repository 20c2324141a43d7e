# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Build keys and stamps of the keyed builds (NVSHMEM, DeepEP).

Standard library only, Python 3.8+ (this file runs on the managed nodes).

* Build keys: sha256 over a canonical JSON of every input that changes what gets built.
* Source identity: ``tree_hash`` over a tree's paths, modes and contents (build outputs left out).
* Stamps: ``<prefix>/.gpufleet-build.json`` records the key and what was built.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256, read_json_dict, write_json_file

__all__ = ["BuildError", "STAMP_NAME", "LOG_NAME", "KEY_SCHEMA", "canonical_json", "build_key", "short_key",
           "tree_hash", "source_identity", "stamp_path", "read_stamp", "write_stamp", "rebuild_reason",
           "stamp_diff"]

STAMP_NAME = ".gpufleet-build.json"
LOG_NAME = ".gpufleet-build.log"
KEY_SCHEMA = 1


class BuildError(Exception):
    """A build input or a build tree that the build logic cannot accept."""


def _check_jsonable(value, where):
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise BuildError("build input %s is %r, which has no stable JSON form" % (where, value))
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_jsonable(item, "%s[%d]" % (where, index))
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise BuildError("build input %s has a non-string key %r" % (where, key))
            _check_jsonable(item, "%s.%s" % (where, key))
        return
    raise BuildError("build input %s is a %s; use strings, numbers, booleans, lists or dicts"
                     % (where, type(value).__name__))


def canonical_json(value):
    """The one JSON text of ``value``: sorted keys, no spaces, ASCII only."""
    _check_jsonable(value, "inputs")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def build_key(kind, inputs):
    """sha256 (hex) over the canonical JSON of ``{'kind', 'schema', 'inputs'}``.

    ``kind`` names what is built (``nvshmem``, ``deepep``); ``inputs`` is a dict of every input that
    changes the result (source revision or tarball sha256, fixes, configure options, tool versions,
    arch list, generation). Equal inputs give equal keys on every node and every Python.
    """
    if not isinstance(kind, str) or not kind:
        raise BuildError("build kind must be a non-empty string, got %r" % (kind,))
    if not isinstance(inputs, dict):
        raise BuildError("build inputs must be a dict, got a %s" % type(inputs).__name__)
    text = canonical_json({"kind": kind, "schema": KEY_SCHEMA, "inputs": inputs})
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def short_key(key, length=8):
    """The first ``length`` hex digits of a key (names staging dirs and artifacts)."""
    if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{%d,}" % length, key):
        raise BuildError("%r is not a build key (hex sha256)" % (key,))
    return key[:length]


# Build outputs and VCS data never take part in a source tree's identity.
TREE_EXCLUDE_DIRS = (".git", "build", "dist", "__pycache__", ".eggs", ".pytest_cache")
TREE_EXCLUDE_SUFFIXES = (".pyc", ".pyo", ".so", ".o", ".a", ".egg-info", ".whl")


def tree_hash(root, exclude_dirs=TREE_EXCLUDE_DIRS, exclude_suffixes=TREE_EXCLUDE_SUFFIXES):
    """sha256 over the relative paths, modes (executable bit) and contents of the files under ``root``.

    Symlinks count by their target text. Build outputs (``build/``, ``dist/``, ``*.so``, ...) are left
    out, so building in a tree does not change its identity.
    """
    if not os.path.isdir(root):
        raise BuildError("source tree %s is not a directory" % root)
    digest = hashlib.sha256()
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs
                         if d not in exclude_dirs and not d.endswith(tuple(exclude_suffixes)))
        rel_dir = os.path.relpath(current, root)
        for name in sorted(files):
            if name.endswith(tuple(exclude_suffixes)):
                continue
            path = os.path.join(current, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(path):
                digest.update(("L %s -> %s\n" % (rel, os.readlink(path))).encode("utf-8", "surrogateescape"))
                continue
            mode = "x" if os.access(path, os.X_OK) else "-"
            digest.update(("F %s %s %s\n" % (rel, mode, file_sha256(path))).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def source_identity(run, git, src):
    """The identity of the source tree ``src``: ``{'kind': 'git', 'revision'}`` for a git checkout (with ``'tree'``,
    its tree hash, when it has local changes), else ``{'kind': 'tree', 'tree'}``.

    ``run(argv, timeout)`` runs a command and returns ``(rc, stdout, stderr)``; ``git`` is the git binary or None.
    """
    if git and os.path.exists(os.path.join(src, ".git")):
        rc, out, dummy = run([git, "-C", src, "rev-parse", "HEAD"], 120)
        if rc == 0 and out.strip():
            rc2, status, dummy = run([git, "-C", src, "status", "--porcelain", "--untracked-files=no"], 300)
            identity = {"kind": "git", "revision": out.strip()}
            if rc2 != 0 or status.strip():
                identity["tree"] = tree_hash(src)
            return identity
    return {"kind": "tree", "tree": tree_hash(src)}


# --------------------------------------------------------------------------------------------
# Stamps


def stamp_path(prefix):
    return os.path.join(prefix, STAMP_NAME)


def read_stamp(prefix):
    """The stamp of the install at ``prefix`` (a dict), or None when absent or unreadable."""
    return read_json_dict(stamp_path(prefix))


def write_stamp(prefix, data):
    """Write ``data`` as the stamp of ``prefix`` atomically (temp file in the same dir + rename)."""
    _check_jsonable(data, "stamp")
    return write_json_file(stamp_path(prefix), data)


def rebuild_reason(prefix, stamp, key, problem=None):
    """Why the install at ``prefix`` (its stamp ``stamp``) is not a good build of ``key``: a sentence, or None when it
    is. ``problem`` is what is wrong with an install that has the key (None: nothing)."""
    if not os.path.isdir(prefix):
        return "nothing installed at %s" % prefix
    if not stamp:
        return "%s has no build stamp" % prefix
    if stamp.get("key") != key:
        return "key changed: installed %s, wanted %s" % (str(stamp.get("key"))[:8], short_key(key))
    return problem


def stamp_diff(prefix, stamp, key, inputs):
    """The diff-mode result of a rebuild of ``prefix``: its stamp before, the key and inputs after."""
    return {
        "before": json.dumps(stamp or {}, sort_keys=True, indent=2) + "\n",
        "after": json.dumps({"key": key, "inputs": inputs}, sort_keys=True, indent=2) + "\n",
        "before_header": stamp_path(prefix), "after_header": stamp_path(prefix),
    }
