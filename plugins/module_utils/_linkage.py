# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The linkage record of a build artifact: what each of its objects links and embeds, written at build time.

Standard library only, Python 3.8+ (this file runs on the managed nodes). The builds (deepep_build, nvshmem_build,
make_build) keep the record under the key ``linkage`` of their build record, so it travels with the artifact::

    {"schema": 1, "artifact": "deepep" | "nvshmem" | "nccl" | "gdrcopy",
     "objects": [{"path", "needed", "runpath", "rpath", "soname", "libstdcxx", "sass", "ptx"}],
     "torch": {"version", "cxx11_abi", "cuda"} | None, "cuda": str | None, "compiler": {"cxx", "version"},
     "nccl": {"header_version", "root", "library"} | None,
     "nvshmem": {"host_version", "host_library", "device_version", "device_library"} | None,
     "baked_env": {NAME: value} | None, "warnings": [str]}

What is read here, and how:

* ``needed``/``runpath``/``rpath``/``soname``/``libstdcxx``: the object's dynamic section (``_elf``).
* ``sass``/``ptx`` (``["sm_90", "sm_90a", ...]``): ``cuobjdump --list-elf`` / ``--list-ptx`` where the toolkit has
  cuobjdump (:func:`archs_from_cuobjdump`); else the entry headers of the ``.nv_fatbin`` section
  (:func:`fatbin_archs`: kind 1 PTX, 2 ELF, the SM number, and the flags 0x100000 = ``a``, 0x200000 = ``f``, as
  nvcc 13.0 writes them for sm_75, 90, 90a, 100, 100a, 100f, 103a, 120 and compute_80/90a/100). A fatbin this reader
  does not fully understand gives null, never a guess. An object without a ``.nv_fatbin`` section embeds none: ``[]``.
* ``torch.cxx11_abi``: from the object, not from torch: an undefined dynamic symbol containing ``__cxx11`` means the
  extension was compiled with ``_GLIBCXX_USE_CXX11_ABI=1`` (True); an object that needs torch's libraries
  (libc10.so, libtorch*.so) and calls into c10/at/torch with no such symbol was compiled with 0 (False); anything
  else is null.
* ``baked_env``: DeepEP's ``deep_ep/envs.py`` (``persistent_envs['NAME'] = 'value'`` lines, read as Python literals,
  never executed).
"""

from __future__ import annotations

import ast
import glob
import os
import re
import struct

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import RecordShapeError
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import check_record as check_shape
from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import (
    ElfError,
    dynamic_section_of_bytes,
    elf_ident,
    is_elf,
    libstdcxx_linkage,
    MAX_BYTES,
)

__all__ = ["SCHEMA", "ARTIFACTS", "LinkageError", "elf_sections", "undefined_symbols", "cxx11_abi",
           "archs_from_cuobjdump", "fatbin_archs", "embedded_archs", "object_record", "baked_env_from_text",
           "resolve_needed", "compiler_from_version_output", "torch_cuda_from_version_py", "linkage_record",
           "check_record", "shape_error", "tree_objects", "installed_library"]

SCHEMA = 1
ARTIFACTS = ("deepep", "nvshmem", "nccl", "gdrcopy")
CUOBJDUMP_TIMEOUT = 300

_SHT_DYNSYM = 11
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_ELF = 1, 2
_FATBIN_ARCH_SPECIFIC, _FATBIN_FAMILY_SPECIFIC = 0x100000, 0x200000
_ARCH_RE = re.compile(r"sm_(\d+[af]?)")
_ELF_LINE_RE = re.compile(r"^\s*ELF file\s+\d+:\s*(\S+)\s*$")
_PTX_LINE_RE = re.compile(r"^\s*PTX file\s+\d+:\s*(\S+)\s*$")
_NONE_FOUND_RE = re.compile(r"No (ELF|PTX) file found")
_NO_DEVICE_CODE = "does not contain device code"
_TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so",
               "libtorch_python.so")
_TORCH_SYMBOL_PREFIXES = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch")
_TORCH_CUDA_RE = re.compile(r"^cuda\s*(?::[^=\n]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)\s*$", re.M)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LinkageError(ValueError):
    """A linkage record (or a part of one) that does not have the schema's shape; the message names the field."""


# --- ELF sections and symbols ---------------------------------------------------------------------------------


