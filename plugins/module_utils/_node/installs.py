# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the build modules installed, read back for the audit: the NVSHMEM install (``gpufleet_nvshmem`` as
nvshmem_build records it), the installed DeepEP (``gpufleet_deepep`` as deepep_build records it) and the
``import deep_ep`` probe that checks it, left out where the install is the one its build stamp records.

Everything here only reads (files under a ``root``, commands through a ``runner``), like the rest of node_stack.
Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import glob
import json
import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import read_stamp, stamp_path
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.envscript import import_probe_env
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import output_tail, read_text, sha256_file, under
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import nvshmem_version_from_header

__all__ = ["IMPORT_PROBE", "unchanged_install", "check_import", "gather_nvshmem_install", "gather_deepep_install"]

# ``import deep_ep``, then which NCCL and NVSHMEM host libraries that process has mapped (``/proc/self/maps``, real
# paths, each file once): two NCCLs in one process is DeepEP #710's state after an install brought pip's NCCL back
# beside the pinned one, and the mapped NVSHMEM host library is the one the process runs with.
IMPORT_PROBE = (
    "import deep_ep, json, os\n"
    "mapped = {}\n"
    "for line in open('/proc/self/maps'):\n"
    "    fields = line.split(None, 5)\n"
    "    path = fields[5].strip() if len(fields) > 5 else ''\n"
    "    name = os.path.basename(path)\n"
    "    for key, prefix in (('nccl', 'libnccl.so'), ('nvshmem_host', 'libnvshmem_host.so')):\n"
    "        if path.startswith('/') and name.startswith(prefix) and not path.endswith('(deleted)'):\n"
    "            mapped.setdefault(key, set()).add(os.path.realpath(path))\n"
    "print(json.dumps({'file': getattr(deep_ep, '__file__', None), 'version': getattr(deep_ep, '__version__', None),"
    " 'mapped': dict((k, sorted(v)) for k, v in mapped.items())}))"
)


# --- import probe ----------------------------------------------------------------------------------------

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
    if sha256_file(found[0]) != recorded:
        return None
    return ("the installed build has the extension its stamp records and torch %s, the version it was built "
            "against; it imported when it was installed (import_when: always imports on every run)" % torch_version)


def check_import(python, env_script, env_present, runner, timeout):
    """``import deep_ep`` in a fresh process (no shell) with the environment the env script's export lines give,
    read as data (when the script exists). ``mapped``: the NCCL (``nccl``) and NVSHMEM host (``nvshmem_host``)
    libraries that process had mapped after the import, real paths (None when it did not import)."""
    result = {"checked": True, "ok": False, "env_sourced": bool(env_present), "file": None, "version": None,
              "error": None, "rc": None, "skipped": None, "mapped": None}
    env, refusal = import_probe_env(env_script, env_present)
    if refusal:
        result["error"] = refusal
        return result
    rc, out, err = runner([python, "-c", IMPORT_PROBE], timeout=timeout, env=env)
    result["rc"] = rc
    if rc != 0:
        reason = "timed out after %ss" % timeout if rc == 124 else output_tail(err or out, 3)
        result["error"] = reason or "exit status %s" % rc
        return result
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = {}
    mapped = data.get("mapped") if isinstance(data.get("mapped"), dict) else {}
    result.update(ok=True, file=data.get("file"), version=data.get("version"),
                  mapped={"nccl": list(mapped.get("nccl") or []), "nvshmem_host": list(mapped.get("nvshmem_host") or [])})
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
        "nvshmem_rc_layout": stamp.get("nvshmem_rc_layout"),
        "location": directory,
        "python": python,
        "stamp": os.path.join(directory, ".gpufleet-build.json") if directory and stamp else None,
    }
