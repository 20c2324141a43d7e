# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The facts sets node_stack reads in one pass over a node, as a registry (module gpufleet.deepep.node_stack).

:data:`GATHER_SETS` holds one :class:`GatherSet` per set - its name, its fact, the options it reads, what it needs
of the pass (:data:`NEEDS`: the node's commands started together by a ``PrefetchRunner``, the shared reads of
the RDMA devices and of the Python probe, nvidia-smi) and its reader - in the order the sets are read.
:data:`GATHERABLE` and :data:`FACT_NAMES` derive from it. ``gather_node`` reads the sets asked for with the
options of a :class:`GatherOptions` (the sets' readers are in ``_node/stack``, ``_node/fact_sets``,
``_serve/sglang_facts``, ``_serve/node``, ``_node/linkage`` and ``_node/v2runtime``).

Read only; the commands go through ``runner(argv, timeout, env) -> (rc, stdout, stderr)`` so tests drive every
branch. Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
from collections import namedtuple

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl_ep import read_nccl_ep
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
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.installs import IMPORT_PROBE, gather_deepep_install
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.linkage import gather_linkage, node_gpus
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import under
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import (
    PYTHON_PROBE,
    find_packages,
    gather_cuda,
    gather_ldcache,
    gather_python,
    nccl_facts,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.stack import (
    DEFAULT_DPKG_PACKAGES,
    DEFAULT_MLX5DV_SYMBOLS,
    gather_stack,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.v2runtime import gather_deepep_v2
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.fabric import gather_fabric, smi_q_argv
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.imex import gather_imex, imex_calls
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import DEFAULT_MODPROBE_DIRS
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    DEFAULT_VERSION_PATH,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import list_gpus
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.node import (
    DEFAULT_DG_CACHE_DIR as DEFAULT_SERVE_DG_CACHE_DIR,
    IP_ADDR_ARGV,
    gather_node as gather_serve_node,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import SglangError
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_facts import (
    DEFAULT_CUDA_HOME,
    gather_sglang,
    resolve_python as resolve_sglang_python,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_probe import (
    PROBE_SCRIPT as SGLANG_PROBE_SCRIPT,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import ServeError

__all__ = ["GATHER_DEFAULTS", "GATHER_FIELDS", "GatherOptions", "GatherSet", "Need", "NEEDS", "GATHER_SETS",
           "GATHERABLE", "FACT_NAMES", "GatherContext", "gather_node"]

# --- the options of a pass ---------------------------------------------------------------------------------------

# Each option of a pass and its default; node_stack's options of the same names (its sglang_python defaults to
# its python, its sglang_cuda_home is its cuda_home).
GATHER_DEFAULTS = (
    ("root", "/"),  # the node's root, under which files are read (commands still run on the node)
    ("sysfs_root", "/sys"),
    ("params_path", DEFAULT_PARAMS_PATH),
    ("version_path", DEFAULT_VERSION_PATH),
    ("modprobe_dirs", DEFAULT_MODPROBE_DIRS),
    ("nvidia_smi", None),  # the path of nvidia-smi, or None to search PATH (as gpu_topology does)
    ("cuda_home", "/usr/local/cuda"),
    ("python", "/usr/bin/python3"),
    ("env_script", "/opt/deepep/unified-env.sh"),
    ("gdrcopy_home", "/opt/deepep/gdrcopy"),
    ("nvshmem_prefix", "/opt/deepep/nvshmem"),
    ("mlx5dv_symbols", DEFAULT_MLX5DV_SYMBOLS),
    ("dpkg_packages", DEFAULT_DPKG_PACKAGES),
    ("nvidia_reboot_required", None),
    ("import_check", True),  # True, False or "changed" (the import probe only where the install changed)
    ("timeout", 60),
    ("sglang_python", "python3"),
    ("sglang_nvshmem_home", None),
    ("sglang_cuda_home", DEFAULT_CUDA_HOME),
    ("sglang_dg_cache_dir", None),
    ("sglang_constraint_file", None),
    ("serve_env_scripts", ()),
    ("serve_dg_cache_dir", DEFAULT_SERVE_DG_CACHE_DIR),
    ("deepep_v2_tree", None),
    ("deepep_v2_nic_name", None),
    ("deepep_v2_over_rdma", True),
    ("deepep_v2_across_nodes", True),
    ("deepep_v2_gin_mlx5", True),
)
GATHER_FIELDS = tuple(name for name, default in GATHER_DEFAULTS)
# The options of one pass over the node: ``GatherOptions(python=..., timeout=...)``, the others their defaults.
GatherOptions = namedtuple("GatherOptions", GATHER_FIELDS, defaults=tuple(default for name, default in GATHER_DEFAULTS))


class GatherContext(object):
    """What a set's reader is given: the ``options``, the ``prefetch`` runner, the ``facts`` gathered so far in this
    pass, the nvidia-smi to run (``smi``, None where not usable), the SGLang interpreter resolved
    (``sglang_python``) and the shared reads (``rdma`` or ``rdma_error``; ``py``, the Python probe)."""

    def __init__(self, options, facts):
        self.options = options
        self.facts = facts
        self.prefetch = None
        self.smi = None
        self.sglang_python = None
        self.rdma = None
        self.rdma_error = None
        self.py = None


# --- what the sets need of the pass ----------------------------------------------------------------------------

def _smi_usable(nvidia_smi):
    return nvidia_smi is None or (os.path.isfile(nvidia_smi) and os.access(nvidia_smi, os.X_OK))


def _sglang_calls(ctx):
    return [([ctx.sglang_python, "-c", SGLANG_PROBE_SCRIPT], ctx.options.timeout)]


def _nvcc_ldconfig_calls(ctx):
    return [([under(ctx.options.root, os.path.join(ctx.options.cuda_home, "bin", "nvcc")), "--version"], 30),
            (["ldconfig", "-p"], 30)]


def _stack_calls(ctx):
    opts = ctx.options
    calls = [(["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Status}\\n"]
              + list(opts.dpkg_packages), 30)]
    env_full = under(opts.root, opts.env_script)
    # With import_check "changed" the import runs after the Python probe, only where the install changed.
    if opts.import_check is True:
        probe_env, refusal = import_probe_env(env_full, os.path.isfile(env_full))
        if not refusal:
            calls.append(([opts.python, "-c", IMPORT_PROBE], opts.timeout, probe_env))
    return calls


def _python_probe_calls(ctx):
    return [([ctx.options.python, "-c", PYTHON_PROBE], ctx.options.timeout)]


def _ip_addr_calls(ctx):
    return [(list(IP_ADDR_ARGV), ctx.options.timeout)]


def _smi_calls(ctx):
    sysfs_root = ctx.options.sysfs_root
    if ctx.smi is not None and os.path.isdir(sysfs_root) and list_gpus(sysfs_root):
        return [(nvidia_smi_query_argv(ctx.smi), ctx.options.timeout), ([ctx.smi, "nvlink", "-s"], ctx.options.timeout)]
    return []


def _smi_q_calls(ctx):
    return [(smi_q_argv(ctx.smi), ctx.options.timeout)] if ctx.smi is not None else []


def _imex_calls(ctx):
    return imex_calls(ctx.options.root, ctx.options.timeout)


def _read_rdma(ctx):
    """``ctx.rdma``, or why the RDMA devices could not be read in ``ctx.rdma_error``."""
    try:
        check_sysfs(ctx.options.sysfs_root)
        ctx.rdma = collect_rdma(ctx.options.sysfs_root)
    except GatherError as exc:
        ctx.rdma_error = str(exc)
    except Exception as exc:
        ctx.rdma_error = "%s: %s" % (type(exc).__name__, exc)


def _read_python(ctx):
    ctx.py = gather_python(ctx.options.python, ctx.prefetch, ctx.options.timeout)


# What a set may need of the pass, each done once however many sets need it: ``calls(ctx)``, the commands started
# together before any set is read (in this order), and ``read(ctx)``, a read shared by the sets, done (in this
# order) after the commands started and before the first set is read. ``nvidia_smi`` and ``nvidia_smi_q`` (the whole
# ``nvidia-smi -q``, the GPUs' fabric state: slow on a big node, so only for the set that needs it) also resolve
# ``ctx.smi``.
Need = namedtuple("Need", ["name", "calls", "read"])
NEEDS = (
    Need("sglang_probe", _sglang_calls, None),
    Need("nvcc_ldconfig", _nvcc_ldconfig_calls, None),
    Need("stack_probes", _stack_calls, None),
    Need("rdma", None, _read_rdma),
    Need("python_probe", _python_probe_calls, _read_python),
    Need("ip_addr", _ip_addr_calls, None),
    Need("nvidia_smi", _smi_calls, None),
    Need("nvidia_smi_q", _smi_q_calls, None),
    Need("imex_probes", _imex_calls, None),
)
_SMI_NEEDS = ("nvidia_smi", "nvidia_smi_q")


# --- the sets' readers ----------------------------------------------------------------------------------------

def _no_gpus_without_smi(ctx):
    if _smi_usable(ctx.options.nvidia_smi):
        return None
    return ("nvidia_smi %r is not an executable file (expected the path of nvidia-smi, or leave the option out to "
            "search PATH)" % (ctx.options.nvidia_smi,))


def _resolve_sglang(ctx):
    try:
        ctx.sglang_python = resolve_sglang_python(ctx.options.sglang_python, find_executable)
    except SglangError as exc:
        return str(exc)
    return None


def _rdma_facts(ctx):
    if ctx.rdma is None:
        raise GatherError(ctx.rdma_error)
    return ctx.rdma


def _gpus_facts(ctx):
    rdma = _rdma_facts(ctx)
    return gather_gpus(ctx.options.sysfs_root, rdma, ctx.smi, ctx.prefetch, ctx.options.timeout)


def _bundled_nvshmem_facts(ctx):
    opts = ctx.options
    resolved = opts.python if os.path.isabs(opts.python) else (find_executable(opts.python) or opts.python)
    return gather_bundled_nvshmem(resolved, ctx.py, opts.nvshmem_prefix, env_script=under(opts.root, opts.env_script))


def _stack_facts(ctx):
    """``gpufleet_stack``; its pending reboot counts that of ``gpufleet_nvidia`` when gathered in this pass."""
    opts = ctx.options
    reboot = opts.nvidia_reboot_required
    if "gpufleet_nvidia" in ctx.facts:
        reboot = ctx.facts["gpufleet_nvidia"]["reboot_required"]
    return gather_stack(
        root=opts.root, cuda_home=opts.cuda_home, python=opts.python, env_script=opts.env_script,
        gdrcopy_home=opts.gdrcopy_home, nvshmem_prefix=opts.nvshmem_prefix, mlx5dv_symbols=opts.mlx5dv_symbols,
        dpkg_packages=opts.dpkg_packages, nvidia_reboot_required=reboot, import_check=opts.import_check,
        timeout=opts.timeout, runner=ctx.prefetch, python_probe=ctx.py)


def _sglang_facts(ctx):
    opts = ctx.options
    return gather_sglang(ctx.sglang_python, ctx.prefetch, opts.timeout, nvshmem_home=opts.sglang_nvshmem_home,
                         cuda_home=opts.sglang_cuda_home, dg_cache_dir=opts.sglang_dg_cache_dir,
                         constraint_file=opts.sglang_constraint_file, sysfs_root=opts.root)[0]


def _serve_node_facts(ctx):
    opts = ctx.options
    return gather_serve_node(list(opts.serve_env_scripts or ()), opts.serve_dg_cache_dir, ctx.prefetch,
                             timeout=opts.timeout)


def _linkage_facts(ctx):
    """``gpufleet_linkage``: the installed DeepEP's linkage record checked against the node."""
    opts = ctx.options
    if isinstance(ctx.facts.get("gpufleet_gpus"), dict):
        gpus = [{"index": g.get("index"), "compute_capability": g.get("compute_capability")}
                for g in ctx.facts["gpufleet_gpus"].get("gpus") or []]
    else:
        gpus = node_gpus(opts.sysfs_root, ctx.smi, ctx.prefetch, opts.timeout)
    exports = gather_env_script(opts.root, opts.env_script)["exports"]
    return gather_linkage(opts.root, ctx.py, gpus, env_exports=exports)


def _deepep_v2_facts(ctx):
    """``gpufleet_deepep_v2``: DeepEP V2's runtime requirements, reusing the stack's facts when gathered in this pass
    (else its CUDA, NCCL and DeepEP read here)."""
    opts, py = ctx.options, ctx.py
    if ctx.rdma is None:
        raise GatherError("the RDMA devices could not be read: %s" % ctx.rdma_error)
    stack = ctx.facts.get("gpufleet_stack") if isinstance(ctx.facts.get("gpufleet_stack"), dict) else None
    if stack is not None:
        cuda, nccl, deepep = stack["cuda"], stack["nccl"], stack["deepep"]
    else:
        cuda = gather_cuda(opts.root, opts.cuda_home, ctx.prefetch)
        nccl = nccl_facts(opts.root, py, opts.cuda_home, {})
        package = find_packages(py["packages"], r"^deep[-_]ep$")
        deepep = gather_deepep_install(opts.root, opts.python, package[0] if package else None, None)
    if isinstance(ctx.facts.get("gpufleet_gpus"), dict):
        gpus = ctx.facts["gpufleet_gpus"].get("gpus") or []
    else:
        gpus = node_gpus(opts.sysfs_root, ctx.smi, ctx.prefetch, opts.timeout) or []
    ldcache, dummy = gather_ldcache(ctx.prefetch)
    return gather_deepep_v2(
        root=opts.root, cuda=cuda, cuda_home=opts.cuda_home, rdma=ctx.rdma, gpus=gpus,
        env_exports=gather_env_script(opts.root, opts.env_script)["exports"], env_script=opts.env_script,
        tree=opts.deepep_v2_tree or deepep.get("location"),
        nccl_built=(deepep.get("built_against") or {}).get("nccl"), nccl_loaded=nccl.get("loaded_version"),
        ldcache=ldcache, environ=os.environ, nic_name=opts.deepep_v2_nic_name, over_rdma=opts.deepep_v2_over_rdma,
        across_nodes=opts.deepep_v2_across_nodes, gin_mlx5=opts.deepep_v2_gin_mlx5)


def _nccl_ep_facts(ctx):
    """``gpufleet_nccl_ep``: NCCL EP in the torch environment (``_comm/nccl_ep``, the reader of
    gpufleet.deepep.nccl_ep_env), from the Python probe; its GPU check takes the GPUs of gpus when gathered too."""
    opts = ctx.options
    # An interpreter that cannot be probed is the stack's finding already: here it is the facts' error, not a gap.
    gpus = ctx.facts.get("gpufleet_gpus") if isinstance(ctx.facts.get("gpufleet_gpus"), dict) else {}
    caps = [g.get("compute_capability") for g in gpus.get("gpus") or [] if g.get("compute_capability")]
    return read_nccl_ep(ctx.py, root=opts.root, env_exports=gather_env_script(opts.root, opts.env_script)["exports"],
                        gpus=caps)


def _gpu_fabric_facts(ctx):
    """``gpufleet_gpu_fabric``: the GPUs' NVLink fabric state from ``nvidia-smi -q`` (``_nvidia/fabric``); a missing
    or failing nvidia-smi is its ``error``, not this set's."""
    return gather_fabric(ctx.smi, ctx.prefetch, ctx.options.timeout)


def _imex_facts(ctx):
    """``gpufleet_imex``: IMEX on the node (``_nvidia/imex``): its config, nodes config, channel device, the
    NVreg_CreateImexChannel0 option, the service and ``nvidia-imex-ctl -q``."""
    opts = ctx.options
    return gather_imex(opts.root, ctx.prefetch, opts.timeout, params_path=opts.params_path,
                       modprobe_dirs=opts.modprobe_dirs)


# --- the registry ---------------------------------------------------------------------------------------------

# One facts set: ``name`` (node_stack's gather choice), ``fact`` (its facts name), ``options`` (the fields of
# GatherOptions its reading depends on), ``needs`` (names of NEEDS), ``read(ctx)`` (its facts; an exception is its
# error) and ``prepare(ctx)``, run before the commands start: None, or why the set cannot be read (it is then left
# out, that its error).
GatherSet = namedtuple("GatherSet", ["name", "fact", "options", "needs", "read", "prepare"], defaults=(None,))
# In the order the sets are read: a set may reuse the facts of one before it (the stack's reboot counts nvidia's;
# linkage and deepep_v2 take the GPUs of gpus, deepep_v2 the stack's CUDA, NCCL and DeepEP).
GATHER_SETS = (
    GatherSet("nvidia", "gpufleet_nvidia", ("params_path", "version_path", "modprobe_dirs"), (),
              lambda ctx: gather_nvidia(ctx.options.params_path, ctx.options.version_path,
                                        ctx.options.modprobe_dirs)),
    GatherSet("rdma", "gpufleet_rdma", ("sysfs_root",), ("rdma",), _rdma_facts),
    GatherSet("gpus", "gpufleet_gpus", ("sysfs_root", "nvidia_smi", "timeout"), ("rdma", "nvidia_smi"),
              _gpus_facts, _no_gpus_without_smi),
    GatherSet("bundled_nvshmem", "gpufleet_bundled_nvshmem", ("root", "python", "nvshmem_prefix", "env_script",
                                                              "timeout"),
              ("python_probe",), _bundled_nvshmem_facts),
    GatherSet("stack", "gpufleet_stack", ("root", "cuda_home", "python", "env_script", "gdrcopy_home",
                                          "nvshmem_prefix", "mlx5dv_symbols", "dpkg_packages",
                                          "nvidia_reboot_required", "import_check", "timeout"),
              ("nvcc_ldconfig", "stack_probes", "python_probe"), _stack_facts),
    GatherSet("sglang", "gpufleet_sglang", ("root", "sglang_python", "sglang_nvshmem_home", "sglang_cuda_home",
                                            "sglang_dg_cache_dir", "sglang_constraint_file", "timeout"),
              ("sglang_probe",), _sglang_facts, _resolve_sglang),
    GatherSet("serve_node", "gpufleet_serve_node", ("serve_env_scripts", "serve_dg_cache_dir", "timeout"),
              ("ip_addr",), _serve_node_facts),
    GatherSet("linkage", "gpufleet_linkage", ("root", "sysfs_root", "python", "env_script", "nvidia_smi",
                                              "timeout"),
              ("python_probe", "nvidia_smi"), _linkage_facts),
    GatherSet("deepep_v2", "gpufleet_deepep_v2", ("root", "sysfs_root", "cuda_home", "python", "env_script",
                                                  "nvidia_smi", "timeout", "deepep_v2_tree", "deepep_v2_nic_name",
                                                  "deepep_v2_over_rdma", "deepep_v2_across_nodes",
                                                  "deepep_v2_gin_mlx5"),
              ("nvcc_ldconfig", "rdma", "python_probe", "nvidia_smi"), _deepep_v2_facts),
    GatherSet("nccl_ep", "gpufleet_nccl_ep", ("root", "python", "env_script", "timeout"), ("python_probe",),
              _nccl_ep_facts),
    GatherSet("gpu_fabric", "gpufleet_gpu_fabric", ("nvidia_smi", "timeout"), ("nvidia_smi_q",), _gpu_fabric_facts),
    GatherSet("imex", "gpufleet_imex", ("root", "params_path", "modprobe_dirs", "timeout"), ("imex_probes",),
              _imex_facts),
)
_BY_NAME = dict((entry.name, entry) for entry in GATHER_SETS)
# What gather_node can read, by name (node_stack's gather choices): the default set first, then the others in the
# order they are read; and each set's facts name (each the facts of one facts module).
GATHERABLE = ("stack",) + tuple(entry.name for entry in GATHER_SETS if entry.name != "stack")
FACT_NAMES = dict((name, _BY_NAME[name].fact) for name in GATHERABLE)


# --- one pass over the node (the audit) ---------------------------------------------------------------------------

def _wanted(gather, ctx, errors):
    """The entries of the sets to gather, in the order they are read; a set its ``prepare`` refuses is left out,
    its error in ``errors``. Resolves the nvidia-smi to run (``ctx.smi``: None where no set needs it or it is not
    usable)."""
    unknown = [name for name in gather if name not in _BY_NAME]
    if unknown:
        raise GatherError("gather: unknown %s; expected some of %s" % (", ".join(unknown), ", ".join(GATHERABLE)))
    asked = set(gather)
    wanted = []
    for entry in GATHER_SETS:
        if entry.name not in asked:
            continue
        why = entry.prepare(ctx) if entry.prepare is not None else None
        if why is not None:
            errors[entry.fact] = why
        else:
            wanted.append(entry)
    if any(need in entry.needs for entry in wanted for need in _SMI_NEEDS) and _smi_usable(ctx.options.nvidia_smi):
        nvidia_smi = ctx.options.nvidia_smi
        ctx.smi = nvidia_smi if nvidia_smi is not None else find_executable("nvidia-smi")
    return wanted


def _needed(wanted):
    """The entries of NEEDS the ``wanted`` sets need, in NEEDS's order."""
    names = set(name for entry in wanted for name in entry.needs)
    return [need for need in NEEDS if need.name in names]


def _attempt(facts, errors, entry, ctx):
    """One facts set: its facts, or why it could not be gathered."""
    try:
        facts[entry.fact] = entry.read(ctx)
    except (GatherError, SglangError, ServeError) as exc:
        errors[entry.fact] = str(exc)
    except Exception as exc:  # one broken reader must not hide the other facts of the node
        errors[entry.fact] = "%s: %s" % (type(exc).__name__, exc)


def gather_node(gather=("stack",), options=None, runner=subprocess_runner):
    """Every facts set named in ``gather`` (see :data:`GATHERABLE`) in one pass over the node, read with
    ``options`` (a :class:`GatherOptions`; None: the defaults).

    Returns ``(facts, errors)``: facts by facts name (``gpufleet_stack``, ``gpufleet_nvidia``, ...) and, by the
    same names, why a set could not be gathered (that set is then absent). The commands of the node (nvcc,
    dpkg-query, ldconfig, the Python probe, the import probe, nvidia-smi) start together; then the shared reads
    run and the sets are read in the order of :data:`GATHER_SETS`. The pending reboot of the stack counts the
    ``reboot_required`` of the ``gpufleet_nvidia`` facts when those are gathered too.

    ``sglang``: ``gpufleet_sglang`` as gpufleet.deepep.sglang_env reads it with ``state=facts`` for the interpreter
    ``sglang_python`` (its probe starts with the others), the ``sglang_*`` options being that module's options of
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

    ``nccl_ep``: ``gpufleet_nccl_ep``, NCCL EP (nccl-extensions) in the environment of ``python`` as
    gpufleet.deepep.nccl_ep_env reads it: its version, library, the NCCL it requires and the one installed, its
    dependencies, the env script's JIT cache and its kernels, and its checks (CUDA 13, the NCCL version, the
    dependencies, the GPUs' arch when ``gpus`` is gathered too). It reuses the Python probe.

    ``gpu_fabric``: ``gpufleet_gpu_fabric``, each GPU's NVLink fabric state (``nvidia-smi -q``'s Fabric section: State,
    Status, CliqueId, ClusterUUID, Health) and whether it is ready for multi-node NVLink (GB200/GB300 NVL72 trays).
    ``imex``: ``gpufleet_imex``, NVIDIA IMEX on the node (config, nodes config, channel device, the
    NVreg_CreateImexChannel0 option, ``systemctl is-active nvidia-imex``, ``nvidia-imex-ctl -q``).

    ``serve_node``: ``gpufleet_serve_node``, what serving's preflight (gpufleet.deepep.serve_plan's ``nodes``) needs
    of an engine node - its interfaces (``ip -j addr show``, started with the others), the values of the env scripts
    ``serve_env_scripts`` (in source order) and the DeepGEMM cache markers of ``serve_dg_cache_dir``.
    """
    facts, errors = {}, {}
    ctx = GatherContext(options if options is not None else GatherOptions(), facts)
    wanted = _wanted(gather, ctx, errors)
    needed = _needed(wanted)
    ctx.prefetch = PrefetchRunner(runner, [call for need in needed if need.calls is not None
                                           for call in need.calls(ctx)])
    for need in needed:
        if need.read is not None:
            need.read(ctx)
    for entry in wanted:
        _attempt(facts, errors, entry, ctx)
    ctx.prefetch.join()
    return facts, errors
