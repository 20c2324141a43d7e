# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving state of a node, read only: the SGLang units ``sglang_serve`` wrote (their systemd state and the
SGLang version their environment names) and, on the router's node, the router's readiness and workers.

Python 3.8+ and ansible's own module_utils (this file runs on the managed nodes).
"""

from __future__ import annotations

import functools
import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._http import (
    HttpError, HttpInputError, check_url, get as http_get
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import run_bounded
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import (
    ServeError, parse_env_file, parse_unit_name
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import (
    UnitValueError, check_prefix, reply_bool
)

__all__ = ["ServeStateError", "ServeStateInputError", "NotJson", "parse_show", "read_env_text", "unit_facts",
           "router_facts", "gather", "serving_facts"]

SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "NRestarts", "UnitFileState")
MAX_ENV_FILE = 1024 * 1024  # bytes; a larger environment file is not one sglang_serve wrote
ENV_FORM = "expected the environment file sglang_serve writes (UTF-8 text, NAME=\"value\" lines)"


class ServeStateError(ValueError):
    """A file or an answer this module reads is not in the form it expects; the message names it."""


class ServeStateInputError(ValueError):
    """An option of the reading is not of its form; the message names the option, its value and the form."""


def parse_show(text, unit):
    """``systemctl show --property=...`` output (``Key=Value`` lines) -> the properties, typed."""
    props = {}
    for line in text.splitlines():
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        props[key.strip()] = value.strip()
    missing = [key for key in ("LoadState", "ActiveState") if key not in props]
    if missing:
        raise ServeStateError("systemctl show %s gave no %s; expected Key=Value lines" % (unit, ", ".join(missing)))
    out = {"load_state": props.get("LoadState"), "active_state": props.get("ActiveState"),
           "sub_state": props.get("SubState"), "unit_file_state": props.get("UnitFileState") or None}
    for key, name in (("MainPID", "main_pid"), ("NRestarts", "restarts")):
        value = props.get(key, "")
        out[name] = int(value) if re.fullmatch(r"[0-9]+", value or "") else None
    return out


def _also(error, more):
    """``more`` after the error already recorded (the environment file's), not in its place."""
    return "%s; %s" % (error, more) if error else more


def read_env_text(path):
    """The environment file at ``path`` as text: UnicodeDecodeError where it is not UTF-8, ServeStateError where it
    is larger than MAX_ENV_FILE (neither is a file sglang_serve wrote)."""
    with open(path, "rb") as handle:
        raw = handle.read(MAX_ENV_FILE + 1)
    if len(raw) > MAX_ENV_FILE:
        raise ServeStateError("%s: larger than %d bytes; %s" % (path, MAX_ENV_FILE, ENV_FORM))
    return raw.decode("utf-8")


def unit_facts(config_dir, prefix, show, read_text=read_env_text):
    """Every unit of ``prefix`` with an environment file in ``config_dir``: its instance, role, rank, systemd state
    (``show(unit)`` -> (rc, stdout, stderr)) and the SGLang version its environment names. A file that cannot be read
    (not UTF-8, not a regular file, malformed) is named in its unit's ``error``; the other units are still read."""
    units = []
    try:
        names = sorted(os.listdir(config_dir))
    except OSError:
        return units
    for name in names:
        if not name.endswith(".env") or name == "secrets.env":
            continue
        unit = name[:-len(".env")] + ".service"
        parsed = parse_unit_name(unit)
        if not parsed or parsed["prefix"] != prefix:
            continue
        entry = {"unit": unit, "env_file": os.path.join(config_dir, name), "role": parsed["role"],
                 "instance": parsed["instance"], "rank": parsed["rank"], "sglang_version": None, "error": None}
        try:
            if not os.path.isfile(entry["env_file"]):  # a FIFO would block the read, a directory cannot be read
                raise ServeStateError("%s: not a regular file; %s" % (entry["env_file"], ENV_FORM))
            env = parse_env_file(read_text(entry["env_file"]), entry["env_file"])
            entry["sglang_version"] = env.get("GPUFLEET_SGLANG_VERSION")
        except UnicodeDecodeError as exc:  # this unit's file only: the other units and the router are still read
            start = int(exc.start)
            entry["error"] = "%s: not UTF-8 text (byte 0x%s at offset %d); %s" % (
                entry["env_file"], bytes(exc.object[start:start + 1]).hex(), start, ENV_FORM)
        except (OSError, ServeError, ServeStateError) as exc:
            entry["error"] = str(exc)
        rc, out, err = show(unit)
        if rc != 0:
            entry.update(load_state=None, active_state=None, sub_state=None, unit_file_state=None, main_pid=None,
                         restarts=None)
            entry["error"] = _also(entry["error"],
                                   "systemctl show %s: rc %s: %s" % (unit, rc, (err or out).strip()[:200]))
        else:
            try:
                entry.update(parse_show(out, unit))
            except ServeStateError as exc:
                entry["error"] = _also(entry["error"], str(exc))
        units.append(entry)
    return units


class NotJson(object):
    """An answer that is not JSON (``_get``'s body then): ``text`` is its beginning, to name it."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return "NotJson(%r)" % self.text


def _get(url, timeout, validate_certs=True, ca_path=None):
    """(HTTP status, body, error text or None): the body parsed as JSON, a NotJson where it is not JSON, None where it
    is empty; status None and the error text when the router did not answer in full within ``timeout`` seconds (one
    deadline for the whole exchange, module_utils/_http)."""
    try:
        status, raw = http_get(url, timeout, validate_certs=validate_certs, ca_path=ca_path, option="router_url")
    except HttpError as exc:  # router_facts names the URL itself
        text = str(exc)
        return None, None, text[len(url) + 2:] if text.startswith(url + ": ") else text
    body = raw.decode("utf-8", "replace")
    if not body.strip():
        return status, None, None
    try:
        return status, json.loads(body), None
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return status, NotJson(body.strip()[:60]), None


_JSON_TYPES = ((bool, "JSON boolean"), (str, "JSON string"), ((int, float), "JSON number"), (list, "JSON list"),
               (dict, "JSON object"))


def _what(body):
    """What an answer is, in words (``a JSON list``, ``an answer that is not JSON (it begins '<html>')``)."""
    if isinstance(body, NotJson):
        return "an answer that is not JSON (it begins %r)" % body.text
    if body is None:
        return "an empty answer (or JSON null)"
    for kind, name in _JSON_TYPES:
        if isinstance(body, kind):
            return "a %s" % name
    return "a %s" % type(body).__name__


def _workers_problem(status, body):
    """Why a ``/workers`` answer is not the router's workers list, or None when it is."""
    form = "expected 200 with a JSON object with a workers list"
    if status != 200:
        return "HTTP %s; %s" % (status, form)
    if not isinstance(body, dict):
        return "HTTP 200 with %s, not an object with a workers list; %s" % (_what(body), form)
    if "workers" not in body:
        return "HTTP 200 with a JSON object without workers; %s" % form
    if not isinstance(body["workers"], list):
        return "HTTP 200 with a JSON object whose workers is %s, not a list; %s" % (_what(body["workers"]), form)
    return None


def router_facts(url, timeout, get=_get):
    """The router at ``url``: ``/readiness`` (200 only with a healthy prefill/decode pair) and ``/workers``; ready only
    with both (a ``/workers`` answer that is no JSON object with a workers list is named in ``error``).
    ``get(url, timeout)`` -> (status, body, error)."""
    facts = {"url": url, "ready": False, "readiness_status": None, "error": None, "prefill_count": None,
             "decode_count": None, "workers": []}
    status, _body, error = get(url.rstrip("/") + "/readiness", timeout)
    facts["readiness_status"] = status
    facts["ready"] = status == 200
    if error:
        facts["error"] = "%s/readiness: %s" % (url, error)
        return facts
    status, body, error = get(url.rstrip("/") + "/workers", timeout)
    problem = error or _workers_problem(status, body)
    if problem:  # without its workers list, the router's readiness is not shown: not ready
        facts["ready"] = False
        facts["error"] = "%s/workers: %s" % (url, problem)
        return facts
    stats = body.get("stats") if isinstance(body.get("stats"), dict) else {}
    facts["prefill_count"] = stats.get("prefill_count")
    facts["decode_count"] = stats.get("decode_count")
    bad = []
    for number, worker in enumerate(body["workers"]):
        if isinstance(worker, dict):
            try:  # a worker the router does not call healthy with a JSON true is not healthy
                healthy = reply_bool(worker.get("is_healthy"), "workers[%d].is_healthy" % number)
            except UnitValueError as exc:
                healthy = False
                bad.append(str(exc))
            facts["workers"].append({"url": worker.get("url"), "worker_type": worker.get("worker_type"),
                                     "is_healthy": healthy, "bootstrap_port": worker.get("bootstrap_port")})
    if bad:
        facts["error"] = "%s/workers: %s" % (url, "; ".join(bad))
    return facts


def gather(config_dir, prefix, router_url, show, read_text, timeout, get=_get):
    """The node's serving facts (``gpufleet_serving``)."""
    units = unit_facts(config_dir, prefix, show, read_text)
    return {"config_dir": config_dir, "prefix": prefix, "units": units,
            "router": router_facts(router_url, timeout, get) if router_url else None}


def serving_facts(config_dir, prefix, router_url, timeout, validate_certs=True, ca_path=None, option_prefix=""):
    """The node's serving facts (``gpufleet_serving``) read with ``systemctl show`` and, with ``router_url``, the
    router's answers, each bounded by ``timeout`` seconds: the reader of ``serve_state`` and of ``node_stack``'s
    ``serving`` set. A bad option raises ServeStateInputError naming it (``option_prefix`` + its name)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise ServeStateInputError("%stimeout %r: expected a whole number of seconds, 1 or more"
                                   % (option_prefix, timeout))
    try:
        check_prefix(prefix, option_prefix + "prefix")  # the rule sglang_serve's plan applies to the units it writes
        if router_url:
            check_url(router_url, option_prefix + "router_url")
    except (UnitValueError, HttpInputError) as exc:
        raise ServeStateInputError(str(exc)) from None
    if ca_path is not None and not os.path.isfile(ca_path):
        raise ServeStateInputError("%sca_path %r: not a file; expected a PEM file of CA certificates"
                                   % (option_prefix, ca_path))

    def show(unit):
        return run_bounded(["systemctl", "show", unit, "--property=" + ",".join(SHOW_PROPERTIES)], timeout)

    get = functools.partial(_get, validate_certs=validate_certs, ca_path=ca_path)
    return gather(config_dir, prefix, router_url, show, read_env_text, timeout, get=get)
