# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving state of a node, read only: the SGLang units ``sglang_serve`` wrote (their systemd state and the
SGLang version their environment names) and, on the router's node, the router's readiness and workers.

Python 3.8+ and ansible's own module_utils (this file runs on the managed nodes).
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._http import HttpError, get as http_get
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import (
    ServeError, parse_env_file, parse_unit_name
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import UnitValueError, reply_bool

__all__ = ["ServeStateError", "parse_show", "unit_facts", "router_facts", "gather"]

SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "NRestarts", "UnitFileState")


class ServeStateError(ValueError):
    """A file or an answer this module reads is not in the form it expects; the message names it."""


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


def unit_facts(config_dir, prefix, show, read_text):
    """Every unit of ``prefix`` with an environment file in ``config_dir``: its instance, role, rank, systemd state
    (``show(unit)`` -> (rc, stdout, stderr)) and the SGLang version its environment names."""
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
            env = parse_env_file(read_text(entry["env_file"]), entry["env_file"])
            entry["sglang_version"] = env.get("GPUFLEET_SGLANG_VERSION")
        except (OSError, ServeError) as exc:
            entry["error"] = str(exc)
        rc, out, err = show(unit)
        if rc != 0:
            entry.update(load_state=None, active_state=None, sub_state=None, unit_file_state=None, main_pid=None,
                         restarts=None)
            entry["error"] = "systemctl show %s: rc %s: %s" % (unit, rc, (err or out).strip()[:200])
        else:
            try:
                entry.update(parse_show(out, unit))
            except ServeStateError as exc:
                entry["error"] = str(exc)
        units.append(entry)
    return units


def _get(url, timeout, validate_certs=True, ca_path=None):
    """(HTTP status, parsed JSON or None, error text or None); status None and the error text when the router did not
    answer in full within ``timeout`` seconds (one deadline for the whole exchange, module_utils/_http)."""
    try:
        status, raw = http_get(url, timeout, validate_certs=validate_certs, ca_path=ca_path, option="router_url")
    except HttpError as exc:  # router_facts names the URL itself
        text = str(exc)
        return None, None, text[len(url) + 2:] if text.startswith(url + ": ") else text
    body = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(body) if body.strip() else None, None
    except ValueError:
        return status, None, None


def router_facts(url, timeout, get=_get):
    """The router at ``url``: ``/readiness`` (200 only with a healthy prefill/decode pair) and ``/workers``.
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
    if error or status != 200 or not isinstance(body, dict) or not isinstance(body.get("workers"), list):
        facts["error"] = "%s/workers: %s" % (url, error or "HTTP %s, expected 200 with a workers list" % status)
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
