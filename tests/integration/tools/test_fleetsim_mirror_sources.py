# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The source part of the fleetsim mirror: shared files placed into several trees, trees made by a patch,
and the bare git repository with the patch as a pull-request ref; all reproducible."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tools.fleetsim import mirror
from tools.fleetsim.common import FIXTURES

SOURCES = FIXTURES / "sources"
PR466_PATCH = FIXTURES / "patches" / "deepep-v1-pr466.patch"
PATCHED_BY_PR466 = {"README.md", "deep_ep/buffer.py"}


def tar_files(tarball: Path) -> dict[str, tuple[int, bytes]]:
    """{path below the top directory: (mode, content)} of the regular files of a tarball."""
    out = {}
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            if member.isreg():
                top, rel = member.name.split("/", 1)
                out[rel] = (member.mode, tar.extractfile(member).read())
    return out


def repo_files(root: Path) -> dict[str, tuple[int, bytes]]:
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        out[path.relative_to(root).as_posix()] = (0o755 if os.access(path, os.X_OK) else 0o644, path.read_bytes())
    return out


def git(git_dir: Path, *argv: str, data: bool = False):
    proc = subprocess.run(["git", "--git-dir=%s" % git_dir] + list(argv), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=True, env=dict(os.environ, GIT_CONFIG_NOSYSTEM="1"))
    return proc.stdout if data else proc.stdout.decode().strip()


def git_files(git_dir: Path, ref: str) -> dict[str, tuple[int, bytes]]:
    archive = git(git_dir, "archive", "--format=tar", ref, data=True)
    out = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isreg():  # git keeps the executable bit only; archive applies its umask to the rest
                out[member.name] = (0o755 if member.mode & 0o100 else 0o644, tar.extractfile(member).read())
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sources/ and git/ parts of the mirror, built twice from the repository's fixtures."""
    out = []
    for name in ("first", "second"):
        base = tmp_path_factory.mktemp(name)
        mirror.build_sources(SOURCES, base / "sources", quiet=True)
        mirror.build_git(FIXTURES, base / "git", quiet=True)
        out.append(base)
    return out


def test_shared_files_live_only_under_shared():
    placements = mirror.shared_placements()
    assert {(target, rel) for dummy, target, rel in placements} >= {
        ("deepep-v1-fixture", "tests/fleetsim_fixture.py"), ("deepep-v2-fixture", "tests/fleetsim_fixture.py"),
        ("deepep-v1-fixture", "tests/test_intranode.py"), ("deepep-v2-fixture", "tests/legacy/test_intranode.py")}
    for shared, target, rel in placements:
        assert shared.is_file() and not (SOURCES / target / rel).exists(), (shared, target, rel)
    assert not (SOURCES / "deepep-v1-pr466-fixture").exists()
    assert mirror.source_fixtures()["deepep-v1-pr466-fixture"] == PR466_PATCH


@pytest.mark.parametrize("name", ["deepep-v1-fixture", "deepep-v2-fixture"])
def test_tarball_is_the_tree_plus_its_shared_files(built, name):
    expected = repo_files(SOURCES / name)
    for shared, target, rel in mirror.shared_placements():
        if target == name:
            expected[rel] = (0o644, shared.read_bytes())
    tarball = built[0] / "sources" / ("%s.tar.gz" % name)
    assert tar_files(tarball) == expected
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
    assert members[0].name == name and all(m.name.startswith(name + "/") for m in members[1:])
    assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, mirror.FIXED_MTIME)}


def test_pr466_tarball_is_v1_with_the_patch(built):
    v1 = tar_files(built[0] / "sources" / "deepep-v1-fixture.tar.gz")
    pr466 = tar_files(built[0] / "sources" / "deepep-v1-pr466-fixture.tar.gz")
    assert set(pr466) == set(v1)
    assert {rel for rel in v1 if v1[rel] != pr466[rel]} == PATCHED_BY_PR466
    buffer = pr466["deep_ep/buffer.py"][1].decode()
    assert "def _setup_device_hca_mapping(local_rank: int = 0):" in buffer
    assert "self._setup_device_hca_mapping(self.runtime.nvl_rank)" in buffer
    assert "_setup_device_hca_mapping" not in v1["deep_ep/buffer.py"][1].decode()
    assert pr466["README.md"][1].decode().startswith("# deepep-v1-pr466-fixture\n")


def test_every_tarball_and_its_digest_are_the_same_on_a_rebuild(built):
    first, second = (sorted(p.name for p in (b / "sources").iterdir()) for b in built)
    assert first == second and "deepep-v1-pr466-fixture.tar.gz" in first
    for name in first:
        a, b = (b / "sources" / name for b in built)
        assert a.read_bytes() == b.read_bytes(), name
        if name.endswith(".tar.gz"):
            digest = hashlib.sha256(a.read_bytes()).hexdigest()
            assert (a.parent / (name + ".sha256")).read_text() == "%s  %s\n" % (digest, name)


