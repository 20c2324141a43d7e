# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local mirror that simulated nodes read at ``/srv/fleetsim-mirror/`` (read-only).

Built from ``tools/fleetsim/fixtures/``; adding a fixture is adding a directory or a line:

``debs/<package>/``
    a package root with ``DEBIAN/control``; built with ``dpkg-deb --root-owner-group -b`` into
    ``apt/``, indexed with ``dpkg-scanpackages`` as a flat repository usable as
    ``deb [trusted=yes] file:/srv/fleetsim-mirror/apt ./``.
``sources/<name>/``
    a source tree served as ``sources/<name>.tar.gz`` (reproducible: sorted entries, fixed mtime,
    root owner) with ``<name>.tar.gz.sha256`` beside it.
``shared/<file>`` + a line of ``shared/placements.txt``
    one file copied into several source trees (``<file> <source fixture> <path in its tree>``) or fixture wheels
    (``<file> wheels/<dist>-<version> <path in the wheel>``) before they are packed, so the trees keep one copy of it.
``patches/<name>.patch``
    a unified diff (``patch -p1``) whose header lines name the tree it makes (``Fixture-Name:``) from
    which source fixture (``Fixture-Base:``); served as ``sources/<Fixture-Name>.tar.gz`` like a directory.
    With ``Git-Repository:`` and ``Git-Ref:`` it is also one commit (``Subject:``) at that ref.
git repositories (:data:`GIT_REPOSITORIES`)
    ``git/<repo>`` bare, ``main`` = its base source fixture, plus the patches' refs; commits have a fixed
    author and date, so their ids are the same on every build. Inside a node:
    ``file:///srv/fleetsim-mirror/git/DeepEP.git`` (``main``: deepep-v1-fixture; ``refs/pull/466/head``:
    deepep-v1-pr466-fixture, fetched with ``git fetch URL refs/pull/466/head``).
``wheels.txt``
    pip requirement lines fetched with ``pip download`` for the nodes' Python (3.11, manylinux x86_64)
    into ``wheels/``, together with the CPU torch wheel found in ``/opt/wheels`` (and torch's own
    requirements). Downloads are cached beside the mirror, so a rebuild does not fetch again.

``wheels-standin/``
    the same wheelhouse with a stand-in torch (:func:`stand_in_torch`, a few kilobytes: ``torch.__version__`` and
    ``torch.version``, no tensors) in place of the CPU torch wheel. A node started with ``fleetsim up --torch
    stand-in`` sees it as ``wheels/``: for scenarios where torch is only a precondition (the builds read its
    version), not under test; pip installs it in a second instead of unpacking the real wheel.

``python -m tools.fleetsim mirror [--dest DIR] [--no-wheels]`` builds it by hand; ``fleetsim up`` builds
it when a fixture changed.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from tools.fleetsim.common import FIXTURES

