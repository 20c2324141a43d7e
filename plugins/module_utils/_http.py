# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP GET with one deadline for the whole exchange (name lookup, connect, TLS handshake, headers, body),
certificates checked unless the caller says otherwise, and the URL checked before anything is sent. A peer that
trickles bytes cannot hold the caller past its timeout: every socket operation is given only the time left, and a
watchdog shuts the connection down when the deadline passes (through its own descriptor of the socket, which neither
the TLS wrapping nor http.client's hand-over of a closing connection to the response takes away).

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import threading
import time
import urllib.parse

__all__ = ["HttpInputError", "HttpDeadline", "HttpError", "check_url", "check_source", "check_sources", "get", "redact_url",
           "url_secrets"]

MAX_BODY = 4 * 1024 * 1024  # bytes; a larger answer is refused, not read into memory
_READ = 65536  # bytes a read asks for; each read is one system call at most (read1)


class HttpInputError(ValueError):
    """A URL or setting the caller was given is not in the form expected; the message names the option."""


class HttpError(Exception):
    """The exchange failed (refused, reset, TLS, a malformed answer); the message names the URL."""


class HttpDeadline(HttpError):
    """The exchange did not complete within its deadline; the message names the URL and the timeout."""


_SCHEME_HEAD = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:)?/*")


def _hide(value):
    """(``value`` with its credentials hidden, the text hidden or None): see redact_url."""
    if not isinstance(value, str):
        return value, None
    head = _SCHEME_HEAD.match(value).end()
    end = len(value)
    for mark in "?#":
        found = value.find(mark, head)
        if found >= 0:
            end = min(end, found)
    at = value.rfind("@", head, end)
    if at < 0:
        return value, None
    user, colon, password = value[head:at].partition(":")
    if "/" in user or (colon and "/" in password and password.split("/", 1)[0].isdigit()):
        return value, None  # <host>[:<port>]/<path> with an @ in the path (http://host:8080/a@b): no credentials
    if colon:
        return value[:head] + user + ":***" + value[at:], password or None
    return value[:head] + "***" + value[at:], user or None


def redact_url(value):
    """``value`` as a message may show it: the password of a ``user:password@`` (and a user name given alone, often
    a token) replaced by ``***``, e.g. ``http://user:***@host:8080/``. Anything else (not a string, no ``@`` before
    the query) is returned as it is. Deliberately generous: it also hides what only looks like credentials."""
    return _hide(value)[0]


def url_secrets(value):
    """The texts redact_url hides in ``value`` (a list, empty where none), for a module's ``no_log_values``: a
    module that refuses a URL with a password keeps it out of its whole result (``invocation`` too)."""
    secret = _hide(value)[1]
    return [secret] if secret else []


def check_url(url, option="url"):
    """``url`` -> (scheme, host, port, path with query); HttpInputError naming ``option``, the value (any password
    in it shown as ``***``) and the form."""
    form = "expected http://<host>:<port>[/path] or https://<host>:<port>[/path] (e.g. http://127.0.0.1:30080)"
    shown = redact_url(url)
    if not isinstance(url, str) or not url:
        raise HttpInputError("%s %r: %s" % (option, shown, form))
    if any(ord(ch) < 33 or ord(ch) == 127 for ch in url):
        raise HttpInputError("%s %r: contains a space or control character; %s" % (option, shown, form))
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:  # its text can quote a part of a password: where there is one, that is the problem
        why = str(exc) if shown == url else "credentials in the URL are not supported"
        raise HttpInputError("%s %r: %s; %s" % (option, shown, why, form))
    if parts.username is not None or parts.password is not None:
        raise HttpInputError("%s %r: credentials in the URL are not supported; %s" % (option, shown, form))
    if parts.scheme not in ("http", "https"):
        raise HttpInputError("%s %r: scheme %r is not http or https; %s" % (option, shown, parts.scheme, form))
    if not parts.hostname:
        raise HttpInputError("%s %r: no host; %s" % (option, shown, form))
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    elif port == 0:
        raise HttpInputError("%s %r: port 0 is not a port; %s" % (option, shown, form))
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port, path


def check_source(value, option, paths=False):
    """A package source (pip's index or find-links): an http(s) URL with a host and a numeric port (check_url), a
    file: URL or, with ``paths``, an absolute path. HttpInputError naming ``option``, the value (any password in it
    shown as ``***``) and the form."""
    form = "expected an http(s)://<host>[:<port>]/<path> or file:///<path> URL%s" % (
        " or an absolute path" if paths else "")
    if not isinstance(value, str) or not value.strip() or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise HttpInputError("%s %r: %s" % (option, redact_url(value), form))
    if value.startswith("file:") or (paths and value.startswith("/")):
        return value
    try:
        check_url(value, option)
    except HttpInputError as exc:  # "<option> <value>: <what is wrong>; expected ..." - this option's form instead
        raise HttpInputError("%s; %s" % (str(exc).split("; expected", 1)[0], form))
    return value


def check_sources(index_url=None, extra_index_urls=(), find_links=()):
    """pip's package sources of a module's options (``index_url``, ``extra_index_urls``, ``find_links``, the last
    also absolute paths), each as check_source checks it; HttpInputError naming the first bad one."""
    for option, values, paths in (("index_url", [index_url] if index_url else [], False),
                                  ("extra_index_urls", extra_index_urls, False), ("find_links", find_links, True)):
        for value in values or []:
            check_source(value, option, paths=paths)


def _context(validate_certs, ca_path):
    if not validate_certs:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_path or None)


class _Late(Exception):
    """The deadline passed (raised inside get, which turns it into HttpDeadline)."""


class _Watchdog(object):
    """Shuts the watched connections down when ``timeout`` seconds have passed, through descriptors of its own (a
    ``dup`` of each socket): whatever http.client or ssl do with their socket objects, a read blocked on the
    connection returns at the deadline."""

    def __init__(self, timeout):
        self._lock = threading.Lock()
        self._socks = []
        self._done = False
        self.expired = False
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self):
        with self._lock:
            if self._done:
                return
            self.expired = True
            for sock in self._socks:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def watch(self, sock):
        with self._lock:
            if self.expired:
                raise _Late()
            self._socks.append(sock.dup())

    def stop(self):
        """Stop watching; True when the deadline had already passed (the connection may have been cut)."""
        with self._lock:
            self._done = True
            expired = self.expired
        self._timer.cancel()
        for sock in self._socks:
            sock.close()
        return expired


def _left(deadline):
    """Seconds left before ``deadline``; _Late once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Late()
    return left


def _resolve(host, port, deadline):
    """getaddrinfo within the deadline (it cannot be interrupted, so it runs in a thread left behind if late)."""
    result = {}

    def lookup():
        try:
            result["infos"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            result["error"] = exc

    thread = threading.Thread(target=lookup, name="gpufleet-http-lookup")
    thread.daemon = True
    thread.start()
    thread.join(_left(deadline))
    if thread.is_alive():
        raise _Late()
    if "error" in result:
        raise result["error"]
    return result["infos"]


def _connect(host, port, deadline):
    """A TCP connection to the first of ``host``'s addresses that accepts, every attempt bounded by the time left."""
    error = None
    for family, socktype, proto, _name, address in _resolve(host, port, deadline):
        sock = socket.socket(family, socktype, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
        except BaseException as exc:
            sock.close()
            if not isinstance(exc, OSError) or time.monotonic() >= deadline:
                raise
            error = exc
            continue
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        return sock
    raise error or OSError("%s: no address to connect to" % host)


def _late(url, timeout):
    return HttpDeadline("%s: no complete answer within the %s s deadline (timeout); the peer is too slow or trickles "
                        "its answer" % (url, timeout))


def get(url, timeout, validate_certs=True, ca_path=None, max_body=MAX_BODY, option="url"):
    """GET ``url``: (HTTP status, body bytes) within ``timeout`` seconds for the whole exchange.

    HttpInputError for a malformed URL; HttpDeadline when the deadline passed (the message names the URL and the
    timeout); HttpError for any other failure (refused, TLS, a malformed, cut short or oversized answer). No redirects
    are followed and no proxy is used (the peers are services of the fleet, reached directly)."""
    scheme, host, port, path = check_url(url, option)
    ctx = None
    if scheme == "https":
        try:
            ctx = _context(validate_certs, ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise HttpInputError("ca_path %r: %s; expected a PEM file of CA certificates" % (ca_path, exc))
    deadline = time.monotonic() + timeout
    watchdog = _Watchdog(timeout)
    sock = conn = resp = None
    try:
        try:
            sock = _connect(host, port, deadline)
            watchdog.watch(sock)  # before the TLS handshake, which a peer can trickle too
            if ctx is not None:
                sock.settimeout(_left(deadline))
                sock = ctx.wrap_socket(sock, server_hostname=host)
                conn = http.client.HTTPSConnection(host, port, context=ctx)
            else:
                conn = http.client.HTTPConnection(host, port)
            conn.sock = sock  # connected here, within the deadline; http.client only sends and reads
            sock.settimeout(_left(deadline))
            conn.request("GET", path, headers={"Accept": "application/json", "Connection": "close"})
            sock.settimeout(_left(deadline))
            resp = conn.getresponse()  # a closing answer: http.client drops conn.sock, the watchdog keeps its own
            read = getattr(resp, "read1", resp.read)
            chunks, size = [], 0
            while not resp.isclosed():
                sock.settimeout(_left(deadline))
                chunk = read(_READ)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_body:
                    raise HttpError("%s: the answer is larger than %d bytes" % (url, max_body))
                chunks.append(chunk)
            # what a Content-Length promised and did not come (http.client counts it down; 0 or None: nothing owed)
            short = 0 if resp.chunked else (resp.length or 0)
            status = resp.status
        except HttpError:
            raise
        except _Late:
            raise _late(url, timeout)
        except ssl.SSLCertVerificationError as exc:
            raise HttpError("%s: certificate not trusted (%s); give ca_path, or validate_certs: false for a "
                            "self-signed router you trust" % (url, getattr(exc, "verify_message", None) or exc))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if watchdog.stop() or time.monotonic() >= deadline:
                raise _late(url, timeout)
            raise HttpError("%s: %s" % (url, getattr(exc, "reason", None) or exc or type(exc).__name__))
        if watchdog.stop():  # it cut the connection: what was read may be only a part
            raise _late(url, timeout)
        if short:
            raise HttpError("%s: the answer ended %d bytes short of its Content-Length (%d bytes read)"
                            % (url, short, size))
        return status, b"".join(chunks)
    finally:
        watchdog.stop()
        for thing in (resp, conn, sock):
            if thing is not None:
                try:
                    thing.close()
                except OSError:
                    pass
