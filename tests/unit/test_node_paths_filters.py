# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters path_is, download_record and download_verified on facts node_stack really returns (gather: [paths]
over a fixture tree): the decisions that let the deepep and nvshmem phases skip a task whose module would change
nothing, and run it on anything else (tampered, truncated, replaced, re-set, wrong mode, not read)."""

from __future__ import annotations

import hashlib
import os

import pytest
from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.filter import node_paths
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack

UID, GID = os.getuid(), os.getgid()
TARBALL = "/opt/deepep/src/downloads/nvshmem_src_3.4.5-0.tar.gz"
CHECKSUM = "sha256:file:///srv/fleetsim-mirror/sources/nvshmem-fixture.tar.gz.sha256"


def read(root, paths, hashed=()):
    result = run_module(node_stack, {"gather": ["paths"], "root": str(root), "paths": list(paths),
                                     "hash_paths": list(hashed)}, check_mode=True)
    assert not result.failed, result
    return result["ansible_facts"]["gpufleet_paths"]


@pytest.fixture
def node(tmp_path):
    """A node whose tarball was downloaded and recorded as the role does it."""
    tarball = tmp_path / TARBALL.lstrip("/")
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(b"\x1f\x8b" + os.urandom(4096))
    os.chmod(tarball, 0o644)
    os.chmod(tarball.parent, 0o755)
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    record = tmp_path / (TARBALL.lstrip("/") + ".verified")
    record.write_text(node_paths.download_record(sha, CHECKSUM))
    os.chmod(record, 0o644)
    return tmp_path


def verified(root, checksum=CHECKSUM, uid=UID):
    paths = read(root, [TARBALL, TARBALL + ".verified"], [TARBALL])
    if uid != 0:  # the fixture is not root's: judge ownership against this user's ids as the role judges root's
        for entry in paths.values():
            if entry["exists"]:
                entry.update(uid=0 if entry["uid"] == UID else entry["uid"], gid=0 if entry["gid"] == GID else entry["gid"])
    return node_paths.download_verified(paths, TARBALL, checksum)


def test_the_recorded_tarball_with_the_same_setting_is_verified(node):
    assert verified(node) is True


@pytest.mark.parametrize("change", ["tampered", "truncated", "replaced", "mode", "no record", "setting"])
def test_anything_else_sends_the_tarball_to_get_url(node, change):
    tarball = node / TARBALL.lstrip("/")
    checksum = CHECKSUM
    if change == "tampered":
        data = bytearray(tarball.read_bytes())
        data[100] ^= 0xFF
        tarball.write_bytes(bytes(data))
    elif change == "truncated":
        tarball.write_bytes(tarball.read_bytes()[:1000])
    elif change == "replaced":
        tarball.unlink()
        tarball.mkdir()
    elif change == "mode":
        os.chmod(tarball, 0o600)
    elif change == "no record":
        (node / (TARBALL.lstrip("/") + ".verified")).unlink()
    elif change == "setting":
        checksum = "sha256:" + "0" * 64
    assert verified(node, checksum) is False


def test_a_tarball_read_without_its_hash_or_not_read_is_not_verified(node):
    unhashed = read(node, [TARBALL, TARBALL + ".verified"])
    assert node_paths.download_verified(unhashed, TARBALL, CHECKSUM) is False
    assert node_paths.download_verified({}, TARBALL, CHECKSUM) is False


def test_path_is_kind_mode_and_owner(node):
    directory = os.path.dirname(TARBALL)
    paths = read(node, [directory, TARBALL, "/absent"])
    ids = {"uid": UID, "gid": GID}
    assert node_paths.path_is(paths[directory], "directory", "0755", **ids) is True
    assert node_paths.path_is(paths[directory], "directory", "755", **ids) is True
    assert node_paths.path_is(paths[directory], "directory", "0700", **ids) is False
    assert node_paths.path_is(paths[directory], "file", **ids) is False
    assert node_paths.path_is(paths[TARBALL], "file", "0644", **ids) is True
    assert node_paths.path_is(paths[TARBALL], "file", "0644", uid=UID + 1, gid=GID) is False
    assert node_paths.path_is(paths["/absent"], "directory") is False
    # a path that was not read: nothing known, the task runs
    assert node_paths.path_is({}, "directory") is False
    assert node_paths.path_is(Undefined(), "directory") is False


@pytest.mark.parametrize("args, word", [
    (({"type": "file"}, "file"), "gpufleet_paths"),
    (({"exists": True, "type": "file", "mode": "0644", "uid": 0, "gid": 0}, "socket"), "'socket'"),
    (({"exists": True, "type": "file", "mode": "0644", "uid": 0, "gid": 0}, "file", "rwx"), "'rwx'"),
])
def test_path_is_refuses_bad_input_by_name(args, word):
    with pytest.raises(AnsibleFilterError) as err:
        node_paths.path_is(*args)
    assert word in str(err.value)


def test_download_record_shape_and_refusals():
    sha = "ab" * 32
    assert node_paths.download_record(sha, "") == sha + "\n\n"
    assert node_paths.download_record(sha, None) == sha + "\n\n"
    with pytest.raises(AnsibleFilterError, match="'XYZ' is not a sha256"):
        node_paths.download_record("XYZ", "")
    with pytest.raises(AnsibleFilterError, match="line break"):
        node_paths.download_record(sha, "sha256:a\nb")


def test_filters_are_registered_guarded():
    filters = node_paths.FilterModule().filters()
    assert set(filters) == {"path_is", "download_record", "download_verified"}
    with pytest.raises(AnsibleFilterError, match="download_verified"):
        filters["download_verified"]("not a mapping", TARBALL, CHECKSUM)
