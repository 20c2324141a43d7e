# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every rule of the audit catalogue: one facts document that makes it fire, one close to it that keeps it quiet."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import gather_rdma_core
from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import collect_rdma, parse_rate_gbps
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules, validate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import fabric_offers
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())
DELETE = object()


def mutate(doc, changes):
    """Apply {"a.b.c": value} changes to a deep copy of doc (DELETE removes the key)."""
    out = copy.deepcopy(doc)
    for path, value in changes.items():
        keys = path.split(".")
        node = out
        for key in keys[:-1]:
            if isinstance(node, list):
                node = node[int(key)]
            else:
                node = node.setdefault(key, {})
        last = keys[-1]
        if value is DELETE:
            node.pop(last, None)
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return out


def ids(doc):
    return [f["id"] for f in evaluate_rules(doc, CATALOGUE)]


ROCEP = ["rocep145s0", "rocep146s0"]


def linkage_facts(name, ok, expected=None, found=None, warning=None, **extra):
    """gpufleet_linkage with one check (the shape of node_stack gather: [linkage])."""
    entry = dict({"check": name, "ok": ok, "expected": expected, "found": found, "reason": "r", "warning": warning,
                  "fix": "the fix of %s" % name if (ok is False or warning) else None}, **extra)
    return {"record": {"present": ok is not None}, "ok": ok, "checks": [entry],
            "failed": [name] if ok is False else [], "unknown": [name] if ok is None else [],
            "warnings": [warning] if warning else []}


def rails(slow=None, rate="200 Gb/sec (2X NDR)"):
    """The healthy node's eight NICs ACTIVE at 400 Gb/s, ``slow`` trained down to ``rate``."""
    devices = copy.deepcopy(HEALTHY["gpufleet_rdma"]["devices"])
    for device in devices:
        for port in device["ports"]:
            port.update(active=True, state="ACTIVE", rate="400 Gb/sec (4X NDR)", rate_gbps=400)
            if device["name"] == slow:
                port.update(rate=rate, rate_gbps=parse_rate_gbps(rate))
    return devices


GPU_NICS = [{"gpu": i, "hca": "mlx5_%d" % i, "port": 1} for i in range(8)]

