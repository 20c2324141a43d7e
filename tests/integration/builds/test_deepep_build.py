# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpufleet.deepep.deepep_build against the DeepEP-shaped fixture trees: real wheel builds in tmp_path.

Most tests use a virtualenv of the system Python with a stand-in ``torch`` distribution (a package whose
``__version__`` and metadata the test sets): the fixtures only read torch's version, so a torch change is one
file write. One test (marked ``slow``) installs the real CPU torch wheel from /opt/wheels.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unit_helpers import first_build_holding_the_lock

from ansible_collections.gpufleet.deepep.plugins.modules import deepep_build
from ansible_collections.gpufleet.deepep.plugins.module_utils import _buildkey as bk

from tools.fleetsim import mirror

REPO = Path(__file__).resolve().parents[3]
SOURCES = REPO / "tools" / "fleetsim" / "fixtures" / "sources"
CUDA_HOME = "/usr/local/cuda"
SYSTEM_PYTHON = "/usr/bin/python3"
TORCH_WHEELS = "/opt/wheels"


def _system_python_can_build():
    if not os.access(SYSTEM_PYTHON, os.X_OK) or not shutil.which("g++"):
        return False
    proc = subprocess.run([SYSTEM_PYTHON, "-c", "import setuptools, wheel, venv, pip, sysconfig, os; "
                           "assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))"],
                          capture_output=True, check=False)
    return proc.returncode == 0


pytestmark = [
    pytest.mark.skipif(not _system_python_can_build(),
                       reason="needs /usr/bin/python3 with setuptools, wheel, venv, pip and Python.h, and g++"),
    pytest.mark.skipif(not os.path.isfile(os.path.join(CUDA_HOME, "include", "cccl", "cuda", "std", "tuple")),
                       reason="needs CUDA 13 headers (include/cccl/cuda/std/tuple) at /usr/local/cuda"),
]