def test_git_repository_main_and_pull_ref(built):
    git_dir = built[0] / "git" / "DeepEP.git"
    assert git(git_dir, "rev-parse", "--is-bare-repository") == "true"
    assert git(git_dir, "symbolic-ref", "HEAD") == "refs/heads/main"
    refs = git(git_dir, "for-each-ref", "--format=%(refname)").split()
    assert refs == ["refs/heads/main", "refs/pull/466/head"]
    main, pull = git(git_dir, "rev-parse", "main"), git(git_dir, "rev-parse", "refs/pull/466/head")
    assert git(git_dir, "rev-parse", "refs/pull/466/head^") == main
    assert git(git_dir, "rev-list", "--count", "main") == "1"
    assert git(git_dir, "log", "-1", "--format=%an <%ae> %at %ct %s", pull) == (
        "gpufleet.deepep fixtures <fixtures@gpufleet.invalid> %d %d Select each GPU's NIC from "
        "DEEP_EP_DEVICE_TO_HCA_MAPPING (DeepEP PR #466)" % (mirror.FIXED_MTIME, mirror.FIXED_MTIME))
    assert git_files(git_dir, "main") == tar_files(built[0] / "sources" / "deepep-v1-fixture.tar.gz")
    assert git_files(git_dir, pull) == tar_files(built[0] / "sources" / "deepep-v1-pr466-fixture.tar.gz")
    assert set(git(git_dir, "diff", "--name-only", main, pull).split()) == PATCHED_BY_PR466
    # The same commits on every build.
    other = built[1] / "git" / "DeepEP.git"
    assert [git(other, "rev-parse", ref) for ref in ("main", "refs/pull/466/head")] == [main, pull]


def test_a_clone_fetches_the_pull_request_ref(built, tmp_path):
    url = "file://%s" % (built[0] / "git" / "DeepEP.git")
    work = tmp_path / "DeepEP"
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    subprocess.run(["git", "clone", "--quiet", url, str(work)], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "fetch", "--quiet", "origin", "refs/pull/466/head:pr-466"],
                   check=True, env=env)
    subprocess.run(["git", "-C", str(work), "checkout", "--quiet", "pr-466"], check=True, env=env)
    assert "_setup_device_hca_mapping" in (work / "deep_ep" / "buffer.py").read_text()
    assert (work / "tests" / "fleetsim_fixture.py").is_file()


def make_fixtures(root: Path) -> Path:
    (root / "sources" / "base" / "tests").mkdir(parents=True)
    (root / "sources" / "base" / "app.py").write_text("VALUE = 1\n")
    (root / "shared").mkdir()
    (root / "shared" / "common.py").write_text("SHARED = True\n")
    (root / "shared" / "placements.txt").write_text("# comment\ncommon.py  base  tests/common.py\n")
    (root / "patches").mkdir()
    (root / "patches" / "base-fix.patch").write_text(
        "Fixture-Name: base-fixed\nFixture-Base: base\nSubject: fix it\n\n"
        "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-VALUE = 1\n+VALUE = 2\n")
    return root


def test_assembly_of_a_small_fixture_set(tmp_path):
    fixtures = make_fixtures(tmp_path / "fixtures")
    assert list(mirror.source_fixtures(fixtures)) == ["base", "base-fixed"]
    tree = mirror.assemble_source("base-fixed", tmp_path / "out", fixtures)
    assert (tree / "app.py").read_text() == "VALUE = 2\n"
    assert (tree / "tests" / "common.py").read_text() == "SHARED = True\n"
    assert sorted(p.name for p in tree.rglob("*")) == ["app.py", "common.py", "tests"]
    assert mirror.build_git(fixtures, tmp_path / "git", quiet=True) == []
    with pytest.raises(ValueError, match="unknown source fixture 'nope'"):
        mirror.assemble_source("nope", tmp_path / "nope", fixtures)


def test_a_patch_that_does_not_apply_names_itself(tmp_path):
    fixtures = make_fixtures(tmp_path / "fixtures")
    (fixtures / "sources" / "base" / "app.py").write_text("VALUE = 3\n")
    with pytest.raises(RuntimeError, match="base-fix.patch does not apply to base"):
        mirror.assemble_source("base-fixed", tmp_path / "out", fixtures)


