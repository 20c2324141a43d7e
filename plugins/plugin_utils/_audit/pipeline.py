# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One facts-to-findings pipeline for the roles that judge a node with the audit's rules: the facts document of a
context (``preflight``: the preflight role's node_stack result and settings; ``sglang``: the sglang role's facts and
server settings), the rules of that context (the contexts are data: :data:`CONTEXTS`), the findings, the findings at
or above a severity cut-off (:func:`at_or_above`, one order for every caller) and, for preflight, the report (summary
lines, failures with their fixes, notes). The audit's own node document is ``document.node_document``.

Pure controller-side logic (no Ansible objects).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_source import source_cuda_check
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.rc_layout import catalogued_tree_check
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import (
    NvshmemRdmaError,
    mlx5dv_verdict,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import SEVERITIES, evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError

__all__ = ["CONTEXTS", "FAIL_ON", "levels_at_or_above", "at_or_above", "rules_of", "preflight_document", "preflight_report",
           "sglang_document", "run_pipeline"]

# How each context judges: the engine's context (a rule's ``when``), the order of the findings and, where only some
# rules of that engine context apply, the prefix of their ids.
CONTEXTS = {
    "preflight": {"engine_context": "preflight", "order": "catalogue", "id_prefix": None},
    "sglang": {"engine_context": "audit", "order": "severity", "id_prefix": "SGLANG_"},
}
# The severity cut-offs: a severity (that one or worse) or none (nothing fails).
FAIL_ON = SEVERITIES + ("none",)
LIBCUDA_NAMES = ("libcuda.so", "libcuda.so.1")


def levels_at_or_above(fail_on):
    """The severities ``fail_on`` or worse (most severe first in SEVERITIES); ``none``: no severity."""
    if fail_on not in FAIL_ON:
        raise AuditError("fail_on %r is not one of %s" % (fail_on, ", ".join(FAIL_ON)))
    return () if fail_on == "none" else SEVERITIES[:SEVERITIES.index(fail_on) + 1]


def at_or_above(findings, fail_on):
    """The findings of severity ``fail_on`` or worse; ``none``: no finding."""
    levels = levels_at_or_above(fail_on)
    return [f for f in findings if f.get("severity") in levels]


def rules_of(catalogue, context):
    """The rules ``context`` judges: the catalogue's (or the list's) rules, those of the context's id prefix."""
    rules = catalogue.get("rules") if isinstance(catalogue, dict) else catalogue
    if not isinstance(rules, list):
        raise AuditError("rules: expected a catalogue (a mapping with rules) or a list of rules, got %s"
                         % type(catalogue).__name__)
    prefix = CONTEXTS[context]["id_prefix"]
    if prefix is None:
        return rules
    return [r for r in rules if isinstance(r, dict) and str(r.get("id", "")).startswith(prefix)]


def _bool(value):
    """Ansible's ``bool`` filter: true for true, yes, on, y, t, 1 (any case); false otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.lower() in ("yes", "on", "1", "true", "y", "t")
    return value == 1


def _int(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, str, float)):
        raise AuditError("settings.%s: %r is not a whole number" % (name, value))
    try:
        return int(value)
    except ValueError:
        raise AuditError("settings.%s: %r is not a whole number" % (name, value)) from None


def _str(value):
    return "" if value is None else str(value)


def _mapping(value, name):
    if not isinstance(value, dict):
        raise AuditError("%s: expected a mapping, got %r" % (name, value))
    return value


def _list(value, name):
    if not isinstance(value, list):
        raise AuditError("settings.%s: expected a list, got %r" % (name, value))
    return value


PREFLIGHT_SETTINGS = ("min_gpus", "driver_min_version", "cuda_arch", "cuda_version", "cuda_home", "cuda_by_play",
                      "pip_by_play", "python", "require_rdma", "min_active_rdma", "required_modules",
                      "optional_modules", "require_mlx5dv", "mlx5dv_by_play", "mlx5dv_header", "mlx5dv_symbol",
                      "nvshmem_version", "libcuda_dirs", "deepep_v2", "deepep_v2_nic_name", "env_script_by_play",
                      "deepep_commit", "nvshmem_source", "deepep_internode", "fabric", "nccl_version",
                      "gpu_family", "host_arch")
SGLANG_SETTINGS = ("stage", "server", "transfer_engine", "mooncake_dmabuf", "use_bundled_deepep")


def _settings(settings, names):
    settings = _mapping(settings, "settings")
    missing = [n for n in names if n not in settings]
    unknown = sorted(str(n) for n in settings if n not in names)
    if missing or unknown:
        parts = (["missing " + ", ".join(missing)] if missing else []) + (["unknown " + ", ".join(unknown)]
                                                                          if unknown else [])
        raise AuditError("settings: " + "; ".join(parts))
    return settings


def _libcuda_found(facts, cuda, libcuda_dirs, cuda_home):
    """The libcuda files the node has, driver directories first; the toolkit's stubs count once a toolkit is there."""
    stubs = cuda_home + "/lib64/stubs"
    found_paths = facts.get("gpufleet_paths") if isinstance(facts.get("gpufleet_paths"), dict) else {}
    out = []
    for directory in list(libcuda_dirs) + [stubs]:
        if not cuda.get("version") and directory == stubs:
            continue
        for name in LIBCUDA_NAMES:
            path = "%s/%s" % (directory, name)
            if (found_paths.get(path) or {}).get("exists"):
                out.append({"path": path, "dir": directory, "name": name})
    return out


def _nvshmem_source(settings):
    """The catalogue's judgement of the NVSHMEM source build against the profile's CUDA (nvshmem_source_cuda13)."""
    try:
        return source_cuda_check(_str(settings["nvshmem_version"]), _str(settings["cuda_version"]),
                                 builds=_bool(settings["nvshmem_source"]))
    except NvshmemRdmaError as exc:
        raise AuditError("settings: %s" % exc) from None


def preflight_document(node, host, settings):
    """The preflight role's facts document: what the node holds (its node_stack result ``node``) and what the
    ``settings`` (the role's variables, :data:`PREFLIGHT_SETTINGS`) expect."""
    node = _mapping(node, "node (the registered node_stack result)")
    facts = _mapping(node.get("ansible_facts"), "node.ansible_facts")
    s = _settings(settings, PREFLIGHT_SETTINGS)
    for name in ("gpufleet_modules", "gpufleet_cuda_toolkit", "gpufleet_imports", "gpufleet_symbols"):
        _mapping(facts.get(name), "node.ansible_facts.%s" % name)
    cuda = facts["gpufleet_cuda_toolkit"]
    header = _str(s["mlx5dv_header"])
    try:
        mlx5dv = mlx5dv_verdict(facts["gpufleet_symbols"].get(header), _str(s["nvshmem_version"]))
    except NvshmemRdmaError as exc:
        raise AuditError("node.ansible_facts.gpufleet_symbols[%r]: %s" % (header, exc)) from None
    cuda_home = _str(s["cuda_home"])
    cuda_version = _str(s["cuda_version"])
    libcuda_dirs = _list(s["libcuda_dirs"], "libcuda_dirs")
    mlx5dv_by_play = _bool(s["mlx5dv_by_play"])
    return {
        "host": host,
        "gather_errors": node.get("gather_errors"),
        "gpufleet_nvidia": facts.get("gpufleet_nvidia", {}),
        "gpufleet_rdma": facts.get("gpufleet_rdma", {}),
        "gpufleet_gpus": facts.get("gpufleet_gpus", {}),
        "gpufleet_deepep_v2": facts.get("gpufleet_deepep_v2"),
        "gpufleet_gpu_fabric": facts.get("gpufleet_gpu_fabric"),
        "gpufleet_imex": facts.get("gpufleet_imex"),
        "modules": facts["gpufleet_modules"],
        "cuda": cuda,
        "pip_ok": (facts["gpufleet_imports"].get("modules") or {}).get("pip"),
        "mlx5dv_ok": mlx5dv["ok"],
        "mlx5dv": mlx5dv,
        "libcuda_found": _libcuda_found(facts, cuda, libcuda_dirs, cuda_home),
        "deepep_tree": catalogued_tree_check(_str(s["deepep_commit"]), _str(s["nvshmem_version"])),
        "nvshmem_source": _nvshmem_source(s),
        "expect": {
            "min_gpus": _int(s["min_gpus"], "min_gpus"),
            "driver_min_version": _str(s["driver_min_version"]),
            "cuda_arch": [_str(a) for a in _list(s["cuda_arch"], "cuda_arch")],
            "cuda_version": cuda_version,
            "cuda_version_dashed": cuda_version.replace(".", "-"),
            "cuda_home": cuda_home,
            "cuda_by_play": _bool(s["cuda_by_play"]),
            "pip_by_play": _bool(s["pip_by_play"]),
            "python": s["python"],
            "require_rdma": _bool(s["require_rdma"]),
            "min_active_rdma": _int(s["min_active_rdma"], "min_active_rdma"),
            "required_modules": [_str(m).replace("-", "_") for m in _list(s["required_modules"], "required_modules")],
            "optional_modules": [_str(m).replace("-", "_") for m in _list(s["optional_modules"], "optional_modules")],
            "require_mlx5dv": _bool(s["require_mlx5dv"]),
            "mlx5dv_by_play": mlx5dv_by_play,
            "mlx5dv_header": s["mlx5dv_header"],
            "mlx5dv_symbol": s["mlx5dv_symbol"],
            "nvshmem_version": s["nvshmem_version"],
            "libcuda_dirs": libcuda_dirs,
            "deepep_v2": _bool(s["deepep_v2"]),
            "deepep_internode": _bool(s["deepep_internode"]),
            "fabric": _str(s["fabric"]),
            "nccl_version": _str(s["nccl_version"]),
            "gpu_family": _str(s["gpu_family"]),
            "host_arch": _str(s["host_arch"]),
            "rdma_stack_by_play": mlx5dv_by_play,
            "env_script_sets_nic_name": s["deepep_v2_nic_name"] == "auto" and _bool(s["env_script_by_play"]),
        },
    }


def _message(finding):
    return finding.get("message") or "%s. Fix: %s" % (finding.get("title"), finding.get("fix"))


def preflight_report(document, findings, profile="-", kernel="?"):
    """The pre-flight report of one host: what the facts say, the findings (critical ones are failures, each with
    its fix; the others notes) and the one-screen summary lines. No check is decided here."""
    nv = document.get("gpufleet_nvidia") or {}
    rdma = document.get("gpufleet_rdma") or {}
    gpus = (document.get("gpufleet_gpus") or {}).get("gpus", [])
    active = rdma.get("active_devices", [])
    devices = rdma.get("devices", [])
    modules = document["modules"]
    expect = document["expect"]
    shown = []
    for name, state in (modules.get("states", {}) or {}).items():
        if state.get("state") == "loaded":
            shown.append(name)
        elif state.get("state") == "builtin":
            shown.append(name + " (built in)")
    driver = nv.get("driver_version") or ""
    cuda = document["cuda"].get("version")
    cuda_ok = len(expect["cuda_version"]) == 0 or document["cuda"].get("release") == expect["cuda_version"]
    libcuda = document["libcuda_found"]
    libcuda_so = [f["path"] for f in libcuda if f["name"] == "libcuda.so"]
    libcuda_so1 = [f["path"] for f in libcuda if f["name"] == "libcuda.so.1"]
    archs = _unique(g.get("compute_capability") for g in gpus)
    names = _unique(g.get("name") for g in gpus)
    failing = at_or_above(findings, "critical")
    failures = [_message(f) for f in failing]
    notes = [_message(f) for f in findings if f not in failing]
    summary = [
        "profile %s | kernel %s" % (profile, kernel),
        "GPUs %d x %s (cc %s), driver %s" % (len(gpus), "/".join(names) or "?", "/".join(archs) or "?",
                                             driver or "not loaded"),
        "CUDA %s at %s (want %s)" % (cuda or "none", expect["cuda_home"], expect["cuda_version"] or "any"),
        "RDMA %s, %d/%d ACTIVE, prefix %s, GID index %s" % (
            rdma.get("transport", "none"), len(active), len(devices), rdma.get("hca_prefix") or "-",
            rdma.get("recommended_gid_index") or "-"),
        "PeerMappingOverride live: %s | modules loaded: %s" % (
            nv.get("peer_mapping_override_active", False), ", ".join(shown) or "none"),
        "pip %s | mlx5dv %s | libcuda.so %s" % (
            "ok" if document["pip_ok"] else "missing", "ok" if document["mlx5dv_ok"] else "missing",
            "ok" if libcuda_so else "missing"),
    ] + ["note: " + n for n in notes] + ["FAIL: " + f for f in failures]
    return {"cuda_version": cuda, "cuda_ok": cuda_ok, "pip_ok": document["pip_ok"], "mlx5dv_ok": document["mlx5dv_ok"],
            "libcuda_so": libcuda_so, "libcuda_so1": libcuda_so1, "modules_loaded": modules.get("loaded", []),
            "modules_builtin": modules.get("builtin", []), "gpu_count": len(gpus), "cuda_arch": archs,
            "driver_version": driver, "rdma_transport": rdma.get("transport", "none"), "rdma_active": active,
            "findings": [f["id"] for f in findings], "failures": failures, "notes": notes, "summary": summary}


def _unique(values):
    out = []
    for value in values:
        if value and value not in out:
            out.append(value)
    return out


def sglang_document(facts, host, groups, settings):
    """The sglang role's facts document: the node's facts (``gpufleet_gpus``, ``gpufleet_model`` and, at the
    ``installed`` stage, ``gpufleet_sglang``) and the server settings it expects (:data:`SGLANG_SETTINGS`)."""
    facts = _mapping(facts, "facts (the node's ansible_facts)")
    s = _settings(settings, SGLANG_SETTINGS)
    server = _mapping(s["server"], "settings.server")
    if s["stage"] not in ("preflight", "installed"):
        raise AuditError("settings.stage: %r is not preflight or installed" % (s["stage"],))
    expect = dict(server, transfer_engine=s["transfer_engine"],
                  enable_dp_attention=_bool(server.get("enable_dp_attention", False)),
                  mooncake_dmabuf=_bool(s["mooncake_dmabuf"]), use_bundled_deepep=_bool(s["use_bundled_deepep"]))
    return {"host": host, "groups": list(groups or []), "reachable": True, "gather_errors": {},
            "expect": {"sglang": expect},
            "gpufleet_gpus": facts.get("gpufleet_gpus"),
            "gpufleet_model": facts.get("gpufleet_model"),
            "gpufleet_sglang": facts.get("gpufleet_sglang") if s["stage"] == "installed" else None}


def run_pipeline(facts, rules, context, host, settings, groups=None, fail_on="critical", profile="-", kernel="?"):
    """Facts to findings for ``context``: ``{document, findings, failing}`` (failing: at or above ``fail_on``) and,
    for preflight, ``report``."""
    if context not in CONTEXTS:
        raise AuditError("context %r is not one of %s" % (context, ", ".join(sorted(CONTEXTS))))
    if context == "preflight":
        document = preflight_document(facts, host, settings)
    else:
        document = sglang_document(facts, host, groups, settings)
    spec = CONTEXTS[context]
    findings = evaluate_rules(document, rules_of(rules, context), context=spec["engine_context"], order=spec["order"])
    out = {"document": document, "findings": findings, "failing": at_or_above(findings, fail_on)}
    if context == "preflight":
        out["report"] = preflight_report(document, findings, profile=profile, kernel=kernel)
    return out
