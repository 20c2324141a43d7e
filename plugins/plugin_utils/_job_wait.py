# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of gpufleet.deepep.job_wait (modules/job_wait.py documents them), typed by its action with
validate_argument_spec; the job id's form and the bounds are judged there after the types."""

from __future__ import annotations

__all__ = ["ARGUMENT_SPEC"]

ARGUMENT_SPEC = dict(
    jid=dict(type="str", required=True),
    timeout=dict(type="int", required=True),
    poll=dict(type="int", default=10),
    cleanup=dict(type="bool", default=True),
)
