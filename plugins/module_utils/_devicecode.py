# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The device code an object embeds: its SASS and PTX archs (``["sm_90", "sm_90a", ...]``), from ``cuobjdump
--list-elf`` / ``--list-ptx`` where the toolkit has cuobjdump (:func:`archs_from_cuobjdump`), else from the entry
headers of its ``.nv_fatbin`` section (:func:`fatbin_archs`: kind 1 PTX, 2 ELF, the SM number, and the flags
0x100000 = ``a``, 0x200000 = ``f``, as nvcc 13.0 writes them). A fatbin this reader does not fully understand gives
null, never a guess; an object without a ``.nv_fatbin`` section embeds none: ``[]``.

Standard library only, Python 3.8+ (this file runs on the managed nodes); the linkage record (``_linkage``) holds
what this returns.
"""

from __future__ import annotations

import os
import re
import struct

from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import ElfError, elf_sections

__all__ = ["CUOBJDUMP_TIMEOUT", "DeviceCodeError", "archs_from_cuobjdump", "fatbin_archs", "embedded_archs"]

CUOBJDUMP_TIMEOUT = 300

_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_ELF = 1, 2
_FATBIN_ARCH_SPECIFIC, _FATBIN_FAMILY_SPECIFIC = 0x100000, 0x200000
_ARCH_RE = re.compile(r"sm_(\d+[af]?)")
_ELF_LINE_RE = re.compile(r"^\s*ELF file\s+\d+:\s*(\S+)\s*$")
_PTX_LINE_RE = re.compile(r"^\s*PTX file\s+\d+:\s*(\S+)\s*$")
_NONE_FOUND_RE = re.compile(r"No (ELF|PTX) file found")
_NO_DEVICE_CODE = "does not contain device code"


class DeviceCodeError(ValueError):
    """A call this reader cannot answer (an unknown listing kind); the message names the value."""


def archs_from_cuobjdump(text, what):
    """The sorted SM archs (``["sm_90", "sm_90a"]``) in ``cuobjdump --list-elf`` (``what="elf"``) or
    ``--list-ptx`` (``"ptx"``) output; ``[]`` when it says there is none; None when the output is not one of those.

    Lines: ``ELF file    1: <name>.1.sm_90.cubin``, ``PTX file    1: <name>.1.sm_90.ptx``.
    """
    if what not in ("elf", "ptx"):
        raise DeviceCodeError("what must be elf or ptx, got %r" % (what,))
    line_re = _ELF_LINE_RE if what == "elf" else _PTX_LINE_RE
    found = set()
    listed = False
    for line in (text or "").splitlines():
        match = line_re.match(line)
        if not match:
            continue
        listed = True
        archs = _ARCH_RE.findall(match.group(1))
        if not archs:
            return None  # a listed object whose name carries no arch: nothing to say for sure
        found.add("sm_" + archs[-1])
    if listed:
        return _sorted_archs(found)
    none = _NONE_FOUND_RE.search(text or "")
    if (none and none.group(1).lower() == what) or _NO_DEVICE_CODE in (text or ""):
        return []
    return None


def _sorted_archs(archs):
    def key(arch):
        digits = re.match(r"sm_(\d+)([af]?)", arch)
        return (int(digits.group(1)), digits.group(2)) if digits else (0, arch)
    return sorted(set(archs), key=key)


def fatbin_archs(data, name="<bytes>", sections=None):
    """``(sass, ptx)`` read from the ``.nv_fatbin`` section's entry headers; ``([], [])`` without such a section;
    ``(None, None)`` where the section holds anything this reader does not fully understand."""
    try:
        sections = elf_sections(data, name) if sections is None else sections
    except ElfError:
        return None, None
    if not sections:
        return None, None  # no section headers: cannot tell
    fatbin = sections.get(".nv_fatbin")
    if fatbin is None:
        return ([], []) if "__nv_relfatbin" not in sections else (None, None)
    stype, offset, size, link, entsize = fatbin
    blob = data[offset:offset + size]
    if len(blob) != size:
        return None, None
    sass, ptx = set(), set()
    position = 0
    try:
        while position + 16 <= len(blob):
            magic, version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, position)
            if magic != _FATBIN_MAGIC:
                if blob[position:].strip(b"\0"):
                    return None, None  # not padding: an unknown layout
                break
            if header_size < 16 or version != 1:
                return None, None
            entry = position + header_size
            end = entry + fat_size
            if end > len(blob):
                return None, None
            while entry < end:
                kind, dummy, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
                if entry_header < 0x38 or kind not in (_FATBIN_PTX, _FATBIN_ELF):
                    return None, None
                arch, = struct.unpack_from("<I", blob, entry + 0x1C)
                flags, = struct.unpack_from("<Q", blob, entry + 0x28)
                if not 10 <= arch <= 999:
                    return None, None
                suffix = "a" if flags & _FATBIN_ARCH_SPECIFIC else "f" if flags & _FATBIN_FAMILY_SPECIFIC else ""
                if flags & _FATBIN_ARCH_SPECIFIC and flags & _FATBIN_FAMILY_SPECIFIC:
                    return None, None
                (sass if kind == _FATBIN_ELF else ptx).add("sm_%d%s" % (arch, suffix))
                entry += entry_header + payload
            if entry != end:
                return None, None
            position = end
            position += (-position) % 8
    except struct.error:
        return None, None
    return _sorted_archs(sass), _sorted_archs(ptx)


def embedded_archs(run, cuda_home, path, data=None, name=None):
    """``(sass, ptx, warning)`` of the object at ``path``: cuobjdump (``run(argv, timeout) -> (rc, out, err)``)
    where ``<cuda_home>/bin/cuobjdump`` exists, else :func:`fatbin_archs` of ``data`` (the object's bytes)."""
    name = name or path
    cuobjdump = os.path.join(cuda_home, "bin", "cuobjdump") if cuda_home else None
    if cuobjdump and os.access(cuobjdump, os.X_OK):
        found = []
        for what in ("elf", "ptx"):
            rc, out, err = run([cuobjdump, "--list-" + what, path], CUOBJDUMP_TIMEOUT)
            archs = archs_from_cuobjdump("%s\n%s" % (out, err), what)
            if archs is None:
                return None, None, "cuobjdump --list-%s %s gave no list (rc=%d): %s; its %s archs are not recorded" % (
                    what, name, rc, (err or out).strip()[-300:], "SASS" if what == "elf" else "PTX")
            found.append(archs)
        return found[0], found[1], None
    if data is None:
        return None, None, "no cuobjdump at %s and %s was not read: its SASS/PTX archs are not recorded" % (
            cuobjdump, name)
    sass, ptx = fatbin_archs(data, name)
    if sass is None:
        return None, None, ("no cuobjdump at %s, and the .nv_fatbin section of %s has a layout this reader does not "
                            "know: its SASS/PTX archs are not recorded" % (cuobjdump, name))
    return sass, ptx, None
