# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NCCL EP (the ``nccl-extensions`` wheel: ``nccl.ep`` over ``libnccl_ep.so``) in the torch environment: its facts,
read from the package metadata the node's Python probe returns (no import, no GPU), its checks against the limits of
NCCL EP v0.1, and the pip command that installs it.

One reader for both paths: module gpufleet.deepep.nccl_ep_env (``ansible_facts.gpufleet_nccl_ep``) and node_stack's
gather set ``nccl_ep`` (the audit) call :func:`read_nccl_ep` on the same probe, so the two never disagree.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import under
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import torch_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import SglangError, normalize
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_request import check_requirements_hashes
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import nccl_version_from_header_file

__all__ = ["NcclEpError", "PROJECT", "LIMITS", "DEPENDENCIES", "read_nccl_ep", "check_nccl_ep", "refusals",
           "install_specs", "pip_argv", "hash_lines", "check_release", "arch_value", "empty_facts"]

PROJECT = "nccl-extensions"
# NCCL EP v0.1's limits (its RELEASE.md): CUDA 13 only, Hopper or Blackwell, up to 8 nodes / 64 GPUs in one EP group.
LIMITS = {"cuda_major": 13, "min_arch": (9, 0), "max_nodes": 8, "max_gpus": 64}
# What nccl.ep imports at run time besides itself: the base requirements of nccl-extensions and nccl4py, and
# cuda-bindings (of their cu13 extra: the collection installs the extra's runtime part, never the extra's NCCL,
# which the nccl role pins, nor nvidia-cutlass-dsl, which nccl.ep does not import).
DEPENDENCIES = ("nccl4py", "cuda-core", "cuda-bindings", "cuda-pathfinder", "numpy")
_RELEASE = re.compile(r"[0-9]+[.][0-9]+[.][0-9]+")
_ARCH = re.compile(r"([0-9]+)[.]([0-9]+)[a-z]?")
_NCCL_REQ = re.compile(r"^nvidia-nccl-cu(\d+)\s*==\s*([0-9][0-9.]*)\s*;\s*extra\s*==\s*[\"']cu(\d+)[\"']", re.I)


class NcclEpError(Exception):
    """A bad input, with the value and the expected form in the message."""


def check_release(value, name):
    if not isinstance(value, str) or not _RELEASE.fullmatch(value):
        raise NcclEpError("%s %r: expected a release N.N.N such as 0.1.0" % (name, value))
    return value


def arch_value(value):
    """``(major, minor)`` of a compute capability ``9.0`` / ``10.0a`` (NcclEpError naming it otherwise)."""
    match = _ARCH.fullmatch(str(value).strip())
    if not match:
        raise NcclEpError("compute capability %r: expected MAJOR.MINOR such as 9.0 or 10.0" % (value,))
    return int(match.group(1)), int(match.group(2))


def _packages(py):
    return dict((normalize(p.get("name") or ""), p) for p in (py or {}).get("packages") or [])


def empty_facts():
    return {"installed": False, "version": None, "location": None, "library": None, "library_cuda": None,
            "requires_nccl": None, "nccl": None, "torch_cuda": None, "dependencies": {}, "missing": [],
            "jit_cache_dir": None, "jit_kernels": None, "checks": [], "error": None}


def _metadata_requires(root, location, version):
    """Requires-Dist lines of the installed nccl-extensions (its ``.dist-info/METADATA`` under ``location``)."""
    if not location:
        return []
    pattern = os.path.join(under(root, location), "nccl_extensions-%s.dist-info" % version, "METADATA")
    for path in glob.glob(pattern):
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as handle:
                return [line.split(":", 1)[1].strip() for line in handle.read().splitlines()
                        if line.startswith("Requires-Dist:")]
        except (IOError, OSError):
            return []
    return []


def _count_kernels(path):
    """How many compiled kernels (``kernel.cubin``) NCCL EP's JIT cache holds; None where there is no cache."""
    if not path or not os.path.isdir(path):
        return None
    count = 0
    for _dirpath, _dirs, files in os.walk(path):
        count += sum(1 for name in files if name == "kernel.cubin")
    return count


def _environment_cuda(facts):
    """The CUDA major of the torch environment (torch's CUDA, else the NVIDIA NCCL wheel's), or None."""
    major = str(facts.get("torch_cuda") or "").partition(".")[0]
    if major.isdigit():
        return int(major)
    return (facts.get("nccl") or {}).get("cuda_major")


def _library(root, location, cuda_major):
    """(path, CUDA major) of the ``libnccl_ep.so`` that nccl.ep loads in an environment of ``cuda_major``: the wheel
    ships one per CUDA major (``nccl/ep/lib/cu12``, ``cu13``); the environment's own where it is there, else the
    first (the cuda_13 check then names the mismatch); None where the wheel has none."""
    found = []
    for lib in sorted(glob.glob(os.path.join(under(root, location), "nccl", "ep", "lib", "cu*", "libnccl_ep.so*"))):
        cuda_dir = os.path.basename(os.path.dirname(lib))
        major = int(cuda_dir[2:]) if cuda_dir[2:].isdigit() else None
        found.append((os.path.join(location, "nccl", "ep", "lib", cuda_dir, os.path.basename(lib)), major))
    own = [item for item in found if cuda_major is not None and item[1] == cuda_major]
    return (own or found or [None])[0]


