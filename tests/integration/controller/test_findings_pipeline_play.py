# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight and sglang roles' judging tasks (preflight tasks/judge.yml, sglang tasks/judge.yml) run through
ansible-playbook on localhost over recorded node_stack results: the documents, findings, the preflight report
(summary lines, failures with their fixes, the assert's message) and the SGLang messages read as they did when the
roles built them in Jinja (tests/fixtures/findings_pipeline/golden.json, recorded from those tasks)."""

from __future__ import annotations

import json
import os

from unit_helpers import FIXTURES
from play_helpers import dump_task, run_play

from findings_pipeline_cases import PREFLIGHT_HOSTS, SGLANG_HOSTS

GOLDEN = FIXTURES / "findings_pipeline" / "golden.json"


def _inventory():
    hosts = {}
    for name, host_vars in PREFLIGHT_HOSTS.items():
        hosts[name] = dict(host_vars, ansible_connection="local", gpufleet_case="preflight")
    for name, host_vars in SGLANG_HOSTS.items():
        hosts[name] = dict(host_vars, ansible_connection="local", gpufleet_case="sglang")
    return {"all": {"hosts": hosts}}


def _tasks(out):
    preflight = {"name": "Preflight", "when": "gpufleet_case == 'preflight'", "block": [
        {"name": "Judge", "ansible.builtin.include_role": {"name": "gpufleet.deepep.preflight", "tasks_from": "judge"}},
    ], "rescue": [{"name": "Keep the failure", "ansible.builtin.set_fact": {"case_failed": "{{ ansible_failed_result.msg }}"}}]}
    sglang = {"name": "SGLang", "when": "gpufleet_case == 'sglang'", "block": [
        {"name": "Judge", "ansible.builtin.include_role": {"name": "gpufleet.deepep.sglang", "tasks_from": "judge"},
         "vars": {"ansible_facts": "{{ case_facts }}"}},
    ], "rescue": [{"name": "Keep the failure", "ansible.builtin.set_fact": {"case_failed": "{{ ansible_failed_result.msg }}"}}]}
    result = ("dict(ansible_play_hosts | map('extract', hostvars) | map('dict2items') | map('selectattr', 'key', 'in', "
              "['preflight_document', 'preflight_findings', 'preflight_report', 'sglang_findings', 'case_failed']) "
              "| map('items2dict') | zip(ansible_play_hosts) | map('reverse'))")
    return [preflight, sglang, dump_task(result, out)]


def test_judging_reads_as_recorded(tmp_path):
    out = tmp_path / "out.json"
    output = run_play(tmp_path, _inventory(), _tasks(out))
    got = json.loads(out.read_text())
    if os.environ.get("FINDINGS_GOLDEN_WRITE"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want)
    for host in want:
        for key in want[host]:
            assert got[host].get(key) == want[host][key], (host, key)
    assert "Traceback" not in output
