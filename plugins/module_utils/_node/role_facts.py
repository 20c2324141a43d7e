# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small read-only facts the phase roles decide from (gathered through ``gpufleet.deepep.node_stack``).

- ``modules``: the kernel modules (``_node/kmods``: loaded from ``/proc/modules``, else ``lsmod``; for the names
  asked in ``module_names`` whether each is loaded, built into the kernel or absent, and whether the kernel has it).
- ``paths``: what each asked path is now (type, mode, owner, sha1 of a regular file, target of a symlink).
- ``cuda_toolkit``: the CUDA toolkit at a directory (``version.json``, else ``nvcc --version``).
- ``imports``: whether an interpreter imports each of some Python modules (one process, bounded).
- ``symbols``: whether header files declare some symbols (read, never compiled).
- ``initramfs``: whether an initramfs image holds the nvidia kernel modules (``lsinitramfs``, bounded).
- ``torch``: the torch an interpreter has (package metadata and ``torch/version.py``, torch is not imported).
- ``hca_mapping``: the GPU-NIC mapping of the environment script and whether ``deep_ep`` applies it.
- ``gdrdrv``: the gdrdrv kernel module of a GDRCopy source tree (built, its build stamp's key, loaded).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_json_dict
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.kmods import (
    KernelModuleNameError, read_kernel_modules
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import scan_header_symbols
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import read_text, sha256_file, under
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.site_state import SiteStateError, dpkg_versions

HASH_LIMIT = 16 * 1024 * 1024
_RELEASE_RE = re.compile(r"release ([0-9]+\.[0-9]+)")


_MODULE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
IMPORT_PROBE = ("import importlib, json, sys\n"
                "out = {}\n"
                "for name in sys.argv[1:]:\n"
                "    try:\n"
                "        importlib.import_module(name)\n"
                "        out[name] = True\n"
                "    except Exception:\n"
                "        out[name] = False\n"
                "print(json.dumps(out))\n")


class PathsError(Exception):
    """A value asked for is not in the expected form."""


def gather_modules(root, runner, names=(), timeout=30):
    """The kernel modules (:func:`kmods.read_kernel_modules`, the reader ``gpufleet_stack.kernel_modules`` uses too):
    ``{loaded: [names], source, kernel, module_dir, states, present, builtin, absent, not_in_kernel}``; ``states``,
    ``present`` and the lists are for ``names``. A name that is not a kernel module name raises :class:`PathsError`."""
    try:
        return read_kernel_modules(root, runner, names, timeout=timeout)
    except KernelModuleNameError as exc:
        raise PathsError(str(exc))


def _sha1(path, limit=HASH_LIMIT):
    digest = hashlib.sha1()
    size = 0
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                size += len(block)
                if size > limit:
                    return None
                digest.update(block)
    except (IOError, OSError):
        return None
    return digest.hexdigest()


def describe_path(root, path):
    """What ``path`` is now, without following a final symlink."""
    if not os.path.isabs(path):
        raise PathsError("paths: %r is not an absolute path (expected a path such as /opt/deepep/unified-env.sh)"
                         % (path,))
    full = under(root, path)
    out = {"exists": False, "type": None, "mode": None, "uid": None, "gid": None, "sha1": None, "target": None,
           "target_exists": False}
    try:
        st = os.lstat(full)
    except OSError:
        return out
    out.update(exists=True, mode="%04o" % stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid)
    if stat.S_ISLNK(st.st_mode):
        out["type"] = "link"
        try:
            out["target"] = os.readlink(full)
        except OSError:
            pass
        out["target_exists"] = os.path.exists(full)
    elif stat.S_ISDIR(st.st_mode):
        out["type"] = "directory"
    elif stat.S_ISREG(st.st_mode):
        out["type"] = "file"
        out["sha1"] = _sha1(full)
    else:
        out["type"] = "other"
    return out


def gather_paths(root, paths, hash_paths=()):
    """``{path: describe_path()}``; each path of ``hash_paths`` that is a regular file also gets its ``sha256`` (any
    size: a source tarball is compared with its checksum), null where it is not a regular file or cannot be read."""
    hashed = set(hash_paths)
    unknown = sorted(hashed - set(paths))
    if unknown:
        raise PathsError("hash_paths: %s not in paths (expected each path to hash listed in paths too)"
                         % ", ".join(repr(path) for path in unknown))
    out = {}
    for path in paths:
        out[path] = describe_path(root, path)
        if path in hashed:
            out[path]["sha256"] = sha256_file(under(root, path)) if out[path]["type"] == "file" else None
    return out


GDRDRV_STAMP = ".gpufleet-driver.json"


def gather_gdrdrv(root, src, runner, timeout=30):
    """The gdrdrv of the GDRCopy source tree ``src`` (``make driver`` builds ``src/gdrdrv/gdrdrv.ko`` there and the
    gdrcopy role stamps it with ``.gpufleet-driver.json``, a JSON object whose ``key`` names the build): ``{src,
    module_path, built, stamp_path, stamp, key, loaded}``. ``stamp`` is null when the stamp is absent, unreadable or
    not a JSON object, ``key`` null when the stamp holds no string ``key``; ``loaded`` is whether ``gdrdrv`` is in the
    loaded modules (``/proc/modules``, else ``lsmod`` bounded by ``timeout``)."""
    if not src or not os.path.isabs(src):
        raise PathsError("gdrcopy_src %r: expected the absolute path of a GDRCopy source tree, such as "
                         "/opt/deepep/src/gdrcopy-2.5.1" % (src,))
    src = os.path.normpath(src)
    driver_dir = os.path.join(src, "src", "gdrdrv")
    module_path = os.path.join(driver_dir, "gdrdrv.ko")
    stamp_path = os.path.join(driver_dir, GDRDRV_STAMP)
    stamp = read_json_dict(under(root, stamp_path))
    key = stamp.get("key") if stamp else None
    modules = gather_modules(root, runner, timeout=timeout)
    return {"src": src, "module_path": module_path, "built": os.path.isfile(under(root, module_path)),
            "stamp_path": stamp_path, "stamp": stamp, "key": key if isinstance(key, str) else None,
            "loaded": "gdrdrv" in modules["loaded"]}


_PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?")


def gather_packages(root, names):
    """``{installed: {name: version or None}, missing: [names not installed]}`` from dpkg's status file (no
    dpkg-query run: the file is what dpkg-query reads). Names are plain Debian package names."""
    bad = [name for name in names if not _PACKAGE_RE.fullmatch(name)]
    if bad:
        raise PathsError("packages: %s not a Debian package name (expected a plain name such as cmake or libibverbs-dev,"
                         " without a version or a wildcard)" % ", ".join(repr(name) for name in bad))
    try:
        installed = dpkg_versions(list(names), under(root, "/var/lib/dpkg/status"))
    except SiteStateError as exc:
        raise PathsError(str(exc))
    return {"installed": installed, "missing": [name for name in names if installed[name] is None]}


def gather_cuda_toolkit(root, home, runner, timeout=60):
    """``{home, version, release, source, error}``: ``version.json`` first, else the ``release`` of nvcc."""
    out = {"home": home, "version": "", "release": "", "source": None, "error": None}
    text = read_text(under(root, os.path.join(home, "version.json")))
    if text is not None:
        try:
            version = json.loads(text).get("cuda", {}).get("version", "")
        except (ValueError, AttributeError):
            version = ""
        if version:
            out.update(version=str(version), source="version.json")
    if not out["source"]:
        nvcc = under(root, os.path.join(home, "bin", "nvcc"))
        if os.path.exists(nvcc):
            rc, stdout, stderr = runner([nvcc, "--version"], timeout=timeout, env=None)
            found = _RELEASE_RE.findall(stdout or "") if rc == 0 else []
            if found:
                out.update(version=found[0], source="nvcc")
            else:
                out["error"] = "%s --version gave no release (rc=%s): %s" % (nvcc, rc, (stderr or stdout).strip()[-200:])
        else:
            out["error"] = "no %s nor %s" % (os.path.join(home, "version.json"), os.path.join(home, "bin", "nvcc"))
    if out["version"]:
        out["release"] = ".".join(out["version"].split(".")[:2])
    return out


def gather_imports(python, names, runner, timeout=60):
    """``{python, ok, modules: {name: bool}, error}``: whether ``python`` imports each module of ``names``."""
    bad = [name for name in names if not _MODULE_NAME_RE.fullmatch(name)]
    if bad:
        raise PathsError("import_modules: %s not a Python module name (expected dotted identifiers such as pip or "
                         "torch.distributed)" % ", ".join(repr(name) for name in bad))
    out = {"python": python, "ok": False, "modules": dict((name, False) for name in names), "error": None}
    if not names:
        out["ok"] = True
        return out
    rc, stdout, stderr = runner([python, "-c", IMPORT_PROBE] + list(names), timeout=timeout,
                                env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        found = json.loads(stdout) if rc == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        out["error"] = "%s failed (rc=%s): %s" % (python, rc, (stderr or stdout or "").strip()[-300:])
        return out
    out["ok"] = True
    for name in names:
        out["modules"][name] = found.get(name) is True
    return out


def gather_symbols(root, symbol_files):
    """``{path: {present, symbols: {symbol: bool}}}`` for ``{path: [symbols]}``."""
    out = {}
    for path, symbols in symbol_files.items():
        if not os.path.isabs(path):
            raise PathsError("symbol_files: %r is not an absolute path (expected a header such as "
                             "/usr/include/infiniband/mlx5_api.h)" % (path,))
        if not isinstance(symbols, list) or not all(isinstance(s, str) and s for s in symbols):
            raise PathsError("symbol_files: the value of %r must be a list of symbol names, got %r" % (path, symbols))
        text = read_text(under(root, path))
        out[path] = {"present": text is not None, "symbols": scan_header_symbols(text or "", symbols)}
    return out


# --- initramfs: does the image carry the nvidia modules (so that new modprobe options need a rebuild) ---------

NVIDIA_KO_RE = re.compile(r"/nvidia(\.ko|-[a-z0-9_]+\.ko)")


def gather_initramfs(root, path, runner, timeout=120):
    """``{path, present, listed, nvidia, nvidia_modules, error}`` for the initramfs image at ``path``.

    ``nvidia`` is true when ``lsinitramfs`` lists an nvidia kernel module (``nvidia.ko*``, ``nvidia-<x>.ko*``);
    ``listed`` is false when the image is absent or could not be listed (``error`` then says why).
    """
    if not path or not os.path.isabs(path):
        raise PathsError("initramfs_path: %r is not an absolute path (expected an image such as "
                         "/boot/initrd.img-6.8.0-31-generic)" % (path,))
    out = {"path": path, "present": False, "listed": False, "nvidia": False, "nvidia_modules": [], "error": None}
    full = under(root, path)
    if not os.path.isfile(full):
        return out
    out["present"] = True
    rc, stdout, stderr = runner(["lsinitramfs", full], timeout=timeout, env=None)
    if rc != 0:
        out["error"] = "lsinitramfs %s failed (rc=%s): %s" % (path, rc, (stderr or stdout or "").strip()[-300:])
        return out
    out["listed"] = True
    found = [line.strip() for line in stdout.splitlines() if NVIDIA_KO_RE.search(line)]
    out["nvidia_modules"] = sorted(set(found))
    out["nvidia"] = bool(found)
    return out


# --- torch: what the pytorch role installs, read without importing torch ------------------------------------

_REQUIREMENT_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
TORCH_PROBE = """import importlib.metadata as md, importlib.util, json, os, re, sys
out = {"python": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3],
       "torch_version": None, "torch_cuda": None, "torch_path": None, "packages": {}}
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
out["torch_version"] = version("torch")
if out["torch_version"]:
    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        out["torch_path"] = list(spec.submodule_search_locations)[0]
        vfile = os.path.join(out["torch_path"], "version.py")
        if os.path.exists(vfile):
            vspec = importlib.util.spec_from_file_location("_gpufleet_torch_version", vfile)
            mod = importlib.util.module_from_spec(vspec)
            vspec.loader.exec_module(mod)
            out["torch_cuda"] = getattr(mod, "cuda", None)
for name in sys.argv[1:]:
    out["packages"][name] = version(name)
out["numpy_version"] = out["packages"].get("numpy", version("numpy"))
print(json.dumps(out))
"""


def requirement_name(requirement):
    """The distribution name a pip requirement starts with (``numpy>=2`` gives ``numpy``)."""
    found = _REQUIREMENT_NAME_RE.match(requirement or "")
    if not found:
        raise PathsError("torch_packages: %r is not a pip requirement (expected a name such as numpy, optionally "
                         "with a version specifier: numpy>=2)" % (requirement,))
    return found.group(0)


def gather_torch(python, packages, runner, timeout=60):
    """The torch of ``python`` in the shape of the pytorch role's ``pytorch_installed``.

    ``{python, python_version, torch_version, torch_cuda, torch_path, numpy_version, packages: {name: version or
    None}, error}``; the package metadata is read and ``torch/version.py`` executed alone (torch is not imported).
    ``python`` is null and ``error`` says why when the interpreter could not be run.
    """
    names = [requirement_name(req) for req in packages]
    out = {"python": None, "python_version": None, "torch_version": None, "torch_cuda": None, "torch_path": None,
           "numpy_version": None, "packages": {}, "error": None}
    rc, stdout, stderr = runner([python, "-c", TORCH_PROBE] + names, timeout=timeout,
                                env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        found = json.loads(stdout.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        out["error"] = "%s failed (rc=%s): %s" % (python, rc, (stderr or stdout or "").strip()[-300:])
        return out
    for key in out:
        if key in found:
            out[key] = found[key]
    return out


# --- hca_mapping: the GPU-NIC mapping the verify tests run with, and whether deep_ep applies it (PR 466) ------

HCA_PROBE = """import json, os
out = {"mapping": os.environ.get("DEEP_EP_DEVICE_TO_HCA_MAPPING", ""), "supported": None, "import_error": None}
try:
    import deep_ep
    out["supported"] = hasattr(getattr(deep_ep, "Buffer", None), "_setup_device_hca_mapping")
except Exception as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


def gather_hca_mapping(root, python, env_script, runner, timeout=60):
    """``{mapping, supported, import_error, env_sourced, error}``.

    ``mapping`` is E(DEEP_EP_DEVICE_TO_HCA_MAPPING) after sourcing ``env_script`` (when readable) in a child
    shell, ``supported`` whether ``deep_ep.Buffer`` has ``_setup_device_hca_mapping`` (null when deep_ep does not
    import: ``import_error`` says why). ``error`` is set when the probe itself could not run.
    """
    full = under(root, env_script)
    sourced = os.path.isfile(full) and os.access(full, os.R_OK)
    out = {"mapping": "", "supported": None, "import_error": None, "env_sourced": sourced, "error": None}
    script = 'if [ -r "$1" ]; then . "$1"; fi\ncd / && exec "$2" -c "$3"'
    rc, stdout, stderr = runner(["bash", "-c", script, "hca-mapping", full, python, HCA_PROBE],
                                timeout=timeout, env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        found = json.loads(stdout.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        out["error"] = "the probe with %s failed (rc=%s): %s" % (python, rc, (stderr or stdout or "").strip()[-300:])
        return out
    out.update(mapping=found.get("mapping") or "", supported=found.get("supported"),
               import_error=found.get("import_error"))
    return out
