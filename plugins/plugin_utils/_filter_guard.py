# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last-resort handler of the collection's filters (controller side)."""

from __future__ import annotations

import functools

from ansible.errors import AnsibleError, AnsibleFilterError

__all__ = ["guard_filters"]


def guard_filters(filters):
    """Wrap each filter of a FilterModule: an exception other than AnsibleError becomes an AnsibleFilterError
    that names the filter, the error and the input (controller side only)."""
    def wrap(name, func):
        @functools.wraps(func)
        def guarded_filter(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except AnsibleError:
                raise
            except Exception as exc:  # pylint: disable=broad-except
                shown = repr(args[0]) if args else "nothing"
                raise AnsibleFilterError("%s: unexpected %s: %s (input %s)"
                                         % (name, type(exc).__name__, exc, shown[:300])) from exc
        return guarded_filter

    return dict((name, wrap(name, func)) for name, func in filters.items())
