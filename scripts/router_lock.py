#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the router locks the sglang_serve role ships (roles/sglang_serve/files/router-locks.json).

For each router pin (``smg==1.13.0``, ``sglang-router==0.3.2``: the role's sglang_serve_router_versions) and each
Python a router node may run (3.10, 3.11, 3.12), pip resolves the closure for manylinux x86_64 as a dry run
(``pip install --dry-run --ignore-installed --only-binary=:all: --report``) from the index, and every version chosen
gets the sha256 of every file the index serves for it that such a Python on Linux may install (PEP 691 JSON: its
cpXY or abi3 manylinux/musllinux wheels of every architecture, pure-Python wheels, the sdist), so pip on any Linux
router node finds its file's digest. The result: ``{pin: {"3.11": {"project==version": [sha256, ...]}}}``.

    python scripts/router_lock.py [--index https://pypi.org/simple] [--out roles/sglang_serve/files/router-locks.json]

Every command and request is bounded; the file is written whole (temporary file, then rename).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

PINS = ("smg==1.13.0", "sglang-router==0.3.2")
PYTHONS = ("3.10", "3.11", "3.12")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
REPO = Path(__file__).resolve().parents[1]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(pin: str, python: str, index: str, work: Path) -> dict[str, str]:
    report = work / f"report-{python}-{normalize(pin)}.json"
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
            str(report), "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *[arg for platform in PLATFORMS for arg in ("--platform", platform)], "--target", str(work / "target"),
            "--index-url", index, pin]
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"pip could not resolve {pin} for Python {python}: {proc.stderr[-2000:]}")
    data = json.loads(report.read_text())
    return {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in data["install"]}


def fits(wheel: str, python: str) -> bool:
    """A wheel a CPython ``python`` on Linux may install: its own cpXY tag or an older abi3 one, or pure Python."""
    if not wheel.endswith(".whl"):
        return True     # the sdist
    pytag, abi, plat = wheel[:-4].split("-")[-3:]
    if plat != "any" and "linux" not in plat:
        return False
    tags = pytag.split(".")
    if any(t.startswith("py3") or t == "py2" for t in tags):
        return True
    want = int(python.replace(".", ""))
    return any(t.startswith("cp") and t[2:].isdigit() and (int(t[2:]) == want or (abi == "abi3" and int(t[2:]) <= want))
               for t in tags)


def digests(project: str, version: str, index: str, python: str) -> list[str]:
    request = urllib.request.Request(f"{index.rstrip('/')}/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    out = []
    for entry in files:
        name = entry["filename"]
        stem = re.sub(r"\.(tar\.gz|zip)$", "", name) if not name.endswith(".whl") else name
        parts = stem.split("-")
        if len(parts) > 1 and normalize(parts[0]) == project and parts[1] == version and fits(name, python) \
                and entry["hashes"].get("sha256"):
            out.append(entry["hashes"]["sha256"])
    if not out:
        raise SystemExit(f"{index} lists no file with a sha256 for {project}=={version}")
    return sorted(set(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="https://pypi.org/simple")
    parser.add_argument("--out", default=str(REPO / "roles" / "sglang_serve" / "files" / "router-locks.json"))
    args = parser.parse_args()
    locks: dict = {}
    known: dict[tuple[str, str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pin in PINS:
            for python in PYTHONS:
                chosen = resolve(pin, python, args.index, Path(tmp))
                lock = {}
                for project, version in sorted(chosen.items()):
                    if (project, version, python) not in known:
                        known[project, version, python] = digests(project, version, args.index, python)
                    lock[f"{project}=={version}"] = known[project, version, python]
                locks.setdefault(pin, {})[python] = lock
                print(f"{pin} on Python {python}: {len(lock)} packages", file=sys.stderr)
    out = Path(args.out)
    fd, tmp_path = tempfile.mkstemp(dir=out.parent, prefix=".router-locks-")
    with os.fdopen(fd, "w") as handle:
        json.dump(locks, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp_path, 0o644)
    os.replace(tmp_path, out)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
