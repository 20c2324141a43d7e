# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan's rules of one engine node from its facts (node_stack's serve_node set): the NIC that Gloo, NCCL and SGLang
use (decided, or checked against the node's interfaces), the env scripts it lacks, and the DeepGEMM cache of an
instance's exact arguments (``deepgemm_args``).

Standard library only, Python 3.8+; no I/O.
"""

from __future__ import annotations

import re

__all__ = ["NIC_VARIABLES", "node_problems", "deepgemm_args"]

# The variables that name the NIC of torch.distributed's Gloo, NCCL's bootstrap sockets and SGLang's local IP
# (runbook 002 sets all three to the fabric NIC); the plan sets the unset ones to the NIC of the node's address.
NIC_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "SGLANG_LOCAL_IP_NIC")
_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


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
    """Problems of one instance member's node from its facts (node_stack's serve_node set), and the NIC variables the
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
