# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's DeepGEMM kernel cache as an artifact: its key, the plan, the pack and the checked, whole-entry unpack.

``python -m sglang.compile_deep_gemm`` (the server's own arguments) fills ``<SGLANG_DG_CACHE_DIR>/cache/`` with one
directory per kernel (``kernel.<name>.<digest>/``). The key covers what the kernels depend on: the sglang and
deep_gemm versions, the model's config.json, the precompile arguments (the server layout), the GPU archs and CUDA. It
is the sha256 of their JSON with sorted keys, the very value the sglang role computed in Jinja before this module, so
stores filled then stay valid.

The artifact is one file, ``<artifact_dir>/<key>/<key>.tar.gz`` (the name the store has always held), written under a
temporary name and renamed: it is complete or absent. Besides ``cache/`` it holds ``gpufleet-deepgemm-build.json``
(the builder, the precompile's seconds); an archive without it (packed by the earlier tasks) is accepted.

An unpack never shows a half-written cache: every member is checked first, the archive is extracted under
``<cache_dir>/.gpufleet-unpack.<random>/`` (same filesystem), each top-level entry of ``cache/`` is then renamed into
``<cache_dir>/cache/`` whole (one the cache holds is kept: DeepGEMM names a kernel by the digest of its inputs), and
the marker ``.gpufleet-deepgemm-<key>.json`` is written last.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import zlib

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_json_dict, write_json_file
from ansible_collections.gpufleet.deepep.plugins.module_utils._tree import pack_tree, unpack_tree

__all__ = ["DeepGemmError", "BUILD_RECORD", "MARKER_PREFIX", "dg_key", "check_inputs",
           "archive_path", "marker_path", "read_marker", "list_entries", "plan", "pack", "unpack", "write_marker",
           "cache_facts"]

BUILD_RECORD = "gpufleet-deepgemm-build.json"
MARKER_PREFIX = ".gpufleet-deepgemm-"
KEY_RE = re.compile(r"[0-9a-f]{64}")
ARCH_RE = re.compile(r"\d+\.\d+[af]?(\+PTX)?")
VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]*")
# A build record larger than this is not one of ours.
RECORD_LIMIT = 1024 * 1024


class DeepGemmError(ValueError):
    """A bad input or a bad archive, with a message naming it and the expected form."""


def check_inputs(sglang, deep_gemm, config_sha256, args, arch, cuda):
    """Refuse a key input of the wrong form, naming the option, the value and the form expected."""
    for option, value, example in (("sglang_version", sglang, "0.5.19"), ("deep_gemm_version", deep_gemm, "2.1.1")):
        if value is not None and (not isinstance(value, str) or not VERSION_RE.fullmatch(value)):
            raise DeepGemmError("%s: %r is not a version; expected an installed version such as %s (or null when "
                                "the package is absent)" % (option, value, example))
    if config_sha256 is not None and (not isinstance(config_sha256, str) or not KEY_RE.fullmatch(config_sha256)):
        raise DeepGemmError("config_sha256: %r is not a sha256; expected 64 lowercase hex digits (model_config's "
                            "config_sha256)" % (config_sha256,))
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        raise DeepGemmError("precompile_args: %r is not a list of strings; expected the server's arguments, e.g. "
                            "[--model-path, /opt/models/m, --tp-size, '8']" % (args,))
    if any(a == "--timeout" or a.startswith("--timeout=") for a in args):
        raise DeepGemmError("precompile_args: %r holds --timeout; expected the server's arguments only (the module "
                            "passes --timeout from its timeout option)" % (args,))
    if any("\0" in a or "\n" in a for a in args):
        raise DeepGemmError("precompile_args: %r holds a NUL or a newline; expected one argument a string"
                            % (args,))
    if arch is not None:
        if not isinstance(arch, str):
            raise DeepGemmError("gpu_arch_list: %r is not a string; expected gpu_topology's cuda_arch_list, such as "
                                "'10.0' or '9.0;10.0' (empty or null when unknown)" % (arch,))
        for entry in (e for e in re.split(r"[;, ]+", arch) if e):
            if not ARCH_RE.fullmatch(entry):
                raise DeepGemmError("gpu_arch_list: %r is not a CUDA arch; expected entries such as 9.0, 10.0a or "
                                    "10.0+PTX joined by ';'" % entry)
    if not isinstance(cuda, str) or (cuda and not re.fullmatch(r"\d+(\.\d+){0,2}", cuda)):
        raise DeepGemmError("torch_cuda/cuda_version: %r is not a CUDA version; expected e.g. 12.9 (or empty)"
                            % (cuda,))


def dg_key(sglang, deep_gemm, config_sha256, args, arch, cuda):
    """``(key, inputs)``: the sha256 of the inputs' JSON with sorted keys (``json.dumps(..., sort_keys=True)``,
    what Ansible's ``to_json(sort_keys=true) | hash('sha256')`` gives, so the key of the earlier Jinja tasks)."""
    check_inputs(sglang, deep_gemm, config_sha256, args, arch, cuda)
    inputs = {"sglang": sglang, "deep_gemm": deep_gemm, "config": config_sha256, "args": list(args), "arch": arch,
              "cuda": cuda}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode("utf-8")).hexdigest(), inputs


