# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdicts of the serving verification (role verify_serving): the router's /readiness, its /workers and a chat
completion through it (``router_records``), a request straight to rank 0 of each engine that must be refused with
SGLang's PD error of its role (``direct_records``), whether the router's /workers shows the plan (``workers_settled``,
the end of the wait), and the records of the whole play in their order, with the planned targets that are not hosts
of the play (``play_records``). Each verdict is a record of the verify_summary filter.

Controller only: pure logic over what the uri and command modules return and sglang_serve's plan; standard library.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import UnitValueError, reply_bool
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["CHECKS", "router_records", "direct_records", "workers_settled", "play_records", "serving_gate"]

# The uri module's message without its "Status code was -1 and not [...]: " head.
_NO_ANSWER = re.compile(r"Status code was -?[0-9]+ and not .*?: *")
_SERVE_AGAIN = "rerun playbooks/serve.yml"


def _int(value, default=0):
    """Jinja's ``int`` filter: an int, a float's or a numeric string's integer part, else ``default``."""
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


def _text(value):
    """``value | default('', true) | string``: the text of a value, '' for none or an empty one."""
    return str(value) if value else ""


def _get(data, *path):
    """``data.a.b[0].c`` read as Jinja reads it: None where any step is missing."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(data, (list, tuple)) or len(data) <= step:
                return None
            data = data[step]
        elif isinstance(data, dict) and step in data:
            data = data[step]
        else:
            return None
    return data


def _has(data, *path):
    """Whether ``data.a.b`` is defined (its value may be None)."""
    for step in path:
        if not isinstance(data, dict) or step not in data:
            return False
        data = data[step]
    return True


def _message(result):
    """A uri result's message without the status head."""
    return _NO_ANSWER.sub("", str(result.get("msg", "")))


def _plan(plan):
    if not isinstance(plan, dict) or not isinstance(plan.get("router"), dict):
        raise VerifyInputError("plan must be sglang_serve_plan with a router ({port, kind, hosts}), "
                               "expected_workers ({prefill, decode}) and instances; got %r" % (plan,))
    if not isinstance(plan.get("expected_workers"), dict):
        raise VerifyInputError("plan.expected_workers must be a mapping {prefill: N, decode: N}; got %r"
                               % (plan.get("expected_workers"),))
    return plan


def _record(host, scope, stage, test, reasons, diagnosis, figures, error=False, passed=None):
    passed = not reasons if passed is None else passed
    return {"host": host, "scope": scope, "stage": stage, "test": test,
            "gate": {"passed": passed, "status": "pass" if passed else ("error" if error else "fail"),
                     "reasons": [] if passed else reasons, "diagnosis": [] if passed else diagnosis},
            "figures": figures}


def _router_down(plan, host, tail=": check its unit (systemctl status, journalctl), " + _SERVE_AGAIN):
    return "the router does not serve on port %s of %s%s" % (plan["router"].get("port"), host, tail)


# ------------------------------------------------------------------------------------------ the router
def _chat(run):
    """The chat completion the role's command printed as JSON; no JSON is status -1 with the error."""
    run = run if isinstance(run, dict) else {}
    stdout = run.get("stdout") or ""
    if isinstance(stdout, str) and stdout.startswith("{"):
        return json.loads(stdout)
    return {"status": -1, "json": None, "content": "", "latency_ms": None,
            "error": run.get("stderr") or run.get("msg", "")}


def _readiness(readiness, plan, host, scope, kind, ready_timeout):
    status = _int(readiness.get("status", -1))
    if status == 200:
        reasons, diagnosis = [], []
    elif status >= 0:
        reasons = ["the router's /readiness answered %s after %s s of waiting, not 200" % (status, ready_timeout)]
    else:
        reasons = ["the router's /readiness gave no answer within %s s: %s" % (ready_timeout, _message(readiness))]
    if status == 503:
        diagnosis = ["the router has no healthy prefill/decode pair: see the workers check"]
    elif status != 200:
        diagnosis = [_router_down(plan, host)]
    return _record(host, scope, "router", "readiness", reasons, diagnosis, {"router": kind, "status": status},
                   error=status < 0, passed=status == 200)


