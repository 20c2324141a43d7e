# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The judgement of one EP test run (plugin_utils/_verify/judge.py) and ep_test's judge option: real captured runs
held against the verify roles' own gate and transport tables, the refusals made before a test starts, and the record
the summary reads."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleActionFail

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import backends
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import judge as j
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.summary import render_markdown, summarize

from test_ep_test import BASE, _node, _simulated
from unit_helpers import FIXTURES, REPO

INTRANODE = yaml.safe_load((REPO / "roles" / "verify_intranode" / "defaults" / "main.yml").read_text())
INTERNODE = yaml.safe_load((REPO / "roles" / "verify_internode" / "defaults" / "main.yml").read_text())
H200_V1_2GPU = (FIXTURES / "captured" / "h200x2" / "deepep_v1_test_intranode_2gpu.txt").read_text()
H100_V2_LEGACY_DEBUG = (FIXTURES / "captured" / "h100x2" / "deepep_v2_legacy_intranode_transport_debug.txt").read_text()
B200_INTERNODE = (FIXTURES / "deepep_output" / "v1_test_internode_b200_2node_node0.txt").read_text()


def _spec(**changes):
    spec = {"stage": "intranode", "test": None, "generation": None,
            "thresholds": INTRANODE["verify_intranode_thresholds"], "table_name": "verify_intranode_thresholds",
            "profile": "h200", "family": None, "gpus": 2, "transport_policy": None, "record": {}}
    spec.update(changes)
    return spec


def test_the_measured_h200_run_passes_the_gate_measured_for_two_gpus():
    record = j.judge(_spec(), H200_V1_2GPU, 0, False, 900, "tests/test_intranode.py", log="/r/n1/intranode.log",
                     host="n1")
    assert record["host"] == record["scope"] == "n1" and record["stage"] == "intranode"
    assert record["test"] == "tests/test_intranode.py" and record["log"] == "/r/n1/intranode.log"
    assert record["gate"]["passed"] and record["gate"]["status"] == "pass"
    # the by_gpus[2] gate, not the family's
    assert record["thresholds"] == {"dispatch_bf16_nvl_gbps": 300, "dispatch_fp8_nvl_gbps": 210, "combine_nvl_gbps": 250}
    assert record["parsed"]["dispatch"]["bf16"]["nvl_gbps"] == 340.61 and record["transport"] is None
    # measured with V1 on this hardware and GPU count: the gate is no guess
    assert record["gate_basis"]["matched"] == "h200" and record["gate_basis"]["shape"] == "measured"
    assert record["gate_basis"]["provisional"] is None and "2 x H200" in record["gate_basis"]["source"]
    assert summarize([record])["passed"]


def test_a_v2_run_on_a_gate_only_v1_runs_measured_says_its_gate_is_provisional():
    record = j.judge(_spec(), H200_V1_2GPU, 0, False, 900, "tests/elastic/test_ep.py", host="n1", backend="v2")
    assert record["gate_basis"]["provisional"] == ("the figures were measured with DeepEP V1; no DeepEP V2 run "
                                                   "measured them")
    b300 = j.judge(_spec(profile="gcp_b300", gpus=8), H200_V1_2GPU, 0, False, 900, "tests/test_intranode.py",
                   host="n1", backend="v1")
    assert b300["gate_basis"]["matched"] == "b300" and "NVLink 5 as the B200's" in b300["gate_basis"]["provisional"]
    assert not b300["gate"]["passed"]  # 340 GB/s of NVLink 4 is under the NVLink 5 gate


def test_the_same_run_on_a_b200_node_fails_its_gate_with_the_figure_named():
    record = j.judge(_spec(profile="gcp_b200"), H200_V1_2GPU, 0, False, 900, "tests/test_intranode.py", host="n1")
    assert not record["gate"]["passed"] and record["gate"]["status"] == "fail"
    assert any("dispatch_bf16_nvl_gbps" in reason and "380" in reason for reason in record["gate"]["reasons"])


def test_a_run_that_did_not_finish_is_gated_as_timed_out_with_its_bound():
    record = j.judge(_spec(), H200_V1_2GPU.splitlines()[0] + "\n", -1, True, 900, "tests/test_intranode.py", host="n1")
    assert record["gate"]["status"] == "timeout"
    assert any("intranode test" in reason and "900" in reason for reason in record["gate"]["reasons"])