def archive_path(artifact_dir, key):
    """The artifact of ``key``: ``<artifact_dir>/<key>/<key>.tar.gz``."""
    return os.path.join(artifact_dir, key, key + ".tar.gz")


def marker_path(cache_dir, key):
    return os.path.join(cache_dir, MARKER_PREFIX + key + ".json")


def read_marker(cache_dir, key):
    """The marker of ``key`` in ``cache_dir`` as a dict, or None (absent, unreadable, or naming another key)."""
    path = marker_path(cache_dir, key)
    if os.path.islink(path):
        return None
    data = read_json_dict(path)
    return data if data is not None and data.get("key") == key else None


def list_entries(cache_dir):
    """The top-level entries of ``<cache_dir>/cache/``, sorted (links are not entries)."""
    base = os.path.join(cache_dir, "cache")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    return [n for n in names if not os.path.islink(os.path.join(base, n))]


def plan(key, cache_dir, artifact_dir):
    """What a run does for ``key``: ``{'would_build', 'would_install', 'artifact', 'reason'}``.

    Nothing when the cache's marker of the key is there (written last: the install was whole); an install when the
    node holds the key's artifact (renamed into place whole, by the build or by the store's copy); otherwise a build."""
    if read_marker(cache_dir, key) is not None:
        return {"would_build": False, "would_install": False, "artifact": False,
                "reason": "the cache holds key %s (%s)" % (key[:8], os.path.basename(marker_path(cache_dir, key)))}
    archive = archive_path(artifact_dir, key)
    has_artifact = os.path.isfile(archive) and not os.path.islink(archive)
    why = "the cache has no marker of key %s" % key[:8]
    return {"would_build": not has_artifact, "would_install": True, "artifact": has_artifact,
            "reason": why + ("; the artifact is on this node" if has_artifact else "")}


def _cache_files(root):
    """``(dirs, files)`` below ``<root>/cache``, relative to ``root``, sorted; DeepGemmError on a link or a special
    file (nothing the precompile writes)."""
    dirs, files = [], []
    base = os.path.join(root, "cache")
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in dirnames + sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                raise DeepGemmError("the precompile left a link at %s; expected only directories and regular files "
                                    "in SGLANG_DG_CACHE_DIR/cache" % path)
            if os.path.isdir(path):
                dirs.append(rel)
            elif os.path.isfile(path):
                files.append(rel)
            else:
                raise DeepGemmError("the precompile left %s, not a regular file; expected only directories and "
                                    "regular files in SGLANG_DG_CACHE_DIR/cache" % path)
    return sorted(dirs), sorted(files)


def pack(root, archive, build_record):
    """Pack ``<root>/cache/`` and ``build_record`` into ``archive`` (gzip, sorted, owners and times zeroed: the same
    cache gives the same bytes), written under a temporary name and renamed. The number of files packed."""
    dirs, files = _cache_files(root)
    if not files:
        raise DeepGemmError("the precompile left no file in %s/cache; expected DeepGEMM's kernels "
                            "(cache/kernel.<name>.<digest>/)" % root)
    record = json.dumps(build_record, sort_keys=True, indent=2).encode("utf-8")
    members = [(BUILD_RECORD, record), ("cache", None)] + [(rel, None) for rel in dirs]
    members += [(rel, os.path.join(root, rel)) for rel in files]
    pack_tree(archive, members, ".deepgemm-pack.", ".tmp", compress=True)
    return len(files)