def read_nccl_ep(py, root="/", env_exports=None, gpus=None):
    """``gpufleet_nccl_ep`` from the Python probe ``py`` (``{ok, packages: [{name, version, location}]}``; its
    pattern lists nccl-extensions, its dependencies, torch and the NVIDIA NCCL wheels), files read under ``root``,
    and the env script's exports (``NCCL_EP_JIT_CACHE_DIR``). The checks are :func:`check_nccl_ep`'s (``gpus``: the
    GPUs' compute capabilities where known)."""
    facts = empty_facts()
    if not (py or {}).get("ok"):
        facts["error"] = (py or {}).get("error") or "the Python probe did not run"
        return facts
    packages = _packages(py)
    ext = packages.get(PROJECT)
    facts["torch_cuda"] = torch_facts(py)["cuda"]
    ncclpkgs = sorted(name for name in packages if re.fullmatch(r"nvidia-nccl-cu\d+", name))
    if ncclpkgs:
        found = packages[ncclpkgs[-1]]
        # The NCCL there is what its nccl.h says: the nccl role's source build is copied over the pip package's files
        # and leaves the package's metadata at the version it replaced.
        header = under(root, os.path.join(found.get("location") or "/nonexistent", "nvidia", "nccl", "include",
                                          "nccl.h"))
        version = nccl_version_from_header_file(header) or found.get("version")
        facts["nccl"] = {"package": ncclpkgs[-1], "version": version, "package_version": found.get("version"),
                         "cuda_major": int(ncclpkgs[-1].rsplit("cu", 1)[1])}
    facts["dependencies"] = dict((name, (packages.get(name) or {}).get("version")) for name in DEPENDENCIES)
    facts["missing"] = [name for name in DEPENDENCIES if name not in packages] if ext else []
    cache = (env_exports or {}).get("NCCL_EP_JIT_CACHE_DIR")
    facts["jit_cache_dir"] = cache or None
    facts["jit_kernels"] = _count_kernels(under(root, cache)) if cache else None
    if ext:
        facts.update(installed=True, version=ext.get("version"), location=ext.get("location"))
        location = ext.get("location") or "/nonexistent"
        library = _library(root, location, _environment_cuda(facts))
        if library:
            facts["library"], facts["library_cuda"] = library
        for line in _metadata_requires(root, ext.get("location"), ext.get("version")):
            match = _NCCL_REQ.match(line)
            if match and facts["requires_nccl"] is None:
                facts["requires_nccl"] = match.group(2)
    facts["checks"] = check_nccl_ep(facts, gpus=gpus)
    return facts


def _check(name, ok, found, reason, fix):
    status = "not_applicable" if ok is None else ("pass" if ok else "fail")
    return {"check": name, "status": status, "found": found, "reason": None if ok else reason,
            "fix": None if ok else fix}


def check_nccl_ep(facts, gpus=None):
    """The installed NCCL EP against its runtime needs: ``[{check, status, found, reason, fix}]`` (status pass, fail
    or not_applicable where NCCL EP is not installed). ``gpus``: compute capabilities, checked against Hopper."""
    if not facts.get("installed"):
        return [_check("installed", None, None, None, None)]
    out = []
    lib = facts.get("library")
    out.append(_check("library", bool(lib), lib, "nccl/ep/lib/cu*/libnccl_ep.so is missing from %s"
                      % facts.get("location"), "reinstall nccl-extensions (the nccl_ep role)"))
    cuda = facts.get("library_cuda") or (facts.get("nccl") or {}).get("cuda_major")
    out.append(_check("cuda_13", None if cuda is None else cuda == LIMITS["cuda_major"], cuda,
                      "NCCL EP v0.1 runs on CUDA 13 only; this environment is CUDA %s" % cuda,
                      "use a CUDA 13 torch environment (torch +cu130) for NCCL EP, or turn it off (nccl_ep_enabled)"))
    want, nccl = facts.get("requires_nccl"), facts.get("nccl") or {}
    out.append(_check("nccl_version", None if not want else nccl.get("version") == want,
                      nccl.get("version"),
                      "nccl-extensions %s requires NCCL %s exactly; the environment has %s"
                      % (facts.get("version"), want, "%s %s" % (nccl.get("package"), nccl.get("version"))
                         if nccl else "no NCCL pip package"),
                      "pin NCCL %s with the nccl role (nccl_version) before NCCL EP" % want))
    missing = facts.get("missing") or []
    out.append(_check("dependencies", not missing, missing, "nccl.ep imports %s, not installed" % ", ".join(missing),
                      "rerun the nccl_ep role (it installs nccl-extensions with cuda-bindings)"))
    if gpus:
        old = [str(g) for g in gpus if arch_value(g) < LIMITS["min_arch"]]
        out.append(_check("gpu_arch", not old, list(gpus), "NCCL EP v0.1 needs Hopper or Blackwell (9.0+); the "
                          "node has %s" % ", ".join(sorted(set(old))), "run DeepEP on these GPUs, not NCCL EP"))
    return out