# rule id -> (changes that make it fire, changes of a close state that keeps it quiet)
CASES = {
    "FABRIC_NOT_AS_DECLARED": (
        # the profile declares InfiniBand; the node's active ports run Ethernet (RoCE)
        {"expect.fabric": "infiniband"},
        # it declares the fabric its ports run
        {"expect.fabric": "roce"},
    ),
    "FABRIC_ENV_MISSING": (
        # an EFA profile whose env script has none of the fabric's variables (EFA-GDA off: GIN over the CPU proxy)
        {"expect.fabric": "efa"},
        # the env script exports them as the env_script role writes them
        {"expect.fabric": "efa", "gpufleet_stack.env_script.exports.NCCL_GIN_TYPE": "5",
         "gpufleet_stack.env_script.exports.NCCL_SYM_GIN_KERNELS_ENABLE": "0",
         "gpufleet_stack.env_script.exports.FI_PROVIDER": "efa"},
    ),
    "GIN_NCCL_COMPANION_QPS": (
        # DeepEP V2 across RoCE nodes on NCCL 2.30.4 (V2's floor): GIN builds companion QPs per context and peer
        {"gpufleet_deepep.generation": "v2", "gpufleet_stack.nccl.loaded_version": "2.30.4"},
        # NCCL 2.30.7 (fb435094: no companion QPs without counters)
        {"gpufleet_deepep.generation": "v2", "gpufleet_stack.nccl.loaded_version": "2.30.7"},
    ),
    "GIN_EP_NIC_NOT_CX8": (
        # ConnectX-8 rails, but EP_NIC_NAME unset: V2 reads mlx5_0, here a ConnectX-7 (MT4129)
        dict({"gpufleet_deepep.generation": "v2", "gpufleet_rdma.devices.0.hca_type": "MT4129"},
             **{"gpufleet_rdma.devices.%d.%s" % (i, key): value for i in range(8)
                for key, value in (("hca_type", "MT4131"), ("active", True)) if (i, key) != (0, "hca_type")}),
        # the env script names a ConnectX-8 rail
        dict({"gpufleet_deepep.generation": "v2", "gpufleet_rdma.devices.0.hca_type": "MT4129",
              "gpufleet_stack.env_script.exports.EP_NIC_NAME": "mlx5_1"},
             **{"gpufleet_rdma.devices.%d.%s" % (i, key): value for i in range(8)
                for key, value in (("hca_type", "MT4131"), ("active", True)) if (i, key) != (0, "hca_type")}),
    ),
    "RDMA_RAIL_SLOW": (
        {"gpufleet_rdma.devices": rails("mlx5_5"), "gpufleet_gpus.hca_mapping": GPU_NICS},
        # the slower NIC is not a GPU's (a front-end RDMA NIC at its own speed)
        {"gpufleet_rdma.devices": rails("mlx5_7", "100 Gb/sec (4X EDR)"), "gpufleet_gpus.hca_mapping": GPU_NICS[:7]},
    ),
    "PEERMAP_NOT_LIVE": (
        {"gpufleet_nvidia.peer_mapping_override_active": False, "gpufleet_nvidia.params.RegistryDwords": "",
         "gpufleet_nvidia.registry_dwords": {}, "gpufleet_nvidia.reboot_required": True},
        # configured and live after the reboot: quiet
        {"gpufleet_nvidia.peer_mapping_override_active": True, "gpufleet_nvidia.reboot_required": False},
    ),
    "PEERMAP_OPTION_IGNORED": (
        {"gpufleet_nvidia.persistent.ineffective": [
            {"path": "/etc/modprobe.d/nvidia-peermem.conf", "line": 1, "option": "NVreg_PeerMappingOverride",
             "value": "1", "status": "registry_key", "reason": "registry key", "fix": None}]},
        {"gpufleet_nvidia.persistent.ineffective": []},
    ),
    "BUNDLED_NVSHMEM_WINS": (
        {"gpufleet_bundled_nvshmem.bundled_would_win": True,
         "gpufleet_stack.env_script.exports.LD_PRELOAD": DELETE},
        # the bundled copy exists but the env script preloads the custom host library
        {"gpufleet_bundled_nvshmem.bundled_would_win": False},
    ),
    "DEEPEP_NVSHMEM_NO_IBGDA": (
        {"gpufleet_deepep.nvshmem_build.ibgda": False,
         "gpufleet_deepep.nvshmem_build.root": "/usr/local/lib/python3.12/dist-packages/nvidia/nvshmem"},
        {"gpufleet_deepep.nvshmem_build.ibgda": True},
    ),
    # (the document's derivation from the build's record and the node's NVSHMEM: test_rc_layout.py)
    "DEEPEP_NVSHMEM_RC_LAYOUT": (
        {"gpufleet_deepep_rc_layout": {"check": "nvshmem_rc_layout", "status": "fail", "reason": "r", "fix": "f",
                                       "source": "s", "found": {"tree_fix": None, "loads": "3.5.19"}}},
        {"gpufleet_deepep_rc_layout": {"check": "nvshmem_rc_layout", "status": "pass", "reason": "r", "fix": None,
                                       "source": None, "found": {"tree_fix": "#564", "loads": "3.5.19"}}},
    ),
    "DEEPEP_NCCL_MAPPED_TWICE": (
        {"gpufleet_stack.deep_ep_import.mapped": {
            "nccl": ["/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
                     "/usr/lib/x86_64-linux-gnu/libnccl.so.2.30.7"], "nvshmem_host": []}},
        {"gpufleet_stack.deep_ep_import.mapped": {
            "nccl": ["/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"], "nvshmem_host": []}},
    ),
    # The profile pins 2.32.3; a later torch install brought torch's own NCCL (2.27.3 here) back. Quiet: the pin holds.
    "NCCL_PIN_MOVED": (
        {"expect.nccl_pin": "2.32.3"},
        {"expect.nccl_pin": "2.27.3"},
    ),
    # NUMA balancing on (1), off (0) on a two-socket node.
    "HOST_NUMA_BALANCING": (
        {"gpufleet_stack.host": {"numa_balancing": 1, "numa_nodes": 2, "uvm_disable_hmm": "N"}},
        {"gpufleet_stack.host": {"numa_balancing": 0, "numa_nodes": 2, "uvm_disable_hmm": "N"}},
    ),
    "DEEPEP_TORCH_ABI": (
        {"gpufleet_stack.torch.version": "2.11.0+cu130"},
        # the same torch, only the facts module saw it again
        {"gpufleet_stack.torch.version": "2.9.1+cu129"},
    ),
    "DEEPEP_V2_NCCL_OLD": (
        {"gpufleet_deepep.generation": "v2", "gpufleet_stack.nccl.loaded_version": "2.28.9"},
        {"gpufleet_deepep.generation": "v2", "gpufleet_stack.nccl.loaded_version": "2.30.4"},
    ),
    "HCA_PREFIX_MISMATCH": (
        {"gpufleet_rdma.devices.0.name": ROCEP[0], "gpufleet_rdma.devices.1.name": ROCEP[1]},
        # rocep names on a node whose profile expects rocep
        {"gpufleet_rdma.devices.0.name": ROCEP[0], "gpufleet_rdma.devices.1.name": ROCEP[1],
         "gpufleet_rdma.devices.2.name": "rocep152s0", "gpufleet_rdma.devices.3.name": "rocep153s0",
         "gpufleet_rdma.devices.4.name": "rocep196s0", "gpufleet_rdma.devices.5.name": "rocep197s0",
         "gpufleet_rdma.devices.6.name": "rocep205s0", "gpufleet_rdma.devices.7.name": "rocep206s0",
         "expect.hca_prefix": "rocep"},
    ),
    "ROCE_GID_INDEX": (
        {"gpufleet_stack.env_script.exports.NVSHMEM_IB_GID_INDEX": "1"},
        {"gpufleet_stack.env_script.exports.NVSHMEM_IB_GID_INDEX": "3"},
    ),
    "NIC_HANDLER_CPU_NO_GDRDRV": (
        {"gpufleet_stack.env_script.exports.NVSHMEM_IBGDA_NIC_HANDLER": "cpu"},
        {"gpufleet_stack.env_script.exports.NVSHMEM_IBGDA_NIC_HANDLER": "cpu",
         "gpufleet_stack.gdrcopy.gdrdrv_loaded": True},
    ),
    "HCA_MAPPING_MISSING": (
        {"gpufleet_stack.env_script.exports.DEEP_EP_DEVICE_TO_HCA_MAPPING": DELETE},
        # one active NIC: nothing to map
        {"gpufleet_stack.env_script.exports.DEEP_EP_DEVICE_TO_HCA_MAPPING": DELETE,
         "gpufleet_rdma.active_devices": ["mlx5_0"]},
    ),
    "RDMA_CORE_NO_MLX5DV": (
        {"gpufleet_stack.rdma_core.rdma_core_version": "50.0-2build2", "gpufleet_stack.rdma_core.mlx5dv_ok": False,
         "gpufleet_stack.rdma_core.mlx5dv_symbols": {"MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT": False}},
        # no rdma-core at all (a node without RDMA): not this rule's business
        {"gpufleet_stack.rdma_core.rdma_core_version": None, "gpufleet_stack.rdma_core.mlx5_header_present": False,
         "gpufleet_stack.rdma_core.mlx5dv_ok": False},
    ),
    "NVSHMEM_LIBMLX5_OLD": (
        {"gpufleet_stack.nvshmem": {"present": True, "ibgda": True, "version": "3.4.5"},
         "gpufleet_stack.rdma_core.libmlx5": {"path": "/usr/lib/x86_64-linux-gnu/libmlx5.so.1", "newest": "MLX5_1.7",
                                              "required": "MLX5_1.8", "required_ok": False}},
        # NVSHMEM built without IBGDA does not load libmlx5's mlx5dv entry points
        {"gpufleet_stack.nvshmem": {"present": True, "ibgda": False, "version": "3.4.5"},
         "gpufleet_stack.rdma_core.libmlx5": {"path": "/usr/lib/x86_64-linux-gnu/libmlx5.so.1", "newest": "MLX5_1.7",
                                              "required": "MLX5_1.8", "required_ok": False}},
    ),
    "LIBCUDA_SO_MISSING": (
        {"gpufleet_stack.libcuda.so_path": None, "gpufleet_stack.libcuda.linkable": False},
        # no toolkit: the node does not build
        {"gpufleet_stack.libcuda.so_path": None, "gpufleet_stack.libcuda.linkable": False,
         "gpufleet_stack.cuda.nvcc_present": False},
    ),
    "REMOTE_TRANSPORT_NOT_IBGDA": (
        {"gpufleet_stack.env_script.exports.NVSHMEM_REMOTE_TRANSPORT": DELETE},
        # no RDMA NICs: intranode only
        {"gpufleet_stack.env_script.exports.NVSHMEM_REMOTE_TRANSPORT": DELETE, "gpufleet_rdma.transport": "none"},
    ),
    "DEEPEP_ARCH_MISMATCH": (
        {"gpufleet_deepep.built_against.arch_list": "9.0"},
        {"gpufleet_deepep.built_against.arch_list": "9.0;10.0"},
    ),
    "NIC_PORT_DOWN": (
        {"gpufleet_rdma.devices.7.ports.0.state": "DOWN", "gpufleet_rdma.devices.7.ports.0.phys_state": "DISABLED"},
        {"gpufleet_rdma.devices.7.ports.0.state": "ACTIVE"},
    ),
    "PEERMEM_MISSING": (
        {"gpufleet_stack.peermem_loaded": False, "gpufleet_stack.kernel_modules.nvidia_peermem": False,
         "gpufleet_nvidia.peer_mapping_override_active": False,
         "gpufleet_nvidia.persistent.registry_dwords": {}, "gpufleet_nvidia.persistent.registry_dwords_raw": None},
        {"gpufleet_stack.peermem_loaded": True, "gpufleet_nvidia.peer_mapping_override_active": False,
         "gpufleet_nvidia.persistent.registry_dwords": {}, "gpufleet_nvidia.persistent.registry_dwords_raw": None},
    ),
    "PEERMEM_MISSING_DMABUF": (
        {"gpufleet_stack.peermem_loaded": False, "gpufleet_stack.kernel_modules.nvidia_peermem": False},
        {"gpufleet_stack.peermem_loaded": True},
    ),
    "DEEPEP_IMPORT_FAILS": (
        {"gpufleet_stack.deep_ep_import.ok": False, "gpufleet_stack.deep_ep_import.rc": 1,
         "gpufleet_stack.deep_ep_import.error": "ImportError: undefined symbol: ncclGetLsaDevicePointer"},
        # DeepEP is not installed on this node: a failing import is expected
        {"gpufleet_stack.deep_ep_import.ok": False, "gpufleet_stack.deep_ep_package": None,
         "gpufleet_deepep.installed": False},
    ),
    "ENV_SCRIPT_MISSING": (
        {"gpufleet_stack.env_script": {"path": "/opt/deepep/unified-env.sh", "present": False, "sha256": None,
                                       "mode": None, "exports": {}, "exports_raw": {}}},
        {"gpufleet_stack.env_script.present": True},
    ),
    "REBOOT_PENDING": (
        {"gpufleet_stack.reboot.required": True, "gpufleet_stack.reboot.reasons": ["/var/run/reboot-required"]},
        {"gpufleet_stack.reboot.required": False},
    ),
    # gpufleet_linkage (node_stack gather: [linkage]): one failed check each; the same check passing keeps it quiet
    "LINKAGE_NCCL_MISMATCH": (
        {"gpufleet_linkage": linkage_facts("nccl", False, expected="2.30.7", found="2.28.9")},
        {"gpufleet_linkage": linkage_facts("nccl", True, expected="2.30.7", found="2.30.7")},
    ),
    "LINKAGE_NVSHMEM_MISMATCH": (
        {"gpufleet_linkage": linkage_facts("nvshmem", False, expected="3.x with x >= 5 (device library 3.5.1)",
                                           found="3.4.5")},
        # not known (no record yet): quiet
        {"gpufleet_linkage": linkage_facts("nvshmem", None)},
    ),
    "LINKAGE_GPU_ARCH_MISSING": (
        {"gpufleet_linkage": linkage_facts("gpu_arch", False, expected="sm_100", found="SASS sm_90; PTX none",
                                           gpus=[0, 1])},
        {"gpufleet_linkage": linkage_facts("gpu_arch", True, expected="sm_90", found="SASS sm_90; PTX none",
                                           gpus=[0, 1])},
    ),
    "LINKAGE_GPU_ARCH_PTX_ONLY": (
        {"gpufleet_linkage": linkage_facts("gpu_arch", True, expected="sm_100", found="SASS sm_90; PTX sm_90",
                                           gpus=[0], warning="GPU 0 (10.0): no SASS for sm_100")},
        {"gpufleet_linkage": linkage_facts("gpu_arch", True, expected="sm_90", found="SASS sm_90; PTX sm_90",
                                           gpus=[0])},
    ),
    "LINKAGE_TORCH_CHANGED": (
        {"gpufleet_linkage": linkage_facts("torch", False, expected="2.11.0+cu130", found="2.9.1+cu129")},
        {"gpufleet_linkage": linkage_facts("torch", True, expected="2.11.0+cu130", found="2.11.0+cu130")},
    ),
    # (DEEPEP_TORCH_ABI already reports a torch change the stamp shows: see MORE_CASES)
    "LINKAGE_LIBSTDCXX_STATIC": (
        {"gpufleet_linkage": linkage_facts("libstdcxx", False, found="deep_ep/_C.so: static")},
        {"gpufleet_linkage": linkage_facts("libstdcxx", True, found="deep_ep/_C.so: shared")},
    ),
    "FACTS_INCOMPLETE": (
        {"gather_errors": {"gpufleet_rdma": "module failed"}},
        {"gather_errors": {}},
    ),
    # What could not be judged (kind not_judged; the captured no-profile case is in test_audit_report.py).
    "NOT_JUDGED_NO_PROFILE": (
        {"expect.unset": ["gpufleet_profile", "deepep_generation"]},
        # a profile, some of whose settings are left at their defaults
        {"expect.unset": ["deepep_generation"], "expect.profile": "b200_cuda13"},
    ),
    "NOT_JUDGED_TORCH_NOT_FOUND": (
        {"gpufleet_stack.torch": {"version": None, "cuda": None, "location": None}},
        {"gpufleet_stack.torch.version": "2.9.1+cu129"},
    ),
}


