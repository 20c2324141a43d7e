# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a torch environment holds, read by a probe run in its interpreter: its distributions, which ``deep_ep`` it
imports and whether that is the collection's build, and the NVIDIA libraries of its own wheels.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import (
    SglangError,
    normalize,
)

__all__ = [
    "PROBE_SCRIPT",
    "STAMP_NAME",
    "parse_probe",
    "deep_ep_state",
    "record_mismatches",
    "nvidia_lib_dirs",
    "resolve_library",
]

STAMP_NAME = ".gpufleet-build.json"
NVSHMEM_DIR_NAMES = ("nvshmem",)

# The probe: runs in the target interpreter, imports nothing of the stack (no torch, no deep_ep).

PROBE_SCRIPT = r"""
import glob, importlib.util, json, os, site, sys, sysconfig
try:
    from importlib import metadata
except ImportError:
    metadata = None
paths = sysconfig.get_paths()
out = {"python_version": "%d.%d.%d" % sys.version_info[:3], "prefix": sys.prefix,
       "base_prefix": getattr(sys, "base_prefix", sys.prefix), "purelib": paths.get("purelib"),
       "platlib": paths.get("platlib"), "sys_path": [p for p in sys.path if p],
       "user_site": site.getusersitepackages() if hasattr(site, "getusersitepackages") else None,
       "dists": {}, "deep_ep": None, "torch_version_py": None}
def norm(name):
    import re
    return re.sub(r"[-_.]+", "-", name).lower()
def owned(path):
    return path.split("/")[0] == "deep_ep" or path.startswith("deep_ep_cpp")
def deep_ep_files(dist, record):
    # RECORD is read once and only its deep_ep lines are parsed (dist.files would build a path object for every
    # file of every distribution: tens of thousands in a serving environment); without a RECORD (egg-info),
    # dist.files reads installed-files.txt or SOURCES.txt.
    if record is None:
        return [str(f) for f in (dist.files or []) if owned(str(f))]
    if "deep_ep" not in record:
        return []
    import csv
    return [row[0] for row in csv.reader(line for line in record.splitlines() if "deep_ep" in line)
            if row and owned(row[0])]
for dist in (metadata.distributions() if metadata else []):
    try:
        meta = dist.metadata
        name, version = meta["Name"], meta["Version"]
    except Exception:
        continue
    if not name:
        continue
    key = norm(name)
    location = None
    try:
        location = str(dist.locate_file(""))
    except Exception:
        pass
    installer = None
    try:
        installer = (dist.read_text("INSTALLER") or "").strip() or None
    except Exception:
        pass
    record = dist.read_text("RECORD")
    entry = {"name": name, "version": version, "location": location, "installer": installer,
             "has_record": record is not None, "deep_ep_files": deep_ep_files(dist, record)}
    if key in out["dists"]:
        entry["shadowed"] = out["dists"][key]
        continue
    out["dists"][key] = entry
spec = None
try:
    spec = importlib.util.find_spec("deep_ep")
except Exception as exc:
    out["deep_ep_error"] = "%s: %s" % (type(exc).__name__, exc)
if spec is not None:
    locs = list(spec.submodule_search_locations or [])
    out["deep_ep"] = {"origin": spec.origin, "dir": locs[0] if locs else os.path.dirname(spec.origin or "")}
try:
    tspec = importlib.util.find_spec("torch")
    if tspec and tspec.submodule_search_locations:
        vp = os.path.join(list(tspec.submodule_search_locations)[0], "version.py")
        if os.path.isfile(vp):
            out["torch_version_py"] = open(vp).read(4096)
        out["torch_lib"] = os.path.join(list(tspec.submodule_search_locations)[0], "lib")
except Exception:
    pass
print(json.dumps(out))
"""


def parse_probe(text):
    """The probe's JSON (the last line that parses), SglangError when there is none."""
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    raise SglangError("the interpreter printed no probe result (expected one JSON object), got %r"
                      % (text or "")[-300:])


def _read_json(path):
    try:
        with open(path) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (IOError, OSError, ValueError):
        return None


