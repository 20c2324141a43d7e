# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL EP's install and facts: module nccl_ep_env, node_stack's nccl_ep set (the same reader, _comm/nccl_ep) and the
audit's NCCL_EP_* rules.

The environments are real virtualenvs of /usr/bin/python3 (``--without-pip --system-site-packages``); NCCL EP's stack
is the simulated fleet's fixture wheels (nccl-extensions 0.1.0 with the real wheel's requirements, nccl4py, cuda-core,
cuda-bindings, cuda-pathfinder; nvidia-nccl-cu13 2.28.9 / 2.30.7), packed by the mirror's own code into an offline
wheelhouse with its SHA256SUMS, as a site makes one. numpy (a requirement of nccl-extensions) is the test
environment's own, made visible to the virtualenv by a path file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy
import pytest
import yaml

from unit_helpers import FIXTURES, REPO, run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import nccl_ep as _ep
from ansible_collections.gpufleet.deepep.plugins.modules import nccl_ep_env, node_stack
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules, validate_rules
from tools.fleetsim.mirror import build_fixture_wheels

SYSTEM_PYTHON = "/usr/bin/python3"
WHEELS = REPO / "tools" / "fleetsim" / "fixtures" / "wheels"
EP_DISTS = ("nccl_extensions-0.1.0", "nccl4py-0.6.0", "cuda_core-1.2.2", "cuda_bindings-13.5.0",
            "cuda_pathfinder-1.9.1")
CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())