def test_a_slow_rail_is_named_with_its_rate_and_its_peers():
    doc = mutate(HEALTHY, {"gpufleet_rdma.devices": rails("mlx5_5"), "gpufleet_gpus.hca_mapping": GPU_NICS})
    (finding,) = [f for f in evaluate_rules(doc, CATALOGUE) if f["id"] == "RDMA_RAIL_SLOW"]
    assert finding["evidence"] == {"nic": "mlx5_5", "rate_gbps": 200, "peers_gbps": 400}
    assert finding["message"].startswith("mlx5_5 runs at 200 Gb/s while the node's other GPU NICs run at 400 Gb/s")


def test_healthy_node_has_no_findings():
    assert ids(HEALTHY) == []


def test_every_rule_has_a_case():
    """Every rule of the audit (the preflight rules have their cases in test_preflight_rules.py, the SGLang
    rules in test_sglang_rules.py, which checks that every one has a case, the serving rules in
    test_serve_state.py, which checks the same, the DeepEP V2 runtime rules in test_deepep_v2_runtime.py, which
    checks the same, the NCCL EP rules in test_nccl_ep_env.py, which checks the same, and the GB200/GB300 NVL72 fabric
    and IMEX rules in test_nvl72_fabric.py, which checks the same)."""
    rule_ids = {r["id"] for r in validate_rules(CATALOGUE) if "audit" in r.get("when", ["audit"])}
    v2_runtime = {r for r in rule_ids if r.startswith("DEEPEP_V2_") and r != "DEEPEP_V2_NCCL_OLD"}
    assert {r for r in rule_ids if not r.startswith(("SGLANG_", "SERVING_", "NCCL_EP_", "NVL72_"))} - v2_runtime \
        == set(CASES)


