# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepEP V2's runtime requirements on a node (``gpufleet_deepep_v2`` of gpufleet.deepep.node_stack).

V2 compiles its kernels on the node at first use (JIT), reaches the NIC through NCCL GIN and reads the NIC's rate
through ``ibstat``; what it needs at run time is therefore more than what its build needed. :func:`gather_deepep_v2`
reads those requirements (files, the ELF version table of libmlx5, the V2 headers; its one command, nvcc, is the
stack's and bounded by a timeout) and :func:`v2_checks` decides each as ``pass``, ``fail`` (with the fix),
``warn`` or ``not_applicable`` (with the reason). The rules of the audit and of preflight only surface these checks.

Standard library only, Python 3.8+; paths are resolved under ``root`` (``/`` on a node, a fixture tree in tests).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._catalogue import breakage
from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import ElfError, version_definitions
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import read_text, under
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import DEFAULT_PARAMS_PATH, parse_params
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import VersionError, compare_versions

__all__ = [
    "CHECKS", "DEFAULT_NIC_NAME", "IBSTAT_DIRS", "LIBMLX5_NAME", "NVCC_MIN", "STATUSES", "cumem_disabled",
    "find_libmlx5", "gather_deepep_v2", "libmlx5_facts", "parse_environment_file", "stream_memops", "tree_markers",
    "v2_checks",
]

# deep_ep/utils/envs.py: ``_DEFAULT_NIC_NAME = os.getenv('EP_NIC_NAME', 'mlx5_0')``.
DEFAULT_NIC_NAME = "mlx5_0"
# csrc/jit/compiler.hpp asserts ``NVCC version should be >= 12.3``.
NVCC_MIN = "12.3"
# The last CUDA whose ptxas rejects st.bulk with a 32-bit size operand on SM100 (DeepEP #692).
SM100_CUDA_MAX_BROKEN = "13.0"
# Below this NCCL, V2's build and runtime NCCL must be the same (DeepEP #687/#688).
# (data: _catalogue.BREAKAGES["v2_nccl_build_runtime"])
NCCL_RUNTIME_VERSION_FROM = breakage("v2_nccl_build_runtime")["boundary"]
LIBMLX5_NAME = "libmlx5.so.1"
# NCCL loads libmlx5 at all with MLX5_1.8; GIN GDAKI needs MLX5_1.19 (_catalogue: gin_gdaki_libmlx5); MLX5_1.25 is
# Data Direct only.
MLX5_REQUIRED = "MLX5_1.8"
MLX5_GDAKI = breakage("gin_gdaki_libmlx5")["boundary"]
MLX5_OPTIONAL = "MLX5_1.25"
IBSTAT_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin")
MLX5_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64",
             "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/local/lib")
# The V2 headers the JIT compiles, below a source checkout or an installed package.
HEADER_DIRS = ("deep_ep/include/deep_ep/common", "include/deep_ep/common")
# Where a V2 source tree resolves the driver's entry points (DeepEP PR #686 changed cuStreamBatchMemOp to its _v2).
LAZY_DRIVER = "csrc/utils/lazy_driver.hpp"
CHECKS = ("nvcc", "cuobjdump", "sm100_cuda", "cuda128_host_code", "ibstat", "nic_name", "libmlx5",
          "dev_infiniband", "nccl_cumem", "nccl_build_runtime", "gin_barrier", "agrs_memop")
STATUSES = ("pass", "fail", "warn", "not_applicable")

_CUDACC_GUARD_RE = re.compile(r"^\s*#\s*(ifdef\s+__CUDACC__|if\s+defined\s*\(?\s*__CUDACC__)", re.M)
_BARRIER_INCLUDE_RE = re.compile(r"^\s*#\s*include\s*<cuda/barrier>", re.M)
_ST_BULK_64_RE = re.compile(r'"l"\s*\(\s*static_cast<uint64_t>\s*\(\s*kNumBytes\s*\)\s*\)')
_FENCE_SYS_CALL_RE = re.compile(r"fence_acq_rel_sys\s*\(\s*\)\s*;")
_ENV_LINE_RE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


# --- what is read ---------------------------------------------------------------------------------------------

