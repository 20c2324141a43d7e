# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a shared object links: its dynamic section (NEEDED, RPATH, RUNPATH, SONAME), its sections, the undefined
symbols of its dynamic symbol table and the symbol versions it defines, read from the file itself.

``readelf -d`` prints the same; this needs no binutils on the node and reads ELF32/ELF64 of either byte order.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import struct

__all__ = ["ElfError", "dynamic_section", "dynamic_section_of_bytes", "elf_ident", "is_elf", "libstdcxx_linkage",
           "version_definitions", "version_definitions_of_bytes", "section_headers", "section_list", "elf_sections",
           "undefined_symbols"]

_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 14, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2
_SHT_DYNSYM = 11
_SHT_GNU_VERDEF = 0x6FFFFFFD
_VER_FLG_BASE = 0x1
# The largest object read whole (a CUDA extension with embedded cubins is some 100 MB).
MAX_BYTES = 1 << 30


class ElfError(ValueError):
    """The file is not an ELF object this reader understands; the message names it."""


def is_elf(data):
    """Whether ``data`` (bytes, at least the first 4) starts an ELF object."""
    return bytes(data[:4]) == b"\x7fELF"


def elf_ident(data, name):
    """``(bits, struct byte-order prefix)`` of the ELF object in ``data``; ElfError naming ``name`` otherwise."""
    if len(data) < 52 or not is_elf(data):
        raise ElfError("%s is not an ELF object (no \\x7fELF magic)" % name)
    bits = {1: 32, 2: 64}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if bits is None or order is None:
        raise ElfError("%s has an unknown ELF class %d or byte order %d" % (name, data[4], data[5]))
    return bits, order


