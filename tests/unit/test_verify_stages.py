# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stages of a node's verification (plugin_utils/_verify/stages.py, filter verify_intranode_stages): which test
runs of which backend verify_intranode's one ep_test task makes, in order, with what, and which record each
becomes; and the refusals of values not of their form. The role's wiring is proven by the verify and build
scenarios (every stage on the simulated fleet) and the GPU suite."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

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