def _healthy(worker, number, bad=None):
    """Whether the router calls ``worker`` healthy: its ``is_healthy`` a JSON true (a string such as "false" is
    not a boolean: it is not healthy, and ``bad`` collects why)."""
    if not isinstance(worker, dict):
        return False
    try:
        return reply_bool(worker.get("is_healthy"), "workers[%d].is_healthy" % number)
    except UnitValueError as exc:
        if bad is not None:
            bad.append(str(exc))
        return False


def _workers(workers, plan, host, scope):
    body = workers.get("json")
    listed_any = _has(body, "workers")
    listed = _get(body, "workers") or []
    prefill = _get(body, "stats", "prefill_count") if _has(body, "stats", "prefill_count") else -1
    decode = _get(body, "stats", "decode_count") if _has(body, "stats", "decode_count") else -1
    expected = plan["expected_workers"]
    not_boolean = []
    healthy = [w for n, w in enumerate(listed) if _healthy(w, n, not_boolean)]
    unhealthy = [str(w.get("url", "?")) if isinstance(w, dict) else "?"
                 for n, w in enumerate(listed) if not _healthy(w, n)]
    ports_seen = sorted(str(w.get("bootstrap_port")) for w in listed
                        if isinstance(w, dict) and w.get("worker_type") == "prefill")
    ports_planned = sorted(str(i.get("bootstrap_port")) for i in plan.get("instances") or []
                           if isinstance(i, dict) and i.get("role") == "prefill")
    if not listed_any:
        reasons = ["the router's /workers gave no list of workers (status %s): %s"
                   % (workers.get("status", -1), _message(workers))]
        diagnosis = [_router_down(plan, host)]
    else:
        reasons = []
        if _int(prefill) != expected.get("prefill"):
            reasons.append("prefill_count %s, planned %s" % (prefill, expected.get("prefill")))
        if _int(decode) != expected.get("decode"):
            reasons.append("decode_count %s, planned %s" % (decode, expected.get("decode")))
        if unhealthy:
            reasons.append("unhealthy workers: " + ", ".join(unhealthy))
        reasons += not_boolean
        if ports_seen != ports_planned:
            reasons.append("prefill bootstrap ports %s, planned %s"
                           % (",".join(ports_seen) or "none", ",".join(ports_planned)))
        diagnosis = ["each planned instance must be a healthy worker of the router, a prefill one with its planned "
                     "bootstrap port: check the missing or unhealthy instance's rank 0 (/health) and units, then "
                     + _SERVE_AGAIN]
    figures = {"prefill": "%s/%s" % (prefill if listed_any else "-", expected.get("prefill")),
               "decode": "%s/%s" % (decode if listed_any else "-", expected.get("decode")),
               "healthy": "%s/%s" % (len(healthy), len(listed)),
               "bootstrap_ports": ports_seen}
    return _record(host, scope, "router", "workers", reasons, diagnosis, figures, error=not listed_any)


def _chat_record(chat, plan, host, scope, kind, model, request_timeout):
    status = _int(chat.get("status", -1))
    answer = _text(_get(chat, "json", "choices", 0, "message", "content"))
    passed = status == 200 and len(answer.strip()) > 0
    if status == 200:
        reasons = ["the chat completion through the router answered 200 without choices[0].message.content"]
    elif status >= 0:
        reasons = ["the chat completion through the router answered %s: %s" % (status, _text(chat.get("content"))[:300])]
    else:
        reasons = ["the chat completion through the router gave no answer within %s s: %s"
                   % (request_timeout, _text(chat.get("error"))[:300])]
    if status < 0:
        diagnosis = [_router_down(plan, host, " (or answered too late): check its unit, " + _SERVE_AGAIN)]
    else:
        diagnosis = ["the model named must be the engines' --model-path (%s); a KV transfer error names the "
                     "bootstrap server the decode engine could not reach (prefill bootstrap port, fabric address, "
                     "the transfer backend)" % (model,)]
    figures = {"router": kind, "status": status, "latency_ms": chat.get("latency_ms"),
               "completion_tokens": _get(chat, "json", "usage", "completion_tokens")}
    return _record(host, scope, "router", "chat completion", reasons, diagnosis, figures, error=status < 0,
                   passed=passed)


