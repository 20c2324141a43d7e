#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ep_test
short_description: Run one expert-parallel test on a node through the verify launcher, within its bound
version_added: 0.1.0
description:
  - Starts the verify launcher (C(run_deepep.sh) of the C(verify_common) role) on the node detached from the
    connection, in a session of its own, waits for it to end, returns its exit status and output, and copies its log
    to the controller (the start, the wait, the read-back and the fetch of one test run in one task).
  - The launcher sources the environment script, exports the O(env) settings, and runs
    C(PYTHON SCRIPT --num-processes N ARGS...) from O(src) under GNU C(timeout) (O(timeout), then C(KILL) after
    O(kill_after) seconds), writing C(<name>.log) beside itself. A wrapper shell writes the launcher's exit status
    and the seconds it ran to C(<name>.rc) when it ends, however it ends.
  - The action asks the node with a plain shell command (no Python module run) at once, then after 1, 2, 4, ...
    seconds up to every O(poll) seconds. A run that is still going O(timeout) + O(kill_after) + 60 seconds after it
    started has its session killed and is returned as timed out; a run whose session is gone without an exit status
    (the node rebooted) is returned at once as not finished, with the log it left.
  - The task never fails because the test failed. With O(judge), RV(record) holds the verdict (the parsed output,
    the gate, the thresholds, the transport); without it, the caller judges RV(output) and RV(rc).
  - With O(nic_traffic), the node's RDMA counters are read (M(gpufleet.deepep.rdma_devices), the one module run)
    before the test starts and after it ends, and RV(record) gets C(nic), the traffic the run caused on every ACTIVE
    NIC port.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: No test is started in check mode; the task is skipped with that reason and returns the argv it would run.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    platforms: posix
  action:
    support: full
    description: Starts, asks and reads from the controller's worker process, with shell commands on the node.
