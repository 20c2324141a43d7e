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

Links: nothing is read or written through a symbolic link. A put refuses a source file, ``src`` or a directory
above it that is a link; a store entry (the kind and key directories, ``record.json``, the files) holding a link,
a hard-linked file or anything but regular files is refused; ``dest`` and the directories above it must not be
links. Files are opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``: a FIFO is refused, never waited on).

Modes: a published file keeps its source's permission bits less group and world write, setuid, setgid and sticky
(``& 0o755``: a 0600 source stays 0600 in the store and where a get installs it).

Pins: the sha256 of an entry's ``record.json`` bytes is returned by every lookup, get and put
(``record_sha256``); given as a pin, a record of another digest (a rewritten record and files) is refused. Without
a pin the checksums are self-referential: they catch damage, not a record rewritten with its files by a writer of
the store (the controller's user for a controller store, every publishing node for a shared one), so a get from a
shared store that installs from an unpinned record warns (``unpinned_warning``) with the digest to pin.

Lock: a store that cannot hold ``<store>/.lock`` (read-only, a file, under /proc, no flock) is refused naming the
store, the lock file, why, and the option (``unlockable_message``).

Staging: each publication assembles its files in ``<store>/.incoming/<kind>-<key16>-<host>.<random>``, created under
the store lock and held with ``flock`` for its life; the next publication removes those nobody holds (a killed
publisher's), under the store lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile

from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import now
from ansible_collections.gpufleet.deepep.plugins.module_utils._storefs import (
    CHUNK,
    Incoming,
    LOCK_TIMEOUT,
    O_DIR,
    StoreError,
    StoreLock,
    check_dir,
    check_entry,
    copy_file,
    create_new,
    fd_sha256,
    lstat_or_none,
    open_regular,
    refuse_any_link,
    store_mode,
    verify_file,
)

__all__ = [
    "ARGUMENT_SPEC", "REQUIRED_IF", "KINDS", "RECORD_NAME", "StoreError", "check_request", "check_files", "check_pin",
    "check_lock_timeout", "key_path", "validate_record", "read_record", "lookup", "lookup_entry", "describe_files",
    "describe_sources", "make_record", "new_incoming", "clean_incoming", "publish", "put_local", "get_local",
    "unpinned_warning",
]

KINDS = ("nvshmem", "deepep", "deepgemm", "deepep_jit")
RECORD_NAME = "record.json"
LEGACY_RECORD_NAME = "published.json"
INCOMING_NAME = ".incoming"
LOCK_TIMEOUT_MAX = 86400
PIN_VARIABLE = "record_sha256 (gpufleet_artifact_record_pins for the roles)"
KEY_FORM = "lowercase hex, 16 to 64 characters"
PIN_FORM = "64 lowercase hex digits, the record_sha256 a put or lookup returned"
RECORD_MAX = 8 * 1024 * 1024

_KEY_RE = re.compile(r"^[0-9a-f]{16,64}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_INCOMING_RE = re.compile(r"^(?:%s)-[0-9a-f]{16}-[A-Za-z0-9_.-]+\.[a-z0-9_]{8}$" % "|".join(KINDS))


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


def check_pin(pin):
    """``pin`` (a record's sha256) or None when none is given; StoreError naming the option and the form."""
    if pin is None:
        return None
    if not isinstance(pin, str) or not _SHA256_RE.fullmatch(pin):
        raise StoreError("record_sha256 %r is not a record digest (expected %s)" % (pin, PIN_FORM))
    return pin


def check_lock_timeout(value):
    """``value`` when it is a number of seconds from 0 to a day; StoreError naming the option and the form."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= LOCK_TIMEOUT_MAX:
        raise StoreError("lock_timeout %r is not a wait in seconds (expected a whole number from 0, one try, to %d)"
                         % (value, LOCK_TIMEOUT_MAX))
    return value


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


def _read_record_bytes(path, directory):
    """The bytes of ``record.json`` (never through a link, at most RECORD_MAX)."""
    missing = ("%s holds no readable %s (an interrupted copy or a store of an older layout); remove %s and publish "
               "the key again" % (directory, RECORD_NAME, directory))
    fd, info = open_regular(path, path, missing)
    try:
        if info.st_size > RECORD_MAX:
            raise StoreError("%s has %d bytes, more than a record's %d; remove %s and publish the key again"
                             % (path, info.st_size, RECORD_MAX, directory))
        chunks = []
        while True:
            block = os.read(fd, CHUNK)
            if not block:
                break
            chunks.append(block)
        return b"".join(chunks)
    except OSError as exc:
        raise StoreError("cannot read %s: %s" % (path, exc.strerror or exc))
    finally:
        os.close(fd)


def _record_and_digest(directory, kind, key):
    path = os.path.join(directory, RECORD_NAME)
    data = _read_record_bytes(path, directory)
    try:
        record = json.loads(data.decode("utf-8", "replace"))
    except ValueError as exc:
        raise StoreError("%s is not JSON (%s); remove %s and publish the key again" % (path, exc, directory))
    return validate_record(record, kind, key, path), hashlib.sha256(data).hexdigest()


def read_record(directory, kind, key):
    """The validated record of the key directory ``directory``; StoreError when absent or malformed."""
    return _record_and_digest(directory, kind, key)[0]


def _legacy(directory):
    """Whether ``directory`` is a key of the store's first layout (``published.json``, no checksums)."""
    legacy = lstat_or_none(os.path.join(directory, LEGACY_RECORD_NAME))
    return (legacy is not None and stat.S_ISREG(legacy.st_mode)
            and lstat_or_none(os.path.join(directory, RECORD_NAME)) is None)


def lookup_entry(store, kind, key, pin=None):
    """``(record, sha256 of its record.json)`` of ``kind``/``key`` in ``store``, or ``(None, "")`` when the store
    does not hold the key (a key of the first layout, without checksums, counts as absent). A link, a hard link or
    anything but regular files in the entry is refused; so is a record whose digest is not ``pin`` (when given)."""
    check_request(store, kind, key)
    pin = check_pin(pin)
    directory = key_path(store, kind, key)
    if (not check_dir(os.path.join(store, kind), "the kind directory")
            or not check_dir(directory, "the key directory") or _legacy(directory)):
        return None, ""
    check_entry(directory)
    record, digest = _record_and_digest(directory, kind, key)
    if pin is not None and digest != pin:
        raise StoreError("%s/%s: %s has sha256 %s, but record_sha256 pins %s for this key: the record was rewritten "
                         "after it was pinned, so neither it nor its files are used (if the key was published again "
                         "on purpose, pin the new digest in %s)"
                         % (kind, key, os.path.join(directory, RECORD_NAME), digest, pin, PIN_VARIABLE))
    return record, digest


def lookup(store, kind, key, pin=None):
    """The record of ``kind``/``key`` in ``store``, or None when the store does not hold the key (see
    ``lookup_entry``)."""
    return lookup_entry(store, kind, key, pin)[0]


def unpinned_warning(store, kind, key, result, check_mode=False):
    """The warning of a get from a store every node mounts (mode=shared) that installed (or, in check mode, would
    install) files of ``kind``/``key`` from a record no pin was given for; None when nothing was copied. The
    checksums of a record prove its files are the ones it lists, not that nobody rewrote both: any host that can
    write a shared store can. The warning names the digest to pin."""
    if not result.get("found") or not result.get("copied"):
        return None
    record = result.get("record") or {}
    digest = result.get("record_sha256") or "?"
    return ("artifact store %s (mode=shared): %s %s/%s from an unpinned record (record.json sha256 %s, published by "
            "%s at %s). Every file matched its record, but a host that can write this store can rewrite a record and "
            "its files together; to refuse such a rewrite, pin the digest: %s {%s: %s}"
            % (store, "would install" if check_mode else "installed", kind, key, digest, record.get("host", "?"),
               record.get("published_at", "?"), PIN_VARIABLE, key, digest))


def make_record(kind, key, files, host, meta=None, published_at=None):
    """A record: ``files`` is ``{name: {sha256, size}}`` in install order."""
    if published_at is None:
        published_at = now()
    return {"kind": kind, "key": key, "files": files, "host": host or "unknown", "published_at": published_at,
            "meta": dict(meta or {})}


# --------------------------------------------------------------------------------------------
# Sources


def describe_sources(directory, files):
    """``{name: {sha256, size, mode}}`` of ``files`` in ``directory`` (``mode``: the permission bits, an int),
    read without following a link; StoreError naming a file that is not there, is a link or not a regular file,
    or a ``directory`` that is (or lies under) a link."""
    refuse_any_link(directory, "src")
    out = {}
    for name in check_files(files):
        path = os.path.join(directory, name)
        try:
            fd, info = open_regular(path, path, "%s is not a file: nothing to publish (files must name files of src)"
                                    % path)
        except StoreError as exc:
            raise StoreError("src %s: %s" % (directory, exc))
        try:
            digest, size = fd_sha256(fd)
        except (IOError, OSError) as exc:
            raise StoreError("cannot read %s: %s" % (path, exc))
        finally:
            os.close(fd)
        out[name] = {"sha256": digest, "size": size, "mode": stat.S_IMODE(info.st_mode)}
    return out


def describe_files(directory, files):
    """``{name: {sha256, size}}`` of ``files`` in ``directory`` (see ``describe_sources``)."""
    return dict((name, {"sha256": entry["sha256"], "size": entry["size"]})
                for name, entry in describe_sources(directory, files).items())


# --------------------------------------------------------------------------------------------
# Publication


def clean_incoming(store):
    """Remove the staging directories of ``<store>/.incoming`` that are ours (the name a publication gives, this
    user's) and that nobody holds (their publisher was killed); the caller holds the store lock. The paths removed."""
    incoming = os.path.join(store, INCOMING_NAME)
    removed = []
    try:
        names = sorted(os.listdir(incoming))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(incoming, name)
        info = lstat_or_none(path)
        if (not _INCOMING_RE.match(name) or info is None or not stat.S_ISDIR(info.st_mode)
                or info.st_uid != os.geteuid()):
            continue
        try:
            fd = os.open(path, O_DIR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live publication holds it
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
        removed.append(path)
    return removed


def new_incoming(store, kind, key, host, timeout=LOCK_TIMEOUT):
    """A fresh directory under ``<store>/.incoming`` to assemble a publication in (the store is created), as an
    ``Incoming`` held until it is published or discarded; made under the store lock, which also removes the
    directories of killed publishers first."""
    incoming = os.path.join(store, INCOMING_NAME)
    with StoreLock(store, timeout):
        if not check_dir(incoming, "the staging directory"):
            os.mkdir(incoming, 0o755)
            check_dir(incoming, "the staging directory")
        clean_incoming(store)
        path = tempfile.mkdtemp(prefix="%s-%s-%s." % (kind, key[:16], re.sub(r"[^A-Za-z0-9_.-]", "_", host or "x")),
                                dir=incoming)
        fd = os.open(path, O_DIR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            shutil.rmtree(path, ignore_errors=True)
            raise
    return Incoming(path, fd)


def _record_bytes(record):
    return (json.dumps(record, indent=2) + "\n").encode("utf-8")


def publish(store, kind, key, incoming, record, timeout=LOCK_TIMEOUT, pin=None):
    """Publish the complete directory of ``incoming`` (an ``Incoming``: ``record``'s files) as the key:
    ``(True, record, its sha256)``; or, when the key is there already, discard ``incoming`` and return
    ``(False, the stored record, its sha256)`` (refused when ``pin`` is given and differs)."""
    try:
        with StoreLock(store, timeout):
            existing, digest = lookup_entry(store, kind, key, pin)
            if existing is None:
                data = _record_bytes(record)
                fd = create_new(os.path.join(incoming.path, RECORD_NAME))
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    os.fchmod(out.fileno(), 0o644)
                if not check_dir(os.path.join(store, kind), "the kind directory"):
                    os.mkdir(os.path.join(store, kind), 0o755)
                    check_dir(os.path.join(store, kind), "the kind directory")
                target = key_path(store, kind, key)
                if check_dir(target, "the key directory") and _legacy(target):
                    shutil.rmtree(target)
                os.rename(incoming.path, target)
                return True, record, hashlib.sha256(data).hexdigest()
            return False, existing, digest
    finally:
        incoming.discard()


def put_local(store, kind, key, src, files, host, meta=None, check_mode=False, timeout=LOCK_TIMEOUT, pin=None):
    """Publish ``files`` of the directory ``src`` (both on this machine) as ``kind``/``key``. ``pin`` is checked
    against a record the store holds already; a new publication returns its digest (``record_sha256``)."""
    check_request(store, kind, key)
    check_files(files)
    check_lock_timeout(timeout)
    refuse_any_link(src, "src")
    existing, digest = lookup_entry(store, kind, key, pin)
    path = key_path(store, kind, key)
    if existing is not None:
        return {"changed": False, "published": False, "record": existing, "path": path, "record_sha256": digest}
    described = describe_sources(src, files)
    record = make_record(kind, key, dict((name, {"sha256": entry["sha256"], "size": entry["size"]})
                                         for name, entry in described.items()), host, meta)
    if check_mode:
        return {"changed": True, "published": True, "record": record, "path": path, "record_sha256": ""}
    incoming = new_incoming(store, kind, key, host, timeout)
    try:
        for name in files:
            target = os.path.join(incoming.path, name)
            shown = os.path.join(src, name)
            copy_file(shown, shown, create_new(target), store_mode(described[name]["mode"]))
            verify_file(target, described[name], shown=shown + " (copied)")
    except BaseException:
        incoming.discard()
        raise
    published, record, digest = publish(store, kind, key, incoming, record, timeout, pin)
    return {"changed": published, "published": published, "record": record, "path": path, "record_sha256": digest}


def get_local(store, kind, key, dest, check_mode=False, pin=None):
    """Copy the files of ``kind``/``key`` into ``dest`` (created if absent), each verified after the copy; nothing
    is installed unless every file verified. Files already in ``dest`` with the recorded checksum stay. Each copy
    gets the stored file's mode (``store_mode``); nothing is read or written through a link."""
    check_request(store, kind, key)
    refuse_any_link(dest, "dest")
    record, digest = lookup_entry(store, kind, key, pin)
    path = key_path(store, kind, key)
    if record is None:
        return {"changed": False, "found": False, "record": {}, "path": path, "copied": [], "record_sha256": ""}
    stored = dict((name, os.path.join(path, name)) for name in record["files"])
    for name, entry in record["files"].items():  # sizes first: a truncated store file is refused before any copy
        info = lstat_or_none(stored[name])
        if info is None:
            raise StoreError("%s is missing (the record lists it)" % stored[name])
        if info.st_size < entry["size"]:
            verify_file(stored[name], entry)
    wanted = []
    for name, entry in record["files"].items():
        try:
            verify_file(os.path.join(dest, name), entry)
        except StoreError:
            wanted.append(name)
    result = {"changed": bool(wanted), "found": True, "record": record, "path": path, "copied": wanted,
              "record_sha256": digest}
    if check_mode or not wanted:
        return result
    os.makedirs(dest, exist_ok=True)
    refuse_any_link(dest, "dest")
    temps = {}
    try:
        for name in wanted:
            fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp", dir=dest)
            temps[name] = tmp
            copy_file(stored[name], stored[name], fd)
            verify_file(tmp, record["files"][name], shown="%s (copied to %s)" % (stored[name], dest))
        for name in wanted:  # record order: the file that makes the artifact usable comes last
            os.rename(temps.pop(name), os.path.join(dest, name))
    finally:
        for tmp in temps.values():
            if os.path.lexists(tmp):
                os.unlink(tmp)
    return result


# The options of the artifact_store module and its action (modules/artifact_store.py documents them): here, where the
# module on the node and the action on the controller both read them.
ARGUMENT_SPEC = dict(
    op=dict(type="str", required=True, choices=["lookup", "get", "put", "describe"]),
    store=dict(type="path", required=True),
    mode=dict(type="str", default="controller", choices=["controller", "shared"]),
    kind=dict(type="str", required=True, choices=list(KINDS)),
    key=dict(type="str", required=True, no_log=False),
    src=dict(type="path"),
    files=dict(type="list", elements="str"),
    meta=dict(type="dict", default={}),
    dest=dict(type="path"),
    host=dict(type="str"),
    record_sha256=dict(type="str", no_log=False),
    lock_timeout=dict(type="int", default=LOCK_TIMEOUT),
)
REQUIRED_IF = [("op", "put", ("src", "files")), ("op", "describe", ("src", "files")), ("op", "get", ("dest",))]
