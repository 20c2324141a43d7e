# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.play_settings, judged in the controller's process.

The check is pure logic on values the controller already holds: running it as a module (delegated to localhost)
cost a Python start and a module transfer per host and task, about a second per phase on a fleet of 8. The action
plugin validates the same argument spec and calls the same judge, so the result and the refusals are the module's.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import unexpected_message
from ansible_collections.gpufleet.deepep.plugins.modules.play_settings import ARGUMENT_SPEC, judge


class ActionModule(ActionBase):

    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        validation, dummy = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            result.update(judge(validation.validated_parameters["settings"]))
        except Exception as exc:  # pylint: disable=broad-except
            # The last resort of every module of the collection (module_utils/_guard): a message, never a traceback.
            result.update(failed=True, changed=False, msg=unexpected_message("play_settings", exc))
        return result
