# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""DeepEP trees and builds: the generation (V1/V2) and version a tree declares, the preflight that lists
every failed requirement at once with its fix, and the environment of ``setup.py bdist_wheel``.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import (
    ArchError,
    format_arch_list,
    needs_disable_aggressive_ptx,
    parse_arch_list,
    uncovered_gpu_archs,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.rc_layout import rc_layout_check
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import VersionError, at_least, parse_version

__all__ = ["V2_MIN_NCCL", "V2_MIN_TORCH", "CUDA_CCCL_FROM", "deepep_version_from_tree", "detect_deepep_generation",
           "has_hca_mapping_support", "deepep_preflight", "deepep_build_env"]

V2_MIN_NCCL = "2.30.4"
V2_MIN_TORCH = "2.10"
CUDA_CCCL_FROM = "13.0"


_PY_VERSION_RE = re.compile(r"""__version__\s*=\s*['"]([^'"]+)['"]""")
_SETUP_VERSION_RE = re.compile(r"""\bversion\s*=\s*['"](\d+(?:\.\d+)*)""")


def deepep_version_from_tree(setup_py, init_py):
    """The DeepEP version a tree declares: ``deep_ep/__init__.py``'s ``__version__`` (V2), else the
    ``version='x.y.z'`` of ``setup.py`` (V1); None when neither says."""
    match = _PY_VERSION_RE.search(init_py or "")
    if match:
        return match.group(1)
    match = _SETUP_VERSION_RE.search(setup_py or "")
    return match.group(1) if match else None


def detect_deepep_generation(setup_py, init_py, has_elastic_tests=False):
    """``('v1'|'v2', reason)`` for a DeepEP tree, or ``(None, reason)`` when it is not one.

    V2: ``deep_ep/__init__.py`` declares a 2.x ``__version__``, or the tree has ``tests/elastic``, or
    ``setup.py`` reads ``EP_NCCL_ROOT_DIR``. V1: ``setup.py`` declares a 1.x version (or builds the
    ``deep_ep_cpp`` extension).
    """
    init_version = _PY_VERSION_RE.search(init_py or "")
    if init_version and init_version.group(1).split(".")[0] == "2":
        return "v2", "deep_ep/__init__.py declares version %s" % init_version.group(1)
    if has_elastic_tests:
        return "v2", "the tree has tests/elastic (DeepEP V2 elastic tests)"
    if "EP_NCCL_ROOT_DIR" in (setup_py or ""):
        return "v2", "setup.py reads EP_NCCL_ROOT_DIR (DeepEP V2)"
    setup_version = _SETUP_VERSION_RE.search(setup_py or "")
    if setup_version and setup_version.group(1).split(".")[0] == "1":
        return "v1", "setup.py declares version %s" % setup_version.group(1)
    if "deep_ep_cpp" in (setup_py or ""):
        return "v1", "setup.py builds the deep_ep_cpp extension (DeepEP V1)"
    if setup_py is None:
        return None, "no setup.py"
    return None, "neither a V1 (setup.py version 1.x) nor a V2 (deep_ep/__init__.py 2.x) DeepEP tree"


def has_hca_mapping_support(buffer_py):
    """Whether a tree carries DeepEP PR #466 (GPU-NIC mapping): ``_setup_device_hca_mapping`` or
    ``DEEP_EP_DEVICE_TO_HCA_MAPPING`` in ``deep_ep/buffer.py``."""
    text = buffer_py or ""
    return "_setup_device_hca_mapping" in text or "DEEP_EP_DEVICE_TO_HCA_MAPPING" in text


# --------------------------------------------------------------------------------------------
# DeepEP preflight


def _v(value):
    try:
        return parse_version(value) if value is not None else None
    except VersionError:
        return None


def _fail(failures, check, message, fix):
    failures.append({"check": check, "message": message, "fix": fix})


def _check_arch_list(obs, failures):
    """The arch list to build, normalized: arch_list, else gpu_arch_list; None (and a failure) when neither gives one
    that parses."""
    arch_list = None
    raw_arch = obs.get("arch_list")
    gpu_archs = obs.get("gpu_arch_list")
    # The option the arch list comes from: messages name the one the user set (gpu_arch_list is arch_list's default).
    arch_option = "arch_list"
    if raw_arch in (None, "", []):
        if gpu_archs not in (None, "", []):
            raw_arch = gpu_archs
            arch_option = "gpu_arch_list"
    if raw_arch in (None, "", []):
        _fail(failures, "arch_list_missing",
              "no arch list: arch_list is not set and no gpu_arch_list (gpufleet_gpus.cuda_arch_list) was given",
              "set arch_list (TORCH_CUDA_ARCH_LIST), e.g. 9.0 for H100/H200, 10.0 for B200, 8.0 for A100, "
              "or pass gpu_arch_list from the gpu_topology facts")
    else:
        try:
            arch_list = format_arch_list(parse_arch_list(raw_arch))
        except ArchError as exc:
            fix = "write %s as TORCH_CUDA_ARCH_LIST does: 9.0, 10.0, 9.0;10.0, 9.0a or 10.0+PTX" % arch_option
            if arch_option == "gpu_arch_list":
                fix += (" (a list or a ;-separated string, e.g. gpufleet_gpus.cuda_arch_list), or set arch_list, "
                        "which takes precedence")
            _fail(failures, "arch_list_malformed", "%s: %s" % (arch_option, exc), fix)
    return arch_list


def _check_arch_covers_gpus(obs, arch_list, failures, warnings):
    """The arch list has code for every GPU of the node (gpu_arch_list)."""
    gpu_archs = obs.get("gpu_arch_list")
    if arch_list and gpu_archs not in (None, "", []):
        try:
            missing = uncovered_gpu_archs(arch_list, gpu_archs)
        except ArchError as exc:
            missing = []
            warnings.append("gpu_arch_list could not be read: %s" % exc)
        if missing:
            _fail(failures, "arch_mismatch",
                  "arch list %s has no code for the GPUs of this node (compute capability %s); kernels would "
                  "fail at run time with 'named symbol not found' (runbook 001 problem 7)"
                  % (arch_list, ", ".join(missing)),
                  "build for the node's GPUs: set arch_list to %s (or leave it unset to use gpu_arch_list)"
                  % ";".join(missing))


def _check_sm90_features(obs, arch_list, failures):
    """DISABLE_SM90_FEATURES (A100): needed below SM90, and then V1 only, without NVSHMEM and internode."""
    generation = obs.get("generation")
    sm90_off = bool(obs.get("disable_sm90_features"))
    if arch_list:
        pre_hopper = [e["arch"] for e in parse_arch_list(arch_list) if e["major"] < 9]
        if pre_hopper and not sm90_off:
            _fail(failures, "sm90_features_on_pre_hopper",
                  "arch list %s includes %s, which has no SM90 features (FP8, TMA, launch methods)"
                  % (arch_list, ", ".join(pre_hopper)),
                  "set disable_sm90_features: true for A100 (DeepEP then builds intranode only, "
                  "without NVSHMEM)")
    if sm90_off:
        nvshmem_used = obs.get("nvshmem_root") or obs.get("nvshmem_pip_dir")
        if generation == "v2":
            _fail(failures, "sm90_features_v2",
                  "DISABLE_SM90_FEATURES is a DeepEP V1 build switch; V2 needs NVSHMEM and SM90+",
                  "build a V1 tree (commit 567632d or older) for A100, or drop disable_sm90_features")
        elif nvshmem_used:
            _fail(failures, "sm90_features_with_nvshmem",
                  "DISABLE_SM90_FEATURES=1 requires NVSHMEM to be disabled, but the build would use NVSHMEM "
                  "at %s (setup.py asserts disable_nvshmem)" % nvshmem_used,
                  "leave nvshmem_root unset and make sure the interpreter has no pip nvidia-nvshmem package "
                  "(pip uninstall nvidia-nvshmem-cu12 nvidia-nvshmem-cu13), or drop disable_sm90_features")
        if obs.get("internode"):
            _fail(failures, "sm90_features_internode",
                  "internode is wanted but DISABLE_SM90_FEATURES builds DeepEP without internode and "
                  "low-latency kernels", "set internode: false for A100 builds")


def _check_aggressive_ptx(obs, arch_list, failures, automatic):
    """DISABLE_AGGRESSIVE_PTX_INSTRS=1 unless the arch list is exactly 9.0: set by the module, refused when asked
    off."""
    if arch_list and needs_disable_aggressive_ptx(arch_list):
        if obs.get("disable_aggressive_ptx") is False:
            _fail(failures, "aggressive_ptx",
                  "DISABLE_AGGRESSIVE_PTX_INSTRS=0 was asked for, but DeepEP only allows aggressive PTX "
                  "instructions when TORCH_CUDA_ARCH_LIST is exactly 9.0 (arch list: %s)" % arch_list,
                  "leave disable_aggressive_ptx unset (the module sets DISABLE_AGGRESSIVE_PTX_INSTRS=1)")
        else:
            automatic.append({"check": "aggressive_ptx",
                              "message": "arch list %s is not exactly 9.0: DISABLE_AGGRESSIVE_PTX_INSTRS=1"
                                         % arch_list,
                              "env": {"DISABLE_AGGRESSIVE_PTX_INSTRS": "1"}})


def _check_cuda(obs, failures, automatic, warnings):
    """The CUDA toolkit, and from CUDA 13 its cccl headers on the include path."""
    generation = obs.get("generation")
    cuda_home = obs.get("cuda_home") or "/usr/local/cuda"
    cuda_version = obs.get("cuda_version")
    if not cuda_version:
        _fail(failures, "cuda_missing",
              "no CUDA toolkit at %s (no %s/bin/nvcc answered --version)" % (cuda_home, cuda_home),
              "install the CUDA toolkit (role cuda_toolkit) or point cuda_home at it")
    elif _v(cuda_version) is not None and _v(cuda_version) >= parse_version(CUDA_CCCL_FROM):
        cccl = obs.get("cccl_dir") or os.path.join(cuda_home, "include", "cccl")
        if obs.get("cccl_exists"):
            automatic.append({"check": "cccl_include",
                              "message": "CUDA %s keeps libcu++ under %s: added to CPATH (g++) and "
                                         "NVCC_APPEND_FLAGS (nvcc) (DeepEP #568)" % (cuda_version, cccl),
                              "env": {"CPATH": cccl, "NVCC_APPEND_FLAGS": "-I%s" % cccl}})
        else:
            _fail(failures, "cccl_missing",
                  "CUDA %s needs %s on the include path of g++ and nvcc (else 'cuda/std/tuple: No such file "
                  "or directory'), but that directory does not exist" % (cuda_version, cccl),
                  "install the CUDA toolkit's cccl headers (cuda-cccl-13-x, part of cuda-toolkit) or point "
                  "cuda_home at a complete CUDA %s toolkit" % cuda_version)
        if generation == "v2" and os.path.normpath(cuda_home) != "/usr/local/cuda":
            warnings.append("DeepEP V2's setup.py hard-codes /usr/local/cuda/include/cccl; cuda_home is %s"
                            % cuda_home)


def _check_libstdcxx(obs, failures, automatic):
    """The C++ runtime the extension links: a shared libstdc++, linked to the runtime's where the compiler has none."""
    # The C++ runtime the extension links (captured on 4 x H200: a compiler whose libstdc++.so link is dangling
    # links libstdc++.a into the extension; V2's JIT include parser then dies in std::regex at the first dispatch).
    if obs.get("cxx_libstdcxx_shared") is False:
        runtime = obs.get("runtime_libstdcxx")
        link_dir = obs.get("libstdcxx_link_dir")
        static = ("the C++ compiler %s finds no shared libstdc++ (-print-file-name=libstdc++.so: %s), so the extension "
                  "would carry libstdc++.a" % (obs.get("cxx") or "c++", obs.get("cxx_libstdcxx_so") or "not found"))
        if runtime and link_dir:
            automatic.append({"check": "libstdcxx_static",
                              "message": "%s and std::regex in it crashes (DeepEP V2's JIT, first dispatch): linking "
                                         "against the runtime's %s through -L%s" % (static, runtime, link_dir),
                              "env": {"LDFLAGS": "-L%s" % link_dir},
                              "link": {"dir": link_dir, "name": "libstdc++.so", "target": runtime}})
        else:
            _fail(failures, "libstdcxx_static",
                  "%s: std::regex in it crashes (DeepEP V2's JIT, first dispatch), and the libstdc++.so.6 the "
                  "interpreter loads could not be read" % static,
                  "install the compiler's libstdc++ development link (libstdc++-<version>-dev), or set CXX to a "
                  "compiler whose `-print-file-name=libstdc++.so` is an existing file")


def _check_torch(obs, failures):
    """torch in the build interpreter; V2 needs a recent one."""
    generation = obs.get("generation")
    torch_version = obs.get("torch_version")
    if not torch_version:
        _fail(failures, "torch_missing",
              "torch cannot be found by the build interpreter %s%s" % (
                  obs.get("python") or "python3",
                  (": %s" % obs["torch_error"]) if obs.get("torch_error") else ""),
              "install PyTorch into that interpreter first (role pytorch) or set python to the one that has it")
    elif generation == "v2":
        parsed = _v(torch_version)
        if parsed is None or not parsed >= parse_version(V2_MIN_TORCH):
            _fail(failures, "torch_too_old",
                  "DeepEP V2 requires PyTorch >= %s; the build interpreter has torch %s"
                  % (V2_MIN_TORCH, torch_version),
                  "upgrade torch to >= %s (role pytorch), or build a V1 tree" % V2_MIN_TORCH)


def _check_nccl(obs, failures):
    """NCCL for V2 (it builds against NCCL Gin)."""
    generation = obs.get("generation")
    if generation == "v2":
        nccl_version = obs.get("nccl_version")
        where = obs.get("nccl_source") or "nccl_root / the pip nvidia-nccl package"
        if not nccl_version:
            _fail(failures, "nccl_missing",
                  "DeepEP V2 builds against NCCL >= %s, but no NCCL was found (%s)" % (V2_MIN_NCCL, where),
                  "pip install 'nvidia-nccl-cu13>=%s' --no-deps into the torch environment, or build NCCL "
                  ">= %s from source and set nccl_root to it" % (V2_MIN_NCCL, V2_MIN_NCCL))
        elif _v(nccl_version) is None or not at_least(nccl_version, V2_MIN_NCCL):
            _fail(failures, "nccl_too_old",
                  "DeepEP V2 needs NCCL >= %s at build time; found NCCL %s at %s (it would fail to compile: "
                  "ncclCommProperties, ncclGetLsaDevicePointer undefined; DeepEP #710)"
                  % (V2_MIN_NCCL, nccl_version, where),
                  "pin NCCL >= %s in the torch environment (pip install 'nvidia-nccl-cu13>=%s' --no-deps, "
                  "or an NCCL >= %s source build that replaces the pip package's files) and set nccl_root "
                  "to it; V2 refuses a second NCCL copy loaded beside torch's" % (V2_MIN_NCCL, V2_MIN_NCCL,
                                                                                  V2_MIN_NCCL))


def _check_nvshmem(obs, failures, warnings):
    """The NVSHMEM the build uses: present where given, needed by V2 and by internode, with IBGDA for internode."""
    generation = obs.get("generation")
    sm90_off = bool(obs.get("disable_sm90_features"))
    nvshmem_root = obs.get("nvshmem_root")
    nvshmem_used = nvshmem_root or (None if sm90_off else obs.get("nvshmem_pip_dir"))
    if nvshmem_root and not obs.get("nvshmem_exists"):
        _fail(failures, "nvshmem_root_missing",
              "nvshmem_root %s does not hold an NVSHMEM install (no include/ and lib/libnvshmem_host.so*)"
              % nvshmem_root,
              "build NVSHMEM first (gpufleet.deepep.nvshmem_build, role nvshmem) or fix nvshmem_root")
    elif not nvshmem_used and not sm90_off:
        if generation == "v2":
            _fail(failures, "nvshmem_missing",
                  "DeepEP V2 still needs NVSHMEM (EP_NVSHMEM_ROOT_DIR), and none was found",
                  "set nvshmem_root to an NVSHMEM build (role nvshmem) or pip install nvidia-nvshmem-cu13")
        elif obs.get("internode"):
            _fail(failures, "nvshmem_missing",
                  "internode is wanted but no NVSHMEM was found: DeepEP V1 would build without internode and "
                  "low-latency kernels", "set nvshmem_root to an NVSHMEM build with IBGDA (role nvshmem)")
        else:
            warnings.append("no NVSHMEM: DeepEP V1 builds intranode kernels only")
    if obs.get("internode") and nvshmem_used and obs.get("nvshmem_ibgda") is False:
        _fail(failures, "nvshmem_no_ibgda",
              "internode is wanted but the NVSHMEM at %s has no IBGDA support; internode dispatch would time out "
              "('timeout (dispatch CPU)', runbook 001 problem 8)" % nvshmem_used,
              "build NVSHMEM with IBGDA (gpufleet.deepep.nvshmem_build ibgda: true) and set nvshmem_root to it "
              "(not torch's bundled NVSHMEM)")


def _check_blackwell_suffix(obs, arch_list, warnings):
    """DeepEP #576 (thread only, ``_catalogue.BREAKAGES['v1_blackwell_arch_suffix']``): a V1 build for ``10.0a``
    failed at its first layout kernel where ``10.0`` worked; warned, not refused (no source explains it)."""
    if obs.get("generation") != "v1" or not arch_list:
        return
    try:
        suffixed = [a["arch"] for a in parse_arch_list(arch_list) if a["major"] == 10 and a["suffix"]]
    except ArchError:
        return
    if suffixed:
        warnings.append("arch list %s builds DeepEP V1 for %s: DeepEP #576 reports V1 built for 10.0a failing at its "
                        "first layout kernel ('unknown error', layout.cu:138) where 10.0 worked (thread only); "
                        "build for %s instead" % (arch_list, ", ".join(suffixed),
                                                  ", ".join(a[:-1] for a in suffixed)))


def _check_rc_layout(obs, failures, warnings):
    """The tree's indexing of NVSHMEM's IBGDA RC QPs against the NVSHMEM the build uses (``_comm/rc_layout``): a V1
    build for across nodes fails; a V2 build (its legacy IBGDA kernels; V2 crosses nodes over NCCL GIN) or an
    intranode-only one is warned."""
    record = obs.get("rc_record")
    if not isinstance(record, dict) or obs.get("disable_sm90_features"):
        return
    if not (obs.get("nvshmem_root") or obs.get("nvshmem_pip_dir")):
        return
    check = rc_layout_check(record.get("tree"), obs.get("nvshmem_version"), recorded=True)
    if check["status"] != "fail":
        return
    if obs.get("generation") == "v1" and obs.get("internode"):
        _fail(failures, "nvshmem_rc_layout", check["reason"], check["fix"])
    else:
        warnings.append("%s; only runs across nodes index them (this build: %s%s). Fix: %s" % (
            check["reason"], obs.get("generation"), ", internode" if obs.get("internode") else ", intranode only",
            check["fix"]))


def deepep_preflight(obs):
    """Decide whether a DeepEP build can start, from what the module observed.

    ``obs`` keys (missing ones count as unknown/None): ``generation`` (v1/v2), ``arch_list`` (the
    TORCH_CUDA_ARCH_LIST to build, may be None), ``gpu_arch_list`` (the GPUs' archs), ``cuda_home``,
    ``cuda_version``, ``cccl_dir`` and ``cccl_exists``, ``torch_version``, ``torch_error``,
    ``nccl_version``, ``nccl_source`` (where it was read), ``nvshmem_root`` (the NVSHMEM that will be
    used: given or pip), ``nvshmem_exists``, ``nvshmem_ibgda`` (True/False/None), ``nvshmem_pip_dir``,
    ``internode`` (bool), ``disable_sm90_features`` (bool), ``disable_aggressive_ptx`` (None/True/False),
    ``cxx`` (the C++ compiler of the build), ``cxx_libstdcxx_so`` (its ``-print-file-name=libstdc++.so``),
    ``cxx_libstdcxx_shared`` (True/False/None: that file exists), ``runtime_libstdcxx`` (the libstdc++.so.6 the
    interpreter loads), ``libstdcxx_link_dir`` (where the module may put a ``libstdc++.so`` link to it),
    ``rc_record`` (``{'tree': rc_layout.tree_rc_layout()}`` of the tree or the wheel's record, None when unread) and
    ``nvshmem_version`` (of the NVSHMEM the build uses).

    Returns ``{'ok', 'failures', 'automatic', 'warnings', 'arch_list'}``: every failed requirement at
    once (``check``, ``message``, ``fix``); the fixes the module applies itself (``check``, ``message``,
    ``env``); and the normalized arch list (None when it is unusable).
    """
    failures = []
    automatic = []
    warnings = []
    arch_list = _check_arch_list(obs, failures)
    _check_arch_covers_gpus(obs, arch_list, failures, warnings)
    _check_blackwell_suffix(obs, arch_list, warnings)
    _check_sm90_features(obs, arch_list, failures)
    _check_aggressive_ptx(obs, arch_list, failures, automatic)
    _check_cuda(obs, failures, automatic, warnings)
    _check_libstdcxx(obs, failures, automatic)
    _check_torch(obs, failures)
    _check_nccl(obs, failures)
    _check_nvshmem(obs, failures, warnings)
    _check_rc_layout(obs, failures, warnings)
    return {
        "ok": not failures,
        "failures": failures,
        "automatic": automatic,
        "warnings": warnings,
        "arch_list": arch_list,
    }


def _prepend(value, existing, sep=":"):
    if not existing:
        return value
    parts = existing.split(sep)
    if value in parts:
        return existing
    return sep.join([value] + parts)


def deepep_build_env(generation, arch_list, cuda_home, nvshmem_root=None, nccl_root=None, jobs=None,
                     automatic=None, disable_sm90_features=False, base_env=None):
    """The environment of ``python setup.py bdist_wheel`` for DeepEP ``generation``.

    TORCH_CUDA_ARCH_LIST, CUDA_HOME, PATH with ``<cuda_home>/bin``, LIBRARY_PATH with the CUDA stubs,
    NVSHMEM_DIR (V1) or EP_NVSHMEM_ROOT_DIR (V2), EP_NCCL_ROOT_DIR (V2), MAX_JOBS, plus the automatic
    fixes of the preflight (CPATH/NVCC_APPEND_FLAGS for cccl, DISABLE_AGGRESSIVE_PTX_INSTRS). Only the
    variables to set are returned; ``base_env`` supplies what they extend (PATH, CPATH, ...).
    """
    base = dict(base_env or {})
    env = {
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "CUDA_HOME": cuda_home,
        "PATH": _prepend(os.path.join(cuda_home, "bin"), base.get("PATH", "/usr/bin:/bin")),
        "LIBRARY_PATH": _prepend(os.path.join(cuda_home, "lib64", "stubs"), base.get("LIBRARY_PATH", "")),
    }
    if jobs:
        env["MAX_JOBS"] = str(int(jobs))
    if disable_sm90_features:
        env["DISABLE_SM90_FEATURES"] = "1"
    if nvshmem_root:
        if generation == "v2":
            env["EP_NVSHMEM_ROOT_DIR"] = nvshmem_root
        else:
            env["NVSHMEM_DIR"] = nvshmem_root
    if generation == "v2" and nccl_root:
        env["EP_NCCL_ROOT_DIR"] = nccl_root
    for fix in automatic or []:
        for name, value in fix.get("env", {}).items():
            if name == "CPATH":
                env["CPATH"] = _prepend(value, base.get("CPATH", ""))
            elif name == "LDFLAGS":
                existing = base.get("LDFLAGS", "")
                env[name] = existing if value in existing.split() else (value + " " + existing).strip()
            elif name == "NVCC_APPEND_FLAGS":
                existing = base.get("NVCC_APPEND_FLAGS", "")
                env[name] = existing if value in existing.split() else (existing + " " + value).strip()
            else:
                env[name] = value
    return env
