# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""pytorch_bundled_nvshmem: discovery of bundled NVSHMEM, replace_transport, preload.

Fake site-packages trees mirror what was measured on the 2 x H200 node: pip ``nvidia-nvshmem-cu13`` 3.4.5
whose lib/ holds only ``libnvshmem_host.so.3`` and ``nvshmem_transport_ibgda.so.3``. The fake custom
prefix has the layout of an NVSHMEM CMake install (versioned files behind SONAME symlinks).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import nvshmem_discovery as disc
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import nvshmem_winner as winner
from ansible_collections.gpufleet.deepep.plugins.modules import pytorch_bundled_nvshmem as mod

BUNDLED_HOST = b"\x7fELF bundled libnvshmem_host 3.4.5"
BUNDLED_IBGDA = b"\x7fELF bundled nvshmem_transport_ibgda 3.4.5"
CUSTOM_HOST = b"\x7fELF custom libnvshmem_host 3.5.19"
CUSTOM_IBGDA = b"\x7fELF custom nvshmem_transport_ibgda 3.5.19 with ibv_ah_attr zeroed"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_site(root: Path, project="nvidia-nvshmem-cu13", version="3.4.5", record=True,
              lib_rel=("nvidia", "nvshmem", "lib")) -> Path:
    """A site-packages dir holding the pip NVSHMEM as on the H200 node."""
    root.mkdir(parents=True, exist_ok=True)
    lib = root.joinpath(*lib_rel)
    lib.mkdir(parents=True)
    (lib / "libnvshmem_host.so.3").write_bytes(BUNDLED_HOST)
    (lib / "nvshmem_transport_ibgda.so.3").write_bytes(BUNDLED_IBGDA)
    os.chmod(lib / "nvshmem_transport_ibgda.so.3", 0o755)
    info = root / ("%s-%s.dist-info" % (project.replace("-", "_"), version))
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nNVSHMEM\n" % (project, version))
    if record:
        rel = "/".join(lib_rel)
        (info / "RECORD").write_text(
            "nvidia/__init__.py,,\n"
            "%s/libnvshmem_host.so.3,sha256=x,%d\n"
            "%s/nvshmem_transport_ibgda.so.3,sha256=y,%d\n"
            "%s/METADATA,,\n" % (rel, len(BUNDLED_HOST), rel, len(BUNDLED_IBGDA), info.name))
    return root


def make_custom(prefix: Path, version=(3, 5, 19), ibgda=True, header=True) -> Path:
    """A custom NVSHMEM install: lib/ with SONAME symlinks, include/non_abi/nvshmem_version.h."""
    lib = prefix / "lib"
    lib.mkdir(parents=True)
    full = "%d.%d.%d" % version
    (lib / ("libnvshmem_host.so." + full)).write_bytes(CUSTOM_HOST)
    os.symlink("libnvshmem_host.so." + full, lib / "libnvshmem_host.so.3")
    os.symlink("libnvshmem_host.so.3", lib / "libnvshmem_host.so")
    (lib / "libnvshmem_device.a").write_bytes(b"!<arch>\n")
    if ibgda:
        (lib / "nvshmem_transport_ibgda.so.3.0.0").write_bytes(CUSTOM_IBGDA)
        os.symlink("nvshmem_transport_ibgda.so.3.0.0", lib / "nvshmem_transport_ibgda.so.3")
    if header:
        inc = prefix / "include" / "non_abi"
        inc.mkdir(parents=True)
        (inc / "nvshmem_version.h").write_text(
            "#ifndef NVSHMEM_VERSION_H\n#define NVSHMEM_VERSION_H\n"
            "#define NVSHMEM_VENDOR_MAJOR_VERSION %d\n#define NVSHMEM_VENDOR_MINOR_VERSION %d\n"
            "#define NVSHMEM_VENDOR_PATCH_VERSION %d\n#endif\n" % version)
    return prefix


@pytest.fixture
def tree(tmp_path):
    site = make_site(tmp_path / "venv" / "lib" / "python3.12" / "site-packages")
    prefix = make_custom(tmp_path / "opt" / "deepep" / "nvshmem")
    return site, prefix