options:
  launcher:
    description: Absolute path of the launcher on the node; its status and output files go beside it.
    type: str
    required: true
  name:
    description: The run's name (lower-case letters, digits, C(_) and C(-)), which names its files C(<name>.log), C(.out), C(.rc).
    type: str
    required: true
  env_script:
    description: The environment script the launcher sources first (skipped by the launcher when it is missing).
    type: str
    required: true
  src:
    description: The directory the test runs from (the DeepEP source tree).
    type: str
    required: true
  python:
    description: The Python interpreter that runs the test.
    type: str
    required: true
  script:
    description:
      - The test script, relative to O(src) or absolute; unset, the test of O(backend) for O(scope).
      - The task fails before anything starts when it is not a file on the node.
    type: str
  backend:
    description:
      - The EP backend the test belongs to (C(deepep_v1), C(deepep_v2), or the generation C(v1), C(v2); C(nccl_ep),
        NCCL EP); its descriptor (C(plugin_utils/_verify/backends.py)) gives, for each O(scope), the test, the
        arguments and environment it runs with (before O(args), under O(env)) and the transport policy O(judge) holds
        it to, and the generation O(judge) parses the output as.
      - NCCL EP's test is the collection's launcher over C(nccl.ep) (C(nccl_ep_bench.py), placed by the verify_common
        role beside O(launcher)); it runs from that directory, not from O(src) - high throughput for C(intranode) and
        C(internode), low latency for the C(low_latency_*) scopes.
    type: str
    choices: [deepep_v1, deepep_v2, nccl_ep, v1, v2]
  scope:
    description:
      - What the test covers (C(intranode), C(internode), C(scaleup) - the trays of one NVLink domain that spans
        hosts, GB200/GB300 NVL72, over multi-node NVLink - C(low_latency_intranode) and C(low_latency_internode), the
        decode kernels on one node and across nodes; DeepEP V2's other tests C(engram), C(pp), C(agrs) and
        C(barrier)); with O(backend), it picks the test when
        O(script) is unset, the backend's arguments and environment for it, and its transport policy. A backend without
        a test for the scope is refused by name.
    type: str
    choices: [intranode, internode, scaleup, low_latency_intranode, low_latency_internode, engram, pp, agrs, barrier]
  num_processes:
    description: The test's C(--num-processes) (local ranks; a positive whole number).
    type: int
    required: true
  rdma:
    description:
      - Whether the node has an RDMA NIC (a GPU with a NIC beside it, C(gpufleet.deepep.gpu_topology)); unset, not
        known. Where it is false, a test of O(backend) for O(scope) that needs one is not started (its record is
        C(skipped) with the reason), and the test runs with the arguments and environment the backend gives a node
        without one (DeepEP V2 - C(EP_DISABLE_GIN=1), no hybrid kernels).
    type: bool
  args:
    description:
      - Further arguments of the test, after C(--num-processes N) and the arguments O(backend) gives O(scope) (DeepEP
        V2 intranode C(--allow-hybrid-mode 0)), so a later one given here wins.
    type: list
    elements: str
    default: []
  env:
    description:
      - Settings exported after the environment script, in this order (the rendezvous of a multi-node test, the site's
        settings, the transport's logging), over those O(backend) gives O(scope) (DeepEP V2 intranode
        C(EP_DISABLE_GIN=1)), which a key given here replaces. Keys are environment variable names; values single
        strings or numbers.
    type: dict
    default: {}
  timeout:
    description: Seconds the test may run before the launcher's C(timeout) ends it with exit status 124.
    type: int
    required: true
  kill_after:
    description: Seconds after the C(TERM) at O(timeout) before C(KILL).
    type: int
    default: 30
  poll:
    description:
      - Seconds between two questions once the first ones (after 1, 2, 4, ... seconds) reached it (a positive whole
        number, at most O(timeout)).
    type: int
    default: 10
  fetch_to:
    description:
      - Path on the controller to copy the node's C(<name>.log) to (its directory is made). Nothing is written when
        the launcher left no log (it refused its arguments before writing one).
    type: path
  nic_traffic:
    description:
      - Judge the NIC traffic the run caused (runbook 001, DeepEP PR 466) - every ACTIVE RDMA port must have sent at
        least O(nic_traffic.min_bytes); a port of the GPU-NIC mapping that trained below the others is C(slow). The
        verdict is RV(record)'s C(nic) (C(passed), C(nics), C(busy), C(idle), C(slow), C(causes), C(signature));
        null for a run that timed out. Needs O(judge) and a test whose output has the RDMA dispatch figure (an
        internode test).
    type: dict
    suboptions:
      min_bytes:
        description: Bytes each ACTIVE port must have sent (a soft-RoCE port without the byte counter, its packets).
        type: int
        default: 1048576
      mapping:
        description: The E(DEEP_EP_DEVICE_TO_HCA_MAPPING) the test ran with (empty or null when unset).
        type: str
      mapping_supported:
        description: Whether the installed DeepEP applies that mapping (null when unknown).
        type: bool
  judge:
    description:
      - How to judge the run; when given, RV(record) is the run's verification record (the parsed output, the gate,
        the thresholds and the transport verdict), which the verify roles' summary reads.
      - Checked before the test starts; a profile with no gate of its own, a malformed transport policy or a
        O(judge.record) field the judge writes itself fails the task before anything runs.
    type: dict
    suboptions:
      stage:
        description:
          - The stage. C(connectivity) is judged by its ranks' lines (buffer created, dispatch layout passed, no rank
            error); the others by DeepEP's bandwidth figures against the thresholds, and the transport when
            O(judge.transport_policies) or O(judge.transport_policy) is given. DeepEP V2's other tests (C(engram),
            C(pp), C(agrs), C(barrier)) have no gate, as no figure was measured or published; a run passes when it
            exits 0 with every rank's figures and its correctness stage passed, and its figures are recorded.
        type: str
        required: true
        choices: [agrs, barrier, connectivity, engram, internode, intranode, low_latency_internode, low_latency_intranode, pp, scaleup, sweep]
      test:
        description: The test's name in the record and for the parser (C(tests/test_intranode.py), C(tests/elastic/test_ep.py)), the test run when unset.
        type: str
      thresholds:
        description:
          - The site's overrides of the collection's gates (profile or GPU family -> {metric -> minimum GB/s or null,
            by_gpus}), the verify role's thresholds table; empty for the collection's own. The collection's gates are
            those of the profile object (plugins/plugin_utils/_gpu_families.py) for the stage's scope (C(intranode);
            C(internode) for C(internode) and C(sweep); the low-latency stages their own scopes, gated on
            C(ll_dispatch_gbps) and C(ll_combine_gbps)); an entry given here replaces the collection's entry of its
            name.
          - The entry is chosen by the exact O(judge.profile), then O(judge.family), then a family token of the profile's
            name; a profile naming a family with no gate is refused by name, never given the loose C(default).
        type: dict
        default: {}
      table_name:
        description: The table's variable, named in a refusal.
        type: str
        default: the thresholds table
      profile:
        description: The node's profile (C(gcp_b200), C(h200), C(default) to take the loose gate knowingly).
        type: str
      family:
        description: The GPU family the profile declares (C(gpufleet_gpu_family), e.g. C(b200)).
        type: str
      fabric:
        description:
          - The scale-out fabric the profile declares (C(gpufleet_fabric), C(infiniband), C(roce) or C(efa)); with
            O(judge.transport_policies), a run across nodes is held to the NCCL networks the fabric has, and a backend
            whose policy needs what the fabric lacks is refused before the test starts. Empty or unset, none.
          - With O(backend) and O(scope), the arguments the fabric's entry gives that backend's test of the scope go
            before O(args) (DeepEP V2 across C(efa) nodes gets C(--num-sms 64), since V2 sizes its SM count from
            C(ibstat)'s rate, which EFA devices have not, and divides by it across nodes).
        type: str
      gpus:
        description: How many GPUs took part, which picks the entry's C(by_gpus) gate measured for that count.
        type: int
      transport_policy:
        description:
          - A transport policy of your own the run is held against, as it is (keys of C(gpufleet.deepep.transport_gate)'s
            policy; for a script without O(backend)). Mutually exclusive with O(judge.transport_policies); with neither,
            the record's C(transport) is null.
        type: dict
      transport_policies:
        description:
          - The site's transport policies (profile name, GPU family or C(default) -> policy keys, optionally
            C(by_backend) -> keys for one backend), merged over the policy of O(backend) for O(scope) (the backend's
            descriptor); C({}) holds the run to the backend's policy as it is. The record's C(transport.basis) names the
            backend, the scope, the fabric and the site's entry taken. Every entry is checked before the test starts.
        type: dict
      record:
        description:
          - The caller's own fields of the record (C(host), C(scope), C(group), C(rank), C(world_size), C(master_addr));
            C(host) and C(scope) default to the inventory host. The judge's own fields cannot be set here.
        type: dict
        default: {}
