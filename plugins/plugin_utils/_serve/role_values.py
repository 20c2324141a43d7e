# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the sglang_serve and sglang roles decide from their variables: the router's lock and pip environment, the
rolling decision, the instances that restart, the messages of a roll and of a refused layout, and the arguments of
the DeepGEMM precompile (the filters of ``plugins/filter/serve_role.py``).

Pure functions; a value of the wrong form raises :class:`RoleValueError`, naming the value and the expected form.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RoleValueError", "router_lock", "router_lock_refusal", "pip_environment", "router_ready",
           "changed_here", "roll_note", "layout_refusal", "deepgemm_args", "deepgemm_wanted"]

PRECOMPILE_MODES = ("auto", "always", "never")
MISSING = object()


class RoleValueError(ValueError):
    """A value of the wrong form (the message names it and the expected form)."""


def _shown(value):
    return repr(value)[:200]


def _need(value, kind, name, form):
    if not isinstance(value, kind):
        raise RoleValueError("%s is %s; expected %s" % (name, _shown(value), form))
    return value


def router_lock(hashes, locks, pin, python_version, require_hashes):
    """``hashes`` when given (non-empty), else the shipped lock of ``pin`` for ``python_version`` among ``locks``
    (``{pin: {python: lock}}``; none there: ``{}``) where ``require_hashes``, else ``{}``."""
    _need(hashes, Mapping, "sglang_serve_router_hashes", "a mapping project==version: [sha256, ...]")
    if hashes:
        return hashes
    if not require_hashes:
        return {}
    _need(locks, Mapping, "the router locks", "a mapping pin: {python version: lock} (files/router-locks.json)")
    entry = locks.get(pin, {})
    if not isinstance(entry, Mapping):
        return {}
    return entry.get(python_version, {})


def router_lock_refusal(locks, pin, python_version):
    """The refusal of a router without a lock: the pins and Pythons the role ships locks for."""
    _need(locks, Mapping, "the router locks", "a mapping pin: {python version: lock} (files/router-locks.json)")
    pythons = set()
    for pin_locks in locks.values():
        _need(pin_locks, Mapping, "a router lock entry", "a mapping python version: lock")
        pythons.update(pin_locks)
    return ("The router %s on Python %s has no lock: the role ships locks for %s on Python %s. Give "
            "sglang_serve_router_hashes (make them with scripts/router_lock.py), or set sglang_serve_require_hashes: "
            "false to install it checked by name and version only."
            % (pin, python_version or "(unknown)", ", ".join(str(key) for key in locks),
               ", ".join(sorted(str(python) for python in pythons))))


def pip_environment(hashed, no_index, find_links, index_url):
    """pip's own variables of the router's install: hashes required where ``hashed``, no index where ``no_index``,
    the find-links and index URL where given."""
    _need(find_links, str, "sglang_serve_pip_find_links", "a string (empty: none)")
    _need(index_url, str, "sglang_serve_pip_index_url", "a string (empty: pip's default)")
    env = {}
    if hashed:
        env["PIP_REQUIRE_HASHES"] = "1"
    if no_index:
        env["PIP_NO_INDEX"] = "1"
    if find_links:
        env["PIP_FIND_LINKS"] = find_links
    if index_url:
        env["PIP_INDEX_URL"] = index_url
    return env


def router_ready(router_hosts, play_hosts, before_of):
    """Whether a router host of the play (``router_hosts`` among ``play_hosts``) answered /readiness with 200
    before this run: ``before_of(host)`` is its registered result (None where it has none)."""
    _need(router_hosts, list, "the router group's hosts", "a list of inventory names")
    _need(play_hosts, list, "the play's hosts", "a list of inventory names")
    for host in router_hosts:
        if host in play_hosts:
            before = before_of(host)
            if isinstance(before, Mapping) and before.get("status", -1) == 200:
                return True
    return False


def changed_here(unit_changed, env_changed, units, secrets_changed):
    """This node's instances that restart, each once, in order: those whose unit file changed, whose environment
    file changed, and every instance of ``units`` where the secrets file changed."""
    _need(unit_changed, list, "the instances whose unit file changed", "a list of instance names")
    _need(env_changed, list, "sglang_serve_env_changed", "a list of instance names")
    _need(units, list, "sglang_serve_plan.units", "a list of units, each with instance")
    out = []
    every = []
    if secrets_changed:
        for unit in units:
            if not isinstance(unit, Mapping) or "instance" not in unit:
                raise RoleValueError("a unit without instance (%s); expected sglang_serve_plan.units" % _shown(unit))
            every.append(unit["instance"])
    for name in unit_changed + env_changed + every:
        if name not in out:
            out.append(name)
    return out


