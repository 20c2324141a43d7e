# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpufleet.deepep.nvshmem_build against the nvshmem-fixture source: real cmake builds in tmp_path."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from unit_helpers import first_build_holding_the_lock, siblings as _siblings

from ansible_collections.gpufleet.deepep.plugins.modules import nvshmem_build
from ansible_collections.gpufleet.deepep.plugins.module_utils import _buildkey as bk

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tools" / "fleetsim" / "fixtures" / "sources" / "nvshmem-fixture"
CUDA_HOME = "/usr/local/cuda"

pytestmark = [
    pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("c++"), reason="needs cmake and a C++ compiler"),
    pytest.mark.skipif(not os.access(os.path.join(CUDA_HOME, "bin", "nvcc"), os.X_OK),
                       reason="needs nvcc at /usr/local/cuda (the fixture checks the CUDA compiler like NVSHMEM)"),
]


@pytest.fixture
def prefix(tmp_path):
    return str(tmp_path / "opt" / "nvshmem")


def _args(prefix, **extra):
    args = {"src": str(FIXTURE), "prefix": prefix, "cuda_home": CUDA_HOME, "cuda_arch": "90", "jobs": 2}
    args.update(extra)
    return args


def _fixture_tarball(tmp_path):
    """The fixture source packed as ``nvshmem-fixture.tar.gz``, and its sha256."""
    tarball = tmp_path / "nvshmem-fixture.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(str(FIXTURE), arcname="nvshmem-fixture")
    return tarball, hashlib.sha256(tarball.read_bytes()).hexdigest()


def _build_and_pack(module_runner, prefix, tmp_path):
    """A build from the fixture tarball, packed into ``tmp_path/artifacts``: the tarball's sha256, the store and
    the module's result."""
    tarball, digest = _fixture_tarball(tmp_path)
    store = tmp_path / "artifacts"
    return digest, store, module_runner(nvshmem_build, _args(prefix, src=str(tarball), sha256=digest,
                                                             artifact_dir=str(store)))


def test_build_verify_and_idempotence(module_runner, prefix):
    first = module_runner(nvshmem_build, _args(prefix))
    assert not first.failed, first.get("msg")
    assert first["changed"] and first["built"] and first["would_build"]
    facts = first["ansible_facts"]["gpufleet_nvshmem"]
    assert facts["version"] == "3.4.5" and facts["ibgda"] is True and facts["verified"] is True
    assert facts["key"] == first["key"] and facts["cuda_arch"] == "90"
    assert "libnvshmem_host.so.3" in facts["libraries"] and "nvshmem_transport_ibgda.so.3" in facts["libraries"]
    # The runbook flags reached cmake.
    configure = first["commands"][0]
    for flag in ("-DNVSHMEM_IBGDA_SUPPORT=ON", "-DNVSHMEM_SHMEM_SUPPORT=OFF", "-DNVSHMEM_UCX_SUPPORT=OFF",
                 "-DNVSHMEM_USE_NCCL=OFF", "-DNVSHMEM_MPI_SUPPORT=OFF", "-DNVSHMEM_BUILD_EXAMPLES=OFF",
                 "-DNVSHMEM_BUILD_PYTHON_LIB=OFF",
                 "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc", "-DCMAKE_CUDA_ARCHITECTURES=90",
                 "-DCMAKE_INSTALL_PREFIX=%s" % prefix):
        assert flag in configure
    # Built for the final prefix, installed through staging: nvshmem-info reports the real prefix.
    info = subprocess.run([os.path.join(prefix, "bin", "nvshmem-info"), "-a"], capture_output=True, text=True,
                          check=True).stdout
    assert "NVSHMEM_PREFIX=%s" % prefix in info and "NVSHMEM_IBGDA_SUPPORT=ON" in info
    stamp = bk.read_stamp(prefix)
    assert stamp["key"] == first["key"] and stamp["inputs"]["source"]["kind"] == "tree"
    # The stamp holds the linkage record: every shared object under lib/ (links left out), paths as installed.
    linkage = stamp["linkage"]
    assert first["linkage"] == linkage and linkage["schema"] == 1 and linkage["artifact"] == "nvshmem"
    assert [o["path"] for o in linkage["objects"]] == ["lib/libnvshmem_host.so.3.4.5", "lib/nvshmem_transport_ibgda.so.3",
                                                       "lib/nvshmem_transport_ibrc.so.3"]
    host = linkage["objects"][0]
    assert host["soname"] == "libnvshmem_host.so.3" and host["runpath"] == ["$ORIGIN/../lib"]
    assert host["sass"] == [] and host["ptx"] == [] and host["libstdcxx"] == "none"
    assert linkage["nvshmem"] == {"host_version": "3.4.5", "host_library": prefix + "/lib/libnvshmem_host.so.3.4.5",
                                  "device_version": "3.4.5", "device_library": prefix + "/lib/libnvshmem_device.a"}
    assert linkage["torch"] is None and linkage["nccl"] is None and linkage["baked_env"] is None
    assert linkage["cuda"] == "13.0.88" and linkage["compiler"]["version"] == stamp["inputs"]["compiler"]
    assert linkage["warnings"] == []
    assert os.path.isfile(os.path.join(prefix, bk.LOG_NAME))
    assert _siblings(prefix) == ["nvshmem"]

    again = module_runner(nvshmem_build, _args(prefix))
    assert not again.failed and not again["changed"] and not again["built"]
    assert again["key"] == first["key"] and "passes verification" in again["reason"]


