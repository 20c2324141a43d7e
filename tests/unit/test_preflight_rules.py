# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight role's checks, as rules of the collection's catalogue (roles/audit/files/rules.yml, context
preflight) judged by the audit's engine: each fires on its case and stays quiet on a healthy node, with the
messages the role printed before the rules moved into the catalogue; the contexts keep the audit's and the
preflight's rules apart."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_source import source_cuda_check
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.rc_layout import catalogued_tree_check
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import mlx5dv_verdict
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules, validate_rules

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
AUDIT_HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())
KERNEL = "6.8.0-1015-gcp"
MODULES_DEP = "/lib/modules/%s/modules.dep" % KERNEL


def modules_facts(loaded=(), builtin=(), absent=(), not_in_kernel=(), module_index=MODULES_DEP):
    """gpufleet_modules (node_stack's kernel modules reader) for the modules asked: ``loaded``, ``builtin``,
    ``absent`` (loadable) and ``not_in_kernel`` (absent, no module for them in the kernel)."""
    states = {}
    for name in loaded:
        states[name] = {"state": "loaded", "source": "/proc/modules", "loadable": None, "reason": "listed"}
    for name in builtin:
        states[name] = {"state": "builtin", "source": "/sys/module/" + name, "loadable": None, "reason": "built in"}
    for name in absent:
        states[name] = {"state": "absent", "source": module_index, "loadable": True, "reason": "not loaded"}
    for name in not_in_kernel:
        states[name] = {"state": "absent", "source": module_index, "loadable": False, "reason": "no module"}
    return {"loaded": sorted(list(loaded) + ["nvidia"]), "source": "/proc/modules", "kernel": KERNEL,
            "module_dir": "/lib/modules/" + KERNEL, "module_index": module_index, "builtin_index": None,
            "states": states, "present": dict((n, s["state"] != "absent") for n, s in states.items()),
            "builtin": list(builtin), "absent": list(absent) + list(not_in_kernel),
            "not_in_kernel": list(not_in_kernel)}


HEALTHY = {
    "host": "b200-1",
    "gather_errors": {},
    "gpufleet_nvidia": {"driver_loaded": True, "driver_version": "580.95.05", "peer_mapping_override_active": True},
    "gpufleet_rdma": {"devices": [{"name": "mlx5_0"}, {"name": "mlx5_1"}], "active_devices": ["mlx5_0", "mlx5_1"],
                      "transport": "roce", "hca_prefix": "mlx5"},
    "gpufleet_gpus": {"gpus": [{"name": "NVIDIA B200", "compute_capability": "10.0"}] * 8},
    "modules": modules_facts(loaded=["mlx5_core", "nvidia_peermem"]),
    "cuda": {"home": "/usr/local/cuda-13.0", "version": "13.0.2", "release": "13.0", "source": "version.json",
             "error": None},
    "pip_ok": True,
    "mlx5dv_ok": True,
    "libcuda_found": [{"path": "/usr/lib/x86_64-linux-gnu/libcuda.so", "dir": "/usr/lib/x86_64-linux-gnu",
                       "name": "libcuda.so"},
                      {"path": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "dir": "/usr/lib/x86_64-linux-gnu",
                       "name": "libcuda.so.1"}],
    "expect": {"min_gpus": 8, "driver_min_version": "550", "cuda_arch": ["10.0"], "cuda_version": "13.0",
               "cuda_version_dashed": "13-0", "cuda_home": "/usr/local/cuda-13.0", "cuda_by_play": False,
               "pip_by_play": False, "python": "/usr/bin/python3", "require_rdma": True, "min_active_rdma": 2,
               "required_modules": ["mlx5_core"], "optional_modules": ["nvidia_peermem"], "require_mlx5dv": True,
               "mlx5dv_by_play": False, "mlx5dv_header": "/usr/include/infiniband/mlx5_api.h",
               "mlx5dv_symbol": "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT",
               "libcuda_dirs": ["/usr/lib/x86_64-linux-gnu"]},
}


def doc(**changes):
    """HEALTHY with top-level or ``expect__key`` changes."""
    out = copy.deepcopy(HEALTHY)
    for key, value in changes.items():
        if key.startswith("expect__"):
            out["expect"][key[len("expect__"):]] = value
        else:
            out[key] = value
    return out


