# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""DeepEP V2's JIT cache as an artifact: its key, its kernels, its record, and the pack and unpack of its files.

DeepEP V2 compiles its kernels at first use into ``<EP_JIT_CACHE_DIR>/cache/kernel.<name>.<hex digest>/``
(``kernel.cu``, ``kernel.cubin``; ``<dir>/tmp/`` is scratch) and its digest hashes the nvcc version, the flags (the
include paths of the install and of NCCL, the GPU arch, the EP_JIT_* debug envs) and the code: a cache is valid
only for the same DeepEP build, install paths, NCCL root, nvcc version and GPU arch. The key here covers exactly
those, so one node per key warms the cache and every other node of the key unpacks it.

An unpack never shows a half-written kernel: the archive is extracted under ``<dir>/.gpufleet-unpack.<random>/``
(same filesystem), every kernel directory is then renamed into ``<dir>/cache/`` whole (DeepEP's own compiler
publishes a kernel the same way, by one rename), and the record ``.gpufleet-jit.json`` is written last.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re
import tarfile

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import build_key
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_json_dict, write_json_file
from ansible_collections.gpufleet.deepep.plugins.module_utils._tree import pack_tree, unpack_tree

__all__ = ["JitError", "KEY_ENVS", "ARCHIVE_NAME", "RECORD_NAME", "ARTIFACT_RECORD", "jit_key", "check_key_env",
           "check_mode_string", "list_kernels", "read_record", "plan", "pack", "unpack", "write_record",
           "warmup_counts", "cache_facts"]

# The environment variables that enter DeepEP V2's JIT key (compiler.hpp flags: debug and dump switches, the
# GIN debug define, the top-k index width) or choose the compiler (so its version).
KEY_ENVS = ("EP_JIT_DEBUG", "EP_JIT_PTXAS_CHECK", "EP_JIT_PTXAS_VERBOSE", "EP_JIT_DUMP_ASM", "EP_JIT_DUMP_PTX",
            "EP_JIT_DUMP_SASS", "EP_JIT_NVCC_COMPILER", "EP_GIN_GDAKI_DEBUG", "EP_NUM_TOPK_IDX_BITS")
ARCHIVE_NAME = "jit-cache.tar"
# The artifact's record (in <artifact_dir>/<key>/, written last) and the cache's (in the cache dir, written last).
ARTIFACT_RECORD = "jit.json"
RECORD_NAME = ".gpufleet-jit.json"
KERNEL_RE = re.compile(r"kernel\.(?P<name>[A-Za-z0-9_]+)\.(?P<digest>[0-9a-f]{8,128})")
MODE_RE = re.compile(r"0?[0-7]{3}")


class JitError(ValueError):
    """A bad input or a bad archive, with a message naming it and the expected form."""


def check_key_env(value, option="key_env"):
    """``value`` as ``{name: str}`` if every name is one of KEY_ENVS; else JitError naming the option."""
    if not isinstance(value, dict):
        raise JitError("%s: %r is not a mapping; expected {NAME: value} with NAME one of %s"
                       % (option, value, ", ".join(KEY_ENVS)))
    out = {}
    for name, val in value.items():
        if name not in KEY_ENVS:
            raise JitError("%s: %r is not an environment variable that enters DeepEP V2's JIT key; expected one of %s"
                           % (option, name, ", ".join(KEY_ENVS)))
        if not isinstance(val, (str, int)) or isinstance(val, bool):
            raise JitError("%s: %s=%r is not a string or an integer; expected e.g. %s: '1'" % (option, name, val, name))
        out[name] = str(val)
    return out


def check_mode_string(value, option="mode"):
    """The octal mode ``value`` (``0755``, ``755``) as an int; JitError naming the option otherwise."""
    if not isinstance(value, str) or not MODE_RE.fullmatch(value):
        raise JitError("%s: %r is not an octal directory mode; expected three octal digits such as 0755" % (option, value))
    mode = int(value, 8)
    if mode & 0o500 != 0o500:
        raise JitError("%s: %r would make the cache unreadable to its owner; expected at least 0500 (e.g. 0755)"
                       % (option, value))
    return mode