def test_check_mode_reports_and_writes_nothing(module_runner, prefix, tmp_path):
    plan = module_runner(nvshmem_build, _args(prefix), check_mode=True)
    assert not plan.failed
    assert plan["changed"] and plan["would_build"] and not plan["built"]
    assert plan["ansible_facts"]["gpufleet_nvshmem"]["key"] == plan["key"]
    assert not os.path.exists(os.path.dirname(prefix))
    built = module_runner(nvshmem_build, _args(prefix))
    assert built["key"] == plan["key"]
    before = sorted(os.listdir(prefix))
    plan2 = module_runner(nvshmem_build, _args(prefix, cuda_arch="100"), check_mode=True, diff=True)
    assert plan2["would_build"] and plan2["key"] != built["key"] and "key changed" in plan2["reason"]
    assert json.loads(plan2["diff"]["after"])["key"] == plan2["key"]
    assert sorted(os.listdir(prefix)) == before and _siblings(prefix) == ["nvshmem"]
    assert bk.read_stamp(prefix)["key"] == built["key"]


def test_new_key_swaps_and_keeps_previous(module_runner, prefix):
    first = module_runner(nvshmem_build, _args(prefix))
    second = module_runner(nvshmem_build, _args(prefix, cuda_arch="10.0"))
    assert not second.failed and second["built"]
    assert second["previous"] == prefix + ".previous"
    assert bk.read_stamp(prefix)["inputs"]["cuda_arch"] == "100"
    assert bk.read_stamp(prefix + ".previous")["key"] == first["key"]
    assert second["ansible_facts"]["gpufleet_nvshmem"]["previous"] == prefix + ".previous"
    third = module_runner(nvshmem_build, _args(prefix, cuda_arch="90;100"))
    assert bk.read_stamp(prefix + ".previous")["key"] == second["key"]
    assert _siblings(prefix) == ["nvshmem", "nvshmem.previous"]
    assert third["ansible_facts"]["gpufleet_nvshmem"]["cuda_arch"] == "90;100"


