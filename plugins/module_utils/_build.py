# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Keyed, staged and swapped builds of NVSHMEM and DeepEP: the pure logic.

Standard library only, Python 3.8+ (this file runs on the managed nodes). Nothing here needs an
``AnsibleModule``: the modules ``nvshmem_build`` and ``deepep_build`` gather observations, call
these functions to decide, and act on the answer.

* Build keys: sha256 over a canonical JSON of every input that changes what gets built.
* Stamps: ``<prefix>/.gpufleet-build.json`` records the key and what was built.
* Staging: a build goes to ``<prefix>.staging-<key8>``, is verified there, then swapped into
  ``<prefix>`` by renames; the install it replaces is kept as ``<prefix>.previous``.
* Arch lists: ``9.0``, ``10.0``, ``9.0;10.0``, ``9.0a``, ``10.0+PTX`` (PyTorch form) and
  ``90``, ``100``, ``90a`` (CMake/NVSHMEM form).
* The DeepEP preflight: every failed requirement at once, each with its fix.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import math
import os
import re
import shutil
import tempfile

from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    VersionError,
    at_least,
    parse_version,
)

__all__ = [
    "BuildError",
    "ArchError",
    "STAMP_NAME",
    "KEY_SCHEMA",
    "canonical_json",
    "build_key",
    "short_key",
    "file_sha256",
    "tree_hash",
    "stamp_path",
    "read_stamp",
    "write_stamp",
    "staging_path",
    "previous_path",
    "stale_staging_dirs",
    "clean_stale_staging",
    "recover_interrupted_swap",
    "swap_in",
    "rollback",
    "parse_arch_list",
    "format_arch_list",
    "torch_to_cmake_arch",
    "cmake_to_torch_arch",
    "parse_cmake_arch_list",
    "uncovered_gpu_archs",
    "needs_disable_aggressive_ptx",
    "nvshmem_version_from_header",
    "parse_nvshmem_info",
    "apply_ah_attr_fix",
    "nvshmem_cmake_args",
    "detect_deepep_generation",
    "deepep_version_from_tree",
    "has_hca_mapping_support",
    "deepep_preflight",
    "deepep_build_env",
    "V2_MIN_NCCL",
    "V2_MIN_TORCH",
]

STAMP_NAME = ".gpufleet-build.json"
LOG_NAME = ".gpufleet-build.log"
KEY_SCHEMA = 1
V2_MIN_NCCL = "2.30.4"
V2_MIN_TORCH = "2.10"
CUDA_CCCL_FROM = "13.0"


class BuildError(Exception):
    """A build input or a build tree that the build logic cannot accept."""


class ArchError(ValueError):
    """A malformed CUDA arch list; the message names the bad entry and the expected form."""


# --------------------------------------------------------------------------------------------
# Build keys


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
    if not isinstance(key, str) or not re.match(r"^[0-9a-f]{%d,}$" % length, key):
        raise BuildError("%r is not a build key (hex sha256)" % (key,))
    return key[:length]


def file_sha256(path, chunk=1024 * 1024):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


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


# --------------------------------------------------------------------------------------------
# Stamps


def stamp_path(prefix):
    return os.path.join(prefix, STAMP_NAME)


def read_stamp(prefix):
    """The stamp of the install at ``prefix`` (a dict), or None when absent or unreadable."""
    try:
        with open(stamp_path(prefix), "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json_file(path, data, indent=2, tmp_prefix=".gpufleet-build."):
    """Write ``data`` as JSON to ``path`` atomically (temp file in the same dir + rename), mode 0644.

    An error leaves the old file as it was and no temp file behind.
    """
    fd, tmp = tempfile.mkstemp(prefix=tmp_prefix, suffix=".tmp", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True, indent=indent)
            handle.write("\n")
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_stamp(prefix, data):
    """Write ``data`` as the stamp of ``prefix`` atomically (temp file in the same dir + rename)."""
    _check_jsonable(data, "stamp")
    return write_json_file(stamp_path(prefix), data)


# --------------------------------------------------------------------------------------------
# Staging and swap


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


# --------------------------------------------------------------------------------------------
# CUDA arch lists

ARCH_FORM = ("a CUDA arch such as 9.0, 10.0, 9.0a or 10.0+PTX; several separated by ';' "
             "(for example 9.0;10.0)")
CMAKE_ARCH_FORM = "a CMake CUDA arch such as 90, 100 or 90a; several separated by ';' (for example 90;100)"

_ARCH_RE = re.compile(r"^(?P<major>\d{1,2})\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$", re.IGNORECASE)
_CMAKE_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(?P<digits>\d{2,3})(?P<suffix>[af]?)"
                            r"(?P<kind>-real|-virtual)?$", re.IGNORECASE)


