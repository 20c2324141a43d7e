# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving_gate filter (plugins/plugin_utils/_serving_gate.py): the verdicts of verify_serving, fed with what the
role reads (uri results of the router's /readiness and /workers, the JSON the chat command prints, the uri loop's
direct requests) against a plan of sglang_serve (one prefill instance, two decode instances, an smg router)."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.serving_helpers import FilterModule
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _serving_gate as sg

serving_gate = FilterModule().filters()["serving_gate"]

PLAN = {"router": {"port": 30080, "kind": "smg", "hosts": ["sglang-router-1"]},
        "expected_workers": {"prefill": 1, "decode": 2},
        "instances": [
            {"name": "prefill0", "role": "prefill", "rank0": "sglang-prefill-1", "port": 30000, "bootstrap_port": 8998},
            {"name": "decode0", "role": "decode", "rank0": "sglang-decode-1", "port": 30001},
            {"name": "decode1", "role": "decode", "rank0": "sglang-decode-2", "port": 30001}]}
ROUTER = dict(plan=PLAN, host="sglang-router-1", model="/opt/models/smollm2-135m", ready_timeout=120,
              request_timeout=60)
DIRECT = dict(host="sglang-decode-1", direct_status=[400, 500], prefill_error="bootstrap_room should not be None",
              decode_error="Disaggregated request received without bootstrap room id", request_timeout=60)


def workers(prefill_healthy=True, port=8998, prefill_count=1, decode_count=2):
    return {"status": 200, "attempts": 3, "json": {
        "workers": [
            {"id": "a", "url": "http://10.0.0.1:30000", "worker_type": "prefill", "is_healthy": prefill_healthy,
             "bootstrap_port": port},
            {"id": "b", "url": "http://10.0.0.2:30001", "worker_type": "decode", "is_healthy": True,
             "bootstrap_port": None},
            {"id": "c", "url": "http://10.0.0.3:30001", "worker_type": "decode", "is_healthy": True}],
        "stats": {"prefill_count": prefill_count, "decode_count": decode_count, "regular_count": 0}}}


def chat(status=200, content="Hello there.", error="", body=None):
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 5}} if status == 200 else None
    return {"rc": 0, "stderr": "", "stdout": json.dumps({
        "status": status, "content": body if body is not None else json.dumps(answer), "json": answer,
        "error": error, "latency_ms": 84.2})}


REFUSED = "Status code was -1 and not [200, 503]: Request failed: <urlopen error [Errno 111] Connection refused>"


def test_a_healthy_router_passes_its_three_checks_with_figures():
    records = serving_gate({"readiness": {"status": 200}, "workers": workers(), "chat": chat()}, "router", **ROUTER)
    assert [(r["test"], r["gate"]["status"]) for r in records] == [
        ("readiness", "pass"), ("workers", "pass"), ("chat completion", "pass")]
    assert all(r["scope"] == "router smg" and r["stage"] == "router" and r["host"] == "sglang-router-1"
               for r in records)
    assert records[0]["figures"] == {"router": "smg", "status": 200}
    assert records[1]["figures"] == {"prefill": "1/1", "decode": "2/2", "healthy": "3/3", "bootstrap_ports": ["8998"]}
    assert records[2]["figures"] == {"router": "smg", "status": 200, "latency_ms": 84.2, "completion_tokens": 5}


def test_a_router_without_a_pair_names_the_workers_and_what_they_lack():
    records = serving_gate({"readiness": {"status": 503, "attempts": 61},
                            "workers": workers(prefill_healthy=False, port=9000, decode_count=1),
                            "chat": chat(500, body="KVTransferError: cannot reach the bootstrap server")}, "router",
                           **ROUTER)
    readiness, listed, completion = records
    assert readiness["gate"] == {
        "passed": False, "status": "fail",
        "reasons": ["the router's /readiness answered 503 after 120 s of waiting, not 200"],
        "diagnosis": ["the router has no healthy prefill/decode pair: see the workers check"]}
    assert listed["gate"]["status"] == "fail" and listed["gate"]["reasons"] == [
        "decode_count 1, planned 2", "unhealthy workers: http://10.0.0.1:30000",
        "prefill bootstrap ports 9000, planned 8998"]
    assert listed["figures"]["decode"] == "1/2" and listed["figures"]["healthy"] == "2/3"
    assert completion["gate"]["reasons"] == [
        "the chat completion through the router answered 500: KVTransferError: cannot reach the bootstrap server"]
    assert "--model-path (/opt/models/smollm2-135m)" in completion["gate"]["diagnosis"][0]