def warnings(result):
    """The warning texts of a result (ansible-core 2.19 returns them as structured summaries)."""
    return [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]


def facts_of(result):
    return result["ansible_facts"]["gpufleet_bundled_nvshmem"]


def read(site, prefix, **kwargs):
    """The facts of the reader the module and node_stack's bundled_nvshmem set share (no state, no interpreter)."""
    return winner.read_bundled(None, None, [str(site)], str(prefix), **kwargs)


def transport_path(site: Path) -> Path:
    return site / "nvidia" / "nvshmem" / "lib" / "nvshmem_transport_ibgda.so.3"


# ---------------------------------------------------------------------------------------------
# the reader (read_bundled: this module's and node_stack's bundled_nvshmem set's)


def test_the_reader_finds_the_h200_layout(tree):
    site, prefix = tree
    facts = read(site, prefix)
    assert facts["site_packages"] == [str(site)]
    assert facts["python"] is None
    [bundled] = facts["bundled"]
    lib = site / "nvidia" / "nvshmem" / "lib"
    assert bundled["package"] == "nvidia-nvshmem-cu13"
    assert bundled["version"] == "3.4.5" and bundled["version_source"] == "metadata"
    assert bundled["lib_dir"] == str(lib)
    assert bundled["host_lib"] == str(lib / "libnvshmem_host.so.3")
    assert bundled["device_lib"] is None
    [ibgda] = bundled["transports"]
    assert ibgda["name"] == "ibgda" and ibgda["sha256"] == sha(BUNDLED_IBGDA) and ibgda["backup"] is None
    custom = facts["custom"]
    assert custom["version"] == "3.5.19"
    assert custom["version_source"] == str(prefix / "include" / "non_abi" / "nvshmem_version.h")
    assert custom["host_lib"] == str(prefix / "lib" / "libnvshmem_host.so.3")
    assert custom["device_lib"] == str(prefix / "lib" / "libnvshmem_device.a")
    [custom_ibgda] = custom["transports"]
    assert custom_ibgda["path"] == str(prefix / "lib" / "nvshmem_transport_ibgda.so.3")
    assert custom_ibgda["realpath"] == str(prefix / "lib" / "nvshmem_transport_ibgda.so.3.0.0")
    assert facts["mismatch"] is True
    [mismatch] = facts["mismatches"]
    assert (mismatch["bundled_version"], mismatch["custom_version"]) == ("3.4.5", "3.5.19")
    assert "device library version does not match" in mismatch["message"]
    assert facts["bundled_would_win"] is True
    assert facts["preload"] == str(prefix / "lib" / "libnvshmem_host.so.3")
    assert facts["replaced"] == []


def test_the_module_returns_the_readers_facts(module_runner, tree):
    """state=preload (the default) changes nothing and returns what the reader read, the preload counted in."""
    site, prefix = tree
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix)})
    assert not result.failed and result["changed"] is False
    expected = read(site, prefix)
    expected["bundled_would_win"] = False  # the preload makes the custom host library win
    assert facts_of(result) == expected
    assert warnings(result) == []


def test_a_mismatched_bundled_copy_that_still_wins_is_warned_about(module_runner, tree):
    """No bundled IBGDA transport to replace: the bundled 3.4.5 host library still wins over the custom 3.5.19."""
    site, prefix = tree
    transport_path(site).unlink()
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix),
                                 "state": "replace_transport"}, check_mode=True)
    assert not result.failed, result.get("msg")
    assert facts_of(result)["bundled_would_win"] is True and facts_of(result)["mismatch"] is True
    assert any("3.4.5" in w and "nothing to replace" not in w for w in warnings(result))


def test_state_report_is_gone(module_runner, tree):
    site, prefix = tree
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix), "state": "report"})
    assert result.failed and "state" in result["msg"] and "preload" in result["msg"]


