# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What an NVSHMEM source build needs of the CUDA toolkit it is built with (``_catalogue.BREAKAGES``:
``nvshmem_source_cuda13``): NVSHMEM 3.8.0 and later need CUDA 13's NVML headers, so the nvshmem phase cannot build
them against a CUDA 12 toolkit. Judged before anything builds (the preflight), from the profile's versions.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._catalogue import breakage
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_rdma import NvshmemRdmaError, _release

__all__ = ["source_cuda_check", "tree_version"]

# NVSHMEM's top-level CMakeLists.txt names its release in the project() call: `project(NVSHMEM LANGUAGES CUDA CXX C
# VERSION 3.4.5.0)` over several lines in v3.4.5-0 (the tree's version, whatever a profile calls it).
_PROJECT_RE = re.compile(r"\bproject\s*\(\s*NVSHMEM\b[^)]*?\bVERSION\s+(\d+)\.(\d+)\.(\d+)", re.IGNORECASE | re.DOTALL)


def tree_version(cmakelists_text):
    """``major.minor.patch`` of an NVSHMEM source tree from its top-level CMakeLists.txt text; None where the text has
    no NVSHMEM project() call with a version."""
    match = _PROJECT_RE.search(cmakelists_text or "")
    return ".".join(match.groups()) if match else None


def _cuda(version):
    """``(major, minor)`` of a CUDA version such as ``12.9`` or ``13.0.2``; None for an empty one."""
    if version is None or version == "":
        return None
    parts = str(version).split(".")
    try:
        if len(parts) < 2:
            raise ValueError(version)
        return int(parts[0]), int(parts[1])
    except ValueError:
        raise NvshmemRdmaError("cuda_version: %r is not a CUDA version such as 12.9 or 13.0 (major.minor[.patch])"
                               % (version,)) from None


def source_cuda_check(nvshmem_version, cuda_version, builds=True):
    """Whether NVSHMEM ``nvshmem_version`` builds from source against CUDA ``cuda_version``.

    ``builds``: whether the play builds NVSHMEM at all (the nvshmem phase enabled). Returns ``{status, reason,
    fix, source, checked}``: ``status`` ``ok``, ``fail`` or ``unknown`` (no NVSHMEM or CUDA version to judge, or no
    build). Raises :class:`NvshmemRdmaError` naming a value that is not a version.
    """
    entry = breakage("nvshmem_source_cuda13")
    text, release = _release(nvshmem_version)
    cuda = _cuda(cuda_version)
    out = {"status": "unknown", "reason": None, "fix": None, "source": entry["source"], "checked": entry["checked"]}
    if not builds or release is None or cuda is None:
        missing = ("the play builds no NVSHMEM" if not builds else
                   "no NVSHMEM version" if release is None else "no CUDA version")
        out["reason"] = "nothing to judge: %s" % missing
        return out
    boundary = tuple(int(p) for p in entry["boundary"].split("."))
    floor = tuple(int(p) for p in entry["requires"]["cuda"].split("."))
    if release >= boundary and cuda < floor:
        out.update(status="fail",
                   reason="NVSHMEM %s (%s or newer) built from source needs CUDA %s or newer, and the build uses "
                          "CUDA %s: %s" % (text, entry["boundary"], entry["requires"]["cuda"], cuda_version,
                                           entry["what"]),
                   fix="build NVSHMEM with a CUDA 13 toolkit (cuda_toolkit_version 13.x, nvshmem_cuda_home), or "
                       "keep NVSHMEM below %s (e.g. v3.5.19-1) on CUDA 12" % entry["boundary"])
    else:
        out.update(status="ok", reason="NVSHMEM %s with CUDA %s: %s" % (
            text, cuda_version, "below %s" % entry["boundary"] if release < boundary else
            "CUDA %s or newer" % entry["requires"]["cuda"]))
    return out
