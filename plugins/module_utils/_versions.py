# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Version helpers shared by the collection's modules, filters and roles.

Pure logic, standard library only, Python 3.8+ (this file runs on the managed nodes).

Versions met in this stack and how they are read:

* ``2.30.4`` (NCCL), ``13.0.88`` (nvcc), ``3.4.5`` (pip NVSHMEM): plain releases.
* ``2.9.1+cu129``, ``2.11.0+cu130``: PyTorch wheels; the ``+cu...`` local label is kept apart.
* ``3.5.19-1``, ``v3.5.19-1``: NVSHMEM / NCCL git tags; ``-1`` is a packaging revision.
* ``2.10.0a0``, ``2.11.0.dev20260101``, ``2.30.4rc1``: pre-releases sort before the release.
"""

from __future__ import annotations

import json
import os
import re

__all__ = [
    "Version",
    "VersionError",
    "parse_version",
    "compare_versions",
    "at_least",
    "split_torch_version",
    "cuda_tag",
    "cuda_tag_to_version",
    "torch_index_url",
    "nccl_version_from_header",
    "nccl_version_from_header_file",
    "dist_info_version",
    "find_dist_info",
    "pip_package_version",
    "nccl_version_from_pip",
    "cuda_version_from_nvcc",
    "cuda_version_from_version_json",
    "cuda_version_from_home",
    "normalize_project_name",
    "nvshmem_version_from_header",
    "PYTORCH_INDEX",
    "NCCL_PIP_PROJECTS",
    "TORCH_LOCAL_FORM",
]


class VersionError(ValueError):
    """A value that is not a version of any form this module understands."""


_VERSION_RE = re.compile(
    r"""
    ^\s*
    [vV]?
    (?P<release>\d+(?:\.\d+)*)
    (?:[._-]?(?P<pre_tag>a|alpha|b|beta|rc|c|pre|preview)[._-]?(?P<pre_num>\d*))?
    (?:[._-]?(?:post|r)[._-]?(?P<post>\d+))?
    (?:[._-]?dev[._-]?(?P<dev>\d*))?
    (?:-(?P<revision>\d+))?
    (?:\+(?P<local>[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*))?
    \s*$
    """,
    re.VERBOSE,
)

_PRE_ORDER = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "rc": 2, "c": 2, "pre": 2, "preview": 2}

EXPECTED_FORM = "a version such as 2.30.4, 2.9.1+cu129, 3.5.19-1, v3.5.19-1 or 13.0.88"


class Version:
    """A parsed version that compares the way the stack's versions are meant to.

    Ordering: release numbers (missing parts count as 0), then dev < pre-release < release < post,
    then the packaging revision (``-1``). The local label (``+cu129``) does not take part in ordering;
    it is kept as :attr:`local`.
    """

    __slots__ = ("text", "release", "pre", "post", "dev", "revision", "local")

    def __init__(self, text, release, pre=None, post=None, dev=None, revision=None, local=None):
        self.text = text
        self.release = tuple(release)
        self.pre = pre
        self.post = post
        self.dev = dev
        self.revision = revision
        self.local = local

    @property
    def public(self):
        """The version without the leading ``v``, the revision and the local label."""
        out = ".".join(str(p) for p in self.release)
        if self.pre is not None:
            out += "%s%d" % (("a", "b", "rc")[self.pre[0]], self.pre[1])
        if self.post is not None:
            out += ".post%d" % self.post
        if self.dev is not None:
            out += ".dev%d" % self.dev
        return out

    @property
    def major(self):
        return self.release[0]

    @property
    def minor(self):
        return self.release[1] if len(self.release) > 1 else 0

    @property
    def patch(self):
        return self.release[2] if len(self.release) > 2 else 0

    def _key(self):
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        if self.pre is None and self.post is None and self.dev is not None:
            stage = (-1, 0)            # 2.11.0.dev1 < 2.11.0a0
        elif self.pre is not None:
            stage = (0, self.pre[0], self.pre[1])
        else:
            stage = (1, 0)
        post = -1 if self.post is None else self.post
        dev = float("inf") if self.dev is None else self.dev
        revision = 0 if self.revision is None else self.revision
        return (tuple(release), stage, post, dev, revision)

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return "Version(%r)" % self.text

    def __str__(self):
        return self.text


def parse_version(value):
    """Parse ``value`` (str, int, float or :class:`Version`) into a :class:`Version`.

    Raises :class:`VersionError` naming the value and the expected form.
    """
    if isinstance(value, Version):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise VersionError("%r is not %s (got a %s)" % (value, EXPECTED_FORM, type(value).__name__))
    text = str(value).strip()
    match = _VERSION_RE.match(text)
    if not match:
        raise VersionError("%r is not %s" % (value, EXPECTED_FORM))
    release = [int(p) for p in match.group("release").split(".")]
    pre = None
    if match.group("pre_tag"):
        pre = (_PRE_ORDER[match.group("pre_tag").lower()], int(match.group("pre_num") or 0))
    post = int(match.group("post")) if match.group("post") else None
    dev = None
    if match.group("dev") is not None:
        dev = int(match.group("dev") or 0)
    revision = int(match.group("revision")) if match.group("revision") else None
    clean = text[1:] if text[:1] in ("v", "V") else text
    return Version(clean, release, pre=pre, post=post, dev=dev, revision=revision, local=match.group("local"))


def compare_versions(left, right):
    """Return -1, 0 or 1 as ``left`` is older than, equal to or newer than ``right``."""
    a, b = parse_version(left), parse_version(right)
    if a < b:
        return -1
    if a > b:
        return 1
    return 0


def at_least(version, floor):
    """True when ``version`` is ``floor`` or newer (``2.30.7`` is at least ``2.30.4``).

    A pre-release of the floor is not at least the floor (``2.30.4rc1`` < ``2.30.4``).
    """
    return parse_version(version) >= parse_version(floor)


# --------------------------------------------------------------------------------------------
# PyTorch and CUDA tags

_CUDA_TAG_RE = re.compile(r"^cu(\d{2,3})$")


def cuda_tag_to_version(tag):
    """``cu129`` -> ``12.9``, ``cu130`` -> ``13.0``, ``cu118`` -> ``11.8``; None for ``cpu``/``rocm*``."""
    if tag is None:
        return None
    match = _CUDA_TAG_RE.fullmatch(str(tag).strip())
    if not match:
        return None
    digits = match.group(1)
    return "%d.%d" % (int(digits[:-1]), int(digits[-1]))


def cuda_tag(cuda_version):
    """``13.0.88`` -> ``cu130``, ``12.9`` -> ``cu129``; a ``cuXXX`` tag is returned as it is."""
    if isinstance(cuda_version, str) and _CUDA_TAG_RE.fullmatch(cuda_version.strip()):
        return cuda_version.strip()
    parsed = parse_version(cuda_version)
    form = "expected a CUDA release such as 12.9, 13.0 or 13.0.88, or a tag such as cu129"
    if parsed.local is not None or parsed.pre is not None or parsed.dev is not None:
        raise VersionError("%r is not a CUDA release: CUDA versions carry no label (+..., rc, dev); %s"
                           % (cuda_version, form))
    if parsed.major < 9:
        raise VersionError("%r is not a CUDA release (CUDA %d does not exist; a torch version given for the CUDA "
                           "one?); %s" % (cuda_version, parsed.major, form))
    if parsed.minor > 9:
        raise VersionError("%r has a minor version above 9, which no cuXXX tag can express" % (cuda_version,))
    return "cu%d%d" % (parsed.major, parsed.minor)


# The local labels torch builds carry: CUDA, CPU (old cxx11-ABI wheels too), ROCm, XPU, a source build
# (+git<commit>) and NVIDIA's NGC containers (2.6.0a0+ecf3bae40a.nv25.01, older ones +<commit> alone).
_TORCH_LOCAL_RE = re.compile(r"cu\d{2,3}|cpu(?:[._-]cxx11[._-]abi)?|rocm\d+(?:\.\d+)*|xpu|git[0-9a-f]{7,40}"
                             r"|[0-9a-f]{7,40}(?:\.nv\d{2}\.\d{2})?")
TORCH_LOCAL_FORM = ("+cuNNN (a CUDA build, e.g. 2.9.1+cu129), +cpu, +rocmX.Y, +xpu, +git<commit> (a source build), "
                    "+<commit>.nvYY.MM (an NGC container) or no label at all")


def split_torch_version(text):
    """Split a torch version string into its parts.

    ``2.9.1+cu129`` -> ``{'version': '2.9.1', 'cuda_tag': 'cu129', 'cuda_version': '12.9', 'local': 'cu129'}``;
    ``2.11.0`` (no local label) gives ``cuda_tag`` None, so do ``+cpu``, ``+rocm6.2``, ``+xpu``, ``+git<commit>``
    and an NGC container's ``+<commit>.nvYY.MM``. Any other local label (``2.9.1+garbage``) is refused, naming it
    and these forms: a typo in a CUDA tag must not read as "no CUDA". The text may be the output of
    ``python -c 'import torch; print(torch.__version__)'`` (surrounding whitespace is ignored).
    """
    parsed = parse_version(text)
    local = parsed.local
    if local is not None and not _TORCH_LOCAL_RE.fullmatch(local.lower()):
        raise VersionError("%r has the local version label +%s, which is no torch build label; expected %s"
                           % (text, local, TORCH_LOCAL_FORM))
    tag = local.lower() if local and _CUDA_TAG_RE.fullmatch(local.lower()) else None
    return {
        "version": parsed.public,
        "cuda_tag": tag,
        "cuda_version": cuda_tag_to_version(tag),
        "local": local,
    }


PYTORCH_INDEX = "https://download.pytorch.org/whl"


_INDEX_SCHEME_RE = re.compile(r"(https|http|file)://\S+", re.IGNORECASE)


def torch_index_url(cuda, base=PYTORCH_INDEX, nightly=False, allow_http=False):
    """The PyTorch wheel index for a CUDA version or tag: ``13.0`` -> ``https://download.pytorch.org/whl/cu130``.

    ``base`` points at a mirror of the same layout (``https://`` or ``file://``; ``http://`` only with
    ``allow_http``: pip would fetch the wheels unauthenticated, so anyone on the path could swap them);
    ``nightly`` inserts ``/nightly``.
    """
    if not isinstance(allow_http, bool):
        raise VersionError("allow_http %r is not a boolean (expected true or false)" % (allow_http,))
    match = _INDEX_SCHEME_RE.fullmatch(base.strip()) if isinstance(base, str) else None
    if match is None:
        raise VersionError("base %r is not an index URL; expected https://<host>/<path> such as %s (file:///<dir> "
                           "for a local mirror)" % (base, PYTORCH_INDEX))
    if match.group(1).lower() == "http" and not allow_http:
        raise VersionError("base %r is a plain-http index: pip would download torch unauthenticated, so anyone on the "
                           "network path could replace the wheels; use an https:// mirror, or opt in with "
                           "allow_http=true (the pytorch role: pytorch_index_allow_http: true)" % (base,))
    url = base.strip().rstrip("/")
    if nightly:
        url += "/nightly"
    return "%s/%s" % (url, cuda_tag(cuda))


# --------------------------------------------------------------------------------------------
# NCCL

_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(NCCL_MAJOR|NCCL_MINOR|NCCL_PATCH|NCCL_SUFFIX|NCCL_VERSION_CODE)"
                        r"[ \t]+(.*?)[ \t]*(?://.*)?$", re.MULTILINE)


def _nccl_code_to_version(code):
    # NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on.
    if code >= 10000:
        return (code // 10000, (code % 10000) // 100, code % 100)
    return (code // 1000, (code % 1000) // 100, code % 100)


def nccl_version_from_header(text):
    """The NCCL version (``2.30.4``) declared by the text of an ``nccl.h``; None when it declares none.

    Reads ``NCCL_MAJOR``/``NCCL_MINOR``/``NCCL_PATCH``, else ``NCCL_VERSION_CODE``.
    """
    if not isinstance(text, str):
        raise VersionError("nccl.h content must be text, got a %s" % type(text).__name__)
    found = {}
    for name, value in _DEFINE_RE.findall(text):
        found.setdefault(name, value.strip().strip('"'))
    try:
        if all(k in found for k in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")):
            return "%d.%d.%d" % (int(found["NCCL_MAJOR"]), int(found["NCCL_MINOR"]), int(found["NCCL_PATCH"]))
        if "NCCL_VERSION_CODE" in found:
            return "%d.%d.%d" % _nccl_code_to_version(int(found["NCCL_VERSION_CODE"]))
    except ValueError:
        return None
    return None


def nccl_version_from_header_file(path):
    """Read ``path`` (an ``nccl.h``, or an NCCL root holding ``include/nccl.h``); None when absent."""
    if os.path.isdir(path):
        path = os.path.join(path, "include", "nccl.h")
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return nccl_version_from_header(handle.read())
    except (IOError, OSError):
        return None


# --------------------------------------------------------------------------------------------
# NVSHMEM

_NVSHMEM_DEFINE_RE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION[ \t]+(\d+)", re.MULTILINE)


def nvshmem_version_from_header(text):
    """``3.5.19`` from the text of ``nvshmem_version.h`` (``NVSHMEM_VENDOR_*_VERSION``); None when absent.

    The header is ``include/non_abi/nvshmem_version.h`` in NVSHMEM 3.x installs and pip wheels,
    ``include/nvshmem_version.h`` in older ones.
    """
    found = dict(_NVSHMEM_DEFINE_RE.findall(text or ""))
    if all(k in found for k in ("MAJOR", "MINOR", "PATCH")):
        return "%d.%d.%d" % (int(found["MAJOR"]), int(found["MINOR"]), int(found["PATCH"]))
    return None


# --------------------------------------------------------------------------------------------
# pip metadata


def normalize_project_name(name):
    """PEP 503 normalisation: ``nvidia_nccl_cu13`` and ``NVIDIA-NCCL-cu13`` -> ``nvidia-nccl-cu13``."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def dist_info_version(text):
    """``(name, version)`` from the text of a dist-info ``METADATA`` (or egg-info ``PKG-INFO``) file."""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break                       # headers end at the first blank line
        if line.startswith("Name:") and name is None:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and version is None:
            version = line.split(":", 1)[1].strip()
    return name, version


def find_dist_info(site_packages, project):
    """Find ``project``'s metadata in the given site-packages directories.

    Returns ``{'name', 'version', 'metadata', 'site_packages'}`` for the first directory that holds it,
    or None. ``site_packages`` is a directory or a list of them.
    """
    if isinstance(site_packages, str):
        site_packages = [site_packages]
    wanted = normalize_project_name(project)
    for directory in site_packages:
        try:
            entries = sorted(os.listdir(directory))
        except (IOError, OSError):
            continue
        for entry in entries:
            if entry.endswith(".dist-info"):
                meta = "METADATA"
            elif entry.endswith(".egg-info"):
                meta = "PKG-INFO"
            else:
                continue
            stem = entry.rsplit(".", 1)[0]
            dist_name = stem.split("-", 1)[0]
            if normalize_project_name(dist_name) != wanted:
                continue
            path = os.path.join(directory, entry, meta)
            try:
                with open(path, "r", encoding="utf-8", errors="replace") as handle:
                    name, version = dist_info_version(handle.read())
            except (IOError, OSError):
                name, version = None, None
            if version is None and "-" in stem:
                version = stem.split("-", 1)[1]
            return {"name": name or dist_name, "version": version, "metadata": path,
                    "site_packages": directory}
    return None


def pip_package_version(site_packages, project):
    """The installed version of ``project`` in ``site_packages``, or None."""
    found = find_dist_info(site_packages, project)
    return found["version"] if found else None


NCCL_PIP_PROJECTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")


def nccl_version_from_pip(site_packages, projects=NCCL_PIP_PROJECTS):
    """``{'project', 'version', 'metadata', 'site_packages'}`` of the first NCCL pip package found, or None."""
    for project in projects:
        found = find_dist_info(site_packages, project)
        if found and found["version"]:
            return {"project": project, "version": found["version"], "metadata": found["metadata"],
                    "site_packages": found["site_packages"]}
    return None


# --------------------------------------------------------------------------------------------
# CUDA

_NVCC_FULL_RE = re.compile(r"\bV(\d+\.\d+\.\d+)\b")
_NVCC_RELEASE_RE = re.compile(r"release\s+(\d+\.\d+)")


def cuda_version_from_nvcc(text):
    """``13.0.88`` from ``nvcc --version`` output (``... release 13.0, V13.0.88``); None when absent."""
    if not isinstance(text, str):
        raise VersionError("nvcc output must be text, got a %s" % type(text).__name__)
    match = _NVCC_FULL_RE.search(text)
    if match:
        return match.group(1)
    match = _NVCC_RELEASE_RE.search(text)
    return match.group(1) if match else None


def cuda_version_from_version_json(text):
    """The CUDA toolkit version from the text of ``<cuda_home>/version.json`` (``{"cuda": {"version": ...}}``)."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    cuda = data.get("cuda")
    if isinstance(cuda, dict) and isinstance(cuda.get("version"), str):
        return cuda["version"]
    nvcc = data.get("cuda_nvcc")
    if isinstance(nvcc, dict) and isinstance(nvcc.get("version"), str):
        return nvcc["version"]
    return None


def cuda_version_from_home(cuda_home):
    """Read ``version.json`` (CUDA 11.1+) or ``version.txt`` (older) under ``cuda_home``; None when absent."""
    try:
        with open(os.path.join(cuda_home, "version.json"), "r", encoding="utf-8") as handle:
            found = cuda_version_from_version_json(handle.read())
        if found:
            return found
    except (IOError, OSError):
        pass
    try:
        with open(os.path.join(cuda_home, "version.txt"), "r", encoding="utf-8") as handle:
            match = re.search(r"CUDA Version\s+(\d+(?:\.\d+)+)", handle.read())
        return match.group(1) if match else None
    except (IOError, OSError):
        return None
