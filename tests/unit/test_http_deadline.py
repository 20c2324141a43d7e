# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_http and its callers (serve_state, the package-source checks of sglang_env and nccl_env): one
deadline for the whole exchange against every shape of slow peer (a real TCP peer on loopback that trickles its
status line, its header lines or its body, with or without ``Connection: close``, or goes silent), answers cut short,
the router's ``/workers`` answers that are not its workers list, environment files that are not UTF-8 text, and
passwords in refused URLs never repeated."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _http
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang as _sglang
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang_request as _sglang_request
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import state as _serve_state
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import units as _serve_units
from ansible_collections.gpufleet.deepep.plugins.modules import nccl_env, serve_state

TIMEOUT = 2  # the deadline the tests give; every slow peer below keeps going far longer than BOUND
BOUND = 15  # seconds: a call that respects its deadline of TIMEOUT returns well within this, on a loaded machine too
STEP = 0.2  # seconds between two trickled bytes
SHOW_ACTIVE = "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\n" \
              "UnitFileState=enabled\n"


class Peer(object):
    """A TCP peer on loopback: each connection runs ``behave(conn, path, stop)`` in a thread of its own once the
    request's head has arrived. ``close()`` stops the trickling (``stop``), the listener and every thread."""

    def __init__(self, behave, tls=None):
        self.behave = behave
        self.tls = tls
        self.stop = threading.Event()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(STEP)
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.listener.getsockname()[1])
        self.threads = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _addr = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn):
        try:
            conn.settimeout(BOUND)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            path = head.split(b" ", 2)[1].decode("ascii", "replace") if head.count(b" ") >= 2 else "/"
            self.behave(conn, path, self.stop)
        except OSError:  # the client hung up (or shut the connection down at its deadline)
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.acceptor.join(BOUND)
        self.listener.close()
        for thread in self.threads:
            thread.join(BOUND)
        assert not self.acceptor.is_alive() and not any(t.is_alive() for t in self.threads)


@pytest.fixture
def peer():
    """``peer(behave)`` -> a started Peer; all of them closed at the end of the test."""
    peers = []

    def start(behave, tls=None):
        peers.append(Peer(behave, tls))
        return peers[-1]

    yield start
    for one in peers:
        one.close()


def trickle(conn, data, stop):
    """``data`` a byte every STEP seconds until it is all sent, the client hangs up or the test stops."""
    for i in range(len(data)):
        if stop.wait(STEP):
            return
        conn.sendall(data[i:i + 1])


BODY = json.dumps({"workers": [], "padding": "x" * 600}).encode()  # 600+ bytes: over 120 s when trickled


def head(length=len(BODY), close=True, extra=""):
    return ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s%s%s\r\n" % (
        "Content-Length: %d\r\n" % length if length is not None else "", "Connection: close\r\n" if close else "",
        extra)).encode()


def body_trickled(close):
    def behave(conn, _path, stop):
        conn.sendall(head(close=close))
        trickle(conn, BODY, stop)
    return behave


def status_line_trickled(conn, _path, stop):
    trickle(conn, head() + BODY, stop)