def test_issue_rules_are_in_the_catalogue():
    """The rules issue 7 asks for, by what they check."""
    rule_ids = {r["id"] for r in validate_rules(CATALOGUE)}
    assert {"PEERMAP_NOT_LIVE", "BUNDLED_NVSHMEM_WINS", "DEEPEP_NVSHMEM_NO_IBGDA", "DEEPEP_TORCH_ABI",
            "DEEPEP_V2_NCCL_OLD", "HCA_PREFIX_MISMATCH", "ROCE_GID_INDEX", "NIC_HANDLER_CPU_NO_GDRDRV",
            "HCA_MAPPING_MISSING", "RDMA_CORE_NO_MLX5DV", "LIBCUDA_SO_MISSING", "REMOTE_TRANSPORT_NOT_IBGDA",
            "DEEPEP_ARCH_MISMATCH", "NIC_PORT_DOWN", "PEERMEM_MISSING", "PEERMEM_MISSING_DMABUF"} <= rule_ids


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires(rule_id):
    found = evaluate_rules(mutate(HEALTHY, CASES[rule_id][0]), CATALOGUE)
    assert rule_id in [f["id"] for f in found]
    finding = next(f for f in found if f["id"] == rule_id)
    assert finding["fix"] and finding["source"]


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_quiet(rule_id):
    assert rule_id not in ids(mutate(HEALTHY, CASES[rule_id][1]))


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_quiet_without_its_facts(rule_id):
    """A node whose facts modules returned nothing triggers no rule except FACTS_INCOMPLETE."""
    doc = {"host": "n1", "groups": [], "reachable": True, "expect": {"hca_prefix": "mlx5"},
           "gather_errors": {"gpufleet_stack": "boom"}}
    found = ids(doc)
    assert found == ["FACTS_INCOMPLETE"]
    if rule_id != "FACTS_INCOMPLETE":
        assert rule_id not in found


def test_severities_as_issue_says():
    rules = {r["id"]: r for r in validate_rules(CATALOGUE)}
    assert rules["PEERMEM_MISSING_DMABUF"]["severity"] == "info"
    assert rules["PEERMEM_MISSING"]["severity"] != "info"
    assert rules["PEERMAP_NOT_LIVE"]["severity"] == "critical"


def test_evidence_names_the_offending_devices():
    doc = mutate(HEALTHY, {"gpufleet_rdma.devices.0.name": "rocep145s0",
                           "gpufleet_rdma.devices.3.ports.0.state": "DOWN"})
    found = {f["id"]: f for f in evaluate_rules(doc, CATALOGUE)}
    assert found["HCA_PREFIX_MISMATCH"]["evidence"] == {"expected": "mlx5", "devices": ["rocep145s0"]}
    assert found["NIC_PORT_DOWN"]["evidence"][0]["device"] == "mlx5_3"
    assert found["NIC_PORT_DOWN"]["evidence"][0]["ports"][0]["state"] == "DOWN"


def test_torch_abi_evidence_and_import_error():
    doc = mutate(HEALTHY, {"gpufleet_stack.torch.version": "2.11.0+cu130", "gpufleet_stack.deep_ep_import.ok": False,
                           "gpufleet_stack.deep_ep_import.error": "undefined symbol: _ZNK3c10"})
    found = {f["id"]: f for f in evaluate_rules(doc, CATALOGUE)}
    assert found["DEEPEP_TORCH_ABI"]["evidence"]["built_against"] == "2.9.1+cu129"
    assert found["DEEPEP_TORCH_ABI"]["evidence"]["installed"] == "2.11.0+cu130"
    assert "DEEPEP_IMPORT_FAILS" in found


