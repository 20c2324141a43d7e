# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fleet's artifact store (build once, distribute): lookup, get and put of a build key's files.

Standard library only, Python 3.8+. The same code runs on the controller (action plugin
``gpufleet.deepep.artifact_store``, store ``mode: controller``) and on a node (module ``artifact_store``, store
``mode: shared``, a path every node mounts).

Layout: ``<store>/<kind>/<key>/<files>`` and ``record.json`` (kind, key, files ``{name: {sha256, size}}`` in
install order, host, published_at, meta). A key's directory appears by one rename of a complete directory built
under ``<store>/.incoming/``; ``<store>/.lock`` (fcntl) serialises that rename, so two publishers of one key leave
one artifact and one record: the first publishes, the second reuses. Every get verifies each file's size and sha256
after the copy, before anything is installed; a truncated or tampered file, or a record of the wrong shape, is
refused with a message naming it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import tempfile

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    file_sha256,
    read_text,
    write_json_file,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._lock import FileLock, LockError, LockTimeout

__all__ = [
    "KINDS", "RECORD_NAME", "StoreError", "check_request", "check_files", "key_path", "validate_record",
    "read_record", "lookup", "verify_file", "describe_files", "make_record", "StoreLock", "new_incoming",
    "publish", "put_local", "get_local",
]

KINDS = ("nvshmem", "deepep", "nccl", "gdrcopy", "deepgemm")
RECORD_NAME = "record.json"
LEGACY_RECORD_NAME = "published.json"
LOCK_NAME = ".lock"
INCOMING_NAME = ".incoming"
LOCK_TIMEOUT = 600
KEY_FORM = "lowercase hex, 16 to 64 characters"

_KEY_RE = re.compile(r"^[0-9a-f]{16,64}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class StoreError(Exception):
    """A request, a store or an artifact the store refuses; the message names the bad value or file."""


def check_request(store, kind, key):
    """Refuse a malformed store path, kind or key, naming the value and the expected form."""
    if not isinstance(store, str) or not os.path.isabs(store):
        raise StoreError("store %r must be an absolute path" % (store,))
    if kind not in KINDS:
        raise StoreError("kind %r is not one of %s" % (kind, ", ".join(KINDS)))
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise StoreError("key %r is not a build key (%s)" % (key, KEY_FORM))


def check_files(files):
    """Refuse an empty list, a repeated name, or a name that is not a plain file name."""
    if not isinstance(files, (list, tuple)) or not files:
        raise StoreError("files must list at least one file name of src")
    seen = set()
    for name in files:
        if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name
                or name == RECORD_NAME):
            raise StoreError("files: %r is not a plain file name (no '/', not %s)" % (name, RECORD_NAME))
        if name in seen:
            raise StoreError("files: %s is listed twice" % name)
        seen.add(name)
    return list(files)


def key_path(store, kind, key):
    return os.path.join(store, kind, key)


# --------------------------------------------------------------------------------------------
# Records


def validate_record(record, kind, key, where):
    """``record`` if it is a store record of ``kind``/``key``; else StoreError naming ``where`` and the field."""
    def bad(what, expected):
        raise StoreError("%s is not a usable store record: %s (expected %s); remove %s and publish the key again"
                         % (where, what, expected, os.path.dirname(where)))

    if not isinstance(record, dict):
        bad("it is not a JSON object", "a JSON object with kind, key, files, host, published_at and meta")
    for field in ("kind", "key", "host", "published_at"):
        if not isinstance(record.get(field), str) or not record.get(field):
            bad("%s is %s" % (field, "missing" if field not in record else repr(record.get(field))), "a string")
    if record["kind"] != kind or record["key"] != key:
        bad("it records %s %s" % (record["kind"], record["key"]), "%s %s" % (kind, key))
    if not isinstance(record.get("meta", {}), dict):
        bad("meta is %r" % (record.get("meta"),), "a mapping")
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        bad("files is %s" % ("missing" if "files" not in record else repr(files)), "a mapping {name: {sha256, size}}")
    try:
        check_files(list(files))
    except StoreError as exc:
        bad(str(exc), "plain file names")
    for name, entry in files.items():
        if not isinstance(entry, dict):
            bad("files.%s is %r" % (name, entry), "a mapping with sha256 and size")
        sha = entry.get("sha256")
        if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
            bad("files.%s.sha256 is %s" % (name, "missing" if "sha256" not in entry else repr(sha)),
                "64 lowercase hex digits")
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            bad("files.%s.size is %s" % (name, "missing" if "size" not in entry else repr(size)),
                "a whole number of bytes")
    return record