def judge(document):
    return evaluate_rules(document, CATALOGUE, context="preflight", order="catalogue")


def messages(document, severity=None):
    return [f["message"] for f in judge(document) if severity is None or f["severity"] == severity]


NO_LIBCUDA = {"libcuda_found": []}
SO1_ONLY = {"libcuda_found": [HEALTHY["libcuda_found"][1]]}

# rule id: (changes that make it fire, the message it gives)
CASES = {
    "PREFLIGHT_FACTS_INCOMPLETE": ({"gather_errors": {"gpufleet_gpus": "nvidia-smi failed (rc=9)"}},
                                   "Facts not read (gpufleet_gpus): nvidia-smi failed (rc=9). Fix: see the error; "
                                   "the checks below may follow from it."),
    "PREFLIGHT_GPU_COUNT": ({"gpufleet_gpus": {"gpus": [{"name": "NVIDIA B200", "compute_capability": "10.0"}] * 2}},
                            "GPUs: found 2, need at least 8. Fix: check that the GPUs are seated and visible "
                            "(lspci -d 10de:), and that nvidia-smi lists them."),
    "PREFLIGHT_DRIVER_NOT_LOADED": ({"gpufleet_nvidia": {"driver_loaded": False}},
                                    "NVIDIA driver: not loaded (/proc/driver/nvidia/params missing). Fix: install the "
                                    "driver (>= 550, 580+ for B200), e.g. apt-get install nvidia-open-580, and reboot; "
                                    "this collection never installs drivers."),
    "PREFLIGHT_DRIVER_OLD": ({"gpufleet_nvidia": {"driver_loaded": True, "driver_version": "535.104.05"}},
                             "NVIDIA driver 535.104.05 is older than 550. Fix: upgrade the driver (580+ recommended "
                             "for B200)."),
    "PREFLIGHT_CUDA_ARCH": ({"expect__cuda_arch": ["9.0"]},
                            "GPU compute capability 10.0 does not match the profile (9.0). Fix: put the host in the "
                            "group of its GPU profile (b200_*, b300, h100, h200, a100), or correct that profile's "
                            "gpufleet_gpu_family, from which the expected capability derives."),
    # A B300 node (10.3) on a profile of CUDA 12.8: refused before the toolkit phase, naming the floor.
    "PREFLIGHT_CUDA_TOO_OLD_FOR_GPU": (
        {"gpufleet_gpus": {"gpus": [{"name": "NVIDIA B300 SXM6 AC", "compute_capability": "10.3"}] * 8},
         "expect__cuda_arch": ["10.3"], "expect__cuda_version": "12.8", "expect__cuda_by_play": True,
         "cuda": {"version": "", "release": ""}},
        "CUDA 12.8 cannot compile for compute capability 10.3 (NVIDIA B300 SXM6 AC; its first toolkit is CUDA 12.9): "
        "NVSHMEM's and DeepEP's builds would fail with \"Unsupported gpu architecture\". Fix: set cuda_toolkit_version "
        "to 12.9 or newer in the node's profile."),
    # A V1 profile across EFA nodes: refused naming the reason (NVSHMEM's IBGDA is mlx5-only).
    "PREFLIGHT_FABRIC_REFUSES_BACKEND": (
        {"expect__fabric": "efa", "expect__deepep_internode": True, "expect__deepep_v2": False},
        "DeepEP V1 across nodes is refused on the fabric efa: DeepEP V1 runs across nodes over NVSHMEM's IBGDA, which "
        "drives mlx5 NICs only (DeepEP #759: \"mlx5dv_open_device(...) -> FAIL (not an mlx5 device)\"; #369); run "
        "DeepEP V2 over NCCL GIN (EFA-GDA, NCCL >= 2.31.2) on EFA. Fix: set deepep_generation: v2 with the NCCL its "
        "GIN needs (nccl_enabled, nccl_version), or deepep_internode: false for NVLink only."),
    # V2 across EFA nodes on NCCL 2.30.7: EFA-GDA arrived in 2.31.2.
    "PREFLIGHT_FABRIC_NCCL_OLD": (
        {"expect__fabric": "efa", "expect__deepep_internode": True, "expect__deepep_v2": True,
         "expect__nccl_version": "2.30.7"},
        "NCCL 2.30.7 has no GIN on the fabric efa (its GIN needs NCCL 2.31.2 or newer; DeepEP V2 asserts \"NCCL GIN is "
        "unavailable\" without it). Fix: set nccl_enabled: true and nccl_version: 2.31.2 or newer."),
    # A GB200 NVL72 profile (Grace hosts) on an x86_64 HGX node: same compute capability, another platform.
    "PREFLIGHT_HOST_ARCH": (
        {"expect__gpu_family": "gb200", "expect__host_arch": "x86_64"},
        "The profile's GPU family gb200 runs on aarch64 hosts; this node is x86_64. Fix: put the host in the group of "
        "its platform's profile (an HGX node is not a GB200/GB300 NVL72 tray), or correct gpufleet_gpu_family."),
    "PREFLIGHT_CUDA_TO_INSTALL": ({"cuda": {"version": "", "release": ""}, "expect__cuda_by_play": True},
                                  "CUDA 13.0: absent at /usr/local/cuda-13.0; the cuda_toolkit phase installs it."),
    "PREFLIGHT_CUDA_MISSING": ({"cuda": {"version": "12.9", "release": "12.9"}},
                               "CUDA 13.0 not found at /usr/local/cuda-13.0 (found: 12.9). Fix: apt-get install "
                               "cuda-toolkit-13-0 (or run the cuda_toolkit phase), then ln -s /usr/local/cuda-13.0 "
                               "/usr/local/cuda."),
    "PREFLIGHT_PIP_TO_INSTALL": ({"pip_ok": False, "expect__pip_by_play": True},
                                 "pip: missing for /usr/bin/python3; the pytorch phase installs python3-pip."),
    "PREFLIGHT_PIP_MISSING": ({"pip_ok": False},
                              "pip: missing for /usr/bin/python3 (Ubuntu 24.04 ships without it). Fix: apt-get "
                              "install -y python3-pip."),
    # mlx5_core loaded: modprobe is not the fix (changed deliberately, issue 46); the absent driver keeps it (below).
    "PREFLIGHT_RDMA_NONE": ({"gpufleet_rdma": {"devices": [], "active_devices": []}},
                            "RDMA: no devices under /sys/class/infiniband (mlx5_core is loaded). Fix: check the NICs "
                            "(lspci -d 15b3:), that mlx5_ib is loaded or built in (modprobe mlx5_ib) and the messages "
                            "of the driver (dmesg | grep mlx5); or set preflight_require_rdma: false for single-node "
                            "use."),
    "PREFLIGHT_RDMA_INACTIVE": ({"gpufleet_rdma": {"devices": [{"name": "mlx5_0"}, {"name": "mlx5_1"}],
                                                   "active_devices": ["mlx5_0"]}},
                                "RDMA: 1 ACTIVE devices of 2 (need 2). Fix: check cabling and the switch port "
                                "(ibv_devinfo: state PORT_ACTIVE)."),
    "PREFLIGHT_MODULE_MISSING": ({"modules": modules_facts(loaded=["nvidia_peermem"], absent=["mlx5_core"])},
                                 "Kernel module mlx5_core is not loaded. Fix: modprobe mlx5_core."),
    "PREFLIGHT_MODULE_NOT_IN_KERNEL": (
        {"modules": modules_facts(loaded=["nvidia_peermem"], not_in_kernel=["mlx5_core"])},
        "Kernel module mlx5_core is neither loaded nor built into kernel 6.8.0-1015-gcp, and the kernel has no module "
        "for it (it is not in /lib/modules/6.8.0-1015-gcp/modules.dep), so modprobe mlx5_core cannot load it. "
        "Fix: install the modules of kernel 6.8.0-1015-gcp (its linux-modules / linux-modules-extra package, or "
        "DOCA-OFED's for mlx5), or boot a kernel built with the driver."),
    "PREFLIGHT_MODULE_BUILTIN": ({"modules": modules_facts(builtin=["mlx5_core"], loaded=["nvidia_peermem"])},
                                 "Kernel module mlx5_core is built into kernel 6.8.0-1015-gcp: nothing to load (it is "
                                 "not in /proc/modules)."),
    "PREFLIGHT_MODULE_OPTIONAL": ({"modules": modules_facts(loaded=["mlx5_core"], absent=["nvidia_peermem"])},
                                  "Kernel module nvidia_peermem is not loaded (optional: NVSHMEM IBGDA falls back to "
                                  "dma-buf)."),
    # The MLX5DV messages name the NVSHMEM version rule (changed deliberately: 3.4.5 and newer define the symbol).
    "PREFLIGHT_MLX5DV_TO_INSTALL": ({"mlx5dv_ok": False, "expect__mlx5dv_by_play": True},
                                    "rdma-core: /usr/include/infiniband/mlx5_api.h lacks "
                                    "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (NVSHMEM IBGDA needs it); the doca_ofed phase "
                                    "installs DOCA-OFED."),
    "PREFLIGHT_MLX5DV_MISSING": ({"mlx5dv_ok": False},
                                 "rdma-core: /usr/include/infiniband/mlx5_api.h lacks MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, "
                                 "so NVSHMEM cannot build IBGDA (Ubuntu 24.04 rdma-core 50; NVSHMEM IBGDA needs it). "
                                 "Fix: install DOCA-OFED (doca_ofed_enabled: true; apt-get install mft=4.30.0-139 "
                                 "doca-ofed-userspace), or build NVSHMEM 3.4.5 or newer (nvshmem_version), which "
                                 "defines the symbol itself."),
    "PREFLIGHT_MLX5DV_NOT_NEEDED": ({"mlx5dv": {"ok": True, "waived": ["MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"],
                                                "reason": "NVSHMEM 3.4.5-0 defines it"}},
                                    "rdma-core: /usr/include/infiniband/mlx5_api.h lacks "
                                    "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, not needed: NVSHMEM 3.4.5-0 defines it. No "
                                    "DOCA-OFED for it."),
    # v1.2.1 (9af0e0d) lacks DeepEP #564; NVSHMEM 3.8.0 stores the RC QPs QP-major (test_rc_layout.py: the rest).
    "PREFLIGHT_DEEPEP_RC_LAYOUT": (
        {"deepep_tree": catalogued_tree_check("9af0e0d", "3.8.0"), "expect__nvshmem_version": "3.8.0"},
        "DeepEP 9af0e0d on NVSHMEM 3.8.0: the tree (the catalogue's DeepEP 9af0e0d (tag v1.2.1)) indexes NVSHMEM's "
        "IBGDA RC QPs PE-major (it lacks DeepEP #564 and #696), but NVSHMEM 3.8.0 stores them QP-major since 3.5.19: "
        "the first cross-node dispatch stalls ('timeout (dispatch CPU)') or faults (DeepEP #553, #707, #764). Fix: "
        "use a V1 tree with DeepEP #564 (29d31c0 or later, e.g. 567632d or PR #466's 8a07e7e) or a V2 tree with PR "
        "#696 (vLLM #58159 applies it as a patch), or an NVSHMEM older than 3.5.19."),
    # NVSHMEM 3.8.0 from source on CUDA 12.9 (the h100 profile's toolkit): NVIDIA/nvshmem#95.
    "PREFLIGHT_NVSHMEM_SOURCE_CUDA": (
        {"nvshmem_source": source_cuda_check("3.8.0-0", "12.9"), "expect__nvshmem_version": "3.8.0-0",
         "expect__cuda_version": "12.9"},
        "NVSHMEM 3.8.0-0 (3.8.0 or newer) built from source needs CUDA 13.0 or newer, and the build uses CUDA "
        "12.9: NVSHMEM 3.8.0 and later read nvmlPlatformInfo_t::chassisSerialNumber (NVML API v13) in "
        "src/host/mem/mem_transport.cpp; CUDA 12's nvml.h does not declare it, so a source build against a CUDA 12 "
        "toolkit fails compiling that file. Fix: build NVSHMEM with a CUDA 13 toolkit (cuda_toolkit_version 13.x, "
        "nvshmem_cuda_home), or keep NVSHMEM below 3.8.0 (e.g. v3.5.19-1) on CUDA 12."),
    "PREFLIGHT_LIBCUDA_SO1_ONLY": (SO1_ONLY,
                                   "libcuda.so: only /usr/lib/x86_64-linux-gnu/libcuda.so.1; builds link through the "
                                   "CUDA stubs, or fix: ln -sf /usr/lib/x86_64-linux-gnu/libcuda.so.1 "
                                   "/usr/lib/x86_64-linux-gnu/libcuda.so."),
    "PREFLIGHT_LIBCUDA_MISSING": (NO_LIBCUDA,
                                  "libcuda.so: not found in /usr/lib/x86_64-linux-gnu nor in the CUDA stubs. Fix: "
                                  "apt-get install --reinstall libnvidia-compute-<driver branch>, then ln -sf "
                                  "libcuda.so.1 libcuda.so."),
    "PREFLIGHT_LIBCUDA_STUBS": (dict(NO_LIBCUDA, expect__cuda_by_play=True),
                                "libcuda.so: not in /usr/lib/x86_64-linux-gnu; builds use /usr/local/cuda-13.0/lib64/"
                                "stubs once the toolkit is installed."),
}


