# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.site_plan: site.yml's batch planning (plugins/plugin_utils/_site_plan.py, plugins/action/site_plan.py).

The decisions are tested on their own with site_state's real results, and through ansible-playbook on two local
hosts over a copy of the collection's layout (site.yml's directory, plugins, the phase roles): the key, the lanes
and their groups, the reasons printed, the reboot throttle of a steady node, the fast flag and --tags, the record
and the report."""

from __future__ import annotations

import json

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpufleet.deepep.plugins.action import site_plan as action
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._site_plan import content_hash
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan as sp

KEY = "a" * 64


def state(tmp_path, key=KEY, record_key=KEY, drift=False):
    """site_state's check of a real stamp: recorded with ``record_key``, checked with ``key``."""
    watched = tmp_path / "unified-env.sh"
    watched.write_text("export A=1\n")
    stamp = tmp_path / "stamp.json"
    content = ss.record_content(record_key, [str(watched)], [], "2026-11-26T00:00:00+00:00", 8388608,
                                "/nonexistent/dpkg/status")
    stamp.write_text(json.dumps(content))
    if drift:
        watched.write_text("export A=2\n")
    return ss.check(str(stamp), key, 8388608, "/nonexistent/dpkg/status")


# ------------------------------------------------------------------------------------------ the decisions
def test_an_intact_node_runs_no_phase_unless_the_run_is_slow_or_tagged(tmp_path):
    intact = state(tmp_path)
    assert intact["intact"] and intact["steady"]
    decision = sp.decide(intact, fast=True, run_tags=["all"], reboot_throttle=0)
    assert decision["lane"] == "intact" and decision["reboot_throttle"] == 1
    assert decision["msg"] == ("intact: the node is as its last full converge left it; no phase runs "
                               "(-e gpufleet_site_fast=false runs them)")
    assert sp.decide(intact, fast="false", run_tags=["all"])["lane"] == "steady"  # -e gpufleet_site_fast=false
    assert sp.decide(intact, fast=True, run_tags=["deepep"])["lane"] == "steady"  # --tags deepep
    assert sp.decide(intact, fast=True, run_tags=["deepep"])["msg"] == (
        "steady: the node is as its last full converge left it")


def test_a_drifted_node_is_steady_names_its_drift_and_reboots_alone(tmp_path):
    drifted = state(tmp_path, drift=True)
    decision = sp.decide(drifted, fast=True, run_tags=["all"], reboot_throttle="4")
    assert decision["lane"] == "steady" and decision["reboot_throttle"] == 1
    assert decision["msg"].startswith("steady: the node drifted since its last full converge: ")
    assert str(tmp_path / "unified-env.sh") + ": content changed" in decision["msg"]


def test_new_settings_a_new_node_or_no_key_go_through_the_batches(tmp_path):
    changed = sp.decide(state(tmp_path, key="b" * 64), reboot_throttle="4")
    assert changed["lane"] == "changing" and changed["reboot_throttle"] == "4"  # the setting, as given
    assert changed["msg"].startswith("changing: ") and "settings" in changed["msg"]
    fresh = sp.decide(ss.check(str(tmp_path / "none.json"), KEY, 8388608, "/nonexistent"), reboot_throttle=0)
    assert fresh["lane"] == "changing" and fresh["reboot_throttle"] == 0
    unkeyed = sp.decide(None, reboot_throttle=2)
    assert unkeyed == {"lane": "changing", "reason": "its settings could not be keyed",
                       "msg": "changing: its settings could not be keyed", "reboot_throttle": 2}


def test_a_fast_flag_that_is_not_a_boolean_is_named():
    with pytest.raises(sp.SitePlanError, match="gpufleet_site_fast 'sometimes' is not a boolean"):
        sp.decide({"intact": True, "steady": True, "reason": "x"}, fast="sometimes")


def test_batches_full_run_watch_and_report():
    assert sp.batches([1, "25%"]) == [1, "25%"] and sp.batches(2) == [2] and sp.batches("50%") == ["50%"]
    assert sp.full_run(["all"], []) and sp.full_run(["all"], ["notest"])
    assert not sp.full_run(["deepep"], []) and not sp.full_run(["all"], ["nccl"])
    values = {"deepep_site_watch": ["/opt/deepep/unified-env.sh", ["/usr/local/cuda"], None, ""],
              "nccl_site_watch": "/usr/local/cuda", "cuda_toolkit_site_watch_packages": ["cuda-toolkit-12-9"],
              "gpufleet_site_watch": ["/not/a/phase"], "deepep_ref": "v1"}
    assert sp.watched(list(values), values.get) == {
        "watch": ["/opt/deepep/unified-env.sh", "/usr/local/cuda"], "packages": ["cuda-toolkit-12-9"]}
    assert sp.report(["n1", "n2", "n3"], ["n2"]) == "2 of 3 nodes did not converge: n1, n3"
    assert sp.report(["n1", "n2"], ["n1", "n2"]) == "All 2 nodes converged."


def test_the_settings_names_leave_out_the_play_s_own_variables():
    names = ["deepep_ref", "gpufleet_serial", "gpufleet_site_key", "gpufleet_reboot_throttle", "gpufleet_hosts",
             "gpufleet_allow_reboot", "gpufleet_artifact_store", "NCCL_x", "nccl_Version", "nccl_pin", "sglang_x",
             "env_script_gid_index", "playbook_dir", "groups"]
    assert sp.settings_names(names) == ["deepep_ref", "env_script_gid_index", "gpufleet_artifact_store", "nccl_pin",
                                        "nccl_Version"]


@pytest.mark.parametrize("values", [
    [],
    ["v1", 3, True, None, 2.5],
    [{"b": [1, "25%"], "a": {"z": "é", "y": None}}, ["x", {"k": False}], "line\nbreak \"quoted\""],
])
def test_the_key_is_the_one_site_yml_computed_in_jinja(values):
    # The former site.yml: {'settings': query('vars', *names), 'content': ...} | to_json(sort_keys=true) | hash
    variables = {"values": values, "content": "c" * 64}
    old = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(
        "{{ {'settings': values, 'content': content} | to_json(sort_keys=true) | hash('sha256') }}"))
    assert sp.settings_key(values, "c" * 64) == old


def test_the_content_is_hashed_once_per_run(tmp_path, monkeypatch):
    (tmp_path / "a.yml").write_text("a: 1\n")
    calls = []
    monkeypatch.setattr(action, "content_hash", lambda paths: calls.append(paths) or content_hash(paths))
    paths = [str(tmp_path / "a.yml")]
    first = action.cached_content_hash(paths, cache_dir=str(tmp_path))
    assert action.cached_content_hash(paths, cache_dir=str(tmp_path)) == first == content_hash(paths)
    assert len(calls) == 1
