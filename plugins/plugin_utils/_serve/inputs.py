# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serve_plan's inputs: the vocabularies (roles, routers, policies, transfer backends, DeepEP modes), the settings'
defaults, and the checks of the topology, the settings, the hosts and the options, each refusal (``ServeError``)
naming the place, the value and the form expected, before ``plan`` reads them (pure logic, no I/O)."""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import ServeError
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import (
    check_abs_path,
    check_env_name,
    check_env_value,
    check_line,
    check_prefix,
    setting_bool,
)

__all__ = [
    "ROLES", "ROUTERS", "POLICIES", "TRANSFER_BACKENDS", "DEEPEP_MODES", "INSTANCE_DEFAULTS", "ROUTER_DEFAULTS",
    "PORT_KEYS", "check_shapes", "instance_settings", "router_settings", "check_hosts", "check_options",
]


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


PORT_KEYS = ("port", "bootstrap_port", "dist_init_port", "prometheus_port")


def _int(settings, key, where):
    value = settings.get(key)
    expected = "a TCP port, 1 to 65535" if key in PORT_KEYS else "a positive integer"
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ServeError("%s: %s is %r; expected %s" % (where, key, value, expected))
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ServeError("%s: %s is %r; expected %s" % (where, key, value, expected))
    if number < 0 or (number == 0 and key not in ("prometheus_port",)) or (key in PORT_KEYS and number > 65535):
        raise ServeError("%s: %s is %r; expected %s" % (where, key, value, expected))
    return number


_HOST_FORM = "expected a list of {name: <inventory name>, address: <IP or DNS name>}"


def check_shapes(topology, host, model, nodes):
    """The shapes of plan()'s inputs - the topology (roles, their hosts and settings, the settings' nested lists and
    mappings), the host, the model facts and the node facts - each refusal naming the place, the value and the form
    expected (ServeError), before anything reads them."""
    if not isinstance(topology, dict):
        raise ServeError("topology %r: expected a mapping of prefill, decode and router, each {hosts: [...], "
                         "settings: {...}}" % (topology,))
    unknown = sorted(str(k) for k in topology if k not in ROLES + ("router",))
    if unknown:
        raise ServeError("topology: unknown role(s) %s; expected some of prefill, decode, router" % ", ".join(unknown))
    for role in ROLES + ("router",):
        where = "sglang_%s" % role if role in ROLES else "router"
        part = topology.get(role)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise ServeError("topology %s %r: expected a mapping {hosts: [...], settings: {...}}" % (role, part))
        hosts = part.get("hosts")
        if hosts is not None and not isinstance(hosts, list):
            raise ServeError("%s hosts %r: %s" % (where, hosts, _HOST_FORM))
        for index, entry in enumerate(hosts or []):
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry.get(k).strip()
                                                      for k in ("name", "address")):
                raise ServeError("%s host %d %r: %s" % (where, index, entry, _HOST_FORM))
        raw = part.get("settings")
        if raw is not None and not isinstance(raw, dict):
            raise ServeError("%s settings %r: expected a mapping of setting: value" % (where, raw))
        for arg in (raw or {}).get("extra_args") or []:
            if not isinstance(arg, (str, int, float)) or isinstance(arg, bool):
                raise ServeError("%s: extra_args item %r; expected a list of strings (command-line arguments)"
                                 % (where, arg))
        environment = (raw or {}).get("environment")
        if isinstance(environment, dict):
            for name, value in environment.items():
                if not isinstance(name, str) or not isinstance(value, (str, int, float)) or isinstance(value, bool):
                    raise ServeError("%s: environment %r: %r; expected NAME: value with a string or number value"
                                     % (where, name, value))
    if not isinstance(host, str) or not host:
        raise ServeError("host %r: expected the inventory name of the node being planned" % (host,))
    if model is not None:
        if not isinstance(model, dict):
            raise ServeError("model %r: expected model_config's facts (gpufleet_model), a mapping" % (model,))
        heads = model.get("num_attention_heads")
        if heads is not None and (isinstance(heads, bool) or not isinstance(heads, int) or heads < 1):
            raise ServeError("model num_attention_heads %r: expected a positive integer (model_config's "
                             "gpufleet_model)" % (heads,))
    if nodes is not None:
        if not isinstance(nodes, dict):
            raise ServeError("nodes %r: expected a mapping of inventory name: the node's serve_node facts" % (nodes,))
        for name, facts in nodes.items():
            if facts is not None and not isinstance(facts, dict):
                raise ServeError("nodes %s %r: expected the node's serve_node facts, a mapping" % (name, facts))
            if isinstance(facts, dict) and facts.get("env") is not None and not isinstance(facts["env"], dict):
                raise ServeError("nodes %s env %r: expected a mapping NAME: value" % (name, facts["env"]))


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
    settings["dp_attention"] = setting_bool(settings["dp_attention"], "%s.dp_attention" % where)
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
    _unit_strings(settings, where, ("host", "dist_init_addr", "moe_a2a_backend", "deepep_config"))
    settings["environment"] = dict(
        (check_env_name(k, "%s.environment name" % where), check_env_value(v, "%s.environment[%r]" % (where, k)))
        for k, v in settings["environment"].items())
    return settings


def _unit_strings(settings, where, keys):
    """The settings that become ExecStart arguments: ``keys`` and every ``extra_args`` item, one line each
    (``unitvalues.check_line``: no newline, NUL or other control character); the unit writer escapes ``%``, ``$``
    and quotes."""
    for key in keys:
        settings[key] = check_line(settings[key], "%s.%s" % (where, key), "an argument of one line")
    settings["extra_args"] = [check_line(arg, "%s.extra_args[%d]" % (where, number), "an argument of one line")
                              for number, arg in enumerate(settings["extra_args"])]


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
    settings["mini_lb"] = setting_bool(settings["mini_lb"], "router.mini_lb")
    if not isinstance(settings["extra_args"], list):
        raise ServeError("router: extra_args must be a list of arguments, got %r" % (settings["extra_args"],))
    _unit_strings(settings, "router", ("host", "health_check_endpoint"))
    return settings


def check_hosts(topology):
    """The hosts of the topology: an inventory name and an address (it reaches the router's ExecStart as a URL)."""
    for part in ("prefill", "decode", "router"):
        for number, host in enumerate((topology.get(part) or {}).get("hosts") or []):
            field = "topology.%s.hosts[%d]" % (part, number)
            if not isinstance(host, dict):
                raise ServeError("%s is %r; expected a mapping {name, address}" % (field, host))
            check_line(host.get("name"), field + ".name", "an inventory host name")
            address = check_line(host.get("address"), field + ".address", "a host name or IP address")
            if not address or any(c in address for c in " /?#@"):
                raise ServeError("%s.address is %r; expected a host name or IP address (e.g. 10.0.0.1)"
                                 % (field, address))


def check_options(python, model_path, prefix, config_dir, router_venv, secrets_env_file, engine_version):
    """serve_plan's own options that reach a unit or environment file (the units' seconds: ``plan``)."""
    check_abs_path(python, "python")
    check_line(model_path, "model_path", "a model directory of one line")
    check_prefix(prefix, "prefix")
    check_abs_path(config_dir, "config_dir")
    check_abs_path(router_venv, "router_venv")
    if secrets_env_file:
        check_abs_path(secrets_env_file, "secrets_env_file")
    check_line(engine_version, "engine_version", "a version of one line")
