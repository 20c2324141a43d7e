# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node probes of ``gpufleet_stack``: OS, CUDA (nvcc), Debian packages and the MLX5DV header, libraries (ld
cache, libcuda, gdrcopy), loaded kernel modules, the Python packages of an interpreter (torch, pip NCCL) and a
pending reboot. Each ``parse_*`` takes a file's or a command's text; each ``gather_*`` reads paths under a ``root``
and runs read-only commands through a ``runner(argv, timeout, env) -> (rc, stdout, stderr)``.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import glob
import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import output_tail, read_text, under
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.kmods import (
    parse_lsmod, parse_proc_modules, read_kernel_modules
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import NvshmemRdmaError, mlx5dv_verdict
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_discovery import (
    PROBE_SCRIPT as SITE_PROBE_SCRIPT
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import cuda_version_from_nvcc, nccl_version_from_header

__all__ = ["WATCHED_KERNEL_MODULES", "LIB_DIRS", "MLX5_HEADER", "REBOOT_FILES", "PYTHON_PROBE", "parse_os_release",
           "gather_os", "parse_nvcc_version", "gather_cuda", "parse_dpkg_query", "gather_packages",
           "scan_header_symbols", "gather_rdma_core", "parse_ldconfig", "gather_ldcache", "gather_libcuda",
           "gather_gdrcopy", "parse_proc_modules", "parse_lsmod", "gather_kernel_modules", "parse_nccl_header",
           "gather_python", "torch_facts", "nccl_facts", "gather_reboot", "gather_host_settings"]

WATCHED_KERNEL_MODULES = ("nvidia", "nvidia_peermem", "nvidia_uvm", "gdrdrv", "mlx5_core", "mlx5_ib", "ib_core")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
            "/lib/x86_64-linux-gnu", "/lib64")
MLX5_HEADER = "/usr/include/infiniband/mlx5_api.h"
REBOOT_FILES = ("/var/run/reboot-required", "/run/reboot-required")

_NVCC_RELEASE_RE = re.compile(r"release\s+(\d+\.\d+)")

# Runs in the node's own Python: package metadata only (no heavy imports), JSON on stdout.
PYTHON_PROBE = r"""
import json, re, sys
out = {"python_version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable, "packages": []}
try:
    from importlib import metadata
except ImportError:
    metadata = None
if metadata is not None:
    pat = re.compile(r"^(torch|deep[-_]ep|nvidia-nccl-cu\d+|nvidia-nvshmem-cu\d+|nvidia-cuda-runtime-cu\d+"
                     r"|nccl[-_.]extensions|nccl4py|cuda[-_.](core|bindings|pathfinder)|numpy)$", re.I)
    seen = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if not pat.fullmatch(name) or name.lower() in seen:
            continue
        seen.add(name.lower())
        try:
            location = str(dist.locate_file(""))
        except Exception:
            location = None
        out["packages"].append({"name": name, "version": dist.version, "location": location})
# The interpreter's site-packages layout (the probe of pytorch_bundled_nvshmem), in the same process.
import contextlib, io
_buf = io.StringIO()
try:
    with contextlib.redirect_stdout(_buf):
        exec(compile(SITE_PROBE, "<site-probe>", "exec"), {})
    out["site"] = json.loads(_buf.getvalue().strip().splitlines()[-1])
except Exception as exc:
    out["site"] = None
    out["site_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""

PYTHON_PROBE = "SITE_PROBE = %r\n" % SITE_PROBE_SCRIPT + PYTHON_PROBE


# --- OS ------------------------------------------------------------------------------------------------

def parse_os_release(text):
    """``/etc/os-release`` -> {id, version_id, version_codename, pretty_name}."""
    values = {}
    for line in (text or "").splitlines():
        match = re.fullmatch(r"([A-Z_]+)=(.*)", line.strip())
        if not match:
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[match.group(1)] = value
    return {
        "id": values.get("ID"),
        "version_id": values.get("VERSION_ID"),
        "version_codename": values.get("VERSION_CODENAME"),
        "pretty_name": values.get("PRETTY_NAME"),
    }


def gather_os(root):
    info = parse_os_release(read_text(under(root, "/etc/os-release")) or read_text(under(root, "/usr/lib/os-release")))
    kernel = read_text(under(root, "/proc/sys/kernel/osrelease"))
    if kernel is None and (not root or root == "/"):
        kernel = os.uname()[2]
    info["kernel"] = kernel.strip() if kernel else None
    return info


# --- CUDA / nvcc ---------------------------------------------------------------------------------------

def parse_nvcc_version(text):
    """``nvcc --version`` output -> (release ``13.0``, full ``13.0.88``) or (None, None)."""
    text = text or ""
    release = _NVCC_RELEASE_RE.search(text)
    full = cuda_version_from_nvcc(text)
    if release is None and full is None:
        return None, None
    if release is None:
        release = ".".join(full.split(".")[:2])
    else:
        release = release.group(1)
    return release, full or release


def gather_cuda(root, cuda_home, runner):
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    result = {"home": cuda_home, "nvcc": nvcc, "nvcc_present": os.path.exists(under(root, nvcc)),
              "release": None, "version": None, "error": None}
    if not result["nvcc_present"]:
        result["error"] = "%s not found" % nvcc
        return result
    rc, out, err = runner([under(root, nvcc), "--version"], timeout=30, env=None)
    if rc != 0:
        result["error"] = "nvcc --version failed (rc=%s): %s" % (rc, output_tail(err or out, 2))
        return result
    result["release"], result["version"] = parse_nvcc_version(out)
    if result["release"] is None:
        result["error"] = "unrecognised nvcc --version output: %s" % output_tail(out, 2)
    return result


# --- packages, MLX5DV ----------------------------------------------------------------------------------

def parse_dpkg_query(text):
    """Lines ``package<TAB>version<TAB>status`` -> {package: version} for installed packages."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, version, status = parts[0].strip(), parts[1].strip(), parts[2].strip()
        if name and version and status in ("installed", "install ok installed"):
            out[name.split(":")[0]] = version
    return out


def gather_packages(packages, runner):
    argv = ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Status}\\n"] + list(packages)
    rc, out, err = runner(argv, timeout=30, env=None)
    # rc 1 only says that some of the asked packages are unknown; the known ones are still printed.
    if rc not in (0, 1) and not out:
        return {}, "dpkg-query failed (rc=%s): %s" % (rc, output_tail(err, 2))
    return parse_dpkg_query(out), None