def test_the_reader_same_version_no_custom_transport(tmp_path):
    site = make_site(tmp_path / "site")
    prefix = make_custom(tmp_path / "nvshmem", version=(3, 4, 5), ibgda=False)
    facts = read(site, prefix)
    assert facts["mismatch"] is False and facts["mismatches"] == []
    assert facts["custom"]["transports"] == []
    assert facts["bundled_would_win"] is True


def test_the_reader_without_custom_build(tmp_path):
    site = make_site(tmp_path / "site")
    facts = read(site, tmp_path / "none")
    assert facts["custom"]["exists"] is False and facts["custom"]["version"] is None
    assert facts["preload"] is None and facts["mismatch"] is False
    assert facts["bundled_would_win"] is True


def test_the_reader_nothing_bundled(tmp_path, tree):
    dummy, prefix = tree
    empty = tmp_path / "empty-site"
    empty.mkdir()
    facts = read(empty, prefix)
    assert facts["bundled"] == [] and facts["bundled_would_win"] is False


def test_custom_version_from_stamp_or_version_file(tmp_path):
    prefix = make_custom(tmp_path / "a", header=False)
    (prefix / ".gpufleet-build.json").write_text(json.dumps({"key": "abc", "version": "3.5.19"}))
    assert disc.describe_custom(str(prefix))["version"] == "3.5.19"
    other = make_custom(tmp_path / "b", header=False)
    (other / "VERSION").write_text("v3.5.19-1\n")
    described = disc.describe_custom(str(other))
    assert described["version"] == "v3.5.19-1" and described["version_source"] == str(other / "VERSION")
    # no header, stamp or version file: the versioned host library name tells
    bare = make_custom(tmp_path / "c", header=False)
    assert disc.describe_custom(str(bare))["version"] == "3.5.19"


def test_torch_lib_copy_and_cu13_layout_without_record(tmp_path):
    site = make_site(tmp_path / "site", record=False, lib_rel=("nvidia", "cu13", "lib"))
    torch_lib = site / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    (torch_lib / "libnvshmem_host.so.3.2.5").write_bytes(b"torch host")
    (torch_lib / "nvshmem_transport_ibgda.so.3").write_bytes(b"torch ibgda")
    (torch_lib / "libtorch_cuda.so").write_bytes(b"not nvshmem")
    found = disc.find_bundled([str(site)])
    assert [entry["package"] for entry in found] == ["nvidia-nvshmem-cu13", "torch"]
    assert found[0]["lib_dir"] == str(site / "nvidia" / "cu13" / "lib")
    assert found[1]["version"] == "3.2.5" and found[1]["version_source"] == "file name"
    assert found[1]["metadata"] is None
    assert [t["name"] for t in found[1]["transports"]] == ["ibgda"]


def test_env_script_preload_makes_the_custom_build_win(tmp_path, tree):
    site, prefix = tree
    script = tmp_path / "env.sh"
    script.write_text('export NVSHMEM_HOME=%s\nexport LD_PRELOAD="${NVSHMEM_HOME}/lib/libnvshmem_host.so.3"\n' % prefix)
    facts = read(site, prefix, env_script=str(script))
    assert facts["env_script_preloads"] is True and facts["bundled_would_win"] is False
    script.write_text("export LD_LIBRARY_PATH=%s/lib\n" % prefix)
    facts = read(site, prefix, env_script=str(script))
    assert facts["env_script_preloads"] is False and facts["bundled_would_win"] is True
    facts = read(site, prefix, env_script=str(tmp_path / "missing.sh"))
    assert facts["env_script_preloads"] is False


# ---------------------------------------------------------------------------------------------
# replace_transport


