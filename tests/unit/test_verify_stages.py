# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stages of a node's verification (plugin_utils/_verify/stages.py, filters verify_intranode_stages and
verify_internode_stages): which test runs of which backend the verify roles' one ep_test task makes, in order, with
what, judged how, and which record each becomes; and the refusals of values not of their form. The role's wiring is proven by the verify and build
scenarios (every stage on the simulated fleet) and the GPU suite."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.verify_helpers import verify_internode_stages
from ansible_collections.gpufleet.deepep.plugins.filter.verify_helpers import verify_intranode_stages
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import backend as descriptor
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.stages import RECORDS

SETTINGS = {"script": "", "args": ["--num-tokens", "4096"], "low_latency_args": ["--num-experts", "288"],
            "nccl_ep_args": [], "python": "/opt/torch/.venv/bin/python", "nccl_ep_python": "/opt/nccl/bin/python",
            "thresholds": {"b200": {"dispatch_bf16_nvl_gbps": 400}}, "low_latency_thresholds": {},
            "nccl_ep_thresholds": {}, "low_latency": False, "extras": [], "nccl_ep": False, "nccl_ep_scopes": []}
V2_SCOPES = sorted(descriptor("deepep_v2")["tests"])


def names(stages):
    return [(s["name"], s["backend"], s["scope"], s["record"]) for s in stages]


def test_the_backends_own_test_alone_by_default():
    stages = verify_intranode_stages("deepep_v1", sorted(descriptor("deepep_v1")["tests"]), SETTINGS)
    assert names(stages) == [("intranode", "deepep_v1", "intranode", "main")]
    assert stages[0]["args"] == ["--num-tokens", "4096"] and stages[0]["script"] is None
    assert stages[0]["table_name"] == "verify_intranode_thresholds" and stages[0]["thresholds"] == SETTINGS["thresholds"]
    assert stages[0]["jit"] is True and stages[0]["rdma"] is False


def test_every_stage_in_order_with_what_each_runs_with():
    settings = dict(SETTINGS, script="tests/legacy/test_intranode.py", low_latency=True,
                    extras=["engram", "barrier", "nonesuch"], nccl_ep=True,
                    nccl_ep_scopes=["intranode", "low_latency_intranode"])
    stages = verify_intranode_stages("deepep_v2", V2_SCOPES, settings)
    assert names(stages) == [
        ("intranode", "deepep_v2", "intranode", "main"),
        ("low_latency", "deepep_v2", "low_latency_intranode", "low_latency"),
        ("engram", "deepep_v2", "engram", "extras"),
        ("barrier", "deepep_v2", "barrier", "extras"),
        ("nccl_ep_intranode", "nccl_ep", "intranode", "nccl_ep"),
        ("nccl_ep_low_latency_intranode", "nccl_ep", "low_latency_intranode", "nccl_ep"),
    ]
    by_name = {s["name"]: s for s in stages}
    assert by_name["intranode"]["script"] == "tests/legacy/test_intranode.py"
    assert by_name["low_latency"]["args"] == ["--num-experts", "288"]
    assert by_name["low_latency"]["table_name"] == "verify_intranode_low_latency_thresholds"
    # The other tests are not gated on bandwidth, get no extra arguments and are told whether the node has a NIC.
    assert by_name["engram"]["table_name"] is None and by_name["engram"]["args"] == [] and by_name["engram"]["rdma"]
    # NCCL EP runs in its own interpreter, under its own gates, without DeepEP V2's JIT cache.
    nccl = by_name["nccl_ep_intranode"]
    assert nccl["python"] == "/opt/nccl/bin/python" and nccl["jit"] is False
    assert nccl["table_name"] == "verify_intranode_nccl_ep_thresholds"
    assert {s["record"] for s in stages} == set(RECORDS)


def test_a_backend_without_the_other_tests_runs_none_of_them():
    stages = verify_intranode_stages("deepep_v1", sorted(descriptor("deepep_v1")["tests"]),
                                     dict(SETTINGS, extras=["engram", "pp", "agrs", "barrier"]))
    assert [s["name"] for s in stages] == ["intranode"]


@pytest.mark.parametrize("backend,scopes,settings,named", [
    ("", V2_SCOPES, SETTINGS, "backend ''"),
    (None, V2_SCOPES, SETTINGS, "backend None"),
    ("deepep_v2", "intranode", SETTINGS, "scopes 'intranode'"),
    ("deepep_v2", V2_SCOPES, {k: v for k, v in SETTINGS.items() if k != "nccl_ep_python"}, "settings lack nccl_ep_python"),
    ("deepep_v2", V2_SCOPES, None, "settings lack script"),
    ("deepep_v2", V2_SCOPES, dict(SETTINGS, extras="engram"), "settings.extras 'engram'"),
    ("deepep_v2", V2_SCOPES, dict(SETTINGS, low_latency="yes"), "settings.low_latency 'yes': expected true or false"),
])
def test_values_not_of_their_form_are_refused_by_name(backend, scopes, settings, named):
    with pytest.raises(AnsibleFilterError, match="verify_intranode_stages") as raised:
        verify_intranode_stages(backend, scopes, settings)
    assert named in str(raised.value)


