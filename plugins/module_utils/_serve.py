# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang prefill/decode serving: instances from the inventory topology, preflight rules, unit files and the
router's command line (pure logic for gpufleet.deepep.serve_plan; no I/O)."""

from __future__ import annotations

import re
import shlex

ROLES = ("prefill", "decode")
ROUTERS = ("smg", "sglang-router")
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake")
DEEPEP_MODES = ("normal", "low_latency", "auto")
INSTANCE_DEFAULTS = {
    "nnodes": 1, "tp": 1, "dp": 1, "ep": 1, "dp_attention": False, "port": 30000, "bootstrap_port": 8998,
    "dist_init_port": 5757, "dist_init_addr": "", "transfer_backend": "nixl", "moe_a2a_backend": "none",
    "deepep_mode": "auto", "deepep_config": "", "extra_args": [], "environment": {}, "host": "0.0.0.0",
}
ROUTER_DEFAULTS = {
    "kind": "smg", "port": 30080, "host": "0.0.0.0", "policy": "round_robin", "health_check_interval_secs": 5,
    "health_check_timeout_secs": 5, "health_check_endpoint": "/health", "worker_startup_timeout_secs": 600,
    "mini_lb": False, "extra_args": [], "prometheus_port": 29000,
}
# The SGLang environment of every engine unit (the runbook's PD settings; an instance's `environment` adds to it).
ENGINE_ENVIRONMENT = {
    "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "100000",
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "100000",
    "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "100000",
    "PYTHONUNBUFFERED": "1",
}


