# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What verify reports of DeepEP V2's JIT: node_stack's ``jit_cache`` set reads the cache, ``verify_jit`` says
whether the run compiled or loaded its kernels and how long it ran, the summary shows it and fails a run that had to
be warm and was not.

The figures come from the real runs of DeepEP V2 dd758ca's elastic test on 2 x H100 (captured/h100x2): the header
of each capture says the kernels in the cache before and after the run and the run's wall time.
"""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError

from unit_helpers import FIXTURES, run_module

from ansible_collections.gpufleet.deepep.plugins.filter import verify_helpers as vf
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import deepep_jit as jit
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack

KEY = "9c1e" * 16
CACHE = "/var/cache/deepep/jit"
HEADER_RE = re.compile(r"wall=(?P<wall>\d+:\d\d:\d\d\.\d+) JIT kernels before/after (?P<before>\d+)/(?P<after>\d+)")


def captured_run(name):
    """(kernels before, kernels after, the command's delta) from the header of a captured elastic run."""
    text = (FIXTURES / "captured" / (name if "/" in name else f"h100x2/{name}")).read_text()
    match = HEADER_RE.search(text)
    assert match, name
    return int(match["before"]), int(match["after"]), match["wall"]


def facts(count, cache=CACHE, **record):
    out = {"cache_dir": cache, "key": record.get("key"), "current": bool(record), "kernels": ["dispatch"] if count else [],
           "kernel_count": count, "from": None, "compiled_seconds": None, "loaded_seconds": None, "compiled": None,
           "loaded": None}
    out.update(record)
    return out


# --- the real runs ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("capture, state, compiled, loaded, seconds", [
    ("deepep_v2_test_ep_elastic_nogin_cold.txt", "cold", 11, 0, 68.1),
    ("deepep_v2_test_ep_elastic_nogin_warm.txt", "warm", 0, 11, 44.9),
])
def test_the_real_cold_and_warm_runs(capture, state, compiled, loaded, seconds):
    before, after, wall = captured_run(capture)
    verdict = vf.verify_jit(facts(before), facts(after), run_seconds=wall)
    assert (verdict["state"], verdict["compiled"], verdict["loaded"], verdict["run_seconds"]) == \
        (state, compiled, loaded, seconds)
    assert verdict["passed"] and verdict["reasons"] == []
    assert verdict["brief"] == ("cold: 11 compiled, run 68.1 s" if state == "cold"
                                else "warm: 0 compiled, 11 cached, run 44.9 s")


def test_the_real_cold_run_on_4_ranks():
    # 4 x H100: the same 11 kernels are compiled at the first dispatch on four ranks as on two (the cache is per
    # node, the kernels per shape), in 71.6 s.
    before, after, wall = captured_run("h100x4/deepep_v2_test_ep_elastic_nogin_cold_4gpu.txt")
    verdict = vf.verify_jit(facts(before), facts(after), run_seconds=wall)
    assert (verdict["state"], verdict["compiled"], verdict["run_seconds"]) == ("cold", 11, 71.6)
    assert verdict["brief"] == "cold: 11 compiled, run 71.6 s"


def test_a_cold_run_fails_where_a_warm_cache_is_required():
    before, after, wall = captured_run("deepep_v2_test_ep_elastic_nogin_cold.txt")
    verdict = vf.verify_jit(facts(before), facts(after), run_seconds=wall, require_warm=True)
    assert not verdict["passed"]
    assert "compiled 11 kernel(s) at first dispatch" in verdict["reasons"][0]
    assert "the cache was empty" in verdict["reasons"][0] and CACHE in verdict["reasons"][0]


def test_the_deepep_roles_warm_ups_are_shown_beside_the_run():
    # node B of the GPU machine's JIT stage: the cache came from node A's artifact, A's cold warm-up 59.7 s,
    # B's warm run 45.7 s (tests/fixtures/captured/h100x2/gpu-suite-v2-jit.txt).
    after = facts(11, key=KEY, **{"from": "store", "compiled_seconds": 59.7, "loaded_seconds": 45.7, "compiled": 11,
                                  "loaded": 11})
    verdict = vf.verify_jit(dict(after), after, run_seconds=44.9)
    assert verdict["state"] == "warm" and verdict["key"] == KEY and verdict["from"] == "store"
    assert verdict["warmup"] == {"compiled_seconds": 59.7, "loaded_seconds": 45.7, "compiled": 11, "loaded": 11}
    assert verdict["brief"] == "warm: 0 compiled, 11 cached, run 44.9 s (cache from the store; warm-up 59.7 s cold, 45.7 s warm)"


