# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""sglang_env's request checked before anything is read or written (versions, holds, project names, package sources,
wheelhouse checksums, requirement hashes), and the requirements file of a hash-checked ``pip install``.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import hashlib
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._http import HttpInputError, check_source
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import (
    PROJECT_NAME_RE,
    SglangError,
    normalize,
)

__all__ = [
    "check_request",
    "check_source_url",
    "check_requirements_hashes",
    "hashed_requirements",
    "lock_from_report",
]

_PIP_VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+!_-]*")
_CUDA_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PINNED_RE = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9A-Za-z][0-9A-Za-z.+!_-]*)")


def check_source_url(value, option, paths=False):
    """A package source (module_utils/_http.check_source), its refusal as a SglangError."""
    try:
        return check_source(value, option, paths=paths)
    except HttpInputError as exc:
        raise SglangError(str(exc))


def check_requirements_hashes(hashes):
    """``requirements_hashes`` -> ``{normalized project: (version, [sha256, ...])}``; SglangError naming the entry and
    the form (``project==version: [sha256, ...]``, each 64 lowercase hex digits)."""
    form = "expected project==version: [<sha256>, ...] (64 hex digits each, e.g. sglang==0.5.8: [3f2a...])"
    out = {}
    if hashes is None:
        return out
    if not isinstance(hashes, dict):
        raise SglangError("requirements_hashes %r: %s" % (hashes, form))
    for key, value in hashes.items():
        match = _PINNED_RE.fullmatch(str(key).strip()) if isinstance(key, str) else None
        if not match:
            raise SglangError("requirements_hashes %r: the key is not project==version; %s" % (key, form))
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or \
                not all(isinstance(v, str) and _HEX64.fullmatch(v.strip().lower().replace("sha256:", "", 1))
                        for v in values):
            raise SglangError("requirements_hashes %s: %r is not a list of sha256 digests; %s" % (key, value, form))
        project = normalize(match.group(1))
        if project in out:
            raise SglangError("requirements_hashes %s: %s is pinned twice (%s and %s); %s"
                              % (key, project, out[project][0], match.group(2), form))
        out[project] = (match.group(2), [v.strip().lower().replace("sha256:", "", 1) for v in values])
    return out


def lock_from_report(report, exclude=()):
    """pip's installation report (``pip install --dry-run --report``, format version 1) -> ``({project==version:
    [sha256]}, [excluded project==version])``: every package pip chose, with the digest of the file it chose, the
    projects of ``exclude`` left out. SglangError naming the entry when the report is not that format, a package has
    no sha256 (a directory or VCS requirement: nothing to pin) or one project comes twice."""
    form = ("expected pip's installation report version 1: {version: '1', install: [{metadata: {name, version}, "
            "download_info: {url, archive_info: {hashes: {sha256}}}}, ...]}")
    if not isinstance(report, dict) or str(report.get("version")) != "1" or not isinstance(report.get("install"), list):
        raise SglangError("%s; got %s" % (form, repr(report)[:200]))
    skip = set(normalize(e) for e in exclude)
    hashes, skipped, seen = {}, [], {}
    for index, item in enumerate(report["install"]):
        meta = item.get("metadata") if isinstance(item, dict) else None
        info = item.get("download_info") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not PROJECT_NAME_RE.match(str(meta.get("name") or "")) \
                or not str(meta.get("version") or "").strip() or not isinstance(info, dict):
            raise SglangError("install[%d] %s: %s" % (index, repr(item)[:200], form))
        project, version = normalize(meta["name"]), str(meta["version"]).strip()
        key = "%s==%s" % (project, version)
        if project in skip:
            skipped.append(key)
            continue
        archive = info.get("archive_info")
        digest = None
        if isinstance(archive, dict):
            digest = (archive.get("hashes") or {}).get("sha256")
            if not digest and str(archive.get("hash") or "").startswith("sha256="):
                digest = archive["hash"][len("sha256="):]
        if not digest or not _HEX64.fullmatch(str(digest).lower()):
            raise SglangError("%s from %s has no sha256 in pip's report (a directory, VCS or unhashed source): "
                              "nothing to pin; install it from a wheel or sdist file" % (key, info.get("url")))
        if project in seen:
            raise SglangError("%s: %s comes twice in pip's report (%s and %s)" % (key, project, seen[project], version))
        seen[project] = version
        hashes[key] = [str(digest).lower()]
    return hashes, skipped


