# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPU profile object: what the collection knows of each GPU family a profile may name, written once.

``SPECS`` holds each family's hardware (compute capability, NVLink generation and per-GPU bandwidth, GPUs per node and
per NVLink domain, the host's CPU architecture); ``GATES`` its verification gates per scope (``intranode`` over
NVLink, ``internode`` over RDMA), each with its source, the EP backends whose runs measured it (``measured_with``),
and, for a gate nobody measured on that hardware, why it is ``provisional``; ``UNGATED`` the families the collection
knows but has no figure for, with the reason (a profile of one is refused by name, never handed the loose
``default`` gate). A group_vars profile declares its family once (``gpufleet_gpu_family``) with its versions and
settings; the roles' defaults derive the arch settings from it (filter ``gpu_arch``: ``deepep_arch_list``,
``nccl_cuda_arch_list`` and ``preflight_expected_cuda_arch`` take PyTorch's ``10.0``, ``nvshmem_cuda_arch`` CMake's
``100``), and the verify roles' gates come from ``GATES`` (``_thresholds.select_thresholds`` with a scope), with
the role's own table (``verify_intranode_thresholds``, empty by default) as the site's overrides. Adding a family is
one entry in each table here; ``tests/unit/test_gpu_families.py`` refuses a family without a gate or a reason, a
gate without a source, and a gate above its hardware's NVLink bandwidth.

Read by controller code alone (``_thresholds``, the verify judge, the filters); pure logic, standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import torch_to_cmake_arch

__all__ = ["SPECS", "FAMILIES", "MIN_CUDA_BY_ARCH", "GATES", "BACKEND_GATES", "BACKEND_UNGATED", "BACKEND_UNMEASURED", "UNGATED",
           "UNGATED_BY_SCOPE", "SCOPES", "profile_tokens", "family_of", "compute_capability", "torch_arch",
           "cmake_arch", "gate_table", "token_key", "ungated_reason", "spans_hosts"]

# Family -> hardware. ``arch``: CUDA compute capability, PyTorch's notation. Sources: a100, a800 8.0; h100, h800,
#   h200 9.0; b200, gb200 10.0; b300, gb300 10.3: the PCI device table of module_utils/_pci.py (GPU_DEVICE_IDS; a unit
#   test holds the two tables together); B300/GB300 as SM 10.3 also in shared/reference/field-2026-11-29.md; h20 9.0:
#   a Hopper part (NVIDIA's CUDA GPU compute capability table). ``nvlink_gbps``: the GPU's total NVLink bandwidth,
#   both directions (NVIDIA's data sheets: A100 600 GB/s, NVLink 3, 12 links; A800 400, 8 links; H100/H200/H20 900,
#   NVLink 4, 18 links; H800 400, 8 links; Blackwell 1,800, NVLink 5); DeepEP's own NVLink ceiling is 0.9 of the
#   summed link speeds, so no gate may exceed it. ``gpus_per_node`` / ``nvlink_domain_gpus``: the scale-up shape
#   (HGX boards: 8 GPUs, one NVLink domain per node; GB200/GB300 NVL72: 4 GPUs per compute tray, 18 trays, 72 GPUs in
#   one NVLink domain across hosts: field-2026-11-29.md, "Platforms"). ``host_arch``: the CPU of the nodes (Grace is
#   aarch64). ``min_cuda``: the first CUDA toolkit whose nvcc compiles for the arch (NVIDIA's CUDA Toolkit release
#   notes: sm_80 from 11.0, sm_90 from 11.8, sm_100 from 12.8, sm_103 from 12.9); a profile that pairs the family
#   with an older toolkit is refused by the preflight (PREFLIGHT_CUDA_TOO_OLD_FOR_GPU) before anything is built.
# A family that shares a capability with another does not share its speed (the H800's and H20's NVLink is capped),
# so each one is a family of its own, and gates name it to gate it.
_HGX = {"gpus_per_node": 8, "nvlink_domain_gpus": 8, "host_arch": "x86_64"}
_NVL72 = {"gpus_per_node": 4, "nvlink_domain_gpus": 72, "host_arch": "aarch64"}
SPECS = {
    "a100": dict(_HGX, arch="8.0", min_cuda="11.0", nvlink=3, nvlink_gbps=600),
    "a800": dict(_HGX, arch="8.0", min_cuda="11.0", nvlink=3, nvlink_gbps=400),
    "h100": dict(_HGX, arch="9.0", min_cuda="11.8", nvlink=4, nvlink_gbps=900),
    "h800": dict(_HGX, arch="9.0", min_cuda="11.8", nvlink=4, nvlink_gbps=400),
    "h200": dict(_HGX, arch="9.0", min_cuda="11.8", nvlink=4, nvlink_gbps=900),
    "h20": dict(_HGX, arch="9.0", min_cuda="11.8", nvlink=4, nvlink_gbps=900),
    "b200": dict(_HGX, arch="10.0", min_cuda="12.8", nvlink=5, nvlink_gbps=1800),
    "gb200": dict(_NVL72, arch="10.0", min_cuda="12.8", nvlink=5, nvlink_gbps=1800),
    "b300": dict(_HGX, arch="10.3", min_cuda="12.9", nvlink=5, nvlink_gbps=1800),
    "gb300": dict(_NVL72, arch="10.3", min_cuda="12.9", nvlink=5, nvlink_gbps=1800),
}

