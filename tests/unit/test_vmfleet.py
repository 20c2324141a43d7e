# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/vmfleet without booting anything: the image cache key, the fleet's inputs, its inventory, its down."""

from __future__ import annotations

import json

import pytest

from tools.vmfleet import fleet as fleet_mod
from tools.vmfleet import image
from tools.vmfleet.common import VmError


def test_image_key_is_stable_for_one_list():
    assert image.image_key(image.PACKAGES) == image.image_key(tuple(reversed(image.PACKAGES)))


@pytest.mark.parametrize("change", ["add", "remove"])
def test_image_key_changes_with_the_package_list(change):
    packages = image.PACKAGES + ("strace",) if change == "add" else image.PACKAGES[1:]
    assert image.image_key(packages) != image.image_key(image.PACKAGES)


def test_image_key_changes_with_a_guest_file(tmp_path, monkeypatch):
    before = image.image_key()
    guest = tmp_path / "guest"
    guest.mkdir()
    for name in image.GUEST_FILES:
        (guest / name).write_bytes((image.GUEST / name).read_bytes())
    (guest / "sshd.conf").write_text("UseDNS yes\n", encoding="utf-8")
    monkeypatch.setattr(image, "GUEST", guest)
    assert image.image_key() != before


def test_cached_image_is_reused_without_building(tmp_path, monkeypatch):
    monkeypatch.setattr(image, "BUILD_DIR", tmp_path)
    done = tmp_path / f"image-{image.image_key()}"
    done.mkdir()
    (done / "DONE").write_text("x\n", encoding="utf-8")
    monkeypatch.setattr(image, "_build", lambda *a: pytest.fail("an image was built although one is cached"))
    assert image.ensure_image(fleet_mod.Stages(quiet=True)) == done


@pytest.mark.parametrize("name", ["", "a b", "../x", "x/y", "é"])
def test_bad_fleet_name_is_refused(name):
    with pytest.raises(VmError, match="fleet name .* expected letters, digits"):
        fleet_mod.Fleet(name)


@pytest.mark.parametrize("option,value,expected", [("count", 0, "--nodes 0 is out of range: expected 1 to 200"),
                                                   ("count", 201, "--nodes 201 is out of range"),
                                                   ("accel", "xen", "--accel 'xen' is invalid: expected auto, kvm or tcg")])
def test_bad_up_input_is_refused_before_anything_is_made(tmp_path, monkeypatch, option, value, expected):
    monkeypatch.setattr(fleet_mod, "STATE_DIR", tmp_path)
    monkeypatch.setattr(fleet_mod, "ensure_image", lambda *a: pytest.fail("the image was looked at"))
    args = {"group": "realvm", "count": 2, "accel": "auto"}
    args[option] = value
    with pytest.raises(VmError, match=expected):
        fleet_mod.Fleet("t", fleet_mod.Stages(quiet=True)).up(**args)
    assert not list(tmp_path.iterdir())


def _fleet_with_state(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_mod, "STATE_DIR", tmp_path)
    fleet = fleet_mod.Fleet("t", fleet_mod.Stages(quiet=True))
    fleet.dir.mkdir(parents=True)
    fleet.save({"fleet": "t", "accel": "tcg", "mcast_port": 5000, "image": "/x", "nodes": {
        "realvm-2": {"group": "realvm", "seq": 2, "ssh_port": 2202, "private_ip": "10.77.0.12", "pid": None},
        "realvm-1": {"group": "realvm", "seq": 1, "ssh_port": 2201, "private_ip": "10.77.0.11", "pid": None}}})
    return fleet


def test_inventory_has_what_the_playbooks_need(tmp_path, monkeypatch):
    inv = _fleet_with_state(tmp_path, monkeypatch).inventory(reboot_timeout=123)
    hosts = inv["all"]["children"]["realvm"]["hosts"]
    assert list(hosts) == ["realvm-1", "realvm-2"]
    assert hosts["realvm-1"] == {"ansible_host": "127.0.0.1", "ansible_port": 2201, "vmfleet_private_ip": "10.77.0.11"}
    all_vars = inv["all"]["vars"]
    assert all_vars["ansible_user"] == "root"
    assert all_vars["ansible_ssh_private_key_file"].endswith("/t/id_ed25519")
    assert all_vars["gpufleet_reboot_timeout"] == 123 and all_vars["gpufleet_allow_reboot"] is True
    assert all_vars["gpufleet_reboot_boot_time_command"] == "cat /proc/sys/kernel/random/boot_id"
    assert all_vars["vmfleet_accel"] == "tcg"


def test_inventory_of_a_fleet_that_is_not_up_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_mod, "STATE_DIR", tmp_path)
    with pytest.raises(VmError, match="fleet t is not up"):
        fleet_mod.Fleet("t").inventory()


def test_down_removes_everything_and_kills_only_its_own_processes(tmp_path, monkeypatch):
    fleet = _fleet_with_state(tmp_path, monkeypatch)
    state = json.loads(fleet.state_path.read_text())
    state["nodes"]["realvm-1"]["pid"] = 1  # PID 1 is no QEMU of this fleet: it must be left alone
    fleet.save(state)
    killed = []
    monkeypatch.setattr(fleet_mod.os, "kill", lambda pid, sig: killed.append(pid))
    assert fleet.down() == []
    assert killed == []
    assert not fleet.dir.exists()
    assert fleet.down() == []  # idempotent
