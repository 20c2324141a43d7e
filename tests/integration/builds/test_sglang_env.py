# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.sglang_env against a real virtualenv and the fleetsim SGLang fixture wheels, installed by pip
itself: the fixture sglang 0.5.19 requires sgl-deep-ep, whose top-level deep_ep overwrites the collection's and whose
metadata moves torch to 2.14.1 and NCCL to 2.27.5 when nothing holds them. Real pip runs in virtualenvs: the build
tier of the integration tests (the parsing and the decisions without a virtualenv: tests/unit/test_sglang_model.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unit_helpers import REPO, run_module

from ansible_collections.gpufleet.deepep.plugins.modules import sglang_env
from tools.fleetsim.mirror import build_fixture_wheels, fixture_wheel


def _tree(root: Path, name: str, files: dict) -> Path:
    tree = root / name
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    return tree


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """The fleetsim fixture wheels plus stand-ins of what the mirror gets elsewhere: the CPU torch 2.13.0, numpy,
    and the DeepEP wheel the collection builds."""
    root = tmp_path_factory.mktemp("wheels")
    out = root / "wheels"
    build_fixture_wheels(REPO / "tools" / "fleetsim" / "fixtures" / "wheels", out, quiet=True)
    trees = root / "trees"
    fixture_wheel(_tree(trees, "torch-2.13.0+cpu", {"torch/__init__.py": "__version__ = '2.13.0+cpu'\n",
                                                    "torch/version.py": "cuda = None\n"}), out)
    fixture_wheel(_tree(trees, "numpy-2.0.0", {"numpy/__init__.py": "__version__ = '2.0.0'\n"}), out)
    fixture_wheel(_tree(trees, "deep_ep-1.2.1", {"deep_ep/__init__.py": "from .buffer import Buffer\n",
                                                 "deep_ep/buffer.py": "class Buffer:\n    collection = True\n"}),
                  root / "deepep")
    return root


@pytest.fixture(autouse=True)
def no_host_pip_config(monkeypatch):
    """Only the wheels of the test: the host's pip configuration (find-links, indexes) stays out."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in [n for n in os.environ if n.startswith("PIP_") and n != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def base_env(wheels, tmp_path_factory):
    """A virtualenv with torch 2.13.0+cpu, NCCL 2.28.3 and the collection's DeepEP (with deepep_build's stamp)."""
    tmp_path = tmp_path_factory.mktemp("base")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # pip from the test interpreter, run against the venv through --python (no network, no ensurepip).
    python = venv / "bin" / "python"
    site = next((venv / "lib").glob("python*/site-packages"))
    pip_src = Path(subprocess.run([sys.executable, "-c", "import pip, os; print(os.path.dirname(pip.__file__))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (site / "pip").symlink_to(pip_src)
    deepep_wheel = next((wheels / "deepep").glob("deep_ep-*.whl"))
    pip(python, wheels, "torch==2.13.0+cpu", "nvidia-nccl-cu12==2.28.3", "nvidia-cudnn-cu12==9.16.0.29",
        str(deepep_wheel), "--no-deps")
    (site / "deep_ep" / ".gpufleet-build.json").write_text(json.dumps(
        {"key": "k1", "wheel": str(deepep_wheel), "built_against": {"torch": "2.13.0+cpu"}}))
    nvshmem = tmp_path / "nvshmem"
    (nvshmem / "lib").mkdir(parents=True)
    (nvshmem / "lib" / "libnvshmem_host.so.3").write_text("")
    proc = tmp_path / "proc"
    (proc / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (proc / "proc" / "modules").write_text("nvidia 1 0 - Live 0x0\n")
    (proc / "proc" / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05\n")
    (proc / "proc" / "sys" / "kernel").mkdir(parents=True)
    (proc / "proc" / "sys" / "kernel" / "osrelease").write_text("6.8.0-1015-gcp\n")
    return {"python": str(python), "site": site, "wheels": str(wheels / "wheels"), "nvshmem": str(nvshmem),
            "proc": str(proc), "venv": venv, "root": tmp_path}


@pytest.fixture()
def env(base_env, tmp_path):
    """A copy of the base environment for one test (the venv is relocated by path: nothing in it is absolute
    except pyvenv.cfg's home, which stays right)."""
    shutil.copytree(base_env["root"], tmp_path / "root", symlinks=True)
    root = tmp_path / "root"
    venv = root / "venv"
    site = next((venv / "lib").glob("python*/site-packages"))
    return {"python": str(venv / "bin" / "python"), "site": site, "wheels": base_env["wheels"],
            "nvshmem": str(root / "nvshmem"), "proc": str(root / "proc"), "venv": venv}


def pip(python, wheels, *args):
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-index",
                    "--find-links", str(wheels / "wheels"), *args], check=True, timeout=300,
                   env=dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=""))