# Family -> compute capability, the view the arch filters and the name rules read.
FAMILIES = dict((name, spec["arch"]) for name, spec in SPECS.items())

# Compute capability -> the first CUDA toolkit that compiles for it (one value per capability: a unit test holds the
# families of one capability to one floor), the view the preflight's rule reads (expression function cuda_floor).
MIN_CUDA_BY_ARCH = dict((spec["arch"], spec["min_cuda"]) for spec in SPECS.values())

# intranode: DeepEP's normal kernels over NVLink; internode: across nodes over RDMA; scaleup: the normal kernels
# across the trays of one NVLink domain that spans hosts (GB200/GB300 NVL72), over NVLink; low_latency_intranode /
# low_latency_internode: the low-latency (decode) kernels on one node (NVLink) and across nodes (RDMA).
SCOPES = ("intranode", "internode", "scaleup", "low_latency_intranode", "low_latency_internode")

# Gates (GB/s, minimum; null: not gated) per scope and family, in the shape of a verify role's thresholds table.
# Each gate is about 0.85-0.88 of the slowest figure of its source, so a healthy node passes and one running well under
# its speed fails. ``measured_with``: the backends whose runs gave the figures; a run of another backend is judged by
# the same gate and its record says the gate is provisional for it. ``provisional``: why nobody measured this gate on
# this hardware (the record carries it). ``default`` gates only a profile that asks for it (``default``, or none).
_B200_NVL = {"dispatch_bf16_nvl_gbps": 380, "dispatch_fp8_nvl_gbps": 260, "combine_nvl_gbps": 300}
_NVLINK4 = {
    "dispatch_bf16_nvl_gbps": 205, "dispatch_fp8_nvl_gbps": 190, "combine_nvl_gbps": 220,
    "by_gpus": {2: {"dispatch_bf16_nvl_gbps": 300, "dispatch_fp8_nvl_gbps": 210, "combine_nvl_gbps": 250},
                4: {"dispatch_bf16_nvl_gbps": 225, "dispatch_fp8_nvl_gbps": 220, "combine_nvl_gbps": 310}},
    "measured_with": ["deepep_v1"],
    "source": "measured here, DeepEP V1 567632d tests/test_intranode.py, collection builds (hand builds within "
              "0.98-1.01): 2 GPUs (2 x H200, 2 x H100) BF16 327.3-340.6, FP8 236.0-247.8, combine 277.5-293.2 GB/s; "
              "4 GPUs (4 x H100 258.3 / 253.9 / 354.9, 4 x H200 261.4 / 255.3 / 355.6): with more peers BF16 "
              "dispatch falls about a fifth and combine rises about a quarter; other counts (8 GPUs: not measured "
              "here) take the family gate, 0.8 of the slowest figure over the measured counts. V2 dd758ca's "
              "tests/legacy/test_intranode.py measured the same on 4 x H200 (261.7 / 255.0 / 354.7); V2's own "
              "intranode test (tests/elastic/test_ep.py) runs other kernels (the FP8 first case's scale-up GB/s) "
              "and was printed, not gated, so the gate of a V2 run is provisional. "
              "H100 and H200 share NVLink 4 (NV18, 900 GB/s) and the test is NVLink-bound: one gate",
}
_BLACKWELL_NVL_GUESS = ("NVLink 5 as the B200's (1,800 GB/s per GPU); no run on this hardware measured here, so the "
                        "B200 gate until one is (DeepEP #630 reports V2's tests/elastic/test_ep.py EP8 at 732 / 741 "
                        "GB/s on B300 against 726 / 740 on B200)")