# The issue's rules that name more than one way to fire (or a close state that must stay quiet): one case each.
# (rule id, changes, fires?, what the case is)
MORE_CASES = [
    ("LINKAGE_TORCH_CHANGED", {"gpufleet_linkage": linkage_facts("torch", False, expected="2.9.1+cu129",
                                                                 found="2.11.0+cu130"),
                               "gpufleet_stack.torch.version": "2.11.0+cu130"}, False,
     "the stamp's built_against shows the same torch change: DEEPEP_TORCH_ABI is the one finding"),
    ("DEEPEP_TORCH_ABI", {"gpufleet_linkage": linkage_facts("torch", False, expected="2.9.1+cu129",
                                                            found="2.11.0+cu130"),
                          "gpufleet_stack.torch.version": "2.11.0+cu130"}, True,
     "a torch change the stamp and the linkage record both show"),
    ("ROCE_GID_INDEX", {"gpufleet_stack.env_script.exports.NVSHMEM_IB_GID_INDEX": DELETE}, True,
     "RoCE and the env script exports no NVSHMEM_IB_GID_INDEX"),
    ("ROCE_GID_INDEX", {"gpufleet_stack.env_script.exports.NVSHMEM_IB_GID_INDEX": DELETE,
                        "gpufleet_rdma.transport": "infiniband", "gpufleet_rdma.recommended_gid_index": None}, False,
     "InfiniBand needs no GID index"),
    ("ROCE_GID_INDEX", {"gpufleet_stack.env_script.exports.NVSHMEM_IB_GID_INDEX": "1",
                        "gpufleet_rdma.recommended_gid_index": None}, False,
     "the ports disagree on the RoCE v2 IPv4 index: nothing to compare against"),
    ("HCA_PREFIX_MISMATCH", {"gpufleet_rdma.devices.0.name": "rocep145s0", "expect.hca_prefix": None}, False,
     "no profile expectation for the group"),
    ("FABRIC_NOT_AS_DECLARED", {"expect.fabric": "roce", "gpufleet_rdma.transport": "infiniband"}, True,
     "RoCE declared, the ports run InfiniBand"),
    ("FABRIC_NOT_AS_DECLARED", {"expect.fabric": None, "gpufleet_rdma.transport": "infiniband"}, False,
     "no fabric declared"),
    ("FABRIC_NOT_AS_DECLARED", {"expect.fabric": "infiniband", "gpufleet_rdma.transport": "none"}, False,
     "no active port: the RDMA rules name that, not a fabric"),
    ("FABRIC_NOT_AS_DECLARED", {"expect.fabric": "efa", "gpufleet_rdma.transport": "roce"}, True,
     "EFA declared, the node's active ports are mlx5 RoCE"),
    ("FABRIC_NOT_AS_DECLARED", {"expect.fabric": "efa", "gpufleet_rdma.transport": "efa"}, False,
     "EFA declared and the ports are EFA devices"),
    ("BUNDLED_NVSHMEM_WINS", {"gpufleet_bundled_nvshmem.bundled_would_win": True,
                              "gpufleet_bundled_nvshmem.env_script_preloads": False}, True,
     "bundled NVSHMEM found first and no LD_PRELOAD of the custom build"),
    ("BUNDLED_NVSHMEM_WINS", {"gpufleet_bundled_nvshmem.bundled_would_win": False,
                              "gpufleet_bundled_nvshmem.env_script_preloads": False,
                              "gpufleet_bundled_nvshmem.replaced": [{"path": "/x/nvshmem_transport_ibgda.so.3"}]},
     False, "the bundled transport was replaced by the custom build's"),
    ("DEEPEP_V2_NCCL_OLD", {"gpufleet_deepep.generation": "v1", "gpufleet_stack.nccl.loaded_version": "2.28.9"},
     False, "V1 works with the NCCL torch ships"),
    ("DEEPEP_V2_NCCL_OLD", {"gpufleet_deepep.generation": "v2", "gpufleet_stack.nccl.loaded_version": "2.27.3"},
     True, "V2 with an even older NCCL"),
    ("PEERMAP_NOT_LIVE", {"gpufleet_nvidia.persistent.registry_dwords": {},
                          "gpufleet_nvidia.persistent.registry_dwords_raw": None,
                          "gpufleet_nvidia.peer_mapping_override_active": False}, False,
     "not configured at all: nothing pending"),
    ("NIC_HANDLER_CPU_NO_GDRDRV", {"gpufleet_stack.env_script.exports.NVSHMEM_IBGDA_NIC_HANDLER": "gpu",
                                   "gpufleet_stack.gdrcopy.gdrdrv_loaded": False}, False,
     "handler gpu needs no gdrdrv"),
    ("DEEPEP_ARCH_MISMATCH", {"gpufleet_deepep.built_against.arch_list": "10.0+PTX"}, False,
     "the GPUs' arch with PTX"),
    ("NIC_PORT_DOWN", {"gpufleet_rdma.devices.2.ports.0.state": "INIT"}, True, "INIT is not ACTIVE either"),
]


@pytest.mark.parametrize("rule_id,changes,fires,what", MORE_CASES, ids=[c[3] for c in MORE_CASES])
def test_rule_sub_cases(rule_id, changes, fires, what):
    assert (rule_id in ids(mutate(HEALTHY, changes))) is fires, what


@pytest.mark.parametrize("dmabuf", [True, False])
def test_peermem_missing_is_info_only_when_dmabuf_is_usable(dmabuf):
    changes = {"gpufleet_stack.peermem_loaded": False, "gpufleet_nvidia.peer_mapping_override_active": dmabuf}
    if not dmabuf:
        changes.update({"gpufleet_nvidia.persistent.registry_dwords": {},
                        "gpufleet_nvidia.persistent.registry_dwords_raw": None})
    found = dict((f["id"], f["severity"]) for f in evaluate_rules(mutate(HEALTHY, changes), CATALOGUE))
    if dmabuf:
        assert found == {"PEERMEM_MISSING_DMABUF": "info"}
    else:
        assert found == {"PEERMEM_MISSING": "warning"}


# Intranode-only profiles (gpufleet_intranode_only -> expect.intranode_only): the IBGDA, RDMA and GPU-NIC mapping
# rules stand down; everywhere else (no flag, or false) they hold.
INTRANODE_RULES = {
    "DEEPEP_NVSHMEM_NO_IBGDA", "HCA_PREFIX_MISMATCH", "ROCE_GID_INDEX", "NIC_HANDLER_CPU_NO_GDRDRV",
    "HCA_MAPPING_MISSING", "RDMA_CORE_NO_MLX5DV", "REMOTE_TRANSPORT_NOT_IBGDA", "PEERMEM_MISSING",
    "PEERMEM_MISSING_DMABUF", "NVSHMEM_LIBMLX5_OLD", "FABRIC_NOT_AS_DECLARED",
}

