# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stages of a node's verification (roles verify_intranode and verify_internode), as data for each role's one
``ep_test`` task.

A stage is one run of a backend's test for a scope: the EP backend's own test of the scope (``intranode``), its
low-latency test where the profile serves with low latency, its other tests where it has them (DeepEP V2's Engram,
PP, all-gather/reduce-scatter, barrier), and NCCL EP's benchmark beside it in each of its modes. Each stage says
what ep_test takes (backend, scope, test name, arguments, interpreter, gates and their variable, whether V2's JIT
cache and the node's RDMA NIC are given) and which of the role's records it becomes (``record``: main, low_latency,
extras, nccl_ep), so the role launches, waits, judges and records every backend's test the same way. Across nodes
(``internode_stages``) a group's stages are its scope's test (internode, or the scale-up domain test of a group that
is one NVLink domain), then, across nodes over RDMA, the low-latency test and NCCL EP's benchmark in each mode; each
carries its whole judge and whether the NIC traffic around it is checked. Pure logic.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["RECORDS", "intranode_stages", "internode_stages"]

# The role's record each stage becomes (verify_intranode_<kind>; the main record's variable is verify_intranode_record).
RECORDS = ("main", "low_latency", "extras", "nccl_ep")
_SETTINGS = ("script", "args", "low_latency_args", "nccl_ep_args", "python", "nccl_ep_python", "thresholds",
             "low_latency_thresholds", "nccl_ep_thresholds", "low_latency", "extras", "nccl_ep", "nccl_ep_scopes")


_INTERNODE_SETTINGS = ("backend", "script", "args", "low_latency_args", "nccl_ep_args", "python", "nccl_ep_python",
                       "judge", "scaleup_judge", "low_latency_judge", "nccl_ep_thresholds", "low_latency", "nccl_ep",
                       "nccl_ep_scopes", "nic_check")
_GROUP_SCOPES = ("internode", "scaleup")


def _check_settings(settings, names, bools, lists):
    """The settings mapping, every name present, the switches booleans and the scope lists lists of names."""
    missing = [name for name in names if not isinstance(settings, dict) or name not in settings]
    if missing:
        raise VerifyInputError("settings lack %s: expected the role's values of %s"
                               % (", ".join(missing), ", ".join(names)))
    for name in lists:
        value = settings[name]
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise VerifyInputError("settings.%s %r: expected a list of scope names" % (name, value))
    for name in bools:
        if not isinstance(settings[name], bool):
            raise VerifyInputError("settings.%s %r: expected true or false" % (name, settings[name]))
    return settings


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
    if not isinstance(scopes, (list, tuple)) or not all(isinstance(item, str) for item in scopes):
        raise VerifyInputError("scopes %r: expected a list of scope names" % (scopes,))
    s = _check_settings(settings, _SETTINGS, ("low_latency", "nccl_ep"), ("extras", "nccl_ep_scopes"))
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


def internode_stages(scope, settings):
    """The stages of one node in a group's run, in the order they run (after the group's connectivity test).

    ``scope``: the group's, ``internode`` (across nodes over RDMA) or ``scaleup`` (the trays of one NVLink domain);
    ``settings``: the role's values by the names of ``_INTERNODE_SETTINGS`` - the ``backend`` (DeepEP's generation),
    the site's internode ``script`` and ``args``, the low-latency and NCCL EP ``args``, both interpreters, the base
    ``judge`` (gates, profile, family, fabric, transport policies) and what the scale-up and low-latency stages change
    in it (``scaleup_judge``, ``low_latency_judge``), NCCL EP's gates, ``low_latency`` and ``nccl_ep`` (run those
    tests; across nodes over RDMA only), ``nccl_ep_scopes`` and ``nic_check`` (the NIC traffic around the scope's
    test is judged). Each stage: name (its log's and the launcher's), backend, scope, record (main, low_latency,
    nccl_ep), python, args, script (the site's, for the internode test only), judge (without the record's place) and
    nics. Raises VerifyInputError naming a value not of its form."""
    if scope not in _GROUP_SCOPES:
        raise VerifyInputError("scope %r: expected the group's scope, one of %s" % (scope, ", ".join(_GROUP_SCOPES)))
    s = _check_settings(settings, _INTERNODE_SETTINGS, ("low_latency", "nccl_ep", "nic_check"), ("nccl_ep_scopes",))
    for name in ("judge", "scaleup_judge", "low_latency_judge"):
        if not isinstance(s[name], dict):
            raise VerifyInputError("settings.%s %r: expected a mapping of ep_test's judge options" % (name, s[name]))
    if not isinstance(s["backend"], str) or not s["backend"]:
        raise VerifyInputError("settings.backend %r: expected DeepEP's generation, such as v2" % (s["backend"],))

    def stage(name, backend, test_scope, record, python, args, changes, script=None, nics=False):
        merged = dict(s["judge"], **changes)
        merged["stage"] = test_scope
        return {"name": name, "backend": backend, "scope": test_scope, "record": record, "python": python,
                "args": list(args or []), "script": script or None, "judge": merged, "nics": nics}

    stages = [stage(scope, s["backend"], scope, "main", s["python"], s["args"],
                    s["scaleup_judge"] if scope == "scaleup" else {},
                    script=s["script"] if scope == "internode" else None, nics=s["nic_check"] and scope == "internode")]
    if scope != "internode":
        return stages
    if s["low_latency"]:
        stages.append(stage("low_latency", s["backend"], "low_latency_internode", "low_latency", s["python"],
                            s["low_latency_args"], s["low_latency_judge"]))
    if s["nccl_ep"]:
        stages += [stage("nccl_ep_" + item, "nccl_ep", item, "nccl_ep", s["nccl_ep_python"], s["nccl_ep_args"],
                         {"thresholds": s["nccl_ep_thresholds"], "table_name": "verify_internode_nccl_ep_thresholds"})
                   for item in s["nccl_ep_scopes"]]
    return stages