_NVL72_NVL_GUESS = _BLACKWELL_NVL_GUESS + "; a compute tray has 4 GPUs, the B200 gate's figures are 8 GPUs'"
_B200_RDMA = {"dispatch_bf16_rdma_gbps": 45, "dispatch_fp8_rdma_gbps": 40, "combine_rdma_gbps": 45}
_HOPPER_RDMA = {"dispatch_bf16_rdma_gbps": 35, "dispatch_fp8_rdma_gbps": 30, "combine_rdma_gbps": 35}
_HOPPER_RDMA_WHY = ("no internode run on this family measured here (the lent GPU machines have no NIC); from DeepEP's "
                    "published H800 + ConnectX-7 figures, RDMA-bound on the same 400 Gb/s NIC (EP16/32/64: 43-58 "
                    "GB/s dispatch, 43-57 combine; V2 README SM90 CX7 EP8x2 90 / 81)")
GATES = {
    "intranode": {
        "default": {"dispatch_bf16_nvl_gbps": 100, "dispatch_fp8_nvl_gbps": None, "combine_nvl_gbps": 100,
                    "source": "a loose gate for a profile that asks for it (profile 'default'), no family's"},
        "b200": dict(_B200_NVL, measured_with=["deepep_v1"],
                     source="runbook 001, 8 x B200, DeepEP V1 (HEAD + PR #466): BF16 440-450, FP8 300-320, combine "
                            "350-360 GB/s NVL"),
        "b300": dict(_B200_NVL, source="the B200 gate", provisional=_BLACKWELL_NVL_GUESS),
        "gb200": dict(_B200_NVL, source="the B200 gate", provisional=_NVL72_NVL_GUESS),
        "gb300": dict(_B200_NVL, source="the B200 gate", provisional=_NVL72_NVL_GUESS),
        "h200": _NVLINK4,
        "h100": _NVLINK4,
        "h800": {"dispatch_bf16_nvl_gbps": None, "dispatch_fp8_nvl_gbps": 130, "combine_nvl_gbps": 134,
                 "measured_with": ["deepep_v1"],
                 "source": "DeepEP docs/legacy.md (published), H800 EP8 intranode, NVLink capped near 160 GB/s: FP8 "
                           "dispatch 153, BF16 combine 158 GB/s NVL (no BF16 dispatch figure)"},
        "a100": {"dispatch_bf16_nvl_gbps": 80, "dispatch_fp8_nvl_gbps": None, "combine_nvl_gbps": 80,
                 "source": "a loose gate for NVLink 3 (600 GB/s, two thirds of NVLink 4)",
                 "provisional": "no A100 run measured here and no published DeepEP figure"},
    },
    "internode": {
        "default": {"dispatch_bf16_rdma_gbps": 30, "dispatch_fp8_rdma_gbps": None, "combine_rdma_gbps": 30,
                    "source": "a loose gate for a profile that asks for it (profile 'default'), well above the "
                              "~6.5 GB/s of a GPU whose memory the NIC cannot map"},
        "b200": dict(_B200_RDMA, measured_with=["deepep_v1"],
                     source="runbook 001, B200 + RoCE, DeepEP V1 (HEAD + PR #466): 2 nodes RDMA BF16 81, FP8 70-71, "
                            "combine 75 GB/s; 4 nodes 57-58 / 54 / 56-57"),
        "b300": dict(_B200_RDMA, source="the B200 gate",
                     provisional="no B300 run measured here; ConnectX-8 (800 Gb/s) against the B200's 400 Gb/s NICs, "
                                 "so the B200 gate is a floor until one is"),
        "gb200": dict(_B200_RDMA, source="the B200 gate",
                      provisional="no GB200 run measured here; between NVLink domains over the same class of NIC as "
                                  "the B200's, so the B200 gate until one is"),
        "gb300": dict(_B200_RDMA, source="the B200 gate",
                      provisional="no GB300 run measured here; ConnectX-8 between NVLink domains, the B200 gate as "
                                  "a floor until one is"),
        "h200": dict(_HOPPER_RDMA, source="DeepEP's published H800 + CX7 figures", provisional=_HOPPER_RDMA_WHY),
        "h100": dict(_HOPPER_RDMA, source="DeepEP's published H800 + CX7 figures", provisional=_HOPPER_RDMA_WHY),
        "h800": {"dispatch_bf16_rdma_gbps": None, "dispatch_fp8_rdma_gbps": 36, "combine_rdma_gbps": 36,
                 "measured_with": ["deepep_v1"],
                 "source": "DeepEP docs/legacy.md (published), H800 + CX7, EP16/32/64: FP8 dispatch 43 / 58 / 51, "
                           "BF16 combine 43 / 57 / 50 GB/s RDMA"},
        "a100": {"dispatch_bf16_rdma_gbps": 15, "dispatch_fp8_rdma_gbps": None, "combine_rdma_gbps": 15,
                 "source": "a loose gate (A100 nodes carry 200 Gb/s NICs as a rule)",
                 "provisional": "no A100 internode run measured here and no published DeepEP figure"},
    },
}

