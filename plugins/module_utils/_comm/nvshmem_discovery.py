# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Find NVSHMEM copies bundled into a Python environment and judge them against a custom build.

Pure logic, standard library only, Python 3.8+ (this file runs on the managed nodes); used by the
``pytorch_bundled_nvshmem`` module. Background (runbook 000 "PyTorch bundled NVSHMEM overrides custom
build", runbook 001 problem 5): PyTorch pulls in the pip package ``nvidia-nvshmem-cu12``/``-cu13``
(``<site-packages>/nvidia/nvshmem/lib/libnvshmem_host.so.3`` and ``nvshmem_transport_ibgda.so.3``), and
the process loads that host library before a custom ``/opt/deepep/nvshmem`` one, whatever
``LD_LIBRARY_PATH`` says. A DeepEP linked against the custom device library then fails with
``NVSHMEM device library version does not match``, or a patched IBGDA transport is never used. The
fixes: preload the custom host library, or replace the bundled IBGDA transport with the custom one.

This file finds the copies (the interpreter's site-packages, the bundled packages, the custom build, GDRCopy's
library); ``nvshmem_winner.py`` judges which one a process loads and plans the fixes.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256, read_text as _read
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    VersionError,
    find_dist_info,
    nvshmem_version_from_header,
    parse_version,
)

__all__ = [
    "DiscoveryError",
    "PROBE_SCRIPT",
    "NVSHMEM_PIP_PROJECTS",
    "BACKUP_SUFFIX",
    "parse_probe",
    "ordered_site_packages",
    "find_bundled",
    "describe_custom",
    "custom_transport",
    "find_gdrcopy_lib",
]

NVSHMEM_PIP_PROJECTS = ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12", "nvidia-nvshmem")
BACKUP_SUFFIX = ".gpufleet-orig"
HOST_LIB = "libnvshmem_host.so.3"

# Run by the target interpreter: where does it import from?
PROBE_SCRIPT = """
import json, site, sys, sysconfig
paths = sysconfig.get_paths()
out = {"executable": sys.executable, "version": "%d.%d.%d" % tuple(sys.version_info[:3]),
       "prefix": sys.prefix, "purelib": paths.get("purelib"), "platlib": paths.get("platlib"),
       "sys_path": list(sys.path)}
try:
    out["site_packages"] = list(site.getsitepackages())
except Exception:
    out["site_packages"] = []
try:
    out["user_site"] = site.getusersitepackages() if site.ENABLE_USER_SITE else None
except Exception:
    out["user_site"] = None
print(json.dumps(out))
"""

_HOST_RE = re.compile(r"^libnvshmem_host\.so(\.\d+)*$")
_DEVICE_RE = re.compile(r"^libnvshmem_device\.(a|bc)$")
_TRANSPORT_RE = re.compile(r"^nvshmem_transport_([a-z0-9_]+)\.so(\.\d+)*$")
_SO_VERSION_RE = re.compile(r"\.so\.(\d+\.\d+\.\d+)$")
# pip wheels of NVSHMEM have used these library directories (CUDA 12 and CUDA 13 layouts).
_PIP_LIB_DIRS = (("nvidia", "nvshmem", "lib"), ("nvidia", "cu13", "lib"), ("nvidia", "cu12", "lib"))


class DiscoveryError(Exception):
    """Something the module cannot work with; the message names the value and what was expected."""


def parse_probe(stdout):
    """Read the JSON the probe printed; raise :class:`DiscoveryError` when it is not that."""
    text = (stdout or "").strip().splitlines()
    for line in reversed(text):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                break
            if isinstance(data, dict) and "executable" in data:
                return data
            break
    raise DiscoveryError("the interpreter's answer to the site-packages probe is not the expected JSON: %r"
                         % ((stdout or "")[:300],))


