# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's DeepGEMM cache as an artifact: the key (the value of the sglang role's earlier Jinja key, so stores stay
valid) over every input, the plan (nothing, install from the artifact, precompile), the deterministic pack and the
checked, whole-entry unpack with the marker last, and the module end to end over a fake interpreter whose
``-m sglang.compile_deep_gemm`` writes kernels under SGLANG_DG_CACHE_DIR."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile

import pytest

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import deepgemm as dg
from ansible_collections.gpufleet.deepep.plugins.module_utils import _tree
from ansible_collections.gpufleet.deepep.plugins.modules import deepgemm_cache

CONFIG = "9f" * 32
ARGS = ["--model-path", "/opt/models/deepseek-v3", "--tp-size", "8", "--dp-size", "1", "--moe-a2a-backend", "deepep",
        "--deepep-mode", "auto"]
BASE = dict(sglang="0.5.19", deep_gemm="2.1.1+fixture", config_sha256=CONFIG, args=ARGS, arch="10.0", cuda="12.9")
# Every input of the key, with another value each.
CHANGED = [("sglang", "0.5.20"), ("sglang", None), ("deep_gemm", "2.1.2"), ("deep_gemm", None),
           ("config_sha256", "ab" * 32), ("args", ARGS[:-1] + ["normal"]), ("args", ARGS + ["--enable-dp-attention"]),
           ("arch", "9.0"), ("arch", "9.0;10.0"), ("arch", None), ("arch", ""), ("cuda", "13.0"), ("cuda", "")]

# The sglang role's key before the module, verbatim (roles/sglang/tasks/deepgemm.yml at the commit before it).
OLD_JINJA_KEY = """{{ {'sglang': ansible_facts.gpufleet_sglang.versions.sglang,
          'deep_gemm': ansible_facts.gpufleet_sglang.versions.deep_gemm,
          'config': ansible_facts.gpufleet_model.config_sha256,
          'args': sglang_dg_args,
          'arch': ansible_facts.gpufleet_gpus.cuda_arch_list | default(none),
          'cuda': ansible_facts.gpufleet_sglang.torch_cuda or sglang_cuda_version | string}
         | to_json(sort_keys=true) | hash('sha256') }}"""


def old_key(sglang, deep_gemm, config_sha256, args, arch, torch_cuda, cuda_version):
    from ansible.template import Templar, trust_as_template

    gpus = {} if arch == "undefined" else {"cuda_arch_list": arch}
    facts = {"gpufleet_sglang": {"versions": {"sglang": sglang, "deep_gemm": deep_gemm}, "torch_cuda": torch_cuda},
             "gpufleet_model": {"config_sha256": config_sha256}, "gpufleet_gpus": gpus}
    templar = Templar(loader=None, variables={"ansible_facts": facts, "sglang_dg_args": args,
                                              "sglang_cuda_version": cuda_version})
    return templar.template(trust_as_template(OLD_JINJA_KEY))


def key_of(**kw):
    return dg.dg_key(**{"sglang": kw["sglang"], "deep_gemm": kw["deep_gemm"], "config_sha256": kw["config_sha256"],
                        "args": kw["args"], "arch": kw["arch"], "cuda": kw["cuda"]})[0]


# ----------------------------------------------------------------------------------------------------------- the key
def test_key_is_the_value_ansible_computed_for_the_fixture_fleet():
    """Pinned: a change of the key's form would orphan every artifact a store holds."""
    key = dg.dg_key("0.5.19", "2.1.1+fixture", "ab" * 32, ARGS, "10.0", "12.9")[0]
    assert key == "cece90d2cb49eb81c5317ac434dd2696110c3014e5a6857e8e3ee98ffb3f27ce"
    assert dg.dg_key("0.5.8", None, "cd" * 32, ["--model-path", "/m/\u00e9", "--tp-size", "2"], None, "12.8")[0] == \
        "b965435bfba07e0d585388131ea3fdb8226d937c5319319bf0d5005c28a2d29b"