def test_roce_ah_attr_fix_is_applied_to_the_build_not_the_source(module_runner, prefix):
    original = (FIXTURE / nvshmem_build.IBGDA_SOURCE).read_bytes()
    plain = module_runner(nvshmem_build, _args(prefix))
    fixed = module_runner(nvshmem_build, _args(prefix, roce_ah_attr_fix=True))
    assert not fixed.failed and fixed["key"] != plain["key"]
    assert fixed["ah_attr_fix"] == {"file": "src/modules/transport/ibgda/ibgda.cpp", "fixed": 3, "already": 0}
    assert fixed["ansible_facts"]["gpufleet_nvshmem"]["roce_ah_attr_fix"] is True
    log = Path(prefix, bk.LOG_NAME).read_text()
    assert "roce_ah_attr_fix: 3 declaration(s) zeroed" in log
    assert (FIXTURE / nvshmem_build.IBGDA_SOURCE).read_bytes() == original


def test_ibgda_off_and_gdrcopy(module_runner, prefix, tmp_path):
    gdr = tmp_path / "gdrcopy"
    (gdr / "include").mkdir(parents=True)
    (gdr / "include" / "gdrapi.h").write_text("/* gdrapi */\n")
    result = module_runner(nvshmem_build, _args(prefix, ibgda=False, gdrcopy_home=str(gdr)))
    assert not result.failed, result.get("msg")
    facts = result["ansible_facts"]["gpufleet_nvshmem"]
    assert facts["ibgda"] is False and "nvshmem_transport_ibgda.so.3" not in facts["libraries"]
    assert "-DNVSHMEM_USE_GDRCOPY=ON" in result["commands"][0]
    assert "-DGDRCOPY_INCLUDE=%s/include" % gdr in result["commands"][0]
    missing = module_runner(nvshmem_build, _args(prefix, gdrcopy_home=str(tmp_path / "nowhere")))
    assert missing.failed and "gdrapi.h" in missing["msg"]


def test_failed_build_leaves_the_previous_install_working(module_runner, prefix):
    good = module_runner(nvshmem_build, _args(prefix))
    # NVSHMEM_USE_NCCL=ON needs NCCL: the fixture's configure stops, as the real one does without it.
    bad = module_runner(nvshmem_build, _args(prefix, cmake_options={"NVSHMEM_USE_NCCL": True}))
    assert bad.failed
    assert bad["rc"] != 0 and bad["cmd"][0].endswith("cmake")
    assert "unchanged" in bad["msg"]
    assert any("NVSHMEM_USE_NCCL=ON" in line for line in bad["log_tail"])
    assert bk.read_stamp(prefix)["key"] == good["key"]
    info = subprocess.run([os.path.join(prefix, "bin", "nvshmem-info"), "-a"], capture_output=True, text=True,
                          check=True)
    assert "NVSHMEM_IBGDA_SUPPORT=ON" in info.stdout
    assert os.path.isfile(os.path.join(bad["staging"], "build.log"))
    # The next run cleans the failed run's staging dir and finds the install unchanged.
    again = module_runner(nvshmem_build, _args(prefix))
    assert not again["changed"] and again["cleaned"] == [bad["staging"]]
    assert _siblings(prefix) == ["nvshmem"]


def test_python_wheels_would_need_a_package_index(module_runner, prefix):
    # Upstream builds nvshmem4py's wheels by default, pip-installing their build requirements at build time: the
    # module turns that off, and turning it back on fails the build step (not the configure) on an offline node.
    bad = module_runner(nvshmem_build, _args(prefix, cmake_options={"NVSHMEM_BUILD_PYTHON_LIB": True}))
    assert bad.failed and "--build" in bad["cmd"]
    assert any("no package index" in line for line in bad["log_tail"]), bad["log_tail"]
    assert not os.path.exists(prefix)


