# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/pycode_cache.py: the test nodes' bytecode cache of zip-imported module payloads, on real zip imports."""

from __future__ import annotations

import builtins
import importlib
import py_compile
import sys
import traceback
import zipfile
import zipimport
from pathlib import Path

import pytest

from importlib.machinery import SourceFileLoader
from tools import pycode_cache
from tools.fleetsim import nodeinit

SOURCE = '''
VALUE = 42


def fail():
    raise RuntimeError("from the payload")


class Thing:
    def method(self):
        return VALUE + 1
'''


@pytest.fixture(name="hooked")
def fixture_hooked(monkeypatch, tmp_path):
    """zipimport with the cache installed in a fresh directory, every compile counted; undone after the test."""
    calls = []
    original = zipimport._compile_source  # pylint: disable=protected-access

    def counting(pathname, source):
        calls.append(pathname)
        return original(pathname, source)

    monkeypatch.setattr(zipimport, "_compile_source", counting)
    monkeypatch.setattr(SourceFileLoader, "source_to_code", SourceFileLoader.source_to_code)
    cache = tmp_path / "cache"
    cache.mkdir()
    assert pycode_cache.install(str(cache)) is True
    yield cache, calls
    for name in [n for n in sys.modules if n.startswith("pcpayload")]:
        del sys.modules[name]


def payload(tmp_path, tag: str, source: str = SOURCE) -> str:
    """A zip like an AnsiballZ payload at its own path, holding the module pcpayload_<tag>."""
    path = tmp_path / f"ansible_{tag}_payload.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"pcpayload_{tag}.py", source)
    return str(path)


def import_from(zip_path: str, tag: str):
    sys.path.insert(0, zip_path)
    try:
        return importlib.import_module(f"pcpayload_{tag}")
    finally:
        sys.path.remove(zip_path)


def test_the_same_source_is_compiled_once_and_runs_the_same(hooked, tmp_path):
    cache, calls = hooked
    first = import_from(payload(tmp_path, "a"), "a")
    assert len(calls) == 1
    assert len(list(cache.rglob("*.code"))) == 1
    second = import_from(payload(tmp_path, "b"), "b")
    assert len(calls) == 1, "the second import of the same source compiled again"
    assert second.VALUE == first.VALUE == 42
    assert second.Thing().method() == 43


def test_cached_code_names_the_current_payload_in_tracebacks(hooked, tmp_path):
    import_from(payload(tmp_path, "a"), "a")
    second_zip = payload(tmp_path, "b")
    second = import_from(second_zip, "b")
    assert second.Thing.method.__code__.co_filename.startswith(second_zip)
    with pytest.raises(RuntimeError) as err:
        second.fail()
    frames = traceback.extract_tb(err.value.__traceback__)
    assert frames[-1].filename.startswith(second_zip)
    assert "ansible_a_payload.zip" not in "".join(traceback.format_tb(err.value.__traceback__))


def test_a_changed_source_is_compiled_again(hooked, tmp_path):
    calls = hooked[1]
    import_from(payload(tmp_path, "a"), "a")
    changed = import_from(payload(tmp_path, "b", SOURCE.replace("42", "7")), "b")
    assert len(calls) == 2
    assert changed.VALUE == 7


@pytest.mark.parametrize("damage", [b"", b"\x00\x01garbage", b"N"])
def test_a_damaged_entry_is_compiled_again_and_replaced(hooked, tmp_path, damage):
    cache, calls = hooked
    import_from(payload(tmp_path, "a"), "a")
    (entry,) = cache.rglob("*.code")
    entry.write_bytes(damage)
    module = import_from(payload(tmp_path, "b"), "b")
    assert module.VALUE == 42
    assert len(calls) == 2
    assert entry.read_bytes() != damage
    assert not list(cache.rglob("*.tmp")), "a temporary file was left behind"


def test_an_unwritable_cache_leaves_imports_working(hooked, tmp_path, monkeypatch):
    cache, calls = hooked

    def read_only(*args):
        raise OSError(f"read-only file system: {args}")

    monkeypatch.setattr(pycode_cache.os, "replace", read_only)
    module = import_from(payload(tmp_path, "a"), "a")
    assert module.VALUE == 42 and calls
    assert not [p for p in cache.rglob("*") if p.is_file()], "a file was left in the cache"


