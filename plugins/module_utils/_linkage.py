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
* ``sass``/``ptx`` (``["sm_90", "sm_90a", ...]``): ``_devicecode.embedded_archs`` (cuobjdump where the toolkit has
  it, else the ``.nv_fatbin`` section's entry headers, as nvcc 13.0 writes them for sm_75, 90, 90a, 100, 100a, 100f,
  103a, 120 and compute_80/90a/100); null where neither can tell, ``[]`` for an object without device code.
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

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import RecordShapeError
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import check_record as check_shape
from ansible_collections.gpufleet.deepep.plugins.module_utils._devicecode import embedded_archs
from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import (
    ElfError,
    dynamic_section_of_bytes,
    is_elf,
    libstdcxx_linkage,
    MAX_BYTES,
)

__all__ = ["SCHEMA", "ARTIFACTS", "LinkageError", "cxx11_abi", "object_record", "baked_env_from_text",
           "resolve_needed", "compiler_from_version_output", "torch_cuda_from_version_py", "linkage_record",
           "check_record", "shape_error", "tree_objects", "installed_library"]

SCHEMA = 1
ARTIFACTS = ("deepep", "nvshmem", "nccl", "gdrcopy")

_TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so",
               "libtorch_python.so")
_TORCH_SYMBOL_PREFIXES = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch")
_TORCH_CUDA_RE = re.compile(r"^cuda\s*(?::[^=\n]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)\s*$", re.M)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LinkageError(ValueError):
    """A linkage record (or a part of one) that does not have the schema's shape; the message names the field."""


# --- the torch ABI ----------------------------------------------------------------------------------------------


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