def test_killed_run_leftovers_are_repaired(module_runner, prefix):
    good = module_runner(nvshmem_build, _args(prefix))
    # What a run killed midway leaves: a half-built staging dir; killed between the two renames of the
    # fallback swap: the prefix moved to .previous and not yet replaced.
    half = prefix + ".staging-0badc0de"
    os.makedirs(os.path.join(half, "build"))
    Path(half, "build", "partial.o").write_text("x")
    os.rename(prefix, prefix + ".previous")
    plan = module_runner(nvshmem_build, _args(prefix), check_mode=True)
    assert plan["cleaned"] == [half] and plan["recovered"].startswith("would restore")
    assert os.path.isdir(half) and not os.path.exists(prefix)
    fixed = module_runner(nvshmem_build, _args(prefix))
    assert not fixed.failed and not fixed["changed"]
    assert fixed["recovered"].startswith("restored") and fixed["cleaned"] == [half]
    assert bk.read_stamp(prefix)["key"] == good["key"] and _siblings(prefix) == ["nvshmem"]


def test_broken_install_with_the_same_key_is_rebuilt(module_runner, prefix):
    good = module_runner(nvshmem_build, _args(prefix))
    os.unlink(os.path.join(prefix, "lib", "nvshmem_transport_ibgda.so.3"))
    again = module_runner(nvshmem_build, _args(prefix))
    assert again["built"] and again["key"] == good["key"] and "fails verification" in again["reason"]
    assert os.path.isfile(os.path.join(prefix, "lib", "nvshmem_transport_ibgda.so.3"))


def test_tarball_source_and_checksum(module_runner, prefix, tmp_path):
    tarball, digest = _fixture_tarball(tmp_path)
    wrong = module_runner(nvshmem_build, _args(prefix, src=str(tarball), sha256="0" * 64))
    assert wrong.failed and digest in wrong["msg"] and "0" * 64 in wrong["msg"]
    assert not os.path.exists(os.path.dirname(prefix))
    built = module_runner(nvshmem_build, _args(prefix, src=str(tarball), sha256=digest))
    assert not built.failed, built.get("msg")
    assert built["inputs"]["source"] == {"kind": "tarball", "sha256": digest}


def test_tarball_with_member_outside_its_root_is_refused(module_runner, prefix, tmp_path):
    tarball = tmp_path / "evil.tar.gz"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(str(payload), arcname="../escaped")
    result = module_runner(nvshmem_build, _args(prefix, src=str(tarball)))
    assert result.failed and "outside its root" in result["msg"]
    assert not (tmp_path / "opt" / "escaped").exists()


@pytest.mark.parametrize("args,words", [
    ({"cuda_arch": "10,0"}, ["'10,0'", "90"]),
    ({"prefix": "relative/nvshmem"}, ["absolute"]),
    ({"cuda_home": "/nonexistent/cuda"}, ["nvcc", "cuda_home"]),
    ({"jobs": 0}, ["jobs"]),
    ({"src": "/nonexistent/src"}, ["/nonexistent/src"]),
])
def test_bad_options_are_named(module_runner, prefix, args, words):
    full = _args(prefix)
    full.update(args)
    result = module_runner(nvshmem_build, full)
    assert result.failed
    for word in words:
        assert word in result["msg"]
    assert not os.path.exists(os.path.dirname(prefix))


def test_fixture_refuses_a_missing_cuda_compiler(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CUDA_HOME")}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run(["cmake", "-S", str(FIXTURE), "-B", str(tmp_path / "build")], capture_output=True,
                          text=True, env=env, check=False)
    assert proc.returncode != 0
    assert "No CMAKE_CUDA_COMPILER could be found" in proc.stderr