# Across the trays of one NVL72 domain: DeepEP V2's elastic test with every rank a scale-up peer (multi-node NVLink,
# no NIC), judged on the NVLink figures as one HGX node is. Nobody measured it here (no NVL72 was lent), and the
# figures published for V2 are one 8-GPU node's (DeepEP README SM100 EP8 NVLink; #630: B200 726 / 740, B300 732 /
# 741 GB/s dispatch / combine), so the B200 gate is a floor, provisional, until a domain run is measured.
_NVL72_SCALEUP_WHY = ("no NVL72 domain run measured here or published; the NVLink switch trays give every GPU of the "
                      "domain the NVLink 5 bandwidth an HGX B200 GPU has to its 7 peers, so the B200 one-node gate is "
                      "a floor until one is")
_NOT_SPANNING = ("its NVLink domain is the GPUs of one node (an HGX board): it has no scale-up domain across hosts; "
                 "verify runs intranode on each node and internode between them")
GATES["scaleup"] = {
    "default": {"dispatch_bf16_nvl_gbps": 100, "dispatch_fp8_nvl_gbps": None, "combine_nvl_gbps": 100,
                "source": "a loose gate for a profile that asks for it (profile 'default'), no family's"},
    "gb200": dict(_B200_NVL, source="the B200 gate", provisional=_NVL72_SCALEUP_WHY),
    "gb300": dict(_B200_NVL, source="the B200 gate", provisional=_NVL72_SCALEUP_WHY),
}