pytestmark = pytest.mark.skipif(
    not (os.access(SYSTEM_PYTHON, os.X_OK)
         and subprocess.run([SYSTEM_PYTHON, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0),
    reason="needs /usr/bin/python3 with pip")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def fixture_wheels(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    build_fixture_wheels(WHEELS, out, quiet=True)
    return out


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory, fixture_wheels) -> Path:
    """NCCL EP's offline wheelhouse: its five wheels and SHA256SUMS."""
    house = tmp_path_factory.mktemp("nccl-ep-wheelhouse")
    for dist in EP_DISTS:
        (wheel,) = fixture_wheels.glob(dist + "-*.whl")
        shutil.copy(wheel, house / wheel.name)
    (house / "SHA256SUMS").write_text("".join("%s  %s\n" % (sha256(w), w.name) for w in sorted(house.glob("*.whl"))))
    return house


def pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, env=env, check=False)


def make_venv(tmp_path: Path, fixture_wheels: Path, nccl: str | None = "nvidia-nccl-cu13==2.30.7") -> dict:
    root = tmp_path / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", str(root)], check=True)
    python = root / "bin" / "python"
    site = next((root / "lib").glob("python3*/site-packages"))
    # numpy of the test environment, and only numpy, on the virtualenv's path
    shared = tmp_path / "numpy-site"
    shared.mkdir()
    numpy_dir = Path(numpy.__file__).parent
    (shared / "numpy").symlink_to(numpy_dir)
    (info,) = numpy_dir.parent.glob("numpy-%s.dist-info" % numpy.__version__)
    (shared / info.name).symlink_to(info)
    (site / "gpufleet-test-numpy.pth").write_text(str(shared) + "\n")
    if nccl:
        proc = pip(python, "install", "-q", "--no-index", "--find-links", str(fixture_wheels), "--no-deps", nccl)
        assert proc.returncode == 0, proc.stderr
    return {"root": root, "python": python, "site": site}


@pytest.fixture
def venv(tmp_path, fixture_wheels):
    return make_venv(tmp_path, fixture_wheels)


def present(env, wheelhouse, **extra):
    args = {"python": str(env["python"]), "state": "present", "version": "0.1.0", "wheelhouse": str(wheelhouse),
            "compute_capabilities": ["10.0"] * 8, "gpus_per_node": 8, "job_nodes": 2,
            "env_script": str(env["root"] / "no-env.sh")}
    args.update(extra)
    return args


def ep_facts(result) -> dict:
    return result["ansible_facts"]["gpufleet_nccl_ep"]


def checks(facts) -> dict:
    return dict((c["check"], c["status"]) for c in facts["checks"])


# ------------------------------------------------------------------------------------------------ the module

def test_check_mode_predicts_then_installs_then_nothing_to_do(venv, wheelhouse):
    before = sorted(p.name for p in venv["site"].iterdir())
    predicted = run_module(nccl_ep_env, present(venv, wheelhouse), check_mode=True)
    assert not predicted.failed, predicted.get("msg")
    assert predicted["changed"] is True
    assert predicted["reasons"] == ["nccl-extensions is not installed in %s" % venv["python"]]
    assert sorted(p.name for p in venv["site"].iterdir()) == before, "check mode wrote into the environment"

    done = run_module(nccl_ep_env, present(venv, wheelhouse))
    assert not done.failed, done.get("msg")
    assert done["changed"] is True
    facts = ep_facts(done)
    assert facts["installed"] and facts["version"] == "0.1.0"
    assert facts["library"].endswith("nccl/ep/lib/cu13/libnccl_ep.so") and facts["library_cuda"] == 13
    assert facts["requires_nccl"] == "2.30.7"
    assert facts["nccl"] == {"package": "nvidia-nccl-cu13", "version": "2.30.7", "package_version": "2.30.7",
                             "cuda_major": 13}
    assert facts["missing"] == []
    assert facts["dependencies"]["cuda-bindings"] == "13.5.0" and facts["dependencies"]["numpy"] == numpy.__version__
    assert set(checks(facts).values()) == {"pass"}
    argv = done["commands"][-1]
    assert argv[argv.index("--find-links") + 1] == str(wheelhouse) and "--no-index" in argv
    assert argv[-2:] == ["nccl-extensions==0.1.0", "cuda-bindings==13.*"]

    again = run_module(nccl_ep_env, present(venv, wheelhouse))
    assert not again.failed and again["changed"] is False and again["reasons"] == []

    # node_stack's nccl_ep set reads the same facts (the audit's path)
    gathered = run_module(node_stack, {"gather": ["nccl_ep"], "python": str(venv["python"]),
                                       "env_script": str(venv["root"] / "no-env.sh")})
    assert not gathered.failed, gathered.get("msg")
    assert gathered["ansible_facts"]["gpufleet_nccl_ep"] == dict(facts, checks=[
        c for c in facts["checks"] if c["check"] != "gpu_arch"])


def test_a_missing_dependency_is_put_back(venv, wheelhouse):
    assert not run_module(nccl_ep_env, present(venv, wheelhouse)).failed
    assert pip(venv["python"], "uninstall", "-y", "-q", "cuda-bindings").returncode == 0
    read = run_module(nccl_ep_env, {"python": str(venv["python"])})
    assert ep_facts(read)["missing"] == ["cuda-bindings"] and checks(ep_facts(read))["dependencies"] == "fail"
    fixed = run_module(nccl_ep_env, present(venv, wheelhouse))
    assert not fixed.failed and fixed["changed"] is True
    assert fixed["reasons"] == ["nccl.ep imports cuda-bindings, not installed"]
    assert ep_facts(fixed)["missing"] == []


def test_a_wheel_that_fails_its_checksum_installs_nothing(venv, wheelhouse, tmp_path):
    house = tmp_path / "house"
    shutil.copytree(wheelhouse, house)
    (wheel,) = house.glob("nccl_extensions-*.whl")
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    result = run_module(nccl_ep_env, present(venv, house))
    assert result.failed
    assert "failed its checksums, nothing installed" in result["msg"] and wheel.name in result["msg"]
    assert not list(venv["site"].glob("nccl_extensions-*"))


def test_a_wheelhouse_without_its_checksums_installs_nothing(venv, wheelhouse, tmp_path):
    house = tmp_path / "house"
    shutil.copytree(wheelhouse, house)
    (house / "SHA256SUMS").unlink()
    result = run_module(nccl_ep_env, present(venv, house))
    assert result.failed and "has no readable SHA256SUMS and wheelhouse_checksums is unset" in result["msg"]
    given = dict((w.name, sha256(w)) for w in house.glob("*.whl"))
    done = run_module(nccl_ep_env, present(venv, house, wheelhouse_checksums=given))
    assert not done.failed and done["changed"], done.get("msg")


@pytest.mark.parametrize("change, words", [
    ({"nccl": "nvidia-nccl-cu13==2.28.9"}, "NCCL EP needs NCCL 2.30.7 exactly; the environment has nvidia-nccl-cu13 2.28.9"),
    ({"nccl": None}, "the environment has no NCCL pip package"),
    ({"args": {"compute_capabilities": ["8.0"] * 8}}, "Hopper or Blackwell (compute capability 9.0 or newer); the node's GPUs are 8.0"),
    ({"args": {"job_nodes": 9}}, "the EP group spans 9 nodes; NCCL EP v0.1 supports up to 8"),
    ({"args": {"job_nodes": 8, "gpus_per_node": 9}}, "the EP group spans 72 GPUs (8 nodes x 9); NCCL EP v0.1 supports up to 64"),
])
def test_outside_the_limits_is_refused_by_name_and_nothing_installed(tmp_path, fixture_wheels, wheelhouse, change,
                                                                     words):
    env = make_venv(tmp_path, fixture_wheels, nccl=change.get("nccl", "nvidia-nccl-cu13==2.30.7"))
    result = run_module(nccl_ep_env, present(env, wheelhouse, **change.get("args", {})))
    assert result.failed
    assert result["msg"].startswith("NCCL EP 0.1.0 is refused on this node, nothing installed: ")
    assert words in result["msg"]
    assert result["commands"] == [] and not list(env["site"].glob("nccl_extensions-*"))


def test_the_nccl_is_what_its_header_says_a_source_build_over_the_package_included(venv, wheelhouse):
    """The nccl role's source build is copied over the pip package's files: the metadata keeps the old version, the
    header says the NCCL that loads. NCCL EP is judged (and installed) on the header's."""
    header = next(venv["site"].glob("nvidia/nccl/include/nccl.h"))
    text = header.read_text()
    assert "#define NCCL_MINOR 30" in text
    read = ep_facts(run_module(nccl_ep_env, {"python": str(venv["python"])}))
    assert read["nccl"]["version"] == read["nccl"]["package_version"] == "2.30.7"
    header.write_text(text.replace("#define NCCL_MINOR 30", "#define NCCL_MINOR 32").replace(
        "#define NCCL_PATCH 7", "#define NCCL_PATCH 3"))
    result = run_module(nccl_ep_env, present(venv, wheelhouse))
    assert result.failed and "the environment has nvidia-nccl-cu13 2.32.3" in result["msg"], result.get("msg")


def test_cuda_12_is_refused():
    facts = dict(_ep.empty_facts(), torch_cuda="12.9",
                 nccl={"package": "nvidia-nccl-cu12", "version": "2.30.7", "cuda_major": 12})
    assert _ep.refusals(facts, "2.30.7", ["9.0"], 1, 8) == [
        "torch is built for CUDA 12.9; NCCL EP v0.1 runs on CUDA 13 only (torch +cu130 or newer)"]
    facts["torch_cuda"] = None
    assert _ep.refusals(facts, "2.30.7", ["9.0"], 1, 8) == [
        "the environment's NCCL is nvidia-nccl-cu12; NCCL EP v0.1 runs on CUDA 13 only (nvidia-nccl-cu13)"]


@pytest.mark.parametrize("args, words", [
    ({"version": "v0.1"}, "version 'v0.1': expected a release N.N.N such as 0.1.0"),
    ({"compute_capabilities": ["sm90"]}, "compute capability 'sm90': expected MAJOR.MINOR such as 9.0"),
    ({"job_nodes": 0}, "job_nodes 0 and gpus_per_node 8: expected positive integers"),
    ({"requirements_hashes": {"nccl-extensions": ["0" * 64]}},
     "requirements_hashes 'nccl-extensions': the key is not project==version; expected project==version: [<sha256>"),
    ({"requirements_hashes": {"nvidia-nccl-cu13==2.30.7": ["0" * 64]}}, "NCCL is the nccl role's pin"),
    ({"requirements_hashes": {"numpy==2.4.6": ["zz"]}}, "['zz'] is not a list of sha256 digests; expected project==version"),
    ({"python": "/nonexistent/python"}, "python '/nonexistent/python' is not an executable file; expected the interpreter"),
])
def test_bad_input_names_the_value_and_the_form(venv, wheelhouse, args, words):
    result = run_module(nccl_ep_env, present(venv, wheelhouse, **args))
    assert result.failed and words in result["msg"], result.get("msg")
    assert not list(venv["site"].glob("nccl_extensions-*"))


def test_an_index_install_without_a_hash_lock_is_refused(venv):
    args = present(venv, None)
    del args["wheelhouse"]
    result = run_module(nccl_ep_env, args)
    assert result.failed and "requirements_hashes is empty" in result["msg"]
    assert not list(venv["site"].glob("nccl_extensions-*"))


def test_a_hash_lock_installs_exactly_the_closure(venv, wheelhouse):
    lock = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        dist, version = wheel.name.split("-")[:2]
        lock["%s==%s" % (dist.replace("_", "-"), version)] = [sha256(wheel)]
    args = present(venv, None, requirements_hashes=lock, find_links=[str(wheelhouse)], no_index=True)
    del args["wheelhouse"]
    done = run_module(nccl_ep_env, args)
    assert not done.failed, done.get("msg")
    assert "--require-hashes" in done["commands"][-1] and "--no-deps" in done["commands"][-1]
    assert set(checks(ep_facts(done)).values()) == {"pass"}
    lock["cuda-core==1.2.2"] = ["0" * 64]
    assert pip(venv["python"], "uninstall", "-y", "-q", "cuda-core").returncode == 0
    bad = run_module(nccl_ep_env, dict(args, requirements_hashes=lock))
    assert bad.failed and "command failed" in bad["msg"]


# ------------------------------------------------------------------------------------------------ reader, rules

def probe(*packages) -> dict:
    return {"ok": True, "packages": [{"name": n, "version": v, "location": "/site"} for n, v in packages]}


def test_reader_without_nccl_ep_says_not_installed():
    facts = _ep.read_nccl_ep(probe(("torch", "2.11.0+cu130"), ("nvidia-nccl-cu13", "2.30.7")))
    assert facts["installed"] is False and facts["torch_cuda"] == "13.0" and facts["missing"] == []
    assert facts["checks"] == [{"check": "installed", "status": "not_applicable", "found": None, "reason": None,
                                "fix": None}]


def test_reader_checks_the_gpus_when_given():
    facts = _ep.read_nccl_ep(probe(("nccl-extensions", "0.1.0"), ("nvidia-nccl-cu13", "2.30.7")))
    (arch,) = [c for c in _ep.check_nccl_ep(facts, gpus=["8.0", "8.0"]) if c["check"] == "gpu_arch"]
    assert arch["status"] == "fail" and "the node has 8.0" in arch["reason"]


def nccl_ep_doc(facts, expect=True):
    doc = copy.deepcopy(HEALTHY)
    doc["gpufleet_nccl_ep"] = facts
    doc.setdefault("expect", {})["nccl_ep"] = expect
    return doc


def found(doc):
    return [(f["id"], f.get("message")) for f in evaluate_rules(doc, CATALOGUE) if f["id"].startswith("NCCL_EP_")]


def test_every_nccl_ep_rule_has_a_case_and_a_healthy_node_is_quiet(venv, wheelhouse):
    done = run_module(nccl_ep_env, present(venv, wheelhouse))
    healthy = dict(ep_facts(done), jit_cache_dir="/var/cache/nccl-ep/jit", jit_kernels=0)
    assert found(nccl_ep_doc(healthy)) == []
    ids = set()
    bad_nccl = dict(healthy, nccl={"package": "nvidia-nccl-cu13", "version": "2.32.3", "package_version": "2.32.3",
                                   "cuda_major": 13})
    bad_nccl["checks"] = _ep.check_nccl_ep(bad_nccl)
    ((rule, message),) = found(nccl_ep_doc(bad_nccl))
    assert rule == "NCCL_EP_CHECK_FAILED"
    assert message.startswith("NCCL EP (nccl_version): nccl-extensions 0.1.0 requires NCCL 2.30.7 exactly; the "
                              "environment has nvidia-nccl-cu13 2.32.3. Fix: pin NCCL 2.30.7")
    ids.add(rule)
    absent = _ep.read_nccl_ep(probe(("nvidia-nccl-cu13", "2.30.7")), env_exports={})
    assert [r for r, _m in found(nccl_ep_doc(absent))] == ["NCCL_EP_NOT_INSTALLED"]
    assert found(nccl_ep_doc(absent, expect=False)) == []     # a node that does not run NCCL EP is not judged on it
    ids.add("NCCL_EP_NOT_INSTALLED")
    no_cache = dict(healthy, jit_cache_dir=None, jit_kernels=None)
    assert [r for r, _m in found(nccl_ep_doc(no_cache))] == ["NCCL_EP_JIT_CACHE_UNSET"]
    ids.add("NCCL_EP_JIT_CACHE_UNSET")
    rules = {r["id"] for r in validate_rules(CATALOGUE) if r["id"].startswith("NCCL_EP_")}
    assert rules == ids


# ------------------------------------------------------------------------------------------------ the real H200

ROLE_RUN = FIXTURES / "captured" / "h200x1" / "nccl-ep-role"


def test_the_roles_install_on_the_real_h200_judged_by_the_audit():
    """tests/gpu/test_nccl_ep_gpu.py's install (the nccl_ep role over the nccl role's source-built NCCL 2.30.7, from
    the carried wheelhouse): the first run installed, the second changed nothing; the NCCL is the header's 2.30.7
    while the pip package's metadata still says 2.28.9 (the nccl role copies its build over the package's files), and
    every check passed. The audit's rules find nothing but the JIT cache the module's default env script did not
    name there."""
    first = json.loads((ROLE_RUN / "nccl-ep-install-1.json").read_text())
    second = json.loads((ROLE_RUN / "nccl-ep-install-2.json").read_text())
    assert first["changed"] and first["commands"][0][-2:] == ["nccl-extensions==0.1.0", "cuda-bindings==13.*"]
    assert not second["changed"] and second["commands"] == []
    facts = second["facts"]
    assert facts["nccl"] == {"package": "nvidia-nccl-cu13", "version": "2.30.7", "package_version": "2.28.9",
                             "cuda_major": 13}
    assert set(checks(facts).values()) == {"pass"} and facts["library_cuda"] == 13
    assert [r for r, _m in found(nccl_ep_doc(facts))] == ["NCCL_EP_JIT_CACHE_UNSET"]
    assert found(nccl_ep_doc(dict(facts, jit_cache_dir="/var/cache/nccl-ep/jit", jit_kernels=5))) == []


@pytest.mark.parametrize("torch_cuda, nccl_pkg, library_cuda, cuda_check", [
    ("2.11.0+cu130", "nvidia-nccl-cu13", 13, "pass"),   # the lent H200's environment: cu13, not the first directory
    ("2.9.1+cu128", "nvidia-nccl-cu12", 12, "fail"),    # a CUDA 12 environment loads cu12: NCCL EP v0.1 refuses it
    (None, "nvidia-nccl-cu13", 13, "pass"),             # no torch: the NCCL wheel's CUDA major
])
def test_the_library_is_the_one_of_the_environments_cuda_where_the_wheel_ships_both(
        tmp_path, torch_cuda, nccl_pkg, library_cuda, cuda_check):
    # the real nccl-extensions 0.1.0 wheel ships nccl/ep/lib/cu12 and cu13 (both on the H200, 2026-12-02)
    for major in (12, 13):
        lib = tmp_path / "site" / "nccl" / "ep" / "lib" / ("cu%d" % major) / "libnccl_ep.so"
        lib.parent.mkdir(parents=True)
        lib.write_text("stand-in\n")
    packages = [("nccl-extensions", "0.1.0"), (nccl_pkg, "2.30.7")] + ([("torch", torch_cuda)] if torch_cuda else [])
    facts = _ep.read_nccl_ep(probe(*packages), root=str(tmp_path))
    assert facts["library"] == "/site/nccl/ep/lib/cu%d/libnccl_ep.so" % library_cuda
    assert facts["library_cuda"] == library_cuda
    (cuda,) = [c for c in facts["checks"] if c["check"] == "cuda_13"]
    assert cuda["status"] == cuda_check, cuda