def _split_list(value):
    if isinstance(value, (list, tuple)):
        parts = []
        for item in value:
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise ArchError("arch list entry %r is not %s" % (item, ARCH_FORM))
            parts.extend(_split_list(str(item)))
        return parts
    if not isinstance(value, str):
        raise ArchError("arch list %r is not %s" % (value, ARCH_FORM))
    return [p for p in re.split(r"[;\s]+", value.strip()) if p]


def parse_arch_list(value):
    """Parse a TORCH_CUDA_ARCH_LIST value into a list of entries.

    Each entry is ``{'arch': '9.0a', 'major': 9, 'minor': 0, 'suffix': 'a', 'ptx': False}``.
    Entries are separated by ``;`` or spaces; a list of strings is accepted too. ``10,0`` or ``sm90``
    raise :class:`ArchError` naming the entry and the expected form. Duplicates are dropped.
    """
    parts = _split_list(value)
    if not parts:
        raise ArchError("arch list %r is empty; expected %s" % (value, ARCH_FORM))
    entries = []
    seen = set()
    for part in parts:
        match = _ARCH_RE.match(part)
        if not match:
            hint = ""
            if "," in part:
                hint = " (use '.' between major and minor and ';' between archs)"
            elif _CMAKE_ARCH_RE.match(part):
                hint = " (that is the CMake form; TORCH_CUDA_ARCH_LIST wants %s)" % (
                    cmake_to_torch_arch(part),)
            raise ArchError("arch list %r: entry %r is not %s%s" % (value, part, ARCH_FORM, hint))
        major, minor = int(match.group("major")), int(match.group("minor"))
        if major < 3:
            raise ArchError("arch list %r: entry %r is not a CUDA compute capability (3.5 or newer); expected %s"
                            % (value, part, ARCH_FORM))
        suffix = match.group("suffix").lower()
        ptx = bool(match.group("ptx"))
        text = "%d.%d%s%s" % (major, minor, suffix, "+PTX" if ptx else "")
        if text in seen:
            continue
        seen.add(text)
        entries.append({"arch": text, "major": major, "minor": minor, "suffix": suffix, "ptx": ptx})
    return entries


def format_arch_list(entries):
    """The TORCH_CUDA_ARCH_LIST text of parsed entries (``9.0;10.0``)."""
    return ";".join(e["arch"] for e in entries)


def torch_to_cmake_arch(value):
    """``10.0`` -> ``100``, ``9.0a`` -> ``90a``, ``10.0+PTX`` -> ``100`` (CMake builds SASS and PTX)."""
    entries = parse_arch_list(value)
    return ";".join("%d%d%s" % (e["major"], e["minor"], e["suffix"]) for e in entries)


def cmake_to_torch_arch(value):
    """``100`` -> ``10.0``, ``90a`` -> ``9.0a``, ``sm_90`` -> ``9.0``."""
    match = _CMAKE_ARCH_RE.match(str(value).strip())
    if not match:
        raise ArchError("CUDA arch %r is not %s" % (value, CMAKE_ARCH_FORM))
    digits = match.group("digits")
    return "%d.%d%s" % (int(digits[:-1]), int(digits[-1]), match.group("suffix").lower())


def parse_cmake_arch_list(value):
    """Parse CMAKE_CUDA_ARCHITECTURES (``90``, ``90;100``, ``100a``) or a PyTorch-form list into the
    CMake form. Returns the normalized ``;``-joined text."""
    parts = _split_list(str(value) if isinstance(value, int) and not isinstance(value, bool) else value)
    if not parts:
        raise ArchError("CUDA arch %r is empty; expected %s" % (value, CMAKE_ARCH_FORM))
    out = []
    for part in parts:
        match = _CMAKE_ARCH_RE.match(part)
        if match:
            text = "%s%s%s" % (match.group("digits"), match.group("suffix").lower(), match.group("kind") or "")
        elif _ARCH_RE.match(part):
            text = torch_to_cmake_arch(part)
        else:
            hint = " (use ';' between archs)" if "," in part else ""
            raise ArchError("CUDA arch %r: entry %r is not %s%s" % (value, part, CMAKE_ARCH_FORM, hint))
        if text not in out:
            out.append(text)
    return ";".join(out)