def test_every_preflight_rule_has_a_case():
    """The DEEPEP_V2_* rules, judged in both contexts, have their cases in test_deepep_v2_runtime.py (which checks that
    every one has a case), the NVL72_* rules (GB200/GB300 fabric and IMEX, both contexts) in test_nvl72_fabric.py
    (which checks the same)."""
    rules = [r for r in validate_rules(CATALOGUE) if "preflight" in r.get("when", ["audit"])]
    assert {r["id"] for r in rules if not r["id"].startswith(("DEEPEP_V2_", "NVL72_"))} == set(CASES)
    assert all(r.get("message") for r in rules)


def test_healthy_node_passes():
    assert judge(HEALTHY) == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_with_the_role_message(rule_id):
    changes, message = CASES[rule_id]
    found = [f for f in judge(doc(**changes)) if f["id"] == rule_id]
    assert [f["message"] for f in found] == [message]
    assert found[0]["fix"] and found[0]["source"]


def test_notes_are_info_and_failures_critical():
    rules = {r["id"]: r for r in validate_rules(CATALOGUE)}
    notes = {"PREFLIGHT_CUDA_TO_INSTALL", "PREFLIGHT_PIP_TO_INSTALL", "PREFLIGHT_MODULE_OPTIONAL",
             "PREFLIGHT_MODULE_BUILTIN",
             "PREFLIGHT_MLX5DV_TO_INSTALL", "PREFLIGHT_MLX5DV_NOT_NEEDED", "PREFLIGHT_LIBCUDA_SO1_ONLY",
             "PREFLIGHT_LIBCUDA_STUBS"}
    for rule_id in CASES:
        assert rules[rule_id]["severity"] == ("info" if rule_id in notes else "critical"), rule_id