# Low latency (DeepEP's decode kernels: tests/test_low_latency.py, 128 tokens per rank, hidden 7168, top-8, 288
# experts). One node: the kernels write to the peers over NVLink, and the figures fall with more peers (one rank is
# local copies alone). Measured here with DeepEP V1 567632d through the collection, every figure the slowest rank:
# 1 GPU: H100 393 / 586 (dispatch / combine GB/s), H200 419.5 / 688.2 and 419.9 / 682.4 (on the collection's IBGDA
# NVSHMEM); 2 GPUs: H200 261.7 / 367.9, H100 241.8 / 336.9 (debug output on); 4 GPUs: H200 205.6 / 253.4 (hand
# build 203.9 / 257.3), H100 195.7 / 249.9 (hand 194.1 / 250.1) (tests/fixtures/captured/h200x2, h100x2, h200x4,
# h100x4). Gates about 0.85 of the slowest figure per count; counts not measured here (8 GPUs) take 0.6 of the
# 4-GPU figure, because each added peer took a fifth or more off (H200 dispatch 419.5 -> 261.7 -> 205.6).
_NVLINK4_LL = {
    "ll_dispatch_gbps": 115, "ll_combine_gbps": 150,
    "by_gpus": {1: {"ll_dispatch_gbps": 330, "ll_combine_gbps": 495},
                2: {"ll_dispatch_gbps": 205, "ll_combine_gbps": 285},
                4: {"ll_dispatch_gbps": 165, "ll_combine_gbps": 210}},
    "measured_with": ["deepep_v1"],
    "source": "measured here, DeepEP V1 567632d tests/test_low_latency.py through the collection: 1 GPU H100 393 / "
              "586, H200 419.5 / 688.2; 2 GPUs H200 261.7 / 367.9, H100 241.8 / 336.9; 4 GPUs H200 205.6 / 253.4, "
              "H100 195.7 / 249.9 GB/s dispatch / combine; 8 GPUs not measured here: 0.6 of the 4-GPU figure, as "
              "each added peer took a fifth or more off. H100 and H200 share NVLink 4: one gate",
}
_HOPPER_LL_FLOOR = dict((key, value) for key, value in _NVLINK4_LL.items() if key not in ("measured_with", "source"))
_BLACKWELL_LL_GUESS = ("NVLink 5 (1,800 GB/s per GPU) against the Hopper parts' NVLink 4, where these figures were "
                       "measured; no low-latency run on this hardware measured here, so the Hopper gate is a floor "
                       "until one is")
# Across nodes: DeepEP docs/legacy.md (main dd758ca), H800 + ConnectX-7 400 Gb/s InfiniBand, low latency with pure
# RDMA, 128 tokens, FP8 dispatch / BF16 combine: EP8 98 / 127, EP16 63 / 74, EP32 48 / 53, EP64 43 / 46, EP128 39 /
# 39 GB/s RDMA. The gate is about 0.85 of the largest EP's figure (any node count passes healthy); a CPU-proxied run
# is far below and its transport fails besides (NIC handler CPU).
_LL_RDMA = {"ll_dispatch_gbps": 33, "ll_combine_gbps": 33}
_LL_RDMA_SOURCE = ("DeepEP docs/legacy.md, H800 + CX7 400 Gb/s, low latency pure RDMA: EP8 98 / 127, EP16 63 / 74, "
                   "EP32 48 / 53, EP64 43 / 46, EP128 39 / 39 GB/s dispatch / combine")
_LL_RDMA_WHY = ("no low-latency run across nodes measured here (the lent GPU machines have no NIC); from DeepEP's "
                "published H800 + ConnectX-7 figures, RDMA-bound on the same 400 Gb/s class of NIC")
GATES["low_latency_intranode"] = {
    "default": {"ll_dispatch_gbps": 50, "ll_combine_gbps": 50,
                "source": "a loose gate for a profile that asks for it (profile 'default'), no family's"},
    "h200": _NVLINK4_LL,
    "h100": _NVLINK4_LL,
    "b200": dict(_HOPPER_LL_FLOOR, source="the H100/H200 gate", provisional=_BLACKWELL_LL_GUESS),
    "b300": dict(_HOPPER_LL_FLOOR, source="the H100/H200 gate", provisional=_BLACKWELL_LL_GUESS),
    "gb200": dict(_HOPPER_LL_FLOOR, source="the H100/H200 gate", provisional=_BLACKWELL_LL_GUESS),
    "gb300": dict(_HOPPER_LL_FLOOR, source="the H100/H200 gate", provisional=_BLACKWELL_LL_GUESS),
}
GATES["low_latency_internode"] = {
    "default": {"ll_dispatch_gbps": 20, "ll_combine_gbps": 20,
                "source": "a loose gate for a profile that asks for it (profile 'default'), no family's"},
    "h800": dict(_LL_RDMA, measured_with=["deepep_v1"], source=_LL_RDMA_SOURCE),
    "h200": dict(_LL_RDMA, source=_LL_RDMA_SOURCE, provisional=_LL_RDMA_WHY),
    "h100": dict(_LL_RDMA, source=_LL_RDMA_SOURCE, provisional=_LL_RDMA_WHY),
    "b200": dict(_LL_RDMA, source=_LL_RDMA_SOURCE,
                 provisional=_LL_RDMA_WHY + "; B200 nodes of runbook 001 carry 400 Gb/s NICs too"),
    "b300": dict(_LL_RDMA, source=_LL_RDMA_SOURCE,
                 provisional=_LL_RDMA_WHY + "; ConnectX-8 (800 Gb/s) makes it a floor"),
    "gb200": dict(_LL_RDMA, source=_LL_RDMA_SOURCE, provisional=_LL_RDMA_WHY + "; between NVLink domains"),
    "gb300": dict(_LL_RDMA, source=_LL_RDMA_SOURCE,
                  provisional=_LL_RDMA_WHY + "; ConnectX-8 between NVLink domains makes it a floor"),
}