def uncovered_gpu_archs(build_archs, gpu_archs):
    """The GPU archs (PyTorch form) that a build for ``build_archs`` has no code for.

    A GPU of compute capability X.Y is covered by an entry X.Y (with or without the ``a``/``f``
    suffix), or by a ``+PTX`` entry of an older capability (PTX is compiled at load time).
    """
    build = parse_arch_list(build_archs)
    gpus = parse_arch_list(gpu_archs)
    missing = []
    for gpu in gpus:
        cap = (gpu["major"], gpu["minor"])
        covered = False
        for entry in build:
            have = (entry["major"], entry["minor"])
            if have == cap or (entry["ptx"] and have <= cap and not entry["suffix"]):
                covered = True
                break
        if not covered:
            missing.append("%d.%d" % cap)
    return missing


def needs_disable_aggressive_ptx(arch_list):
    """DeepEP forces DISABLE_AGGRESSIVE_PTX_INSTRS=1 unless TORCH_CUDA_ARCH_LIST is exactly ``9.0``."""
    return format_arch_list(parse_arch_list(arch_list)) != "9.0"


# --------------------------------------------------------------------------------------------
# NVSHMEM

_NVSHMEM_DEFINE_RE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION[ \t]+(\d+)", re.MULTILINE)


def nvshmem_version_from_header(text):
    """``3.4.5`` from the text of ``nvshmem_version.h`` (NVSHMEM_VENDOR_*_VERSION); None when absent."""
    found = dict(_NVSHMEM_DEFINE_RE.findall(text or ""))
    if all(k in found for k in ("MAJOR", "MINOR", "PATCH")):
        return "%s.%s.%s" % (int(found["MAJOR"]), int(found["MINOR"]), int(found["PATCH"]))
    return None


_INFO_VERSION_RE = re.compile(r"^\s*NVSHMEM v(\d+(?:\.\d+)+)", re.MULTILINE)
_INFO_VAR_RE = re.compile(r"\b(NVSHMEM_[A-Z0-9_]+|[A-Z][A-Z0-9_]*_HOME|NVSHMEM_PREFIX)=(\S*)")


def parse_nvshmem_info(text):
    """Read ``nvshmem-info -a`` output: ``{'version', 'ibgda', 'build_variables', 'cuda_api'}``.

    ``ibgda`` is True/False from ``NVSHMEM_IBGDA_SUPPORT=ON|OFF`` in the build variables, None when the
    output does not say.
    """
    text = text or ""
    match = _INFO_VERSION_RE.search(text)
    variables = dict(_INFO_VAR_RE.findall(text))
    ibgda = variables.get("NVSHMEM_IBGDA_SUPPORT")
    cuda_api = re.search(r"^\s*CUDA API\s+(\d+)", text, re.MULTILINE)
    return {
        "version": match.group(1) if match else None,
        "ibgda": None if ibgda is None else ibgda.upper() in ("ON", "1", "TRUE", "YES"),
        "build_variables": variables,
        "cuda_api": int(cuda_api.group(1)) if cuda_api else None,
    }


_AH_DECL_RE = re.compile(r"^(?P<indent>[ \t]*)struct[ \t]+ibv_ah_attr[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*;[^\n]*$",
                         re.MULTILINE)
_TYPE_BLOCK_RE = re.compile(r"(\b(struct|class|union|enum|namespace)\b[^(){};]*|\bextern\s*\"C\"\s*)$")


def _brace_kinds(text):
    """For each offset where a ``{`` opens, whether the block is a type body or code."""
    stack = []
    kinds_at = []                 # (offset, stack snapshot top) events
    last_stmt_end = 0
    i = 0
    length = len(text)
    while i < length:
        ch = text[i]
        if ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = length if end < 0 else end
            continue
        if ch == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = length if end < 0 else end + 2
            continue
        if ch in "\"'":
            j = i + 1
            while j < length and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            head = re.sub(r"//[^\n]*", "", text[last_stmt_end:i])
            kind = "type" if _TYPE_BLOCK_RE.search(head.strip()) else "code"
            if stack and stack[-1] == "type" and kind == "code" and not re.search(r"\)\s*(const\s*)?$", head.strip()):
                kind = "type"
            stack.append(kind)
            kinds_at.append((i, tuple(stack)))
            last_stmt_end = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            kinds_at.append((i, tuple(stack)))
            last_stmt_end = i + 1
        elif ch == ";":
            last_stmt_end = i + 1
        i += 1
    return kinds_at


def _in_code(kinds_at, offset):
    state = ()
    for at, stack in kinds_at:
        if at >= offset:
            break
        state = stack
    return bool(state) and state[-1] == "code"


