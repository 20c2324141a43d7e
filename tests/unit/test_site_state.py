# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""site_state: the converged stamp of a node, and the drift that sends it back through the phases."""

from __future__ import annotations

import json
import os

import pytest

from unit_helpers import CAPTURED, run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.modules import site_state

KEY = "a" * 64

DPKG_STATUS = """\
Package: cuda-toolkit-12-9
Status: install ok installed
Version: 12.9.1-1

Package: doca-ofed
Status: deinstall ok config-files
Version: 3.2.1-1

Package: mft
Status: install ok installed
Architecture: amd64
Version: 4.30.0-139
Description: tools
 continued: line with a colon

"""


@pytest.fixture
def node(tmp_path):
    """A small node: a toolkit behind a symlink, an env script, a site-packages, dpkg's status, sysfs names."""
    root = tmp_path / "node"
    (root / "usr/local/cuda-12.9/bin").mkdir(parents=True)
    (root / "usr/local/cuda-12.9/bin/nvcc").write_text("#!/bin/sh\necho 12.9\n")
    os.symlink(str(root / "usr/local/cuda-12.9"), str(root / "usr/local/cuda"))
    (root / "opt/deepep").mkdir(parents=True)
    (root / "opt/deepep/unified-env.sh").write_text("export CUDA_HOME=/usr/local/cuda\n")
    site = root / "venv/lib/python3.11/site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch-2.13.0.dist-info").mkdir()
    (site / "deep_ep").mkdir()
    (site / "deep_ep_cpp.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF" + b"\0" * 64)
    ib = root / "sys/class/infiniband"
    ib.mkdir(parents=True)
    for i in range(2):
        (root / f"devices/rocep{i}").mkdir(parents=True)
        os.symlink(str(root / f"devices/rocep{i}"), str(ib / f"rocep{i}"))
    # The nvidia params file as the H200 node shows it.
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/params").write_text((CAPTURED / "proc_driver_nvidia_params").read_text())
    (root / "dpkg-status").write_text(DPKG_STATUS)
    return root


def watch_of(root):
    return [str(root / "usr/local/cuda"), str(root / "usr/local/cuda-12.9/bin/nvcc"),
            str(root / "opt/deepep/unified-env.sh"), str(root / "venv/lib/python3.11/site-packages"),
            str(root / "venv/lib/python3.11/site-packages/deep_ep*"), str(root / "sys/class/infiniband"),
            str(root / "proc/driver/nvidia/params"), str(root / "opt/deepep/nvshmem")]


def record(root, watch=None, packages=("cuda-toolkit-12-9", "doca-ofed", "mft"), check_mode=False):
    return run_module(site_state, {"path": str(root / "stamp.json"), "key": KEY, "state": "record",
                                   "watch": watch or watch_of(root), "packages": list(packages),
                                   "dpkg_status": str(root / "dpkg-status")}, check_mode=check_mode)


def check(root, key=KEY):
    return run_module(site_state, {"path": str(root / "stamp.json"), "key": key,
                                   "dpkg_status": str(root / "dpkg-status")})


def test_dpkg_versions_reads_only_installed_packages(node):
    found = ss.dpkg_versions(["cuda-toolkit-12-9", "doca-ofed", "mft:amd64", "absent"], str(node / "dpkg-status"))
    # doca-ofed is only config-files: not installed.
    assert found == {"cuda-toolkit-12-9": "12.9.1-1", "doca-ofed": None, "mft:amd64": "4.30.0-139", "absent": None}