# --- across nodes (verify_internode) -------------------------------------------------------------------------------
JUDGE = {"thresholds": {"b200": {"dispatch_bf16_rdma_gbps": 40}}, "table_name": "verify_internode_thresholds",
         "profile": "gcp_b200", "family": "b200", "fabric": "roce", "transport_policies": None}
GROUP = {"backend": "v1", "script": "", "args": ["--num-tokens", "2048"], "low_latency_args": ["--num-experts", "288"],
         "nccl_ep_args": ["--mode", "ht"], "python": "/opt/deepep/venv/bin/python", "nccl_ep_python": "/opt/nccl/python",
         "judge": JUDGE,
         "scaleup_judge": {"thresholds": {"gb200": {}}, "table_name": "verify_internode_scaleup_thresholds"},
         "low_latency_judge": {"thresholds": {"b200": {}}, "table_name": "verify_internode_low_latency_thresholds"},
         "nccl_ep_thresholds": {"h200": {}}, "low_latency": False, "nccl_ep": False,
         "nccl_ep_scopes": ["internode", "low_latency_internode"], "nic_check": True}


def test_a_group_runs_its_internode_test_alone_by_default_with_the_nic_traffic_judged():
    (stage,) = verify_internode_stages("internode", GROUP)
    assert (stage["name"], stage["backend"], stage["scope"], stage["record"]) == ("internode", "v1", "internode", "main")
    assert stage["nics"] and stage["script"] is None and stage["args"] == ["--num-tokens", "2048"]
    assert stage["judge"] == dict(JUDGE, stage="internode")
    (stage,) = verify_internode_stages("internode", dict(GROUP, nic_check=False, script="tests/test_internode.py"))
    assert not stage["nics"] and stage["script"] == "tests/test_internode.py"


def test_every_stage_of_a_group_in_order_each_judged_against_its_own_gates():
    stages = verify_internode_stages("internode", dict(GROUP, low_latency=True, nccl_ep=True))
    assert names(stages) == [
        ("internode", "v1", "internode", "main"),
        ("low_latency", "v1", "low_latency_internode", "low_latency"),
        ("nccl_ep_internode", "nccl_ep", "internode", "nccl_ep"),
        ("nccl_ep_low_latency_internode", "nccl_ep", "low_latency_internode", "nccl_ep"),
    ]
    by_name = {s["name"]: s for s in stages}
    # only the group's own test is read on the NICs; the others keep the base judge with their gates and stage
    assert [s["nics"] for s in stages] == [True, False, False, False]
    ll = by_name["low_latency"]
    assert ll["args"] == ["--num-experts", "288"] and ll["judge"]["table_name"] == "verify_internode_low_latency_thresholds"
    assert ll["judge"]["stage"] == "low_latency_internode" and ll["judge"]["fabric"] == "roce"
    nccl = by_name["nccl_ep_low_latency_internode"]
    assert nccl["python"] == "/opt/nccl/python" and nccl["args"] == ["--mode", "ht"]
    assert nccl["judge"] == dict(JUDGE, thresholds={"h200": {}}, table_name="verify_internode_nccl_ep_thresholds",
                                 stage="low_latency_internode")
    assert GROUP["judge"] == JUDGE and "stage" not in JUDGE   # the role's values are not changed


def test_an_nvlink_domain_runs_its_scale_up_test_alone_without_the_site_script_or_the_nics():
    stages = verify_internode_stages("scaleup", dict(GROUP, low_latency=True, nccl_ep=True,
                                                     script="tests/test_internode.py"))
    assert names(stages) == [("scaleup", "v1", "scaleup", "main")]
    (stage,) = stages
    assert stage["script"] is None and not stage["nics"]
    assert stage["judge"]["table_name"] == "verify_internode_scaleup_thresholds" and stage["judge"]["stage"] == "scaleup"


@pytest.mark.parametrize("scope,settings,named", [
    ("intranode", GROUP, "scope 'intranode': expected the group's scope, one of internode, scaleup"),
    (None, GROUP, "scope None"),
    ("internode", {k: v for k, v in GROUP.items() if k != "nic_check"}, "settings lack nic_check"),
    ("internode", dict(GROUP, nic_check="yes"), "settings.nic_check 'yes': expected true or false"),
    ("internode", dict(GROUP, nccl_ep_scopes="internode"), "settings.nccl_ep_scopes 'internode'"),
    ("internode", dict(GROUP, judge=None), "settings.judge None: expected a mapping of ep_test's judge options"),
    ("internode", dict(GROUP, backend=""), "settings.backend ''"),
])
def test_group_values_not_of_their_form_are_refused_by_name(scope, settings, named):
    with pytest.raises(AnsibleFilterError, match="verify_internode_stages") as raised:
        verify_internode_stages(scope, settings)
    assert named in str(raised.value)