def apply_ah_attr_fix(text):
    """Zero every local ``struct ibv_ah_attr X;`` in NVSHMEM's IBGDA transport source.

    Inserts ``memset(&X, 0, sizeof(X));`` after each declaration inside a function body (declarations
    inside struct definitions are left alone), the fix for "Unable to create ah" on RoCE (uninitialised
    ``static_rate``; NVIDIA/nvshmem#21). Idempotent: a declaration already followed by its memset, or
    already zero-initialised, is not touched. Returns ``(new_text, fixed, already)`` with the names of
    the declarations fixed now and those found fixed.
    """
    kinds_at = _brace_kinds(text)
    out = []
    pos = 0
    fixed = []
    already = []
    for match in _AH_DECL_RE.finditer(text):
        if not _in_code(kinds_at, match.start()):
            continue
        name = match.group("name")
        rest = text[match.end():]
        following = re.match(r"\n[ \t]*memset[ \t]*\([ \t]*&[ \t]*%s[ \t]*,[ \t]*0[ \t]*," % re.escape(name), rest)
        if following:
            already.append(name)
            continue
        out.append(text[pos:match.end()])
        out.append("\n%smemset(&%s, 0, sizeof(%s));" % (match.group("indent"), name, name))
        pos = match.end()
        fixed.append(name)
    out.append(text[pos:])
    return "".join(out), fixed, already


_CMAKE_VALUE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?$")


def _cmake_value(value):
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if value is None:
        return ""
    return str(value)


def nvshmem_cmake_args(source_dir, build_dir, prefix, cuda_home, cuda_arch, ibgda=True, gdrcopy_home=None,
                       cmake_options=None, generator=None):
    """The configure command and environment the runbooks use for NVSHMEM.

    IBGDA on (unless ``ibgda`` is False); SHMEM, UCX, NCCL and MPI off; GDRCopy on with its include dir
    when ``gdrcopy_home`` is given, off otherwise; examples, tests and the nvshmem4py wheels off; CUDACXX and
    CMAKE_CUDA_COMPILER set explicitly. ``cmake_options`` (a dict) adds or overrides ``-D`` entries.
    Returns ``(argv, env, options)`` where ``options`` is the final ``-D`` dict.
    """
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    options = {
        "CMAKE_INSTALL_PREFIX": prefix,
        # What nvshmem-info reports as NVSHMEM_PREFIX (upstream default /usr/local/nvshmem, whatever the install).
        "NVSHMEM_PREFIX": prefix,
        "CMAKE_BUILD_TYPE": "Release",
        "CMAKE_CUDA_COMPILER": nvcc,
        "CMAKE_CUDA_ARCHITECTURES": parse_cmake_arch_list(cuda_arch),
        "CUDA_HOME": cuda_home,
        "NVSHMEM_IBGDA_SUPPORT": bool(ibgda),
        "NVSHMEM_SHMEM_SUPPORT": False,
        "NVSHMEM_UCX_SUPPORT": False,
        "NVSHMEM_USE_NCCL": False,
        "NVSHMEM_MPI_SUPPORT": False,
        "NVSHMEM_PMIX_SUPPORT": False,
        "NVSHMEM_BUILD_EXAMPLES": False,
        "NVSHMEM_BUILD_TESTS": False,
        # On by default upstream: makes venvs and pip-installs nvshmem4py's build requirements (needs an index).
        "NVSHMEM_BUILD_PYTHON_LIB": False,
        "NVSHMEM_USE_GDRCOPY": bool(gdrcopy_home),
    }
    if gdrcopy_home:
        options["GDRCOPY_HOME"] = gdrcopy_home
        options["GDRCOPY_INCLUDE"] = os.path.join(gdrcopy_home, "include")
    for name, value in sorted((cmake_options or {}).items()):
        if not _CMAKE_VALUE_RE.match(str(name)):
            raise BuildError("cmake option name %r is not a CMake variable name (NAME or NAME:TYPE)" % (name,))
        options[str(name)] = value
    argv = ["cmake"]
    if generator:
        argv += ["-G", generator]
    argv += ["-S", source_dir, "-B", build_dir]
    argv += ["-D%s=%s" % (name, _cmake_value(options[name])) for name in sorted(options)]
    env = {
        "CUDA_HOME": cuda_home,
        "CUDACXX": nvcc,
        "NVSHMEM_IBGDA_SUPPORT": "1" if ibgda else "0",
        "NVSHMEM_USE_GDRCOPY": "1" if gdrcopy_home else "0",
        "NVSHMEM_SHMEM_SUPPORT": "0",
        "NVSHMEM_UCX_SUPPORT": "0",
        "NVSHMEM_USE_NCCL": "0",
        "NVSHMEM_MPI_SUPPORT": "0",
    }
    if gdrcopy_home:
        env["GDRCOPY_HOME"] = gdrcopy_home
    return argv, env, dict((k, _cmake_value(v)) for k, v in options.items())


# --------------------------------------------------------------------------------------------
# DeepEP trees