def refusals(facts, nccl_version, gpus, job_nodes, gpus_per_node):
    """Why NCCL EP must not be installed on this node (``[reason]``, each naming the value and the limit), before
    anything is installed: NCCL EP v0.1's limits against the environment, the GPUs and the EP group."""
    out = []
    torch_cuda = facts.get("torch_cuda")
    nccl = facts.get("nccl") or {}
    if torch_cuda and int(torch_cuda.split(".")[0]) != LIMITS["cuda_major"]:
        out.append("torch is built for CUDA %s; NCCL EP v0.1 runs on CUDA 13 only (torch +cu130 or newer)" % torch_cuda)
    elif nccl and nccl.get("cuda_major") != LIMITS["cuda_major"]:
        out.append("the environment's NCCL is %s; NCCL EP v0.1 runs on CUDA 13 only (nvidia-nccl-cu13)"
                   % nccl.get("package"))
    if not nccl:
        out.append("the environment has no NCCL pip package; NCCL EP needs nvidia-nccl-cu13 %s (the nccl role's "
                   "pin: nccl_enabled)" % nccl_version)
    elif nccl.get("version") != nccl_version:
        out.append("NCCL EP needs NCCL %s exactly; the environment has %s %s (pin it with the nccl role first: "
                   "nccl_version %s)" % (nccl_version, nccl.get("package"), nccl.get("version"), nccl_version))
    old = sorted(set(str(g) for g in gpus or [] if arch_value(g) < LIMITS["min_arch"]))
    if old:
        out.append("NCCL EP v0.1 runs on Hopper or Blackwell (compute capability 9.0 or newer); the node's GPUs are %s"
                   % ", ".join(old))
    if job_nodes > LIMITS["max_nodes"]:
        out.append("the EP group spans %d nodes; NCCL EP v0.1 supports up to %d" % (job_nodes, LIMITS["max_nodes"]))
    if job_nodes * gpus_per_node > LIMITS["max_gpus"]:
        out.append("the EP group spans %d GPUs (%d nodes x %d); NCCL EP v0.1 supports up to %d"
                   % (job_nodes * gpus_per_node, job_nodes, gpus_per_node, LIMITS["max_gpus"]))
    return out


def install_specs(version, cuda_major=13):
    """What the install asks pip for: nccl-extensions at ``version`` and the runtime part of its cu13 extra."""
    return ["%s==%s" % (PROJECT, version), "cuda-bindings==%d.*" % cuda_major]


def hash_lines(requirements_hashes):
    """A ``--require-hashes`` requirements file's lines from ``{project==version: [sha256]}``, the lock format the
    collection checks in one place (sglang_request.check_requirements_hashes); NcclEpError on what that refuses, and
    on NCCL itself, which the nccl role owns."""
    try:
        pins = check_requirements_hashes(requirements_hashes)
    except SglangError as exc:
        raise NcclEpError(str(exc)) from None
    lines = []
    for project in sorted(pins):
        version, digests = pins[project]
        if re.fullmatch(r"nvidia-nccl-cu\d+", project):
            raise NcclEpError("requirements_hashes key %s==%s: NCCL is the nccl role's pin, leave it out of NCCL EP's "
                              "lock" % (project, version))
        lines.append("%s==%s %s" % (project, version, " ".join("--hash=sha256:%s" % d for d in digests)))
    return lines


def pip_argv(python, specs=None, wheelhouse=None, requirements_file=None, constraint_file=None, index_url=None,
             extra_index_urls=(), find_links=(), no_index=False, break_system_packages=False, extra_args=()):
    """``pip install`` of NCCL EP: from a checked ``wheelhouse`` (no index), a ``--require-hashes`` file (no deps:
    the lock is the closure), or an index / find-links."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    if break_system_packages:
        argv.append("--break-system-packages")
    if wheelhouse:
        argv += ["--no-index", "--find-links", wheelhouse]
    else:
        if no_index:
            argv.append("--no-index")
        if index_url:
            argv += ["--index-url", index_url]
        for url in extra_index_urls or ():
            argv += ["--extra-index-url", url]
        for link in find_links or ():
            argv += ["--find-links", link]
    if constraint_file:
        argv += ["-c", constraint_file]
    argv += list(extra_args or ())
    if requirements_file:
        argv += ["--no-deps", "--require-hashes", "-r", requirements_file]
    else:
        argv += list(specs or ())
    return argv
