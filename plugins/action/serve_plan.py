# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_plan, computed in the controller's process.

The plan is pure logic on values the controller already holds (the topology, the model's facts and every engine
node's ``gpufleet_serve_node`` facts, gathered on each node by node_stack ``gather: [serve_node]``). Run as a
module it shipped every engine node's facts to every host of the play and cost a Python start there; the action
plugin validates the module's argument spec and calls the module's own ``plan_fleet``, so the result, the warnings
and the refusals are the module's.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import unexpected_message
from ansible_collections.gpufleet.deepep.plugins.modules.serve_plan import ARGUMENT_SPEC, plan_fleet
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import validated_args


class ActionModule(ActionBase):

    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        params = validated_args(self, ARGUMENT_SPEC)
        try:
            planned, warned, failure = plan_fleet(params)
        except Exception as exc:  # pylint: disable=broad-except
            # The last resort of every module of the collection (module_utils/_guard): a message, never a traceback.
            result.update(failed=True, changed=False, msg=unexpected_message("serve_plan", exc))
            return result
        result.update(planned, changed=False)
        if warned:
            result["warnings"] = list(result.get("warnings") or []) + list(warned)
        if failure:
            result.update(failed=True, msg=failure)
        return result
