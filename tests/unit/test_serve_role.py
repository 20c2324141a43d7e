# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serve_role filters (plugins/filter/serve_role.py, logic in plugins/plugin_utils/_serve/role_values.py): what
the sglang_serve and sglang roles decide from their variables."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.gpufleet.deepep.plugins.filter import serve_role
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import rules as _serve_rules

F = serve_role.FilterModule().filters()
LOCKS = {"smg==1.0.0": {"3.12": {"smg==1.0.0": ["a" * 64]}, "3.10": {}}, "vllm-router==0.2": {"3.11": {}}}
UNITS = [{"instance": "prefill0", "unit_file": {"path": "/u/p0"}, "env_file": {"path": "/e/p0"}},
         {"instance": "decode0", "unit_file": {"path": "/u/d0"}, "env_file": {"path": "/e/d0"}}]


def test_router_lock_given_hashes_first_else_the_shipped_lock_where_hashes_are_required():
    given = {"x==1": ["b" * 64]}
    assert F["serve_router_lock"](given, LOCKS, "smg==1.0.0", "3.12", True) == given
    assert F["serve_router_lock"]({}, LOCKS, "smg==1.0.0", "3.12", "yes") == {"smg==1.0.0": ["a" * 64]}
    assert F["serve_router_lock"]({}, LOCKS, "smg==1.0.0", "3.9", True) == {}
    assert F["serve_router_lock"]({}, LOCKS, "other==1", "3.12", True) == {}
    assert F["serve_router_lock"]({}, LOCKS, "smg==1.0.0", "3.12", False) == {}


def test_router_lock_refusal_names_the_shipped_pins_and_pythons():
    msg = F["serve_router_lock_refusal"](LOCKS, "smg==2.0.0", "")
    assert msg.startswith("The router smg==2.0.0 on Python (unknown) has no lock: the role ships locks for "
                          "smg==1.0.0, vllm-router==0.2 on Python 3.10, 3.11, 3.12. Give sglang_serve_router_hashes")
    assert msg.endswith("set sglang_serve_require_hashes: false to install it checked by name and version only.")


def test_pip_environment_in_order_only_what_is_set():
    assert F["serve_pip_environment"](True, False, "", "") == {"PIP_REQUIRE_HASHES": "1"}
    env = F["serve_pip_environment"]("False", "yes", "/srv/wheels", "https://pypi.example/simple")
    assert list(env.items()) == [("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", "/srv/wheels"),
                                 ("PIP_INDEX_URL", "https://pypi.example/simple")]


def test_router_ready_only_on_a_200_of_a_router_host_in_the_play():
    hostvars = {"r1": {"sglang_serve_router_before": {"status": 503}}, "r2": {"sglang_serve_router_before": {"status": 200}},
                "r3": {"sglang_serve_router_before": Undefined()}, "r4": {}}
    assert F["serve_router_ready"](["r1", "r2"], ["r1", "r2"], hostvars) is True
    assert F["serve_router_ready"](["r1", "r2"], ["r1"], hostvars) is False
    assert F["serve_router_ready"](["r3", "r4", "r5"], ["r3", "r4", "r5"], hostvars) is False
    assert F["serve_router_ready"]([], ["r2"], hostvars) is False


def test_changed_here_unit_env_and_secrets_each_once_in_order():
    written = [{"path": "/u/p0", "changed": False, "content_changed": False},
               {"path": "/u/d0", "changed": True, "content_changed": True}]
    assert F["serve_changed_here"](UNITS, written, [], False) == ["decode0"]
    assert F["serve_changed_here"](UNITS, written, ["decode0", "prefill0"], False) == ["decode0", "prefill0"]
    assert F["serve_changed_here"](UNITS, written, [], True) == ["decode0", "prefill0"]
    assert F["serve_changed_here"](UNITS, [], [], False) == ["prefill0", "decode0"]  # nothing written yet


def test_roll_note_with_and_without_peers():
    assert F["serve_roll_note"]({"name": "decode1", "role": "decode", "peers": 2}) == \
        "decode1: 2 other decode instance(s) serve while it restarts"
    assert F["serve_roll_note"]({"name": "prefill0", "role": "prefill", "peers": 0}) == \
        ("prefill0: no other prefill instance: requests fail until it is back (add a prefill instance to roll "
         "without a gap)")