# A backend's own gates where its kernels differ from DeepEP's (backend -> scope -> family -> entry): they replace
# the entries above of the same family for that backend's runs; a family it has no entry for keeps DeepEP's, and the
# record says the gate was measured with DeepEP, not with it (judge.gate_basis).
#
# NCCL EP (nccl-extensions 0.1.0, libnccl_ep 0.2.0, on NCCL 2.30.7): measured here on 1 x H200 through the
# collection's launcher (roles/verify_common/files/nccl_ep_bench.py, ep_bench's method: 128 tokens LL / 4096 HT,
# hidden 7168, top-8, 256 or 288 experts, BF16; tests/fixtures/captured/h200x1/nccl-ep-*), on four lent machines:
# LL 247.42 / 382.71, 235.03 / 365.54 (256 experts), 259.33 / 375.85, 251.80 / 378.37 (288, DeepEP's low-latency
# shape), through the verify role 247.9 / 355.72 and by hand on that machine 189.96 / 310.62 and 179.48 / 288.09 GB/s
# dispatch / combine; HT 217.06 / 326.66, 202.40 / 308.86, through the role 184.97 / 301.97, by hand 174.36 / 275.54
# and 181.79 / 299.0. The launcher issues each call from Python and, as ep_bench, times it with events recorded
# around the call, so a busy host's launch latency is inside the figure: the spread (LL dispatch 179-259) is that,
# and the gates are about 0.85 of the slowest figure. NVIDIA's README (contrib/nccl_ep, NCCL v2.29u1, H100, LL,
# ep_bench in C++): 8 GPUs 224.3 / 185.2, 16 (2 nodes) 76.7 / 73.0, 32: 53.6 / 50.0, 64: 48.8 / 43.8 GB/s.
_NEP_LL_SOURCE = ("measured here, 1 x H200, NCCL EP 0.2.0 on NCCL 2.30.7 through the collection's launcher on four "
                  "machines: 179.48-259.33 / 288.09-382.71 GB/s dispatch / combine (seven runs; the host's launch "
                  "latency is inside the figure); NVIDIA's README (nccl-ep-v0.1.0, NCCL v2.29u1, ep_bench in C++), "
                  "H100, 8 GPUs: 224.3 / 185.2 GB/s; other counts take the lower of the two gates")
_NEP_NVLINK4_LL = {"ll_dispatch_gbps": 150, "ll_combine_gbps": 155,
                   "by_gpus": {1: {"ll_dispatch_gbps": 150, "ll_combine_gbps": 245}},
                   "measured_with": ["nccl_ep"], "source": _NEP_LL_SOURCE}
_NEP_LL_FLOOR = dict((key, value) for key, value in _NEP_NVLINK4_LL.items() if key not in ("measured_with", "source"))
_NEP_RDMA_LL = {"ll_dispatch_gbps": 41, "ll_combine_gbps": 37}
_NEP_RDMA_SOURCE = ("NVIDIA's README (nccl-ep-v0.1.0, NCCL v2.29u1), H100, LL across nodes: 16 GPUs 76.7 / 73.0, 32: "
                    "53.6 / 50.0, 64: 48.8 / 43.8 GB/s dispatch / combine; the gate is about 0.85 of the 64-GPU "
                    "figure, so any node count up to NCCL EP's 8 passes healthy")
_NEP_RDMA_WHY = ("no NCCL EP run across nodes measured here (the lent GPU machines have no NIC); NVIDIA's published H100 "
                 "figures, RDMA-bound on the same class of NIC")