def scan_header_symbols(text, symbols):
    return dict((symbol, bool(text) and re.search(r"\b%s\b" % re.escape(symbol), text) is not None)
                for symbol in symbols)


def gather_rdma_core(root, packages, symbols, nvshmem_version=None):
    """rdma-core's versions and MLX5DV symbols; ``mlx5dv_ok`` follows what the installed NVSHMEM
    (``nvshmem_version``, None when none is installed) needs of them (``mlx5dv_rule``)."""
    header_text = read_text(under(root, MLX5_HEADER))
    found = scan_header_symbols(header_text, symbols)
    header = {"present": header_text is not None, "symbols": found}
    try:
        verdict = mlx5dv_verdict(header, nvshmem_version)
    except NvshmemRdmaError as exc:
        # A stamp with an unreadable version: judged as an unknown version (the symbols stay required).
        verdict = mlx5dv_verdict(header, None)
        verdict["reason"] = "%s; %s" % (exc, verdict["reason"])
    doca = None
    for name in ("doca-ofed", "doca-ofed-userspace", "doca-roce"):
        if packages.get(name):
            doca = packages[name]
            break
    return {
        "rdma_core_version": packages.get("rdma-core") or packages.get("libibverbs1"),
        "libibverbs_dev_version": packages.get("libibverbs-dev"),
        "doca_version": doca,
        "mlx5_header": MLX5_HEADER,
        "mlx5_header_present": header_text is not None,
        "mlx5dv_symbols": found,
        "mlx5dv_ok": verdict["ok"],
        "mlx5dv_rule": {"nvshmem_version": verdict["needs"]["nvshmem_version"], "required": verdict["required"],
                        "missing": verdict["missing"], "waived": verdict["waived"], "reason": verdict["reason"]},
    }


