# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the default scenario: the override is live and each node rebooted exactly once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")


def boot_log() -> list[dict]:
    root = Path(os.environ.get("FLEETSIM_STATE_DIR", "/srv/fleetsim"))
    path = root / os.environ["FLEETSIM_FLEET"] / "boots.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def live_params(host) -> dict:
    params = {}
    for line in host.file("/proc/driver/nvidia/params").content_string.splitlines():
        name, value = line.split(":", 1) if ":" in line else (line, "")
        params[name.strip()] = value.strip()
    return params


def test_override_is_live(host):
    params = live_params(host)
    assert params["RegistryDwords"].strip('"').rstrip(";").split(";") == ["PeerMappingOverride=1"]
    assert params["EnableStreamMemOPs"] == "1"


def test_boot_id_changed_exactly_once(host):
    name = host.check_output("hostname").strip()
    boots = [e for e in boot_log() if e["node"] == name and e["event"] == "up"]
    assert len(boots) == 2, boots
    assert boots[0]["boot_id"] != boots[1]["boot_id"]
    live = host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert live == boots[1]["boot_id"]