def roll_note(roll):
    """What rolling the instance ``roll`` (an entry of the plan's instances) costs: the peers serving meanwhile."""
    _need(roll, Mapping, "the instance", "an entry of sglang_serve_plan.instances (name, role, peers)")
    for key in ("name", "role", "peers"):
        if key not in roll:
            raise RoleValueError("the instance %s has no %s; expected an entry of sglang_serve_plan.instances "
                                 "(name, role, peers)" % (_shown(roll), key))
    if not isinstance(roll["peers"], int) or isinstance(roll["peers"], bool):
        raise RoleValueError("the instance's peers is %s; expected a whole number" % _shown(roll["peers"]))
    if roll["peers"] > 0:
        cost = "%d other %s instance(s) serve while it restarts" % (roll["peers"], roll["role"])
    else:
        cost = ("no other %s instance: requests fail until it is back (add a %s instance to roll without a gap)"
                % (roll["role"], roll["role"]))
    return "%s: %s" % (roll["name"], cost)


def _text(value):
    """A value as the role's templates render it (None as nothing)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def layout_refusal(result, host, model_path):
    """The refusal of a rank 0 whose /server_info (``result``: the uri result, its ``item`` the planned instance)
    is not the plan's layout."""
    _need(result, Mapping, "the /server_info result", "a uri result with json and item (the planned instance)")
    item = result.get("item")
    if not isinstance(item, Mapping) or not all(key in item for key in ("name", "role", "nnodes", "port")):
        raise RoleValueError("the /server_info result's item is %s; expected the planned instance (name, role, nnodes,"
                             " port)" % _shown(item))
    info = result.get("json", {})
    info = info if isinstance(info, Mapping) else {}
    return ("%s on %s reports mode %s, nnodes %s, model %s; the plan is %s, %s, %s: another server holds port %s, "
            "stop it." % (_text(item["name"]), _text(host), _text(info.get("disaggregation_mode", "?")),
                          _text(info.get("nnodes", "?")), _text(info.get("model_path", "?")), _text(item["role"]),
                          _text(item["nnodes"]), _text(model_path), _text(item["port"])))


def deepgemm_args(server, model_path, to_bool):
    """The arguments of ``python -m sglang.compile_deep_gemm``: the server's own (``server``: sglang_server), its
    ``extra_args`` last. ``to_bool`` reads enable_dp_attention as Ansible's bool filter does."""
    _need(server, Mapping, "sglang_server", "a mapping with tp (and dp, enable_dp_attention, moe_a2a_backend, "
                                            "deepep_mode, extra_args)")
    if "tp" not in server:
        raise RoleValueError("sglang_server %s has no tp; expected a mapping with tp (the tensor-parallel size)"
                             % _shown(server))
    extra = server.get("extra_args", [])
    _need(extra, list, "sglang_server.extra_args", "a list of arguments")
    args = ["--model-path", model_path, "--tp-size", _text(server["tp"]), "--dp-size", _text(server.get("dp", 1))]
    if to_bool(server.get("enable_dp_attention", False)):
        args.append("--enable-dp-attention")
    args += ["--moe-a2a-backend", server.get("moe_a2a_backend", "none"),
             "--deepep-mode", server.get("deepep_mode", "auto")]
    return args + extra


def deepgemm_wanted(mode, moe, server, to_bool):
    """Whether the DeepGEMM kernels are precompiled: ``always``, or ``auto`` for a MoE model (``moe``) that
    sglang_server serves over DeepEP."""
    if mode not in PRECOMPILE_MODES:
        raise RoleValueError("sglang_deepgemm_precompile is %s; expected one of %s"
                             % (_shown(mode), ", ".join(PRECOMPILE_MODES)))
    if mode == "always":
        return True
    if mode != "auto" or not to_bool(moe):
        return False
    _need(server, Mapping, "sglang_server", "a mapping (moe_a2a_backend)")
    return server.get("moe_a2a_backend", "none") == "deepep"