def test_build_once_then_install_the_packed_build(module_runner, prefix, tmp_path):
    digest, store, built = _build_and_pack(module_runner, prefix, tmp_path)
    assert built["built"] and built["installed_from"] == "build"
    assert built["artifact"] == str(store / ("nvshmem-%s.tar.gz" % built["key"]))
    record = json.loads((store / ("nvshmem-%s.json" % built["key"])).read_text())
    assert record["key"] == built["key"] and record["artifact_sha256"]
    assert record["linkage"] == built["linkage"] and record["linkage"]["artifact"] == "nvshmem"

    # Another node: same image, no source on disk, the store's archive copied in.
    shutil.rmtree(prefix)
    elsewhere = _args(prefix, src="/srv/absent/nvshmem-fixture.tar.gz", sha256=digest, artifact_dir=str(store))
    plan = module_runner(nvshmem_build, elsewhere, check_mode=True)
    assert plan["key"] == built["key"] and plan["changed"] and not plan["would_build"]
    installed = module_runner(nvshmem_build, elsewhere)
    assert not installed.failed, installed.get("msg")
    assert installed["installed_from"] == "artifact" and not installed["built"]
    assert installed["commands"] == []
    assert installed["linkage"] == built["linkage"]  # the record travelled with the packed install
    facts = installed["ansible_facts"]["gpufleet_nvshmem"]
    assert facts["verified"] and facts["ibgda"] and facts["key"] == built["key"]
    assert not module_runner(nvshmem_build, elsewhere)["changed"]

    # Without the archive and without the source, the module says what is missing.
    shutil.rmtree(prefix)
    missing = module_runner(nvshmem_build, _args(prefix, src="/srv/absent/nvshmem-fixture.tar.gz", sha256=digest,
                                                 artifact_dir=str(tmp_path / "empty-store")))
    assert missing.failed and "/srv/absent/nvshmem-fixture.tar.gz does not exist" in missing["msg"]


@pytest.mark.parametrize("damage", ["truncated", "tampered", "record without checksum"])
def test_a_damaged_packed_install_is_refused_by_name(module_runner, prefix, tmp_path, damage):
    digest, store, built = _build_and_pack(module_runner, prefix, tmp_path)
    assert built["built"]
    packed, record = store / ("nvshmem-%s.tar.gz" % built["key"]), store / ("nvshmem-%s.json" % built["key"])
    if damage == "truncated":
        packed.write_bytes(packed.read_bytes()[:1000])
    elif damage == "tampered":
        data = packed.read_bytes()
        packed.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    else:
        data = json.loads(record.read_text())
        del data["artifact_sha256"]
        record.write_text(json.dumps(data))
        packed.write_bytes(packed.read_bytes()[:1000])
    shutil.rmtree(prefix)
    refused = module_runner(nvshmem_build, _args(prefix, src="/srv/absent/nvshmem-fixture.tar.gz", sha256=digest,
                                                 artifact_dir=str(store)))
    assert refused.failed and not refused["built"] and "Traceback" not in refused["msg"]
    if damage == "record without checksum":
        assert "%s of the packed install has no artifact_sha256" % record in refused["msg"]
    else:
        assert "the packed install %s has sha256" % packed in refused["msg"]
    assert not os.path.exists(prefix) and "nvshmem" not in _siblings(prefix)


def test_a_second_build_of_one_prefix_refuses_and_leaves_the_first_ones_staging(module_runner, prefix, tmp_path):
    staging = prefix + ".staging-0123abcd"
    ready = tmp_path / "first.ready"
    with first_build_holding_the_lock(prefix, staging, ready) as first:
        for dummy in range(600):  # bounded: at most about 60 s for the first build to take its lock
            if ready.exists() or first.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists()
        second = module_runner(nvshmem_build, _args(prefix, lock_timeout=0))
        assert second.failed and not second["built"]
        assert "another NVSHMEM build of %s is running" % prefix in second["msg"]
        assert "pid %d" % first.pid in second["msg"] and "lock_timeout" in second["msg"]
        assert os.path.isdir(staging) and not os.path.exists(prefix)
    # The first run ended: the next one takes the lock, removes what that run left, and builds.
    third = module_runner(nvshmem_build, _args(prefix, lock_timeout=0))
    assert not third.failed and third["built"] and third["cleaned"] == [staging]
    assert _siblings(prefix) == ["nvshmem"]