def header_lines_trickled(conn, _path, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    trickle(conn, head(extra="X-Padding: %s\r\n" % ("y" * 600))[len(b"HTTP/1.1 200 OK\r\n"):] + BODY, stop)


def silent_after_headers(conn, _path, stop):  # no Content-Length: the body ends when the peer closes; it never does
    conn.sendall(head(length=None))
    stop.wait(BOUND * 4)


def part_of_the_body_then_silent(conn, _path, stop):
    conn.sendall(head() + BODY[:10])
    stop.wait(BOUND * 4)


def silent(conn, _path, stop):  # accepts, reads the request (or the TLS client hello), never answers
    stop.wait(BOUND * 4)


SLOW = {
    "body trickled, Connection: close": body_trickled(True),
    "body trickled, keep-alive": body_trickled(False),
    "status line trickled": status_line_trickled,
    "header lines trickled": header_lines_trickled,
    "no Content-Length, never closes after the headers": silent_after_headers,
    "part of the body, then silent": part_of_the_body_then_silent,
    "no answer at all": silent,
}


def timed(call, *args, **kwargs):
    started = time.monotonic()
    try:
        return call(*args, **kwargs), time.monotonic() - started
    except Exception as exc:  # noqa: BLE001 - handed back to the test, which asserts what it is
        return exc, time.monotonic() - started


def assert_deadline(exc, elapsed, url):
    assert isinstance(exc, _http.HttpDeadline), exc
    assert str(exc).startswith(url + ": no complete answer within the %s s deadline (timeout)" % TIMEOUT)
    assert elapsed < BOUND, elapsed


# --------------------------------------------------------------------- the deadline holds for every shape of slow peer
@pytest.mark.parametrize("shape", sorted(SLOW))
def test_a_slow_peer_of_any_shape_is_cut_off_at_the_deadline(peer, shape):
    url = peer(SLOW[shape]).url + "/workers"
    exc, elapsed = timed(_http.get, url, TIMEOUT)
    assert_deadline(exc, elapsed, url)


def test_a_tls_handshake_the_peer_never_answers_is_cut_off_at_the_deadline(peer):
    url = peer(silent).url.replace("http://", "https://") + "/workers"
    exc, elapsed = timed(_http.get, url, TIMEOUT, validate_certs=False)
    assert_deadline(exc, elapsed, url)


@pytest.fixture(scope="module")
def tls_server_context(tmp_path_factory):
    """A server-side TLS context with a self-signed certificate for 127.0.0.1."""
    import ssl
    import subprocess

    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx, str(cert)


@pytest.mark.parametrize("shape", ["body trickled, Connection: close", "header lines trickled"])
def test_a_slow_peer_over_tls_is_cut_off_at_the_deadline(peer, tls_server_context, shape):
    ctx, cert = tls_server_context
    url = peer(SLOW[shape], tls=ctx).url + "/workers"
    exc, elapsed = timed(_http.get, url, TIMEOUT, ca_path=cert)
    assert_deadline(exc, elapsed, url)


def test_a_prompt_answer_over_tls_is_read_whole(peer, tls_server_context):
    ctx, cert = tls_server_context

    def answer(conn, _path, _stop):
        conn.sendall(head() + BODY)

    assert _http.get(peer(answer, tls=ctx).url + "/workers", TIMEOUT, ca_path=cert) == (200, BODY)


def test_a_name_lookup_that_hangs_is_cut_off_at_the_deadline(monkeypatch):
    release = threading.Event()
    real = socket.getaddrinfo

    def slow_lookup(host, *args, **kwargs):
        if host == "slow-resolver.invalid":
            release.wait(BOUND * 2)
            raise socket.gaierror(-2, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow_lookup)
    url = "http://slow-resolver.invalid:8080/readiness"
    try:
        exc, elapsed = timed(_http.get, url, TIMEOUT)
    finally:
        release.set()  # the lookup thread left behind ends now
    assert_deadline(exc, elapsed, url)


def test_an_answer_cut_short_is_an_error_not_a_body(peer):
    def cut(conn, _path, _stop):
        conn.sendall(head() + BODY[:10])

    url = peer(cut).url + "/workers"
    with pytest.raises(_http.HttpError) as info:
        _http.get(url, TIMEOUT)
    assert not isinstance(info.value, _http.HttpDeadline)
    assert str(info.value) == "%s: the answer ended %d bytes short of its Content-Length (10 bytes read)" % (
        url, len(BODY) - 10)


@pytest.mark.parametrize("shape", ["Content-Length", "Connection: close", "until close", "chunked"])
def test_a_prompt_answer_of_every_framing_is_read_whole(peer, shape):
    def answer(conn, _path, _stop):
        if shape == "chunked":
            parts = [BODY[i:i + 100] for i in range(0, len(BODY), 100)]
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)
            conn.sendall(head(length=None, close=False, extra="Transfer-Encoding: chunked\r\n") + chunks + b"0\r\n\r\n")
        else:
            conn.sendall(head(length=None if shape == "until close" else len(BODY), close=shape != "Content-Length")
                         + BODY)

    assert _http.get(peer(answer).url + "/workers", TIMEOUT) == (200, BODY)


# ------------------------------------------------------------------------ the callers inherit the deadline
def test_serve_state_router_facts_inherit_the_deadline(peer):
    url = peer(body_trickled(True)).url
    facts, elapsed = timed(_serve_state.router_facts, url, TIMEOUT)
    assert elapsed < BOUND, elapsed
    assert facts["ready"] is False and facts["readiness_status"] is None
    assert facts["error"].startswith("%s/readiness: no complete answer within the %s s deadline" % (url, TIMEOUT))


def test_the_serve_state_module_inherits_the_deadline(module_runner, peer, tmp_path):
    url = peer(header_lines_trickled).url
    result, elapsed = timed(module_runner, serve_state, {"router_url": url, "timeout": TIMEOUT,
                                                         "config_dir": str(tmp_path)})
    assert elapsed < BOUND, elapsed
    router = result["ansible_facts"]["gpufleet_serving"]["router"]
    assert not result.failed and router["ready"] is False
    assert router["error"].startswith("%s/readiness: no complete answer within the %s s deadline" % (url, TIMEOUT))