def test_a_router_that_does_not_answer_is_an_error_naming_its_port_and_node():
    down = {"readiness": {"status": -1, "msg": REFUSED},
            "workers": {"status": -1, "msg": REFUSED.replace("[200, 503]", "[200]")},
            "chat": chat(-1, error="URLError: <urlopen error [Errno 111] Connection refused>", body="")}
    readiness, listed, completion = serving_gate(down, "router", **ROUTER)
    assert [r["gate"]["status"] for r in (readiness, listed, completion)] == ["error", "error", "error"]
    assert readiness["gate"]["reasons"] == [
        "the router's /readiness gave no answer within 120 s: Request failed: <urlopen error [Errno 111] Connection "
        "refused>"]
    assert readiness["gate"]["diagnosis"] == [
        "the router does not serve on port 30080 of sglang-router-1: check its unit (systemctl status, journalctl), "
        "rerun playbooks/serve.yml"]
    assert listed["gate"]["reasons"][0].startswith("the router's /workers gave no list of workers (status -1): Request")
    assert listed["figures"]["prefill"] == "-/1" and listed["figures"]["healthy"] == "0/0"
    assert completion["gate"]["reasons"] == [
        "the chat completion through the router gave no answer within 60 s: URLError: <urlopen error [Errno 111] "
        "Connection refused>"]
    assert completion["gate"]["diagnosis"][0].endswith("(or answered too late): check its unit, rerun playbooks/serve.yml")


def test_a_chat_command_that_printed_nothing_reports_its_stderr_and_a_200_without_content_fails():
    crashed = serving_gate({"readiness": {"status": 200}, "workers": workers(),
                            "chat": {"rc": 1, "stdout": "", "stderr": "NameError: name 'x'", "msg": "non-zero"}},
                           "router", **ROUTER)[2]
    assert crashed["gate"]["reasons"] == ["the chat completion through the router gave no answer within 60 s: "
                                          "NameError: name 'x'"]
    assert crashed["figures"]["status"] == -1 and crashed["figures"]["latency_ms"] is None
    empty = serving_gate({"readiness": {"status": 200}, "workers": workers(), "chat": chat(content="  ")},
                         "router", **ROUTER)[2]
    assert empty["gate"]["status"] == "fail" and empty["gate"]["reasons"] == [
        "the chat completion through the router answered 200 without choices[0].message.content"]


def test_the_workers_wait_ends_on_the_planned_counts_all_healthy_not_on_the_ports():
    assert serving_gate(workers(), "settled", plan=PLAN) is True
    assert serving_gate(workers(port=9000), "settled", plan=PLAN) is True  # the ports are judged after the wait
    assert serving_gate(workers(prefill_healthy=False), "settled", plan=PLAN) is False
    assert serving_gate(workers(decode_count=1), "settled", plan=PLAN) is False
    assert serving_gate({"status": -1, "msg": REFUSED}, "settled", plan=PLAN) is False


def direct(name, role, status, message=None, content=None, msg=None):
    result = {"item": {"name": name, "role": role, "port": 30000 if role == "prefill" else 30001}, "status": status}
    if message is not None:
        result["json"] = {"object": "error", "message": message, "type": "BadRequestError", "code": status}
        result["content"] = json.dumps(result["json"])
    if content is not None:
        result["content"] = content
    if msg is not None:
        result["msg"] = msg
    return result


def test_engines_that_refuse_with_the_pd_error_of_their_role_pass():
    results = [direct("prefill0", "prefill", 500, "AssertionError: bootstrap_room should not be None"),
               direct("decode0", "decode", 400, "Disaggregated request received without bootstrap room id")]
    records = serving_gate(results, "direct", **DIRECT)
    assert [(r["scope"], r["stage"], r["gate"]["status"], r["figures"]) for r in records] == [
        ("prefill0 (rank 0)", "prefill", "pass", {"port": 30000, "status": 500}),
        ("decode0 (rank 0)", "decode", "pass", {"port": 30001, "status": 400})]


