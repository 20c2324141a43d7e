# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only gathering of a node's software stack for the audit (module gpufleet.deepep.node_stack).

Everything here reads files or runs read-only commands; nothing writes. Paths are resolved under a
``root`` directory (``/`` on a node, a fixture tree in tests) and commands go through a ``runner``
callable ``runner(argv, timeout, env) -> (rc, stdout, stderr)`` so tests can drive every branch.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import subprocess
import threading

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import read_stamp, stamp_path
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import nvshmem_version_from_header
from ansible_collections.gpufleet.deepep.plugins.module_utils._hca_mapping import topology_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import (
    DEFAULT_MODPROBE_DIRS,
    DEFAULT_PARAMS_PATH,
    DEFAULT_VERSION_PATH,
    live_facts,
    reboot_check,
    scan_modprobe,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvshmem_discovery import (
    PROBE_SCRIPT as SITE_PROBE_SCRIPT,
    DiscoveryError,
    bundled_would_win,
    describe_custom,
    env_script_preloads,
    find_bundled,
    mismatches,
    ordered_site_packages,
    parse_probe,
    preload_value,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import (
    gpu_count_problem,
    list_gpus,
    parse_nvidia_smi_query,
    parse_nvlink_status,
    suspect_gpus,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma
from ansible_collections.gpufleet.deepep.plugins.module_utils._sglang import (
    PROBE_SCRIPT as SGLANG_PROBE_SCRIPT,
    SglangError,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._sglang_facts import (
    DEFAULT_CUDA_HOME,
    gather_sglang,
    resolve_python as resolve_sglang_python,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    cuda_version_from_nvcc,
    nccl_version_from_header,
)

DEFAULT_MLX5DV_SYMBOLS = ("MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT",)
DEFAULT_DPKG_PACKAGES = (
    "rdma-core", "libibverbs1", "libibverbs-dev", "ibverbs-providers", "librdmacm-dev", "infiniband-diags",
    "doca-ofed", "doca-ofed-userspace", "doca-roce", "mlnx-ofed-kernel-utils", "mlnx-tools",
    "gdrcopy", "libgdrapi", "gdrdrv-dkms", "libnccl2", "libnccl-dev",
)
WATCHED_KERNEL_MODULES = ("nvidia", "nvidia_peermem", "nvidia_uvm", "gdrdrv", "mlx5_core", "mlx5_ib", "ib_core")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
            "/lib/x86_64-linux-gnu", "/lib64")
MLX5_HEADER = "/usr/include/infiniband/mlx5_api.h"
REBOOT_FILES = ("/var/run/reboot-required", "/run/reboot-required")
C_ENV = {"LC_ALL": "C", "LANG": "C", "PYTHONDONTWRITEBYTECODE": "1"}
# What gather_node can read besides the stack, by facts name (each the facts of one facts module).
GATHERABLE = ("stack", "nvidia", "rdma", "gpus", "bundled_nvshmem", "sglang")
FACT_NAMES = {"stack": "gpufleet_stack", "nvidia": "gpufleet_nvidia", "rdma": "gpufleet_rdma",
              "gpus": "gpufleet_gpus", "bundled_nvshmem": "gpufleet_bundled_nvshmem", "sglang": "gpufleet_sglang"}
NVIDIA_SMI_QUERY_FIELDS = ["index", "pci.bus_id", "name", "memory.total", "compute_cap", "uuid", "driver_version"]
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")

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
    pat = re.compile(r"^(torch|deep[-_]ep|nvidia-nccl-cu\d+|nvidia-nvshmem-cu\d+|nvidia-cuda-runtime-cu\d+)$", re.I)
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

IMPORT_PROBE = "import deep_ep, json; print(json.dumps({'file': getattr(deep_ep, '__file__', None), " \
               "'version': getattr(deep_ep, '__version__', None)}))"


def subprocess_runner(argv, timeout=None, env=None):
    """Run a command list with LC_ALL=C, return (rc, stdout, stderr); rc 124 on timeout, 127 if missing."""
    full_env = dict(os.environ)
    full_env.update(C_ENV)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=timeout, env=full_env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return 124, out, err + "\ntimed out after %ss" % timeout
    except OSError as exc:
        return 127, "", str(exc)
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


def under(root, path):
    """``path`` (absolute, as on the node) resolved under ``root``."""
    if not root or root == "/":
        return path
    return os.path.join(root, path.lstrip("/"))


def read_text(path, limit=4 * 1024 * 1024):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def sha256_file(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except (IOError, OSError):
        return None
    return digest.hexdigest()


def _tail(text, lines=5):
    text = (text or "").strip()
    return "\n".join(text.splitlines()[-lines:]) if text else ""


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
        result["error"] = "nvcc --version failed (rc=%s): %s" % (rc, _tail(err or out, 2))
        return result
    result["release"], result["version"] = parse_nvcc_version(out)
    if result["release"] is None:
        result["error"] = "unrecognised nvcc --version output: %s" % _tail(out, 2)
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
        return {}, "dpkg-query failed (rc=%s): %s" % (rc, _tail(err, 2))
    return parse_dpkg_query(out), None


def scan_header_symbols(text, symbols):
    return dict((symbol, bool(text) and re.search(r"\b%s\b" % re.escape(symbol), text) is not None)
                for symbol in symbols)


def gather_rdma_core(root, packages, symbols):
    header_text = read_text(under(root, MLX5_HEADER))
    found = scan_header_symbols(header_text, symbols)
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
        "mlx5dv_ok": header_text is not None and all(found.values()),
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
        return {}, "ldconfig -p failed (rc=%s): %s" % (rc, _tail(err, 2))
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

def parse_proc_modules(text):
    return set(line.split()[0] for line in (text or "").splitlines() if line.strip())


def parse_lsmod(text):
    """``lsmod`` output (a ``Module Size Used by`` header, then one module per line) -> set of names."""
    names = set()
    for line in (text or "").splitlines():
        fields = line.split()
        if fields and fields[0] != "Module":
            names.add(fields[0])
    return names


def gather_kernel_modules(root, runner):
    """Loaded kernel modules from ``/proc/modules``; where that file does not exist (a kernel without module
    support, some containers), from ``lsmod``. ``/sys/module/<name>`` counts too (built-in drivers)."""
    text = read_text(under(root, "/proc/modules"))
    if text is not None:
        modules = parse_proc_modules(text)
    else:
        rc, out, err = runner(["lsmod"], timeout=30, env=None)
        modules = parse_lsmod(out) if rc == 0 else set()
    loaded = {}
    for name in WATCHED_KERNEL_MODULES:
        loaded[name] = name in modules or os.path.isdir(under(root, "/sys/module/%s" % name))
    return modules, loaded


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
        result["error"] = "%s failed (rc=%s): %s" % (python, rc, _tail(err or out, 3))
        return result
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result["error"] = "%s printed no JSON: %s" % (python, _tail(out, 2))
        return result
    result.update(ok=True, python_version=data.get("python_version"), packages=data.get("packages") or [],
                  site=data.get("site"), site_error=data.get("site_error"))
    return result


def _package(packages, pattern):
    regex = re.compile(pattern, re.IGNORECASE)
    return [p for p in packages if regex.match(p.get("name") or "")]


def torch_facts(py):
    found = _package(py["packages"], r"^torch$")
    version = found[0]["version"] if found else None
    cuda = None
    if version and "+cu" in version:
        tag = version.split("+cu", 1)[1]
        if tag.isdigit() and len(tag) >= 3:
            cuda = "%s.%s" % (tag[:-1], tag[-1])
    return {"version": version, "cuda": cuda, "location": found[0]["location"] if found else None}


def nccl_facts(root, py, cuda_home, ldcache):
    pip = sorted(_package(py["packages"], r"^nvidia-nccl-cu\d+$"), key=lambda p: p["name"])
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


# --- environment script --------------------------------------------------------------------------------

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN_LINE_RE = re.compile(r"(export[ \t]+)?(%s)=(.*)" % _NAME)
_EXPORT_NAMES_RE = re.compile(r"export((?:[ \t]+%s)+)" % _NAME)
_DOLLAR_NAME_RE = re.compile(r"\$(%s)" % _NAME)
_BRACE_RE = re.compile(r"\$\{(%s)(\}|:-|:\+|-|\+)" % _NAME)
_BARE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:,=+@%-~")


class EnvLineError(ValueError):
    """A line of the env script that the data reader does not take (it would need a shell)."""


def _dollar(raw, i, lookup):
    """Expand the ``$`` expansion at ``raw[i]``: ``$NAME``, ``${NAME}``, ``${NAME:-w}``, ``${NAME-w}``,
    ``${NAME:+w}``, ``${NAME+w}`` (``w`` may hold expansions of its own). Returns (text, next index)."""
    match = _DOLLAR_NAME_RE.match(raw, i)
    if match:
        return lookup(match.group(1)) or "", match.end()
    match = _BRACE_RE.match(raw, i)
    if not match:
        raise EnvLineError("a $ expansion other than $NAME or ${NAME[:-+]word} (command substitution, arithmetic, "
                           "special parameters)")
    name, op = match.group(1), match.group(2)
    value = lookup(name)
    if op == "}":
        return value or "", match.end()
    j, word = match.end(), []
    while True:
        if j >= len(raw):
            raise EnvLineError("an unterminated ${...}")
        char = raw[j]
        if char == "}":
            break
        if char == "$":
            text, j = _dollar(raw, j, lookup)
            word.append(text)
            continue
        if char in "'\"`\\":
            raise EnvLineError("a quote or backslash inside ${...}")
        word.append(char)
        j += 1
    word = "".join(word)
    if op == ":-":
        result = value if value else word
    elif op == "-":
        result = value if value is not None else word
    elif op == ":+":
        result = word if value else ""
    else:
        result = word if value is not None else ""
    return result, j + 1


def _shell_word(raw, lookup):
    """The value of ``NAME=<raw>``: one word of single-quoted, double-quoted (with $ expansions) and bare parts,
    then nothing but blanks and a comment. Anything a shell would run or interpret otherwise is an EnvLineError."""
    out = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                raise EnvLineError("an unterminated single quote")
            out.append(raw[i + 1:end])
            i = end + 1
        elif char == '"':
            j = i + 1
            while True:
                if j >= len(raw):
                    raise EnvLineError("an unterminated double quote")
                ch = raw[j]
                if ch == '"':
                    break
                if ch == "\\" and j + 1 < len(raw) and raw[j + 1] in '"\\$`':
                    out.append(raw[j + 1])
                    j += 2
                elif ch == "`":
                    raise EnvLineError("a command substitution (`...`)")
                elif ch == "$":
                    text, j = _dollar(raw, j, lookup)
                    out.append(text)
                else:
                    out.append(ch)
                    j += 1
            i = j + 1
        elif char == "$":
            text, i = _dollar(raw, i, lookup)
            out.append(text)
        elif char in " \t":
            rest = raw[i:].strip()
            if rest and not rest.startswith("#"):
                raise EnvLineError("more after the value (%r)" % rest[:40])
            break
        elif char in _BARE_CHARS:
            out.append(char)
            i += 1
        else:
            raise EnvLineError("the character %r, which only a shell would interpret" % char)
    return "".join(out)


def read_env_script(text, base=None):
    """Read an env script as data, never running it: its ``[export ]NAME=value`` and ``export NAME...`` lines.

    ``base`` is the environment it starts from (None: empty, as for the facts; the import probe passes its own
    environment, so ``${PATH:+:${PATH}}`` appends the inherited value). Returns ``(exports, raw, env, errors)``:
    the exported variables in file order, their unexpanded right-hand sides, the whole resulting environment
    (``base`` plus every exported variable), and one message per line it does not take (conditionals, commands,
    command substitution...), naming the line.
    """
    base = dict(base or {})
    values, exported = dict(base), set(base)
    exports, raw_values, errors = {}, {}, []

    def lookup(name):
        return values.get(name)

    for number, line in enumerate((text or "").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGN_LINE_RE.fullmatch(stripped)
        try:
            if match:
                value = _shell_word(match.group(3), lookup)
                name = match.group(2)
                values[name] = value
                if match.group(1) or name in exported:
                    exported.add(name)
                    exports[name] = value
                    raw_values[name] = match.group(3).strip()
                continue
            match = _EXPORT_NAMES_RE.fullmatch(stripped)
            if match:
                for name in match.group(1).split():
                    exported.add(name)
                    if name in values:
                        exports[name] = values[name]
                continue
            raise EnvLineError("not an assignment or export of plain values")
        except EnvLineError as exc:
            errors.append("line %d %r: %s" % (number, stripped[:120], exc))
    env = dict((name, values[name]) for name in exported if name in values)
    return exports, raw_values, env, errors


def parse_env_script(text):
    """The exported variables (expanded, from an empty environment) and their raw right-hand sides."""
    exports, raw, dummy, dummy2 = read_env_script(text)
    return exports, raw


def gather_env_script(root, path):
    full = under(root, path)
    result = {"path": path, "present": os.path.isfile(full), "sha256": None, "mode": None, "exports": {},
              "exports_raw": {}, "unparsed": []}
    if not result["present"]:
        return result
    result["sha256"] = sha256_file(full)
    try:
        result["mode"] = "%04o" % (os.stat(full).st_mode & 0o7777)
    except OSError:
        pass
    exports, raw, dummy, errors = read_env_script(read_text(full))
    result["exports"], result["exports_raw"], result["unparsed"] = exports, raw, errors
    return result


def import_probe_env(env_script, env_present):
    """``(env or None, refusal or None)``: the environment the import probe runs with, read from the env script
    as data on top of this process's environment; a refusal when the script has lines that are not data."""
    if not env_present:
        return None, None
    text = read_text(env_script)
    if text is None:
        return None, "cannot read the env script %s" % env_script
    dummy, dummy2, env, errors = read_env_script(text, base=os.environ)
    if errors:
        return None, ("the env script %s has lines that are not plain NAME=value exports, so it is not read and the "
                      "import is not tried (the audit never runs the script): %s" % (env_script, "; ".join(errors[:5])))
    return env, None


def unchanged_install(root, package, torch_version):
    """Why ``import deep_ep`` can be left out: the installed DeepEP is the build deepep_build installed (its
    extension has the sha256 the build stamp records, and an install that does not import is rolled back) and
    torch is the version it was built against. None when anything differs or cannot be read (then it imports)."""
    if not package or not package.get("location") or not torch_version:
        return None
    site = package["location"]
    stamp = read_stamp(under(root, os.path.join(site, "deep_ep"))) or {}
    recorded = stamp.get("extension_sha256")
    built_torch = (stamp.get("built_against") or {}).get("torch")
    if not recorded or built_torch != torch_version:
        return None
    # V1: the top-level deep_ep_cpp extension; V2: deep_ep/_C*.so.
    found = sorted(glob.glob(under(root, os.path.join(site, "deep_ep_cpp*.so"))))
    found = found or sorted(glob.glob(under(root, os.path.join(site, "deep_ep", "_C*.so"))))
    if len(found) != 1:
        return None
    try:
        if file_sha256(found[0]) != recorded:
            return None
    except (IOError, OSError):
        return None
    return ("the installed build has the extension its stamp records and torch %s, the version it was built "
            "against; it imported when it was installed (import_when: always imports on every run)" % torch_version)


def check_import(python, env_script, env_present, runner, timeout):
    """``import deep_ep`` in a fresh process (no shell) with the environment the env script's export lines give,
    read as data (when the script exists)."""
    result = {"checked": True, "ok": False, "env_sourced": bool(env_present), "file": None, "version": None,
              "error": None, "rc": None, "skipped": None}
    env, refusal = import_probe_env(env_script, env_present)
    if refusal:
        result["error"] = refusal
        return result
    rc, out, err = runner([python, "-c", IMPORT_PROBE], timeout=timeout, env=env)
    result["rc"] = rc
    if rc != 0:
        reason = "timed out after %ss" % timeout if rc == 124 else _tail(err or out, 3)
        result["error"] = reason or "exit status %s" % rc
        return result
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = {}
    result.update(ok=True, file=data.get("file"), version=data.get("version"))
    return result


# --- NVSHMEM install (what nvshmem_build recorded) --------------------------------------------------------

def gather_nvshmem_install(root, prefix):
    """The NVSHMEM install at ``prefix`` in the shape of ``gpufleet_nvshmem`` (nvshmem_build's facts), read
    from its stamp and its files only (nothing is run). ``verified`` is null: only nvshmem_build verifies."""
    full = under(root, prefix)
    present = os.path.isdir(full)
    stamp = read_stamp(full) if present else None
    stamp = stamp or {}
    inputs = stamp.get("inputs") if isinstance(stamp.get("inputs"), dict) else {}
    libraries = []
    if present:
        try:
            libraries = sorted(os.listdir(os.path.join(full, "lib")))
        except OSError:
            libraries = []
    version = stamp.get("version")
    if present and not version:
        header = read_text(os.path.join(full, "include", "nvshmem_version.h"))
        version = nvshmem_version_from_header(header) if header else None
    transport = any(n.startswith("nvshmem_transport_ibgda.so") for n in libraries)
    if "ibgda" in stamp:
        ibgda = bool(stamp.get("ibgda")) and transport
    else:
        ibgda = transport
    return {
        "prefix": prefix,
        "present": present,
        "version": version,
        "ibgda": ibgda if present else False,
        "key": stamp.get("key"),
        "libraries": libraries,
        "built_at": stamp.get("built_at"),
        "cuda_arch": inputs.get("cuda_arch"),
        "cuda_version": inputs.get("cuda_version"),
        "roce_ah_attr_fix": bool(inputs.get("roce_ah_attr_fix")),
        "verified": None,
        "stamp": stamp_path(prefix) if stamp else None,
    }


# --- DeepEP install (what deepep_build recorded) --------------------------------------------------------

def gather_deepep_install(root, python, package, import_result):
    """The installed DeepEP in the shape of ``gpufleet_deepep`` (deepep_build's facts), from package metadata,
    the import probe and the build stamp deepep_build writes into the package directory. Adds ``nvshmem_build``
    (root, version, ibgda of the NVSHMEM the build used) and ``stamp`` (its path)."""
    directory = None
    if import_result and import_result.get("file"):
        directory = os.path.dirname(import_result["file"])
    elif package and package.get("location"):
        candidate = os.path.join(package["location"], "deep_ep")
        if os.path.isdir(under(root, candidate)):
            directory = candidate
    installed = bool(package) or bool(directory)
    stamp = read_stamp(under(root, directory)) if directory else None
    stamp = stamp or {}
    inputs = stamp.get("inputs") if isinstance(stamp.get("inputs"), dict) else {}
    nvshmem = inputs.get("nvshmem") if isinstance(inputs.get("nvshmem"), dict) else {}
    import_ok = None
    import_error = None
    if import_result and import_result.get("checked"):
        import_ok = bool(import_result.get("ok"))
        import_error = import_result.get("error")
    version = (package or {}).get("version") or (import_result or {}).get("version") or stamp.get("version")
    return {
        "installed": installed,
        "version": version,
        "generation": stamp.get("generation"),
        "key": stamp.get("key"),
        "built_against": stamp.get("built_against") or {},
        "nvshmem_build": {"root": nvshmem.get("root"), "version": nvshmem.get("version"),
                          "ibgda": nvshmem.get("ibgda")} if nvshmem else None,
        "wheel": stamp.get("wheel"),
        "import_ok": import_ok,
        "import_error": import_error,
        "hca_mapping_support": stamp.get("hca_mapping_support"),
        "location": directory,
        "python": python,
        "stamp": os.path.join(directory, ".gpufleet-build.json") if directory and stamp else None,
    }


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


# --- everything ----------------------------------------------------------------------------------------

def gather_stack(root="/", cuda_home="/usr/local/cuda", python="/usr/bin/python3",
                 env_script="/opt/deepep/unified-env.sh", gdrcopy_home="/opt/deepep/gdrcopy",
                 nvshmem_prefix="/opt/deepep/nvshmem",
                 mlx5dv_symbols=DEFAULT_MLX5DV_SYMBOLS, dpkg_packages=DEFAULT_DPKG_PACKAGES,
                 nvidia_reboot_required=None, import_check=True, timeout=60, runner=subprocess_runner,
                 python_probe=None):
    """Every fact of ``gpufleet_stack``; errors of single probes are collected in ``errors``.

    ``python_probe``: the result of :func:`gather_python` when the caller already ran it."""
    errors = {}
    facts = {"os": gather_os(root)}
    facts["cuda"] = gather_cuda(root, cuda_home, runner)
    if facts["cuda"]["error"] and facts["cuda"]["nvcc_present"]:
        errors["cuda"] = facts["cuda"]["error"]

    packages, error = gather_packages(dpkg_packages, runner)
    if error:
        errors["packages"] = error
    facts["packages"] = packages
    facts["rdma_core"] = gather_rdma_core(root, packages, mlx5dv_symbols)

    ldcache, error = gather_ldcache(runner)
    if error:
        errors["ldconfig"] = error
    module_names, loaded = gather_kernel_modules(root, runner)
    facts["kernel_modules"] = loaded
    facts["libcuda"] = gather_libcuda(root, ldcache, cuda_home)
    facts["gdrcopy"] = gather_gdrcopy(root, ldcache, gdrcopy_home, module_names)

    py = python_probe if python_probe is not None else gather_python(python, runner, timeout)
    if py["error"]:
        errors["python"] = py["error"]
    facts["python"] = {"path": python, "version": py["python_version"], "ok": py["ok"]}
    facts["torch"] = torch_facts(py)
    facts["nccl"] = nccl_facts(root, py, cuda_home, ldcache)
    deep_ep = _package(py["packages"], r"^deep[-_]ep$")
    facts["deep_ep_package"] = deep_ep[0] if deep_ep else None

    facts["nvshmem"] = gather_nvshmem_install(root, nvshmem_prefix)
    facts["env_script"] = gather_env_script(root, env_script)
    skipped = unchanged_install(root, facts["deep_ep_package"], facts["torch"]["version"]) \
        if import_check == "changed" else None
    if import_check and not skipped:
        facts["deep_ep_import"] = check_import(python, under(root, env_script), facts["env_script"]["present"],
                                               runner, timeout)
    else:
        facts["deep_ep_import"] = {"checked": False, "ok": None, "env_sourced": False, "file": None,
                                   "version": None, "error": None, "rc": None, "skipped": skipped}
    facts["deepep"] = gather_deepep_install(root, python, facts["deep_ep_package"], facts["deep_ep_import"])
    facts["peermem_loaded"] = loaded["nvidia_peermem"]
    facts["reboot"] = gather_reboot(root, nvidia_reboot_required)
    facts["errors"] = errors
    return facts


# --- one call for the whole node (the audit) ---------------------------------------------------------------

class PrefetchRunner(object):
    """A runner that starts the given commands at once, each in its own thread, and answers a later call
    with the same argv from that run (waiting for it). Other calls go to the wrapped runner. The probes of a
    node are independent, so the slowest one (``import deep_ep`` imports torch) bounds the time, not their sum.
    """

    def __init__(self, runner, calls):
        self._runner = runner
        self._results = {}
        self._threads = {}
        self._envs = {}
        for call in calls:
            argv, timeout = call[0], call[1]
            env = call[2] if len(call) > 2 else None
            key = tuple(argv)
            if key in self._threads:
                continue
            self._envs[key] = env
            thread = threading.Thread(target=self._run, args=(key, list(argv), timeout, env))
            thread.daemon = True
            self._threads[key] = thread
            thread.start()

    def _run(self, key, argv, timeout, env=None):
        try:
            self._results[key] = self._runner(argv, timeout=timeout, env=env)
        except Exception as exc:  # a runner that raises must not leave the caller waiting forever
            self._results[key] = (1, "", "%s: %s" % (type(exc).__name__, exc))

    def __call__(self, argv, timeout=None, env=None):
        key = tuple(argv)
        thread = self._threads.get(key)
        if thread is None or (env or None) != (self._envs.get(key) or None):
            return self._runner(argv, timeout=timeout, env=env)
        thread.join()
        return self._results[key]

    def join(self):
        for thread in self._threads.values():
            thread.join()


def find_executable(name, path=None):
    """``name`` if it holds a slash, else its first executable match in PATH and the sbin directories."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep)
    for directory in [d for d in dirs if d] + [d for d in SBIN_DIRS if d not in dirs]:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class GatherError(Exception):
    """One facts set could not be gathered; the message names the bad value and the expected form."""


def gather_nvidia(params_path=DEFAULT_PARAMS_PATH, version_path=DEFAULT_VERSION_PATH,
                  modprobe_dirs=DEFAULT_MODPROBE_DIRS):
    """``gpufleet_nvidia`` as gpufleet.deepep.nvidia_params reports it when asked for nothing (read only)."""
    for what, path in (("params_path", params_path), ("version_path", version_path)):
        if os.path.isdir(path):
            raise GatherError("%s %s is a directory, expected a file" % (what, path))
    live = live_facts(read_text(params_path) if os.path.exists(params_path) else None,
                      read_text(version_path) if os.path.exists(version_path) else None)
    dirs = [os.path.normpath(d) for d in modprobe_dirs]
    persistent = scan_modprobe(dirs, live_params=live["params"])
    reboot, reasons, _unverified = reboot_check(live, persistent, {"driver_options": {}, "registry_dwords": {}})
    facts = dict(live)
    facts["config_files"] = persistent["config_files"]
    facts["persistent"] = dict((k, v) for k, v in persistent.items() if k != "config_files")
    facts["reboot_required"] = reboot
    facts["reboot_reasons"] = reasons
    return facts


def _check_sysfs(sysfs_root):
    if not os.path.isdir(sysfs_root):
        raise GatherError("sysfs_root %r is not a directory (expected the path of /sys or of a tree shaped like "
                          "it)" % (sysfs_root,))


def gather_gpus(sysfs_root, rdma, nvidia_smi, runner, timeout=60):
    """``gpufleet_gpus`` as gpufleet.deepep.gpu_topology reports it, reusing the ``gpufleet_rdma`` facts."""
    _check_sysfs(sysfs_root)
    gpus = list_gpus(sysfs_root)
    unreadable = suspect_gpus(sysfs_root)
    info = {"path": nvidia_smi, "used": False, "rc": None, "stdout": "", "stderr": ""}
    rows, nvlink = None, None
    if (gpus or unreadable) and nvidia_smi is not None:
        rc, out, err = runner(nvidia_smi_query_argv(nvidia_smi), timeout=timeout, env=None)
        info["rc"] = rc
        info["stderr"] = err
        if rc != 0:
            info["stdout"] = out
        else:
            rows = parse_nvidia_smi_query(out, NVIDIA_SMI_QUERY_FIELDS)
            info["used"] = bool(rows)
            rc2, out2, _err2 = runner([nvidia_smi, "nvlink", "-s"], timeout=timeout, env=None)
            if rc2 == 0:
                nvlink = parse_nvlink_status(out2)
    problem = gpu_count_problem(gpus, rows)
    if problem:
        raise GatherError(problem)
    return topology_facts(gpus, rdma, smi_rows=rows, nvlink=nvlink, smi_info=info,
                          unreadable=[bdf for bdf, dummy in unreadable])


def nvidia_smi_query_argv(nvidia_smi):
    return [nvidia_smi, "--query-gpu=" + ",".join(NVIDIA_SMI_QUERY_FIELDS), "--format=csv,noheader,nounits"]


def gather_bundled_nvshmem(python, py, nvshmem_prefix, env_script=None, gdrcopy_lib=None):
    """``gpufleet_bundled_nvshmem`` as gpufleet.deepep.pytorch_bundled_nvshmem reports it with state=report,
    from the site-packages layout the Python probe ``py`` (:func:`gather_python`) read."""
    if not nvshmem_prefix or not os.path.isabs(nvshmem_prefix):
        raise GatherError("nvshmem_prefix %r must be an absolute path such as /opt/deepep/nvshmem"
                          % (nvshmem_prefix,))
    if not py["ok"]:
        raise GatherError("python %r failed to report its site-packages directories: %s" % (python, py["error"]))
    try:
        probe = parse_probe(json.dumps(py.get("site")) if py.get("site") else py.get("site_error") or "")
    except DiscoveryError as exc:
        raise GatherError("python %r: %s" % (python, exc))
    site_packages = ordered_site_packages(probe)
    bundled = find_bundled(site_packages)
    custom = describe_custom(nvshmem_prefix)
    preload = preload_value(custom, gdrcopy_lib)
    facts = {
        "python": python,
        "python_version": probe.get("version"),
        "site_packages": site_packages,
        "bundled": bundled,
        "custom": custom,
        "mismatch": False,
        "mismatches": [],
        "bundled_would_win": False,
        "preload": preload,
        "preload_libs": preload.split(":") if preload else [],
        "env_script_preloads": None,
        "replaced": [],
    }
    if env_script:
        text = read_text(env_script) if os.path.isfile(env_script) else None
        facts["env_script_preloads"] = env_script_preloads(text if text is not None else "", custom)
    found = mismatches(bundled, custom)
    facts["mismatches"] = found
    facts["mismatch"] = bool(found)
    facts["bundled_would_win"] = bundled_would_win(bundled, custom, preloaded=bool(facts["env_script_preloads"]))
    return facts


def gather_node(gather=("stack",), root="/", sysfs_root="/sys", params_path=DEFAULT_PARAMS_PATH,
                version_path=DEFAULT_VERSION_PATH, modprobe_dirs=DEFAULT_MODPROBE_DIRS, nvidia_smi=None,
                cuda_home="/usr/local/cuda", python="/usr/bin/python3", env_script="/opt/deepep/unified-env.sh",
                gdrcopy_home="/opt/deepep/gdrcopy", nvshmem_prefix="/opt/deepep/nvshmem",
                mlx5dv_symbols=DEFAULT_MLX5DV_SYMBOLS, dpkg_packages=DEFAULT_DPKG_PACKAGES,
                nvidia_reboot_required=None, import_check=True, timeout=60, runner=subprocess_runner,
                sglang_python="python3", sglang_nvshmem_home=None, sglang_cuda_home=DEFAULT_CUDA_HOME,
                sglang_dg_cache_dir=None, sglang_constraint_file=None):
    """Every facts set named in ``gather`` (see :data:`GATHERABLE`) in one pass over the node.

    Returns ``(facts, errors)``: facts by facts name (``gpufleet_stack``, ``gpufleet_nvidia``, ...) and, by the
    same names, why a set could not be gathered (that set is then absent). The commands of the node (nvcc,
    dpkg-query, ldconfig, the Python probe, the import probe, nvidia-smi) start together. ``nvidia_smi``: the
    path of nvidia-smi, or None to search PATH (as gpu_topology does). The pending reboot of the stack counts
    the ``reboot_required`` of the ``gpufleet_nvidia`` facts when those are gathered too.

    ``sglang``: ``gpufleet_sglang`` as gpufleet.deepep.sglang_env reads it with ``state=facts`` for the interpreter
    ``sglang_python`` (its probe starts with the others), the ``sglang_*`` arguments being that module's options of
    the same names; its ``/proc`` reads are under ``root``.
    """
    unknown = [name for name in gather if name not in GATHERABLE]
    if unknown:
        raise GatherError("gather: unknown %s; expected some of %s" % (", ".join(unknown), ", ".join(GATHERABLE)))
    wanted = set(gather)
    facts, errors = {}, {}
    smi = None
    if "gpus" in wanted:
        if nvidia_smi is not None and not (os.path.isfile(nvidia_smi) and os.access(nvidia_smi, os.X_OK)):
            errors["gpufleet_gpus"] = ("nvidia_smi %r is not an executable file (expected the path of nvidia-smi, "
                                       "or leave the option out to search PATH)" % (nvidia_smi,))
            wanted.discard("gpus")
        smi = nvidia_smi if nvidia_smi is not None else find_executable("nvidia-smi")
    calls = []
    sglang_resolved = None
    if "sglang" in wanted:
        try:
            sglang_resolved = resolve_sglang_python(sglang_python, find_executable)
            calls.append(([sglang_resolved, "-c", SGLANG_PROBE_SCRIPT], timeout))
        except SglangError as exc:
            errors["gpufleet_sglang"] = str(exc)
            wanted.discard("sglang")
    if "stack" in wanted:
        calls.append(([under(root, os.path.join(cuda_home, "bin", "nvcc")), "--version"], 30))
        calls.append((["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Status}\\n"]
                      + list(dpkg_packages), 30))
        calls.append((["ldconfig", "-p"], 30))
        env_full = under(root, env_script)
        # With import_check "changed" the import runs after the Python probe, only where the install changed.
        if import_check is True:
            probe_env, refusal = import_probe_env(env_full, os.path.isfile(env_full))
            if not refusal:
                calls.append(([python, "-c", IMPORT_PROBE], timeout, probe_env))
    if wanted & set(("stack", "bundled_nvshmem")):
        calls.append(([python, "-c", PYTHON_PROBE], timeout))
    if smi is not None and os.path.isdir(sysfs_root) and list_gpus(sysfs_root):
        calls.append((nvidia_smi_query_argv(smi), timeout))
        calls.append(([smi, "nvlink", "-s"], timeout))
    prefetch = PrefetchRunner(runner, calls)

    def attempt(name, function):
        try:
            facts[FACT_NAMES[name]] = function()
        except (GatherError, SglangError) as exc:
            errors[FACT_NAMES[name]] = str(exc)
        except Exception as exc:  # one broken reader must not hide the other facts of the node
            errors[FACT_NAMES[name]] = "%s: %s" % (type(exc).__name__, exc)

    if "nvidia" in wanted:
        attempt("nvidia", lambda: gather_nvidia(params_path, version_path, modprobe_dirs))
    rdma, rdma_error = None, None
    if wanted & set(("rdma", "gpus")):
        try:
            _check_sysfs(sysfs_root)
            rdma = collect_rdma(sysfs_root)
        except GatherError as exc:
            rdma_error = str(exc)
        except Exception as exc:
            rdma_error = "%s: %s" % (type(exc).__name__, exc)
    if "rdma" in wanted:
        if rdma is not None:
            facts["gpufleet_rdma"] = rdma
        else:
            errors["gpufleet_rdma"] = rdma_error
    if "gpus" in wanted:
        if rdma is not None:
            attempt("gpus", lambda: gather_gpus(sysfs_root, rdma, smi, prefetch, timeout))
        else:
            errors["gpufleet_gpus"] = rdma_error
    py = None
    if wanted & set(("stack", "bundled_nvshmem")):
        py = gather_python(python, prefetch, timeout)
    if "bundled_nvshmem" in wanted:
        resolved = python if os.path.isabs(python) else (find_executable(python) or python)
        attempt("bundled_nvshmem", lambda: gather_bundled_nvshmem(resolved, py, nvshmem_prefix,
                                                                  env_script=under(root, env_script)))
    if "stack" in wanted:
        reboot = nvidia_reboot_required
        if "gpufleet_nvidia" in facts:
            reboot = facts["gpufleet_nvidia"]["reboot_required"]
        attempt("stack", lambda: gather_stack(
            root=root, cuda_home=cuda_home, python=python, env_script=env_script, gdrcopy_home=gdrcopy_home,
            nvshmem_prefix=nvshmem_prefix, mlx5dv_symbols=mlx5dv_symbols, dpkg_packages=dpkg_packages,
            nvidia_reboot_required=reboot, import_check=import_check, timeout=timeout, runner=prefetch,
            python_probe=py))
    if "sglang" in wanted:
        attempt("sglang", lambda: gather_sglang(
            sglang_resolved, prefetch, timeout, nvshmem_home=sglang_nvshmem_home, cuda_home=sglang_cuda_home,
            dg_cache_dir=sglang_dg_cache_dir, constraint_file=sglang_constraint_file, sysfs_root=root)[0])
    prefetch.join()
    return facts, errors
