# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.site_plan through ansible-playbook on two local hosts over a copy of the collection's layout
(site.yml's directory, plugins, the phase roles): the key, the lanes and their groups, the reasons printed, the
reboot throttle of a steady node, the fast flag and --tags, the record and the report. The decisions alone are
unit-tested in tests/unit/test_site_plan_action.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._site_plan import content_hash
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan as sp

KEY = "a" * 64


# ------------------------------------------------------------------------------------------ through a play
PHASES = list(sp.PHASES)


@pytest.fixture
def site(tmp_path):
    """A copy of the layout site.yml keys (site.yml's directory, plugins, the reboot, image and phase roles, the rules), a
    two-host local inventory, and a runner of the plan, record or report on them."""
    root = tmp_path / "collection"
    for part in ["plugins", "roles/reboot", "roles/build_once", "roles/audit/files", "roles/image"] + ["roles/" + p for p in PHASES]:
        (root / part).mkdir(parents=True, exist_ok=True)
        (root / part / "main.yml").write_text("--- # %s\n" % part)
    (root / "roles/audit/files/rules.yml").write_text("rules: []\n")
    watched = tmp_path / "unified-env.sh"
    watched.write_text("export A=1\n")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "deepep_ref": "v1", "nccl_version": "{{ '2.' ~ 30 }}", "gpufleet_serial": 2,
                 "deepep_site_watch": [str(watched)]},
        "hosts": {"n1": None, "n2": None}}}))
    (root / "playbooks").mkdir()
    book = root / "playbooks" / "site.yml"
    out = tmp_path / "out.json"

    # One playbook for every run (site.yml's content is part of the key): the states to run and the host to record
    # come as extra variables, which no key covers.
    tasks = []
    for name in ("plan", "record", "report"):
        args = {"state": name, "stamp": str(tmp_path) + "/{{ inventory_hostname }}.json"}
        if name == "plan":
            args.update(fast="{{ gpufleet_site_fast | default(true) }}", reboot_throttle=3, serial="{{ gpufleet_serial }}",
                        image_manifest="{{ image_manifest_of[inventory_hostname] | default(omit) }}")
        if name == "report":
            args = {"state": "report"}
        task = {"name": "Site " + name, "gpufleet.deepep.site_plan": args, "register": "site_" + name,
                "when": ["'%s' in site_states" % name], "tags": ["always"]}
        if name == "plan":  # as site.yml: joining the lane's group is not a change (ansible-core marks it one)
            task["changed_when"] = False
        if name == "record":
            task["when"].append("record_on in ['all', inventory_hostname]")
        if name == "report":
            task["run_once"] = True
        tasks.append(task)
    tasks.append({"name": "Dump", "ansible.builtin.copy": {
        # Per host: the registered site_* results and the gpufleet_site_* facts the plan set (read from ansible_facts,
        # where facts live whether or not inject_facts_as_vars also copies them to top-level variables).
        "dest": str(out), "content": "{{ {'hosts': dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', "
                                     "hostvars) | map('dict2items') | map('selectattr', 'key', 'match', '^site_') "
                                     "| map('items2dict') | zip(ansible_play_hosts | map('extract', hostvars, "
                                     "'ansible_facts') | map('dict2items') | map('selectattr', 'key', 'match', "
                                     "'^gpufleet_site_') | map('items2dict')) | map('combine'))), "
                                     "'groups': groups} | to_json }}"},
                  "delegate_to": "localhost", "run_once": True, "check_mode": False, "tags": ["always"]})
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))

    def run(*extra, states=("plan",), record_on="all", manifests=None, rc=0, env=None):
        extra = extra + ("-e", json.dumps({"site_states": list(states), "record_on": record_on,
                                           "image_manifest_of": manifests or {}}))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                   ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"),
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", **(env or {}))
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(book),
                               *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300, check=False)
        assert proc.returncode == rc, proc.stdout[-4000:]
        assert "Traceback" not in proc.stdout
        return (json.loads(out.read_text()) if out.exists() else {}), proc.stdout

    run.root, run.watched = root, watched
    return run


def _paths(root):
    return sp.content_paths(str(root / "playbooks"))