def test_the_key_covers_the_final_configure_flags(module_runner, prefix, monkeypatch):
    """The key is over what cmake really receives: a flag the module itself adds changes it; same inputs, same key."""
    plan = module_runner(nvshmem_build, _args(prefix), check_mode=True)
    again = module_runner(nvshmem_build, _args(prefix), check_mode=True)
    assert not plan.failed and again["key"] == plan["key"]
    configure = plan["inputs"]["configure"]
    assert "-DNVSHMEM_BUILD_PYTHON_LIB=OFF" in configure["argv"] and "@SOURCE@" in configure["argv"]
    assert configure["env"]["CUDACXX"] == "/usr/local/cuda/bin/nvcc"
    original = nvshmem_build.nvshmem_cmake_args

    def with_a_new_default(*args, **kwargs):
        argv, env, options = original(*args, **kwargs)
        return argv + ["-DNVSHMEM_NEW_DEFAULT=ON"], env, dict(options, NVSHMEM_NEW_DEFAULT="ON")

    monkeypatch.setattr(nvshmem_build, "nvshmem_cmake_args", with_a_new_default)
    changed = module_runner(nvshmem_build, _args(prefix), check_mode=True)
    assert changed["key"] != plan["key"] and "-DNVSHMEM_NEW_DEFAULT=ON" in changed["inputs"]["configure"]["argv"]
    assert changed["inputs"]["configure"]["argv"][:-1] == configure["argv"]

    def with_a_new_env(*args, **kwargs):
        argv, env, options = original(*args, **kwargs)
        return argv, dict(env, NVSHMEM_DEBUG="1"), options

    monkeypatch.setattr(nvshmem_build, "nvshmem_cmake_args", with_a_new_env)
    assert module_runner(nvshmem_build, _args(prefix), check_mode=True)["key"] not in (plan["key"], changed["key"])


# --- check mode gives the real run's verdict on the source; a malformed sha256 is refused up front --------------


def _tar(path, files):
    """A tar.gz at ``path`` holding ``files`` ({member name: text})."""
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("layout", ["empty dir", "no CMakeLists", "two top directories", "tarball without it",
                                    "not a tarball"])
def test_check_mode_refuses_the_source_the_build_refuses(module_runner, prefix, tmp_path, layout):
    src = tmp_path / "src"
    if layout == "empty dir":
        src.mkdir()
    elif layout == "no CMakeLists":
        (src / "nvshmem" / "src").mkdir(parents=True)
        (src / "nvshmem" / "README").write_text("x")
    elif layout == "two top directories":
        (src / "a").mkdir(parents=True)
        (src / "b").mkdir()
    elif layout == "tarball without it":
        src = _tar(tmp_path / "src.tar.gz", {"nvshmem-3.4.5/README": "x", "nvshmem-3.4.5/src/x.cpp": "x"})
    else:
        src = tmp_path / "src.tar.gz"
        src.write_bytes(b"not a tarball at all")
    plan = module_runner(nvshmem_build, _args(prefix, src=str(src)), check_mode=True)
    real = module_runner(nvshmem_build, _args(prefix, src=str(src)))
    for result in (plan, real):
        assert result.failed and not result.get("would_build") and not result.get("built")
        assert "src %s" % src in result["msg"] and "nothing was built" in result["msg"]
        assert "CMakeLists.txt" in result["msg"]
    assert plan["msg"] == real["msg"]
    assert not os.path.exists(prefix)
    assert not [p for p in os.listdir(os.path.dirname(prefix)) if ".staging-" in p]


def test_check_mode_finds_the_source_root_where_the_build_does(module_runner, prefix, tmp_path):
    """A tarball of the fixture under one top directory (and a directory with build/ beside the source) plan."""
    tarball, digest = _fixture_tarball(tmp_path)
    plan = module_runner(nvshmem_build, _args(prefix, src=str(tarball), sha256=digest.upper()), check_mode=True)
    assert not plan.failed, plan.get("msg")
    assert plan["would_build"] and plan["inputs"]["source"] == {"kind": "tarball", "sha256": digest}
    tree = tmp_path / "tree"
    shutil.copytree(str(FIXTURE), str(tree / "nvshmem-fixture"))
    (tree / "build").mkdir()  # the build's copy leaves build/ out at the top
    plan = module_runner(nvshmem_build, _args(prefix, src=str(tree)), check_mode=True)
    assert not plan.failed, plan.get("msg")
    assert plan["would_build"]


