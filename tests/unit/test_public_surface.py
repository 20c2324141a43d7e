# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's filters are either called by its own roles, playbooks or scenarios, or declared public in the
README's "Filters for your own playbooks" table: a filter neither calls nor declares is surface nobody maintains."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALLERS = ("roles", "playbooks", "molecule")


def _filters():
    names = set()
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module("ansible_collections.gpufleet.deepep.plugins.filter." + path.stem)
        found = set(module.FilterModule().filters())
        assert found, "%s ships no filter" % path.name
        assert not found & names, "%s repeats %s" % (path.name, sorted(found & names))
        names.update(found)
    return names


def _called():
    text = []
    for top in CALLERS:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
                text.append(path.read_text(encoding="utf-8"))
    return set(re.findall(r"gpufleet\.deepep\.([a-z_0-9]+)", "\n".join(text)))


def _declared_public():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Filters for your own playbooks", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([a-z_0-9]+)` \|", section, re.MULTILINE))


def test_every_filter_has_a_caller_or_is_declared_public():
    unheld = sorted(_filters() - _called() - _declared_public())
    assert unheld == [], "filters no role, playbook or scenario calls and the README does not declare public: %s" % unheld


def test_what_the_readme_declares_public_ships_with_its_docs():
    declared = _declared_public()
    assert {"transport_truth", "transport_gate", "verify_thresholds", "fleet_drift"} <= declared
    assert declared <= _filters()
    for name in declared:
        assert (ROOT / "plugins" / "filter" / (name + ".yml")).is_file(), name


def test_every_filter_has_its_docs_and_no_docs_are_orphaned():
    docs = {p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")}
    assert docs == _filters()