def _executable(root, path):
    full = under(root, path)
    return os.path.isfile(full) and os.access(full, os.X_OK)


def find_ibstat(root):
    """The path of ``ibstat`` (infiniband-diags) in the usual directories, or None."""
    return next((os.path.join(d, "ibstat") for d in IBSTAT_DIRS if _executable(root, os.path.join(d, "ibstat"))),
                None)


def find_libmlx5(root, ldcache=None):
    """The path of ``libmlx5.so.1`` from the ld cache (``{soname: [paths]}``) or the library directories, or None."""
    for path in (ldcache or {}).get(LIBMLX5_NAME, []):
        if os.path.exists(under(root, path)):
            return path
    return next((os.path.join(d, LIBMLX5_NAME) for d in MLX5_DIRS
                 if os.path.exists(under(root, os.path.join(d, LIBMLX5_NAME)))), None)


def _version_key(name):
    return tuple(int(p) for p in re.findall(r"\d+", name))


def libmlx5_facts(root, path):
    """``{path, versions, newest, required, gdaki, optional, error}`` of libmlx5: the symbol versions its ELF defines
    (no objdump), whether it has MLX5_1.8 (NCCL loads it at all), MLX5_1.19 (GIN GDAKI's mlx5dv_devx_umem_reg_ex) and
    MLX5_1.25 (Data Direct; optional)."""
    facts = {"path": path, "versions": [], "newest": None, "required": False, "gdaki": False, "optional": False,
             "error": None}
    if path is None:
        facts["error"] = "%s not found in the ld cache or %s" % (LIBMLX5_NAME, ", ".join(MLX5_DIRS))
        return facts
    try:
        versions = version_definitions(under(root, path))
    except ElfError as exc:
        facts["error"] = str(exc)
        return facts
    mlx5 = sorted((v for v in versions if v.startswith("MLX5_")), key=_version_key)
    facts.update(versions=versions, newest=mlx5[-1] if mlx5 else None,
                 required=MLX5_REQUIRED in versions, gdaki=MLX5_GDAKI in versions, optional=MLX5_OPTIONAL in versions)
    return facts


def tree_markers(root, tree):
    """What a V2 tree (a source checkout or an installed ``deep_ep`` package) holds of three fixes, read from the
    headers its JIT compiles: ``cuda128_host_code`` (ptx.cuh includes ``<cuda/barrier>`` only in device code, or
    not at all: DeepEP 76f1427 "Fix cu128 compilation"), ``sm100_st_bulk`` (st.bulk with a 64-bit size operand:
    DeepEP #692, 747ea8e) and ``gin_barrier`` (comm.cuh's barrier releases NVLink stores at system scope: DeepEP
    #715). Each is True, False, or None with ``error`` saying why it could not be read. ``agrs_memop``: whether the
    source tree's csrc/utils/lazy_driver.hpp asks the driver for ``cuStreamBatchMemOp_v2`` (DeepEP PR #686), None
    where the tree is an installed package (no csrc)."""
    markers = {"path": tree, "headers": None, "cuda128_host_code": None, "sm100_st_bulk": None,
               "gin_barrier": None, "agrs_memop": None, "error": None}
    if not tree:
        markers["error"] = "no DeepEP V2 tree on the node (neither the deepep_v2_tree option nor an installed deep_ep)"
        return markers
    if not os.path.isdir(under(root, tree)):
        markers["error"] = "the DeepEP V2 tree %s does not exist (yet)" % tree
        return markers
    headers = next((os.path.join(tree, d) for d in HEADER_DIRS
                    if os.path.isfile(under(root, os.path.join(tree, d, "ptx.cuh")))), None)
    if headers is None:
        markers["error"] = "%s holds no V2 headers (%s/ptx.cuh)" % (tree, " or ".join(HEADER_DIRS))
        return markers
    markers["headers"] = headers
    ptx = read_text(under(root, os.path.join(headers, "ptx.cuh"))) or ""
    guard = _CUDACC_GUARD_RE.search(ptx)
    include = _BARRIER_INCLUDE_RE.search(ptx)
    markers["cuda128_host_code"] = include is None or (guard is not None and guard.start() < include.start())
    markers["sm100_st_bulk"] = "st.bulk" not in ptx or _ST_BULK_64_RE.search(ptx) is not None
    comm = read_text(under(root, os.path.join(headers, "comm.cuh")))
    if comm is not None:
        markers["gin_barrier"] = _FENCE_SYS_CALL_RE.search(comm) is not None
    lazy = read_text(under(root, os.path.join(tree, LAZY_DRIVER)))
    if lazy is not None and "cuStreamBatchMemOp" in lazy:
        markers["agrs_memop"] = "cuStreamBatchMemOp_v2" in lazy
    return markers


