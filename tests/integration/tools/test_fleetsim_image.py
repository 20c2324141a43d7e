# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleetsim's images: the first boot of a sealed disk makes a machine-id and host keys (as systemd and sshd's keygen
do), a node that still has its identity is not captured, and an unknown image is refused by name."""

from __future__ import annotations

import shutil

import pytest

from tools.fleetsim import fleet, nodeinit
from tools.fleetsim.common import FleetError

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is part of fleetsim's tools")


@pytest.mark.parametrize("machine_id,key", [("", False), (None, False), ("", True), ("abc\n", False)])
def test_first_boot_makes_what_the_seal_removed(tmp_path, machine_id, key):
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    if machine_id is not None:
        (etc / "machine-id").write_text(machine_id)
    if key:
        (etc / "ssh/ssh_host_ed25519_key").write_text("kept")
    made = nodeinit.first_boot_identity("node-1", str(etc))
    assert made is (not machine_id or not key)
    text = (etc / "machine-id").read_text().strip()
    assert text == machine_id.strip() if machine_id else len(text) == 32 and int(text, 16) >= 0
    host_key = (etc / "ssh/ssh_host_ed25519_key").read_text()
    assert host_key == "kept" if key else "OPENSSH PRIVATE KEY" in host_key
    assert nodeinit.first_boot_identity("node-1", str(etc)) is False  # the next boot keeps them


def test_two_first_boots_make_two_identities(tmp_path):
    found = []
    for name in ("a", "b"):
        etc = tmp_path / name / "etc"
        etc.mkdir(parents=True)
        (etc / "machine-id").write_text("")
        nodeinit.first_boot_identity(name, str(etc))
        found.append(((etc / "machine-id").read_text(), (etc / "ssh/ssh_host_ed25519_key.pub").read_text()))
    assert found[0][0] != found[1][0] and found[0][1] != found[1][1]


def _fleet(tmp_path, machine_id):
    fl = fleet.Fleet(tmp_path, "imgtest")
    upper = fl.paths.node("n-1").upper / "etc"
    upper.mkdir(parents=True)
    (upper / "machine-id").write_text(machine_id)
    fl.save({"fleet": "imgtest", "nodes": {"n-1": {"name": "n-1", "profile": "gcp_b200"}}})
    return fl


@pytest.mark.parametrize("machine_id", ["0123456789abcdef0123456789abcdef\n", "x"])
def test_an_unsealed_node_is_not_captured(tmp_path, machine_id):
    fl = _fleet(tmp_path, machine_id)
    with pytest.raises(FleetError, match="n-1 is not sealed"):
        fl.capture("n-1", "golden")
    assert not (fl.paths.dir / "images").exists()


def test_a_sealed_node_is_captured_once(tmp_path):
    fl = _fleet(tmp_path, "")
    (fl.paths.node("n-1").root_home).mkdir()
    (fl.paths.node("n-1").upper / "opt").mkdir()
    (fl.paths.node("n-1").upper / "opt/build").write_text("built")
    info = fl.capture("n-1", "golden")
    assert info["node"] == "n-1" and info["profile"] == "gcp_b200"
    assert (fl.paths.dir / "images/golden/upper/opt/build").read_text() == "built"
    with pytest.raises(FleetError, match="image 'golden' exists"):
        fl.capture("n-1", "golden")


@pytest.mark.parametrize("name,why", [("nope", "has no image 'nope'"), ("Bad_Name", "image name 'Bad_Name'")])
def test_an_unknown_image_is_refused_by_name(tmp_path, name, why):
    fl = _fleet(tmp_path, "")
    with pytest.raises(FleetError, match=why):
        fl._image_dir(name, must_exist=True)
