# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a test run's time goes: the wall time of every task of every play, appended as JSON lines to the file
``GPUFLEET_TASK_TIMES`` names (nothing is written without it).

A harness callback of the test tiers (Molecule's scenarios enable it through .config/molecule/config.yml;
scripts/molecule_run.py prints each scenario's slowest tasks from it), not part of the collection. One line a task:
``{"playbook", "play", "task", "action", "seconds", "hosts"}``, where ``seconds`` runs from the task's start to its
last host's result (for a loop, all its items), so the lines of one play add up to the play's wall time.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: gpufleet_task_times
type: aggregate
short_description: the wall time of every task, as JSON lines (test harness)
description:
  - Appends one JSON line per task (playbook, play, task, action, seconds, hosts) to the file named by the
    environment variable GPUFLEET_TASK_TIMES; writes nothing when it is unset.
requirements:
  - enable in callbacks_enabled
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("GPUFLEET_TASK_TIMES") or None
        self._playbook = None
        self._play = None
        self._task = None  # [name, action, started, last result, hosts]

    def _flush(self):
        if self._task is None or self._path is None:
            self._task = None
            return
        name, action, started, last, hosts = self._task
        self._task = None
        line = {"playbook": self._playbook, "play": self._play, "task": name, "action": action,
                "seconds": round(max(last, started) - started, 3), "hosts": len(hosts)}
        try:
            with open(self._path, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
        except OSError as exc:  # a harness aid: a run never fails for it
            self._display.warning("gpufleet_task_times: cannot write %s: %s" % (self._path, exc))
            self._path = None

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")

    def v2_playbook_on_play_start(self, play):
        self._flush()
        self._play = play.get_name()

    def _start(self, task):
        self._flush()
        now = time.monotonic()
        self._task = [task.get_name(), task.action, now, now, set()]

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def _result(self, result, *args, **kwargs):  # on_failed also gets ignore_errors
        if self._task is not None:
            self._task[3] = time.monotonic()
            self._task[4].add(result._host.get_name())

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = v2_runner_on_unreachable = _result

    def v2_playbook_on_stats(self, stats):
        self._flush()