@pytest.mark.parametrize("name,value", [("none", None)] + CHANGED)
def test_key_equals_the_old_jinja_key_for_every_input(name, value):
    kw = dict(BASE)
    if name != "none":
        kw[name] = value
    jinja = old_key(kw["sglang"], kw["deep_gemm"], kw["config_sha256"], kw["args"], kw["arch"], kw["cuda"], "")
    assert key_of(**kw) == jinja


@pytest.mark.parametrize("torch_cuda,cuda_version", [(None, "12.8"), ("", "12.8"), ("12.9", "12.8"), (None, "")])
def test_cuda_falls_back_to_the_role_setting_as_the_jinja_did(torch_cuda, cuda_version, module_node):
    args = dict(module_node, torch_cuda=torch_cuda, cuda_version=cuda_version)
    result = run_module(deepgemm_cache, args, check_mode=True)
    assert result["key"] == old_key("0.5.19", "2.1.1+fixture", CONFIG, ARGS, "10.0", torch_cuda, cuda_version)


def test_an_undefined_arch_list_keys_as_null():
    expected = old_key(BASE["sglang"], BASE["deep_gemm"], CONFIG, ARGS, "undefined", "12.9", "")
    assert key_of(**{**BASE, "arch": None}) == expected


@pytest.mark.parametrize("name,value", CHANGED)
def test_every_input_changes_the_key(name, value):
    assert key_of(**dict(BASE, **{name: value})) != key_of(**BASE)


def test_inputs_are_returned_as_keyed():
    key, inputs = dg.dg_key(**{**BASE, "args": list(ARGS)})
    assert inputs == {"sglang": "0.5.19", "deep_gemm": "2.1.1+fixture", "config": CONFIG, "args": ARGS, "arch": "10.0",
                      "cuda": "12.9"}
    assert key == hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


BAD_KEY_INPUTS = [
    ("sglang", "0.5 19", "sglang_version"), ("sglang", 5, "sglang_version"), ("deep_gemm", "", "deep_gemm_version"),
    ("config_sha256", "abc", "config_sha256"), ("config_sha256", "AB" * 32, "config_sha256"),
    ("args", [], "precompile_args"), ("args", "--tp-size 8", "precompile_args"), ("args", ["--tp", 8], "precompile_args"),
    ("args", ARGS + ["--timeout", "5"], "--timeout"), ("args", ARGS + ["--timeout=5"], "--timeout"),
    ("args", ["a\nb"], "newline"), ("arch", "sm90", "'sm90'"), ("arch", ["10.0"], "gpu_arch_list"),
    ("cuda", "twelve", "'twelve'"), ("cuda", None, "cuda")]


@pytest.mark.parametrize("name,value,named", BAD_KEY_INPUTS)
def test_bad_key_inputs_are_named_with_the_expected_form(name, value, named):
    with pytest.raises(dg.DeepGemmError) as err:
        dg.dg_key(**dict(BASE, **{name: value}))
    assert named in str(err.value) and "expected" in str(err.value)


# ----------------------------------------------------------------------------------------------------------- the plan
KEY = "ab" * 32


def test_plan_decisions(tmp_path):
    cache, arts = tmp_path / "dg", tmp_path / "arts"
    decision = dg.plan(KEY, str(cache), str(arts))
    assert decision == {"would_build": True, "would_install": True, "artifact": False,
                        "reason": "the cache has no marker of key abababab"}
    (arts / KEY).mkdir(parents=True)
    (arts / KEY / (KEY + ".tar.gz.tmp")).write_bytes(b"")  # a copy in progress is no artifact
    assert dg.plan(KEY, str(cache), str(arts))["would_build"] is True
    (arts / KEY / (KEY + ".tar.gz")).write_bytes(b"")
    decision = dg.plan(KEY, str(cache), str(arts))
    assert decision["would_build"] is False and decision["would_install"] is True and decision["artifact"]
    assert "the artifact is on this node" in decision["reason"]
    cache.mkdir()
    dg.write_marker(str(cache), KEY, {"key": KEY, "args": ARGS})
    assert dg.plan(KEY, str(cache), str(arts))["would_install"] is False
    # a marker of another key, a marker naming another key, an unreadable marker: not installed
    other = "cd" * 32
    assert dg.plan(other, str(cache), str(arts))["would_install"] is True
    (cache / (dg.MARKER_PREFIX + other + ".json")).write_text(json.dumps({"key": KEY}))
    assert dg.plan(other, str(cache), str(arts))["would_install"] is True
    (cache / (dg.MARKER_PREFIX + other + ".json")).write_text("{")
    assert dg.plan(other, str(cache), str(arts))["would_install"] is True