def _members(tar, archive):
    """``(dirs, files, record member)`` of a DeepGEMM cache archive; DeepGemmError on anything but directories and
    regular files under ``cache/`` (and the build record), on a path that climbs, and on an archive without files."""
    dirs, files, record, seen = [], [], None, set()
    for member in tar.getmembers():
        name = member.name[2:] if member.name.startswith("./") else member.name
        name = name.rstrip("/") if member.isdir() else name
        parts = name.split("/")
        if name == BUILD_RECORD and member.isfile() and record is None:
            if member.size > RECORD_LIMIT:
                raise DeepGemmError("%s: its %s is %d bytes; expected a small JSON record" % (archive, name, member.size))
            record = member
            continue
        bad_path = (parts[0] != "cache" or any(p in ("", ".", "..") for p in parts) or "\0" in name
                    or "\\" in name)
        if bad_path or not (member.isdir() or member.isfile()) or (member.isfile() and len(parts) < 2):
            raise DeepGemmError("%s holds %r (%s); expected only directories and regular files under cache/ "
                                "(a DeepGEMM cache archive)" % (archive, member.name, _kind(member)))
        if name in seen:
            raise DeepGemmError("%s holds %r twice; expected each path once" % (archive, member.name))
        seen.add(name)
        (dirs if member.isdir() else files).append((name, member))
    if not files:
        raise DeepGemmError("%s holds no file under cache/; expected DeepGEMM's kernels "
                            "(cache/kernel.<name>.<digest>/)" % archive)
    names = set(n for n, dummy in files)
    for name, dummy in files + dirs:
        parent = name.rsplit("/", 1)[0]
        while "/" in parent:
            if parent in names:
                raise DeepGemmError("%s holds %r below the file %r; expected a directory tree" % (archive, name, parent))
            parent = parent.rsplit("/", 1)[0]
    return dirs, files, record


def _kind(member):
    for test, what in ((member.issym, "a symbolic link"), (member.islnk, "a hard link"), (member.isdir, "a directory"),
                       (member.isfile, "a file")):
        if test():
            return what
    return "a special file"


def _open(archive):
    try:
        return tarfile.open(archive, "r:*")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise DeepGemmError("%s is not a readable tar archive (%s); expected the <key>.tar.gz of a DeepGEMM cache"
                            % (archive, exc))


def unpack(archive, cache_dir, check_mode=False):
    """Put the cache of ``archive`` into ``cache_dir``: ``(added, present, build record or {})``, top-level entry
    lists of ``cache/``.

    Every member is checked before anything is written; everything is extracted under a staging directory of
    ``cache_dir`` and each top-level entry is renamed into ``cache/`` whole (one the cache holds is kept). Directories
    get 0755, files 0644. A failure removes the staging directory and leaves the cache as it was."""
    tar = _open(archive)
    try:
        try:
            dirs, files, record_member = _members(tar, archive)
            record = {}
            if record_member is not None:
                try:
                    record = json.loads(tar.extractfile(record_member).read().decode("utf-8"))
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    raise DeepGemmError("%s: its %s is not a JSON object; expected the build record"
                                        % (archive, BUILD_RECORD))
            entries = {}
            for name, member in sorted(dirs) + files:
                parts = name.split("/", 2)
                if len(parts) > 1:
                    entries.setdefault(parts[1], []).append((parts[2] if len(parts) > 2 else "", member))
            added, kept = unpack_tree(tar, entries, cache_dir, set(list_entries(cache_dir)), DeepGemmError,
                                      check_mode=check_mode)
            return added, kept, record
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            raise DeepGemmError("%s cannot be read to its end (%s); expected a whole <key>.tar.gz (remove it and run "
                                "again to fetch it anew)" % (archive, exc))
    finally:
        tar.close()


def write_marker(cache_dir, key, data):
    """The cache's marker of ``key``, written last (atomically)."""
    write_json_file(marker_path(cache_dir, key), data, tmp_prefix=MARKER_PREFIX + "tmp.")


def cache_facts(cache_dir, key, entries=None):
    """``{cache_dir, key, current, from, seconds, built_by, entry_count}`` of the cache for ``key``: ``current``
    says its marker is there; ``entries`` overrides the entries found (a prediction in check mode)."""
    marker = read_marker(cache_dir, key) if key else None
    found = entries if entries is not None else list_entries(cache_dir)
    marker = marker or {}
    return {"cache_dir": cache_dir, "key": key, "current": bool(marker), "from": marker.get("from"),
            "seconds": marker.get("seconds"), "built_by": marker.get("built_by"), "entry_count": len(found)}