# What a service's PATH ends with (a unit starts with none of a login shell's variables).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The variables that name the NIC of torch.distributed's Gloo, NCCL's bootstrap sockets and SGLang's local IP
# (runbook 002 sets all three to the fabric NIC); the plan sets the unset ones to the NIC of the node's address.
NIC_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "SGLANG_LOCAL_IP_NIC")
_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_EXPORT_RE = re.compile(r"export\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


class ServeError(ValueError):
    """A topology or setting the plan cannot honour."""


def _int(settings, key, where):
    value = settings.get(key)
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise ServeError("%s: %s is %r; expected a positive integer" % (where, key, value))
    if value < 0 or (value == 0 and key not in ("prometheus_port",)):
        raise ServeError("%s: %s is %r; expected a positive integer" % (where, key, value))
    return value


def instance_settings(raw, where):
    """The settings of one role's instances, defaults applied and types checked."""
    settings = dict(INSTANCE_DEFAULTS)
    unknown = sorted(set(raw or {}) - set(INSTANCE_DEFAULTS))
    if unknown:
        raise ServeError("%s: unknown setting(s) %s; expected some of %s"
                         % (where, ", ".join(unknown), ", ".join(sorted(INSTANCE_DEFAULTS))))
    settings.update(raw or {})
    for key in ("nnodes", "tp", "dp", "ep", "port", "bootstrap_port", "dist_init_port"):
        settings[key] = _int(settings, key, where)
    settings["dp_attention"] = bool(settings["dp_attention"])
    if settings["transfer_backend"] not in TRANSFER_BACKENDS:
        raise ServeError("%s: transfer_backend %r; expected one of %s"
                         % (where, settings["transfer_backend"], ", ".join(TRANSFER_BACKENDS)))
    if settings["deepep_mode"] not in DEEPEP_MODES:
        raise ServeError("%s: deepep_mode %r; expected one of %s"
                         % (where, settings["deepep_mode"], ", ".join(DEEPEP_MODES)))
    if not isinstance(settings["extra_args"], list):
        raise ServeError("%s: extra_args must be a list of arguments, got %r" % (where, settings["extra_args"]))
    if not isinstance(settings["environment"], dict):
        raise ServeError("%s: environment must be a mapping NAME: value, got %r" % (where, settings["environment"]))
    settings["environment"] = dict((str(k), str(v)) for k, v in settings["environment"].items())
    return settings


def router_settings(raw):
    settings = dict(ROUTER_DEFAULTS)
    unknown = sorted(set(raw or {}) - set(ROUTER_DEFAULTS))
    if unknown:
        raise ServeError("router: unknown setting(s) %s; expected some of %s"
                         % (", ".join(unknown), ", ".join(sorted(ROUTER_DEFAULTS))))
    settings.update(raw or {})
    for key in ("port", "health_check_interval_secs", "health_check_timeout_secs", "worker_startup_timeout_secs",
                "prometheus_port"):
        settings[key] = _int(settings, key, "router")
    if settings["kind"] not in ROUTERS:
        raise ServeError("router: kind %r; expected one of %s" % (settings["kind"], ", ".join(ROUTERS)))
    if settings["policy"] not in POLICIES:
        raise ServeError("router: policy %r; expected one of %s" % (settings["policy"], ", ".join(POLICIES)))
    return settings


def unit_name(prefix, role, index, rank):
    return "%s-%s%d-rank%d.service" % (prefix, role, index, rank)


def router_unit_name(prefix):
    return "%s-router.service" % prefix


_ENV_LINE_RE = re.compile(r'(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<plain>[^"\s]*))')
_UNIT_NAME_RE = re.compile(r"(?P<prefix>[A-Za-z0-9_.-]+?)-"
                           r"(?:(?P<role>prefill|decode)(?P<index>[0-9]+)-rank(?P<rank>[0-9]+)|(?P<router>router))"
                           r"\.service")


def parse_unit_name(name):
    """The inverse of unit_name / router_unit_name: ``{prefix, role, instance, index, rank}``, or None for a name
    sglang_serve does not write."""
    match = _UNIT_NAME_RE.fullmatch(name)
    if not match:
        return None
    if match.group("router"):
        return {"prefix": match.group("prefix"), "role": "router", "instance": "router", "index": 0, "rank": 0}
    return {"prefix": match.group("prefix"), "role": match.group("role"),
            "instance": "%s%s" % (match.group("role"), match.group("index")), "index": int(match.group("index")),
            "rank": int(match.group("rank"))}


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
        cfg = settings[inst["role"]]
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
        if inst["role"] == "prefill" and cfg["bootstrap_port"] in (cfg["port"], cfg["dist_init_port"]):
            problems.append("%s: bootstrap_port %d collides with the server or dist-init port; choose another"
                            % (where, cfg["bootstrap_port"]))
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


def _shell_word(text, name, where):
    """The literal value of one shell word as the env scripts write it (single quotes, double quotes, plain
    characters, and ``${NAME:+:${NAME}}``, the caller's own value appended, which is left out): ``(value, appends)``.
    Anything else that would expand (another ``$``, a backquote, a second word) is refused: a unit cannot run a
    shell."""
    marker = "${%s:+:${%s}}" % (name, name)
    out = []
    appends = False
    i = 0
    quote = None
    while i < len(text):
        char = text[i]
        if quote is None and char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ServeError("%s: unterminated single quote in %s" % (where, name))
            out.append(text[i + 1:end])
            i = end + 1
            continue
        if text.startswith(marker, i):
            appends = True
            i += len(marker)
            continue
        if char == '"':
            quote = None if quote else '"'
            i += 1
            continue
        if char == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if char in "$`" or (quote is None and char in " \t;&|<>()"):
            raise ServeError("%s: %s=%s is not a literal value (it would expand %r in a shell); a unit's "
                             "environment file takes literal values only" % (where, name, text, text[i:i + 20]))
        out.append(char)
        i += 1
    if quote:
        raise ServeError("%s: unterminated double quote in %s" % (where, name))
    return "".join(out), appends


def parse_env_script(text, base=None, path="<env script>"):
    """The environment a service gets from sourcing ``text`` (the env script of env_script, SGLang's of the sglang
    role) after ``base``: ``export NAME=value`` lines in order; a value that appends the caller's own
    (``"${NAME:+:${NAME}}"``) is joined to the earlier script's, and PATH to the system's. Other lines are
    skipped."""
    env = dict(base or {})
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith("export"):
            continue
        match = _EXPORT_RE.fullmatch(line)
        if not match:
            raise ServeError("%s:%d: expected export NAME=value, got %r" % (path, number, line[:120]))
        name = match.group("name")
        value, appends = _shell_word(match.group("value"), name, "%s:%d" % (path, number))
        if appends:
            earlier = env.get(name) or (SYSTEM_PATH if name == "PATH" else "")
            value = "%s:%s" % (value, earlier) if earlier and value else (value or earlier)
        env[name] = value
    return env


def _iface_matches(spec, name, exact):
    """Whether interface ``name`` is one ``spec`` selects: comma-separated names (Gloo, SGLang: exact), or NCCL's
    prefixes (``=`` exact, ``^`` excludes)."""
    items = [item.strip() for item in str(spec).split(",") if item.strip()]
    if not exact:
        exclude = spec.startswith("^")
        if exclude:
            items[0] = items[0][1:]
        hit = any((name == item[1:]) if item.startswith("=") else name.startswith(item) for item in items)
        return not hit if exclude else hit
    return name in items


def node_problems(inst, member, address, node, env, cfg, deepgemm_args, deepgemm_required):
    """Problems of one instance member's node from its facts (serve_plan state=facts), and the NIC variables the
    plan decides for it; ``(problems, decided_env, warnings)``."""
    where = "sglang_%s instance %d (%s)" % (inst["role"], inst["index"], member)
    problems, warnings, decided = [], [], {}
    for err in node.get("errors") or []:
        problems.append("%s: %s" % (where, err))
    for path in node.get("missing_env_scripts") or []:
        if cfg["moe_a2a_backend"] == "deepep":
            problems.append("%s: the env script %s is missing; DeepEP needs its NVSHMEM values in the unit: converge "
                            "the node with gpufleet.deepep.site (and gpufleet.deepep.sglang) first" % (where, path))
        else:
            warnings.append("%s: %s is missing; the units run without its values" % (where, path))
    if node.get("interfaces_error"):
        warnings.append("%s: the interfaces could not be read (%s); the NIC rules were skipped"
                        % (where, node["interfaces_error"]))
    interfaces = node.get("interfaces")
    if interfaces is not None and _IPV4_RE.fullmatch(address or ""):
        usable = [i for i in interfaces if i.get("up") and i.get("ipv4") and i.get("name") != "lo"]
        own = [i for i in interfaces if address in (i.get("ipv4") or [])]
        names = ", ".join("%s %s" % (i["name"], "/".join(i["ipv4"])) for i in usable) or "none"
        if not own:
            problems.append("%s: the address %s the other nodes reach %s at is on none of its interfaces (%s); set "
                            "sglang_serve_fabric_address (or ansible_host) of %s to its fabric address"
                            % (where, address, member, names, member))
        else:
            fabric = own[0]["name"]
            if not own[0].get("up"):
                problems.append("%s: %s carries %s but is down; bring it up or use another NIC"
                                % (where, fabric, address))
            for var in NIC_VARIABLES:
                if var not in env:
                    decided[var] = fabric
                    continue
                exact = var != "NCCL_SOCKET_IFNAME"
                chosen = [i["name"] for i in usable if _iface_matches(env[var], i["name"], exact)]
                if not chosen:
                    problems.append("%s: %s=%s names no interface of %s that is up with an IPv4 address (%s): "
                                    "Gloo/NCCL fail at init; set it to %s (the NIC of %s) or leave it unset"
                                    % (where, var, env[var], member, names, fabric, address))
                elif fabric not in chosen and inst["nnodes"] > 1:
                    problems.append("%s: %s=%s selects %s, not %s that carries %s: the ranks of a %d-node instance "
                                    "rendezvous over %s; set it to %s or leave it unset"
                                    % (where, var, env[var], "/".join(chosen), fabric, address, inst["nnodes"],
                                       fabric, fabric))
    if deepgemm_args is not None and deepgemm_required:
        caches = node.get("deepgemm") or []
        if not any([str(a) for a in c.get("args") or []] == deepgemm_args for c in caches):
            have = "; ".join(" ".join(str(a) for a in c.get("args") or []) for c in caches) or "none"
            problems.append("%s: no DeepGEMM cache on %s for this instance's arguments (%s; cached: %s): without it "
                            "DeepGEMM JIT-compiles its kernels in warmup and DeepEP times out (runbook 002); run "
                            "gpufleet.deepep.sglang on %s with sglang_server tp %d, dp %d, enable_dp_attention %s, "
                            "moe_a2a_backend deepep, deepep_mode %s and these extra_args, or set "
                            "sglang_serve_deepgemm_required: false"
                            % (where, member, " ".join(deepgemm_args), have, member, cfg["tp"], cfg["dp"],
                               str(cfg["dp_attention"]).lower(), cfg["deepep_mode"]))
    return problems, decided, warnings


def deepgemm_args(model_path, cfg):
    """The arguments of ``python -m sglang.compile_deep_gemm`` for an instance: the sglang role's
    ``sglang_deepgemm_args`` for the same layout (the marker of a precompiled cache records them)."""
    args = ["--model-path", model_path, "--tp-size", str(cfg["tp"]), "--dp-size", str(cfg["dp"])]
    if cfg["dp_attention"]:
        args.append("--enable-dp-attention")
    args += ["--moe-a2a-backend", cfg["moe_a2a_backend"], "--deepep-mode", cfg["deepep_mode"]]
    return args + [str(a) for a in cfg["extra_args"]]


def env_file_text(env):
    """A systemd EnvironmentFile: NAME="value" lines, values quoted for systemd (backslash, quote escaped)."""
    lines = ["# Written by gpufleet.deepep (sglang_serve); systemd EnvironmentFile syntax"]
    for name in sorted(env):
        if "\n" in str(env[name]) or "\r" in str(env[name]):
            raise ServeError("environment %s=%r: a value is one line (systemd reads an EnvironmentFile line by line)"
                             % (name, env[name]))
        value = str(env[name]).replace("\\", "\\\\").replace('"', '\\"')
        lines.append('%s="%s"' % (name, value))
    return "\n".join(lines) + "\n"


def parse_env_file(text, path="<env file>"):
    """``NAME="value"`` lines of a systemd EnvironmentFile (comments and blank lines skipped) -> dict."""
    env = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _ENV_LINE_RE.fullmatch(line)
        if not match:
            raise ServeError("%s:%d: expected NAME=\"value\", got %r" % (path, number, line[:120]))
        value = match.group("quoted")
        if value is not None:
            value = re.sub(r"\\(.)", r"\1", value)
        else:
            value = match.group("plain")
        env[match.group("name")] = value
    return env


def unit_text(description, argv, env_files, start_timeout, restart_sec, after=(), memlock=True):
    """A systemd service: the argv quoted for ExecStart, the env files, Restart=on-failure, a long start timeout."""
    lines = ["# Written by gpufleet.deepep (sglang_serve)", "[Unit]", "Description=%s" % description,
             "After=network-online.target %s" % " ".join(after) if after else "After=network-online.target",
             "StartLimitIntervalSec=600", "StartLimitBurst=20", "", "[Service]", "Type=simple"]
    for path in env_files:
        lines.append("EnvironmentFile=%s" % path)
    lines.append("ExecStart=%s" % " ".join(shlex.quote(a) for a in argv))
    if memlock:
        lines.append("LimitMEMLOCK=infinity")
    lines += ["LimitNOFILE=1048576", "TimeoutStartSec=%d" % start_timeout, "TimeoutStopSec=60",
              "Restart=on-failure", "RestartSec=%d" % restart_sec, "KillMode=control-group", "",
              "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


def plan(topology, host, model=None, python="/usr/bin/python3", model_path="", prefix="sglang",
         config_dir="/etc/gpufleet/sglang-serve", router_venv="/opt/gpufleet/router", start_timeout=3600,
         restart_sec=5, debug=False, secrets_env_file="", engine_version="", nodes=None, deepgemm_required=True):
    """The whole plan of the fleet, and the units of ``host``.

    ``engine_version``: the SGLang installed on ``host`` (its engines' environment files name it, so that an
    upgrade changes them and the role restarts, or rolls, the instances).

    ``topology``: ``{"prefill": {"hosts": [{"name", "address"}], "settings": {...}}, "decode": {...},
    "router": {"hosts": [...], "settings": {...}}}``.

    ``nodes``: the facts of the engine nodes (serve_plan state=facts) by inventory name: their interfaces, the env
    scripts' values and the DeepGEMM caches; a node without facts is judged by the topology alone.
    """
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
            units.append({"name": name, "kind": "engine", "role": inst["role"], "instance": inst["name"],
                          "rank": rank, "argv": argv, "env_path": env_path, "env": env,
                          "env_text": env_file_text(env),
                          "text": unit_text("SGLang %s instance %d rank %d of %d (gpufleet.deepep)"
                                            % (inst["role"], inst["index"], rank, inst["nnodes"]), argv,
                                            [env_path] + secrets, start_timeout, restart_sec)})
    router_units = []
    if router and host in [h["name"] for h in router_hosts]:
        argv = router_argv(router, router_venv, instances)
        name = router_unit_name(prefix)
        env = {"RUST_LOG": "info"}
        env_path = "%s/%s.env" % (config_dir, name[:-len(".service")])
        router_units.append({"name": name, "kind": "router", "role": "router", "instance": "router", "rank": 0,
                             "argv": argv, "env_path": env_path, "env": env, "env_text": env_file_text(env),
                             "text": unit_text("SGLang PD router %s (gpufleet.deepep)" % router["kind"], argv,
                                               [env_path], 600, restart_sec, memlock=False)})
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
