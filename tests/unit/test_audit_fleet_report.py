# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's controller step (action gpufleet.deepep.audit_fleet_report) in a real ansible-playbook run on
localhost: registered node_stack results of three inventory hosts (healthy, rocep names, unreachable) become the
report files, with findings, drift and summary; --check writes the report too and says so."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())
RULES = REPO / "roles" / "audit" / "files" / "rules.yml"


def node_stack_result(doc):
    """The registered node_stack result that carries the facts of a facts document."""
    facts = dict((name, copy.deepcopy(doc[name])) for name in
                 ("gpufleet_nvidia", "gpufleet_rdma", "gpufleet_gpus", "gpufleet_bundled_nvshmem", "gpufleet_stack"))
    facts["gpufleet_stack"]["nvshmem"] = copy.deepcopy(doc["gpufleet_nvshmem"])
    facts["gpufleet_stack"]["deepep"] = copy.deepcopy(doc["gpufleet_deepep"])
    return {"changed": False, "gather_errors": {}, "ansible_facts": facts}


@pytest.fixture
def play(tmp_path):
    good = node_stack_result(HEALTHY)
    rocep = node_stack_result(HEALTHY)
    for n, device in enumerate(rocep["ansible_facts"]["gpufleet_rdma"]["devices"]):
        device["name"] = "rocep%ds0" % (145 + n)
    rocep["ansible_facts"]["gpufleet_rdma"]["hca_prefix"] = "rocep"
    results = tmp_path / "results"
    results.mkdir()
    for host, result in (("n1", good), ("n2", rocep), ("n3", good),
                         ("ghost", {"unreachable": True, "changed": False, "msg": "connect to port 1: refused"})):
        (results / ("%s.json" % host)).write_text(json.dumps(result))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": {
        "cluster": {"hosts": {"n1": None, "n2": None, "n3": None, "ghost": None},
                    "vars": {"expected_prefix": "mlx5"}}}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Report registered results", "hosts": "cluster", "gather_facts": False,
        "tasks": [
            {"name": "Registered result", "ansible.builtin.set_fact": {
                "audit_r_node": "{{ lookup('ansible.builtin.file', '%s/' ~ inventory_hostname ~ '.json') | from_json }}"
                                % results,
                "audit_expect": {"hca_prefix": "{{ expected_prefix }}"}}},
            {"name": "Report", "gpufleet.deepep.audit_fleet_report": {
                "rules_file": str(RULES), "output_dir": "{{ out }}", "meta": {"limit": "cluster"}},
             "run_once": True, "delegate_to": "localhost", "register": "report"},
            {"name": "Keep the result",
             "ansible.builtin.copy": {"content": "{{ report | to_json }}", "dest": "{{ out }}.result.json",
                                      "mode": "0644"},
             "run_once": True, "delegate_to": "localhost", "check_mode": False},
        ]}], sort_keys=False))

    def run(out, *extra):
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                   ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
                   PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
        proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(playbook),
                               "-e", "out=%s" % out] + list(extra),
                              cwd=REPO, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return json.loads((tmp_path / ("%s.result.json" % os.path.basename(str(out)))).read_text())

    return run


def test_report_from_registered_results(play, tmp_path):
    out = tmp_path / "run"
    result = play(out)
    assert result["changed"] is True
    assert result["run_dir"] == str(out.resolve())
    assert sorted(os.path.basename(f) for f in result["files"]) == ["fleet.html", "fleet.json", "fleet.md"]
    assert result["summary"]["nodes"] == 4 and result["summary"]["unreachable"] == 1
    assert result["status"]["ghost"] == "unreachable"
    assert result["status"]["n2"] == "critical"

    fleet = json.loads((out / "fleet.json").read_text())
    assert fleet["meta"]["check_mode"] is False and fleet["meta"]["limit"] == "cluster"
    assert [f["id"] for f in fleet["nodes"]["n2"]["findings"]] == ["HCA_PREFIX_MISMATCH"]
    assert fleet["nodes"]["n1"]["findings"] == [] and fleet["nodes"]["n1"]["facts"]["expect"] == {"hca_prefix": "mlx5"}
    assert "refused" in fleet["nodes"]["ghost"]["facts"]["unreachable_reason"]
    drift = dict((row["fact"], row) for row in fleet["drift"])
    assert drift["hca_prefix"]["values"][-1]["nodes"] == ["n2"]
    assert sorted(drift["hca_prefix"]["values"][0]["nodes"]) == ["n1", "n3"]
    assert "HCA_PREFIX_MISMATCH" in (out / "fleet.md").read_text()
    assert "HCA_PREFIX_MISMATCH" in (out / "fleet.html").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["fleet.html", "fleet.json", "fleet.md"]


