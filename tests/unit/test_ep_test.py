# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ep_test (plugins/action/ep_test.py, plugin_utils/_verify/launch.py; its spec against its documentation is
tests/unit/test_action_arguments.py's): bad arguments are refused by name, the shell commands it sends start, answer and end a detached run on a real sh, and
the action's wait (simulated clock and node) ends a run past its bound, reports a vanished one, and runs nothing in
check mode."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail

from unit_helpers import action_plugin

from ansible_collections.gpufleet.deepep.plugins.action import ep_test as ep_action
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import launch

BASE = {"launcher": "/opt/deepep/verify/run_deepep.sh", "name": "intranode", "env_script": "/opt/deepep/env.sh",
        "src": "/opt/deepep/DeepEP", "python": "/usr/bin/python3", "script": "tests/test_intranode.py",
        "num_processes": 8, "timeout": 600}


def _params(**changes):
    params = {name: spec.get("default") for name, spec in launch.ARGUMENT_SPEC.items()}
    params.update(BASE)
    params.update(changes)
    return params


@pytest.mark.parametrize("changes, named", [
    ({"launcher": "run_deepep.sh"}, "launcher='run_deepep.sh' is not an absolute path"),
    ({"name": "Intra node"}, "name='Intra node' is not a log name"),
    ({"name": "../x"}, "name='../x'"),
    ({"src": ""}, "src is empty"),
    ({"script": ""}, "script is empty"),
    ({"num_processes": 0}, "num_processes=0"),
    ({"env": {"1BAD": "x"}}, "env key '1BAD'"),
    ({"env": {"GOOD": ["a"]}}, "env GOOD=['a'] is not a single value"),
    ({"env": {"GOOD": None}}, "env GOOD=None"),
    ({"timeout": 0}, "timeout=0"),
    ({"kill_after": True}, "kill_after=True"),
    ({"timeout": 5, "poll": 10}, "poll=10 is longer than timeout=5"),
    ({"script": None, "backend": "v2"}, "script is empty and backend/scope do not name a test"),
    ({"script": None, "backend": "deepep_v1", "scope": "engram"},
     "DeepEP V1 has no engram test (scope='engram'); expected one of internode, intranode, low_latency_internode, "
     "low_latency_intranode"),
])
def test_bad_arguments_are_refused_by_name(changes, named):
    with pytest.raises(launch.LaunchError, match=re.escape(named)):
        launch.validate(_params(**changes))


@pytest.mark.parametrize("backend, scope, script", [
    ("v1", "intranode", "tests/test_intranode.py"), ("deepep_v1", "low_latency_internode", "tests/test_low_latency.py"),
    ("v1", "low_latency_intranode", "tests/test_low_latency.py"),
    ("v2", "low_latency_intranode", "tests/legacy/test_low_latency.py"),
    ("v2", "intranode", "tests/elastic/test_ep.py"), ("deepep_v2", "internode", "tests/elastic/test_ep.py"),
])
def test_a_backend_and_a_scope_name_the_test_and_a_script_given_wins(backend, scope, script):
    assert launch.validate(_params(script=None, backend=backend, scope=scope))["script"] == script
    assert launch.validate(_params(script="/x/mine.py", backend=backend, scope=scope))["script"] == "/x/mine.py"
    assert launch.test_path(_params(script=script)) == "/opt/deepep/DeepEP/" + script
    assert launch.test_path(_params(script="/x/mine.py")) == "/x/mine.py"


def test_the_backend_gives_its_arguments_and_environment_for_the_scope_and_the_callers_win():
    # V2 on one node: the elastic test without RDMA, as the descriptor says (the roles no longer branch on it).
    params = launch.validate(_params(script=None, backend="v2", scope="intranode", args=["--num-tokens", "64"],
                                     env={"MASTER_PORT": "29500"}))
    assert params["args"] == ["--allow-hybrid-mode", "0", "--num-tokens", "64"]
    assert params["env"] == {"EP_DISABLE_GIN": "1", "MASTER_PORT": "29500"}
    argv = launch.launcher_argv(params)
    assert argv[argv.index("--"):] == ["--", "/usr/bin/python3", "tests/elastic/test_ep.py", "8", "--allow-hybrid-mode",
                                       "0", "--num-tokens", "64"]
    # a caller's argument comes later (argparse keeps the last) and a caller's variable replaces the backend's
    mine = launch.validate(_params(script=None, backend="deepep_v2", scope="intranode",
                                   args=["--allow-hybrid-mode", "1"], env={"EP_DISABLE_GIN": "0"}))
    assert mine["args"][-2:] == ["--allow-hybrid-mode", "1"] and mine["env"] == {"EP_DISABLE_GIN": "0"}
    # V1, and V2 across nodes, add nothing; a script without a backend gets nothing either
    for backend, scope in (("v1", "intranode"), ("v1", "internode"), ("v2", "internode")):
        plain = launch.validate(_params(script=None, backend=backend, scope=scope, args=["--x"], env={}))
        assert plain["args"] == ["--x"] and plain["env"] == {}, (backend, scope)
    assert launch.validate(_params(args=["--x"]))["args"] == ["--x"]