# --- libraries -----------------------------------------------------------------------------------------

def parse_ldconfig(text):
    """``ldconfig -p`` -> {soname: [paths]}."""
    libs = {}
    for line in (text or "").splitlines():
        match = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if match:
            libs.setdefault(match.group(1), []).append(match.group(3))
    return libs


def _find_lib(root, ldcache, name, extra_dirs=()):
    """First path of ``name`` (exact file name) from the ld cache or the known library directories."""
    for path in ldcache.get(name, []):
        if os.path.exists(under(root, path)):
            return path
    for directory in tuple(extra_dirs) + LIB_DIRS:
        candidate = os.path.join(directory, name)
        if os.path.exists(under(root, candidate)):
            return candidate
    return None


def _glob_lib(root, ldcache, prefix, extra_dirs=()):
    for soname in sorted(ldcache):
        if soname.startswith(prefix):
            for path in ldcache[soname]:
                if os.path.exists(under(root, path)):
                    return path
    for directory in tuple(extra_dirs) + LIB_DIRS:
        hits = sorted(glob.glob(under(root, os.path.join(directory, prefix + "*"))))
        if hits:
            return os.path.join(directory, os.path.basename(hits[0]))
    return None


def gather_ldcache(runner):
    rc, out, err = runner(["ldconfig", "-p"], timeout=30, env=None)
    if rc != 0:
        rc, out, err = runner(["/sbin/ldconfig", "-p"], timeout=30, env=None)
    if rc != 0:
        return {}, "ldconfig -p failed (rc=%s): %s" % (rc, output_tail(err, 2))
    return parse_ldconfig(out), None


def gather_libcuda(root, ldcache, cuda_home):
    so = _find_lib(root, ldcache, "libcuda.so")
    so1 = _find_lib(root, ldcache, "libcuda.so.1")
    stub = os.path.join(cuda_home, "lib64", "stubs", "libcuda.so")
    return {
        "so_path": so,
        "so1_path": so1,
        "stub_path": stub if os.path.exists(under(root, stub)) else None,
        "linkable": so is not None,
    }


def gather_gdrcopy(root, ldcache, gdrcopy_home, modules):
    extra = (os.path.join(gdrcopy_home, "lib"), os.path.join(gdrcopy_home, "lib64")) if gdrcopy_home else ()
    library = _glob_lib(root, ldcache, "libgdrapi.so", extra)
    loaded = "gdrdrv" in modules or os.path.isdir(under(root, "/sys/module/gdrdrv"))
    return {"library": library, "library_present": library is not None, "gdrdrv_loaded": loaded}


# --- kernel modules ------------------------------------------------------------------------------------
# One reader for node_stack's ``modules`` set and ``gpufleet_stack.kernel_modules``: ``_node/kmods``.

def gather_kernel_modules(root, runner):
    """(loaded module names, ``{name: loaded or built in}`` and ``{name: {state, source, loadable, reason}}``) for
    the watched modules, read by :func:`kmods.read_kernel_modules` (``/proc/modules``, else ``lsmod``;
    ``/sys/module/<name>`` with or without ``initstate``; ``/lib/modules/<release>/modules.builtin``)."""
    facts = read_kernel_modules(root, runner, WATCHED_KERNEL_MODULES)
    return set(facts["loaded"]), facts["present"], facts["states"]


# --- Python packages: torch, NCCL ----------------------------------------------------------------------

def parse_nccl_header(text):
    """``nccl.h`` text -> ``"2.28.9"`` (NCCL_MAJOR/MINOR/PATCH or NCCL_VERSION_CODE), or None."""
    if text is None:
        return None
    return nccl_version_from_header(text)


