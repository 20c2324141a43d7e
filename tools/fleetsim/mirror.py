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
``wheels.txt``
    pip requirement lines fetched with ``pip download`` for the nodes' Python (3.11, manylinux x86_64)
    into ``wheels/``, together with the CPU torch wheel found in ``/opt/wheels`` (and torch's own
    requirements). Downloads are cached beside the mirror, so a rebuild does not fetch again.

``python -m tools.fleetsim mirror [--dest DIR] [--no-wheels]`` builds it by hand; ``fleetsim up`` builds
it when a fixture changed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tools.fleetsim.common import FIXTURES

FIXED_MTIME = 1767225600  # 2026-01-01T00:00:00Z: every file of a source tarball carries it
LOCAL_WHEEL_DIRS = ("/opt/wheels",)
# The nodes' glibc is Debian 12's 2.36: every manylinux tag up to it fits (pip does not widen one tag).
PIP_PLATFORMS = tuple(f"manylinux_2_{m}_x86_64" for m in range(36, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")
PIP_PYTHON = "3.11"


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


def build(dest: Path, fixtures: Path = FIXTURES, wheels: bool = True, quiet: bool = False,
          force: bool = False) -> Path:
    """Build (or bring up to date) the mirror at ``dest``; return ``dest``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stamp = dest / ".stamp"
    lw = local_wheels() if wheels else []
    digest = _tree_digest([fixtures] + lw, extra=f"wheels={wheels}")
    if not force and stamp.exists() and stamp.read_text().strip() == digest:
        return dest
    build_apt(fixtures / "debs", dest / "apt", quiet)
    build_sources(fixtures / "sources", dest / "sources", quiet)
    if wheels:
        ok = build_wheels(fixtures / "wheels.txt", lw, dest / "wheels", dest.parent / ".cache" / "wheels", quiet)
    else:
        (dest / "wheels").mkdir(exist_ok=True)
        ok = True
    if ok:
        stamp.write_text(digest + "\n")
    return dest


# ---------------------------------------------------------------------------------------------- apt

def build_apt(debs: Path, out: Path, quiet: bool = False) -> list[Path]:
    """Build every package root under ``debs`` and index them as a flat apt repository in ``out``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    built = []
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(FIXED_MTIME))
    for pkg in sorted(p for p in debs.glob("*") if (p / "DEBIAN" / "control").is_file()) if debs.is_dir() else []:
        proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(pkg), str(out)],
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
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    names = []
    for src in sorted(p for p in sources.glob("*") if p.is_dir()) if sources.is_dir() else []:
        tarball = out / f"{src.name}.tar.gz"
        digest = reproducible_tarball(src, tarball, src.name)
        (out / f"{src.name}.tar.gz.sha256").write_text(f"{digest}  {tarball.name}\n")
        names.append(src.name)
        say(quiet, f"sources: {tarball.name} {digest[:12]}")
    return names


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
