# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeepEP V2 on a real GPU node: pin NCCL >= 2.30.4 in the torch environment, build V2, run its tests.

V2 needs NCCL >= 2.30.4 at build and run time, and refuses a second NCCL loaded beside torch's: the torch
environment's own pip NCCL files must be the new version. The collection's ``nccl`` role builds NCCL from the
source tree given with ``--nccl-src`` (no download) and pins it there (tests/gpu/playbooks/nccl.yml); then
``deepep_build`` builds V2 against it, and V2's V1-API test ``tests/legacy/test_intranode.py`` must pass the
verify_intranode role's gate for the node's GPU family. V2's own ``tests/elastic/test_ep.py`` must finish with every
case correct (on a node without a NIC it runs with ``EP_DISABLE_GIN=1`` and ``--allow-hybrid-mode 0``: NCCL has no GIN
backend there); its figures and whether its JIT kernels were compiled or loaded are printed (see tests/gpu/README.md).
Intranode tests skip, with the reason, unless the node has 2, 4 or 8 GPUs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.gpu.gpu_helpers import load, run_stage, tail

pytestmark = pytest.mark.gpu

V2_NCCL_FLOOR = (2, 30, 4)


def version_tuple(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".")[:3])


@pytest.fixture(scope="module")
def v2_built(nccl_pinned, deepep_v2_src, results_dir, gpu_python):
    proc = run_stage("v2_build", results_dir, gpu_python, {"deepep_v2_src": str(deepep_v2_src)})
    assert proc.returncode == 0, tail(proc)
    return load(results_dir, "v2_build.json")


def test_nccl_is_pinned_in_the_torch_environment(nccl_pinned):
    first, second, second_run = nccl_pinned
    facts = first["nccl"]
    assert version_tuple(facts["version"]) >= V2_NCCL_FLOOR, facts
    assert facts["pinned"] is True
    assert first["nccl_root"].endswith("nvidia/nccl"), first["nccl_root"]
    # The second run found the build and the pinned files in place: nothing rebuilt, nothing copied.
    assert re.search(r"localhost\s*:.*\bchanged=0\b", second_run.stdout), second_run.stdout[-2000:]
    assert second["nccl"]["version"] == facts["version"]


def test_v2_builds_against_the_pinned_nccl_and_imports(v2_built):
    assert not v2_built.get("failed"), v2_built.get("msg")
    facts = v2_built["ansible_facts"]["gpufleet_deepep"]
    assert facts["generation"] == "v2"
    assert facts["import_ok"] is True, v2_built
    assert version_tuple(facts["built_against"]["nccl"]) >= V2_NCCL_FLOOR
    assert facts["built_against"]["nccl"] == v2_built["nccl"]["version"]


def test_v2_legacy_intranode_passes_the_family_gate(v2_built, deepep_v2_src, results_dir, gpu_python,
                                                    intranode_gpus, intranode_thresholds):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import gate

    proc = run_stage("v2_legacy_intranode", results_dir, gpu_python, {"deepep_v2_src": str(deepep_v2_src)})
    assert proc.returncode == 0, tail(proc)
    out = load(results_dir, "v2_legacy_intranode.json")
    parsed = out["parsed"]
    assert out["rc"] == 0, out["stdout"][-3000:] + out["stderr"][-3000:]
    assert parsed["cases"]["failed"] == 0 and parsed["cases"]["passed"] > 0
    verdict = gate(parsed, intranode_thresholds["thresholds"], rc=out["rc"], stage="tests/legacy/test_intranode.py")
    print(f"\nV2 legacy intranode on {intranode_gpus} GPUs: cases {parsed['cases']}, BF16 dispatch "
          f"{parsed['dispatch']['bf16']['nvl_gbps']}, FP8 dispatch {parsed['dispatch']['fp8']['nvl_gbps']}, combine "
          f"{parsed['combine']['nvl_gbps']} GB/s (NVL); gate {intranode_thresholds['matched']}: {verdict['status']} "
          f"{verdict['reasons']}", file=sys.stderr)
    assert verdict["passed"], verdict["reasons"]


# The elastic test's SIGSEGV at the first dispatch (2 x H100, 2 x H200 and 4 x H200, hand and collection builds alike) was
# a static libstdc++ in the extension: the machines' compiler (/opt/gcc/bin/g++) has a dangling libstdc++.so link, so
# the link took libstdc++.a, and V2's JIT include parser died in std::regex (cuda-gdb: std::codecvt<char16_t>::do_unshift
# called for std::collate<char>::transform; tests/fixtures/captured/h200x4). deepep_build now links the interpreter's
# shared libstdc++ there and refuses a V2 extension with a static one, so a crash here is a new cause: a failure.
V2_ELASTIC_CRASH = "DeepEP V2 tests/elastic/test_ep.py crashed"


