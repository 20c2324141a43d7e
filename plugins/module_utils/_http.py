# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP GET with one deadline for the whole exchange (connect, TLS handshake, headers, body), certificates checked
unless the caller says otherwise, and the URL checked before anything is sent. A peer that trickles bytes cannot
hold the caller past its timeout: a watchdog shuts the socket down when the deadline passes.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.parse

__all__ = ["HttpInputError", "HttpDeadline", "HttpError", "check_url", "check_source", "get"]

MAX_BODY = 4 * 1024 * 1024  # bytes; a larger answer is refused, not read into memory


class HttpInputError(ValueError):
    """A URL or setting the caller was given is not in the form expected; the message names the option."""


class HttpError(Exception):
    """The exchange failed (refused, reset, TLS, a malformed answer); the message names the URL."""


class HttpDeadline(HttpError):
    """The exchange did not complete within its deadline; the message names the URL and the timeout."""


def check_url(url, option="url"):
    """``url`` -> (scheme, host, port, path with query); HttpInputError naming ``option``, the value and the form."""
    form = "expected http://<host>:<port>[/path] or https://<host>:<port>[/path] (e.g. http://127.0.0.1:30080)"
    if not isinstance(url, str) or not url:
        raise HttpInputError("%s %r: %s" % (option, url, form))
    if any(ord(ch) < 33 or ord(ch) == 127 for ch in url):
        raise HttpInputError("%s %r: contains a space or control character; %s" % (option, url, form))
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HttpInputError("%s %r: %s; %s" % (option, url, exc, form))
    if parts.scheme not in ("http", "https"):
        raise HttpInputError("%s %r: scheme %r is not http or https; %s" % (option, url, parts.scheme, form))
    if not parts.hostname:
        raise HttpInputError("%s %r: no host; %s" % (option, url, form))
    if parts.username is not None or parts.password is not None:
        raise HttpInputError("%s %r: credentials in the URL are not supported; %s" % (option, url, form))
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    elif port == 0:
        raise HttpInputError("%s %r: port 0 is not a port; %s" % (option, url, form))
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port, path


def check_source(value, option, paths=False):
    """A package source (pip's index or find-links): an http(s) URL with a host and a numeric port (check_url), a
    file: URL or, with ``paths``, an absolute path. HttpInputError naming ``option``, the value and the form."""
    form = "expected an http(s)://<host>[:<port>]/<path> or file:///<path> URL%s" % (
        " or an absolute path" if paths else "")
    if not isinstance(value, str) or not value.strip() or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise HttpInputError("%s %r: %s" % (option, value, form))
    if value.startswith("file:") or (paths and value.startswith("/")):
        return value
    try:
        check_url(value, option)
    except HttpInputError as exc:  # "<option> <value>: <what is wrong>; expected ..." - this option's form instead
        raise HttpInputError("%s; %s" % (str(exc).split("; expected", 1)[0], form))
    return value


def _context(validate_certs, ca_path):
    if not validate_certs:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_path or None)


def get(url, timeout, validate_certs=True, ca_path=None, max_body=MAX_BODY, option="url"):
    """GET ``url``: (HTTP status, body bytes) within ``timeout`` seconds for the whole exchange.

    HttpInputError for a malformed URL; HttpDeadline when the deadline passed (the message names the URL and the
    timeout); HttpError for any other failure (refused, TLS, a malformed or oversized answer). No redirects are
    followed and no proxy is used (the peers are services of the fleet, reached directly)."""
    scheme, host, port, path = check_url(url, option)
    deadline = time.monotonic() + timeout
    if scheme == "https":
        try:
            ctx = _context(validate_certs, ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise HttpInputError("ca_path %r: %s; expected a PEM file of CA certificates" % (ca_path, exc))
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    expired = threading.Event()

    def _expire():
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(timeout, _expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            conn.connect()
            if expired.is_set():  # the deadline passed while connecting, before there was a socket to shut
                raise OSError("deadline")
            conn.request("GET", path, headers={"Accept": "application/json", "Connection": "close"})
            resp = conn.getresponse()
            chunks, size = [], 0
            while True:
                chunk = resp.read(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_body:
                    raise HttpError("%s: the answer is larger than %d bytes" % (url, max_body))
                chunks.append(chunk)
            status = resp.status
        except HttpError:
            raise
        except ssl.SSLCertVerificationError as exc:
            raise HttpError("%s: certificate not trusted (%s); give ca_path, or validate_certs: false for a "
                            "self-signed router you trust" % (url, getattr(exc, "verify_message", None) or exc))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set() or time.monotonic() >= deadline:
                raise HttpDeadline("%s: no complete answer within the %s s deadline (timeout); the peer is too slow "
                                   "or trickles its answer" % (url, timeout))
            raise HttpError("%s: %s" % (url, getattr(exc, "reason", None) or exc or type(exc).__name__))
        if expired.is_set():
            raise HttpDeadline("%s: no complete answer within the %s s deadline (timeout); the peer is too slow or "
                               "trickles its answer" % (url, timeout))
        return status, b"".join(chunks)
    finally:
        watchdog.cancel()
        conn.close()