def jit_key(deepep_key, arch_list, nvcc_version, deepep_dir, python, nccl_root, key_env):
    """The key of a JIT cache: the DeepEP build, the GPU archs, nvcc's version, the install (package directory and
    interpreter), the NCCL root and the EP_JIT_* envs that enter DeepEP's own digest; ``(key, inputs)``."""
    if not isinstance(deepep_key, str) or not re.fullmatch(r"[0-9a-f]{64}", deepep_key):
        raise JitError("deepep_key: %r is not a DeepEP build key; expected 64 hex digits (deepep_build's key)"
                       % (deepep_key,))
    archs = arch_list if isinstance(arch_list, list) else re.split(r"[;, ]+", str(arch_list or ""))
    archs = sorted(set(a for a in (str(x).strip() for x in archs) if a))
    for arch in archs:
        if not re.fullmatch(r"\d+\.\d+[af]?(\+PTX)?", arch):
            raise JitError("gpu_arch_list: %r is not a CUDA arch; expected entries such as 9.0, 10.0a or 10.0+PTX" % arch)
    if not archs:
        raise JitError("gpu_arch_list is empty; expected the node's CUDA archs (gpu_topology's cuda_arch_list)")
    if not nvcc_version:
        raise JitError("the nvcc version is unknown; expected nvcc --version to report a release")
    inputs = {"deepep": deepep_key, "arch_list": archs, "nvcc": str(nvcc_version), "deepep_dir": deepep_dir or "",
              "python": python or "", "nccl_root": nccl_root or "", "env": check_key_env(key_env or {})}
    return build_key("deepep_jit", inputs), inputs


def list_kernels(cache_dir):
    """The complete kernels of the cache, sorted: ``[{'name', 'digest', 'dir'}]`` for every
    ``<cache_dir>/cache/kernel.<name>.<digest>/`` that holds a ``kernel.cubin`` (links are not followed)."""
    base = os.path.join(cache_dir, "cache")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for entry in entries:
        match = KERNEL_RE.fullmatch(entry)
        path = os.path.join(base, entry)
        if not match or os.path.islink(path) or not os.path.isdir(path):
            continue
        cubin = os.path.join(path, "kernel.cubin")
        if os.path.isfile(cubin) and not os.path.islink(cubin):
            out.append({"name": match.group("name"), "digest": match.group("digest"), "dir": entry})
    return out


def read_record(path):
    """The JSON record at ``path`` (the cache's or the artifact's), or None."""
    try:
        return read_json_dict(path)
    except (OSError, ValueError):
        return None


def plan(key, cache_dir, artifact_dir):
    """What a run does for ``key``: ``{'would_build', 'would_install', 'reason', 'artifact'}``.

    Nothing when the cache's record names the key and its kernels are all there; an install from the artifact when
    ``<artifact_dir>/<key>/`` holds a complete one (its record, written last); otherwise a warm-up (a build)."""
    record = read_record(os.path.join(cache_dir, RECORD_NAME))
    present = set(k["dir"] for k in list_kernels(cache_dir))
    artifact = os.path.join(artifact_dir, key)
    has_artifact = read_record(os.path.join(artifact, ARTIFACT_RECORD)) is not None and \
        os.path.isfile(os.path.join(artifact, ARCHIVE_NAME))
    if record and record.get("key") == key:
        missing = sorted(set(record.get("kernels") or []) - present)
        if not missing:
            return {"would_build": False, "would_install": False, "artifact": has_artifact,
                    "reason": "the cache holds the kernels of key %s" % key[:8]}
        why = "the cache lacks %d kernel(s) of key %s (%s)" % (len(missing), key[:8], ", ".join(missing[:3]))
    elif record:
        why = "the cache was filled for key %s, not %s" % (str(record.get("key"))[:8], key[:8])
    else:
        why = "the cache has no record of key %s" % key[:8]
    return {"would_build": not has_artifact, "would_install": True, "artifact": has_artifact,
            "reason": why + ("; the artifact is on this node" if has_artifact else "")}


def pack(cache_dir, archive):
    """Tar the complete kernels of ``cache_dir`` (not ``tmp/``, not the record) into ``archive``, written under a
    temporary name and renamed; the list of kernel directories packed."""
    kernels = list_kernels(cache_dir)
    if not kernels:
        raise JitError("the warm-up left no kernel in %s/cache (expected kernel.<name>.<digest>/kernel.cubin)"
                       % cache_dir)
    members = []
    for kernel in kernels:
        src = os.path.join(cache_dir, "cache", kernel["dir"])
        for name in sorted(os.listdir(src)):
            path = os.path.join(src, name)
            if os.path.isfile(path) and not os.path.islink(path):
                members.append(("cache/%s/%s" % (kernel["dir"], name), path))
    pack_tree(archive, members, ".jit-cache.")
    return [k["dir"] for k in kernels]