def test_gaps_the_play_fills_are_notes_not_failures():
    bare = doc(cuda={"version": "", "release": ""}, pip_ok=False, mlx5dv_ok=False, libcuda_found=[],
               expect__cuda_by_play=True, expect__pip_by_play=True, expect__mlx5dv_by_play=True)
    assert messages(bare, "critical") == []
    assert [f["id"] for f in judge(bare)] == ["PREFLIGHT_CUDA_TO_INSTALL", "PREFLIGHT_PIP_TO_INSTALL",
                                              "PREFLIGHT_MLX5DV_TO_INSTALL", "PREFLIGHT_LIBCUDA_STUBS"]


def test_every_missing_module_is_named_in_order():
    found = judge(doc(modules=modules_facts(loaded=["nvidia_peermem"], absent=["mlx5_core", "mlx5_ib"]),
                      expect__required_modules=["mlx5_core", "mlx5_ib"]))
    assert [f["message"] for f in found if f["id"] == "PREFLIGHT_MODULE_MISSING"] == [
        "Kernel module mlx5_core is not loaded. Fix: modprobe mlx5_core.",
        "Kernel module mlx5_ib is not loaded. Fix: modprobe mlx5_ib."]


def test_without_rdma_neither_devices_nor_modules_are_required():
    found = judge(doc(gpufleet_rdma={}, modules=modules_facts(loaded=["nvidia_peermem"], absent=["mlx5_core"]),
                      expect__require_rdma=False, expect__required_modules=[]))
    assert found == []