class Venv(object):
    def __init__(self, path):
        self.path = path
        # pip comes from the system site-packages (Debian's python3-pip); installs still land in the venv.
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", str(path)],
                       check=True)
        self.python = str(path / "bin" / "python")
        self.site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()

    def set_torch(self, version):
        """Install (or replace) the stand-in torch distribution at ``version``."""
        for old in glob.glob(os.path.join(self.site, "torch-*.dist-info")) + [os.path.join(self.site, "torch")]:
            shutil.rmtree(old, ignore_errors=True)
        os.makedirs(os.path.join(self.site, "torch"))
        with open(os.path.join(self.site, "torch", "__init__.py"), "w") as handle:
            handle.write("__version__ = %r\n" % version)
        with open(os.path.join(self.site, "torch", "version.py"), "w") as handle:  # torch's own form
            handle.write("from typing import Optional\n\n__version__ = %r\ndebug = False\n"
                         "cuda: Optional[str] = %r\nhip: Optional[str] = None\n"
                         % (version, "13.0" if "+cu13" in version else None))
        meta = os.path.join(self.site, "torch-%s.dist-info" % version)
        os.makedirs(meta)
        with open(os.path.join(meta, "METADATA"), "w") as handle:
            handle.write("Metadata-Version: 2.1\nName: torch\nVersion: %s\n\n" % version)
        return self

    def run(self, code):
        return subprocess.run([self.python, "-c", code], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def nvshmem_root(tmp_path_factory):
    """The nvshmem-fixture built with IBGDA (cmake, seconds)."""
    if not shutil.which("cmake"):
        pytest.skip("needs cmake to build the nvshmem-fixture")
    base = tmp_path_factory.mktemp("nvshmem")
    prefix = base / "nvshmem"
    env = dict(os.environ, CUDACXX=os.path.join(CUDA_HOME, "bin", "nvcc"), LC_ALL="C")
    subprocess.run(["cmake", "-S", str(SOURCES / "nvshmem-fixture"), "-B", str(base / "build"),
                    "-DCMAKE_INSTALL_PREFIX=%s" % prefix, "-DNVSHMEM_IBGDA_SUPPORT=ON", "-DNVSHMEM_USE_GDRCOPY=OFF",
                    "-DNVSHMEM_BUILD_PYTHON_LIB=OFF", "-DCMAKE_CUDA_ARCHITECTURES=90"], check=True, env=env, capture_output=True)
    subprocess.run(["cmake", "--build", str(base / "build"), "--parallel", "2"], check=True, env=env,
                   capture_output=True)
    subprocess.run(["cmake", "--install", str(base / "build")], check=True, env=env, capture_output=True)
    return str(prefix)


def _nccl_root(base, version):
    major, minor, patch = (int(x) for x in version.split("."))
    root = base / ("nccl-%s" % version)
    (root / "include").mkdir(parents=True)
    (root / "include" / "nccl.h").write_text(
        "#ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_MAJOR %d\n#define NCCL_MINOR %d\n#define NCCL_PATCH %d\n"
        "#define NCCL_SUFFIX \"\"\n#define NCCL_VERSION_CODE %d\n"
        "#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
        "(X) * 10000 + (Y) * 100 + (Z))\n#endif\n" % (major, minor, patch, major * 10000 + minor * 100 + patch))
    return str(root)


def _tree(tmp_path, name):
    """A private copy of a fixture tree (the repository copy may be edited while tests run)."""
    copy = tmp_path / "trees" / name
    if not copy.is_dir():
        mirror.assemble_source(name, copy)
    return copy


def _args(venv, tmp_path, nvshmem_root, tree="deepep-v1-fixture", **extra):
    args = {"src": str(_tree(tmp_path, tree)), "python": venv.python, "arch_list": "9.0", "gpu_arch_list": ["9.0", "9.0"],
            "nvshmem_root": nvshmem_root, "cuda_home": CUDA_HOME, "artifact_dir": str(tmp_path / "artifacts"),
            "jobs": 2}
    args.update(extra)
    return args


@pytest.mark.slow
def test_v1_build_install_rerun_and_torch_change(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0+cu130")
    args = _args(venv, tmp_path, nvshmem_root, internode=True)

    first = module_runner(deepep_build, args)
    assert not first.failed, first.get("msg")
    assert first["built"] and first["installed"] and first["changed"]
    facts = first["ansible_facts"]["gpufleet_deepep"]
    assert facts["import_ok"] is True and facts["generation"] == "v1" and facts["version"] == "1.2.1"
    assert facts["built_against"] == {"torch": "2.11.0+cu130", "cuda": "13.0.88", "nvshmem": "3.4.5", "nccl": None,
                                      "arch_list": "9.0"}
    assert facts["hca_mapping_support"] is False and facts["key"] == first["key"]
    assert first["wheel"].startswith(str(tmp_path / "artifacts" / first["key"]) + "/")
    assert first["build_env"]["CPATH"].split(":")[0] == "/usr/local/cuda/include/cccl"
    assert first["build_env"]["NVCC_APPEND_FLAGS"].endswith("-I/usr/local/cuda/include/cccl")
    assert first["build_env"]["NVSHMEM_DIR"] == nvshmem_root
    log = Path(first["log"]).read_text()
    assert "> NVSHMEM path: %s" % nvshmem_root in log and "> Arch list: 9.0" in log
    record = json.loads(Path(first["wheel"]).with_name("build.json").read_text())
    assert record["key"] == first["key"] and record["wheel_name"] == os.path.basename(first["wheel"])
    # The extension links the NVSHMEM build through its rpath.
    info = venv.run("import deep_ep, json; print(json.dumps(deep_ep.build_info()))")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout.splitlines()[-1])["nvshmem_version"] == 30405

    again = module_runner(deepep_build, args)
    assert not again.failed and not again["changed"] and not again["built"]
    # the planned key and the recorded extension: the bytes that imported at install time; no torch import again
    assert "not imported again" in again["reason"]
    assert again["ansible_facts"]["gpufleet_deepep"]["import_ok"] is None
    assert again["ansible_facts"]["gpufleet_deepep"]["import_skipped"].startswith("the installed build has key")
    imported = module_runner(deepep_build, dict(args, import_check="always"))
    assert not imported["changed"] and "imports" in imported["reason"]
    assert imported["ansible_facts"]["gpufleet_deepep"]["import_ok"] is True
    # an extension that is not the recorded one is imported (and reinstalled), never trusted
    (ext,) = Path(again["ansible_facts"]["gpufleet_deepep"]["location"]).parent.glob("deep_ep_cpp*.so")
    ext.write_bytes(ext.read_bytes() + b"\0")
    drifted = module_runner(deepep_build, args, check_mode=True)
    assert drifted["changed"] and "extension differs" in drifted["reason"]
    assert drifted["ansible_facts"]["gpufleet_deepep"]["import_skipped"] is None
    assert module_runner(deepep_build, args)["installed"]
    assert "not imported again" in module_runner(deepep_build, args)["reason"]
    # what pip uninstall leaves (the files of its RECORD gone, the stamp this module wrote kept): named as such
    ext.unlink()
    removed = module_runner(deepep_build, args, check_mode=True)
    assert removed["changed"] and "the extension the stamp records is not installed" in removed["reason"]
    assert module_runner(deepep_build, args)["installed"]

    # torch changes under DeepEP: the import breaks (ABI), the key changes, one rebuild fixes it.
    venv.set_torch("2.12.0+cu130")
    broken = venv.run("import deep_ep")
    assert "undefined symbol" in broken.stderr
    plan = module_runner(deepep_build, args, check_mode=True)
    assert not plan.failed and plan["would_build"] and plan["key"] != first["key"]
    assert plan["abi_mismatch"]["built_torch"] == "2.11.0+cu130" and plan["abi_mismatch"]["torch"] == "2.12.0+cu130"
    assert "rebuild" in plan["abi_mismatch"]["fix"] and "ABI mismatch" in plan["reason"]
    rebuilt = module_runner(deepep_build, args)
    assert rebuilt["built"] and rebuilt["ansible_facts"]["gpufleet_deepep"]["import_ok"]
    assert rebuilt["ansible_facts"]["gpufleet_deepep"]["built_against"]["torch"] == "2.12.0+cu130"
    assert not module_runner(deepep_build, args)["changed"]


@pytest.mark.slow
def test_build_once_install_elsewhere_from_the_artifact(module_runner, tmp_path, nvshmem_root):
    builder = Venv(tmp_path / "builder").set_torch("2.11.0")
    built = module_runner(deepep_build, _args(builder, tmp_path, nvshmem_root))
    assert built["built"]

    other = Venv(tmp_path / "other").set_torch("2.11.0")
    plan = module_runner(deepep_build, _args(other, tmp_path, nvshmem_root), check_mode=True)
    assert plan["key"] == built["key"] and not plan["would_build"] and plan["would_install"]
    installed = module_runner(deepep_build, _args(other, tmp_path, nvshmem_root))
    assert not installed.failed and not installed["built"] and installed["installed"]
    assert installed["ansible_facts"]["gpufleet_deepep"]["import_ok"]
    assert installed["commands"][0][1:4] == ["-m", "pip", "install"]

    third = Venv(tmp_path / "third").set_torch("2.11.0")
    from_wheel = module_runner(deepep_build, {"wheel": built["wheel"], "python": third.python, "arch_list": "9.0",
                                              "nvshmem_root": nvshmem_root, "cuda_home": CUDA_HOME})
    assert not from_wheel.failed, from_wheel.get("msg")
    assert from_wheel["installed"] and from_wheel["key"] == built["key"]
    assert from_wheel["ansible_facts"]["gpufleet_deepep"]["built_against"]["torch"] == "2.11.0"
    again = module_runner(deepep_build, {"wheel": built["wheel"], "python": third.python, "arch_list": "9.0",
                                         "nvshmem_root": nvshmem_root, "cuda_home": CUDA_HOME})
    assert not again["changed"]


@pytest.mark.slow
def test_failed_build_and_failed_import_leave_the_previous_install(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    good = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root))
    assert good["installed"]

    broken_tree = tmp_path / "broken-compile"
    shutil.copytree(_tree(tmp_path, "deepep-v1-fixture"), broken_tree)
    with open(broken_tree / "csrc" / "kernels" / "layout.cpp", "a") as handle:
        handle.write("\nthis is not C++;\n")
    failed = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, src=str(broken_tree)))
    assert failed.failed and failed["rc"] != 0 and "nothing was installed" in failed["msg"]
    assert any("layout.cpp" in line for line in failed["log_tail"])
    assert venv.run("import deep_ep").returncode == 0

    bad_import = tmp_path / "broken-import"
    shutil.copytree(_tree(tmp_path, "deepep-v1-fixture"), bad_import)
    with open(bad_import / "deep_ep" / "__init__.py", "a") as handle:
        handle.write("\nraise ImportError('broken on purpose')\n")
    rolled = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, src=str(bad_import)))
    assert rolled.failed and rolled["rolled_back"] is True and "broken on purpose" in rolled["msg"]
    assert venv.run("import deep_ep").returncode == 0
    back = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root))
    assert not back.failed and not back["built"]
    assert not glob.glob(str(tmp_path / "artifacts" / ".staging-*"))


