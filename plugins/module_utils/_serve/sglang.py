# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""SGLang in a DeepEP-ready torch environment: the pure logic of ``sglang_env`` and ``model_config``.

Standard library only, Python 3.8+ (this file runs on the managed nodes).

The trap: sglang >= 0.5.19 depends on ``sgl-deep-ep``, which installs its own top-level ``deep_ep`` (built
against torch 2.14.1), so a plain ``pip install sglang`` shadows or overwrites the DeepEP the collection built
for the node's NVSHMEM/IBGDA, and may move torch and NCCL (DeepEP #710). The install therefore goes in two
steps - the sglang wheel with ``--no-deps``, then its requirements less the excluded projects - with torch,
NCCL, cuDNN and ``deep_ep`` held by the environment's pip constraints, and every result is proved from the
environment's own metadata afterwards (:func:`moved`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._http import HttpInputError, check_source
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import normalize_project_name

__all__ = [
    "SglangError",
    "PROBE_SCRIPT",
    "REQUIRES_SCRIPT",
    "STAMP_NAME",
    "normalize",
    "version_tuple",
    "version_lt",
    "kernel_package_for",
    "torch_cuda",
    "nixl_package_for",
    "parse_probe",
    "deep_ep_state",
    "record_mismatches",
    "nvidia_lib_dirs",
    "resolve_library",
    "moved",
    "constraints_for",
    "filter_requirements",
    "check_wheelhouse",
    "read_sha256sums",
    "transfer_engine_check",
    "dmabuf_capable",
    "model_facts",
    "is_hub_id",
    "check_request",
    "check_source_url",
    "check_requirements_hashes",
    "hashed_requirements",
    "lock_from_report",
]

STAMP_NAME = ".gpufleet-build.json"
KERNEL_RENAMED_AT = (0, 5, 15)
NVSHMEM_DIR_NAMES = ("nvshmem",)

_VERSION_RE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_TORCH_CUDA_RE = re.compile(r"\+cu(\d{2,3})$")
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class SglangError(Exception):
    """A value the SGLang logic cannot accept; the message names it and the expected form."""


def normalize(name):
    """PEP 503 project name: ``Flashinfer_Python`` -> ``flashinfer-python`` (``_versions.normalize_project_name``)."""
    return normalize_project_name(name)


def version_tuple(value):
    """The numeric release of a version string (``0.5.19.post1`` -> ``(0, 5, 19)``); SglangError otherwise."""
    match = _VERSION_RE.match(str(value or ""))
    if not match:
        raise SglangError("version %r is not a release such as 0.5.19" % (value,))
    return tuple(int(p) for p in match.group(1).split("."))


def version_lt(left, right):
    a, b = list(version_tuple(left)), list(version_tuple(right))
    width = max(len(a), len(b))
    return a + [0] * (width - len(a)) < b + [0] * (width - len(b))


def kernel_package_for(sglang_version):
    """``sgl-kernel`` before sglang 0.5.15, ``sglang-kernel`` from it on (the package was renamed)."""
    return "sgl-kernel" if version_tuple(sglang_version) < KERNEL_RENAMED_AT else "sglang-kernel"


def torch_cuda(torch_version, version_py_text=None):
    """The CUDA release torch was built for: ``2.9.1+cu129`` -> ``12.9``; ``torch/version.py``'s ``cuda`` as a
    fallback; None for a CPU build."""
    match = _TORCH_CUDA_RE.search(str(torch_version or ""))
    if match:
        digits = match.group(1)
        return "%s.%s" % (digits[:-1], digits[-1])
    if version_py_text:
        found = re.search(r"^cuda\s*(?::\s*\w+)?\s*=\s*['\"](\d+\.\d+)", version_py_text, re.M)
        if found:
            return found.group(1)
    return None


def nixl_package_for(cuda_release):
    """The NIXL build for a CUDA release (``12.9`` -> ``nixl-cu12``), not the ``nixl`` meta package (which pulls
    both builds)."""
    major = str(cuda_release or "").split(".", 1)[0]
    if major not in ("12", "13"):
        raise SglangError("CUDA %r has no NIXL build; expected a CUDA 12.x or 13.x release such as 12.9"
                          % (cuda_release,))
    return "nixl-cu%s" % major


# --------------------------------------------------------------------------------------------
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