def ordered_site_packages(probe):
    """Existing site-packages directories of a probe, in the order the interpreter searches them."""
    candidates = []
    for key in ("purelib", "platlib"):
        if probe.get(key):
            candidates.append(probe[key])
    candidates.extend(probe.get("site_packages") or [])
    if probe.get("user_site"):
        candidates.append(probe["user_site"])
    seen, existing = set(), []
    for path in candidates:
        real = os.path.realpath(path)
        if real in seen or not os.path.isdir(path):
            continue
        seen.add(real)
        existing.append(path)
    order = [os.path.realpath(p) for p in probe.get("sys_path") or [] if p]

    def rank(path):
        real = os.path.realpath(path)
        return order.index(real) if real in order else len(order)

    return sorted(existing, key=rank)


def _so_version(name):
    match = _SO_VERSION_RE.search(name)
    return match.group(1) if match else None


def _transport_entry(path):
    name = _TRANSPORT_RE.fullmatch(os.path.basename(path)).group(1)
    backup = path + BACKUP_SUFFIX
    entry = {
        "name": name,
        "path": path,
        "realpath": os.path.realpath(path),
        "sha256": file_sha256(path),
        "backup": backup if os.path.exists(backup) else None,
    }
    entry["original_sha256"] = file_sha256(backup) if entry["backup"] else entry["sha256"]
    return entry


def _pick(names, regex, prefer):
    """The file of ``names`` matching ``regex``, preferring the name ``prefer`` (e.g. the .so.3 SONAME)."""
    matching = sorted(n for n in names if regex.match(n))
    if prefer in matching:
        return prefer
    return matching[0] if matching else None


def _describe_lib_dir(lib_dir):
    """Host library, device library and transports in ``lib_dir`` (None when it holds none of them)."""
    try:
        names = [n for n in os.listdir(lib_dir) if os.path.isfile(os.path.join(lib_dir, n))]
    except (IOError, OSError):
        return None
    host = _pick(names, _HOST_RE, HOST_LIB)
    device = _pick(names, _DEVICE_RE, "libnvshmem_device.a")
    transports = {}
    for name in sorted(names):
        match = _TRANSPORT_RE.fullmatch(name)
        if not match:
            continue
        kind = match.group(1)
        # one file per transport: prefer the SONAME (.so.3) the host library dlopens
        if kind not in transports or name.endswith(".so.3"):
            transports[kind] = name
    if not host and not device and not transports:
        return None
    version = None
    for name in names:
        if _HOST_RE.fullmatch(name) and _so_version(name):
            version = _so_version(name)
    return {
        "lib_dir": lib_dir,
        "host_lib": os.path.join(lib_dir, host) if host else None,
        "device_lib": os.path.join(lib_dir, device) if device else None,
        "transports": [_transport_entry(os.path.join(lib_dir, transports[k])) for k in sorted(transports)],
        "so_version": version,
    }