_PY_VERSION_RE = re.compile(r"""__version__\s*=\s*['"]([^'"]+)['"]""")
_SETUP_VERSION_RE = re.compile(r"""\bversion\s*=\s*['"](\d+(?:\.\d+)*)""")


def deepep_version_from_tree(setup_py, init_py):
    """The DeepEP version a tree declares: ``deep_ep/__init__.py``'s ``__version__`` (V2), else the
    ``version='x.y.z'`` of ``setup.py`` (V1); None when neither says."""
    match = _PY_VERSION_RE.search(init_py or "")
    if match:
        return match.group(1)
    match = _SETUP_VERSION_RE.search(setup_py or "")
    return match.group(1) if match else None


def detect_deepep_generation(setup_py, init_py, has_elastic_tests=False):
    """``('v1'|'v2', reason)`` for a DeepEP tree, or ``(None, reason)`` when it is not one.

    V2: ``deep_ep/__init__.py`` declares a 2.x ``__version__``, or the tree has ``tests/elastic``, or
    ``setup.py`` reads ``EP_NCCL_ROOT_DIR``. V1: ``setup.py`` declares a 1.x version (or builds the
    ``deep_ep_cpp`` extension).
    """
    init_version = _PY_VERSION_RE.search(init_py or "")
    if init_version and init_version.group(1).split(".")[0] == "2":
        return "v2", "deep_ep/__init__.py declares version %s" % init_version.group(1)
    if has_elastic_tests:
        return "v2", "the tree has tests/elastic (DeepEP V2 elastic tests)"
    if "EP_NCCL_ROOT_DIR" in (setup_py or ""):
        return "v2", "setup.py reads EP_NCCL_ROOT_DIR (DeepEP V2)"
    setup_version = _SETUP_VERSION_RE.search(setup_py or "")
    if setup_version and setup_version.group(1).split(".")[0] == "1":
        return "v1", "setup.py declares version %s" % setup_version.group(1)
    if "deep_ep_cpp" in (setup_py or ""):
        return "v1", "setup.py builds the deep_ep_cpp extension (DeepEP V1)"
    if setup_py is None:
        return None, "no setup.py"
    return None, "neither a V1 (setup.py version 1.x) nor a V2 (deep_ep/__init__.py 2.x) DeepEP tree"


def has_hca_mapping_support(buffer_py):
    """Whether a tree carries DeepEP PR #466 (GPU-NIC mapping): ``_setup_device_hca_mapping`` or
    ``DEEP_EP_DEVICE_TO_HCA_MAPPING`` in ``deep_ep/buffer.py``."""
    text = buffer_py or ""
    return "_setup_device_hca_mapping" in text or "DEEP_EP_DEVICE_TO_HCA_MAPPING" in text


# --------------------------------------------------------------------------------------------
# DeepEP preflight


def _v(value):
    try:
        return parse_version(value) if value is not None else None
    except VersionError:
        return None


def _fail(failures, check, message, fix):
    failures.append({"check": check, "message": message, "fix": fix})