def test_a_linked_artifact_or_marker_does_not_count(tmp_path):
    cache, arts = tmp_path / "dg", tmp_path / "arts"
    (arts / KEY).mkdir(parents=True)
    real = tmp_path / "real.tar.gz"
    real.write_bytes(b"")
    os.symlink(str(real), str(arts / KEY / (KEY + ".tar.gz")))
    cache.mkdir()
    (tmp_path / "m.json").write_text(json.dumps({"key": KEY}))
    os.symlink(str(tmp_path / "m.json"), str(cache / (dg.MARKER_PREFIX + KEY + ".json")))
    assert dg.plan(KEY, str(cache), str(arts))["would_build"] is True


# ------------------------------------------------------------------------------------------------ pack and unpack
def kernels(root, names=("gemm_a", "gemm_b", "grouped"), extra=b""):
    for name in names:
        path = root / "cache" / ("kernel.%s.%s" % (name, hashlib.sha256(name.encode()).hexdigest()[:32]))
        path.mkdir(parents=True)
        (path / "kernel.cu").write_text("// %s\n" % name)
        (path / "kernel.cubin").write_bytes(b"\x7fELF" + name.encode() + extra)
    return root


def test_pack_is_deterministic_and_unpack_gives_whole_entries(tmp_path):
    src = kernels(tmp_path / "build")
    one, two = tmp_path / "one.tar.gz", tmp_path / "two.tar.gz"
    assert dg.pack(str(src), str(one), {"host": "n1", "seconds": 1.5}) == 6
    dg.pack(str(src), str(two), {"host": "n1", "seconds": 1.5})
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(str(one)) as tar:
        names = tar.getnames()
        assert all(m.uid == 0 and m.mtime == 0 for m in tar.getmembers())
    assert names[0] == dg.BUILD_RECORD and all(n == "cache" or n.startswith("cache/") for n in names[1:])
    dest = tmp_path / "node" / "dg"
    added, kept, record = dg.unpack(str(one), str(dest), check_mode=True)
    assert len(added) == 3 and kept == [] and record == {"host": "n1", "seconds": 1.5}
    assert not dest.exists()  # check mode writes nothing
    added, kept, record = dg.unpack(str(one), str(dest))
    assert len(added) == 3 and kept == []
    assert sorted(os.listdir(str(dest))) == ["cache"]  # no staging left, no marker (the module writes it last)
    for entry in added:
        assert sorted(os.listdir(str(dest / "cache" / entry))) == ["kernel.cu", "kernel.cubin"]
    cubin = next((dest / "cache").glob("kernel.gemm_a.*")) / "kernel.cubin"
    assert cubin.read_bytes() == b"\x7fELFgemm_a" and oct(cubin.stat().st_mode & 0o777) == "0o644"
    assert dg.unpack(str(one), str(dest)) == ([], added, record)  # idempotent: what the cache holds is kept


def test_pack_refuses_an_empty_precompile_and_a_link(tmp_path):
    (tmp_path / "build" / "cache").mkdir(parents=True)
    with pytest.raises(dg.DeepGemmError) as err:
        dg.pack(str(tmp_path / "build"), str(tmp_path / "a.tar.gz"), {})
    assert "left no file" in str(err.value) and "expected" in str(err.value)
    kernels(tmp_path / "build")
    os.symlink("/etc/passwd", str(tmp_path / "build" / "cache" / "passwd"))
    with pytest.raises(dg.DeepGemmError) as err:
        dg.pack(str(tmp_path / "build"), str(tmp_path / "a.tar.gz"), {})
    assert "a link" in str(err.value)
    assert sorted(os.listdir(str(tmp_path))) == ["build"]  # no archive, no temporary file


