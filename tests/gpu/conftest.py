# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU suite: what only a real GPU node can prove.

Every test here carries the marker ``gpu`` and is skipped, with the reason, where no NVIDIA GPU is visible.
Inputs are paths, never fetched here: ``--deepep-v1-src`` (a DeepEP V1 tree, e.g. commit 567632d) and
``--deepep-v2-src`` (a DeepEP V2 tree), or the environment variables GPUFLEET_DEEPEP_V1_SRC / _V2_SRC, and
``--nccl-src`` (an NVIDIA/nccl tree, e.g. tag v2.30.7-1, built and pinned into the torch environment for V2 and
NCCL EP), ``--nccl-ep-wheels`` (a directory of NCCL EP's wheels: nccl-extensions and its dependencies).
``--gpu-python`` names the interpreter that has the CUDA build of torch (default: the one running pytest).
Results (build logs, test outputs, parsed figures) go to ``--gpu-results`` (default a temporary directory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The collection's own code (gate thresholds, output parser) is imported from .collections, which
# tests/gpu/run_on_gpu_node.sh links and pytest.ini puts on sys.path.
# DeepEP intranode runs one rank per GPU and supports 2, 4 or 8 ranks (intranode.cu: num_ranks <= kNumThreads).
INTRANODE_RANKS = (2, 4, 8)


def pytest_addoption(parser):
    group = parser.getgroup("gpufleet GPU suite")
    group.addoption("--deepep-v1-src", default=os.environ.get("GPUFLEET_DEEPEP_V1_SRC"),
                    help="DeepEP V1 source tree (directory with setup.py)")
    group.addoption("--deepep-v2-src", default=os.environ.get("GPUFLEET_DEEPEP_V2_SRC"),
                    help="DeepEP V2 source tree (directory with setup.py)")
    group.addoption("--nccl-src", default=os.environ.get("GPUFLEET_NCCL_SRC"),
                    help="NCCL source tree (NVIDIA/nccl, e.g. tag v2.30.7-1) to pin in the torch environment for V2")
    group.addoption("--nccl-ep-wheels", default=os.environ.get("GPUFLEET_NCCL_EP_WHEELS"),
                    help="directory of NCCL EP's wheels (nccl-extensions, nccl4py, cuda-core, cuda-pathfinder, "
                         "cuda-bindings, numpy, packaging) for the node's Python")
    group.addoption("--nvshmem-src", default=os.environ.get("GPUFLEET_NVSHMEM_SRC"),
                    help="NVSHMEM source tarball (NVIDIA/nvshmem release, e.g. tag v3.4.5-0) built by the nvshmem role")
    group.addoption("--nvshmem-prefix", default=os.environ.get("GPUFLEET_NVSHMEM_PREFIX", "/opt/deepep/nvshmem"),
                    help="where the nvshmem role installs NVSHMEM on this node (removed and reinstalled by the tests)")
    group.addoption("--gpu-python", default=os.environ.get("GPUFLEET_GPU_PYTHON", sys.executable),
                    help="interpreter with the CUDA build of torch")
    group.addoption("--gpu-results", default=os.environ.get("GPUFLEET_GPU_RESULTS"),
                    help="directory for logs, outputs and figures")
    group.addoption("--hand-ratio", type=float, default=float(os.environ.get("GPUFLEET_HAND_RATIO", "0.98")),
                    help="each figure of the collection's DeepEP build must be at least this share of the hand build's")


def gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def pytest_collection_modifyitems(config, items):
    count = gpu_count()
    if count:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU visible (nvidia-smi -L lists none): the GPU suite runs on a GPU node")
    for item in items:
        # The marker, not the keywords: those hold path parts too (a checkout in a folder named gpu).
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def num_gpus() -> int:
    return gpu_count()


@pytest.fixture(scope="session")
def intranode_gpus(num_gpus) -> int:
    """The GPU count for DeepEP's intranode tests; skips them on a node DeepEP cannot run them on."""
    if num_gpus not in INTRANODE_RANKS:
        pytest.skip(f"DeepEP intranode needs 2, 4 or 8 ranks (one per GPU); this node has {num_gpus} GPU(s)")
    return num_gpus


def gpu_name() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=60, check=False)
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[0] if names else ""


@pytest.fixture(scope="session")
def intranode_thresholds(intranode_gpus) -> dict:
    """The verify_intranode role's gate for this node's GPU family and GPU count (the profile object's intranode gate
    with the role's overrides, chosen as the role does: the tests run over all local GPUs). A GPU whose family has no
    gate (an H20) is refused, naming the family, as the role refuses it: never held to the loose default gate."""
    import yaml
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import select_thresholds

    defaults = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
    chosen = select_thresholds(defaults["verify_intranode_thresholds"], profile=gpu_name(), gpus=intranode_gpus,
                               table_name="verify_intranode_thresholds", scope="intranode")
    print(f"\nverify_intranode gate for {chosen['profile']!r} on {intranode_gpus} GPUs: {chosen['matched']} "
          f"({chosen['shape']}) {chosen['thresholds']}",
          file=sys.stderr)
    return chosen


@pytest.fixture(scope="session")
def hand_ratio(request) -> float:
    return request.config.getoption("--hand-ratio")


@pytest.fixture(scope="session")
def gpu_python(request) -> str:
    return request.config.getoption("--gpu-python")


@pytest.fixture(scope="session")
def results_dir(request, tmp_path_factory) -> Path:
    given = request.config.getoption("--gpu-results")
    path = Path(given) if given else tmp_path_factory.mktemp("gpu-results")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _src(request, option: str) -> Path:
    value = request.config.getoption(option)
    if not value:
        pytest.skip(f"{option} (or its environment variable) names no DeepEP source tree")
    path = Path(value).resolve()
    if not (path / "setup.py").is_file():
        pytest.fail(f"{option}={value}: not a DeepEP source tree (no setup.py)")
    return path


@pytest.fixture(scope="session")
def deepep_v1_src(request) -> Path:
    return _src(request, "--deepep-v1-src")


@pytest.fixture(scope="session")
def deepep_v2_src(request) -> Path:
    return _src(request, "--deepep-v2-src")


@pytest.fixture(scope="session")
def nvshmem_src(request) -> Path:
    value = request.config.getoption("--nvshmem-src")
    if not value:
        pytest.skip("--nvshmem-src (or GPUFLEET_NVSHMEM_SRC) names no NVSHMEM source tarball")
    path = Path(value).resolve()
    if not path.is_file() or not path.name.endswith((".tar.gz", ".tgz", ".tar.xz", ".txz")):
        pytest.fail(f"--nvshmem-src={value}: not an NVSHMEM source tarball (.tar.gz, .tgz, .tar.xz or .txz)")
    return path


@pytest.fixture(scope="session")
def nvshmem_prefix(request) -> Path:
    path = Path(request.config.getoption("--nvshmem-prefix"))
    if not path.is_absolute() or len(path.parts) < 3:
        pytest.fail(f"--nvshmem-prefix={path}: an absolute path at least two levels deep (the tests remove it)")
    return path


@pytest.fixture(scope="session")
def nccl_src(request) -> Path:
    value = request.config.getoption("--nccl-src")
    if not value:
        pytest.skip("--nccl-src (or GPUFLEET_NCCL_SRC) names no NCCL source tree: DeepEP V2 needs NCCL >= 2.30.4")
    path = Path(value).resolve()
    if not (path / "src" / "nccl.h.in").is_file() and not (path / "Makefile").is_file():
        pytest.fail(f"--nccl-src={value}: not an NCCL source tree (no Makefile, no src/nccl.h.in)")
    return path


@pytest.fixture(scope="session")
def nccl_pinned(nccl_src, results_dir, gpu_python):
    """NCCL from ``--nccl-src`` built and pinned in the torch environment by the collection's nccl role, run twice
    (the second must change nothing): DeepEP V2's NCCL and NCCL EP's (nccl-extensions needs 2.30.7 exactly).
    Returns the two runs' records and the second run's process."""
    from tests.gpu.gpu_helpers import load, run_stage, tail
    procs = []
    for round_ in (1, 2):
        proc = run_stage("all", results_dir, gpu_python, {"nccl_src_dir": str(nccl_src), "gpu_round": round_},
                         playbook="nccl.yml", label=f"nccl-{round_}")
        assert proc.returncode == 0, tail(proc)
        procs.append(proc)
    return load(results_dir, "nccl-1.json"), load(results_dir, "nccl-2.json"), procs[1]


@pytest.fixture(scope="session")
def nccl_ep_wheels(request) -> Path:
    value = request.config.getoption("--nccl-ep-wheels")
    if not value:
        pytest.skip("--nccl-ep-wheels (or GPUFLEET_NCCL_EP_WHEELS) names no directory of NCCL EP's wheels")
    path = Path(value).resolve()
    if not list(path.glob("nccl_extensions-*.whl")):
        pytest.fail(f"--nccl-ep-wheels={value}: no nccl_extensions-*.whl there (expected nccl-extensions and its "
                    "dependencies as wheels for the node's Python)")
    return path


@pytest.fixture(scope="session", autouse=True)
def stage_times(results_dir):
    """Write and print how long each stage took (figures for the record, never a pass/fail criterion)."""
    from tests.gpu.gpu_helpers import TIMINGS
    yield TIMINGS
    if TIMINGS:
        (results_dir / "timings.json").write_text(json.dumps(TIMINGS, indent=2))
        print("\nGPU suite stage times (s): " + ", ".join(f"{k}={v:.1f}" for k, v in TIMINGS.items()), file=sys.stderr)