notes:
  - The node needs C(setsid) (util-linux) and C(pkill) (procps); both are in every base system the collection supports.
seealso:
  - module: gpufleet.deepep.job_wait
"""

EXAMPLES = r"""
- name: Run DeepEP's intranode test on every node
  gpufleet.deepep.ep_test:
    launcher: /opt/deepep/verify/run_deepep.sh
    name: intranode
    env_script: /opt/deepep/unified-env.sh
    src: /opt/deepep/DeepEP
    python: /opt/deepep/venv/bin/python
    backend: v1
    scope: intranode
    num_processes: 8
    env:
      NVSHMEM_DEBUG: INFO
    timeout: 900
    poll: 10
    fetch_to: "/var/tmp/verify/{{ inventory_hostname }}/intranode.log"
    judge:
      stage: intranode
      thresholds: "{{ verify_intranode_thresholds }}"
      table_name: verify_intranode_thresholds
      profile: gcp_b200
      gpus: 8
  register: intranode

- name: Fail a node whose run fell short of its gate
  ansible.builtin.assert:
    that: intranode.record.gate.passed
    fail_msg: "{{ intranode.record.gate.reasons | join('; ') }}"
"""

RETURN = r"""
finished:
  description: Whether the launcher ended with an exit status within the bound.
  returned: unless skipped
  type: bool
  sample: true
