# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVSHMEM with IBGDA built from source through the collection on a real GPU node, and DeepEP V1 against it.

Run on a GPU node from the repository root (see tests/gpu/README.md):

    python -m pytest -m gpu tests/gpu/test_nvshmem_gpu.py --nvshmem-src /src/nvshmem-3.4.5-0.tar.xz \
        --deepep-v1-src /src/DeepEP-v1

The role ``gpufleet.deepep.nvshmem`` builds the tarball (keyed, staged, verified with ``nvshmem-info -a``) and
publishes the packed install to an artifact store; a second run changes nothing; with the prefix and the node's
packed install removed (a fresh node with the same prefix, which is part of the build key), a third run installs
from the store without building. DeepEP V1 is then built by ``deepep_build`` against that prefix and against the
torch environment's pip NVSHMEM, and DeepEP's ``tests/test_low_latency.py`` runs on each. Stage seconds go to
timings.json, never asserted.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import TIMINGS, load, run_stage, tail

pytestmark = pytest.mark.gpu

PLAYBOOK = "nvshmem.yml"
# The collection build must not be slower than DeepEP's own pip fallback by more than run-to-run noise (one-rank
# low-latency figures on 1 x H100 repeat within about 1%; reference README of the GPU runs).
LL_RATIO_FLOOR = 0.95


def _recap_changed(proc) -> int:
    match = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", proc.stdout)
    assert match, tail(proc)
    return int(match.group(1))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def nvshmem_vars(nvshmem_src, nvshmem_prefix, results_dir):
    return {"nvshmem_src_tarball": str(nvshmem_src), "nvshmem_src_sha256": _sha256(nvshmem_src),
            "nvshmem_test_prefix": str(nvshmem_prefix), "nvshmem_test_store": str(results_dir / "store")}


def _forget_the_install(prefix: Path) -> None:
    """No install, no kept previous install, no packed install of this node: what a fresh node has."""
    for path in (prefix, Path(f"{prefix}.previous"), prefix.parent / "artifacts" / "nvshmem"):
        shutil.rmtree(path, ignore_errors=True)
    assert not prefix.exists()


@pytest.fixture(scope="module")
def nvshmem_built(nvshmem_vars, nvshmem_prefix, results_dir, gpu_python):
    # From source: nothing of an earlier run on this node (install or store) may stand in for the build.
    _forget_the_install(nvshmem_prefix)
    shutil.rmtree(nvshmem_vars["nvshmem_test_store"], ignore_errors=True)
    first = run_stage("nvshmem", results_dir, gpu_python, dict(nvshmem_vars, gpu_round=1), playbook=PLAYBOOK,
                      label="nvshmem-build")
    assert first.returncode == 0, tail(first)
    second = run_stage("nvshmem", results_dir, gpu_python, dict(nvshmem_vars, gpu_round=2), playbook=PLAYBOOK,
                       label="nvshmem-rerun")
    assert second.returncode == 0, tail(second)
    return load(results_dir, "nvshmem-1.json"), load(results_dir, "nvshmem-2.json"), _recap_changed(second)


def test_nvshmem_is_built_with_ibgda_and_a_rerun_changes_nothing(nvshmem_built, nvshmem_prefix):
    first, second, changed = nvshmem_built
    result, facts = first["result"], first["facts"]
    assert result["built"] is True and result["installed_from"] == "build"
    assert result["verify"]["ok"] is True, result["verify"]
    assert facts["ibgda"] is True and facts["verified"] is True
    assert facts["prefix"] == str(nvshmem_prefix)
    assert "nvshmem_transport_ibgda.so.3" in facts["libraries"]
    assert any(name.startswith("libnvshmem_host.so") for name in facts["libraries"])
    assert "libnvshmem_device.a" in facts["libraries"]
    # What the real nvshmem-info of the install says, read independently of the module.
    assert re.search(r"\bNVSHMEM_IBGDA_SUPPORT=(ON|1)\b", first["info"]), first["info"][:3000]
    assert facts["version"] and first["info"].find("NVSHMEM v" + facts["version"]) >= 0
    # The configure line had the flags the runbooks use, and no Python wheels (they need a package index).
    configure = next(cmd for cmd in result["commands"] if "-S" in cmd)
    for flag in ("-DNVSHMEM_IBGDA_SUPPORT=ON", "-DNVSHMEM_MPI_SUPPORT=OFF", "-DNVSHMEM_SHMEM_SUPPORT=OFF",
                 "-DNVSHMEM_BUILD_PYTHON_LIB=OFF", "-DNVSHMEM_BUILD_TESTS=OFF", "-DNVSHMEM_BUILD_EXAMPLES=OFF"):
        assert flag in configure, configure
    assert any(arg.startswith("-DCMAKE_CUDA_ARCHITECTURES=") and arg.split("=", 1)[1] for arg in configure)
    build = next(cmd for cmd in result["commands"] if "--build" in cmd)
    print(f"\nNVSHMEM {facts['version']} IBGDA={facts['ibgda']} key {result['key'][:8]}: built with "
          f"{build[build.index('--parallel') + 1]} jobs on {first['nproc']} CPUs; configure {' '.join(configure[1:])}",
          file=sys.stderr)
    # The published artifact.
    assert result["artifact"] and Path(result["artifact"]).is_file()
    # Same inputs again: nothing changes, the key is the same.
    assert changed == 0
    assert second["result"]["key"] == result["key"]
    assert second["facts"]["key"] == facts["key"] and second["facts"]["verified"] is True