def stream_memops(root):
    """The loaded driver's EnableStreamMemOPs (``/proc/driver/nvidia/params``, read as the nvidia facts read it) as an
    int, None where unread or not a number."""
    value = parse_params(read_text(under(root, DEFAULT_PARAMS_PATH)) or "").get("EnableStreamMemOPs")
    return value if isinstance(value, int) else None


def _unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def parse_environment_file(text):
    """``NAME=value`` lines (``/etc/environment``, a shell env file) -> {name: value}, quotes removed."""
    values = {}
    for line in (text or "").splitlines():
        match = _ENV_LINE_RE.match(line)
        if match and not line.lstrip().startswith("#"):
            values[match.group(1)] = _unquote(match.group(2).split(" #", 1)[0])
    return values


def cumem_disabled(sources):
    """Where ``NCCL_CUMEM_ENABLE`` is 0: ``[{where, value}]`` from ``sources`` ({where: {name: value}})."""
    found = []
    for where in sorted(sources):
        value = (sources[where] or {}).get("NCCL_CUMEM_ENABLE")
        if value is not None and str(value).strip() == "0":
            found.append({"where": where, "value": str(value)})
    return found


def gather_deepep_v2(root="/", cuda=None, cuda_home="/usr/local/cuda", rdma=None, gpus=None, env_exports=None,
                     env_script="/opt/deepep/unified-env.sh", tree=None, nccl_built=None, nccl_loaded=None,
                     ldcache=None, environ=None, nic_name=None, over_rdma=True, across_nodes=True, gin_mlx5=True):
    """The ``gpufleet_deepep_v2`` facts and their ``checks``.

    ``cuda``: the stack's CUDA facts (``{release, version, nvcc_present, error}``, nvcc run once with a timeout by
    the caller); ``rdma``: ``gpufleet_rdma``; ``gpus``: ``[{index, compute_capability}]``; ``env_exports``: what
    the env script exports; ``tree``: the V2 tree to read; ``nccl_built``/``nccl_loaded``: the NCCL DeepEP was
    built against and the one the torch environment loads; ``environ``: this process's environment;
    ``nic_name``: the EP_NIC_NAME the play will set (else the env script's, else V2's default mlx5_0);
    ``over_rdma``/``across_nodes``: whether V2 runs over RDMA / across nodes here (the checks that only matter
    there are not applicable otherwise); ``gin_mlx5``: whether NCCL's GIN drives mlx5 NICs here (false on AWS EFA,
    whose GIN runs through aws-ofi-nccl: the libmlx5 check is not applicable)."""
    cuda = cuda or {}
    env_exports = env_exports or {}
    devices = [d for d in (rdma or {}).get("devices") or [] if isinstance(d, dict)]
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    cuobjdump = os.path.join(cuda_home, "bin", "cuobjdump")
    if nic_name:
        nic_source = "option"
    elif env_exports.get("EP_NIC_NAME"):
        nic_name, nic_source = env_exports["EP_NIC_NAME"], "env_script"
    else:
        nic_name, nic_source = DEFAULT_NIC_NAME, "default"
    device = next((d for d in devices if d.get("name") == nic_name), None)
    ibstat = find_ibstat(root)
    dev_ib = under(root, "/dev/infiniband")
    uverbs = sorted(n for n in (os.listdir(dev_ib) if os.path.isdir(dev_ib) else []) if n.startswith("uverbs"))
    sources = {"env_script %s" % env_script: env_exports,
               "/etc/environment": parse_environment_file(read_text(under(root, "/etc/environment"))),
               "the environment of the node's login": dict(environ or {})}
    facts = {
        "nvcc": {"path": nvcc, "present": bool(cuda.get("nvcc_present")), "release": cuda.get("release"),
                 "version": cuda.get("version"), "error": cuda.get("error")},
        "cuobjdump": {"path": cuobjdump, "present": _executable(root, cuobjdump)},
        "ibstat": {"path": ibstat, "present": ibstat is not None},
        "dev_infiniband": {"present": os.path.isdir(dev_ib), "uverbs": uverbs},
        "libmlx5": libmlx5_facts(root, find_libmlx5(root, ldcache)),
        "nic": {"name": nic_name, "source": nic_source, "present": device is not None,
                "active": bool(device and device.get("active")),
                "active_devices": list((rdma or {}).get("active_devices") or [])},
        "cumem_disabled": cumem_disabled(sources),
        "tree": tree_markers(root, tree),
        "stream_memops": stream_memops(root),
        "compute_capabilities": sorted(set(str(g.get("compute_capability")) for g in gpus or []
                                           if isinstance(g, dict) and g.get("compute_capability"))),
        "nccl": {"built": nccl_built, "loaded": nccl_loaded},
        "over_rdma": bool(over_rdma),
        "across_nodes": bool(across_nodes),
        "gin_mlx5": bool(gin_mlx5),
    }
    facts["checks"] = v2_checks(facts)
    facts["failed"] = [c["check"] for c in facts["checks"] if c["status"] == "fail"]
    facts["warnings"] = [c["check"] for c in facts["checks"] if c["status"] == "warn"]
    facts["ready"] = not facts["failed"]
    return facts


