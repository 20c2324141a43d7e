# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The transport gate: what really ran (``transport.py``'s truth) held against a node profile's transport policy.

``transport_gate(truth, policy)`` returns ``{passed, reasons, causes, unknown}``; each cause is derived from the
lines that show it (``GDRCopy library not found`` -> GDRCopy missing, a failed doorbell mapping -> the
PeerMappingOverride regkey not live, ...). ``transport_verdict`` reads and gates one output and ``truth_brief``
keeps what a record shows. The policy a run is held to comes from its backend's descriptor
(``backends.transport_policy``).

Pure logic, standard library only, Python 3.8+: used by the ``transport_gate`` filter and the verify judge.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport import (
    CAUSES,
    GIN_TYPES,
    NVSHMEM_TRANSPORTS,
    PATH_CLASSES,
    TransportInputError,
    path_class,
    transport_truth,
)

__all__ = [
    "POLICY_KEYS", "check_policy", "transport_gate", "truth_brief", "transport_verdict",
]

# Which findings explain which failed check.
_CHECK_CAUSES = {
    "ibgda": ("ibgda_not_requested", "no_ib_device", "nic_name", "nic_not_mlx5", "nic_memtype", "nic_atomics",
              "ibverbs_missing", "mlx5dv_missing", "peermem_missing", "transport_missing", "handler_cpu_needs_gdrcopy",
              "version_mismatch"),
    "nic_handler": ("regkey", "gdrcopy_missing", "gdrcopy_old", "gdrcopy_incompatible", "gdrdrv_not_loaded",
                    "peermem_control", "handler_cpu_needs_gdrcopy"),
    "cpu_fallback": ("regkey", "gdrcopy_missing", "gdrdrv_not_loaded", "peermem_control"),
    "transports": ("no_ib_device", "nic_name", "peermem_missing", "transport_missing", "p2p_disabled"),
    "paths": ("nccl_gdr_disabled", "nccl_no_ib_device", "peermem_missing", "nccl_net_plugin_failed", "p2p_disabled"),
    "networks": ("nccl_no_ib_device", "nccl_net_plugin_failed", "mlx5_old"),
    "mnnvl": ("mnnvl_imex",),
    "gin": ("nccl_gin_peermem", "nccl_gin_none", "nccl_gin_failed", "mlx5_old", "nccl_no_ib_device",
            "nccl_symmetric", "deepep_gin_unavailable"),
}


# The NIC handler a run fell back to, as NVSHMEM names its backend (the CPU proxy rings the doorbell through GDRCopy's
# mapping, or through host memory where GDRCopy is absent).
_HANDLER_WORDS = {"cpu": "CPU with the gdrcopy backend", "cpu_host_memory": "CPU with the host memory backend"}


# --------------------------------------------------------------------------------------------------------- gate
POLICY_KEYS = {
    "allow_paths": ("list", PATH_CLASSES),
    "allow_transports": ("list", NVSHMEM_TRANSPORTS),
    "allow_networks": ("list", None),
    "allow_gin": ("list", GIN_TYPES),
    "require_ibgda": ("bool", None),
    "allow_cpu_fallback": ("bool", None),
    "require_nccl_match": ("bool", None),
    "require_mnnvl": ("bool", None),
}
_POLICY_FORM = ("a mapping with some of allow_paths (list of %s), allow_transports (list of %s), allow_networks "
                "(list of NCCL network names such as IB, Socket or a plugin name), allow_gin (list of %s), "
                "require_ibgda (bool), allow_cpu_fallback (bool), require_nccl_match (bool), require_mnnvl (bool)"
                % ("/".join(PATH_CLASSES), "/".join(NVSHMEM_TRANSPORTS), "/".join(GIN_TYPES)))


