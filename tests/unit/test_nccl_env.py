# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl_env and _nccl: reading and pinning the NCCL of a Python environment.

The environments are real virtualenvs of /usr/bin/python3 (``--without-pip --system-site-packages``, so
pip comes from the system and creating one is quick); the NCCL packages are the simulated fleet's fixture
wheels (tools/fleetsim/fixtures/wheels, packed by the mirror's own code) and the source build is the
nccl-fixture tree built with its Makefile, as the role does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from unit_helpers import REPO, run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import nccl as _nccl
from ansible_collections.gpufleet.deepep.plugins.modules import nccl_env, node_stack
from tools.fleetsim.mirror import build_fixture_wheels

SYSTEM_PYTHON = "/usr/bin/python3"
FIXTURES = REPO / "tools" / "fleetsim" / "fixtures"

pytestmark = pytest.mark.skipif(
    not (os.access(SYSTEM_PYTHON, os.X_OK) and shutil.which("make") and shutil.which("cc")
         and subprocess.run([SYSTEM_PYTHON, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0),
    reason="needs /usr/bin/python3 with pip, make and cc")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    built = build_fixture_wheels(FIXTURES / "wheels", out, quiet=True)
    assert {w.name.split("-")[1] for w in built} >= {"2.28.9", "2.30.7"}
    return out


@pytest.fixture(scope="module")
def nccl_build(tmp_path_factory) -> Path:
    """The nccl-fixture (2.30.7) built like the role does: make src.build NVCC_GENCODE=... BUILDDIR=..."""
    out = tmp_path_factory.mktemp("nccl") / "build"
    subprocess.run(["make", "-s", "-C", str(FIXTURES / "sources" / "nccl-fixture"), "src.build",
                    "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90", f"BUILDDIR={out}"],
                   check=True, capture_output=True, text=True)
    return out


def pip(python: Path, *args: str, bypass_config: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    if bypass_config:
        env["PIP_CONFIG_FILE"] = os.devnull      # what a tool that ignores pip.conf does
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, env=env, check=False)


@pytest.fixture
def venv(tmp_path, wheelhouse):
    """A virtualenv with the fixture nvidia-nccl-cu13 2.28.9 installed (as torch 2.11 brings it)."""
    root = tmp_path / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", str(root)], check=True)
    python = root / "bin" / "python"
    proc = pip(python, "install", "-q", "--no-index", "--find-links", str(wheelhouse), "--no-deps",
               "nvidia-nccl-cu13==2.28.9")
    assert proc.returncode == 0, proc.stderr
    site = next((root / "lib").glob("python3*/site-packages"))
    return {"root": root, "python": python, "site": site, "nccl": site / "nvidia" / "nccl"}


def snapshot(root: Path) -> dict:
    out = {}
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def facts(result) -> dict:
    return result["ansible_facts"]["gpufleet_nccl"]


def read(env) -> dict:
    """What node_stack's nccl set (nccl_env's reader) says of the environment now."""
    result = run_module(node_stack, {"gather": ["nccl"], "python": str(env["python"])})
    assert not result.failed, result.get("msg")
    assert result["changed"] is False
    return facts(result)


def pin_args(env, wheelhouse, **extra):
    args = {"python": str(env["python"]), "version": "2.30.7", "find_links": [str(wheelhouse)], "no_index": True}
    args.update(extra)
    return args


# ------------------------------------------------------------------------------------------------ pure logic

@pytest.mark.parametrize("bad", ["2.30", "v2.30.7", "2.30.7-1", "2.30.7+cuda13.0", "", None, 2.3])
def test_a_version_that_is_not_n_n_n_is_refused_with_the_form(bad):
    with pytest.raises(_nccl.NcclError, match=r"is not an NCCL release N\.N\.N such as 2\.30\.7"):
        _nccl.check_release(bad)
    assert _nccl.check_release(" 2.30.7 ") == "2.30.7"


def test_package_names_and_the_package_of_a_torch_build():
    assert _nccl.check_project("NVIDIA_NCCL_cu13") == "nvidia-nccl-cu13"
    with pytest.raises(_nccl.NcclError, match="nvidia-nccl-cu13"):
        _nccl.check_project("nvidia-nccl-cu13==2.30.7")
    assert _nccl.package_for_torch("2.11.0+cu130") == "nvidia-nccl-cu13"
    assert _nccl.package_for_torch("2.9.1+cu129") == "nvidia-nccl-cu12"
    assert _nccl.package_for_torch("2.13.0+cpu") is None
    assert _nccl.package_for_torch(None) is None


def test_constraint_text_manages_only_the_nccl_line():
    first = _nccl.constraint_text(None, "nvidia_nccl_cu13", "2.30.7")
    assert first.endswith("\nnvidia-nccl-cu13==2.30.7\n") and first.startswith("#")
    assert _nccl.constraint_text(first, "nvidia-nccl-cu13", "2.30.7") == first
    mixed = "torch==2.11.0\nNVIDIA_NCCL_CU13 >= 2.28  # old\nnumpy<3\nnvidia-nccl-cu13==2.28.9\n"
    out = _nccl.constraint_text(mixed, "nvidia-nccl-cu13", "2.30.7")
    assert out == "torch==2.11.0\nnvidia-nccl-cu13==2.30.7\nnumpy<3\n"
    assert _nccl.constraint_version(out, "nvidia_nccl_cu13") == "2.30.7"
    assert _nccl.constraint_version("torch==2.11.0\n", "nvidia-nccl-cu13") is None


def test_pip_conf_text_adds_the_file_and_keeps_everything_else():
    assert _nccl.pip_conf_text(None, "/v/c.txt") == "[install]\nconstraint = /v/c.txt\n"
    text = "[global]\nindex-url = https://mirror/simple\n\n[install]\nconstraint = /etc/site.txt\nno-cache-dir = 1\n"
    out = _nccl.pip_conf_text(text, "/v/c.txt")
    assert "index-url = https://mirror/simple" in out and "no-cache-dir = 1" in out
    assert _nccl.pip_conf_constraints(out) == ["/etc/site.txt", "/v/c.txt"]
    assert _nccl.pip_conf_text(out, "/v/c.txt") == out
    only_global = "[global]\ntimeout = 60\n"
    out = _nccl.pip_conf_text(only_global, "/v/c.txt")
    assert out.startswith(only_global) and _nccl.pip_conf_constraints(out) == ["/v/c.txt"]
    install_last = "[install]\nuser = false\n"
    assert _nccl.pip_conf_constraints(_nccl.pip_conf_text(install_last, "/v/c.txt")) == ["/v/c.txt"]
    # a constraint in [global] is not what [install] says
    assert _nccl.pip_conf_constraints("[global]\nconstraint = /x\n") == []


def test_library_version_from_the_string_nccl_compiles_in_or_the_file_name(tmp_path, nccl_build):
    built = _nccl.library_info(str(nccl_build / "lib" / "libnccl.so.2"))
    assert built["version"] == "2.30.7"
    assert built["realpath"].endswith("libnccl.so.2.30.7")
    named = tmp_path / "libnccl.so.2.29.1"
    named.write_bytes(b"\0" * 10)
    assert _nccl.library_info(str(named))["version"] == "2.29.1"
    # the version string split across two read blocks is still found
    split = tmp_path / "libnccl.so.2"
    split.write_bytes(b"x" * 1000 + b"NCCL version 2.31.2+cuda13.0" + b"y" * 10)
    assert _nccl.library_info(str(split), chunk=1010)["version"] == "2.31.2"


def test_build_dir_errors_name_the_value_and_the_expected_form(tmp_path, nccl_build):
    with pytest.raises(_nccl.NcclError, match="must be an absolute path"):
        _nccl.describe_build_dir("build", "2.30.7")
    with pytest.raises(_nccl.NcclError, match="does not exist"):
        _nccl.describe_build_dir(str(tmp_path / "missing"), "2.30.7")
    (tmp_path / "empty" / "lib").mkdir(parents=True)
    with pytest.raises(_nccl.NcclError, match=r"has no include/nccl.h; expected the build/ directory of NCCL"):
        _nccl.describe_build_dir(str(tmp_path / "empty"), "2.30.7")
    with pytest.raises(_nccl.NcclError, match=r"holds NCCL 2.30.7 \(include/nccl.h\), but version is 2.30.4"):
        _nccl.describe_build_dir(str(nccl_build), "2.30.4")
    assert _nccl.describe_build_dir(str(nccl_build), "2.30.7")["library_version"] == "2.30.7"
    files = dict(_nccl.build_dir_files(str(nccl_build)))
    assert set(files) == {"include/nccl.h", "include/nccl_device.h", "lib/libnccl.so.2"}
    assert files["lib/libnccl.so.2"].endswith("libnccl.so.2.30.7")


# ------------------------------------------------------------------------------------------------ the module

def test_the_nccl_gather_set_reads_package_header_and_library(venv):
    got = read(venv)
    assert got["package"] == "nvidia-nccl-cu13" and got["package_version"] == "2.28.9"
    assert got["version"] == got["header_version"] == got["library_version"] == "2.28.9"
    assert got["nccl_root"] == str(venv["nccl"])
    assert got["header_path"] == str(venv["nccl"] / "include" / "nccl.h")
    assert got["library_path"] == str(venv["nccl"] / "lib" / "libnccl.so.2")
    assert got["virtualenv"] is True and got["prefix"] == str(venv["root"])
    assert got["constraint_file"] == str(venv["root"] / "gpufleet-constraints.txt")
    assert got["pip_config_file"] == str(venv["root"] / "pip.conf")
    assert got["pinned"] is False and got["pin"] is None and got["source"] == "pip"


def test_pip_pin_check_mode_writes_nothing_then_pins_and_is_idempotent(venv, wheelhouse):
    before = snapshot(venv["root"])
    checked = run_module(nccl_env, pin_args(venv, wheelhouse), check_mode=True, diff=True)
    assert not checked.failed, checked.get("msg")
    assert checked["changed"] is True
    assert snapshot(venv["root"]) == before
    assert checked["commands"][-1][-1] == "nvidia-nccl-cu13==2.30.7" and "--no-deps" in checked["commands"][-1]
    assert facts(checked)["version"] == "2.28.9"          # check mode reports the state as it is
    headers = [d["before_header"] for d in checked["diff"]]
    assert str(venv["root"] / "gpufleet-constraints.txt") in headers and str(venv["root"] / "pip.conf") in headers

    result = run_module(nccl_env, pin_args(venv, wheelhouse))
    assert not result.failed, result.get("msg")
    assert result["changed"] is True
    got = facts(result)
    assert got["package_version"] == got["header_version"] == got["library_version"] == "2.30.7"
    assert got["pinned"] is True and got["source"] == "pip" and got["constraint_version"] == "2.30.7"
    assert (venv["root"] / "gpufleet-constraints.txt").read_text().endswith("nvidia-nccl-cu13==2.30.7\n")
    assert (venv["root"] / "pip.conf").read_text() == (
        "[install]\nconstraint = %s\n" % (venv["root"] / "gpufleet-constraints.txt"))

    again = run_module(nccl_env, pin_args(venv, wheelhouse))
    assert again["changed"] is False and again["reasons"] == [] and again["commands"] == []
    assert facts(again)["pinned"] is True


def test_the_pin_refuses_a_later_downgrade_and_a_rerun_restores_what_got_through(venv, wheelhouse):
    assert not run_module(nccl_env, pin_args(venv, wheelhouse)).failed
    refused = pip(venv["python"], "install", "--no-index", "--find-links", str(wheelhouse), "nvidia-nccl-cu13==2.28.9")
    assert refused.returncode != 0 and "conflicting dependencies" in refused.stderr
    assert read(venv)["version"] == "2.30.7"

    # A tool that ignores pip.conf gets through.
    forced = pip(venv["python"], "install", "-q", "--no-index", "--find-links", str(wheelhouse), "--no-deps",
                 "nvidia-nccl-cu13==2.28.9", bypass_config=True)
    assert forced.returncode == 0, forced.stderr
    report = read(venv)
    assert report["pinned"] is False and report["version"] == "2.28.9"
    assert any("a later install replaced it" in reason for reason in report["drift"])

    restored = run_module(nccl_env, pin_args(venv, wheelhouse))
    assert not restored.failed, restored.get("msg")
    assert restored["changed"] is True
    assert any("2.28.9 now: a later install replaced it" in reason for reason in restored["reasons"])
    assert facts(restored)["version"] == "2.30.7" and facts(restored)["pinned"] is True


def test_pip_pin_reinstalls_when_the_files_were_replaced_under_the_same_package_version(venv, wheelhouse):
    assert not run_module(nccl_env, pin_args(venv, wheelhouse)).failed
    header = venv["nccl"] / "include" / "nccl.h"
    header.write_text(header.read_text().replace("#define NCCL_MINOR 30", "#define NCCL_MINOR 28"))
    result = run_module(nccl_env, pin_args(venv, wheelhouse))
    assert result["changed"] is True
    assert "--force-reinstall" in result["commands"][-1]
    assert facts(result)["header_version"] == "2.30.7"


def test_build_pin_backs_up_once_copies_and_is_idempotent_by_checksum(venv, nccl_build, wheelhouse):
    args = {"python": str(venv["python"]), "version": "2.30.7", "source": "build", "build_dir": str(nccl_build)}
    # A hand-made layout the copy has to cope with: libnccl.so.2 as a symlink to a versioned file.
    lib = venv["nccl"] / "lib" / "libnccl.so.2"
    lib.rename(lib.with_name("libnccl.so.2.28.9"))
    lib.symlink_to("libnccl.so.2.28.9")
    before = snapshot(venv["root"])
    checked = run_module(nccl_env, args, check_mode=True, diff=True)
    assert not checked.failed, checked.get("msg")
    assert checked["changed"] is True and checked["backed_up"] is True
    assert set(checked["copied"]) == {"include/nccl.h", "include/nccl_device.h", "lib/libnccl.so.2"}
    assert snapshot(venv["root"]) == before

    original_lib = hashlib.sha256((venv["nccl"] / "lib" / "libnccl.so.2").read_bytes()).hexdigest()
    result = run_module(nccl_env, args)
    assert not result.failed, result.get("msg")
    got = facts(result)
    assert got["header_version"] == got["library_version"] == got["version"] == "2.30.7"
    assert got["package_version"] == "2.28.9"              # the pip package that carries the files
    assert got["source"] == "build" and got["pinned"] is True
    assert not lib.is_symlink()
    assert lib.read_bytes() == (nccl_build / "lib" / "libnccl.so.2.30.7").read_bytes()
    backup = Path(got["backup_dir"])
    assert backup == venv["nccl"] / ".gpufleet-orig"
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["package_version"] == manifest["header_version"] == "2.28.9"
    assert manifest["files"]["lib/libnccl.so.2"] == original_lib
    # the pin holds the pip package at the version whose files were replaced
    assert got["constraint_version"] == "2.28.9"

    pinned_tree = snapshot(venv["root"])
    again = run_module(nccl_env, args)
    assert again["changed"] is False and again["copied"] == [] and again["backed_up"] is False
    assert snapshot(venv["root"]) == pinned_tree
    stamp_before = (backup / "manifest.json").stat().st_mtime_ns

    # A later reinstall of the pip package puts its own files back: the rerun copies again, the backup stays.
    forced = pip(venv["python"], "install", "-q", "--no-index", "--find-links", str(wheelhouse), "--no-deps",
                 "--force-reinstall", "nvidia-nccl-cu13==2.28.9", bypass_config=True)
    assert forced.returncode == 0, forced.stderr
    assert read(venv)["pinned"] is False
    restored = run_module(nccl_env, args)
    assert restored["changed"] is True and restored["backed_up"] is False
    assert any("pinned file(s) changed" in reason for reason in restored["reasons"])
    assert facts(restored)["header_version"] == "2.30.7" and facts(restored)["pinned"] is True
    assert (backup / "manifest.json").stat().st_mtime_ns == stamp_before
    assert json.loads((backup / "manifest.json").read_text())["files"]["lib/libnccl.so.2"] == original_lib


def test_system_interpreter_pip_config_only_when_asked(venv, wheelhouse, tmp_path):
    """A pip.conf is written only for a virtualenv, or with pin_pip_config; the constraint file is always kept."""
    conf = tmp_path / "pip.conf"
    args = pin_args(venv, wheelhouse, pin_pip_config=False, pip_config_file=str(conf),
                    constraint_file=str(tmp_path / "etc" / "constraints.txt"))
    result = run_module(nccl_env, args)
    assert not result.failed, result.get("msg")
    assert not conf.exists() and (tmp_path / "etc" / "constraints.txt").is_file()
    assert facts(result)["pinned"] is True and facts(result)["pip_config_pins"] is False
    args["pin_pip_config"] = True
    result = run_module(nccl_env, args)
    assert result["changed"] is True and conf.read_text().endswith("constraints.txt\n")


def test_the_gather_set_is_nccl_envs_read_and_finds_the_pins_constraint_file(venv, wheelhouse, tmp_path):
    """node_stack's nccl set returns what nccl_env returns after a pin (one reader); a constraints file given to
    nccl_env is found through the pin record, which names it."""
    custom = tmp_path / "constraints.txt"
    pinned = run_module(nccl_env, pin_args(venv, wheelhouse, constraint_file=str(custom)))
    assert not pinned.failed, pinned.get("msg")
    got = read(venv)
    assert got == facts(pinned)
    assert got["constraint_file"] == str(custom) and got["pinned"] is True


@pytest.mark.parametrize("python, message", [
    ("/nonexistent/python", "python '/nonexistent/python' is not an executable file"),
    ("no-such-python-gpufleet", "python 'no-such-python-gpufleet' was not found on PATH"),
])
def test_the_gather_set_names_an_interpreter_it_cannot_run(python, message):
    result = run_module(node_stack, {"gather": ["nccl"], "python": python})
    assert result.failed and message in result["msg"]


def test_state_report_is_gone():
    result = run_module(nccl_env, {"python": SYSTEM_PYTHON, "state": "report"})
    assert result.failed and "state" in result["msg"] and "present" in result["msg"]


@pytest.mark.parametrize("args, message", [
    ({"version": "2.30"}, "version '2.30' is not an NCCL release N.N.N"),
    ({"version": "v2.30.7-1"}, "version 'v2.30.7-1' is not an NCCL release N.N.N"),
    ({"version": "2.30.7", "package": "nvidia nccl"}, "package 'nvidia nccl' is not a pip project name"),
    ({"version": "2.30.7", "source": "build", "build_dir": "/nonexistent/build"},
     "build_dir /nonexistent/build does not exist"),
    ({"version": "2.30.4", "source": "build", "build_dir": "@BUILD@"},
     "holds NCCL 2.30.7 (include/nccl.h), but version is 2.30.4"),
    ({"python": "/nonexistent/python", "version": "2.30.7"}, "python '/nonexistent/python' is not an executable"),
])
def test_errors_name_the_bad_value(venv, nccl_build, args, message):
    full = {"python": str(venv["python"])}
    full.update({k: (str(nccl_build) if v == "@BUILD@" else v) for k, v in args.items()})
    before = snapshot(venv["root"])
    result = run_module(nccl_env, full)
    assert result.failed
    assert message in result["msg"]
    assert snapshot(venv["root"]) == before


def test_build_dir_without_nccl_h_and_env_without_package(tmp_path, venv, nccl_build):
    broken = tmp_path / "broken"
    shutil.copytree(nccl_build, broken, symlinks=True)
    (broken / "include" / "nccl.h").unlink()
    result = run_module(nccl_env, {"python": str(venv["python"]), "version": "2.30.7", "source": "build",
                                   "build_dir": str(broken)})
    assert result.failed and "has no include/nccl.h" in result["msg"] and "make src.build" in result["msg"]

    assert pip(venv["python"], "uninstall", "-y", "-q", "nvidia-nccl-cu13", bypass_config=True).returncode == 0
    result = run_module(nccl_env, {"python": str(venv["python"]), "version": "2.30.7", "source": "build",
                                   "build_dir": str(nccl_build)})
    assert result.failed and "has none" in result["msg"] and "install it first" in result["msg"]
    result = run_module(nccl_env, {"python": str(venv["python"]), "version": "2.30.7"})
    assert result.failed and "set package" in result["msg"]


def test_fixture_wheels_are_reproducible_and_carry_a_valid_record(tmp_path):
    import base64
    import zipfile

    first = build_fixture_wheels(FIXTURES / "wheels", tmp_path / "a", quiet=True)
    second = build_fixture_wheels(FIXTURES / "wheels", tmp_path / "b", quiet=True)
    assert [w.read_bytes() for w in first] == [w.read_bytes() for w in second]
    wheel = next(w for w in first if w.name.startswith("nvidia_nccl_cu13-2.30.7-"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "nvidia/nccl/include/nccl.h" in names and "nvidia/nccl/lib/libnccl.so.2" in names
        record = zf.read("nvidia_nccl_cu13-2.30.7.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if digest:
                data = zf.read(name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == "sha256=" + expected and int(size) == len(data)
        assert zf.getinfo("nvidia/nccl/lib/libnccl.so.2").external_attr >> 16 & 0o777 == 0o755
