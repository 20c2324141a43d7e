# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The judgement of one EP test run: its output parsed, held against the profile's gate and transport policy, and
written as the verification record the summary reads, in one place for every stage a verify role runs.

The ep_test action calls :func:`judge` with what the run returned and its ``judge`` option (``JUDGE_SPEC``), so a
verify role's run of a test is one task (start, wait, read back, judge, record) where each stage was a launch, a wait,
a fetch and a ``set_fact`` of its own that parsed, selected the thresholds, gated and built the record in Jinja.

``STAGES`` says what each stage is judged by: the quick connectivity test by its ranks' lines (``gate.connectivity``),
every other stage by DeepEP's bandwidth output (``bandwidth.parse_output``) held against the profile's thresholds
(``select_thresholds``, which refuses a profile with no gate of its own) and, where the transport check is on, by
the transport the run really brought up (``transport.transport_verdict``) held to its backend's policy for the scope
(``backends.transport_policy``: the descriptor's, with the site's ``transport_policies`` merged over it).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError, select_thresholds
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import (
    ALIASES,
    BACKENDS,
    backend as backend_of,
    check_overrides,
    transport_policy,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import BandwidthInputError, parse_output
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.gate import connectivity, gate
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import (
    check_policy,
    transport_verdict,
)

__all__ = ["JUDGE_SPEC", "STAGES", "JudgeError", "check", "policy", "judge", "not_run"]

# Each stage: the words its gate uses for the run ("intranode test did not finish within 900s"), or None for a stage
# judged by its ranks' lines instead of bandwidth figures.
STAGES = {
    "intranode": "intranode test",
    "internode": "internode test",
    "scaleup": "scale-up domain test",
    "sweep": "sweep pair test",
    "low_latency_intranode": "low-latency test",
    "low_latency_internode": "low-latency test",
    "engram": "Engram test",
    "pp": "PP test",
    "agrs": "all-gather/reduce-scatter test",
    "barrier": "barrier test",
    "connectivity": None,
}

# The scope of the collection's gates (the profile object's, _gpu_families.GATES) each gated stage is held against.
GATE_SCOPES = {"intranode": "intranode", "internode": "internode", "scaleup": "scaleup", "sweep": "internode",
               "low_latency_intranode": "low_latency_intranode", "low_latency_internode": "low_latency_internode",
               "engram": None, "pp": None, "agrs": None, "barrier": None}
# The gate of a stage without one (GATE_SCOPES None): the run's exit, completeness and correctness alone.
_UNGATED = {"matched": None, "thresholds": {}, "shape": "any", "source": None, "measured_with": None,
            "provisional": "no figure of this test was measured here or published: its figures are recorded, not "
                           "gated (the run must finish with every rank's figures and its correctness stage passed)"}

# The suboptions of ep_test's judge option (modules/ep_test.py documents them).
JUDGE_SPEC = dict(
    stage=dict(type="str", required=True, choices=sorted(STAGES)),
    test=dict(type="str"),
    thresholds=dict(type="dict", default={}),
    table_name=dict(type="str", default="the thresholds table"),
    profile=dict(type="str"),
    family=dict(type="str"),
    gpus=dict(type="int"),
    transport_policy=dict(type="dict"),
    transport_policies=dict(type="dict"),
    fabric=dict(type="str"),
    record=dict(type="dict", default={}),
)

# Fields the judge writes; the record option adds the caller's own (host, scope, group, rank ...), never these.
_OWN = ("stage", "test", "backend", "parsed", "gate", "thresholds", "gate_basis", "transport", "log", "figures")


class JudgeError(ValueError):
    """A judge option that cannot be judged by (a profile with no gate, a table of the wrong shape), named."""


def policy(spec, backend=None, scope=None):
    """The transport policy the run is held to, as ``backends.transport_policy`` chooses it, or None without a
    transport check. ``spec['transport_policy']``: a policy given as it is (a script of one's own, no backend);
    ``spec['transport_policies']``: the site's overrides, merged over the policy of the run's ``backend`` for
    ``scope`` (the stage's gate scope when None). JudgeError names a bad policy or a missing backend."""
    given, overrides = spec.get("transport_policy"), spec.get("transport_policies")
    if given is not None and overrides is not None:
        raise JudgeError("judge.transport_policy and judge.transport_policies are both set; expected one: a policy of "
                         "your own, or the site's overrides of the backend's policy")
    try:
        if given is not None:
            check_policy(given)
            return {"backend": None, "scope": None, "profile": spec.get("profile"), "matched": None, "policy": given}
        if overrides is None:
            return None
        if not backend:
            check_overrides(overrides)
            raise JudgeError("judge.transport_policies needs the run's backend (expected ep_test's backend option, "
                             "such as backend=v2, or a transport_policy of your own)")
        return transport_policy(backend, scope or GATE_SCOPES[spec["stage"]] or spec["stage"], overrides,
                                profile=spec.get("profile"), family=spec.get("family"),
                                fabric=spec.get("fabric") or None)
    except VerifyInputError as exc:
        where = "transport_policy" if given is not None else "transport_policies"
        raise JudgeError("judge.%s: %s" % (where, exc)) from exc


def check(spec, backend=None, scope=None):
    """The judge option checked before the test runs (a test of 15 minutes is not run to be refused after):
    the record's fields, the transport policy (:func:`policy`), and the gate the profile takes: the collection's gates
    of the stage's scope with ``thresholds`` as the site's overrides (``select_thresholds`` refuses a profile with no
    gate of its own, by name). Returns ``select_thresholds``' choice, or None for a stage without a gate."""
    return _checked(spec, backend, scope)[0]


def _checked(spec, backend, scope):
    """:func:`check`'s gate choice and the transport policy (:func:`policy`) it resolved: ``(chosen, held_to)``."""
    clash = sorted(set(spec.get("record") or {}) & set(_OWN))
    if clash:
        raise JudgeError("judge.record sets %s, which the judge writes itself; expected only the caller's own fields "
                         "(host, scope, group, rank, world_size, master_addr ...)" % ", ".join(clash))
    if STAGES[spec["stage"]] is None:
        return None, None
    held_to = policy(spec, backend, scope)
    if GATE_SCOPES[spec["stage"]] is None:
        return dict(_UNGATED), held_to
    try:
        chosen = select_thresholds(spec.get("thresholds") or {}, spec.get("profile"), gpus=spec.get("gpus"),
                                   table_name=spec.get("table_name"), family=spec.get("family"),
                                   scope=GATE_SCOPES[spec["stage"]],
                                   backend=backend_of(backend)["name"] if backend else None)
    except VerifyInputError as exc:
        raise JudgeError("judge: %s" % exc) from exc
    return chosen, held_to


def gate_basis(chosen, generation=None):
    """What a record's gate rests on: the entry chosen (``matched``), its ``shape`` and ``source``, and why it is
    ``provisional`` (None when measured): the entry's own reason, or, when the run's backend (its ``generation``) is
    not among the backends whose runs measured the figures, that one."""
    provisional = chosen.get("provisional")
    backend = ALIASES.get(generation, generation)
    measured = chosen.get("measured_with")
    if provisional is None and measured and backend in BACKENDS and backend not in measured:
        provisional = ("the figures were measured with %s; no %s run measured them"
                       % (" and ".join(BACKENDS[name]["title"] if name in BACKENDS else name for name in measured),
                          BACKENDS[backend]["title"]))
    return {"matched": chosen["matched"], "shape": chosen["shape"], "source": chosen.get("source"),
            "provisional": provisional}


def not_run(spec, reason, script, host=None, backend=None):
    """The record of a stage the node's hardware cannot run (``reason``): its gate ``skipped`` and passed (the node is
    not at fault), the reason in ``reasons``; the caller's fields as :func:`judge` writes them."""
    record = _head(spec, script, None, host, backend)
    record.update(parsed={}, thresholds=None, gate_basis=None, transport=None,
                  gate={"passed": True, "status": "skipped", "checks": [], "reasons": [reason], "diagnosis": []})
    return record


def _head(spec, script, log, host, backend=None):
    """What every record starts with: the node as host and scope, the caller's own fields over them, then the stage,
    the test (``spec['test']``, else the script run), the backend that ran it (its descriptor's name; None for a
    script of one's own) and the log."""
    record = {"host": host, "scope": host}
    record.update(spec.get("record") or {})
    record.update(stage=spec["stage"], test=spec.get("test") or script,
                  backend=backend_of(backend)["name"] if backend else None, log=log)
    return record


def judge(spec, output, rc, timed_out, timeout_s, script, log=None, host=None, backend=None, scope=None):
    """The verification record of one run.

    ``spec``: the typed judge option (``JUDGE_SPEC``). ``output``, ``rc``, ``timed_out``: what the run returned
    (rc -1 for a run that did not finish). ``timeout_s``: the run's bound, named in a timeout's reason. ``script``:
    the test run, the record's ``test`` unless ``spec['test']`` names it. ``log``: the log's copy on the controller.
    ``host``: the node, the record's ``host`` and ``scope`` unless ``spec['record']`` gives them. ``backend``: the
    run's (``backends``): its generation is what the output is parsed as (read from the output when None), its
    policy for ``scope`` what the transport is held to (:func:`policy`).
    Returns ``{host, scope, stage, test, parsed, gate, thresholds, gate_basis, transport, log, ...record}``;
    ``transport`` carries ``basis``, the policy's backend, scope and the site's entry taken.
    """
    stage = spec["stage"]
    chosen, held_to = _checked(spec, backend, scope)
    generation = backend_of(backend)["generation"] if backend else None
    record = _head(spec, script, log, host, backend)
    if STAGES[stage] is None:
        record.update(parsed={}, thresholds=None, gate_basis=None, transport=None,
                      gate=connectivity(output, rc=rc, timed_out=timed_out, timeout_s=timeout_s))
        return record
    try:
        parsed = parse_output(output, test=record["test"], generation=generation)
        verdict = gate(parsed, chosen["thresholds"], rc=rc, timed_out=timed_out, timeout_s=timeout_s, stage=STAGES[stage])
        transport = None
        if held_to is not None:
            transport = transport_verdict(output, held_to["policy"])
            transport["basis"] = {"backend": held_to["backend"], "scope": held_to["scope"],
                                  "fabric": held_to.get("fabric"), "matched": held_to["matched"]}
    except (VerifyInputError, BandwidthInputError) as exc:
        raise JudgeError("judge: %s" % exc) from exc
    record.update(parsed=parsed, gate=verdict, thresholds=chosen["thresholds"],
                  gate_basis=gate_basis(chosen, generation if generation is not None else parsed.get("generation")),
                  transport=transport)
    if parsed.get("extras") is not None:
        record["figures"] = dict((name, value) for name, value in parsed["extras"]["figures"].items()
                                 if value is not None)
    return record
