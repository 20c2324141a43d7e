# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack gather=[modules, paths, cuda_toolkit]: the small facts the phase roles decide from (instead of
probes of their own), read from fixture trees through the module's ``root`` option."""

from __future__ import annotations

import hashlib
import json
import os
import sys

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import role_facts as _role_facts
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack


def _write(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)


def test_modules_from_proc_modules_and_sys_module(tmp_path):
    _write(tmp_path / "proc" / "modules", "gdrdrv 24576 0 - Live 0x0\nnvidia 1 2 - Live 0x0\n")
    (tmp_path / "sys" / "module" / "nvidia_peermem").mkdir(parents=True)
    result = run_module(node_stack, {"gather": ["modules"], "root": str(tmp_path),
                                     "module_names": ["gdrdrv", "nvidia_peermem", "mlx5_ib"]})
    assert not result.failed, result
    facts = result["ansible_facts"]
    assert set(facts) == {"gpufleet_modules"}
    modules = facts["gpufleet_modules"]
    assert modules["loaded"] == ["gdrdrv", "nvidia"] and modules["source"] == "/proc/modules"
    assert modules["present"] == {"gdrdrv": True, "nvidia_peermem": True, "mlx5_ib": False}
    # /sys/module/<name> without initstate: built into the kernel; the kernel release is unknown in this tree.
    assert [(n, s["state"], s["source"]) for n, s in modules["states"].items()] == [
        ("gdrdrv", "loaded", "/proc/modules"), ("nvidia_peermem", "builtin", "/sys/module/nvidia_peermem"),
        ("mlx5_ib", "absent", None)]
    assert modules["builtin"] == ["nvidia_peermem"] and modules["absent"] == ["mlx5_ib"]
    assert modules["kernel"] is None and modules["states"]["mlx5_ib"]["loadable"] is None
    assert result["changed"] is False


def test_modules_fall_back_to_lsmod_with_its_timeout(tmp_path):
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv, timeout))
        return 0, "Module                  Size  Used by\nnvidia_peermem 16384 0\n", ""

    facts = _role_facts.gather_modules(str(tmp_path), runner, ["nvidia_peermem"], timeout=7)
    assert calls == [(["lsmod"], 7)]
    assert facts["loaded"] == ["nvidia_peermem"] and facts["source"] == "lsmod"
    assert facts["present"] == {"nvidia_peermem": True}
    state = facts["states"]["nvidia_peermem"]
    assert (state["state"], state["source"]) == ("loaded", "lsmod")


def test_modules_neither_readable(tmp_path):
    facts = _role_facts.gather_modules(str(tmp_path), lambda argv, timeout=None, env=None: (127, "", "no lsmod"))
    assert facts["loaded"] == [] and facts["source"] is None and facts["present"] == {} and facts["states"] == {}


def test_paths_describe_file_directory_link_and_absent(tmp_path):
    _write(tmp_path / "opt" / "deepep" / "unified-env.sh", "export A=1\n", 0o640)
    (tmp_path / "usr" / "local" / "cuda-13.0").mkdir(parents=True)
    os.symlink("/usr/local/cuda-13.0", tmp_path / "usr" / "local" / "cuda")
    result = run_module(node_stack, {"gather": ["paths"], "root": str(tmp_path), "paths": [
        "/opt/deepep/unified-env.sh", "/opt/deepep", "/usr/local/cuda", "/nonexistent"]}, check_mode=True)
    assert not result.failed, result
    paths = result["ansible_facts"]["gpufleet_paths"]
    script = paths["/opt/deepep/unified-env.sh"]
    assert script["type"] == "file" and script["exists"] is True and script["mode"] == "0640"
    assert script["sha1"] == hashlib.sha1(b"export A=1\n").hexdigest()
    assert script["uid"] == os.getuid() and script["target"] is None
    assert paths["/opt/deepep"]["type"] == "directory" and paths["/opt/deepep"]["sha1"] is None
    link = paths["/usr/local/cuda"]
    assert link["type"] == "link" and link["target"] == "/usr/local/cuda-13.0" and link["target_exists"] is True
    assert paths["/nonexistent"] == {"exists": False, "type": None, "mode": None, "uid": None, "gid": None,
                                     "sha1": None, "target": None, "target_exists": False}


