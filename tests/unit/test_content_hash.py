# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""content_hash: the collection content that keys a converge (a role edited deep in its tree re-keys it)."""

from __future__ import annotations

import os

import pytest
import yaml

from unit_helpers import REPO

from ansible.errors import AnsibleLookupError

from ansible_collections.gpufleet.deepep.plugins.action import site_plan as site_plan_action
from ansible_collections.gpufleet.deepep.plugins.lookup.content_hash import LookupModule
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._site_plan import content_hash
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "collection"
    (root / "roles/env_script/templates").mkdir(parents=True)
    (root / "roles/env_script/templates/env.json.j2").write_text("{}\n")
    (root / "roles/env_script/files/sub").mkdir(parents=True)
    (root / "roles/env_script/files/sub/probe.py").write_text("print(1)\n")
    (root / "plugins/modules").mkdir(parents=True)
    (root / "plugins/modules/site_state.py").write_text("x = 1\n")
    (root / "site.yml").write_text("---\n")
    return root


def key(root):
    return content_hash([str(root / "site.yml"), str(root / "plugins"), str(root / "roles/env_script")])


def test_a_file_deep_in_a_role_changes_the_key(tree):
    before = key(tree)
    assert before == key(tree) and len(before) == 64
    (tree / "roles/env_script/files/sub/probe.py").write_text("print(2)\n")
    assert key(tree) != before


def test_a_new_file_a_mode_and_the_playbook_change_the_key(tree):
    before = key(tree)
    (tree / "plugins/modules/new.py").write_text("")
    after_new = key(tree)
    assert after_new != before
    os.chmod(tree / "plugins/modules/new.py", 0o755)
    after_mode = key(tree)
    assert after_mode != after_new
    (tree / "site.yml").write_text("---\n# changed\n")
    assert key(tree) != after_mode


def test_bytecode_does_not_count(tree):
    before = key(tree)
    (tree / "plugins/modules/__pycache__").mkdir()
    (tree / "plugins/modules/__pycache__/site_state.cpython-311.pyc").write_bytes(b"\0")
    (tree / "plugins/modules/stale.pyc").write_bytes(b"\0")
    assert key(tree) == before


@pytest.mark.parametrize("path, message", [
    ("roles/env_script", "'roles/env_script' is not an absolute path"),
    ("/nonexistent/roles", "/nonexistent/roles is neither a directory nor a file"),
])
def test_bad_paths_are_named(path, message):
    with pytest.raises(AnsibleLookupError, match=message):
        LookupModule().run([path], variables={})


def test_the_lookup_returns_one_digest(tree):
    assert LookupModule().run([str(tree / "plugins")], variables={}) == [content_hash([str(tree / "plugins")])]


def test_site_yml_keys_every_phase_role_it_imports(tmp_path, monkeypatch):
    # The plan (gpufleet.deepep.site_plan) hashes roles/<phase> for each phase prefix: every role the converge play
    # imports must be one.
    # The converge play is found by its name (the first boot of image-born nodes is the play before it); the image
    # role that play imports is keyed too.
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    plan = plays[0]
    (converge,) = [p for p in plays if p["name"] == "Converge GPU nodes to a DeepEP-ready state"]
    (first_boot,) = [p for p in plays if p["name"] == "First boot of nodes born from a golden image"]
    (plan_task,) = [task for task in plan["tasks"] if "gpufleet.deepep.site_plan" in task]
    prefixes = set(_site_plan.PREFIXES) - {"gpufleet"}
    imported = {t["ansible.builtin.import_role"]["name"].rsplit(".", 1)[1] for t in converge["tasks"]
                if "ansible.builtin.import_role" in t}
    assert imported <= prefixes, imported - prefixes
    assert {t["ansible.builtin.import_role"]["name"] for t in first_boot["tasks"]
            if "ansible.builtin.import_role" in t} == {"gpufleet.deepep.image"}
    assert str(REPO / "roles" / "image") in _site_plan.content_paths(str(REPO / "playbooks"))
    assert all((REPO / "roles" / name).is_dir() for name in prefixes)
    paths = _site_plan.content_paths(str(REPO / "playbooks"))
    assert all(os.path.exists(p) for p in paths) and str(REPO / "playbooks" / "site.yml") in paths
    assert plan_task["gpufleet.deepep.site_plan"].get("state", "plan") == "plan"
    # The content is hashed once per run (the same controller files for every node); each node's key covers it.
    calls = []
    monkeypatch.setattr(site_plan_action, "content_hash", lambda p: calls.append(p) or content_hash(p))
    digests = {site_plan_action.cached_content_hash(paths, cache_dir=str(tmp_path)) for node in range(8)}
    assert len(calls) == 1 and digests == {content_hash(paths)}
    assert _site_plan.settings_key(["v1"], "a" * 64) != _site_plan.settings_key(["v1"], "b" * 64)
