# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_state (plugins/module_utils/_serve/state.py) and the audit's SERVING_* rules: the units
sglang_serve wrote, their systemd state and SGLang version, the router's readiness and workers (a real HTTP server
on loopback answering as the router does), and the findings the audit draws from them."""

from __future__ import annotations

import functools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils import _http
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import state as _serve_state
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import audit_fleet, evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report_markdown import render_markdown
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
    return node_document("n-1", ["sglang_decode"], result)


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


# ------------------------------------------------------------------ one deadline for the whole exchange (module_utils/_http)
class _Trickle(BaseHTTPRequestHandler):
    """Answers one byte every 0.2 s - in the status line and headers (``phase=headers``) or in the body - until the
    client hangs up or the test stops the server."""
    phase = "body"
    stop = None

    def _trickle(self, data):
        for i in range(len(data)):
            if self.stop.wait(0.2):
                return
            try:
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
            except OSError:
                return

    def do_GET(self):  # noqa: N802 - the http.server API
        body = json.dumps({"workers": [], "padding": "x" * 400}).encode()
        head = ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)).encode()
        if self.phase == "headers":
            self._trickle(head + body)
        else:
            self.wfile.write(head)
            self.wfile.flush()
            self._trickle(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def trickler():
    stop = threading.Event()
    handler = type("Trickle", (_Trickle,), {"stop": stop})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_router_that_trickles_is_cut_off_at_the_deadline_naming_url_and_timeout(trickler, phase):
    handler, url = trickler
    handler.phase = phase
    with pytest.raises(_http.HttpDeadline) as info:
        _http.get(url + "/workers", 1)
    assert str(info.value).startswith(url + "/workers: no complete answer within the 1 s deadline (timeout)")
    facts = _serve_state.router_facts(url, 1)
    assert facts["ready"] is False and facts["readiness_status"] is None
    assert facts["error"].startswith("%s/readiness: no complete answer within the 1 s deadline (timeout)" % url)


@pytest.mark.parametrize("url,why", [
    ("http://127.0.0.1:30o80", "Port could not be cast to integer value"),
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://127.0.0.1:0", "port 0 is not a port"),
    ("ftp://127.0.0.1:30080", "scheme 'ftp' is not http or https"),
    ("http://:30080", "no host"),
    ("http://127.0.0.1:30080/a b", "space or control character"),
    ("http://user:pw@127.0.0.1:30080", "credentials in the URL"),
    ("", "expected http://"),
])
def test_a_malformed_url_is_refused_naming_option_value_and_form(url, why):
    with pytest.raises(_http.HttpInputError) as info:
        _http.check_url(url, "router_url")
    text = str(info.value)
    assert text.startswith("router_url %r: " % _http.redact_url(url)) and why in text and ":pw@" not in text
    assert "expected http://<host>:<port>[/path] or https://<host>:<port>[/path]" in text


# ----------------------------------------------------------------------------------- TLS: certificates checked by default
@pytest.fixture(scope="module")
def tls_router(tmp_path_factory):
    """The router over https with a self-signed certificate for 127.0.0.1 (its own CA)."""
    import ssl
    import subprocess

    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    handler = type("TlsRouter", (_Router,), {"readiness": 200, "workers": WORKERS})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "https://127.0.0.1:%d" % server.server_address[1], str(cert)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_an_https_router_with_an_untrusted_certificate_is_refused_by_default(tls_router):
    url, _cert = tls_router
    facts = _serve_state.router_facts(url, 5)
    assert facts["ready"] is False and "certificate not trusted" in facts["error"]
    assert "give ca_path, or validate_certs: false" in facts["error"]


@pytest.mark.parametrize("settings", [{"ca_path": "CERT"}, {"validate_certs": False}])
def test_an_https_router_is_read_with_its_ca_or_with_checks_off_deliberately(tls_router, settings):
    url, cert = tls_router
    settings = dict((k, cert if v == "CERT" else v) for k, v in settings.items())
    facts = _serve_state.router_facts(url, 5, get=functools.partial(_serve_state._get, **settings))
    assert facts["ready"] and facts["error"] is None and facts["prefill_count"] == 1


def test_a_ca_path_that_is_no_pem_file_is_named(tls_router, tmp_path):
    url, _cert = tls_router
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(_http.HttpInputError, match=r"ca_path '.*/ca\.pem': .*expected a PEM file of CA certificates"):
        _http.get(url, 5, ca_path=str(bad))


# node_stack gather=[serving]: serve_state's facts in the audit's one call per node (the same reader), and what a
# set that cannot be read does with role_set_errors fail (the default) and record (the audit's).
def test_the_serving_set_is_what_serve_state_returns(tmp_path, router):
    from unit_helpers import run_module
    from ansible_collections.gpufleet.deepep.plugins.modules import node_stack, serve_state

    server, url = router
    server.RequestHandlerClass = type("R", (_Router,), {"readiness": 200, "workers": WORKERS})
    config_dir = str(_config_dir(tmp_path))
    alone = run_module(serve_state, {"config_dir": config_dir, "router_url": url, "timeout": 5})
    merged = run_module(node_stack, {"gather": ["serving"], "serve_config_dir": config_dir, "serve_router_url": url,
                                     "timeout": 5})
    assert not alone.failed and not merged.failed, (alone, merged)
    assert merged["ansible_facts"]["gpufleet_serving"] == alone["ansible_facts"]["gpufleet_serving"]
    assert merged["ansible_facts"]["gpufleet_serving"]["router"]["ready"] is True
    assert [u["unit"] for u in merged["ansible_facts"]["gpufleet_serving"]["units"]] == [
        "sglang-decode0-rank0.service", "sglang-prefill0-rank1.service", "sglang-router.service"]


@pytest.mark.parametrize("args,named", [
    ({"serve_prefix": "../x"}, "serve_prefix"),
    ({"serve_router_url": "ftp://127.0.0.1:1/"}, "serve_router_url"),
    ({"serve_ca_path": "/nonexistent/ca.pem"}, "serve_ca_path '/nonexistent/ca.pem': not a file"),
])
def test_a_serving_set_it_cannot_read_fails_or_is_recorded(tmp_path, args, named):
    from unit_helpers import run_module
    from ansible_collections.gpufleet.deepep.plugins.modules import node_stack

    model = str(REPO / "tests" / "fixtures" / "sglang" / "models" / "smollm2-135m")
    base = dict(args, gather=["model", "serving"], model_path=model, serve_config_dir=str(tmp_path))
    failed = run_module(node_stack, base)
    assert failed.failed and named in failed["msg"], failed
    recorded = run_module(node_stack, dict(base, role_set_errors="record"))
    assert not recorded.failed, recorded
    assert named in recorded["gather_errors"]["gpufleet_serving"]
    assert set(recorded["ansible_facts"]) == {"gpufleet_model"}  # the other set is still read
    assert any("gpufleet_serving not gathered" in str(w) for w in recorded["warnings"])


def test_a_router_password_is_refused_and_never_shown(tmp_path):
    from unit_helpers import run_module
    from ansible_collections.gpufleet.deepep.plugins.modules import node_stack

    result = run_module(node_stack, {"gather": ["serving"], "serve_config_dir": str(tmp_path),
                                     "serve_router_url": "http://admin:s3cret@127.0.0.1:30080",
                                     "role_set_errors": "record"})
    assert not result.failed and "serve_router_url" in result["gather_errors"]["gpufleet_serving"]
    assert "s3cret" not in json.dumps(result)
