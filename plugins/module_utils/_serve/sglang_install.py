# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The install of SGLang beside the collection's stack: sglang's requirements (``REQUIRES_SCRIPT``), the holds as pip
constraints, the offline wheelhouse checked against its checksums, and what an install moved.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import hashlib
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import (
    PROJECT_NAME_RE,
    SglangError,
    normalize,
)

__all__ = [
    "REQUIRES_SCRIPT",
    "moved",
    "constraints_for",
    "filter_requirements",
    "read_sha256sums",
    "check_wheelhouse",
    "wheelhouse_problems",
]

# Runs in the target interpreter after ``pip install --no-deps sglang==V``: sglang's requirements that apply to
# this environment without extras, as ``[[name, requirement string], ...]`` (markers evaluated by pip's own
# vendored packaging).
REQUIRES_SCRIPT = r"""
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
out = []
for line in metadata.requires(sys.argv[1]) or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    spec = str(req.specifier)
    out.append([req.name, req.name + ("[%s]" % ",".join(sorted(req.extras)) if req.extras else "") + spec])
print(json.dumps(out))
"""


def moved(before, after, holds, deep_ep_after=None, bundled=False):
    """What an install moved: ``[str]`` naming each project whose version is not the held one and a deep_ep
    that is no longer the collection's. ``holds``: ``{project: version}``; ``before``/``after``: ``{project:
    version}`` of the environment."""
    out = []
    for project, version in sorted((holds or {}).items()):
        now = (after or {}).get(normalize(project))
        if not _same_version(now, version):
            was = (before or {}).get(normalize(project))
            since = (" (was %s)" % was) if was and was != now else ""
            out.append("%s is %s, held at %s%s" % (project, now or "not installed", version, since))
    if deep_ep_after is not None and not bundled and not deep_ep_after.get("collection"):
        out.extend("deep_ep: %s" % reason for reason in deep_ep_after.get("reasons") or [])
    return out


def _same_version(installed, held):
    """``2.13.0+cpu`` satisfies ``==2.13.0`` (PEP 440: no local label in the specifier); otherwise exact."""
    if installed is None or held is None:
        return installed == held
    installed, held = str(installed), str(held)
    return installed == held or ("+" not in held and installed.split("+", 1)[0] == held)


def constraints_for(holds):
    """Sorted ``project==version`` lines for ``holds``."""
    out = []
    for project, version in sorted((holds or {}).items()):
        if not PROJECT_NAME_RE.fullmatch(str(project)) or not version:
            raise SglangError("hold %r=%r: expected a pip project and a version such as torch=2.9.1" % (project, version))
        out.append("%s==%s" % (normalize(project), version))
    return out


def filter_requirements(requirements, exclude):
    """``(kept, dropped)`` of ``[[name, requirement], ...]``, dropping projects named in ``exclude``."""
    excluded = set(normalize(e) for e in exclude or [])
    kept, dropped = [], []
    for name, req in requirements or []:
        (dropped if normalize(name) in excluded else kept).append(req)
    return kept, dropped


def read_sha256sums(text):
    """``{file name: sha256}`` of a ``SHA256SUMS`` text (``<hex>  <name>`` lines)."""
    out = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            raise SglangError("SHA256SUMS line %d %r: expected '<64 hex digits>  <file name>'" % (number, line))
        out[parts[1].lstrip("*").strip()] = parts[0]
    return out


def wheelhouse_problems(directory, checksums=None):
    """An offline wheelhouse checked before anything is installed from it: its wheels against ``checksums``
    (``{name: sha256}``), else against its ``SHA256SUMS``; ``[problem]`` (empty when every wheel matches)."""
    if checksums is None:
        sums = os.path.join(directory, "SHA256SUMS")
        try:
            with open(sums, "r", encoding="utf-8") as handle:
                text = handle.read()
        except (IOError, OSError, UnicodeDecodeError):
            return ["wheelhouse %s has no readable SHA256SUMS and wheelhouse_checksums is unset; give the sha256 of "
                    "every wheel" % directory]
        try:
            checksums = read_sha256sums(text)
        except SglangError as exc:
            return ["%s: %s" % (sums, exc)]
    return check_wheelhouse(directory, checksums)


def check_wheelhouse(directory, checksums):
    """Every ``*.whl`` of an offline wheelhouse against ``checksums`` (``{name: sha256}``): ``[problem]``."""
    problems = []
    try:
        wheels = sorted(n for n in os.listdir(directory) if n.endswith(".whl"))
    except OSError as exc:
        return ["wheelhouse %s cannot be read: %s" % (directory, exc)]
    if not wheels:
        problems.append("wheelhouse %s holds no wheels" % directory)
    for name in wheels:
        want = (checksums or {}).get(name)
        if want is None:
            problems.append("%s has no checksum" % name)
            continue
        digest = hashlib.sha256()
        with open(os.path.join(directory, name), "rb") as handle:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(block)
        if digest.hexdigest() != want:
            problems.append("%s: sha256 %s, expected %s" % (name, digest.hexdigest(), want))
    return problems
