# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build DeepEP through the collection on a real GPU node and run DeepEP's own tests.

Run on a GPU node from the repository root (see tests/gpu/README.md):

    python -m pytest -m gpu tests/gpu --deepep-v1-src /path/to/DeepEP-v1 --deepep-v2-src /path/to/DeepEP-v2

Each collection stage is one ``ansible-playbook`` run of tests/gpu/playbooks/deepep.yml with a local connection.
The same tree is also built by hand, DeepEP's README way, and the collection build's figures must be at least
``--hand-ratio`` (0.98) of the hand build's, measured in the same run. Intranode figures are held against the
verify_intranode role's own gate for the node's GPU family. Stage seconds are printed, never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import hand_build, hand_env, load, ratios, run_hand_test, run_stage, tail

pytestmark = pytest.mark.gpu

# Each build runs the low-latency test this many times, alternating, and keeps its best figure of each kind: one
# run of a one-rank test moves by about 1%, the size of the margin the hand-build comparison allows.
LL_ROUNDS = 2
INTRANODE_FIGURES = {"dispatch_bf16_nvl_gbps": ("dispatch", "bf16"), "dispatch_fp8_nvl_gbps": ("dispatch", "fp8"),
                     "combine_nvl_gbps": ("combine", None)}


def intranode_figures(parsed: dict) -> dict:
    out = {}
    for name, (kind, dtype) in INTRANODE_FIGURES.items():
        entry = parsed[kind][dtype] if dtype else parsed[kind]
        out[name] = entry["nvl_gbps"]
    return out


@pytest.fixture(scope="module")
def v1_built(deepep_v1_src, results_dir, gpu_python):
    # The first build is proven from a node without DeepEP, whatever an earlier run on this machine installed (a second
    # suite run on a still-held machine found run 1's build of the same key installed and rightly built nothing).
    removed = subprocess.run([gpu_python, "-m", "pip", "uninstall", "--yes", "deep_ep"], capture_output=True,
                             text=True, timeout=300, check=False)
    assert removed.returncode == 0, removed.stdout[-2000:] + removed.stderr[-2000:]
    first = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 1},
                      label="build-1")
    assert first.returncode == 0, tail(first)
    second = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 2},
                       label="build-2")
    assert second.returncode == 0, tail(second)
    # The rerun as it was before import_check: changed (the import of deep_ep and torch on every run), to time both.
    third = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 3,
                                                         "gpu_import_check": "always"}, label="build-3-import")
    assert third.returncode == 0, tail(third)
    return load(results_dir, "build-1.json"), load(results_dir, "build-2.json"), load(results_dir, "build-3.json")


@pytest.fixture(scope="module")
def v1_hand(v1_built, deepep_v1_src, results_dir, gpu_python):
    """The same tree built by hand; its ``deep_ep_cpp`` must be the one its tests import."""
    arch_list = load(results_dir, "facts.json")["gpus"]["cuda_arch_list"]
    tree = hand_build(deepep_v1_src, results_dir, gpu_python, arch_list)
    probe = subprocess.run([gpu_python, "-c", "import deep_ep, deep_ep_cpp; print(deep_ep_cpp.__file__)"], cwd=tree,
                           env=hand_env(tree), capture_output=True, text=True, timeout=300, check=False)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert Path(probe.stdout.strip()).resolve().is_relative_to(tree), probe.stdout
    return tree


def test_v1_builds_once_and_imports(v1_built, results_dir):
    first, second, imported = v1_built[:3]
    facts = first["ansible_facts"]["gpufleet_deepep"]
    assert first["changed"] is True
    assert facts["generation"] == "v1"
    assert facts["import_ok"] is True
    # The same inputs again: same key, nothing rebuilt or reinstalled, and the build that imported at install time
    # is not imported again (import_check: changed); with import_check: always it imports on the real GPU node.
    assert second["changed"] is False
    assert second["key"] == first["key"]
    assert second["ansible_facts"]["gpufleet_deepep"]["import_ok"] is None
    assert "not imported again" in second["reason"]
    assert imported["changed"] is False and imported["ansible_facts"]["gpufleet_deepep"]["import_ok"] is True
    node = load(results_dir, "facts.json")
    assert facts["built_against"]["arch_list"] == node["gpus"]["cuda_arch_list"]


def test_v1_intranode_passes_the_family_gate_and_matches_the_hand_build(v1_built, v1_hand, deepep_v1_src,
                                                                        results_dir, gpu_python, intranode_gpus,
                                                                        intranode_thresholds, hand_ratio):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import gate

    proc = run_stage("intranode", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src)})
    assert proc.returncode == 0, tail(proc)
    out = load(results_dir, "intranode.json")
    hand = run_hand_test(v1_hand, results_dir, gpu_python, "tests/test_intranode.py", intranode_gpus,
                         "hand-intranode")
    for name, run in (("collection", out), ("hand", hand)):
        assert run["rc"] == 0, f"{name}: " + run["stdout"][-3000:] + run["stderr"][-3000:]
        assert run["parsed"]["cases"]["failed"] == 0 and run["parsed"]["cases"]["passed"] > 0, run["parsed"]["cases"]
    verdict = gate(out["parsed"], intranode_thresholds["thresholds"], rc=out["rc"], stage="tests/test_intranode.py")
    collection, baseline = intranode_figures(out["parsed"]), intranode_figures(hand["parsed"])
    share = ratios(collection, baseline)
    print(f"\nintranode on {intranode_gpus} GPUs, collection {collection}, hand {baseline}, ratios {share}; "
          f"gate {intranode_thresholds['matched']}: {verdict['status']} {verdict['reasons']}", file=sys.stderr)
    assert verdict["passed"], verdict["reasons"]
    for name, value in share.items():
        assert value is not None, f"{name}: collection {collection[name]}, hand {baseline[name]}"
        assert value >= hand_ratio, f"{name}: collection build {value:.3f} of the hand build (floor {hand_ratio})"