def test_the_fabric_gives_its_arguments_before_the_callers():
    """DeepEP V2 across EFA nodes gets --num-sms 64 (V2 sizes its SM count from ibstat's rate, which EFA devices have
    not); on an mlx5 fabric, on one node, for V1 and with no fabric, nothing; a caller's --num-sms comes later and wins;
    an unknown fabric is refused by name."""
    def args_of(backend, scope, fabric, args=()):
        judge = {"fabric": fabric} if fabric is not None else None
        return launch.validate(_params(script=None, backend=backend, scope=scope, args=list(args), env={},
                                       judge=judge))["args"]

    assert args_of("v2", "internode", "efa", ["--num-tokens", "2048"]) == ["--num-sms", "64", "--num-tokens", "2048"]
    assert args_of("deepep_v2", "internode", "efa", ["--num-sms", "32"])[-2:] == ["--num-sms", "32"]
    assert args_of("v2", "intranode", "efa") == ["--allow-hybrid-mode", "0"]
    for fabric in ("roce", "infiniband", "", None):
        assert args_of("v2", "internode", fabric) == [], fabric
    assert args_of("nccl_ep", "internode", "efa") == ["--algorithm", "ht"]
    with pytest.raises(launch.LaunchError, match=re.escape("fabric 'omnipath' is not one the collection knows")):
        args_of("v2", "internode", "omnipath")


def test_the_start_refuses_a_test_that_is_not_on_the_node(tmp_path):
    launcher = tmp_path / "run.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
    files = launch.paths(_params(launcher=str(launcher), name="absent"))
    missing = str(tmp_path / "tests" / "test_intranode.py")
    with pytest.raises(launch.LaunchError, match="the test %s is not a file on the node: nothing was started" % missing):
        launch.parse_started(_sh(launch.start_command([str(launcher)], files, missing)), missing)
    assert not os.path.exists(files["pid"])
    pid = launch.parse_started(_sh(launch.start_command([str(launcher)], files, str(launcher))), str(launcher))
    assert _ask_until_done(files, pid)[:2] == ("finished", 0)


def test_the_launcher_argv_and_the_files_beside_it():
    params = _params(env={"MASTER_ADDR": "10.0.0.1", "RANK": 1}, args=["--num-tokens", "4096"])
    assert launch.launcher_argv(params) == [
        "/opt/deepep/verify/run_deepep.sh", "intranode", "/opt/deepep/env.sh", "/opt/deepep/DeepEP", "30", "600",
        "MASTER_ADDR=10.0.0.1", "RANK=1", "--", "/usr/bin/python3", "tests/test_intranode.py", "8",
        "--num-tokens", "4096"]
    assert launch.paths(params) == {"log": "/opt/deepep/verify/intranode.log",
                                    "out": "/opt/deepep/verify/intranode.out", "rc": "/opt/deepep/verify/intranode.rc",
                                    "pid": "/opt/deepep/verify/intranode.pid"}


@pytest.mark.parametrize("answer, parsed", [
    ("running\n", ("running", None, None, "")),
    ("lost\n", ("lost", None, None, "")),
    ("rc=0 1795936660.100000000 1795936701.350000000\nline one\nline two\n",
     ("finished", 0, 41.25, "line one\nline two\n")),
    ("rc=124 1795936000.000000000 1795936600.000000000\n", ("finished", 124, 600.0, "")),
    ("rc=garbage\nout\n", ("finished", -1, None, "out\n")),
    ("rc=3\n", ("finished", 3, None, "")),
    ("rc=0 1795936660.5 1795936600.0\n", ("finished", 0, None, "")),  # the clock stepped back
    ("rc=0 1795936660.N 1795936661.N\n", ("finished", 0, None, "")),  # a date without %N
])
def test_answers_are_parsed(answer, parsed):
    assert launch.parse_answer(answer) == parsed