rc:
  description: The launcher's exit status (the test's; 124 when its timeout ended it), -1 when it did not finish.
  returned: unless skipped
  type: int
  sample: 0
timed_out:
  description: Whether the test's timeout ended it (rc 124) or it was still running at the action's bound.
  returned: unless skipped
  type: bool
  sample: false
output:
  description: What the launcher printed (its log, and its own refusals), or the log so far when it did not finish.
  returned: unless skipped
  type: str
  sample: "[verify] node-1: intranode: python tests/test_intranode.py --num-processes 8 (timeout 900s)"
seconds:
  description: Seconds the launcher ran (measured on the node, to the millisecond), or RV(waited) when it did not finish.
  returned: unless skipped
  type: float
  sample: 41.25
waited:
  description: Seconds from the start to the last answer (measured on the controller).
  returned: unless skipped
  type: float
  sample: 42.3
polls:
  description: How many status questions were asked.
  returned: always
  type: int
  sample: 6
fetched:
  description: The controller path the log was copied to, or null (no O(fetch_to), or no log on the node).
  returned: unless skipped
  type: str
  sample: /var/tmp/verify/node-1/intranode.log
argv:
  description: The launcher's command line.
  returned: always
  type: list
  elements: str
  sample: [/opt/deepep/verify/run_deepep.sh, intranode, /opt/deepep/unified-env.sh, /opt/deepep/DeepEP, "30", "900"]
record:
  description:
    - The run's verification record, when O(judge) is given and the test ran (not in check mode).
    - C(parsed) is C(gpufleet.deepep.deepep_bandwidth)'s result (empty for C(connectivity)), C(gate) the verdict
      (C(passed), C(status) pass/fail/timeout/error, C(checks), C(reasons), C(diagnosis)), C(thresholds) the gate
      applied, C(gate_basis) what it rests on (C(matched) entry, C(shape), C(source) of its figures, and
      C(provisional), why nobody measured it on this hardware or with this backend, null when measured),
      C(transport) C(gpufleet.deepep.transport_verdict)'s result or null, C(log) the O(fetch_to) copy; for DeepEP
      V2's other tests C(figures), the slowest rank's (GB/s, MPPS, µs).
    - A test the node's hardware cannot run (too few ranks, no RDMA NIC, no kernels for its rank count) is not
      started, and its record's gate is C(skipped), passed, with the reason.
    - With O(nic_traffic), C(nic) is the NIC traffic verdict of the run (C(passed), C(nics), C(busy), C(idle),
      C(slow), C(causes), C(signature)), null for a run that timed out; without it the record has no C(nic).
  returned: when judge is given and the test ran or was skipped for the node's hardware
  type: dict
  sample:
    host: node-1
    scope: node-1
    stage: intranode
    test: tests/test_intranode.py
    parsed: {generation: v1, test: intranode, complete: true, cases: {passed: 24, failed: 0}}
    gate: {passed: true, status: pass, checks: [], reasons: [], diagnosis: []}
    thresholds: {dispatch_bf16_nvl_gbps: 300, combine_nvl_gbps: 280}
    gate_basis: {matched: h200, shape: measured, source: "measured here, DeepEP V1 567632d ...", provisional: null}
    transport: null
    log: /var/tmp/verify/node-1/intranode.log
script:
  description: The test run (O(script), or the test of O(backend) for O(scope)).
  returned: always
  type: str
  sample: tests/elastic/test_ep.py
not_run:
  description: Why the test was not started on this node's hardware (too few ranks, no RDMA NIC, no kernels for its
    rank count).
  returned: when the test was skipped for the node's hardware
  type: str
  sample: "not run: DeepEP V2's pp test needs at least 2 ranks, and this node runs 1"
log:
  description: The log's path on the node.
  returned: always
  type: str
  sample: /opt/deepep/verify/intranode.log
"""
