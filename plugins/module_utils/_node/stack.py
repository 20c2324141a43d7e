# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only gathering of a node for the audit (module gpufleet.deepep.node_stack): the stack set.

``gather_stack`` assembles ``gpufleet_stack`` from the node probes (``_node/probes``: OS, CUDA, packages,
libraries, kernel modules, Python packages, reboot), the env script read as data (``_node/envscript``) and what the
builds installed (``_node/installs``: NVSHMEM, DeepEP, the import probe). ``set_warnings`` names the gathered sets
of a node that reads as empty. The pass over a node that reads every facts set asked for (``gather_node``) and the
registry of those sets are in ``_node/gather_sets``.

Everything here reads files or runs read-only commands; nothing writes. Paths are resolved under a
``root`` directory (``/`` on a node, a fixture tree in tests) and commands go through a ``runner``
callable ``runner(argv, timeout, env) -> (rc, stdout, stderr)`` so tests can drive every branch.
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.commands import find_executable, subprocess_runner
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.envscript import gather_env_script
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.installs import (
    check_import,
    gather_deepep_install,
    gather_nvshmem_install,
    unchanged_install,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.v2runtime import find_libmlx5, libmlx5_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import (
    LIBMLX5_OPTIONAL,
    LIBMLX5_REQUIRED,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import (
    find_packages,
    gather_cuda,
    gather_gdrcopy,
    gather_host_settings,
    gather_kernel_modules,
    gather_ldcache,
    gather_libcuda,
    gather_os,
    gather_packages,
    gather_python,
    gather_rdma_core,
    gather_reboot,
    nccl_facts,
    torch_facts,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import under
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    DEFAULT_VERSION_PATH,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import list_pci_devices

__all__ = [
    "DEFAULT_MLX5DV_SYMBOLS", "DEFAULT_DPKG_PACKAGES", "gather_stack", "nvshmem_libmlx5",
    "ROOT_MARKERS", "root_problem", "python_missing", "set_warnings",
]

DEFAULT_MLX5DV_SYMBOLS = ("MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT",)
DEFAULT_DPKG_PACKAGES = (
    "rdma-core", "libibverbs1", "libibverbs-dev", "ibverbs-providers", "librdmacm-dev", "infiniband-diags",
    "doca-ofed", "doca-ofed-userspace", "doca-roce", "mlnx-ofed-kernel-utils", "mlnx-tools",
    "gdrcopy", "libgdrapi", "gdrdrv-dkms", "libnccl2", "libnccl-dev",
)
# Paths every Linux root holds: a root without any of them is not a node's root (a wrong ``root``, an empty tree).
ROOT_MARKERS = ("/etc/os-release", "/usr/lib/os-release", "/proc/modules", "/sys/module")
PYTHON_ADVICE = ("set the python option (audit_python in the audit role) to the interpreter of the torch environment, "
                 "such as /opt/torch/.venv/bin/python")


# --- what a node that reads as empty or without its interpreter looks like --------------------------------

def root_problem(root):
    """Why ``root`` cannot be a node's root, or None: not a directory, or none of :data:`ROOT_MARKERS` under it
    (every fact read under it would then describe nothing and look like a clean node)."""
    root = root or "/"
    if not os.path.isdir(root):
        return "root %r is not a directory (expected / or a tree shaped like a node's root)" % (root,)
    if any(os.path.lexists(under(root, marker)) for marker in ROOT_MARKERS):
        return None
    return ("root %s looks empty: none of %s is under it, so the facts read under it describe nothing (expected / or "
            "a tree shaped like a node's root)" % (root, ", ".join(ROOT_MARKERS)))


def python_missing(python, path=None):
    """How the interpreter ``python`` (a path, or a name searched in PATH) is missing - ``not found at <path>``,
    ``not found on PATH`` or ``<path> is not an executable file`` - or None when it is there."""
    if "/" in python:
        if not os.path.lexists(python) or (os.path.islink(python) and not os.path.exists(python)):
            return "not found at %s" % python
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            return "%s is not an executable file" % python
        return None
    return None if find_executable(python, path) else "not found on PATH"


def _python_facts_notes(python, py):
    """``(torch_error, deepep_error, stack_error)``: what the torch and DeepEP facts say when ``python`` could not
    report its packages, so their nulls do not read as packages that are absent; all None when it reported."""
    if py["ok"]:
        return None, None, None
    missing = python_missing(python)
    if missing:
        head = "python %s %s" % (python, missing)
    else:
        head = "python %s could not report its packages (%s)" % (python, py["error"])
    stack_error = ("%s: the torch, NCCL and DeepEP facts of gpufleet_stack are unknown, not absent; %s"
                   % (head, PYTHON_ADVICE))
    if missing:
        stack_error += " (the probe: %s)" % py["error"]
    return head + ": torch unknown", head + ": DeepEP unknown, import deep_ep could not run", stack_error


def set_warnings(facts, root="/", sysfs_root="/sys", params_path=DEFAULT_PARAMS_PATH,
                 version_path=DEFAULT_VERSION_PATH):
    """``{facts name: [sentence]}``: the sets that were gathered but whose reads that define a GPU node found
    nothing at all (a wrong ``root``/``sysfs_root``, an empty tree, no driver, no GPU, a missing interpreter), so
    that such a node is not reported as a clean one. Read only."""
    out = {}
    stack = facts.get("gpufleet_stack")
    if isinstance(stack, dict):
        errors = stack.get("errors") or {}
        found = [errors[k] for k in ("root", "python", "env_script") if errors.get(k)]
        if found:
            out["gpufleet_stack"] = found
    if isinstance(facts.get("gpufleet_nvidia"), dict) and not facts["gpufleet_nvidia"].get("driver_loaded") \
            and not os.path.exists(params_path) and not os.path.exists(version_path):
        out["gpufleet_nvidia"] = ["no NVIDIA driver found: neither params_path %s nor version_path %s exists (the "
                                  "driver is not loaded, or these options name the wrong files)"
                                  % (params_path, version_path)]
    sysfs_sets = [n for n in ("gpufleet_rdma", "gpufleet_gpus", "gpufleet_linkage", "gpufleet_deepep_v2")
                  if n in facts]
    if sysfs_sets:
        pci = os.path.join(sysfs_root, "bus", "pci", "devices")
        if not list_pci_devices(sysfs_root):
            message = ("sysfs_root %s looks empty: no PCI device under %s, so no GPU or RDMA device can be found "
                       "(expected sysfs mounted at /sys, or a tree shaped like it)" % (sysfs_root, pci))
            for name in sysfs_sets:
                out.setdefault(name, []).append(message)
        elif isinstance(facts.get("gpufleet_gpus"), dict) and not facts["gpufleet_gpus"].get("gpu_count") \
                and not facts["gpufleet_gpus"].get("unreadable"):
            out.setdefault("gpufleet_gpus", []).append(
                "no NVIDIA GPU found under %s (no PCI function of vendor 0x10de with a display or 3D controller "
                "class)" % pci)
    return out


# --- everything ----------------------------------------------------------------------------------------

def nvshmem_libmlx5(root, ldcache):
    """libmlx5 as NVSHMEM IBGDA loads it at run time: ``{path, newest, required, required_ok, optional,
    optional_ok, error}``; ``required_ok``/``optional_ok`` are null where no libmlx5 could be read (``error``)."""
    lib = libmlx5_facts(root, find_libmlx5(root, ldcache))
    readable = lib["path"] is not None and lib["error"] is None
    return {
        "path": lib["path"],
        "newest": lib["newest"],
        "required": LIBMLX5_REQUIRED,
        "required_ok": (LIBMLX5_REQUIRED in lib["versions"]) if readable else None,
        "optional": LIBMLX5_OPTIONAL,
        "optional_ok": (LIBMLX5_OPTIONAL in lib["versions"]) if readable else None,
        "error": lib["error"],
    }


def gather_stack(root="/", cuda_home="/usr/local/cuda", python="/usr/bin/python3",
                 env_script="/opt/deepep/unified-env.sh", gdrcopy_home="/opt/deepep/gdrcopy",
                 nvshmem_prefix="/opt/deepep/nvshmem",
                 mlx5dv_symbols=DEFAULT_MLX5DV_SYMBOLS, dpkg_packages=DEFAULT_DPKG_PACKAGES,
                 nvidia_reboot_required=None, import_check=True, timeout=60, runner=subprocess_runner,
                 python_probe=None):
    """Every fact of ``gpufleet_stack``; errors of single probes are collected in ``errors``.

    ``python_probe``: the result of :func:`gather_python` when the caller already ran it."""
    errors = {}
    problem = root_problem(root)
    if problem:
        errors["root"] = problem
    facts = {"os": gather_os(root)}
    facts["cuda"] = gather_cuda(root, cuda_home, runner)
    if facts["cuda"]["error"] and facts["cuda"]["nvcc_present"]:
        errors["cuda"] = facts["cuda"]["error"]

    packages, error = gather_packages(dpkg_packages, runner)
    if error:
        errors["packages"] = error
    facts["packages"] = packages
    # The installed NVSHMEM first: what it needs of rdma-core's header follows its version.
    facts["nvshmem"] = gather_nvshmem_install(root, nvshmem_prefix)
    facts["rdma_core"] = gather_rdma_core(root, packages, mlx5dv_symbols, facts["nvshmem"]["version"])

    ldcache, error = gather_ldcache(runner)
    if error:
        errors["ldconfig"] = error
    facts["rdma_core"]["libmlx5"] = nvshmem_libmlx5(root, ldcache)
    module_names, loaded, module_states = gather_kernel_modules(root, runner)
    facts["kernel_modules"] = loaded
    facts["kernel_module_states"] = module_states
    facts["libcuda"] = gather_libcuda(root, ldcache, cuda_home)
    facts["gdrcopy"] = gather_gdrcopy(root, ldcache, gdrcopy_home, module_names)

    py = python_probe if python_probe is not None else gather_python(python, runner, timeout)
    if py["error"]:
        errors["python"] = py["error"]
    facts["python"] = {"path": python, "version": py["python_version"], "ok": py["ok"]}
    torch_error, deepep_error, python_error = _python_facts_notes(python, py)
    if python_error:
        errors["python"] = python_error
    facts["torch"] = torch_facts(py)
    if torch_error:
        facts["torch"]["error"] = torch_error
    elif facts["torch"]["version"] is None:
        facts["torch"]["error"] = ("no torch package in the environment of %s (where torch lives in a virtual "
                                   "environment, set the python option to its interpreter)" % python)
    else:
        facts["torch"]["error"] = None
    facts["nccl"] = nccl_facts(root, py, cuda_home, ldcache)
    deep_ep = find_packages(py["packages"], r"^deep[-_]ep$")
    facts["deep_ep_package"] = deep_ep[0] if deep_ep else None

    facts["env_script"] = gather_env_script(root, env_script)
    if facts["env_script"]["error"]:
        errors["env_script"] = facts["env_script"]["error"]
    skipped = unchanged_install(root, facts["deep_ep_package"], facts["torch"]["version"]) \
        if import_check == "changed" else None
    if import_check and not skipped:
        facts["deep_ep_import"] = check_import(python, under(root, env_script), facts["env_script"]["present"],
                                               runner, timeout)
    else:
        facts["deep_ep_import"] = {"checked": False, "ok": None, "env_sourced": False, "file": None,
                                   "version": None, "error": None, "rc": None, "skipped": skipped, "mapped": None}
    if deepep_error and facts["deep_ep_import"]["checked"]:
        facts["deep_ep_import"]["error"] = "%s (%s)" % (deepep_error, facts["deep_ep_import"]["error"])
    facts["deepep"] = gather_deepep_install(root, python, facts["deep_ep_package"], facts["deep_ep_import"])
    if deepep_error:
        facts["deepep"]["import_error"] = facts["deep_ep_import"]["error"] or deepep_error
    facts["peermem_loaded"] = loaded["nvidia_peermem"]
    facts["reboot"] = gather_reboot(root, nvidia_reboot_required)
    facts["host"] = gather_host_settings(root)
    facts["errors"] = errors
    return facts