def _section_list(data, name):
    """``[(name, type, offset, size, link, entsize)]`` in section-header order; ``[]`` without section headers."""
    bits, order = elf_ident(data, name)
    try:
        if bits == 64:
            shoff, = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
            fmt = order + "IIQQQQIIQQ"
        else:
            shoff, = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
            fmt = order + "IIIIIIIIII"
        if shoff == 0 or shnum == 0:
            return []
        headers = []
        for index in range(shnum):
            fields = struct.unpack_from(fmt, data, shoff + index * shentsize)
            headers.append((fields[0], fields[1], fields[4], fields[5], fields[6], fields[9]))
    except struct.error:
        raise ElfError("%s is truncated (its section headers run past the end)" % name)
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
    return dict((entry[0], entry[1:]) for entry in _section_list(data, name) if entry[0])


def undefined_symbols(data, name="<bytes>"):
    """The names of the undefined symbols of the dynamic symbol table (what the object takes from libraries)."""
    sections = _section_list(data, name)
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


def cxx11_abi(undefined, needed):
    """True (``_GLIBCXX_USE_CXX11_ABI=1``), False (0) or None (cannot tell) from the undefined dynamic symbols.

    An undefined symbol containing ``__cxx11`` means ABI 1. An object that needs torch's libraries and takes c10,
    at or torch symbols from them, none with ``__cxx11``, was compiled with ABI 0 (torch's API passes std::string,
    whose ABI-1 name always carries ``__cxx11``). Anything else: None.
    """
    undefined = list(undefined or [])
    if any("__cxx11" in symbol for symbol in undefined):
        return True
    needs_torch = any(str(lib) in _TORCH_LIBS for lib in needed or [])
    if needs_torch and any(symbol.startswith(_TORCH_SYMBOL_PREFIXES) for symbol in undefined):
        return False
    return None


# --- SASS and PTX ---------------------------------------------------------------------------------------------


def archs_from_cuobjdump(text, what):
    """The sorted SM archs (``["sm_90", "sm_90a"]``) in ``cuobjdump --list-elf`` (``what="elf"``) or
    ``--list-ptx`` (``"ptx"``) output; ``[]`` when it says there is none; None when the output is not one of those.

    Lines: ``ELF file    1: <name>.1.sm_90.cubin``, ``PTX file    1: <name>.1.sm_90.ptx``.
    """
    if what not in ("elf", "ptx"):
        raise LinkageError("what must be elf or ptx, got %r" % (what,))
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


# --- objects --------------------------------------------------------------------------------------------------


def object_record(path, data, sass=None, ptx=None, name=None):
    """One entry of ``objects`` for the ELF object ``data`` kept at ``path`` (relative to the artifact root)."""
    name = name or path
    section = dynamic_section_of_bytes(data, name)
    return {"path": path, "needed": section["needed"], "runpath": section["runpath"], "rpath": section["rpath"],
            "soname": section["soname"], "libstdcxx": libstdcxx_linkage(section["needed"], data),
            "sass": sass, "ptx": ptx}


def resolve_needed(library, objects_search, exists=os.path.exists, real=True):
    """The path of ``library`` (a NEEDED name) in the first of ``objects_search`` (directories) holding it, else
    None. ``$ORIGIN`` entries are not resolved (the object's place is known only once installed). The one NEEDED
    resolver: the build (``deepep_build``, the real path) and the node's check of a record (``_node.linkage``, the
    path as found, ``exists`` looking under the node's root) both use it."""
    for directory in objects_search or []:
        if not directory or "$ORIGIN" in directory or "${ORIGIN}" in directory:
            continue
        candidate = os.path.join(directory, library)
        if exists(candidate):
            return os.path.realpath(candidate) if real else candidate
    return None


def baked_env_from_text(text):
    """``{NAME: value}`` of the ``persistent_envs['NAME'] = <literal>`` assignments in DeepEP's ``deep_ep/envs.py``
    (read with ast, never executed); None for no text; ``{}`` for a file that bakes nothing."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        raise LinkageError("deep_ep/envs.py is not valid Python: %s" % exc)
    baked = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                and target.value.id == "persistent_envs"):
            continue
        index = target.slice.value if isinstance(target.slice, ast.Index) else target.slice  # Python 3.8
        try:
            key, value = ast.literal_eval(index), ast.literal_eval(node.value)
        except ValueError:
            raise LinkageError("deep_ep/envs.py line %d assigns persistent_envs something that is not a literal"
                               % node.lineno)
        if not isinstance(key, str) or not _ENV_NAME_RE.fullmatch(key):
            raise LinkageError("deep_ep/envs.py line %d: persistent_envs key %r is not an environment variable name"
                               % (node.lineno, key))
        baked[key] = value if isinstance(value, str) else str(value)
    return baked


def compiler_from_version_output(text):
    """The first non-empty line of ``<cxx> --version``, or None."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def torch_cuda_from_version_py(text):
    """``torch.version.cuda`` from the text of ``torch/version.py`` (``cuda: Optional[str] = '13.0'``); None when
    torch is a CPU build, or the file is absent or says nothing."""
    match = _TORCH_CUDA_RE.search(text or "")
    if not match:
        return None
    return match.group(1) or match.group(2) or None


