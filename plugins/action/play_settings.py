# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.play_settings, judged in the controller's process.

The check is pure logic on values the controller already holds: running it as a module (delegated to localhost)
cost a Python start and a module transfer per host and task, about a second per phase on a fleet of 8. The action
plugin validates the same argument spec and calls the same judge, so the result and the refusals are the module's.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import InProcessAction
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._settings import ARGUMENT_SPEC, judge


class ActionModule(InProcessAction):

    MODULE = "play_settings"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def compute(self, params, task_vars):
        return judge(params["settings"])
