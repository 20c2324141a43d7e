# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Recorded node_stack results and role settings for the preflight and sglang judging (unit tests of the
builders in plugin_utils/_audit/pipeline.py and the controller play tests/integration/controller/
test_findings_pipeline_play.py): host name -> the host's variables."""

from __future__ import annotations

import copy

from test_sglang_rules import GOOD as _SGLANG_GOOD

HEADER = "/usr/include/infiniband/mlx5_api.h"
SYMBOL = "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"
DRIVER_DIR = "/usr/lib/x86_64-linux-gnu"
KERNEL = "6.8.0-1015-gcp"


def modules(loaded=(), builtin=(), absent=(), not_in_kernel=()):
    """gpufleet_modules as node_stack's reader gives it for the modules asked."""
    states = {}
    for name in loaded:
        states[name] = {"state": "loaded", "source": "/proc/modules", "loadable": None, "reason": "listed"}
    for name in builtin:
        states[name] = {"state": "builtin", "source": "/sys/module/" + name, "loadable": None, "reason": "built in"}
    for name in absent:
        states[name] = {"state": "absent", "source": "modules.dep", "loadable": True, "reason": "not loaded"}
    for name in not_in_kernel:
        states[name] = {"state": "absent", "source": "modules.dep", "loadable": False, "reason": "no module"}
    return {"loaded": sorted(list(loaded) + ["nvidia"]), "source": "/proc/modules", "kernel": KERNEL,
            "module_dir": "/lib/modules/" + KERNEL, "module_index": "/lib/modules/%s/modules.dep" % KERNEL,
            "builtin_index": None, "states": states,
            "present": dict((n, s["state"] != "absent") for n, s in states.items()),
            "builtin": list(builtin), "absent": list(absent) + list(not_in_kernel), "not_in_kernel": list(not_in_kernel)}


def paths(cuda_home, present):
    """gpufleet_paths of every libcuda candidate; ``present`` the ones that exist."""
    out = {}
    for directory in (DRIVER_DIR, cuda_home + "/lib64/stubs"):
        for name in ("libcuda.so", "libcuda.so.1"):
            path = directory + "/" + name
            out[path] = {"path": path, "exists": path in present, "type": "file" if path in present else None}
    return out


def node(cuda_home="/usr/local/cuda-13.0", **facts):
    """A node_stack result of a healthy B200 node with ``facts`` replaced (None: the fact is left out)."""
    base = {
        "gpufleet_nvidia": {"driver_loaded": True, "driver_version": "580.95.05", "peer_mapping_override_active": True},
        "gpufleet_rdma": {"devices": [{"name": "mlx5_0"}, {"name": "mlx5_1"}], "active_devices": ["mlx5_0", "mlx5_1"],
                          "transport": "roce", "hca_prefix": "mlx5", "recommended_gid_index": 3},
        "gpufleet_gpus": {"gpus": [{"name": "NVIDIA B200", "compute_capability": "10.0"}] * 8},
        "gpufleet_modules": modules(loaded=["mlx5_core", "nvidia_peermem"]),
        "gpufleet_cuda_toolkit": {"home": cuda_home, "version": "13.0.2", "release": "13.0", "source": "version.json",
                                  "error": None},
        "gpufleet_imports": {"python": "/usr/bin/python3", "modules": {"pip": True}},
        "gpufleet_symbols": {HEADER: {"present": True, "symbols": {SYMBOL: True}}},
        "gpufleet_paths": paths(cuda_home, [DRIVER_DIR + "/libcuda.so", DRIVER_DIR + "/libcuda.so.1"]),
    }
    for key, value in facts.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return {"changed": False, "gather_errors": {}, "ansible_facts": base}


COMMON = {"cuda_toolkit_version": "13.0", "preflight_expected_cuda_arch": ["10.0"], "preflight_min_gpus": 8,
          "preflight_min_active_rdma": 2, "gpufleet_profile": "b200_roce"}