def test_replace_transport_check_mode_changes_nothing(module_runner, tree):
    site, prefix = tree
    target = transport_path(site)
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix),
                                 "state": "replace_transport"}, check_mode=True, diff=True)
    assert not result.failed and result["changed"] is True
    assert target.read_bytes() == BUNDLED_IBGDA
    assert not Path(str(target) + ".gpufleet-orig").exists()
    [plan] = facts_of(result)["replaced"]
    assert plan["before_sha256"] == sha(BUNDLED_IBGDA) and plan["after_sha256"] == sha(CUSTOM_IBGDA)
    assert plan["source"] == str(prefix / "lib" / "nvshmem_transport_ibgda.so.3.0.0")
    assert plan["changed"] is True
    assert result["diff"] == [{"before": "sha256: %s\n" % sha(BUNDLED_IBGDA),
                               "after": "sha256: %s\n" % sha(CUSTOM_IBGDA),
                               "before_header": str(target), "after_header": str(target)}]
    facts = facts_of(result)
    assert facts["bundled"][0]["transports"][0]["sha256"] == sha(BUNDLED_IBGDA)   # what is there now
    assert facts["bundled_would_win"] is False                                    # what it would leave


def test_replace_transport_backs_up_once_and_is_idempotent(module_runner, tree):
    site, prefix = tree
    target = transport_path(site)
    backup = Path(str(target) + ".gpufleet-orig")
    args = {"site_packages": [str(site)], "nvshmem_prefix": str(prefix), "state": "replace_transport"}

    first = module_runner(mod, args)
    assert not first.failed and first["changed"] is True
    assert target.read_bytes() == CUSTOM_IBGDA and not target.is_symlink()
    assert backup.read_bytes() == BUNDLED_IBGDA
    assert oct(target.stat().st_mode & 0o777) == oct(0o755)
    facts = facts_of(first)
    [transport] = facts["bundled"][0]["transports"]
    assert transport["sha256"] == sha(CUSTOM_IBGDA) and transport["backup"] == str(backup)
    assert transport["original_sha256"] == sha(BUNDLED_IBGDA)
    assert facts["bundled_would_win"] is False
    leftovers = [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []

    second = module_runner(mod, args, check_mode=True)
    assert second["changed"] is False
    third = module_runner(mod, args, diff=True)
    assert third["changed"] is False and third["diff"] == []
    assert facts_of(third)["replaced"][0]["changed"] is False

    # a pip reinstall brings a newer bundled file back: replaced again, the first original kept
    target.write_bytes(b"\x7fELF reinstalled ibgda 3.4.6")
    fourth = module_runner(mod, args)
    assert fourth["changed"] is True
    assert target.read_bytes() == CUSTOM_IBGDA
    assert backup.read_bytes() == BUNDLED_IBGDA


def test_replace_transport_without_bundled_copy_warns(module_runner, tmp_path, tree):
    dummy, prefix = tree
    empty = tmp_path / "empty"
    empty.mkdir()
    result = module_runner(mod, {"site_packages": [str(empty)], "nvshmem_prefix": str(prefix),
                                 "state": "replace_transport"})
    assert not result.failed and result["changed"] is False
    assert any("nothing to replace" in w for w in warnings(result))


def test_replace_transport_needs_a_custom_ibgda(module_runner, tmp_path):
    site = make_site(tmp_path / "site")
    prefix = make_custom(tmp_path / "nvshmem", ibgda=False)
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix),
                                 "state": "replace_transport"})
    assert result.failed
    assert repr(str(prefix)) in result["msg"] and "nvshmem_transport_ibgda.so.3" in result["msg"]
    assert transport_path(site).read_bytes() == BUNDLED_IBGDA


# ---------------------------------------------------------------------------------------------
# preload


def test_preload_with_gdrcopy(module_runner, tmp_path, tree):
    site, prefix = tree
    gdr = tmp_path / "gdrcopy" / "lib"
    gdr.mkdir(parents=True)
    (gdr / "libgdrapi.so.2.5").write_bytes(b"gdr")
    os.symlink("libgdrapi.so.2.5", gdr / "libgdrapi.so.2")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix), "state": "preload",
                                 "gdrcopy_home": str(tmp_path / "gdrcopy")}, diff=True)
    assert not result.failed and result["changed"] is False
    facts = facts_of(result)
    host = str(prefix / "lib" / "libnvshmem_host.so.3")
    assert facts["preload"] == host + ":" + str(gdr / "libgdrapi.so.2")
    assert facts["preload_libs"] == [host, str(gdr / "libgdrapi.so.2")]
    assert facts["bundled_would_win"] is False
    assert "diff" not in result
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_preload_without_custom_build_fails(module_runner, tmp_path):
    site = make_site(tmp_path / "site")
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(tmp_path / "missing"),
                                 "state": "preload"})
    assert result.failed and repr(str(tmp_path / "missing")) in result["msg"]