# --- the decisions --------------------------------------------------------------------------------------------

def _cmp(left, right):
    try:
        return compare_versions(left, right)
    except VersionError:
        return None


def _check(name, status, found, reason, fix=None):
    return {"check": name, "status": status, "found": found, "reason": reason, "fix": fix}


def _nvcc(f):
    nvcc = f["nvcc"]
    if not nvcc["present"]:
        return _check("nvcc", "fail", None, "%s not found: V2 compiles its kernels on every node at first use (JIT)"
                      % nvcc["path"], "install the CUDA toolkit (cuda_toolkit phase) so that %s exists, or set "
                      "EP_JIT_NVCC_COMPILER to an nvcc >= %s" % (nvcc["path"], NVCC_MIN))
    if not nvcc["release"]:
        return _check("nvcc", "fail", None, "nvcc did not report its version: %s" % nvcc["error"],
                      "repair the CUDA toolkit at %s (nvcc --version must run)" % os.path.dirname(nvcc["path"]))
    if _cmp(nvcc["release"], NVCC_MIN) == -1:
        return _check("nvcc", "fail", nvcc["release"], "nvcc %s is older than %s: V2's JIT asserts \"NVCC version "
                      "should be >= 12.3\"" % (nvcc["release"], NVCC_MIN),
                      "install CUDA >= %s (cuda_toolkit_version) and point CUDA_HOME at it" % NVCC_MIN)
    return _check("nvcc", "pass", nvcc["release"], "nvcc %s >= %s" % (nvcc["release"], NVCC_MIN))


def _cuobjdump(f):
    tool = f["cuobjdump"]
    if tool["present"]:
        return _check("cuobjdump", "pass", tool["path"], "%s is there" % tool["path"])
    return _check("cuobjdump", "fail", None, "%s not found: V2's JIT runs cuobjdump on every kernel it builds"
                  % tool["path"], "install the CUDA toolkit's cuda-cuobjdump package (the full cuda-toolkit "
                  "has it) beside nvcc")