# An NVLink-only H200 node as the h200 profile leaves it (tests/fixtures/captured/h200x2: no RDMA device):
# NVSHMEM built without IBGDA, DeepEP against it, an env script that still names the IBGDA transport.
NVLINK_ONLY = {
    "gpufleet_deepep.nvshmem_build.ibgda": False,
    "gpufleet_rdma.devices": [], "gpufleet_rdma.active_devices": [], "gpufleet_rdma.transport": "none",
    "gpufleet_rdma.recommended_gid_index": None,
    "gpufleet_stack.env_script.exports.DEEP_EP_DEVICE_TO_HCA_MAPPING": DELETE,
    "gpufleet_stack.env_script.exports.NVSHMEM_IB_GID_INDEX": DELETE,
    "gpufleet_stack.rdma_core.mlx5dv_ok": False,
    "expect.hca_prefix": None,
}


@pytest.mark.parametrize("flag", [True, False, None], ids=["intranode_only", "internode_profile", "flag_absent"])
def test_nvlink_only_node_follows_the_profile(flag):
    changes = dict(NVLINK_ONLY)
    changes["expect.intranode_only"] = DELETE if flag is None else flag
    found = set(ids(mutate(HEALTHY, changes)))
    if flag:
        assert found == set()
    else:
        # Without the profile saying intranode only, a DeepEP on an NVSHMEM without IBGDA is critical as before.
        assert {"DEEPEP_NVSHMEM_NO_IBGDA", "RDMA_CORE_NO_MLX5DV"} <= found


def test_rdma_node_built_without_ibgda_stays_critical():
    """An RDMA node of an internode profile (no intranode flag) whose DeepEP has no IBGDA: critical."""
    doc = mutate(HEALTHY, {"gpufleet_deepep.nvshmem_build.ibgda": False, "expect.intranode_only": False})
    found = {f["id"]: f["severity"] for f in evaluate_rules(doc, CATALOGUE)}
    assert found == {"DEEPEP_NVSHMEM_NO_IBGDA": "critical"}


@pytest.mark.parametrize("rule_id", sorted(INTRANODE_RULES))
def test_intranode_only_silences_the_rdma_rules(rule_id):
    """Each RDMA/IBGDA/mapping rule that fires on an internode profile is quiet on an intranode-only one (an A100
    with RoCE NICs that DeepEP does not use: no NVSHMEM, no mapping, no GID index needed)."""
    firing = dict(CASES[rule_id][0])
    assert rule_id in ids(mutate(HEALTHY, firing))
    firing["expect.intranode_only"] = True
    assert rule_id not in ids(mutate(HEALTHY, firing))


def test_intranode_only_keeps_the_other_rules():
    """The flag is about RDMA only: a stale torch ABI, an arch gap or a pending PeerMappingOverride still fire."""
    for rule_id in ("DEEPEP_TORCH_ABI", "DEEPEP_ARCH_MISMATCH", "PEERMAP_NOT_LIVE", "DEEPEP_IMPORT_FAILS",
                    "NIC_PORT_DOWN"):
        firing = dict(CASES[rule_id][0])
        firing["expect.intranode_only"] = True
        assert rule_id in ids(mutate(HEALTHY, firing)), rule_id


def _with_distances(doc, frontend_down):
    """HEALTHY with gpu_topology's GPU-NIC distances: GPU i PIX to mlx5_i, a front-end mlx5_8 NODE to every GPU."""
    out = copy.deepcopy(doc)
    names = [d["name"] for d in out["gpufleet_rdma"]["devices"]]
    frontend = copy.deepcopy(out["gpufleet_rdma"]["devices"][0])
    frontend["name"] = "mlx5_8"
    frontend["ports"][0]["state"] = "DOWN" if frontend_down else "ACTIVE"
    out["gpufleet_rdma"]["devices"].append(frontend)
    for i, gpu in enumerate(out["gpufleet_gpus"]["gpus"]):
        gpu["nics"] = [{"name": names[i % len(names)], "port": 1, "distance": "PIX", "active": True}] + [
            {"name": n, "port": 1, "distance": "NODE", "active": True} for n in names if n != names[i % len(names)]] + [
            {"name": "mlx5_8", "port": 1, "distance": "NODE", "active": not frontend_down}]
    return out


def test_nic_port_down_only_for_rail_nics():
    """h100_ib's front-end CX-7 (mlx5_8, its own root port) is DOWN: no DeepEP rail, no finding; a DOWN rail NIC
    (PIX to its GPU) is still a warning."""
    assert "NIC_PORT_DOWN" not in ids(_with_distances(HEALTHY, frontend_down=True))
    rail_down = _with_distances(HEALTHY, frontend_down=True)
    rail_down["gpufleet_rdma"]["devices"][3]["ports"][0]["state"] = "DOWN"
    found = {f["id"]: f for f in evaluate_rules(rail_down, CATALOGUE)}
    assert found["NIC_PORT_DOWN"]["severity"] == "warning"
    assert {d["device"] for d in found["NIC_PORT_DOWN"]["evidence"]} == {"mlx5_3", "mlx5_8"}


# --- RDMA_CORE_NO_MLX5DV follows the installed NVSHMEM: node_stack's rdma_core facts, gathered from a node tree ----

MLX5DV_SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"
RDMA_CORE_50 = {"rdma-core": "50.0-2build2", "libibverbs-dev": "50.0-2build2"}


def rdma_core_facts(tmp_path, version, header_has_symbol):
    """gather_rdma_core over a node tree whose mlx5_api.h (Ubuntu 24.04's rdma-core 50 form) lacks or has the
    symbol, for an installed NVSHMEM ``version`` (None: none installed)."""
    header = tmp_path / "usr" / "include" / "infiniband" / "mlx5_api.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text("#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (1 << 0)\n" if header_has_symbol
                      else "#define MLX5DV_QP_CREATE_TUNNEL_OFFLOADS (1 << 0)\n")
    return gather_rdma_core(str(tmp_path), RDMA_CORE_50, [MLX5DV_SYMBOL], version)


def audit_with(rdma_core, version):
    return mutate(HEALTHY, {"gpufleet_stack.rdma_core": rdma_core,
                            "gpufleet_stack.nvshmem": {"present": version is not None, "version": version}})


