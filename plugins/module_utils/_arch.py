# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""CUDA arch lists: ``9.0``, ``10.0``, ``9.0;10.0``, ``9.0a``, ``10.0+PTX`` (PyTorch form) and ``90``, ``100``,
``90a`` (CMake/NVSHMEM form); parsing, conversion, and which GPUs a build covers.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import re

__all__ = ["ArchError", "ARCH_FORM", "CMAKE_ARCH_FORM", "parse_arch_list", "format_arch_list", "torch_to_cmake_arch",
           "cmake_to_torch_arch", "parse_cmake_arch_list", "uncovered_gpu_archs", "needs_disable_aggressive_ptx",
           "nvcc_gencode"]


class ArchError(ValueError):
    """A malformed CUDA arch list; the message names the bad entry and the expected form."""


ARCH_FORM = ("a CUDA arch such as 9.0, 10.0, 9.0a or 10.0+PTX; several separated by ';' "
             "(for example 9.0;10.0)")
CMAKE_ARCH_FORM = "a CMake CUDA arch such as 90, 100 or 90a; several separated by ';' (for example 90;100)"

_ARCH_RE = re.compile(r"^(?P<major>\d{1,2})\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$", re.IGNORECASE)
_CMAKE_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(?P<digits>\d{2,3})(?P<suffix>[af]?)"
                            r"(?P<kind>-real|-virtual)?$", re.IGNORECASE)


def _split_list(value):
    if isinstance(value, (list, tuple)):
        parts = []
        for item in value:
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise ArchError("arch list entry %r is not %s" % (item, ARCH_FORM))
            parts.extend(_split_list(str(item)))
        return parts
    if not isinstance(value, str):
        raise ArchError("arch list %r is not %s" % (value, ARCH_FORM))
    return [p for p in re.split(r"[;\s]+", value.strip()) if p]


def parse_arch_list(value):
    """Parse a TORCH_CUDA_ARCH_LIST value into a list of entries.

    Each entry is ``{'arch': '9.0a', 'major': 9, 'minor': 0, 'suffix': 'a', 'ptx': False}``.
    Entries are separated by ``;`` or spaces; a list of strings is accepted too. ``10,0`` or ``sm90``
    raise :class:`ArchError` naming the entry and the expected form. Duplicates are dropped.
    """
    parts = _split_list(value)
    if not parts:
        raise ArchError("arch list %r is empty; expected %s" % (value, ARCH_FORM))
    entries = []
    seen = set()
    for part in parts:
        match = _ARCH_RE.fullmatch(part)
        if not match:
            hint = ""
            if "," in part:
                hint = " (use '.' between major and minor and ';' between archs)"
            elif _CMAKE_ARCH_RE.match(part):
                hint = " (that is the CMake form; TORCH_CUDA_ARCH_LIST wants %s)" % (
                    cmake_to_torch_arch(part),)
            raise ArchError("arch list %r: entry %r is not %s%s" % (value, part, ARCH_FORM, hint))
        major, minor = int(match.group("major")), int(match.group("minor"))
        if major < 3:
            raise ArchError("arch list %r: entry %r is not a CUDA compute capability (3.5 or newer); expected %s"
                            % (value, part, ARCH_FORM))
        suffix = match.group("suffix").lower()
        ptx = bool(match.group("ptx"))
        text = "%d.%d%s%s" % (major, minor, suffix, "+PTX" if ptx else "")
        if text in seen:
            continue
        seen.add(text)
        entries.append({"arch": text, "major": major, "minor": minor, "suffix": suffix, "ptx": ptx})
    return entries


def format_arch_list(entries):
    """The TORCH_CUDA_ARCH_LIST text of parsed entries (``9.0;10.0``)."""
    return ";".join(e["arch"] for e in entries)


def torch_to_cmake_arch(value):
    """``10.0`` -> ``100``, ``9.0a`` -> ``90a``, ``10.0+PTX`` -> ``100`` (CMake builds SASS and PTX)."""
    entries = parse_arch_list(value)
    return ";".join("%d%d%s" % (e["major"], e["minor"], e["suffix"]) for e in entries)


def cmake_to_torch_arch(value):
    """``100`` -> ``10.0``, ``90a`` -> ``9.0a``, ``sm_90`` -> ``9.0``."""
    match = _CMAKE_ARCH_RE.match(str(value).strip())
    if not match:
        raise ArchError("CUDA arch %r is not %s" % (value, CMAKE_ARCH_FORM))
    digits = match.group("digits")
    return "%d.%d%s" % (int(digits[:-1]), int(digits[-1]), match.group("suffix").lower())


def parse_cmake_arch_list(value):
    """Parse CMAKE_CUDA_ARCHITECTURES (``90``, ``90;100``, ``100a``) or a PyTorch-form list into the
    CMake form. Returns the normalized ``;``-joined text."""
    parts = _split_list(str(value) if isinstance(value, int) and not isinstance(value, bool) else value)
    if not parts:
        raise ArchError("CUDA arch %r is empty; expected %s" % (value, CMAKE_ARCH_FORM))
    out = []
    for part in parts:
        match = _CMAKE_ARCH_RE.match(part)
        if match:
            text = "%s%s%s" % (match.group("digits"), match.group("suffix").lower(), match.group("kind") or "")
        elif _ARCH_RE.fullmatch(part):
            text = torch_to_cmake_arch(part)
        else:
            hint = " (use ';' between archs)" if "," in part else ""
            raise ArchError("CUDA arch %r: entry %r is not %s%s" % (value, part, CMAKE_ARCH_FORM, hint))
        if text not in out:
            out.append(text)
    return ";".join(out)


def uncovered_gpu_archs(build_archs, gpu_archs):
    """The GPU archs (PyTorch form) that a build for ``build_archs`` has no code for.

    A GPU of compute capability X.Y is covered by an entry X.Y (with or without the ``a``/``f``
    suffix), or by a ``+PTX`` entry of an older capability (PTX is compiled at load time).
    """
    build = parse_arch_list(build_archs)
    gpus = parse_arch_list(gpu_archs)
    missing = []
    for gpu in gpus:
        cap = (gpu["major"], gpu["minor"])
        covered = False
        for entry in build:
            have = (entry["major"], entry["minor"])
            if have == cap or (entry["ptx"] and have <= cap and not entry["suffix"]):
                covered = True
                break
        if not covered:
            missing.append("%d.%d" % cap)
    return missing


def needs_disable_aggressive_ptx(arch_list):
    """DeepEP forces DISABLE_AGGRESSIVE_PTX_INSTRS=1 unless TORCH_CUDA_ARCH_LIST is exactly ``9.0``."""
    return format_arch_list(parse_arch_list(arch_list)) != "9.0"


def nvcc_gencode(value):
    """NVCC ``-gencode`` flags of an arch list (``;``, ``,`` or spaces between entries, or a list): ``9.0`` ->
    SASS for sm_90; ``10.0+PTX`` -> SASS for sm_100 and PTX for compute_100 (JIT on newer GPUs); ``9.0a`` -> sm_90a."""
    parts = _split_list(value if isinstance(value, (list, tuple)) else re.sub(r",", ";", str(value)))
    flags = []
    for entry in parse_arch_list(parts):
        cc = "%d%d%s" % (entry["major"], entry["minor"], entry["suffix"])
        flags.append("-gencode=arch=compute_%s,code=sm_%s" % (cc, cc))
        if entry["ptx"]:
            flags.append("-gencode=arch=compute_%s,code=compute_%s" % (cc, cc))
    return " ".join(flags)
