# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one EP test on a node through the verify launcher: start it detached, wait for it within its bound, read its
output back and copy its log to the controller, in one task and without one Python module run on the node (but the
NIC counters' reads around it, with nic_traffic).

Documented in plugins/modules/ep_test.py; the spec and the shell commands are plugin_utils/_verify/launch.py.
"""

from __future__ import annotations

import os
import time

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import write_atomic
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import unexpected_message
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import validated_args
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import judge, launch, records


class ActionModule(ActionBase):

    _VALID_ARGS = frozenset(launch.ARGUMENT_SPEC)
    _requires_connection = True

    def _shell(self, command, what):
        """One shell command on the node (become applies), its stdout; a failure to run it names the step."""
        res = self._low_level_execute_command(command, sudoable=True)
        if res.get("rc") not in (0, None):
            raise AnsibleActionFail("ep_test: %s failed on the node (rc %s): %s"
                                    % (what, res.get("rc"), to_native(res.get("stderr") or res.get("stdout"))[:400]))
        return res.get("stdout") or ""

    def _read_log(self, node_path):
        """(present, text) of the node's log: absent when the launcher refused its arguments before writing one."""
        return launch.parse_read(self._shell(launch.read_command(node_path), "reading %s" % node_path))

    def _rdma(self, task_vars, result):
        """The node's RDMA facts (gpufleet.deepep.rdma_devices), its warnings kept in ``result``."""
        res = self._execute_module(module_name="gpufleet.deepep.rdma_devices", module_args={}, task_vars=task_vars)
        if res.get("failed") or "gpufleet_rdma" not in (res.get("ansible_facts") or {}):
            raise AnsibleActionFail("ep_test: reading the NIC counters (gpufleet.deepep.rdma_devices) failed on the "
                                    "node: %s" % to_native(res.get("msg") or res)[:400])
        warnings = result.setdefault("warnings", [])
        for warning in res.get("warnings") or []:
            if warning not in warnings:
                warnings.append(warning)
        return res["ansible_facts"]["gpufleet_rdma"]

    def _with_nic(self, result, nic, before, task_vars):
        """The record with ``nic``, the traffic of the run on the node's NICs (none read after a timed-out run)."""
        after = None if result["timed_out"] else self._rdma(task_vars, result)
        try:
            return records.record_with_nic(result, before, after, min_bytes=nic["min_bytes"], mapping=nic["mapping"],
                                           mapping_supported=nic["mapping_supported"])
        except VerifyInputError as exc:
            raise AnsibleActionFail("ep_test: nic_traffic: %s" % exc)

    @staticmethod
    def _fetch(text, dest):
        """The node's log text written to ``dest`` on the controller (its directory made)."""
        try:
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            write_atomic(dest, text, mode=0o644)
        except OSError as exc:
            raise AnsibleActionFail("ep_test: fetch_to=%r cannot be written on the controller (%s); expected a path in "
                                    "a writable directory" % (dest, exc.strerror or exc))
        return dest

    def run(self, tmp=None, task_vars=None):
        try:
            return self._run(tmp, task_vars)
        except AnsibleError:
            raise
        except Exception as exc:  # pylint: disable=broad-except
            # The last resort: a named message, never a traceback.
            return {"failed": True, "changed": False, "msg": unexpected_message("ep_test", exc)}

    def _run(self, tmp, task_vars):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        params = validated_args(self, launch.ARGUMENT_SPEC)
        try:
            launch.validate(params)
            if params["judge"]:
                judge.check(params["judge"], params["backend"], params["scope"])
        except (launch.LaunchError, judge.JudgeError) as exc:
            raise AnsibleActionFail("ep_test: %s" % exc)
        argv = launch.launcher_argv(params)
        files = launch.paths(params)
        result.update(changed=False, argv=argv, log=files["log"], script=params["script"])
        if self._play_context.check_mode:
            result.update(skipped=True, finished=False, polls=0,
                          msg="check mode: the test %s is not run" % params["name"])
            return result
        reason = launch.skip_reason(params)
        if reason:
            # The node's hardware cannot run the test (its kernels exist for other rank counts): not started.
            result.update(finished=False, rc=None, timed_out=False, output="", seconds=0, waited=0, polls=0,
                          fetched=None, failed=False, not_run=reason, msg=reason)
            if params["judge"]:
                result["record"] = judge.not_run(params["judge"], reason, params["script"],
                                                 host=(task_vars or {}).get("inventory_hostname"),
                                                 backend=params["backend"])
            return result
        # The NIC counters before the test starts (its traffic is the difference).
        nic_before = self._rdma(task_vars, result) if params["nic_traffic"] is not None else None
        deadline = params["timeout"] + params["kill_after"] + launch.GRACE_S
        start = time.monotonic()
        try:
            test = launch.test_path(params)
            pid = launch.parse_started(self._shell(launch.start_command(argv, files, test), "starting the launcher"),
                                       test)
        except launch.LaunchError as exc:
            raise AnsibleActionFail("ep_test: %s" % exc)
        polls, delays = 0, launch.poll_delays(params["poll"])
        state, rc, ran, output, msg = "running", -1, None, "", ""
        while True:
            polls += 1
            try:
                answer = self._shell(launch.ask_command(files, pid), "asking for the test's status")
                state, rc, ran, output = launch.parse_answer(answer)
            except launch.LaunchError as exc:
                raise AnsibleActionFail("ep_test: %s" % exc)
            if state != "running":
                break
            delay = next(delays)
            if time.monotonic() - start + delay > deadline:
                self._shell(launch.kill_command(pid), "ending the test's session")
                msg = ("the test %s did not end within %s s (timeout %s + kill_after %s + %s s): its session was "
                       "killed" % (params["name"], deadline, params["timeout"], params["kill_after"], launch.GRACE_S))
                break
            time.sleep(delay)
        waited = round(time.monotonic() - start, 1)
        finished = state == "finished"
        if state == "lost":
            msg = ("the test %s ended without an exit status (the node rebooted or its session was killed)"
                   % params["name"])
        # The log is read once: for the controller's copy, and as the output of a run that did not finish (what the
        # test printed before it hung or vanished).
        present, text = self._read_log(files["log"]) if params["fetch_to"] or not finished else (False, "")
        if not finished:
            rc, output = -1, text if present else ""
        fetched = self._fetch(text, params["fetch_to"]) if params["fetch_to"] and present else None
        result.update(finished=finished, rc=rc, timed_out=(rc == 124 or (not finished and state == "running")),
                      output=output, seconds=ran if ran is not None else waited, waited=waited, polls=polls,
                      fetched=fetched, failed=False)
        if params["judge"]:
            try:
                result["record"] = judge.judge(params["judge"], output, rc, result["timed_out"], params["timeout"],
                                               params["script"], log=params["fetch_to"],
                                               host=(task_vars or {}).get("inventory_hostname"),
                                               backend=params["backend"], scope=params["scope"])
            except judge.JudgeError as exc:
                raise AnsibleActionFail("ep_test: %s" % exc)
            if params["nic_traffic"] is not None:
                result["record"] = self._with_nic(result, params["nic_traffic"], nic_before, task_vars)
        if msg:
            result["msg"] = msg
        return result
