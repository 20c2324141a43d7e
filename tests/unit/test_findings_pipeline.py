# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugin_utils/_audit/pipeline.py and the findings_pipeline filter: the preflight and sglang facts documents, their
findings, the severity cut-off and the preflight report give what the roles' Jinja gave for the same facts
(tests/fixtures/findings_pipeline/golden.json, recorded from the roles before the documents moved to Python; the play
test tests/integration/controller/test_findings_pipeline_play.py runs the roles' tasks against it)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from unit_helpers import FIXTURES, REPO
from findings_pipeline_cases import PREFLIGHT_HOSTS, SGLANG_HOSTS

from ansible_collections.gpufleet.deepep.plugins.filter.findings_pipeline import FilterModule
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import SEVERITIES, evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.pipeline import (
    CONTEXTS,
    at_or_above,
    preflight_document,
    preflight_report,
    run_pipeline,
    sglang_document,
)

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
GOLDEN = json.loads((FIXTURES / "findings_pipeline" / "golden.json").read_text())
FILTER = FilterModule().filters()["findings_pipeline"]


def preflight_settings(host):
    """The role's settings of ``host`` as its defaults resolve them (read back from the recorded document)."""
    expect = GOLDEN[host]["preflight_document"]["expect"]
    names = ("min_gpus", "driver_min_version", "cuda_arch", "cuda_version", "cuda_home", "cuda_by_play", "pip_by_play",
             "python", "require_rdma", "min_active_rdma", "required_modules", "optional_modules", "require_mlx5dv",
             "mlx5dv_by_play", "mlx5dv_header", "mlx5dv_symbol", "nvshmem_version", "libcuda_dirs", "deepep_v2",
             "deepep_internode", "fabric", "nccl_version", "gpu_family", "host_arch")
    return dict(((name, expect[name]) for name in names), deepep_v2_nic_name="auto", env_script_by_play=True,
                deepep_commit="", nvshmem_source=True)


def sglang_settings(host):
    host_vars = SGLANG_HOSTS[host]
    return {"stage": host_vars["sglang_judge_stage"], "server": host_vars["sglang_server"],
            "transfer_engine": host_vars["sglang_transfer_engine"], "mooncake_dmabuf": False,
            "use_bundled_deepep": False}


@pytest.mark.parametrize("host", sorted(PREFLIGHT_HOSTS))
def test_preflight_reads_as_the_role_read(host):
    judged = run_pipeline(PREFLIGHT_HOSTS[host]["preflight_node"], CATALOGUE, "preflight", host,
                          preflight_settings(host), profile="b200_roce")
    assert judged["document"] == GOLDEN[host]["preflight_document"]
    assert judged["findings"] == GOLDEN[host]["preflight_findings"]
    assert judged["report"] == GOLDEN[host]["preflight_report"]


def test_a_failing_check_is_a_failure_with_its_fix():
    judged = run_pipeline(PREFLIGHT_HOSTS["pf-failing"]["preflight_node"], CATALOGUE, "preflight", "pf-failing",
                          preflight_settings("pf-failing"), profile="b200_roce")
    gpu = ("GPUs: found 2, need at least 8. Fix: check that the GPUs are seated and visible (lspci -d 10de:), and "
           "that nvidia-smi lists them.")
    assert gpu in judged["report"]["failures"] and "FAIL: " + gpu in judged["report"]["summary"]
    assert [f["id"] for f in judged["failing"]] == [f["id"] for f in judged["findings"]]
    # The role's assert message: the failures, then the summary.
    assert GOLDEN["pf-failing"]["case_failed"] == (["Pre-flight checks failed on pf-failing:"]
                                                   + judged["report"]["failures"] + judged["report"]["summary"])


def test_notes_are_not_failures():
    judged = run_pipeline(PREFLIGHT_HOSTS["pf-to-install"]["preflight_node"], CATALOGUE, "preflight",
                          "pf-to-install", preflight_settings("pf-to-install"), profile="b200_roce")
    assert judged["report"]["failures"] == [] and judged["failing"] == []
    assert len(judged["report"]["notes"]) == 6
    assert judged["report"]["libcuda_so"] == [] and judged["report"]["libcuda_so1"] == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1"]


def test_the_toolkits_stubs_count_once_it_is_there():
    node = PREFLIGHT_HOSTS["pf-failing"]["preflight_node"]
    document = preflight_document(node, "pf-failing", preflight_settings("pf-failing"))
    assert [f["path"] for f in document["libcuda_found"]] == ["/usr/local/cuda-13.0/lib64/stubs/libcuda.so"]
    report = preflight_report(document, [])
    assert report["summary"][0] == "profile - | kernel ?" and report["failures"] == report["notes"] == []


@pytest.mark.parametrize("host", sorted(SGLANG_HOSTS))
def test_sglang_reads_as_the_role_read(host):
    fail_on = SGLANG_HOSTS[host].get("sglang_fail_on", "critical")
    judged = run_pipeline(SGLANG_HOSTS[host]["case_facts"], CATALOGUE, "sglang", host, sglang_settings(host),
                          groups=["ungrouped"], fail_on=fail_on)
    assert judged["findings"] == GOLDEN[host]["sglang_findings"]
    assert bool(judged["failing"]) == ("case_failed" in GOLDEN[host])
    assert "report" not in judged


def test_sglang_judges_its_facts_only_once_installed():
    facts = SGLANG_HOSTS["sg-bad"]["case_facts"]
    installed = sglang_document(facts, "h", ["g"], sglang_settings("sg-bad"))
    before = sglang_document(facts, "h", ["g"], dict(sglang_settings("sg-bad"), stage="preflight"))
    assert installed["gpufleet_sglang"] == facts["gpufleet_sglang"] and before["gpufleet_sglang"] is None
    assert installed["expect"]["sglang"]["transfer_engine"] == "nixl"
    assert installed["expect"]["sglang"]["enable_dp_attention"] is False


def test_contexts_are_data():
    assert set(CONTEXTS) == {"preflight", "sglang"}
    sglang = run_pipeline(SGLANG_HOSTS["sg-bad"]["case_facts"], CATALOGUE, "sglang", "h", sglang_settings("sg-bad"))
    everything = evaluate_rules(sglang["document"], CATALOGUE)
    assert sglang["findings"] == [f for f in everything if f["id"].startswith("SGLANG_")]


FINDINGS = [{"id": "A", "severity": "info"}, {"id": "B", "severity": "critical"}, {"id": "C", "severity": "warning"}]


@pytest.mark.parametrize("fail_on,ids", [("critical", ["B"]), ("warning", ["B", "C"]), ("info", ["A", "B", "C"]),
                                         ("none", [])])
def test_one_severity_cut_off(fail_on, ids):
    assert [f["id"] for f in at_or_above(FINDINGS, fail_on)] == ids
    assert SEVERITIES == ("critical", "warning", "info")


@pytest.mark.parametrize("args,kwargs,text", [
    (("nonsense", CATALOGUE, "preflight", "h", {}), {}, "node (the registered node_stack result): expected a mapping"),
    ((SGLANG_HOSTS["sg-bad"]["case_facts"], CATALOGUE, "audit", "h", {}), {}, "context 'audit' is not one of"),
    ((SGLANG_HOSTS["sg-bad"]["case_facts"], CATALOGUE, "sglang", "h", {"stage": "installed"}), {},
     "settings: missing server, transfer_engine"),
    ((SGLANG_HOSTS["sg-bad"]["case_facts"], CATALOGUE, "sglang", "h", dict(sglang_settings("sg-bad"), stage="x")), {},
     "settings.stage: 'x' is not preflight or installed"),
    ((SGLANG_HOSTS["sg-bad"]["case_facts"], CATALOGUE, "sglang", "h", sglang_settings("sg-bad")),
     {"fail_on": "fatal"}, "fail_on 'fatal' is not one of critical, warning, info, none"),
    ((SGLANG_HOSTS["sg-bad"]["case_facts"], 42, "sglang", "h", sglang_settings("sg-bad")), {},
     "rules: expected a catalogue"),
])
def test_bad_input_is_named(args, kwargs, text):
    with pytest.raises(AnsibleFilterError, match="^findings_pipeline: ") as err:
        FILTER(*args, **kwargs)
    assert text in str(err.value)


def test_a_bad_setting_is_named():
    settings = dict(preflight_settings("pf-healthy"), min_gpus="eight")
    with pytest.raises(AuditError, match="settings.min_gpus: 'eight' is not a whole number"):
        preflight_document(PREFLIGHT_HOSTS["pf-healthy"]["preflight_node"], "h", settings)
    node = copy.deepcopy(PREFLIGHT_HOSTS["pf-healthy"]["preflight_node"])
    node["ansible_facts"]["gpufleet_symbols"]["/usr/include/infiniband/mlx5_api.h"] = {"present": "yes"}
    with pytest.raises(AnsibleFilterError, match=r"gpufleet_symbols\['/usr/include/infiniband/mlx5_api.h'\]"):
        FILTER(node, CATALOGUE, "preflight", "h", preflight_settings("pf-healthy"))
