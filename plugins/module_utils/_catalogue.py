# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The stack's versions the collection knows, and the field's breakages between them, as data with their sources.

One home for a version boundary and its evidence: the code that judges a node or a build (``_comm/rc_layout.py``,
the audit rules, the build preflight) reads the boundary from here, so a new release or a new report changes one
entry. Each entry says where it was checked: ``source`` (read in a source tree, with the file), ``thread`` (issue or
pull-request threads only). Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

__all__ = ["BREAKAGES", "DEEPEP_TREES", "REFUTED", "breakage"]

# The breakages a fleet meets moving up the stack. ``boundary``: the first version on the new side.
BREAKAGES = {
    "nvshmem_rc_layout": {
        "component": "nvshmem",
        "boundary": "3.5.19",
        "what": "NVSHMEM stores the IBGDA RC queue pairs QP-major, PE-interleaved (rcs[qp * npes + pe]) where 3.4.5 and "
                "earlier stored them PE-major (rcs[pe * num_rc_per_pe + qp]); the device state is the same size, so "
                "a DeepEP tree indexing the old way loads, then uses another peer's queue pair: the first cross-node "
                "dispatch stalls ('timeout (dispatch CPU)') or faults",
        "affects": "DeepEP kernels that talk IBGDA: V1 internode and low latency across nodes; V2's legacy copies. "
                   "Not intranode (NVLink only, NVSHMEM's RC QPs unused)",
        "fixed_by": {
            "v1": "DeepEP #564 (29d31c0, 2026-01-20; in 567632d and PR #466's head 8a07e7e): ibgda_get_rc_impl in "
                  "csrc/kernels/ibgda_device.cuh picks the layout by the device state's type at compile time",
            "v2": "DeepEP PR #696 (open; vLLM #58159 applies it as a patch): the layout by NVSHMEM's vendor version "
                  "macros in csrc/kernels/legacy/ibgda_device.cuh, and check_rc_layout_compatibility() in "
                  "csrc/kernels/backend/nvshmem.cu refusing a loaded NVSHMEM on the other side of 3.5.19",
        },
        "checked": "source: NVSHMEM ce9d487 'Add qpair-specific APIs' (the reordering); DeepEP 29d31c0 (#564) and "
                   "refs/pull/696/head (2c70ee1); trees without the fix: v1.2.1 (9af0e0d), hybrid-ep, V2 main "
                   "b306af0..dd758ca (csrc/kernels/legacy lost #564); thread only: the legacy branch (#764), "
                   "NVSHMEM >= 3.6 keeping the order (#696 tested 3.7.2)",
        "source": "DeepEP #553, #707, #764 (reports), #564 and #696 (fixes); vLLM #58159; NVSHMEM ce9d487",
    },
    "nvshmem_build_run_layout": {
        "component": "nvshmem",
        "boundary": "3.5.19",
        "what": "DeepEP links libnvshmem_device.a of its build and loads libnvshmem_host.so.3 at run time; NVSHMEM's "
                "own version check accepts an older device library with a newer host library, so a tree built on "
                "one side of 3.5.19 and run on the other uses the wrong RC QP layout even with #564",
        "affects": "every DeepEP tree with IBGDA kernels across nodes (a fixed tree too)",
        "checked": "source: DeepEP 29d31c0 (the layout chosen at compile time); thread: NeMo Automodel #2614 (a #564 "
                   "tree built on 3.4.5, run with 3.6, hangs)",
        "source": "DeepEP #696 (check_rc_layout_compatibility); NeMo Automodel #2614",
    },
    "gin_gdaki_libmlx5": {
        "component": "rdma-core (libmlx5)",
        "boundary": "MLX5_1.19",
        "what": "NCCL's GIN GDAKI backend loads mlx5dv_devx_umem_reg_ex and twelve other mlx5dv symbols with an "
                "unversioned dlsym and gives up when one is missing; mlx5dv_devx_umem_reg_ex arrived with MLX5_1.19 "
                "(rdma-core 35), so an older libmlx5 leaves GIN at ginType NONE and DeepEP V2 asserts 'NCCL GIN is "
                "unavailable' across nodes. MLX5_1.8 (mlx5dv_is_supported) is what NCCL loads at all",
        "affects": "DeepEP V2 across nodes (GIN GDAKI); NCCL EP over RDMA",
        "checked": "source: NCCL 2.30.7 src/misc/mlx5dvsymbols.cc (mlx5dv_is_supported at MLX5_1.8, the only symbol "
                   "whose absence fails), gdaki/doca-gpunetio/src/doca_verbs_mlx5dv_wrapper.cpp (the GDAKI wrapper's "
                   "symbols); rdma-core (MLX5_1.19 in v35.0, MLX5_1.25 in v54.0); thread: DeepEP #628 (MLNX_OFED "
                   "24.10-3.2.5.0, newest MLX5_1.17, ginType NONE)",
        "source": "NCCL 2.30.7 misc/mlx5dvsymbols.cc and gdaki/doca-gpunetio; DeepEP #628, PR #680",
    },
    "v2_nccl_build_runtime": {
        "component": "nccl",
        "boundary": "2.31",
        "what": "DeepEP V2 built against NCCL below 2.31 asserts that the NCCL it loads is the same version; built "
                "against 2.31 or newer it accepts a newer runtime. A later pip install of torch, vLLM or SGLang that "
                "brings an older NCCL back fails at import with 'undefined symbol ncclGetLsaDevicePointer' (below "
                "2.29.2, where that symbol first appears)",
        "affects": "DeepEP V2",
        "checked": "source: DeepEP dd758ca csrc/kernels/backend/nccl.cu:100-106; NCCL v2.29.2-1 "
                   "(ncclGetLsaDevicePointer, absent in 2.28.9); thread: the 2.31 side (#687)",
        "source": "DeepEP dd758ca csrc/kernels/backend/nccl.cu; DeepEP #687, #688, #710",
    },
    "v2_sm100_st_bulk": {
        "component": "cuda",
        "boundary": "13.1",
        "what": "DeepEP V2's JIT emits st.bulk with a 32-bit size operand, which ptxas of CUDA 12.8 to 13.0 rejects on "
                "SM100; the nvcc that matters is the one the JIT runs on the node, not the wheel's",
        "affects": "DeepEP V2 on SM100 (B200, B300)",
        "checked": "source: DeepEP 747ea8e (#692): deep_ep/include/deep_ep/common/ptx.cuh, fixed operand "
                   "\"l\"(static_cast<uint64_t>(kNumBytes)); PR #692 not merged in dd758ca",
        "source": "DeepEP #692 (747ea8e)",
    },
    "v2_agrs_stream_memop": {
        "component": "nvidia driver",
        "boundary": "cuStreamBatchMemOp_v2",
        "what": "DeepEP V2's AGRS path (all-gather/reduce-scatter sessions: test_agrs.py, context parallelism) resolves "
                "cuStreamBatchMemOp by name, which gives the deprecated v1 entry point; it returns "
                "CUDA_ERROR_NOT_SUPPORTED (801) unless the driver runs with NVreg_EnableStreamMemOPs=1. Dispatch and "
                "combine do not use it; V1 never does",
        "affects": "DeepEP V2's AGRS where NVreg_EnableStreamMemOPs is not 1 (the collection's nvidia_peermapping "
                   "phase sets it)",
        "checked": "source: DeepEP dd758ca csrc/utils/lazy_driver.hpp and csrc/elastic/buffer.hpp (the AGRS calls); "
                   "PR #686 head 389e8ff (the _v2 lookup); measured on an H200 (driver 580.159.04, CUDA 13.0, "
                   "EnableStreamMemOPs=0: v1 801, v2 0); thread only: the CUDA 13.2 deprecation",
        "source": "DeepEP PR #686",
    },
    "nvshmem_source_cuda13": {
        "component": "nvshmem (source build)",
        "boundary": "3.8.0",
        "requires": {"cuda": "13.0"},
        "what": "NVSHMEM 3.8.0 and later read nvmlPlatformInfo_t::chassisSerialNumber (NVML API v13) in "
                "src/host/mem/mem_transport.cpp; CUDA 12's nvml.h does not declare it, so a source build against a "
                "CUDA 12 toolkit fails compiling that file",
        "affects": "source builds of NVSHMEM >= 3.8.0 with a CUDA 12 toolkit (the nvshmem phase); not the pip wheels, "
                   "which NVIDIA builds",
        "checked": "thread only: NVIDIA/nvshmem#95 (2026-09-18: release/v3.8.0 and devel, 3.9.0, do not compile with "
                   "CUDA 12.8; release/v3.7.2 does); no 3.8 tree in reach (the mirror stops at v3.4.5-0)",
        "source": "NVIDIA/nvshmem#95",
    },
    "numa_balancing": {
        "component": "linux kernel (kernel.numa_balancing)",
        "boundary": "1",
        "what": "with automatic NUMA balancing on (any non-zero value of the bitmask) the kernel hands its NUMA page "
                "scanning (task_numa_work) to busy threads, at a cost that grows with the process's resident memory: "
                "a DeepEP dispatch thread at 100% CPU in a serving process of hundreds of GB takes it, adding "
                "milliseconds of tail latency to internode dispatch",
        "affects": "DeepEP internode dispatch and combine in large processes (serving); a warning: a 5.10 kernel showed "
                   "4 scan hits in 60 s against 139 on 5.15 (#624)",
        "checked": "source: DeepEP refs/pull/644/head (d389e22, deep_ep/__init__.py: warns at import when the value is "
                   "not 0, EP_SUPPRESS_NUMA_CHECK=1 silences it) and b55e3c1 (#679); neither merged (V2 main dd758ca "
                   "has no such check); measured 0 on the lent single-socket H200 host",
        "source": "DeepEP #624 (the measurement and mechanism), PRs #644 and #679",
    },
    "v1_blackwell_arch_suffix": {
        "component": "deepep build (TORCH_CUDA_ARCH_LIST)",
        "boundary": "10.0a",
        "what": "DeepEP V1 built with TORCH_CUDA_ARCH_LIST=10.0a failed at its first layout kernel ('unknown error', "
                "layout.cu:138) where 10.0 worked; the list reaches only ahead-of-time code (V1, V2's legacy Buffer), "
                "V2's elastic kernels are JIT-compiled as sm_100f/sm_100a whatever it says",
        "affects": "DeepEP V1 on Blackwell; the build preflight warns (no source explains the failure)",
        "checked": "thread only (DeepEP #576); source: DeepEP dd758ca setup.py and csrc/jit (what the list reaches)",
        "source": "DeepEP #576",
    },
}