def test_relative_path_is_refused_with_the_expected_form(tmp_path):
    result = run_module(node_stack, {"gather": ["paths"], "root": str(tmp_path), "paths": ["opt/deepep"]})
    assert result.failed
    assert "'opt/deepep' is not an absolute path" in result["msg"] and "expected a path" in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_cuda_toolkit_from_version_json_without_running_nvcc(tmp_path):
    _write(tmp_path / "usr/local/cuda-13.0/version.json", json.dumps({"cuda": {"version": "13.0.2"}}))

    def runner(argv, timeout=None, env=None):
        raise AssertionError("nvcc must not run when version.json names the version")

    facts = _role_facts.gather_cuda_toolkit(str(tmp_path), "/usr/local/cuda-13.0", runner)
    assert facts == {"home": "/usr/local/cuda-13.0", "version": "13.0.2", "release": "13.0",
                     "source": "version.json", "error": None}


def test_cuda_toolkit_from_nvcc_with_its_timeout(tmp_path):
    _write(tmp_path / "usr/local/cuda-12.9/bin/nvcc", "#!/bin/sh\n", 0o755)
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv, timeout))
        return 0, "Cuda compilation tools, release 12.9, V12.9.86\n", ""

    facts = _role_facts.gather_cuda_toolkit(str(tmp_path), "/usr/local/cuda-12.9", runner, timeout=9)
    assert calls == [([str(tmp_path / "usr/local/cuda-12.9/bin/nvcc"), "--version"], 9)]
    assert facts["version"] == "12.9" and facts["release"] == "12.9" and facts["source"] == "nvcc"


def test_cuda_toolkit_absent_says_why(tmp_path):
    result = run_module(node_stack, {"gather": ["cuda_toolkit"], "root": str(tmp_path),
                                     "cuda_home": "/usr/local/cuda-13.0"})
    assert not result.failed, result
    facts = result["ansible_facts"]["gpufleet_cuda_toolkit"]
    assert facts["version"] == "" and facts["release"] == "" and facts["source"] is None
    assert "/usr/local/cuda-13.0/version.json" in facts["error"] and "/usr/local/cuda-13.0/bin/nvcc" in facts["error"]


def test_nvcc_without_release_says_why(tmp_path):
    _write(tmp_path / "cuda/bin/nvcc", "", 0o755)
    facts = _role_facts.gather_cuda_toolkit(str(tmp_path), "/cuda",
                                            lambda argv, timeout=None, env=None: (124, "", "timed out after 60s"))
    assert facts["version"] == "" and "rc=124" in facts["error"] and "timed out" in facts["error"]


def test_role_sets_with_stack_sets_in_one_call(tmp_path):
    _write(tmp_path / "proc" / "modules", "nvidia 1 2 - Live 0x0\n")
    result = run_module(node_stack, {"gather": ["modules", "rdma"], "root": str(tmp_path),
                                     "sysfs_root": str(tmp_path / "no-sysfs")})
    assert not result.failed, result
    assert result["ansible_facts"]["gpufleet_modules"]["loaded"] == ["nvidia"]
    assert "gpufleet_rdma" in result["gather_errors"] and "gpufleet_rdma" not in result["ansible_facts"]


def test_imports_in_one_bounded_process(tmp_path):
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv[0], argv[3:], timeout))
        return 0, json.dumps({"pip": True, "torch.distributed": False}), ""

    facts = _role_facts.gather_imports("/opt/venv/bin/python", ["pip", "torch.distributed"], runner, timeout=11)
    assert calls == [("/opt/venv/bin/python", ["pip", "torch.distributed"], 11)]
    assert facts == {"python": "/opt/venv/bin/python", "ok": True,
                     "modules": {"pip": True, "torch.distributed": False}, "error": None}


def test_imports_with_this_interpreter():
    result = run_module(node_stack, {"gather": ["imports"], "python": sys.executable,
                                     "import_modules": ["json", "no_such_module_gpufleet"]})
    assert not result.failed, result
    assert result["ansible_facts"]["gpufleet_imports"]["modules"] == {"json": True, "no_such_module_gpufleet": False}