def _sm100(f):
    sm100 = [cc for cc in f["compute_capabilities"] if cc.split(".")[0] == "10"]
    release = f["nvcc"]["release"]
    if not sm100:
        return _check("sm100_cuda", "not_applicable", f["compute_capabilities"],
                      "no SM100-family GPU (compute capability 10.x) on the node")
    if not release:
        return _check("sm100_cuda", "not_applicable", None, "the CUDA version is unknown (see the nvcc check)")
    if _cmp(release, SM100_CUDA_MAX_BROKEN) == 1:
        return _check("sm100_cuda", "pass", release, "CUDA %s > %s on SM100" % (release, SM100_CUDA_MAX_BROKEN))
    fixed = f["tree"]["sm100_st_bulk"]
    fix = ("use CUDA >= 13.1 (cuda_toolkit_version), or a DeepEP V2 tree with the st.bulk 64-bit operand fix "
           "(DeepEP #692, commit 747ea8e) in deepep_src_git_version")
    if fixed is True:
        return _check("sm100_cuda", "pass", release, "CUDA %s on SM100, and the V2 tree has the st.bulk fix (#692)"
                      % release)
    if fixed is None:
        return _check("sm100_cuda", "warn", release, "CUDA %s on SM100 and the V2 tree could not be read (%s): "
                      "ptxas <= 13.0 rejects V2's st.bulk (DeepEP #692)" % (release, f["tree"]["error"]), fix)
    return _check("sm100_cuda", "fail", release, "CUDA %s on SM100 with a V2 tree lacking the st.bulk fix: the JIT "
                  "fails with a ptxas error at the first dispatch (DeepEP #692)" % release, fix)


def _cuda128(f):
    release = f["nvcc"]["release"]
    if release != "12.8":
        return _check("cuda128_host_code", "not_applicable", release, "CUDA is %s, not 12.8" % (release or "unknown"))
    fixed = f["tree"]["cuda128_host_code"]
    fix = ("use a DeepEP V2 tree at or after 76f1427 \"Fix cu128 compilation\" (ptx.cuh without <cuda/barrier> in "
           "host code; DeepEP PR #605), or a CUDA other than 12.8")
    if fixed is True:
        return _check("cuda128_host_code", "pass", release, "CUDA 12.8 and the V2 tree keeps <cuda/barrier> out "
                      "of host code")
    if fixed is None:
        return _check("cuda128_host_code", "warn", release, "CUDA 12.8 and the V2 tree could not be read (%s)"
                      % f["tree"]["error"], fix)
    return _check("cuda128_host_code", "fail", release, "CUDA 12.8 with a V2 tree whose ptx.cuh includes "
                  "<cuda/barrier> in host code: the build of csrc/python_api.cpp fails with \"error: "
                  "'__cvta_generic_to_shared' was not declared in this scope\"", fix)


def _not_rdma(name):
    return _check(name, "not_applicable", None, "V2 does not run over RDMA here (NVLink only)")


def _ibstat(f):
    if not f["over_rdma"]:
        return _not_rdma("ibstat")
    if not f.get("gin_mlx5", True):
        return _check("ibstat", "not_applicable", f["ibstat"]["path"], "ibstat does not read EFA devices (AWS EFA): V2 "
                      "gets no NIC rate from it there and runs with an explicit --num-sms")
    if f["ibstat"]["present"]:
        return _check("ibstat", "pass", f["ibstat"]["path"], "ibstat is at %s" % f["ibstat"]["path"])
    return _check("ibstat", "fail", None, "ibstat not found: V2 reads EP_NIC_NAME's rate and type through it and "
                  "falls back silently (RDMA bandwidth 0, wrong QP count) when it is missing",
                  "apt-get install infiniband-diags (doca_ofed phase)")


def _nic(f):
    if not f["over_rdma"]:
        return _not_rdma("nic_name")
    nic = f["nic"]
    fix = ("export EP_NIC_NAME=<an ACTIVE RDMA device> in the env script (env_script_ep_nic_name: auto takes "
           "the first ACTIVE one%s)" % (": %s" % nic["active_devices"][0] if nic["active_devices"] else ""))
    if not nic["present"]:
        return _check("nic_name", "fail", nic["name"], "EP_NIC_NAME=%s (%s) is not an RDMA device of the node "
                      "(ACTIVE: %s)" % (nic["name"], nic["source"], ", ".join(nic["active_devices"]) or "none"), fix)
    if not nic["active"]:
        return _check("nic_name", "fail", nic["name"], "EP_NIC_NAME=%s (%s) has no ACTIVE port" % (
            nic["name"], nic["source"]), fix)
    return _check("nic_name", "pass", nic["name"], "EP_NIC_NAME=%s (%s) is ACTIVE" % (nic["name"], nic["source"]))