def check_policy(policy):
    """Validate a transport policy; returns it normalized (missing keys None/False). Raises TransportInputError."""
    if policy is None:
        policy = {}
    if not isinstance(policy, dict):
        raise TransportInputError("policy must be %s; got a %s (%r)" % (_POLICY_FORM, type(policy).__name__, policy))
    unknown = sorted(str(k) for k in policy if k not in POLICY_KEYS)
    if unknown:
        raise TransportInputError("policy key(s) %s unknown; expected %s" % (", ".join(repr(k) for k in unknown),
                                                                             _POLICY_FORM))
    normal = {}
    for key, (kind, choices) in POLICY_KEYS.items():
        value = policy.get(key)
        if value is None:
            normal[key] = None if kind == "list" else False
            continue
        if kind == "bool":
            if not isinstance(value, bool):
                raise TransportInputError("policy %s must be true or false; got %r (%s)"
                                          % (key, value, type(value).__name__))
            normal[key] = value
            continue
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise TransportInputError("policy %s must be a list%s; got %r (%s)"
                                      % (key, " of %s" % "/".join(choices) if choices else " of names",
                                         value, type(value).__name__))
        items = []
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise TransportInputError("policy %s entries must be non-empty strings; got %r in %r"
                                          % (key, item, value))
            word = item.strip()
            if choices is not None:
                match = [c for c in choices if c.lower() == word.lower()]
                if not match:
                    raise TransportInputError("policy %s entry %r is not one of %s" % (key, item, ", ".join(choices)))
                word = match[0]
            items.append(word)
        normal[key] = items
    return normal


def _check_truth(truth):
    if not isinstance(truth, dict) or not all(isinstance(truth.get(k), dict) for k in ("nvshmem", "nccl", "deepep")):
        raise TransportInputError("truth must be the mapping transport_truth returns (nvshmem, nccl, deepep); got %s"
                                  % (repr(truth)[:200],))


def transport_gate(truth, policy=None):
    """Hold ``truth`` (``transport_truth``'s result, or the raw output) against a profile's ``policy``.

    Returns ``{passed, reasons, causes, unknown}``: ``reasons`` says what the run did that the policy does not
    allow, ``causes`` the likely cause of each (derived from the lines that show it), ``unknown`` what the policy
    requires that the output does not say (which also fails the gate).
    """
    if isinstance(truth, (str, list, tuple)) or (isinstance(truth, dict) and "nvshmem" not in truth):
        truth = transport_truth(truth)
    _check_truth(truth)
    policy = check_policy(policy)
    nvshmem, nccl, deepep = truth["nvshmem"], truth["nccl"], truth["deepep"]
    findings = truth.get("findings") or []
    reasons, unknown, failed_checks = [], [], []

    def fail(check, reason):
        reasons.append(reason)
        if check not in failed_checks:
            failed_checks.append(check)

    if policy["require_ibgda"]:
        if nvshmem.get("ibgda") is None:
            unknown.append("nvshmem.ibgda: the output does not say whether IBGDA initialized (run with "
                           "NVSHMEM_DEBUG=INFO NVSHMEM_DEBUG_SUBSYS=INIT,TRANSPORT)")
            failed_checks.append("ibgda")
        elif nvshmem["ibgda"] != "initialized":
            fail("ibgda", "NVSHMEM IBGDA %s; the profile requires it initialized" % nvshmem["ibgda"])
        handler = nvshmem.get("nic_handler")
        if handler in (None, "auto"):
            unknown.append("nvshmem.nic_handler: no 'NIC handler will be ...' line (IBGDA did not get that far, or "
                           "NVSHMEM_DEBUG=INFO was not set)")
            failed_checks.append("nic_handler")
        elif handler != "gpu":
            fail("nic_handler", "NVSHMEM IBGDA NIC handler is %s; the profile requires gpu"
                 % _HANDLER_WORDS.get(handler, handler))
    if nvshmem.get("cpu_fallback") and not policy["allow_cpu_fallback"]:
        fail("cpu_fallback", "NVSHMEM fell back to the CPU-assisted path: %s"
             % "; ".join(nvshmem.get("fallback_warnings") or ["a CPU NIC handler was chosen in auto mode"]))
    if policy["allow_transports"] is not None:
        up = sorted(t for t, s in (nvshmem.get("transports") or {}).items() if s == "initialized")
        extra = [t for t in up if t not in policy["allow_transports"]]
        if extra:
            fail("transports", "NVSHMEM transport(s) %s came up; the profile allows %s"
                 % (", ".join(extra), ", ".join(policy["allow_transports"]) or "none"))
    if policy["allow_paths"] is not None:
        extra = [p for p in nccl.get("paths") or [] if path_class(p) not in policy["allow_paths"]]
        if extra:
            fail("paths", "NCCL channel path(s) %s; the profile allows %s"
                 % (", ".join(extra), ", ".join(policy["allow_paths"]) or "none"))
    if policy["allow_networks"] is not None:
        allowed = [n.lower() for n in policy["allow_networks"]]
        extra = [n for n in nccl.get("networks") or [] if n.lower() not in allowed]
        if extra:
            fail("networks", "NCCL used network %s; the profile allows %s"
                 % (", ".join(extra), ", ".join(policy["allow_networks"])))
    if policy["allow_gin"] is not None:
        gin = nccl.get("gin")
        if deepep.get("gin_unavailable"):
            gin = "none"
        if gin is None:
            unknown.append("nccl.gin: no GIN/Plugin line (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)")
            failed_checks.append("gin")
        elif gin not in policy["allow_gin"]:
            fail("gin", "NCCL GIN is %s; the profile allows %s" % (gin, ", ".join(policy["allow_gin"])))
    if policy["require_mnnvl"]:
        if nccl.get("mnnvl") is None:
            unknown.append("nccl.mnnvl: no 'MNNVL ... cliqueSize' line (run with NCCL_DEBUG=INFO "
                           "NCCL_DEBUG_SUBSYS=INIT,NET across the hosts of one NVLink domain)")
            failed_checks.append("mnnvl")
        elif not nccl["mnnvl"]:
            fail("mnnvl", "NCCL did not bring up multi-node NVLink (MNNVL) across the domain; the profile requires it")
    if policy["require_nccl_match"]:
        loaded, seen = deepep.get("nccl_version"), nccl.get("version")
        if loaded is None:
            unknown.append("deepep.nccl_version: no 'DeepEP initialized with NCCL version' line (run with "
                           "EP_BUFFER_DEBUG=1)")
        elif seen is not None and loaded != seen:
            fail("nccl", "DeepEP loaded NCCL %s but NCCL reported %s" % (loaded, seen))

    causes = []
    if reasons or unknown:
        kinds = []
        for check in failed_checks:
            for kind in _CHECK_CAUSES.get(check, ()):
                if kind not in kinds:
                    kinds.append(kind)
        for kind in kinds:
            lines = [f["line"] for f in findings if isinstance(f, dict) and f.get("kind") == kind]
            if lines:
                causes.append({"cause": CAUSES[kind], "kind": kind, "evidence": lines[:3]})
    return {"passed": not reasons and not unknown, "reasons": reasons, "causes": causes, "unknown": unknown}