def test_a_built_in_driver_passes_and_modprobe_is_not_the_rdma_fix():
    found = judge(doc(gpufleet_rdma={"devices": [], "active_devices": []},
                      modules=modules_facts(builtin=["mlx5_core"], loaded=["nvidia_peermem"])))
    assert [f["id"] for f in found] == ["PREFLIGHT_RDMA_NONE", "PREFLIGHT_MODULE_BUILTIN"]
    assert found[0]["message"].startswith("RDMA: no devices under /sys/class/infiniband (mlx5_core is built into the "
                                          "kernel). Fix: check the NICs (lspci -d 15b3:)")
    assert "modprobe mlx5_core" not in " ".join(f["message"] for f in found)


def test_an_absent_driver_keeps_modprobe_as_the_rdma_fix():
    found = judge(doc(gpufleet_rdma={"devices": [], "active_devices": []},
                      modules=modules_facts(loaded=["nvidia_peermem"], absent=["mlx5_core"])))
    assert [f["message"] for f in found] == [
        "RDMA: no devices under /sys/class/infiniband. Fix: modprobe mlx5_core mlx5_ib; check the NICs (lspci -d "
        "15b3:); or set preflight_require_rdma: false for single-node use.",
        "Kernel module mlx5_core is not loaded. Fix: modprobe mlx5_core."]


