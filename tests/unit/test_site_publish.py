# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the phase roles publish for the site playbook's converged stamp.

Each phase role of playbooks/site.yml publishes, in its vars/main.yml, ``<role>_site_watch`` (the paths and glob
patterns it manages) and ``<role>_site_watch_packages`` (the Debian packages it installs); site.yml's record
task collects every such variable by name. These tests read site.yml itself and take its phase roles from
``PHASES`` (plugins/plugin_utils/_site_plan.py; tests/unit/test_phase_list.py holds the two to each other): a
phase role that publishes nothing fails here, and the expressions of the record task, run through
ansible-playbook against the roles' own defaults and vars, give the set of things the stamp fingerprints.
"""

from __future__ import annotations

import json

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan

SITE = REPO / "playbooks" / "site.yml"
# The phase roles: tests/unit/test_phase_list.py holds PHASES to the imports of site.yml.
PHASES = _site_plan.PHASES


def _site() -> list:
    return yaml.safe_load(SITE.read_text(encoding="utf-8"))


def _record_task() -> dict:
    for play in _site():
        for task in play.get("tasks", []):
            args = task.get("gpufleet.deepep.site_plan") or {}
            if args.get("state") == "record":
                return args
    raise AssertionError("site.yml has no site_plan record task")


@pytest.mark.parametrize("role", PHASES)
def test_every_phase_role_publishes_what_it_manages(role):
    path = REPO / "roles" / role / "vars" / "main.yml"
    assert path.is_file(), f"phase role {role} publishes nothing: {path} is missing"
    published = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [name for name in (f"{role}_site_watch", f"{role}_site_watch_packages") if name not in published]
    assert not missing, f"phase role {role} does not publish {', '.join(missing)} in {path}"


def test_record_task_collects_by_name_not_by_role():
    record = _record_task()
    text = json.dumps(record)
    # site_plan's record collects <role>_site_watch and <role>_site_watch_packages by name, whatever the role.
    found = _site_plan.watched(["newrole_site_watch", "newrole_site_watch_packages", "newrole_site_watcher"],
                               {"newrole_site_watch": ["/a"], "newrole_site_watch_packages": ["p"],
                                "newrole_site_watcher": ["/b"]}.get)
    assert found == {"watch": ["/a"], "packages": ["p"]}
    for role in PHASES:
        assert f"{role}_" not in text, f"site.yml names a variable of role {role} in its record task"


def test_content_key_covers_every_phase_role():
    plan = _site()[0]
    assert [task for task in plan["tasks"] if "gpufleet.deepep.site_plan" in task]
    paths = _site_plan.content_paths(str(REPO / "playbooks"))
    assert {str(REPO / "roles" / role) for role in PHASES} <= set(paths)
    # The preflight phase judges the node by the catalogue's preflight rules: the key covers them too.
    assert str(REPO / "roles" / "audit" / "files" / "rules.yml") in paths
    # The build phases include the build_once role: a change to it re-runs them.
    assert str(REPO / "roles" / "build_once") in paths
