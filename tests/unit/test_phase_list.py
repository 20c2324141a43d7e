# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One list of phases: ``PHASES`` of plugins/plugin_utils/_site_plan.py against the role imports of playbooks/site.yml.

The settings key covers a phase's variables by its prefix (``PREFIXES``), the content key its role
(``content_paths``), and a run that skips its tag is not a full run (``PHASE_TAGS``, ``full_run``): a phase that
site.yml imports but PHASES leaves out would record a full stamp after ``--skip-tags <phase>``, and its settings
would not key the node. These tests read site.yml itself, so that such a phase fails here, named, with the file.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan

SITE = "playbooks/site.yml"
SITE_PLAN = "plugins/plugin_utils/_site_plan.py"
PREFIX = "gpufleet.deepep."
ROLE_KEYS = ("ansible.builtin.import_role", "import_role", "ansible.builtin.include_role", "include_role")
TASK_LISTS = ("pre_tasks", "tasks", "post_tasks", "handlers")
# Roles site.yml imports that are not phases: they carry the tag always, so they run whatever --tags or --skip-tags
# names (and no phase tag can skip them). The content key covers them on their own (content_paths).
NOT_PHASES = {"image": "the first boot of an image-born node (its own play, before the converge play)"}


def _site() -> list:
    return yaml.safe_load((REPO / SITE).read_text(encoding="utf-8"))