def test_v2_nccl_2_28_9_is_refused_before_compiling(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0+cu130")
    args = _args(venv, tmp_path, nvshmem_root, tree="deepep-v2-fixture", nccl_root=_nccl_root(tmp_path, "2.28.9"))
    for check_mode in (True, False):
        result = module_runner(deepep_build, args, check_mode=check_mode)
        assert result.failed and result["generation"] == "v2"
        assert "NCCL >= 2.30.4" in result["msg"] and "2.28.9" in result["msg"]
        assert "pip install 'nvidia-nccl-cu13>=2.30.4' --no-deps" in result["msg"]
        assert [f["check"] for f in result["preflight"]["failures"]] == ["nccl_too_old"]
        assert result["commands"] == [] and not (tmp_path / "artifacts").exists()


def test_v2_fixture_really_fails_to_compile_against_nccl_2_28_9(tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    tree = tmp_path / "v2"
    mirror.assemble_source("deepep-v2-fixture", tree)
    env = dict(os.environ, EP_NVSHMEM_ROOT_DIR=nvshmem_root, EP_NCCL_ROOT_DIR=_nccl_root(tmp_path, "2.28.9"))
    proc = subprocess.run([venv.python, "setup.py", "bdist_wheel"], cwd=str(tree), env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode != 0
    assert "ncclCommProperties" in proc.stderr and "ncclGetLsaDevicePointer" in proc.stderr


@pytest.mark.slow
def test_v2_builds_against_nccl_2_30_7(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0+cu130")
    nccl = _nccl_root(tmp_path, "2.30.7")
    result = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, tree="deepep-v2-fixture", nccl_root=nccl,
                                               arch_list="9.0;10.0", gpu_arch_list="9.0"))
    assert not result.failed, result.get("msg")
    facts = result["ansible_facts"]["gpufleet_deepep"]
    assert facts["generation"] == "v2" and facts["version"] == "2.1.0" and facts["import_ok"]
    assert facts["built_against"]["nccl"] == "2.30.7" and facts["built_against"]["arch_list"] == "9.0;10.0"
    assert result["build_env"]["EP_NVSHMEM_ROOT_DIR"] == nvshmem_root and result["build_env"]["EP_NCCL_ROOT_DIR"] == nccl
    assert result["build_env"]["DISABLE_AGGRESSIVE_PTX_INSTRS"] == "1"
    baked = venv.run("import deep_ep; print(deep_ep.persistent_envs['EP_NCCL_ROOT_DIR'])")
    assert baked.stdout.strip().splitlines()[-1] == nccl
    # The build record carries the linkage record (schema 1), and the module returns it.
    linkage = json.loads((Path(result["wheel"]).parent / "build.json").read_text())["linkage"]
    assert result["linkage"] == linkage
    assert linkage["schema"] == 1 and linkage["artifact"] == "deepep" and linkage["warnings"] == []
    extension = linkage["objects"][0]
    assert extension["path"].startswith("deep_ep/_C.") and "libnvshmem_host.so.3" in extension["needed"]
    assert extension["runpath"] == [nvshmem_root + "/lib"] and extension["soname"] is None
    assert extension["sass"] == [] and extension["ptx"] == []  # a g++-only extension embeds no device code
    assert linkage["baked_env"] == {"EP_NCCL_ROOT_DIR": nccl}
    assert linkage["nccl"] == {"header_version": "2.30.7", "root": nccl, "library": None}  # the fixture needs no libnccl
    assert linkage["nvshmem"] == {
        "host_version": "3.4.5", "host_library": os.path.realpath(nvshmem_root + "/lib/libnvshmem_host.so.3"),
        "device_version": "3.4.5", "device_library": nvshmem_root + "/lib/libnvshmem_device.a"}
    assert linkage["torch"] == {"version": "2.11.0+cu130", "cxx11_abi": None, "cuda": "13.0"}
    assert linkage["cuda"].startswith("13.") and linkage["compiler"]["version"].startswith(linkage["compiler"]["cxx"])


@pytest.mark.slow
def test_a_compiler_without_a_shared_libstdcxx_gets_the_runtimes_through_a_private_link(module_runner, tmp_path,
                                                                                        nvshmem_root, monkeypatch):
    # The 4 x H200 machine's /opt/gcc/bin/g++ had a dangling libstdc++.so link: -print-file-name finds no shared one.
    cxx = tmp_path / "bin" / "g++"
    cxx.parent.mkdir()
    cxx.write_text('#!/bin/sh\nif [ "$1" = -print-file-name=libstdc++.so ]; then echo libstdc++.so; exit 0; fi\n'
                   'exec g++ "$@"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    venv = Venv(tmp_path / "venv").set_torch("2.11.0+cu130")
    args = _args(venv, tmp_path, nvshmem_root, tree="deepep-v2-fixture", nccl_root=_nccl_root(tmp_path, "2.30.7"))
    first = module_runner(deepep_build, args)
    assert not first.failed, first.get("msg")
    fix = next(f for f in first["preflight"]["automatic"] if f["check"] == "libstdcxx_static")
    link = os.path.join(fix["link"]["dir"], "libstdc++.so")
    assert os.readlink(link) == fix["link"]["target"] and os.path.isfile(link)
    assert fix["link"]["dir"].startswith(args["artifact_dir"] + "/.toolchain/libstdcxx-")
    assert first["build_env"]["LDFLAGS"].split()[0] == "-L" + fix["link"]["dir"]
    assert first["inputs"]["libstdcxx_link"] == fix["link"]["target"]
    # The build record says what the extension links.
    record = json.loads((Path(first["wheel"]).parent / "build.json").read_text())
    extension = record["linkage"]["objects"][0]
    assert extension["path"].startswith("deep_ep/_C") and extension["libstdcxx"] in ("shared", "none")
    again = module_runner(deepep_build, args)
    assert not again.failed and not again["changed"] and again["key"] == first["key"]
    # Without the fallback the key is the one a sound toolchain always had.
    monkeypatch.delenv("CXX")
    sound = module_runner(deepep_build, dict(args, artifact_dir=str(tmp_path / "other")), check_mode=True)
    assert "libstdcxx_link" not in sound["inputs"] and sound["key"] != first["key"]


def test_a_v2_wheel_with_a_static_libstdcxx_is_refused_and_a_v1_one_warned(tmp_path):
    import zipfile

    src = tmp_path / "rx.cpp"
    src.write_text('#include <regex>\nextern "C" int ok(const char* s) { return std::regex_search(s, std::regex("a+")); }\n')
    wheels = {}
    for kind, flags in (("static", ["-static-libstdc++"]), ("shared", [])):
        so = tmp_path / ("%s.so" % kind)
        subprocess.run(["g++", "-fPIC", "-shared", str(src), "-o", str(so)] + flags, check=True, timeout=300)
        wheel = tmp_path / ("deep_ep-2.1.0+%s-cp311-cp311-linux_x86_64.whl" % kind)
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.write(so, "deep_ep/_C.cpython-311-x86_64-linux-gnu.so")
        wheels[kind] = str(wheel)
    with pytest.raises(deepep_build.StepFailed) as info:
        deepep_build.wheel_linkage(wheels["static"], "v2")
    assert "static libstdc++" in info.value.msg and "first dispatch" in info.value.msg and "CXX" in info.value.msg
    v1 = deepep_build.wheel_linkage(wheels["static"], "v1")
    assert v1["objects"][0]["libstdcxx"] == "static" and "static libstdc++" in v1["warnings"][0]
    shared = deepep_build.wheel_linkage(wheels["shared"], "v2")
    assert shared["objects"][0]["libstdcxx"] == "shared" and "libstdc++.so.6" in shared["objects"][0]["needed"]
    assert shared["warnings"] == []


def test_preflight_reports_everything_at_once_in_check_mode(module_runner, tmp_path):
    fake_cuda = tmp_path / "cuda"
    (fake_cuda / "bin").mkdir(parents=True)
    nvcc = fake_cuda / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    venv = Venv(tmp_path / "venv")           # no torch at all
    result = module_runner(deepep_build, {
        "src": str(_tree(tmp_path, "deepep-v2-fixture")), "python": venv.python, "arch_list": "10,0",
        "cuda_home": str(fake_cuda), "nvshmem_root": str(tmp_path / "no-nvshmem"),
        "nccl_root": _nccl_root(tmp_path, "2.28.9"), "artifact_dir": str(tmp_path / "artifacts"),
    }, check_mode=True)
    assert result.failed
    checks = sorted(f["check"] for f in result["preflight"]["failures"])
    assert checks == sorted(["arch_list_malformed", "cccl_missing", "torch_missing", "nccl_too_old",
                             "nvshmem_root_missing"])
    assert "'10,0'" in result["msg"] and "include/cccl" in result["msg"]
    assert result["msg"].count("Fix:") == 5


def test_arch_list_defaults_to_the_gpus_and_must_cover_them(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    plan = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, arch_list=None, gpu_arch_list="10.0"),
                         check_mode=True)
    assert not plan.failed and plan["inputs"]["arch_list"] == "10.0"
    assert plan["build_env"]["TORCH_CUDA_ARCH_LIST"] == "10.0"
    assert plan["build_env"]["DISABLE_AGGRESSIVE_PTX_INSTRS"] == "1"
    mismatch = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, arch_list="9.0",
                                                 gpu_arch_list=["10.0"] * 8), check_mode=True)
    assert mismatch.failed and "arch_mismatch" in mismatch["msg"]