def test_a_fresh_prefix_installs_from_the_store_without_building(nvshmem_built, nvshmem_vars, nvshmem_prefix,
                                                                 results_dir, gpu_python):
    first = nvshmem_built[0]
    key = first["result"]["key"]
    store = Path(nvshmem_vars["nvshmem_test_store"]) / "nvshmem" / key
    assert (store / "record.json").is_file() and (store / f"nvshmem-{key}.tar.gz").is_file()
    # A fresh node. The prefix stays the same path (it is part of the build key; every node of a profile uses one).
    _forget_the_install(nvshmem_prefix)
    proc = run_stage("nvshmem", results_dir, gpu_python, dict(nvshmem_vars, gpu_round=3), playbook=PLAYBOOK,
                     label="nvshmem-store-install")
    assert proc.returncode == 0, tail(proc)
    third = load(results_dir, "nvshmem-3.json")
    assert third["result"]["built"] is False and third["result"]["installed_from"] == "artifact"
    assert third["result"]["key"] == key and third["facts"]["verified"] is True and third["facts"]["ibgda"] is True
    assert re.search(r"\bNVSHMEM_IBGDA_SUPPORT=(ON|1)\b", third["info"])
    print(f"\nNVSHMEM from the store: {TIMINGS['nvshmem-store-install']:.1f} s (build from source "
          f"{TIMINGS['nvshmem-build']:.1f} s, rerun {TIMINGS['nvshmem-rerun']:.1f} s)", file=sys.stderr)


@pytest.fixture(scope="module")
def low_latency(nvshmem_built, nvshmem_vars, deepep_v1_src, results_dir, gpu_python):
    """Both builds of the same DeepEP tree, each installed and run in turn, in this one session."""
    out = {}
    for variant in ("collection", "pip"):
        extra = dict(nvshmem_vars, deepep_src=str(deepep_v1_src), deepep_variant=variant)
        proc = run_stage("deepep", results_dir, gpu_python, extra, playbook=PLAYBOOK, label=f"deepep-{variant}")
        assert proc.returncode == 0, tail(proc)
        proc = run_stage("low_latency", results_dir, gpu_python, extra, playbook=PLAYBOOK,
                         label=f"low_latency-{variant}")
        assert proc.returncode == 0, tail(proc)
        out[variant] = (load(results_dir, f"deepep-{variant}.json"), load(results_dir, f"low_latency-{variant}.json"))
    return out


def test_deepep_against_the_collection_nvshmem_runs_low_latency_like_the_pip_build(low_latency, nvshmem_prefix):
    figures = {}
    for variant, (build, run) in low_latency.items():
        facts = build["ansible_facts"]["gpufleet_deepep"]
        assert facts["import_ok"] is True, build
        assert run["rc"] == 0, run["stdout"][-3000:] + run["stderr"][-3000:]
        parsed = run["parsed"]
        assert parsed["complete"] is True
        figures[variant] = parsed["low_latency"]
        assert figures[variant]["dispatch_gbps"] and figures[variant]["combine_gbps"], parsed
    # The collection variant really ran on the collection's NVSHMEM: its host library is preloaded (the env
    # script's LD_PRELOAD) and the symbols bind to it, though torch maps its own pip copy beside it. The pip variant
    # never touches the collection's prefix.
    collection_host = low_latency["collection"][1]["nvshmem_host"]
    pip_host = low_latency["pip"][1]["nvshmem_host"]
    assert collection_host["bound"] and collection_host["bound"].startswith(str(nvshmem_prefix) + "/lib/"), \
        collection_host
    assert any(p.startswith(str(nvshmem_prefix) + "/lib/") for p in collection_host["mapped"]), collection_host
    assert pip_host["mapped"] and not any(p.startswith(str(nvshmem_prefix)) for p in pip_host["mapped"]), pip_host
    assert not (pip_host["bound"] or "").startswith(str(nvshmem_prefix)), pip_host
    collection_nvshmem = low_latency["collection"][0]["inputs"]["nvshmem"]
    assert collection_nvshmem["root"] == str(nvshmem_prefix) and collection_nvshmem["ibgda"] is True
    assert low_latency["pip"][0]["inputs"]["nvshmem"]["root"] != str(nvshmem_prefix)
    ratios = {k: figures["collection"][k] / figures["pip"][k] for k in ("dispatch_gbps", "combine_gbps")}
    print(f"\nlow latency, collection NVSHMEM: {figures['collection']}\nlow latency, pip NVSHMEM: {figures['pip']}"
          f"\nratios collection/pip: {ratios}", file=sys.stderr)
    for name, ratio in ratios.items():
        assert ratio >= LL_RATIO_FLOOR, f"{name}: collection NVSHMEM {ratio:.3f} of pip NVSHMEM"