def args(env, **extra):
    out = {"python": env["python"], "find_links": [env["wheels"]], "no_index": True, "sysfs_root": env["proc"],
           "nvshmem_home": env["nvshmem"], "cuda_home": "/nonexistent-cuda", "timeout": 600}
    out.update(extra)
    return out


PRESENT = {"state": "present", "version": "0.5.19", "transfer_engine": "nixl", "cuda_version": "12.9",
           "hold": {"torch": "", "nvidia-nccl-cu12": "2.28.3", "nvidia-cudnn-cu12": "9.16.0.29",
                    "nvidia-cusparselt-cu12": "0.7.1"}}


def facts(env):
    result = run_module(sglang_env, args(env))
    assert not result.failed, result.get("msg")
    return result["ansible_facts"]["gpufleet_sglang"]


def test_facts_of_a_deepep_environment(env):
    f = facts(env)
    assert f["versions"]["sglang"] is None and f["versions"]["torch"] == "2.13.0+cpu"
    assert f["versions"]["nccl"] == "2.28.3" and f["versions"]["nccl_package"] == "nvidia-nccl-cu12"
    assert f["deep_ep"]["collection"] is True and f["deep_ep"]["file"].endswith("deep_ep/__init__.py")
    assert f["torch_cuda"] is None and f["virtualenv"] is True
    assert f["transfer"] == {"peermem_loaded": False, "open_kernel_module": True, "kernel": "6.8.0-1015-gcp",
                             "dmabuf": True}
    assert f["ld_library_path"][0] == os.path.join(env["nvshmem"], "lib") and f["nvshmem_ok"] is True
    assert f["libraries"]["libcudnn.so.9"].endswith("nvidia/cudnn/lib/libcudnn.so.9")
    assert f["libraries"]["libcusparseLt.so.0"] is None


def test_present_installs_sglang_without_sgl_deep_ep_and_holds_the_pins(env):
    check = run_module(sglang_env, args(env, **PRESENT), check_mode=True)
    assert not check.failed and check["changed"], check.get("msg")
    assert not (env["venv"] / "gpufleet-constraints.txt").exists()
    assert facts(env)["versions"]["sglang"] is None

    first = run_module(sglang_env, args(env, **PRESENT))
    assert not first.failed, (first.get("msg"), first.get("stderr"))
    f = first["ansible_facts"]["gpufleet_sglang"]
    assert f["versions"]["sglang"] == "0.5.19" and f["versions"]["kernel_package"] == "sglang-kernel"
    assert f["versions"]["kernel"] == "0.4.10" and f["versions"]["flashinfer"] == "0.7.2"
    assert f["versions"]["sgl_deep_ep"] is None and f["deep_ep"]["collection"] is True
    assert f["versions"]["torch"] == "2.13.0+cpu" and f["versions"]["nccl"] == "2.28.3"
    assert f["versions"]["nixl_package"] == "nixl-cu12" and f["nixl_cuda_major"] == 12
    assert f["versions"]["cusparselt"] == "0.7.1" and f["libraries"]["libcusparseLt.so.0"]
    assert f["moved"] == [] and first["excluded_requirements"] == ["sgl-deep-ep==0.1.2.post1"]
    constraints = (env["venv"] / "gpufleet-constraints.txt").read_text()
    for line in ("torch==2.13.0+cpu", "nvidia-nccl-cu12==2.28.3", "deep-ep==1.2.1"):
        assert line in constraints.splitlines()
    assert str(env["venv"] / "gpufleet-constraints.txt") in (env["venv"] / "pip.conf").read_text()

    second = run_module(sglang_env, args(env, **PRESENT))
    assert not second.failed and second["changed"] is False, second["reasons"]