def test_an_archive_of_the_earlier_tasks_is_installed(tmp_path):
    """GNU tar of the sglang role's earlier tasks (no build record): stores filled then stay usable."""
    src = kernels(tmp_path / "build")
    archive = tmp_path / (KEY + ".tar.gz")
    subprocess.run(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "-C", str(src), "-czf", str(archive),
                    "cache"], check=True)
    added, kept, record = dg.unpack(str(archive), str(tmp_path / "dg"))
    assert len(added) == 3 and record == {}


def test_a_failure_during_the_unpack_leaves_the_cache_as_it_was(tmp_path, monkeypatch):
    archive = tmp_path / "a.tar.gz"
    dg.pack(str(kernels(tmp_path / "build")), str(archive), {})
    dest = tmp_path / "dg"
    kernels(dest, names=("old",))
    before = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    calls = []

    def broken(source, handle):
        calls.append(1)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        handle.write(source.read())

    monkeypatch.setattr(_tree.shutil, "copyfileobj", broken)
    with pytest.raises(OSError):
        dg.unpack(str(archive), str(dest))
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == before


def _targz(path, members, gz=True):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, "cache/k/a"
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                data = kind.encode() if kind.startswith("{") or kind == "[]" else b"abc"
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(raw.getvalue()) if gz else raw.getvalue())


GOOD = ("cache/kernel.a.1f2e/kernel.cubin", "file")
BAD_ARCHIVES = [
    ("absolute", [GOOD, ("/etc/cron.d/x", "file")]), ("climbs", [GOOD, ("cache/kernel.a.1f2e/../../x", "file")]),
    ("parent", [("../x", "file")]), ("outside cache", [GOOD, ("tmp/x", "file")]),
    ("symlink", [GOOD, ("cache/kernel.a.1f2e/kernel.cu", "link")]), ("hard link", [GOOD, ("cache/k/b", "hard")]),
    ("fifo", [GOOD, ("cache/kernel.a.1f2e/p", "fifo")]), ("twice", [GOOD, GOOD]),
    ("empty", []), ("only dirs", [("cache", "dir"), ("cache/kernel.a.1f2e", "dir")]),
    ("file at the root", [("cache", "file")]), ("below a file", [GOOD, ("cache/kernel.a.1f2e/kernel.cubin/x", "file")]),
    ("record not an object", [GOOD, (dg.BUILD_RECORD, "[]")]), ("record not JSON", [GOOD, (dg.BUILD_RECORD, "{")]),
    ("backslash", [GOOD, ("cache\\..\\x", "file")])]


@pytest.mark.parametrize("why,members", BAD_ARCHIVES, ids=[c[0] for c in BAD_ARCHIVES])
def test_a_bad_archive_is_refused_before_anything_is_written(tmp_path, why, members):
    archive = tmp_path / "bad.tar.gz"
    _targz(archive, members)
    dest = tmp_path / "dg"
    with pytest.raises(dg.DeepGemmError) as err:
        dg.unpack(str(archive), str(dest))
    assert str(archive) in str(err.value) and "expected" in str(err.value), why
    assert not dest.exists()


@pytest.mark.parametrize("content", [b"", b"not a tar at all", b"\x1f\x8b\x08\x00garbage"])
def test_an_unreadable_archive_is_named(tmp_path, content):
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(content)
    with pytest.raises(dg.DeepGemmError) as err:
        dg.unpack(str(archive), str(tmp_path / "dg"))
    assert str(archive) in str(err.value) and "expected" in str(err.value)
    assert not (tmp_path / "dg").exists()