def test_check_mode_warns_of_a_tarball_that_is_not_there(module_runner, prefix, tmp_path):
    absent = "/srv/absent/nvshmem-fixture.tar.gz"
    plan = module_runner(nvshmem_build, _args(prefix, src=absent, sha256="ab" * 32), check_mode=True)
    assert not plan.failed, plan.get("msg")
    assert plan["would_build"] and plan["key"]
    warnings = [w if isinstance(w, str) else w["event"]["msg"] for w in plan.get("warnings", [])]
    assert any(absent in w and "a real run refuses" in w for w in warnings), warnings
    real = module_runner(nvshmem_build, _args(prefix, src=absent, sha256="ab" * 32))
    assert real.failed and "%s does not exist on this host" % absent in real["msg"]


@pytest.mark.parametrize("value", ["abc", "g" * 64, "0" * 63, "0" * 65, "sha256 " + "0" * 64,
                                   "0" * 32 + " " + "0" * 32])
def test_malformed_sha256_is_refused_up_front(module_runner, prefix, tmp_path, value):
    tarball, digest = _fixture_tarball(tmp_path)
    for check in (True, False):
        result = module_runner(nvshmem_build, _args(prefix, src=str(tarball), sha256=value), check_mode=check)
        assert result.failed
        assert result["msg"].startswith("sha256: %r is not a sha256 digest" % value)
        assert "64 hexadecimal digits" in result["msg"] and "mismatch" not in result["msg"]
        assert digest not in result["msg"]  # refused before the tarball was read
    assert not os.path.exists(os.path.dirname(prefix))


def _nvshmem_38_tree(tmp_path):
    """The simulated fleet's NVSHMEM 3.8.0 fixture tree (nvshmem-fixture with tools/fleetsim's 3.8.0 patch)."""
    from tools.fleetsim import mirror
    return mirror.assemble_source("nvshmem-3.8.0-fixture", tmp_path / "nvshmem-3.8.0")


def test_nvshmem_38_on_cuda_12_is_refused_before_it_configures(module_runner, prefix, tmp_path):
    """The stack catalogue's nvshmem_source_cuda13 at the build: the tree says 3.8.0 (its project() call), the toolkit
    12.9: refused naming both, the source and the fix, before cmake runs; nothing is installed. On CUDA 13 the same
    tree builds and its nvshmem-info reports 3.8.0."""
    tree = _nvshmem_38_tree(tmp_path)
    cuda12 = tmp_path / "cuda-12.9"
    (cuda12 / "bin").mkdir(parents=True)
    (cuda12 / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.86'\n")
    (cuda12 / "bin" / "nvcc").chmod(0o755)
    refused = module_runner(nvshmem_build, _args(prefix, src=str(tree), cuda_home=str(cuda12)))
    assert refused.failed
    assert ("NVSHMEM 3.8.0 (3.8.0 or newer) built from source needs CUDA 13.0 or newer, and the build uses "
            "CUDA 12.9") in refused["msg"], refused["msg"]
    assert "NVIDIA/nvshmem#95" in refused["msg"] and "Fix: build NVSHMEM with a CUDA 13 toolkit" in refused["msg"]
    assert not any("cmake" in str(c) for c in (refused.get("cmd") or [])), refused.get("cmd")
    assert not os.path.exists(prefix)
    built = module_runner(nvshmem_build, _args(prefix, src=str(tree)))
    assert not built.failed, built.get("msg")
    assert built["source_cuda"]["status"] == "ok" and built["verify"]["version"] == "3.8.0"