# ------------------------------------------------------------- /workers answers that are not the router's workers list
def router_answering(workers_status, workers_body):
    def behave(conn, path, _stop):
        status, data = (200, b'{"status": "ready"}') if path == "/readiness" else (workers_status, workers_body)
        conn.sendall(("HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(data)))
                     .encode() + data)
    return behave


@pytest.mark.parametrize("status,body,what", [
    (200, b"<html>Bad gateway</html>", "HTTP 200 with an answer that is not JSON (it begins '<html>Bad gateway"
                                       "</html>'), not an object with a workers list"),
    (200, b"\xff\xfe\x00garbage", "HTTP 200 with an answer that is not JSON"),
    (200, b'[{"url": "http://10.0.0.1:30000"}]', "HTTP 200 with a JSON list, not an object with a workers list"),
    (200, b'"workers"', "HTTP 200 with a JSON string, not an object with a workers list"),
    (200, b"42", "HTTP 200 with a JSON number, not an object with a workers list"),
    (200, b"", "HTTP 200 with an empty answer"),
    (200, b'{"stats": {}}', "HTTP 200 with a JSON object without workers"),
    (200, b'{"workers": {"a": 1}}', "HTTP 200 with a JSON object whose workers is a JSON object, not a list"),
    (200, b"[" * 100000, "HTTP 200 with an answer that is not JSON"),
    (500, b'{"workers": []}', "HTTP 500"),
])
def test_a_workers_answer_that_is_no_workers_list_is_named_and_not_ready(peer, status, body, what):
    url = peer(router_answering(status, body)).url
    facts = _serve_state.router_facts(url, TIMEOUT)
    assert facts["readiness_status"] == 200 and facts["ready"] is False
    assert facts["error"].startswith("%s/workers: %s" % (url, what)), facts["error"]
    assert facts["error"].endswith("expected 200 with a JSON object with a workers list")


def test_a_workers_list_keeps_the_router_ready(peer):
    workers = {"workers": [{"url": "http://10.0.0.1:30000", "worker_type": "prefill", "is_healthy": True}],
               "stats": {"prefill_count": 1, "decode_count": 0}}
    facts = _serve_state.router_facts(peer(router_answering(200, json.dumps(workers).encode())).url, TIMEOUT)
    assert facts["ready"] is True and facts["error"] is None and facts["prefill_count"] == 1


# ----------------------------------------------------------------------- environment files that are not UTF-8 text
def _config_dir(tmp_path):
    env = dict(_serve.ENGINE_ENVIRONMENT, GPUFLEET_SGLANG_VERSION="0.5.23")
    (tmp_path / "sglang-decode0-rank0.env").write_bytes(b"\xff\xfe\x00\x01binary")
    (tmp_path / "sglang-prefill0-rank1.env").write_text(_serve_units.env_file_text(env))
    (tmp_path / "sglang-router.env").write_text(_serve_units.env_file_text({"RUST_LOG": "info"}))
    return tmp_path


@pytest.mark.parametrize("reader", ["the module's", "a text-mode open"])
def test_a_binary_env_file_is_named_and_the_rest_of_the_gather_still_works(tmp_path, peer, reader):
    read = _serve_state.read_env_text if reader == "the module's" else (lambda p: open(p, encoding="utf-8").read())
    url = peer(router_answering(200, b'{"workers": [], "stats": {"prefill_count": 0, "decode_count": 0}}')).url
    facts = _serve_state.gather(str(_config_dir(tmp_path)), "sglang", url, lambda u: (0, SHOW_ACTIVE, ""), read,
                                TIMEOUT)
    decode, prefill, router = facts["units"]
    bad = str(tmp_path / "sglang-decode0-rank0.env")
    assert decode["error"] == ("%s: not UTF-8 text (byte 0xff at offset 0); expected the environment file sglang_serve"
                               " writes (UTF-8 text, NAME=\"value\" lines)" % bad)
    assert decode["active_state"] == "active" and decode["sglang_version"] is None  # its unit is still read
    assert prefill["error"] is None and prefill["sglang_version"] == "0.5.23"
    assert router["error"] is None
    assert facts["router"]["ready"] is True and facts["router"]["error"] is None


def test_an_env_file_that_is_no_regular_file_or_too_large_is_named_without_reading_it(tmp_path):
    os.mkfifo(str(tmp_path / "sglang-decode0-rank0.env"))  # reading a FIFO would block
    (tmp_path / "sglang-decode1-rank0.env").mkdir()
    (tmp_path / "sglang-prefill0-rank0.env").write_bytes(b"A=\"b\"\n" * (_serve_state.MAX_ENV_FILE // 6 + 1))
    units, elapsed = timed(_serve_state.unit_facts, str(tmp_path), "sglang", lambda u: (0, SHOW_ACTIVE, ""))
    assert elapsed < BOUND
    errors = dict((u["unit"], u["error"]) for u in units)
    not_regular = ": not a regular file; " + _serve_state.ENV_FORM
    assert _serve_state.ENV_FORM == 'expected the environment file sglang_serve writes (UTF-8 text, NAME="value" lines)'
    assert errors["sglang-decode0-rank0.service"] == str(tmp_path / "sglang-decode0-rank0.env") + not_regular
    assert errors["sglang-decode1-rank0.service"] == str(tmp_path / "sglang-decode1-rank0.env") + not_regular
    assert errors["sglang-prefill0-rank0.service"].startswith(
        "%s: larger than %d bytes" % (tmp_path / "sglang-prefill0-rank0.env", _serve_state.MAX_ENV_FILE))


def test_an_env_file_error_and_a_systemctl_error_are_both_named(tmp_path):
    units = _serve_state.unit_facts(str(_config_dir(tmp_path)), "sglang", lambda u: (124, "", "timed out after 10s"))
    assert "not UTF-8 text" in units[0]["error"] and "systemctl show sglang-decode0-rank0.service: rc 124" in \
        units[0]["error"]


# ------------------------------------------------------------------------------ passwords in refused URLs are hidden
SECRET = "S3cr3tPa55"
WITH_PASSWORD = [
    ("http://admin:%s@127.0.0.1:30080/" % SECRET, "http://admin:***@127.0.0.1:30080/", "credentials in the URL"),
    ("http://admin:%s@127.0.0.1:99999" % SECRET, "http://admin:***@127.0.0.1:99999", "credentials in the URL"),
    ("ftp://admin:%s@mirror/simple" % SECRET, "ftp://admin:***@mirror/simple", "credentials in the URL"),
    ("http://admin:%s/x@mirror:8080" % SECRET, "http://admin:***@mirror:8080", "credentials in the URL"),
    ("http://admin:%s x@mirror:8080" % SECRET, "http://admin:***@mirror:8080", "space or control character"),
    ("https://%s@mirror/simple" % SECRET, "https://***@mirror/simple", "credentials in the URL"),
    ("admin:%s@mirror:8080/simple" % SECRET, "admin:***@mirror:8080/simple", "expected"),
]


@pytest.mark.parametrize("value,shown,why", WITH_PASSWORD)
def test_check_url_and_check_source_never_repeat_a_password(value, shown, why):
    with pytest.raises(_http.HttpInputError) as info:
        _http.check_url(value, "router_url")
    assert SECRET not in str(info.value) and str(info.value).startswith("router_url %r: " % shown)
    assert why in str(info.value)
    with pytest.raises(_http.HttpInputError) as info:
        _http.check_source(value, "index_url")
    assert SECRET not in str(info.value) and str(info.value).startswith("index_url %r: " % shown)
    with pytest.raises(_sglang.SglangError) as info:
        _sglang_request.check_source_url(value, "find_links", paths=True)
    assert SECRET not in str(info.value) and str(info.value).startswith("find_links %r: " % shown)


def test_a_url_without_credentials_is_shown_as_given():
    for value in ("http://127.0.0.1:30080/a@b", "http://mirror:8080/simple/", "not a url"):
        assert _http.redact_url(value) == value
    with pytest.raises(_http.HttpInputError, match=r"^router_url 'http://127\.0\.0\.1:99999/a@b': Port out of range"):
        _http.check_url("http://127.0.0.1:99999/a@b", "router_url")


@pytest.mark.parametrize("module,option", [(serve_state, "router_url"), (nccl_env, "index_url"),
                                           (nccl_env, "extra_index_urls")])
def test_the_modules_refuse_a_url_with_a_password_without_repeating_it(module_runner, tmp_path, module, option):
    value = "https://deploy:%s@pypi.internal:8443/simple" % SECRET
    args = {option: [value] if option == "extra_index_urls" else value}
    if module is nccl_env:
        args.update(python=sys.executable, version="2.30.7")
    else:
        args.update(config_dir=str(tmp_path))
    result = module_runner(module, args)
    assert result.failed and SECRET not in result["msg"], result
    if module is serve_state:  # its invocation (module_args) does not show it either
        assert SECRET not in json.dumps(result), result
    assert result["msg"].startswith("%s 'https://deploy:***@pypi.internal:8443/simple': credentials in the URL are "
                                    "not supported" % option), result["msg"]
