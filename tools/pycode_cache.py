# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bytecode cache of compiled Python sources, installed in the test nodes' Python (fleetsim nodes, vmfleet guests).

Every Ansible module run ships its code as a zip (AnsiballZ) and Python imports it with ``zipimport``, which never
caches bytecode: each run compiles ``ansible.module_utils.basic`` and the collection's module_utils again (9-20
thousand lines, 45-60 % of a module run's CPU on this machine, more under QEMU's emulation). And every ``pip install``
on a node compiles each installed ``.py`` (``py_compile``: torch's thousands of files on every node of a scenario,
pip's own in every new virtualenv). A test run compiles the same sources thousands of times. This hook keeps the
compiled code of each source, keyed by the sha256 of the interpreter's magic number, the optimization level and the
source's bytes, and loads it instead of compiling when the same source comes again: for zip imports
(``zipimport._compile_source``) and for source files (``SourceLoader.source_to_code``, which imports of files without a
valid ``__pycache__`` entry and ``py_compile`` call). The code that runs is the same code; its file names
(``co_filename``, read by tracebacks) are the current ones. Python still writes and reads ``__pycache__`` as always.

Stdlib only, no state but the cache directory: a missing, unreadable or damaged entry is compiled as before and
written again (atomically, by rename); a source that does not compile raises as it would without the cache. Installed
by ``install(cache_dir)``; a directory that does not exist disables it. Runs unchanged on Python 3.8+ (CPython: where
``zipimport`` has no ``_compile_source`` only source files are cached).
"""

from __future__ import annotations

import marshal
import os
import sys
import zipimport

try:  # what importlib.machinery is made of, loaded at every start-up (the importlib package is not)
    import _frozen_importlib_external as _external
except ImportError:  # pragma: no cover - not CPython
    from importlib import _bootstrap_external as _external

KEY_PREFIX = _external.MAGIC_NUMBER
# What a node's sitecustomize gains (site_hook): this file imported from its own directory (a virtualenv's Python, too,
# reads the standard library's sitecustomize but not the system's site-packages; a plain import keeps its bytecode in
# __pycache__), never in the way of the node's Python.
SITE_HOOK = """
# {origin}: the bytecode cache of compiled Python sources (the collection's tools/pycode_cache.py).
try:
    import sys as _pycode_sys
    _pycode_sys.path.insert(0, "{directory}")
    try:
        import pycode_cache as _pycode_hook
    finally:
        _pycode_sys.path.remove("{directory}")
    _pycode_hook.install("{cache}")
except Exception:  # pylint: disable=broad-except
    pass
"""


def site_hook(text: str, directory: str, cache_dir: str, origin: str) -> str:
    """A sitecustomize's ``text`` with the hook that imports this file as ``<directory>/pycode_cache.py`` and caches
    in ``cache_dir``."""
    return text.rstrip("\n") + "\n" + SITE_HOOK.format(origin=origin, directory=directory, cache=cache_dir)


def _sha256(data: bytes):
    """hashlib.sha256, imported when first needed: every Python on a node loads this module, and hashlib's OpenSSL
    is its dearest import (CPython's built-in _sha256, where there is one, is not)."""
    try:
        from _sha256 import sha256  # pylint: disable=import-outside-toplevel
    except ImportError:
        from hashlib import sha256  # pylint: disable=import-outside-toplevel
    return sha256(data)


def cache_path(cache_dir: str, source: bytes, optimize: int = -1) -> str:
    """Where the code of ``source`` compiled at ``optimize`` (-1: the interpreter's level) lives in ``cache_dir``."""
    level = sys.flags.optimize if optimize == -1 else optimize
    key = _sha256(KEY_PREFIX + b"%d\0" % level + bytes(source)).hexdigest()
    return os.path.join(cache_dir, key[:2], key[2:] + ".code")


def retarget(code, filename: str):
    """``code`` and every code object nested in it with ``co_filename`` set to ``filename``."""
    consts = tuple(retarget(const, filename) if isinstance(const, CodeType) else const
                   for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


CodeType = type(retarget.__code__)


def load(path: str, filename: str):
    """The cached code at ``path`` for ``filename``, or None when there is none usable."""
    try:
        with open(path, "rb") as handle:
            code = marshal.loads(handle.read())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(code, CodeType):
        return None
    return retarget(code, filename)


def store(path: str, code) -> None:
    """Write ``code`` at ``path`` whole or not at all (a temporary file renamed over it); errors are ignored. The
    temporary name is random as well: the nodes sharing a cache have PID namespaces of their own."""
    tmp = f"{path}.{os.getpid()}-{os.urandom(6).hex()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def cached_compile(cache_dir: str, source: bytes, filename: str, optimize: int, compile_source):
    """The code of ``source`` for ``filename``: from the cache, or ``compile_source()`` stored there."""
    path = cache_path(cache_dir, source, optimize)
    code = load(path, filename)
    if code is None:
        code = compile_source()
        store(path, code)
    return code


def install(cache_dir: str) -> bool:
    """Cache compiled sources in ``cache_dir`` (which must exist). True when a hook was installed now."""
    if not os.path.isdir(cache_dir):
        return False
    installed = False
    original = getattr(zipimport, "_compile_source", None)
    if original is not None and not hasattr(original, "pycode_cache_dir"):

        def compile_source(pathname, source):
            return cached_compile(cache_dir, source, pathname, -1, lambda: original(pathname, source))

        compile_source.pycode_cache_dir = cache_dir
        zipimport._compile_source = compile_source  # pylint: disable=protected-access
        installed = True
    loader = _external.SourceFileLoader
    to_code = loader.source_to_code
    if not hasattr(to_code, "pycode_cache_dir"):

        def source_to_code(self, data, path, *, _optimize=-1):
            if not isinstance(data, (bytes, bytearray)):
                return to_code(self, data, path, _optimize=_optimize)
            return cached_compile(cache_dir, data, path, _optimize,
                                  lambda: to_code(self, data, path, _optimize=_optimize))

        source_to_code.pycode_cache_dir = cache_dir
        loader.source_to_code = source_to_code
        installed = True
    return installed