# --- every state and its reasons ---------------------------------------------------------------------------------

@pytest.mark.parametrize("before, after, require_warm, state, passed, named", [
    (0, 11, False, "cold", True, None),
    (11, 11, False, "warm", True, None),
    (11, 11, True, "warm", True, None),
    (7, 11, False, "partial", True, None),
    (7, 11, True, "partial", False, "held 7 kernels of another key or other shapes"),
    (0, 0, False, "unused", True, None),
    (0, 0, True, "unused", False, "compiled into another cache"),
    (11, 4, False, "partial", False, "lost kernels during the run (11 before, 4 after)"),
])
def test_states(before, after, require_warm, state, passed, named):
    verdict = vf.verify_jit(facts(before), facts(after), run_seconds=10, require_warm=require_warm)
    assert (verdict["state"], verdict["passed"]) == (state, passed)
    if named:
        assert any(named in reason for reason in verdict["reasons"]), verdict["reasons"]
    else:
        assert verdict["reasons"] == []
    assert verdict["kernel_count"] == after and verdict["cache_dir"] == CACHE


@pytest.mark.parametrize("value, seconds", [(None, None), ("", None), (0, 0.0), (44.94, 44.9), ("0:00:44.900256", 44.9),
                                            ("1:02:03.5", 3723.5), ("0:01:08", 68.0)])
def test_run_seconds_forms(value, seconds):
    assert vf.verify_jit(facts(1), facts(1), run_seconds=value)["run_seconds"] == seconds


@pytest.mark.parametrize("before, after, kwargs, named", [
    (None, facts(1), {}, "before: expected node_stack's gpufleet_deepep_jit facts"),
    (facts(1), "11", {}, "after: expected node_stack's gpufleet_deepep_jit facts"),
    ({"cache_dir": CACHE}, facts(1), {}, "with cache_dir and kernel_count"),
    (facts(-1), facts(1), {}, "before.kernel_count: -1 is not a kernel count"),
    (facts(1), facts(True), {}, "after.kernel_count: True is not a kernel count"),
    (facts(1), facts(1, cache="/tmp/other"), {}, "different caches ('/var/cache/deepep/jit', '/tmp/other')"),
    (facts(1), facts(1), {"run_seconds": "soon"}, "run_seconds: 'soon' is not a duration"),
    (facts(1), facts(1), {"run_seconds": -3}, "run_seconds: -3 is negative"),
    (facts(1), facts(1), {"run_seconds": True}, "run_seconds: True is not a duration"),
    (facts(1), facts(1), {"run_seconds": "0:99:00"}, "'0:99:00' is not a duration"),
    (facts(1), facts(1), {"require_warm": "yes"}, "require_warm: 'yes' is not a boolean"),
])
def test_bad_inputs_are_named(before, after, kwargs, named):
    with pytest.raises(AnsibleFilterError) as err:
        vf.verify_jit(before, after, **kwargs)
    assert str(err.value).startswith("verify_jit: ") and named in str(err.value), str(err.value)


# --- the summary -------------------------------------------------------------------------------------------------

def record(host, jit_verdict):
    return {"host": host, "scope": host, "stage": "intranode", "test": "tests/elastic/test_ep.py",
            "parsed": {"generation": "v2", "cases": {"passed": 8, "failed": 0}},
            "gate": {"passed": True, "status": "pass", "reasons": [], "diagnosis": []}, "jit": jit_verdict}