def test_a_new_node_changes_and_is_keyed_on_its_settings_and_the_content(site):
    result, output = site()
    plans = {h: v["site_plan"] for h, v in result["hosts"].items()}
    assert {h: p["lane"] for h, p in plans.items()} == {"n1": "changing", "n2": "changing"}
    assert sorted(result["groups"]["gpufleet_site_changing"]) == ["n1", "n2"]
    assert "gpufleet_site_intact" not in result["groups"] and "gpufleet_site_steady" not in result["groups"]
    # The settings (templated, sorted by name; the play's own gpufleet_serial left out) and the content.
    expected = sp.settings_key(["v1", [str(site.watched)], "2.30"], content_hash(_paths(site.root)))
    assert plans["n1"]["key"] == plans["n2"]["key"] == expected
    assert plans["n1"]["serial"] == [2] and plans["n1"]["changed"] is False
    facts = result["hosts"]["n1"]
    assert facts["gpufleet_site_key"] == expected and facts["gpufleet_site_lane"] == "changing"
    assert facts["gpufleet_site_reboot_throttle"] == 3 and facts["gpufleet_site_converged"] is False
    assert output.count("changing: no converged stamp at ") == 2, output
    # A new node is asked whether it was born from a golden image, in the same task: no manifest, not image-born.
    assert plans["n1"]["image"] == "none" and "gpufleet_site_image" not in result["groups"]


def _manifest(path, key, kernel):
    path.write_text(json.dumps({"format": 1, "site_key": key, "kernel": kernel, "gpu": {"arch": ["10.0"]},
                                "nic": {"naming": "none"}, "site_watch": [], "site_packages": []}))
    return str(path)