def router_records(observed, plan, host, model="", ready_timeout=120, request_timeout=60):
    """The records of the router's checks, from ``observed``: ``{readiness, workers}`` (the uri results of
    /readiness and /workers) and ``chat`` (the result of the command that sent and timed the chat completion, its
    stdout the JSON ``{status, content, json, error, latency_ms}``). Returns the readiness, workers and chat
    completion records, in that order."""
    if not isinstance(observed, dict):
        raise VerifyInputError("the router check reads a mapping {readiness, workers, chat} of the uri and command "
                               "results; got %r" % (observed,))
    plan = _plan(plan)
    kind = plan["router"].get("kind") or "smg"
    scope = "router %s" % kind
    readiness = observed.get("readiness") if isinstance(observed.get("readiness"), dict) else {}
    workers = observed.get("workers") if isinstance(observed.get("workers"), dict) else {}
    return [_readiness(readiness, plan, host, scope, kind, ready_timeout),
            _workers(workers, plan, host, scope),
            _chat_record(_chat(observed.get("chat")), plan, host, scope, kind, model, request_timeout)]


def workers_settled(workers, plan):
    """Whether the router's /workers shows the planned prefill and decode counts and no unhealthy worker (the end
    of the role's wait; the bootstrap ports are judged after it, not waited for)."""
    plan = _plan(plan)
    body = workers.get("json") if isinstance(workers, dict) else None
    stats = _get(body, "stats") or {}
    listed = _get(body, "workers") or []
    return (stats.get("prefill_count", -1) == plan["expected_workers"].get("prefill")
            and stats.get("decode_count", -1) == plan["expected_workers"].get("decode")
            and not [w for n, w in enumerate(listed) if not _healthy(w, n)])


# ------------------------------------------------------------------------------------------ the engines
def direct_records(results, host, direct_status=(400, 500), prefill_error="", decode_error="",
                   request_timeout=60):
    """The records of the requests sent straight to rank 0 of each engine (the uri loop's results, each with its
    ``item``: the planned instance ``{name, role, port}``): refused with one of ``direct_status`` and SGLang's PD
    error of the engine's role passes; a 200, no answer or another refusal fails."""
    if not isinstance(results, (list, tuple)):
        raise VerifyInputError("the direct check reads the results of the uri loop (a list); got %r" % (results,))
    allowed = [_int(s) for s in direct_status]
    records = []
    for result in results:
        inst = result.get("item") if isinstance(result, dict) else None
        if not isinstance(inst, dict) or "name" not in inst or "role" not in inst:
            raise VerifyInputError("each direct result must carry its planned instance as item ({name, role, port}); "
                                   "got %r" % (result,))
        name, role, port = inst["name"], inst["role"], inst.get("port")
        status = _int(result.get("status", -1))
        pattern = prefill_error if role == "prefill" else decode_error
        message = _get(result, "json", "message")
        text = ("%s %s" % (_text(message), _text(result.get("content")))).strip()
        refused = status in allowed and re.search(pattern, text) is not None
        if status == 200:
            reason = "%s answered 200 to a request without bootstrap_room: it serves without the router" % name
            hint = ("the engine on port %s is not a %s server of a PD fleet: its unit must run it with "
                    "--disaggregation-mode %s (another server may hold the port; rerun playbooks/serve.yml, which "
                    "checks /server_info)" % (port, role, role))
        elif status < 0:
            reason = "%s gave no answer on port %s within %s s: %s" % (name, port, request_timeout, _message(result))
            hint = ("rank 0 of %s does not answer: check its unit on %s (systemctl status, journalctl) and the audit"
                    % (name, host))
        else:
            answer = str(message if message else result.get("content", "")) or str(result.get("msg", ""))
            reason = ("%s answered %s, expected %s with SGLang's %s error /%s/: %s"
                      % (name, status, " or ".join(str(s) for s in direct_status), role, pattern, answer[:300]))
            hint = "the engine refused the request, but not with the PD bootstrap error of a %s server: read its log" % role
        records.append(_record(host, "%s (rank 0)" % name, role, "direct request refused", [reason], [hint],
                               {"port": port, "status": status}, error=status < 0, passed=refused))
    return records


