# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVSHMEM's IBGDA RC queue-pair layout against the DeepEP tree that indexes it (``_catalogue.BREAKAGES``:
``nvshmem_rc_layout``, ``nvshmem_build_run_layout``).

NVSHMEM 3.5.19 stores the RC QPs QP-major; a DeepEP tree without DeepEP #564 (V1) or PR #696 (V2's legacy kernels)
indexes them PE-major and stalls or faults at the first cross-node dispatch. A fixed tree picks the layout at compile
time, so the NVSHMEM it loads must be on the same side of 3.5.19 as the one it was built against. The tree is judged
by its content (:func:`tree_rc_layout`), where it is built; the build records it, the audit judges it against the
NVSHMEM the node loads (:func:`rc_layout_check`).

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._catalogue import DEEPEP_TREES, breakage
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import VersionError, at_least

__all__ = ["TREE_FILES", "nvshmem_rc_layout", "tree_rc_layout", "compiled_rc_layout", "rc_layout_check",
           "catalogued_tree_check"]

# The files of a tree that say how it indexes the RC QPs (relative to the tree's root).
TREE_FILES = {
    "v1_device": "csrc/kernels/ibgda_device.cuh",
    "legacy_device": "csrc/kernels/legacy/ibgda_device.cuh",
    "legacy_backend": "csrc/kernels/backend/nvshmem.cu",
}
# What each fix leaves in the tree (DeepEP 29d31c0 for #564; refs/pull/696/head for #696).
MARK_564 = "ibgda_get_rc_impl"
MARK_696 = "NVSHMEM_VENDOR_PATCH_VERSION >= 19"
MARK_696_RUNTIME = "check_rc_layout_compatibility"
MARK_RC = "ibgda_get_rc"


def nvshmem_rc_layout(version):
    """``'qp_major'`` for NVSHMEM 3.5.19 and later, ``'pe_major'`` before it, None for an unknown version."""
    if not version:
        return None
    try:
        return "qp_major" if at_least(version, breakage("nvshmem_rc_layout")["boundary"]) else "pe_major"
    except VersionError:
        return None


def tree_rc_layout(texts):
    """How a DeepEP tree indexes NVSHMEM's RC QPs, from ``texts`` (``{key of TREE_FILES: file text or None}``).

    Returns None when the tree has no IBGDA device code (nothing indexes the QPs), else ``{'fix': '#564' | '#696' |
    None, 'selects': 'state_type' | 'vendor_version' | None, 'runtime_check': bool, 'file': <relative path>}``:
    ``fix`` None means the PE-major layout is compiled in whatever NVSHMEM the build uses."""
    v1 = texts.get("v1_device") or ""
    legacy = texts.get("legacy_device") or ""
    if MARK_564 in v1:
        return _tree("#564", TREE_FILES["v1_device"])
    if MARK_696 in legacy:
        return _tree("#696", TREE_FILES["legacy_device"], MARK_696_RUNTIME in (texts.get("legacy_backend") or ""))
    for key in ("v1_device", "legacy_device"):
        if MARK_RC in (texts.get(key) or ""):
            return _tree(None, TREE_FILES[key])
    return None


_SELECTS = {"#564": "state_type", "#696": "vendor_version"}


def _tree(fix, file, runtime_check=False):
    """A tree's record (:func:`tree_rc_layout`): how a fix picks the layout follows from which fix it is."""
    return {"fix": fix, "selects": _SELECTS.get(fix), "runtime_check": runtime_check, "file": file}


def compiled_rc_layout(tree, build_version):
    """The layout a build of ``tree`` (:func:`tree_rc_layout`) against NVSHMEM ``build_version`` indexes: PE-major
    for a tree without a fix, else the layout of the NVSHMEM it was built against (None when unknown)."""
    if not tree:
        return None
    if not tree.get("fix"):
        return "pe_major"
    return nvshmem_rc_layout(build_version)


def _result(status, reason, fix=None, source=None, **found):
    return {"check": "nvshmem_rc_layout", "status": status, "reason": reason, "fix": fix, "source": source,
            "found": found}