def deepep_preflight(obs):
    """Decide whether a DeepEP build can start, from what the module observed.

    ``obs`` keys (missing ones count as unknown/None): ``generation`` (v1/v2), ``arch_list`` (the
    TORCH_CUDA_ARCH_LIST to build, may be None), ``gpu_arch_list`` (the GPUs' archs), ``cuda_home``,
    ``cuda_version``, ``cccl_dir`` and ``cccl_exists``, ``torch_version``, ``torch_error``,
    ``nccl_version``, ``nccl_source`` (where it was read), ``nvshmem_root`` (the NVSHMEM that will be
    used: given or pip), ``nvshmem_exists``, ``nvshmem_ibgda`` (True/False/None), ``nvshmem_pip_dir``,
    ``internode`` (bool), ``disable_sm90_features`` (bool), ``disable_aggressive_ptx`` (None/True/False).

    Returns ``{'ok', 'failures', 'automatic', 'warnings', 'arch_list'}``: every failed requirement at
    once (``check``, ``message``, ``fix``); the fixes the module applies itself (``check``, ``message``,
    ``env``); and the normalized arch list (None when it is unusable).
    """
    failures = []
    automatic = []
    warnings = []
    generation = obs.get("generation")
    cuda_home = obs.get("cuda_home") or "/usr/local/cuda"

    # Arch list.
    arch_list = None
    raw_arch = obs.get("arch_list")
    gpu_archs = obs.get("gpu_arch_list")
    if raw_arch in (None, "", []):
        if gpu_archs not in (None, "", []):
            raw_arch = gpu_archs
    if raw_arch in (None, "", []):
        _fail(failures, "arch_list_missing",
              "no arch list: arch_list is not set and no gpu_arch_list (gpufleet_gpus.cuda_arch_list) was given",
              "set arch_list (TORCH_CUDA_ARCH_LIST), e.g. 9.0 for H100/H200, 10.0 for B200, 8.0 for A100, "
              "or pass gpu_arch_list from the gpu_topology facts")
    else:
        try:
            arch_list = format_arch_list(parse_arch_list(raw_arch))
        except ArchError as exc:
            _fail(failures, "arch_list_malformed", str(exc),
                  "write arch_list as TORCH_CUDA_ARCH_LIST does: 9.0, 10.0, 9.0;10.0, 9.0a or 10.0+PTX")
    if arch_list and gpu_archs not in (None, "", []):
        try:
            missing = uncovered_gpu_archs(arch_list, gpu_archs)
        except ArchError as exc:
            missing = []
            warnings.append("gpu_arch_list could not be read: %s" % exc)
        if missing:
            _fail(failures, "arch_mismatch",
                  "arch list %s has no code for the GPUs of this node (compute capability %s); kernels would "
                  "fail at run time with 'named symbol not found' (runbook 001 problem 7)"
                  % (arch_list, ", ".join(missing)),
                  "build for the node's GPUs: set arch_list to %s (or leave it unset to use gpu_arch_list)"
                  % ";".join(missing))

    # SM90 features / A100.
    sm90_off = bool(obs.get("disable_sm90_features"))
    if arch_list:
        pre_hopper = [e["arch"] for e in parse_arch_list(arch_list) if e["major"] < 9]
        if pre_hopper and not sm90_off:
            _fail(failures, "sm90_features_on_pre_hopper",
                  "arch list %s includes %s, which has no SM90 features (FP8, TMA, launch methods)"
                  % (arch_list, ", ".join(pre_hopper)),
                  "set disable_sm90_features: true for A100 (DeepEP then builds intranode only, "
                  "without NVSHMEM)")
    if sm90_off:
        nvshmem_used = obs.get("nvshmem_root") or obs.get("nvshmem_pip_dir")
        if generation == "v2":
            _fail(failures, "sm90_features_v2",
                  "DISABLE_SM90_FEATURES is a DeepEP V1 build switch; V2 needs NVSHMEM and SM90+",
                  "build a V1 tree (commit 567632d or older) for A100, or drop disable_sm90_features")
        elif nvshmem_used:
            _fail(failures, "sm90_features_with_nvshmem",
                  "DISABLE_SM90_FEATURES=1 requires NVSHMEM to be disabled, but the build would use NVSHMEM "
                  "at %s (setup.py asserts disable_nvshmem)" % nvshmem_used,
                  "leave nvshmem_root unset and make sure the interpreter has no pip nvidia-nvshmem package "
                  "(pip uninstall nvidia-nvshmem-cu12 nvidia-nvshmem-cu13), or drop disable_sm90_features")
        if obs.get("internode"):
            _fail(failures, "sm90_features_internode",
                  "internode is wanted but DISABLE_SM90_FEATURES builds DeepEP without internode and "
                  "low-latency kernels", "set internode: false for A100 builds")

    # DISABLE_AGGRESSIVE_PTX_INSTRS.
    if arch_list and needs_disable_aggressive_ptx(arch_list):
        if obs.get("disable_aggressive_ptx") is False:
            _fail(failures, "aggressive_ptx",
                  "DISABLE_AGGRESSIVE_PTX_INSTRS=0 was asked for, but DeepEP only allows aggressive PTX "
                  "instructions when TORCH_CUDA_ARCH_LIST is exactly 9.0 (arch list: %s)" % arch_list,
                  "leave disable_aggressive_ptx unset (the module sets DISABLE_AGGRESSIVE_PTX_INSTRS=1)")
        else:
            automatic.append({"check": "aggressive_ptx",
                              "message": "arch list %s is not exactly 9.0: DISABLE_AGGRESSIVE_PTX_INSTRS=1"
                                         % arch_list,
                              "env": {"DISABLE_AGGRESSIVE_PTX_INSTRS": "1"}})

    # CUDA toolkit and cccl.
    cuda_version = obs.get("cuda_version")
    if not cuda_version:
        _fail(failures, "cuda_missing",
              "no CUDA toolkit at %s (no %s/bin/nvcc answered --version)" % (cuda_home, cuda_home),
              "install the CUDA toolkit (role cuda_toolkit) or point cuda_home at it")
    elif _v(cuda_version) is not None and _v(cuda_version) >= parse_version(CUDA_CCCL_FROM):
        cccl = obs.get("cccl_dir") or os.path.join(cuda_home, "include", "cccl")
        if obs.get("cccl_exists"):
            automatic.append({"check": "cccl_include",
                              "message": "CUDA %s keeps libcu++ under %s: added to CPATH (g++) and "
                                         "NVCC_APPEND_FLAGS (nvcc) (DeepEP #568)" % (cuda_version, cccl),
                              "env": {"CPATH": cccl, "NVCC_APPEND_FLAGS": "-I%s" % cccl}})
        else:
            _fail(failures, "cccl_missing",
                  "CUDA %s needs %s on the include path of g++ and nvcc (else 'cuda/std/tuple: No such file "
                  "or directory'), but that directory does not exist" % (cuda_version, cccl),
                  "install the CUDA toolkit's cccl headers (cuda-cccl-13-x, part of cuda-toolkit) or point "
                  "cuda_home at a complete CUDA %s toolkit" % cuda_version)
        if generation == "v2" and os.path.normpath(cuda_home) != "/usr/local/cuda":
            warnings.append("DeepEP V2's setup.py hard-codes /usr/local/cuda/include/cccl; cuda_home is %s"
                            % cuda_home)

    # torch.
    torch_version = obs.get("torch_version")
    if not torch_version:
        _fail(failures, "torch_missing",
              "torch cannot be found by the build interpreter %s%s" % (
                  obs.get("python") or "python3",
                  (": %s" % obs["torch_error"]) if obs.get("torch_error") else ""),
              "install PyTorch into that interpreter first (role pytorch) or set python to the one that has it")
    elif generation == "v2":
        parsed = _v(torch_version)
        if parsed is None or not parsed >= parse_version(V2_MIN_TORCH):
            _fail(failures, "torch_too_old",
                  "DeepEP V2 requires PyTorch >= %s; the build interpreter has torch %s"
                  % (V2_MIN_TORCH, torch_version),
                  "upgrade torch to >= %s (role pytorch), or build a V1 tree" % V2_MIN_TORCH)

    # NCCL (V2 builds against NCCL Gin).
    if generation == "v2":
        nccl_version = obs.get("nccl_version")
        where = obs.get("nccl_source") or "nccl_root / the pip nvidia-nccl package"
        if not nccl_version:
            _fail(failures, "nccl_missing",
                  "DeepEP V2 builds against NCCL >= %s, but no NCCL was found (%s)" % (V2_MIN_NCCL, where),
                  "pip install 'nvidia-nccl-cu13>=%s' --no-deps into the torch environment, or build NCCL "
                  ">= %s from source and set nccl_root to it" % (V2_MIN_NCCL, V2_MIN_NCCL))
        elif _v(nccl_version) is None or not at_least(nccl_version, V2_MIN_NCCL):
            _fail(failures, "nccl_too_old",
                  "DeepEP V2 needs NCCL >= %s at build time; found NCCL %s at %s (it would fail to compile: "
                  "ncclCommProperties, ncclGetLsaDevicePointer undefined; DeepEP #710)"
                  % (V2_MIN_NCCL, nccl_version, where),
                  "pin NCCL >= %s in the torch environment (pip install 'nvidia-nccl-cu13>=%s' --no-deps, "
                  "or an NCCL >= %s source build that replaces the pip package's files) and set nccl_root "
                  "to it; V2 refuses a second NCCL copy loaded beside torch's" % (V2_MIN_NCCL, V2_MIN_NCCL,
                                                                                  V2_MIN_NCCL))

    # NVSHMEM.
    nvshmem_root = obs.get("nvshmem_root")
    nvshmem_used = nvshmem_root or (None if sm90_off else obs.get("nvshmem_pip_dir"))
    if nvshmem_root and not obs.get("nvshmem_exists"):
        _fail(failures, "nvshmem_root_missing",
              "nvshmem_root %s does not hold an NVSHMEM install (no include/ and lib/libnvshmem_host.so*)"
              % nvshmem_root,
              "build NVSHMEM first (gpufleet.deepep.nvshmem_build, role nvshmem) or fix nvshmem_root")
    elif not nvshmem_used and not sm90_off:
        if generation == "v2":
            _fail(failures, "nvshmem_missing",
                  "DeepEP V2 still needs NVSHMEM (EP_NVSHMEM_ROOT_DIR), and none was found",
                  "set nvshmem_root to an NVSHMEM build (role nvshmem) or pip install nvidia-nvshmem-cu13")
        elif obs.get("internode"):
            _fail(failures, "nvshmem_missing",
                  "internode is wanted but no NVSHMEM was found: DeepEP V1 would build without internode and "
                  "low-latency kernels", "set nvshmem_root to an NVSHMEM build with IBGDA (role nvshmem)")
        else:
            warnings.append("no NVSHMEM: DeepEP V1 builds intranode kernels only")
    if obs.get("internode") and nvshmem_used and obs.get("nvshmem_ibgda") is False:
        _fail(failures, "nvshmem_no_ibgda",
              "internode is wanted but the NVSHMEM at %s has no IBGDA support; internode dispatch would time out "
              "('timeout (dispatch CPU)', runbook 001 problem 8)" % nvshmem_used,
              "build NVSHMEM with IBGDA (gpufleet.deepep.nvshmem_build ibgda: true) and set nvshmem_root to it "
              "(not torch's bundled NVSHMEM)")

    return {
        "ok": not failures,
        "failures": failures,
        "automatic": automatic,
        "warnings": warnings,
        "arch_list": arch_list,
    }