def read_record(directory, kind, key):
    """The validated record of the key directory ``directory``; StoreError when absent or malformed."""
    path = os.path.join(directory, RECORD_NAME)
    text = read_text(path)
    if text is None:
        raise StoreError("%s holds no readable %s (an interrupted copy or a store of an older layout); remove %s "
                         "and publish the key again" % (directory, RECORD_NAME, directory))
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise StoreError("%s is not JSON (%s); remove %s and publish the key again" % (path, exc, directory))
    return validate_record(record, kind, key, path)


def _legacy(directory):
    """Whether ``directory`` is a key of the store's first layout (``published.json``, no checksums)."""
    return (os.path.isfile(os.path.join(directory, LEGACY_RECORD_NAME))
            and not os.path.lexists(os.path.join(directory, RECORD_NAME)))


def lookup(store, kind, key):
    """The record of ``kind``/``key`` in ``store``, or None when the store does not hold the key (a key of the
    first layout, without checksums, counts as absent: the next publication replaces it)."""
    check_request(store, kind, key)
    directory = key_path(store, kind, key)
    if not os.path.isdir(directory) or _legacy(directory):
        return None
    return read_record(directory, kind, key)


def make_record(kind, key, files, host, meta=None, published_at=None):
    """A record: ``files`` is ``{name: {sha256, size}}`` in install order."""
    if published_at is None:
        published_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"kind": kind, "key": key, "files": files, "host": host or "unknown", "published_at": published_at,
            "meta": dict(meta or {})}


# --------------------------------------------------------------------------------------------
# Files


def describe_files(directory, files):
    """``{name: {sha256, size}}`` of ``files`` in ``directory``; StoreError naming a file that is not there."""
    out = {}
    for name in check_files(files):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise StoreError("%s is not a file: nothing to publish (files must name files of src)" % path)
        try:
            out[name] = {"sha256": file_sha256(path), "size": os.path.getsize(path)}
        except (IOError, OSError) as exc:
            raise StoreError("cannot read %s: %s" % (path, exc))
    return out


def verify_file(path, entry, shown=None):
    """Refuse ``path`` unless its size and sha256 are those of the record ``entry``; the message names ``shown``
    (default ``path``)."""
    shown = shown or path
    try:
        size = os.path.getsize(path)
    except OSError:
        raise StoreError("%s is missing (the record lists it)" % shown)
    if size < entry["size"]:
        raise StoreError("%s is truncated: %d of the %d bytes its record lists" % (shown, size, entry["size"]))
    if size != entry["size"]:
        raise StoreError("%s has %d bytes, its record lists %d: the file changed after publication"
                         % (shown, size, entry["size"]))
    try:
        digest = file_sha256(path)
    except (IOError, OSError) as exc:
        raise StoreError("cannot read %s: %s" % (shown, exc))
    if digest != entry["sha256"]:
        raise StoreError("%s does not match its record (sha256 %s, the record says %s): the file was altered after "
                         "publication" % (shown, digest, entry["sha256"]))


# --------------------------------------------------------------------------------------------
# Publication


class StoreLock(FileLock):
    """``<store>/.lock`` held with fcntl (exclusive), waited for at most ``timeout`` seconds."""

    def __init__(self, store, timeout=LOCK_TIMEOUT, poll=0.1):
        FileLock.__init__(self, os.path.join(store, LOCK_NAME), timeout, poll=poll, what="store lock")

    def __enter__(self):
        try:
            return FileLock.__enter__(self)
        except LockTimeout as exc:
            raise StoreError("%s (another publication hangs?); run again once it ended" % exc)
        except LockError as exc:
            raise StoreError(str(exc))