def test_a_kernel_without_a_module_directory_is_named():
    facts = modules_facts(loaded=["mlx5_core"], not_in_kernel=["nvidia_peermem"], module_index=None)
    assert messages(doc(modules=facts)) == [
        "Kernel module nvidia_peermem is not loaded, and the kernel has no module for it (optional: NVSHMEM IBGDA "
        "falls back to dma-buf)."]
    facts = modules_facts(loaded=["nvidia_peermem"], not_in_kernel=["mlx5_core"], module_index=None)
    (message,) = [f["message"] for f in judge(doc(modules=facts)) if f["id"] == "PREFLIGHT_MODULE_NOT_IN_KERNEL"]
    assert "(there is no /lib/modules/6.8.0-1015-gcp)" in message


def test_no_cuda_wanted_and_no_arch_expected_pass():
    assert judge(doc(cuda={"version": "", "release": ""}, expect__cuda_version="", expect__cuda_arch=[])) == []


def test_failures_keep_the_order_of_the_checks():
    broken = doc(gpufleet_gpus={"gpus": []}, gpufleet_nvidia={"driver_loaded": False}, pip_ok=False,
                 gpufleet_rdma={"devices": []}, mlx5dv_ok=False, libcuda_found=[])
    assert [f["id"] for f in judge(broken) if f["severity"] == "critical"] == [
        "PREFLIGHT_GPU_COUNT", "PREFLIGHT_DRIVER_NOT_LOADED", "PREFLIGHT_PIP_MISSING", "PREFLIGHT_RDMA_NONE",
        "PREFLIGHT_MLX5DV_MISSING", "PREFLIGHT_LIBCUDA_MISSING"]


def test_contexts_keep_the_rules_apart():
    audit_ids = {f["id"] for f in evaluate_rules(doc(gpufleet_gpus={"gpus": []}), CATALOGUE)}
    assert not [i for i in audit_ids if i.startswith("PREFLIGHT_")]
    assert not [f for f in judge(AUDIT_HEALTHY | {"expect": HEALTHY["expect"]}) if not f["id"].startswith("PREFLIGHT_")]


@pytest.mark.parametrize("change, text", [
    ({"when": ["deploy"]}, "when ['deploy'] must be a non-empty list of audit, preflight"),
    ({"when": []}, "must be a non-empty list"),
    ({"message": "found {x}", "evidence": None}, "a message needs an evidence mapping"),
    ({"each": "[["}, "invalid jmespath expression"),
])
def test_bad_rule_keys_are_named(change, text):
    rule = {"id": "X_RULE", "title": "t", "severity": "info", "condition": "`true`", "fix": "f", "source": "s",
            "evidence": "{x: `1`}", "message": "x {x}"}
    rule.update(change)
    rule = {k: v for k, v in rule.items() if v is not None}
    with pytest.raises(AuditError) as err:
        validate_rules([rule])
    assert text in str(err.value)