def test_preload_with_missing_gdrcopy_fails(module_runner, tmp_path, tree):
    site, prefix = tree
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix), "state": "preload",
                                 "gdrcopy_home": str(tmp_path / "nogdr")})
    assert result.failed and "nogdr" in result["msg"] and "libgdrapi" in result["msg"]


# ---------------------------------------------------------------------------------------------
# bad options


def test_bad_site_packages_is_named(module_runner, tmp_path, tree):
    dummy, prefix = tree
    result = module_runner(mod, {"site_packages": [str(tmp_path / "nope")], "nvshmem_prefix": str(prefix)})
    assert result.failed and repr(str(tmp_path / "nope")) in result["msg"]


def test_relative_prefix_is_named(module_runner, tree):
    site, dummy = tree
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": "opt/nvshmem"})
    assert result.failed and "'opt/nvshmem'" in result["msg"] and "absolute" in result["msg"]


def test_unknown_python_is_named(module_runner, tmp_path):
    result = module_runner(mod, {"python": "python3-does-not-exist"})
    assert result.failed and "'python3-does-not-exist'" in result["msg"]
    not_exec = tmp_path / "python"
    not_exec.write_text("")
    result = module_runner(mod, {"python": str(not_exec)})
    assert result.failed and repr(str(not_exec)) in result["msg"]