def test_layout_refusal_names_what_rank0_reports_and_the_plan():
    item = {"name": "prefill0", "role": "prefill", "nnodes": 1, "port": 30000}
    assert F["serve_layout_refusal"]({"json": {"disaggregation_mode": "decode", "nnodes": 2}, "item": item}, "p1",
                                     "/m/x") == ("prefill0 on p1 reports mode decode, nnodes 2, model ?; the plan is "
                                                 "prefill, 1, /m/x: another server holds port 30000, stop it.")
    assert "reports mode , nnodes ?" in F["serve_layout_refusal"]({"json": {"disaggregation_mode": None},
                                                                   "item": item}, "p1", "/m/x")


def test_deepgemm_args_are_what_serve_plan_expects_of_the_cache():
    server = {"tp": 8, "dp": 8, "enable_dp_attention": "yes", "moe_a2a_backend": "deepep",
              "deepep_mode": "low_latency", "extra_args": ["--chunked-prefill-size", "4096"]}
    cfg = {"tp": 8, "dp": 8, "dp_attention": True, "moe_a2a_backend": "deepep", "deepep_mode": "low_latency",
           "extra_args": ["--chunked-prefill-size", "4096"]}
    assert F["sglang_deepgemm_args"](server, "/m/D") == _serve_rules.deepgemm_args("/m/D", cfg)
    assert F["sglang_deepgemm_args"]({"tp": "4"}, "/m/D") == [
        "--model-path", "/m/D", "--tp-size", "4", "--dp-size", "1", "--moe-a2a-backend", "none",
        "--deepep-mode", "auto"]


def test_deepgemm_wanted():
    assert F["sglang_deepgemm_wanted"]("always", False, {}) is True
    assert F["sglang_deepgemm_wanted"]("never", True, {"moe_a2a_backend": "deepep"}) is False
    assert F["sglang_deepgemm_wanted"]("auto", "yes", {"moe_a2a_backend": "deepep"}) is True
    assert F["sglang_deepgemm_wanted"]("auto", True, {"tp": 8}) is False
    assert F["sglang_deepgemm_wanted"]("auto", False, {"moe_a2a_backend": "deepep"}) is False


@pytest.mark.parametrize("name, args, named", [
    ("serve_router_lock", (["x"], LOCKS, "p", "3.12", True), "sglang_serve_router_hashes is ['x']"),
    ("serve_router_lock", ({}, "nolocks", "p", "3.12", True), "the router locks is 'nolocks'"),
    ("serve_router_lock_refusal", ({"p": ["3.12"]}, "p", ""), "a router lock entry is ['3.12']"),
    ("serve_pip_environment", (True, False, None, ""), "sglang_serve_pip_find_links is None"),
    ("serve_router_ready", ("r1", [], {}), "the router group's hosts is 'r1'"),
    ("serve_changed_here", (UNITS, [], "decode0", False), "sglang_serve_env_changed is 'decode0'"),
    ("serve_roll_note", ({"name": "d0", "role": "decode"}, ), "has no peers"),
    ("serve_roll_note", ({"name": "d0", "role": "decode", "peers": "1"}, ), "peers is '1'; expected a whole number"),
    ("serve_layout_refusal", ({"json": {}, "item": {"name": "d0"}}, "p1", "/m"), "item is {'name': 'd0'}"),
    ("sglang_deepgemm_args", ({"dp": 2}, "/m"), "sglang_server {'dp': 2} has no tp"),
    ("sglang_deepgemm_args", ({"tp": 8, "extra_args": "--x"}, "/m"), "sglang_server.extra_args is '--x'"),
    ("sglang_deepgemm_wanted", ("sometimes", True, {}), "sglang_deepgemm_precompile is 'sometimes'; expected one of"),
])
def test_bad_input_is_refused_naming_the_value_and_the_form(name, args, named):
    with pytest.raises(AnsibleFilterError) as info:
        F[name](*args)
    assert str(info.value).startswith(name + ": ") and named in str(info.value)
    assert "expected" in str(info.value) and "unexpected" not in str(info.value)