def test_an_unexpected_answer_is_named():
    with pytest.raises(launch.LaunchError, match="'sh: 1: syntax error'"):
        launch.parse_answer("sh: 1: syntax error\n")
    with pytest.raises(launch.LaunchError, match="did not start"):
        launch.parse_started("setsid: command not found\n")


def _sh(command):
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=True).stdout


def _ask_until_done(files, pid, limit=200):
    for dummy in range(limit):
        state, rc, ran, out = launch.parse_answer(_sh(launch.ask_command(files, pid)))
        if state != "running":
            return state, rc, ran, out
        time.sleep(0.05)
    raise AssertionError("the run did not end")


def test_a_detached_run_on_sh_answers_its_status_and_output(tmp_path):
    launcher = tmp_path / "run.sh"
    launcher.write_text("#!/bin/sh\necho \"args: $*\"\necho oops >&2\nsleep 0.3\nexit 5\n")
    launcher.chmod(0o755)
    params = _params(launcher=str(launcher), name="fake")
    files = launch.paths(params)
    (tmp_path / "fake.rc").write_text("0 1\n")  # an earlier run's status: removed before the start
    pid = launch.parse_started(_sh(launch.start_command([str(launcher), "a b", "c"], files)))
    # The start returned while the run goes on: it is detached from the shell that started it.
    assert launch.parse_answer(_sh(launch.ask_command(files, pid)))[0] == "running"
    state, rc, ran, out = _ask_until_done(files, pid)
    assert (state, rc) == ("finished", 5) and 0.3 <= ran < 30  # measured on the node, the 0.3 s sleep included
    assert out == "args: a b c\noops\n"
    assert not os.path.exists(files["rc"] + ".tmp")


def test_a_killed_run_is_lost_and_the_kill_reaches_its_session(tmp_path):
    launcher = tmp_path / "run.sh"
    launcher.write_text("#!/bin/sh\nsleep 60 &\nwait\n")
    launcher.chmod(0o755)
    files = launch.paths(_params(launcher=str(launcher), name="hung"))
    pid = launch.parse_started(_sh(launch.start_command([str(launcher)], files)))
    assert launch.parse_answer(_sh(launch.ask_command(files, pid)))[0] == "running"
    _sh(launch.kill_command(pid))
    state = _ask_until_done(files, pid)[0]
    assert state == "lost"
    # Nothing of the session is left running (the background sleep included); KILL is delivered at once, the
    # reaping of the dead is init's and may lag.
    assert _running_in_session(pid) == []


def _running_in_session(sid):
    """The processes of session ``sid`` that are not zombies, once KILL had time to land (bounded)."""
    for dummy in range(100):
        ps = subprocess.run(["ps", "-e", "-o", "pid=,sid=,stat="], capture_output=True, text=True, check=True)
        running = [line.split()[0] for line in ps.stdout.splitlines()
                   if line.split()[1] == str(sid) and not line.split()[2].startswith("Z")]
        if not running:
            return []
        time.sleep(0.05)
    return running


def test_a_path_with_spaces_and_quotes_is_one_argument(tmp_path):
    directory = tmp_path / "it's here"
    directory.mkdir()
    launcher = directory / "run.sh"
    launcher.write_text("#!/bin/sh\nprintf '%s|' \"$@\"\n")
    launcher.chmod(0o755)
    files = launch.paths(_params(launcher=str(launcher), name="q"))
    pid = launch.parse_started(_sh(launch.start_command([str(launcher), "x y", "$HOME", "'"], files)))
    assert _ask_until_done(files, pid)[3] == "x y|$HOME|'|"
    assert launch.parse_read(_sh(launch.read_command(str(directory / "absent.log")))) == (False, "")


def _simulated(args, node, check_mode=False, task_vars=None):
    """Run the action with a simulated node (``node(command) -> stdout``) and clock; (result, commands sent)."""
    clock = {"now": 0.0}
    sent = []

    def low_level(_self, command, sudoable=True, **kwargs):
        sent.append(command)
        return {"rc": 0, "stdout": node(command, clock["now"]), "stderr": ""}

    def sleep(seconds):
        clock["now"] += seconds

    plugin = action_plugin(ep_action, "ep_test", args, check_mode)
    with mock.patch.object(ep_action.ActionModule, "_low_level_execute_command", low_level), \
            mock.patch.object(ep_action.time, "monotonic", lambda: clock["now"]), \
            mock.patch.object(ep_action.time, "sleep", sleep):
        return plugin.run(task_vars=task_vars or {}), sent