def test_fingerprints_of_each_kind(node):
    fp = ss.fingerprint_watch(watch_of(node))
    assert fp[str(node / "usr/local/cuda")] == {"kind": "link", "target": str(node / "usr/local/cuda-12.9")}
    nvcc = fp[str(node / "usr/local/cuda-12.9/bin/nvcc")]
    assert nvcc["kind"] == "file" and nvcc["size"] == len("#!/bin/sh\necho 12.9\n") and len(nvcc["sha256"]) == 64
    assert fp[str(node / "sys/class/infiniband")] == {"kind": "dir", "entries": ["rocep0@", "rocep1@"]}
    assert fp[str(node / "venv/lib/python3.11/site-packages")]["entries"] == [
        "deep_ep/", "deep_ep_cpp.cpython-311-x86_64-linux-gnu.so", "torch-2.13.0.dist-info/", "torch/"]
    glob_fp = fp[str(node / "venv/lib/python3.11/site-packages/deep_ep*")]
    assert glob_fp["kind"] == "glob" and sorted(os.path.basename(m) for m in glob_fp["matches"]) == [
        "deep_ep", "deep_ep_cpp.cpython-311-x86_64-linux-gnu.so"]
    assert fp[str(node / "opt/deepep/nvshmem")] == {"kind": "missing"}


def test_large_files_by_size_and_mtime_and_pycache_ignored(node):
    big = node / "big.so"
    big.write_bytes(b"x" * 100)
    expected = {"kind": "file", "size": 100, "mtime_ns": big.stat().st_mtime_ns}
    assert ss.fingerprint_path(str(big), hash_limit=10) == expected
    site = node / "venv/lib/python3.11/site-packages"
    before = ss.fingerprint_path(str(site))
    (site / "__pycache__").mkdir()
    (site / "six.cpython-311.pyc").write_bytes(b"")
    assert ss.fingerprint_path(str(site)) == before


def test_relative_watch_entry_is_refused(node):
    result = record(node, watch=["opt/deepep/unified-env.sh"])
    assert result.failed
    assert "'opt/deepep/unified-env.sh' is not an absolute path" in result["msg"]
    assert not (node / "stamp.json").exists()


def test_bad_key_is_refused_with_the_expected_form(node):
    result = check(node, key="not a key!")
    assert result.failed and "key 'not a key!' is not a settings key" in result["msg"]
    assert "[0-9A-Za-z._-]" in result["msg"]


def test_no_stamp_is_neither_steady_nor_intact(node):
    result = check(node)
    assert not result.failed
    assert (result["steady"], result["intact"], result["changed"]) == (False, False, False)
    assert "has not completed a full converge" in result["reason"]


def test_record_then_check_is_intact(node):
    first = record(node)
    assert first["changed"] and (node / "stamp.json").exists()
    stamp = json.loads((node / "stamp.json").read_text())
    assert stamp["key"] == KEY and stamp["format"] == ss.FORMAT
    assert stamp["packages"] == {"cuda-toolkit-12-9": "12.9.1-1", "doca-ofed": None, "mft": "4.30.0-139"}
    assert oct((node / "stamp.json").stat().st_mode & 0o777) == "0o644"
    result = check(node)
    assert (result["steady"], result["intact"], result["drift"]) == (True, True, [])
    # 8 watch entries, the glob counting its 2 matches, plus 3 packages.
    assert result["watched"] == 7 + 2 + 3
    # Recording the same state again writes nothing (the time alone is no reason).
    again = record(node)
    assert not again["changed"] and again["recorded_at"] == first["recorded_at"]


def test_record_in_check_mode_writes_nothing(node):
    result = record(node, check_mode=True)
    assert result["changed"] and not (node / "stamp.json").exists()


def test_other_key_is_not_steady(node):
    record(node)
    result = check(node, key="b" * 64)
    assert (result["steady"], result["intact"]) == (False, False)
    assert "settings or the collection changed" in result["reason"]


def test_stamp_of_an_older_collection_is_steady_not_intact(node):
    (node / "stamp.json").write_text(json.dumps({"key": KEY}) + "\n")
    result = check(node)
    assert (result["steady"], result["intact"]) == (True, False)
    assert "older collection" in result["reason"]