@pytest.mark.parametrize("profile,family,named", [
    ("gcp_h20", None, "the collection has no intranode gate for h20"), ("site_a", "a800", "no intranode gate for a800"),
    ("mycluster", None, "mycluster"),
])
def test_a_profile_without_a_gate_of_its_own_is_refused_before_anything_is_judged(profile, family, named):
    with pytest.raises(j.JudgeError, match="verify_intranode_thresholds") as caught:
        j.check(_spec(profile=profile, family=family))
    assert named in str(caught.value)
    # the site's own entry for the family gates it
    own = {(family or profile.split("_")[-1]): {"combine_nvl_gbps": 90}}
    assert j.check(_spec(profile=profile, family=family, thresholds=own))["thresholds"]["combine_nvl_gbps"] == 90


def test_a_transport_policy_is_held_against_what_the_run_brought_up():
    nvlink_only = backends.transport_policy("v1", "intranode")["policy"]
    record = j.judge(_spec(profile="h100", transport_policy=nvlink_only), H100_V2_LEGACY_DEBUG, 0, False,
                     900, "tests/legacy/test_intranode.py", host="n1")
    assert record["gate"]["passed"], record["gate"]
    assert record["transport"]["gate"]["passed"], record["transport"]["gate"]
    assert record["transport"]["truth"]["nccl"]["paths"] and record["transport"]["policy"]["allow_paths"] == ["p2p"]
    # V2's policy also asks for the NCCL DeepEP loaded, which this capture (no EP_BUFFER_DEBUG) does not show
    v2 = j.judge(_spec(profile="h100", transport_policy=backends.transport_policy("v2", "intranode")["policy"]),
                 H100_V2_LEGACY_DEBUG, 0, False, 900, "tests/legacy/test_intranode.py", host="n1")
    assert not v2["transport"]["gate"]["passed"] and "EP_BUFFER_DEBUG=1" in v2["transport"]["gate"]["unknown"][0]
    # a policy that allows no P2P path fails the run on its transport, with its figures untouched
    strict = j.judge(_spec(profile="h100", transport_policy={"allow_paths": ["net"]}),
                     H100_V2_LEGACY_DEBUG, 0, False, 900, "tests/legacy/test_intranode.py", host="n1")
    assert strict["gate"]["passed"] and not strict["transport"]["gate"]["passed"]
    assert not summarize([strict])["passed"]


def test_the_sites_policies_are_merged_over_the_backends_and_the_record_says_which():
    # The role's way: the site's table (empty by default) and the run's backend and scope; the record names the basis.
    plain = j.judge(_spec(transport_policies=INTRANODE["verify_intranode_transport_policies"]), H200_V1_2GPU, 0, False,
                    900, "tests/test_intranode.py", host="n1", backend="v1", scope="intranode")
    assert plain["transport"]["basis"] == {"backend": "deepep_v1", "scope": "intranode", "fabric": None, "matched": None}
    assert plain["transport"]["policy"]["allow_paths"] == ["p2p"] and plain["gate"]["passed"]
    site = {"h200": {"allow_paths": ["p2p", "shm"]}, "default": {"allow_cpu_fallback": True}}
    merged = j.judge(_spec(transport_policies=site), H200_V1_2GPU, 0, False, 900, "tests/test_intranode.py", host="n1",
                     backend="deepep_v1", scope="intranode")
    assert merged["transport"]["basis"]["matched"] == "h200"
    assert merged["transport"]["policy"]["allow_paths"] == ["p2p", "shm"]
    assert merged["transport"]["policy"]["allow_transports"] == ["p2p"]          # the backend's key, kept
    # the sweep's stage is held to the backend's internode policy
    sweep = j.policy(_spec(stage="sweep", transport_policies={}), "v2")
    assert sweep["scope"] == "internode" and sweep["policy"]["allow_gin"] == ["GDAKI"]
    # the profile's fabric: named in the basis, an unknown one refused before the run
    on_roce = j.policy(_spec(stage="internode", transport_policies={}, fabric="roce"), "v1")
    assert on_roce["fabric"] == "roce" and on_roce["policy"]["allow_networks"] == ["IB"]
    with pytest.raises(j.JudgeError, match="judge.transport_policies: fabric 'ib' is not one the collection knows"):
        j.check(_spec(stage="internode", transport_policies={}, fabric="ib"), "v1", "internode")