def _libmlx5(f):
    if not f["over_rdma"]:
        return _not_rdma("libmlx5")
    if not f.get("gin_mlx5", True):
        return _check("libmlx5", "not_applicable", None, "NCCL's GIN does not drive mlx5 NICs here (AWS EFA: it runs "
                      "through the aws-ofi-nccl plugin, which the efa phase checks)")
    lib = f["libmlx5"]
    fix = ("install DOCA-OFED (doca_ofed phase) or an rdma-core of version 35 or newer, whose libmlx5 defines %s and "
           "%s" % (MLX5_REQUIRED, MLX5_GDAKI))
    if lib["error"]:
        return _check("libmlx5", "fail", None, "libmlx5 unreadable: %s; NCCL GIN needs it" % lib["error"], fix)
    if not lib["required"]:
        return _check("libmlx5", "fail", lib["newest"], "%s defines no %s (newest %s): NCCL finds no GIN (\"dlvsym "
                      "failed on mlx5dv_is_supported\") and V2 asserts \"NCCL GIN is unavailable\"" % (
                          lib["path"], MLX5_REQUIRED, lib["newest"]), fix)
    if not lib.get("gdaki"):
        return _check("libmlx5", "fail", lib["newest"], "%s defines %s but not %s (newest %s): NCCL's GIN GDAKI backend "
                      "loads mlx5dv_devx_umem_reg_ex (%s, rdma-core 35) and gives up without it, so GIN reports "
                      "ginType NONE and V2 asserts \"NCCL GIN is unavailable\" across nodes (DeepEP #628: MLNX_OFED "
                      "24.10, newest MLX5_1.17)" % (lib["path"], MLX5_REQUIRED, MLX5_GDAKI, lib["newest"], MLX5_GDAKI),
                      fix)
    found = "%s defines %s and %s (GIN GDAKI); %s" % (
        lib["path"], MLX5_REQUIRED, MLX5_GDAKI,
        "%s too (Data Direct)" % MLX5_OPTIONAL if lib["optional"] else
        "no %s: NCCL's Data Direct stays off (optional; its 'dlvsym failed' INFO lines are expected)" % MLX5_OPTIONAL)
    return _check("libmlx5", "pass", lib["newest"], found)


def _dev_ib(f):
    if not f["over_rdma"]:
        return _not_rdma("dev_infiniband")
    if f["dev_infiniband"]["uverbs"]:
        return _check("dev_infiniband", "pass", f["dev_infiniband"]["uverbs"], "/dev/infiniband is there")
    return _check("dev_infiniband", "fail", f["dev_infiniband"]["uverbs"] if f["dev_infiniband"]["present"] else None,
                  "/dev/infiniband %s: no verbs device, so NCCL has no GIN and V2 asserts \"NCCL GIN is unavailable\""
                  % ("has no uverbs device" if f["dev_infiniband"]["present"] else "is missing"),
                  "load ib_uverbs and mlx5_ib (doca_ofed phase); in a container pass --device /dev/infiniband")


def _cumem(f):
    found = f["cumem_disabled"]
    if not found:
        return _check("nccl_cumem", "pass", None, "NCCL_CUMEM_ENABLE=0 is set nowhere")
    return _check("nccl_cumem", "fail", [x["where"] for x in found], "NCCL_CUMEM_ENABLE=0 in %s: NCCL then has no "
                  "symmetric memory and V2's windows fail, even on one node" % ", ".join(x["where"] for x in found),
                  "remove NCCL_CUMEM_ENABLE=0 from %s (never put it in env_script_extra_env)"
                  % ", ".join(x["where"] for x in found))


