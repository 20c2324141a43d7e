#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: serve_plan
short_description: Plan SGLang prefill/decode serving - instances, preflight, systemd units, router command
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Splits the hosts of the prefill and decode groups (inventory order) into instances of C(nnodes) hosts each
    (rank = position, rank 0's fabric address:C(dist_init_port) as the dist-init address of a multi-node instance,
    C(0.0.0.0:dist_init_port) for a one-node instance), and returns the systemd units of O(host) (one per instance
    member, and the router's on a router host) with their environment files, the router's command line with one
    C(--prefill URL BOOTSTRAP_PORT) per prefill instance and one C(--decode URL) per decode instance, and the worker
    counts the router must show.
  - Preflight, before anything starts; every problem names the fix and the module fails listing them all - tp
    divisible by nnodes, multi-node dp only with dp-attention, attention TP dividing the model's attention heads
    (from O(model), the facts of M(gpufleet.deepep.model_config)), each instance's dist-init address its own rank 0
    (never another instance's or the other role's node), a group's host count a multiple of nnodes, every port
    unique on its host, a router present in PD mode, and the runbook's C(--mini-lb) only with O(debug).
  - Ports are unique per host across every process the plan places there - each engine's C(--port), a prefill
    engine's C(--disaggregation-bootstrap-port) and the port of its C(--dist-init-addr) (on every member host of its
    instance), and the router's C(--port) and C(--prometheus-port) (on each router host, which may be an engine
    host too). A port given twice on one host is refused naming the host, the port and both instances and flags.
    Ports SGLang derives itself (its NCCL and ZMQ ports) are not planned here.
  - With O(nodes), the facts of the engine nodes
    (RV(gpufleet.deepep.node_stack#module:ansible_facts.gpufleet_serve_node) of M(gpufleet.deepep.node_stack) with
    C(gather=[serve_node]) on each), it also refuses per node - an address the other nodes reach it at
    that is on none of its interfaces, a C(GLOO_SOCKET_IFNAME), C(NCCL_SOCKET_IFNAME) or C(SGLANG_LOCAL_IP_NIC)
    that names no interface up with an IPv4 address (or, in a multi-node instance, not the one carrying the node's
    address), an unreadable env script, a missing env script where DeepEP serves, and a MoE instance served with
    C(--moe-a2a-backend deepep) whose exact DeepGEMM arguments have no precompiled cache on the node. The unset NIC
    variables are set to the NIC that carries the node's address, and the env scripts' values join the engine
    units' environment files (so a changed env script restarts, or rolls, the instances).
  - Every value that reaches a unit or an environment file (the options below, the instance and router settings, the
    hosts' names and addresses) is checked first - a newline, NUL or other control character is refused naming the
    field (e.g. C(sglang_decode.extra_args[3])), the value and the form expected; C(ExecStart=) writes C(%) as C(%%)
    and C($) as C($$), double-quoting an argument that is not a plain word (C(\) and C(") escaped), so that systemd
    runs the very arguments planned. C(dp_attention) and C(mini_lb) take a boolean or one of Ansible's boolean
    strings; anything else is refused by name.
  - Pure computation from its arguments; it reads and writes nothing. An action plugin of the same name computes
    the plan in the controller's own process (no module is sent anywhere, and no node's facts travel to another
    node). Check mode is the same run.
options:
  nodes:
    description:
      - The facts of the engine nodes by inventory name
        (RV(gpufleet.deepep.node_stack#module:ansible_facts.gpufleet_serve_node) of each); a node left out is judged
        by the topology alone.
    type: dict
    default: {}
  deepgemm_required:
    description: Refuse a MoE instance served through DeepEP without a DeepGEMM cache of its exact arguments.
    type: bool
    default: true
  topology:
    description:
      - C(prefill), C(decode) and C(router), each with C(hosts) (list of C(name), C(address) - the inventory name and
        fabric address, in inventory order) and C(settings).
      - Instance settings - C(nnodes), C(tp), C(dp), C(ep), C(dp_attention), C(port), C(bootstrap_port),
        C(dist_init_port), C(dist_init_addr) (an override), C(transfer_backend), C(moe_a2a_backend), C(deepep_mode),
        C(deepep_config), C(extra_args), C(environment), C(host).
      - Router settings - C(kind) (C(smg) or C(sglang-router)), C(port) (30080), C(host), C(policy),
        C(health_check_interval_secs), C(health_check_timeout_secs), C(health_check_endpoint),
        C(worker_startup_timeout_secs), C(prometheus_port), C(mini_lb), C(extra_args).
    type: dict
    required: true
  host:
    description: The inventory name of the host whose units to return.
    type: str
    required: true
  model:
    description: The model facts (C(ansible_facts.gpufleet_model) of M(gpufleet.deepep.model_config)); empty skips the heads rule.
    type: dict
    default: {}
  model_path:
    description: The model directory the engines load (C(--model-path)).
    type: str
    default: ""
  python:
    description: The interpreter of the SGLang environment (C(python -m sglang.launch_server)); an absolute path.
    type: str
    default: /usr/bin/python3
  prefix:
    description:
      - Unit name prefix (C(<prefix>-prefill0-rank0.service), C(<prefix>-router.service)).
      - Letters, digits, C(.), C(_) or C(-), starting with a letter or digit, without C(..), at most 64 characters
        (the rule of M(gpufleet.deepep.serve_state)).
    type: str
    default: sglang
  config_dir:
    description: Directory of the units' environment files; an absolute path.
    type: path
    default: /etc/gpufleet/sglang-serve
  router_venv:
    description: The router's virtual environment; an absolute path.
    type: path
    default: /opt/gpufleet/router
  secrets_env_file:
    description: A 0600 environment file of secrets (HF token) every engine unit reads as well; empty for none.
    type: path
    default: ""
  start_timeout:
    description:
      - C(TimeoutStartSec) of the engine units (model loading and DeepGEMM warmup are long), whole seconds, 1 or
        more.
      - 0 or a negative number is refused naming the value (systemd reads 0 as no timeout at all and ignores a
        negative one, keeping its 90 s default).
    type: int
    default: 3600
  restart_sec:
    description:
      - C(RestartSec) of the units, whole seconds, 0 or more (0 restarts a failed unit at once); a negative number
        is refused naming the value.
    type: int
    default: 5
  engine_version:
    description:
      - The SGLang version installed on O(host) (the C(gpufleet.deepep.sglang_env) facts); its engine units'
        environment files carry it as C(GPUFLEET_SGLANG_VERSION), so an upgrade restarts (or rolls) the instances.
      - Empty leaves it out.
    type: str
    default: ""
  debug:
    description: Allow the debug-only C(mini_lb) router.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.deepep.attributes
"""

EXAMPLES = r"""
- name: Plan the serving fleet
  gpufleet.deepep.serve_plan:
    host: "{{ inventory_hostname }}"
    model: "{{ ansible_facts.gpufleet_model }}"
    model_path: /lssd/models/DeepSeek-V3
    topology:
      prefill: {hosts: [{name: p1, address: 10.0.0.1}, {name: p2, address: 10.0.0.2}], settings: {nnodes: 2, tp: 16}}
      decode: {hosts: [{name: d1, address: 10.0.0.3}], settings: {tp: 8}}
      router: {hosts: [{name: r1, address: 10.0.0.4}], settings: {kind: smg}}
"""

RETURN = r"""
warnings_found:
  description: Things the plan went on without (a missing env script where DeepEP does not serve, unreadable interfaces).
  returned: always
  type: list
  elements: str
instances:
  description:
    - Every instance - C(role), C(index), C(name), C(nnodes), C(hosts), C(addresses), C(rank0), C(dist_init_addr),
      C(url), C(port), C(bootstrap_port), C(units) (C(host) and C(name) of every member's unit, rank order) and
      C(peers) (how many other instances of its role serve while it restarts in a rolling update).
  returned: always
  type: list
  elements: dict
units:
  description:
    - The units of O(host) - C(name), C(kind) (engine or router), C(role), C(instance), C(rank), C(argv),
      C(env_path), C(env), C(env_text), C(text) (the unit file), and C(env_file) and C(unit_file) (C(path),
      C(content), C(mode) 0600 and 0644, C(diff)) as M(gpufleet.deepep.file_set) writes them.
  returned: always
  type: list
  elements: dict
rank0_of:
  description: Names of the instances whose rank 0 is O(host) (it answers their health checks).
  returned: always
  type: list
  elements: str
instance:
  description: The instance O(host) belongs to, null for a router-only host.
  returned: always
  type: dict
router:
  description: Router settings with C(hosts), C(url) and C(argv); null without a router.
  returned: always
  type: dict
expected_workers:
  description: The C(prefill) and C(decode) worker counts the router's /workers must show.
  returned: always
  type: dict
problems:
  description: Preflight problems (the module fails when there are any).
  returned: always
  type: list
  elements: str
"""