def test_the_internode_record_keeps_where_it_was_measured():
    where = {"scope": "n1 (rank 0 of pair: n1 + n2)", "group": "pair", "rank": 0, "world_size": 2,
             "master_addr": "10.0.0.1"}
    spec = _spec(stage="internode", thresholds=INTERNODE["verify_internode_thresholds"],
                 table_name="verify_internode_thresholds", profile="gcp_b200", gpus=None, generation="v1", record=where)
    record = j.judge(spec, B200_INTERNODE, 0, False, 900, "tests/test_internode.py", host="n1")
    for key, value in where.items():
        assert record[key] == value
    assert record["host"] == "n1" and record["stage"] == "internode" and record["gate"]["passed"], record["gate"]
    assert record["parsed"]["dispatch"]["bf16"]["rdma_gbps"] is not None


def test_connectivity_is_judged_by_its_ranks_lines_without_a_table():
    ok = "[Rank 0] DeepEP buffer created\n[Rank 0] Dispatch layout test PASSED\n"
    record = j.judge(_spec(stage="connectivity", thresholds=None, test="test_deepep_internode.py",
                           record={"group": "pair", "rank": 1}), ok, 0, False, 60, "/opt/v/test_deepep_internode.py",
                     host="n2")
    assert record["gate"]["passed"] and record["gate"]["ranks_passed"] == [0]
    assert record["test"] == "test_deepep_internode.py" and record["parsed"] == {} and record["thresholds"] is None
    bad = j.judge(_spec(stage="connectivity", thresholds=None), "[Rank 1] ERROR: Unable to create ah\n", 1, False, 60,
                  "t.py", host="n2")
    assert not bad["gate"]["passed"] and "rank 1: Unable to create ah" in bad["gate"]["reasons"]


@pytest.mark.parametrize("changes,named", [
    ({"record": {"gate": {"passed": True}}}, "judge.record sets gate"),
    ({"thresholds": {"h200": {"combine_nvl_gbps": 1, "provisional": 1}}}, r"thresholds\['h200'\].provisional must be text"),
    ({"transport_policy": {"allow_pathz": ["p2p"]}}, "judge.transport_policy: .*allow_pathz"),
    ({"transport_policies": {"h200": {"allow_pathz": ["p2p"]}}}, "judge.transport_policies: transport policy 'h200'"),
    ({"transport_policies": {}}, "judge.transport_policies needs the run's backend"),
    ({"transport_policies": {}, "transport_policy": {}}, "judge.transport_policy and judge.transport_policies are both"),
    ({"thresholds": {"h200": {"dispatch_bf16_nvl_gbs": 300}}}, "unknown metric 'dispatch_bf16_nvl_gbs'"),
])
def test_a_bad_judge_option_is_named(changes, named):
    with pytest.raises(j.JudgeError, match=named):
        j.check(_spec(**changes))


# ---------------------------------------------------------------------------------------------- through ep_test
JUDGE = {"stage": "intranode", "thresholds": INTRANODE["verify_intranode_thresholds"], "profile": "h200", "gpus": 2}


def _finished_with(output):
    def answer(command, now):
        if "setsid" in command:
            return "started 4242\n"
        if "kill -0" in command:
            return "rc=0 100.0 141.5\n" + output
        return "present\n" + output
    return answer


def test_ep_test_returns_the_record_of_the_run(tmp_path):
    dest = tmp_path / "n1" / "intranode.log"
    result, dummy = _simulated(dict(BASE, fetch_to=str(dest), judge=JUDGE), _finished_with(H200_V1_2GPU),
                               task_vars={"inventory_hostname": "n1"})
    record = result["record"]
    assert record["host"] == "n1" and record["log"] == str(dest) and record["gate"]["passed"]
    assert record["test"] == BASE["script"] and result["seconds"] == 41.5