def test_message_naming_a_value_the_evidence_lacks_is_refused():
    rule = {"id": "X_RULE", "title": "t", "severity": "info", "condition": "`true`", "fix": "f", "source": "s",
            "evidence": "{x: `1`}", "message": "x {y}", "when": ["preflight"]}
    with pytest.raises(AuditError) as err:
        evaluate_rules({}, [rule], context="preflight")
    assert "rule X_RULE: message 'x {y}' names a value the evidence lacks" in str(err.value)


def test_unknown_context_and_order_are_refused():
    with pytest.raises(AuditError, match="context 'deploy' is not one of audit, preflight"):
        evaluate_rules({}, [], context="deploy")
    with pytest.raises(AuditError, match="order 'random' is not severity or catalogue"):
        evaluate_rules({}, [], order="random")


# --- the MLX5DV symbol follows the NVSHMEM version the play builds (the role's document, built as the role does) ---

SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"
OLDER = ["3.2.5-1", "3.3.9", "v3.4.4-1", ""]  # "" is an unknown version: the symbol stays required
SINCE_345 = ["3.4.5-0", "3.4.5", "v3.4.5-0", "3.5.1", "3.5.19-1"]


def mlx5dv_doc(version, present, by_play):
    """The preflight document of a node whose rdma-core header (present or not) lacks the symbol."""
    verdict = mlx5dv_verdict({"present": present, "symbols": {SYMBOL: False}}, version)
    return doc(mlx5dv_ok=verdict["ok"], mlx5dv=verdict, expect__nvshmem_version=version,
               expect__mlx5dv_by_play=by_play)


@pytest.mark.parametrize("present", [True, False])
@pytest.mark.parametrize("by_play", [True, False])
@pytest.mark.parametrize("version", OLDER)
def test_older_or_unknown_nvshmem_still_needs_the_symbol(version, present, by_play):
    found = {f["id"]: f for f in judge(mlx5dv_doc(version, present, by_play))}
    rule = "PREFLIGHT_MLX5DV_TO_INSTALL" if by_play else "PREFLIGHT_MLX5DV_MISSING"
    assert set(found) == {rule}
    assert found[rule]["severity"] == ("info" if by_play else "critical")
    message = found[rule]["message"]
    assert "lacks %s" % SYMBOL in message
    # The message names the version rule: the version and why it needs the symbol.
    if version:
        assert "NVSHMEM %s (older than 3.4.5) needs %s" % (version.lstrip("v"), SYMBOL) in message
    else:
        assert "the NVSHMEM version is unknown" in message


@pytest.mark.parametrize("present", [True, False])
@pytest.mark.parametrize("by_play", [True, False])
@pytest.mark.parametrize("version", SINCE_345)
def test_nvshmem_345_and_newer_need_no_symbol(version, present, by_play):
    found = judge(mlx5dv_doc(version, present, by_play))
    assert [f["id"] for f in found] == ["PREFLIGHT_MLX5DV_NOT_NEEDED"]
    assert found[0]["severity"] == "info"
    assert found[0]["message"] == (
        "rdma-core: /usr/include/infiniband/mlx5_api.h lacks %s, not needed: NVSHMEM %s (3.4.5 or newer) defines %s "
        "itself when infiniband/mlx5dv.h lacks it: it needs the header (libibverbs-dev), not the symbol. No DOCA-OFED "
        "for it." % (SYMBOL, version.lstrip("v"), SYMBOL))


@pytest.mark.parametrize("version", OLDER + SINCE_345)
def test_a_header_with_the_symbol_is_quiet_for_every_version(version):
    verdict = mlx5dv_verdict({"present": True, "symbols": {SYMBOL: True}}, version)
    assert verdict["ok"] is True and verdict["waived"] == [] and verdict["missing"] == []
    assert judge(doc(mlx5dv_ok=True, mlx5dv=verdict, expect__nvshmem_version=version)) == []


