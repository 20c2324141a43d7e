# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The NCCL of a Python environment, and how to pin it there: the pure logic of ``nccl_env``.

Standard library only, Python 3.8+ (this file runs on the managed nodes).

Background: DeepEP V2 needs NCCL >= 2.30.4 at build and run time, and refuses a second NCCL copy loaded
beside the one torch loads (``Duplicate NCCL runtime``). Torch loads the pip package's library,
``<site-packages>/nvidia/nccl/lib/libnccl.so.2`` (``nvidia-nccl-cu12`` / ``nvidia-nccl-cu13``; the wheel
also ships ``nvidia/nccl/include/nccl.h``). So the pin has to be *those* files: either the pip package at
the wanted version (``pip install nvidia-nccl-cu13==V --no-deps``), or a source build's files copied over
the package's. Later installs (torch, vLLM, SGLang) silently put an older NCCL back (DeepEP #710); a pip
constraints file, referenced from the environment's ``pip.conf``, makes pip refuse that, and the pin
record (``.gpufleet-pin.json`` in the package directory) lets a rerun notice and undo what got through.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    NCCL_PIP_PROJECTS,
    find_dist_info,
    nccl_version_from_header_file,
    normalize_project_name,
    split_torch_version,
    VersionError,
)

__all__ = [
    "NcclError",
    "LIB_NAME",
    "PIN_NAME",
    "BACKUP_NAME",
    "RELEASE_FORM",
    "check_release",
    "check_project",
    "package_for_torch",
    "library_info",
    "describe_nccl_dir",
    "find_nccl_package",
    "torch_version_in",
    "build_dir_files",
    "describe_build_dir",
    "plan_overlay",
    "package_files",
    "read_pin",
    "pin_record",
    "pin_holds",
    "constraint_version",
    "constraint_text",
    "pip_conf_constraints",
    "pip_conf_text",
    "pip_install_argv",
]

LIB_NAME = "libnccl.so.2"
PIN_NAME = ".gpufleet-pin.json"
BACKUP_NAME = ".gpufleet-orig"
BACKUP_MANIFEST = "manifest.json"
RELEASE_FORM = "an NCCL release N.N.N such as 2.30.7"
PROJECT_FORM = "a pip project name such as nvidia-nccl-cu13 or nvidia-nccl-cu12"
CONSTRAINT_HEADER = ("# pip constraints of this environment, kept by gpufleet.deepep (nccl_env): a later\n"
                     "# install that needs another version of a package named here fails instead of\n"
                     "# replacing it. Lines of other packages are kept as they are.\n")

_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+$")
_PROJECT_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_LIB_VERSION_RE = re.compile(br"NCCL version (\d+)\.(\d+)\.(\d+)")
_SO_VERSION_RE = re.compile(r"^libnccl\.so\.(\d+\.\d+\.\d+)$")


class NcclError(Exception):
    """A value or a tree the NCCL logic cannot accept; the message names it and the expected form."""


# --------------------------------------------------------------------------------------------
# Values


def check_release(value, name="version"):
    """``value`` as a string when it is an NCCL release ``N.N.N``; :class:`NcclError` otherwise."""
    text = value if isinstance(value, str) else None
    if text is None or not _RELEASE_RE.fullmatch(text.strip()):
        raise NcclError("%s %r is not %s (no v prefix, no -1 revision, no +cuda label)" % (name, value, RELEASE_FORM))
    return text.strip()


def check_project(value):
    if not isinstance(value, str) or not _PROJECT_RE.fullmatch(value.strip()):
        raise NcclError("package %r is not %s" % (value, PROJECT_FORM))
    return normalize_project_name(value.strip())


def package_for_torch(torch_version):
    """``nvidia-nccl-cu13`` for torch ``2.11.0+cu130``, ``nvidia-nccl-cu12`` for ``+cu129``; None otherwise."""
    if not torch_version:
        return None
    try:
        parts = split_torch_version(torch_version)
    except VersionError:
        return None
    cuda = parts.get("cuda_version")
    if not cuda:
        return None
    return "nvidia-nccl-cu%s" % cuda.split(".")[0]


def torch_version_in(site_packages):
    found = find_dist_info(site_packages, "torch")
    return found["version"] if found else None