def test_check_mode_writes_the_report_and_says_so(play, tmp_path):
    out = tmp_path / "check"
    play(out, "--check")
    assert json.loads((out / "fleet.json").read_text())["meta"]["check_mode"] is True


def test_sglang_facts_reach_the_rules(tmp_path):
    """A node the audit read SGLang on is judged by the SGLANG_* rules; a node where SGLang was not read is not.
    The audit role's one node_stack call gathered ``sglang`` (its gpufleet_sglang in the node_stack result)."""
    sglang_doc = json.loads(json.dumps(__import__("test_sglang_rules").GOOD))
    node = node_stack_result(HEALTHY)
    results = tmp_path / "results"
    results.mkdir()
    (results / "node.json").write_text(json.dumps(node))
    # The DeepEP of HEALTHY was built against NCCL 2.27.3 (fixture); SGLang holds 2.28.3: the warning fires.
    with_sglang = copy.deepcopy(node)
    with_sglang["ansible_facts"]["gpufleet_sglang"] = sglang_doc["gpufleet_sglang"]
    (results / "node_sglang.json").write_text(json.dumps(with_sglang))
    registered = {
        "audit_r_node": "{{ lookup('ansible.builtin.file', '%s/' ~ ('node_sglang.json' if inventory_hostname == "
                        "'s1' else 'node.json')) | from_json }}" % results}
    (results / "model.json").write_text(json.dumps({"changed": False, "ansible_facts": {
        "gpufleet_model": dict(sglang_doc["gpufleet_model"], num_attention_heads=9)}}))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": {
        "cluster": {"hosts": {"s1": None, "s2": None}}}}}))
    expect = dict(sglang_doc["expect"]["sglang"], tp=2)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Report registered results", "hosts": "cluster", "gather_facts": False,
        "tasks": [
            {"name": "Registered results", "ansible.builtin.set_fact": dict(registered, **{
                "audit_r_model": "{{ (lookup('ansible.builtin.file', '%s/model.json') | from_json)"
                                 " if inventory_hostname == 's1' else {'skipped': true, 'changed': false} }}" % results,
                "audit_expect": {"hca_prefix": "mlx5", "sglang": "{{ %s if inventory_hostname == 's1' else none }}"
                                 % json.dumps(expect)}})},
            {"name": "Report", "gpufleet.deepep.audit_fleet_report": {
                "rules_file": str(RULES), "output_dir": str(tmp_path / "run")},
             "run_once": True, "delegate_to": "localhost"},
        ]}], sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fleet = json.loads((tmp_path / "run" / "fleet.json").read_text())
    s1 = {f["id"]: f for f in fleet["nodes"]["s1"]["findings"]}
    assert set(s1) == {"SGLANG_ATTENTION_TP_HEADS", "SGLANG_NCCL_NOT_DEEPEP_BUILD"}, sorted(s1)
    assert s1["SGLANG_NCCL_NOT_DEEPEP_BUILD"]["severity"] == "warning"
    assert s1["SGLANG_NCCL_NOT_DEEPEP_BUILD"]["evidence"]["sglang_env"] == "2.28.3"
    assert fleet["nodes"]["s2"]["findings"] == []
    assert fleet["nodes"]["s2"]["facts"]["gpufleet_sglang"] is None
    assert fleet["nodes"]["s1"]["facts"]["gpufleet_sglang"] == sglang_doc["gpufleet_sglang"]
    assert fleet["nodes"]["s1"]["facts"]["gather_errors"] == {}
    assert "SGLANG_NCCL_NOT_DEEPEP_BUILD" in (tmp_path / "run" / "fleet.md").read_text()
