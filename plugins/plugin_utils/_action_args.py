# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arguments of the collection's action plugins, typed by validate_argument_spec (controller side), and the
base of the actions that compute a module's result in the controller's process (``InProcessAction``).

ansible-core's messages name the option, and for most types the value too, but not for a dict or a list of dicts
("argument 'meta' is of type str and we were unable to convert to dict"). ``validated_args`` adds what the task
gave for each option the message names, so a refusal always shows the bad value.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import unexpected_message

__all__ = ["validated_args", "InProcessAction"]

_NAMED = re.compile(r"(?:argument|option) '([A-Za-z0-9_]+)'")


def validated_args(action, argument_spec, **constraints):
    """The validated, typed arguments of ``action``'s task against ``argument_spec`` (ansible-core's
    ``validate_argument_spec`` with the ``constraints`` it takes: ``required_if`` ...), or AnsibleActionFail with
    ansible-core's message and the value given for each option it names."""
    try:
        validation, dummy = action.validate_argument_spec(argument_spec=argument_spec, **constraints)
    except AnsibleActionFail as exc:
        given = action._task.args  # pylint: disable=protected-access
        named = [name for name in dict.fromkeys(_NAMED.findall(exc.message)) if name in given]
        shown = "; ".join("%s=%r" % (name, given[name]) for name in named)
        raise AnsibleActionFail("%s%s" % (exc.message, " (given %s)" % shown if shown else ""))
    return validation.validated_parameters


class InProcessAction(ActionBase):
    """An action that computes its module's result in the controller's process: no module is sent anywhere and no
    connection is opened. A subclass sets ``MODULE`` (its name, for the last-resort message) and ``ARGUMENT_SPEC``
    (its module's) and implements ``compute(params, task_vars) -> dict`` (the result's keys). Every argument is
    typed by the module's spec before ``compute`` runs; an exception it did not expect becomes the collection's
    last-resort message (module_utils/_guard), never a traceback; an error of ``EXPECTED`` (the refusals of the
    action's own logic) fails with ``<MODULE>: <message>``. ``changed`` is false unless ``compute`` says otherwise.
    An action that runs modules on the host sets ``_requires_connection = True``."""

    MODULE = None
    ARGUMENT_SPEC = {}
    EXPECTED = ()
    _requires_connection = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._VALID_ARGS = frozenset(cls.ARGUMENT_SPEC)

    def compute(self, params, task_vars):
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super(InProcessAction, self).run(tmp, task_vars)
        del tmp
        params = validated_args(self, self.ARGUMENT_SPEC)
        result["changed"] = False
        try:
            result.update(self.compute(params, task_vars or {}))
        except self.EXPECTED as exc:  # pylint: disable=catching-non-exception
            result.update(failed=True, changed=False, msg="%s: %s" % (self.MODULE, exc))
        except Exception as exc:  # pylint: disable=broad-except
            result.update(failed=True, changed=False, msg=unexpected_message(self.MODULE, exc))
        return result