def _record_lib_dirs(site_packages, dist_info_dir):
    """Library directories named by a dist-info RECORD that hold NVSHMEM libraries."""
    record = os.path.join(dist_info_dir, "RECORD")
    dirs = []
    try:
        with open(record, "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                rel = line.split(",", 1)[0].strip()
                base = os.path.basename(rel)
                if _HOST_RE.fullmatch(base) or _TRANSPORT_RE.fullmatch(base) or _DEVICE_RE.fullmatch(base):
                    path = os.path.normpath(os.path.join(site_packages, os.path.dirname(rel)))
                    if path not in dirs:
                        dirs.append(path)
    except (IOError, OSError):
        return []
    return dirs


def find_bundled(site_packages_dirs):
    """Every NVSHMEM copy shipped inside the given site-packages directories, in search order.

    Looks for the pip packages ``nvidia-nvshmem-cu13``/``-cu12`` (library directories from their RECORD,
    else the known wheel layouts) and for a copy inside ``torch/lib``. Versions come from the package
    metadata; a torch-bundled copy has a version only when its file name carries one.
    """
    found = []
    seen_dirs = set()
    for site in site_packages_dirs:
        for project in NVSHMEM_PIP_PROJECTS:
            dist = find_dist_info(site, project)
            if not dist:
                continue
            info_dir = os.path.dirname(dist["metadata"])
            lib_dirs = _record_lib_dirs(site, info_dir)
            if not lib_dirs:
                lib_dirs = [os.path.join(site, *parts) for parts in _PIP_LIB_DIRS]
            for lib_dir in lib_dirs:
                real = os.path.realpath(lib_dir)
                if real in seen_dirs:
                    continue
                described = _describe_lib_dir(lib_dir)
                if not described:
                    continue
                seen_dirs.add(real)
                described.update({
                    "package": project,
                    "version": dist["version"],
                    "version_source": "metadata",
                    "metadata": dist["metadata"],
                    "site_packages": site,
                })
                found.append(described)
        torch_lib = os.path.join(site, "torch", "lib")
        real = os.path.realpath(torch_lib)
        if real not in seen_dirs:
            described = _describe_lib_dir(torch_lib)
            if described:
                seen_dirs.add(real)
                described.update({
                    "package": "torch",
                    "version": described["so_version"],
                    "version_source": "file name" if described["so_version"] else None,
                    "metadata": None,
                    "site_packages": site,
                })
                found.append(described)
    for entry in found:
        entry.pop("so_version", None)
    return found


def _custom_version(prefix):
    for rel in (("include", "non_abi", "nvshmem_version.h"), ("include", "nvshmem_version.h")):
        path = os.path.join(prefix, *rel)
        version = nvshmem_version_from_header(_read(path))
        if version:
            return version, path
    stamp = os.path.join(prefix, ".gpufleet-build.json")
    text = _read(stamp)
    if text:
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key in ("version", "nvshmem_version"):
                value = data.get(key)
                if isinstance(value, str) and _valid_version(value):
                    return value, stamp
    for name in ("VERSION", "version.txt"):
        path = os.path.join(prefix, name)
        text = _read(path)
        if text and text.strip() and _valid_version(text.strip().splitlines()[0]):
            return text.strip().splitlines()[0].strip(), path
    return None, None


def _valid_version(value):
    try:
        parse_version(value)
    except VersionError:
        return False
    return True


def describe_custom(prefix):
    """The custom NVSHMEM build at ``prefix``: libraries, transports and version (None where absent)."""
    lib_dir = None
    described = None
    for name in ("lib", "lib64"):
        candidate = os.path.join(prefix, name)
        described = _describe_lib_dir(candidate)
        if described:
            lib_dir = candidate
            break
    version, source = _custom_version(prefix)
    if not version and described and described.get("so_version"):
        version, source = described["so_version"], described["host_lib"]
    return {
        "prefix": prefix,
        "exists": os.path.isdir(prefix),
        "lib_dir": lib_dir,
        "version": version,
        "version_source": source,
        "host_lib": described["host_lib"] if described else None,
        "device_lib": described["device_lib"] if described else None,
        "transports": described["transports"] if described else [],
    }


def custom_transport(custom, name="ibgda"):
    """The custom build's transport ``name`` (a ``_transport_entry``), or None."""
    for entry in custom.get("transports") or []:
        if entry["name"] == name:
            return entry
    return None


def find_gdrcopy_lib(gdrcopy_home):
    """``libgdrapi.so.2`` (or another ``libgdrapi.so*``) under a GDRCopy prefix, or the path itself
    when it names the library; None when not found."""
    if os.path.isfile(gdrcopy_home):
        return gdrcopy_home
    for sub in ("lib", "lib64", ""):
        directory = os.path.join(gdrcopy_home, sub) if sub else gdrcopy_home
        try:
            names = os.listdir(directory)
        except (IOError, OSError):
            continue
        for preferred in ("libgdrapi.so.2", "libgdrapi.so"):
            if preferred in names:
                return os.path.join(directory, preferred)
        others = sorted(n for n in names if n.startswith("libgdrapi.so"))
        if others:
            return os.path.join(directory, others[0])
    return None
