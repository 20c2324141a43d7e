# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait quietly for an async job: poll async_status from the controller's worker until it finished or a bound.

Documented in plugins/modules/job_wait.py; plugin_utils/_job_wait.py's ARGUMENT_SPEC types the arguments (validate_argument_spec) before
the job id's form and the bounds are judged here.
"""

from __future__ import annotations

import re
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._job_wait import ARGUMENT_SPEC
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import validated_args
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.launch import poll_delays

JID = re.compile(r"j?[0-9]+\.[0-9]+")


def _positive_int(name, value):
    if isinstance(value, bool):
        raise AnsibleActionFail("job_wait: %s=%r is not a whole number of seconds (expected e.g. 600)" % (name, value))
    if value < 1:
        raise AnsibleActionFail("job_wait: %s=%r must be at least 1 second" % (name, value))
    return value


def validate(params):
    """(jid, timeout, poll, cleanup) from the arguments validate_argument_spec typed (ARGUMENT_SPEC of
    modules/job_wait.py), or AnsibleActionFail naming the bad one."""
    jid = params["jid"]
    if not JID.fullmatch(jid):
        raise AnsibleActionFail("job_wait: jid=%r is not an async job id (expected the ansible_job_id of a task run "
                                "with async and poll 0, such as j123456789.4242)" % (jid,))
    timeout = _positive_int("timeout", params["timeout"])
    poll = _positive_int("poll", params["poll"])
    if poll > timeout:
        raise AnsibleActionFail("job_wait: poll=%s is longer than timeout=%s (expected poll <= timeout)"
                                % (poll, timeout))
    return jid, timeout, poll, params["cleanup"]


class ActionModule(ActionBase):

    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _requires_connection = True

    def _status(self, jid, mode, task_vars):
        """One call of the async_status module, with the async directory its action plugin would give it."""
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        status = self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                      module_args={"jid": jid, "mode": mode, "_async_dir": async_dir})
        status["finished"] = bool(status.get("finished"))
        return status

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        jid, timeout, poll, cleanup = validate(validated_args(self, ARGUMENT_SPEC))
        if self._play_context.check_mode:
            result.update(skipped=True, finished=False, waited=0, polls=0,
                          msg="check mode: no job was started, so there is none to wait for")
            return result
        start = time.monotonic()
        polls = 0
        delays = poll_delays(poll)
        while True:
            polls += 1
            status = self._status(jid, "status", task_vars)
            waited = int(round(time.monotonic() - start))
            if status.get("failed") and not status.get("finished"):
                result.update(failed=True, finished=False, waited=waited, polls=polls,
                              msg="job_wait: the status of job %s could not be read: %s"
                                  % (jid, to_native(status.get("msg") or status)))
                return result
            if status.get("finished"):
                break
            delay = next(delays)
            if time.monotonic() - start + delay > timeout:
                result.update(failed=True, finished=False, waited=waited, polls=polls,
                              msg="job_wait: job %s did not finish within %s s (timeout); its own time limit "
                                  "ends it" % (jid, timeout))
                return result
            time.sleep(delay)
        for key in ("started", "finished", "ansible_job_id", "results_file", "invocation", "_ansible_parsed"):
            status.pop(key, None)
        status.pop("failed", None)
        if cleanup:
            self._status(jid, "cleanup", task_vars)
        result.update(status)
        # failed is set explicitly, or ansible-core would derive it from the job's rc: the caller judges the job.
        result.update(finished=True, waited=waited, polls=polls, changed=False, failed=False)
        return result
