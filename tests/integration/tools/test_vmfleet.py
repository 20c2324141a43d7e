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


@pytest.mark.parametrize("name,value", [("MASKED", image.MASKED[1:]), ("INITRAMFS_MODULES", ("virtio_blk", "ext4")),
                                        ("SERVING_VENV", "/opt/other-venv")])
def test_image_key_changes_with_what_the_build_does_to_the_root(monkeypatch, name, value):
    before = image.image_key()
    monkeypatch.setattr(image, name, value)
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


# ---------------------------------------------------------------- capture and clones
def test_overlay_command_lines():
    base = fleet_mod.Path("/b/image-x/rootfs.img")
    assert fleet_mod.overlay_argv(base, "raw", fleet_mod.Path("/f/n/overlay.qcow2")) == [
        "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/b/image-x/rootfs.img", "/f/n/overlay.qcow2"]
    layer = fleet_mod.Path("/f/images/golden/disk.qcow2")
    assert fleet_mod.overlay_argv(layer, "qcow2", fleet_mod.Path("/f/c/overlay.qcow2"))[5:9] == [
        "-F", "qcow2", "-b", "/f/images/golden/disk.qcow2"]
    with pytest.raises(VmError, match="backing format 'vmdk' is invalid: expected raw or qcow2"):
        fleet_mod.overlay_argv(layer, "vmdk", fleet_mod.Path("/x"))


@pytest.mark.parametrize("name", ["", "-x", "a b", "../x", "x/y", "a" * 41, "é"])
def test_bad_image_name_is_refused(tmp_path, monkeypatch, name):
    fleet = _fleet_with_state(tmp_path, monkeypatch)
    with pytest.raises(VmError, match="image name .* is invalid: expected 1 to 40 letters"):
        fleet.capture("realvm-1", name)
    with pytest.raises(VmError, match="image name .* is invalid"):
        fleet.up("clone", 1, "tcg", from_image=name)
    assert not (fleet.dir / "images").exists()


def test_capture_of_an_unknown_guest_is_refused(tmp_path, monkeypatch):
    with pytest.raises(VmError, match="no guest 'realvm-9' in fleet t: expected one of"):
        _fleet_with_state(tmp_path, monkeypatch).capture("realvm-9", "golden")


def _capture(tmp_path, monkeypatch, alive=True):
    """A capture with QEMU and SSH replaced: returns the fleet, the commands run and the record."""
    fleet = _fleet_with_state(tmp_path, monkeypatch)
    state = json.loads(fleet.state_path.read_text())
    state["image"] = str(tmp_path / "image-x")
    (tmp_path / "image-x").mkdir()
    (tmp_path / "image-x" / "rootfs.img").write_bytes(b"")
    state["nodes"]["realvm-1"]["pid"] = 4242
    fleet.save(state)
    (fleet.dir / "realvm-1").mkdir()
    (fleet.dir / "realvm-1" / "overlay.qcow2").write_bytes(b"QFI\xfb layer")
    running = {"up": alive}
    ran = []

    def fake_run(argv, timeout, check=True, **kwargs):
        ran.append((argv, timeout))
        if argv[-2:] == ["systemctl", "poweroff"]:
            running["up"] = False
        if argv[0] == "cp":
            fleet_mod.shutil.copyfile(argv[-2], argv[-1])
        out = json.dumps({"backing-filename": state["image"] + "/rootfs.img", "actual-size": 9, "virtual-size": 3})
        return fleet_mod.subprocess.CompletedProcess(argv, 0, out if argv[0] == "qemu-img" else "", "")

    monkeypatch.setattr(fleet_mod, "run", fake_run)
    monkeypatch.setattr(fleet_mod, "_alive", lambda pid, needle: running["up"] and pid == 4242)
    return fleet, ran, fleet.capture("realvm-1", "golden")


