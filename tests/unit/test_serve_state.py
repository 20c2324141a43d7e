# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_state (plugins/module_utils/_serve/state.py) and the audit's SERVING_* rules: the units
sglang_serve wrote, their systemd state and SGLang version, the router's readiness and workers (a real HTTP server
on loopback answering as the router does), and the findings the audit draws from them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import state as _serve_state
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import audit_fleet, evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report import render_markdown
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import units as _serve_units

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())

SHOW_ACTIVE = "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\n" \
              "UnitFileState=enabled\n"
SHOW_FAILED = "LoadState=loaded\nActiveState=failed\nSubState=failed\nMainPID=0\nNRestarts=5\nUnitFileState=enabled\n"


def _config_dir(tmp_path, version="0.5.23"):
    """The environment files sglang_serve writes (its own writer), plus a secrets file and a stranger's file."""
    env = dict(_serve.ENGINE_ENVIRONMENT, GPUFLEET_SGLANG_VERSION=version)
    for stem in ("sglang-decode0-rank0", "sglang-prefill0-rank1"):
        (tmp_path / (stem + ".env")).write_text(_serve_units.env_file_text(env))
    (tmp_path / "sglang-router.env").write_text(_serve_units.env_file_text({"RUST_LOG": "info"}))
    (tmp_path / "secrets.env").write_text('HF_TOKEN="hf_x"\n')
    (tmp_path / "other-decode0-rank0.env").write_text('A="b"\n')
    return tmp_path


def test_env_file_round_trips_what_sglang_serve_writes():
    env = {"A": 'say "hi"', "B": "back\\slash", "C": "x y"}
    assert _serve_units.parse_env_file(_serve_units.env_file_text(env)) == env


@pytest.mark.parametrize("line", ["A", "1A=x", 'A="open', "A=two words"])
def test_a_malformed_env_line_is_named(line):
    with pytest.raises(_serve_units.ServeError, match=r"/e\.env:1: expected NAME=\"value\""):
        _serve_units.parse_env_file(line + "\n", "/e.env")


def test_units_of_the_prefix_with_state_version_instance_and_rank(tmp_path):
    shown = []

    def show(unit):
        shown.append(unit)
        return 0, SHOW_FAILED if unit == "sglang-decode0-rank0.service" else SHOW_ACTIVE, ""

    units = _serve_state.unit_facts(str(_config_dir(tmp_path)), "sglang", show, lambda p: open(p).read())
    assert [u["unit"] for u in units] == ["sglang-decode0-rank0.service", "sglang-prefill0-rank1.service",
                                          "sglang-router.service"]
    assert shown == [u["unit"] for u in units]  # neither secrets.env nor another prefix's unit
    decode, prefill, router = units
    assert (decode["instance"], decode["rank"], decode["active_state"], decode["restarts"]) == ("decode0", 0, "failed", 5)
    assert (prefill["role"], prefill["rank"], prefill["sglang_version"], prefill["main_pid"]) == ("prefill", 1, "0.5.23",
                                                                                                  4242)
    assert router["role"] == "router" and router["sglang_version"] is None and router["error"] is None


def test_a_systemctl_failure_or_odd_output_is_an_error_of_that_unit(tmp_path):
    answers = {"sglang-decode0-rank0.service": (124, "", "timed out after 10s"),
               "sglang-prefill0-rank1.service": (0, "garbage\n", ""),
               "sglang-router.service": (0, SHOW_ACTIVE, "")}
    units = _serve_state.unit_facts(str(_config_dir(tmp_path)), "sglang", answers.get, lambda p: open(p).read())
    assert "rc 124: timed out after 10s" in units[0]["error"] and units[0]["active_state"] is None
    assert "gave no LoadState, ActiveState" in units[1]["error"]
    assert units[2]["error"] is None


def test_a_missing_config_dir_is_no_units(tmp_path):
    assert _serve_state.unit_facts(str(tmp_path / "none"), "sglang", None, None) == []