def tree_objects(run, cuda_home, tree, subdirs=("lib",)):
    """``(objects, warnings)``: an ``objects`` entry for every ELF file (not a link) under ``<tree>/<subdir>``
    (not recursive), its path relative to ``tree``. An object that cannot be read is a warning, not a failure."""
    objects, warnings = [], []
    for subdir in subdirs:
        directory = os.path.join(tree, subdir)
        if not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            relative = os.path.join(subdir, entry)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as handle:
                    if not is_elf(handle.read(4)):
                        continue
                    handle.seek(0)
                    data = handle.read(MAX_BYTES + 1)
                if len(data) > MAX_BYTES:
                    warnings.append("%s is larger than %d bytes: not recorded" % (relative, MAX_BYTES))
                    continue
                sass, ptx, warning = embedded_archs(run, cuda_home, path, data, relative)
                objects.append(object_record(relative, data, sass, ptx, relative))
            except (IOError, OSError, ElfError) as exc:
                warnings.append("cannot read what %s links: %s" % (relative, exc))
                continue
            if warning:
                warnings.append(warning)
    return objects, warnings


def installed_library(tree, prefix, pattern, subdir="lib"):
    """Where the file that ``<tree>/<subdir>/<pattern>`` (a glob, first match; links followed inside ``tree``) is
    once ``tree`` is installed at ``prefix``; None when nothing matches."""
    matches = sorted(glob.glob(os.path.join(tree, subdir, pattern)))
    if not matches:
        return None
    real_tree = os.path.realpath(tree)
    real = os.path.realpath(matches[0])
    if not real.startswith(real_tree + os.sep):
        return real  # a link out of the tree: the file it names
    return os.path.join(prefix, os.path.relpath(real, real_tree))


# --- the record -----------------------------------------------------------------------------------------------


def linkage_record(artifact, objects, torch=None, cuda=None, compiler=None, nccl=None, nvshmem=None,
                   baked_env=None, warnings=()):
    """The record, checked (:func:`check_record`)."""
    compiler = compiler or {}
    record = {
        "schema": SCHEMA, "artifact": artifact, "objects": list(objects),
        "torch": dict(torch) if torch is not None else None,
        "cuda": cuda,
        "compiler": {"cxx": compiler.get("cxx"), "version": compiler.get("version")},
        "nccl": dict(nccl) if nccl is not None else None,
        "nvshmem": dict(nvshmem) if nvshmem is not None else None,
        "baked_env": dict(baked_env) if baked_env is not None else None,
        "warnings": [str(w) for w in warnings],
    }
    check_record(record)
    return record


# The schema-1 record, once: the writer (check_record, strict, at build time) and the reader on the node
# (shape_error, naming the stamp a malformed record came from) both hold a record against these tables.
_TOP_FIELDS = {"schema": int, "artifact": str, "objects": list, "torch": (dict, type(None)), "cuda": (str, type(None)),
               "compiler": dict, "nccl": (dict, type(None)), "nvshmem": (dict, type(None)),
               "baked_env": (dict, type(None)), "warnings": list}
_OBJECT_FIELDS = {"path": str, "needed": list, "runpath": list, "rpath": list, "soname": (str, type(None)),
                  "libstdcxx": str, "sass": (list, type(None)), "ptx": (list, type(None))}
_SECTIONS = {
    "torch": {"version": (str, type(None)), "cxx11_abi": (bool, type(None)), "cuda": (str, type(None))},
    "nccl": {"header_version": (str, type(None)), "root": (str, type(None)), "library": (str, type(None))},
    "nvshmem": {"host_version": (str, type(None)), "host_library": (str, type(None)),
                "device_version": (str, type(None)), "device_library": (str, type(None))},
    "compiler": {"cxx": (str, type(None)), "version": (str, type(None))},
}