FAILING = node(
    gpufleet_gpus={"gpus": [{"name": "NVIDIA B200", "compute_capability": "10.0"}] * 2},
    gpufleet_nvidia={"driver_loaded": True, "driver_version": "535.104.05", "peer_mapping_override_active": False},
    gpufleet_modules=modules(loaded=["nvidia_peermem"], absent=["mlx5_core"]),
    gpufleet_imports={"python": "/usr/bin/python3", "modules": {"pip": False}},
    gpufleet_symbols={HEADER: {"present": True, "symbols": {SYMBOL: False}}},
    gpufleet_paths=paths("/usr/local/cuda-13.0", ["/usr/local/cuda-13.0/lib64/stubs/libcuda.so"]),
)
FAILING["gather_errors"] = {"gpufleet_rdma": "ibv_devinfo failed (rc=1)"}

TO_INSTALL = node(
    gpufleet_cuda_toolkit={"home": "/usr/local/cuda-13.0", "version": "", "release": "", "source": None,
                           "error": "absent"},
    gpufleet_imports={"python": "/usr/bin/python3", "modules": {"pip": False}},
    gpufleet_symbols={HEADER: {"present": False, "symbols": {SYMBOL: False}}},
    gpufleet_modules=modules(builtin=["mlx5_core"], absent=["nvidia_peermem"]),
    gpufleet_paths=paths("/usr/local/cuda-13.0",
                         [DRIVER_DIR + "/libcuda.so.1", "/usr/local/cuda-13.0/lib64/stubs/libcuda.so"]),
)

PREFLIGHT_HOSTS = {
    "pf-healthy": dict(COMMON, preflight_node=node()),
    # Critical checks fail (GPU count, old driver, pip, mlx5_core, the header's symbol), libcuda only in the stubs.
    "pf-failing": dict(COMMON, preflight_node=FAILING, pytorch_install_pip=False, doca_ofed_enabled=False,
                       nvshmem_version="3.3.9-0"),
    # Nothing installed yet, the play installs it: notes only; the stubs of an absent toolkit do not count.
    "pf-to-install": dict(COMMON, preflight_node=TO_INSTALL, nvshmem_version="3.3.9-0"),
    # Intranode only, facts missing: no RDMA or header needed.
    "pf-intranode": dict(COMMON, gpufleet_intranode_only=True, preflight_min_gpus=1, preflight_fail=False,
                         preflight_node=node(gpufleet_rdma=None, gpufleet_nvidia=None)),
}

# The sglang rules' healthy node (tests/unit/test_sglang_rules.py), its facts only.
SGLANG_FACTS = copy.deepcopy({key: _SGLANG_GOOD[key] for key in ("gpufleet_gpus", "gpufleet_model", "gpufleet_sglang")})
SERVER = {"tp": 8, "dp": 1, "nnodes": 1, "enable_dp_attention": False, "moe_a2a_backend": "deepep",
          "deepep_mode": "normal", "env": {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "1024"}}
SGLANG_COMMON = {"sglang_server": SERVER, "sglang_transfer_engine": "nixl", "sglang_judge_stage": "installed"}


def _sglang_facts(**changes):
    facts = copy.deepcopy(SGLANG_FACTS)
    for key, value in changes.items():
        facts[key] = value
    return facts


_BAD = _sglang_facts()
_BAD["gpufleet_model"]["num_attention_heads"] = 9
_BAD["gpufleet_sglang"]["versions"]["typing_extensions"] = "4.5.0"

SGLANG_HOSTS = {
    "sg-good": dict(SGLANG_COMMON, case_facts=SGLANG_FACTS),
    "sg-bad": dict(SGLANG_COMMON, case_facts=_BAD, sglang_fail_on="info"),
    "sg-bad-preflight": dict(SGLANG_COMMON, case_facts=_BAD, sglang_judge_stage="preflight"),
    "sg-bad-none": dict(SGLANG_COMMON, case_facts=_BAD, sglang_fail_on="none"),
}