def _tags(value) -> tuple[str, ...]:
    """A task's tags as a tuple: Ansible takes a list or a comma-separated string."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(item).strip() for item in items)


def _merge(tags, more) -> tuple[str, ...]:
    return tags + tuple(t for t in more if t not in tags)


def _walk(tasks, inherited):
    """Each task of a task list with the tags it runs under (its own and its blocks'), blocks opened."""
    for task in tasks or []:
        tags = _merge(inherited, _tags(task.get("tags")))
        if any(key in task for key in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                yield from _walk(task.get(key), tags)
        else:
            yield task, tags


def role_imports(plays) -> list[tuple[str, tuple[str, ...], str]]:
    """Every import_role and include_role of a role of this collection in site.yml's plays, in order:
    ``(role, tags, task name)``; play-level ``roles:`` count too. A short role name counts as this collection's;
    another collection's role is no phase and is left out."""
    named = []
    for play in plays:
        play_tags = _tags(play.get("tags"))
        for entry in play.get("roles") or []:
            entry = entry if isinstance(entry, dict) else {"role": entry}
            named.append((entry.get("role") or entry.get("name"), _merge(play_tags, _tags(entry.get("tags"))),
                          "roles: of play %s" % play.get("name", "?")))
        for key in TASK_LISTS:
            for task, tags in _walk(play.get(key), play_tags):
                named += [((task[k] or {}).get("name"), tags, task.get("name", "?")) for k in ROLE_KEYS if k in task]
    found = []
    for name, tags, where in named:
        name = str(name or "")
        if name.startswith(PREFIX):
            found.append((name[len(PREFIX):], tags, where))
        elif name and "." not in name:
            found.append((name, tags, where))
    return found


def phase_drift(plays, phases, source=SITE) -> list[str]:
    """Where site.yml's role imports and ``phases`` differ, one line each, naming the phase and the file: a role
    imported but not a phase, a phase imported under another tag than its name, a phase site.yml never imports, or a
    role of NOT_PHASES that is not tagged always. Empty when they agree."""
    problems = []
    imported = set()
    for role, tags, task in role_imports(plays):
        if role in NOT_PHASES:
            if tags != ("always",):
                problems.append("%s: task %r imports role %s, which is not a phase, with tags %s (expected [always])"
                                % (source, task, role, list(tags)))
        elif role not in phases:
            problems.append("%s: task %r imports role %s with tags %s, but %s is not in PHASES of %s (nor a known "
                            "non-phase role)" % (source, task, role, list(tags), role, SITE_PLAN))
        elif tags != (role,):
            problems.append("%s: task %r imports phase %s with tags %s (expected [%s]: a phase's tag is its name)"
                            % (source, task, role, list(tags), role))
        imported.add(role)
    problems += ["%s: PHASES names phase %s, but %s never imports role %s%s" % (SITE_PLAN, phase, source, PREFIX, phase)
                 for phase in phases if phase not in imported]
    return problems


def _site_tags(plays) -> dict[str, tuple[str, ...]]:
    """The tags site.yml gives each phase role (its imports agree: phase_drift checks it)."""
    return {role: tags for role, tags, _task in role_imports(plays) if role not in NOT_PHASES}


def test_site_imports_exactly_the_phases():
    assert phase_drift(_site(), _site_plan.PHASES) == []


def test_the_phase_tags_and_prefixes_are_the_phases():
    tags = _site_tags(_site())
    assert set(tags) == set(_site_plan.PHASES)
    assert _site_plan.PHASE_TAGS == tuple(t for phase in _site_plan.PHASES for t in tags[phase]) + ("always",)
    assert _site_plan.PREFIXES == ("gpufleet",) + _site_plan.PHASES
    assert len(set(_site_plan.PHASES)) == len(_site_plan.PHASES)


def test_site_imports_doca_ofed_and_nccl_twice_under_their_own_tag():
    # doca_ofed: the install, then its check after the reboot; nccl: the pin, then the pin put back after DeepEP.
    imports = role_imports(_site())
    assert [tags for role, tags, _task in imports if role == "doca_ofed"] == [("doca_ofed",), ("doca_ofed",)]
    assert [tags for role, tags, _task in imports if role == "nccl"] == [("nccl",), ("nccl",)]


@pytest.mark.parametrize("phase", _site_plan.PHASES)
def test_every_phase_is_a_role_keyed_and_not_skippable(phase):
    spec = REPO / "roles" / phase / "meta" / "argument_specs.yml"
    assert spec.is_file(), f"phase {phase} of {SITE_PLAN} has no role with an argument spec: {spec} is missing"
    # Skipping the phase's tag is not a full run: no full stamp is recorded.
    assert _site_plan.full_run(["all"], [phase]) is False
    assert _site_plan.full_run([phase], []) is False
    # Its variables key the node; its role keys the content.
    assert _site_plan.settings_names([f"{phase}_anything"]) == [f"{phase}_anything"]
    assert str(REPO / "roles" / phase) in _site_plan.content_paths(str(REPO / "playbooks"))


def test_a_full_run_skips_no_phase():
    assert _site_plan.full_run(["all"], []) is True
    assert _site_plan.full_run(["all"], ["always"]) is False


def _converge(plays):
    (play,) = [p for p in plays if p["name"] == "Converge GPU nodes to a DeepEP-ready state"]
    return play


def test_a_phase_left_out_of_phases_is_named():
    plays = copy.deepcopy(_site())
    tasks = _converge(plays)["tasks"]
    new = {"name": "Phase newphase", "ansible.builtin.import_role": {"name": PREFIX + "newphase"}, "tags": ["newphase"]}
    tasks.insert(len(tasks) - 1, new)
    (problem,) = phase_drift(plays, _site_plan.PHASES)
    assert "newphase" in problem and SITE in problem and "not in PHASES" in problem
    # What the check guards against: without it in PHASE_TAGS, --skip-tags newphase would count as a full run.
    assert _site_plan.full_run(["all"], ["newphase"]) is True
    assert phase_drift(plays, _site_plan.PHASES + ("newphase",)) == []


def test_a_phase_inside_a_block_is_seen_with_the_block_tags():
    plays = copy.deepcopy(_site())
    _converge(plays)["tasks"].append({"name": "Later phases", "tags": ["later"], "block": [
        {"name": "Phase later", "ansible.builtin.include_role": {"name": PREFIX + "later"}}]})
    assert ("later", ("later",), "Phase later") in role_imports(plays)
    (problem,) = phase_drift(plays, _site_plan.PHASES)
    assert "role later" in problem and SITE in problem


def test_a_phase_site_yml_drops_or_retags_is_named():
    plays = copy.deepcopy(_site())
    converge = _converge(plays)
    converge["tasks"] = [t for t in converge["tasks"] if t.get("tags") != ["env_script"]]
    for task in converge["tasks"]:
        if task.get("name") == "Re-assert the NCCL pin":
            task["tags"] = ["nccl_pin"]
    problems = phase_drift(plays, _site_plan.PHASES)
    assert len(problems) == 2, problems
    assert any("nccl" in p and "nccl_pin" in p and SITE in p for p in problems)
    assert any("phase env_script" in p and SITE_PLAN in p and SITE in p for p in problems)


def test_a_non_phase_role_must_stay_tagged_always():
    plays = copy.deepcopy(_site())
    (first_boot,) = [p for p in plays if p["name"] == "First boot of nodes born from a golden image"]
    first_boot["tasks"][0]["tags"] = ["image"]
    (problem,) = phase_drift(plays, _site_plan.PHASES)
    assert "role image" in problem and "always" in problem
