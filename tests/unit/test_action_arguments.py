# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit_fleet_report, job_wait and ep_test action plugins type their arguments with validate_argument_spec against
the ARGUMENT_SPEC of their documenting module (as artifact_store does): a bad argument fails before anything runs,
naming the bad value, and the spec is the one the module's DOCUMENTATION gives."""

from __future__ import annotations

import itertools
import json
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail

from unit_helpers import REPO, action_plugin

from ansible_collections.gpufleet.deepep.plugins.action import audit_fleet_report as audit_action
from ansible_collections.gpufleet.deepep.plugins.action import job_wait as job_wait_action
from ansible_collections.gpufleet.deepep.plugins.modules import audit_fleet_report, ep_test, job_wait
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _job_wait
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit import report as _audit_report
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import launch

RULES = str(REPO / "roles" / "audit" / "files" / "rules.yml")


action = action_plugin


@pytest.mark.parametrize("doc, argument_spec", [
    (job_wait.DOCUMENTATION, _job_wait.ARGUMENT_SPEC),
    (audit_fleet_report.DOCUMENTATION, _audit_report.ARGUMENT_SPEC),
    # ep_test's spec lives with its logic (plugin_utils/_verify/launch.py), its documentation in the module
    (ep_test.DOCUMENTATION, launch.ARGUMENT_SPEC),
], ids=["job_wait", "audit_fleet_report", "ep_test"])
def test_the_spec_is_the_documented_options(doc, argument_spec):
    options = yaml.safe_load(doc)["options"]
    assert sorted(argument_spec) == sorted(options)
    for name, spec in argument_spec.items():
        assert spec["type"] == options[name]["type"], name
        assert spec.get("required", False) == options[name].get("required", False), name
        assert spec.get("default") == options[name].get("default"), name
        assert spec.get("elements") == options[name].get("elements"), name


@pytest.mark.parametrize("args, named", [
    ({"jid": "j1.2", "timeout": "ten"}, "'ten'"),
    ({"jid": "j1.2", "timeout": 60, "poll": "often"}, "'often'"),
    ({"jid": "j1.2", "timeout": 60, "cleanup": "maybe"}, "'maybe'"),
    ({"jid": "j1.2", "timeout": 60, "bogus": 1}, "bogus"),
    ({"timeout": 60}, "jid"),
    ({"jid": "nonsense", "timeout": 60}, "'nonsense'"),
    ({"jid": "j1.2", "timeout": 0}, "timeout=0"),
    ({"jid": "j1.2", "timeout": True}, "timeout=True"),
    ({"jid": "j1.2", "timeout": 5, "poll": 10}, "poll=10"),
])
def test_job_wait_refuses_a_bad_argument_naming_it(args, named):
    with pytest.raises(AnsibleActionFail, match=named.replace("(", r"\(")):
        action(job_wait_action, "job_wait", args).run(task_vars={})


def test_job_wait_types_its_arguments_and_skips_in_check_mode():
    plugin = action(job_wait_action, "job_wait", {"jid": "j12.34", "timeout": "60", "cleanup": "no"},
                    check_mode=True)
    with mock.patch.object(job_wait_action.ActionModule, "_status") as status:
        result = plugin.run(task_vars={})
    status.assert_not_called()
    assert result["skipped"] and result["polls"] == 0
    assert job_wait_action.validate({"jid": "j12.34", "timeout": 60, "poll": 10, "cleanup": False}) \
        == ("j12.34", 60, 10, False)


def test_job_wait_polls_soon_then_every_poll_seconds():
    assert list(itertools.islice(job_wait_action.poll_delays(10), 7)) == [1, 2, 4, 8, 10, 10, 10]
    assert list(itertools.islice(job_wait_action.poll_delays(1), 3)) == [1, 1, 1]
    assert list(itertools.islice(job_wait_action.poll_delays(3), 4)) == [1, 2, 3, 3]


def test_job_wait_sees_a_quick_job_at_its_end_and_bounds_a_slow_one():
    """Time is simulated: each sleep advances the clock; the job ends at 2.5 s (quick) or never (slow)."""
    def run(ends_at, timeout, poll):
        clock = {"now": 100.0}
        sleeps = []

        def status(_self, jid, mode, task_vars):
            done = clock["now"] - 100.0 >= ends_at
            return {"finished": done, "rc": 0} if mode == "status" else {}

        def sleep(seconds):
            sleeps.append(seconds)
            clock["now"] += seconds

        plugin = action(job_wait_action, "job_wait", {"jid": "j1.2", "timeout": timeout, "poll": poll})
        with mock.patch.object(job_wait_action.ActionModule, "_status", status), \
                mock.patch.object(job_wait_action.time, "monotonic", lambda: clock["now"]), \
                mock.patch.object(job_wait_action.time, "sleep", sleep):
            return plugin.run(task_vars={}), sleeps

    quick, sleeps = run(2.5, 600, 10)
    # Seen at 3 s (0, 1, 3), not at 10 s as a fixed 10 s interval would.
    assert sleeps == [1, 2] and quick["finished"] and quick["waited"] == 3 and quick["polls"] == 3
    slow, sleeps = run(float("inf"), 30, 10)
    assert slow["failed"] and "did not finish within 30 s" in slow["msg"]
    assert sleeps == [1, 2, 4, 8, 10] and sum(sleeps) <= 30


