#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_wait
short_description: Wait quietly for a background (async) job on a node, within a bound
version_added: 0.1.0
description:
  - Waits for a job started with C(async) and C(poll=0) to finish, asking the node for its status at once, then
    after 1, 2, 4, ... seconds up to every O(poll) seconds, and returns the job's result (rc, stdout, stderr, ...)
    once it finished. A job that ends within seconds is seen within about its own time, not a whole O(poll) later.
  - Unlike C(ansible.builtin.async_status) with C(until)/C(retries), it prints nothing while it waits (no
    C(FAILED - RETRYING) lines, which read as failures to an operator), only one result line per node when the job
    finished, as for any task.
  - It is an action plugin; the polling happens in the controller's worker process, one status call per poll.
  - When O(timeout) seconds pass first, it fails naming the job and the bound, and leaves the job's status file in
    place, so that the job's own kill bound (the command's C(timeout)) decides its end.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: A job is never started in check mode, so in check mode the task is skipped with that reason.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    platforms: posix
  action:
    support: full
    description: Polls from the controller's worker process.
options:
  jid:
    description: The job id (C(ansible_job_id) of the task started with C(async) and C(poll=0)).
    type: str
    required: true
  timeout:
    description: Seconds to wait at most (a positive whole number).
    type: int
    required: true
  poll:
    description:
      - Seconds between two status calls once the first ones (after 1, 2, 4, ... seconds) reached it (a positive whole
        number, at most O(timeout)).
    type: int
    default: 10
  cleanup:
    description: Remove the job's status file on the node once the job finished.
    type: bool
    default: true
notes:
  - The job's own result keys are returned as they are; C(failed) is not set from the job's rc, so the role that
    runs a test judges its output.
seealso:
  - module: ansible.builtin.async_status
"""

EXAMPLES = r"""
- name: Start the intranode test in the background
  ansible.builtin.command:
    argv: [/opt/deepep/verify/intranode.sh]
  async: 900
  poll: 0
  register: job
  changed_when: false

- name: Wait for the intranode test
  gpufleet.deepep.job_wait:
    jid: "{{ job.ansible_job_id }}"
    timeout: 900
    poll: 10
  register: result
"""

RETURN = r"""
finished:
  description: Whether the job finished within the bound (always true on success).
  returned: always
  type: bool
  sample: true
waited:
  description: Seconds waited, rounded.
  returned: always
  type: int
  sample: 42
polls:
  description: How many status calls were made.
  returned: always
  type: int
  sample: 5
rc:
  description: The job's return code (with the job's other result keys, such as C(stdout) and C(stderr)).
  returned: when the job finished
  type: int
  sample: 0
"""