@pytest.mark.parametrize("version", ["3.2.5-1", "3.3.9", "3.4.4", None, "not-a-version"])
def test_no_mlx5dv_fires_for_an_older_or_unknown_nvshmem(tmp_path, version):
    facts = rdma_core_facts(tmp_path, version, header_has_symbol=False)
    assert facts["mlx5dv_ok"] is False and facts["mlx5dv_rule"]["missing"] == [MLX5DV_SYMBOL]
    found = [f for f in evaluate_rules(audit_with(facts, version), CATALOGUE) if f["id"] == "RDMA_CORE_NO_MLX5DV"]
    assert len(found) == 1 and found[0]["severity"] == "critical"
    evidence = found[0]["evidence"]
    assert evidence["nvshmem"] == version and evidence["symbols"] == {MLX5DV_SYMBOL: False}
    if version in ("3.2.5-1", "3.3.9", "3.4.4"):
        assert evidence["rule"].startswith("NVSHMEM %s (older than 3.4.5) needs %s" % (version, MLX5DV_SYMBOL))
    elif version is None:
        assert evidence["rule"].startswith("the NVSHMEM version is unknown")
    else:  # a stamp whose version is unreadable: named, and judged as unknown
        assert "'not-a-version' is not an NVSHMEM version" in evidence["rule"]
        assert "the NVSHMEM version is unknown" in evidence["rule"]


@pytest.mark.parametrize("version", ["3.4.5-0", "3.4.5", "3.5.1", "3.5.19-1"])
def test_no_mlx5dv_quiet_for_nvshmem_345_and_newer(tmp_path, version):
    facts = rdma_core_facts(tmp_path, version, header_has_symbol=False)
    assert facts["mlx5dv_ok"] is True
    assert facts["mlx5dv_rule"] == {
        "nvshmem_version": version, "required": [], "missing": [], "waived": [MLX5DV_SYMBOL],
        "reason": "NVSHMEM %s (3.4.5 or newer) defines %s itself when infiniband/mlx5dv.h lacks it: it needs the "
                  "header (libibverbs-dev), not the symbol" % (version, MLX5DV_SYMBOL)}
    assert [f for f in evaluate_rules(audit_with(facts, version), CATALOGUE) if f["id"] == "RDMA_CORE_NO_MLX5DV"] == []


@pytest.mark.parametrize("version", ["3.2.5-1", "3.4.5-0", None])
def test_no_mlx5dv_quiet_where_the_header_has_the_symbol(tmp_path, version):
    facts = rdma_core_facts(tmp_path, version, header_has_symbol=True)
    assert facts["mlx5dv_ok"] is True and facts["mlx5dv_rule"]["waived"] == []
    assert [f for f in evaluate_rules(audit_with(facts, version), CATALOGUE) if f["id"] == "RDMA_CORE_NO_MLX5DV"] == []


def test_not_judged_rules_are_kept_apart_from_the_findings():
    rules = {r["id"]: r for r in validate_rules(CATALOGUE)}
    gaps = sorted(r for r in rules if rules[r].get("kind") == "not_judged")
    assert gaps == ["NOT_JUDGED_NO_PROFILE", "NOT_JUDGED_TORCH_NOT_FOUND"]
    found = evaluate_rules(mutate(HEALTHY, {"gpufleet_stack.torch.version": None,
                                            "gpufleet_stack.python": {"path": "/opt/x/bin/python", "ok": False}}),
                           CATALOGUE)
    (gap,) = [f for f in found if f["id"] == "NOT_JUDGED_TORCH_NOT_FOUND"]
    assert gap["kind"] == "not_judged" and gap["severity"] == "info"
    assert gap["message"].startswith("torch was not found with /opt/x/bin/python, the interpreter the audit used "
                                     "(it could not be run)")
    assert all("kind" not in f for f in found if f["id"] != "NOT_JUDGED_TORCH_NOT_FOUND")


def test_an_unknown_kind_is_refused_naming_it():
    rule = {"id": "X_RULE", "title": "t", "severity": "info", "condition": "`true`", "fix": "f", "source": "s",
            "kind": "maybe"}
    with pytest.raises(Exception) as err:
        validate_rules([rule])
    assert "rule X_RULE: kind 'maybe' is not one of finding, not_judged" in str(err.value)


def test_the_fabric_finding_names_what_is_declared_and_what_runs():
    found = next(f for f in evaluate_rules(mutate(HEALTHY, {"expect.fabric": "infiniband"}), CATALOGUE)
                 if f["id"] == "FABRIC_NOT_AS_DECLARED")
    assert found["evidence"]["declared"] == "infiniband" and found["evidence"]["found"] == "roce"
    assert found["message"].startswith("The profile declares the fabric infiniband; the active RDMA ports of mlx5_0, "
                                       "mlx5_1") and found["message"].endswith("run roce.")


def test_the_fabrics_the_rule_compares_are_the_profile_objects():
    """expect.fabric is compared with gpufleet_rdma.transport as it is: every fabric's rdma_transport is its name."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS

    assert all(entry["rdma_transport"] == name for name, entry in FABRICS.items())


# EFA (AWS P5en/P6): DeepEP V2 over NCCL GIN (EFA-GDA), no NVSHMEM IBGDA, no mlx5 direct verbs. The env script there
# exports the fabric's variables and none of NVSHMEM's IBGDA ones nor DeepEP V1's HCA mapping (env_script role,
# test_env_script_fabric_play.py); the EFA installer's rdma-core has no mlx5 API header. The rules about those stand
# down on the efa fabric and hold where the same node is declared on an mlx5 fabric.
FABRIC_RULES = {"ibgda": {"DEEPEP_NVSHMEM_NO_IBGDA", "NIC_HANDLER_CPU_NO_GDRDRV", "HCA_MAPPING_MISSING",
                          "REMOTE_TRANSPORT_NOT_IBGDA"},
                "mlx5dv": {"RDMA_CORE_NO_MLX5DV", "NVSHMEM_LIBMLX5_OLD"}}


def efa_node(tree, fabric):
    """The healthy node as a p5en: the RDMA reader's facts of the fleetsim p5en tree (16 EFA devices, transport efa),
    the env script the env_script role writes on EFA, the EFA installer's rdma-core, profile fabric ``fabric``."""
    rdma = collect_rdma(str(tree("aws_p5en_h200")))
    exports = {name: value for name, value, _why in FABRICS["efa"]["env"]}
    exports.update({"NVSHMEM_HOME": "/opt/deepep/nvshmem", "EP_NIC_NAME": rdma["active_devices"][0]})
    return mutate(HEALTHY, {
        "gpufleet_rdma": rdma, "expect.fabric": fabric, "expect.hca_prefix": None,
        "gpufleet_stack.env_script.exports": exports,
        "gpufleet_stack.rdma_core": {"rdma_core_version": "58.amzn0-1", "mlx5_header": None,
                                     "mlx5_header_present": False, "mlx5dv_ok": False, "mlx5dv_symbols": {},
                                     "libmlx5": {"path": None, "newest": None, "required": "MLX5_1.8",
                                                 "required_ok": False}},
        "gpufleet_deepep.nvshmem_build.ibgda": False,
    })