def test_the_summary_shows_the_jit_of_each_v2_run_and_fails_one_that_had_to_be_warm():
    warm = vf.verify_jit(facts(11), facts(11), run_seconds="0:00:44.900256", require_warm=True)
    cold = vf.verify_jit(facts(0), facts(11), run_seconds="0:01:08.110889", require_warm=True)
    summary = vf.verify_summary([record("h100-a", warm), record("h100-b", cold)])
    assert summary["counts"] == {"total": 2, "passed": 1, "failed": 1}
    assert summary["rows"][0]["jit"]["state"] == "warm" and summary["rows"][1]["jit"]["state"] == "cold"
    failure = summary["failures"][0]
    assert failure["host"] == "h100-b" and failure["reasons"][0].startswith("JIT: V2 compiled 11 kernel(s)")
    text = vf.verify_summary_markdown(summary)
    header = next(line for line in text.splitlines() if line.startswith("| node / pair"))
    assert "| V2 JIT |" in header
    assert "| warm: 0 compiled, 11 cached, run 44.9 s |" in text and "| cold: 11 compiled, run 68.1 s |" in text


def test_a_v1_summary_has_no_jit_column():
    v1 = dict(record("h100-a", None), test="tests/test_intranode.py")
    del v1["jit"]
    assert "V2 JIT" not in vf.verify_summary_markdown(vf.verify_summary([v1]))


def test_a_jit_of_the_wrong_shape_is_named():
    with pytest.raises(AnsibleFilterError) as err:
        vf.verify_summary([record("h100-a", {"compiled": 3})])
    assert "the jit of a verification record must be verify_jit's result" in str(err.value)


# --- node_stack gather: [jit_cache] ------------------------------------------------------------------------------

def kernel(cache_root, name, digest="1f2e3d4c5b6a7980", cubin=True):
    path = cache_root / "cache" / ("kernel.%s.%s" % (name, digest))
    path.mkdir(parents=True)
    (path / "kernel.cu").write_text("// %s\n" % name)
    if cubin:
        (path / "kernel.cubin").write_bytes(b"\x7fELF" + name.encode())
    return path.name


@pytest.mark.parametrize("with_record", [True, False])
def test_node_stack_reads_the_cache_below_root(tmp_path, with_record):
    cache = tmp_path / CACHE.lstrip("/")
    dirs = [kernel(cache, "dispatch"), kernel(cache, "combine")]
    kernel(cache, "barrier", cubin=False)  # a compile in progress is not a kernel yet
    if with_record:
        jit.write_record(str(cache), {"key": KEY, "kernels": dirs, "from": "store", "compiled_seconds": 59.7,
                                      "loaded_seconds": 45.7, "compiled": 2, "loaded": 2})
    result = run_module(node_stack, {"gather": ["jit_cache"], "root": str(tmp_path), "jit_cache_dir": CACHE + "/"},
                        check_mode=True)
    assert not result.failed, result
    got = result["ansible_facts"]["gpufleet_deepep_jit"]
    assert (got["cache_dir"], got["kernels"], got["kernel_count"]) == (CACHE, ["combine", "dispatch"], 2)
    if with_record:
        assert (got["key"], got["current"], got["from"], got["compiled_seconds"], got["loaded"]) == \
            (KEY, True, "store", 59.7, 2)
    else:
        assert got["key"] is None and got["current"] is False and got["from"] is None


def test_node_stack_a_missing_cache_is_empty(tmp_path):
    result = run_module(node_stack, {"gather": ["jit_cache"], "root": str(tmp_path), "jit_cache_dir": CACHE})
    got = result["ansible_facts"]["gpufleet_deepep_jit"]
    assert (got["kernel_count"], got["kernels"], got["current"]) == (0, [], False)


def test_node_stack_reads_what_the_deepep_jit_cache_module_returns(tmp_path):
    """The two readers of one cache agree: the module that fills it and the set verify reads."""
    cache = tmp_path / "jit"
    dirs = [kernel(cache, "dispatch"), kernel(cache, "combine", digest="abcdef0123456789")]
    jit.write_record(str(cache), {"key": KEY, "kernels": dirs, "from": "compiled", "compiled_seconds": 4.2,
                                  "loaded_seconds": 1.1, "compiled": 2, "loaded": 2})
    gathered = run_module(node_stack, {"gather": ["jit_cache"], "jit_cache_dir": str(cache)})
    assert gathered["ansible_facts"]["gpufleet_deepep_jit"] == jit.cache_facts(str(cache), KEY)
