#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_stack
short_description: Gather the software stack of a DeepEP node for the audit
version_added: 0.1.0
description:
  - Reads, without changing anything, the versions and states the DeepEP runbooks check by hand and the
    other facts modules of the collection do not gather. OS and kernel, nvcc, DOCA/rdma-core packages and the
    MLX5DV symbols NVSHMEM IBGDA needs, whether C(libcuda.so) is resolvable, the GDRCopy library and C(gdrdrv),
    NCCL from pip and from the system, torch, whether C(import deep_ep) works in the environment script's
    environment, the environment script itself (presence, sha256, exported variables), C(nvidia_peermem),
    and whether a reboot is pending.
  - The environment script is never executed, not even for the C(import deep_ep) probe. Its C(export NAME=value)
    lines are read as data (a strict reader; a line it cannot take is named in the facts, see
    RV(ansible_facts.gpufleet_stack.env_script)); the probe runs the interpreter directly, without a shell, in an
    environment made of this module's own plus the variables read.
  - Python probes run with E(PYTHONDONTWRITEBYTECODE=1) so that no bytecode cache is written.
  - Commands run as lists with E(LC_ALL=C), each bounded by O(timeout). They start together (each in its
    own thread), so the slowest probe, not their sum, bounds the time.
  - With O(gather) it also returns, in the same call, the facts of M(gpufleet.deepep.nvidia_params) (read only,
    as with no setting asked), M(gpufleet.deepep.rdma_devices), M(gpufleet.deepep.gpu_topology) and
    M(gpufleet.deepep.pytorch_bundled_nvshmem) (read only, whatever that module's state would do), computed by the
    same code those modules use, and with V(sglang) the facts of M(gpufleet.deepep.sglang_env)
    with O(gpufleet.deepep.sglang_env#module:state=facts) (read only) for O(sglang_python). The audit gathers a whole
    node this way in one round trip.
  - With V(serve_node) it returns what the serving preflight of M(gpufleet.deepep.serve_plan) needs of an engine
    node (its O(gpufleet.deepep.serve_plan#module:nodes)) - the interfaces (C(ip -j addr show)), the values of the
    env scripts O(serve_env_scripts) and the DeepGEMM cache markers of O(serve_dg_cache_dir).
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.facts
options:
  gather:
    description:
      - The facts sets to gather. V(stack) is RV(ansible_facts.gpufleet_stack); V(nvidia) is
        RV(ansible_facts.gpufleet_nvidia), V(rdma) RV(ansible_facts.gpufleet_rdma), V(gpus)
        RV(ansible_facts.gpufleet_gpus), V(bundled_nvshmem) RV(ansible_facts.gpufleet_bundled_nvshmem) and
        V(sglang) RV(ansible_facts.gpufleet_sglang), each in the shape of the module that owns it.
      - The small sets the phase roles decide from, each cheap to read on its own, are V(modules)
        RV(ansible_facts.gpufleet_modules) (kernel modules, loaded, built in or absent), V(paths)
        RV(ansible_facts.gpufleet_paths) (what each of O(paths) is now), V(cuda_toolkit)
        RV(ansible_facts.gpufleet_cuda_toolkit) (the toolkit at O(cuda_home)), V(imports)
        RV(ansible_facts.gpufleet_imports) (whether O(python) imports each of O(import_modules)) and V(symbols)
        RV(ansible_facts.gpufleet_symbols) (whether the headers of O(symbol_files) declare their symbols),
        V(initramfs) RV(ansible_facts.gpufleet_initramfs) (whether the image at O(initramfs_path) holds the nvidia
        modules), V(torch) RV(ansible_facts.gpufleet_torch) (the torch of O(python) and the versions of
        O(torch_packages)) and V(hca_mapping) RV(ansible_facts.gpufleet_hca_mapping) (the GPU-NIC mapping of
        O(env_script) and whether C(deep_ep) applies it), V(packages) RV(ansible_facts.gpufleet_packages) (the
        installed versions of the Debian packages of O(packages), from dpkg's status file) and V(gdrdrv)
        RV(ansible_facts.gpufleet_gdrdrv) (the gdrdrv kernel module of the GDRCopy source O(gdrcopy_src), whether
        it is built and loaded, and its build stamp's key) and V(jit_cache) RV(ansible_facts.gpufleet_deepep_jit)
        (DeepEP V2's JIT kernel cache at O(jit_cache_dir), its kernels and the record the deepep role wrote).
      - V(serve_node) is RV(ansible_facts.gpufleet_serve_node), an engine node's facts for the serving plan.
      - V(model) is RV(ansible_facts.gpufleet_model), the model directory O(model_path) as
        M(gpufleet.deepep.model_config) reads it (the same code); a path or C(config.json) it cannot take fails
        the module with that module's message (or, with O(role_set_errors=record), is named in RV(gather_errors)).
      - V(serving) is RV(ansible_facts.gpufleet_serving), the node's SGLang serving state as
        M(gpufleet.deepep.serve_state) reads it (the same code) - the units C(gpufleet.deepep.sglang_serve) wrote
        in O(serve_config_dir) under O(serve_prefix), their systemd state, and with O(serve_router_url) the router's
        readiness and workers.
      - V(nccl) is RV(ansible_facts.gpufleet_nccl), the NCCL of the environment of O(python) (its pip package,
        C(nccl.h), C(libnccl.so.2), the pin record and whether the pin holds) as M(gpufleet.deepep.nccl_env) reads
        it (the same code), with that module's defaults - the constraints file is the one the pin record names (else
        C(<venv>/gpufleet-constraints.txt), C(/etc/gpufleet/pip-constraints.txt) for a system Python) and the pip
        configuration C(<sys.prefix>/pip.conf). An interpreter that cannot be run fails the module with that
        module's message.
      - V(linkage) is RV(ansible_facts.gpufleet_linkage), the installed DeepEP's linkage record (kept in its build
        stamp by M(gpufleet.deepep.deepep_build)) checked against the node - the NCCL the torch environment of
        O(python) loads, the NVSHMEM host library that would load, each GPU's compute capability against the
        embedded SASS/PTX, torch unchanged since the build, and no static libstdc++ in a DeepEP V2 extension.
        Nothing is imported; the libraries' version strings are read from their files.
      - V(deepep_v2) is RV(ansible_facts.gpufleet_deepep_v2), DeepEP V2's runtime requirements on the node, each
        decided as a check (pass, fail with its fix, warn, or not applicable with the reason). It runs no command
        of its own (it shares nvcc, C(ldconfig -p) and the Python probe with V(stack)) and reads libmlx5's symbol
        versions from its ELF file.
      - V(nccl_ep) is RV(ansible_facts.gpufleet_nccl_ep), NCCL EP (the C(nccl-extensions) wheel) in the environment
        of O(python) as M(gpufleet.deepep.nccl_ep_env) reads it (the same code, from the Python probe V(stack)
        shares) - its version, library, the NCCL it requires and the one installed, its dependencies, the env
        script's JIT cache, and its checks.
      - V(gpu_fabric) is RV(ansible_facts.gpufleet_gpu_fabric), each GPU's NVLink fabric state as C(nvidia-smi -q)
        prints it (its C(Fabric) section) and whether the GPU is ready for multi-node NVLink (a GB200/GB300 NVL72
        tray). C(nvidia-smi -q) reads every GPU's every section, so it is slow on a big node; it runs only for this
        set, bounded by O(timeout).
      - V(imex) is RV(ansible_facts.gpufleet_imex), NVIDIA IMEX on the node - its config and nodes config, the
        channel device, the C(NVreg_CreateImexChannel0) option (of O(modprobe_dirs) and of the driver at
        O(params_path)), C(systemctl is-active nvidia-imex) and C(nvidia-imex-ctl -q).
      - A set that cannot be gathered is left out and named in RV(gather_errors); the others are still returned.
        The sets a role reads for itself (V(modules) to V(nccl) above, and V(serving)) fail the module instead,
        unless O(role_set_errors=record).
    type: list
    elements: str
    choices: [stack, nvidia, rdma, gpus, bundled_nvshmem, sglang, serve_node, linkage, deepep_v2, nccl_ep, gpu_fabric,
              imex, modules, paths, cuda_toolkit, imports, symbols, initramfs, torch, hca_mapping, packages, gdrdrv,
              jit_cache, model, nccl, serving]
    default: [stack]
  role_set_errors:
    description:
      - What a set a role reads for itself (V(modules), V(paths), V(cuda_toolkit), V(imports), V(symbols),
        V(initramfs), V(torch), V(hca_mapping), V(packages), V(gdrdrv), V(jit_cache), V(model), V(nccl),
        V(serving)) does when it cannot be read, or its options are not of their form.
      - V(fail) fails the module with the reason (a role cannot decide without it). V(record) names it in
        RV(gather_errors) and returns the other sets, as the stack sets do (the audit, which reports what it could
        not read).
    type: str
    choices: [fail, record]
    default: fail
  paths:
    description:
      - Absolute paths described under RV(ansible_facts.gpufleet_paths) with V(paths) in O(gather). A final
        symlink is not followed.
    type: list
    elements: path
    default: []
  hash_paths:
    description:
      - Paths of O(paths) whose sha256 is read too (whatever their size), as V(sha256) of their entry in
        RV(ansible_facts.gpufleet_paths). A path not in O(paths) is refused.
    type: list
    elements: path
    default: []
  packages:
    description:
      - For V(packages), Debian package names (plain names, no version or wildcard) whose installed versions are
        reported.
    type: list
    elements: str
    default: []
  import_modules:
    description:
      - Python modules (dotted names) that V(imports) tries to import with O(python), in one process bounded by
        O(timeout).
    type: list
    elements: str
    default: []
  symbol_files:
    description:
      - For V(symbols), header files (absolute paths) and the symbols each must declare, a mapping of each
        path to a list of symbol names. The files are read, never compiled.
    type: dict
    default: {}
  initramfs_path:
    description:
      - For V(initramfs), the initramfs image listed with C(lsinitramfs) (bounded by O(timeout)), for example
        C(/boot/initrd.img-<kernel>). Required when O(gather) holds V(initramfs).
    type: path
  torch_packages:
    description:
      - For V(torch), pip requirements (C(numpy), C(numpy>=2)) whose installed versions are reported under
        C(packages), by the name each requirement starts with.
    type: list
    elements: str
    default: []
  module_names:
    description:
      - Kernel modules whose state V(modules) reports under C(states) (loaded, built into the kernel, or absent and
        whether the kernel has a module for it) and C(present) (loaded or built in). A name that is not a kernel
        module name (letters, digits, C(_), C(-)) is refused.
    type: list
    elements: str
    default: []
  params_path:
    description: The live driver parameters read for V(nvidia) and V(imex).
    type: path
    default: /proc/driver/nvidia/params
  version_path:
    description: The driver version file read for V(nvidia).
    type: path
    default: /proc/driver/nvidia/version
  modprobe_dirs:
    description: The modprobe configuration directories read for V(nvidia) and V(imex), in kmod's search order.
    type: list
    elements: path
    default: [/etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d, /usr/lib/modprobe.d, /lib/modprobe.d]
  nvidia_smi:
    description:
      - The nvidia-smi run for V(gpus), V(linkage) and V(gpu_fabric); by default it is searched in E(PATH) and the sbin
        directories.
    type: path
  cuda_home:
    description: The CUDA toolkit directory; C(<cuda_home>/bin/nvcc --version) gives the CUDA version.
    type: path
    default: /usr/local/cuda
  python:
    description:
      - The interpreter that has torch (and DeepEP), for package metadata and the import probe, and whose NCCL
        V(nccl) reads.
    type: str
    default: /usr/bin/python3
  env_script:
    description: The DeepEP environment script (written by the C(env_script) role).
    type: path
    default: /opt/deepep/unified-env.sh
  gdrcopy_home:
    description: Where a GDRCopy library built from source lives (its C(lib) directory is searched too).
    type: path
    default: /opt/deepep/gdrcopy
  gdrcopy_src:
    description:
      - For V(gdrdrv), the GDRCopy source tree (absolute) where C(make driver) builds C(src/gdrdrv/gdrdrv.ko), for
        example C(/opt/deepep/src/gdrcopy-2.5.1). Required when O(gather) holds V(gdrdrv).
    type: path
  jit_cache_dir:
    description:
      - For V(jit_cache), DeepEP V2's JIT cache directory (absolute; where E(EP_JIT_CACHE_DIR) points, for example
        C(/var/cache/deepep/jit)). Required when O(gather) holds V(jit_cache). Nothing is run; a missing directory
        is an empty cache.
    type: path
  nvshmem_prefix:
    description: Where M(gpufleet.deepep.nvshmem_build) installs NVSHMEM (its stamp file is read, nothing is run).
    type: path
    default: /opt/deepep/nvshmem
  mlx5dv_symbols:
    description: Symbols that C(infiniband/mlx5_api.h) must declare for NVSHMEM IBGDA.
    type: list
    elements: str
    default: [MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT]
  dpkg_packages:
    description:
      - Debian packages whose installed versions are reported under RV(ansible_facts.gpufleet_stack.packages).
      - Defaults to the RDMA, DOCA, GDRCopy and NCCL packages.
    type: list
    elements: str
  nvidia_reboot_required:
    description:
      - The C(reboot_required) of M(gpufleet.deepep.nvidia_params) on this node, when known; a true value
        counts as a pending reboot.
      - Not used when O(gather) holds V(nvidia), since the value gathered in the same call counts then.
    type: bool
  import_check:
    description: Run the C(import deep_ep) probe (set false to skip it, for example on nodes without torch).
    type: bool
    default: true
  import_when:
    description:
      - With O(import_check), V(always) imports on every run; V(changed) leaves the import out (and says why in
        C(deep_ep_import.skipped)) where the installed DeepEP is the build M(gpufleet.deepep.deepep_build)
        installed, its extension having the sha256 its build stamp records, and torch is the version it was built
        against. Those bytes imported when they were installed (an install that does not import is rolled back);
        a changed extension, another torch or a missing stamp still imports. The import costs a torch import (seconds
        of CPU) per node.
    type: str
    choices: [always, changed]
    default: always
  sglang_python:
    description:
      - For V(sglang), the interpreter of the torch environment SGLang runs in (an absolute path or a name on
        C(PATH)), as O(gpufleet.deepep.sglang_env#module:python). Unset, O(python).
    type: str
  sglang_nvshmem_home:
    description:
      - For V(sglang), the IBGDA NVSHMEM build DeepEP runs on, as O(gpufleet.deepep.sglang_env#module:nvshmem_home)
        (RV(gpufleet.deepep.sglang_env#module:ansible_facts.gpufleet_sglang.nvshmem_ok) is null
        without it). O(cuda_home) is the toolkit whose
        C(lib64) joins
        RV(gpufleet.deepep.sglang_env#module:ansible_facts.gpufleet_sglang.ld_library_path).
    type: path
  sglang_dg_cache_dir:
    description:
      - For V(sglang), the DeepGEMM cache directory, as O(gpufleet.deepep.sglang_env#module:dg_cache_dir).
    type: path
  sglang_constraint_file:
    description:
      - For V(sglang), the pip constraints file whose pins are reported, as
        O(gpufleet.deepep.sglang_env#module:constraint_file); unset, the environment's default one.
    type: path
  serve_env_scripts:
    description:
      - For V(serve_node), the env scripts whose C(export) lines the engine units take, in the order a shell would
        source them (C(env_script)'s, then the sglang role's); read as data. A missing one is reported, not an error.
    type: list
    elements: path
    default: []
  serve_dg_cache_dir:
    description: For V(serve_node), the DeepGEMM cache directory the sglang role installs into (its markers).
    type: path
    default: /var/cache/sglang/deep_gemm
  model_path:
    description:
      - For V(model), the model directory whose C(config.json) is read (as on the node), or a hub id such as
        C(deepseek-ai/DeepSeek-V3) where O(model_offline=false).
      - Required when O(gather) holds V(model).
    type: str
  model_offline:
    description:
      - For V(model), refuse a hub id (the site downloads nothing), as the O(gpufleet.deepep.model_config#module:offline)
        option of M(gpufleet.deepep.model_config).
    type: bool
    default: true
  serve_config_dir:
    description: For V(serving), where the serving units' environment files are (C(sglang_serve_config_dir)).
    type: path
    default: /etc/gpufleet/sglang-serve
  serve_prefix:
    description:
      - For V(serving), the units' name prefix (C(sglang_serve_unit_prefix)), as the
        O(gpufleet.deepep.serve_state#module:prefix) option of M(gpufleet.deepep.serve_state).
    type: str
    default: sglang
  serve_router_url:
    description:
      - For V(serving), the router as the node reaches it (C(http://127.0.0.1:30080)); empty on engine nodes.
        Credentials in the URL are refused, the password shown as C(***).
    type: str
    default: ""
  serve_validate_certs:
    description: For V(serving), check the certificate of an C(https) O(serve_router_url) and its host name.
    type: bool
    default: true
  serve_ca_path:
    description: For V(serving), a PEM file of the CA certificates that sign the router's certificate.
    type: path
  deepep_v2_tree:
    description:
      - For V(deepep_v2), the DeepEP V2 tree whose headers are read for the CUDA 12.8 host-code workaround, the SM100
        st.bulk fix (DeepEP issue 692) and the GIN barrier fix (DeepEP PR 715) - a source checkout or an installed
        C(deep_ep) package directory.
      - Default the installed C(deep_ep) package of O(python); with neither, those checks say the tree is unknown.
    type: path
  deepep_v2_nic_name:
    description:
      - For V(deepep_v2), the E(EP_NIC_NAME) V2 will run with (an RDMA device name such as C(mlx5_0)).
      - Default the value the env script O(env_script) exports, else V2's own default C(mlx5_0).
    type: str
  deepep_v2_over_rdma:
    description:
      - For V(deepep_v2), whether V2 runs over RDMA on this node. V(false) (NVLink only) makes the ibstat,
        E(EP_NIC_NAME), libmlx5 and C(/dev/infiniband) checks not applicable.
    type: bool
    default: true
  deepep_v2_across_nodes:
    description:
      - For V(deepep_v2), whether V2 runs across nodes. V(false) makes the GIN barrier check (DeepEP PR 715) not
        applicable.
    type: bool
    default: true
  deepep_v2_gin_mlx5:
    description:
      - For V(deepep_v2), whether NCCL's GIN drives mlx5 NICs on this node (InfiniBand, RoCE). V(false) (AWS EFA,
        whose GIN runs through the aws-ofi-nccl plugin) makes the libmlx5 check not applicable.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each Python probe (metadata, import, the SGLang probe), C(ip -j addr show) (V(serve_node)),
        C(nvidia-smi -q) (V(gpu_fabric)), the IMEX commands (V(imex)) and C(systemctl show) (V(serving)) may take
        before it counts as failed; for V(serving) also the deadline of each HTTP exchange with the router, at most
        30 seconds.
    type: int
    default: 60
notes:
  - Never changes the node; in check mode it does exactly the same reads.
seealso:
  - module: gpufleet.deepep.nvidia_params
  - module: gpufleet.deepep.rdma_devices
"""

EXAMPLES = r"""
- name: Gather the node's software stack
  gpufleet.deepep.node_stack:

- name: Gather with the torch environment's interpreter and the pending-reboot flag of nvidia_params
  gpufleet.deepep.node_stack:
    python: /opt/torch/.venv/bin/python
    nvidia_reboot_required: "{{ (gpufleet_nvidia_result | default({})).reboot_required | default(omit) }}"

- name: Gather everything the audit judges in one call (read-only)
  gpufleet.deepep.node_stack:
    gather: [stack, nvidia, rdma, gpus, bundled_nvshmem, sglang]
    sglang_python: /opt/torch/.venv/bin/python
    sglang_nvshmem_home: /opt/deepep/nvshmem
  check_mode: true
  register: node

- name: Show the versions
  ansible.builtin.debug:
    msg: >-
      nvcc {{ ansible_facts.gpufleet_stack.cuda.version }},
      torch {{ ansible_facts.gpufleet_stack.torch.version }},
      NCCL {{ ansible_facts.gpufleet_stack.nccl.loaded_version }}
"""

RETURN = r"""
gather_errors:
  description:
    - The facts sets asked in O(gather) that could not be gathered, by facts name, with the reason (the set is
      then absent from RV(ansible_facts)).
  returned: always
  type: dict
  sample: {gpufleet_bundled_nvshmem: "python '/opt/torch/.venv/bin/python' failed to report its site-packages
           directories: /opt/torch/.venv/bin/python failed (rc=127): No such file or directory"}
gather_warnings:
  description:
    - The facts sets that were gathered but whose reads found nothing that defines a GPU node, by facts name, each a
      list of sentences (each also a warning) - a root with none of C(/etc/os-release), C(/usr/lib/os-release),
      C(/proc/modules), C(/sys/module) under it, a C(/sys) without any PCI device, no NVIDIA GPU among the PCI
      devices, no driver file at O(params_path) nor O(version_path), an interpreter O(python) that is missing or
      could not report its packages, an env script that cannot be read as text. Such a node is not a clean one.
  returned: always
  type: dict
  sample: {gpufleet_gpus: ["sysfs_root /sys looks empty: no PCI device under /sys/bus/pci/devices, so no
           GPU or RDMA device can be found (expected sysfs mounted at /sys, or a tree shaped like it)"]}
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpufleet_nvidia:
      description:
        - With V(nvidia) in O(gather), the driver facts of M(gpufleet.deepep.nvidia_params) (see its documentation
          for every key).
      returned: when O(gather) holds V(nvidia)
      type: dict
      sample: {driver_loaded: true, driver_version: 580.95.05, peer_mapping_override_active: true,
               reboot_required: false, reboot_reasons: []}
    gpufleet_deepep_v2:
      description:
        - With V(deepep_v2) in O(gather), DeepEP V2's runtime requirements on the node.
        - C(nvcc) (C(path), C(present), C(release), C(version), C(error)) and C(cuobjdump) (C(path), C(present)) -
          V2 compiles its kernels on the node (JIT). C(ibstat) (C(path), C(present)). C(dev_infiniband)
          (C(present), C(uverbs)). C(libmlx5) (C(path), C(versions) - the symbol versions its ELF defines, C(newest),
          C(required) - MLX5_1.8 defined, C(gdaki) - MLX5_1.19 defined (GIN GDAKI), C(optional) - MLX5_1.25
          defined (Data Direct), C(error)). C(nic) (C(name) - the
          E(EP_NIC_NAME), C(source) - option, env_script or default, C(present), C(active), C(active_devices)).
          C(cumem_disabled) (each place E(NCCL_CUMEM_ENABLE=0) is set, with C(where) and C(value)). C(tree) (C(path),
          C(headers), C(cuda128_host_code), C(sm100_st_bulk), C(gin_barrier), C(agrs_memop) - true, false or null,
          C(error)). C(stream_memops) (the driver's EnableStreamMemOPs, null where unread).
          C(compute_capabilities) of the GPUs. C(nccl) (C(built), C(loaded)). C(over_rdma), C(across_nodes).
        - C(checks) - one entry per check, in this order - C(nvcc), C(cuobjdump), C(sm100_cuda),
          C(cuda128_host_code), C(ibstat), C(nic_name), C(libmlx5), C(dev_infiniband), C(nccl_cumem),
          C(nccl_build_runtime), C(gin_barrier), C(agrs_memop) - each C(check), C(status) (C(pass), C(fail), C(warn) or
          C(not_applicable)), C(found), C(reason) and C(fix) (what to do; null on a pass).
        - C(failed) and C(warnings) name the checks of that status; C(ready) is true when none failed.
      returned: when O(gather) holds V(deepep_v2)
      type: dict
      sample:
        nvcc: {path: /usr/local/cuda/bin/nvcc, present: true, release: "12.9", version: 12.9.86, error: null}
        cuobjdump: {path: /usr/local/cuda/bin/cuobjdump, present: true}
        ibstat: {path: /usr/sbin/ibstat, present: true}
        dev_infiniband: {present: true, uverbs: [uverbs0]}
        libmlx5: {path: /usr/lib/x86_64-linux-gnu/libmlx5.so.1, versions: [MLX5_1.0, MLX5_1.8, MLX5_1.19, MLX5_1.25],
                  newest: MLX5_1.25, required: true, gdaki: true, optional: true, error: null}
        nic: {name: mlx5_0, source: env_script, present: true, active: true, active_devices: [mlx5_0]}
        cumem_disabled: []
        tree: {path: /opt/torch/.venv/lib/python3.12/site-packages/deep_ep,
               headers: /opt/torch/.venv/lib/python3.12/site-packages/deep_ep/include/deep_ep/common,
               cuda128_host_code: true, sm100_st_bulk: false, gin_barrier: false, error: null}
        compute_capabilities: ["9.0"]
        nccl: {built: 2.30.7, loaded: 2.30.7}
        over_rdma: true
        across_nodes: true
        checks:
          - {check: nvcc, status: pass, found: "12.9", reason: nvcc 12.9 >= 12.3, fix: null}
          - {check: gin_barrier, status: fail, found: false, reason: the V2 tree lacks the GIN barrier fix,
             fix: use a DeepEP V2 tree with PR 715}
        failed: [gin_barrier]
        warnings: []
        ready: false
    gpufleet_nccl_ep:
      description:
        - With V(nccl_ep) in O(gather), NCCL EP in the environment of O(python) (the facts of
          M(gpufleet.deepep.nccl_ep_env); see its documentation for every key).
      returned: when O(gather) holds V(nccl_ep)
      type: dict
      sample: {installed: true, version: 0.1.0, requires_nccl: 2.30.7,
               nccl: {package: nvidia-nccl-cu13, version: 2.30.7, package_version: 2.30.7, cuda_major: 13}, missing: [],
               checks: [{check: nccl_version, status: pass, found: 2.30.7, reason: null, fix: null}]}
    gpufleet_linkage:
      description:
        - With V(linkage) in O(gather), the linkage record of the installed DeepEP (C(linkage) of schema 1 in its
          build stamp C(deep_ep/.gpufleet-build.json)) checked against the node.
        - C(record) is the stamp read (C(path), C(present), C(schema), C(generation), C(key), C(reason) when there is
          no usable record). C(checks) holds one entry per check (C(gpu_arch) one per compute capability of the
          GPUs), each C(check), C(ok) (true, false, or null when it cannot be known - C(reason) says why, never a
          guess), C(expected), C(found), C(fix) (what to do when it fails), C(reason) and C(warning) (a pass with a
          caveat, such as PTX JIT-compiled for lack of SASS).
        - C(nccl) - the NCCL the torch environment loads (its pip C(nvidia-nccl-cu*) package's C(libnccl.so.2),
          read for its C(NCCL version) string, else the package metadata) against the record's NCCL header version;
          below NCCL 2.31 DeepEP V2 needs them equal, from 2.31 on the runtime at least the build's.
          C(nvshmem) - the NVSHMEM host library that would load (the env script's C(LD_PRELOAD), else the extension's
          RUNPATH) against the record's device library version (equal majors, device minor <= host minor).
          C(gpu_arch) - each GPU's SM against the embedded SASS (PTX only is a C(warning)). C(torch) - the installed
          torch against the record's. C(libstdcxx) - a static libstdc++ in a DeepEP V2 extension fails.
        - C(ok) is false when a check failed, null when one is unknown, else true; C(failed) and C(unknown) name
          those checks; C(warnings) lists the warnings.
      returned: when O(gather) holds V(linkage)
      type: dict
      sample:
        record: {path: /opt/torch/.venv/lib/python3.12/site-packages/deep_ep/.gpufleet-build.json, present: true,
                 schema: 1, generation: v2, key: 9d0f5c3e1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d,
                 reason: null}
        ok: false
        checks:
          - {check: nccl, ok: false, expected: 2.30.7, found: 2.28.9, warning: null,
             library: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2,
             reason: "DeepEP V2 built against NCCL 2.30.7, the torch environment loads 2.28.9 (...)",
             fix: "re-pin NCCL in the torch environment to the build's: pip install --no-deps --force-reinstall
                   nvidia-nccl-cu13==2.30.7 (DeepEP #710), or rebuild DeepEP against the loaded NCCL 2.28.9"}
          - {check: torch, ok: true, expected: 2.11.0+cu130, found: 2.11.0+cu130, fix: null, warning: null,
             reason: "built against torch 2.11.0+cu130; the torch environment has torch 2.11.0+cu130"}
        failed: [nccl]
        unknown: []
        warnings: []
    gpufleet_gpu_fabric:
      description:
        - With V(gpu_fabric) in O(gather), each GPU's NVLink fabric state from C(nvidia-smi -q) (O(nvidia_smi), else
          C(nvidia-smi) from PATH). C(error) says why nothing was read (nvidia-smi missing, failed, timed out or
          printing no GPU block); null otherwise. C(driver_version), C(cuda_version) and C(attached_gpus) are its
          header's.
        - C(gpus) - one entry per GPU block - C(bus_id), C(product_name), C(state) (C(Completed), C(In Progress),
          C(Not Started), C(N/A), C(Not Supported); null without a Fabric section), C(status) (C(Success),
          C(Insufficient Resources), ...), C(clique_id) (an integer, null for N/A), C(cluster_uuid) (null for N/A
          and for the all-zero UUID, which means no multi-node domain), C(health_summary), C(bandwidth), C(ready)
          (State Completed, Status Success and a non-zero ClusterUUID, NCCL's own rule for multi-node NVLink) and
          C(why) (why not ready; null when ready).
        - C(all_ready) (every GPU ready, and at least one), C(cluster_uuids) and C(clique_ids) (the distinct values,
          sorted), C(supported) (a GPU reports a fabric state other than N/A or Not Supported) and C(not_ready) (the
          bus ids of the GPUs not ready).
      returned: when O(gather) holds V(gpu_fabric)
      type: dict
      sample:
        nvidia_smi: /usr/bin/nvidia-smi
        error: null
        driver_version: 570.133.20
        cuda_version: "12.8"
        attached_gpus: 4
        gpus:
          - {bus_id: "00000008:01:00.0", product_name: NVIDIA GB200, state: Completed, status: Success,
             clique_id: 32766, cluster_uuid: 6a130f54-faaa-4b8f-847f-be44ab70f917, health_summary: Healthy,
             bandwidth: Full, ready: true, why: null}
        all_ready: true
        cluster_uuids: [6a130f54-faaa-4b8f-847f-be44ab70f917]
        clique_ids: [32766]
        supported: true
        not_ready: []
    gpufleet_imex:
      description:
        - With V(imex) in O(gather), NVIDIA IMEX on the node (read only).
        - C(installed) - the C(nvidia-imex) binary is there (C(binary) its path).
        - C(config) - C(/etc/nvidia-imex/config.cfg) - C(path), C(present), C(values) (every C(KEY=VALUE)),
          C(unparsed) (lines that are not one), C(server_port), C(cmd_port), C(cmd_enabled) and C(node_config_file)
          (its C(IMEX_NODE_CONFIG_FILE), else C(/etc/nvidia-imex/nodes_config.cfg)).
        - C(nodes_config) - C(path), C(present), C(entries) (each line's first word) and C(addresses) (those that
          are IP addresses).
        - C(channel) - C(/dev/nvidia-caps-imex-channels/channel0) - C(path), C(present), C(char_device),
          C(registered) (C(nvidia-caps-imex-channels) is among the character devices of C(/proc/devices)) and
          C(major).
        - C(channel0_option) - C(NVreg_CreateImexChannel0) - C(configured) (in the modprobe files of O(modprobe_dirs),
          null when unset), C(source) (the file), C(live) (the loaded driver's, from O(params_path)) and C(set)
          (configured to 1, so the driver makes the channel at every load).
        - C(service) - C(state) as C(systemctl is-active nvidia-imex) prints it, C(active), C(error).
        - C(ctl) - C(path) of C(nvidia-imex-ctl), C(state) as C(nvidia-imex-ctl -q) prints it (C(READY),
          C(INITIALIZING), C(WAITING_FOR_PEERS), C(WAITING_FOR_RECOVERY), C(UNAVAILABLE)), C(ready), C(error).
      returned: when O(gather) holds V(imex)
      type: dict
      sample:
        installed: true
        binary: /usr/bin/nvidia-imex
        config: {path: /etc/nvidia-imex/config.cfg, present: true,
                 values: {SERVER_PORT: "50000", IMEX_CMD_PORT: "50005", IMEX_CMD_ENABLED: "1",
                          IMEX_NODE_CONFIG_FILE: /etc/nvidia-imex/nodes_config.cfg},
                 unparsed: [], server_port: 50000, cmd_port: 50005, cmd_enabled: true,
                 node_config_file: /etc/nvidia-imex/nodes_config.cfg}
        nodes_config: {path: /etc/nvidia-imex/nodes_config.cfg, present: true, entries: [172.31.48.81, 172.31.48.82],
                       addresses: [172.31.48.81, 172.31.48.82]}
        channel: {path: /dev/nvidia-caps-imex-channels/channel0, present: true, char_device: true, registered: true,
                  major: 507}
        channel0_option: {configured: 1, source: /etc/modprobe.d/nvidia-imex.conf, live: 1, set: true}
        service: {state: active, active: true, error: null}
        ctl: {path: /usr/bin/nvidia-imex-ctl, state: READY, ready: true, error: null}
    gpufleet_rdma:
      description: With V(rdma) in O(gather), the facts of M(gpufleet.deepep.rdma_devices).
      returned: when O(gather) holds V(rdma)
      type: dict
      sample: {devices: [], active_devices: [mlx5_0], hca_prefix: mlx5, transport: roce, recommended_gid_index: 3}
    gpufleet_gpus:
      description: With V(gpus) in O(gather), the facts of M(gpufleet.deepep.gpu_topology).
      returned: when O(gather) holds V(gpus)
      type: dict
      sample: {gpu_count: 8, cuda_arch_list: "10.0", deepep_hca_mapping: "0:mlx5_0:1,1:mlx5_1:1",
               driver_version: 580.95.05}
    gpufleet_bundled_nvshmem:
      description:
        - With V(bundled_nvshmem) in O(gather), the facts of M(gpufleet.deepep.pytorch_bundled_nvshmem) for
          O(python), O(nvshmem_prefix) and O(env_script), read by the same code, before anything is replaced or
          preloaded (V(bundled_would_win) counts only the preload of O(env_script)).
      returned: when O(gather) holds V(bundled_nvshmem)
      type: dict
      sample: {bundled_would_win: false, mismatch: false, preload: /opt/deepep/nvshmem/lib/libnvshmem_host.so.3}
    gpufleet_sglang:
      description:
        - With V(sglang) in O(gather), the SGLang stack of O(sglang_python) exactly as
          M(gpufleet.deepep.sglang_env) returns it with C(state=facts), computed by the same code - the versions,
          C(deep_ep), C(ld_library_path), C(libraries), C(nvshmem_ok), C(transfer), C(deepgemm_cache), the
          constraints file's C(holds) and what C(moved). See
          RV(gpufleet.deepep.sglang_env#module:ansible_facts.gpufleet_sglang) for every key.
      returned: when O(gather) holds V(sglang) and the interpreter reported its packages
      type: dict
      sample: {python: /opt/torch/.venv/bin/python, virtualenv: true,
               versions: {sglang: 0.5.8, kernel_package: sgl-kernel, kernel: 0.3.21, torch: 2.9.1+cu129,
                          nccl: 2.28.3, deep_ep: 1.2.1},
               torch_cuda: "12.9", nvshmem_ok: true, holds: {torch: 2.9.1+cu129, deep-ep: 1.2.1},
               constraint_file: /opt/torch/.venv/gpufleet-constraints.txt, moved: []}
    gpufleet_serve_node:
      description:
        - With V(serve_node) in O(gather), the engine node's facts for M(gpufleet.deepep.serve_plan) (its
          O(gpufleet.deepep.serve_plan#module:nodes) by inventory name) - C(interfaces) (C(name), C(up), C(ipv4)
          list; null when C(ip) failed, with C(interfaces_error)), C(env) (the values a unit gets from the env
          scripts), C(env_scripts) (those read), C(missing_env_scripts), C(deepgemm) (C(file), C(key), C(args) of
          every cache marker), C(deepgemm_dir), C(errors).
      returned: when O(gather) holds V(serve_node)
      type: dict
      sample: {interfaces: [{name: eth0, up: true, ipv4: [10.0.0.3]}], interfaces_error: "",
               env: {NVSHMEM_IB_ENABLE_IBGDA: "1"}, env_scripts: [/opt/deepep/unified-env.sh],
               missing_env_scripts: [], deepgemm: [{file: /var/cache/sglang/deep_gemm/.gpufleet-deepgemm-ab12.json,
               key: ab12, args: [--tp-size, "8"]}], deepgemm_dir: /var/cache/sglang/deep_gemm, errors: []}
    gpufleet_modules:
      description:
        - With V(modules) in O(gather), the loaded kernel modules (V(loaded), sorted), where the list came from
          (V(source), C(/proc/modules), else C(lsmod), else C(/sys/module) (every module whose C(initstate) is
          C(live)); null when none could be read), the kernel release (V(kernel)), its module directory
          (V(module_dir), C(/lib/modules/<release>)) and the C(modules.dep) (V(module_index)) and C(modules.builtin)
          (V(builtin_index)) read there (null where they could not be read).
        - For each of O(module_names), V(states) gives V(state) - V(loaded) (listed in V(source), or
          C(/sys/module/<name>/initstate) is C(live)), V(builtin) (C(/sys/module/<name>) without C(initstate), or
          listed in C(modules.builtin)) or V(absent) - with the V(source) that said so, V(loadable) for an absent
          one (true when C(modules.dep) lists it, false when it does not or the kernel has no module directory,
          null when unknown) and a V(reason) in words. V(present) is whether each is loaded or built in; V(builtin),
          V(absent) and V(not_in_kernel) (absent, and the kernel has no module for it) list the names.
        - The same reader gives RV(ansible_facts.gpufleet_stack.kernel_modules).
      returned: when O(gather) holds V(modules)
      type: dict
      sample: {loaded: [nvidia, nvidia_uvm], source: /proc/modules, kernel: 6.18.44-fc-v657-gpu,
               module_dir: /lib/modules/6.18.44-fc-v657-gpu, module_index: null, builtin_index: null,
               states: {mlx5_core: {state: builtin, source: /sys/module/mlx5_core, loadable: null,
                                    reason: "/sys/module/mlx5_core exists without initstate: built into the kernel"},
                        nvidia_peermem: {state: absent, source: /lib/modules/6.18.44-fc-v657-gpu, loadable: false,
                                         reason: "not loaded, not built in, and the kernel has no
                                                  /lib/modules/6.18.44-fc-v657-gpu (no loadable modules)"}},
               present: {mlx5_core: true, nvidia_peermem: false}, builtin: [mlx5_core], absent: [nvidia_peermem],
               not_in_kernel: [nvidia_peermem]}
    gpufleet_paths:
      description:
        - With V(paths) in O(gather), each of O(paths) as it is now, by path. V(type) is V(file), V(directory),
          V(link), V(other) or null when absent; V(sha1) is given for regular files up to 16 MiB; V(target) and
          V(target_exists) for symlinks; V(sha256) for the paths of O(hash_paths) (null unless a readable regular
          file).
      returned: when O(gather) holds V(paths)
      type: dict
      sample: {/opt/deepep/unified-env.sh: {exists: true, type: file, mode: "0644", uid: 0, gid: 0,
               sha1: 0a4d55a8d778e5022fab701977c5d840bbc486d0, target: null, target_exists: false}}
    gpufleet_packages:
      description:
        - With V(packages) in O(gather), the installed version of each of O(packages) (V(installed), null when the
          package is not installed, or only its configuration files are) and the names not installed (V(missing)).
      returned: when O(gather) holds V(packages)
      type: dict
      sample: {installed: {cmake: "3.25.1-1", ninja-build: null}, missing: [ninja-build]}
    gpufleet_cuda_toolkit:
      description:
        - With V(cuda_toolkit) in O(gather), the CUDA toolkit at O(cuda_home), from its C(version.json), else the
          C(release) that C(nvcc --version) prints. V(version) and V(release) are empty and V(error) says why
          when neither gives a version.
      returned: when O(gather) holds V(cuda_toolkit)
      type: dict
      sample: {home: /usr/local/cuda-13.0, version: 13.0.2, release: "13.0", source: version.json, error: null}
    gpufleet_model:
      description:
        - With V(model) in O(gather), the facts of O(model_path) in the shape of M(gpufleet.deepep.model_config)'s
          RV(gpufleet.deepep.model_config#module:ansible_facts.gpufleet_model) (architecture, heads, experts,
          quantization, the sha256 of C(config.json); V(hub_id) true and no config facts for a hub id).
      returned: when O(gather) holds V(model)
      type: dict
      sample: {path: /opt/models/deepseek-v3, hub_id: false, architecture: DeepseekV3ForCausalLM,
               num_attention_heads: 128, num_experts: 256, moe: true}
    gpufleet_serving:
      description:
        - With V(serving) in O(gather), the node's serving state in the shape of M(gpufleet.deepep.serve_state)'s
          RV(gpufleet.deepep.serve_state#module:ansible_facts.gpufleet_serving) (read by the same code).
      returned: when O(gather) holds V(serving)
      type: dict
      sample: {config_dir: /etc/gpufleet/sglang-serve, prefix: sglang, units: [], router: null}
    gpufleet_nccl:
      description:
        - With V(nccl) in O(gather), the NCCL of the environment of O(python) in the shape of
          M(gpufleet.deepep.nccl_env)'s RV(gpufleet.deepep.nccl_env#module:ansible_facts.gpufleet_nccl) (read by the
          same code; nothing is pinned). V(drift) says why a recorded pin no longer holds.
      returned: when O(gather) holds V(nccl)
      type: dict
      sample: {python: /opt/torch/.venv/bin/python, package: nvidia-nccl-cu13, package_version: 2.28.9,
               nccl_root: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl, version: 2.30.7, source: build,
               pinned: true, drift: []}
    gpufleet_initramfs:
      description:
        - With V(initramfs) in O(gather), the image at O(initramfs_path). V(present) whether it exists, V(listed)
          whether C(lsinitramfs) listed it (V(error) says why not), V(nvidia) whether it holds an nvidia kernel
          module (C(nvidia.ko*), C(nvidia-<name>.ko*)), listed in V(nvidia_modules).
      type: dict
      returned: when O(gather) holds V(initramfs)
      sample: {path: /boot/initrd.img-6.8.0-31-generic, present: true, listed: true, nvidia: true,
               nvidia_modules: [usr/lib/modules/6.8.0-31-generic/updates/dkms/nvidia.ko.zst], error: null}
    gpufleet_torch:
      description:
        - With V(torch) in O(gather), the torch of O(python), read from package metadata and C(torch/version.py)
          without importing torch. V(packages) maps the name of each of O(torch_packages) to its installed
          version (null when missing). V(python) is the interpreter's C(sys.executable); it and every version are
          null when the interpreter could not be run, and V(error) says why.
      type: dict
      returned: when O(gather) holds V(torch)
      sample: {python: /opt/torch/.venv/bin/python, python_version: 3.12.3, torch_version: 2.11.0+cu130,
               torch_cuda: "13.0", torch_path: /opt/torch/.venv/lib/python3.12/site-packages/torch,
               numpy_version: 2.3.4, packages: {numpy: 2.3.4}, error: null}
    gpufleet_hca_mapping:
      description:
        - With V(hca_mapping) in O(gather), E(DEEP_EP_DEVICE_TO_HCA_MAPPING) as O(env_script) sets it (V(mapping),
          empty when unset; the script is sourced in a child shell when readable, V(env_sourced)), and whether
          the C(deep_ep) of O(python) applies it (V(supported), whether C(Buffer._setup_device_hca_mapping) exists, DeepEP PR
          466; null when C(deep_ep) does not import, V(import_error) says why). V(error) is set when the probe
          could not run.
      type: dict
      returned: when O(gather) holds V(hca_mapping)
      sample: {mapping: "0:mlx5_0,1:mlx5_1", supported: true, import_error: null, env_sourced: true, error: null}
    gpufleet_gdrdrv:
      description:
        - With V(gdrdrv) in O(gather), the gdrdrv kernel module of O(gdrcopy_src). V(module_path) is its
          C(src/gdrdrv/gdrdrv.ko) and V(built) whether that is a regular file; V(stamp_path) is the build stamp the
          C(gdrcopy) role writes beside it (C(.gpufleet-driver.json)), V(stamp) its JSON object (null when absent,
          unreadable or not an object) and V(key) the stamp's build key (null without a string C(key)); V(loaded)
          whether C(gdrdrv) is among the loaded kernel modules (as V(loaded) of RV(ansible_facts.gpufleet_modules)).
      returned: when O(gather) holds V(gdrdrv)
      type: dict
      sample: {src: /opt/deepep/src/gdrcopy-2.5.1, module_path: /opt/deepep/src/gdrcopy-2.5.1/src/gdrdrv/gdrdrv.ko,
               built: true, stamp_path: /opt/deepep/src/gdrcopy-2.5.1/src/gdrdrv/.gpufleet-driver.json,
               stamp: {key: 9d1c0e54f3b7a2c8e6f1d0b4a3c2e1f09d1c0e54f3b7a2c8e6f1d0b4a3c2e1f0, kernel: 6.8.0-1015-gcp},
               key: 9d1c0e54f3b7a2c8e6f1d0b4a3c2e1f09d1c0e54f3b7a2c8e6f1d0b4a3c2e1f0, loaded: true}
    gpufleet_deepep_jit:
      description:
        - With V(jit_cache) in O(gather), DeepEP V2's JIT cache at O(jit_cache_dir) in the shape
          M(gpufleet.deepep.deepep_jit_cache) returns - V(kernels) (the kernel names present), V(kernel_count) (the
          complete kernel directories, each with its C(kernel.cubin)), V(key) (the key the cache's record names;
          null without a record), V(current) (the record's kernels are all there), V(from) (C(compiled) or C(store)),
          V(compiled_seconds) and V(loaded_seconds) (the warm-ups the deepep role timed) and V(compiled) and
          V(loaded) (their kernel counts); the record's fields are null without one.
      returned: when O(gather) holds V(jit_cache)
      type: dict
      sample: {cache_dir: /var/cache/deepep/jit, key: 9c1e0d2b, current: true, kernels: [combine, dispatch],
               kernel_count: 11, from: store, compiled_seconds: 59.7, loaded_seconds: 45.7, compiled: 11, loaded: 11}
    gpufleet_imports:
      description:
        - With V(imports) in O(gather), whether O(python) imports each of O(import_modules) (V(modules)); V(ok)
          is false and V(error) says why when the interpreter could not run.
      returned: when O(gather) holds V(imports)
      type: dict
      sample: {python: /usr/bin/python3, ok: true, modules: {pip: true}, error: null}
    gpufleet_symbols:
      description:
        - With V(symbols) in O(gather), for each header of O(symbol_files), whether it exists (V(present)) and
          which of its symbols it declares (V(symbols)).
      returned: when O(gather) holds V(symbols)
      type: dict
      sample: {/usr/include/infiniband/mlx5_api.h: {present: true,
               symbols: {MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT: false}}}
    gpufleet_stack:
      description: The node's software stack.
      returned: when O(gather) holds V(stack) (the default)
      type: dict
      contains:
        os:
          description: Distribution (from C(/etc/os-release)) and running kernel.
          type: dict
          returned: always
          sample: {id: ubuntu, version_id: "24.04", version_codename: noble,
                   pretty_name: Ubuntu 24.04.1 LTS, kernel: 6.14.0-1011-gcp}
        cuda:
          description:
            - The CUDA toolkit at O(cuda_home). V(release) is C(major.minor), V(version) the full nvcc version;
              V(error) says why they are null.
          type: dict
          returned: always
          sample: {home: /usr/local/cuda, nvcc: /usr/local/cuda/bin/nvcc, nvcc_present: true,
                   release: "13.0", version: 13.0.88, error: null}
        packages:
          description: Installed versions of the O(dpkg_packages) that are installed.
          type: dict
          returned: always
          sample: {rdma-core: 2501mlnx56-1.2501060, libibverbs-dev: 2501mlnx56-1.2501060, doca-ofed: 3.2.1-0}
        rdma_core:
          description:
            - rdma-core and DOCA versions and the MLX5DV symbols of C(infiniband/mlx5_api.h).
            - >-
              V(mlx5dv_ok) follows what the installed NVSHMEM (C(nvshmem.version) of these facts)
              needs of the header; V(mlx5dv_rule) says why (V(required), V(missing), V(waived) - the symbols the
              header lacks that this NVSHMEM defines itself - and V(reason)). NVSHMEM 3.4.5 and newer define
              C(MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT) themselves; an older or unknown version needs it.
            - >-
              V(libmlx5) is libmlx5 as NVSHMEM IBGDA loads it at run time (C(libmlx5.so.1) from the ld cache, its
              ELF symbol versions read without running anything) - V(path), V(newest), V(required) (C(MLX5_1.8),
              C(mlx5dv_is_supported)) and V(required_ok), V(optional) (C(MLX5_1.25), data-direct and dma-buf) and
              V(optional_ok), null where it could not be read (V(error)).
          type: dict
          returned: always
          sample: {rdma_core_version: "50.0-2build2", libibverbs_dev_version: "50.0-2build2", doca_version: null,
                   mlx5_header: /usr/include/infiniband/mlx5_api.h, mlx5_header_present: true,
                   mlx5dv_symbols: {MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT: false}, mlx5dv_ok: false,
                   mlx5dv_rule: {nvshmem_version: 3.2.5-1, required: [MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT],
                                 missing: [MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT], waived: [],
                                 reason: "NVSHMEM 3.2.5-1 (older than 3.4.5) needs MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT
                                          from rdma-core's headers"},
                   libmlx5: {path: /usr/lib/x86_64-linux-gnu/libmlx5.so.1, newest: MLX5_1.24, required: MLX5_1.8,
                             required_ok: true, optional: MLX5_1.25, optional_ok: false, error: null}}
        kernel_modules:
          description:
            - Whether each watched kernel module is loaded or built into the kernel (the reader of
              RV(ansible_facts.gpufleet_modules)).
          type: dict
          returned: always
          sample: {nvidia: true, nvidia_peermem: false, nvidia_uvm: true, gdrdrv: false, mlx5_core: true,
                   mlx5_ib: true, ib_core: true}
        kernel_module_states:
          description:
            - Each watched kernel module's V(state) (V(loaded), V(builtin) or V(absent)), V(source), V(loadable) and
              V(reason), as V(states) of RV(ansible_facts.gpufleet_modules).
          type: dict
          returned: always
          sample: {mlx5_core: {state: builtin, source: /sys/module/mlx5_core, loadable: null,
                               reason: "/sys/module/mlx5_core exists without initstate: built into the kernel"},
                   nvidia: {state: loaded, source: /proc/modules, loadable: null, reason: "listed in /proc/modules"}}
        libcuda:
          description:
            - Where C(libcuda.so) (what C(-lcuda) links), C(libcuda.so.1) and the toolkit stub are.
              V(linkable) is false when no unversioned C(libcuda.so) is in the linker's search path.
          type: dict
          returned: always
          sample: {so_path: /usr/lib/x86_64-linux-gnu/libcuda.so, so1_path: /usr/lib/x86_64-linux-gnu/libcuda.so.1,
                   stub_path: /usr/local/cuda/lib64/stubs/libcuda.so, linkable: true}
        gdrcopy:
          description: The GDRCopy user library (C(libgdrapi.so*)) and whether C(gdrdrv) is loaded.
          type: dict
          returned: always
          sample: {library: /opt/deepep/gdrcopy/lib/libgdrapi.so.2, library_present: true, gdrdrv_loaded: false}
        python:
          description: The interpreter given as O(python) and whether its metadata probe worked.
          type: dict
          returned: always
          sample: {path: /opt/torch/.venv/bin/python, version: 3.12.3, ok: true}
        torch:
          description:
            - torch's version from its package metadata and the CUDA of its C(+cuXYZ) label.
            - V(error) says why V(version) is null - O(python) not found (C(not found at <path>)) or failing, so torch
              is unknown rather than absent, or no torch package in that interpreter's environment; null when found.
          type: dict
          returned: always
          sample: {version: 2.11.0+cu130, cuda: "13.0", location: /opt/torch/.venv/lib/python3.12/site-packages,
                   error: null}
        nccl:
          description:
            - NCCL from pip (C(nvidia-nccl-cu*) in the interpreter's environment) and from the system (C(nccl.h),
              C(libnccl.so.2)). V(loaded_version) is the NCCL torch loads, its pip package when installed.
          type: dict
          returned: always
          sample: {pip: [{name: nvidia-nccl-cu13, version: 2.28.9, location: /opt/torch/.venv/lib/python3.12/site-packages}],
                   pip_version: 2.28.9, system_version: null, system_header: null, system_library: null,
                   loaded_version: 2.28.9}
        deep_ep_package:
          description: The installed C(deep_ep) distribution (name, version, location), or null.
          type: dict
          returned: always
          sample: {name: deep_ep, version: 1.2.1+567632d, location: /opt/torch/.venv/lib/python3.12/site-packages}
        nvshmem:
          description:
            - The NVSHMEM install at O(nvshmem_prefix), in the shape of the C(gpufleet_nvshmem) facts of
              M(gpufleet.deepep.nvshmem_build), read from the build stamp and the install's files. V(verified) is
              always null, since only the build module runs the verification.
          type: dict
          returned: always
          sample: {prefix: /opt/deepep/nvshmem, present: true, version: 3.4.5, ibgda: true,
                   key: 3f9a1c0e5b7d2a4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5,
                   libraries: [libnvshmem_host.so.3, nvshmem_transport_ibgda.so.3], built_at: "2026-11-22T03:04:05Z",
                   cuda_arch: "100", cuda_version: 13.0.88, roce_ah_attr_fix: true, verified: null,
                   stamp: /opt/deepep/nvshmem/.gpufleet-build.json}
        env_script:
          description:
            - The environment script, read as data and never run. V(exports) holds the variables its
              C(export NAME=value) (and C(NAME=value) then C(export NAME)) lines set, expanded (C($NAME), C(${NAME}),
              C(${NAME:-word}), C(${NAME:+word}) of values set before); V(exports_raw) the unexpanded right-hand sides;
              V(unparsed) one message per line that is not such a line (a conditional, a command, a command
              substitution), naming the line.
            - V(error) says why a present script could not be read as text (not UTF-8, NUL bytes, an OS error),
              naming the file; its exports are then empty, nothing is listed as unparsed, and C(errors) holds it too.
          type: dict
          returned: always
          sample: {path: /opt/deepep/unified-env.sh, present: true, mode: "0644",
                   sha256: 3f9a0c1d2e4b5a69788776655443322110ffeeddccbbaa998877665544332211,
                   exports: {NVSHMEM_REMOTE_TRANSPORT: ibgda, NVSHMEM_IB_GID_INDEX: "3",
                             LD_PRELOAD: /opt/deepep/nvshmem/lib/libnvshmem_host.so.3},
                   exports_raw: {LD_PRELOAD: '"${NVSHMEM_HOME}/lib/libnvshmem_host.so.3"'}, unparsed: []}
        deep_ep_import:
          description:
            - C(import deep_ep) in a fresh process (no shell) whose environment is this module's plus the variables the
              environment script exports, read as data (when the script is present). A script with lines the reader
              does not take (V(env_script.unparsed)) is not tried, and V(error) names the lines.
              V(error) holds the last lines of the failure (for example an C(undefined symbol) after a torch change).
              V(skipped) says why the import was left out (O(import_when=changed)); V(checked) is then false.
            - V(mapped) lists, after a successful import, the NCCL (C(nccl)) and NVSHMEM host (C(nvshmem_host))
              libraries that process has mapped (C(/proc/self/maps), real paths, each file once); null when it did not
              import. Two NCCLs in one process is the state a later pip install leaves beside the pinned one.
          type: dict
          returned: always
          sample: {checked: true, ok: false, env_sourced: true, file: null, version: null, rc: 1, skipped: null,
                   error: "ImportError: deep_ep_cpp.so: undefined symbol: _ZNK3c1010TensorImpl15incref_pyobjectEv",
                   mapped: null}
        deepep:
          description:
            - The installed DeepEP in the shape of the C(gpufleet_deepep) facts of M(gpufleet.deepep.deepep_build), read
              from package metadata, the import probe and the build stamp C(.gpufleet-build.json) that module writes into
              the package directory. V(nvshmem_build) is the NVSHMEM the build used (C(root), C(version), C(ibgda)).
            - V(nvshmem_rc_layout) is the build's record of how its tree indexes NVSHMEM's IBGDA RC queue pairs
              (C(tree), C(compiled)), as M(gpufleet.deepep.deepep_build) returns it; null for a build that did not
              record it.
            - V(import_ok) is null when O(import_check=false).
            - V(import_error) also says when O(python) was not found or could not report its packages (then
              V(installed) false means unknown, not absent).
          type: dict
          returned: always
          sample: {installed: true, version: 1.2.1, generation: v1,
                   key: 9d0f5c3e1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a6b8c0d2e4f6a8b0c2d,
                   built_against: {torch: 2.11.0+cu130, cuda: 13.0.88, nvshmem: 3.4.5, nccl: 2.28.9, arch_list: "9.0"},
                   nvshmem_build: {root: /opt/deepep/nvshmem, version: 3.4.5, ibgda: true},
                   wheel: /opt/deepep/artifacts/deepep/9d0f/deep_ep-1.2.1-cp312-cp312-linux_x86_64.whl,
                   import_ok: true, import_error: null, hca_mapping_support: true,
                   nvshmem_rc_layout: {tree: {fix: "#564", selects: state_type, runtime_check: false,
                                              file: csrc/kernels/ibgda_device.cuh}, compiled: pe_major},
                   location: /opt/torch/.venv/lib/python3.12/site-packages/deep_ep, python: /opt/torch/.venv/bin/python,
                   stamp: /opt/torch/.venv/lib/python3.12/site-packages/deep_ep/.gpufleet-build.json}
        peermem_loaded:
          description: Whether C(nvidia_peermem) is loaded.
          type: bool
          returned: always
          sample: false
        host:
          description:
            - Kernel settings DeepEP and the field's admission checks read. C(numa_balancing) - the value of
              C(/proc/sys/kernel/numa_balancing) (a bitmask; any non-zero value runs the kernel's NUMA page scanning,
              which DeepEP's pull requests 644 and 679 warn of; rule C(HOST_NUMA_BALANCING)), null where procfs lacks
              it. C(numa_nodes) - the NUMA nodes online (C(/sys/devices/system/node/online)). C(uvm_disable_hmm) -
              nvidia_uvm's parameter (C(Y) or C(N)), null where the module is not loaded.
          type: dict
          returned: always
          sample: {numa_balancing: 0, numa_nodes: 2, uvm_disable_hmm: "N"}
        reboot:
          description:
            - Whether a reboot is pending, from C(/var/run/reboot-required) and O(nvidia_reboot_required).
          type: dict
          returned: always
          sample: {required: true, reasons: [gpufleet_nvidia.reboot_required], packages: [],
                   nvidia_reboot_required: true}
        errors:
          description:
            - Probes that could not run, by name, with the reason (the other facts are still returned).
            - C(root) when the node's root looks empty, C(python) when O(python) is missing or failed (naming the option to
              set), C(env_script) when the script cannot be read as text; these are also in RV(gather_warnings).
          type: dict
          returned: always
          sample: {python: "python /opt/torch/.venv/bin/python not found at /opt/torch/.venv/bin/python: the torch,
                   NCCL and DeepEP facts of gpufleet_stack are unknown, not absent; set the python option (audit_python
                   in the audit role) to the interpreter of the torch environment, such as /opt/torch/.venv/bin/python"}
"""

import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.deepep_jit import cache_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl import NcclError
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl_read import (
    probe_python,
    read_nccl,
    resolve_python,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.fact_sets import GatherError
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import DEFAULT_MODPROBE_DIRS
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    DEFAULT_VERSION_PATH,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.role_facts import (
    PathsError,
    gather_cuda_toolkit,
    gather_gdrdrv,
    gather_hca_mapping,
    gather_imports,
    gather_initramfs,
    gather_modules,
    gather_packages,
    gather_paths,
    gather_symbols,
    gather_torch,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._http import url_secrets
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.model import ModelError, read_model
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.state import ServeStateInputError, serving_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.node import (
    DEFAULT_DG_CACHE_DIR as DEFAULT_SERVE_DG_CACHE_DIR,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.gather_sets import (
    GATHER_FIELDS,
    GATHERABLE,
    GatherOptions,
    gather_node,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.stack import (
    DEFAULT_DPKG_PACKAGES,
    DEFAULT_MLX5DV_SYMBOLS,
    set_warnings,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.commands import subprocess_runner

# The node's root and sysfs, under which files are read (commands still run on the node itself); private (no
# option): unit tests point them at fixture trees.
_ROOT = "/"
_SYSFS_ROOT = "/sys"

NIC_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


def _jit_cache(params):
    cache_dir = params["jit_cache_dir"]
    if not cache_dir or not os.path.isabs(cache_dir):
        raise PathsError("jit_cache_dir %r: expected the absolute path of DeepEP V2's JIT cache (where "
                         "EP_JIT_CACHE_DIR points), such as /var/cache/deepep/jit" % (cache_dir,))
    return cache_facts(os.path.normpath(cache_dir), root=params["root"])


# The gather sets a role reads for itself (module_utils/_node/role_facts.py), one entry each: the set's name ->
# (the fact it sets, its reader over the module's parameters). They are read in this order, before the stack sets;
# adding a set is one entry here, its choice in DOCUMENTATION and its reader. They are not entries of the stack sets'
# registry (_node/gather_sets.GATHER_SETS) because they are read otherwise: a role set that cannot be read fails the
# module (a stack set is named in gather_errors), its reader takes options the pass has no use for (paths,
# model_path, ...) and runs its own commands, none started with the pass's.
def _model(p):
    """gpufleet_model of model_path (module_utils._serve.model, model_config's reader)."""
    if not p["model_path"]:
        raise PathsError("gather holds model but model_path is empty: expected the model directory on the node "
                         "(or, with model_offline=false, a hub id such as deepseek-ai/DeepSeek-V3)")
    try:
        return read_model(p["model_path"], p["model_offline"], root=p["root"])
    except ModelError as exc:
        raise PathsError(str(exc)) from None


def _nccl(p):
    """gpufleet_nccl of python (module_utils._comm.nccl_read, nccl_env's reader)."""
    try:
        python = resolve_python(p["python"], shutil.which)
        facts, install_site = probe_python(python, lambda argv: subprocess_runner(
            argv, timeout=p["timeout"], env={"PYTHONDONTWRITEBYTECODE": "1"}))
        read_nccl(facts, install_site, constraint_file_from_pin=True)
    except NcclError as exc:
        raise PathsError(str(exc)) from None
    return facts


def _serving(p):
    """gpufleet_serving of the serve_* options (module_utils._serve.state, serve_state's reader)."""
    try:
        return serving_facts(p["serve_config_dir"], p["serve_prefix"], p["serve_router_url"], min(p["timeout"], 30),
                             validate_certs=p["serve_validate_certs"], ca_path=p["serve_ca_path"],
                             option_prefix="serve_")
    except ServeStateInputError as exc:
        raise PathsError(str(exc)) from None


ROLE_READERS = {
    "modules": ("gpufleet_modules", lambda p: gather_modules(p["root"], subprocess_runner, p["module_names"],
                                                             timeout=p["timeout"])),
    "paths": ("gpufleet_paths", lambda p: gather_paths(p["root"], p["paths"], p["hash_paths"])),
    "cuda_toolkit": ("gpufleet_cuda_toolkit", lambda p: gather_cuda_toolkit(p["root"], p["cuda_home"],
                                                                            subprocess_runner, timeout=p["timeout"])),
    "imports": ("gpufleet_imports", lambda p: gather_imports(p["python"], p["import_modules"], subprocess_runner,
                                                             timeout=p["timeout"])),
    "symbols": ("gpufleet_symbols", lambda p: gather_symbols(p["root"], p["symbol_files"])),
    "initramfs": ("gpufleet_initramfs", lambda p: gather_initramfs(p["root"], p["initramfs_path"], subprocess_runner,
                                                                   timeout=p["timeout"])),
    "torch": ("gpufleet_torch", lambda p: gather_torch(p["python"], p["torch_packages"], subprocess_runner,
                                                       timeout=p["timeout"])),
    "hca_mapping": ("gpufleet_hca_mapping", lambda p: gather_hca_mapping(p["root"], p["python"], p["env_script"],
                                                                         subprocess_runner, timeout=p["timeout"])),
    "packages": ("gpufleet_packages", lambda p: gather_packages(p["root"], p["packages"])),
    "gdrdrv": ("gpufleet_gdrdrv", lambda p: gather_gdrdrv(p["root"], p["gdrcopy_src"], subprocess_runner,
                                                          timeout=p["timeout"])),
    "jit_cache": ("gpufleet_deepep_jit", _jit_cache),
    "model": ("gpufleet_model", _model),
    "nccl": ("gpufleet_nccl", _nccl),
    "serving": ("gpufleet_serving", _serving),
}
ROLE_SETS = tuple(ROLE_READERS)


# The options of the stack sets' pass (GatherOptions) from the module's parameters: each field is the option of the
# same name, except those read here.
DERIVED_GATHER_OPTIONS = {
    "dpkg_packages": lambda p: p["dpkg_packages"] or list(DEFAULT_DPKG_PACKAGES),
    "import_check": lambda p: "changed" if p["import_check"] and p["import_when"] == "changed" else p["import_check"],
    "sglang_python": lambda p: p["sglang_python"] or p["python"],
    "sglang_cuda_home": lambda p: p["cuda_home"],
}


def gather_options(params):
    """The GatherOptions of the module's parameters (``root`` and ``sysfs_root`` included)."""
    return GatherOptions(**dict(
        (field, DERIVED_GATHER_OPTIONS[field](params) if field in DERIVED_GATHER_OPTIONS else params[field])
        for field in GATHER_FIELDS))


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            gather=dict(type="list", elements="str", choices=list(GATHERABLE) + list(ROLE_SETS),
                        default=["stack"]),
            paths=dict(type="list", elements="path", default=[]),
            hash_paths=dict(type="list", elements="path", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            module_names=dict(type="list", elements="str", default=[]),
            initramfs_path=dict(type="path"),
            torch_packages=dict(type="list", elements="str", default=[]),
            import_modules=dict(type="list", elements="str", default=[]),
            symbol_files=dict(type="dict", default={}),
            params_path=dict(type="path", default=DEFAULT_PARAMS_PATH),
            version_path=dict(type="path", default=DEFAULT_VERSION_PATH),
            modprobe_dirs=dict(type="list", elements="path", default=list(DEFAULT_MODPROBE_DIRS)),
            nvidia_smi=dict(type="path"),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            python=dict(type="str", default="/usr/bin/python3"),
            env_script=dict(type="path", default="/opt/deepep/unified-env.sh"),
            gdrcopy_home=dict(type="path", default="/opt/deepep/gdrcopy"),
            gdrcopy_src=dict(type="path"),
            jit_cache_dir=dict(type="path"),
            nvshmem_prefix=dict(type="path", default="/opt/deepep/nvshmem"),
            mlx5dv_symbols=dict(type="list", elements="str", default=list(DEFAULT_MLX5DV_SYMBOLS)),
            dpkg_packages=dict(type="list", elements="str"),
            nvidia_reboot_required=dict(type="bool"),
            import_check=dict(type="bool", default=True),
            import_when=dict(type="str", choices=["always", "changed"], default="always"),
            sglang_python=dict(type="str"),
            sglang_nvshmem_home=dict(type="path"),
            sglang_dg_cache_dir=dict(type="path"),
            sglang_constraint_file=dict(type="path"),
            serve_env_scripts=dict(type="list", elements="path", default=[]),
            serve_dg_cache_dir=dict(type="path", default=DEFAULT_SERVE_DG_CACHE_DIR),
            model_path=dict(type="str"),
            model_offline=dict(type="bool", default=True),
            serve_config_dir=dict(type="path", default="/etc/gpufleet/sglang-serve"),
            serve_prefix=dict(type="str", default="sglang"),
            serve_router_url=dict(type="str", default=""),
            serve_validate_certs=dict(type="bool", default=True),
            serve_ca_path=dict(type="path"),
            role_set_errors=dict(type="str", choices=["fail", "record"], default="fail"),
            deepep_v2_tree=dict(type="path"),
            deepep_v2_nic_name=dict(type="str"),
            deepep_v2_over_rdma=dict(type="bool", default=True),
            deepep_v2_gin_mlx5=dict(type="bool", default=True),
            deepep_v2_across_nodes=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )


def _main():
    module = build_module()
    params = dict(module.params, root=_ROOT, sysfs_root=_SYSFS_ROOT)
    module.no_log_values.update(url_secrets(params["serve_router_url"]))  # a password in it: in no message
    if params["timeout"] < 1:
        module.fail_json(msg="timeout=%r: expected a positive number of seconds" % params["timeout"])
    nic = params["deepep_v2_nic_name"]
    if nic is not None and not NIC_NAME_RE.match(nic):
        module.fail_json(msg="deepep_v2_nic_name=%r: expected an RDMA device name (letters, digits, '_', '-' or '.', "
                             "such as mlx5_0)" % (nic,))
    if not os.path.isdir(params["root"]):
        module.fail_json(msg="root %r is not a directory (expected / or a tree shaped like a node's root)"
                             % (params["root"],), gather_errors={}, gather_warnings={})
    facts, errors = {}, {}
    wanted = set(params["gather"])
    for name, (fact, read) in ROLE_READERS.items():
        if name in wanted:
            try:
                facts[fact] = read(params)
            except PathsError as exc:
                if params["role_set_errors"] == "fail":
                    module.fail_json(msg=str(exc), gather_errors={}, gather_warnings={})
                errors[fact] = str(exc)
    stack_sets = [name for name in params["gather"] if name not in ROLE_SETS]
    warnings = {}
    if stack_sets:
        try:
            stack_facts, stack_errors = gather_node(stack_sets, gather_options(params))
        except GatherError as exc:
            module.fail_json(msg=str(exc), gather_errors={}, gather_warnings={})
        facts.update(stack_facts)
        errors.update(stack_errors)
        warnings = set_warnings(stack_facts, root=params["root"], sysfs_root=params["sysfs_root"],
                                params_path=params["params_path"], version_path=params["version_path"])
    for name in sorted(errors):
        module.warn("%s not gathered: %s" % (name, errors[name]))
    # One warning per sentence, naming every set it concerns (an empty sysfs concerns several).
    by_message = {}
    for name in sorted(warnings):
        for message in warnings[name]:
            by_message.setdefault(message, []).append(name)
    for message, names in by_message.items():
        module.warn("%s: %s" % (", ".join(names), message))
    module.exit_json(changed=False, ansible_facts=facts, gather_errors=errors, gather_warnings=warnings)


def main():
    guarded("node_stack", _main)


if __name__ == "__main__":
    main()