def test_imports_interpreter_missing_says_why(tmp_path):
    result = run_module(node_stack, {"gather": ["imports"], "python": str(tmp_path / "nopython"),
                                     "import_modules": ["pip"]})
    facts = result["ansible_facts"]["gpufleet_imports"]
    assert facts["ok"] is False and facts["modules"] == {"pip": False}
    assert "nopython failed (rc=127)" in facts["error"]


def test_bad_module_name_is_refused():
    result = run_module(node_stack, {"gather": ["imports"], "import_modules": ["pip; rm -rf /"]})
    assert result.failed
    assert "'pip; rm -rf /' not a Python module name" in result["msg"] and "expected dotted identifiers" in result["msg"]


def test_symbols_of_a_header(tmp_path):
    _write(tmp_path / "usr/include/infiniband/mlx5_api.h",
           "#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT 1\n#define MLX5DV_OTHER_X 2\n")
    result = run_module(node_stack, {"gather": ["symbols"], "root": str(tmp_path), "symbol_files": {
        "/usr/include/infiniband/mlx5_api.h": ["MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT", "MLX5DV_OTHER"],
        "/usr/include/absent.h": ["X"]}})
    assert not result.failed, result
    assert result["ansible_facts"]["gpufleet_symbols"] == {
        "/usr/include/infiniband/mlx5_api.h": {"present": True, "symbols": {
            "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT": True, "MLX5DV_OTHER": False}},
        "/usr/include/absent.h": {"present": False, "symbols": {"X": False}}}


def test_symbols_bad_values_are_refused(tmp_path):
    result = run_module(node_stack, {"gather": ["symbols"], "symbol_files": {"include/x.h": ["X"]}})
    assert result.failed and "'include/x.h' is not an absolute path" in result["msg"]
    result = run_module(node_stack, {"gather": ["symbols"], "symbol_files": {"/x.h": "X"}})
    assert result.failed and "must be a list of symbol names" in result["msg"]


# The status file as dpkg writes it (paragraphs of a Debian 12 node; libibverbs-dev removed, its configuration kept).
DPKG_STATUS = """Package: cmake
Status: install ok installed
Priority: optional
Section: devel
Installed-Size: 29314
Maintainer: Debian CMake Team <pkg-cmake-team@lists.alioth.debian.org>
Architecture: amd64
Multi-Arch: foreign
Version: 3.25.1-1
Depends: cmake-data (= 3.25.1-1), procps, libarchive13 (>= 3.3.3), libc6 (>= 2.34)
Description: cross-platform, open-source make system
 CMake is used to control the software compilation process using
 simple platform and compiler independent configuration files.

Package: libibverbs-dev
Status: deinstall ok config-files
Priority: optional
Section: libdevel
Installed-Size: 1468
Maintainer: Benjamin Drung <bdrung@ubuntu.com>
Architecture: amd64
Multi-Arch: same
Source: rdma-core
Version: 44.0-2
Description: Development files for the libibverbs library

Package: ninja-build
Status: install ok installed
Priority: optional
Section: devel
Installed-Size: 439
Maintainer: Felix Geyer <fgeyer@debian.org>
Architecture: amd64
Multi-Arch: foreign
Version: 1.11.1-1
Depends: libc6 (>= 2.34), libgcc-s1 (>= 3.0), libstdc++6 (>= 11)
Description: small build system closest in spirit to Make
"""


def test_packages_from_the_dpkg_status_file(tmp_path):
    _write(tmp_path / "var" / "lib" / "dpkg" / "status", DPKG_STATUS)
    result = run_module(node_stack, {"gather": ["packages"], "root": str(tmp_path),
                                     "packages": ["cmake", "ninja-build", "libibverbs-dev", "librdmacm-dev"]},
                        check_mode=True)
    assert not result.failed, result
    assert result["ansible_facts"] == {"gpufleet_packages": {
        "installed": {"cmake": "3.25.1-1", "ninja-build": "1.11.1-1", "libibverbs-dev": None, "librdmacm-dev": None},
        "missing": ["libibverbs-dev", "librdmacm-dev"]}}
    assert result["changed"] is False


