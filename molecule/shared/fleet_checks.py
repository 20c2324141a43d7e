# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the scenarios' testinfra tests read from a simulated fleet: its boot log, a node's driver parameters and the
environment the env script gives. Imported by path (molecule/shared is put on sys.path by the test module)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def boot_log() -> list[dict]:
    """Every boot event of the scenario's fleet, in order: {"node", "event": "up"|"down", "boot_id", "time"}."""
    root = Path(os.environ.get("FLEETSIM_STATE_DIR", "/srv/fleetsim"))
    path = root / os.environ["FLEETSIM_FLEET"] / "boots.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def live_params(host) -> dict:
    """/proc/driver/nvidia/params of the node, name to value (as text, quotes kept)."""
    params = {}
    for line in host.file("/proc/driver/nvidia/params").content_string.splitlines():
        name, dummy, value = line.partition(":")
        params[name.strip()] = value.strip()
    return params


def sourced_env(host, script: str) -> dict:
    """The environment bash has on the node after sourcing ``script`` from a clean one."""
    # check_output quotes its arguments itself.
    out = host.check_output("env -i PATH=/usr/bin:/bin bash -c %s", f"source {script} && env -0")
    env = {}
    for item in out.split("\0"):
        if "=" in item:
            key, dummy, value = item.partition("=")
            env[key] = value
    return env
