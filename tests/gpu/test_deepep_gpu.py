# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build DeepEP through the collection on a real GPU node and run DeepEP's own tests.

Run on a GPU node from the repository root (see tests/gpu/README.md):

    python -m pytest -m gpu tests/gpu --deepep-v1-src /path/to/DeepEP-v1 --deepep-v2-src /path/to/DeepEP-v2

Each stage is one ``ansible-playbook`` run of tests/gpu/playbooks/deepep.yml with a local connection; the
stage's seconds are printed in the summary, never asserted.
"""

from __future__ import annotations

import sys

import pytest

from tests.gpu.gpu_helpers import load, run_stage, tail

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def v1_built(deepep_v1_src, results_dir, gpu_python):
    first = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 1},
                      label="build-1")
    assert first.returncode == 0, tail(first)
    second = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 2},
                       label="build-2")
    assert second.returncode == 0, tail(second)
    return load(results_dir, "build-1.json"), load(results_dir, "build-2.json")


def test_v1_builds_once_and_imports(v1_built, results_dir):
    first, second = v1_built
    facts = first["ansible_facts"]["gpufleet_deepep"]
    assert first["changed"] is True
    assert facts["generation"] == "v1"
    assert facts["import_ok"] is True
    # The same inputs again: same key, nothing rebuilt or reinstalled.
    assert second["changed"] is False
    assert second["key"] == first["key"]
    node = load(results_dir, "facts.json")
    assert facts["built_against"]["arch_list"] == node["gpus"]["cuda_arch_list"]


def test_v1_intranode_all_cases_pass_and_clear_the_gate(v1_built, deepep_v1_src, results_dir, gpu_python, num_gpus,
                                                        request):
    proc = run_stage("intranode", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = load(results_dir, "intranode.json")
    parsed = out["parsed"]
    assert out["rc"] == 0, out["stdout"][-3000:] + out["stderr"][-3000:]
    assert parsed["complete"] is True
    assert parsed["cases"]["failed"] == 0
    assert parsed["cases"]["passed"] > 0
    gate = request.config.getoption("--bf16-dispatch-gate")
    bf16 = parsed["dispatch"]["bf16"]["nvl_gbps"]
    print(f"\n{out.get('test', 'intranode')}: cases {parsed['cases']}, BF16 dispatch {bf16}, "
          f"FP8 dispatch {parsed['dispatch']['fp8']['nvl_gbps']}, combine {parsed['combine']['nvl_gbps']} GB/s (NVL)",
          file=sys.stderr)
    assert bf16 is not None and bf16 >= gate, f"BF16 dispatch {bf16} GB/s (NVL) on {num_gpus} GPUs, gate {gate}"


def test_v1_low_latency_completes(v1_built, deepep_v1_src, results_dir, gpu_python):
    proc = run_stage("low_latency", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = load(results_dir, "low_latency.json")
    parsed = out["parsed"]
    assert out["rc"] == 0, out["stdout"][-3000:] + out["stderr"][-3000:]
    assert parsed["complete"] is True
    print(f"\nlow latency: {parsed['low_latency']}", file=sys.stderr)
    assert parsed["low_latency"]["dispatch_gbps"] and parsed["low_latency"]["combine_gbps"]


def test_v2_preflight_refuses_old_nccl_with_the_fix(deepep_v2_src, results_dir, gpu_python):
    proc = run_stage("v2_preflight", results_dir, gpu_python, {"deepep_v2_src": str(deepep_v2_src)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    answer = load(results_dir, "v2_preflight.json")
    preflight = answer["preflight"]
    if preflight.get("ok"):
        pytest.skip("this node's NCCL is new enough for V2: nothing for the preflight to refuse")
    assert answer["failed"] is True
    assert answer["built"] is False
    checks = {failure["check"]: failure for failure in preflight["failures"]}
    assert "nccl_too_old" in checks, preflight["failures"]
    assert "2.30.4" in checks["nccl_too_old"]["message"]
    assert "nvidia-nccl" in checks["nccl_too_old"]["fix"]
    assert "2.30.4" in answer["msg"]
