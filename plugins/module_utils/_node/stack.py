# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only gathering of a node for the audit (module gpufleet.deepep.node_stack): the orchestration.

``gather_stack`` assembles ``gpufleet_stack`` from the node probes (``_node/probes``: OS, CUDA, packages,
libraries, kernel modules, Python packages, reboot), the env script read as data (``_node/envscript``) and what the
builds installed (``_node/installs``: NVSHMEM, DeepEP, the import probe). ``gather_node`` reads every facts set a node
is asked for in one pass (``gpufleet_stack``, ``gpufleet_nvidia``, ``gpufleet_rdma``, ``gpufleet_gpus``,
``gpufleet_bundled_nvshmem``, ``gpufleet_sglang``, ``gpufleet_serve_node``, ``gpufleet_linkage``; the set readers are
in ``_fact_sets``, ``_sglang_facts``, ``_serve_node`` and ``_node/linkage``), its commands started together by a
``PrefetchRunner`` (``_node/commands``).

Everything here reads files or runs read-only commands; nothing writes. Paths are resolved under a
``root`` directory (``/`` on a node, a fixture tree in tests) and commands go through a ``runner``
callable ``runner(argv, timeout, env) -> (rc, stdout, stderr)`` so tests can drive every branch.
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.commands import (
    PrefetchRunner,
    find_executable,
    subprocess_runner,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.envscript import (
    gather_env_script,
    import_probe_env,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.fact_sets import (
    GatherError,
    check_sysfs,
    gather_bundled_nvshmem,
    gather_gpus,
    gather_nvidia,
    nvidia_smi_query_argv,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.installs import (
    IMPORT_PROBE,
    check_import,
    gather_deepep_install,
    gather_nvshmem_install,
    unchanged_install,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.linkage import gather_linkage, node_gpus
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.v2runtime import (
    find_libmlx5,
    gather_deepep_v2,
    libmlx5_facts,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import (
    LIBMLX5_OPTIONAL,
    LIBMLX5_REQUIRED,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import DEFAULT_MODPROBE_DIRS
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import (
    PYTHON_PROBE,
    find_packages,
    gather_cuda,
    gather_gdrcopy,
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
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import list_gpus, list_pci_devices
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.node import (
    DEFAULT_DG_CACHE_DIR as DEFAULT_SERVE_DG_CACHE_DIR,
    IP_ADDR_ARGV,
    gather_node as gather_serve_node,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import ServeError
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import SglangError
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_probe import (
    PROBE_SCRIPT as SGLANG_PROBE_SCRIPT,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_facts import (
    DEFAULT_CUDA_HOME,
    gather_sglang,
    resolve_python as resolve_sglang_python,
)

__all__ = [
    "DEFAULT_MLX5DV_SYMBOLS", "DEFAULT_DPKG_PACKAGES", "GATHERABLE", "FACT_NAMES", "gather_stack", "gather_node",
    "nvshmem_libmlx5",
    "ROOT_MARKERS", "root_problem", "python_missing", "set_warnings",
]

DEFAULT_MLX5DV_SYMBOLS = ("MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT",)
DEFAULT_DPKG_PACKAGES = (
    "rdma-core", "libibverbs1", "libibverbs-dev", "ibverbs-providers", "librdmacm-dev", "infiniband-diags",
    "doca-ofed", "doca-ofed-userspace", "doca-roce", "mlnx-ofed-kernel-utils", "mlnx-tools",
    "gdrcopy", "libgdrapi", "gdrdrv-dkms", "libnccl2", "libnccl-dev",
)
# What gather_node can read besides the stack, by facts name (each the facts of one facts module).
GATHERABLE = ("stack", "nvidia", "rdma", "gpus", "bundled_nvshmem", "sglang", "serve_node", "linkage", "deepep_v2")
FACT_NAMES = {"stack": "gpufleet_stack", "nvidia": "gpufleet_nvidia", "rdma": "gpufleet_rdma",
              "gpus": "gpufleet_gpus", "bundled_nvshmem": "gpufleet_bundled_nvshmem", "sglang": "gpufleet_sglang",
              "serve_node": "gpufleet_serve_node", "linkage": "gpufleet_linkage", "deepep_v2": "gpufleet_deepep_v2"}
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
                                   "version": None, "error": None, "rc": None, "skipped": skipped}
    if deepep_error and facts["deep_ep_import"]["checked"]:
        facts["deep_ep_import"]["error"] = "%s (%s)" % (deepep_error, facts["deep_ep_import"]["error"])
    facts["deepep"] = gather_deepep_install(root, python, facts["deep_ep_package"], facts["deep_ep_import"])
    if deepep_error:
        facts["deepep"]["import_error"] = facts["deep_ep_import"]["error"] or deepep_error
    facts["peermem_loaded"] = loaded["nvidia_peermem"]
    facts["reboot"] = gather_reboot(root, nvidia_reboot_required)
    facts["errors"] = errors
    return facts


# --- one call for the whole node (the audit) ---------------------------------------------------------------

def _wanted(gather, nvidia_smi, errors):
    """The facts sets to gather (``gpus`` left out, its error in ``errors``, where ``nvidia_smi`` is no executable
    file) and the nvidia-smi to run (None where no set needs it or it is not usable)."""
    unknown = [name for name in gather if name not in GATHERABLE]
    if unknown:
        raise GatherError("gather: unknown %s; expected some of %s" % (", ".join(unknown), ", ".join(GATHERABLE)))
    wanted = set(gather)
    smi = None
    smi_usable = nvidia_smi is None or (os.path.isfile(nvidia_smi) and os.access(nvidia_smi, os.X_OK))
    if "gpus" in wanted and not smi_usable:
        errors["gpufleet_gpus"] = ("nvidia_smi %r is not an executable file (expected the path of nvidia-smi, "
                                   "or leave the option out to search PATH)" % (nvidia_smi,))
        wanted.discard("gpus")
    if wanted & set(("gpus", "linkage", "deepep_v2")) and smi_usable:
        smi = nvidia_smi if nvidia_smi is not None else find_executable("nvidia-smi")
    return wanted, smi


def _prefetch_calls(wanted, errors, root, sysfs_root, cuda_home, python, env_script, dpkg_packages, import_check,
                    timeout, sglang_python, smi):
    """The node's commands the ``wanted`` sets read, started together (PrefetchRunner's calls), and the SGLang
    interpreter resolved (None where ``sglang`` is not wanted, or it cannot be: then it leaves ``wanted`` and its
    error is in ``errors``)."""
    calls = []
    sglang_resolved = None
    if "sglang" in wanted:
        try:
            sglang_resolved = resolve_sglang_python(sglang_python, find_executable)
            calls.append(([sglang_resolved, "-c", SGLANG_PROBE_SCRIPT], timeout))
        except SglangError as exc:
            errors["gpufleet_sglang"] = str(exc)
            wanted.discard("sglang")
    if wanted & set(("stack", "deepep_v2")):
        calls.append(([under(root, os.path.join(cuda_home, "bin", "nvcc")), "--version"], 30))
        calls.append((["ldconfig", "-p"], 30))
    if "stack" in wanted:
        calls.append((["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Status}\\n"]
                      + list(dpkg_packages), 30))
        env_full = under(root, env_script)
        # With import_check "changed" the import runs after the Python probe, only where the install changed.
        if import_check is True:
            probe_env, refusal = import_probe_env(env_full, os.path.isfile(env_full))
            if not refusal:
                calls.append(([python, "-c", IMPORT_PROBE], timeout, probe_env))
    if wanted & set(("stack", "bundled_nvshmem", "linkage", "deepep_v2")):
        calls.append(([python, "-c", PYTHON_PROBE], timeout))
    if "serve_node" in wanted:
        calls.append((list(IP_ADDR_ARGV), timeout))
    if smi is not None and os.path.isdir(sysfs_root) and list_gpus(sysfs_root):
        calls.append((nvidia_smi_query_argv(smi), timeout))
        calls.append(([smi, "nvlink", "-s"], timeout))
    return calls, sglang_resolved


def _attempt(facts, errors, name, function):
    """One facts set: its facts, or why it could not be gathered."""
    try:
        facts[FACT_NAMES[name]] = function()
    except (GatherError, SglangError, ServeError) as exc:
        errors[FACT_NAMES[name]] = str(exc)
    except Exception as exc:  # one broken reader must not hide the other facts of the node
        errors[FACT_NAMES[name]] = "%s: %s" % (type(exc).__name__, exc)


def _read_rdma(sysfs_root):
    """``(rdma facts, None)`` or ``(None, why they could not be read)``."""
    try:
        check_sysfs(sysfs_root)
        return collect_rdma(sysfs_root), None
    except GatherError as exc:
        return None, str(exc)
    except Exception as exc:
        return None, "%s: %s" % (type(exc).__name__, exc)


def _linkage_facts(facts, root, env_script, py, sysfs_root, smi, prefetch, timeout):
    """``gpufleet_linkage``: the installed DeepEP's linkage record checked against the node."""
    gpus = None
    if isinstance(facts.get("gpufleet_gpus"), dict):
        gpus = [{"index": g.get("index"), "compute_capability": g.get("compute_capability")}
                for g in facts["gpufleet_gpus"].get("gpus") or []]
    else:
        gpus = node_gpus(sysfs_root, smi, prefetch, timeout)
    exports = gather_env_script(root, env_script)["exports"]
    return gather_linkage(root, py, gpus, env_exports=exports)


def _deepep_v2_facts(facts, rdma, rdma_error, py, prefetch, root, sysfs_root, cuda_home, python, env_script, smi,
                     timeout, tree, nic_name, over_rdma, across_nodes):
    """``gpufleet_deepep_v2``: DeepEP V2's runtime requirements, reusing the stack's facts when gathered in this pass
    (else its CUDA, NCCL and DeepEP read here)."""
    if rdma is None:
        raise GatherError("the RDMA devices could not be read: %s" % rdma_error)
    stack = facts.get("gpufleet_stack") if isinstance(facts.get("gpufleet_stack"), dict) else None
    if stack is not None:
        cuda, nccl, deepep = stack["cuda"], stack["nccl"], stack["deepep"]
    else:
        cuda = gather_cuda(root, cuda_home, prefetch)
        nccl = nccl_facts(root, py, cuda_home, {})
        package = find_packages(py["packages"], r"^deep[-_]ep$")
        deepep = gather_deepep_install(root, python, package[0] if package else None, None)
    if isinstance(facts.get("gpufleet_gpus"), dict):
        gpus = facts["gpufleet_gpus"].get("gpus") or []
    else:
        gpus = node_gpus(sysfs_root, smi, prefetch, timeout) or []
    ldcache, dummy = gather_ldcache(prefetch)
    return gather_deepep_v2(
        root=root, cuda=cuda, cuda_home=cuda_home, rdma=rdma, gpus=gpus,
        env_exports=gather_env_script(root, env_script)["exports"], env_script=env_script,
        tree=tree or deepep.get("location"),
        nccl_built=(deepep.get("built_against") or {}).get("nccl"), nccl_loaded=nccl.get("loaded_version"),
        ldcache=ldcache, environ=os.environ, nic_name=nic_name, over_rdma=over_rdma, across_nodes=across_nodes)


def gather_node(gather=("stack",), root="/", sysfs_root="/sys", params_path=DEFAULT_PARAMS_PATH,
                version_path=DEFAULT_VERSION_PATH, modprobe_dirs=DEFAULT_MODPROBE_DIRS, nvidia_smi=None,
                cuda_home="/usr/local/cuda", python="/usr/bin/python3", env_script="/opt/deepep/unified-env.sh",
                gdrcopy_home="/opt/deepep/gdrcopy", nvshmem_prefix="/opt/deepep/nvshmem",
                mlx5dv_symbols=DEFAULT_MLX5DV_SYMBOLS, dpkg_packages=DEFAULT_DPKG_PACKAGES,
                nvidia_reboot_required=None, import_check=True, timeout=60, runner=subprocess_runner,
                sglang_python="python3", sglang_nvshmem_home=None, sglang_cuda_home=DEFAULT_CUDA_HOME,
                sglang_dg_cache_dir=None, sglang_constraint_file=None, serve_env_scripts=(),
                serve_dg_cache_dir=DEFAULT_SERVE_DG_CACHE_DIR, deepep_v2_tree=None, deepep_v2_nic_name=None,
                deepep_v2_over_rdma=True, deepep_v2_across_nodes=True):
    """Every facts set named in ``gather`` (see :data:`GATHERABLE`) in one pass over the node.

    Returns ``(facts, errors)``: facts by facts name (``gpufleet_stack``, ``gpufleet_nvidia``, ...) and, by the
    same names, why a set could not be gathered (that set is then absent). The commands of the node (nvcc,
    dpkg-query, ldconfig, the Python probe, the import probe, nvidia-smi) start together. ``nvidia_smi``: the
    path of nvidia-smi, or None to search PATH (as gpu_topology does). The pending reboot of the stack counts
    the ``reboot_required`` of the ``gpufleet_nvidia`` facts when those are gathered too.

    ``sglang``: ``gpufleet_sglang`` as gpufleet.deepep.sglang_env reads it with ``state=facts`` for the interpreter
    ``sglang_python`` (its probe starts with the others), the ``sglang_*`` arguments being that module's options of
    the same names; its ``/proc`` reads are under ``root``.

    ``linkage``: ``gpufleet_linkage``, the installed DeepEP's linkage record (its build stamp) checked against the
    node (``_node/linkage``): the NCCL and NVSHMEM host library that load, the GPUs' compute capabilities (those of
    ``gpufleet_gpus`` when gathered too, else the PCI tree and nvidia-smi), torch, the libstdc++ linkage.

    ``deepep_v2``: ``gpufleet_deepep_v2``, DeepEP V2's runtime requirements and their checks (``_node/v2runtime``):
    nvcc and cuobjdump for the JIT, the SM100 and CUDA 12.8 cases against the V2 tree ``deepep_v2_tree`` (default:
    the installed deep_ep package), ibstat, EP_NIC_NAME (``deepep_v2_nic_name``, else the env script's, else
    mlx5_0) ACTIVE, libmlx5's symbol versions, /dev/infiniband, NCCL_CUMEM_ENABLE=0 anywhere, NCCL build vs
    runtime, the GIN barrier fix; ``deepep_v2_over_rdma``/``deepep_v2_across_nodes`` say where the RDMA and
    multi-node checks apply. It reuses the stack's nvcc, ldconfig and Python probe (no command of its own).

    ``serve_node``: ``gpufleet_serve_node``, what serving's preflight (gpufleet.deepep.serve_plan's ``nodes``) needs
    of an engine node - its interfaces (``ip -j addr show``, started with the others), the values of the env scripts
    ``serve_env_scripts`` (in source order) and the DeepGEMM cache markers of ``serve_dg_cache_dir``.
    """
    facts, errors = {}, {}
    wanted, smi = _wanted(gather, nvidia_smi, errors)
    calls, sglang_resolved = _prefetch_calls(
        wanted, errors, root=root, sysfs_root=sysfs_root, cuda_home=cuda_home, python=python, env_script=env_script,
        dpkg_packages=dpkg_packages, import_check=import_check, timeout=timeout, sglang_python=sglang_python, smi=smi)
    prefetch = PrefetchRunner(runner, calls)

    def attempt(name, function):
        _attempt(facts, errors, name, function)

    if "nvidia" in wanted:
        attempt("nvidia", lambda: gather_nvidia(params_path, version_path, modprobe_dirs))
    rdma, rdma_error = None, None
    if wanted & set(("rdma", "gpus", "deepep_v2")):
        rdma, rdma_error = _read_rdma(sysfs_root)
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
    if wanted & set(("stack", "bundled_nvshmem", "linkage", "deepep_v2")):
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
    if "serve_node" in wanted:
        attempt("serve_node", lambda: gather_serve_node(list(serve_env_scripts or ()), serve_dg_cache_dir, prefetch,
                                                        timeout=timeout))
    if "linkage" in wanted:
        attempt("linkage", lambda: _linkage_facts(facts, root, env_script, py, sysfs_root, smi, prefetch, timeout))
    if "deepep_v2" in wanted:
        attempt("deepep_v2", lambda: _deepep_v2_facts(
            facts, rdma, rdma_error, py, prefetch, root=root, sysfs_root=sysfs_root, cuda_home=cuda_home,
            python=python, env_script=env_script, smi=smi, timeout=timeout, tree=deepep_v2_tree,
            nic_name=deepep_v2_nic_name, over_rdma=deepep_v2_over_rdma, across_nodes=deepep_v2_across_nodes))
    prefetch.join()
    return facts, errors
