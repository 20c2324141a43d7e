# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The read-only SGLang facts (``ansible_facts.gpufleet_sglang``) of a torch environment, shared by
``sglang_env`` (every state reads them; ``state=facts`` only reads) and ``node_stack`` (``gather: [sglang]``, the
audit's one call per node).

Plain functions with explicit arguments. Commands go through ``runner(argv, timeout=None, env=None) -> (rc, stdout,
stderr)`` (rc 124 when it ran past ``timeout``), so each caller bounds them its own way.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import (
    SglangError,
    dmabuf_capable,
    kernel_package_for,
    normalize,
    torch_cuda,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_install import (
    moved,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_probe import (
    PROBE_SCRIPT,
    deep_ep_state,
    nvidia_lib_dirs,
    parse_probe,
    resolve_library,
)

__all__ = [
    "SglangProbeError",
    "DEFAULT_CUDA_HOME",
    "SYSTEM_CONSTRAINT_FILE",
    "resolve_python",
    "probe",
    "probe_versions",
    "transfer_facts",
    "deepgemm_cache",
    "facts_of",
    "default_constraint_file",
    "read_pip_file",
    "constraint_entries",
    "constraint_lines",
    "held_state",
    "gather_sglang",
]

DEFAULT_CUDA_HOME = "/usr/local/cuda"
SYSTEM_CONSTRAINT_FILE = "/etc/gpufleet/pip-constraints.txt"
NCCL_PROJECTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl")
CUDNN_PROJECTS = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12")
CUSPARSELT_PROJECTS = ("nvidia-cusparselt-cu13", "nvidia-cusparselt-cu12")
NIXL_PROJECTS = ("nixl-cu13", "nixl-cu12", "nixl")
MOONCAKE_PROJECTS = ("mooncake-transfer-engine", "mooncake-transfer-engine-cuda13", "mooncake-transfer-engine-non-cuda")


# The project at the head of a requirement line (what ``nccl.constraint_text`` replaces).
_REQ_HEAD_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class SglangProbeError(SglangError):
    """The interpreter could not report its packages; ``stderr`` holds the end of what it printed there."""

    def __init__(self, msg, stderr=None):
        SglangError.__init__(self, msg)
        self.stderr = stderr


def resolve_python(python, which):
    """The interpreter's path: ``python`` itself when absolute (an executable file), else ``which(python)`` (a
    search of PATH, None when not found). SglangError names what is wrong."""
    if not python or not python.strip():
        raise SglangError("python %r is empty; expected an interpreter path such as /opt/torch/.venv/bin/python"
                          % (python,))
    if os.path.isabs(python):
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise SglangError("python %r is not an executable file; expected the interpreter of the torch "
                              "environment, such as /opt/torch/.venv/bin/python" % (python,))
        return python
    found = which(python)
    if not found:
        raise SglangError("python %r was not found on PATH; give the interpreter's absolute path" % (python,))
    return found


def probe(python, runner, timeout):
    """The package metadata of ``python`` (:data:`PROBE_SCRIPT`, nothing of the stack imported), parsed."""
    rc, out, err = runner([python, "-c", PROBE_SCRIPT], timeout=timeout, env=None)
    if rc == 124:
        raise SglangProbeError("python %s ran past its %s s time limit reporting its packages (timeout)"
                               % (python, timeout), stderr=(err or "")[-2000:])
    if rc != 0:
        raise SglangProbeError("python %s failed to report its packages (rc=%d)" % (python, rc),
                               stderr=(err or "")[-2000:])
    try:
        return parse_probe(out)
    except SglangError as exc:
        raise SglangError("python %s: %s" % (python, exc))


def probe_versions(result):
    """``{project: version}`` of a probe result."""
    return dict((k, d.get("version")) for k, d in (result.get("dists") or {}).items())


def _proc(sysfs_root, path):
    try:
        with open(os.path.join(sysfs_root or "/", path.lstrip("/"))) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


def transfer_facts(sysfs_root="/"):
    """``peermem_loaded``, ``open_kernel_module``, ``kernel`` and ``dmabuf`` of the node, from ``/proc`` under
    ``sysfs_root``."""
    modules = _proc(sysfs_root, "/proc/modules")
    version = _proc(sysfs_root, "/proc/driver/nvidia/version")
    release = (_proc(sysfs_root, "/proc/sys/kernel/osrelease").strip() or os.uname()[2])
    peermem = any(line.split(" ", 1)[0] == "nvidia_peermem" for line in modules.splitlines())
    open_km = "Open Kernel Module" in version
    return {"peermem_loaded": peermem, "open_kernel_module": open_km, "kernel": release,
            "dmabuf": dmabuf_capable(release, open_km)}


def deepgemm_cache(dg_cache_dir):
    """``{dir, files}`` of the DeepGEMM cache (``<dg_cache_dir>/cache``), None without ``dg_cache_dir``."""
    if not dg_cache_dir:
        return None
    cache = os.path.join(dg_cache_dir, "cache")
    count = 0
    for _current, _dirs, names in os.walk(cache):
        count += len(names)
    return {"dir": dg_cache_dir, "files": count}


def facts_of(result, python, transfer, nvshmem_home=None, cuda_home=DEFAULT_CUDA_HOME, dg_cache_dir=None):
    """``gpufleet_sglang`` of a probe ``result`` (``holds``, ``constraint_file`` and ``moved`` left empty: see
    :func:`held_state`). ``transfer``: :func:`transfer_facts`."""
    dists = result.get("dists") or {}

    def ver(*projects):
        for project in projects:
            if project in dists:
                return project, dists[project].get("version")
        return None, None

    prefix = result.get("prefix") or ""
    sites = []
    candidates = [result.get("purelib"), result.get("platlib")]
    candidates += [s for s in result.get("sys_path") or [] if s.endswith(("site-packages", "dist-packages"))]
    for p in candidates:
        if p and p not in sites and os.path.isdir(p):
            sites.append(p)
    sglang_v = ver("sglang")[1]
    kernel_pkg = None
    if sglang_v:
        try:
            kernel_pkg = kernel_package_for(sglang_v)
        except SglangError:
            kernel_pkg = None
    if kernel_pkg is None:
        kernel_pkg = "sglang-kernel" if "sglang-kernel" in dists else "sgl-kernel"
    nccl_pkg, nccl_v = ver(*NCCL_PROJECTS)
    nixl_pkg, nixl_v = ver(*NIXL_PROJECTS[:2])
    if nixl_pkg is None:
        nixl_pkg, nixl_v = ver("nixl")
    mooncake_pkg, mooncake_v = ver(*MOONCAKE_PROJECTS)
    torch_v = ver("torch")[1]
    tcuda = torch_cuda(torch_v, result.get("torch_version_py"))
    nvidia = nvidia_lib_dirs(sites)
    ld = []
    if nvshmem_home:
        ld.append(os.path.join(nvshmem_home, "lib"))
    if cuda_home:
        ld.append(os.path.join(cuda_home, "lib64"))
    if result.get("torch_lib"):
        ld.append(result["torch_lib"])
    ld += [d for d in nvidia if d not in ld]
    pip_nvshmem = [os.path.join(s, "nvidia", "nvshmem", "lib") for s in sites
                   if os.path.isdir(os.path.join(s, "nvidia", "nvshmem", "lib"))]
    nvshmem_lib = resolve_library("libnvshmem_host.so.3", ld + pip_nvshmem)
    nvshmem_ok = None
    if nvshmem_home:
        nvshmem_ok = bool(nvshmem_lib) and os.path.dirname(nvshmem_lib) == os.path.join(nvshmem_home, "lib")
    return {
        "python": python, "python_version": result.get("python_version"), "prefix": prefix,
        "virtualenv": bool(prefix) and os.path.isfile(os.path.join(prefix, "pyvenv.cfg")),
        "site_packages": sites,
        "versions": {
            "sglang": sglang_v, "kernel_package": kernel_pkg, "kernel": ver(kernel_pkg)[1],
            "sgl_kernel": ver("sgl-kernel")[1], "sglang_kernel": ver("sglang-kernel")[1],
            "flashinfer": ver("flashinfer-python", "flashinfer")[1], "torch": torch_v,
            "nccl": nccl_v, "nccl_package": nccl_pkg, "cudnn": ver(*CUDNN_PROJECTS)[1],
            "cusparselt": ver(*CUSPARSELT_PROJECTS)[1], "nixl": nixl_v, "nixl_package": nixl_pkg,
            "mooncake": mooncake_v, "mooncake_package": mooncake_pkg, "sgl_deep_ep": ver("sgl-deep-ep")[1],
            "deep_ep": ver("deep-ep")[1], "deep_gemm": ver("sgl-deep-gemm", "deep-gemm")[1],
            "typing_extensions": ver("typing-extensions")[1],
        },
        "torch_cuda": tcuda,
        "torch_cuda_major": int(tcuda.split(".", 1)[0]) if tcuda else None,
        "nixl_cuda_major": int(nixl_pkg[-2:]) if nixl_pkg in ("nixl-cu12", "nixl-cu13") else None,
        "deep_ep": deep_ep_state(result),
        "nvidia_lib_dirs": nvidia,
        "pip_nvshmem_lib_dirs": pip_nvshmem,
        "ld_library_path": ld,
        "libraries": {"libcudnn.so.9": resolve_library("libcudnn.so.9", ld),
                      "libcusparseLt.so.0": resolve_library("libcusparseLt.so.0", ld),
                      "libnvshmem_host.so.3": nvshmem_lib},
        "nvshmem_ok": nvshmem_ok,
        "debian_owned": sorted(k for k, d in dists.items() if not d.get("has_record")
                               or (d.get("installer") or "").lower() == "debian"),
        "transfer": transfer,
        "deepgemm_cache": deepgemm_cache(dg_cache_dir),
        "holds": {}, "constraint_file": None, "moved": [],
    }


def default_constraint_file(facts):
    """The constraints file ``nccl_env`` keeps: ``<venv>/gpufleet-constraints.txt`` in a virtualenv, else
    :data:`SYSTEM_CONSTRAINT_FILE`."""
    if facts["virtualenv"]:
        return os.path.join(facts["prefix"], "gpufleet-constraints.txt")
    return SYSTEM_CONSTRAINT_FILE


def read_pip_file(path, what="constraints file"):
    """The text of one of pip's files (the constraints file, pip.conf); None when it is absent or cannot be opened.
    SglangError naming ``what`` and ``path`` when it is not UTF-8 text or holds a NUL byte: a binary file would read
    as no pins, and a rewrite would replace it with pins only."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (IOError, OSError):
        return None
    form = ("expected a text file of pip %s lines; repair or remove it"
            % ("constraint (project==version)" if what == "constraints file" else "configuration"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SglangError("%s %s is not UTF-8 text (byte 0x%02x at offset %d): it cannot be read as pins or kept; %s"
                          % (what, path, raw[exc.start], exc.start, form))
    if "\x00" in text:
        raise SglangError("%s %s is binary (a NUL byte at offset %d): it cannot be read as pins or kept; %s"
                          % (what, path, text.index("\x00"), form))
    return text


def constraint_entries(text):
    """``{project: [line, ...]}`` of a constraints file's text: every requirement line (comments left out) under its
    project's normalized name, in file order - what a hold of that project replaces."""
    out = {}
    for line in (text or "").splitlines():
        body = line.split("#", 1)[0].strip()
        match = _REQ_HEAD_RE.match(body)
        if match:
            out.setdefault(normalize(match.group(1)), []).append(body)
    return out


def constraint_lines(constraint_file):
    """``{project: version}`` of the ``project==version`` lines of the constraints file (none when absent);
    SglangError naming the file when it is not text (``read_pip_file``)."""
    out = {}
    text = read_pip_file(constraint_file) or ""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, _sep, version = line.partition("==")
            out[normalize(name.strip())] = version.strip()
    return out


def held_state(facts, result):
    """``(holds, moved)``: what the constraints file of ``facts`` holds, and what of it is not as held now (a later
    unconstrained install) - the ``holds`` and ``moved`` of ``state=facts``."""
    holds = constraint_lines(facts["constraint_file"])
    return holds, moved(None, probe_versions(result), holds, facts["deep_ep"] if "deep-ep" in holds else None)


def gather_sglang(python, runner, timeout, nvshmem_home=None, cuda_home=DEFAULT_CUDA_HOME, dg_cache_dir=None,
                  constraint_file=None, sysfs_root="/", held=True):
    """``(facts, probe result)`` of the resolved interpreter ``python``: ``gpufleet_sglang`` as ``sglang_env``
    reads it before acting, with ``holds`` and ``moved`` of the constraints file when ``held`` (``state=facts``).

    ``constraint_file``: None for :func:`default_constraint_file`. ``sysfs_root``: the prefix of the ``/proc``
    reads. Raises SglangError (SglangProbeError when the interpreter failed) naming what could not be read."""
    transfer = transfer_facts(sysfs_root)
    result = probe(python, runner, timeout)
    facts = facts_of(result, python, transfer, nvshmem_home=nvshmem_home, cuda_home=cuda_home,
                     dg_cache_dir=dg_cache_dir)
    facts["constraint_file"] = constraint_file or default_constraint_file(facts)
    if held:
        facts["holds"], facts["moved"] = held_state(facts, result)
    return facts, result