def hashed_requirements(specs, pins, with_lock=False, exclude=(), installed=()):
    """The requirements file (text) of a hash-checked ``pip install --require-hashes`` of ``specs``: each spec a
    ``project==version`` pinned in ``pins`` (check_requirements_hashes), a requirement by name or range resolved to
    its one pin, or a local wheel file (its own sha256); a requirement by name or range without a pin whose project
    is ``installed`` is left to pip (the installed copy satisfies it, or pip's own hash check refuses the upgrade).
    ``with_lock`` adds every other pin (the dependencies pip may pull in), less ``exclude``. SglangError naming a
    spec that has no pin, or whose pin is another version."""
    lines, named = [], set()
    for spec in specs:
        if os.path.isfile(spec):
            with open(spec, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            lines.append("%s --hash=sha256:%s" % (spec, digest))
            continue
        match = re.match(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*(.*)$", spec)
        project = normalize(match.group(1)) if match else None
        rest = match.group(2).split(";", 1)[0].strip() if match else ""
        if project not in pins and project in set(normalize(n) for n in installed) and not rest.startswith("=="):
            continue
        if project not in pins:
            raise SglangError("requirements_hashes has no entry for %s (%r); with requirements_hashes every package "
                              "installed needs one - expected %s==<version>: [<sha256>, ...]"
                              % (project or spec, spec, project or spec))
        version, digests = pins[project]
        # PEP 440: ==2.13.0 (no local label) is met by 2.13.0+cpu; the line carries the pinned version
        if rest.startswith("==") and rest[2:].strip() != version and \
                ("+" in rest[2:] or version.split("+", 1)[0] != rest[2:].strip()):
            raise SglangError("requirements_hashes pins %s==%s, but %s is asked for; expected an entry %s%s: "
                              "[<sha256>, ...]" % (project, version, spec, project, rest))
        named.add(project)
        lines.append("%s==%s %s" % (project, version, " ".join("--hash=sha256:%s" % d for d in digests)))
    if with_lock:
        skip = set(normalize(e) for e in exclude)
        for project in sorted(set(pins) - named - skip):
            version, digests = pins[project]
            lines.append("%s==%s %s" % (project, version, " ".join("--hash=sha256:%s" % d for d in digests)))
    return "\n".join(lines) + "\n"


def check_request(params):
    """sglang_env's options whose nested shapes the argument spec cannot type: the holds, versions, project names,
    package sources, wheelhouse checksums and requirement hashes. SglangError naming the option, the value and the
    form expected - before anything is read or written."""
    for option in ("version", "kernel_version", "transfer_engine_version"):
        value = params.get(option)
        if value is not None and not _PIP_VERSION_RE.fullmatch(value):
            raise SglangError("%s %r: expected a release such as 0.5.8 (digits, letters, '.', '+', '!', '_', '-')"
                              % (option, value))
    if params.get("cuda_version") is not None and not _CUDA_RE.fullmatch(params["cuda_version"]):
        raise SglangError("cuda_version %r: expected a CUDA release such as 12.9" % (params["cuda_version"],))
    held = {}
    for project, version in (params.get("hold") or {}).items():
        if not isinstance(project, str) or not PROJECT_NAME_RE.fullmatch(project):
            raise SglangError("hold %r: the key is not a pip project name; expected project: version (e.g. torch: "
                              "2.9.1)" % (project,))
        if version is not None and (isinstance(version, (bool, list, dict))
                                    or not _PIP_VERSION_RE.fullmatch(str(version)) and str(version) != ""):
            raise SglangError("hold %s %r: expected a version such as 2.9.1 (or an empty string: the installed one)"
                              % (project, version))
        name = normalize(project)
        if name in held:
            raise SglangError("hold names %s twice: %s: %s and %s: %s are the same project (pip compares names "
                              "case-insensitively, with '-', '_' and '.' alike); keep one"
                              % (name, held[name][0], held[name][1], project, version))
        held[name] = (project, version)
        if name == "deep-ep" and params.get("hold_deep_ep", True) and not params.get("use_bundled_deepep"):
            raise SglangError("hold %s: %s: hold_deep_ep already holds the collection's DeepEP at its installed "
                              "version; leave %s out of hold, or set hold_deep_ep: false to hold it by version here"
                              % (project, version, project))
    for option in ("exclude", "ignore_installed"):
        for project in params.get(option) or []:
            if not PROJECT_NAME_RE.fullmatch(project):
                raise SglangError("%s %r: expected pip project names such as sgl-deep-ep" % (option, project))
    if params.get("index_url"):
        check_source_url(params["index_url"], "index_url")
    for url in params.get("extra_index_urls") or []:
        check_source_url(url, "extra_index_urls")
    for link in params.get("find_links") or []:
        check_source_url(link, "find_links", paths=True)
    for name, digest in (params.get("wheelhouse_checksums") or {}).items():
        if not isinstance(name, str) or not name or "/" in name:
            raise SglangError("wheelhouse_checksums %r: the key is not a file name; expected <wheel file name>: "
                              "<sha256>" % (name,))
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest.strip().lower()):
            raise SglangError("wheelhouse_checksums %s %r: expected a sha256 (64 hex digits)" % (name, digest))
    return check_requirements_hashes(params.get("requirements_hashes"))