def test_packages_without_a_dpkg_database_are_all_missing(tmp_path):
    facts = _role_facts.gather_packages(str(tmp_path), ["cmake"])
    assert facts == {"installed": {"cmake": None}, "missing": ["cmake"]}


def test_package_names_with_a_version_or_wildcard_are_refused(tmp_path):
    result = run_module(node_stack, {"gather": ["packages"], "root": str(tmp_path),
                                     "packages": ["cmake", "ninja-build=1.11.1-1", "lib*"]})
    assert result.failed
    assert "'ninja-build=1.11.1-1'" in result["msg"] and "'lib*'" in result["msg"] and "plain name" in result["msg"]
    assert "Traceback" not in result["msg"]


def test_hash_paths_give_the_sha256_of_any_size(tmp_path):
    tarball = tmp_path / "opt" / "deepep" / "src" / "downloads" / "deepep.tar.gz"
    tarball.parent.mkdir(parents=True)
    data = os.urandom(1 << 20) * 17  # past the 16 MiB the sha1 of gpufleet_paths stops at
    tarball.write_bytes(data)
    paths = ["/opt/deepep/src/downloads/deepep.tar.gz", "/opt/deepep/src/downloads", "/opt/deepep/absent.tar.gz"]
    result = run_module(node_stack, {"gather": ["paths"], "root": str(tmp_path), "paths": paths,
                                     "hash_paths": [paths[0], paths[1], paths[2]]}, check_mode=True)
    assert not result.failed, result
    got = result["ansible_facts"]["gpufleet_paths"]
    assert got[paths[0]]["sha256"] == hashlib.sha256(data).hexdigest() and got[paths[0]]["sha1"] is None
    assert got[paths[1]]["type"] == "directory" and got[paths[1]]["sha256"] is None
    assert got[paths[2]]["exists"] is False and got[paths[2]]["sha256"] is None
    # paths not in hash_paths are described as before, with no sha256
    plain = run_module(node_stack, {"gather": ["paths"], "root": str(tmp_path), "paths": paths[1:2]})
    assert "sha256" not in plain["ansible_facts"]["gpufleet_paths"][paths[1]]


def test_hash_paths_outside_paths_are_refused(tmp_path):
    result = run_module(node_stack, {"gather": ["paths"], "root": str(tmp_path), "paths": ["/a"],
                                     "hash_paths": ["/b"]})
    assert result.failed and "'/b'" in result["msg"] and "not in paths" in result["msg"]


GDRCOPY_SRC = "/opt/deepep/src/gdrcopy-2.5.1"
GDRDRV_KEY = hashlib.sha256(b"gdrdrv").hexdigest()


def test_gdrdrv_built_stamped_and_loaded(tmp_path):
    driver = tmp_path / GDRCOPY_SRC.lstrip("/") / "src" / "gdrdrv"
    _write(driver / "gdrdrv.ko", "\x7fELF kernel module\n")
    # the stamp as the gdrcopy role writes it (to_nice_json), and /proc/modules of a node with gdrdrv out of tree
    _write(driver / ".gpufleet-driver.json",
           '{\n    "kernel": "6.8.0-1015-gcp",\n    "key": "%s"\n}\n' % GDRDRV_KEY)
    _write(tmp_path / "proc" / "modules",
           "gdrdrv 24576 0 - Live 0x0000000000000000 (OE)\n"
           "nvidia_uvm 1892352 0 - Live 0x0000000000000000 (POE)\n"
           "nvidia 14381056 1 nvidia_uvm, Live 0x0000000000000000 (POE)\n")
    result = run_module(node_stack, {"gather": ["gdrdrv"], "root": str(tmp_path), "gdrcopy_src": GDRCOPY_SRC + "/"},
                        check_mode=True)
    assert not result.failed, result
    assert set(result["ansible_facts"]) == {"gpufleet_gdrdrv"}
    assert result["ansible_facts"]["gpufleet_gdrdrv"] == {
        "src": GDRCOPY_SRC,
        "module_path": GDRCOPY_SRC + "/src/gdrdrv/gdrdrv.ko",
        "built": True,
        "stamp_path": GDRCOPY_SRC + "/src/gdrdrv/.gpufleet-driver.json",
        "stamp": {"kernel": "6.8.0-1015-gcp", "key": GDRDRV_KEY},
        "key": GDRDRV_KEY,
        "loaded": True,
    }
    assert result["changed"] is False


