# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The installed DeepEP's linkage record checked against the node (node_stack ``gather: [linkage]``,
``gpufleet_linkage``).

deepep_build keeps in the build record (``build.json``, and the installed stamp ``deep_ep/.gpufleet-build.json``)
a ``linkage`` dict of schema 1: the extension's objects (NEEDED, RUNPATH/RPATH, libstdc++ linkage, embedded
SASS/PTX), torch, NCCL and NVSHMEM as the build saw them. Here each of its claims is set against what the node has
now, as checks ``{check, ok, expected, found, fix, reason, warning}``:

``nccl``       the NCCL the torch environment loads (the pip ``nvidia-nccl-cu*`` package's ``libnccl.so.2``, its
               embedded ``NCCL version X.Y.Z`` string, else the package metadata; torch is never imported) against
               the record's ``nccl.header_version``: below NCCL 2.31 DeepEP V2 asserts they are equal ("Prior to NCCL
               2.31, NCCL compile-time and runtime versions must be the same"); from 2.31 on the runtime must be
               at least the build's (DeepEP #688).
``nvshmem``    the NVSHMEM host library that would load (the env script's LD_PRELOAD, else the extension's
               RUNPATH/RPATH) and its version (the embedded ``NVSHMEM vX.Y.Z``, the versioned file name, or the pip
               metadata) against the record's ``nvshmem.device_version``: majors equal, device minor <= host minor
               (NVSHMEM's own rule, init.cu).
``gpu_arch``   one check per compute capability of the node's GPUs against the SASS embedded in the objects; PTX
               that can be JIT-compiled for it passes with a ``warning``.
``torch``      the record's ``torch.version`` against the installed torch's metadata version.
``libstdcxx``  a DeepEP V2 extension with a static libstdc++ (its JIT's std::regex crashes: the SIGSEGV captured on
               4 x H200); a V1 one passes with a ``warning``.

What cannot be known (no record, a record of another schema, no GPU facts, a library not found) gives ``ok: null``
and the ``reason``, never a guess. Read only; standard library only, Python 3.8+ (this file runs on the nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import read_stamp, stamp_path
from ansible_collections.gpufleet.deepep.plugins.module_utils._linkage import resolve_needed, shape_error
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.fact_sets import (
    NVIDIA_SMI_QUERY_FIELDS,
    nvidia_smi_query_argv,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import under
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import find_packages
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import list_gpus, normalize_bdf, parse_nvidia_smi_query
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import VersionError, parse_version

__all__ = ["LINKAGE_SCHEMA", "CHECKS", "NCCL_RUNTIME_VERSION_FLOOR", "embedded_version", "sass_covers",
           "ptx_covers", "node_gpus", "gather_linkage"]

LINKAGE_SCHEMA = 1
CHECKS = ("nccl", "nvshmem", "gpu_arch", "torch", "libstdcxx")
# From this NCCL on, DeepEP V2 sizes its device communicator by the runtime (DeepEP #688).
NCCL_RUNTIME_VERSION_FLOOR = "2.31"
NCCL_VERSION_RE = re.compile(rb"NCCL version (\d+\.\d+\.\d+)")
NVSHMEM_VERSION_RE = re.compile(rb"NVSHMEM v(\d+\.\d+\.\d+)")
_VERSIONED_NAME_RE = re.compile(r"\.so\.(\d+\.\d+\.\d+)$")
_SM_RE = re.compile(r"(?:sm|compute)_(\d+)(\d)([af]?)")
_CHUNK = 4 * 1024 * 1024
_MAX_SCAN = 1 << 30


def embedded_version(path, pattern):
    """The first version ``pattern`` finds in the file at ``path`` (read in chunks, at most 1 GiB), or None."""
    try:
        with open(path, "rb") as handle:
            tail = b""
            seen = 0
            while seen < _MAX_SCAN:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    return None
                seen += len(chunk)
                match = pattern.search(tail + chunk)
                if match:
                    return match.group(1).decode("ascii")
                tail = chunk[-64:]
    except (IOError, OSError):
        return None
    return None


def _check(name, ok=None, expected=None, found=None, fix=None, reason=None, warning=None, **extra):
    out = {"check": name, "ok": ok, "expected": expected, "found": found, "fix": fix, "reason": reason,
           "warning": warning}
    out.update(extra)
    return out


def _unknown(name, reason):
    return _check(name, reason=reason)


def _version(text):
    try:
        return parse_version(text)
    except VersionError:
        return None


def _release(version):
    return ".".join(str(p) for p in (list(version.release) + [0, 0])[:3])


def _str_list(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _search_dirs(obj):
    """The directories the dynamic loader searches for the object's NEEDED (DT_RUNPATH wins over DT_RPATH)."""
    runpath = obj.get("runpath") if _str_list(obj.get("runpath")) else []
    rpath = obj.get("rpath") if _str_list(obj.get("rpath")) else []
    return runpath or rpath


def _resolve_needed(root, objects, prefix):
    """(NEEDED name, path on the node or None, the directories searched) of the first NEEDED starting with
    ``prefix`` of the record's objects."""
    for obj in objects:
        needed = obj.get("needed") if _str_list(obj.get("needed")) else []
        names = [n for n in needed if n.startswith(prefix)]
        if not names:
            continue
        dirs = _search_dirs(obj)
        found = resolve_needed(names[0], dirs, exists=lambda path: os.path.isfile(under(root, path)), real=False)
        return names[0], found, dirs
    return None, None, []


# --- (a) NCCL --------------------------------------------------------------------------------------------------

def _loaded_nccl(root, py, objects):
    """(version, where, how) of the NCCL the torch environment loads, or (None, None, reason)."""
    pip = sorted(find_packages(py.get("packages") or [], r"^nvidia-nccl-cu\d+$"), key=lambda p: p["name"])
    for package in pip:
        if not package.get("location"):
            continue
        library = os.path.join(package["location"], "nvidia", "nccl", "lib", "libnccl.so.2")
        if os.path.isfile(under(root, library)):
            version = embedded_version(under(root, library), NCCL_VERSION_RE)
            if version:
                return version, library, "the embedded 'NCCL version' string of %s" % library
            if package.get("version"):
                return package["version"], library, "the metadata of %s %s" % (package["name"], package["version"])
    if pip and pip[0].get("version"):
        return pip[0]["version"], None, "the metadata of %s %s" % (pip[0]["name"], pip[0]["version"])
    name, path, dirs = _resolve_needed(root, objects or [], "libnccl.so")
    if path:
        version = embedded_version(under(root, path), NCCL_VERSION_RE)
        if version:
            return version, path, "the embedded 'NCCL version' string of %s (the extension's RUNPATH)" % path
        return None, None, "%s (on the extension's RUNPATH) carries no 'NCCL version' string" % path
    if name:
        return None, None, ("no pip nvidia-nccl package in the torch environment and %s is not on the extension's "
                            "RUNPATH %s" % (name, dirs or "(none)"))
    return None, None, "no pip nvidia-nccl package in the torch environment"


def _check_nccl(root, py, generation, linkage, objects):
    name = "nccl"
    if generation != "v2":
        return _unknown(name, "the build/runtime NCCL rule is DeepEP V2's (this build is %s)"
                        % (generation or "of no generation"))
    nccl = linkage.get("nccl")
    if nccl is None:
        return _unknown(name, "the linkage record has no NCCL (nccl: null)")
    built_text = nccl.get("header_version") if isinstance(nccl, dict) else None
    built = _version(built_text) if isinstance(built_text, str) else None
    if built is None:
        return _unknown(name, "the linkage record's nccl.header_version %r is not a version" % (built_text,))
    if not py.get("ok"):
        return _unknown(name, "the torch environment's packages could not be read: %s" % py.get("error"))
    loaded_text, library, how = _loaded_nccl(root, py, objects)
    loaded = _version(loaded_text) if loaded_text else None
    if loaded is None:
        return _unknown(name, how if not loaded_text else "%s gave %r, not a version" % (how, loaded_text))
    built_r, loaded_r = _release(built), _release(loaded)
    if built < parse_version(NCCL_RUNTIME_VERSION_FLOOR):
        ok = loaded_r == built_r
        expected = built_r
        rule = "below NCCL %s the runtime must be the build's version exactly" % NCCL_RUNTIME_VERSION_FLOOR
    else:
        ok = parse_version(loaded_r) >= parse_version(built_r)
        expected = ">=" + built_r
        rule = "from NCCL %s on the runtime must be at least the build's" % NCCL_RUNTIME_VERSION_FLOOR
    pip = sorted(find_packages(py.get("packages") or [], r"^nvidia-nccl-cu\d+$"), key=lambda p: p["name"])
    project = pip[0]["name"] if pip else "nvidia-nccl-cu13"
    fix = None
    if not ok:
        fix = ("re-pin NCCL in the torch environment to the build's: pip install --no-deps --force-reinstall "
               "%s==%s (DeepEP #710), or rebuild DeepEP against the loaded NCCL %s (rerun the deepep role)"
               % (project, built_r, loaded_r))
    return _check(name, ok=ok, expected=expected, found=loaded_r, fix=fix, library=library,
                  reason="DeepEP V2 built against NCCL %s, the torch environment loads %s (%s); %s"
                  % (built_r, loaded_r, how, rule))


# --- (b) NVSHMEM -----------------------------------------------------------------------------------------------

def _preloaded(env_exports):
    for entry in re.split(r"[:\s]+", str((env_exports or {}).get("LD_PRELOAD") or "")):
        if os.path.basename(entry).startswith("libnvshmem_host.so"):
            return entry
    return None


def _host_version(root, path, py):
    full = under(root, path)
    version = embedded_version(full, NVSHMEM_VERSION_RE)
    if version:
        return version, "its embedded 'NVSHMEM v' string"
    match = _VERSIONED_NAME_RE.search(os.path.basename(os.path.realpath(full)))
    if match:
        return match.group(1), "its versioned file name %s" % os.path.basename(os.path.realpath(full))
    for package in find_packages(py.get("packages") or [], r"^nvidia-nvshmem-cu\d+$"):
        location = package.get("location")
        if location and package.get("version") and path.startswith(location.rstrip("/") + "/"):
            return package["version"], "the metadata of %s %s" % (package["name"], package["version"])
    return None, None


def _check_nvshmem(root, py, linkage, objects, env_exports):
    name = "nvshmem"
    nvshmem = linkage.get("nvshmem")
    if nvshmem is None:
        return _unknown(name, "the linkage record has no NVSHMEM (nvshmem: null)")
    device_text = nvshmem.get("device_version") if isinstance(nvshmem, dict) else None
    device = _version(device_text) if isinstance(device_text, str) else None
    if device is None:
        return _unknown(name, "the linkage record's nvshmem.device_version %r is not a version" % (device_text,))
    preload = _preloaded(env_exports)
    if preload:
        library, via = preload, "the env script's LD_PRELOAD"
        if not os.path.isfile(under(root, library)):
            return _unknown(name, "the env script preloads %s, which does not exist" % library)
    else:
        needed, library, dirs = _resolve_needed(root, objects or [], "libnvshmem_host.so")
        if not needed:
            return _unknown(name, "no object of the record has libnvshmem_host.so* in NEEDED")
        if not library:
            return _unknown(name, "%s is not on the extension's RUNPATH %s" % (needed, dirs or "(none)"))
        via = "the extension's RUNPATH"
    host_text, how = _host_version(root, library, py)
    host = _version(host_text) if host_text else None
    if host is None:
        return _unknown(name, "the version of %s (%s) could not be read" % (library, via))
    ok = host.major == device.major and device.minor <= host.minor
    device_r, host_r = _release(device), _release(host)
    fix = None
    if not ok:
        fix = ("rebuild DeepEP against the NVSHMEM that loads (%s, %s), or make the build's host library %s the one "
               "that loads (LD_PRELOAD of the env script, or the RUNPATH)" % (library, host_r,
                                                                              nvshmem.get("host_library") or "?"))
    return _check(name, ok=ok, expected="%d.x with x >= %d (device library %s)" % (device.major, device.minor, device_r),
                  found=host_r, fix=fix, library=library,
                  reason="the device library linked into the extension is %s; the host library that loads is %s "
                  "(%s, version from %s); NVSHMEM needs equal majors and device minor <= host minor"
                  % (device_r, library, via, how))


# --- (c) GPU arch ----------------------------------------------------------------------------------------------

def _sm(text):
    match = _SM_RE.fullmatch(str(text).strip().lower())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3)


def _cap(text):
    match = re.fullmatch(r"\s*(\d+)\.(\d)\s*", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def sass_covers(sass, cap):
    """Whether a cubin for ``sass`` (``sm_90``, ``sm_90a``, ``sm_100f``) runs on a GPU of capability ``cap``
    (``(9, 0)``): same major and its minor at most the GPU's; an ``a`` cubin runs on its own capability only."""
    parsed = _sm(sass)
    if not parsed or not cap:
        return False
    major, minor, suffix = parsed
    if suffix == "a":
        return (major, minor) == tuple(cap)
    return major == cap[0] and minor <= cap[1]


def ptx_covers(ptx, cap):
    """Whether PTX for ``ptx`` can be JIT-compiled for a GPU of capability ``cap``: any older or equal plain arch."""
    parsed = _sm(ptx)
    if not parsed or not cap:
        return False
    major, minor, suffix = parsed
    if suffix:
        return (major, minor) == tuple(cap)
    return (major, minor) <= tuple(cap)


def _arch_lists(objects, key):
    values = [o.get(key) for o in objects]
    if any(v is not None and not _str_list(v) for v in values):
        return None, "the record's %s lists are not lists of names such as sm_90" % key
    if all(v is None for v in values):
        return None, "the record does not list the embedded %s (cuobjdump was absent at build time)" % key.upper()
    return sorted(set(s for v in values if v for s in v)), None


def _checks_arch(generation, objects, gpus):
    name = "gpu_arch"
    if gpus is None:
        return [_unknown(name, "the GPUs' compute capabilities are unknown (no nvidia-smi and no known device id)")]
    if not gpus:
        return [_unknown(name, "the node has no NVIDIA GPU")]
    sass, error = _arch_lists(objects, "sass")
    ptx, ptx_error = _arch_lists(objects, "ptx")
    if sass is None and ptx is None:
        return [_unknown(name, error)]
    sass, ptx = sass or [], ptx or []
    if not sass and not ptx:
        # Nothing to hold the GPUs against: V2 compiles its kernels on the node; a V1 record without device code (a
        # build whose fatbin could not be read, or the simulated fleet's C++-only fixture) is not judged either.
        return [_unknown(name, "DeepEP V2 compiles its kernels on the node (JIT); the extension embeds no SASS or PTX"
                         if generation == "v2" else "the record lists no SASS or PTX in any object of the extension")]
    by_cap = {}
    out = []
    for gpu in gpus:
        cap = _cap(gpu.get("compute_capability"))
        if cap is None:
            out.append(_check(name, reason="GPU %s: compute capability %r unknown"
                              % (gpu.get("index"), gpu.get("compute_capability")), gpus=[gpu.get("index")]))
            continue
        by_cap.setdefault(cap, []).append(gpu.get("index"))
    # Every object that carries device code must have code for the GPU (one without any is not judged).
    coded = [(o["path"], o.get("sass") or [], o.get("ptx") or []) for o in objects if o.get("sass") or o.get("ptx")]
    if not coded:
        coded = [(objects[0]["path"], [], [])]

    def listed(names):
        return ", ".join(names) or "none"

    if len(coded) == 1:
        embedded = "SASS %s; PTX %s" % (listed(sass), listed(ptx))
    else:
        embedded = " | ".join("%s: SASS %s; PTX %s" % (path, listed(s), listed(p)) for path, s, p in coded)
    for cap in sorted(by_cap):
        want = "sm_%d%d" % cap
        indices = by_cap[cap]
        which = "GPU %s (%d.%d)" % (", ".join(str(i) for i in indices), cap[0], cap[1])
        fix = ("rebuild DeepEP for the GPU's arch: TORCH_CUDA_ARCH_LIST with %d.%d (deepep_build arch_list, or the "
               "deepep role's deepep_arch_list; by default the GPUs' own)" % cap)
        missing, jit = [], []
        for path, obj_sass, obj_ptx in coded:
            if any(sass_covers(a, cap) for a in obj_sass):
                continue
            usable = [a for a in obj_ptx if ptx_covers(a, cap)]
            if usable:
                jit.append((path, usable))
            else:
                missing.append(path)
        if missing:
            out.append(_check(name, ok=False, expected=want, found=embedded, gpus=indices, fix=fix,
                              reason="%s: %s has neither SASS nor PTX it can run (%s)"
                              % (which, ", ".join(missing), embedded)))
        elif jit:
            ptx_names = sorted(set(a for dummy, usable in jit for a in usable))
            out.append(_check(name, ok=True, expected=want, found=embedded, gpus=indices, fix=fix,
                              reason="%s has no SASS in %s; the driver JIT-compiles the PTX %s"
                              % (which, ", ".join(path for path, dummy in jit), ", ".join(ptx_names)),
                              warning="%s: no SASS for %s; its kernels are JIT-compiled from PTX %s at the first load "
                              "(slow start, and code tuned for an older arch)" % (which, want, ", ".join(ptx_names))))
        else:
            out.append(_check(name, ok=True, expected=want, found=embedded, gpus=indices,
                              reason="%s runs the embedded SASS of every object with device code" % which))
    return out


# --- (d) torch -------------------------------------------------------------------------------------------------

def _check_torch(py, linkage):
    name = "torch"
    torch = linkage.get("torch")
    built = torch.get("version") if isinstance(torch, dict) else None
    if not isinstance(built, str) or not built:
        return _unknown(name, "the linkage record has no torch version (torch: %r)" % (torch,))
    if not py.get("ok"):
        return _unknown(name, "the torch environment's packages could not be read: %s" % py.get("error"))
    found = find_packages(py.get("packages") or [], r"^torch$")
    installed = found[0].get("version") if found else None
    if not installed:
        return _unknown(name, "torch is not installed in the torch environment")
    ok = installed == built
    return _check(name, ok=ok, expected=built, found=installed,
                  fix=None if ok else ("rebuild DeepEP after the torch change (rerun the deepep role: the torch "
                                       "version is part of the build key); until then expect 'undefined symbol' "
                                       "on import"),
                  reason="built against torch %s; the torch environment has torch %s" % (built, installed))


# --- (e) libstdc++ ---------------------------------------------------------------------------------------------

def _check_libstdcxx(generation, objects):
    name = "libstdcxx"
    # The record passed the schema (shape_error): every libstdcxx is shared, static or none.
    values = [(o.get("path"), o.get("libstdcxx")) for o in objects]
    static = [str(path) for path, value in values if value == "static"]
    found = ", ".join("%s: %s" % (path, value) for path, value in values)
    if not static:
        return _check(name, ok=True, expected="shared (or none)", found=found,
                      reason="no object of the extension carries a static libstdc++")
    fix = ("rebuild DeepEP with a compiler whose libstdc++.so exists (g++ -print-file-name=libstdc++.so), so that the "
           "extension NEEDs libstdc++.so.6 (deepep_build now links it so)")
    text = ("%s carries a static libstdc++ whose std::locale facets are not the process's, so std::regex in it "
            "crashes" % ", ".join(static))
    if generation == "v2":
        return _check(name, ok=False, expected="shared (or none)", found=found, fix=fix,
                      reason=text + "; DeepEP V2's JIT compiles one at the first dispatch (SIGSEGV)")
    return _check(name, ok=True, expected="shared (or none)", found=found, fix=fix,
                  reason=text + " (DeepEP V1 uses none)", warning=text + " (DeepEP V1 uses none, but any code of "
                  "the extension that does will)")


# --- the node's GPUs ---------------------------------------------------------------------------------------------

def node_gpus(sysfs_root, nvidia_smi, runner, timeout=60):
    """``[{index, compute_capability}]`` of the node's GPUs: the PCI tree (known device ids), the capability
    nvidia-smi reports (``compute_cap``) where it runs. None when ``sysfs_root`` is not a directory."""
    if not sysfs_root or not os.path.isdir(sysfs_root):
        return None
    gpus = list_gpus(sysfs_root)
    if gpus and nvidia_smi:
        rc, out, dummy = runner(nvidia_smi_query_argv(nvidia_smi), timeout=timeout, env=None)
        if rc == 0:
            by_bus = {}
            for row in parse_nvidia_smi_query(out, NVIDIA_SMI_QUERY_FIELDS):
                by_bus[normalize_bdf(row.get("pci.bus_id"))] = row
            for gpu in gpus:
                row = by_bus.get(gpu["pci_address"]) or {}
                gpu["compute_capability"] = row.get("compute_cap") or gpu["compute_capability"]
    return [{"index": g["index"], "compute_capability": g["compute_capability"]} for g in gpus]


# --- the record's shape ----------------------------------------------------------------------------------------

# --- all -------------------------------------------------------------------------------------------------------

def _record(root, py):
    """(stamp path, stamp dict or None, why there is none)."""
    if not py.get("ok"):
        return None, None, "the torch environment's packages could not be read: %s" % py.get("error")
    packages = find_packages(py.get("packages") or [], r"^deep[-_]ep$")
    if not packages or not packages[0].get("location"):
        return None, None, "DeepEP is not installed in the torch environment"
    directory = os.path.join(packages[0]["location"], "deep_ep")
    path = stamp_path(directory)
    if not os.path.isfile(under(root, path)):
        return path, None, "the installed DeepEP has no build stamp %s" % path
    stamp = read_stamp(under(root, directory))
    if stamp is None:
        return path, None, "the build stamp %s is not a JSON object" % path
    return path, stamp, None


def gather_linkage(root, py, gpus, env_exports=None):
    """``gpufleet_linkage``: the installed DeepEP's linkage record checked against the node.

    ``py``: :func:`probes.gather_python` of the torch environment's interpreter. ``gpus``: the node's GPUs, each
    ``{index, compute_capability}`` (``"9.0"``), or None when unknown. ``env_exports``: the env script's exports
    (its LD_PRELOAD decides which NVSHMEM host library loads)."""
    path, stamp, why = _record(root, py)
    linkage = (stamp or {}).get("linkage")
    generation = (stamp or {}).get("generation")
    record = {"path": path, "present": False, "schema": None, "generation": generation,
              "key": (stamp or {}).get("key"), "reason": why}
    if stamp is not None:
        if linkage is None:
            why = "no linkage record in the build stamp %s (a build before linkage records: rebuild DeepEP)" % path
        elif not isinstance(linkage, dict) or linkage.get("schema") != LINKAGE_SCHEMA:
            schema = linkage.get("schema") if isinstance(linkage, dict) else None
            why = ("no linkage record of schema %d in the build stamp %s (its linkage has schema %r: a build before "
                   "linkage records, rebuild DeepEP)" % (LINKAGE_SCHEMA, path, schema))
        else:
            why = shape_error(path, linkage)
            if not why:
                record.update(present=True, schema=LINKAGE_SCHEMA)
        record["reason"] = why
    if not record["present"]:
        checks = [_unknown(name, why) for name in CHECKS]
    else:
        objects = linkage["objects"]
        checks = [_check_nccl(root, py, generation, linkage, objects),
                  _check_nvshmem(root, py, linkage, objects, env_exports)]
        checks += _checks_arch(generation, objects, gpus)
        checks += [_check_torch(py, linkage), _check_libstdcxx(generation, objects)]
    failed = sorted(set(c["check"] for c in checks if c["ok"] is False))
    unknown = sorted(set(c["check"] for c in checks if c["ok"] is None))
    ok = False if failed else (None if unknown else True)
    return {"record": record, "ok": ok, "checks": checks, "failed": failed, "unknown": unknown,
            "warnings": [c["warning"] for c in checks if c["warning"]]}
