#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: audit_fleet_report
short_description: Judge the audited nodes and write the fleet report on the controller
version_added: 0.1.0
description:
  - The controller step of the C(gpufleet.deepep.audit) role, in one task that runs in the controller process
    (an action plugin; no module is sent to any node).
  - Builds each node's facts document from its registered M(gpufleet.deepep.node_stack) result (unreachable and
    failed nodes included), judges every node against the rule catalogue, lists the drift within each inventory
    group, and writes C(fleet.json), C(fleet.md) and C(fleet.html) into the run directory (atomically).
  - Each node's details show the linkage of its DeepEP build checked against it (C(gpufleet_linkage)) and, with
    O(verify_summary), its last verification figures beside their gates and the transport that ran.
  - The report is the audit's output, so it is written under C(--check) too; the report's C(meta.check_mode) says
    how the play ran. Run it once per play (C(run_once), C(delegate_to=localhost)).
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: none
    details: The report is written in check mode too (it is the audit's output); nothing on the nodes changes.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    platforms: posix
  action:
    support: full
    description: Runs in the controller process.
options:
  rules_file:
    description: The rule catalogue on the controller (YAML with C(rules), C(drift) and C(key_facts)).
    type: path
    required: true
  extra_rules:
    description: Rules added to the catalogue (same form as its C(rules) entries).
    type: list
    elements: dict
    default: []
  disabled_rules:
    description: Ids of catalogue rules not to apply.
    type: list
    elements: str
    default: []
  hosts:
    description: The hosts to report; by default every host of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
  result_var:
    description:
      - The variable that holds each host's registered M(gpufleet.deepep.node_stack) result.
      - Where that call gathered V(sglang) (O(gpufleet.deepep.node_stack#module:gather)), as the audit role does on
        nodes the inventory gives SGLang, its C(gpufleet_sglang) becomes the facts document's C(gpufleet_sglang)
        (null where the environment has no sglang distribution; a failure to read it is named under
        C(gather_errors)); where it gathered V(model) and V(serving) with
        O(gpufleet.deepep.node_stack#module:role_set_errors=record), its C(gpufleet_model) and C(gpufleet_serving)
        become the document's (judged by the C(SGLANG_*) and C(SERVING_*) rules), null where not gathered.
    type: str
    default: audit_r_node
  expect_var:
    description: The variable that holds each host's expectations (the facts document's C(expect)).
    type: str
    default: audit_expect
  groups:
    description: Inventory groups (group to hosts) compared for drift; by default the inventory's.
    type: dict
  skip_groups:
    description: Groups never compared for drift.
    type: list
    elements: str
    default: [all, ungrouped]
  output_dir:
    description:
      - A fixed run directory; empty for a new C(<output_root>/<UTC timestamp>).
      - Reports are never written through a link - O(output_dir) (or O(output_root)) must not be a symlink, no
        component above it a dangling one, and none of the report files a symlink; the task fails naming the option.
      - It must be a directory or a path that does not exist yet below one (it is created); a file there, or a file
        where a directory above it should be, fails naming the option and the path before anything is written.
    type: path
  output_root:
    description:
      - Where timestamped run directories go (used when O(output_dir) is empty); a directory or a path to create, as
        O(output_dir).
    type: path
  latest_link:
    description: Point C(<output_root>/latest) at the new run directory (only without O(output_dir)).
    type: bool
    default: false
  verify_summary:
    description:
      - The C(summary.json) of the fleet's last verification (playbooks/verify.yml, or the C(*-summary.json) of
        verify_intranode / verify_internode). Its rows are shown under each node beside the node's linkage facts -
        every figure beside its gate, the transport that really ran and its policy's verdict - and a line of it at
        the top of the report.
      - Empty or unset - no verification section. A path that cannot be read as such a summary fails the task naming
        this option, the path and the form expected, and no report file is written.
    type: path
  meta:
    description: More keys for the report's C(meta) (for example C(inventory) and C(limit)).
    type: dict
    default: {}
  fail_on:
    description:
      - The severity cut-off of RV(failing) - the nodes whose worst finding is this severity or worse (the one order
        of the audit, preflight and sglang - critical, warning, info); V(none) lists no node. The report is written
        either way; the task itself does not fail (the audit role fails the play after the report).
    type: str
    choices: [critical, warning, info, none]
    default: none
seealso:
  - module: gpufleet.deepep.node_stack
"""

EXAMPLES = r"""
- name: Gather every facts set of the node (read-only)
  gpufleet.deepep.node_stack:
    gather: [stack, nvidia, rdma, gpus, bundled_nvshmem]
  register: audit_r_node
  check_mode: true
  ignore_errors: true
  ignore_unreachable: true

- name: Judge the fleet and write the report
  gpufleet.deepep.audit_fleet_report:
    rules_file: "{{ playbook_dir }}/../roles/audit/files/rules.yml"
    output_root: "{{ playbook_dir }}/../build/audit"
  run_once: true
  delegate_to: localhost
  register: audit_report
"""

RETURN = r"""
run_dir:
  description: The run directory that holds the report.
  returned: success
  type: str
  sample: /srv/ansible/build/audit/20261122T054500Z
files:
  description: The files written.
  returned: success
  type: list
  elements: str
  sample: [/srv/ansible/build/audit/20261122T054500Z/fleet.json]
summary:
  description:
    - Node and finding counts of the fleet. C(not_judged) counts the reachable nodes where something could not be
      judged (no profile, no torch at the interpreter the audit used); C(ok) only nodes with neither findings nor that.
  returned: success
  type: dict
  sample: {nodes: 5, ok: 0, with_findings: 4, not_judged: 0, unreachable: 1, critical: 4, warning: 0, info: 1}
status:
  description:
    - Each host's status (C(ok), C(critical), C(warning), C(info), C(not_judged) - no finding, but something could
      not be judged - or C(unreachable)).
  returned: success
  type: dict
  sample: {b200-cluster-1: critical, b200-cluster-9: unreachable}
failing:
  description:
    - The hosts whose status is O(fail_on) or worse, in inventory-name order (an unreachable or C(not_judged) node
      is not among them; the report names those); empty with O(fail_on=none).
  returned: success
  type: list
  elements: str
  sample: [b200-cluster-1]
"""
