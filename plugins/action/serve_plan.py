# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_plan, computed in the controller's process.

The plan is pure logic on values the controller already holds (the topology, the model's facts and every engine
node's ``gpufleet_serve_node`` facts, gathered on each node by node_stack ``gather: [serve_node]``). Run as a
module it shipped every engine node's facts to every host of the play and cost a Python start there; the action
plugin validates the module's argument spec and calls ``plan_fleet`` (plugin_utils/_serve/plan.py).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import InProcessAction
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve.plan import ARGUMENT_SPEC, plan_fleet


class ActionModule(InProcessAction):

    MODULE = "serve_plan"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def compute(self, params, task_vars):
        planned, warned, failure = plan_fleet(params)
        result = dict(planned, changed=False)
        if warned:
            result["warnings"] = list(warned)
        if failure:
            result.update(failed=True, msg=failure)
        return result