def test_python_that_fails_reports_rc(module_runner, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    fake.chmod(0o755)
    result = module_runner(mod, {"python": str(fake)})
    assert result.failed and result["rc"] == 3 and "broken" in result["stderr"]


def test_probe_parsing():
    with pytest.raises(disc.DiscoveryError, match="not the expected JSON"):
        disc.parse_probe("Python 2.7\n")
    probe = disc.parse_probe('warning: x\n{"executable": "/p", "version": "3.12.3"}\n')
    assert probe["version"] == "3.12.3"


def test_site_packages_follow_sys_path_order(tmp_path):
    a, b, c = (tmp_path / n for n in ("a", "b", "c"))
    for d in (a, b):
        d.mkdir()
    probe = {"executable": "/p", "purelib": str(a), "platlib": str(a), "site_packages": [str(a), str(c)],
             "user_site": str(b), "sys_path": ["", str(b), str(a)]}
    assert disc.ordered_site_packages(probe) == [str(b), str(a)]


# ---------------------------------------------------------------------------------------------
# A real interpreter pointed at fake trees


def _run(argv, env=None):
    return subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout.strip()


def test_real_venv_interpreter(module_runner, tmp_path):
    venv = tmp_path / "torchenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))
    make_site(purelib)
    prefix = make_custom(tmp_path / "nvshmem")
    result = module_runner(mod, {"python": str(python), "nvshmem_prefix": str(prefix)})
    assert not result.failed, result.get("msg")
    facts = facts_of(result)
    assert facts["python"] == str(python)
    assert facts["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert str(purelib) in facts["site_packages"]
    assert [e["lib_dir"] for e in facts["bundled"]] == [str(purelib / "nvidia" / "nvshmem" / "lib")]
    assert facts["mismatch"] is True


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs the system /usr/bin/python3")
def test_system_python_user_site(module_runner, tmp_path, monkeypatch):
    """Runbook 000: PyTorch nightly installed with --user puts NVSHMEM in ~/.local/lib/python3.X/site-packages."""
    userbase = tmp_path / "home" / ".local"
    env = dict(os.environ, PYTHONUSERBASE=str(userbase))
    enabled = _run(["/usr/bin/python3", "-c", "import site; print(bool(site.ENABLE_USER_SITE))"], env=env)
    if enabled != "True":
        pytest.skip("the system interpreter has the user site disabled")
    user_site = Path(_run(["/usr/bin/python3", "-c", "import site; print(site.getusersitepackages())"], env=env))
    make_site(user_site)
    prefix = make_custom(tmp_path / "nvshmem")
    monkeypatch.setenv("PYTHONUSERBASE", str(userbase))
    result = module_runner(mod, {"python": "/usr/bin/python3", "nvshmem_prefix": str(prefix),
                                 "state": "replace_transport"})
    assert not result.failed, result.get("msg")
    facts = facts_of(result)
    assert str(user_site) in facts["site_packages"]
    [bundled] = [e for e in facts["bundled"] if e["site_packages"] == str(user_site)]
    assert bundled["package"] == "nvidia-nvshmem-cu13"
    assert result["changed"] is True
    assert transport_path(user_site).read_bytes() == CUSTOM_IBGDA
    shutil.rmtree(userbase)


def test_return_documents_every_fact(module_runner, tree):
    import yaml

    site, prefix = tree
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix),
                                 "state": "replace_transport"}, check_mode=True, diff=True)
    documented = yaml.safe_load(mod.RETURN)
    facts_doc = documented["ansible_facts"]["contains"]["gpufleet_bundled_nvshmem"]["contains"]
    assert set(facts_doc) == set(facts_of(result))
    assert set(facts_doc["bundled"]["contains"]) == set(facts_of(result)["bundled"][0])
    assert {"changed", "diff", "ansible_facts"} <= set(documented)
    assert set(facts_doc["custom"]["sample"]) == set(facts_of(result)["custom"])
    assert set(facts_doc["replaced"]["sample"][0]) == set(facts_of(result)["replaced"][0])


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link"])
def test_env_script_that_is_no_file_is_refused_naming_it(module_runner, tmp_path, tree, kind):
    site, prefix = tree
    script = tmp_path / "unified-env.sh"
    if kind == "directory":
        script.mkdir()
        why = "is a directory"
    elif kind == "fifo":
        os.mkfifo(str(script))
        why = "is not a regular file"
    else:
        script.symlink_to(tmp_path / "gone.sh")
        why = "is a dangling symbolic link"
    for check in (False, True):
        result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix),
                                     "env_script": str(script)}, check_mode=check)
        assert result.failed
        assert result["msg"].startswith("env_script %s %s; expected the path of an environment script" % (script, why))


def test_unreadable_env_script_is_refused_naming_it(module_runner, tmp_path, tree, monkeypatch):
    site, prefix = tree
    script = tmp_path / "unified-env.sh"
    script.write_text("export LD_PRELOAD=x\n")
    real_open = open

    def refusing_open(path, *args, **kwargs):  # root reads a mode-000 file, so deny the read itself
        if str(path) == str(script):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(winner, "open", refusing_open, raising=False)
    result = module_runner(mod, {"site_packages": [str(site)], "nvshmem_prefix": str(prefix),
                                 "env_script": str(script)})
    assert result.failed
    assert result["msg"].startswith("env_script %s cannot be read (Permission denied); expected a readable" % script)


def test_node_stack_refuses_the_env_script_the_module_refuses(tmp_path, tree):
    """node_stack's gpufleet_bundled_nvshmem set reads env_script as this module does: a directory is its error."""
    from ansible_collections.gpufleet.deepep.plugins.module_utils._node import fact_sets

    site, prefix = tree
    py = {"ok": True, "site": {"executable": "/usr/bin/python3", "version": "3.12.3", "purelib": str(site)}}
    script = tmp_path / "unified-env.sh"
    script.mkdir()
    with pytest.raises(fact_sets.GatherError, match="env_script %s is a directory" % script):
        fact_sets.gather_bundled_nvshmem("/usr/bin/python3", py, str(prefix), env_script=str(script))
    script.rmdir()
    facts = fact_sets.gather_bundled_nvshmem("/usr/bin/python3", py, str(prefix), env_script=str(script))
    assert facts["env_script_preloads"] is False  # a missing script preloads nothing, as the module says