@pytest.mark.parametrize("change, expected", [
    (lambda n: (n / "opt/deepep/unified-env.sh").write_text("export CUDA_HOME=/usr/local/cuda-13.0\n"),
     "unified-env.sh: content changed"),
    (lambda n: (n / "opt/deepep/unified-env.sh").unlink(), "unified-env.sh: now missing (was file of"),
    (lambda n: (os.unlink(str(n / "usr/local/cuda")), os.symlink("/usr/local/cuda-13.0", str(n / "usr/local/cuda"))),
     "usr/local/cuda: now points at /usr/local/cuda-13.0 (was "),
    (lambda n: os.rename(str(n / "sys/class/infiniband/rocep0"), str(n / "sys/class/infiniband/mlx5_0")),
     "sys/class/infiniband: added mlx5_0@; removed rocep0@"),
    (lambda n: os.rename(str(n / "venv/lib/python3.11/site-packages/torch-2.13.0.dist-info"),
                         str(n / "venv/lib/python3.11/site-packages/torch-2.9.1.dist-info")),
     "site-packages: added torch-2.9.1.dist-info/; removed torch-2.13.0.dist-info/"),
    (lambda n: (n / "venv/lib/python3.11/site-packages/deep_ep_cpp.cpython-311-x86_64-linux-gnu.so").write_bytes(b"new"),
     "deep_ep_cpp.cpython-311-x86_64-linux-gnu.so: content changed (file of 3 bytes, was 68 bytes)"),
    (lambda n: (n / "proc/driver/nvidia/params").write_text(
        (CAPTURED / "proc_driver_nvidia_params").read_text().replace("EnableStreamMemOPs: 0", "EnableStreamMemOPs: 1")),
     "params: content changed"),
    (lambda n: (n / "dpkg-status").write_text(DPKG_STATUS.replace("4.30.0-139", "4.31.0-1")),
     "package mft: 4.31.0-1 (was 4.30.0-139)"),
    (lambda n: (n / "dpkg-status").write_text(DPKG_STATUS.replace("install ok installed\nVersion: 12.9.1-1",
                                                                  "deinstall ok config-files\nVersion: 12.9.1-1")),
     "package cuda-toolkit-12-9: not installed (was 12.9.1-1)"),
    (lambda n: (n / "opt/deepep/nvshmem").mkdir(), "opt/deepep/nvshmem: now directory of 0 entries (was missing)"),
])
def test_drift_is_named(node, change, expected):
    record(node)
    change(node)
    result = check(node)
    assert not result.failed
    assert (result["steady"], result["intact"]) == (True, False)
    assert any(expected in line for line in result["drift"]), result["drift"]
    assert "drifted since its last full converge" in result["reason"]


def test_new_glob_match_is_drift(node):
    record(node)
    (node / "venv/lib/python3.11/site-packages/deep_ep-1.2.1.dist-info").mkdir()
    result = check(node)
    assert not result["intact"]
    assert any(line.endswith("deep_ep-1.2.1.dist-info: now directory of 0 entries (was missing)")
               for line in result["drift"]), result["drift"]


def test_pseudo_file_reporting_size_zero_is_read():
    # procfs reports size 0 for /proc/version; its content is what counts.
    import hashlib
    assert os.stat("/proc/version").st_size == 0
    content = open("/proc/version", "rb").read()
    expected = {"kind": "file", "size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    assert ss.fingerprint_path("/proc/version") == expected


def test_interrupted_write_leaves_the_old_stamp(node, monkeypatch):
    record(node)
    before = (node / "stamp.json").read_text()
    (node / "opt/deepep/unified-env.sh").write_text("changed\n")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ss.os, "rename", boom)
    result = record(node)
    assert result.failed and "cannot write the stamp" in result["msg"] and "No space left on device" in result["msg"]
    assert (node / "stamp.json").read_text() == before
    assert [p.name for p in node.iterdir() if p.name.startswith(".gpufleet-site.")] == []


# --- read failures and paths the stamp cannot go to are refused, in check mode too (issue 46) ------------------------

