# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang prefill/decode serving: instances from the inventory topology, their settings checked, preflight rules,
the engines' and the router's command lines, and the plan that puts them together (pure logic for
gpufleet.deepep.serve_plan; no I/O).

The unit files (names, service text, EnvironmentFile, the env scripts read into unit values, ``ServeError``) are in
``units``, the rules of one engine node from its facts in ``rules``.
"""

from __future__ import annotations

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve.inputs import (
    ROLES,
    check_hosts,
    check_options,
    check_shapes,
    instance_settings,
    router_settings,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve.rules import (
    deepgemm_args,
    node_problems,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import (
    RESTART_SEC_FORM,
    START_TIMEOUT_FORM,
    ServeError,
    env_file_text,
    router_unit_name,
    unit_name,
    unit_text,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import (
    UnitValueError,
    check_seconds,
    setting_bool,
)

__all__ = [
    "ENGINE_ENVIRONMENT", "build_instances", "preflight", "engine_argv", "router_argv", "port_collisions", "plan",
    "ARGUMENT_SPEC", "plan_fleet",
]

# The SGLang environment of every engine unit (the runbook's PD settings; an instance's `environment` adds to it).
ENGINE_ENVIRONMENT = {
    "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "100000",
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "100000",
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "100000",
    "PYTHONUNBUFFERED": "1",
}


# Where the units' files go (the role writes each unit's env_file and unit_file with gpufleet.deepep.file_set).
UNIT_DIR = "/etc/systemd/system"


def _unit_files(unit):
    """``unit`` with ``env_file`` (0600: an instance's environment may carry a token, never shown in a diff) and
    ``unit_file`` (0644), each as gpufleet.deepep.file_set takes it."""
    unit["env_file"] = {"path": unit["env_path"], "content": unit["env_text"], "mode": "0600", "diff": False}
    unit["unit_file"] = {"path": "%s/%s" % (UNIT_DIR, unit["name"]), "content": unit["text"], "mode": "0644",
                         "diff": True}
    return unit


def build_instances(role, group_hosts, settings):
    """Split a group's hosts (inventory order) into instances of ``nnodes`` hosts; rank = position."""
    nnodes = settings["nnodes"]
    if len(group_hosts) % nnodes:
        raise ServeError("sglang_%s has %d host(s), not a multiple of nnodes %d: every %s instance spans nnodes "
                         "hosts; add or remove hosts, or change nnodes" % (role, len(group_hosts), nnodes, role))
    out = []
    for index in range(len(group_hosts) // nnodes):
        members = group_hosts[index * nnodes:(index + 1) * nnodes]
        rank0 = members[0]
        if nnodes == 1:
            dist = "0.0.0.0:%d" % settings["dist_init_port"]
        else:
            dist = "%s:%d" % (rank0["address"], settings["dist_init_port"])
        if settings["dist_init_addr"]:
            dist = settings["dist_init_addr"]
        out.append({"role": role, "index": index, "name": "%s%d" % (role, index), "nnodes": nnodes,
                    "hosts": [m["name"] for m in members], "addresses": [m["address"] for m in members],
                    "rank0": rank0["name"], "dist_init_addr": dist,
                    "url": "http://%s:%d" % (rank0["address"], settings["port"]),
                    "port": settings["port"], "bootstrap_port": settings["bootstrap_port"] if role == "prefill"
                    else None})
    return out


def preflight(instances, settings, router_hosts, router, model, debug):
    """Problems that must stop the rollout before any unit starts; each names the fix."""
    problems = []
    by_address = {}
    for inst in instances:
        for name, address in zip(inst["hosts"], inst["addresses"]):
            by_address.setdefault(address, []).append((inst, name))
    heads = (model or {}).get("num_attention_heads")
    for role in ROLES:
        cfg = settings.get(role)
        if cfg is None:
            continue
        where = "sglang_%s" % role
        if cfg["tp"] % cfg["nnodes"]:
            problems.append("%s: tp %d is not divisible by nnodes %d (SGLang: tp_size must be divisible by number of "
                            "nodes); set tp to a multiple of nnodes" % (where, cfg["tp"], cfg["nnodes"]))
        if cfg["nnodes"] > 1 and cfg["dp"] > 1 and not cfg["dp_attention"]:
            problems.append("%s: dp %d across %d nodes needs dp_attention (SGLang: multi-node data parallel is not "
                            "supported unless dp attention!); set dp_attention: true or dp: 1"
                            % (where, cfg["dp"], cfg["nnodes"]))
        if cfg["dp_attention"] and cfg["tp"] % cfg["dp"]:
            problems.append("%s: tp %d is not divisible by dp %d with dp_attention; choose dp dividing tp"
                            % (where, cfg["tp"], cfg["dp"]))
        attn_tp = cfg["tp"] // cfg["dp"] if cfg["dp_attention"] and cfg["dp"] else cfg["tp"]
        if heads and attn_tp and heads % attn_tp:
            valid = [str(n) for n in range(1, heads + 1) if heads % n == 0 and n <= 64]
            problems.append("%s: attention TP %d does not divide the model's %d attention heads (%s; SGLang asserts "
                            "total_num_heads %% tp_size == 0); use an attention TP of %s"
                            % (where, attn_tp, heads, model.get("path", "config.json"), "/".join(valid)))
        if cfg["moe_a2a_backend"] == "deepep" and not (model or {}).get("moe", True):
            problems.append("%s: moe_a2a_backend deepep on a dense model (%s has no routed experts); use none"
                            % (where, (model or {}).get("path")))
    seen_dist = {}
    for inst in instances:
        host, _sep, port = inst["dist_init_addr"].rpartition(":")
        where = "sglang_%s instance %d (%s)" % (inst["role"], inst["index"], ", ".join(inst["hosts"]))
        if not port.isdigit():
            problems.append("%s: dist_init_addr %r is not HOST:PORT" % (where, inst["dist_init_addr"]))
            continue
        if host != "0.0.0.0" and host != inst["addresses"][0]:
            owners = by_address.get(host, [])
            other = [(o, n) for o, n in owners if o is not inst]
            if other:
                o, n = other[0]
                problems.append("%s: dist_init_addr %s is node %s of the %s instance %d, not this instance's rank 0: "
                                "every instance rendezvous at its own rank 0 (%s:%s); leave dist_init_addr unset "
                                "(the plan uses %s)" % (where, inst["dist_init_addr"], n, o["role"], o["index"],
                                                        inst["addresses"][0], port,
                                                        "0.0.0.0:%s" % port if inst["nnodes"] == 1 else
                                                        "%s:%s" % (inst["addresses"][0], port)))
            else:
                problems.append("%s: dist_init_addr %s is not the address of this instance's rank 0 %s (%s); "
                                "leave dist_init_addr unset or set it to %s:%s"
                                % (where, inst["dist_init_addr"], inst["hosts"][0], inst["addresses"][0],
                                   inst["addresses"][0], port))
        if host == "0.0.0.0" and inst["nnodes"] > 1:
            problems.append("%s: dist_init_addr 0.0.0.0 only serves a one-node instance; the other ranks of a "
                            "%d-node instance must reach rank 0 at %s:%s; leave dist_init_addr unset"
                            % (where, inst["nnodes"], inst["addresses"][0], port))
        key = (inst["addresses"][0] if host == "0.0.0.0" else host, port)
        if key in seen_dist:
            problems.append("%s: dist_init_addr %s:%s is also %s's; give each instance its own"
                            % (where, key[0], key[1], seen_dist[key]))
        seen_dist[key] = where
    problems += port_collisions(instances, settings, router_hosts, router)
    pd = any(i["role"] == "prefill" for i in instances) or any(i["role"] == "decode" for i in instances)
    if pd:
        if not any(i["role"] == "prefill" for i in instances) or not any(i["role"] == "decode" for i in instances):
            problems.append("PD serving needs at least one prefill and one decode instance: sglang_prefill has %d, "
                            "sglang_decode %d hosts" % (sum(len(i["hosts"]) for i in instances if i["role"] == "prefill"),
                                                        sum(len(i["hosts"]) for i in instances if i["role"] == "decode")))
        if not router_hosts:
            problems.append("PD serving needs a router (SGLang disaggregation takes requests only through it): the "
                            "group sglang_router is empty; add a host to sglang_router")
    if router and router["mini_lb"] and not debug:
        problems.append("router: mini_lb is the runbook's debug-only load balancer (no health checks, no readiness); "
                        "remove mini_lb, or set sglang_serve_debug: true for a debug run")
    return problems


def _port_claims(instances, settings, router_hosts, router):
    """``(host, port, owner)`` of every port the plan gives a process: each engine's ``--port``, a prefill engine's
    ``--disaggregation-bootstrap-port`` and the port of its ``--dist-init-addr`` on every member host of its instance
    (a rank may bind each: the dist-init rendezvous and the bootstrap server on rank 0, the HTTP port on every rank of
    newer SGLang), and the router's ``--port`` and ``--prometheus-port`` on each router host."""
    claims = []
    for inst in instances:
        cfg = settings[inst["role"]]
        owner = "sglang_%s instance %d's" % (inst["role"], inst["index"])
        ports = [(inst["port"], "%s --port (port)" % owner)]
        if inst["bootstrap_port"] is not None:
            ports.append((inst["bootstrap_port"], "%s --disaggregation-bootstrap-port (bootstrap_port)" % owner))
        dist_port = inst["dist_init_addr"].rpartition(":")[2]
        if dist_port.isdigit():
            ports.append((int(dist_port), "%s --dist-init-addr port (%s)"
                          % (owner, "dist_init_addr" if cfg["dist_init_addr"] else "dist_init_port")))
        claims += [(host, port, what) for host in inst["hosts"] for port, what in ports]
    if router:
        ports = [(router["port"], "the router's --port (port)")]
        if router["prometheus_port"]:
            ports.append((router["prometheus_port"], "the router's --prometheus-port (prometheus_port)"))
        claims += [(host["name"], port, what) for host in router_hosts or [] for port, what in ports]
    return claims


def port_collisions(instances, settings, router_hosts, router):
    """One problem for each port two processes (or two flags of one) would bind on the same host, naming the
    host(s), the port and both owners; the same collision on every member of an instance is one problem."""
    owners = {}
    for host, port, what in _port_claims(instances, settings, router_hosts, router):
        taken = owners.setdefault((host, port), [])
        if what not in taken:
            taken.append(what)
    grouped = {}
    for (host, port), taken in owners.items():
        if len(taken) > 1:
            grouped.setdefault((port, tuple(taken)), []).append(host)
    return ["host%s %s: port %d is %s%s and %s; a port serves one process on a host: give each its own port"
            % ("s" if len(hosts) > 1 else "", ", ".join(hosts), port, "both " if len(taken) == 2 else "",
               ", ".join(taken[:-1]), taken[-1])
            for (port, taken), hosts in grouped.items()]


def engine_argv(python, model_path, inst, rank, cfg):
    argv = [python, "-m", "sglang.launch_server", "--model-path", model_path, "--host", cfg["host"],
            "--port", str(cfg["port"]), "--tp-size", str(cfg["tp"]), "--disaggregation-mode", inst["role"],
            "--disaggregation-transfer-backend", cfg["transfer_backend"]]
    if cfg["dp"] > 1:
        argv += ["--dp-size", str(cfg["dp"])]
    if cfg["ep"] > 1:
        argv += ["--ep-size", str(cfg["ep"])]
    if cfg["dp_attention"]:
        argv.append("--enable-dp-attention")
    if inst["role"] == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(cfg["bootstrap_port"])]
    argv += ["--dist-init-addr", inst["dist_init_addr"], "--nnodes", str(inst["nnodes"]), "--node-rank", str(rank)]
    if cfg["moe_a2a_backend"] != "none":
        argv += ["--moe-a2a-backend", cfg["moe_a2a_backend"], "--deepep-mode", cfg["deepep_mode"]]
        if cfg["deepep_config"]:
            argv += ["--deepep-config", cfg["deepep_config"]]
    argv += [str(a) for a in cfg["extra_args"]]
    return argv


def router_argv(router, venv, instances):
    if router["kind"] == "smg":
        argv = [venv + "/bin/smg", "launch"]
    else:
        argv = [venv + "/bin/python", "-m", "sglang_router.launch_router"]
    argv += ["--pd-disaggregation"]
    if router["mini_lb"]:
        argv.append("--mini-lb")
    for inst in instances:
        if inst["role"] == "prefill":
            argv += ["--prefill", inst["url"], str(inst["bootstrap_port"])]
    for inst in instances:
        if inst["role"] == "decode":
            argv += ["--decode", inst["url"]]
    argv += ["--host", router["host"], "--port", str(router["port"]), "--policy", router["policy"],
             "--worker-startup-timeout-secs", str(router["worker_startup_timeout_secs"]),
             "--health-check-interval-secs", str(router["health_check_interval_secs"]),
             "--health-check-timeout-secs", str(router["health_check_timeout_secs"]),
             "--health-check-endpoint", router["health_check_endpoint"],
             "--prometheus-port", str(router["prometheus_port"])]
    argv += [str(a) for a in router["extra_args"]]
    return argv


def plan(topology, host, model=None, python="/usr/bin/python3", model_path="", prefix="sglang",
         config_dir="/etc/gpufleet/sglang-serve", router_venv="/opt/gpufleet/router", start_timeout=3600,
         restart_sec=5, debug=False, secrets_env_file="", engine_version="", nodes=None, deepgemm_required=True):
    """The whole plan of the fleet, and the units of ``host``.

    ``engine_version``: the SGLang installed on ``host`` (its engines' environment files name it, so that an
    upgrade changes them and the role restarts, or rolls, the instances).

    ``topology``: ``{"prefill": {"hosts": [{"name", "address"}], "settings": {...}}, "decode": {...},
    "router": {"hosts": [...], "settings": {...}}}``.

    ``nodes``: the facts of the engine nodes (node_stack's serve_node set) by inventory name: their interfaces, the env
    scripts' values and the DeepGEMM caches; a node without facts is judged by the topology alone.
    """
    check_shapes(topology, host, model, nodes)
    check_options(python, model_path, prefix, config_dir, router_venv, secrets_env_file, engine_version)
    start_timeout = check_seconds(start_timeout, "start_timeout", 1, START_TIMEOUT_FORM)
    restart_sec = check_seconds(restart_sec, "restart_sec", 0, RESTART_SEC_FORM)
    check_hosts(topology)
    if isinstance(model, dict) and model.get("moe") is not None:  # model_config's facts, or given by hand
        model = dict(model, moe=setting_bool(model["moe"], "model.moe"))
    settings = {}
    instances = []
    for role in ROLES:
        part = topology.get(role) or {}
        hosts = part.get("hosts") or []
        if not hosts:
            continue
        settings[role] = instance_settings(part.get("settings"), "sglang_%s" % role)
        instances += build_instances(role, hosts, settings[role])
    router_part = topology.get("router") or {}
    router_hosts = router_part.get("hosts") or []
    router = router_settings(router_part.get("settings")) if router_hosts or router_part.get("settings") else None
    names = [h["name"] for part in (topology.get("prefill") or {}, topology.get("decode") or {})
             for h in part.get("hosts") or []]
    dupes = sorted(set(n for n in names if names.count(n) > 1))
    problems = []
    if dupes:
        problems.append("host(s) %s are in both sglang_prefill and sglang_decode; a node serves one role"
                        % ", ".join(dupes))
    problems += preflight(instances, settings, router_hosts, router, model, debug)
    nodes = nodes or {}
    warnings = []
    node_env = {}
    for inst in instances:
        cfg = settings[inst["role"]]
        dg = (deepgemm_args(model_path, cfg) if cfg["moe_a2a_backend"] == "deepep" and (model or {}).get("moe")
              else None)
        for member, address in zip(inst["hosts"], inst["addresses"]):
            node = nodes.get(member)
            if not node:
                continue
            env = dict(node.get("env") or {}, **cfg["environment"])
            found, decided, warned = node_problems(inst, member, address, node, env, cfg, dg,
                                                   deepgemm_required)
            problems += found
            warnings += warned
            node_env[member] = dict(node.get("env") or {}, **decided)
    for inst in instances:
        # every member's unit, so that one node (the router's) can restart an instance as one group
        inst["units"] = [{"host": member, "name": unit_name(prefix, inst["role"], inst["index"], rank)}
                         for rank, member in enumerate(inst["hosts"])]
        # a rolling update of this instance keeps serving only when another instance of its role is in the router
        inst["peers"] = sum(1 for other in instances if other["role"] == inst["role"]) - 1
    units = []
    secrets = [secrets_env_file] if secrets_env_file else []
    for inst in instances:
        cfg = settings[inst["role"]]
        for rank, member in enumerate(inst["hosts"]):
            if member != host:
                continue
            name = unit_name(prefix, inst["role"], inst["index"], rank)
            env = dict(ENGINE_ENVIRONMENT)
            env.update(node_env.get(host, {}))
            if engine_version:
                env["GPUFLEET_SGLANG_VERSION"] = str(engine_version)
            env.update(cfg["environment"])
            env_path = "%s/%s.env" % (config_dir, name[:-len(".service")])
            argv = engine_argv(python, model_path, inst, rank, cfg)
            text = unit_text("SGLang %s instance %d rank %d of %d (gpufleet.deepep)"
                             % (inst["role"], inst["index"], rank, inst["nnodes"]), argv,
                             [env_path] + secrets, start_timeout, restart_sec)
            units.append(_unit_files({"name": name, "kind": "engine", "role": inst["role"],
                                      "instance": inst["name"], "rank": rank, "argv": argv, "env_path": env_path,
                                      "env": env, "env_text": env_file_text(env, "environment of %s" % name),
                                      "text": text}))
    router_units = []
    if router and host in [h["name"] for h in router_hosts]:
        argv = router_argv(router, router_venv, instances)
        name = router_unit_name(prefix)
        env = {"RUST_LOG": "info"}
        env_path = "%s/%s.env" % (config_dir, name[:-len(".service")])
        text = unit_text("SGLang PD router %s (gpufleet.deepep)" % router["kind"], argv, [env_path], 600,
                         restart_sec, memlock=False)
        router_units.append(_unit_files({"name": name, "kind": "router", "role": "router", "instance": "router",
                                         "rank": 0, "argv": argv, "env_path": env_path, "env": env,
                                         "env_text": env_file_text(env, "environment of %s" % name),
                                         "text": text}))
    expected = {"prefill": sum(1 for i in instances if i["role"] == "prefill"),
                "decode": sum(1 for i in instances if i["role"] == "decode")}
    mine = [i for i in instances if host in i["hosts"]]
    return {
        "instances": instances,
        "problems": problems,
        "warnings": warnings,
        "units": units + router_units,
        "rank0_of": [i["name"] for i in mine if i["rank0"] == host],
        "instance": mine[0] if mine else None,
        "router": dict(router, hosts=[h["name"] for h in router_hosts],
                       url="http://%s:%d" % (router_hosts[0]["address"], router["port"]) if router_hosts else None,
                       argv=router_argv(router, router_venv, instances)) if router else None,
        "expected_workers": expected,
    }


# The options of serve_plan (modules/serve_plan.py documents them), validated by its action.
ARGUMENT_SPEC = dict(
    nodes=dict(type="dict", default={}),
    deepgemm_required=dict(type="bool", default=True),
    topology=dict(type="dict", required=True),
    host=dict(type="str", required=True),
    model=dict(type="dict", default={}),
    model_path=dict(type="str", default=""),
    python=dict(type="str", default="/usr/bin/python3"),
    prefix=dict(type="str", default="sglang"),
    config_dir=dict(type="path", default="/etc/gpufleet/sglang-serve"),
    router_venv=dict(type="path", default="/opt/gpufleet/router"),
    secrets_env_file=dict(type="path", default=""),
    start_timeout=dict(type="int", default=3600),
    restart_sec=dict(type="int", default=5),
    debug=dict(type="bool", default=False),
    engine_version=dict(type="str", default=""),
)


def plan_fleet(params):
    """``(result, warnings, failure)`` of the validated ``params``: the plan's return values (with
    ``warnings_found``), the lines to warn, and the failure message (None when the plan passed its preflight)."""
    try:
        result = plan(params["topology"], params["host"], model=params["model"], python=params["python"],
                      model_path=params["model_path"], prefix=params["prefix"], config_dir=params["config_dir"],
                      router_venv=params["router_venv"], start_timeout=params["start_timeout"],
                      restart_sec=params["restart_sec"], debug=params["debug"],
                      secrets_env_file=params["secrets_env_file"], engine_version=params["engine_version"],
                      nodes=params["nodes"], deepgemm_required=params["deepgemm_required"])
    except (ServeError, UnitValueError) as exc:
        return {"problems": [to_native(exc)]}, [], to_native(exc)
    warned = result.pop("warnings")
    result["warnings_found"] = warned
    if result["problems"]:
        return result, warned, "serving preflight refused the layout: " + " | ".join(result["problems"])
    return result, warned, None
