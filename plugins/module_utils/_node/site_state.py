# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converged state of a node: a fingerprint of what the phases of site.yml left on it.

A full converge records, in the node's stamp, the settings key it converged with and a fingerprint of
every path and Debian package the phases manage. A later run reads the stamp and the node once: when the
key is the same and every fingerprint still matches, nothing a phase would look at has changed, and the
node needs no phase at all. Any difference (a file edited, a package removed, a device renamed, a library
replaced) is named, and the node goes through every phase, which puts it right.

Fingerprints are cheap and never import anything heavy:

- a missing path: ``{"kind": "missing"}``;
- a symlink: its target text (not followed; watch the target too when it matters);
- a regular file: its size and sha256, or for a file over ``hash_limit`` bytes its size and mtime
  (a build replaces a file, which changes its mtime); files of pseudo filesystems (``/proc``,
  ``/sys``) report size 0 and are read whatever their size says;
- a directory: the names of its entries (not recursive; ``__pycache__`` and ``*.pyc`` left out), with a
  ``/`` after subdirectories and an ``@`` after symlinks, so an install that adds, removes or renames
  anything in it (a dist-info of another version, a renamed RDMA device) shows;
- a glob pattern (any of ``*?[`` in the path): the sorted list of matching paths, each fingerprinted.
"""

from __future__ import annotations

import glob
import json
import os
import stat

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    file_digest,
    read_text,
    write_json_file,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import RecordShapeError, check_record

FORMAT = 1
HASH_LIMIT = 8 * 1024 * 1024
DIR_SKIP_SUFFIXES = (".pyc",)
DIR_SKIP_NAMES = ("__pycache__",)


class SiteStateError(Exception):
    pass


def is_pattern(path):
    return any(c in path for c in "*?[")


def fingerprint_path(path, hash_limit=HASH_LIMIT):
    """The fingerprint of one path (see the module docstring)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "missing"}
    except OSError as exc:
        return {"kind": "unreadable", "error": exc.strerror or str(exc)}
    if stat.S_ISLNK(st.st_mode):
        return {"kind": "link", "target": os.readlink(path)}
    if stat.S_ISDIR(st.st_mode):
        try:
            entries = []
            with os.scandir(path) as it:
                for entry in it:
                    if entry.name in DIR_SKIP_NAMES or entry.name.endswith(DIR_SKIP_SUFFIXES):
                        continue
                    if entry.is_symlink():
                        entries.append(entry.name + "@")
                    elif entry.is_dir():
                        entries.append(entry.name + "/")
                    else:
                        entries.append(entry.name)
        except OSError as exc:
            return {"kind": "unreadable", "error": exc.strerror or str(exc)}
        return {"kind": "dir", "entries": sorted(entries)}
    if stat.S_ISREG(st.st_mode):
        if st.st_size > hash_limit:
            return {"kind": "file", "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        try:
            digest, read = file_digest(path, limit=hash_limit + 1)  # one byte more tells a pseudo file that grew
        except OSError as exc:
            return {"kind": "unreadable", "error": exc.strerror or str(exc)}
        if read > hash_limit:  # a pseudo file that reported size 0 but holds more: size of what was read
            return {"kind": "file", "size": read, "sha256_head": digest}
        return {"kind": "file", "size": read, "sha256": digest}
    return {"kind": "other", "mode": stat.S_IFMT(st.st_mode)}


def fingerprint_watch(paths, hash_limit=HASH_LIMIT):
    """{path or pattern: fingerprint}; a pattern maps to {"kind": "glob", "matches": {path: fingerprint}}."""
    out = {}
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/"):
            raise SiteStateError("watch entry %r is not an absolute path (expected a path or glob pattern such as "
                                 "/opt/deepep/nvshmem/lib/libnvshmem*)" % (path,))
        path = os.path.normpath(path)
        if is_pattern(path):
            out[path] = {"kind": "glob",
                         "matches": {m: fingerprint_path(m, hash_limit) for m in sorted(glob.glob(path))}}
        else:
            out[path] = fingerprint_path(path, hash_limit)
    return out


def dpkg_versions(names, status_path="/var/lib/dpkg/status", require_file=False):
    """{name: version or None}: the installed version of each Debian package, read from dpkg's status file.

    A package counts as installed when its Status ends in ``installed`` (not ``config-files``,
    ``half-installed``, ...). Architecture-qualified names (``foo:amd64``) match the plain name. A status file that
    cannot be read raises SiteStateError naming it; with ``require_file`` (the converged stamp) a missing one too,
    since it is not a fact about the packages (without, a node with no dpkg database has none installed).
    """
    wanted = {n.split(":", 1)[0]: n for n in names}
    found = {n: None for n in names}
    if not wanted:
        return found
    # A status file that cannot be read says nothing of the packages: recording them as not installed from it
    # would be a false fact, so for the stamp a missing file is refused like any other read failure.
    try:
        with open(status_path, "r", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        if not require_file:
            return found
        raise SiteStateError("cannot read dpkg status %s: the file does not exist, so the versions of %s cannot be "
                             "known (expected dpkg's status file: set dpkg_status to it, or leave packages empty on a "
                             "node without dpkg)" % (status_path, _first(sorted(found), 3, ", ")))
    except OSError as exc:
        raise SiteStateError("cannot read dpkg status %s: %s" % (status_path, exc.strerror or exc))
    for para in text.split("\n\n"):
        fields = {}
        for line in para.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, dummy, value = line.partition(":")
                fields[key.strip()] = value.strip()
        name = fields.get("Package")
        if name in wanted and fields.get("Status", "").endswith(" installed"):
            found[wanted[name]] = fields.get("Version")
    return found


def _first(items, limit, sep):
    """The first ``limit`` items joined by ``sep``, and how many more there are."""
    return sep.join(items[:limit]) + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def _describe(fp):
    kind = fp.get("kind")
    if kind == "missing":
        return "missing"
    if kind == "link":
        return "link to %s" % fp["target"]
    if kind == "dir":
        return "directory of %d entries" % len(fp["entries"])
    if kind == "file":
        return "file of %d bytes" % fp["size"]
    if kind == "unreadable":
        return "unreadable (%s)" % fp.get("error")
    return kind


def _diff_one(path, was, now):
    if was == now:
        return []
    if was.get("kind") == "dir" and now.get("kind") == "dir":
        added = sorted(set(now["entries"]) - set(was["entries"]))
        removed = sorted(set(was["entries"]) - set(now["entries"]))
        parts = [label + " " + _first(names, 5, ", ") for label, names in (("added", added), ("removed", removed)) if names]
        return ["%s: %s" % (path, "; ".join(parts))]
    if was.get("kind") == "glob" and now.get("kind") == "glob":
        return _diff_paths(was["matches"], now["matches"])
    if was.get("kind") == now.get("kind") == "file":
        return ["%s: content changed (%s, was %d bytes)" % (path, _describe(now), was["size"])]
    if was.get("kind") == now.get("kind") == "link":
        return ["%s: now points at %s (was %s)" % (path, now["target"], was["target"])]
    return ["%s: now %s (was %s)" % (path, _describe(now), _describe(was))]


def _diff_paths(was, now):
    """The differences of two {path: fingerprint} maps; a path on one side only is missing on the other."""
    missing = {"kind": "missing"}
    out = []
    for path in sorted(set(was) | set(now)):
        out.extend(_diff_one(path, was.get(path, missing), now.get(path, missing)))
    return out


def drift(recorded, current):
    """Human-readable differences between two states ({"watch": ..., "packages": ...})."""
    out = _diff_paths(recorded.get("watch", {}), current.get("watch", {}))
    was_pkgs, now_pkgs = recorded.get("packages", {}), current.get("packages", {})
    for name in sorted(set(was_pkgs) | set(now_pkgs)):
        was, now = was_pkgs.get(name), now_pkgs.get(name)
        if was != now:
            out.append("package %s: %s (was %s)" % (name, now or "not installed", was or "not installed"))
    return out


def current_state(stamp, hash_limit=HASH_LIMIT, dpkg_status="/var/lib/dpkg/status"):
    """Fingerprint again exactly what ``stamp`` recorded."""
    return {"watch": fingerprint_watch(list(stamp.get("watch", {})), hash_limit),
            "packages": dpkg_versions(list(stamp.get("packages", {})), dpkg_status, require_file=True)}


def watched_count(stamp):
    """How many paths (glob matches counted) and packages a stamp covers; 0 without a stamp."""
    if not stamp:
        return 0
    count = len(stamp.get("packages", {}))
    for fp in stamp.get("watch", {}).values():
        count += len(fp.get("matches", {})) if fp.get("kind") == "glob" else 1
    return count


_FP_FIELDS = {"missing": {}, "unreadable": {}, "link": {"target": str}, "dir": {"entries": list},
              "file": {"size": int}, "other": {}, "glob": {"matches": dict}}


def _fingerprint_problem(fp, glob_ok):
    """Why ``fp`` is not a fingerprint as fingerprint_path/fingerprint_watch write them; None when it is one."""
    if not isinstance(fp, dict) or fp.get("kind") not in _FP_FIELDS or (fp["kind"] == "glob" and not glob_ok):
        return "expected a fingerprint object with a kind out of %s" % ", ".join(sorted(_FP_FIELDS))
    for field, kind in _FP_FIELDS[fp["kind"]].items():
        if not isinstance(fp.get(field), kind) or isinstance(fp.get(field), bool):
            return "its %s is not a %s" % (field, kind.__name__)
    if fp["kind"] == "dir" and not all(isinstance(e, str) for e in fp["entries"]):
        return "its entries are not all strings"
    if fp["kind"] == "glob":
        for match in fp["matches"].values():
            why = _fingerprint_problem(match, glob_ok=False)
            if why:
                return "a match: " + why
    return None


def stamp_problem(path, stamp):
    """Why ``stamp`` (a JSON object read from ``path``) is not a stamp of this collection's shape; None when it is.

    The key and the time are strings, ``watch`` maps paths to fingerprint objects and ``packages`` maps package
    names to a version string or null."""
    try:
        check_record(path, stamp, {"key": "str", "format": ("int", False), "recorded_at": ("str|null", False),
                                   "watch": ("dict", False), "packages": ("dict", False)}, what="converged stamp")
    except RecordShapeError as exc:
        return str(exc)
    for name, fp in stamp.get("watch", {}).items():
        why = _fingerprint_problem(fp, glob_ok=True)
        if why:
            return "converged stamp %s: watch[%r] is %r: %s" % (path, name, fp, why)
    for name, version in stamp.get("packages", {}).items():
        if version is not None and not isinstance(version, str):
            return "converged stamp %s: packages[%r] is %r, expected a version string or null" % (path, name, version)
    return None


def read_stamp(path):
    """``(stamp or None, problem or None)``: a stamp of the wrong shape is refused (None) with the reason."""
    text = read_text(path)
    if text is None:
        return None, None
    try:
        stamp = json.loads(text)
    except ValueError:
        return None, "converged stamp %s is not JSON" % path
    problem = stamp_problem(path, stamp)
    return (None, problem) if problem else (stamp, None)


def check(path, key, hash_limit=HASH_LIMIT, dpkg_status="/var/lib/dpkg/status"):
    """{steady, intact, drift, reason, recorded_at, watched}: what the stamp at ``path`` says of this node now.

    steady: the node converged last with this very key. intact: steady, and every fingerprint still matches.
    A stamp that is missing, unreadable or not a JSON object counts as no stamp; one of the wrong shape (valid
    JSON, wrong types) too, with the reason naming the file.
    """
    stamp, problem = read_stamp(path)
    out = {"steady": False, "intact": False, "drift": [], "recorded_at": (stamp or {}).get("recorded_at"),
           "watched": watched_count(stamp)}
    if problem:
        out["reason"] = "%s: refused, the node goes through every phase and the next full converge rewrites it" % problem
    elif stamp is None:
        out["reason"] = "no converged stamp at %s: the node has not completed a full converge" % path
    elif stamp.get("key") != key:
        out["reason"] = "the settings or the collection changed since the last full converge"
    elif stamp.get("format") != FORMAT or "watch" not in stamp:
        out.update(steady=True, reason="the stamp records no state of the node (written by an older collection)")
    else:
        found = drift(stamp, current_state(stamp, hash_limit, dpkg_status))
        out.update(steady=True, intact=not found, drift=found,
                   reason=("the node is as its last full converge left it" if not found
                           else "the node drifted since its last full converge: " + _first(found, 3, "; ")))
    return out


def record_content(key, watch, packages, recorded_at, hash_limit=HASH_LIMIT, dpkg_status="/var/lib/dpkg/status"):
    return {"format": FORMAT, "key": key, "recorded_at": recorded_at,
            "watch": fingerprint_watch(watch, hash_limit),
            "packages": dpkg_versions(packages, dpkg_status, require_file=True)}


def same_record(old, new):
    """Two stamps that differ only in their time say the same thing."""
    if old is None:
        return False
    return {k: v for k, v in old.items() if k != "recorded_at"} == {k: v for k, v in new.items() if k != "recorded_at"}


def stamp_target_problem(path):
    """Why the stamp cannot be written at ``path``, or None: a symlink (the rename would replace the link, and the
    collection never writes over a link silently), a directory, or an ancestor that exists but is not a directory.
    Read only, so check mode predicts the same refusals as a real record."""
    path = os.path.abspath(path)
    if os.path.islink(path):
        return ("stamp path %s is a symlink (to %s); the stamp is never written over or through a link - expected a "
                "regular file or a path that does not exist yet (remove the link or set path to the real file)"
                % (path, os.readlink(path)))
    if os.path.isdir(path):
        return "stamp path %s is a directory, expected a regular file or a path that does not exist yet" % path
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        if os.path.islink(parent) and not os.path.exists(parent):
            return ("stamp path %s: its component %s is a dangling symlink (to %s); nothing is written through a "
                    "link - expected a path of real directories" % (path, parent, os.readlink(parent)))
        if os.path.lexists(parent):
            if not os.path.isdir(parent):
                return ("stamp path %s: its parent %s is a file, expected a directory (the stamp's directory is "
                        "created when missing, never over a file)" % (path, parent))
            break
        parent = os.path.dirname(parent)
    return None


def write_stamp(path, data):
    """Write the stamp atomically (temp file beside it, then rename), mode 0644, creating its directory.
    Refuses (SiteStateError) what :func:`stamp_target_problem` names."""
    problem = stamp_target_problem(path)
    if problem:
        raise SiteStateError(problem)
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    write_json_file(path, data, indent=1, tmp_prefix=".gpufleet-site.")