def test_v2_elastic(v2_built, deepep_v2_src, results_dir, gpu_python, intranode_gpus):
    """Runs under a timeout; a crash fails with where it died (the build's linkage beside it), a finished run must
    have every case correct and its figures. Its bandwidth is not held to the legacy test's gate: the elastic test
    measures other kernels (scale-up GB/s of the FP8 first case), so its figures are printed, not gated."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import gate

    proc = run_stage("v2_elastic", results_dir, gpu_python, {"deepep_v2_src": str(deepep_v2_src)})
    assert proc.returncode == 0, tail(proc)
    out = load(results_dir, "v2_elastic.json")
    parsed = out["parsed"]
    jit = "loaded" if out["jit_kernels_before"] and out["jit_kernels_after"] == out["jit_kernels_before"] else "compiled"
    summary = {"rc": out["rc"], "complete": parsed["complete"], "cases": parsed.get("cases"),
               "dispatch": parsed.get("dispatch"), "combine": parsed.get("combine"),
               "elastic": parsed.get("elastic"), "gin_disabled": out["gin_disabled"], "wall": out["delta"],
               "jit": f"{jit} ({out['jit_kernels_before']} kernels before, {out['jit_kernels_after']} after)"}
    print(f"\nV2 tests/elastic/test_ep.py: {summary}\nargv: {out['argv']}\nstderr tail: {out['stderr'][-1500:]}",
          file=sys.stderr)
    # A crash shows as timeout(1)'s 128 + signal when the test process itself dies, and as rc 1 with
    # "process N terminated with signal SIGSEGV" when torch.multiprocessing.spawn reports a dead child.
    crashed = parsed["crashed"] or out["rc"] in (128 + 11, 128 + 6, -11, -6)
    # A run that died cannot have read as complete.
    assert not (crashed and parsed["complete"]), parsed
    linkage = v2_built.get("linkage")
    assert not crashed, (f"{V2_ELASTIC_CRASH} (rc={out['rc']}, crashed={parsed['crashed']}; extension linkage "
                         f"{linkage}):\n{out['stderr'][-3000:]}")
    assert "NCCL GIN is unavailable" not in out["stderr"], (
        f"V2's ElasticBuffer found no NCCL GIN backend (gin_disabled={out['gin_disabled']}): a node without a "
        f"GIN-capable NIC needs EP_DISABLE_GIN=1\n{out['stderr'][-2000:]}")
    assert out["rc"] == 0, out["stdout"][-3000:] + out["stderr"][-3000:]
    verdict = gate(parsed, {}, rc=out["rc"], stage="tests/elastic/test_ep.py")
    assert verdict["passed"], verdict["reasons"]
    elastic = parsed["elastic"]
    assert elastic["dispatch"] and elastic["dispatch"]["su_gbps"] > 0, elastic
    assert elastic["combine"] and elastic["combine"]["su_gbps"] > 0, elastic
    assert out["jit_kernels_after"] > 0, "the elastic run left no kernel in its JIT cache"


def test_v2_transport_truth_is_nvlink_p2p_on_the_pinned_nccl(v2_built, nccl_pinned, deepep_v2_src, results_dir,
                                                             gpu_python, intranode_gpus):
    """What really ran, from NCCL's and DeepEP's own lines: every channel P2P over NVLink, no GIN on a node without
    a NIC, and DeepEP on the NCCL the nccl phase pinned (not a second libnccl beside torch's)."""
    proc = run_stage("v2_transport", results_dir, gpu_python, {"deepep_v2_src": str(deepep_v2_src)})
    assert proc.returncode == 0, tail(proc)
    out = load(results_dir, "v2_transport.json")
    truth, verdict = out["truth"], out["gate"]
    print(f"\nV2 transport truth: nccl {truth['nccl']['version']} paths {truth['nccl']['paths']} network "
          f"{truth['nccl']['networks']} gin {truth['nccl']['gin']}; DeepEP loaded NCCL {truth['deepep']['nccl_version']}"
          f" QPs {truth['deepep']['qps']}; gate {verdict}", file=sys.stderr)
    assert out["rc"] == 0, out["output"][-3000:]
    assert verdict["passed"], verdict
    pinned = nccl_pinned[0]
    wanted = pinned.get("nccl", {}).get("version") or pinned.get("version")
    assert truth["nccl"]["version"] and truth["deepep"]["nccl_version"] == truth["nccl"]["version"], truth
    if wanted:
        assert truth["nccl"]["version"] == wanted, (truth["nccl"]["version"], wanted)
    assert truth["nccl"]["path_classes"] == ["p2p"], truth["nccl"]


def test_v2_jit_cache_is_built_once_and_loads_whole_from_the_artifact(v2_built, deepep_v2_src, results_dir,
                                                                      gpu_python, intranode_gpus):
    """deepep_jit_cache on the real V2: node A compiles the kernels in its warm-up and packs them; node B (a fresh
    cache directory) unpacks the artifact and its warm-up loads every kernel, compiling none."""
    proc = run_stage("v2_jit", results_dir, gpu_python, {"deepep_v2_src": str(deepep_v2_src)})
    assert proc.returncode == 0, tail(proc)
    a, b = load(results_dir, "v2_jit.json")
    print(f"\nV2 JIT cache: node A {a.get('reason')}: warm-up {a.get('warmup')}, loaded {a.get('loaded_warmup')}; "
          f"node B {b.get('reason')}: warm-up {b.get('warmup')}, loaded {b.get('loaded_warmup')}; "
          f"{len(a.get('kernels') or [])} kernels, key {a.get('key')}", file=sys.stderr)
    assert not a.get("failed"), a
    assert not b.get("failed"), b
    assert a["key"] == b["key"] and a["kernels"] and sorted(a["kernels"]) == sorted(b["kernels"])
    assert a["would_build"] and a["warmup"]["compiled"] == len(a["kernels"]) and a["warmup"]["rc"] == 0
    assert not b["would_build"] and b["warmup"] is None          # B compiled nothing: it unpacked A's artifact
    for node in (a, b):
        warm = node["loaded_warmup"]
        assert warm["rc"] == 0 and warm["compiled"] == 0 and warm["loaded"] == len(a["kernels"]), node


# V2's other tests (dd758ca tests/elastic/): the arguments a node without a GIN-capable NIC runs them with (GIN off,
# no hybrid RDMA kernels, as the elastic test there), in the order cheapest first.
V2_EXTRAS = (("barrier", ["--allow-hybrid-mode", "0"]), ("agrs", []), ("engram", []), ("pp", []))


def test_v2_extras_on_this_node(v2_built, deepep_v2_src, results_dir, gpu_python, num_gpus):
    """Which of V2's other tests (Engram, PP, all-gather/reduce-scatter, barrier) run on this node, with every GPU it
    has and GIN off, and what they print: each run's exit, seconds, the parse the collection reads and the output's
    tail go to v2_extras-<test>.json as each ends (a run cut by the call's limit leaves the ones before it). A test
    that finished is read whole by the parser (its ranks, its correctness stage, its figures)."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import parse_output

    seen = {}
    for kind, args in V2_EXTRAS:
        argv = ["timeout", os.environ.get("GPUFLEET_V2_EXTRAS_TIMEOUT", "110"), gpu_python,
                f"tests/elastic/test_{kind}.py", "--num-processes", str(num_gpus)] + args
        env = dict(os.environ, EP_DISABLE_GIN="1", PYTHONFAULTHANDLER="1",
                   EP_JIT_CACHE_DIR=str(results_dir / "v2-jit-cache"))
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=deepep_v2_src, env=env, capture_output=True, text=True, check=False)
        parsed = parse_output(proc.stdout + "\n" + proc.stderr, test=f"tests/elastic/test_{kind}.py", generation="v2")
        seen[kind] = {"argv": argv, "rc": proc.returncode, "seconds": round(time.monotonic() - start, 1),
                      "parsed": parsed, "stdout": proc.stdout[-6000:], "stderr": proc.stderr[-6000:]}
        (results_dir / f"v2_extras-{kind}.json").write_text(json.dumps(seen[kind], indent=1))
    print("\nV2 extras on %d GPU(s), GIN off: %s" % (num_gpus, "; ".join(
        "%s rc=%s %.1fs complete=%s %s" % (kind, run["rc"], run["seconds"], run["parsed"]["complete"],
                                           (run["parsed"].get("extras") or {}).get("figures"))
        for kind, run in seen.items())), file=sys.stderr)
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import skip_reason

    rdma = any(gpu.get("hca") for gpu in load(results_dir, "facts.json")["gpus"]["gpus"])
    for kind, run in seen.items():
        if run["rc"] == 0:
            assert run["parsed"]["complete"], (kind, run["parsed"], run["stdout"][-2000:])
        # The descriptor's hardware rules hold what the node did: a test it lets run here finished whole (on the lent
        # 1 x H200 without a NIC, twice: the barrier alone; agrs and PP need 2 ranks, Engram a NIC).
        if skip_reason("v2", kind, num_gpus, rdma=rdma) is None:
            assert run["rc"] == 0 and run["parsed"]["complete"], (kind, run["stderr"][-2000:])