_NEP_HT = {"dispatch_bf16_nvl_gbps": 90, "dispatch_fp8_nvl_gbps": None, "combine_nvl_gbps": 140,
           "by_gpus": {1: {"dispatch_bf16_nvl_gbps": 145, "combine_nvl_gbps": 230}},
           "measured_with": ["nccl_ep"],
           "source": "measured here, 1 x H200, NCCL EP 0.2.0 high throughput through the collection's launcher on "
                     "three machines: 174.36-217.06 / 275.54-326.66 GB/s dispatch / combine (five runs); no FP8 in "
                     "NCCL EP v0.1",
           "provisional": "only one GPU measured here and nothing published for high throughput: other counts take "
                          "0.6 of the one-GPU gate (DeepEP's figures fell a fifth or more with each added peer)"}
_NEP_HT_FLOOR = dict((key, value) for key, value in _NEP_HT.items()
                     if key not in ("measured_with", "source", "provisional"))
_NEP_BLACKWELL = ("NVLink 5 against the H100/H200's NVLink 4, where NCCL EP's figures were measured or published; no "
                  "NCCL EP run on this hardware, so the Hopper gate is a floor until one is")
BACKEND_GATES = {
    "nccl_ep": {
        "low_latency_intranode": dict(
            {"h200": _NEP_NVLINK4_LL, "h100": _NEP_NVLINK4_LL},
            **dict((name, dict(_NEP_LL_FLOOR, source="NCCL EP's H100/H200 gate", provisional=_NEP_BLACKWELL))
                   for name in ("b200", "b300", "gb200", "gb300"))),
        "low_latency_internode": dict(
            {"h100": dict(_NEP_RDMA_LL, measured_with=["nccl_ep"], source=_NEP_RDMA_SOURCE),
             "h200": dict(_NEP_RDMA_LL, source=_NEP_RDMA_SOURCE, provisional=_NEP_RDMA_WHY)},
            **dict((name, dict(_NEP_RDMA_LL, source=_NEP_RDMA_SOURCE, provisional=_NEP_RDMA_WHY + "; " + _NEP_BLACKWELL))
                   for name in ("b200", "b300", "gb200", "gb300"))),
        "intranode": dict(
            {"h200": _NEP_HT, "h100": _NEP_HT},
            **dict((name, dict(_NEP_HT_FLOOR, source="NCCL EP's H200 gate", provisional=_NEP_BLACKWELL))
                   for name in ("b200", "b300", "gb200", "gb300"))),
    },
}
# What NCCL EP v0.1 does not run (its RELEASE.md: Hopper or Blackwell, CUDA 13): its gates refuse the family by name.
_NEP_NOT_ON = "NCCL EP v0.1 runs on Hopper or Blackwell GPUs only (its RELEASE.md); this family is neither"
BACKEND_UNGATED = {"nccl_ep": {"a100": _NEP_NOT_ON}}
# Figures a backend does not measure: where its run takes DeepEP's gate (a scope it has no gates of its own for), these
# metrics are not gated (a missing figure would fail the run for what the backend cannot do).
BACKEND_UNMEASURED = {"nccl_ep": ("dispatch_fp8_nvl_gbps", "dispatch_fp8_rdma_gbps")}  # NCCL EP v0.1: no FP8 dispatch

# Families the collection knows and has no gate for: a profile of one is refused with this reason.
UNGATED = {
    "a800": "its NVLink is capped at 400 GB/s and neither a run here nor DeepEP publishes a figure for it",
    "h20": "its compute is capped and neither a run here nor DeepEP publishes a figure for it",
}


# Families gated in some scopes and not in others, with the reason per scope.
_NO_LL_SM80 = ("DeepEP's low-latency kernels run on SM90 (Hopper) or newer: an A100 build has them disabled "
               "(deepep_build internode: false)")
_NO_LL_FIGURE = ("its NVLink is capped at 400 GB/s and neither a run here nor DeepEP publishes a low-latency figure "
                 "on one node")
UNGATED_BY_SCOPE = {
    "scaleup": dict((name, _NOT_SPANNING) for name, spec in SPECS.items()
                    if spec["nvlink_domain_gpus"] <= spec["gpus_per_node"]),
    "low_latency_intranode": {"a100": _NO_LL_SM80, "h800": _NO_LL_FIGURE},
    "low_latency_internode": {"a100": _NO_LL_SM80},
}