@pytest.mark.parametrize("args, named", [
    ({"rules_file": RULES, "output_dir": "/tmp/x", "bogus": 1}, "bogus"),
    # The legacy read of a separately registered sglang_env result is gone: node_stack's sglang set is the source.
    ({"rules_file": RULES, "output_dir": "/tmp/x", "sglang_var": "audit_r_sglang"}, "sglang_var"),
    ({"output_dir": "/tmp/x"}, "rules_file"),
    ({"rules_file": "", "output_dir": "/tmp/x"}, "rules_file=''"),
    ({"rules_file": RULES, "output_dir": "/tmp/x", "latest_link": "sometimes"}, "'sometimes'"),
    ({"rules_file": RULES, "output_dir": "/tmp/x", "hosts": "n1"}, None),  # a string is a one-element list
    ({"rules_file": RULES, "output_dir": "/tmp/x", "meta": "inventory"}, "'inventory'"),
    ({"rules_file": RULES, "output_dir": "/tmp/x", "extra_rules": ["r1"]}, "r1"),
    ({"rules_file": RULES}, "output_dir or output_root is required"),
    # the groups' nested shape (issue 28, class 5): a list of host names each
    ({"rules_file": RULES, "output_dir": "/tmp/x", "groups": {"g": "n1"}},
     r"groups g 'n1': expected a list of inventory host names"),
    ({"rules_file": RULES, "output_dir": "/tmp/x", "groups": {"g": None}}, r"groups g None: expected a list"),
    ({"rules_file": RULES, "output_dir": "/tmp/x", "groups": {"g": ["n1", {"a": 1}]}},
     r"groups g \['n1', \{'a': 1\}\]: expected a list of inventory host names"),
])
def test_audit_fleet_report_refuses_a_bad_argument_naming_it(tmp_path, args, named):
    args = dict(args)
    if args.get("output_dir"):
        args["output_dir"] = str(tmp_path / "report")
    plugin = action(audit_action, "audit_fleet_report", args)
    if named is None:
        assert plugin.run(task_vars={"hostvars": {}})["summary"]["nodes"] == 1
        return
    with pytest.raises(AnsibleActionFail, match=named):
        plugin.run(task_vars={"hostvars": {}})
    assert not (tmp_path / "report").exists()


def test_audit_fleet_report_writes_the_report_with_the_spec_defaults(tmp_path):
    plugin = action(audit_action, "audit_fleet_report",
                    {"rules_file": RULES, "output_root": str(tmp_path), "latest_link": "yes", "meta": {"limit": "n1"}})
    result = plugin.run(task_vars={"ansible_play_hosts_all": [], "hostvars": {}, "groups": {}})
    run_dir = result["run_dir"]
    assert (tmp_path / "latest").resolve() == (tmp_path / run_dir).resolve()
    fleet = json.loads((tmp_path / run_dir / "fleet.json").read_text())
    assert fleet["meta"]["limit"] == "n1" and fleet["meta"]["rules_file"] == RULES
    assert result["summary"]["nodes"] == 0 and result["changed"]


def _links(tmp_path):
    """Each way a report could be written through a link: (option, its value, the path the message names)."""
    target = tmp_path / "elsewhere"
    (tmp_path / "dangling").symlink_to(target / "run")
    (tmp_path / "to_dir").symlink_to(tmp_path)
    (tmp_path / "dangling_parent").symlink_to(target / "parent")
    real = tmp_path / "real"
    real.mkdir()
    (real / "fleet.md").symlink_to(target / "fleet.md")
    (tmp_path / "root_link").symlink_to(tmp_path)
    (tmp_path / "root_dangling").symlink_to(target / "root")
    return [("output_dir", tmp_path / "dangling", "is a symlink"),
            ("output_dir", tmp_path / "to_dir", "is a symlink"),
            ("output_dir", tmp_path / "dangling_parent" / "run", "is a dangling symlink"),
            ("output_dir", real, "is a symlink"),  # one of the report files
            ("output_root", tmp_path / "root_link", "is a symlink"),
            ("output_root", tmp_path / "root_dangling", "is a symlink")]


@pytest.mark.parametrize("case", range(6))
def test_audit_fleet_report_never_writes_through_a_link(tmp_path, case):
    option, value, why = _links(tmp_path)[case]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    plugin = action(audit_action, "audit_fleet_report", {"rules_file": RULES, option: str(value), "latest_link": True})
    with pytest.raises(AnsibleActionFail) as info:
        plugin.run(task_vars={"hostvars": {}})
    msg = str(info.value)
    assert msg.startswith("audit_fleet_report: %s %r" % (option, str(value if case != 3 else value / "fleet.md")))
    assert why in msg and "nothing is written through a link - expected a " in msg
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # no target created, no file written
    assert not (tmp_path / "elsewhere").exists()