# ------------------------------------------------------------------------------------------ the play
def _targets(plan):
    """What the plan asks to check, and on which host: the router on its first host, rank 0 of every instance."""
    plan = plan if isinstance(plan, dict) else {}
    out = []
    router = plan.get("router")
    if isinstance(router, dict) and router.get("hosts"):
        out.append({"host": router["hosts"][0], "scope": "router %s" % (router.get("kind") or "smg"),
                    "stage": "router", "test": "readiness, workers, chat completion", "what": "the router"})
    for inst in plan.get("instances") or []:
        out.append({"host": inst["rank0"], "scope": "%s (rank 0)" % inst["name"], "stage": inst["role"],
                    "test": "direct request refused", "what": "rank 0 of %s" % inst["name"]})
    return out


def play_records(records, plan=None, play_hosts=()):
    """Every node's records in the summary's order: the failed plans (one record per reason, its scope naming
    every node that gave it), the router's, the engines', then one error record per planned target that is not a
    host of the play (``play_hosts``: left out by --limit, say). ``plan``: the plan of any node where it held."""
    if not isinstance(records, (list, tuple)):
        raise VerifyInputError("the play check reads the records of every node (a list); got %r" % (records,))
    records = [r for r in records if isinstance(r, dict)]
    plan_failures, by_reasons = [], {}
    for record in records:
        if record.get("stage") == "plan":
            key = repr((record.get("gate") or {}).get("reasons"))
            if key not in by_reasons:
                by_reasons[key] = [record]
                plan_failures.append(by_reasons[key])
            else:
                by_reasons[key].append(record)
    failed = [dict(group[0], scope=", ".join(str(r.get("host")) for r in group))
              for group in sorted(plan_failures, key=lambda g: _sort_key((g[0].get("gate") or {}).get("reasons")))]
    absent = [{"host": t["host"], "scope": t["scope"], "stage": t["stage"], "test": t["test"],
               "gate": {"passed": False, "status": "error", "diagnosis": [],
                        "reasons": ["%s is not a host of this play, so %s was not checked (run it without --limit, "
                                    "or with that host)" % (t["host"], t["what"])]},
               "figures": {}}
              for t in _targets(plan) if t["host"] not in list(play_hosts or [])]
    return (failed + [r for r in records if r.get("stage") == "router"]
            + [r for r in records if r.get("stage") not in ("plan", "router")] + absent)


def _sort_key(reasons):
    """Jinja's groupby sorts the groups by the key: the reasons (a list of strings)."""
    return [str(r) for r in reasons] if isinstance(reasons, (list, tuple)) else [str(reasons)]


# ------------------------------------------------------------------------------------------ one entry
CHECKS = ("router", "settled", "direct", "play")


def serving_gate(data, check, plan=None, host=None, model="", ready_timeout=120, request_timeout=60,
                 direct_status=(400, 500), prefill_error="", decode_error="", play_hosts=()):
    """One entry for the role: ``check`` names what ``data`` is and which verdict is wanted (see ``CHECKS``); each
    check reads the settings it needs, so that the role passes the same settings to every check."""
    if check == "router":
        return router_records(data, plan, host, model=model, ready_timeout=ready_timeout,
                              request_timeout=request_timeout)
    if check == "settled":
        return workers_settled(data, plan)
    if check == "direct":
        return direct_records(data, host, direct_status=direct_status, prefill_error=prefill_error,
                              decode_error=decode_error, request_timeout=request_timeout)
    if check == "play":
        return play_records(data, plan=plan, play_hosts=play_hosts)
    raise VerifyInputError("check must be one of %s; got %r" % (", ".join(CHECKS), check))