@pytest.mark.parametrize("version", SINCE_345)
def test_not_required_at_all_stays_quiet(version):
    assert judge(dict(mlx5dv_doc(version, False, False), expect=dict(HEALTHY["expect"], require_mlx5dv=False))) == []


B300 = {"gpufleet_gpus": {"gpus": [{"name": "NVIDIA B300 SXM6 AC", "compute_capability": "10.3"}] * 8},
        "expect__cuda_arch": ["10.3"]}


@pytest.mark.parametrize("profile_cuda, installed, fires", [
    ("12.9", "", False),     # the first toolkit with sm_103
    ("13.0", "", False),
    ("12.8", "13.0", True),  # the profile's toolkit is the one the builds use, not the one found
    ("", "12.8", True),      # a profile without cuda_toolkit_version: the toolkit found is judged
    ("", "", False),         # nothing to judge against: the CUDA rules say what is missing
])
def test_b300_toolkit_floor_judges_the_toolkit_the_builds_use(profile_cuda, installed, fires):
    found = [f for f in judge(doc(cuda={"version": installed, "release": installed}, expect__cuda_version=profile_cuda,
                                  expect__cuda_by_play=True, **B300))
             if f["id"] == "PREFLIGHT_CUDA_TOO_OLD_FOR_GPU"]
    assert bool(found) is fires, found


def test_toolkit_floor_takes_the_profiles_arch_before_the_gpus_are_read():
    """No GPU listed (nvidia-smi not there yet): the profile's family (expect.cuda_arch) carries the floor; an arch the
    collection has no floor for is not judged."""
    no_gpus = {"gpufleet_gpus": {"gpus": []}}
    fired = [f for f in judge(doc(expect__cuda_arch=["10.3"], expect__cuda_version="12.8", **no_gpus))
             if f["id"] == "PREFLIGHT_CUDA_TOO_OLD_FOR_GPU"]
    assert len(fired) == 1 and "compute capability 10.3 (the profile's GPUs;" in fired[0]["message"]
    unknown = [f for f in judge(doc(expect__cuda_arch=["12.0"], expect__cuda_version="12.8", **no_gpus))
               if f["id"] == "PREFLIGHT_CUDA_TOO_OLD_FOR_GPU"]
    assert unknown == []


@pytest.mark.parametrize("changes, fired", [
    ({"fabric": "efa", "deepep_internode": True, "deepep_v2": True, "nccl_version": "2.31.2"}, []),
    ({"fabric": "efa", "deepep_internode": True, "deepep_v2": True, "nccl_version": "2.32.3"}, []),
    ({"fabric": "efa", "deepep_internode": True, "deepep_v2": True, "nccl_version": ""},
     ["PREFLIGHT_FABRIC_NCCL_OLD"]),                                # torch's own NCCL, not pinned: not known to have it
    ({"fabric": "efa", "deepep_internode": False, "deepep_v2": False}, []),       # V1 on NVLink only: runs
    ({"fabric": "roce", "deepep_internode": True, "deepep_v2": False}, []),      # mlx5: V1 with IBGDA
    ({"fabric": "infiniband", "deepep_internode": True, "deepep_v2": True, "nccl_version": "2.30.7"}, []),
    ({"fabric": "", "deepep_internode": True, "deepep_v2": False}, []),          # none declared: nothing to hold
])
def test_the_fabric_decides_what_runs_across_nodes(changes, fired):
    found = [f["id"] for f in judge(doc(**dict(("expect__" + k, v) for k, v in changes.items())))
             if f["id"].startswith("PREFLIGHT_FABRIC_")]
    assert found == fired


@pytest.mark.parametrize("family, arch, fires", [
    ("gb200", "aarch64", False), ("gb300", "arm64", False),      # Grace, as the kernel or dpkg names it
    ("b200", "x86_64", False), ("b300", "aarch64", True),        # an HGX family on an Arm node
    ("gb300", "x86_64", True), ("", "x86_64", False), ("b200", "", False), ("b200", "riscv64", True),
])
def test_the_family_decides_the_hosts_cpu(family, arch, fires):
    found = [f for f in judge(doc(expect__gpu_family=family, expect__host_arch=arch)) if f["id"] == "PREFLIGHT_HOST_ARCH"]
    assert bool(found) is fires, found