def test_an_unconstrained_install_is_detected_and_repaired(env):
    assert not run_module(sglang_env, args(env, **PRESENT)).failed
    # What a user's plain `pip install sglang` does, with the environment's pip.conf out of the way.
    subprocess.run([env["python"], "-m", "pip", "install", "-q", "--no-index", "--find-links", env["wheels"],
                    "--force-reinstall", "sglang==0.5.19"], check=True, timeout=300,
                   env=dict(os.environ, PIP_CONFIG_FILE=os.devnull))
    f = facts(env)
    assert f["versions"]["torch"] == "2.14.1" and f["versions"]["nccl"] == "2.27.5"
    assert f["versions"]["sgl_deep_ep"] == "0.1.2.post1" and f["deep_ep"]["collection"] is False
    assert any("sgl-deep-ep" in r for r in f["deep_ep"]["reasons"])
    assert any(m.startswith("torch is 2.14.1, held at 2.13.0+cpu") for m in f["moved"])

    repaired = run_module(sglang_env, args(env, **PRESENT))
    assert not repaired.failed, (repaired.get("msg"), repaired.get("stderr"))
    assert repaired["changed"] and any("sgl-deep-ep" in r for r in repaired["repaired"])
    f = repaired["ansible_facts"]["gpufleet_sglang"]
    assert f["versions"]["torch"] == "2.13.0+cpu" and f["versions"]["nccl"] == "2.28.3"
    assert f["versions"]["sgl_deep_ep"] is None and f["deep_ep"]["collection"] is True and f["moved"] == []
    assert run_module(sglang_env, args(env, **PRESENT))["changed"] is False


def test_repair_false_names_what_moved(env):
    assert not run_module(sglang_env, args(env, **PRESENT)).failed
    pip(Path(env["python"]), Path(env["wheels"]).parent, "--force-reinstall", "--no-deps", "nvidia-nccl-cu12==2.27.5")
    # The constraint holds NCCL: the pip above bypassed it with PIP_CONFIG_FILE; the module sees it moved.
    result = run_module(sglang_env, args(env, repair=False, **PRESENT), check_mode=True)
    assert not result.failed and any("nvidia-nccl-cu12 is 2.27.5, held at 2.28.3" in r for r in result["reasons"])


def test_mooncake_is_refused_without_peermem_or_dmabuf(env):
    result = run_module(sglang_env, args(env, **{**PRESENT, "transfer_engine": "mooncake"}))
    assert result.failed and "Use NIXL" in result["msg"] and "nvidia_peermem is not loaded" in result["msg"]
    (Path(env["proc"]) / "proc" / "modules").write_text("nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 - Live 0x0\n")
    ok = run_module(sglang_env, args(env, **{**PRESENT, "transfer_engine": "mooncake"}), check_mode=True)
    assert not ok.failed and any("mooncake-transfer-engine" in r for r in ok["reasons"])


def test_nixl_needs_a_cuda_for_a_cpu_torch(env):
    present = dict(PRESENT)
    present.pop("cuda_version")
    result = run_module(sglang_env, args(env, **present), check_mode=True)
    assert result.failed and "cuda_version" in result["msg"] and "nixl-cu12/nixl-cu13" in result["msg"]