def test_a_missing_cache_dir_installs_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(zipimport, "_compile_source", zipimport._compile_source)  # pylint: disable=protected-access
    monkeypatch.setattr(SourceFileLoader, "source_to_code", SourceFileLoader.source_to_code)
    before = zipimport._compile_source, SourceFileLoader.source_to_code  # pylint: disable=protected-access
    assert pycode_cache.install(str(tmp_path / "absent")) is False
    assert (zipimport._compile_source, SourceFileLoader.source_to_code) == before  # pylint: disable=protected-access


def test_py_compile_of_the_same_source_is_compiled_once_and_writes_the_same_pyc(hooked, tmp_path, monkeypatch):
    cache = hooked[0]
    compiled = []
    real_compile = builtins.compile

    def counting(source, filename, *args, **kwargs):
        if str(filename).startswith(str(tmp_path)):
            compiled.append(filename)
        return real_compile(source, filename, *args, **kwargs)

    pycs = []
    for n in range(2):
        src = tmp_path / f"pkg{n}" / "mod.py"
        src.parent.mkdir()
        src.write_text(SOURCE, encoding="utf-8")
        with monkeypatch.context() as patch:
            patch.setattr(builtins, "compile", counting)
            pycs.append(py_compile.compile(str(src), cfile=str(tmp_path / f"mod{n}.pyc"), doraise=True,
                                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH))
    assert len(compiled) == 1, "the second py_compile of the same source compiled again"
    assert len(list(cache.rglob("*.code"))) == 1
    first, second = ((tmp_path / f"mod{n}.pyc").read_bytes() for n in range(2))
    assert first.replace(b"pkg0", b"pkg1") == second, "the cached pyc differs from a compiled one but for its path"
    assert pycs[1].endswith("mod1.pyc")


def test_a_syntax_error_raises_as_without_the_cache(hooked, tmp_path):
    cache = hooked[0]
    src = tmp_path / "broken.py"
    src.write_text("def broken(:\n", encoding="utf-8")
    with pytest.raises(py_compile.PyCompileError, match="SyntaxError"):
        py_compile.compile(str(src), doraise=True)
    assert not list(cache.rglob("*.code"))


def test_a_second_install_does_not_wrap_twice(hooked, tmp_path):
    cache = hooked[0]
    hook = zipimport._compile_source  # pylint: disable=protected-access
    assert pycode_cache.install(str(cache)) is False
    assert zipimport._compile_source is hook  # pylint: disable=protected-access


def test_entries_are_keyed_by_interpreter_optimization_and_source(tmp_path):
    one = pycode_cache.cache_path(str(tmp_path), b"x = 1\n")
    assert one == pycode_cache.cache_path(str(tmp_path), b"x = 1\n")
    assert one != pycode_cache.cache_path(str(tmp_path), b"x = 2\n")
    assert one != pycode_cache.cache_path(str(tmp_path), b"x = 1\n", optimize=2)
    assert one.startswith(str(tmp_path)) and one.endswith(".code")


def test_a_node_without_a_cache_dir_or_a_sitecustomize_gets_no_hook(tmp_path, monkeypatch):
    monkeypatch.setattr(nodeinit, "mount", lambda *a: pytest.fail(f"mounted {a}"))
    assert not nodeinit.install_pycode_cache(None)
    assert not nodeinit.install_pycode_cache(str(tmp_path / "absent"))
    assert not nodeinit.install_pycode_cache(str(tmp_path), stdlib_glob=str(tmp_path / "none/*.py"))


def test_a_sitecustomize_with_the_hook_keeps_its_own_code_and_installs_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(zipimport, "_compile_source", zipimport._compile_source)  # pylint: disable=protected-access
    monkeypatch.setattr(SourceFileLoader, "source_to_code", SourceFileLoader.source_to_code)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.delitem(sys.modules, "pycode_cache", raising=False)
    directory = str(Path(pycode_cache.__file__).parent)
    text = pycode_cache.site_hook("ORIGINAL = True\n", directory, str(cache), "a test")
    scope = {}
    exec(compile(text, "sitecustomize.py", "exec"), scope)  # pylint: disable=exec-used
    assert directory not in sys.path
    assert scope["ORIGINAL"] is True
    assert SourceFileLoader.source_to_code.pycode_cache_dir == str(cache)
    assert zipimport._compile_source.pycode_cache_dir == str(cache)  # pylint: disable=protected-access


def test_a_broken_hook_never_breaks_the_python_that_starts(tmp_path):
    path = list(sys.path)
    text = pycode_cache.site_hook("", str(tmp_path / "absent"), str(tmp_path), "a test")
    exec(compile(text, "sitecustomize.py", "exec"), {})  # pylint: disable=exec-used
    assert sys.path == path