def _prepend(value, existing, sep=":"):
    if not existing:
        return value
    parts = existing.split(sep)
    if value in parts:
        return existing
    return sep.join([value] + parts)


def deepep_build_env(generation, arch_list, cuda_home, nvshmem_root=None, nccl_root=None, jobs=None,
                     automatic=None, disable_sm90_features=False, base_env=None):
    """The environment of ``python setup.py bdist_wheel`` for DeepEP ``generation``.

    TORCH_CUDA_ARCH_LIST, CUDA_HOME, PATH with ``<cuda_home>/bin``, LIBRARY_PATH with the CUDA stubs,
    NVSHMEM_DIR (V1) or EP_NVSHMEM_ROOT_DIR (V2), EP_NCCL_ROOT_DIR (V2), MAX_JOBS, plus the automatic
    fixes of the preflight (CPATH/NVCC_APPEND_FLAGS for cccl, DISABLE_AGGRESSIVE_PTX_INSTRS). Only the
    variables to set are returned; ``base_env`` supplies what they extend (PATH, CPATH, ...).
    """
    base = dict(base_env or {})
    env = {
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "CUDA_HOME": cuda_home,
        "PATH": _prepend(os.path.join(cuda_home, "bin"), base.get("PATH", "/usr/bin:/bin")),
        "LIBRARY_PATH": _prepend(os.path.join(cuda_home, "lib64", "stubs"), base.get("LIBRARY_PATH", "")),
    }
    if jobs:
        env["MAX_JOBS"] = str(int(jobs))
    if disable_sm90_features:
        env["DISABLE_SM90_FEATURES"] = "1"
    if nvshmem_root:
        if generation == "v2":
            env["EP_NVSHMEM_ROOT_DIR"] = nvshmem_root
        else:
            env["NVSHMEM_DIR"] = nvshmem_root
    if generation == "v2" and nccl_root:
        env["EP_NCCL_ROOT_DIR"] = nccl_root
    for fix in automatic or []:
        for name, value in fix.get("env", {}).items():
            if name == "CPATH":
                env["CPATH"] = _prepend(value, base.get("CPATH", ""))
            elif name == "NVCC_APPEND_FLAGS":
                existing = base.get("NVCC_APPEND_FLAGS", "")
                env[name] = existing if value in existing.split() else (existing + " " + value).strip()
            else:
                env[name] = value
    return env