def test_wheelhouse_checksums_are_checked(env, tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    wheel = sorted(Path(env["wheels"]).glob("sglang-0.5.19-*.whl"))[0]
    (house / wheel.name).write_bytes(wheel.read_bytes())
    result = run_module(sglang_env, args(env, wheelhouse=str(house), **PRESENT))
    assert result.failed and "SHA256SUMS" in result["msg"]
    (house / "SHA256SUMS").write_text("%s  %s\n" % ("0" * 64, wheel.name))
    result = run_module(sglang_env, args(env, wheelhouse=str(house), **PRESENT))
    assert result.failed and "failed its checksums" in result["msg"] and wheel.name in result["msg"]


def test_held_torch_conflict_is_named(env):
    """sglang 0.5.8 requires torch 2.9.1: with torch held at 2.13.0 the install fails naming the conflict."""
    result = run_module(sglang_env, args(env, **{**PRESENT, "version": "0.5.8", "transfer_engine": "none"}))
    assert result.failed and "conflict with what the constraints file" in result["msg"]
    assert facts(env)["versions"]["torch"] == "2.13.0+cpu"


def test_no_collection_deepep_fails_with_the_fix(env):
    os.unlink(env["site"] / "deep_ep" / ".gpufleet-build.json")
    result = run_module(sglang_env, args(env, **PRESENT))
    assert result.failed and "run the deepep role" in result["msg"]
    # A check run before site.yml installed DeepEP predicts instead of failing.
    check = run_module(sglang_env, args(env, **PRESENT), check_mode=True)
    assert not check.failed and check["changed"] and any("deepep role" in r for r in check["reasons"])


# ------------------------------------------------------------------- hash-pinned installs (requirements_hashes)
def _pins(wheels, *names):
    """``project==version -> [sha256]`` of the fixture wheels named (``<dist>-<version>``); reproducible wheels, so
    the digests are those of any build of the mirror."""
    import hashlib

    out = {}
    for name in names:
        (wheel,) = [w for w in (Path(wheels)).glob("*.whl") if w.name.startswith(name + "-")]
        dist, version = name.rsplit("-", 1)
        out["%s==%s" % (dist.replace("_", "-"), version)] = [hashlib.sha256(wheel.read_bytes()).hexdigest()]
    return out


LOCK = ("sglang-0.5.19", "sglang_kernel-0.4.10", "flashinfer_python-0.7.2", "nixl_cu12-1.5.1",
        "nvidia_cusparselt_cu12-0.7.1", "numpy-2.0.0")


def test_present_with_requirements_hashes_installs_every_package_hash_checked(env):
    pins = _pins(env["wheels"], *LOCK)
    result = run_module(sglang_env, args(env, requirements_hashes=pins, **PRESENT))
    assert not result.failed, (result.get("msg"), result.get("stderr"))
    f = result["ansible_facts"]["gpufleet_sglang"]
    assert f["versions"]["sglang"] == "0.5.19" and f["versions"]["kernel"] == "0.4.10" and f["moved"] == []
    installs = [c for c in result["commands"] if c[c.index("-m") + 1:c.index("-m") + 3] == ["pip", "install"]]
    assert installs and all("--require-hashes" in c for c in installs), installs
    assert any(line.startswith("sglang==0.5.19 --hash=sha256:") for line in result["hashed_requirements"]) or \
        any(line.startswith("nixl-cu12==1.5.1 --hash=sha256:") for line in result["hashed_requirements"])


def test_a_digest_that_does_not_match_the_download_fails_the_install(env):
    pins = _pins(env["wheels"], *LOCK)
    pins["sglang==0.5.19"] = ["0" * 64]
    result = run_module(sglang_env, args(env, requirements_hashes=pins, **PRESENT))
    assert result.failed
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.get("stderr", ""), result.get("stderr")
    assert facts(env)["versions"]["sglang"] is None


def test_a_package_without_an_entry_is_named_before_pip_runs(env):
    pins = _pins(env["wheels"], *LOCK[1:])
    result = run_module(sglang_env, args(env, requirements_hashes=pins, **PRESENT))
    assert result.failed
    assert result["msg"].startswith("requirements_hashes has no entry for sglang ('sglang==0.5.19')"), result["msg"]
    assert "expected sglang==<version>: [<sha256>, ...]" in result["msg"]
    assert facts(env)["versions"]["sglang"] is None


# ----------------------------------------------------------------------------- the hash lock (state=lock)
LOCKED = {**PRESENT, "state": "lock"}


def _digest(path):
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_lock_resolves_the_closure_with_the_digests_of_the_files_pip_chose_and_writes_nothing(env, check_mode):
    constraints = Path(env["venv"]) / "gpufleet-constraints.txt"
    before = constraints.read_text() if constraints.exists() else None
    result = run_module(sglang_env, args(env, **LOCKED), check_mode=check_mode)
    assert not result.failed, (result.get("msg"), result.get("stderr"))
    assert result["changed"] is False
    lock = result["requirements_hashes"]
    # SGLang, its kernel, its requirements, the NIXL build of the asked CUDA, and the held projects (for a repair)
    for key in ("sglang==0.5.19", "sglang-kernel==0.4.10", "nixl-cu12==1.5.1", "torch==2.13.0+cpu",
                "nvidia-nccl-cu12==2.28.3", "nvidia-cudnn-cu12==9.16.0.29"):
        assert key in lock, (key, sorted(lock))
    # sgl-deep-ep (its deep_ep would shadow the collection's) is left out as the install leaves it out, and said so
    assert not any(k.startswith("sgl-deep-ep==") for k in lock)
    assert [k for k in result["lock"]["excluded"] if k.startswith("sgl-deep-ep")], result["lock"]
    assert result["lock"]["unlocked_holds"] == [] and result["lock"]["packages"] == len(lock)
    wheels = {w.name: w for w in Path(env["wheels"]).rglob("*.whl")}
    (sglang_wheel,) = [w for n, w in wheels.items() if n.startswith("sglang-0.5.19-")]
    assert lock["sglang==0.5.19"] == [_digest(sglang_wheel)]
    # a dry run: nothing installed, the node's constraints file untouched
    assert facts(env)["versions"]["sglang"] is None
    assert (constraints.read_text() if constraints.exists() else None) == before


def test_present_installs_hash_checked_from_the_lock_it_made(env):
    lock = run_module(sglang_env, args(env, **LOCKED))
    assert not lock.failed, (lock.get("msg"), lock.get("stderr"))
    result = run_module(sglang_env, args(env, requirements_hashes=lock["requirements_hashes"], **PRESENT))
    assert not result.failed, (result.get("msg"), result.get("stderr"))
    installs = [c for c in result["commands"] if c[c.index("-m") + 1:c.index("-m") + 3] == ["pip", "install"]]
    assert installs and all("--require-hashes" in c for c in installs), installs
    f = result["ansible_facts"]["gpufleet_sglang"]
    assert f["versions"]["sglang"] == "0.5.19" and f["moved"] == [] and f["versions"]["sgl_deep_ep"] is None


def test_a_held_project_the_sources_do_not_offer_is_left_out_of_the_lock_and_named(env):
    # torch from another index (+cu130) is installed and held; the mirror has only +cpu
    old = next(Path(env["site"]).glob("torch-2.13.0+cpu.dist-info"))
    meta = (old / "METADATA").read_text().replace("Version: 2.13.0+cpu", "Version: 2.13.0+cu130")
    new = old.with_name("torch-2.13.0+cu130.dist-info")
    old.rename(new)
    (new / "METADATA").write_text(meta)
    result = run_module(sglang_env, args(env, **{**LOCKED, "cuda_version": "13.0"}))
    assert not result.failed, (result.get("msg"), result.get("stderr"))
    assert result["lock"]["unlocked_holds"] == ["torch==2.13.0+cu130"]
    assert any(r.startswith("torch==2.13.0+cu130 is held but left out of the lock: ERROR:") for r in result["reasons"])
    assert not any(k.startswith("torch==") for k in result["requirements_hashes"])
    assert "nvidia-nccl-cu12==2.28.3" in result["requirements_hashes"]
    assert "nixl-cu13==1.5.1" in result["requirements_hashes"]      # the NIXL build of torch's CUDA 13


def test_a_lock_is_refused_where_sglang_is_installed_naming_why(env):
    pip(env["python"], Path(env["wheels"]).parent, "sglang==0.5.19", "--no-deps")
    result = run_module(sglang_env, args(env, **LOCKED))
    assert result.failed and "sglang 0.5.19 is installed in" in result["msg"]
    assert "a lock made here would leave out what is installed" in result["msg"]


def test_a_lock_that_cannot_be_resolved_names_what_was_asked(env):
    result = run_module(sglang_env, args(env, **{**LOCKED, "version": "0.5.99"}))
    assert result.failed and "pip could not resolve sglang==0.5.99" in result["msg"], result["msg"]
