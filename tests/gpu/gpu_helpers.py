# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the GPU test modules share: run one stage (a tagged ansible-playbook run) and read what it recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "tests" / "gpu" / "playbooks"
# Seconds each stage took: figures for the record, never a pass/fail criterion.
TIMINGS: dict[str, float] = {}


def ansible_playbook() -> list[str]:
    exe = shutil.which("ansible-playbook")
    if exe:
        return [exe]
    pytest.skip("ansible-playbook is not installed for this interpreter")
    return []


def run_stage(stage: str, results: Path, python: str, extra: dict, playbook: str = "deepep.yml",
              label: str = "") -> subprocess.CompletedProcess:
    """Run ``playbook`` with ``--tags stage`` on localhost; the log goes to ``results/ansible-<label>.log``."""
    label = label or stage
    env = dict(os.environ)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    variables = {"gpu_python": python, "gpu_results": str(results), "ansible_python_interpreter": python}
    variables.update(extra)
    cmd = ansible_playbook() + ["-i", "localhost,", str(PLAYBOOKS / playbook), "--tags", stage,
                                "-e", json.dumps(variables)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    TIMINGS[label] = time.monotonic() - start
    (results / f"ansible-{label}.log").write_text(proc.stdout + proc.stderr)
    return proc


def load(results: Path, name: str) -> dict:
    return json.loads((results / name).read_text())


def tail(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-4000:] + proc.stderr[-2000:]


# --- DeepEP built by hand, DeepEP's README way, from the same tree: the baseline of the collection's build ---
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def hand_build(src: Path, results: Path, python: str, arch_list: str) -> Path:
    """``python setup.py build`` in a copy of ``src``, then the README's link of ``deep_ep_cpp*.so`` into its root.

    DeepEP's own fallbacks pick NVSHMEM (the pip package) as they do for the collection's build. CUDA 13 moved
    libcu++ under include/cccl, which DeepEP V1 does not add (DeepEP #568): the same include goes to g++ and nvcc.
    """
    tree = results / "hand" / src.name
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(src, tree, symlinks=True, ignore=shutil.ignore_patterns("build", "*.so", "__pycache__"))
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=arch_list, MAX_JOBS=str(os.cpu_count() or 1))
    cccl = CUDA_HOME / "include" / "cccl"
    if cccl.is_dir():
        env["CPATH"] = f"{cccl}:{env['CPATH']}" if env.get("CPATH") else str(cccl)
        env["NVCC_APPEND_FLAGS"] = f"{env.get('NVCC_APPEND_FLAGS', '')} -I{cccl}".strip()
    start = time.monotonic()
    proc = subprocess.run([python, "setup.py", "build"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=3600, check=False)
    TIMINGS["hand-build"] = time.monotonic() - start
    (results / "hand-build.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    built = sorted(tree.glob("build/lib.*/deep_ep_cpp*.so"))
    assert len(built) == 1, f"expected one deep_ep_cpp*.so under {tree}/build, found {built}"
    (tree / built[0].name).symlink_to(built[0].relative_to(tree))
    return tree


def hand_env(tree: Path) -> dict:
    """The hand build first on the path: its ``deep_ep`` package and the linked ``deep_ep_cpp`` in its root."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{tree}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(tree)
    return env


def run_hand_test(tree: Path, results: Path, python: str, test: str, processes: int, label: str,
                  generation: str = "v1", timeout: int = 900) -> dict:
    """Run one DeepEP test with the hand build; returns ``{rc, stdout, stderr, parsed}`` (also written as JSON)."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output

    start = time.monotonic()
    try:
        proc = subprocess.run(["timeout", str(timeout), python, test, "--num-processes", str(processes)], cwd=tree,
                              env=hand_env(tree), capture_output=True, text=True, timeout=timeout + 60, check=False)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, str(exc.stdout or ""), str(exc.stderr or "")
    TIMINGS[label] = time.monotonic() - start
    out = {"rc": rc, "stdout": stdout, "stderr": stderr}
    out["parsed"] = parse_output(out, test=test, generation=generation)
    (results / f"{label}.json").write_text(json.dumps(out, indent=2))
    return out


def ratios(collection: dict, hand: dict) -> dict:
    """collection / hand for every figure both have (None where the hand figure is missing or zero)."""
    return {k: (collection[k] / hand[k] if collection.get(k) is not None and hand.get(k) else None)
            for k in sorted(set(collection) | set(hand))}
