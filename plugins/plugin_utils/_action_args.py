# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arguments of the collection's action plugins, typed by validate_argument_spec (controller side).

ansible-core's messages name the option, and for most types the value too, but not for a dict or a list of dicts
("argument 'meta' is of type str and we were unable to convert to dict"). ``validated_args`` adds what the task
gave for each option the message names, so a refusal always shows the bad value.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleActionFail

__all__ = ["validated_args"]

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