def test_a_truncated_archive_is_named_and_the_cache_kept(tmp_path):
    archive = tmp_path / "a.tar.gz"
    dg.pack(str(kernels(tmp_path / "build", extra=os.urandom(200000))), str(archive), {})
    archive.write_bytes(archive.read_bytes()[:-5000])
    dest = tmp_path / "dg"
    dest.mkdir()
    with pytest.raises(dg.DeepGemmError) as err:
        dg.unpack(str(archive), str(dest))
    assert str(archive) in str(err.value) and "expected" in str(err.value)
    assert os.listdir(str(dest)) in ([], ["cache"])


def test_cache_facts(tmp_path):
    cache = kernels(tmp_path / "dg")
    assert dg.cache_facts(str(cache), KEY) == {"cache_dir": str(cache), "key": KEY, "current": False, "from": None,
                                               "seconds": None, "built_by": None, "entry_count": 3}
    dg.write_marker(str(cache), KEY, {"key": KEY, "from": "artifact store", "seconds": 4.2, "built_by": "n1"})
    facts = dg.cache_facts(str(cache), KEY)
    assert facts["current"] and facts["from"] == "artifact store" and facts["seconds"] == 4.2
    assert dg.cache_facts(str(cache), None)["current"] is False


# ------------------------------------------------------------------------------------------------------ the module
PRECOMPILE = r'''import hashlib, json, os, sys, time
log = os.environ["DG_LOG"]
with open(log, "a") as handle:
    handle.write(json.dumps({"argv": sys.argv[1:], "cache": os.environ.get("SGLANG_DG_CACHE_DIR"),
                             "env_file": os.environ.get("FROM_ENV_FILE"), "env_script": os.environ.get("FROM_ENV_SCRIPT")}) + "\n")
if os.environ.get("DG_SLEEP"):
    time.sleep(float(os.environ["DG_SLEEP"]))
if os.environ.get("DG_FAIL"):
    for i in range(40):
        print("warming line %d" % i)
    sys.stderr.write("AssertionError: tp_size must be divisible by number of nodes\n")
    sys.exit(3)
if os.environ.get("DG_EMPTY"):
    sys.exit(0)
cache = os.path.join(os.environ["SGLANG_DG_CACHE_DIR"], "cache")
for kind in ("qkv", "o", "grouped_up"):
    path = os.path.join(cache, "kernel.%s.%s" % (kind, hashlib.sha256(kind.encode()).hexdigest()[:32]))
    os.makedirs(path)
    open(os.path.join(path, "kernel.cubin"), "w").write("fixture cubin %s\n" % kind)
print("compile_deep_gemm: 3 kernels in %s" % cache)
'''


@pytest.fixture
def module_node(tmp_path, monkeypatch):
    """A node: an interpreter whose -m sglang.compile_deep_gemm is the fake above, the env script and env file; the
    module's options."""
    script = tmp_path / "precompile.py"
    script.write_text(PRECOMPILE)
    python = tmp_path / "py"
    python.write_text('#!/bin/sh\n[ "$1" = -m ] && [ "$2" = sglang.compile_deep_gemm ] || exit 9\nshift 2\n'
                      'exec python3 %s "$@"\n' % script)
    python.chmod(0o755)
    env_script = tmp_path / "unified-env.sh"
    env_script.write_text("export FROM_ENV_SCRIPT=1\n")
    env_file = tmp_path / "sglang-env.sh"
    env_file.write_text("export FROM_ENV_FILE=1\nexport SGLANG_DG_CACHE_DIR=/var/cache/sglang/deep_gemm\n")
    monkeypatch.setenv("DG_LOG", str(tmp_path / "runs.log"))
    return {"cache_dir": str(tmp_path / "n1" / "dg"), "artifact_dir": str(tmp_path / "n1" / "arts"),
            "python": str(python), "sglang_version": "0.5.19", "deep_gemm_version": "2.1.1+fixture",
            "config_sha256": CONFIG, "precompile_args": ARGS, "gpu_arch_list": "10.0", "torch_cuda": "12.9",
            "env_script": str(env_script), "env_file": str(env_file), "timeout": 600}