def test_v1_low_latency_matches_the_hand_build(v1_built, v1_hand, deepep_v1_src, results_dir, gpu_python, num_gpus,
                                               hand_ratio):
    best = {"collection": {}, "hand": {}}
    for round_ in range(1, LL_ROUNDS + 1):
        proc = run_stage("low_latency", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src)},
                         label=f"low_latency-{round_}")
        assert proc.returncode == 0, tail(proc)
        runs = {"collection": load(results_dir, "low_latency.json"),
                "hand": run_hand_test(v1_hand, results_dir, gpu_python, "tests/test_low_latency.py", num_gpus,
                                      f"hand-low_latency-{round_}")}
        for name, run in runs.items():
            assert run["rc"] == 0, f"{name}: " + run["stdout"][-3000:] + run["stderr"][-3000:]
            parsed = run["parsed"]
            assert parsed["complete"] is True, name
            for figure in ("dispatch_gbps", "combine_gbps"):
                value = parsed["low_latency"][figure]
                assert value, f"{name}: no {figure} in {parsed['low_latency']}"
                best[name][figure] = max(best[name].get(figure, 0), value)
    share = ratios(best["collection"], best["hand"])
    print(f"\nlow latency on {num_gpus} GPU(s), best of {LL_ROUNDS}: collection {best['collection']}, "
          f"hand {best['hand']}, ratios {share}", file=sys.stderr)
    for name, value in share.items():
        assert value >= hand_ratio, f"{name}: collection build {value:.3f} of the hand build (floor {hand_ratio})"


def test_v1_low_latency_verify_stage_passes_its_measured_gate_with_transport_truth(
        v1_built, deepep_v1_src, results_dir, gpu_python, num_gpus):
    """The verify role's low-latency stage on this node: the backend's test run by ep_test, gated at the profile
    object's gate for this GPU count (measured for 1, 2 and 4 GPUs), its transport held to NVLink P2P without a
    CPU-proxied path; the normal intranode stage runs where DeepEP has kernels for the count, else is skipped with the
    reason (never started to crash)."""
    proc = run_stage("verify_ll", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src)}, label="verify_ll")
    assert proc.returncode == 0, tail(proc)
    records = load(results_dir, "verify_ll.json")
    ll, intranode = records["low_latency"], records["intranode"]
    figures = ll["parsed"]["low_latency"]
    print(f"\nverify role, low latency on {num_gpus} GPU(s): {figures['dispatch_gbps']} / {figures['combine_gbps']} GB/s "
          f"against {ll['thresholds']} ({ll['gate_basis']['matched']}, {ll['gate_basis']['shape']}); transport "
          f"{ll['transport']['brief']}; intranode {intranode['gate']['status']} {intranode['gate']['reasons']}",
          file=sys.stderr)
    assert ll["stage"] == "low_latency_intranode" and ll["test"] == "tests/test_low_latency.py"
    assert ll["gate"]["passed"], ll["gate"]
    assert ll["gate_basis"]["shape"] == ("measured" if num_gpus in (1, 2, 4) else "family")
    assert ll["gate_basis"]["provisional"] is None and ll["gate_basis"]["matched"] in ("h100", "h200")
    assert ll["transport"]["gate"]["passed"], ll["transport"]
    assert ll["transport"]["basis"] == {"backend": "deepep_v1", "scope": "low_latency_intranode", "fabric": None,
                                        "matched": None}
    assert not ll["transport"]["truth"]["nvshmem"].get("cpu_fallback")
    if num_gpus in (2, 4, 8):
        assert intranode["gate"]["status"] == "pass", intranode["gate"]
    else:
        assert intranode["gate"] == {"passed": True, "status": "skipped", "checks": [], "diagnosis": [],
                                     "reasons": [f"not run: DeepEP V1's intranode kernels exist for 2, 4, 8 local ranks "
                                                 f"(DeepEP's SWITCH_RANKS), and this node runs {num_gpus}"]}


def test_v2_preflight_refuses_old_nccl_with_the_fix(deepep_v2_src, results_dir, gpu_python):
    # Its own NCCL root (what the node's torch environment ships, 2.28.9): the refusal is tested on every run,
    # whatever NCCL the node's torch environment has been pinned to since.
    old = results_dir / "old-nccl"
    (old / "include").mkdir(parents=True, exist_ok=True)
    (old / "lib").mkdir(exist_ok=True)
    (old / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n"
                                            "#define NCCL_SUFFIX \"\"\n#define NCCL_VERSION_CODE 22809\n")
    proc = run_stage("v2_preflight", results_dir, gpu_python,
                     {"deepep_v2_src": str(deepep_v2_src), "gpu_v2_nccl_root": str(old)})
    assert proc.returncode == 0, tail(proc)
    answer = load(results_dir, "v2_preflight.json")
    preflight = answer["preflight"]
    assert preflight["ok"] is False, preflight
    assert answer["failed"] is True
    assert answer["built"] is False
    checks = {failure["check"]: failure for failure in preflight["failures"]}
    assert "nccl_too_old" in checks, preflight["failures"]
    assert "2.28.9" in checks["nccl_too_old"]["message"] and "2.30.4" in checks["nccl_too_old"]["message"]
    assert "nvidia-nccl" in checks["nccl_too_old"]["fix"]
    assert "2.30.4" in answer["msg"]