def test_bad_patch_headers_and_placements_are_refused(tmp_path):
    fixtures = make_fixtures(tmp_path / "fixtures")
    (fixtures / "patches" / "base-fix.patch").write_text("Fixture-Base: base\n--- a/app.py\n+++ b/app.py\n")
    with pytest.raises(ValueError, match="no 'Fixture-Name: ...' line before the diff"):
        mirror.source_fixtures(fixtures)
    (fixtures / "patches" / "base-fix.patch").write_text("Fixture-Name: base\nFixture-Base: base\n")
    with pytest.raises(ValueError, match="source fixture base is defined twice"):
        mirror.source_fixtures(fixtures)
    (fixtures / "shared" / "placements.txt").write_text("common.py base ../escape.py\n")
    with pytest.raises(ValueError, match=r"placements.txt:1: expected '<shared file> <source fixture> <relative"):
        mirror.shared_placements(fixtures)
    (fixtures / "shared" / "placements.txt").write_text("missing.py base tests/missing.py\n")
    with pytest.raises(ValueError, match="missing.py is not a file"):
        mirror.shared_placements(fixtures)


def _fake_wheel(tree: Path, out: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    return mirror.fixture_wheel(tree, out)


def test_stand_in_wheelhouse_swaps_torch_only_and_installs_with_the_same_requirement(tmp_path):
    wheels = tmp_path / "wheels"
    real = _fake_wheel(tmp_path / "torch-2.13.0+cpu", wheels, {"torch/__init__.py": "import torch._C\n"})
    other = _fake_wheel(tmp_path / "numpy-2.3.0", wheels, {"numpy/__init__.py": "__version__ = '2.3.0'\n"})
    out = tmp_path / "wheels-standin"
    made = mirror.build_stand_in_wheels(wheels, out, quiet=True)
    assert [p.name for p in made] == ["torch-2.13.0+standin-py3-none-manylinux_2_18_x86_64.whl"]
    assert sorted(p.name for p in out.glob("*.whl")) == sorted([other.name, made[0].name])
    assert real.name not in os.listdir(out)
    # Reproducible: the same stand-in bytes on a rebuild.
    first = made[0].read_bytes()
    assert mirror.build_stand_in_wheels(wheels, out, quiet=True)[0].read_bytes() == first
    # What the nodes run: pip install torch==<profile version> from the wheelhouse, then read the version.
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "--no-index", "--find-links", str(out), "--target", str(target), "torch==2.13.0", "numpy"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert pip.returncode == 0, pip.stderr
    probe = subprocess.run([sys.executable, "-c", "import torch, torch.version; "
                            "print(torch.__version__, torch.version.cuda)"],
                           env=dict(os.environ, PYTHONPATH=str(target)), capture_output=True, text=True, check=False,
                           timeout=60)
    assert probe.stdout.split() == ["2.13.0+standin", "None"], probe.stderr
    # Nothing beyond the version: code that needs tensors fails at once instead of running on a fake.
    fails = subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1)"],
                           env=dict(os.environ, PYTHONPATH=str(target)), capture_output=True, text=True, check=False,
                           timeout=60)
    assert fails.returncode != 0 and "has no attribute 'zeros'" in fails.stderr


@pytest.mark.parametrize("version", ["0.5.8", "0.5.19", "0.5.23"])
def test_sglang_fixture_wheels_carry_the_one_compile_deep_gemm(tmp_path, version):
    """compile_deep_gemm.py lives once under shared/; every sglang fixture wheel installs that very file."""
    shared = FIXTURES / "shared" / "sglang" / "compile_deep_gemm.py"
    tree = FIXTURES / "wheels" / ("sglang-%s" % version)
    assert not (tree / "sglang" / "compile_deep_gemm.py").exists()
    wheel = mirror.fixture_wheel(tree, tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("sglang/compile_deep_gemm.py") == shared.read_bytes()
        record = zf.read("sglang-%s.dist-info/RECORD" % version).decode()
    assert "sglang/compile_deep_gemm.py,sha256=" in record


def test_a_wheel_file_placed_twice_is_refused(tmp_path):
    fixtures = tmp_path / "fixtures"
    (fixtures / "shared").mkdir(parents=True)
    (fixtures / "shared" / "tool.py").write_text("print('shared')\n")
    (fixtures / "shared" / "placements.txt").write_text("tool.py  wheels/demo-1.0  demo/tool.py\n")
    tree = fixtures / "wheels" / "demo-1.0"
    (tree / "demo").mkdir(parents=True)
    (tree / "demo" / "__init__.py").write_text("")
    wheel = mirror.fixture_wheel(tree, tmp_path / "out", fixtures)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("demo/tool.py") == b"print('shared')\n"
    (tree / "demo" / "tool.py").write_text("print('copy')\n")
    with pytest.raises(ValueError, match="also placed from"):
        mirror.fixture_wheel(tree, tmp_path / "out2", fixtures)