def test_ep_test_refuses_a_bad_judge_option_before_it_starts_the_test():
    sent = []

    def node(command, now):
        sent.append(command)
        return "started 4242\n"

    with pytest.raises(AnsibleActionFail, match="ep_test: judge: profile 'gcp_h20' names the GPU family h20"):
        _simulated(dict(BASE, judge=dict(JUDGE, profile="gcp_h20")), node)
    with pytest.raises(AnsibleActionFail, match="stage"):
        _simulated(dict(BASE, judge=dict(JUDGE, stage="nope")), node)
    with pytest.raises(AnsibleActionFail, match="judge.record sets stage"):
        _simulated(dict(BASE, judge=dict(JUDGE, record={"stage": "x"})), node)
    assert sent == []


def test_check_mode_judges_nothing():
    result, sent = _simulated(dict(BASE, judge=JUDGE), _node(ends_at=0), check_mode=True)
    assert result["skipped"] and sent == [] and "record" not in result


# ---------------------------------------------------------------------------------------------- the descriptors
def test_every_backend_names_a_test_for_each_scope_it_has_and_a_generation_the_parser_reads():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import GENERATIONS
    for name in backends.BACKENDS:
        descriptor = backends.backend(name)
        assert descriptor["name"] == name and descriptor["generation"] in GENERATIONS
        assert set(descriptor["tests"]) <= set(backends.SCOPES) and descriptor["tests"]
    for alias, name in backends.ALIASES.items():
        assert backends.backend(alias) == backends.backend(name)


def test_the_ep_backend_filter_gives_the_descriptor_and_names_an_unknown_backend():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.deepep.plugins.filter.verify_helpers import FilterModule
    ep_backend = FilterModule().filters()["ep_backend"]
    assert ep_backend("v2")["tests"]["intranode"] == "tests/elastic/test_ep.py" and ep_backend("v2")["jit"]
    assert not ep_backend("deepep_v1")["jit"]
    assert ep_backend("nccl_ep")["tests"]["low_latency_intranode"] == "nccl_ep_bench.py" and not ep_backend("nccl_ep")["jit"]
    with pytest.raises(AnsibleFilterError, match="ep_backend: backend 'mori_ep' is not one the collection runs; "
                                                 "expected one of deepep_v1, deepep_v2, nccl_ep, v1, v2"):
        ep_backend("mori_ep")


def test_the_summary_names_a_provisional_gate_and_the_runs_it_judged():
    measured = j.judge(_spec(), H200_V1_2GPU, 0, False, 900, "tests/test_intranode.py", host="n1", backend="v1")
    guessed = j.judge(_spec(profile="gcp_b300", gpus=8), H200_V1_2GPU, 0, False, 900, "tests/test_intranode.py",
                      host="n2", backend="v1")
    summary = summarize([measured, guessed])
    assert "gate_provisional" not in summary["rows"][0]
    assert summary["rows"][1]["gate_provisional"].startswith("b300: NVLink 5 as the B200's")
    text = render_markdown(summary)
    section = text.split("## Provisional gates (nobody measured them on this hardware or backend)\n\n", 1)[1]
    assert section.startswith("- b300: NVLink 5 as the B200's") and "(n2)" in section.split("\n")[0], text
    assert "## Provisional gates" not in render_markdown(summarize([measured]))


@pytest.mark.parametrize("name,gathered,v2_tests,resolved", [
    ("auto", "v2", False, "deepep_v2"),     # the installed DeepEP's generation wins
    ("auto", "v1", True, "deepep_v1"),
    ("auto", "", True, "deepep_v2"),        # unknown install: the tree's tests decide
    ("auto", None, False, "deepep_v1"),
    ("auto", "v3", False, "deepep_v1"),     # a generation node_stack does not report is ignored
    ("v2", "v1", False, "deepep_v2"),       # a backend named is never second-guessed
])
def test_the_ep_backend_filter_resolves_auto_from_what_the_node_has(name, gathered, v2_tests, resolved):
    from ansible_collections.gpufleet.deepep.plugins.filter.verify_helpers import FilterModule
    ep_backend = FilterModule().filters()["ep_backend"]
    assert ep_backend(name, gathered=gathered, v2_tests=v2_tests)["name"] == resolved