def test_pr466_tree_and_generation_checks(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    plan = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, tree="deepep-v1-pr466-fixture"),
                         check_mode=True)
    assert not plan.failed and plan["ansible_facts"]["gpufleet_deepep"]["hca_mapping_support"] is True
    plain = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root), check_mode=True)
    assert plain["ansible_facts"]["gpufleet_deepep"]["hca_mapping_support"] is False
    assert plain["key"] != plan["key"]
    wrong = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, generation="v2"), check_mode=True)
    assert wrong.failed and "v1 tree" in wrong["msg"]
    assert not (tmp_path / "artifacts").exists()


def test_v1_fixture_needs_cccl_on_cpath_like_the_real_build(tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    tree = tmp_path / "v1"
    mirror.assemble_source("deepep-v1-fixture", tree)
    env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "CPLUS_INCLUDE_PATH")}
    env.update(NVSHMEM_DIR=nvshmem_root, TORCH_CUDA_ARCH_LIST="9.0", CUDA_HOME=CUDA_HOME)
    proc = subprocess.run([venv.python, "setup.py", "bdist_wheel"], cwd=str(tree), env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode != 0 and "cuda/std/tuple: No such file or directory" in proc.stderr
    assert "> NVSHMEM path: %s" % nvshmem_root in proc.stdout
    bad_arch = subprocess.run([venv.python, "setup.py", "bdist_wheel"], cwd=str(tree),
                              env=dict(env, TORCH_CUDA_ARCH_LIST="10,0"), capture_output=True, text=True, check=False)
    assert bad_arch.returncode != 0 and "Unknown CUDA arch (10,0)" in bad_arch.stderr


@pytest.mark.slow
def test_v1_with_the_real_cpu_torch_wheel(module_runner, tmp_path, nvshmem_root):
    system_tag = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"],
                                capture_output=True, text=True, check=True).stdout.strip()
    wheels = sorted(glob.glob(os.path.join(TORCH_WHEELS, "torch-*+cpu-%s-*.whl" % system_tag)))
    if not wheels:
        pytest.skip("no CPU torch wheel for %s (%s) in %s" % (system_tag, SYSTEM_PYTHON, TORCH_WHEELS))
    venv = Venv(tmp_path / "venv")
    # The CPU wheel itself (the nodes' torch); its small pure-Python dependencies come from the index. --no-compile:
    # byte-compiling torch's thousands of modules took three quarters of the install (measured: 20 of 27 CPU-s);
    # the few imports below compile what they load.
    proc = subprocess.run([venv.python, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
                           wheels[-1]],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or venv.run("import torch").returncode != 0:
        pytest.skip("torch cannot be installed from %s here: %s" % (TORCH_WHEELS, (proc.stderr or "")[-300:]))
    result = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root))
    assert not result.failed, result.get("msg")
    facts = result["ansible_facts"]["gpufleet_deepep"]
    torch_version = venv.run("import torch; print(torch.__version__)").stdout.strip().splitlines()[-1]
    assert facts["import_ok"] and facts["built_against"]["torch"] == torch_version
    assert bk.read_stamp(facts["location"])["key"] == result["key"]