def _node(ends_at=None, lost=False):
    def answer(command, now):
        if "setsid" in command:
            return "started 4242\n"
        if "kill -0" in command:
            if ends_at is not None and now >= ends_at:
                return "rc=0 100.0 %.1f\n[verify] exit status 0\n" % (100.0 + ends_at)
            return "lost\n" if lost else "running\n"
        if command.startswith("pkill"):
            return ""
        return "present\npartial log\n"
    return answer


def test_a_quick_run_is_seen_at_its_end():
    result, sent = _simulated(dict(BASE, poll=10), _node(ends_at=3))
    assert result["finished"] and result["rc"] == 0 and not result["timed_out"] and not result["failed"]
    assert result["seconds"] == 3 and result["waited"] == 3 and result["polls"] == 3  # asked at 0, 1, 3 s
    assert result["fetched"] is None and result["output"] == "[verify] exit status 0\n"
    assert len(sent) == 4 and not any(c.startswith("pkill") for c in sent)


def test_a_run_past_its_bound_is_killed_and_reported_timed_out(tmp_path):
    dest = tmp_path / "fetched" / "intranode.log"
    result, sent = _simulated(dict(BASE, timeout=20, kill_after=5, poll=10, fetch_to=str(dest)), _node())
    assert not result["finished"] and result["timed_out"] and result["rc"] == -1 and not result["failed"]
    # its log read once, both the output and the controller's copy
    assert dest.read_text() == "partial log\n" and result["fetched"] == str(dest)
    assert sum(1 for c in sent if c.startswith("if [ -r ")) == 1
    assert "did not end within 85 s (timeout 20 + kill_after 5 + 60 s)" in result["msg"]
    assert result["output"] == "partial log\n" and result["waited"] <= 85
    assert any(c.startswith("pkill -KILL -s 4242") for c in sent)


def test_a_vanished_run_is_reported_at_once():
    result, sent = _simulated(dict(BASE, poll=10), _node(lost=True))
    assert not result["finished"] and not result["timed_out"] and result["rc"] == -1
    assert "ended without an exit status" in result["msg"] and result["polls"] == 1
    assert not any(c.startswith("pkill") for c in sent)


def test_check_mode_runs_nothing():
    result, sent = _simulated(dict(BASE), _node(ends_at=0), check_mode=True)
    assert result["skipped"] and sent == [] and result["argv"][1] == "intranode"


def test_a_refusal_runs_nothing_and_a_failed_start_is_named():
    with pytest.raises(AnsibleActionFail, match="ep_test: name='x y'"):
        _simulated(dict(BASE, name="x y"), _node())
    with pytest.raises(AnsibleActionFail, match="ep_test: num_processes=0"):
        _simulated(dict(BASE, num_processes=0), _node())
    with pytest.raises(AnsibleActionFail, match="the launcher did not start"):
        _simulated(dict(BASE), lambda command, now: "sh: setsid: not found\n")


def test_the_start_quotes_every_argument():
    command = launch.start_command(["/x/run.sh", "a;b", "$(id)"], launch.paths(_params(launcher="/x/run.sh")))
    assert shlex.quote("a;b") in command and shlex.quote("$(id)") in command
    assert launch.kill_command(12) == "pkill -KILL -s 12 2>/dev/null; kill -KILL -- -12 2>/dev/null; true"


def test_an_unwritable_fetch_path_and_an_unexpected_error_are_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(AnsibleActionFail, match="fetch_to=.*cannot be written on the controller"):
        _simulated(dict(BASE, fetch_to=str(blocker / "node" / "intranode.log")), _node(ends_at=1))

    def broken(command, now):
        raise KeyError("surprise")

    result, dummy = _simulated(dict(BASE), broken)
    assert result["failed"] and result["msg"].startswith("ep_test: unexpected KeyError: 'surprise'")


# --- the NIC traffic around a run (nic_traffic) ------------------------------------------------------------------
def _rdma_facts(sent):
    """gpufleet_rdma facts of two ACTIVE mlx5 ports that have sent ``sent`` 4-byte words each."""
    devices = [{"name": "mlx5_%d" % i, "active": True,
                "ports": [{"port": 1, "active": True, "state": "ACTIVE",
                           "counters": {"port_xmit_data": sent, "port_rcv_data": sent}}]} for i in range(2)]
    return {"devices": devices, "active_devices": [d["name"] for d in devices]}