def runs(tmp_path):
    path = tmp_path / "runs.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_build_then_nothing_then_install_elsewhere_from_the_artifact(module_node, tmp_path):
    plan = run_module(deepgemm_cache, module_node, check_mode=True)
    assert not plan.failed and plan["changed"] and plan["would_build"] and plan["would_install"]
    key = plan["key"]
    assert key == old_key("0.5.19", "2.1.1+fixture", CONFIG, ARGS, "10.0", "12.9", "")
    assert tree(tmp_path / "n1") == [] and runs(tmp_path) == []  # check mode runs and writes nothing
    assert plan["ansible_facts"]["gpufleet_deepgemm"]["current"] is True  # predicted

    built = run_module(deepgemm_cache, module_node)
    assert not built.failed and built["changed"] and built["would_build"], built
    assert built["archive"] == os.path.join(module_node["artifact_dir"], key, key + ".tar.gz")
    assert os.path.isfile(built["archive"]) and len(built["added"]) == 3 and built["seconds"] is not None
    assert built["output"] == ["compile_deep_gemm: 3 kernels in %s/cache" % runs(tmp_path)[0]["cache"]]
    (run,) = runs(tmp_path)
    assert run["argv"] == ARGS + ["--timeout", "600"] and run["env_file"] == "1" and run["env_script"] == "1"
    assert run["cache"].startswith(module_node["artifact_dir"] + "/.deepgemm-build-")  # not the service's cache
    assert sorted(os.listdir(module_node["artifact_dir"])) == [key]  # the scratch directory is gone
    marker = json.loads(open(os.path.join(module_node["cache_dir"], ".gpufleet-deepgemm-%s.json" % key)).read())
    assert marker["key"] == key and marker["args"] == ARGS and marker["from"] == "built here"
    assert marker["seconds"] == built["seconds"] and marker["built_by"] == os.uname()[1]
    facts = built["ansible_facts"]["gpufleet_deepgemm"]
    assert facts["current"] and facts["entry_count"] == 3 and facts["from"] == "built here"

    again = run_module(deepgemm_cache, module_node)
    assert not again.failed and not again["changed"] and not again["would_install"] and len(runs(tmp_path)) == 1

    # another node of the key: the store put the archive into its artifact directory
    other = dict(module_node, cache_dir=str(tmp_path / "n2" / "dg"), artifact_dir=str(tmp_path / "n2" / "arts"))
    os.makedirs(os.path.join(other["artifact_dir"], key))
    with open(built["archive"], "rb") as src, open(os.path.join(other["artifact_dir"], key, key + ".tar.gz"), "wb") as dst:
        dst.write(src.read())
    check = run_module(deepgemm_cache, other, check_mode=True)
    assert check["would_install"] and not check["would_build"] and len(check["added"]) == 3
    assert not os.path.exists(other["cache_dir"])
    installed = run_module(deepgemm_cache, other)
    assert not installed.failed and installed["changed"] and not installed["would_build"] and len(runs(tmp_path)) == 1
    marker = json.loads(open(os.path.join(other["cache_dir"], ".gpufleet-deepgemm-%s.json" % key)).read())
    assert marker["from"] == "artifact store" and marker["seconds"] == built["seconds"]
    assert tree(tmp_path / "n2" / "dg" / "cache") == tree(tmp_path / "n1" / "dg" / "cache")


def test_a_failed_precompile_names_its_output_tail_and_writes_nothing(module_node, tmp_path, monkeypatch):
    monkeypatch.setenv("DG_FAIL", "1")
    result = run_module(deepgemm_cache, module_node)
    assert result.failed and result["rc"] == 3
    assert "failed (rc=3)" in result["msg"] and "nothing was packed or installed" in result["msg"]
    assert "tp_size must be divisible by number of nodes" in result["msg"] and "warming line 39" in result["msg"]
    assert "warming line 0 " not in result["msg"]  # the tail, not the whole output
    assert "warming line 0" in result["stdout"] and "Traceback" not in result["msg"]
    assert tree(tmp_path / "n1" / "dg") == [] and os.listdir(module_node["artifact_dir"]) == []


