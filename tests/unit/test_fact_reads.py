# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts are read where they live: every fact a module or action of the collection returns under ``ansible_facts``
is read as ``ansible_facts.<name>`` (or ``hostvars[h].ansible_facts.<name>``) in the roles, playbooks and Molecule
scenarios, never as a bare top-level variable, which exists only while ``inject_facts_as_vars`` is on (the
repository's ansible.cfg turns it off; a user's may not)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
FACT_LINE = re.compile(r"ansible_facts|FACT_NAMES")
FACT_NAME = re.compile(r"\bgpufleet_[a-z0-9_]+\b")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
# Keys whose values are bare Jinja expressions in a task.
CONDITIONS = ("when", "that", "until", "failed_when", "changed_when")


def _literal_after(text, start):
    """The dict literal that opens at or after ``start`` (up to its matching brace), or the rest of the line."""
    brace = text.find("{", start)
    newline = text.find("\n", start)
    if brace < 0 or (0 <= newline < brace):
        return text[start:newline if newline >= 0 else len(text)]
    depth = 0
    for end in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[start:end + 1]
    return text[start:]


def returned_fact_names():
    """The names the collection's modules and actions return as facts: those in the statements that build
    ``ansible_facts`` (a dict literal over several lines included) and in gather_sets.py's FACT_NAMES."""
    names = set()
    for path in list((REPO / "plugins").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for match in FACT_LINE.finditer(text):
            line_start = text.rfind("\n", 0, match.start()) + 1
            if text[line_start:match.start()].lstrip().startswith("#"):
                continue
            names.update(FACT_NAME.findall(_literal_after(text, match.start())))
    return names


def set_fact_names(tree):
    """Names a play sets for itself with set_fact (bare variables by design)."""
    names = set()

    def walk(node):
        if isinstance(node, dict):
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(node.get(key), dict):
                    names.update(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(tree)
    return names


def expressions(tree):
    """Every Jinja expression of a task file: templated strings and the bare conditions."""
    found = []

    def walk(node, key=None):
        if isinstance(node, dict):
            for k, value in node.items():
                walk(value, k)
        elif isinstance(node, list):
            for value in node:
                walk(value, key)
        elif isinstance(node, str):
            if key in CONDITIONS:
                found.append(node)
            found.extend(JINJA.findall(node))
    walk(tree)
    return found


def bare_reads(expression, names):
    """The fact names read bare in one expression (not an attribute after ``.``, not a quoted string such as a key
    of ``['...']``, a mapping key or an ``attribute=`` argument)."""
    bare = set()
    for match in FACT_NAME.finditer(expression):
        before = expression[:match.start()].rstrip()
        after = expression[match.end():].lstrip()
        if match.group() not in names or before.endswith((".", "'", '"')) or after.startswith(":"):
            continue
        bare.add(match.group())
    return bare


def yaml_files():
    for folder in ("roles", "playbooks", "molecule", "examples"):
        for path in sorted((REPO / folder).rglob("*.yml")):
            if "argument_specs" in path.name or path.parts[-2:] == ("files", "rules.yml"):
                continue
            yield path


def test_the_fact_names_are_found():
    names = returned_fact_names()
    # Not vacuous: the plan's facts and the facts modules' sets are among them.
    assert {"gpufleet_site_key", "gpufleet_site_lane", "gpufleet_site_reboot_throttle", "gpufleet_rdma",
            "gpufleet_gpus", "gpufleet_stack", "gpufleet_image"} <= names


def test_no_role_playbook_or_scenario_reads_a_returned_fact_as_a_bare_variable():
    names = returned_fact_names()
    offenders = []
    for path in yaml_files():
        try:
            tree = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        # A name the same file sets with set_fact is that play's variable, read bare on purpose.
        own = set_fact_names(tree)
        for expression in expressions(tree):
            for name in sorted(bare_reads(expression, names) - own):
                offenders.append("%s: %s in %r" % (path.relative_to(REPO), name, expression[:120]))
    assert not offenders, "\n".join(offenders)


def test_the_checker_sees_a_bare_read():
    names = {"gpufleet_site_key", "gpufleet_rdma"}
    assert bare_reads("{{ gpufleet_site_key | length > 0 }}", names) == {"gpufleet_site_key"}
    assert bare_reads("gpufleet_rdma.transport == 'roce'", names) == {"gpufleet_rdma"}
    assert not bare_reads("{{ ansible_facts.gpufleet_site_key }}", names)
    assert not bare_reads("{{ hostvars[h]['ansible_facts']['gpufleet_rdma'] }}", names)
    assert not bare_reads("{{ {'gpufleet_rdma': 1} }}", {"gpufleet_x"})
    tree = [{"name": "t", "ansible.builtin.assert": {"that": ["gpufleet_rdma.ok"]}},
            {"ansible.builtin.debug": {"msg": "{{ x }} and {{ gpufleet_site_key }}"}}]
    assert expressions(tree) == ["gpufleet_rdma.ok", "{{ x }}", "{{ gpufleet_site_key }}"]


def test_the_repository_and_molecule_turn_fact_injection_off():
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config.getboolean("defaults", "inject_facts_as_vars") is False
    molecule = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text(encoding="utf-8"))
    assert molecule["ansible"]["cfg"]["defaults"]["inject_facts_as_vars"] is False