def new_incoming(store, kind, key, host):
    """A fresh directory under ``<store>/.incoming`` to assemble a publication in (the store is created)."""
    incoming = os.path.join(store, INCOMING_NAME)
    os.makedirs(incoming, exist_ok=True)
    return tempfile.mkdtemp(prefix="%s-%s-%s." % (kind, key[:16], re.sub(r"[^A-Za-z0-9_.-]", "_", host or "x")),
                            dir=incoming)


def publish(store, kind, key, incoming, record, timeout=LOCK_TIMEOUT):
    """Publish the complete directory ``incoming`` (``record``'s files) as the key: ``(True, record)``; or, when the
    key is there already, discard ``incoming`` and return ``(False, the stored record)``."""
    try:
        with StoreLock(store, timeout):
            existing = lookup(store, kind, key)
            if existing is None:
                write_json_file(os.path.join(incoming, RECORD_NAME), record, sort_keys=False)
                os.makedirs(os.path.join(store, kind), exist_ok=True)
                target = key_path(store, kind, key)
                if os.path.isdir(target) and _legacy(target):
                    shutil.rmtree(target)
                os.rename(incoming, target)
                return True, record
            return False, existing
    finally:
        if os.path.isdir(incoming):
            shutil.rmtree(incoming, ignore_errors=True)


def put_local(store, kind, key, src, files, host, meta=None, check_mode=False, timeout=LOCK_TIMEOUT):
    """Publish ``files`` of the directory ``src`` (both on this machine) as ``kind``/``key``."""
    check_request(store, kind, key)
    check_files(files)
    existing = lookup(store, kind, key)
    path = key_path(store, kind, key)
    if existing is not None:
        return {"changed": False, "published": False, "record": existing, "path": path}
    described = describe_files(src, files)
    if check_mode:
        return {"changed": True, "published": True, "record": make_record(kind, key, described, host, meta),
                "path": path}
    incoming = new_incoming(store, kind, key, host)
    try:
        for name in files:
            shutil.copyfile(os.path.join(src, name), os.path.join(incoming, name))
            os.chmod(os.path.join(incoming, name), 0o644)
            verify_file(os.path.join(incoming, name), described[name], shown=os.path.join(src, name) + " (copied)")
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    published, record = publish(store, kind, key, incoming, make_record(kind, key, described, host, meta), timeout)
    return {"changed": published, "published": published, "record": record, "path": path}


def get_local(store, kind, key, dest, check_mode=False):
    """Copy the files of ``kind``/``key`` into ``dest`` (created if absent), each verified after the copy; nothing
    is installed unless every file verified. Files already in ``dest`` with the recorded checksum stay."""
    check_request(store, kind, key)
    if not isinstance(dest, str) or not os.path.isabs(dest):
        raise StoreError("dest %r must be an absolute path" % (dest,))
    record = lookup(store, kind, key)
    path = key_path(store, kind, key)
    if record is None:
        return {"changed": False, "found": False, "record": {}, "path": path, "copied": []}
    stored = dict((name, os.path.join(path, name)) for name in record["files"])
    for name, entry in record["files"].items():  # sizes first: a truncated store file is refused before any copy
        if not os.path.isfile(stored[name]):
            raise StoreError("%s is missing (the record lists it)" % stored[name])
        if os.path.getsize(stored[name]) < entry["size"]:
            verify_file(stored[name], entry)
    wanted = []
    for name, entry in record["files"].items():
        try:
            verify_file(os.path.join(dest, name), entry)
        except StoreError:
            wanted.append(name)
    if check_mode or not wanted:
        return {"changed": bool(wanted), "found": True, "record": record, "path": path, "copied": wanted}
    os.makedirs(dest, exist_ok=True)
    temps = {}
    try:
        for name in wanted:
            fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=dest)
            os.close(fd)
            temps[name] = tmp
            shutil.copyfile(stored[name], tmp)
            os.chmod(tmp, 0o644)
            verify_file(tmp, record["files"][name], shown="%s (copied to %s)" % (stored[name], dest))
        for name in wanted:  # record order: the file that makes the artifact usable comes last
            os.rename(temps.pop(name), os.path.join(dest, name))
    finally:
        for tmp in temps.values():
            if os.path.lexists(tmp):
                os.unlink(tmp)
    return {"changed": True, "found": True, "record": record, "path": path, "copied": wanted}
