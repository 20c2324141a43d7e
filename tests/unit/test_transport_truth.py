# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Transport truth and its gate, on real output (2 x H100 without a NIC, 4 x H200) and on lines built from the
libraries' exact format strings (field notes 2026-11-26, section 1) for the outcomes no capture shows."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import transport_truth as plugin
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport import (
    CAUSES,
    GIN_TYPES,
    PATH_CLASSES,
    TransportInputError,
    path_class,
    transport_truth,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import (
    POLICY_KEYS,
    check_policy,
    transport_gate,
    truth_brief,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
V1_H100 = FIXTURES / "h100x2" / "deepep_v1_test_low_latency_nvshmem_nccl_debug.txt"
V2_H100 = FIXTURES / "h100x2" / "deepep_v2_test_ep_variants_nccl_debug.txt"
V2_H100_RUN = FIXTURES / "h100x2" / "deepep_v2_test_ep_transport_debug.txt"
V2_H100_LEGACY = FIXTURES / "h100x2" / "deepep_v2_legacy_intranode_transport_debug.txt"
V2_H200 = FIXTURES / "h200x4" / "deepep_v2_test_ep_small_2gpu_debug.txt"

# Prefixes as the libraries print them (src/host/util/debug.cpp, src/debug.cc) and the NVSHMEM plugin prefix
# (transport_common.h: "<absolute source path> <line> <msg>").
HOST = "gpu-a:4242:4242 [0] NVSHMEM INFO "
WARN_HOST = "gpu-a:4242:4242 [0] /build/nvshmem/src/host/transport/transport.cpp:240 NVSHMEM WARN "
IBGDA_SRC = "/home/build/nvshmem-3.4.5/src/modules/transport/ibgda/ibgda.cpp "
GDR_SRC = "/home/build/nvshmem-3.4.5/src/modules/transport/common/transport_gdr_common.cpp "
ERR = "/home/build/nvshmem-3.4.5/src/host/transport/transport.cpp:nvshmemi_transport_init:282: "
NCCL = "gpu-a:4242:4242 [0] NCCL INFO "
NCCL_WARN = "gpu-a:4242:4242 [0] transport/net_ib/gin.cc:42 (ncclGinIbConnect) NCCL WARN "

IBGDA_GPU = [
    IBGDA_SRC + "4615 NVSHMEM_IBGDA_NIC_HANDLER: auto",
    "",
    IBGDA_SRC + "4709 Enumerated IB devices in the system - device id=0 (of 2), name=mlx5_0, num_ports=1",
    IBGDA_SRC + "4709 Enumerated IB devices in the system - device id=1 (of 2), name=mlx5_1, num_ports=1",
    GDR_SRC + "73 GDR driver version: (2, 5)",
    IBGDA_SRC + "4859 NIC buffer will be on GPU memory.",
    IBGDA_SRC + "4873 NIC handler will be GPU.",
    HOST + "IBRC transport skipped in favor of: ibgda",
    HOST + "Successfully initialized the transport: IBGDA. It will be used for device-side APIs over IB.",
    HOST + "P2P list: 0 1 2 3 4 5 6 7 ",
]
FALLBACK_GDRCOPY = [
    IBGDA_SRC + "4615 NVSHMEM_IBGDA_NIC_HANDLER: auto",
    GDR_SRC + "73 GDR driver version: (2, 5)",
    "WARN: cudaHostRegister with IoMemory failed with error=1. We may need to use a fallback path.",
    "WARN: ibgda_nic_mem_gpu_map failed. We may need to use the CPU fallback path.",
    "WARN: ibgda_alloc_and_map_qp_uar with GPU as handler failed. We may need to enter the CPU fallback path.",
    IBGDA_SRC + "4862 NIC buffer will be on host memory.",
    IBGDA_SRC + "4869 NIC handler will be CPU with gdrcopy backend.",
    HOST + "Successfully initialized the transport: IBGDA. It will be used for device-side APIs over IB.",
]
FALLBACK_HOST_MEMORY = [
    IBGDA_SRC + "4615 NVSHMEM_IBGDA_NIC_HANDLER: auto",
    GDR_SRC + "26 GDRCopy library not found. disabling GDRCopy.",
    "WARN: ibgda_nic_mem_gpu_map failed. We may need to use the CPU fallback path.",
    IBGDA_SRC + "4871 NIC handler will be CPU with host memory backend.",
    HOST + "Successfully initialized the transport: IBGDA. It will be used for device-side APIs over IB.",
]
GDRDRV_NOT_LOADED = [
    IBGDA_SRC + "4615 NVSHMEM_IBGDA_NIC_HANDLER: cpu",
    GDR_SRC + "67 GDRCopy open call failed, disabling GDRCopy.",
    "/home/build/nvshmem-3.4.5/src/modules/transport/ibgda/ibgda.cpp:436: NVSHMEM_IBGDA_NIC_HANDLER=cpu requires GDRCopy.",
    ERR + "init failed for transport: IBGDA",
]
IBGDA_DISABLED = [HOST + "IBGDA Disabled by the environment.", HOST + "P2P list: 0 1 "]
PEERMEM_MISSING = [
    "/home/build/nvshmem-3.4.5/src/modules/transport/ibgda/ibgda.cpp:nvshmemt_init:4559: neither nv_peer_mem, or "
    "nvidia_peermem detected. Skipping transport.",
    ERR + "init failed for transport: IBGDA",
]
NIC_NAMES = [
    "WARN: device erdma_0 is not supported (expected HCA interface: mlx5). Skipping...",
    IBGDA_SRC + "4834 no active IB device that supports GPU-initiated communication is found, exiting...",
    ERR + "init failed for transport: IBGDA",
]
PLUGIN_MISSING = [
    WARN_HOST + "Unable to open the IBGDA transport. nvshmem_transport_ibgda.so.3: cannot open shared object file",
    ERR + "init failed for transport: IBGDA",
]
P2P_DISABLED = ["gpu-a:4242:4242 [0] /build/transport.cpp:94 NVSHMEM WARN P2P access was disabled in the environment"]
UCX_UP = [HOST + "Successfully initialized the transport: UCX", HOST + "IBRC transport skipped in favor of: ucx"]

NCCL_IB_GDR = [
    NCCL + "NCCL version 2.30.7+cuda13.0",
    NCCL + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>",
    NCCL + "Using network IB",
    NCCL + "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
    NCCL + "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA(PCI)",
    NCCL + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
]
NCCL_IB_STAGED = [
    NCCL + "NCCL version 2.30.7+cuda13.0",
    NCCL + "NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
    NCCL + "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'",
    NCCL + "Using network IB",
    NCCL + "Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0",
    NCCL + "Channel 01 : 0[0] -> 1[1] via SHM/direct/direct",
]
NCCL_P2P_VARIANTS = [
    NCCL + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    NCCL + "Channel 01/0 : 1[1] -> 2[2] via P2P/direct pointer/read",
    NCCL + "Channel 02/0 : 2[2] -> 3[3] via P2P/indirect/1[1]",
    NCCL + "Channel 03/0 : 3[3] -> 8[0] via P2P/MNNVL",
]
GIN_GDAKI_2307 = [NCCL + "NCCL version 2.30.7+cuda13.0",
                  NCCL + "GIN/Plugin: Assigned plugin GIN_IB_GDAKI type 3 to comm"]
GIN_PROXY_2307 = [NCCL + "NCCL version 2.30.7+cuda13.0",
                  NCCL + "GIN/Plugin: Assigned plugin RMA_IB_PROXY type 2 to comm",
                  NCCL + "Unable to use GIN: Peermem is not supported, nor DMA-BUF."]
GIN_GDAKI_2304 = [NCCL + "NCCL version 2.30.4+cuda12.9", NCCL + "Assigned GIN plugin GIN_IB_GDAKI to comm"]
GIN_PROXY_2304 = [NCCL + "NCCL version 2.30.4+cuda12.9", NCCL + "Assigned GIN plugin GIN_IB_PROXY to comm"]
NET_PLUGIN = [NCCL + "NET/Plugin: Loaded net plugin Libfabric (v9)", NCCL + "Using network Libfabric"]
DEEPEP_GIN_ASSERT = [
    "RuntimeError: Assertion error (csrc/kernels/backend/nccl.cu:87): (allow_hybrid_mode ? props.railedGinType : "
    "props.ginType) != NCCL_GIN_TYPE_NONE and \"NCCL GIN is unavailable. This is usually due to a network "
    "configuration issue, such as `allow_hybrid_mode=0` (disable direct RDMA kernels) in multi-plane network.\"",
]
DEEPEP_MISMATCH = [
    "DeepEP initialized with NCCL version: 2.30.4 (loaded library)",
    NCCL + "NCCL version 2.30.7+cuda13.0",
    "RuntimeError: Prior to NCCL 2.31, NCCL compile-time and runtime versions must be the same. Please re-compile DeepEP.",
]


def text(lines):
    return "\n".join(lines) + "\n"


def get(mapping, dotted):
    for key in dotted.split("."):
        mapping = mapping[key]
    return mapping


# --------------------------------------------------------------------------------------------- real output
def test_v1_on_h100_without_nic_reads_ibgda_failed_and_p2p_over_nvlink():
    truth = transport_truth(V1_H100.read_text())
    nv, nccl = truth["nvshmem"], truth["nccl"]
    assert nv["ibgda"] == "failed"
    assert nv["transports"] == {"p2p": "initialized", "ibrc": "failed", "ibgda": "failed"}
    assert nv["p2p_peers"] == 2
    assert nv["nic_handler"] == "auto" and nv["nic_handler_requested"] == "auto"   # only the echo was printed
    assert nv["cpu_fallback"] is None and nv["fallback_warnings"] == []
    assert nv["gdrcopy"] == "not_found"
    assert nv["version"] is None and nv["devices"] == []
    assert nccl["version"] == "2.28.9" and nccl["cuda"] == "13.0"
    assert nccl["network"] == "Socket" and nccl["networks"] == ["Socket"]
    assert nccl["paths"] == ["P2P/CUMEM"] and nccl["path_classes"] == ["p2p"]
    assert nccl["gin"] is None and nccl["gdrdma"] is None and nccl["ib_devices"] == []
    assert nccl["plugins"]["net"] == {"initialized": ["Socket"], "failed": ["IB"], "assigned": ["Socket"],
                                      "not_found": ["libnccl-net.so"]}
    assert truth["deepep"] == {"nccl_version": None, "nccl_versions": [], "qps": None, "gin_unavailable": None}
    kinds = {f["kind"] for f in truth["findings"]}
    assert {"gdrcopy_missing", "no_ib_device", "nccl_no_ib_device", "nccl_gdr_disabled"} <= kinds


@pytest.mark.parametrize("path", [V2_H100, V2_H200], ids=["h100x2-variants", "h200x4-small"])
def test_v2_captures_read_socket_no_gin_and_deepep_record(path):
    truth = transport_truth(path.read_text())
    assert truth["nccl"]["version"] == "2.30.7"
    assert truth["nccl"]["network"] == "Socket"
    assert truth["nccl"]["gin"] == "none"
    assert truth["nccl"]["plugins"]["gin"] == {"failed": ["all"], "not_found": ["libnccl-gin.so"]}
    assert truth["deepep"]["nccl_version"] == "2.30.7"
    assert truth["deepep"]["qps"] == 17
    # no NVSHMEM in a V2 elastic run: nothing is said, nothing is guessed
    assert truth["nvshmem"]["ibgda"] is None and truth["nvshmem"]["transports"] == {}
    assert truth["nvshmem"]["cpu_fallback"] is None and truth["nvshmem"]["nic_handler"] is None
    # "Terminating process N via signal SIGTERM" is no channel path
    assert all(path_class(p) for p in truth["nccl"]["paths"])


# One node over NVLink without a NIC, the policy the GPU suite holds it to (tests/gpu/playbooks/deepep.yml).
NVLINK_ONLY = {"allow_paths": ["p2p"], "allow_gin": ["none"], "require_nccl_match": True}


def test_v2_elastic_run_on_h100_reads_p2p_pinned_nccl_and_passes_the_nvlink_policy():
    # The collection's V2 build finishing tests/elastic/test_ep.py (EP_DISABLE_GIN=1) with debug lines on.
    truth = transport_truth(V2_H100_RUN.read_text())
    assert truth["nccl"]["version"] == "2.30.7" and truth["nccl"]["versions"] == ["2.30.7"]
    assert truth["nccl"]["paths"] == ["P2P/CUMEM"] and truth["nccl"]["path_classes"] == ["p2p"]
    assert truth["nccl"]["networks"] == ["Socket"] and truth["nccl"]["gin"] == "none"
    assert truth["deepep"]["nccl_version"] == "2.30.7" and truth["deepep"]["qps"] == 17
    assert truth["deepep"]["gin_unavailable"] is None      # GIN was disabled, not found missing
    assert transport_gate(truth, NVLINK_ONLY) == {"passed": True, "reasons": [], "causes": [], "unknown": []}
    # The same run held to a multi-node profile: no GIN is named with the line that shows it.
    verdict = transport_gate(truth, {"allow_gin": ["GDAKI"], "allow_networks": ["IB"]})
    assert not verdict["passed"]
    assert "NCCL GIN is none; the profile allows GDAKI" in verdict["reasons"]
    assert "NCCL used network Socket; the profile allows IB" in verdict["reasons"]
    assert any(c["kind"] == "nccl_gin_none" for c in verdict["causes"])


def test_v2_legacy_intranode_on_h100_says_no_deepep_nccl_line_so_a_match_is_unknown():
    # tests/legacy/test_intranode.py runs over CUDA IPC: NCCL lines only, no DeepEP or NVSHMEM line.
    truth = transport_truth(V2_H100_LEGACY.read_text())
    assert truth["nccl"]["path_classes"] == ["p2p"] and truth["nccl"]["version"] == "2.30.7"
    assert truth["nvshmem"]["transports"] == {} and truth["deepep"]["nccl_version"] is None
    verdict = transport_gate(truth, NVLINK_ONLY)
    assert verdict["passed"] is False and verdict["reasons"] == []
    assert verdict["unknown"] == ["deepep.nccl_version: no 'DeepEP initialized with NCCL version' line (run with "
                                  "EP_BUFFER_DEBUG=1)"]


def test_h200_channels_are_p2p_cumem():
    assert transport_truth(V2_H200.read_text())["nccl"]["paths"] == ["P2P/CUMEM"]
    assert transport_truth(V2_H100.read_text())["nccl"]["paths"] == []


# ------------------------------------------------------------------------------------ built from format strings
NVSHMEM_CASES = [
    ("ibgda-gpu", IBGDA_GPU, {"ibgda": "initialized", "nic_handler": "gpu", "nic_handler_requested": "auto",
                              "nic_buffer": "gpu", "cpu_fallback": False, "gdrcopy": "found",
                              "devices": ["mlx5_0", "mlx5_1"], "p2p_peers": 8,
                              "transports": {"ibgda": "initialized", "ibrc": "skipped", "p2p": "initialized"}}),
    ("fallback-gdrcopy", FALLBACK_GDRCOPY, {"ibgda": "initialized", "nic_handler": "cpu", "nic_buffer": "host",
                                            "cpu_fallback": True, "gdrcopy": "found"}),
    ("fallback-host-memory", FALLBACK_HOST_MEMORY, {"ibgda": "initialized", "nic_handler": "cpu_host_memory",
                                                    "cpu_fallback": True, "gdrcopy": "not_found"}),
    ("cpu-without-gdrcopy", GDRDRV_NOT_LOADED, {"ibgda": "failed", "nic_handler": "cpu",
                                                "nic_handler_requested": "cpu", "cpu_fallback": None,
                                                "gdrcopy": "open_failed"}),
    ("disabled", IBGDA_DISABLED, {"ibgda": "disabled", "nic_handler": None, "cpu_fallback": None,
                                  "transports": {"ibgda": "disabled", "p2p": "initialized"}}),
    ("peermem-missing", PEERMEM_MISSING, {"ibgda": "failed", "transports": {"ibgda": "failed"}}),
    ("nic-names", NIC_NAMES, {"ibgda": "failed"}),
    ("plugin-missing", PLUGIN_MISSING, {"ibgda": "failed", "transports": {"ibgda": "failed"}}),
    ("plugin-missing-only", PLUGIN_MISSING[:1], {"ibgda": "failed", "transports": {"ibgda": "unavailable"}}),
    ("p2p-disabled", P2P_DISABLED, {"transports": {"p2p": "disabled"}, "ibgda": None}),
    ("ucx", UCX_UP, {"transports": {"ucx": "initialized", "ibrc": "skipped"}, "ibgda": None}),
    ("version", ["NVSHMEM v3.4.5"], {"version": "3.4.5"}),
    ("none", [HOST + "Unable to initialize any transports. returning error."], {"none_initialized": True}),
]


@pytest.mark.parametrize("lines, expected", [c[1:] for c in NVSHMEM_CASES], ids=[c[0] for c in NVSHMEM_CASES])
def test_nvshmem_outcomes(lines, expected):
    nv = transport_truth(text(lines))["nvshmem"]
    for key, value in expected.items():
        assert nv[key] == value, key


def test_p2p_list_stops_at_its_line():
    # the next line may be NVSHMEM's CPU affinity list, all numbers
    lines = [HOST + "P2P list: 0 1 ", "     0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25"]
    assert transport_truth(text(lines))["nvshmem"]["p2p_peers"] == 2


def test_fallback_warnings_are_listed_as_printed():
    nv = transport_truth(text(FALLBACK_GDRCOPY))["nvshmem"]
    assert nv["fallback_warnings"] == [FALLBACK_GDRCOPY[2], FALLBACK_GDRCOPY[3], FALLBACK_GDRCOPY[4]]


def test_a_cpu_handler_asked_for_is_no_fallback():
    lines = [IBGDA_SRC + "1 NVSHMEM_IBGDA_NIC_HANDLER: cpu", GDR_SRC + "73 GDR driver version: (2, 5)",
             IBGDA_SRC + "2 NIC handler will be CPU with gdrcopy backend."]
    nv = transport_truth(text(lines))["nvshmem"]
    assert nv["nic_handler"] == "cpu" and nv["cpu_fallback"] is False


def test_worst_handler_and_state_win_across_ranks():
    lines = IBGDA_GPU + [IBGDA_SRC + "4869 NIC handler will be CPU with gdrcopy backend.",
                         ERR + "init failed for transport: IBGDA"]
    nv = transport_truth(text(lines))["nvshmem"]
    assert nv["nic_handler"] == "cpu" and nv["ibgda"] == "failed" and nv["cpu_fallback"] is True


NCCL_CASES = [
    ("ib-gdrdma", NCCL_IB_GDR, {"network": "IB", "ib_devices": ["mlx5_0:1/IB", "mlx5_1:1/IB"], "gdrdma": True,
                                "paths": ["NET/IB/GDRDMA", "P2P/CUMEM/read"],
                                "path_classes": ["net_gdrdma", "p2p"]}),
    ("ib-staged", NCCL_IB_STAGED, {"network": "IB", "ib_devices": ["mlx5_0:1/RoCE"], "gdrdma": False,
                                   "paths": ["NET/IB", "SHM/direct/direct"], "path_classes": ["net", "shm"]}),
    ("p2p-variants", NCCL_P2P_VARIANTS, {"paths": ["P2P/IPC/read", "P2P/MNNVL", "P2P/direct pointer",
                                                   "P2P/indirect"], "path_classes": ["p2p"], "gdrdma": None}),
    ("gin-gdaki-2.30.7", GIN_GDAKI_2307, {"gin": "GDAKI", "gin_plugin": "GIN_IB_GDAKI", "version": "2.30.7"}),
    ("gin-proxy-2.30.7", GIN_PROXY_2307, {"gin": "PROXY", "gin_plugin": "RMA_IB_PROXY"}),
    ("gin-gdaki-2.30.4", GIN_GDAKI_2304, {"gin": "GDAKI", "version": "2.30.4", "cuda": "12.9"}),
    ("gin-proxy-2.30.4", GIN_PROXY_2304, {"gin": "PROXY", "gin_plugin": "GIN_IB_PROXY"}),
    ("gin-worst-wins", GIN_GDAKI_2307 + [NCCL + "GIN/Plugin: Failed to initialize any GIN plugin"], {"gin": "none"}),
    ("gin-gpi", [NCCL + "GIN/Plugin: Assigned plugin MY_GIN type 4 to comm"], {"gin": "GPI"}),
    # EFA (NCCL 2.31.2 + aws-ofi-nccl >= 1.21.0): the lines aws-ofi-nccl's doc/gin-getting-started.md and its
    # nccl_ofi_net.cpp print, and NCCL's "Assigned plugin" format with the GDA plugin's name (Libfabric_GDAKI).
    ("gin-efa-gda", [NCCL + "NCCL_GIN_TYPE set by environment to 5.",
                     NCCL + "NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
                     NCCL + "Using network Libfabric",
                     NCCL + "GIN/Plugin: Assigned plugin Libfabric_GDAKI type 5 to comm",
                     NCCL + "NET/OFI gin GDAKI: createContext done (nranks=16 rank=0 nSignals=64 nCounters=64 "
                            "nContexts=4 num_rails=2 effective_rails=2)"],
     {"network": "Libfabric", "gin": "EFA_GDA", "gin_plugin": "Libfabric_GDAKI"}),
    ("net-plugin", NET_PLUGIN, {"network": "Libfabric", "plugins": {"net": {"loaded": ["Libfabric"]}}}),
    ("mixed-networks", [NCCL + "Using network IB", NCCL + "Using network Socket"],
     {"network": None, "networks": ["IB", "Socket"]}),
    ("mixed-versions", [NCCL + "NCCL version 2.30.7+cuda13.0", NCCL.replace("[0]", "[1]") + "NCCL version 2.28.9+cuda13.0"],
     {"version": None, "versions": ["2.30.7", "2.28.9"]}),
    ("symmetric", [NCCL + "Symmetric memory is not supported. cuMemEnable 0, globalGinSupport 0, cuMemGdrSupport 1"],
     {"symmetric_memory": False}),
    ("nothing", ["hello"], {"version": None, "network": None, "gin": None, "paths": [], "gdrdma": None,
                            "symmetric_memory": None, "plugins": {}}),
]


@pytest.mark.parametrize("lines, expected", [c[1:] for c in NCCL_CASES], ids=[c[0] for c in NCCL_CASES])
def test_nccl_outcomes(lines, expected):
    nccl = transport_truth(text(lines))["nccl"]
    for key, value in expected.items():
        assert nccl[key] == value, key


DEEPEP_CASES = [
    ("gin-assert", DEEPEP_GIN_ASSERT, {"gin_unavailable": True, "nccl_version": None}),
    ("mismatch", DEEPEP_MISMATCH, {"nccl_version": "2.30.4"}),
    ("qps-fewest", ["EP NCCL device communicator has 17 allocated QPs", "EP NCCL device communicator has 9 allocated QPs"],
     {"qps": 9}),
]


@pytest.mark.parametrize("lines, expected", [c[1:] for c in DEEPEP_CASES], ids=[c[0] for c in DEEPEP_CASES])
def test_deepep_outcomes(lines, expected):
    deepep = transport_truth(text(lines))["deepep"]
    for key, value in expected.items():
        assert deepep[key] == value, key


FINDING_CASES = [
    (FALLBACK_GDRCOPY, "regkey"), (FALLBACK_HOST_MEMORY, "gdrcopy_missing"), (GDRDRV_NOT_LOADED, "gdrdrv_not_loaded"),
    (GDRDRV_NOT_LOADED, "handler_cpu_needs_gdrcopy"), (PEERMEM_MISSING, "peermem_missing"), (NIC_NAMES, "nic_name"),
    (NIC_NAMES, "no_ib_device"), (PLUGIN_MISSING, "transport_missing"), (IBGDA_DISABLED, "ibgda_not_requested"),
    (P2P_DISABLED, "p2p_disabled"), (NCCL_IB_STAGED, "nccl_gdr_disabled"), (GIN_PROXY_2307, "nccl_gin_peermem"),
    (DEEPEP_GIN_ASSERT, "deepep_gin_unavailable"), (DEEPEP_MISMATCH, "deepep_nccl_mismatch"),
    (["GDRCopy library is older than v2.0. Disabling GDRCopy."], "gdrcopy_old"),
    (["GDRCopy library version is not compatible with gdrapi.h (2.4) used during compilation. Disabling GDRCopy."],
     "gdrcopy_incompatible"),
    (["The system does not support registering the NIC control buffers with DMABUF. Fallback to use either "
      "nv_peer_mem or nvidia_peermem."], "peermem_control"),
    (["Unable to dlopen libibverbs. Skipping IBGDA transport."], "ibverbs_missing"),
    (["WARN: Unable to dlopen libmlx5dv. Disabling directNIC features."], "mlx5dv_missing"),
    (["WARN: device mlx5_3 is not enumerated as an mlx5 device. Skipping..."], "nic_not_mlx5"),
    (["WARN: device mlx5_0 cannot allocate buffer on the specified memory type. Skipping..."], "nic_memtype"),
    (["WARN: device mlx5_0 does not support all necessary atomic operations. You may want to check the "
      "PCI_ATOMIC_MODE value in the NIC firmware. Skipping..."], "nic_atomics"),
    (["NVSHMEM device library version does not match with NVSHMEM host library version"], "version_mismatch"),
    ([NCCL_WARN + "GIN is disabled."], "nccl_gin_failed"),
    ([NCCL + "dlvsym failed on mlx5dv_reg_dmabuf_mr - /lib/libmlx5.so: undefined symbol: mlx5dv_reg_dmabuf_mr, "
      "version MLX5_1.25 version MLX5_1.25"], "mlx5_old"),
    ([NCCL + "Symmetric memory is not supported. cuMemEnable 0, globalGinSupport 0, cuMemGdrSupport 1"],
     "nccl_symmetric"),
    ([NCCL_WARN + "NCCL library is too old. This application was compiled with NCCL version 2.30.7, but is running "
      "with NCCL library version 2.28.9."], "nccl_version_guard"),
    ([NCCL + "Failed to initialize NET plugin IB"], "nccl_net_plugin_failed"),
    ([NCCL + "NET/IB : No device found."], "nccl_no_ib_device"),
    ([NCCL + "GIN/Plugin: Failed to initialize any GIN plugin"], "nccl_gin_none"),
    ([NCCL_WARN + "MNNVL (cliqueSize 8) is available but not working on this system. Check the IMEX channel "
      "configuration (/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to ignore this issue."], "mnnvl_imex"),
]


def test_every_cause_has_a_finding_case():
    assert {kind for _lines, kind in FINDING_CASES} == set(CAUSES)


@pytest.mark.parametrize("lines, kind", FINDING_CASES, ids=[c[1] + "-%d" % i for i, c in enumerate(FINDING_CASES)])
def test_findings_name_the_line_and_the_cause(lines, kind):
    found = [f for f in transport_truth(text(lines))["findings"] if f["kind"] == kind]
    assert found, kind
    assert found[0]["cause"] == CAUSES[kind]
    assert found[0]["line"] in text(lines)


# ------------------------------------------------------------------------------------------- robust to prefixes
PREFIXES = ["", "[rank1]:", "[default0]:", "\x1b[32m", "node7: ", "vm:17597:17597 [1] "]


@pytest.mark.parametrize("prefix", PREFIXES, ids=["none", "rank", "torchrun", "ansi", "pdsh", "nccl-style"])
def test_launcher_prefixes_and_colours_do_not_change_the_truth(prefix):
    plain = transport_truth(text(IBGDA_GPU + GIN_GDAKI_2307 + NCCL_IB_GDR))
    prefixed = transport_truth(text([prefix + line + ("\x1b[0m" if prefix.startswith("\x1b") else "")
                                     for line in IBGDA_GPU + GIN_GDAKI_2307 + NCCL_IB_GDR]))
    for key in ("nvshmem", "nccl", "deepep"):
        assert prefixed[key] == plain[key]


@pytest.mark.parametrize("form", ["str", "lines", "result", "result_lines", "bytes"])
def test_every_input_form_gives_the_same_truth(form):
    lines = IBGDA_GPU + NCCL_IB_GDR
    value = {"str": text(lines), "lines": lines, "result": {"stdout": text(lines[:5]), "stderr": text(lines[5:])},
             "result_lines": {"stdout_lines": lines[:5], "stderr_lines": lines[5:]},
             "bytes": text(lines).encode()}[form]
    assert transport_truth(value)["nvshmem"] == transport_truth(text(lines))["nvshmem"]
    assert transport_truth(value)["nccl"]["paths"] == ["NET/IB/GDRDMA", "P2P/CUMEM/read"]


@pytest.mark.parametrize("value, named", [
    (5, "got a int (5)"), (None, "got a NoneType"), ({"rc": 0}, "command result with stdout/stderr"),
    (["ok", 3], "item 1 is a int (3)"),
])
def test_unreadable_output_is_refused_naming_it(value, named):
    with pytest.raises(TransportInputError) as err:
        transport_truth(value)
    assert named in str(err.value)
    assert "output" in str(err.value)


# ------------------------------------------------------------------------------------------------------- the gate
INTRANODE_ONLY = {"allow_paths": ["p2p"], "allow_transports": ["p2p"]}
IBGDA_PROFILE = {"require_ibgda": True}
GDAKI_PROFILE = {"allow_gin": ["GDAKI"]}

GATE_CASES = [
    # name, output lines (or a fixture path), policy, passed, a reason fragment, cause kinds
    ("intranode-h100-v1", V1_H100, INTRANODE_ONLY, True, None, []),
    ("intranode-h200-v2", V2_H200, INTRANODE_ONLY, True, None, []),
    ("intranode-net-path", NCCL_IB_STAGED, INTRANODE_ONLY, False, "NCCL channel path(s) NET/IB, SHM/direct/direct",
     ["nccl_gdr_disabled"]),
    ("intranode-ibgda-up", IBGDA_GPU, INTRANODE_ONLY, False, "NVSHMEM transport(s) ibgda came up", []),
    ("ibgda-gpu", IBGDA_GPU, IBGDA_PROFILE, True, None, []),
    ("ibgda-on-h100-without-nic", V1_H100, IBGDA_PROFILE, False, "NVSHMEM IBGDA failed",
     ["no_ib_device", "gdrcopy_missing"]),
    ("ibgda-fallback-gdrcopy", FALLBACK_GDRCOPY, IBGDA_PROFILE, False, "NIC handler is CPU with the gdrcopy backend",
     ["regkey"]),
    ("ibgda-fallback-host", FALLBACK_HOST_MEMORY, IBGDA_PROFILE, False, "NIC handler is CPU with the host memory backend",
     ["regkey", "gdrcopy_missing"]),
    ("ibgda-fallback-host-2", FALLBACK_HOST_MEMORY, IBGDA_PROFILE, False, "fell back to the CPU-assisted path",
     ["regkey", "gdrcopy_missing"]),
    ("ibgda-gdrdrv", GDRDRV_NOT_LOADED, IBGDA_PROFILE, False, "NVSHMEM IBGDA failed",
     ["handler_cpu_needs_gdrcopy", "gdrdrv_not_loaded"]),
    ("ibgda-disabled", IBGDA_DISABLED, IBGDA_PROFILE, False, "NVSHMEM IBGDA disabled", ["ibgda_not_requested"]),
    ("ibgda-peermem", PEERMEM_MISSING, IBGDA_PROFILE, False, "NVSHMEM IBGDA failed", ["peermem_missing"]),
    ("ibgda-nic-names", NIC_NAMES, IBGDA_PROFILE, False, "NVSHMEM IBGDA failed", ["no_ib_device", "nic_name"]),
    ("ibgda-plugin-missing", PLUGIN_MISSING, IBGDA_PROFILE, False, "NVSHMEM IBGDA failed", ["transport_missing"]),
    ("fallback-allowed", FALLBACK_GDRCOPY, {"allow_cpu_fallback": True}, True, None, []),
    ("fallback-any-profile", FALLBACK_GDRCOPY, {}, False, "fell back to the CPU-assisted path", ["regkey"]),
    ("gdaki", GIN_GDAKI_2307, GDAKI_PROFILE, True, None, []),
    ("gdaki-2.30.4", GIN_GDAKI_2304, GDAKI_PROFILE, True, None, []),
    ("proxy-2.30.7", GIN_PROXY_2307, GDAKI_PROFILE, False, "NCCL GIN is PROXY", ["nccl_gin_peermem"]),
    ("proxy-2.30.4", GIN_PROXY_2304, GDAKI_PROFILE, False, "NCCL GIN is PROXY", []),
    ("no-gin-h100", V2_H100, GDAKI_PROFILE, False, "NCCL GIN is none", ["nccl_gin_none", "nccl_no_ib_device"]),
    ("deepep-gin-assert", GIN_GDAKI_2307 + DEEPEP_GIN_ASSERT, GDAKI_PROFILE, False, "NCCL GIN is none",
     ["deepep_gin_unavailable"]),
    ("ib-required-socket", V2_H200, {"allow_networks": ["IB"]}, False, "NCCL used network Socket",
     ["nccl_no_ib_device", "nccl_net_plugin_failed"]),
    ("ib-required-ib", NCCL_IB_GDR, {"allow_networks": ["ib"], "allow_paths": ["p2p", "net_gdrdma"]}, True, None, []),
    ("gdrdma-required-staged", NCCL_IB_STAGED, {"allow_paths": ["p2p", "shm", "net_gdrdma"]}, False,
     "NCCL channel path(s) NET/IB;", ["nccl_gdr_disabled"]),
    ("nccl-match", V2_H200, {"require_nccl_match": True}, True, None, []),
    ("nccl-mismatch", DEEPEP_MISMATCH, {"require_nccl_match": True}, False, "DeepEP loaded NCCL 2.30.4 but NCCL "
     "reported 2.30.7", []),
]


def _output(source):
    return source.read_text() if isinstance(source, Path) else text(source)


@pytest.mark.parametrize("source, policy, passed, reason, kinds", [c[1:] for c in GATE_CASES],
                         ids=[c[0] for c in GATE_CASES])
def test_gate_outcomes(source, policy, passed, reason, kinds):
    verdict = transport_gate(transport_truth(_output(source)), policy)
    assert verdict["passed"] is passed, verdict
    if passed:
        assert verdict["reasons"] == [] and verdict["causes"] == [] and verdict["unknown"] == []
    else:
        if reason:
            assert any(reason in r for r in verdict["reasons"]), verdict["reasons"]
        found = [c["kind"] for c in verdict["causes"]]
        for kind in kinds:
            assert kind in found, (kind, found)
            cause = next(c for c in verdict["causes"] if c["kind"] == kind)
            assert cause["cause"] == CAUSES[kind] and cause["evidence"]
            assert all(line in _output(source) for line in cause["evidence"])


def test_gate_reads_raw_output_too():
    assert transport_gate(text(IBGDA_GPU), IBGDA_PROFILE)["passed"] is True
    assert transport_gate({"stdout": text(FALLBACK_GDRCOPY), "stderr": ""}, IBGDA_PROFILE)["passed"] is False


UNKNOWN_CASES = [
    ("ibgda-unsaid", V2_H200, IBGDA_PROFILE, ["nvshmem.ibgda", "nvshmem.nic_handler"]),
    ("handler-unsaid", [HOST + "Successfully initialized the transport: IBGDA. It will be used for device-side APIs"],
     IBGDA_PROFILE, ["nvshmem.nic_handler"]),
    ("gin-unsaid", V1_H100, GDAKI_PROFILE, ["nccl.gin"]),
    ("deepep-unsaid", V1_H100, {"require_nccl_match": True}, ["deepep.nccl_version"]),
]


@pytest.mark.parametrize("source, policy, fields", [c[1:] for c in UNKNOWN_CASES], ids=[c[0] for c in UNKNOWN_CASES])
def test_what_the_output_does_not_say_fails_as_unknown(source, policy, fields):
    verdict = transport_gate(transport_truth(_output(source)), policy)
    assert verdict["passed"] is False
    for field in fields:
        assert any(u.startswith(field + ":") for u in verdict["unknown"]), verdict["unknown"]
    assert all("DEBUG" in u for u in verdict["unknown"])


# ----------------------------------------------------------------------------------------------- policy refusals
BAD_POLICIES = [
    ("allow_path", {"allow_path": ["p2p"]}, "policy key(s) 'allow_path' unknown; expected a mapping with some of"),
    ("not-a-mapping", ["p2p"], "policy must be a mapping"),
    ("string-policy", "intranode_only", "got a str ('intranode_only')"),
    ("require_ibgda", {"require_ibgda": "yes"}, "policy require_ibgda must be true or false; got 'yes' (str)"),
    ("require_mnnvl", {"require_mnnvl": 1}, "policy require_mnnvl must be true or false; got 1 (int)"),
    ("allow_cpu_fallback", {"allow_cpu_fallback": 1}, "policy allow_cpu_fallback must be true or false; got 1 (int)"),
    ("require_nccl_match", {"require_nccl_match": "no"}, "policy require_nccl_match must be true or false; got 'no'"),
    ("allow_paths-str", {"allow_paths": "p2p"}, "policy allow_paths must be a list of p2p/shm/net/net_gdrdma; got 'p2p'"),
    ("allow_paths-value", {"allow_paths": ["nvlink"]},
     "policy allow_paths entry 'nvlink' is not one of p2p, shm, net, net_gdrdma"),
    ("allow_transports", {"allow_transports": ["rdma"]}, "policy allow_transports entry 'rdma' is not one of p2p, "
                                                         "ibgda, ibrc, ucx, ibdevx, libfabric"),
    ("allow_gin", {"allow_gin": ["gdaki", "CPU"]}, "policy allow_gin entry 'CPU' is not one of GDAKI, EFA_GDA, PROXY, GPI, none"),
    ("allow_networks-type", {"allow_networks": {"IB": 1}}, "policy allow_networks must be a list of names; got {'IB': 1}"),
    ("allow_networks-entry", {"allow_networks": ["IB", ""]}, "policy allow_networks entries must be non-empty strings; "
                                                             "got ''"),
    ("allow_gin-entry", {"allow_gin": [3]}, "policy allow_gin entries must be non-empty strings; got 3"),
]


def test_bad_policy_cases_cover_every_policy_key():
    assert {k for _i, p, _n in BAD_POLICIES if isinstance(p, dict) for k in p} >= set(POLICY_KEYS)


@pytest.mark.parametrize("policy, named", [c[1:] for c in BAD_POLICIES], ids=[c[0] for c in BAD_POLICIES])
def test_bad_policy_is_refused_naming_key_value_and_form(policy, named):
    with pytest.raises(TransportInputError) as err:
        transport_gate(transport_truth(V1_H100.read_text()), policy)
    assert named in str(err.value), str(err.value)
    with pytest.raises(AnsibleFilterError, match="^transport_gate: "):
        plugin.FilterModule().filters()["transport_gate"]({"nvshmem": {}, "nccl": {}, "deepep": {}}, policy)


@pytest.mark.parametrize("truth", [{"nvshmem": 1, "nccl": {}, "deepep": {}}, 5])
def test_bad_truth_is_refused_naming_it(truth):
    with pytest.raises(TransportInputError) as err:
        transport_gate(truth, {})
    assert "transport_truth" in str(err.value) or "output" in str(err.value)


def test_policy_normalizes_case_and_defaults():
    assert check_policy({"allow_gin": ["gdaki"], "allow_paths": ["P2P"]}) == {
        "allow_paths": ["p2p"], "allow_transports": None, "allow_networks": None, "allow_gin": ["GDAKI"],
        "require_ibgda": False, "allow_cpu_fallback": False, "require_nccl_match": False, "require_mnnvl": False}
    assert set(GIN_TYPES) == {"GDAKI", "EFA_GDA", "PROXY", "GPI", "none"}
    assert set(PATH_CLASSES) == {"p2p", "shm", "net", "net_gdrdma"}


# ----------------------------------------------------------------------------------------------------- the filters
def test_filters_are_registered_and_wrap_errors():
    filters = plugin.FilterModule().filters()
    assert set(filters) == {"transport_truth", "transport_gate", "transport_policy", "transport_verdict"}
    assert filters["transport_truth"](text(IBGDA_GPU))["nvshmem"]["nic_handler"] == "gpu"
    with pytest.raises(AnsibleFilterError, match=r"^transport_truth: output must be a string"):
        filters["transport_truth"](42)


def _documented(contains):
    return {key: _documented(value.get("contains", {})) for key, value in contains.items()}


def _returned(value, documented):
    return {key: (_returned(value[key], documented[key]) if documented.get(key) else {}) for key in value}


@pytest.mark.parametrize("name", ["transport_truth", "transport_gate"])
def test_sidecar_docs_match_signature_and_return(name):
    docs = yaml.safe_load(Path(plugin.__file__).with_name(name + ".yml").read_text())
    assert docs["DOCUMENTATION"]["name"] == name
    params = list(inspect.signature(getattr(plugin, name)).parameters)
    assert set(docs["DOCUMENTATION"]["options"]) == {"_input"} | set(params[1:])
    if name == "transport_gate":
        assert set(docs["DOCUMENTATION"]["options"]["policy"]["suboptions"]) == set(POLICY_KEYS)
        value = transport_gate(text(FALLBACK_GDRCOPY), IBGDA_PROFILE)
    else:
        value = transport_truth(text(IBGDA_GPU))
    documented = _documented(docs["RETURN"]["_value"]["contains"])
    # every key returned is documented, at every level the documentation describes
    assert _returned(value, documented) == documented


# ------------------------------------------------------------------------------------- multi-node NVLink (NVL72)
# NCCL's lines across two GB200 trays of one NVLink domain (src/mnnvl.cc; formats in docs/nvl72-facts.md).
MNNVL_UP = [NCCL + "MNNVL busId 0x9001000 fabric UUID 6a130f54faaa4b8f.847f-be44ab70f917 cliqueId 0x7ffe state 3 "
                   "healthMask 0x0",
            NCCL + "MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 0 nvlDomainSize 8",
            NCCL + "Channel 00/0 : 3[3] -> 4[0] via P2P/MNNVL",
            "tray-2:77:77 [0] NCCL INFO MNNVL 1 cliqueId 7ffe cliqueSize 8 cliqueRank 4 nvlDomainSize 8"]


def test_mnnvl_up_is_read_and_passes_the_scale_up_policy():
    truth = transport_truth(text(MNNVL_UP))
    assert truth["nccl"]["mnnvl"] is True and truth["nccl"]["mnnvl_clique_size"] == 8
    assert truth["nccl"]["path_classes"] == ["p2p"]
    verdict = transport_gate(truth, {"allow_paths": ["p2p"], "require_mnnvl": True})
    assert verdict["passed"], verdict
    assert "MNNVL clique of 8" in truth_brief(truth)


def test_mnnvl_down_or_broken_fails_naming_the_imex_channel():
    broken = MNNVL_UP[:1] + [NCCL_WARN + "MNNVL (cliqueSize 8) is available but not working on this system. Check the "
                                         "IMEX channel configuration (/dev/nvidia-caps-imex-channels)."]
    verdict = transport_gate(transport_truth(text(broken)), {"require_mnnvl": True})
    assert not verdict["passed"] and "did not bring up multi-node NVLink" in verdict["reasons"][0]
    assert [c["kind"] for c in verdict["causes"]] == ["mnnvl_imex"]
    one_rank_off = [MNNVL_UP[1], "tray-2:77:77 [0] NCCL INFO MNNVL 0 cliqueId 0 cliqueSize 1 cliqueRank 0 nvlDomainSize 1"]
    assert transport_truth(text(one_rank_off))["nccl"]["mnnvl"] is False


def test_mnnvl_not_said_is_unknown_not_passed():
    verdict = transport_gate(transport_truth(text([NCCL + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"])),
                             {"require_mnnvl": True})
    assert not verdict["passed"] and verdict["unknown"][0].startswith("nccl.mnnvl:")
    assert transport_truth(text(IBGDA_GPU))["nccl"]["mnnvl"] is None
