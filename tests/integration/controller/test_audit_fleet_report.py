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
import sys

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
                "rules_file": str(RULES), "output_dir": "{{ out }}", "meta": {"limit": "cluster"},
                "verify_summary": "{{ verify_summary | default(omit) }}", "fail_on": "{{ fail_on | default(omit) }}"},
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
    assert result["failing"] == []   # fail_on none by default: the cut-off is the caller's

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


def _verify_summary_file(tmp_path):
    """A verification summary as playbooks/verify.yml writes it: n1 passes, n2 passed its bandwidth over Socket."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.summary import summarize
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import transport_verdict

    policy = {"allow_networks": ["IB"], "require_ibgda": True}
    ibgda = ["h:1:1 [0] NVSHMEM INFO NVSHMEM_IBGDA_NIC_HANDLER: auto", "/src/ibgda.cpp 1 NIC handler will be GPU.",
             "h:1:1 [0] NVSHMEM INFO Successfully initialized the transport: IBGDA. It will be used for device-side "
             "APIs over IB.", "h:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9"]
    parsed = {"test": "tests/test_internode.py", "generation": "v1", "cases": {"passed": 24, "failed": 0},
              "dispatch": {"bf16": {"rdma_gbps": 58.1, "nvl_gbps": 190.0}}, "combine": {"rdma_gbps": 57.0}}
    thresholds = {"dispatch_bf16_rdma_gbps": 35, "combine_rdma_gbps": 35}
    records = [
        {"host": "n1", "scope": "n1 (rank 0 of g)", "stage": "internode", "parsed": parsed,
         "gate": {"passed": True, "reasons": []}, "thresholds": thresholds,
         "transport": transport_verdict(ibgda + ["h:1:1 [0] NCCL INFO Using network IB"], policy)},
        {"host": "n2", "scope": "n2 (rank 1 of g)", "stage": "internode", "parsed": parsed,
         "gate": {"passed": True, "reasons": []}, "thresholds": thresholds,
         "transport": transport_verdict(ibgda + ["h:1:1 [0] NCCL INFO NET/IB : No device found.",
                                                 "h:1:1 [0] NCCL INFO Using network Socket"], policy)},
        {"host": "elsewhere", "stage": "intranode", "parsed": {}, "gate": {"passed": True}},
    ]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summarize(records)))
    return path


@pytest.mark.parametrize("fail_on, failing", [("critical", ["n2"]), ("info", ["n2"]), ("none", [])])
def test_failing_lists_the_reachable_nodes_at_or_above_the_cut_off(play, tmp_path, fail_on, failing):
    """The audit's one severity order (the same as preflight's and sglang's): an unreachable node is reported, never
    listed as failing."""
    result = play(tmp_path / "run", "-e", "fail_on=%s" % fail_on)
    assert result["failing"] == failing and result["status"]["ghost"] == "unreachable"


def test_report_shows_the_last_verification_beside_the_gates_and_the_transport(play, tmp_path):
    out = tmp_path / "with-verify"
    play(out, "-e", "verify_summary=%s" % _verify_summary_file(tmp_path))
    fleet = json.loads((out / "fleet.json").read_text())
    assert fleet["verification"]["passed"] is False and fleet["verification"]["other_hosts"] == ["elsewhere"]
    assert [r["transport"]["passed"] for r in fleet["nodes"]["n2"]["verify"]] == [False]
    assert "verify" not in fleet["nodes"]["n3"]
    md = (out / "fleet.md").read_text()
    assert "## Verification" in md and "Verified but not in this audit: elsewhere." in md
    assert ("| internode | n1 (rank 0 of g) | BF16 disp NVL 190; BF16 disp RDMA 58.1 (gate >=35); comb RDMA 57 (gate >=35) "
            "| ok: NVSHMEM ibgda, IBGDA initialized, NIC handler gpu; NCCL 2.27.5 net IB | PASS |") in md
    assert "NOT ALLOWED: NVSHMEM ibgda, IBGDA initialized, NIC handler gpu; NCCL 2.27.5 net Socket" in md
    assert "- n2 (rank 1 of g) (internode): transport: NCCL used network Socket; the profile allows IB" in md
    page = (out / "fleet.html").read_text()
    assert "<h4>Last verification</h4>" in page and "&ge; 35" in page and "not allowed" in page


@pytest.mark.parametrize("content, named", [
    (None, "cannot be read as a JSON object (missing, unreadable or malformed)"),
    ("{not json", "cannot be read as a JSON object"),
    ("[1, 2]", "cannot be read as a JSON object"),
    ('{"rows": {"n1": 1}}', "expected the summary.json a verification run wrote"),
    ('{"rows": [{"host": "n1"}]}', "rows[0] must be a mapping with host (a name) and passed (true/false)"),
])
def test_a_bad_verify_summary_is_refused_naming_the_option_and_nothing_is_written(tmp_path, content, named):
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "refused"
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"gpufleet.deepep.audit_fleet_report": {"rules_file": str(RULES), "output_dir": str(out), "hosts": [],
                                                "verify_summary": str(path)}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(playbook)], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "verify_summary" in proc.stdout and named in proc.stdout, proc.stdout[-2000:]
    assert str(path) in proc.stdout
    assert not out.exists()


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
    # The served model's config.json is read in the same node_stack call (set model) on s1 only.
    with_sglang["ansible_facts"]["gpufleet_model"] = dict(sglang_doc["gpufleet_model"], num_attention_heads=9)
    (results / "node_sglang.json").write_text(json.dumps(with_sglang))
    registered = {
        "audit_r_node": "{{ lookup('ansible.builtin.file', '%s/' ~ ('node_sglang.json' if inventory_hostname == "
                        "'s1' else 'node.json')) | from_json }}" % results}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": {
        "cluster": {"hosts": {"s1": None, "s2": None}}}}}))
    expect = dict(sglang_doc["expect"]["sglang"], tp=2)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Report registered results", "hosts": "cluster", "gather_facts": False,
        "tasks": [
            {"name": "Registered results", "ansible.builtin.set_fact": dict(registered, **{
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


def test_a_run_directory_that_cannot_be_a_directory_is_refused_naming_the_option_and_the_path(tmp_path):
    """A file as output_dir, a file above it, a dangling link as output_dir or above it, a file as output_root: each
    is refused naming the option and the path (never ``[Errno 17] File exists``), and nothing is written."""
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n")
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "dangling"))
    os.symlink(str(afile), str(tmp_path / "tofile"))
    cases = {
        "file": ("output_dir", str(afile), "output_dir %s is a file, not a directory" % afile),
        "under_file": ("output_dir", str(afile / "run"),
                       "output_dir %s: %s is a file, not a directory, so nothing can be created below it"
                       % (afile / "run", afile)),
        "under_link_to_file": ("output_dir", str(tmp_path / "tofile" / "run"),
                               "%s is a symbolic link to %s, not a directory" % (tmp_path / "tofile", afile)),
        "dangling": ("output_dir", str(tmp_path / "dangling"), "is a symlink"),
        "under_dangling": ("output_dir", str(tmp_path / "dangling" / "run"), "is a dangling symlink"),
        "root_file": ("output_root", str(afile), "output_root %s is a file, not a directory" % afile),
    }
    tasks = []
    for name, (option, path, dummy) in cases.items():
        tasks.append({"name": name, "gpufleet.deepep.audit_fleet_report": {"rules_file": str(RULES), "hosts": [],
                                                                           option: path},
                      "register": "r_" + name, "ignore_errors": True})
    tasks.append({"ansible.builtin.copy": {
        "content": "{{ {%s} | to_json }}" % ", ".join("'%s': r_%s" % (name, name) for name in cases),
        "dest": str(tmp_path / "results.json"), "mode": "0644"}})
    playbook = tmp_path / "p.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"),
               PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    for name, (option, path, named) in cases.items():
        result = results[name]
        assert result.get("failed"), (name, result)
        msg = result["msg"]
        assert option in msg and path in msg and named in msg, (name, msg)
        assert "Errno" not in msg and "Traceback" not in msg and "unexpected" not in msg, (name, msg)
    assert afile.read_text() == "not a directory\n"
    assert sorted(os.listdir(tmp_path)) == ["afile", "dangling", "p.yml", "results.json", "tofile"]