FIXED_MTIME = 1767225600  # 2026-01-01T00:00:00Z: every file of a source tarball carries it
LOCAL_WHEEL_DIRS = ("/opt/wheels",)
# The nodes' glibc is Debian 12's 2.36: every manylinux tag up to it fits (pip does not widen one tag).
PIP_PLATFORMS = tuple(f"manylinux_2_{m}_x86_64" for m in range(36, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")
PIP_PYTHON = "3.11"
PATCH_HEADERS = ("Fixture-Name", "Fixture-Base", "Git-Repository", "Git-Ref", "Subject")
# Bare git repositories served under git/: name -> the source fixture committed as its main branch.
GIT_REPOSITORIES = {"DeepEP.git": "deepep-v1-fixture"}
GIT_IDENTITY = ("gpufleet.deepep fixtures", "fixtures@gpufleet.invalid")


def say(quiet: bool, msg: str) -> None:
    if not quiet:
        print(f"mirror: {msg}")


def _tree_digest(paths: list[Path], extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for base in paths:
        if not base.exists():
            continue
        items = [base] if base.is_file() else sorted(base.rglob("*"))
        for p in items:
            st = p.lstat()
            h.update(f"{p}|{st.st_size}|{int(st.st_mtime)}|{st.st_mode}\n".encode())
    return h.hexdigest()


def local_wheels() -> list[Path]:
    out = []
    for d in LOCAL_WHEEL_DIRS:
        out += sorted(Path(d).glob("*.whl"))
    return out


def fixtures_digest(fixtures: Path = FIXTURES, wheels: bool = True) -> str:
    """The digest of what a mirror is built from: the fixtures, this code (its layout) and the local wheels."""
    lw = local_wheels() if wheels else []
    return _tree_digest([fixtures, Path(__file__)] + lw, extra=f"wheels={wheels}")


def fleet_mirror_dir(root: Path, fixtures: Path = FIXTURES) -> Path:
    """The mirror a fleet of state root ``root`` uses: ``<root>/.mirrors/<fixtures digest>``, one per fixture tree,
    so that checkouts with different fixtures sharing a state root never rebuild each other's mirror under running
    nodes (downloads stay shared in ``<root>/.cache``)."""
    return Path(root) / ".mirrors" / fixtures_digest(fixtures)[:16]


def build(dest: Path, fixtures: Path = FIXTURES, wheels: bool = True, quiet: bool = False,
          force: bool = False, cache: Path | None = None) -> Path:
    """Build (or bring up to date) the mirror at ``dest``; return ``dest``. Downloads are cached in ``cache``
    (default: ``.cache`` beside ``dest``)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stamp = dest / ".stamp"
    lw = local_wheels() if wheels else []
    digest = fixtures_digest(fixtures, wheels)
    if not force and stamp.exists() and stamp.read_text().strip() == digest:
        return dest
    build_apt(fixtures / "debs", dest / "apt", quiet)
    build_sources(fixtures / "sources", dest / "sources", quiet)
    build_git(fixtures, dest / "git", quiet)
    if wheels:
        ok = build_wheels(fixtures / "wheels.txt", lw, dest / "wheels", (cache or dest.parent / ".cache") / "wheels",
                          quiet)
    else:
        (dest / "wheels").mkdir(exist_ok=True)
        ok = True
    build_fixture_wheels(fixtures / "wheels", dest / "wheels", quiet)
    build_stand_in_wheels(dest / "wheels", dest / "wheels-standin", quiet)
    for house in (dest / "wheels", dest / "wheels-standin"):
        add_arch_aliases(house, quiet)
    if ok:
        stamp.write_text(digest + "\n")
    return dest


# ---------------------------------------------------------------------------------------------- apt

def staged_package(pkg: Path, dest: Path) -> Path:
    """A copy of the package root ``pkg`` at ``dest``, with its build step run on it where it has one: the
    executable ``<pkg>.build`` beside the root (what a fixture compiles instead of committing a binary, such as the
    DOCA-OFED fixture's libmlx5), given the staged root; files keep the fixed mtime."""
    shutil.copytree(pkg, dest, symlinks=True)
    step = pkg.parent / (pkg.name + ".build")
    if step.is_file():
        proc = subprocess.run([sys.executable, str(step), str(dest)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{step.name} failed: {proc.stdout.strip()[-1000:]}")
        for path in [dest] + list(dest.rglob("*")):
            if not path.is_symlink():
                os.utime(path, (FIXED_MTIME, FIXED_MTIME))
    return dest


def build_apt(debs: Path, out: Path, quiet: bool = False) -> list[Path]:
    """Build every package root under ``debs`` and index them as a flat apt repository in ``out``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    built = []
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(FIXED_MTIME))
    for pkg in sorted(p for p in debs.glob("*") if (p / "DEBIAN" / "control").is_file()) if debs.is_dir() else []:
        with tempfile.TemporaryDirectory(prefix="fleetsim-deb-") as tmp:
            root = staged_package(pkg, Path(tmp) / pkg.name)
            proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(out)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"dpkg-deb -b {pkg} failed: {proc.stderr.strip()}")
        built.append(pkg)
        say(quiet, f"apt: built {pkg.name}")
    scan = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=out,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if scan.returncode != 0:
        raise RuntimeError(f"dpkg-scanpackages failed: {scan.stderr.decode(errors='replace').strip()}")
    (out / "Packages").write_bytes(scan.stdout)
    with open(out / "Packages.gz", "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write(scan.stdout)
    lines = ["Origin: fleetsim", "Label: fleetsim fixtures", "Suite: fleetsim", "Codename: fleetsim",
             "Date: Thu, 01 Jan 2026 00:00:00 UTC", "Description: fixture packages of the simulated fleet"]
    for algo, field in (("md5", "MD5Sum"), ("sha256", "SHA256")):
        lines.append(f"{field}:")
        for name in ("Packages", "Packages.gz"):
            data = (out / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {name}")
    (out / "Release").write_text("\n".join(lines) + "\n")
    return built


# ------------------------------------------------------------------------------------------ sources

def reproducible_tarball(src: Path, dest: Path, top: str) -> str:
    """Write ``src`` as ``dest`` (.tar.gz with top directory ``top``); return its sha256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [src] + sorted(src.rglob("*"), key=lambda p: p.relative_to(src).as_posix())
        for path in entries:
            rel = path.relative_to(src).as_posix()
            arcname = top if rel == "." else f"{top}/{rel}"
            info = tar.gettarinfo(str(path), arcname)
            info.mtime = FIXED_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                if info.isdir():
                    info.mode = 0o755
                tar.addfile(info)
    tmp = dest.with_name(dest.name + ".tmp")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write(buf.getvalue())
    os.replace(tmp, dest)
    return hashlib.sha256(dest.read_bytes()).hexdigest()


def build_sources(sources: Path, out: Path, quiet: bool = False) -> list[str]:
    """Pack every source fixture (see :func:`source_fixtures`) as ``out/<name>.tar.gz`` with its ``.sha256``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    names = []
    for name in source_fixtures(sources.parent):
        with tempfile.TemporaryDirectory(prefix="fleetsim-source-") as tmp:
            tree = assemble_source(name, Path(tmp) / name, sources.parent)
            tarball = out / f"{name}.tar.gz"
            digest = reproducible_tarball(tree, tarball, name)
        (out / f"{name}.tar.gz.sha256").write_text(f"{digest}  {tarball.name}\n")
        names.append(name)
        say(quiet, f"sources: {tarball.name} {digest[:12]}")
    return names


def patch_headers(patch: Path) -> dict[str, str]:
    """The ``Key: value`` lines (:data:`PATCH_HEADERS`) before the diff of a ``patches/*.patch`` fixture."""
    headers = {}
    for line in patch.read_text().splitlines():
        if line.startswith(("--- ", "diff ", "Index: ")):
            break
        key, sep, value = line.partition(":")
        if sep and key in PATCH_HEADERS:
            headers[key] = value.strip()
    for key in ("Fixture-Name", "Fixture-Base"):
        if not headers.get(key):
            raise ValueError(f"{patch}: no '{key}: ...' line before the diff")
    return headers


def shared_placements(fixtures: Path = FIXTURES) -> list[tuple[Path, str, str]]:
    """``(file under shared/, source fixture, path in its tree)`` of every line of ``shared/placements.txt``."""
    listing = fixtures / "shared" / "placements.txt"
    if not listing.is_file():
        return []
    out = []
    for number, line in enumerate(listing.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 3 or any(f.startswith("/") or ".." in f.split("/") for f in (fields[0], fields[2])):
            raise ValueError(f"{listing}:{number}: expected '<shared file> <source fixture> <relative path>', "
                             f"got {line!r}")
        shared = fixtures / "shared" / fields[0]
        if not shared.is_file():
            raise ValueError(f"{listing}:{number}: {shared} is not a file")
        out.append((shared, fields[1], fields[2]))
    return out


def source_fixtures(fixtures: Path = FIXTURES) -> dict[str, Path | None]:
    """Every source fixture by name: ``None`` for a directory of ``sources/``, else the patch that makes it."""
    sources = fixtures / "sources"
    out: dict[str, Path | None] = {p.name: None for p in sorted(sources.glob("*")) if p.is_dir()}
    for patch in sorted((fixtures / "patches").glob("*.patch")):
        name = patch_headers(patch)["Fixture-Name"]
        if name in out:
            raise ValueError(f"{patch}: the source fixture {name} is defined twice")
        out[name] = patch
    return dict(sorted(out.items()))


def assemble_source(name: str, dest: Path, fixtures: Path = FIXTURES) -> Path:
    """Write the tree of source fixture ``name`` to ``dest`` (a new directory) and return ``dest``.

    A directory of ``sources/`` is copied and gets the files ``shared/placements.txt`` places in it; a
    patched fixture is its ``Fixture-Base`` assembled that way with the patch applied (``patch -p1``, no fuzz).
    """
    specs = source_fixtures(fixtures)
    if name not in specs:
        raise ValueError(f"unknown source fixture {name!r}; known: {', '.join(specs)}")
    patch = specs[name]
    if patch is None:
        shutil.copytree(fixtures / "sources" / name, dest, ignore=shutil.ignore_patterns("__pycache__"))
        for shared, target, rel in shared_placements(fixtures):
            if target == name:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(shared, dest / rel)
        return dest
    base = patch_headers(patch)["Fixture-Base"]
    assemble_source(base, dest, fixtures)
    proc = subprocess.run(["patch", "-p1", "-F0", "-N", "-t", "-s", "--no-backup-if-mismatch", "-d", str(dest),
                           "-i", str(patch.resolve())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{patch.name} does not apply to {base}: {proc.stdout.strip()}")
    return dest


def _git(git_dir: Path, *argv: str, cwd: Path | None = None, env: dict | None = None) -> str:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *argv], cwd=cwd, env=env or _git_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _git_env() -> dict[str, str]:
    """No user or system configuration, a fixed identity and date: the same tree gives the same commit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    name, email = GIT_IDENTITY
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C",
               GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_AUTHOR_DATE=f"{FIXED_MTIME} +0000",
               GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email, GIT_COMMITTER_DATE=f"{FIXED_MTIME} +0000")
    return env


def _commit_tree(git_dir: Path, tree: Path, message: str, parents: list[str]) -> str:
    env = dict(_git_env(), GIT_INDEX_FILE=str(tree.parent / f"{tree.name}.index"))
    _git(git_dir, f"--work-tree={tree}", "add", "--all", "--force", ".", cwd=tree, env=env)
    tree_id = _git(git_dir, "write-tree", env=env)
    argv = ["commit-tree", "--no-gpg-sign", tree_id, "-m", message]
    for parent in parents:
        argv += ["-p", parent]
    return _git(git_dir, *argv, env=env)


def build_git(fixtures: Path, out: Path, quiet: bool = False) -> list[str]:
    """Serve :data:`GIT_REPOSITORIES` as bare repositories in ``out``: ``main`` is the base fixture (a repository
    whose base is not among the fixtures is left out); every patch naming the repository (``Git-Repository:``)
    is one commit on top of it, at its ``Git-Ref:``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    specs = source_fixtures(fixtures)
    built = []
    for repo, base in sorted(GIT_REPOSITORIES.items()):
        if base not in specs:
            continue
        git_dir = out / repo
        _git(git_dir, "init", "--bare", "--quiet", "--template=", "--initial-branch=main", str(git_dir))
        with tempfile.TemporaryDirectory(prefix="fleetsim-git-") as tmp:
            main = _commit_tree(git_dir, assemble_source(base, Path(tmp) / base, fixtures),
                                f"{base}\n\nThe {base} source fixture of the simulated fleet.", [])
            _git(git_dir, "update-ref", "refs/heads/main", main)
            refs = ["refs/heads/main"]
            for name, patch in specs.items():
                headers = patch_headers(patch) if patch else {}
                if headers.get("Git-Repository") != repo or not headers.get("Git-Ref"):
                    continue
                if headers["Fixture-Base"] != base:
                    raise ValueError(f"{patch}: Git-Repository {repo} holds {base}, not {headers['Fixture-Base']}")
                commit = _commit_tree(git_dir, assemble_source(name, Path(tmp) / name, fixtures),
                                      headers.get("Subject") or name, [main])
                _git(git_dir, "update-ref", headers["Git-Ref"], commit)
                refs.append(headers["Git-Ref"])
        built.append(repo)
        say(quiet, f"git: {repo} {main[:12]} ({', '.join(refs)})")
    return built


# ------------------------------------------------------------------------------------------- wheels

def wheel_requirements(wheel: Path) -> list[str]:
    """``Requires-Dist`` lines of a wheel that apply without extras."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8", errors="replace")
    reqs = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            if "extra ==" not in req.replace("extra==", "extra =="):
                reqs.append(req)
    return reqs


def requirement_lines(wheels_txt: Path) -> list[str]:
    if not wheels_txt.is_file():
        return []
    out = []
    for line in wheels_txt.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _link_or_copy(src: Path, dest: Path) -> None:
    if dest.exists():
        if dest.stat().st_ino == src.stat().st_ino or dest.stat().st_size == src.stat().st_size:
            return
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def build_wheels(wheels_txt: Path, local: list[Path], out: Path, cache: Path, quiet: bool = False) -> bool:
    """Fill ``out`` with the wheels; False when the download failed (the mirror is then partial)."""
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    reqs = requirement_lines(wheels_txt)
    for wheel in local:
        reqs += wheel_requirements(wheel)
    ok = True
    if reqs:
        req_file = cache / "requirements.txt"
        req_file.write_text("\n".join(reqs) + "\n")
        cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
               "--only-binary=:all:", "--python-version", PIP_PYTHON, "--implementation", "cp",
               "--dest", str(cache), "-r", str(req_file)]
        for platform in PIP_PLATFORMS:
            cmd[-4:-4] = ["--platform", platform]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if proc.returncode != 0:
            ok = False
            sys.stderr.write(f"mirror: pip download failed (wheels/ is partial): {proc.stdout.strip()[-2000:]}\n")
    for wheel in sorted(cache.glob("*.whl")) + list(local):
        _link_or_copy(wheel, out / wheel.name)
    say(quiet, f"wheels: {len(list(out.glob('*.whl')))} in {out}")
    return ok


FIXTURE_WHEEL_TAG = "py3-none-manylinux_2_18_x86_64"
# Files of a fixture wheel tree that are not packed: its dependencies (one PEP 508 requirement a line, written
# as Requires-Dist so that pip resolves them like a real wheel's) and its entry points (copied to .dist-info).
FIXTURE_REQUIRES = "fixture-requires.txt"
FIXTURE_ENTRY_POINTS = "fixture-entry-points.txt"


def fixture_requirements(tree: Path) -> list[str]:
    """The requirement lines of ``tree/fixture-requires.txt`` (comments and blank lines dropped)."""
    listing = tree / FIXTURE_REQUIRES
    if not listing.is_file():
        return []
    out = []
    for number, line in enumerate(listing.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if any(c in line for c in "\n\r") or not line[0].isalnum():
            raise ValueError(f"{listing}:{number}: expected a requirement such as 'torch==2.14.1', got {line!r}")
        out.append(line)
    return out


def fixture_wheel(tree: Path, out: Path, fixtures: Path = FIXTURES) -> Path:
    """Pack the fixture directory ``tree`` (``wheels/<dist>-<version>/``, the files the wheel installs, plus the
    files ``shared/placements.txt`` places in ``wheels/<dist>-<version>``) as
    ``out/<dist>-<version>-py3-none-manylinux_2_18_x86_64.whl``; return its path.

    Reproducible: sorted entries, a fixed timestamp, fixed modes (0755 for ``*.so*``, else 0644) and a
    generated ``.dist-info`` (``METADATA``, ``WHEEL``, ``RECORD``), so the same tree gives the same bytes.
    """
    dist, sep, version = tree.name.rpartition("-")
    if not sep or not dist or not version:
        raise ValueError(f"{tree}: a fixture wheel directory is named <dist>-<version>, e.g. nvidia_nccl_cu13-2.30.7")
    dist = dist.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    sources = {path.relative_to(tree).as_posix(): path
               for path in tree.rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    for shared, target, rel in shared_placements(fixtures):
        if target == f"wheels/{tree.name}":
            if rel in sources:
                raise ValueError(f"{tree}/{rel}: also placed from {shared}; keep one copy (under shared/)")
            sources[rel] = shared
    files = []
    for rel, path in sorted(sources.items()):
        if rel in (FIXTURE_REQUIRES, FIXTURE_ENTRY_POINTS):
            continue
        files.append((rel, path.read_bytes(), 0o755 if ".so" in path.name else 0o644))
    requires = "".join(f"Requires-Dist: {line}\n" for line in fixture_requirements(tree))
    files.append((f"{info}/METADATA", (f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\n"
                                       f"Version: {version}\nSummary: fixture wheel of the simulated fleet "
                                       f"(tools/fleetsim/fixtures/wheels/{tree.name})\n{requires}\n").encode(),
                  0o644))
    if (tree / FIXTURE_ENTRY_POINTS).is_file():
        files.append((f"{info}/entry_points.txt", (tree / FIXTURE_ENTRY_POINTS).read_bytes(), 0o644))
    files.append((f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: fleetsim mirror\nRoot-Is-Purelib: false\n"
                                    f"Tag: {FIXTURE_WHEEL_TAG}\n").encode(), 0o644))
    record = []
    for rel, data, _mode in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{dist}-{version}-{FIXTURE_WHEEL_TAG}.whl"
    tmp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, data, mode in files:
            entry = zipfile.ZipInfo(rel, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    os.replace(tmp, wheel)
    return wheel


def build_fixture_wheels(trees: Path, out: Path, quiet: bool = False) -> list[Path]:
    """Pack every ``trees/<dist>-<version>/`` fixture as a wheel into ``out`` (see :func:`fixture_wheel`)."""
    built = [fixture_wheel(tree, out, trees.parent) for tree in sorted(trees.glob("*-*")) if tree.is_dir()] \
        if trees.is_dir() else []
    for wheel in built:
        say(quiet, f"wheels: fixture {wheel.name}")
    return built


# The CPU of a Grace host (GB200/GB300 NVL72 trays): its nodes' pip asks for aarch64 wheels (fakehw host_arch).
ALIAS_ARCH = "aarch64"


def add_arch_aliases(house: Path, quiet: bool = False) -> list[Path]:
    """Give every x86_64 wheel of ``house`` an alias named for aarch64 (the same file, hard-linked: the same sha256,
    so a hash-locked install takes either): what an aarch64 node of the simulated fleet installs. The binaries
    inside stay x86 stand-ins, as every fixture's; what the collection must choose by the node's CPU is the wheel's
    platform tag. Returns the aliases made."""
    made = []
    for wheel in sorted(house.glob("*_x86_64.whl")):
        stem, platform = wheel.name[:-len(".whl")].rsplit("-", 1)
        alias = house / ("%s-%s.whl" % (stem, platform.replace("x86_64", ALIAS_ARCH)))
        _link_or_copy(wheel, alias)
        made.append(alias)
    say(quiet, f"{house.name}: {len(made)} aarch64 aliases")
    return made


# ------------------------------------------------------------------------------- stand-in torch

STAND_IN_LOCAL = "standin"


def stand_in_torch(real: Path, out: Path) -> Path:
    """A stand-in for the torch wheel ``real`` in ``out``: same public version with the local label ``+standin``
    (``torch==2.13.0`` still matches it), pure Python, only ``torch.__version__`` and ``torch.version`` (``cuda``
    None, as in the CPU wheel). Enough for what reads torch's version (DeepEP's build key, the fixtures' builds,
    the pytorch role's probe); anything that needs tensors fails at once on ``import torch.<x>``."""
    version = real.name.split("-")[1].split("+")[0] + "+" + STAND_IN_LOCAL
    with tempfile.TemporaryDirectory(prefix="fleetsim-torch-") as tmp:
        tree = Path(tmp) / f"torch-{version}"
        (tree / "torch").mkdir(parents=True)
        (tree / "torch" / "__init__.py").write_text(
            '"""Stand-in torch of the simulated fleet (tools/fleetsim/mirror.py): its version and nothing else."""\n'
            "from torch.version import __version__  # noqa: F401\n")
        (tree / "torch" / "version.py").write_text(
            f"__version__ = {version!r}\ngit_version = 'fleetsim-stand-in'\ncuda = None\nhip = None\n")
        return fixture_wheel(tree, out)


def build_stand_in_wheels(wheels: Path, out: Path, quiet: bool = False) -> list[Path]:
    """``out`` = every wheel of ``wheels`` but torch's, plus a stand-in torch per torch wheel there.

    Updated in place (the directory itself is kept): running nodes of ``fleetsim up --torch stand-in`` have it
    bind-mounted, and a replaced directory would leave them an empty, deleted one."""
    out.mkdir(parents=True, exist_ok=True)
    made, wanted = [], set()
    for wheel in sorted(wheels.glob("*.whl")):
        if wheel.name.endswith("_%s.whl" % ALIAS_ARCH):
            continue  # an alias (add_arch_aliases): made again for the stand-ins
        if wheel.name.startswith("torch-"):
            made.append(stand_in_torch(wheel, out))
            wanted.add(made[-1].name)
            say(quiet, f"wheels-standin: {made[-1].name} for {wheel.name}")
            continue
        dest = out / wheel.name
        wanted.add(wheel.name)
        if dest.exists() and dest.stat().st_ino == wheel.stat().st_ino:
            continue
        tmp = out / (wheel.name + ".tmp")
        if tmp.exists():
            tmp.unlink()
        try:
            os.link(wheel, tmp)
        except OSError:
            shutil.copy2(wheel, tmp)
        os.replace(tmp, dest)
    for stale in out.iterdir():
        if stale.name not in wanted and stale.is_file():
            stale.unlink()
    return made