def test_efa_node_is_clean_on_its_fabric(tree):
    """A p5en node as the collection leaves it: no finding on the efa fabric."""
    assert ids(efa_node(tree, "efa")) == []


def test_efa_node_declared_on_an_mlx5_fabric_fires_the_ibgda_and_mlx5_rules(tree):
    """The same node under a profile that declares InfiniBand: the fabric mismatch and every IBGDA and mlx5 rule that
    stood down on EFA (so the stand-down is the fabric's, not the facts')."""
    found = set(ids(efa_node(tree, "infiniband")))
    assert found == {"FABRIC_NOT_AS_DECLARED"} | FABRIC_RULES["ibgda"] - {"NIC_HANDLER_CPU_NO_GDRDRV"} \
        | FABRIC_RULES["mlx5dv"] - {"NVSHMEM_LIBMLX5_OLD"}


@pytest.mark.parametrize("what", sorted(FABRIC_RULES))
def test_fabric_rules_name_the_fabric_key(what):
    """Each rule that stands down on a fabric without IBGDA or mlx5 direct verbs says so in its condition, and the key
    is a yes/no of every fabric the collection knows (a new fabric must say)."""
    by_id = {r["id"]: r for r in CATALOGUE["rules"]}
    for rule_id in FABRIC_RULES[what]:
        assert "fabric_offers(expect.fabric, '%s')" % what in by_id[rule_id]["condition"], rule_id
    assert {name: fabric_offers(name, what) for name in FABRICS} == {
        name: name != "efa" for name in FABRICS}
    assert fabric_offers(None, what) is None and fabric_offers("omnipath", what) is None
    assert fabric_offers("efa", "title") is None


@pytest.mark.parametrize("rule_id", sorted(FABRIC_RULES["ibgda"] | FABRIC_RULES["mlx5dv"]))
def test_fabric_rules_stand_down_on_efa_only(rule_id):
    """The firing case of each rule still fires with no fabric declared or an mlx5 one, and is quiet on efa."""
    for fabric, fires in ((None, True), ("roce", True), ("infiniband", True), ("efa", False)):
        changes = dict(CASES[rule_id][0], **{"expect.fabric": fabric})
        found = ids(mutate(HEALTHY, changes))
        assert (rule_id in found) is fires, (rule_id, fabric, found)


def test_efa_node_without_efa_gda_is_named(tree):
    """The p5en node whose env script lost NCCL_GIN_TYPE (NCCL 2.31 then runs GIN over its CPU proxy on EFA): one
    critical finding naming the variable and its value."""
    doc = efa_node(tree, "efa")
    del doc["gpufleet_stack"]["env_script"]["exports"]["NCCL_GIN_TYPE"]
    found = evaluate_rules(doc, CATALOGUE)
    assert [(f["id"], f["severity"]) for f in found] == [("FABRIC_ENV_MISSING", "critical")]
    assert "does not export NCCL_GIN_TYPE=5, which the fabric efa needs" in found[0]["message"]
    doc["gpufleet_stack"]["env_script"]["exports"]["NCCL_GIN_TYPE"] = "3"
    assert ids(doc) == ["FABRIC_ENV_MISSING"]


def test_gin_rules_judge_deepep_v2_nodes_only():
    """The GIN QP rules are DeepEP V2's (backends): a V1 node on the same NCCL and NICs has neither."""
    for rule_id in ("GIN_NCCL_COMPANION_QPS", "GIN_EP_NIC_NOT_CX8"):
        changes = dict(CASES[rule_id][0], **{"gpufleet_deepep.generation": "v1"})
        assert rule_id not in ids(mutate(HEALTHY, changes))


def test_a_cx8_node_whose_ep_nic_is_a_cx8_rail_has_no_qp_finding():
    """EP_NIC_NAME unset and mlx5_0 a ConnectX-8 rail (V2's default reads it): quiet; on EFA or NVLink only: quiet."""
    changes = {"gpufleet_deepep.generation": "v2", "gpufleet_stack.nccl.loaded_version": "2.32.3"}
    changes.update({"gpufleet_rdma.devices.%d.hca_type" % i: "MT4131" for i in range(8)})
    assert "GIN_EP_NIC_NOT_CX8" not in ids(mutate(HEALTHY, changes))
    found = evaluate_rules(mutate(HEALTHY, CASES["GIN_EP_NIC_NOT_CX8"][0]), CATALOGUE)
    nic = [f for f in found if f["id"] == "GIN_EP_NIC_NOT_CX8"]
    assert len(nic) == 1 and "reads mlx5_0 (MT4129)" in nic[0]["message"], nic
    qps = dict(CASES["GIN_NCCL_COMPANION_QPS"][0], **{"expect.fabric": "efa"})
    assert "GIN_NCCL_COMPANION_QPS" not in ids(mutate(HEALTHY, qps))
    qps = dict(CASES["GIN_NCCL_COMPANION_QPS"][0], **{"expect.intranode_only": True})
    assert "GIN_NCCL_COMPANION_QPS" not in ids(mutate(HEALTHY, qps))
    # below V2's floor the finding is DEEPEP_V2_NCCL_OLD's, not this one's
    old = set(ids(mutate(HEALTHY, {"gpufleet_deepep.generation": "v2"})))
    assert "DEEPEP_V2_NCCL_OLD" in old and "GIN_NCCL_COMPANION_QPS" not in old