def _layout(data, name):
    bits, order = elf_ident(data, name)
    if bits == 64:
        phoff, = struct.unpack_from(order + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
        ph = (order + "IIQQQQQQ", lambda f: (f[0], f[2], f[3], f[5]))  # type, offset, vaddr, memsz
        dyn = (order + "qQ", 16)
    else:
        phoff, = struct.unpack_from(order + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x2A)
        ph = (order + "IIIIIIII", lambda f: (f[0], f[1], f[2], f[5]))
        dyn = (order + "iI", 8)
    return phoff, phentsize, phnum, ph, dyn


def dynamic_section_of_bytes(data, name="<bytes>"):
    """``{needed, rpath, runpath, soname}`` of the ELF object in ``data`` (lists of str; soname str or None).

    An object without a dynamic section (a static executable) gives empty lists. Raises ElfError for what is
    not an ELF object or is truncated.
    """
    phoff, phentsize, phnum, (ph_fmt, ph_pick), (dyn_fmt, dyn_size) = _layout(data, name)
    loads, dynamic = [], None
    try:
        for index in range(phnum):
            ptype, offset, vaddr, memsz = ph_pick(struct.unpack_from(ph_fmt, data, phoff + index * phentsize))
            if ptype == _PT_LOAD:
                loads.append((vaddr, memsz, offset))
            elif ptype == _PT_DYNAMIC:
                dynamic = offset
        result = {"needed": [], "rpath": [], "runpath": [], "soname": None}
        if dynamic is None:
            return result
        entries = []
        position = dynamic
        while True:
            tag, value = struct.unpack_from(dyn_fmt, data, position)
            if tag == _DT_NULL:
                break
            entries.append((tag, value))
            position += dyn_size
    except struct.error:
        raise ElfError("%s is truncated (its program headers or dynamic section run past the end)" % name)
    strtab = None
    for tag, value in entries:
        if tag == _DT_STRTAB:
            strtab = next((value - vaddr + offset for vaddr, memsz, offset in loads
                           if vaddr <= value < vaddr + memsz), None)
    if strtab is None:
        raise ElfError("%s has a dynamic section without a string table inside a loaded segment" % name)

    def string(offset):
        start = strtab + offset
        end = data.find(b"\0", start)
        if start >= len(data) or end < 0:
            raise ElfError("%s has a dynamic string that runs past the end of the file" % name)
        return data[start:end].decode("utf-8", "replace")

    for tag, value in entries:
        if tag == _DT_NEEDED:
            result["needed"].append(string(value))
        elif tag in (_DT_RPATH, _DT_RUNPATH):
            result["rpath" if tag == _DT_RPATH else "runpath"].extend(p for p in string(value).split(":") if p)
        elif tag == _DT_SONAME:
            result["soname"] = string(value)
    return result


def section_headers(data, name):
    """``(headers, shstrndx)`` of the ELF object in ``data``: ``[(name_index, type, offset, size, link, entsize)]``
    in section-header order and the index of the section-name table; ``([], 0)`` without section headers."""
    bits, order = elf_ident(data, name)
    if bits == 64:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
        fmt = order + "IIQQQQIIQQ"
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
        fmt = order + "IIIIIIIIII"
    if shoff == 0 or shnum == 0:
        return [], 0
    try:
        # sh_name, sh_type, sh_offset, sh_size, sh_link, sh_entsize of each section header
        return [tuple(fields[i] for i in (0, 1, 4, 5, 6, 9))
                for fields in (struct.unpack_from(fmt, data, shoff + index * shentsize)
                               for index in range(shnum))], shstrndx
    except struct.error:
        raise ElfError("%s is truncated (its section headers run past the end)" % name)


def section_list(data, name):
    """``[(name, type, offset, size, link, entsize)]`` in section-header order; ``[]`` without section headers."""
    headers, shstrndx = section_headers(data, name)
    if not headers:
        return []
    if shstrndx >= len(headers):
        raise ElfError("%s names section %d as its section-name table, but has %d sections"
                       % (name, shstrndx, len(headers)))
    names_offset = headers[shstrndx][2]
    sections = []
    for name_index, stype, offset, size, link, entsize in headers:
        start = names_offset + name_index
        end = data.find(b"\0", start)
        if start >= len(data) or end < 0:
            raise ElfError("%s has a section name that runs past the end of the file" % name)
        sections.append((data[start:end].decode("utf-8", "replace"), stype, offset, size, link, entsize))
    return sections


def elf_sections(data, name="<bytes>"):
    """``{section name: (type, offset, size, link, entsize)}`` of the ELF object in ``data``.

    ``{}`` for an object without section headers (stripped of them); ElfError for what is not ELF or is truncated.
    """
    return dict((entry[0], entry[1:]) for entry in section_list(data, name) if entry[0])


def undefined_symbols(data, name="<bytes>"):
    """The names of the undefined symbols of the dynamic symbol table (what the object takes from libraries)."""
    sections = section_list(data, name)
    dynsym = next((s for s in sections if s[1] == _SHT_DYNSYM), None)
    if dynsym is None or dynsym[4] >= len(sections):
        return []
    dummy, stype, offset, size, link, entsize = dynsym
    strtab = sections[link][2]
    bits, order = elf_ident(data, name)
    if bits == 64:
        fmt, size_of, shndx_at = order + "IBBHQQ", 24, 3  # st_name, st_info, st_other, st_shndx, ...
    else:
        fmt, size_of, shndx_at = order + "IIIBBH", 16, 5  # st_name, st_value, st_size, st_info, st_other, st_shndx
    names = []
    try:
        for position in range(offset + size_of, offset + size, entsize or size_of):
            fields = struct.unpack_from(fmt, data, position)
            name_index, shndx = fields[0], fields[shndx_at]
            if shndx != 0 or not name_index:
                continue
            start = strtab + name_index
            end = data.find(b"\0", start)
            if end > start:
                names.append(data[start:end].decode("utf-8", "replace"))
    except struct.error:
        raise ElfError("%s is truncated (its dynamic symbol table runs past the end)" % name)
    return names


def version_definitions_of_bytes(data, name="<bytes>"):
    """The symbol versions the ELF object in ``data`` defines (its ``.gnu.version_d``), in file order, without the
    base entry (the object's own SONAME): what ``objdump -p`` prints under "Version definitions", e.g.
    ``["MLX5_1.0", ..., "MLX5_1.25"]`` for rdma-core's libmlx5.so.1. An object without version definitions gives
    ``[]``. Raises ElfError for what is not an ELF object or is truncated."""
    sections = [header[1:5] for header in section_headers(data, name)[0]]
    order = elf_ident(data, name)[1]
    names = []
    for stype, offset, size, link in sections:
        if stype != _SHT_GNU_VERDEF:
            continue
        if link >= len(sections):
            raise ElfError("%s has a version definition section whose string table index %d is out of range"
                           % (name, link))
        strtab = sections[link][1]
        position, seen = offset, 0
        try:
            while seen < 65536:
                entry = struct.unpack_from(order + "HHHHIII", data, position)
                flags, count, aux, following = entry[1], entry[3], entry[5], entry[6]
                if count:
                    vda_name, = struct.unpack_from(order + "I", data, position + aux)
                    start = strtab + vda_name
                    end = data.find(b"\0", start)
                    if start >= len(data) or end < 0:
                        raise ElfError("%s has a version name that runs past the end of the file" % name)
                    if not flags & _VER_FLG_BASE:
                        names.append(data[start:end].decode("utf-8", "replace"))
                seen += 1
                if not following or position + following >= offset + size:
                    break
                position += following
        except struct.error:
            raise ElfError("%s is truncated (its version definitions run past the end)" % name)
    return names


def _read_object(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except (IOError, OSError) as exc:
        raise ElfError("cannot read %s: %s" % (path, exc))
    if len(data) > MAX_BYTES:
        raise ElfError("%s is larger than %d bytes; not read" % (path, MAX_BYTES))
    return data


def version_definitions(path):
    """:func:`version_definitions_of_bytes` of the file at ``path`` (ElfError when unreadable or too large)."""
    return version_definitions_of_bytes(_read_object(path), path)


def dynamic_section(path):
    """:func:`dynamic_section_of_bytes` of the file at ``path`` (ElfError when it is unreadable or too large)."""
    return dynamic_section_of_bytes(_read_object(path), path)


def libstdcxx_linkage(needed, data=b""):
    """How a C++ object has its libstdc++: ``shared`` (NEEDED names libstdc++.so.N), ``static`` (no such NEEDED, but
    libstdc++'s locale machinery is inside ``data``, the object's bytes) or ``none`` (it uses no libstdc++).

    A C++ extension with a static libstdc++ (linked from libstdc++.a, e.g. by a compiler whose libstdc++.so link is
    dangling) has std::locale facet ids that are not the process's: the first std::regex it compiles calls the wrong
    facet and the process dies (captured on 4 x H200 with DeepEP V2's JIT).
    """
    if any(str(name).startswith("libstdc++.so") for name in needed or []):
        return "shared"
    return "static" if b"_ZNSt6locale" in (data or b"") else "none"
