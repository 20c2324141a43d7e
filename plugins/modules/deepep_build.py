#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_build
short_description: Build DeepEP (V1 or V2) into a keyed wheel, install it, and check the import
version_added: 0.1.0
description:
  - Runs a preflight before any compile, in check mode too, and reports every failed requirement at once, each
    with its fix. DeepEP V2 needs NCCL >= 2.30.4 at build time (read from C(<nccl_root>/include/nccl.h) or the
    pip C(nvidia-nccl-*) package), PyTorch >= 2.10 and NVSHMEM. CUDA >= 13 needs C(<cuda_home>/include/cccl) on
    the include path of g++ and nvcc (the module adds it to C(CPATH) and C(NVCC_APPEND_FLAGS) itself; a missing
    directory is an error). C(DISABLE_AGGRESSIVE_PTX_INSTRS=1) is set for any arch list but C(9.0). The arch list
    must cover the node's GPUs. Internode builds need an NVSHMEM with IBGDA (runbook 001 problem 8).
    C(DISABLE_SM90_FEATURES) (A100) requires NVSHMEM disabled.
  - The C++ compiler that links the extension (C($CXX), else the interpreter's configured C(CXX)) must find a shared
    libstdc++ (C(-print-file-name=libstdc++.so) an existing file). Where its link is dangling, the linker silently takes
    C(libstdc++.a), and the extension then carries a private libstdc++ whose C(std::locale) facets are not the process's,
    and the first C(std::regex) it compiles crashes (DeepEP V2's JIT, at the first dispatch; seen on a 4 x H200
    node). The module then links the libstdc++.so.6 the interpreter loads through a private
    C(<artifact_dir>/.toolchain/libstdcxx-*/libstdc++.so) link (C(LDFLAGS=-L...); the key records it), and refuses
    when that library cannot be read. After a build, the build record (C(build.json)) holds the linkage record
    (C(linkage), schema 1, see RV(linkage)), so it travels with the wheel through the artifact store; a V2 extension
    with a static libstdc++ is refused before it is installed, a V1 one is warned about.
  - The build key covers the source revision (git C(HEAD), else a hash of the tree), the generation, the arch
    list, the torch, CUDA, NVSHMEM and NCCL versions, the NVSHMEM and NCCL roots and the Python ABI. A changed
    torch changes the key, so the next run rebuilds.
  - A build runs C(python setup.py bdist_wheel) in a copy of the tree with the right environment
    (C(TORCH_CUDA_ARCH_LIST), C(NVSHMEM_DIR) or C(EP_NVSHMEM_ROOT_DIR), C(EP_NCCL_ROOT_DIR), C(CPATH),
    C(NVCC_APPEND_FLAGS), C(DISABLE_AGGRESSIVE_PTX_INSTRS), C(MAX_JOBS), C(LIBRARY_PATH) with the CUDA stubs), and
    keeps the wheel in C(<artifact_dir>/<key>/) with its build record and log. A wheel already there for the key
    (for example copied from the fleet's artifact store) is installed without building.
  - The wheel is installed as one transaction. C(pip install --no-deps --no-index --target) unpacks it into a
    directory beside the site-packages (the installed DeepEP is untouched), then a journal is written, the previous
    DeepEP's files (from its C(RECORD)) are renamed aside and the new ones renamed in, and C(import deep_ep) is
    checked in a fresh process (with O(env_script) sourced when given). If the new install does not import, the
    previous files are renamed back. A run killed during the install leaves the previous DeepEP in place (killed
    while pip ran) or a journal that the next run rolls back before anything else (killed during the renames).
    A failed import of the installed DeepEP after a torch change is reported as an ABI mismatch, and the rebuild
    is the fix.
  - A wheel with a build record (C(build.json) beside it, built here or copied from the artifact store) is checked
    against the record's C(wheel_sha256) before it is installed; a truncated or altered wheel is refused, named.
  - Builds and installs of one O(artifact_dir) hold the lock C(.<name>.lock) beside it (fcntl; by default
    C(/opt/deepep/artifacts/.deepep.lock)). A second run waits for the first (O(lock_timeout)), then plans again,
    or refuses; it never removes the first run's staging directory.
    The artifact directory of a key is replaced atomically (an exchange, or rename aside then in), never deleted
    first. Check mode takes no lock.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
options:
  src:
    description:
      - DeepEP source tree on the target (the directory holding C(setup.py)). It is copied before building and never
        modified. Required unless O(wheel) is given.
    type: path
  generation:
    description:
      - DeepEP generation. C(auto) detects it from the tree, V2 from a 2.x C(__version__) in C(deep_ep/__init__.py),
        a C(tests/elastic) directory or C(EP_NCCL_ROOT_DIR) in C(setup.py); V1 from a 1.x C(setup.py) version.
      - An explicit value that contradicts the tree is an error.
    type: str
    choices: [auto, v1, v2]
    default: auto
  python:
    description: The interpreter that has torch; it builds and installs DeepEP.
    type: path
    default: /usr/bin/python3
  arch_list:
    description:
      - TORCH_CUDA_ARCH_LIST, e.g. C(9.0) (H100/H200), C(10.0) (B200), C(9.0;10.0), C(9.0a), C(10.0+PTX).
      - Defaults to O(gpu_arch_list). A malformed value (C(10,0)) is named in the error.
    type: str
  gpu_arch_list:
    description:
      - The archs of the node's GPUs (C(ansible_facts.gpufleet_gpus.cuda_arch_list)), a list or a C(;)-separated string.
        Used as default for O(arch_list) and to check that O(arch_list) covers the GPUs.
      - When it is the arch list (O(arch_list) unset), a malformed value is refused naming O(gpu_arch_list).
    type: raw
  nvshmem_root:
    description:
      - NVSHMEM install to build against (C(NVSHMEM_DIR) for V1, C(EP_NVSHMEM_ROOT_DIR) for V2), e.g. the prefix of
        M(gpufleet.deepep.nvshmem_build). Unset, DeepEP's own fallback (the pip C(nvidia-nvshmem) package) is used.
    type: path
  nccl_root:
    description:
      - NCCL root for V2 (C(EP_NCCL_ROOT_DIR)); its C(include/nccl.h) gives the version. Unset, the pip
        C(nvidia-nccl-*) package of O(python) is used.
    type: path
  cuda_home:
    description: CUDA toolkit root.
    type: path
    default: /usr/local/cuda
  artifact_dir:
    description: Where built wheels are kept, one directory per build key (C(<artifact_dir>/<key>/)).
    type: path
    default: /opt/deepep/artifacts/deepep
  wheel:
    description:
      - Install this prebuilt wheel instead of building. Its build record (C(build.json) beside it, as written
        into O(artifact_dir)) gives the key when present.
    type: path
  jobs:
    description: C(MAX_JOBS) for the build. Defaults to the number of CPUs of the target.
    type: int
  env_script:
    description: Shell script sourced before the import check (the environment DeepEP runs with).
    type: path
  internode:
    description: Whether internode/low-latency kernels are wanted; then NVSHMEM with IBGDA is required.
    type: bool
    default: false
  disable_sm90_features:
    description: Build with C(DISABLE_SM90_FEATURES=1) (A100). Requires that no NVSHMEM is used (V1 only).
    type: bool
    default: false
  disable_aggressive_ptx:
    description:
      - C(DISABLE_AGGRESSIVE_PTX_INSTRS). Unset, DeepEP's rule applies (on, except for an arch list of exactly C(9.0)
        where DeepEP's own default is used). C(false) with any arch list but C(9.0) fails the preflight.
    type: bool
  install:
    description: Install the wheel into O(python). C(false) only builds (or finds) the wheel in O(artifact_dir).
    type: bool
    default: true
  log_lines:
    description: How many lines of the build log a failure reports.
    type: int
    default: 60
  import_check:
    description:
      - When to import the installed DeepEP in O(python) (after O(env_script)) to prove that it loads.
      - C(changed) skips the import when the installed stamp has the planned key and the extension is the one the
        stamp records (sha256) - the same bytes, built against the same torch, CUDA, NVSHMEM and NCCL, that
        imported when they were installed - and imports in every other case; the facts then say C(import_ok) null
        and why in C(import_skipped). It saves a torch import (seconds of CPU) per node on every converge of an
        intact node. C(always) imports on every run.
      - A torch change is found either way - it changes the key, and the import that follows names the ABI
        mismatch.
    type: str
    choices: [always, changed]
    default: changed
  lock_timeout:
    description:
      - Seconds to wait for another build or install of the same O(artifact_dir) on this node (its lock
        C(.<name>.lock) beside it) before refusing. C(0) refuses at once.
    type: int
    default: 3600
notes:
  - The stamp C(.gpufleet-build.json) is written into the installed C(deep_ep) package directory.
  - To group hosts by build key before building (build once, distribute), run the module in check mode and read
    RV(key).
  - Check mode refuses what the real run would refuse before building or installing - a prebuilt wheel that does
    not match its build record, a site-packages of O(python) that is not writable (with O(install)) - with the same
    message, instead of reporting RV(would_build) or RV(would_install).
seealso:
  - module: gpufleet.deepep.nvshmem_build
"""

EXAMPLES = r"""
- name: Build DeepEP V1 with PR 466 against the custom NVSHMEM, for B200
  gpufleet.deepep.deepep_build:
    src: /opt/deepep/src/DeepEP
    python: /opt/torch/.venv/bin/python
    arch_list: "10.0"
    nvshmem_root: /opt/deepep/nvshmem
    internode: true
    env_script: /opt/deepep/unified-env.sh

- name: Build for the GPUs the node has (arch list from the gpu_topology facts)
  gpufleet.deepep.deepep_build:
    src: /opt/deepep/src/DeepEP
    python: /opt/torch/.venv/bin/python
    gpu_arch_list: "{{ ansible_facts.gpufleet_gpus.cuda_arch_list }}"
    nvshmem_root: /opt/deepep/nvshmem

- name: Which key would this host build? (groups hosts for build-once)
  gpufleet.deepep.deepep_build:
    src: /opt/deepep/src/DeepEP
    python: /opt/torch/.venv/bin/python
    arch_list: "9.0"
  check_mode: true
  register: deepep_plan

- name: Install the wheel another host built
  gpufleet.deepep.deepep_build:
    wheel: /opt/deepep/artifacts/deepep/{{ deepep_plan.key }}/deep_ep-1.2.1-cp312-cp312-linux_x86_64.whl
    python: /opt/torch/.venv/bin/python
    arch_list: "9.0"
"""

RETURN = r"""
key:
  description: Build key of the requested build.
  returned: when the preflight passed
  type: str
  sample: 9d0f5c3e1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d
inputs:
  description: The inputs the key was computed over.
  returned: when the preflight passed
  type: dict
  sample: {"generation": "v1", "arch_list": "9.0", "torch": "2.11.0+cu130"}
generation:
  description: The DeepEP generation built (C(v1) or C(v2)).
  returned: always
  type: str
  sample: v1
generation_reason:
  description: Why that generation was chosen.
  returned: always
  type: str
  sample: setup.py declares version 1.2.1
preflight:
  description: The preflight's result.
  returned: always
  type: dict
  contains:
    ok:
      description: Whether every requirement holds.
      type: bool
    failures:
      description: Every failed requirement, each with C(check), C(message) and C(fix).
      type: list
      elements: dict
    automatic:
      description: Fixes the module applies itself (C(check), C(message), C(env)).
      type: list
      elements: dict
    warnings:
      description: Notes that do not stop the build.
      type: list
      elements: str
    arch_list:
      description: The normalized arch list.
      type: str
  sample: {"ok": false, "failures": [{"check": "nccl_too_old", "message": "...", "fix": "..."}],
           "automatic": [], "warnings": [], "arch_list": "9.0"}
would_build:
  description: Whether a compile is (or would be) needed (no wheel for the key in O(artifact_dir)).
  returned: always
  type: bool
  sample: false
would_install:
  description: Whether the wheel is (or would be) installed (the installed DeepEP is not this key, or does not import).
  returned: always
  type: bool
  sample: true
built:
  description: Whether this run compiled DeepEP.
  returned: always
  type: bool
  sample: true
installed:
  description: Whether this run installed a wheel.
  returned: always
  type: bool
  sample: true
wheel:
  description:
    - The wheel for the key (in O(artifact_dir), or O(wheel)); null when there is none yet.
    - In check mode, the wheel the plan found for the key (built here, or copied from the artifact store), or the
      installed one when it is up to date. The build_once role publishes and installs by this path, so no task reads
      the wheel's name from C(build.json).
  returned: always
  type: str
  sample: /opt/deepep/artifacts/deepep/9d0f.../deep_ep-1.2.1-cp311-cp311-linux_x86_64.whl
linkage:
  description:
    - The linkage record of the wheel built in this run (also kept in its build record C(build.json) under
      C(linkage), so it travels with the wheel); null when nothing was built.
    - C(schema) (1) and C(artifact) (C(deepep)).
    - C(objects), one per shared object in the wheel - C(path) (in the wheel), C(needed), C(runpath), C(rpath),
      C(soname) (the dynamic section), C(libstdcxx) (C(shared), C(static) or C(none)), C(sass) and C(ptx) (the
      embedded archs, C(sm_90) etc., from C(<cuda_home>/bin/cuobjdump --list-elf/--list-ptx), else from the
      C(.nv_fatbin) section's entry headers; null where neither can tell, never a guess).
    - C(torch) - C(version), C(cxx11_abi) (read from the extension - an undefined symbol with C(__cxx11) means 1 -
      null where it cannot tell) and C(cuda) (from C(torch/version.py); torch is not imported).
    - C(cuda) (nvcc of O(cuda_home)), C(compiler) (C(cxx) and the first line of its C(--version)).
    - C(nccl) (V2, or an extension that needs C(libnccl.so)) - C(header_version), C(root) and C(library) (the real
      path of the C(libnccl.so.2) the RUNPATH resolves on the build node, or null).
    - C(nvshmem) (an extension that needs C(libnvshmem_host.so)) - C(host_version), C(host_library) (resolved as
      for NCCL), C(device_version) and C(device_library) (the C(libnvshmem_device.a) of the NVSHMEM root, linked
      statically into the extension).
    - C(baked_env) - the persistent envs DeepEP baked into C(deep_ep/envs.py) (V2), or null; C(warnings).
  returned: always
  type: dict
  sample:
    schema: 1
    artifact: deepep
    objects:
      - path: deep_ep/_C.cpython-312-x86_64-linux-gnu.so
        needed: [libc10.so, libtorch.so, libcudart.so.13, libnvshmem_host.so.3, libnccl.so.2, libc.so.6]
        runpath: [/opt/deepep/nvshmem/lib, /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib]
        rpath: []
        soname: null
        libstdcxx: shared
        sass: [sm_90]
        ptx: []
    torch: {version: 2.11.0+cu130, cxx11_abi: true, cuda: "13.0"}
    cuda: 13.0.88
    compiler: {cxx: g++, version: g++ (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0}
    nccl: {header_version: 2.30.7, root: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl,
           library: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2.30.7}
    nvshmem: {host_version: 3.4.5, host_library: /opt/deepep/nvshmem/lib/libnvshmem_host.so.3.4.5,
              device_version: 3.4.5, device_library: /opt/deepep/nvshmem/lib/libnvshmem_device.a}
    baked_env: {EP_NCCL_ROOT_DIR: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
    warnings: []
build_env:
  description: The environment variables the build sets.
  returned: when the preflight passed
  type: dict
  sample: {"TORCH_CUDA_ARCH_LIST": "9.0", "NVSHMEM_DIR": "/opt/deepep/nvshmem"}
abi_mismatch:
  description: Set when the installed DeepEP fails to import after a torch change (what was seen and the fix).
  returned: when detected
  type: dict
  sample: {"built_torch": "2.9.1+cu129", "torch": "2.11.0+cu130", "error": "ImportError: ... undefined symbol ...",
           "fix": "rebuild DeepEP against the installed torch (this module does so: the key changed)"}
reason:
  description: Why the module built, installed, or did nothing.
  returned: always
  type: str
  sample: installed DeepEP has key 9d0f5c3e and imports
commands:
  description: The commands run (argv lists).
  returned: always
  type: list
  elements: list
log:
  description: Build log path (kept in the artifact directory), or null.
  returned: always
  type: str
  sample: /opt/deepep/artifacts/deepep/9d0f.../build.log
log_tail:
  description: Last lines of the build log on a failed build.
  returned: failure
  type: list
  elements: str
rc:
  description: Exit status of the failed command.
  returned: failure
  type: int
  sample: 1
cmd:
  description: The failed command.
  returned: failure
  type: list
  elements: str
rolled_back:
  description: Whether the previous install was put back after the new one failed its install or import check.
  returned: failure
  type: bool
  sample: true
recovered:
  description: What an interrupted earlier install left that this run rolled back (or would, in check mode), or null.
  returned: always
  type: str
  sample: "rolled back an interrupted install of deep_ep in /opt/torch/.venv/lib/python3.12/site-packages
    (restored: deep_ep, deep_ep-1.2.1.dist-info)"
diff:
  description: Before and after build stamp of the installed DeepEP (diff mode).
  returned: when diff mode is on and an install is (or would be) needed
  type: dict
  sample: {"before": "{}\n", "after": "{\"key\": \"...\"}\n"}
ansible_facts:
  description: Facts about DeepEP in O(python).
  returned: always
  type: dict
  contains:
    gpufleet_deepep:
      description: The installed DeepEP after this run (predicted in check mode).
      type: dict
      contains:
        installed:
          description: Whether a DeepEP is installed in O(python).
          type: bool
          sample: true
        version:
          description: Installed DeepEP version (package metadata).
          type: str
          sample: 1.2.1
        generation:
          description: C(v1) or C(v2).
          type: str
          sample: v1
        key:
          description: Build key of the installed DeepEP (from its stamp), or null.
          type: str
          sample: 9d0f5c3e1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d
        built_against:
          description: What the installed build was built against (C(torch), C(cuda), C(nvshmem), C(nccl), C(arch_list)).
          type: dict
          sample: {"torch": "2.11.0+cu130", "cuda": "13.0.88", "nvshmem": "3.4.5", "nccl": "2.28.9", "arch_list": "9.0"}
        wheel:
          description: The wheel the install came from.
          type: str
          sample: /opt/deepep/artifacts/deepep/9d0f.../deep_ep-1.2.1-cp311-cp311-linux_x86_64.whl
        import_ok:
          description:
            - Whether C(import deep_ep) works in a fresh process (with O(env_script) sourced); null when the import
              was skipped (O(import_check=changed) and the installed build is the planned one, see C(import_skipped)).
          type: bool
          sample: true
        import_error:
          description: The import error, or null.
          type: str
          sample: null
        import_skipped:
          description: Why the import was not repeated this run, or null when it ran.
          type: str
          sample: null
        hca_mapping_support:
          description: Whether DeepEP carries the GPU-NIC mapping of PR 466 (C(_setup_device_hca_mapping)).
          type: bool
          sample: true
        nvshmem_rc_layout:
          description:
            - How the build's tree indexes NVSHMEM's IBGDA RC queue pairs, read from the tree (or the wheel's record)
              and kept in the build stamp; null for a build made before the collection read it.
            - C(tree) is null for a tree without IBGDA device code; else C(fix) (C(#564) in a V1 tree, C(#696) in V2's
              legacy kernels, null for neither, whose PE-major indexing NVSHMEM 3.5.19 and later no longer match),
              C(selects) (how a fixed tree picks the layout), C(runtime_check) (PR 696's check of the loaded
              NVSHMEM) and C(file) (the file read).
            - C(compiled) is the layout built in (C(pe_major) or C(qp_major)), from the tree and the NVSHMEM version
              the build used. The audit's C(DEEPEP_NVSHMEM_RC_LAYOUT) holds it against the NVSHMEM the node loads.
          type: dict
          sample: {tree: {fix: "#564", selects: state_type, runtime_check: false, file: csrc/kernels/ibgda_device.cuh},
                   compiled: pe_major}
        location:
          description: Directory of the installed C(deep_ep) package.
          type: str
          sample: /opt/torch/.venv/lib/python3.12/site-packages/deep_ep
        python:
          description: The interpreter.
          type: str
          sample: /opt/torch/.venv/bin/python
reboot_required:
  description: Always false; DeepEP builds never need a reboot.
  returned: always
  type: bool
  sample: false
"""

import glob
import hashlib
import json
import os
import shutil
import zipfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import ArchError
from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import (
    build_key,
    BuildError,
    short_key,
    source_identity,
    STAMP_NAME,
    write_stamp,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.deepep import (
    deepep_build_env,
    deepep_preflight,
    deepep_version_from_tree,
    detect_deepep_generation,
    has_hca_mapping_support,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import ElfError, is_elf
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    file_sha256,
    read_json_dict as _read_json,
    read_text as _read,
    write_json_file,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem import parse_nvshmem_info
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.rc_layout import (
    TREE_FILES,
    compiled_rc_layout,
    tree_rc_layout,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._devicecode import embedded_archs, fatbin_archs
from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import undefined_symbols
from ansible_collections.gpufleet.deepep.plugins.module_utils._linkage import (
    baked_env_from_text,
    compiler_from_version_output,
    cxx11_abi,
    linkage_record,
    LinkageError,
    object_record,
    resolve_needed,
    torch_cuda_from_version_py,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import (
    CommandLog, Failed, finish, log_tail, now, StepFailed,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._swap import build_lock, replace_tree
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    cuda_version_from_nvcc,
    nccl_version_from_header_file,
    nccl_version_from_pip,
    nvshmem_version_from_header,
    pip_package_version,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.wheel import (
    journal_path,
    recover as recover_install,
    stale_stages,
    WheelInstall,
)

NVSHMEM_PIP_PROJECTS = ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12", "nvidia-nvshmem")

# Runs in the target interpreter: where things are, without importing torch or deep_ep.
PROBE = r"""
import glob, importlib.util, json, os, sys, sysconfig
out = {"python_version": "%d.%d.%d" % sys.version_info[:3], "soabi": sysconfig.get_config_var("SOABI"),
       "purelib": sysconfig.get_paths().get("purelib"),
       "site": sorted(set(p for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib"))
                          if p) | set(p for p in sys.path if p.endswith("-packages")))}
try:
    from importlib import metadata
except ImportError:
    metadata = None
def version(name):
    try:
        return metadata.version(name) if metadata else None
    except Exception:
        return None
out["torch_version"] = version("torch")
out["torch_error"] = None
if out["torch_version"] is None:
    try:
        spec = importlib.util.find_spec("torch")
        out["torch_error"] = "torch is not installed" if spec is None else "torch has no package metadata"
    except Exception as exc:
        out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
out["deep_ep_version"] = version("deep_ep")
def pkg_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]
out["deep_ep_dir"] = pkg_dir("deep_ep")
try:
    spec = importlib.util.find_spec("deep_ep_cpp")
    out["deep_ep_cpp"] = spec.origin if spec else None
except Exception:
    out["deep_ep_cpp"] = None
out["deep_ep_c"] = None
if out["deep_ep_dir"]:
    found = sorted(glob.glob(os.path.join(out["deep_ep_dir"], "_C*.so")))
    out["deep_ep_c"] = found[0] if found else None
try:
    importlib.util.find_spec("nvidia")
    out["nvshmem_pip_dir"] = pkg_dir("nvidia.nvshmem")
    out["nccl_pip_dir"] = pkg_dir("nvidia.nccl")
except Exception:
    out["nvshmem_pip_dir"] = None
    out["nccl_pip_dir"] = None
# setuptools links a C++ extension with $CXX, else the interpreter's configured CXX.
out["cxx"] = (os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++").split()[0]
# torch.version.cuda for the linkage record, read from torch/version.py (torch is not imported).
out["torch_version_py"] = None
try:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) as handle:
            out["torch_version_py"] = handle.read(20000)
except Exception:
    pass
out["libstdcxx"] = None
try:
    import ctypes
    ctypes.CDLL("libstdc++.so.6")
    with open("/proc/self/maps") as maps:
        out["libstdcxx"] = next((line.split()[-1] for line in maps if "/libstdc++.so" in line), None)
except Exception:
    pass
print(json.dumps(out))
"""

IMPORT_CHECK = r"""
import json
try:
    import deep_ep
    out = {"ok": True, "file": deep_ep.__file__}
except BaseException as exc:
    out = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
print("GPUFLEET-IMPORT " + json.dumps(out))
"""


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            src=dict(type="path"),
            generation=dict(type="str", default="auto", choices=["auto", "v1", "v2"]),
            python=dict(type="path", default="/usr/bin/python3"),
            arch_list=dict(type="str"),
            gpu_arch_list=dict(type="raw"),
            nvshmem_root=dict(type="path"),
            nccl_root=dict(type="path"),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            artifact_dir=dict(type="path", default="/opt/deepep/artifacts/deepep"),
            wheel=dict(type="path"),
            jobs=dict(type="int"),
            env_script=dict(type="path"),
            internode=dict(type="bool", default=False),
            disable_sm90_features=dict(type="bool", default=False),
            disable_aggressive_ptx=dict(type="bool"),
            install=dict(type="bool", default=True),
            log_lines=dict(type="int", default=60),
            lock_timeout=dict(type="int", default=3600),
            import_check=dict(type="str", default="changed", choices=["always", "changed"]),
        ),
        required_one_of=[("src", "wheel")],
        supports_check_mode=True,
    )


class Builder(CommandLog):
    def __init__(self, module):
        CommandLog.__init__(self)
        self.module = module
        self.p = module.params

    # --- observations -----------------------------------------------------------------------

    def probe(self):
        python = self.p["python"]
        if not os.access(python, os.X_OK):
            raise StepFailed("python %s is not an executable interpreter (set python to the one that has torch)"
                             % python)
        rc, out, err = self.run([python, "-c", PROBE], check=False, record=False)
        if rc != 0:
            raise StepFailed("cannot probe %s: %s" % (python, (err or out).strip()[-500:]), rc=rc)
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise StepFailed("cannot read the probe output of %s: %s" % (python, out[-500:]))

    def ask_cxx(self, cxx, flag):
        """The output of ``cxx flag`` (the compiler found on PATH when not absolute), or None when it is missing or
        fails."""
        path = cxx if os.path.isabs(cxx) else self.module.get_bin_path(cxx)
        if not path:
            return None
        rc, out, err = self.run([path, flag], check=False, record=False, timeout=120)
        return out if rc == 0 else None

    def cxx_libstdcxx(self, cxx):
        """``(printed, shared)``: what ``cxx -print-file-name=libstdc++.so`` prints and whether that file exists
        (a dangling link or the bare name means the link falls back to libstdc++.a); ``(None, None)`` unknown."""
        printed = (self.ask_cxx(cxx, "-print-file-name=libstdc++.so") or "").strip()
        if not printed:
            return None, None
        return printed, os.path.isabs(printed) and os.path.exists(printed)

    def cxx_version(self, cxx):
        """The first line of ``cxx --version`` (for the linkage record), or None."""
        out = self.ask_cxx(cxx, "--version")
        return compiler_from_version_output(out) if out is not None else None

    def cuda_version(self):
        nvcc = os.path.join(self.p["cuda_home"], "bin", "nvcc")
        if not os.access(nvcc, os.X_OK):
            return None
        rc, out, err = self.run([nvcc, "--version"], check=False, record=False, timeout=120)
        return cuda_version_from_nvcc(out) if rc == 0 else None

    def nvshmem_info(self, root, pip_dir, site):
        """``{'root', 'exists', 'version', 'ibgda', 'source'}`` of the NVSHMEM the build will use."""
        if root:
            lib = os.path.join(root, "lib")
            exists = os.path.isdir(os.path.join(root, "include")) and bool(
                glob.glob(os.path.join(lib, "libnvshmem_host.so*")))
            version = nvshmem_version_from_header(_read(os.path.join(root, "include", "nvshmem_version.h")))
            ibgda = None
            info_bin = os.path.join(root, "bin", "nvshmem-info")
            if os.access(info_bin, os.X_OK):
                rc, out, err = self.run([info_bin, "-a"], env={"LD_LIBRARY_PATH": lib}, check=False, record=False)
                if rc == 0:
                    parsed = parse_nvshmem_info(out)
                    version = version or parsed["version"]
                    ibgda = parsed["ibgda"]
                    if ibgda and not glob.glob(os.path.join(lib, "nvshmem_transport_ibgda.so*")):
                        ibgda = False
            elif exists:
                ibgda = bool(glob.glob(os.path.join(lib, "nvshmem_transport_ibgda.so*")))
            return {"root": root, "exists": exists, "version": version, "ibgda": ibgda, "source": "nvshmem_root"}
        if pip_dir:
            version = None
            for project in NVSHMEM_PIP_PROJECTS:
                version = pip_package_version(site, project)
                if version:
                    break
            ibgda = bool(glob.glob(os.path.join(pip_dir, "lib", "nvshmem_transport_ibgda.so*")))
            return {"root": pip_dir, "exists": True, "version": version, "ibgda": ibgda, "source": "pip"}
        return {"root": None, "exists": False, "version": None, "ibgda": None, "source": None}

    def nccl_info(self, root, pip_dir, site):
        if root:
            return {"root": root, "version": nccl_version_from_header_file(root),
                    "source": "%s/include/nccl.h" % root}
        found = nccl_version_from_pip(site)
        if found:
            return {"root": pip_dir, "version": found["version"],
                    "source": "pip package %s (%s)" % (found["project"], pip_dir or found["site_packages"])}
        return {"root": None, "version": None, "source": None}

    def import_check(self):
        python = self.p["python"]
        if self.p["env_script"]:
            argv = ["/bin/bash", "-c", '. "$1" >/dev/null && shift && exec "$@"', "gpufleet-import",
                    self.p["env_script"], python, "-c", IMPORT_CHECK]
        else:
            argv = [python, "-c", IMPORT_CHECK]
        rc, out, err = self.run(argv, check=False, record=False)
        for line in reversed(out.splitlines()):
            if line.startswith("GPUFLEET-IMPORT "):
                try:
                    return json.loads(line[len("GPUFLEET-IMPORT "):])
                except ValueError:
                    break
        return {"ok": False, "error": ("rc=%d: %s" % (rc, (err or out).strip()[-800:])).strip()}


def _ext_path(probe):
    return probe.get("deep_ep_cpp") or probe.get("deep_ep_c")


def _facts(probe, stamp, import_result, generation, hca):
    stamp = stamp or {}
    installed = bool(probe.get("deep_ep_dir") or probe.get("deep_ep_cpp"))
    return {
        "installed": installed,
        "version": probe.get("deep_ep_version"),
        "generation": stamp.get("generation") or (generation if installed else None),
        "key": stamp.get("key"),
        "built_against": stamp.get("built_against") or {},
        "wheel": stamp.get("wheel"),
        "import_ok": None if (import_result or {}).get("skipped") else bool(import_result and import_result.get("ok")),
        "import_error": (import_result or {}).get("error"),
        "import_skipped": (import_result or {}).get("skipped"),
        "hca_mapping_support": hca,
        "nvshmem_rc_layout": stamp.get("nvshmem_rc_layout"),
        "location": probe.get("deep_ep_dir"),
        "python": probe.get("python"),
    }


def _installed_hca(probe):
    directory = probe.get("deep_ep_dir")
    if not directory:
        return False
    texts = [_read(os.path.join(directory, "buffer.py")) or "",
             _read(os.path.join(directory, "buffers", "legacy.py")) or ""]
    return any(has_hca_mapping_support(t) for t in texts)


def _find_artifact(artifact_dir, key):
    """The wheel kept for ``key`` when its record matches (sha256), else None."""
    directory = os.path.join(artifact_dir, key)
    record = _read_json(os.path.join(directory, "build.json"))
    if not record or record.get("key") != key or not record.get("wheel_name"):
        return None, None
    wheel = os.path.join(directory, record["wheel_name"])
    if not os.path.isfile(wheel) or file_sha256(wheel) != record.get("wheel_sha256"):
        return None, None
    return wheel, record


class DeepepBuild(object):
    """observe (the interpreter, the source's generation, the preflight, the key, the installed DeepEP), plan
    (nothing, install the key's wheel, or build it first), apply (build in staging, put the wheel in place, install it
    as one transaction); ``run`` returns the facts or raises Failed."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.builder = Builder(module)
        self.up_to_date = False
        self.wheel_checked = None
        self.rc_record = None  # {'tree': tree_rc_layout()} once the tree (or the wheel's record) was read
        self.result = {
            "changed": False, "built": False, "installed": False, "would_build": False, "would_install": False,
            "reboot_required": False, "generation": None, "generation_reason": None, "preflight": {},
            "wheel": None, "reason": "", "commands": self.builder.commands, "log": None, "recovered": None,
            "linkage": None,
        }

    # --- observe --------------------------------------------------------------------------------

    def check_params(self):
        p = self.p
        if p["jobs"] is not None and p["jobs"] < 1:
            raise Failed("jobs must be 1 or more, got %d" % p["jobs"])
        if p["lock_timeout"] < 0:
            raise Failed("lock_timeout must be 0 (refuse at once) or more seconds, got %d" % p["lock_timeout"])
        if p["src"] and not os.path.isfile(os.path.join(p["src"], "setup.py")):
            raise Failed("src %s is not a DeepEP source tree (no setup.py)" % p["src"])
        for name, form in (("wheel", "a DeepEP wheel file (deep_ep-<version>-<tags>.whl)"),
                           ("env_script", "an environment script file such as /opt/deepep/unified-env.sh")):
            path = p[name]
            if path and not os.path.isfile(path):
                what = "is a directory" if os.path.isdir(path) else "is not a regular file" \
                    if os.path.lexists(path) else "does not exist"
                raise Failed("%s %s %s; expected %s" % (name, path, what, form))

    def observe_python(self):
        p = self.p
        try:
            self.probe = self.builder.probe()
        except StepFailed as exc:
            raise Failed(exc.msg, rc=exc.rc)
        self.probe["python"] = p["python"]
        self.site = self.probe.get("site") or []
        self.wheel_record = _read_json(os.path.join(os.path.dirname(p["wheel"]), "build.json")) if p["wheel"] else None

    def observe_source(self):
        """The generation (from the tree, or the wheel and its record), PR 466 support and the source's version."""
        p, record = self.p, self.wheel_record or {}
        if p["src"]:
            setup_py = _read(os.path.join(p["src"], "setup.py"))
            init_py = _read(os.path.join(p["src"], "deep_ep", "__init__.py"))
            detected, why = detect_deepep_generation(setup_py, init_py,
                                                     os.path.isdir(os.path.join(p["src"], "tests", "elastic")))
            if p["generation"] != "auto" and detected and detected != p["generation"]:
                raise Failed("generation %s was asked for, but %s is a %s tree (%s)"
                             % (p["generation"], p["src"], detected, why))
            generation = detected if p["generation"] == "auto" else p["generation"]
            if generation is None:
                raise Failed("cannot tell the DeepEP generation of %s: %s; set generation: v1 or v2" % (p["src"], why))
            reason = why if p["generation"] == "auto" else "generation %s given" % p["generation"]
            self.hca = has_hca_mapping_support(_read(os.path.join(p["src"], "deep_ep", "buffer.py")) or "") or \
                has_hca_mapping_support(_read(os.path.join(p["src"], "deep_ep", "buffers", "legacy.py")) or "")
            self.src_version = deepep_version_from_tree(setup_py, init_py)
            self.rc_record = {"tree": tree_rc_layout(dict((key, _read(os.path.join(p["src"], rel)))
                                                          for key, rel in TREE_FILES.items()))}
        else:
            generation = record.get("generation") or (p["generation"] if p["generation"] != "auto" else None)
            if generation is None:
                name = os.path.basename(p["wheel"])
                generation = "v2" if name.startswith("deep_ep-2.") else "v1"
                reason = "wheel name %s" % name
            else:
                reason = "wheel build record" if self.wheel_record else "generation %s given" % generation
            self.hca = bool(record.get("hca_mapping_support"))
            self.src_version = record.get("version")
            recorded = record.get("nvshmem_rc_layout")
            self.rc_record = {"tree": recorded.get("tree")} if isinstance(recorded, dict) else None
        self.generation = generation
        self.result.update(generation=generation, generation_reason=reason)

    def check_preflight(self):
        """Every requirement of the build (or, for a prebuilt wheel, of what it runs against), all at once."""
        p, probe, builder = self.p, self.probe, self.builder
        cuda_home = p["cuda_home"]
        self.cuda_version = builder.cuda_version()
        cccl = os.path.join(cuda_home, "include", "cccl")
        self.nvshmem = builder.nvshmem_info(p["nvshmem_root"], probe.get("nvshmem_pip_dir"), self.site)
        self.nccl = builder.nccl_info(p["nccl_root"], probe.get("nccl_pip_dir"), self.site)
        self.cxx = cxx = probe.get("cxx") or "c++"
        cxx_so, cxx_shared = builder.cxx_libstdcxx(cxx) if p["src"] else (None, None)
        runtime = probe.get("libstdcxx")
        obs = {
            "generation": self.generation, "arch_list": p["arch_list"], "gpu_arch_list": p["gpu_arch_list"],
            "cuda_home": cuda_home, "cuda_version": self.cuda_version, "cccl_dir": cccl,
            "cccl_exists": os.path.isdir(cccl), "torch_version": probe.get("torch_version"),
            "torch_error": probe.get("torch_error"), "python": p["python"],
            "nccl_version": self.nccl["version"], "nccl_source": self.nccl["source"],
            "nvshmem_root": p["nvshmem_root"], "nvshmem_exists": self.nvshmem["exists"],
            "nvshmem_ibgda": self.nvshmem["ibgda"], "nvshmem_pip_dir": probe.get("nvshmem_pip_dir"),
            "internode": p["internode"], "disable_sm90_features": p["disable_sm90_features"],
            "disable_aggressive_ptx": p["disable_aggressive_ptx"],
            "rc_record": self.rc_record, "nvshmem_version": self.nvshmem["version"],
            "cxx": cxx, "cxx_libstdcxx_so": cxx_so, "cxx_libstdcxx_shared": cxx_shared, "runtime_libstdcxx": runtime,
            "libstdcxx_link_dir": os.path.join(p["artifact_dir"], ".toolchain", "libstdcxx-%s" % (
                hashlib.sha256(runtime.encode("utf-8")).hexdigest()[:12])) if runtime else None,
        }
        if p["wheel"]:
            # Installing a prebuilt wheel compiles nothing: only the checks that concern what it runs against count.
            obs["cuda_version"] = obs["cuda_version"] or (self.wheel_record or {}).get(
                "built_against", {}).get("cuda") or "unknown"
            obs["cccl_exists"] = True
        preflight = deepep_preflight(obs)
        if p["wheel"]:
            preflight["failures"] = [f for f in preflight["failures"]
                                     if f["check"] not in ("cccl_missing", "cuda_missing")]
            preflight["ok"] = not preflight["failures"]
        self.result["preflight"] = preflight
        if not preflight["ok"]:
            lines = ["- %s: %s. Fix: %s" % (f["check"], f["message"], f["fix"]) for f in preflight["failures"]]
            raise Failed("DeepEP %s preflight failed (%d requirement(s)); nothing was built:\n%s"
                         % (self.generation, len(lines), "\n".join(lines)))
        for warning in preflight["warnings"]:
            self.module.warn(warning)
        self.preflight = preflight
        self.arch_list = preflight["arch_list"]

    def observe_key(self):
        """The build environment, the inputs and the key (a prebuilt wheel's record gives its key)."""
        p, probe, nvshmem = self.p, self.probe, self.nvshmem
        try:
            if p["src"]:
                source = source_identity(self.builder.quiet, self.module.get_bin_path("git"), p["src"])
            else:
                source = {"kind": "wheel", "sha256": file_sha256(p["wheel"])}
            sm90_off = p["disable_sm90_features"]
            build_env = deepep_build_env(self.generation, self.arch_list, p["cuda_home"],
                                         nvshmem_root=p["nvshmem_root"],
                                         nccl_root=p["nccl_root"] if self.generation == "v2" else None,
                                         jobs=p["jobs"] or os.cpu_count() or 1, automatic=self.preflight["automatic"],
                                         disable_sm90_features=sm90_off, base_env=os.environ)
            if p["disable_aggressive_ptx"] is not None and "DISABLE_AGGRESSIVE_PTX_INSTRS" not in build_env:
                build_env["DISABLE_AGGRESSIVE_PTX_INSTRS"] = "1" if p["disable_aggressive_ptx"] else "0"
            inputs = {
                "source": source,
                "generation": self.generation,
                "arch_list": self.arch_list,
                "torch": probe.get("torch_version"),
                "python_abi": probe.get("soabi"),
                "cuda": self.cuda_version,
                "nvshmem": {"root": nvshmem["root"] if not sm90_off else None, "version": nvshmem["version"],
                            "ibgda": nvshmem["ibgda"]},
                "nccl": {"root": self.nccl["root"], "version": self.nccl["version"]},
                "disable_sm90_features": sm90_off,
                "disable_aggressive_ptx": build_env.get("DISABLE_AGGRESSIVE_PTX_INSTRS"),
            }
            for fix in self.preflight["automatic"]:
                if fix["check"] == "libstdcxx_static":
                    # Only where the fix applies, so that the keys of sound toolchains stay as they were.
                    inputs["libstdcxx_link"] = fix["link"]["target"]
            if p["wheel"] and self.wheel_record and self.wheel_record.get("key"):
                key = self.wheel_record["key"]
                inputs = self.wheel_record.get("inputs", inputs)
            else:
                key = build_key("deepep", inputs)
        except (BuildError, ArchError, OSError) as exc:
            raise Failed("cannot compute the DeepEP build key: %s" % exc)
        self.key, self.inputs, self.build_env = key, inputs, build_env
        self.result.update(key=key, inputs=inputs, build_env=dict((k, v) for k, v in build_env.items()
                                                                  if k not in ("PATH",)))

    def install_site(self):
        """The site-packages directory DeepEP is (or goes) in: beside the installed one, else the purelib."""
        probe = self.probe
        if probe.get("deep_ep_dir"):
            return os.path.dirname(probe["deep_ep_dir"])
        if probe.get("deep_ep_cpp"):
            return os.path.dirname(probe["deep_ep_cpp"])
        return probe.get("purelib")

    def repair_leftovers(self):
        """Under the lock: roll back an install a killed run left half done; remove stale staging directories."""
        site = self.install_site()
        recovered = []
        try:
            if site and os.path.isdir(site):
                if self.module.check_mode:
                    if os.path.exists(journal_path(site, "deep_ep")):
                        recovered.append("would roll back an interrupted install of deep_ep in %s" % site)
                else:
                    message = recover_install(site, "deep_ep")
                    if message:
                        recovered.append(message)
                        self.observe_python()  # what the interpreter sees now
                    for stale in stale_stages(site, "deep_ep"):
                        shutil.rmtree(stale, ignore_errors=True)
            if not self.module.check_mode:
                for stale in glob.glob(os.path.join(self.p["artifact_dir"], ".staging-*")):
                    shutil.rmtree(stale, ignore_errors=True)
        except (OSError, IOError) as exc:
            raise Failed("cannot repair what an interrupted run left in %s: %s" % (site, exc))
        self.result["recovered"] = "; ".join(recovered) or None

    def observe_install(self):
        """The installed DeepEP: its stamp, whether its extension is the recorded one, whether it imports."""
        probe, builder = self.probe, self.builder
        self.installed_stamp = _read_json(os.path.join(probe["deep_ep_dir"], STAMP_NAME)) \
            if probe.get("deep_ep_dir") else None
        ext = _ext_path(probe)
        stamp = self.installed_stamp
        self.ext_present = bool(ext and os.path.isfile(ext))
        self.ext_matches = bool(stamp and self.ext_present and stamp.get("extension_sha256") == file_sha256(ext))
        self.installed_key = (stamp or {}).get("key")
        if self.p["import_check"] == "changed" and self.ext_matches and self.installed_key == self.key:
            self.current_import = {"ok": None, "error": None, "skipped": (
                "the installed build has key %s and the extension its stamp records; it imported when it was "
                "installed (import_check: always imports on every run)" % short_key(self.key))}
        elif probe.get("deep_ep_dir") or ext:
            self.current_import = builder.import_check()
        else:
            self.current_import = {"ok": False, "error": "deep_ep is not installed"}
        error = self.current_import.get("error") or ""
        if stamp and not self.current_import.get("ok") and "undefined symbol" in error:
            built_torch = (stamp.get("built_against") or {}).get("torch")
            if built_torch and built_torch != probe.get("torch_version"):
                self.result["abi_mismatch"] = {
                    "built_torch": built_torch, "torch": probe.get("torch_version"), "error": error,
                    "fix": "rebuild DeepEP against torch %s (the key changed, so this module rebuilds)"
                           % probe.get("torch_version"),
                }

    # --- plan -----------------------------------------------------------------------------------

    def plan(self):
        """None when nothing is to be done; else ``'build'`` (then install) or ``'install'``, with the reason."""
        p, key = self.p, self.key
        skipped = self.current_import.get("skipped")
        if self.installed_key == key and self.ext_matches and (skipped or self.current_import.get("ok")):
            self.up_to_date = True
            self.result.update(reason="installed DeepEP has key %s and %s" % (
                short_key(key), "its recorded extension (not imported again)" if skipped else "imports"),
                wheel=self.installed_stamp.get("wheel"))
            return None
        if p["wheel"]:
            self.wheel, self.record = p["wheel"], self.wheel_record
        else:
            self.wheel, self.record = _find_artifact(p["artifact_dir"], key)
        would_build = self.wheel is None
        if not p["install"] and not would_build:
            self.result.update(reason="wheel for key %s is in %s (install: false)" % (short_key(key), p["artifact_dir"]),
                               wheel=self.wheel)
            return None
        self.check_apply("build" if would_build else "install")
        self.result.update(reason=self.why(would_build), would_build=would_build, would_install=p["install"],
                           changed=True, wheel=self.wheel)
        self.new_stamp = {
            "key": key, "kind": "deepep", "generation": self.generation, "inputs": self.inputs,
            "version": self.src_version,
            "built_against": {"torch": self.probe.get("torch_version"), "cuda": self.cuda_version,
                              "nvshmem": self.nvshmem["version"], "nccl": self.nccl["version"],
                              "arch_list": self.arch_list},
            "hca_mapping_support": self.hca,
        }
        if self.rc_record is not None:
            self.new_stamp["nvshmem_rc_layout"] = self.rc_stamp_entry()
        if self.module._diff:
            self.result["diff"] = {"before": json.dumps(self.installed_stamp or {}, sort_keys=True, indent=2) + "\n",
                                   "after": json.dumps(self.new_stamp, sort_keys=True, indent=2) + "\n"}
        return "build" if would_build else "install"

    def rc_stamp_entry(self):
        """The stamp's ``nvshmem_rc_layout``: the tree as read and the layout a build against this NVSHMEM compiles."""
        return dict(self.rc_record, compiled=compiled_rc_layout(self.rc_record["tree"], self.nvshmem["version"]))

    def check_apply(self, action):
        """The refusals of the apply step that can be known before it, run in check mode too so that the plan
        gives the real run's verdict: a wheel that does not match its build record, a site-packages that cannot
        be installed into."""
        if action == "install":
            self.check_wheel()
        if self.p["install"]:
            self.check_site()

    def check_site(self):
        site = self.install_site()
        if not site or not os.access(site, os.W_OK):
            raise Failed("cannot install into %r (the site-packages of %s): not a writable directory; nothing was "
                         "built or installed" % (site, self.p["python"]))

    def why(self, would_build):
        installed_key = self.installed_key
        if installed_key is None:
            why = "no DeepEP installed by this module" if not self.probe.get("deep_ep_dir") \
                else "installed DeepEP has no stamp"
        elif installed_key != self.key:
            why = "key changed: installed %s, wanted %s" % (str(installed_key)[:8], short_key(self.key))
            if self.result.get("abi_mismatch"):
                why += " (torch changed: ABI mismatch)"
        elif not self.ext_matches and not getattr(self, "ext_present", True):
            # pip uninstall removes what its RECORD lists and leaves the stamp this module wrote beside it
            why = "the extension the stamp records is not installed (DeepEP removed outside this module)"
        elif not self.ext_matches:
            why = "installed extension differs from the recorded build"
        else:
            why = "installed DeepEP does not import: %s" % self.current_import.get("error")
        return why + "; %s" % ("a compile is needed" if would_build else "the wheel for the key exists: %s" % self.wheel)

    def current_facts(self):
        hca = _installed_hca(self.probe) or (self.hca if self.up_to_date else False)
        return _facts(self.probe, self.installed_stamp, self.current_import, self.generation, hca)

    def predicted_facts(self):
        facts = _facts(self.probe, self.installed_stamp, self.current_import, self.generation, self.hca)
        facts.update(key=self.key, built_against=self.new_stamp["built_against"], generation=self.generation,
                     installed=True, import_ok=True, import_error=None, hca_mapping_support=self.hca)
        return facts

    # --- apply ----------------------------------------------------------------------------------

    def build(self):
        """Compile the wheel in staging; it becomes ``<artifact_dir>/<key>/`` (the old directory replaced atomically)."""
        builder = self.builder
        try:
            for fix in self.preflight["automatic"]:
                if fix.get("link"):
                    place_link(fix["link"])
            self.wheel, self.record = build_wheel(builder, self.p, self.key, self.generation, self.new_stamp,
                                                  self.build_env, self.linkage_context())
        except StepFailed as exc:
            raise Failed("DeepEP %s build failed: %s (nothing was installed)" % (self.generation, exc.msg),
                         rc=exc.rc, cmd=exc.cmd, log_tail=log_tail(builder.log_path, self.p["log_lines"]), **exc.extra)
        except (OSError, IOError, BuildError) as exc:
            raise Failed("DeepEP %s build failed: %s (nothing was installed)" % (self.generation, exc),
                         log_tail=log_tail(builder.log_path, self.p["log_lines"]))
        self.result.update(built=True, wheel=self.wheel, log=builder.log_path, linkage=self.record.get("linkage"))
        for warning in (self.record.get("linkage") or {}).get("warnings", []):
            self.module.warn(warning)

    def linkage_context(self):
        """What the linkage record says beside the objects themselves (see wheel_linkage)."""
        probe, cxx = self.probe, self.cxx
        return {"cuda_home": self.p["cuda_home"], "torch_version": probe.get("torch_version"),
                "torch_cuda": torch_cuda_from_version_py(probe.get("torch_version_py")), "cuda": self.cuda_version,
                "cxx": cxx, "cxx_version": self.builder.cxx_version(cxx),
                "nccl": {"root": self.nccl["root"], "version": self.nccl["version"]},
                "nvshmem": {"root": None if self.p["disable_sm90_features"] else self.nvshmem["root"],
                            "version": self.nvshmem["version"]}}

    def check_wheel(self):
        """A wheel with a build record (built here, or copied from the artifact store) must match its sha256."""
        wheel, record = self.wheel, self.record
        self.wheel_checked = wheel
        if not record:
            return
        name = record.get("wheel_name")
        if name and name != os.path.basename(wheel):
            raise Failed("the build record beside %s names the wheel %s, not this one; nothing was installed"
                         % (wheel, name))
        expected = record.get("wheel_sha256")
        if not isinstance(expected, str) or len(expected) != 64:
            raise Failed("the build record of %s has no wheel_sha256 (64 hex digits), got %r; nothing was installed"
                         % (wheel, expected))
        digest = file_sha256(wheel)
        if digest != expected:
            raise Failed("%s has sha256 %s, its build record says %s (truncated or altered); nothing was installed"
                         % (wheel, digest, expected))

    def install(self):
        """Install the wheel as one transaction: staged by pip, swapped in, stamped, import-checked, else rolled back."""
        p, builder = self.p, self.builder
        if self.wheel_checked != self.wheel:
            self.check_wheel()
        site = self.install_site()
        if not site or not os.access(site, os.W_OK):
            raise Failed("cannot install into %r (the site-packages of %s): not a writable directory"
                         % (site, p["python"]))
        tx = WheelInstall(builder.run, p["python"], site, "deep_ep", self.wheel, env={"PIP_BREAK_SYSTEM_PACKAGES": "1"})
        try:
            tx.stage_wheel()
        except (StepFailed, OSError) as exc:
            tx.abandon()
            raise Failed("installing %s failed: %s (the installed DeepEP is unchanged)"
                         % (self.wheel, getattr(exc, "msg", exc)), **_step_extra(exc))
        try:
            tx.swap(tx.new)
            after = builder.probe()
            after["python"] = p["python"]
            stamp = dict(self.record or self.new_stamp)
            stamp.update(wheel=self.wheel, installed_at=now(), python=p["python"])
            stamp.setdefault("hca_mapping_support", self.hca)
            if self.rc_record is not None and "nvshmem_rc_layout" not in stamp:
                stamp["nvshmem_rc_layout"] = self.rc_stamp_entry()
            ext = _ext_path(after)
            stamp["extension_sha256"] = file_sha256(ext) if ext and os.path.isfile(ext) else None
            if after.get("deep_ep_dir"):
                write_stamp(after["deep_ep_dir"], stamp)
            check = builder.import_check()
        except (StepFailed, OSError, BuildError) as exc:
            restored = self.roll_back(tx)
            raise Failed("installing %s failed: %s%s" % (self.wheel, getattr(exc, "msg", exc), restored),
                         rolled_back=bool(restored), **_step_extra(exc))
        self.result["installed"] = True
        if not check.get("ok"):
            restored = self.roll_back(tx)
            raise Failed("the new DeepEP build does not import: %s%s" % (check.get("error"), restored),
                         rolled_back=bool(restored))
        tx.commit()
        return _facts(after, stamp, check, self.generation, _installed_hca(after) or self.hca)

    def roll_back(self, tx):
        """Put the previous install back; the sentence to add to the failure ('' when that failed too)."""
        try:
            old = tx.rollback()
        except (OSError, IOError) as exc:
            return "; rolling back failed too (%s): the next run of this module rolls back first" % exc
        return "; the previous install was restored (%s)" % (", ".join(old) or "no DeepEP was installed before")

    # --- the decision ---------------------------------------------------------------------------

    def run(self):
        """The facts of DeepEP in ``python`` after the run (``gpufleet_deepep``); raises Failed."""
        self.check_params()
        self.observe_python()
        self.observe_source()
        self.check_preflight()
        self.observe_key()
        try:
            # A build locks its artifact directory; an install of a given wheel builds nothing and locks the
            # site-packages it installs into (two installs into one interpreter never interleave).
            target = self.p["artifact_dir"]
            if self.p["wheel"]:
                target = self.install_site() or target
            with build_lock(target, self.p["lock_timeout"], "DeepEP build", self.module.check_mode):
                self.repair_leftovers()
                self.observe_install()
                action = self.plan()
                if action is None:
                    return self.current_facts()
                if self.module.check_mode:
                    return self.predicted_facts()
                if action == "build":
                    self.build()
                if not self.p["install"]:
                    return self.current_facts()
                return self.install()
        except BuildError as exc:  # the lock: another build of this artifact directory runs
            raise Failed(str(exc))


def _step_extra(exc):
    """rc, cmd and the output of a failed command, for the result."""
    if isinstance(exc, StepFailed):
        return dict(exc.extra, rc=exc.rc, cmd=exc.cmd)
    return {}


def place_link(link):
    """``<dir>/<name>`` -> ``<target>``, replaced atomically where it points elsewhere."""
    path = os.path.join(link["dir"], link["name"])
    if os.path.islink(path) and os.readlink(path) == link["target"]:
        return
    if not os.path.isdir(link["dir"]):
        os.makedirs(link["dir"], 0o755)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(link["target"], tmp)
    os.rename(tmp, path)


def wheel_linkage(wheel, generation, context=None, scratch=None):
    """The linkage record (module_utils._linkage, schema 1) of the wheel: every shared object in it (NEEDED,
    RUNPATH/RPATH, SONAME, libstdc++, embedded SASS/PTX), torch, CUDA, the compiler, the NCCL and NVSHMEM it links,
    and the persistent envs baked into ``deep_ep/envs.py``.

    ``context``: ``run(argv, timeout)``, ``cuda_home``, ``torch_version``, ``torch_cuda``, ``cuda``, ``cxx``,
    ``cxx_version``, ``nccl`` and ``nvshmem`` (the module's ``{root, version}`` of each); ``scratch``: a directory
    to unpack the objects into for cuobjdump. Raises StepFailed for a V2 extension without a shared libstdc++ (its
    JIT's std::regex would crash at the first dispatch: captured on 4 x H200); a V1 one gets a warning.
    """
    context = context or {}
    run = context.get("run")
    warnings = []
    with zipfile.ZipFile(wheel) as archive:
        members = sorted(n for n in archive.namelist() if n.endswith(".so") or ".so." in os.path.basename(n))
        extensions = [n for n in members if n.startswith("deep_ep/_C") or n.startswith("deep_ep_cpp")]
        if not extensions:
            raise StepFailed("%s holds no DeepEP extension (deep_ep/_C*.so or deep_ep_cpp*.so)" % wheel)
        objects, undefined = [], {}
        for member in members:
            data = archive.read(member)
            if not is_elf(data) and member not in extensions:
                continue  # not an object (the extension itself is read, and refused by name when it is none)
            shown = "%s!%s" % (os.path.basename(wheel), member)
            sass, ptx, warning = None, None, None
            try:
                if run is not None and scratch:
                    path = os.path.join(scratch, member.replace("/", "_"))
                    with open(path, "wb") as handle:
                        handle.write(data)
                    sass, ptx, warning = embedded_archs(run, context.get("cuda_home"), path, data, shown)
                else:
                    sass, ptx = fatbin_archs(data, shown)
                objects.append(object_record(member, data, sass, ptx, shown))
                undefined[member] = undefined_symbols(data, shown)
            except ElfError as exc:
                raise StepFailed("cannot read what the built extension links: %s" % exc)
            if warning:
                warnings.append(warning)
        envs = archive.read("deep_ep/envs.py").decode("utf-8", "replace") \
            if "deep_ep/envs.py" in archive.namelist() else None
    main = next(o for o in objects if o["path"] == extensions[0])
    if main["libstdcxx"] == "static":
        text = ("the built extension %s carries a static libstdc++ (NEEDED: %s; no libstdc++.so) whose "
                "std::locale facets are not the process's, so std::regex in it crashes"
                % (extensions[0], ", ".join(main["needed"]) or "none"))
        if generation == "v2":
            raise StepFailed(text + "; DeepEP V2's JIT compiles one at the first dispatch (SIGSEGV). Fix: install the "
                             "compiler's libstdc++ development link or set CXX to a compiler whose "
                             "`-print-file-name=libstdc++.so` exists")
        warnings.append(text + " (DeepEP V1 uses none, but any code of the extension that does will)")
    try:
        baked = baked_env_from_text(envs)
    except LinkageError as exc:
        raise StepFailed("cannot read the persistent envs the build baked into %s!deep_ep/envs.py (expected "
                         "persistent_envs['NAME'] = 'value' lines): %s" % (os.path.basename(wheel), exc))
    search = main["runpath"] + main["rpath"]

    def linked(prefix):
        """(the extension's NEEDED name starting with ``prefix``, the file its RUNPATH/RPATH resolves it to)."""
        name = next((n for n in main["needed"] if n.startswith(prefix)), None)
        library = resolve_needed(name, search) if name else None
        if name and library is None:
            warnings.append("%s is not in the extension's RUNPATH/RPATH (%s): the loader takes whatever the "
                            "node's search path finds" % (name, ":".join(search) or "none"))
        return name, library

    nccl_info, nvshmem_info = context.get("nccl") or {}, context.get("nvshmem") or {}
    nccl = None
    nccl_needed, library = linked("libnccl.so")
    if nccl_needed or generation == "v2":
        nccl = {"header_version": nccl_info.get("version"), "root": nccl_info.get("root"), "library": library}
    nvshmem = None
    host_needed, host = linked("libnvshmem_host.so")
    if host_needed:
        root = nvshmem_info.get("root")
        device = os.path.join(root, "lib", "libnvshmem_device.a") if root else None
        device = os.path.realpath(device) if device and os.path.isfile(device) else None
        nvshmem = {"host_version": nvshmem_info.get("version"), "host_library": host,
                   "device_version": nvshmem_info.get("version") if device else None, "device_library": device}
    torch = {"version": context.get("torch_version"), "cxx11_abi": cxx11_abi(undefined[extensions[0]], main["needed"]),
             "cuda": context.get("torch_cuda")} if context.get("torch_version") else None
    try:
        return linkage_record("deepep", objects, torch=torch, cuda=context.get("cuda"),
                              compiler={"cxx": context.get("cxx"), "version": context.get("cxx_version")},
                              nccl=nccl, nvshmem=nvshmem, baked_env=baked, warnings=warnings)
    except LinkageError as exc:
        raise StepFailed("the linkage record of %s is malformed: %s" % (wheel, exc))


def build_wheel(builder, p, key, generation, stamp, build_env, linkage_context=None):
    """Build in ``<artifact_dir>/.staging-<key8>``; keep the wheel in ``<artifact_dir>/<key>/``."""
    artifact_dir = p["artifact_dir"]
    if not os.path.isdir(artifact_dir):
        os.makedirs(artifact_dir, 0o755)
    staging = os.path.join(artifact_dir, ".staging-%s" % short_key(key))
    shutil.rmtree(staging, ignore_errors=True)  # a failed run's (the build lock is held: no run is using it)
    os.makedirs(staging)
    builder.log_path = os.path.join(staging, "build.log")
    builder.log("# gpufleet.deepep.deepep_build %s key %s generation %s\n# inputs %s\n"
                % (now(), key, generation, json.dumps(stamp["inputs"])))
    work = os.path.join(staging, "src")

    def ignore(directory, names):
        skip = [n for n in names if n in (".git", "__pycache__") or n.endswith(".egg-info")]
        if os.path.normpath(directory) == os.path.normpath(p["src"]):
            skip += [n for n in names if n in ("build", "dist")]
        return skip

    shutil.copytree(p["src"], work, symlinks=True, ignore=ignore)
    if os.path.exists(os.path.join(p["src"], ".git")):
        # setup.py appends `git rev-parse --short HEAD` to the version; keep that working in the copy.
        os.symlink(os.path.join(os.path.abspath(p["src"]), ".git"), os.path.join(work, ".git"))
    dist = os.path.join(staging, "dist")
    builder.run([p["python"], "setup.py", "bdist_wheel", "--dist-dir", dist], env=dict(build_env), cwd=work)
    wheels = sorted(glob.glob(os.path.join(dist, "*.whl")))
    if len(wheels) != 1:
        raise StepFailed("setup.py bdist_wheel produced %d wheels in %s, expected 1" % (len(wheels), dist))
    log_text = _read(builder.log_path) or ""
    if generation == "v1" and p["nvshmem_root"] and "NVSHMEM path: %s" % p["nvshmem_root"] not in log_text:
        raise StepFailed("the build did not use nvshmem_root %s (no 'NVSHMEM path: %s' in its summary)"
                         % (p["nvshmem_root"], p["nvshmem_root"]))
    final = os.path.join(artifact_dir, key)
    artifact = os.path.join(staging, "artifact")
    os.makedirs(artifact)
    name = os.path.basename(wheels[0])
    shutil.move(wheels[0], os.path.join(artifact, name))
    record = dict(stamp)
    scratch = os.path.join(staging, "linkage")
    os.makedirs(scratch)
    record.update(wheel_name=name, wheel_sha256=file_sha256(os.path.join(artifact, name)), built_at=now(),
                  linkage=wheel_linkage(os.path.join(artifact, name), generation, dict(linkage_context, run=(
                      lambda argv, timeout: builder.run(argv, check=False, record=False, timeout=timeout))),
                      scratch))
    write_json_file(os.path.join(artifact, "build.json"), record)
    shutil.copyfile(builder.log_path, os.path.join(artifact, "build.log"))
    replace_tree(final, artifact)
    shutil.rmtree(staging, ignore_errors=True)
    builder.log_path = os.path.join(final, "build.log")
    return os.path.join(final, name), record


def main():
    module = build_module()
    finish(module, DeepepBuild(module), "gpufleet_deepep")


if __name__ == "__main__":
    main()
