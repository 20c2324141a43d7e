# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One node's facts document for the audit: built from the registered result of ``node_stack`` (and, on some
nodes, of ``sglang_env``, ``model_config`` and ``serve_state``), and Ansible's values made plain data for
jmespath, JSON and YAML. The rules engine (``plugin_utils/_audit/engine``) judges these documents.

Pure controller-side logic (no Ansible objects).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.rc_layout import rc_layout_check

__all__ = ["DOCUMENT_FACTS", "NOT_GATHERED", "deepep_rc_layout", "loaded_nvshmem_version", "node_document",
           "plain_data"]

# Facts of the node_stack result that go into the facts document as they are.
DOCUMENT_FACTS = ("gpufleet_nvidia", "gpufleet_rdma", "gpufleet_gpus", "gpufleet_bundled_nvshmem", "gpufleet_stack",
                  "gpufleet_linkage", "gpufleet_deepep_v2", "gpufleet_nccl_ep", "gpufleet_gpu_fabric", "gpufleet_imex",
                  "gpufleet_model", "gpufleet_serving")
NOT_GATHERED = "the play failed on this node before its facts were gathered"
_SITE_DIRS = ("/site-packages/", "/dist-packages/")


def _sglang_value(value):
    """``gpufleet_sglang`` of an environment without the sglang distribution is null, so the SGLANG_* rules judge only
    nodes that have SGLang."""
    return value if ((value or {}).get("versions") or {}).get("sglang") else None


def node_document(host, groups, result, expect=None):
    """One node's facts document from the registered result of ``node_stack`` (``gather`` of every set).

    ``gpufleet_sglang``: the ``gpufleet_sglang`` facts of ``result`` where node_stack gathered ``sglang`` (the audit
    role does on nodes the inventory gives SGLang; a failure to read them is already under its ``gather_errors``),
    null where it did not. ``gpufleet_model`` (the served model's ``config.json``, set ``model``, on a node the audit
    reads SGLang on) and ``gpufleet_serving`` (the SGLang units and router, set ``serving``, on a node of the serving
    groups) are read in the same call, with ``role_set_errors=record``: null where not gathered, a reason under
    ``gather_errors`` where they could not be read.

    ``result`` None or empty: the node never got to the gathering task (reported as not reachable). An
    unreachable result gives ``reachable: false`` with the connection's message; a failed one keeps
    ``reachable: true`` and names the failure under ``gather_errors.node_stack``. ``gpufleet_nvshmem`` and
    ``gpufleet_deepep`` are the stack's ``nvshmem`` and ``deepep`` (the shapes of the build modules' facts).
    ``gpufleet_linkage`` (the DeepEP build's linkage record checked against the node) and ``gpufleet_deepep_v2`` (DeepEP
    V2's runtime requirements and their checks) are null where they were not gathered.
    """
    result = result if isinstance(result, dict) else {}
    doc = {"host": host, "groups": list(groups or []), "reachable": True, "unreachable_reason": None,
           "expect": dict(expect or {}), "gather_errors": {}}
    if not result:
        doc.update(reachable=False, unreachable_reason=NOT_GATHERED)
    elif result.get("unreachable"):
        doc.update(reachable=False, unreachable_reason=result.get("msg") or "unreachable")
    facts = result.get("ansible_facts") if isinstance(result.get("ansible_facts"), dict) else {}
    if doc["reachable"]:
        errors = dict(result.get("gather_errors") or {})
        if result.get("failed") or result.get("skipped"):
            errors["node_stack"] = result.get("msg") or ("skipped" if result.get("skipped") else "failed")
        doc["gather_errors"] = errors
    for name in DOCUMENT_FACTS:
        doc[name] = facts.get(name) if doc["reachable"] else None
    stack = doc["gpufleet_stack"] if isinstance(doc["gpufleet_stack"], dict) else {}
    doc["gpufleet_nvshmem"] = stack.get("nvshmem")
    doc["gpufleet_deepep"] = stack.get("deepep")
    doc["gpufleet_deepep_rc_layout"] = deepep_rc_layout(doc) if doc["reachable"] else None
    doc["gpufleet_sglang"] = _sglang_value(facts.get("gpufleet_sglang")) if doc["reachable"] else None
    return doc


def loaded_nvshmem_version(doc):
    """The NVSHMEM version the installed DeepEP loads at run time: the host library the import probe saw mapped
    (under a bundled copy's directory, or the build's NVSHMEM), else torch's bundled copy where it wins (or where the
    build used pip's NVSHMEM), else the NVSHMEM the build compiled against (None when unknown)."""
    deepep = doc.get("gpufleet_deepep") or {}
    build = deepep.get("nvshmem_build") or {}
    built = _built_nvshmem(deepep)
    bundled = doc.get("gpufleet_bundled_nvshmem") or {}
    probe = (doc.get("gpufleet_stack") or {}).get("deep_ep_import")
    mapped = probe.get("mapped") if isinstance(probe, dict) else None
    hosts = (mapped.get("nvshmem_host") or []) if isinstance(mapped, dict) else []
    if len(hosts) == 1:
        for entry in [b for b in bundled.get("bundled") or [] if isinstance(b, dict)]:
            if entry.get("lib_dir") and entry.get("version") and \
                    hosts[0].startswith(entry["lib_dir"].rstrip("/") + "/"):
                return entry["version"]
        if build.get("root") and hosts[0].startswith(build["root"].rstrip("/") + "/"):
            return built
    first = next((b.get("version") for b in bundled.get("bundled") or [] if isinstance(b, dict) and b.get("version")),
                 None)
    from_pip = any(part in "%s/" % (build.get("root") or "") for part in _SITE_DIRS)
    if first and (bundled.get("bundled_would_win") or from_pip):
        return first
    return built


def deepep_rc_layout(doc):
    """``gpufleet_deepep_rc_layout``: whether the installed DeepEP indexes NVSHMEM's RC QPs as the NVSHMEM it loads
    stores them (``_comm/rc_layout.rc_layout_check`` over the build's record); null without DeepEP."""
    deepep = doc.get("gpufleet_deepep") or {}
    if not deepep.get("installed"):
        return None
    record = deepep.get("nvshmem_rc_layout")
    tree = record.get("tree") if isinstance(record, dict) else None
    return rc_layout_check(tree, _built_nvshmem(deepep), loaded_nvshmem_version(doc), recorded=isinstance(record, dict))


def _built_nvshmem(deepep):
    """The NVSHMEM version the installed DeepEP was built against (its stamp's, else its NVSHMEM build's)."""
    return (deepep.get("built_against") or {}).get("nvshmem") or (deepep.get("nvshmem_build") or {}).get("version")


def plain_data(value):
    """Ansible's lazy containers and tagged strings -> plain dict/list/str (for jmespath, json and yaml)."""
    if isinstance(value, dict):
        return dict((str(k), plain_data(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value
