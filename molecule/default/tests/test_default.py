# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the default scenario: the override is live and each node rebooted exactly once."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")
sys.path.insert(0, str(Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "molecule" / "shared"))
fleet_checks = importlib.import_module("fleet_checks")


def test_override_is_live(host):
    params = fleet_checks.live_params(host)
    assert params["RegistryDwords"].strip('"').rstrip(";").split(";") == ["PeerMappingOverride=1"]
    assert params["EnableStreamMemOPs"] == "1"


def test_boot_id_changed_exactly_once(host):
    name = host.check_output("hostname").strip()
    boots = [e for e in fleet_checks.boot_log() if e["node"] == name and e["event"] == "up"]
    assert len(boots) == 2, boots
    assert boots[0]["boot_id"] != boots[1]["boot_id"]
    live = host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    assert live == boots[1]["boot_id"]