# Runs in the target interpreter after ``pip install --no-deps sglang==V``: sglang's requirements that apply to
# this environment without extras, as ``[[name, requirement string], ...]`` (markers evaluated by pip's own
# vendored packaging).
REQUIRES_SCRIPT = r"""
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
out = []
for line in metadata.requires(sys.argv[1]) or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    spec = str(req.specifier)
    out.append([req.name, req.name + ("[%s]" % ",".join(sorted(req.extras)) if req.extras else "") + spec])
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


def moved(before, after, holds, deep_ep_after=None, bundled=False):
    """What an install moved: ``[str]`` naming each project whose version is not the held one and a deep_ep
    that is no longer the collection's. ``holds``: ``{project: version}``; ``before``/``after``: ``{project:
    version}`` of the environment."""
    out = []
    for project, version in sorted((holds or {}).items()):
        now = (after or {}).get(normalize(project))
        if not _same_version(now, version):
            was = (before or {}).get(normalize(project))
            since = (" (was %s)" % was) if was and was != now else ""
            out.append("%s is %s, held at %s%s" % (project, now or "not installed", version, since))
    if deep_ep_after is not None and not bundled and not deep_ep_after.get("collection"):
        out.extend("deep_ep: %s" % reason for reason in deep_ep_after.get("reasons") or [])
    return out


def _same_version(installed, held):
    """``2.13.0+cpu`` satisfies ``==2.13.0`` (PEP 440: no local label in the specifier); otherwise exact."""
    if installed is None or held is None:
        return installed == held
    installed, held = str(installed), str(held)
    return installed == held or ("+" not in held and installed.split("+", 1)[0] == held)


def constraints_for(holds):
    """Sorted ``project==version`` lines for ``holds``."""
    out = []
    for project, version in sorted((holds or {}).items()):
        if not _NAME_RE.fullmatch(str(project)) or not version:
            raise SglangError("hold %r=%r: expected a pip project and a version such as torch=2.9.1" % (project, version))
        out.append("%s==%s" % (normalize(project), version))
    return out


def filter_requirements(requirements, exclude):
    """``(kept, dropped)`` of ``[[name, requirement], ...]``, dropping projects named in ``exclude``."""
    excluded = set(normalize(e) for e in exclude or [])
    kept, dropped = [], []
    for name, req in requirements or []:
        (dropped if normalize(name) in excluded else kept).append(req)
    return kept, dropped


def read_sha256sums(text):
    """``{file name: sha256}`` of a ``SHA256SUMS`` text (``<hex>  <name>`` lines)."""
    out = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise SglangError("SHA256SUMS line %d %r: expected '<64 hex digits>  <file name>'" % (number, line))
        out[parts[1].lstrip("*").strip()] = parts[0]
    return out


def check_wheelhouse(directory, checksums):
    """Every ``*.whl`` of an offline wheelhouse against ``checksums`` (``{name: sha256}``): ``[problem]``."""
    problems = []
    try:
        wheels = sorted(n for n in os.listdir(directory) if n.endswith(".whl"))
    except OSError as exc:
        return ["wheelhouse %s cannot be read: %s" % (directory, exc)]
    if not wheels:
        problems.append("wheelhouse %s holds no wheels" % directory)
    for name in wheels:
        want = (checksums or {}).get(name)
        if want is None:
            problems.append("%s has no checksum" % name)
            continue
        digest = hashlib.sha256()
        with open(os.path.join(directory, name), "rb") as handle:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(block)
        if digest.hexdigest() != want:
            problems.append("%s: sha256 %s, expected %s" % (name, digest.hexdigest(), want))
    return problems


def dmabuf_capable(kernel_release, open_kernel_module):
    """DMA-BUF registration of GPU memory: the NVIDIA open kernel module on Linux >= 5.12."""
    try:
        release = version_tuple(kernel_release)
    except SglangError:
        return False
    return bool(open_kernel_module) and release >= (5, 12)


def transfer_engine_check(engine, peermem_loaded, dmabuf, mooncake_dmabuf):
    """None when ``engine`` can register GPU memory on this node, else the refusal (naming the fix)."""
    if engine != "mooncake":
        return None
    if peermem_loaded:
        return None
    if dmabuf and mooncake_dmabuf:
        return None
    why = ("nvidia_peermem is not loaded (with the NVIDIA open kernel module it does not load: 'could not insert "
           "nvidia_peermem: Invalid argument')")
    if dmabuf and not mooncake_dmabuf:
        why += " and this Mooncake build is not set to register through DMA-BUF (sglang_mooncake_dmabuf)"
    elif not dmabuf:
        why += " and DMA-BUF registration is not available (needs the open kernel module on Linux >= 5.12)"
    return ("Mooncake cannot register GPU memory here: %s; RDMA transfers fail with 'RdmaTransport: Failed to "
            "register memory'. Use NIXL (sglang_transfer_engine: nixl, launch with --disaggregation-transfer-backend "
            "nixl), which registers through DMA-BUF." % why)


# --------------------------------------------------------------------------------------------
# Model directories


def is_hub_id(value):
    """``org/name`` that is not a path on this node."""
    return bool(_HUB_ID_RE.fullmatch(str(value or ""))) and not str(value).startswith((".", "/"))


# The counts model_facts reads, each under its names in config.json (the first one given counts), and the least
# value it takes: heads, layers and sizes are positive; a config may give 0 routed experts (a dense model).
_COUNTS = (
    ("num_attention_heads", ("num_attention_heads", "n_head", "num_heads"), 1),
    ("num_key_value_heads", ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"), 1),
    ("num_experts", ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"), 0),
    ("hidden_size", ("hidden_size",), 1),
    ("num_hidden_layers", ("num_hidden_layers",), 1),
    ("max_position_embeddings", ("max_position_embeddings",), 1),
)


def _count(config, text_cfg, names, minimum):
    """The first of ``names`` given (the top level before ``text_config``) as a whole number >= ``minimum``; None
    when none is given. SglangError naming the key (``text_config.<key>`` when read there), the value and the form
    when it is not one - a JSON true, a string, a fraction or a negative number is no count."""
    for name in names:
        for where, cfg in (("", config), ("text_config.", text_cfg)):
            value = cfg.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise SglangError("%s%s is %s%s; expected %s integer" % (
                    where, name, json.dumps(value) if isinstance(value, (bool, int, float, str)) else repr(value),
                    " (a boolean, not a number)" if isinstance(value, bool) else "",
                    "a positive" if minimum > 0 else "a non-negative"))
            return value
    return None


def model_facts(config, config_text=None):
    """Facts of a model's ``config.json`` (a dict): architecture, heads, experts, quantization. A count given as
    anything but a whole number in its range raises SglangError naming the key and the value."""
    if not isinstance(config, dict):
        raise SglangError("config.json must hold a JSON object, got %s" % type(config).__name__)
    text_cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = dict(text_cfg)
    merged.update(dict((k, v) for k, v in config.items() if v is not None))
    counts = dict((fact, _count(config, text_cfg, names, minimum)) for fact, names, minimum in _COUNTS)
    heads, kv, experts = counts["num_attention_heads"], counts["num_key_value_heads"], counts["num_experts"]
    quant = merged.get("quantization_config") if isinstance(merged.get("quantization_config"), dict) else None
    quant_method = (quant or {}).get("quant_method") or (quant or {}).get("quant_algo")
    fmt = (quant or {}).get("fmt")
    archs = merged.get("architectures") if isinstance(merged.get("architectures"), list) else []
    return {
        "architectures": [str(a) for a in archs],
        "architecture": str(archs[0]) if archs else None,
        "model_type": merged.get("model_type"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv if kv is not None else heads,
        "hidden_size": counts["hidden_size"],
        "num_hidden_layers": counts["num_hidden_layers"],
        "num_experts": experts,
        "moe": experts is not None and experts > 1,
        "quantization": quant_method,
        "quantization_fmt": fmt,
        "fp8": bool(quant_method and "fp8" in str(quant_method).lower()),
        "scale_fmt": (quant or {}).get("scale_fmt"),
        "max_position_embeddings": counts["max_position_embeddings"],
        "config_sha256": hashlib.sha256(config_text.encode() if isinstance(config_text, str)
                                        else (config_text or b"")).hexdigest() if config_text is not None else None,
    }


# ------------------------------------------------------------------------------ the request's shapes, checked first
_PIP_VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]*")
_CUDA_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PINNED_RE = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9A-Za-z][0-9A-Za-z.+!_-]*)")


def check_source_url(value, option, paths=False):
    """A package source (module_utils/_http.check_source), its refusal as a SglangError."""
    try:
        return check_source(value, option, paths=paths)
    except HttpInputError as exc:
        raise SglangError(str(exc))


def check_requirements_hashes(hashes):
    """``requirements_hashes`` -> ``{normalized project: (version, [sha256, ...])}``; SglangError naming the entry and
    the form (``project==version: [sha256, ...]``, each 64 lowercase hex digits)."""
    form = "expected project==version: [<sha256>, ...] (64 hex digits each, e.g. sglang==0.5.8: [3f2a...])"
    out = {}
    if hashes is None:
        return out
    if not isinstance(hashes, dict):
        raise SglangError("requirements_hashes %r: %s" % (hashes, form))
    for key, value in hashes.items():
        match = _PINNED_RE.fullmatch(str(key).strip()) if isinstance(key, str) else None
        if not match:
            raise SglangError("requirements_hashes %r: the key is not project==version; %s" % (key, form))
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or \
                not all(isinstance(v, str) and _HEX64.fullmatch(v.strip().lower().replace("sha256:", "", 1))
                        for v in values):
            raise SglangError("requirements_hashes %s: %r is not a list of sha256 digests; %s" % (key, value, form))
        project = normalize(match.group(1))
        if project in out:
            raise SglangError("requirements_hashes %s: %s is pinned twice (%s and %s); %s"
                              % (key, project, out[project][0], match.group(2), form))
        out[project] = (match.group(2), [v.strip().lower().replace("sha256:", "", 1) for v in values])
    return out


def lock_from_report(report, exclude=()):
    """pip's installation report (``pip install --dry-run --report``, format version 1) -> ``({project==version:
    [sha256]}, [excluded project==version])``: every package pip chose, with the digest of the file it chose, the
    projects of ``exclude`` left out. SglangError naming the entry when the report is not that format, a package has
    no sha256 (a directory or VCS requirement: nothing to pin) or one project comes twice."""
    form = ("expected pip's installation report version 1: {version: '1', install: [{metadata: {name, version}, "
            "download_info: {url, archive_info: {hashes: {sha256}}}}, ...]}")
    if not isinstance(report, dict) or str(report.get("version")) != "1" or not isinstance(report.get("install"), list):
        raise SglangError("%s; got %s" % (form, repr(report)[:200]))
    skip = set(normalize(e) for e in exclude)
    hashes, skipped, seen = {}, [], {}
    for index, item in enumerate(report["install"]):
        meta = item.get("metadata") if isinstance(item, dict) else None
        info = item.get("download_info") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not _NAME_RE.match(str(meta.get("name") or "")) \
                or not str(meta.get("version") or "").strip() or not isinstance(info, dict):
            raise SglangError("install[%d] %s: %s" % (index, repr(item)[:200], form))
        project, version = normalize(meta["name"]), str(meta["version"]).strip()
        key = "%s==%s" % (project, version)
        if project in skip:
            skipped.append(key)
            continue
        archive = info.get("archive_info")
        digest = None
        if isinstance(archive, dict):
            digest = (archive.get("hashes") or {}).get("sha256")
            if not digest and str(archive.get("hash") or "").startswith("sha256="):
                digest = archive["hash"][len("sha256="):]
        if not digest or not _HEX64.fullmatch(str(digest).lower()):
            raise SglangError("%s from %s has no sha256 in pip's report (a directory, VCS or unhashed source): "
                              "nothing to pin; install it from a wheel or sdist file" % (key, info.get("url")))
        if project in seen:
            raise SglangError("%s: %s comes twice in pip's report (%s and %s)" % (key, project, seen[project], version))
        seen[project] = version
        hashes[key] = [str(digest).lower()]
    return hashes, skipped


def hashed_requirements(specs, pins, with_lock=False, exclude=(), installed=()):
    """The requirements file (text) of a hash-checked ``pip install --require-hashes`` of ``specs``: each spec a
    ``project==version`` pinned in ``pins`` (check_requirements_hashes), a requirement by name or range resolved to
    its one pin, or a local wheel file (its own sha256); a requirement by name or range without a pin whose project
    is ``installed`` is left to pip (the installed copy satisfies it, or pip's own hash check refuses the upgrade).
    ``with_lock`` adds every other pin (the dependencies pip may pull in), less ``exclude``. SglangError naming a
    spec that has no pin, or whose pin is another version."""
    lines, named = [], set()
    for spec in specs:
        if os.path.isfile(spec):
            with open(spec, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            lines.append("%s --hash=sha256:%s" % (spec, digest))
            continue
        match = re.match(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*(.*)$", spec)
        project = normalize(match.group(1)) if match else None
        rest = match.group(2).split(";", 1)[0].strip() if match else ""
        if project not in pins and project in set(normalize(n) for n in installed) and not rest.startswith("=="):
            continue
        if project not in pins:
            raise SglangError("requirements_hashes has no entry for %s (%r); with requirements_hashes every package "
                              "installed needs one - expected %s==<version>: [<sha256>, ...]"
                              % (project or spec, spec, project or spec))
        version, digests = pins[project]
        # PEP 440: ==2.13.0 (no local label) is met by 2.13.0+cpu; the line carries the pinned version
        if rest.startswith("==") and rest[2:].strip() != version and \
                ("+" in rest[2:] or version.split("+", 1)[0] != rest[2:].strip()):
            raise SglangError("requirements_hashes pins %s==%s, but %s is asked for; expected an entry %s%s: "
                              "[<sha256>, ...]" % (project, version, spec, project, rest))
        named.add(project)
        lines.append("%s==%s %s" % (project, version, " ".join("--hash=sha256:%s" % d for d in digests)))
    if with_lock:
        skip = set(normalize(e) for e in exclude)
        for project in sorted(set(pins) - named - skip):
            version, digests = pins[project]
            lines.append("%s==%s %s" % (project, version, " ".join("--hash=sha256:%s" % d for d in digests)))
    return "\n".join(lines) + "\n"


def check_request(params):
    """sglang_env's options whose nested shapes the argument spec cannot type: the holds, versions, project names,
    package sources, wheelhouse checksums and requirement hashes. SglangError naming the option, the value and the
    form expected - before anything is read or written."""
    for option in ("version", "kernel_version", "transfer_engine_version"):
        value = params.get(option)
        if value is not None and not _PIP_VERSION_RE.fullmatch(value):
            raise SglangError("%s %r: expected a release such as 0.5.8 (digits, letters, '.', '+', '!', '_', '-')"
                              % (option, value))
    if params.get("cuda_version") is not None and not _CUDA_RE.fullmatch(params["cuda_version"]):
        raise SglangError("cuda_version %r: expected a CUDA release such as 12.9" % (params["cuda_version"],))
    held = {}
    for project, version in (params.get("hold") or {}).items():
        if not isinstance(project, str) or not _NAME_RE.fullmatch(project):
            raise SglangError("hold %r: the key is not a pip project name; expected project: version (e.g. torch: "
                              "2.9.1)" % (project,))
        if version is not None and (isinstance(version, (bool, list, dict))
                                    or not _PIP_VERSION_RE.fullmatch(str(version)) and str(version) != ""):
            raise SglangError("hold %s %r: expected a version such as 2.9.1 (or an empty string: the installed one)"
                              % (project, version))
        name = normalize(project)
        if name in held:
            raise SglangError("hold names %s twice: %s: %s and %s: %s are the same project (pip compares names "
                              "case-insensitively, with '-', '_' and '.' alike); keep one"
                              % (name, held[name][0], held[name][1], project, version))
        held[name] = (project, version)
        if name == "deep-ep" and params.get("hold_deep_ep", True) and not params.get("use_bundled_deepep"):
            raise SglangError("hold %s: %s: hold_deep_ep already holds the collection's DeepEP at its installed "
                              "version; leave %s out of hold, or set hold_deep_ep: false to hold it by version here"
                              % (project, version, project))
    for option in ("exclude", "ignore_installed"):
        for project in params.get(option) or []:
            if not _NAME_RE.fullmatch(project):
                raise SglangError("%s %r: expected pip project names such as sgl-deep-ep" % (option, project))
    if params.get("index_url"):
        check_source_url(params["index_url"], "index_url")
    for url in params.get("extra_index_urls") or []:
        check_source_url(url, "extra_index_urls")
    for link in params.get("find_links") or []:
        check_source_url(link, "find_links", paths=True)
    for name, digest in (params.get("wheelhouse_checksums") or {}).items():
        if not isinstance(name, str) or not name or "/" in name:
            raise SglangError("wheelhouse_checksums %r: the key is not a file name; expected <wheel file name>: "
                              "<sha256>" % (name,))
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest.strip().lower()):
            raise SglangError("wheelhouse_checksums %s %r: expected a sha256 (64 hex digits)" % (name, digest))
    return check_requirements_hashes(params.get("requirements_hashes"))
