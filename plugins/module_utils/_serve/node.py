# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What serving's preflight needs to know of an engine node (node_stack ``gather: [serve_node]``, the
``gpufleet_serve_node`` facts serve_plan's ``nodes`` takes): its interfaces and their IPv4 addresses, the values of
the env scripts its units take, and the DeepGEMM caches precompiled on it (the markers the sglang role writes
beside them). Read-only; one bounded command (``ip -j addr show``).

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import glob
import json
import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.units import ServeError, parse_env_script

__all__ = ["DEFAULT_DG_CACHE_DIR", "IP_ADDR_ARGV", "parse_ip_addr", "read_deepgemm_markers", "gather_node"]

MARKER_GLOB = ".gpufleet-deepgemm-*.json"
# The DeepGEMM cache directory the sglang role installs into, and the one command of the gathering.
DEFAULT_DG_CACHE_DIR = "/var/cache/sglang/deep_gemm"
IP_ADDR_ARGV = ("ip", "-j", "addr", "show")


def parse_ip_addr(text):
    """``ip -j addr show`` -> ``[{name, up, ipv4: [addresses]}]`` in the kernel's order."""
    try:
        links = json.loads(text or "[]")
    except ValueError as exc:
        raise ServeError("ip -j addr show printed no JSON (%s): %r" % (exc, (text or "")[:120]))
    if not isinstance(links, list):
        raise ServeError("ip -j addr show printed %s, expected a list of links" % type(links).__name__)
    out = []
    for link in links:
        if not isinstance(link, dict) or not link.get("ifname"):
            continue
        flags = link.get("flags") or []
        out.append({"name": link["ifname"], "up": "UP" in flags,
                    "ipv4": [a.get("local") for a in link.get("addr_info") or []
                             if isinstance(a, dict) and a.get("family") == "inet" and a.get("local")]})
    return out


def read_deepgemm_markers(cache_dir):
    """The markers of the DeepGEMM caches installed in ``cache_dir``: ``[{key, args, file}]`` (unreadable ones are
    reported with ``error``)."""
    out = []
    if not cache_dir or not os.path.isdir(cache_dir):
        return out
    for path in sorted(glob.glob(os.path.join(cache_dir, MARKER_GLOB))):
        try:
            with open(path) as handle:
                data = json.load(handle)
            out.append({"file": path, "key": str(data.get("key", "")), "args": [str(a) for a in data.get("args") or []]})
        except (OSError, ValueError, AttributeError) as exc:
            out.append({"file": path, "key": "", "args": [], "error": str(exc)})
    return out


def gather_node(env_scripts, dg_cache_dir, runner, timeout=10):
    """The node facts of one engine node; ``runner(argv, timeout=, env=)`` -> ``(rc, out, err)``."""
    errors = []
    rc, out, err = runner(list(IP_ADDR_ARGV), timeout=timeout, env=None)
    interfaces = None
    interfaces_error = ""
    if rc == 0:
        try:
            interfaces = parse_ip_addr(out)
        except ServeError as exc:
            interfaces_error = str(exc)
    else:
        interfaces_error = "ip -j addr show exited %d: %s" % (rc, (err or out).strip()[-300:])
    env = {}
    present, missing = [], []
    for path in env_scripts or []:
        if not os.path.isfile(path):
            missing.append(path)
            continue
        try:
            with open(path) as handle:
                env = parse_env_script(handle.read(), env, path)
            present.append(path)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append("cannot read %s: %s" % (path, exc))
        except ServeError as exc:
            errors.append(str(exc))
    return {"interfaces": interfaces, "interfaces_error": interfaces_error, "env": env, "env_scripts": present,
            "missing_env_scripts": missing, "deepgemm": read_deepgemm_markers(dg_cache_dir),
            "deepgemm_dir": dg_cache_dir or "", "errors": errors}