def _internode_node(output, ends_at=None):
    """A node whose test prints ``output`` (a captured internode run) when it ends at ``ends_at``."""
    def answer(command, now):
        if "setsid" in command:
            return "started 4242\n"
        if "kill -0" in command:
            if ends_at is not None and now >= ends_at:
                return "rc=0 100.0 %.1f\n%s" % (100.0 + ends_at, output)
            return "running\n"
        if command.startswith("pkill"):
            return ""
        return "present\n" + output
    return answer


def _nic_run(args, node, reads):
    """The action with ``reads`` (gpufleet_rdma facts, or a failed module result) answered by rdma_devices in turn;
    (result, commands sent, the modules executed)."""
    executed = []

    def execute_module(_self, module_name=None, module_args=None, task_vars=None, **kwargs):
        executed.append(module_name)
        answer = reads[len(executed) - 1]
        return answer if answer.get("failed") else {"changed": False, "ansible_facts": {"gpufleet_rdma": answer},
                                                    "warnings": ["a garbled rate"]}

    with mock.patch.object(ep_action.ActionModule, "_execute_module", execute_module):
        result, sent = _simulated(args, node)
    return result, sent, executed


def _internode_args(**changes):
    from test_ep_judge import B200_INTERNODE, INTERNODE
    judge = {"stage": "internode", "thresholds": INTERNODE["verify_internode_thresholds"],
             "table_name": "verify_internode_thresholds", "profile": "gcp_b200"}
    args = dict(BASE, name="internode", backend="deepep_v1", scope="internode", judge=judge, poll=10,
                nic_traffic={"min_bytes": 1 << 20, "mapping": "0:mlx5_0:1,1:mlx5_1:1", "mapping_supported": True})
    args.update(changes)
    return args, B200_INTERNODE


def test_the_nic_traffic_of_the_run_is_read_around_it_and_judged_in_its_record():
    args, output = _internode_args()
    result, sent, executed = _nic_run(args, _internode_node(output, ends_at=3), [_rdma_facts(0), _rdma_facts(1 << 20)])
    assert executed == ["gpufleet.deepep.rdma_devices"] * 2 and result["finished"]
    nic = result["record"]["nic"]
    assert nic["passed"] and nic["busy"] == ["mlx5_0", "mlx5_1"] and nic["idle"] == []
    assert [n["bytes"] for n in nic["nics"]] == [4 << 20, 4 << 20]   # port_xmit_data counts 4-byte words
    assert result["record"]["gate"]["passed"] and result["warnings"] == ["a garbled rate"]   # once, not twice
    # an idle NIC fails the record's NIC verdict by name, the test's own gate untouched
    result, sent, executed = _nic_run(args, _internode_node(output, ends_at=3), [_rdma_facts(0), _rdma_facts(0)])
    assert not result["record"]["nic"]["passed"] and result["record"]["nic"]["idle"] == ["mlx5_0", "mlx5_1"]


def test_a_run_without_nic_traffic_reads_no_counter_and_a_timed_out_one_reads_them_once():
    args, output = _internode_args()
    del args["nic_traffic"]
    result, sent, executed = _nic_run(args, _internode_node(output, ends_at=3), [])
    assert executed == [] and "nic" not in result["record"]
    args, output = _internode_args(timeout=20, kill_after=5)
    result, sent, executed = _nic_run(args, _internode_node(output), [_rdma_facts(0)])
    assert result["timed_out"] and executed == ["gpufleet.deepep.rdma_devices"] and result["record"]["nic"] is None


def test_nic_traffic_refusals_are_named():
    args, output = _internode_args()
    with pytest.raises(AnsibleActionFail, match="nic_traffic is given without judge"):
        _nic_run(dict(args, judge=None), _internode_node(output, ends_at=1), [])
    with pytest.raises(AnsibleActionFail, match="nic_traffic.min_bytes=0 is not a positive number of bytes"):
        _nic_run(dict(args, nic_traffic={"min_bytes": 0}), _internode_node(output, ends_at=1), [])
    with pytest.raises(AnsibleActionFail, match="reading the NIC counters .*failed on the node: sysfs gone"):
        _nic_run(args, _internode_node(output, ends_at=1), [{"failed": True, "msg": "sysfs gone"}])
    # a test whose output has no RDMA figure (not an internode test) cannot be judged on its NIC traffic
    with pytest.raises(AnsibleActionFail, match="nic_traffic: result.record.parsed: .* has no dispatch.bf16.rdma_gbps"):
        _nic_run(dict(args, judge={"stage": "connectivity", "test": "test_deepep_internode.py"}),
                 _internode_node("ok\n", ends_at=1), [_rdma_facts(0), _rdma_facts(1 << 20)])