# DeepEP trees met in the runbooks and the field, by commit: what they hold of the fixes above (read in the tree at
# that commit). A tree not listed is judged by its content where it is built.
DEEPEP_TREES = {
    "29d31c0": {"generation": "v1", "rc_layout_fix": "#564", "note": "the #564 merge"},
    "567632d": {"generation": "v1", "rc_layout_fix": "#564", "note": "the last V1 main before V2"},
    "8a07e7e": {"generation": "v1", "rc_layout_fix": "#564", "note": "PR #466's head (runbook 001), rebased on 29d31c0"},
    "9af0e0d": {"generation": "v1", "rc_layout_fix": None, "note": "tag v1.2.1"},
    "b306af0": {"generation": "v2", "rc_layout_fix": None, "note": "the V2 release (#605): legacy kernels without #564"},
    "dd758ca": {"generation": "v2", "rc_layout_fix": None, "note": "V2 main, 2026-07-14"},
    "2c70ee1": {"generation": "v2", "rc_layout_fix": "#696", "note": "PR #696's head, on dd758ca"},
}

# Field claims checked against source and found not to hold: no rule is built on them (a refusal of what works is a
# defect), and the entry says why.
REFUTED = {
    "nvshmem_345_no_ib_gid_index": {
        "claim": "NVSHMEM 3.4.5 has no NVSHMEM_IB_GID_INDEX (sglang #38769, from `strings libnvshmem_host.so.3`)",
        "finding": "NVSHMEM v3.4.5-0 defines IB_GID_INDEX in src/modules/transport/common/env_defs.h and its IB "
                   "transports read it (transport_ib_common.h ib_get_gid_index: options->IB_GID_INDEX, used by "
                   "ibgda.cpp when it builds the address handle); the variable lives in the transport modules "
                   "(nvshmem_transport_ibgda.so.3), not in the host library the report searched. The env script "
                   "keeps exporting NVSHMEM_IB_GID_INDEX on RoCE for 3.4.5.",
        "checked": "source: NVSHMEM v3.4.5-0",
    },
    "gin_needs_mlx5_1_25": {
        "claim": "GIN on InfiniBand/RoCE needs libmlx5 with the MLX5_1.25 symbols (DeepEP #628, #680)",
        "finding": "NCCL 2.30.7 loads its two MLX5_1.25 symbols (mlx5dv_reg_dmabuf_mr, "
                   "mlx5dv_get_data_direct_sysfs_path) as optional and uses them for Data Direct only; the 'dlvsym "
                   "failed ... MLX5_1.25' INFO lines appear on working nodes (the h100x2 captures). What GIN GDAKI needs "
                   "is MLX5_1.19 (breakage gin_gdaki_libmlx5): #628's node had MLX5_1.17.",
        "checked": "source: NCCL 2.30.7 src/misc/mlx5dvsymbols.cc, gdaki/gin_host_gdaki.cc",
    },
    "gdrcopy_26_without_gdrdrv": {
        "claim": "GDRCopy 2.6 maps GPU memory through DMA-BUF without gdrdrv, so NVSHMEM's CPU NIC handler no longer "
                 "needs the gdrdrv module",
        "finding": "GDRCopy v2.6 falls back to DMA-BUF only where the driver reports CUDA 13.3 or newer, and NVSHMEM "
                   "(3.5.1) calls gdr_driver_get_version() after gdr_open(), which 2.6 asserts on without the gdrdrv "
                   "device: the collection keeps requiring gdrdrv for the CPU handler (read in source, not run).",
        "checked": "source: GDRCopy v2.6, NVSHMEM 3.5.1 transport_gdr_common",
    },
}


def breakage(name):
    """The catalogue's entry ``name`` (a KeyError names the known ones)."""
    try:
        return BREAKAGES[name]
    except KeyError:
        raise KeyError("unknown breakage %r (known: %s)" % (name, ", ".join(sorted(BREAKAGES))))