def test_engines_that_serve_do_not_answer_or_refuse_otherwise_fail_with_their_hint():
    results = [direct("decode0", "decode", 200, content='{"choices": []}'),
               direct("decode1", "decode", -1, msg=REFUSED.replace("[200, 503]", "[400, 500]")),
               direct("prefill0", "prefill", 400, "Disaggregated request received without bootstrap room id"),
               direct("prefill1", "prefill", 404, content="Not Found " * 40, msg="Status code was 404")]
    served, silent, wrong, missing = serving_gate(results, "direct", **DIRECT)
    assert served["gate"]["reasons"] == ["decode0 answered 200 to a request without bootstrap_room: it serves "
                                         "without the router"]
    assert "--disaggregation-mode decode" in served["gate"]["diagnosis"][0]
    assert silent["gate"]["status"] == "error" and silent["gate"]["reasons"] == [
        "decode1 gave no answer on port 30001 within 60 s: Request failed: <urlopen error [Errno 111] Connection "
        "refused>"]
    assert silent["gate"]["diagnosis"] == ["rank 0 of decode1 does not answer: check its unit on sglang-decode-1 "
                                           "(systemctl status, journalctl) and the audit"]
    assert wrong["gate"]["reasons"] == [
        "prefill0 answered 400, expected 400 or 500 with SGLang's prefill error /bootstrap_room should not be None/: "
        "Disaggregated request received without bootstrap room id"]
    assert len(missing["gate"]["reasons"][0].split(": ", 1)[1]) == 300  # the answer is cut at 300 characters


def plan_failure(host, reason):
    return {"host": host, "scope": host, "stage": "plan", "test": "serve_plan",
            "gate": {"passed": False, "status": "error", "reasons": ["the serving plan failed: " + reason],
                     "diagnosis": ["run playbooks/serve.yml first"]}, "figures": {}}


def test_the_play_records_merge_failed_plans_order_the_stages_and_name_absent_targets():
    router = serving_gate({"readiness": {"status": 200}, "workers": workers(), "chat": chat()}, "router", **ROUTER)
    engines = serving_gate([direct("decode0", "decode", 400, "Disaggregated request received without bootstrap "
                                   "room id")], "direct", **DIRECT)
    gathered = [plan_failure("sglang-x-2", "no model"), plan_failure("sglang-x-1", "a bad tp")] + engines + router \
        + [plan_failure("sglang-x-3", "a bad tp")]
    hosts = ["sglang-x-1", "sglang-x-2", "sglang-x-3", "sglang-router-1", "sglang-decode-1", "sglang-prefill-1"]
    records = serving_gate(gathered, "play", plan=PLAN, play_hosts=hosts)
    assert [(r["stage"], r["scope"]) for r in records] == [
        ("plan", "sglang-x-1, sglang-x-3"), ("plan", "sglang-x-2"),
        ("router", "router smg"), ("router", "router smg"), ("router", "router smg"),
        ("decode", "decode0 (rank 0)"), ("decode", "decode1 (rank 0)")]
    assert records[-1]["host"] == "sglang-decode-2" and records[-1]["gate"]["reasons"] == [
        "sglang-decode-2 is not a host of this play, so rank 0 of decode1 was not checked (run it without --limit, or "
        "with that host)"]
    assert serving_gate(gathered[:2], "play", plan={}, play_hosts=[]) == [gathered[1], gathered[0]]


@pytest.mark.parametrize("data, check, kwargs, message", [
    ({}, "routers", {}, "check must be one of router, settled, direct, play; got 'routers'"),
    ({}, "router", {"plan": {"instances": []}, "host": "h"}, "plan must be sglang_serve_plan"),
    ("x", "direct", {"host": "h"}, "reads the results of the uri loop"),
    ([{"status": 400}], "direct", {"host": "h"}, "must carry its planned instance as item"),
])
def test_bad_input_names_the_value_and_the_expected_form(data, check, kwargs, message):
    with pytest.raises(AnsibleFilterError, match="serving_gate") as err:
        serving_gate(data, check, **kwargs)
    assert message in str(err.value)


def test_jinja_int_reads_numbers_as_the_role_did():
    assert (sg._int("200"), sg._int(503.0), sg._int("x", -1), sg._int(None, -1)) == (200, 503, -1, -1)