def gather_python(python, runner, timeout):
    """Package metadata of the given interpreter (torch, deep_ep, pip NCCL/NVSHMEM)."""
    result = {"python": python, "ok": False, "python_version": None, "packages": [], "error": None, "site": None,
              "site_error": None}
    rc, out, err = runner([python, "-c", PYTHON_PROBE], timeout=timeout, env=None)
    if rc != 0:
        result["error"] = "%s failed (rc=%s): %s" % (python, rc, output_tail(err or out, 3))
        return result
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result["error"] = "%s printed no JSON: %s" % (python, output_tail(out, 2))
        return result
    result.update(ok=True, python_version=data.get("python_version"), packages=data.get("packages") or [],
                  site=data.get("site"), site_error=data.get("site_error"))
    return result


def find_packages(packages, pattern):
    regex = re.compile(pattern, re.IGNORECASE)
    return [p for p in packages if regex.match(p.get("name") or "")]


def torch_facts(py):
    found = find_packages(py["packages"], r"^torch$")
    version = found[0]["version"] if found else None
    cuda = None
    if version and "+cu" in version:
        tag = version.split("+cu", 1)[1]
        if tag.isdigit() and len(tag) >= 3:
            cuda = "%s.%s" % (tag[:-1], tag[-1])
    return {"version": version, "cuda": cuda, "location": found[0]["location"] if found else None}


def nccl_facts(root, py, cuda_home, ldcache):
    pip = sorted(find_packages(py["packages"], r"^nvidia-nccl-cu\d+$"), key=lambda p: p["name"])
    headers = (os.path.join(cuda_home, "include", "nccl.h"), "/usr/include/nccl.h", "/usr/local/include/nccl.h")
    system_header, system_version = None, None
    for header in headers:
        version = parse_nccl_header(read_text(under(root, header)))
        if version:
            system_header, system_version = header, version
            break
    system_library = _find_lib(root, ldcache, "libnccl.so.2")
    pip_version = pip[0]["version"] if pip else None
    return {
        "pip": pip,
        "pip_version": pip_version,
        "system_version": system_version,
        "system_header": system_header,
        "system_library": system_library,
        # What torch loads: its pip NCCL when installed, else the system library.
        "loaded_version": pip_version or (system_version if system_library else None),
    }


# --- host settings ----------------------------------------------------------------------------------------

NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
NUMA_NODES = "/sys/devices/system/node/online"
UVM_DISABLE_HMM = "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm"


def _cpu_list_count(text):
    """How many entries a kernel list such as ``0-1,3`` names (None for text that is not one)."""
    count = 0
    for part in (text or "").strip().split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            return None
        count += int(last) - int(first) + 1 if dash else 1
    return count or None


def gather_host_settings(root):
    """Kernel settings DeepEP's own threads and the field's admission checks read: ``numa_balancing`` (the sysctl's
    value, a bitmask: any non-zero value runs the kernel's NUMA page scanning; None where procfs does not have it),
    ``numa_nodes`` (how many NUMA nodes are online), ``uvm_disable_hmm`` (nvidia_uvm's parameter, ``Y``/``N``, None
    where the module is not loaded)."""
    numa = (read_text(under(root, NUMA_BALANCING)) or "").strip()
    hmm = (read_text(under(root, UVM_DISABLE_HMM)) or "").strip()
    return {"numa_balancing": int(numa) if numa.isdigit() else None,
            "numa_nodes": _cpu_list_count(read_text(under(root, NUMA_NODES))),
            "uvm_disable_hmm": hmm or None}


# --- reboot --------------------------------------------------------------------------------------------

def gather_reboot(root, nvidia_reboot_required):
    reasons = []
    packages = []
    for path in REBOOT_FILES:
        if os.path.exists(under(root, path)):
            reasons.append(path)
            pkgs = read_text(under(root, path + ".pkgs")) or ""
            packages = sorted(set(packages) | set(p.strip() for p in pkgs.splitlines() if p.strip()))
            break
    if nvidia_reboot_required:
        reasons.append("gpufleet_nvidia.reboot_required")
    return {"required": bool(reasons), "reasons": reasons, "packages": packages,
            "nvidia_reboot_required": nvidia_reboot_required}
