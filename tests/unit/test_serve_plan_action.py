# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_plan where it runs as a module, and the serve_node facts node_stack gathers for its action
plugin. The action plugin in real ansible-playbook runs (the plan in the controller's process, no module sent to any
node): tests/integration/controller/test_serve_plan_play.py, which takes module_result from here."""

from __future__ import annotations

import json

from test_serve_node import DSV3, topo
from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.gather_sets import GatherOptions, gather_node
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import node as _serve_node
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack, serve_plan

IP_ADDR = (REPO / "tests/fixtures/serve/ip-addr-debian12.json").read_text()


def module_result(args):
    """What the module returns for ``args`` (its plan, with the warnings under the name the play registers)."""
    result = dict(_serve.plan(**dict(args, nodes=args.get("nodes", {}))))
    result["warnings_found"] = result.pop("warnings")
    return result


def test_the_module_still_plans_where_it_is_run(module_runner):
    args = {"topology": topo(), "host": "p1", "model": DSV3, "deepgemm_required": False}
    result = module_runner(serve_plan, args)
    expected = module_result(args)
    assert result.get("failed") is not True
    assert result["instances"] == expected["instances"] and result["units"] == expected["units"]


def test_node_stack_gathers_the_serve_node_set_as_the_preflight_reads_it(tmp_path):
    (tmp_path / "env.sh").write_text("export NVSHMEM_IB_ENABLE_IBGDA=1\n")
    dg = tmp_path / "dg"
    dg.mkdir()
    (dg / ".gpufleet-deepgemm-abc.json").write_text(json.dumps({"key": "abc", "args": ["--tp-size", 8]}))
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((list(argv), timeout))
        return 0, IP_ADDR, ""
    scripts = [str(tmp_path / "env.sh"), str(tmp_path / "missing.sh")]
    facts, errors = gather_node(["serve_node"], GatherOptions(serve_env_scripts=scripts, serve_dg_cache_dir=str(dg),
                                                              timeout=7), runner=runner)
    assert errors == {} and list(facts) == ["gpufleet_serve_node"]
    assert calls == [(["ip", "-j", "addr", "show"], 7)]  # started once, with the others, bounded by timeout
    assert facts["gpufleet_serve_node"] == _serve_node.gather_node(scripts, str(dg), runner, timeout=7)
    assert facts["gpufleet_serve_node"]["env"] == {"NVSHMEM_IB_ENABLE_IBGDA": "1"}
    assert facts["gpufleet_serve_node"]["missing_env_scripts"] == [str(tmp_path / "missing.sh")]
    assert facts["gpufleet_serve_node"]["deepgemm"][0]["args"] == ["--tp-size", "8"]


def test_node_stack_serve_node_unreadable_interfaces_are_facts_not_a_failure(tmp_path):
    facts, errors = gather_node(["serve_node"], GatherOptions(timeout=7), runner=lambda argv, timeout=None, env=None:
                                (124, "", "timed out after 7s"))
    node_facts = facts["gpufleet_serve_node"]
    assert errors == {} and node_facts["interfaces"] is None and "exited 124" in node_facts["interfaces_error"]
    assert node_facts["deepgemm_dir"] == "/var/cache/sglang/deep_gemm"  # the sglang role's default


def test_node_stack_module_returns_the_serve_node_facts(module_runner, tmp_path):
    (tmp_path / "env.sh").write_text("export A=1\n")
    result = module_runner(node_stack, {"gather": ["serve_node"], "serve_env_scripts": [str(tmp_path / "env.sh")],
                                        "serve_dg_cache_dir": str(tmp_path / "none"), "timeout": 10},
                           check_mode=True)
    facts = result["ansible_facts"]["gpufleet_serve_node"]
    assert result["changed"] is False and result["gather_errors"] == {}
    assert facts["env"] == {"A": "1"} and facts["env_scripts"] == [str(tmp_path / "env.sh")]
    assert facts["deepgemm"] == [] and facts["deepgemm_dir"] == str(tmp_path / "none")
    assert facts["interfaces"] is None or any(i["name"] == "lo" for i in facts["interfaces"])