# --------------------------------------------------------------------------------------------
# Reading NCCL files


def library_info(path, chunk=1024 * 1024):
    """``{'path', 'realpath', 'sha256', 'version'}`` of an NCCL library, in one read.

    ``version`` is the one compiled into the library (``NCCL version 2.30.7+cuda13.0``, the string NCCL
    prints), else the one its file name carries (``libnccl.so.2.30.7``), else None.
    """
    real = os.path.realpath(path)
    digest = hashlib.sha256()
    version = None
    tail = b""
    with open(real, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
            if version is None:
                match = _LIB_VERSION_RE.search(tail + block)
                if match:
                    version = "%d.%d.%d" % tuple(int(g) for g in match.groups())
                tail = block[-32:]
    if version is None:
        match = _SO_VERSION_RE.fullmatch(os.path.basename(real))
        version = match.group(1) if match else None
    return {"path": path, "realpath": real, "sha256": digest.hexdigest(), "version": version}


def describe_nccl_dir(root):
    """What an NCCL directory (a pip package's ``nvidia/nccl`` or a build's ``build/``) holds.

    ``{'root', 'header_path', 'header_version', 'library_path', 'library_realpath', 'library_sha256',
    'library_version'}`` (None where absent). The library is ``lib/libnccl.so.2``.
    """
    header = os.path.join(root, "include", "nccl.h")
    lib = os.path.join(root, "lib", LIB_NAME)
    out = {"root": root, "header_path": None, "header_version": None, "library_path": None,
           "library_realpath": None, "library_sha256": None, "library_version": None}
    if os.path.isfile(header):
        out["header_path"] = header
        out["header_version"] = nccl_version_from_header_file(header)
    if os.path.isfile(lib):
        info = library_info(lib)
        out.update({"library_path": lib, "library_realpath": info["realpath"], "library_sha256": info["sha256"],
                    "library_version": info["version"]})
    return out


def find_nccl_package(site_packages, projects=NCCL_PIP_PROJECTS):
    """The first NCCL pip package in ``site_packages`` (search order), or None.

    ``{'project', 'version', 'metadata', 'site_packages', 'dir'}``: ``dir`` is ``<site>/nvidia/nccl``.
    """
    if isinstance(site_packages, str):
        site_packages = [site_packages]
    for site in site_packages:
        for project in projects:
            found = find_dist_info(site, project)
            if found and found["version"]:
                return {"project": normalize_project_name(project), "version": found["version"],
                        "metadata": found["metadata"], "site_packages": site,
                        "dir": os.path.join(site, "nvidia", "nccl")}
    return None


# --------------------------------------------------------------------------------------------
# A source build's files and the overlay


def build_dir_files(build_dir):
    """``[(rel, source)]`` a build's files that go over the pip package: ``include/**`` and ``lib/libnccl.so.2``.

    ``source`` for the library is its real file (``libnccl.so.2`` -> ``libnccl.so.2.30.7``).
    """
    files = []
    include = os.path.join(build_dir, "include")
    for current, dirs, names in os.walk(include):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(current, name)
            if os.path.isfile(path):
                files.append((os.path.relpath(path, build_dir), os.path.realpath(path)))
    lib = os.path.join(build_dir, "lib", LIB_NAME)
    if os.path.isfile(lib):
        files.append((os.path.join("lib", LIB_NAME), os.path.realpath(lib)))
    return files


def describe_build_dir(build_dir, version):
    """Check that ``build_dir`` is the output of ``make src.build`` for NCCL ``version``; describe it.

    Raises :class:`NcclError` naming what is missing or disagrees.
    """
    expected = ("the build/ directory of NCCL's `make src.build` (include/nccl.h and lib/libnccl.so.2 -> "
                "libnccl.so.2.X.Y)")
    if not build_dir or not os.path.isabs(build_dir):
        raise NcclError("build_dir %r must be an absolute path: %s" % (build_dir, expected))
    if not os.path.isdir(build_dir):
        raise NcclError("build_dir %s does not exist; expected %s" % (build_dir, expected))
    described = describe_nccl_dir(build_dir)
    if not described["header_path"]:
        raise NcclError("build_dir %s has no include/nccl.h; expected %s" % (build_dir, expected))
    if not described["header_version"]:
        raise NcclError("build_dir %s: include/nccl.h declares no NCCL_MAJOR/NCCL_MINOR/NCCL_PATCH; expected %s"
                        % (build_dir, expected))
    if not described["library_path"]:
        raise NcclError("build_dir %s has no lib/%s; expected %s" % (build_dir, LIB_NAME, expected))
    if described["header_version"] != version:
        raise NcclError("build_dir %s holds NCCL %s (include/nccl.h), but version is %s: build NCCL %s "
                        "(tag v%s-1) or set version to %s" % (build_dir, described["header_version"], version,
                                                              version, version, described["header_version"]))
    if described["library_version"] and described["library_version"] != version:
        raise NcclError("build_dir %s: lib/%s is NCCL %s but include/nccl.h says %s; the build is inconsistent, "
                        "rebuild it" % (build_dir, LIB_NAME, described["library_version"], version))
    return described


def plan_overlay(package_dir, files):
    """One entry per build file: ``{'rel', 'source', 'target', 'before_sha256', 'after_sha256', 'changed'}``."""
    plans = []
    for rel, source in files:
        target = os.path.join(package_dir, rel)
        before = file_sha256(target) if os.path.isfile(target) else None
        after = file_sha256(source)
        plans.append({"rel": rel, "source": source, "target": target, "before_sha256": before,
                      "after_sha256": after, "changed": before != after or os.path.islink(target)})
    return plans


def package_files(package_dir):
    """``[rel]`` of the files under ``include/`` and ``lib/`` of a pip package dir (what a backup keeps)."""
    out = []
    for sub in ("include", "lib"):
        top = os.path.join(package_dir, sub)
        for current, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                path = os.path.join(current, name)
                if os.path.isfile(path) and not name.endswith((".pyc", ".tmp")):
                    out.append(os.path.relpath(path, package_dir))
    return out


# --------------------------------------------------------------------------------------------
# The pin record


def read_pin(package_dir):
    """The pin record in ``package_dir`` (a dict), or None."""
    try:
        with open(os.path.join(package_dir, PIN_NAME), "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pin_record(version, source, package, package_version, files, build_dir=None, constraint_file=None):
    """The record written after a pin: what the files must hash to, and where they came from."""
    return {
        "schema": 1,
        "version": version,
        "source": source,
        "package": package,
        "package_version": package_version,
        "build_dir": build_dir,
        "constraint_file": constraint_file,
        "files": dict(files),
    }


def pin_holds(pin, package, package_dir):
    """Why the recorded pin no longer holds (a list of sentences; empty when it holds)."""
    reasons = []
    if not pin:
        return reasons
    if package is None:
        return ["the pin of NCCL %s recorded in %s is there, but no NCCL pip package is installed any more "
                "(a later pip uninstall removed it)" % (pin.get("version"), os.path.join(package_dir, PIN_NAME))]
    if pin.get("package") and pin["package"] != package["project"]:
        reasons.append("the pin was made on %s, but %s is installed now" % (pin["package"], package["project"]))
    if pin.get("package_version") and pin["package_version"] != package["version"]:
        reasons.append("%s was %s when NCCL %s was pinned and is %s now: a later install replaced it (DeepEP #710)"
                       % (package["project"], pin["package_version"], pin.get("version"), package["version"]))
    changed = []
    for rel, sha in sorted((pin.get("files") or {}).items()):
        path = os.path.join(package_dir, rel)
        current = file_sha256(path) if os.path.isfile(path) else None
        if current != sha:
            changed.append(rel)
    if changed:
        reasons.append("%d pinned file(s) changed since NCCL %s was pinned: %s" % (
            len(changed), pin.get("version"), ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")))
    return reasons


# --------------------------------------------------------------------------------------------
# pip constraints and pip.conf

_REQ_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def constraint_version(text, project):
    """The ``==`` version ``text`` (a constraints file) holds for ``project``, or None."""
    wanted = normalize_project_name(project)
    for line in (text or "").splitlines():
        body = line.split("#", 1)[0].strip()
        match = _REQ_NAME_RE.match(body)
        if match and normalize_project_name(match.group(1)) == wanted:
            rest = body[match.end():].strip()
            if rest.startswith("=="):
                return rest[2:].split(";", 1)[0].strip()
    return None


def constraint_text(text, project, version):
    """``text`` (a constraints file, None when absent) with ``project==version`` as the only line of ``project``."""
    wanted = normalize_project_name(project)
    line = "%s==%s" % (wanted, version)
    lines = [] if text is None else text.splitlines()
    out, placed = [], False
    for existing in lines:
        body = existing.split("#", 1)[0].strip()
        match = _REQ_NAME_RE.match(body)
        if match and normalize_project_name(match.group(1)) == wanted:
            if not placed:
                out.append(line)
                placed = True
            continue
        out.append(existing)
    if not placed:
        out.append(line)
    result = "\n".join(out) + "\n"
    if text is None or not text.strip():
        result = CONSTRAINT_HEADER + line + "\n"
    return result


_SECTION_RE = re.compile(r"^\s*\[([^\]]+)\]\s*$")
_KEY_RE = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*[=:]\s*(.*)$")


def _constraint_key(name):
    return name.strip().lower().replace("_", "-") in ("constraint", "constraints")


def pip_conf_constraints(text, section="install"):
    """The files the ``constraint`` setting of ``[section]`` in a pip.conf names (pip splits on whitespace)."""
    current = None
    values = []
    lines = (text or "").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        sec = _SECTION_RE.fullmatch(line)
        if sec:
            current = sec.group(1).strip()
        elif current == section:
            key = _KEY_RE.fullmatch(line)
            if key and _constraint_key(key.group(1)):
                values.extend(key.group(2).split())
                # continuation lines (indented) belong to the value
                while index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t") and lines[index + 1].strip() \
                        and not _KEY_RE.fullmatch(lines[index + 1]):
                    index += 1
                    values.extend(lines[index].split())
        index += 1
    return values


def pip_conf_text(text, constraint_file, section="install"):
    """``text`` (a pip.conf, None when absent) whose ``[section] constraint`` also names ``constraint_file``.

    Other sections, keys and constraint files are kept; only the ``constraint`` line is rewritten.
    """
    if constraint_file in pip_conf_constraints(text, section):
        return text
    lines = [] if text is None else text.splitlines()
    out = []
    current = None
    done = False
    section_seen = False
    index = 0
    while index < len(lines):
        line = lines[index]
        sec = _SECTION_RE.fullmatch(line)
        if sec:
            if current == section and not done:
                while out and not out[-1].strip():
                    out.pop()
                out.append("constraint = %s" % constraint_file)
                out.append("")
                done = True
            current = sec.group(1).strip()
            section_seen = section_seen or current == section
            out.append(line)
        elif current == section and not done and _KEY_RE.fullmatch(line) and _constraint_key(_KEY_RE.fullmatch(line).group(1)):
            values = _KEY_RE.fullmatch(line).group(2).split()
            while index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t") and lines[index + 1].strip() \
                    and not _KEY_RE.fullmatch(lines[index + 1]):
                index += 1
                values.extend(lines[index].split())
            out.append("constraint = %s" % " ".join(values + [constraint_file]))
            done = True
        else:
            out.append(line)
        index += 1
    if not done:
        if section_seen:
            while out and not out[-1].strip():
                out.pop()
            out.append("constraint = %s" % constraint_file)
        else:
            if out and out[-1].strip():
                out.append("")
            out.append("[%s]" % section)
            out.append("constraint = %s" % constraint_file)
    return "\n".join(out) + "\n"


def pip_install_argv(python, project, version, index_url=None, extra_index_urls=(), find_links=(), no_index=False,
                     force_reinstall=False, break_system_packages=False, extra_args=()):
    """``python -m pip install --no-deps project==version`` with the index options given."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-deps"]
    if force_reinstall:
        argv.append("--force-reinstall")
    if index_url and not no_index:
        argv += ["--index-url", index_url]
    for url in extra_index_urls or ():
        argv += ["--extra-index-url", url]
    for link in find_links or ():
        argv += ["--find-links", link]
    if no_index:
        argv.append("--no-index")
    if break_system_packages:
        argv.append("--break-system-packages")
    argv += list(extra_args or ())
    argv.append("%s==%s" % (normalize_project_name(project), version))
    return argv