def ungated_reason(family, scope=None, backend=None):
    """Why ``family`` has no gate (in ``scope`` where given, for ``backend``'s runs where given), or None where
    nothing says so."""
    return ((BACKEND_UNGATED.get(backend) or {}).get(family) or (UNGATED_BY_SCOPE.get(scope) or {}).get(family)
            or UNGATED.get(family))


def gate_table(scope, backend=None):
    """The collection's gates of ``scope`` (``intranode``, ``internode``, ...) as a thresholds table, for a run of
    ``backend`` (its own gates, ``BACKEND_GATES``, over DeepEP's; a family the backend does not run is left out): a
    copy, so a caller's overrides never change them. ValueError naming the scopes for another one."""
    if scope not in GATES:
        raise ValueError("scope %r has no gates; expected one of %s" % (scope, ", ".join(SCOPES)))
    table = dict((name, dict(entry)) for name, entry in GATES[scope].items()
                 if name not in (BACKEND_UNGATED.get(backend) or {}))
    table.update((name, dict(entry)) for name, entry in ((BACKEND_GATES.get(backend) or {}).get(scope) or {}).items())
    unmeasured = BACKEND_UNMEASURED.get(backend) or ()
    for entry in table.values() if unmeasured else ():
        if isinstance(entry.get("by_gpus"), dict):  # copies: the collection's own entries stay as they are
            entry["by_gpus"] = dict((count, dict(part)) for count, part in entry["by_gpus"].items())
        for part in [entry] + list((entry.get("by_gpus") or {}).values()):
            for metric in unmeasured:
                if metric in part:
                    part[metric] = None
    return table


# What separates the words of a profile name: gcp_b200, b200-cuda13, b200.site, "NVIDIA H200" (nvidia-smi's name).
_SEPARATORS = re.compile(r"[_\-.\s]+")


def profile_tokens(profile):
    """The lower-case words of a profile name, split on ``_``, ``-``, ``.`` and white space (``[]`` for none).

    The one token rule of the collection: a thresholds table or a transport policy matches a profile by one of these
    words, and ``family_of`` finds the family among them, so the two can never disagree about a name."""
    if not isinstance(profile, str):
        return []
    return [token for token in _SEPARATORS.split(profile.lower()) if token]


def token_key(table, profile):
    """The first key of ``table`` (not ``default``) that is one of ``profile``'s tokens, or None: the token rule by
    which a gate table and a transport policy table match a profile name (``gcp_b200`` takes ``b200``)."""
    tokens = profile_tokens(profile)
    return next((key for key in table if key != "default" and str(key).lower() in tokens), None)


def family_of(profile):
    """The GPU family the profile name carries as a token (``gcp_b300`` -> ``b300``, ``gb200_nvl72`` -> ``gb200``),
    the first one when it carries several; None when it names none (``mycluster``, ``default``)."""
    return next((token for token in profile_tokens(profile) if token in FAMILIES), None)


def spans_hosts(family):
    """Whether ``family``'s NVLink domain spans hosts (GB200/GB300 NVL72: 72 GPUs, 4 per tray), so verify has a
    scale-up domain scope and the nodes need the fabric state and IMEX; False for a family it does not know."""
    spec = SPECS.get(family)
    return bool(spec) and spec["nvlink_domain_gpus"] > spec["gpus_per_node"]


def compute_capability(family):
    """The compute capability of ``family`` (``"10.3"``); ValueError naming the known families otherwise."""
    if family not in FAMILIES:
        raise ValueError("%r is no GPU family the collection knows; expected one of %s"
                         % (family, ", ".join(sorted(FAMILIES))))
    return FAMILIES[family]


def torch_arch(family):
    """The family's arch as PyTorch writes it (``10.0``): deepep_arch_list, nccl_cuda_arch_list, and one item of
    preflight_expected_cuda_arch."""
    return compute_capability(family)


def cmake_arch(family):
    """The family's arch as CMake writes it (``100``, ``103``, ``90``): nvshmem_cuda_arch."""
    return torch_to_cmake_arch(compute_capability(family))
