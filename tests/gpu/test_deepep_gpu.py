# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build DeepEP through the collection on a real GPU node and run DeepEP's own tests.

Run on a GPU node from the repository root (see tests/gpu/README.md):

    python -m pytest -m gpu tests/gpu --deepep-v1-src /path/to/DeepEP-v1 --deepep-v2-src /path/to/DeepEP-v2

Each stage is one ``ansible-playbook`` run of tests/gpu/playbooks/deepep.yml with a local connection; the
stage's seconds are printed in the summary, never asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "gpu" / "playbooks" / "deepep.yml"
TIMINGS: dict[str, float] = {}


def ansible_playbook() -> list[str]:
    exe = shutil.which("ansible-playbook")
    if exe:
        return [exe]
    pytest.skip("ansible-playbook is not installed for this interpreter")
    return []


def run_stage(stage: str, results: Path, python: str, extra: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    variables = {"gpu_python": python, "gpu_results": str(results), "ansible_python_interpreter": python}
    variables.update(extra)
    cmd = ansible_playbook() + ["-i", "localhost,", str(PLAYBOOK), "--tags", stage, "-e", json.dumps(variables)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    TIMINGS[stage if stage != "build" else f"build-{extra.get('gpu_build_round', 1)}"] = time.monotonic() - start
    (results / f"ansible-{stage}-{extra.get('gpu_build_round', 1)}.log").write_text(proc.stdout + proc.stderr)
    return proc


def load(results: Path, name: str) -> dict:
    return json.loads((results / name).read_text())


@pytest.fixture(scope="module", autouse=True)
def stage_times(results_dir):
    """Write and print how long each stage took (figures for the record, never a pass/fail criterion)."""
    yield TIMINGS
    if TIMINGS:
        (results_dir / "timings.json").write_text(json.dumps(TIMINGS, indent=2))
        print("\nGPU suite stage times (s): " + ", ".join(f"{k}={v:.1f}" for k, v in TIMINGS.items()), file=sys.stderr)


@pytest.fixture(scope="module")
def v1_built(deepep_v1_src, results_dir, gpu_python):
    first = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 1})
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    second = run_stage("build", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src), "gpu_build_round": 2})
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
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
    assert bf16 is not None and bf16 >= gate, f"BF16 dispatch {bf16} GB/s (NVL) on {num_gpus} GPUs, gate {gate}"


def test_v1_low_latency_completes(v1_built, deepep_v1_src, results_dir, gpu_python):
    proc = run_stage("low_latency", results_dir, gpu_python, {"deepep_src": str(deepep_v1_src)})
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = load(results_dir, "low_latency.json")
    parsed = out["parsed"]
    assert out["rc"] == 0, out["stdout"][-3000:] + out["stderr"][-3000:]
    assert parsed["complete"] is True
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