class _Router(BaseHTTPRequestHandler):
    readiness = 200
    workers = {}

    def do_GET(self):  # noqa: N802 - the http.server API
        status, body = {"/readiness": (self.readiness, {"status": "ready" if self.readiness == 200 else "x"}),
                        "/workers": (200, self.workers)}.get(self.path, (404, {}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def router():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Router)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


WORKERS = {"workers": [{"id": "a", "url": "http://10.0.0.1:30000", "worker_type": "prefill", "is_healthy": True,
                        "bootstrap_port": 8998},
                       {"id": "b", "url": "http://10.0.0.3:30001", "worker_type": "decode", "is_healthy": False}],
           "stats": {"prefill_count": 1, "decode_count": 1, "regular_count": 0}}


def test_router_readiness_and_workers_over_http(router):
    server, url = router
    server.RequestHandlerClass.readiness, server.RequestHandlerClass.workers = 200, WORKERS
    facts = _serve_state.router_facts(url, 5)
    assert facts["ready"] and facts["error"] is None and (facts["prefill_count"], facts["decode_count"]) == (1, 1)
    assert [(w["worker_type"], w["is_healthy"]) for w in facts["workers"]] == [("prefill", True), ("decode", False)]
    server.RequestHandlerClass.readiness = 503
    assert _serve_state.router_facts(url, 5)["readiness_status"] == 503


def test_a_router_that_does_not_answer_is_named(router):
    server, url = router
    server.shutdown()
    server.server_close()
    facts = _serve_state.router_facts(url, 2)
    assert facts["ready"] is False and facts["error"].startswith(url + "/readiness: ")


def _serving_doc(units, router_facts):
    result = {"ansible_facts": {"gpufleet_serving": {"config_dir": "/etc/x", "prefix": "sglang", "units": units,
                                                     "router": router_facts}}}
    return node_document("n-1", ["sglang_decode"], {"ansible_facts": {}}, serving=result)


def _ids(doc):
    return sorted(f["id"] for f in evaluate_rules(doc, CATALOGUE) if f["id"].startswith("SERVING_"))


def test_a_serving_node_as_the_role_leaves_it_has_no_serving_findings(tmp_path, router):
    server, url = router
    server.RequestHandlerClass.readiness = 200
    server.RequestHandlerClass.workers = {"workers": [dict(w, is_healthy=True) for w in WORKERS["workers"]],
                                          "stats": WORKERS["stats"]}
    facts = _serve_state.gather(str(_config_dir(tmp_path)), "sglang", url, lambda u: (0, SHOW_ACTIVE, ""),
                                lambda p: open(p).read(), 5)
    assert _ids(_serving_doc(facts["units"], facts["router"])) == []


def test_serving_rules_fire_on_a_failed_unit_a_not_ready_router_and_an_unhealthy_worker(tmp_path, router):
    server, url = router
    server.RequestHandlerClass.readiness, server.RequestHandlerClass.workers = 503, WORKERS
    show = {"sglang-decode0-rank0.service": (0, SHOW_FAILED, "")}
    facts = _serve_state.gather(str(_config_dir(tmp_path)), "sglang", url,
                                lambda u: show.get(u, (0, SHOW_ACTIVE, "")), lambda p: open(p).read(), 5)
    doc = _serving_doc(facts["units"], facts["router"])
    findings = dict((f["id"], f) for f in evaluate_rules(doc, CATALOGUE) if f["id"].startswith("SERVING_"))
    assert sorted(findings) == ["SERVING_ROUTER_NOT_READY", "SERVING_UNIT_NOT_ACTIVE", "SERVING_UNIT_RESTARTED",
                                "SERVING_WORKER_UNHEALTHY"]
    assert "sglang-decode0-rank0.service (instance decode0, rank 0) is failed/failed" in \
        findings["SERVING_UNIT_NOT_ACTIVE"]["message"]
    assert "/readiness 503" in findings["SERVING_ROUTER_NOT_READY"]["message"]
    # with /readiness 200, the router's unhealthy decode worker is the finding
    server.RequestHandlerClass.readiness = 200
    facts = _serve_state.gather(str(_config_dir(tmp_path)), "sglang", url, lambda u: (0, SHOW_ACTIVE, ""),
                                lambda p: open(p).read(), 5)
    findings = [f for f in evaluate_rules(_serving_doc(facts["units"], facts["router"]), CATALOGUE)
                if f["id"].startswith("SERVING_")]
    assert [(f["id"], f["severity"]) for f in findings] == [("SERVING_WORKER_UNHEALTHY", "critical")]
    assert findings[0]["message"].startswith("The router marks decode worker http://10.0.0.3:30001 unhealthy")


def test_serving_rules_stay_quiet_where_serving_is_not_audited():
    doc = node_document("n-1", ["b200"], {"ansible_facts": {}})
    assert doc["gpufleet_serving"] is None and _ids(doc) == []


def test_every_serving_rule_has_a_case_here():
    ids = {r["id"] for r in CATALOGUE["rules"] if r["id"].startswith("SERVING_")}
    assert ids == {"SERVING_UNIT_NOT_ACTIVE", "SERVING_UNIT_RESTARTED", "SERVING_ROUTER_NOT_READY",
                   "SERVING_WORKER_UNHEALTHY"}


def test_the_fleet_report_shows_each_unit_and_the_router(tmp_path, router):
    server, url = router
    server.RequestHandlerClass.readiness, server.RequestHandlerClass.workers = 200, WORKERS
    facts = _serve_state.gather(str(_config_dir(tmp_path)), "sglang", url, lambda u: (0, SHOW_ACTIVE, ""),
                                lambda p: open(p).read(), 5)
    fleet = audit_fleet({"n-1": _serving_doc(facts["units"], facts["router"]),
                         "n-2": node_document("n-2", ["b200"], {"ansible_facts": {}})}, CATALOGUE)
    text = render_markdown(fleet)
    section = text.split("## Serving", 1)[1].split("## Findings by severity", 1)[0]
    assert "| n-1 | decode0 | 0 | sglang-decode0-rank0.service | active/running | 0 | 0.5.23 | \u2014 |" in section
    assert "| n-1 | %s | yes | 1 | 1 | http://10.0.0.3:30001 |" % url in section
    assert "n-2" not in section
    assert "## Serving" not in render_markdown(audit_fleet({"n-2": node_document("n-2", ["b200"], {})}, CATALOGUE))