def _nccl(f):
    built, loaded = f["nccl"]["built"], f["nccl"]["loaded"]
    if not built:
        return _check("nccl_build_runtime", "not_applicable", None, "DeepEP is not built yet (no build record)")
    if not loaded:
        return _check("nccl_build_runtime", "not_applicable", built, "the NCCL the torch environment loads is unknown")
    found = {"built": built, "loaded": loaded}
    new_built, order = _cmp(built, NCCL_RUNTIME_VERSION_FROM), _cmp(loaded, built)
    if order == 0 or (new_built is not None and new_built >= 0 and order == 1):
        return _check("nccl_build_runtime", "pass", found, "built against NCCL %s, loads %s" % (built, loaded))
    return _check("nccl_build_runtime", "fail", found, "built against NCCL %s but loads %s: below %s V2 asserts "
                  "\"Prior to NCCL 2.31, NCCL compile-time and runtime versions must be the same\"; from %s on "
                  "the runtime must be at least the build's" % (
                      built, loaded, NCCL_RUNTIME_VERSION_FROM, NCCL_RUNTIME_VERSION_FROM),
                  "pin the torch environment's NCCL back to %s (nccl phase), or rebuild DeepEP against %s "
                  "(deepep phase)" % (built, loaded))


def _gin_barrier(f):
    if not f["across_nodes"]:
        return _check("gin_barrier", "not_applicable", None, "V2 does not run across nodes here")
    fixed = f["tree"]["gin_barrier"]
    fix = "use a DeepEP V2 tree with PR #715 (system-scope release before the GIN barrier) in deepep_src_git_version"
    if fixed is True:
        return _check("gin_barrier", "pass", True, "the V2 tree has the GIN barrier fix (#715)")
    if fixed is None:
        return _check("gin_barrier", "warn", None, "the V2 tree could not be read (%s)" % f["tree"]["error"], fix)
    return _check("gin_barrier", "fail", False, "the V2 tree lacks the GIN barrier fix: multi-node direct mode "
                  "hangs with \"DeepEP Gin barrier timeout\" (DeepEP #715)", fix)


def _agrs_memop(f):
    """V2's AGRS (all-gather/reduce-scatter: test_agrs.py, context parallelism) waits on memory through the driver's
    cuStreamBatchMemOp; a tree without DeepEP PR #686 asks for the deprecated v1 entry point, which returns
    CUDA_ERROR_NOT_SUPPORTED (801) unless NVreg_EnableStreamMemOPs=1 (measured on an H200, driver 580.159.04, CUDA
    13.0: v1 801, v2 0). A warning at most: V2's dispatch and combine do not use it."""
    fixed = f["tree"].get("agrs_memop")
    memops = f.get("stream_memops")
    fix = ("use a DeepEP V2 tree with PR #686 (cuStreamBatchMemOp_v2 in %s), or load the driver with "
           "NVreg_EnableStreamMemOPs=1 (nvidia_peermapping phase)" % LAZY_DRIVER)
    if fixed is None:
        return _check("agrs_memop", "not_applicable", None, "the V2 source tree's %s is not on the node (an installed "
                      "package): its driver entry point is not judged" % LAZY_DRIVER)
    if fixed:
        return _check("agrs_memop", "pass", True, "the V2 tree asks for cuStreamBatchMemOp_v2 (#686)")
    if memops == 1:
        return _check("agrs_memop", "pass", {"tree_fix": False, "stream_memops": memops}, "the V2 tree asks for the "
                      "deprecated cuStreamBatchMemOp (no #686), which works while NVreg_EnableStreamMemOPs=1")
    return _check("agrs_memop", "warn", {"tree_fix": False, "stream_memops": memops}, "the V2 tree asks for the "
                  "deprecated cuStreamBatchMemOp (no DeepEP PR #686) and the driver runs with EnableStreamMemOPs=%s: "
                  "V2's all-gather/reduce-scatter (test_agrs.py, context parallelism) fails with "
                  "CUDA_ERROR_NOT_SUPPORTED; dispatch and combine are not affected" % memops, fix)


_DECIDERS = (_nvcc, _cuobjdump, _sm100, _cuda128, _ibstat, _nic, _libmlx5, _dev_ib, _cumem, _nccl, _gin_barrier,
             _agrs_memop)


def v2_checks(facts):
    """Every check of :data:`CHECKS`, in that order, decided from the ``gpufleet_deepep_v2`` facts."""
    return [decide(facts) for decide in _DECIDERS]
