# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stages of a node's verification (role verify_intranode), as data for its one ``ep_test`` task.

A stage is one run of a backend's test for a scope: the EP backend's own test of the scope (``intranode``), its
low-latency test where the profile serves with low latency, its other tests where it has them (DeepEP V2's Engram,
PP, all-gather/reduce-scatter, barrier), and NCCL EP's benchmark beside it in each of its modes. Each stage says
what ep_test takes (backend, scope, test name, arguments, interpreter, gates and their variable, whether V2's JIT
cache and the node's RDMA NIC are given) and which of the role's records it becomes (``record``: main, low_latency,
extras, nccl_ep), so the role launches, waits, judges and records every backend's test the same way. Pure logic.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["RECORDS", "intranode_stages"]

# The role's record each stage becomes (verify_intranode_<kind>; the main record's variable is verify_intranode_record).
RECORDS = ("main", "low_latency", "extras", "nccl_ep")
_SETTINGS = ("script", "args", "low_latency_args", "nccl_ep_args", "python", "nccl_ep_python", "thresholds",
             "low_latency_thresholds", "nccl_ep_thresholds", "low_latency", "extras", "nccl_ep", "nccl_ep_scopes")


def _stage(name, backend, scope, record, python, args=(), script=None, thresholds=None, table_name=None, jit=True,
           rdma=False):
    return {"name": name, "backend": backend, "scope": scope, "record": record, "python": python,
            "args": list(args or []), "script": script or None, "thresholds": thresholds, "table_name": table_name,
            "jit": jit, "rdma": rdma}


def intranode_stages(backend, scopes, settings):
    """The stages of one node, in the order they run.

    ``backend``: the EP backend (``ep_backend``'s name); ``scopes``: the scopes it has a test for (its other tests
    run only where it has them); ``settings``: the role's values by the names of ``_SETTINGS`` - the intranode test's
    ``script`` and ``args``, the low-latency and NCCL EP ``args``, both interpreters, the three gate tables,
    ``low_latency`` (run the low-latency test), ``extras`` (the other tests asked for), ``nccl_ep`` and
    ``nccl_ep_scopes`` (NCCL EP's benchmark in these scopes). Raises VerifyInputError naming a value not of its
    form."""
    if not isinstance(backend, str) or not backend:
        raise VerifyInputError("backend %r: expected the EP backend's name (ep_backend), such as deepep_v2" % (backend,))
    missing = [name for name in _SETTINGS if not isinstance(settings, dict) or name not in settings]
    if missing:
        raise VerifyInputError("settings lack %s: expected the role's values of %s"
                               % (", ".join(missing), ", ".join(_SETTINGS)))
    s = settings
    for name, value in (("scopes", scopes), ("settings.extras", s["extras"]),
                        ("settings.nccl_ep_scopes", s["nccl_ep_scopes"])):
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise VerifyInputError("%s %r: expected a list of scope names" % (name, value))
    for name in ("low_latency", "nccl_ep"):
        if not isinstance(s[name], bool):
            raise VerifyInputError("settings.%s %r: expected true or false" % (name, s[name]))
    low_latency, extras, nccl_ep, nccl_ep_scopes = s["low_latency"], s["extras"], s["nccl_ep"], s["nccl_ep_scopes"]
    stages = [_stage("intranode", backend, "intranode", "main", s["python"], s["args"], script=s["script"],
                     thresholds=s["thresholds"], table_name="verify_intranode_thresholds")]
    if low_latency:
        stages.append(_stage("low_latency", backend, "low_latency_intranode", "low_latency", s["python"],
                             s["low_latency_args"], thresholds=s["low_latency_thresholds"],
                             table_name="verify_intranode_low_latency_thresholds"))
    stages += [_stage(scope, backend, scope, "extras", s["python"], rdma=True) for scope in extras if scope in scopes]
    if nccl_ep:
        stages += [_stage("nccl_ep_" + scope, "nccl_ep", scope, "nccl_ep", s["nccl_ep_python"], s["nccl_ep_args"],
                          thresholds=s["nccl_ep_thresholds"], table_name="verify_intranode_nccl_ep_thresholds",
                          jit=False)
                   for scope in nccl_ep_scopes]
    return stages