def check_record(record):
    """Raise LinkageError, naming the field and the expected form, where ``record`` is not a schema-1 record."""
    if not isinstance(record, dict):
        raise LinkageError("linkage must be a dict, got %s" % type(record).__name__)
    expected = set(_TOP_FIELDS)
    if set(record) != expected:
        raise LinkageError("linkage has keys %s, expected exactly %s" % (sorted(record), sorted(expected)))
    if record["schema"] != SCHEMA:
        raise LinkageError("linkage.schema is %r, expected %d" % (record["schema"], SCHEMA))
    if record["artifact"] not in ARTIFACTS:
        raise LinkageError("linkage.artifact is %r, expected one of %s" % (record["artifact"], ", ".join(ARTIFACTS)))
    if not isinstance(record["objects"], list):
        raise LinkageError("linkage.objects must be a list, got %s" % type(record["objects"]).__name__)
    for index, obj in enumerate(record["objects"]):
        where = "linkage.objects[%d]" % index
        if not isinstance(obj, dict) or set(obj) != set(_OBJECT_FIELDS):
            raise LinkageError("%s must be a dict with exactly %s" % (where, sorted(_OBJECT_FIELDS)))
        for field, kind in _OBJECT_FIELDS.items():
            if not isinstance(obj[field], kind):
                raise LinkageError("%s.%s is %r, expected %s" % (where, field, obj[field], _kind_name(kind)))
        if os.path.isabs(obj["path"]) or obj["path"].startswith("../"):
            raise LinkageError("%s.path is %r, expected a path relative to the artifact root" % (where, obj["path"]))
        if obj["libstdcxx"] not in ("shared", "static", "none"):
            raise LinkageError("%s.libstdcxx is %r, expected shared, static or none" % (where, obj["libstdcxx"]))
        for field in ("sass", "ptx"):
            for arch in obj[field] or []:
                if not isinstance(arch, str) or not re.fullmatch(r"sm_\d+[af]?", arch):
                    raise LinkageError("%s.%s holds %r, expected sm_<digits>[a|f] such as sm_90" % (where, field, arch))
    if record["cuda"] is not None and not isinstance(record["cuda"], str):
        raise LinkageError("linkage.cuda is %r, expected a version string or null" % (record["cuda"],))
    for section, fields in _SECTIONS.items():
        value = record[section]
        if value is None and section != "compiler":
            continue
        if not isinstance(value, dict) or set(value) != set(fields):
            raise LinkageError("linkage.%s must be %s with exactly %s" % (
                section, "a dict" if section == "compiler" else "null or a dict", sorted(fields)))
        for field, kind in fields.items():
            if not isinstance(value[field], kind):
                raise LinkageError("linkage.%s.%s is %r, expected %s" % (section, field, value[field], _kind_name(kind)))
    baked = record["baked_env"]
    if baked is not None and (not isinstance(baked, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in baked.items())):
        raise LinkageError("linkage.baked_env is %r, expected null or a dict of names to string values" % (baked,))
    if not isinstance(record["warnings"], list) or not all(isinstance(w, str) for w in record["warnings"]):
        raise LinkageError("linkage.warnings must be a list of strings")
    return record


def _shape_of(fields):
    """A field table as the shape ``_guard.check_record`` reads: {key: "str" | "str|null" | ...}."""
    names = {str: "str", int: "int", bool: "bool", dict: "dict", list: "list"}
    shape = {}
    for key, kind in fields.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        base = [names[k] for k in kinds if k is not type(None)]
        shape[key] = base[0] + ("|null" if type(None) in kinds else "")
    return shape


RECORD_SHAPE = _shape_of(_TOP_FIELDS)
OBJECT_SHAPE = _shape_of(_OBJECT_FIELDS)
SUB_SHAPES = dict((name, _shape_of(fields)) for name, fields in _SECTIONS.items())


def _str_list(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def shape_error(path, linkage):
    """Why the linkage record (schema 1) read from ``path`` is malformed - the key, the value and the expected
    form, the stamp named - or None. The same schema as :func:`check_record`, which it runs last: a record the
    reader accepts is one the writer would have written."""
    try:
        check_shape(path, linkage, RECORD_SHAPE, what="linkage record")
        for name, shape in SUB_SHAPES.items():
            if isinstance(linkage.get(name), dict):
                check_shape(path, linkage[name], shape, what="linkage record (%s)" % name)
        for index, obj in enumerate(linkage["objects"]):
            where = "linkage record (objects[%d])" % index
            check_shape(path, obj, OBJECT_SHAPE, what=where)
            for key in ("needed", "runpath", "rpath", "sass", "ptx"):
                if obj.get(key) is not None and not _str_list(obj[key]):
                    raise RecordShapeError("%s %s: %r is %r, expected a list of strings" % (where, path, key, obj[key]))
    except RecordShapeError as exc:
        return str(exc)
    if not linkage["objects"]:
        return "linkage record %s: 'objects' is [], expected at least one object of the extension" % path
    try:
        check_record(linkage)
    except LinkageError as exc:
        return "linkage record %s: %s" % (path, exc)
    return None


def _kind_name(kind):
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
