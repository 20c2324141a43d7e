# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout by where code runs (docs/DESIGN.md, Layout), held by the imports themselves:

- module_utils is what a module may ship to a node: every file there is imported, directly or through another, by a
  module; code only the controller runs lives in plugin_utils.
- an action-backed module is one shape: the module file documents it; the spec and the logic live in plugin_utils
  (or module_utils, when the module also runs on the node); no action, filter, lookup or plugin_utils file imports
  a module or a lookup of the collection.
- a module file without a ``main`` is the documentation of an action of the same name.
"""

from __future__ import annotations

import ast

from unit_helpers import REPO

PLUGINS = REPO / "plugins"
PREFIX = "ansible_collections.gpufleet.deepep.plugins."


def _imports(path):
    """The collection's modules ``path`` imports, as dotted names under plugins (``module_utils._store``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            base = node.module[len(PREFIX):]
            names.add(base)
            names.update("%s.%s" % (base, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name[len(PREFIX):] for alias in node.names if alias.name.startswith(PREFIX))
    return names


def _file_of(name):
    """The file of a dotted name under plugins, or None (a name imported from a module, not a module)."""
    path = PLUGINS.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def _dotted(path):
    return ".".join(path.relative_to(PLUGINS).with_suffix("").parts)


def test_every_module_utils_file_is_shipped_by_a_module():
    reached, todo = set(), list((PLUGINS / "modules").glob("*.py"))
    while todo:
        for name in _imports(todo.pop()):
            path = _file_of(name)
            if path is not None and path not in reached:
                reached.add(path)
                todo.append(path)
    unshipped = sorted(_dotted(path) for path in (PLUGINS / "module_utils").rglob("*.py")
                       if path.name != "__init__.py" and path not in reached)
    assert unshipped == [], ("controller-only code in module_utils (no module imports it; move it to plugin_utils): "
                             "%s" % unshipped)


def test_no_controller_plugin_imports_a_module_or_a_lookup():
    offenders = []
    for kind in ("action", "filter", "lookup", "plugin_utils", "module_utils"):
        for path in sorted((PLUGINS / kind).rglob("*.py")):
            for name in _imports(path):
                if name.startswith(("modules.", "lookup.")) and _file_of(name) is not None:
                    offenders.append("%s imports %s" % (_dotted(path), name))
                elif name.startswith(("modules.", "lookup.")) and name.count(".") >= 2:
                    offenders.append("%s imports %s" % (_dotted(path), name))
    assert offenders == []


def test_a_module_without_main_documents_an_action_of_its_name():
    for path in sorted((PLUGINS / "modules").glob("*.py")):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        if "\ndef main(" not in text:
            assert (PLUGINS / "action" / path.name).is_file(), path.name
            # documentation only: nothing but the docs strings and the future import
            tree = ast.parse(text)
            kinds = {type(node).__name__ for node in tree.body}
            assert kinds <= {"ImportFrom", "Assign", "Expr"}, (path.name, kinds)
            assert [node.module for node in tree.body if isinstance(node, ast.ImportFrom)] == ["__future__"], path.name


def test_the_layout_rule_catches_what_it_names(tmp_path, monkeypatch):
    """The reachability walk sees through packages and from-imports of submodules (what the first test relies on)."""
    assert _file_of("module_utils._serve.units") == PLUGINS / "module_utils" / "_serve" / "units.py"
    assert _file_of("module_utils._serve") == PLUGINS / "module_utils" / "_serve" / "__init__.py"
    assert _file_of("module_utils._store.ARGUMENT_SPEC") is None
    probe = tmp_path / "probe.py"
    probe.write_text("from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import units as u\n"
                     "from ansible_collections.gpufleet.deepep.plugins.plugin_utils._settings import judge\n")
    assert {"module_utils._serve.units", "plugin_utils._settings"} <= _imports(probe)