def test_a_precompile_past_its_time_is_killed(module_node, tmp_path, monkeypatch):
    monkeypatch.setenv("DG_SLEEP", "30")
    monkeypatch.setattr(deepgemm_cache, "GRACE", 1)
    result = run_module(deepgemm_cache, dict(module_node, timeout=1))
    assert result.failed and result["rc"] == 124
    assert "timed out after 2s (timeout 1 + 1s)" in result["msg"] and "nothing was packed" in result["msg"]
    assert runs(tmp_path)[0]["argv"][-2:] == ["--timeout", "1"]
    assert tree(tmp_path / "n1" / "dg") == [] and os.listdir(module_node["artifact_dir"]) == []


def test_a_precompile_that_leaves_no_kernel_fails(module_node, tmp_path, monkeypatch):
    monkeypatch.setenv("DG_EMPTY", "1")
    result = run_module(deepgemm_cache, module_node)
    assert result.failed and "left no file" in result["msg"] and "compile_deep_gemm" in result["msg"]
    assert tree(tmp_path / "n1" / "dg") == [] and os.listdir(module_node["artifact_dir"]) == []


def test_a_missing_env_file_fails_before_the_precompile(module_node, tmp_path):
    result = run_module(deepgemm_cache, dict(module_node, env_file=str(tmp_path / "none.sh")))
    assert result.failed and "env_file: %r does not exist" % str(tmp_path / "none.sh") in result["msg"]
    assert "expected" in result["msg"] and runs(tmp_path) == []
    # check mode does not need it (the role writes it in the same run)
    assert not run_module(deepgemm_cache, dict(module_node, env_file=str(tmp_path / "none.sh")), check_mode=True).failed


def test_a_bad_artifact_is_named_in_check_mode_and_in_the_install(module_node, tmp_path):
    key = run_module(deepgemm_cache, module_node, check_mode=True)["key"]
    archive = tmp_path / "n1" / "arts" / key / (key + ".tar.gz")
    archive.parent.mkdir(parents=True)
    _targz(archive, [GOOD, ("/etc/cron.d/x", "file")])
    for check_mode in (True, False):
        result = run_module(deepgemm_cache, module_node, check_mode=check_mode)
        assert result.failed and str(archive) in result["msg"] and "cannot be used" in result["msg"]
        assert "expected only directories and regular files under cache/" in result["msg"]
    assert tree(tmp_path / "n1" / "dg") == [] and runs(tmp_path) == []


@pytest.mark.parametrize("missing", ["sglang_version", "config_sha256"])
def test_check_mode_before_sglang_is_installed_says_why_it_cannot_key(module_node, tmp_path, missing):
    args = dict(module_node, **{missing: None})
    plan = run_module(deepgemm_cache, args, check_mode=True)
    assert not plan.failed and plan["key"] is None and plan["would_build"] and missing in plan["msg"]
    result = run_module(deepgemm_cache, args)
    assert result.failed and "%s: null; expected" % missing in result["msg"]
    assert tree(tmp_path / "n1") == [] and runs(tmp_path) == []


def test_a_marker_of_the_key_is_written_last(module_node, tmp_path, monkeypatch):
    """The marker appears only once every entry is in place: a failing marker write leaves the entries and no
    marker, and the next run installs again (keeping what is there)."""
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(deepgemm_cache, "write_marker", fail)
    result = run_module(deepgemm_cache, module_node)
    assert result.failed and "No space left on device" in result["msg"]
    assert len(os.listdir(os.path.join(module_node["cache_dir"], "cache"))) == 3
    assert not [n for n in os.listdir(module_node["cache_dir"]) if n.startswith(dg.MARKER_PREFIX)]
    monkeypatch.undo()
    monkeypatch.setenv("DG_LOG", str(tmp_path / "runs.log"))
    again = run_module(deepgemm_cache, module_node)
    assert not again.failed and again["changed"] and not again["would_build"] and again["kept"] and not again["added"]
    assert len(runs(tmp_path)) == 1