def truth_brief(truth):
    """One line of what ran: NVSHMEM IBGDA and its NIC handler, NCCL's network, GIN and channel paths."""
    _check_truth(truth)
    nv, nccl, ep = truth["nvshmem"], truth["nccl"], truth["deepep"]
    parts = []
    up = sorted(t for t, s in (nv.get("transports") or {}).items() if s == "initialized")
    if nv.get("ibgda") or up:
        text = "NVSHMEM %s" % ("+".join(up) or "-")
        if nv.get("ibgda"):
            text += ", IBGDA %s" % nv["ibgda"]
        if nv.get("nic_handler") not in (None, "auto"):
            text += ", NIC handler %s" % nv["nic_handler"]
        if nv.get("cpu_fallback"):
            text += ", CPU fallback"
        parts.append(text)
    if nccl.get("version") or nccl.get("networks") or nccl.get("paths"):
        text = "NCCL %s" % (nccl.get("version") or "?")
        if nccl.get("networks"):
            text += " net %s" % "+".join(nccl["networks"])
        if nccl.get("gin"):
            text += " GIN %s" % nccl["gin"]
        if nccl.get("path_classes"):
            text += " paths %s" % "+".join(nccl["path_classes"])
        if nccl.get("mnnvl") is not None:
            text += " MNNVL %s" % ("clique of %s" % nccl["mnnvl_clique_size"] if nccl["mnnvl"] else "down")
        parts.append(text)
    if ep.get("nccl_version") or ep.get("qps") is not None:
        parts.append("DeepEP on NCCL %s%s" % (ep.get("nccl_version") or "?",
                                              ", %s QPs" % ep["qps"] if ep.get("qps") is not None else ""))
    return "; ".join(parts) or "nothing said (no debug output)"


def transport_verdict(output, policy=None):
    """The transport part of a verification record: ``{truth, gate, brief, policy}`` from a run's output."""
    truth = output if isinstance(output, dict) and "nvshmem" in output else transport_truth(output)
    gate = transport_gate(truth, policy)
    return {"truth": truth, "gate": gate, "brief": truth_brief(truth), "policy": check_policy(policy)}