# --- faults: a kill during the install, a tampered wheel, a second build of one artifact directory -----------

RUN_MODULE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from unit_helpers import run_module
from ansible_collections.gpufleet.deepep.plugins.modules import deepep_build
print("GPUFLEET-RESULT " + json.dumps(run_module(deepep_build, json.loads(sys.argv[2]))))
"""

HANGING_PIP = """#!/bin/sh
# The torch interpreter, except that `-m pip install` hangs once pip has done its work (the run is killed there).
if [ "$2" = pip ] && [ "$3" = install ]; then
    "{python}" "$@" || exit $?
    echo $$ > "{marker}.tmp" && mv "{marker}.tmp" "{marker}"
    exec sleep 900
fi
exec "{python}" "$@"
"""


def _wait_for(path, proc, what):
    for dummy in range(9000):  # bounded: at most about 15 minutes (a fixture build under load)
        if path.exists() or proc.poll() is not None:
            break
        time.sleep(0.1)
    if not path.exists():
        out, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "")
        pytest.fail("%s never happened: %s %s" % (what, out[-2000:], err[-2000:]))


def _stamp_key(venv):
    return json.loads((Path(venv.site) / "deep_ep" / bk.STAMP_NAME).read_text())["key"]


def _marked_tree(tmp_path, mark):
    """The V1 fixture with ``deep_ep.GPUFLEET_MARK = mark`` (another source, so another key)."""
    tree = tmp_path / ("deepep-%s" % mark)
    shutil.copytree(_tree(tmp_path, "deepep-v1-fixture"), tree)
    with open(tree / "deep_ep" / "__init__.py", "a") as handle:
        handle.write("\nGPUFLEET_MARK = %r\n" % mark)
    return tree


@pytest.mark.slow
def test_a_kill_during_the_wheel_install_leaves_the_old_deepep_importable(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    old = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, src=str(_marked_tree(tmp_path, "old"))))
    assert old["installed"] and _stamp_key(venv) == old["key"]

    marker = tmp_path / "pip-done"
    wrapper = tmp_path / "python-hanging-pip"
    wrapper.write_text(HANGING_PIP.format(python=venv.python, marker=marker))
    wrapper.chmod(0o755)
    new_args = _args(venv, tmp_path, nvshmem_root, src=str(_marked_tree(tmp_path, "new")))
    proc = subprocess.Popen([sys.executable, "-c", RUN_MODULE, str(REPO / "tests" / "unit"),
                             json.dumps(dict(new_args, python=str(wrapper)))],
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(marker, proc, "the install of the new wheel")
    finally:
        proc.kill()  # SIGKILL: no handler of the module runs
        proc.communicate(timeout=60)
        if marker.exists():
            os.kill(int(marker.read_text()), signal.SIGKILL)  # the hanging pip (its own session)

    imported = venv.run("import deep_ep; print(deep_ep.GPUFLEET_MARK)")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "old" and _stamp_key(venv) == old["key"]
    assert glob.glob(os.path.join(venv.site, ".gpufleet-deep_ep-stage-*"))  # what the killed run left

    again = module_runner(deepep_build, new_args)
    assert not again.failed, again.get("msg")
    assert again["installed"] and not again["built"]  # the wheel was built before the kill
    assert venv.run("import deep_ep; print(deep_ep.GPUFLEET_MARK)").stdout.strip() == "new"
    assert _stamp_key(venv) == again["key"] != old["key"]
    assert not glob.glob(os.path.join(venv.site, ".gpufleet-deep_ep-*"))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "tampered"])
def test_a_wheel_that_does_not_match_its_record_is_refused_by_name(module_runner, tmp_path, nvshmem_root, damage):
    builder = Venv(tmp_path / "builder").set_torch("2.11.0")
    built = module_runner(deepep_build, _args(builder, tmp_path, nvshmem_root, install=False))
    assert built["built"] and not built["installed"]
    copied = tmp_path / "from-store"
    shutil.copytree(os.path.dirname(built["wheel"]), copied)
    wheel = copied / os.path.basename(built["wheel"])
    data = wheel.read_bytes()
    wheel.write_bytes(data[:len(data) // 2] if damage == "truncated" else data[:-1] + bytes([data[-1] ^ 1]))

    other = Venv(tmp_path / "other").set_torch("2.11.0")
    refused = module_runner(deepep_build, {"wheel": str(wheel), "python": other.python, "arch_list": "9.0",
                                           "nvshmem_root": nvshmem_root, "cuda_home": CUDA_HOME,
                                           "artifact_dir": str(tmp_path / "other-artifacts")})
    assert refused.failed and not refused["installed"]
    assert "%s has sha256 " % wheel in refused["msg"] and "nothing was installed" in refused["msg"]
    assert refused["commands"] == [] and other.run("import deep_ep").returncode != 0


def test_a_second_build_of_one_artifact_dir_refuses_and_leaves_the_first_ones_staging(module_runner, tmp_path,
                                                                                      nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    args = _args(venv, tmp_path, nvshmem_root, lock_timeout=0)
    staging = tmp_path / "artifacts" / ".staging-0123abcd"
    ready = tmp_path / "first.ready"
    # The first build: another process that holds the lock beside the artifact directory and builds in its staging.
    with first_build_holding_the_lock(args["artifact_dir"], staging, ready) as first:
        _wait_for(ready, first, "the first build's lock")
        second = module_runner(deepep_build, args)
        assert second.failed and not second["built"] and not second["installed"]
        assert "another DeepEP build of %s is running" % args["artifact_dir"] in second["msg"]
        assert str(tmp_path / ".artifacts.lock") in second["msg"] and "pid %d" % first.pid in second["msg"]
        assert staging.is_dir() and venv.run("import deep_ep").returncode != 0
        # A plan (check mode) takes no lock.
        plan = module_runner(deepep_build, args, check_mode=True)
        assert not plan.failed and plan["would_build"]
    assert first.returncode == 0


# --- messages name the option the user set; check mode gives the real run's verdict ----------------------------


def test_a_malformed_gpu_arch_list_is_named_as_gpu_arch_list(module_runner, tmp_path, nvshmem_root):
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    result = module_runner(deepep_build, _args(venv, tmp_path, nvshmem_root, arch_list=None, gpu_arch_list="10,0"),
                           check_mode=True)
    assert result.failed and "arch_list_malformed: gpu_arch_list: arch list '10,0'" in result["msg"]
    assert "Fix: write gpu_arch_list as TORCH_CUDA_ARCH_LIST does" in result["msg"]
    assert "write arch_list" not in result["msg"]


@pytest.mark.parametrize("option", ["wheel", "env_script"])
def test_a_directory_given_as_a_file_option_is_named(module_runner, tmp_path, option):
    venv = Venv(tmp_path / "venv")
    args = {"python": venv.python, "arch_list": "9.0", "artifact_dir": str(tmp_path / "artifacts"),
            "src": str(_tree(tmp_path, "deepep-v1-fixture")), option: str(tmp_path)}
    if option == "wheel":
        del args["src"]
    result = module_runner(deepep_build, args, check_mode=True)
    assert result.failed and result["msg"].startswith("%s %s is a directory; expected " % (option, tmp_path))


def test_check_mode_refuses_a_wheel_that_does_not_match_its_record_as_the_install_does(
        module_runner, tmp_path, nvshmem_root):
    """No build needed: a wheel whose build record names another sha256 is refused by the plan too."""
    store = tmp_path / "from-store"
    store.mkdir()
    wheel = store / "deep_ep-1.2.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK not really a wheel")
    (store / "build.json").write_text(json.dumps({
        "key": "k" * 64, "generation": "v1", "wheel_name": wheel.name, "wheel_sha256": "0" * 64, "version": "1.2.1",
        "inputs": {"arch_list": "9.0"}}))
    venv = Venv(tmp_path / "venv").set_torch("2.11.0")
    args = {"wheel": str(wheel), "python": venv.python, "arch_list": "9.0", "nvshmem_root": nvshmem_root,
            "cuda_home": CUDA_HOME, "artifact_dir": str(tmp_path / "artifacts")}
    plan = module_runner(deepep_build, args, check_mode=True)
    real = module_runner(deepep_build, args)
    for result in (plan, real):
        assert result.failed and not result.get("would_install") and not result["installed"]
        assert "%s has sha256 " % wheel in result["msg"] and "its build record says %s" % ("0" * 64) in result["msg"]
    assert plan["msg"] == real["msg"] and real["commands"] == []
    assert venv.run("import deep_ep").returncode != 0


def _nvshmem_as(tmp_path, nvshmem_root, version):
    """A copy of the nvshmem-fixture install whose header says ``version`` (what deepep_build reads first)."""
    root = tmp_path / ("nvshmem-%s" % version)
    shutil.copytree(nvshmem_root, root, symlinks=True)
    major, minor, patch = version.split(".")
    header = root / "include" / "nvshmem_version.h"
    text = header.read_text()
    for name, value in (("MAJOR", major), ("MINOR", minor), ("PATCH", patch)):
        text = re.sub(r"(#define NVSHMEM_VENDOR_%s_VERSION) \d+" % name, r"\g<1> %s" % value, text)
    header.write_text(text)
    return str(root)


def test_an_unfixed_v1_tree_is_refused_on_nvshmem_3_8_for_internode_and_recorded_when_fixed(module_runner, tmp_path,
                                                                                            nvshmem_root):
    """DeepEP #553/#707: a V1 tree without #564 indexes NVSHMEM >= 3.5.19's RC QPs PE-major; refused before compiling
    for an internode build, and a fixed tree (the fixture, as 567632d) records its layout in the build's facts."""
    venv = Venv(tmp_path / "venv").set_torch("2.11.0+cu130")
    newer = _nvshmem_as(tmp_path, nvshmem_root, "3.8.0")
    unfixed = _tree(tmp_path, "deepep-v1-fixture")
    device = unfixed / "csrc" / "kernels" / "ibgda_device.cuh"
    device.write_text(device.read_text().replace("ibgda_get_rc_impl", "ibgda_get_rc"))
    for check_mode in (True, False):
        result = module_runner(deepep_build, _args(venv, tmp_path, newer, internode=True), check_mode=check_mode)
        assert result.failed and [f["check"] for f in result["preflight"]["failures"]] == ["nvshmem_rc_layout"]
        assert "NVSHMEM 3.8.0 stores them QP-major since 3.5.19" in result["msg"] and "29d31c0" in result["msg"]
        assert result["commands"] == [] and not (tmp_path / "artifacts").exists()
    # Intranode only: built, with the warning and the record.
    intranode = module_runner(deepep_build, _args(venv, tmp_path, newer, internode=False), check_mode=True)
    assert not intranode.failed
    assert any("this build: v1, intranode only" in w for w in intranode["preflight"]["warnings"])
    fixed = tmp_path / "fixed"
    shutil.copytree(mirror.assemble_source("deepep-v1-fixture", tmp_path / "fresh"), fixed)
    plan = module_runner(deepep_build, _args(venv, tmp_path, newer, src=str(fixed), internode=True), check_mode=True,
                         diff=True)
    assert not plan.failed, plan.get("msg")
    assert json.loads(plan["diff"]["after"])["nvshmem_rc_layout"] == {
        "tree": {"fix": "#564", "selects": "state_type", "runtime_check": False, "file": "csrc/kernels/ibgda_device.cuh"},
        "compiled": "qp_major"}