def test_an_image_born_node_is_recognized_by_the_plan_and_a_misfit_refused_with_the_reason(site, tmp_path):
    """The plan task reads the manifest of a changing node (gpufleet.deepep.image_boot, against this machine's kernel,
    a fake nvidia-smi of 8 B200s and no RDMA devices): a fitting image puts the node in gpufleet_site_image (a child of
    gpufleet_site_changing), one baked with other settings leaves it changing, and one baked for another kernel fails
    the task with the reason, on that node only."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8; do echo 'NVIDIA B200, 10.0'; done\n")
    smi.chmod(0o755)
    env = {"PATH": "%s:%s" % (smi.parent, os.environ["PATH"])}
    first, dummy = site(env=env)
    key = first["hosts"]["n1"]["site_plan"]["key"]
    kernel = os.uname().release
    fits = _manifest(tmp_path / "fits.json", key, kernel)
    misfit = _manifest(tmp_path / "misfit.json", key, "5.4.0-0-not-this-kernel")
    other = _manifest(tmp_path / "other.json", "0" * 64, kernel)

    result, output = site(manifests={"n1": fits, "n2": misfit}, rc=2, env=env)
    assert "n2 was born from an image that does not fit it: kernel %s is running but the image was baked for " \
           "5.4.0-0-not-this-kernel" % kernel in output, output
    assert re.search(r"n1\s+: ok=\d+ .*failed=0", output) and re.search(r"n2\s+: ok=\d+ .*failed=1", output), output
    assert result["hosts"]["n1"]["site_plan"]["image"] == "image"
    assert result["hosts"]["n1"]["site_plan"]["ansible_facts"]["gpufleet_image"]["node"]["gpu"]["count"] == 8
    assert result["groups"]["gpufleet_site_image"] == ["n1"] and result["groups"]["gpufleet_site_changing"] == ["n1"]

    # Baked with other settings: every phase runs (a plain changing node).
    result, output = site(manifests={"n1": other}, env=env)
    assert {h: v["site_plan"]["image"] for h, v in result["hosts"].items()} == {"n1": "converge", "n2": "none"}
    assert "gpufleet_site_image" not in result["groups"]
    # A run with --tags is no first boot: no node is asked, so the misfit is not refused.
    result, output = site("--tags", "preflight", manifests={"n1": fits, "n2": misfit}, env=env)
    assert {h: "image" in v["site_plan"] for h, v in result["hosts"].items()} == {"n1": False, "n2": False}


def test_a_recorded_node_is_intact_then_steady_with_tags_slow_or_drift_and_changing_with_new_settings(site):
    recorded, dummy = site(states=("plan", "record"), record_on="n1")
    assert recorded["hosts"]["n1"]["site_record"]["recorded"] is True
    assert recorded["hosts"]["n1"]["gpufleet_site_converged"] is True
    result, output = site()
    assert result["hosts"]["n1"]["site_plan"]["lane"] == "intact" and result["groups"]["gpufleet_site_intact"] == ["n1"]
    # The interpreter is configured: the stamp was read by one python -c, not by the site_state module.
    assert {h: v["site_plan"]["state_read"] for h, v in result["hosts"].items()} == {"n1": "reader", "n2": "reader"}
    assert result["hosts"]["n1"]["gpufleet_site_converged"] is True
    assert result["hosts"]["n2"]["site_plan"]["lane"] == "changing"
    assert output.count("intact: the node is as its last full converge left it; no phase runs") == 1, output
    tagged = site("--tags", "deepep")[0]["hosts"]["n1"]
    assert tagged["site_plan"]["lane"] == "steady" and tagged["gpufleet_site_reboot_throttle"] == 1
    slow = site("-e", "gpufleet_site_fast=false")[0]
    assert slow["hosts"]["n1"]["site_plan"]["lane"] == "steady" and slow["groups"]["gpufleet_site_steady"] == ["n1"]
    site.watched.write_text("export A=2\n")
    drifted, output = site()
    assert drifted["hosts"]["n1"]["site_plan"]["lane"] == "steady"
    assert drifted["hosts"]["n1"]["site_plan"]["msg"].startswith(
        "steady: the node drifted since its last full converge: %s: content changed" % site.watched)
    assert "steady: the node drifted since its last full converge" in output
    site.watched.write_text("export A=1\n")
    renewed = site("-e", "deepep_ref=v2")[0]["hosts"]["n1"]["site_plan"]
    assert renewed["lane"] == "changing" and renewed["key"] != result["hosts"]["n1"]["site_plan"]["key"]


def test_a_tagged_run_marks_the_node_converged_but_records_no_stamp(site):
    result = site("--tags", "deepep", states=("plan", "record"))[0]
    record = result["hosts"]["n1"]["site_record"]
    assert record["recorded"] is False and "not every phase ran" in record["msg"]
    assert result["hosts"]["n1"]["gpufleet_site_converged"] is True
    assert not (site.root.parent / "n1.json").exists()


def test_the_report_names_the_nodes_that_did_not_converge(site):
    result, output = site(states=("plan", "record", "report"), record_on="n2")
    assert result["hosts"]["n1"]["site_report"]["failed_nodes"] == ["n1"]
    assert "1 of 2 nodes did not converge: n1" in output
    assert "All 1 nodes converged." in site("-l", "n2", states=("plan", "record", "report"))[1]


def test_check_mode_reads_the_stamp_and_writes_none(site):
    result = site("--check", states=("plan", "record"))[0]
    assert result["hosts"]["n1"]["site_plan"]["lane"] == "changing"
    assert result["hosts"]["n1"]["site_record"]["changed"] is False
    assert not (site.root.parent / "n1.json").exists()


def test_a_node_whose_interpreter_will_not_run_the_reader_is_read_by_the_module_with_the_same_lanes(site, tmp_path):
    """An interpreter that refuses ``-c`` (or prints something else, or is too old) makes the reader's run no result:
    the plan runs the site_state module instead (pipelined, on stdin) and decides the same lanes. (A host whose
    interpreter is left to discovery is read by the module too: test_node_reader.py, the interpreter rule.)"""
    site(states=("plan", "record"), record_on="n1")
    wrapper = tmp_path / "python-no-c"
    wrapper.write_text('#!/bin/sh\n[ "$1" = "-c" ] && { echo "no -c here" >&2; exit 3; }\nexec %s "$@"\n'
                       % sys.executable)
    wrapper.chmod(0o755)
    result, output = site("-e", "ansible_python_interpreter=%s" % wrapper)
    plans = {h: v["site_plan"] for h, v in result["hosts"].items()}
    assert {h: (p["lane"], p["state_read"]) for h, p in plans.items()} == {
        "n1": ("intact", "module"), "n2": ("changing", "module")}
    site.watched.write_text("export A=3\n")
    result, output = site("-e", "ansible_python_interpreter=%s" % wrapper)
    assert result["hosts"]["n1"]["site_plan"]["lane"] == "steady"
    assert result["hosts"]["n1"]["site_plan"]["drift"][0].startswith("%s: content changed" % site.watched)