class StepFailed(Exception):
    """A build step failed: ``msg`` for the user, ``rc`` and ``cmd`` when a command failed, ``extra`` result keys."""

    def __init__(self, msg, rc=None, cmd=None, **extra):
        super(StepFailed, self).__init__(msg)
        self.msg = msg
        self.rc = rc
        self.cmd = cmd
        self.extra = extra


class CommandLog(object):
    """Runs commands with LC_ALL=C through ``run_command`` (AnsibleModule.run_command), records their argv in
    ``commands`` and, once ``log_path`` is set, appends each command line and its output to the build log."""

    def __init__(self, run_command, log_path=None):
        self._run_command = run_command
        self.log_path = log_path
        self.commands = []

    def log(self, text):
        if self.log_path and text:
            with open(self.log_path, "a", encoding="utf-8", errors="replace") as handle:
                handle.write(text)

    def run(self, argv, env=None, cwd=None, check=True, record=True):
        full_env = {"LC_ALL": "C"}
        full_env.update(env or {})
        if record:
            self.commands.append(list(argv))
        if self.log_path:
            env_text = " ".join("%s=%s" % (k, v) for k, v in sorted((env or {}).items()))
            self.log("\n$ %s%s\n" % ((env_text + " ") if env_text else "", " ".join(argv)))
        rc, out, err = self._run_command(argv, environ_update=full_env, cwd=cwd)
        self.log(out)
        self.log(err)
        if check and rc != 0:
            raise StepFailed("command failed (rc=%d): %s" % (rc, " ".join(argv)), rc=rc, cmd=list(argv),
                             stdout=out[-4000:], stderr=err[-4000:])
        return rc, out, err
