# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVSHMEM sources and builds: the version a header declares, ``nvshmem-info -a`` output, the RoCE
``ibv_ah_attr`` fix (runbook 000), and the CMake arguments of an IBGDA build.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import parse_cmake_arch_list
from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import BuildError

__all__ = [
    "parse_nvshmem_info", "apply_ah_attr_fix", "nvshmem_cmake_args",
]


_INFO_VERSION_RE = re.compile(r"^\s*NVSHMEM v(\d+(?:\.\d+)+)", re.MULTILINE)
_INFO_VAR_RE = re.compile(r"\b(NVSHMEM_[A-Z0-9_]+|[A-Z][A-Z0-9_]*_HOME|NVSHMEM_PREFIX)=(\S*)")


def parse_nvshmem_info(text):
    """Read ``nvshmem-info -a`` output: ``{'version', 'ibgda', 'build_variables', 'cuda_api'}``.

    ``ibgda`` is True/False from ``NVSHMEM_IBGDA_SUPPORT=ON|OFF`` in the build variables, None when the
    output does not say.
    """
    text = text or ""
    match = _INFO_VERSION_RE.search(text)
    variables = dict(_INFO_VAR_RE.findall(text))
    ibgda = variables.get("NVSHMEM_IBGDA_SUPPORT")
    cuda_api = re.search(r"^\s*CUDA API\s+(\d+)", text, re.MULTILINE)
    return {
        "version": match.group(1) if match else None,
        "ibgda": None if ibgda is None else ibgda.upper() in ("ON", "1", "TRUE", "YES"),
        "build_variables": variables,
        "cuda_api": int(cuda_api.group(1)) if cuda_api else None,
    }


_AH_DECL_RE = re.compile(r"^(?P<indent>[ \t]*)struct[ \t]+ibv_ah_attr[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*;[^\n]*$",
                         re.MULTILINE)
_TYPE_BLOCK_RE = re.compile(r"(\b(struct|class|union|enum|namespace)\b[^(){};]*|\bextern\s*\"C\"\s*)$")


def _brace_kinds(text):
    """For each offset where a ``{`` opens, whether the block is a type body or code."""
    stack = []
    kinds_at = []                 # (offset, stack snapshot top) events
    last_stmt_end = 0
    i = 0
    length = len(text)
    while i < length:
        ch = text[i]
        if ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = length if end < 0 else end
            continue
        if ch == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = length if end < 0 else end + 2
            continue
        if ch in "\"'":
            j = i + 1
            while j < length and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            head = re.sub(r"//[^\n]*", "", text[last_stmt_end:i])
            kind = "type" if _TYPE_BLOCK_RE.search(head.strip()) else "code"
            if stack and stack[-1] == "type" and kind == "code" and not re.search(r"\)\s*(const\s*)?$", head.strip()):
                kind = "type"
            stack.append(kind)
            kinds_at.append((i, tuple(stack)))
            last_stmt_end = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            kinds_at.append((i, tuple(stack)))
            last_stmt_end = i + 1
        elif ch == ";":
            last_stmt_end = i + 1
        i += 1
    return kinds_at


def _in_code(kinds_at, offset):
    state = ()
    for at, stack in kinds_at:
        if at >= offset:
            break
        state = stack
    return bool(state) and state[-1] == "code"


def apply_ah_attr_fix(text):
    """Zero every local ``struct ibv_ah_attr X;`` in NVSHMEM's IBGDA transport source.

    Inserts ``memset(&X, 0, sizeof(X));`` after each declaration inside a function body (declarations
    inside struct definitions are left alone), the fix for "Unable to create ah" on RoCE (uninitialised
    ``static_rate``; NVIDIA/nvshmem#21). Idempotent: a declaration already followed by its memset, or
    already zero-initialised, is not touched. Returns ``(new_text, fixed, already)`` with the names of
    the declarations fixed now and those found fixed.
    """
    kinds_at = _brace_kinds(text)
    out = []
    pos = 0
    fixed = []
    already = []
    for match in _AH_DECL_RE.finditer(text):
        if not _in_code(kinds_at, match.start()):
            continue
        name = match.group("name")
        rest = text[match.end():]
        following = re.match(r"\n[ \t]*memset[ \t]*\([ \t]*&[ \t]*%s[ \t]*,[ \t]*0[ \t]*," % re.escape(name), rest)
        if following:
            already.append(name)
            continue
        out.append(text[pos:match.end()])
        out.append("\n%smemset(&%s, 0, sizeof(%s));" % (match.group("indent"), name, name))
        pos = match.end()
        fixed.append(name)
    out.append(text[pos:])
    return "".join(out), fixed, already