@pytest.mark.parametrize("check_mode", [False, True])
def test_missing_dpkg_status_is_a_read_failure_not_packages_not_installed(node, check_mode):
    (node / "dpkg-status").unlink()
    result = record(node, check_mode=check_mode)
    assert result.failed
    assert result["msg"].startswith("cannot read dpkg status %s: the file does not exist" % (node / "dpkg-status"))
    assert "cuda-toolkit-12-9, doca-ofed, mft" in result["msg"] and "set dpkg_status" in result["msg"]
    assert not (node / "stamp.json").exists()


def test_record_without_packages_needs_no_dpkg_status(node):
    (node / "dpkg-status").unlink()
    result = record(node, packages=())
    assert not result.failed and result["changed"]
    assert json.loads((node / "stamp.json").read_text())["packages"] == {}


def test_check_with_dpkg_status_gone_is_refused_naming_it(node):
    record(node)
    (node / "dpkg-status").unlink()
    result = check(node)
    assert result.failed
    assert "cannot read dpkg status %s" % (node / "dpkg-status") in result["msg"]


def test_unreadable_dpkg_status_is_refused_naming_it(node):
    (node / "dpkg-status").unlink()
    (node / "dpkg-status").mkdir()
    result = record(node)
    assert result.failed and result["msg"].startswith("cannot read dpkg status %s: " % (node / "dpkg-status"))
    assert not (node / "stamp.json").exists()


def test_dpkg_versions_of_a_node_without_dpkg_for_the_other_readers():
    # The roles' package facts (node_stack gather=[packages]) still read a missing database as none installed.
    assert ss.dpkg_versions(["cmake"], "/nonexistent/dpkg/status") == {"cmake": None}
    with pytest.raises(ss.SiteStateError, match="/nonexistent/dpkg/status: the file does not exist"):
        ss.dpkg_versions(["cmake"], "/nonexistent/dpkg/status", require_file=True)


@pytest.mark.parametrize("check_mode", [False, True])
def test_stamp_that_is_a_symlink_is_refused_and_left_alone(node, tmp_path, check_mode):
    target = tmp_path / "elsewhere.json"
    target.write_text("{}\n")
    os.symlink(str(target), str(node / "stamp.json"))
    result = record(node, check_mode=check_mode)
    assert result.failed
    assert result["msg"].startswith("stamp path %s is a symlink (to %s); the stamp is never written over or through"
                                    % (node / "stamp.json", target))
    assert os.path.islink(str(node / "stamp.json")) and target.read_text() == "{}\n"


@pytest.mark.parametrize("check_mode", [False, True])
def test_stamp_whose_parent_is_a_file_is_refused_naming_the_parent(node, check_mode):
    (node / "state").write_text("a file\n")
    result = run_module(site_state, {"path": str(node / "state/stamp.json"), "key": KEY, "state": "record",
                                     "watch": watch_of(node), "packages": [],
                                     "dpkg_status": str(node / "dpkg-status")}, check_mode=check_mode)
    assert result.failed
    assert result["msg"] == ("stamp path %s: its parent %s is a file, expected a directory (the stamp's directory is "
                             "created when missing, never over a file)" % (node / "state/stamp.json", node / "state"))
    assert (node / "state").read_text() == "a file\n"


def test_stamp_under_a_file_further_up_is_refused_naming_it(node):
    (node / "state").write_text("a file\n")
    result = run_module(site_state, {"path": str(node / "state/sub/stamp.json"), "key": KEY, "state": "record",
                                     "watch": [], "packages": [], "dpkg_status": str(node / "dpkg-status")})
    assert result.failed and "its parent %s is a file, expected a directory" % (node / "state") in result["msg"]


def test_stamp_that_is_a_directory_is_refused(node):
    (node / "stamp.json").mkdir()
    result = record(node, check_mode=True)
    assert result.failed
    assert result["msg"].startswith("stamp path %s is a directory, expected a regular file" % (node / "stamp.json"))


def test_missing_stamp_directory_is_still_created(node):
    result = run_module(site_state, {"path": str(node / "new/dir/stamp.json"), "key": KEY, "state": "record",
                                     "watch": [], "packages": [], "dpkg_status": str(node / "dpkg-status")})
    assert not result.failed and (node / "new/dir/stamp.json").is_file()