def _members(tar, archive):
    """The archive's files as ``{kernel dir: [(file name, member)]}``; JitError on anything but regular files at
    ``cache/kernel.<name>.<digest>/<file>``."""
    out = {}
    for member in tar.getmembers():
        parts = member.name.split("/")
        if member.isdir() and len(parts) <= 2 and parts[0] == "cache":
            continue
        if (not member.isfile() or len(parts) != 3 or parts[0] != "cache" or not KERNEL_RE.fullmatch(parts[1])
                or parts[2] in ("", ".", "..") or "\0" in parts[2]):
            raise JitError("%s holds %r; expected only regular files at cache/kernel.<name>.<digest>/<file> "
                           "(a JIT cache archive)" % (archive, member.name))
        out.setdefault(parts[1], []).append((parts[2], member))
    if not out:
        raise JitError("%s holds no kernel; expected cache/kernel.<name>.<digest>/kernel.cubin" % archive)
    for kernel, files in out.items():
        if "kernel.cubin" not in [entry[0] for entry in files]:
            raise JitError("%s: cache/%s has no kernel.cubin" % (archive, kernel))
    return out


def unpack(archive, cache_dir, dir_mode=0o755, uid=-1, gid=-1, check_mode=False):
    """Put the kernels of ``archive`` into ``cache_dir``: ``(added, present)`` kernel directory lists.

    Every member is checked before anything is written; the kernels are extracted under a staging directory of
    ``cache_dir`` and each kernel directory is renamed into ``cache/`` whole (one the cache has is kept: the same
    name and digest are the same kernel). Directories get ``dir_mode``, files its read bits, owner ``uid``/``gid``
    (-1: unchanged). A failure removes the staging directory and leaves the cache as it was."""
    with tarfile.open(archive, "r:*") as tar:
        members = _members(tar, archive)
        present = set(k["dir"] for k in list_kernels(cache_dir))
        return unpack_tree(tar, members, cache_dir, present, JitError, check_mode=check_mode, dir_mode=dir_mode,
                           file_mode=dir_mode & 0o666 & ~0o022 | 0o400, uid=uid, gid=gid, set_dest_mode=True)


def write_record(cache_dir, data):
    """The cache's record, written last (atomically)."""
    write_json_file(os.path.join(cache_dir, RECORD_NAME), data, tmp_prefix=".gpufleet-jit.")


def warmup_counts(before, after):
    """``{'compiled', 'loaded'}`` of a warm-up from the kernel directories before and after it: the kernels it
    added were compiled; with none added, every kernel the cache held was there to load."""
    before, after = set(before), set(after)
    compiled = sorted(after - before)
    return {"compiled": len(compiled), "loaded": len(before & after), "compiled_kernels": compiled}


def cache_facts(cache_dir, key=None, root="/", kernels=None):
    """The facts of the JIT cache at ``cache_dir`` (a path on the node, read below ``root``): ``{cache_dir, key,
    current, kernels, kernel_count, from, compiled_seconds, loaded_seconds, compiled, loaded}``.

    ``key``: the key the cache should hold; ``current`` says its record names it and every kernel the record lists
    is there. Without one (a reader that does not know the key: verify, audit), the record's own key is reported and
    ``current`` says only that the record's kernels are all there. ``kernels`` overrides the kernel directories found
    (a prediction in check mode). ``from``, the warm-up seconds and counts are the record's (null without one)."""
    base = os.path.join(root, cache_dir.lstrip("/")) if root not in ("", "/") else cache_dir
    record = read_record(os.path.join(base, RECORD_NAME)) or {}
    present = kernels if kernels is not None else [k["dir"] for k in list_kernels(base)]
    wanted = set(record.get("kernels") or [])
    if key is None:
        key = record.get("key")
    return {"cache_dir": cache_dir, "key": key,
            "current": bool(record) and record.get("key") == key and wanted <= set(present),
            "kernels": sorted(set(d.split(".")[1] for d in present)), "kernel_count": len(present),
            "from": record.get("from"), "compiled_seconds": record.get("compiled_seconds"),
            "loaded_seconds": record.get("loaded_seconds"), "compiled": record.get("compiled"),
            "loaded": record.get("loaded")}