def test_capture_powers_the_guest_off_and_keeps_its_layer(tmp_path, monkeypatch):
    fleet, ran, record = _capture(tmp_path, monkeypatch)
    assert ran[0][0][-2:] == ["systemctl", "poweroff"] and ran[0][0][0] == "ssh"
    assert all(timeout <= fleet_mod.COPY_TIMEOUT for dummy, timeout in ran)
    disk = fleet.dir / "images" / "golden" / "disk.qcow2"
    assert ran[1][0] == ["cp", "--sparse=always", str(fleet.dir / "realvm-1" / "overlay.qcow2"), str(disk)]
    assert disk.read_bytes() == b"QFI\xfb layer"
    assert (fleet.dir / "realvm-1" / "overlay.qcow2").exists()  # the source's disk stays
    state = fleet.load()
    assert state["images"]["golden"] == record
    assert record["source"] == "realvm-1" and record["base"] == str(tmp_path / "image-x")
    assert state["nodes"]["realvm-1"]["stopped"] is True and state["nodes"]["realvm-1"]["pid"] is None
    # A stopped guest leaves the inventory and takes no command; the name is taken.
    assert "realvm-1" not in fleet.inventory()["all"]["children"]["realvm"]["hosts"]
    with pytest.raises(VmError, match="guest realvm-1 of fleet t is stopped .captured as golden."):
        fleet.exec("realvm-1", ["true"])
    with pytest.raises(VmError, match="fleet t has an image 'golden' already"):
        fleet.capture("realvm-2", "golden")
    assert fleet.captured("golden") == disk
    fleet.down()
    assert not fleet.dir.exists()


def test_capture_waits_for_qemu_to_exit_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_mod, "POWEROFF_WAIT_SECONDS", 0)
    monkeypatch.setattr(fleet_mod.time, "sleep", lambda s: None)
    fleet = _fleet_with_state(tmp_path, monkeypatch)
    state = fleet.load()
    state["nodes"]["realvm-1"]["pid"] = 4242
    fleet.save(state)
    (fleet.dir / "realvm-1").mkdir()
    (fleet.dir / "realvm-1" / "overlay.qcow2").write_bytes(b"x")
    monkeypatch.setattr(fleet_mod, "run", lambda argv, timeout, check=True, **kw: None)
    monkeypatch.setattr(fleet_mod, "_alive", lambda pid, needle: True)
    with pytest.raises(VmError, match="did not power off within 0 s .QEMU pid 4242 still runs.; its disk is not captured"):
        fleet.capture("realvm-1", "golden")
    assert not (fleet.dir / "images").exists()
    assert not fleet.load()["nodes"]["realvm-1"].get("stopped")


def test_clones_boot_over_the_captured_layer(tmp_path, monkeypatch):
    fleet, dummy, dummy2 = _capture(tmp_path, monkeypatch)
    monkeypatch.setattr(fleet_mod, "ensure_image", lambda *a: pytest.fail("clones need no base image build"))
    started = []

    def fake_start(state, image, name, node, pubkey, backing):
        started.append((name, node["seq"], node["private_ip"], image, backing))
        return None

    monkeypatch.setattr(fleet, "_start", fake_start)
    monkeypatch.setattr(fleet, "_wait_ssh", lambda *a: None)
    monkeypatch.setattr(fleet, "_wait_rxe", lambda *a: None)
    fleet.key.write_text("k\n")
    fleet.key.with_suffix(".pub").write_text("ssh-ed25519 AAAA t\n")
    fleet.up("clone", 2, "tcg", from_image="golden")
    disk = fleet.dir / "images" / "golden" / "disk.qcow2"
    assert started == [("clone-1", 3, "10.77.0.13", tmp_path / "image-x", (disk, "qcow2")),
                       ("clone-2", 4, "10.77.0.14", tmp_path / "image-x", (disk, "qcow2"))]
    assert fleet.load()["nodes"]["clone-2"]["from_image"] == "golden"


def test_clones_of_a_missing_image_or_base_are_refused(tmp_path, monkeypatch):
    fleet = _fleet_with_state(tmp_path, monkeypatch)
    with pytest.raises(VmError, match="fleet t has no captured image 'golden': expected one of .. .python -m tools"):
        fleet.up("clone", 1, "tcg", from_image="golden")
    (tmp_path / "b").mkdir()
    fleet, dummy, dummy2 = _capture(tmp_path / "b", monkeypatch)
    (tmp_path / "b" / "image-x" / "rootfs.img").unlink()
    with pytest.raises(VmError, match="image 'golden' is a layer over .*image-x, which is gone: capture it again"):
        fleet.up("clone", 1, "tcg", from_image="golden")
    assert "clone-1" not in fleet.load()["nodes"]