def _record_hash(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def record_mismatches(dist_info_dir, site_dir, prefix="deep_ep/"):
    """Files under ``prefix`` listed in a dist's RECORD whose content no longer matches it (overwritten by
    another package) or that are gone: ``[relative path, ...]``."""
    record = os.path.join(dist_info_dir, "RECORD")
    out = []
    try:
        with open(record) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return out
    for line in lines:
        parts = line.rsplit(",", 2)
        if len(parts) != 3 or not parts[0].startswith(prefix) or not parts[1]:
            continue
        path = os.path.join(site_dir, parts[0])
        if not os.path.isfile(path):
            out.append(parts[0] + " (missing)")
        elif _record_hash(path) != parts[1]:
            out.append(parts[0])
    return out


def _dist_info_dir(site_dir, project, version):
    if not site_dir or not os.path.isdir(site_dir):
        return None
    want = normalize(project)
    for name in sorted(os.listdir(site_dir)):
        if not name.endswith(".dist-info"):
            continue
        base = name[:-len(".dist-info")]
        dist, _sep, ver = base.rpartition("-")
        if normalize(dist) == want and (version is None or ver == version):
            return os.path.join(site_dir, name)
    return None


def deep_ep_state(probe, expected_key=None):
    """Which ``deep_ep`` the interpreter imports and whether it is the collection's build.

    The collection's build carries ``.gpufleet-build.json`` (deepep_build's stamp) in its package directory and is
    installed as the ``deep_ep`` distribution; anything else owning files of ``deep_ep/`` (``sgl-deep-ep``), a
    stamp missing, files changed since the ``deep_ep`` wheel installed them, or another build key means it is not.
    """
    info = probe.get("deep_ep") or {}
    dists = probe.get("dists") or {}
    out = {"file": info.get("origin"), "dir": info.get("dir"), "importable": bool(info.get("origin")),
           "collection": False, "stamp_key": None, "wheel": None, "version": None, "owners": [],
           "foreign_owners": [], "modified_files": [], "reasons": []}
    for key, dist in sorted(dists.items()):
        if any(f.startswith("deep_ep/") or f.startswith("deep_ep_cpp") for f in dist.get("deep_ep_files") or []):
            out["owners"].append("%s %s" % (dist.get("name"), dist.get("version")))
            if key != "deep-ep":
                out["foreign_owners"].append("%s %s" % (dist.get("name"), dist.get("version")))
    own = dists.get("deep-ep")
    out["version"] = own.get("version") if own else None
    if not out["importable"]:
        out["reasons"].append("import deep_ep finds no package: the collection's DeepEP is not installed "
                              "(run the deepep role)")
        return out
    stamp = _read_json(os.path.join(out["dir"], STAMP_NAME)) if out["dir"] else None
    if stamp:
        out["stamp_key"] = stamp.get("key")
        out["wheel"] = stamp.get("wheel")
    else:
        out["reasons"].append("%s carries no %s: it is not the DeepEP the collection built" % (out["dir"], STAMP_NAME))
    if out["foreign_owners"]:
        out["reasons"].append("deep_ep files belong to %s (a bundled DeepEP shadows or overwrote the collection's)"
                              % ", ".join(out["foreign_owners"]))
    if own:
        site_dir = own.get("location")
        info_dir = _dist_info_dir(site_dir, "deep_ep", own.get("version"))
        if info_dir:
            out["modified_files"] = record_mismatches(info_dir, site_dir)
            if out["modified_files"]:
                out["reasons"].append("files of the deep_ep wheel were replaced since it was installed: %s"
                                      % ", ".join(out["modified_files"][:8]))
        if out["dir"] and site_dir and os.path.realpath(os.path.dirname(out["dir"])) != os.path.realpath(site_dir):
            out["reasons"].append("import deep_ep resolves to %s, not the deep_ep wheel's %s (an earlier path entry "
                                  "shadows it)" % (out["dir"], site_dir))
    elif stamp:
        out["reasons"].append("no deep_ep distribution is installed (only another package's deep_ep files)")
    if expected_key and out["stamp_key"] and out["stamp_key"] != expected_key:
        out["reasons"].append("deep_ep is build %s, the deepep phase expects %s" % (out["stamp_key"], expected_key))
    out["collection"] = not out["reasons"]
    return out


def nvidia_lib_dirs(site_dirs, exclude=NVSHMEM_DIR_NAMES):
    """``<site>/nvidia/*/lib`` directories of the environment's own NVIDIA wheels (sorted, first site wins per
    package), without pip's NVSHMEM: the IBGDA build must stay ahead of it."""
    out, seen = [], set()
    for site in site_dirs or []:
        base = os.path.join(site, "nvidia")
        if not os.path.isdir(base):
            continue
        for name in sorted(os.listdir(base)):
            lib = os.path.join(base, name, "lib")
            if name in exclude or name in seen or not os.path.isdir(lib):
                continue
            seen.add(name)
            out.append(lib)
    return out


def resolve_library(soname, directories):
    """The first ``directories`` entry holding ``soname`` (a file or link), or None."""
    for directory in directories or []:
        if directory and os.path.exists(os.path.join(directory, soname)):
            return os.path.join(directory, soname)
    return None