def test_gdrdrv_unbuilt_unstamped_not_loaded(tmp_path):
    (tmp_path / GDRCOPY_SRC.lstrip("/") / "src" / "gdrdrv").mkdir(parents=True)
    _write(tmp_path / "proc" / "modules", "nvidia_peermem 16384 0 - Live 0x0\nnvidia 14381056 1 nvidia_peermem, Live 0x0\n")
    facts = _role_facts.gather_gdrdrv(str(tmp_path), GDRCOPY_SRC, None)
    assert facts["built"] is False
    assert facts["stamp"] is None and facts["key"] is None
    assert facts["loaded"] is False


def test_gdrdrv_malformed_stamps_give_no_key(tmp_path):
    stamp = tmp_path / GDRCOPY_SRC.lstrip("/") / "src" / "gdrdrv" / ".gpufleet-driver.json"
    _write(tmp_path / "proc" / "modules", "gdrdrv 24576 0 - Live 0x0\n")
    for text, want_stamp in (("{not json", None), ('["key"]', None), ('{"key": 7}', {"key": 7}),
                             ('{"kernel": "6.8.0"}', {"kernel": "6.8.0"})):
        _write(stamp, text)
        facts = _role_facts.gather_gdrdrv(str(tmp_path), GDRCOPY_SRC, None)
        assert facts["stamp"] == want_stamp, text
        assert facts["key"] is None, text
        assert facts["loaded"] is True


def test_gdrdrv_loaded_from_lsmod_without_proc_modules(tmp_path):
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv, timeout))
        return 0, "Module                  Size  Used by\ngdrdrv                 24576  0\n", ""

    facts = _role_facts.gather_gdrdrv(str(tmp_path), GDRCOPY_SRC, runner, timeout=9)
    assert calls == [(["lsmod"], 9)]
    assert facts["loaded"] is True and facts["built"] is False


def test_gdrdrv_needs_an_absolute_source(tmp_path):
    for bad in (None, "", "gdrcopy-2.5.1"):
        result = run_module(node_stack, {"gather": ["gdrdrv"], "root": str(tmp_path), "gdrcopy_src": bad})
        assert result.failed
        assert "gdrcopy_src %r" % (bad,) in result["msg"]
        assert "expected the absolute path of a GDRCopy source tree" in result["msg"]


def test_the_role_sets_are_one_registry_read_only_when_asked(monkeypatch, tmp_path):
    """ROLE_READERS is the one list of the role sets: each set's name is a gather choice the module documents, its
    fact is gpufleet_*, and a call reads exactly the sets it asks for, each once, through its entry."""
    import yaml
    documented = yaml.safe_load(node_stack.DOCUMENTATION)["options"]["gather"]["choices"]
    assert node_stack.ROLE_SETS == tuple(node_stack.ROLE_READERS) and set(node_stack.ROLE_SETS) <= set(documented)
    assert len({fact for fact, dummy in node_stack.ROLE_READERS.values()}) == len(node_stack.ROLE_READERS)
    assert all(fact.startswith("gpufleet_") for fact, dummy in node_stack.ROLE_READERS.values())
    calls = []
    readers = dict((name, (fact, lambda params, name=name: calls.append(name) or {"read": name}))
                   for name, (fact, dummy) in node_stack.ROLE_READERS.items())
    monkeypatch.setattr(node_stack, "ROLE_READERS", readers)
    result = run_module(node_stack, {"gather": ["torch", "paths", "jit_cache"], "root": str(tmp_path)})
    assert not result.failed, result
    assert sorted(calls) == ["jit_cache", "paths", "torch"]
    assert result["ansible_facts"] == {"gpufleet_torch": {"read": "torch"}, "gpufleet_paths": {"read": "paths"},
                                       "gpufleet_deepep_jit": {"read": "jit_cache"}}