def rc_layout_check(tree, build_version, run_version=None, recorded=False):
    """Whether a DeepEP build indexes the RC QPs the way the NVSHMEM it runs with stores them.

    ``tree``: what :func:`tree_rc_layout` read (None: the tree has no IBGDA code, or the build did not record it);
    ``build_version``: the NVSHMEM the build compiled against; ``run_version``: the one it loads (default: the same);
    ``recorded``: the build read the tree (a None ``tree`` then means it has no IBGDA kernels: not applicable).
    Returns ``{'check', 'status': pass | fail | unknown | not_applicable, 'reason', 'fix', 'source', 'found'}``.
    Whether a failure matters depends on the run: intranode only, nothing indexes the QPs (the callers decide)."""
    run_version = run_version or build_version
    found = {"tree_fix": (tree or {}).get("fix"), "built_against": build_version, "loads": run_version}
    if tree is None and recorded:
        return _result("not_applicable", "the tree has no IBGDA device code (nothing indexes NVSHMEM's RC QPs)", **found)
    if tree is None:
        return _result("unknown", "the build did not record how its tree indexes NVSHMEM's RC QPs (built before the "
                       "collection read it, or a tree without IBGDA kernels)", **found)
    compiled = compiled_rc_layout(tree, build_version)
    running = nvshmem_rc_layout(run_version)
    found.update(compiled=compiled, runtime=running)
    if compiled is None or running is None:
        return _result("unknown", "NVSHMEM version unknown (built against %s, loads %s)" % (build_version, run_version),
                       **found)
    if compiled == running:
        return _result("pass", "the tree indexes NVSHMEM %s's RC QPs %s, as it stores them"
                       % (run_version, running.replace("_", "-")), **found)
    entry = breakage("nvshmem_rc_layout")
    if not tree.get("fix"):
        return _result(
            "fail", "the tree (%s) indexes NVSHMEM's IBGDA RC QPs PE-major (it lacks DeepEP #564 and #696), but NVSHMEM "
            "%s stores them QP-major since %s: the first cross-node dispatch stalls ('timeout (dispatch CPU)') or "
            "faults (DeepEP #553, #707, #764)" % (tree.get("file"), run_version, entry["boundary"]),
            "use a V1 tree with DeepEP #564 (29d31c0 or later, e.g. 567632d or PR #466's 8a07e7e) or a V2 tree with "
            "PR #696 (vLLM #58159 applies it as a patch), or an NVSHMEM older than %s" % entry["boundary"],
            entry["source"], **found)
    run_entry = breakage("nvshmem_build_run_layout")
    return _result(
        "fail", "DeepEP was compiled against NVSHMEM %s (%s RC QPs, picked at compile time by %s) but loads NVSHMEM %s "
        "(%s): NVSHMEM's version check lets an older device library run with a newer host library, and dispatch "
        "across nodes uses another peer's queue pair" % (build_version, compiled.replace("_", "-"), tree["fix"],
                                                         run_version, running.replace("_", "-")),
        "rebuild DeepEP against the NVSHMEM the node loads (the env script's LD_PRELOAD, or torch's bundled one when "
        "it wins), or load the NVSHMEM it was built against", run_entry["source"], **found)


_COMMIT_RE = re.compile(r"^[0-9a-f]{7,40}$")


def catalogued_tree_check(commit, nvshmem_version):
    """The RC QP layout judged before anything is built, from a DeepEP commit the catalogue knows
    (``_catalogue.DEEPEP_TREES``, by prefix) and the NVSHMEM version a profile builds against.

    Returns ``{'commit', 'known', 'generation', 'check'}``: ``known`` false (and ``check`` null) for a commit the
    catalogue does not list or a ref that is not a commit id: the build judges that tree by its content."""
    text = (commit or "").strip().lower()
    entry_id = next((key for key in DEEPEP_TREES if _COMMIT_RE.match(text) and
                     (text.startswith(key) or key.startswith(text))), None)
    if entry_id is None:
        return {"commit": commit or None, "known": False, "generation": None, "check": None}
    entry = DEEPEP_TREES[entry_id]
    fix = entry["rc_layout_fix"]
    tree = _tree(fix, "the catalogue's DeepEP %s (%s)" % (entry_id, entry["note"]), fix == "#696")
    return {"commit": commit, "known": True, "generation": entry["generation"],
            "check": rc_layout_check(tree, nvshmem_version, recorded=True)}