_CMAKE_VALUE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?$")


def _cmake_value(value):
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if value is None:
        return ""
    return str(value)


def nvshmem_cmake_args(source_dir, build_dir, prefix, cuda_home, cuda_arch, ibgda=True, gdrcopy_home=None,
                       cmake_options=None, generator=None):
    """The configure command and environment the runbooks use for NVSHMEM.

    IBGDA on (unless ``ibgda`` is False); SHMEM, UCX, NCCL and MPI off; GDRCopy on with its include dir
    when ``gdrcopy_home`` is given, off otherwise; examples, tests and the nvshmem4py wheels off; CUDACXX and
    CMAKE_CUDA_COMPILER set explicitly. ``cmake_options`` (a dict) adds or overrides ``-D`` entries.
    Returns ``(argv, env, options)`` where ``options`` is the final ``-D`` dict.
    """
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    options = {
        "CMAKE_INSTALL_PREFIX": prefix,
        # What nvshmem-info reports as NVSHMEM_PREFIX (upstream default /usr/local/nvshmem, whatever the install).
        "NVSHMEM_PREFIX": prefix,
        "CMAKE_BUILD_TYPE": "Release",
        "CMAKE_CUDA_COMPILER": nvcc,
        "CMAKE_CUDA_ARCHITECTURES": parse_cmake_arch_list(cuda_arch),
        "CUDA_HOME": cuda_home,
        "NVSHMEM_IBGDA_SUPPORT": bool(ibgda),
        "NVSHMEM_SHMEM_SUPPORT": False,
        "NVSHMEM_UCX_SUPPORT": False,
        "NVSHMEM_USE_NCCL": False,
        "NVSHMEM_MPI_SUPPORT": False,
        "NVSHMEM_PMIX_SUPPORT": False,
        "NVSHMEM_BUILD_EXAMPLES": False,
        "NVSHMEM_BUILD_TESTS": False,
        # On by default upstream: makes venvs and pip-installs nvshmem4py's build requirements (needs an index).
        "NVSHMEM_BUILD_PYTHON_LIB": False,
        "NVSHMEM_USE_GDRCOPY": bool(gdrcopy_home),
    }
    if gdrcopy_home:
        options["GDRCOPY_HOME"] = gdrcopy_home
        options["GDRCOPY_INCLUDE"] = os.path.join(gdrcopy_home, "include")
    for name, value in sorted((cmake_options or {}).items()):
        if not _CMAKE_VALUE_RE.fullmatch(str(name)):
            raise BuildError("cmake option name %r is not a CMake variable name (NAME or NAME:TYPE)" % (name,))
        options[str(name)] = value
    argv = ["cmake"]
    if generator:
        argv += ["-G", generator]
    argv += ["-S", source_dir, "-B", build_dir]
    argv += ["-D%s=%s" % (name, _cmake_value(options[name])) for name in sorted(options)]
    env = {
        "CUDA_HOME": cuda_home,
        "CUDACXX": nvcc,
        "NVSHMEM_IBGDA_SUPPORT": "1" if ibgda else "0",
        "NVSHMEM_USE_GDRCOPY": "1" if gdrcopy_home else "0",
        "NVSHMEM_SHMEM_SUPPORT": "0",
        "NVSHMEM_UCX_SUPPORT": "0",
        "NVSHMEM_USE_NCCL": "0",
        "NVSHMEM_MPI_SUPPORT": "0",
    }
    if gdrcopy_home:
        env["GDRCOPY_HOME"] = gdrcopy_home
    return argv, env, dict((k, _cmake_value(v)) for k, v in options.items())
