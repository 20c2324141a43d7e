# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.serve_plan's logic (plugins/plugin_utils/_serve/plan.py): instances, preflight, units, router."""
import shlex

import pytest

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import units as _serve_units
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import UnitValueError

SMOLLM = {"path": "/opt/models/smollm2-135m", "num_attention_heads": 9, "moe": False}


def topo(prefill=None, decode=None, router=None, nprefill=2, ndecode=1, nrouter=1):
    def hosts(role, n, base):
        return [{"name": "%s-%d" % (role, i + 1), "address": "10.0.0.%d" % (base + i)} for i in range(n)]
    return {"prefill": {"hosts": hosts("p", nprefill, 10), "settings": prefill if prefill is not None
                        else {"nnodes": 2, "tp": 6, "dp": 2, "dp_attention": True}},
            "decode": {"hosts": hosts("d", ndecode, 20), "settings": decode if decode is not None
                       else {"port": 30001, "tp": 3}},
            "router": {"hosts": hosts("r", nrouter, 30), "settings": router or {}}}


def test_two_node_prefill_instance_ranks_and_dist_init():
    result = _serve.plan(topo(), "p-2", model=SMOLLM, python="/v/bin/python", model_path="/m")
    assert result["problems"] == []
    prefill = result["instances"][0]
    assert prefill["hosts"] == ["p-1", "p-2"] and prefill["dist_init_addr"] == "10.0.0.10:5757"
    assert result["instances"][1]["dist_init_addr"] == "0.0.0.0:5757"  # a one-node instance binds all addresses
    (unit,) = result["units"]
    assert unit["name"] == "sglang-prefill0-rank1.service"
    argv = unit["argv"]
    assert argv[:3] == ["/v/bin/python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.10:5757"
    assert "--enable-dp-attention" in argv and argv[argv.index("--disaggregation-bootstrap-port") + 1] == "8998"
    text = unit["text"]
    for line in ("LimitMEMLOCK=infinity", "Restart=on-failure", "TimeoutStartSec=3600",
                 "EnvironmentFile=/etc/gpufleet/sglang-serve/sglang-prefill0-rank1.env", "WantedBy=multi-user.target"):
        assert line in text.splitlines()
    exec_start = next(l for l in text.splitlines() if l.startswith("ExecStart="))
    assert shlex.split(exec_start[len("ExecStart="):]) == argv


def test_router_command_and_expected_counts():
    result = _serve.plan(topo(router={"kind": "smg", "policy": "cache_aware"}), "r-1", model={})
    (unit,) = result["units"]
    argv = unit["argv"]
    assert argv[:3] == ["/opt/gpufleet/router/bin/smg", "launch", "--pd-disaggregation"]
    assert argv[argv.index("--prefill") + 1:argv.index("--prefill") + 3] == ["http://10.0.0.10:30000", "8998"]
    assert argv[argv.index("--decode") + 1] == "http://10.0.0.20:30001"
    assert argv[argv.index("--port") + 1] == "30080" and argv[argv.index("--policy") + 1] == "cache_aware"
    assert "--mini-lb" not in argv
    assert result["expected_workers"] == {"prefill": 1, "decode": 1}
    old = _serve.plan(topo(router={"kind": "sglang-router"}), "r-1")["router"]["argv"]
    assert old[1:3] == ["-m", "sglang_router.launch_router"]


def test_tp_not_dividing_heads_is_refused_with_valid_sizes():
    result = _serve.plan(topo(prefill={"nnodes": 2, "tp": 2}), "p-1", model=SMOLLM)
    (problem,) = result["problems"]
    assert "attention TP 2 does not divide the model's 9 attention heads" in problem
    assert "use an attention TP of 1/3/9" in problem


def test_decode_pointed_at_prefill_node_is_refused_naming_the_fix():
    result = _serve.plan(topo(decode={"port": 30001, "tp": 3, "dist_init_addr": "10.0.0.10:5757"}), "d-1",
                         model=SMOLLM)
    assert any("sglang_decode instance 0 (d-1): dist_init_addr 10.0.0.10:5757 is node p-1 of the prefill instance 0"
               in p and "leave dist_init_addr unset (the plan uses 0.0.0.0:5757)" in p for p in result["problems"])


@pytest.mark.parametrize("settings,text", [
    ({"nnodes": 2, "tp": 3}, "tp 3 is not divisible by nnodes 2"),
    ({"nnodes": 2, "tp": 6, "dp": 2}, "needs dp_attention"),
    ({"nnodes": 2, "tp": 6, "dp": 2, "dp_attention": True, "dist_init_addr": "0.0.0.0:5757"},
     "0.0.0.0 only serves a one-node instance"),
    ({"nnodes": 1, "tp": 3, "bootstrap_port": 30000},
     "host p-1: port 30000 is both sglang_prefill instance 0's --port (port) and sglang_prefill instance 0's "
     "--disaggregation-bootstrap-port (bootstrap_port)"),
])
def test_layout_rules(settings, text):
    problems = _serve.plan(topo(prefill=settings), "p-1", model=SMOLLM)["problems"]
    assert any(text in p for p in problems), problems


def test_router_missing_mini_lb_and_group_sizes():
    assert any("needs a router" in p for p in _serve.plan(topo(nrouter=0), "p-1", model=SMOLLM)["problems"])
    problems = _serve.plan(topo(router={"mini_lb": True}), "r-1")["problems"]
    assert any("mini_lb is the runbook's debug-only" in p for p in problems)
    assert _serve.plan(topo(router={"mini_lb": True}), "r-1", debug=True)["problems"] == []
    with pytest.raises(_serve_units.ServeError, match="not a multiple of nnodes 2"):
        _serve.plan(topo(nprefill=3), "p-1")
    with pytest.raises(_serve_units.ServeError, match="unknown setting"):
        _serve.plan(topo(prefill={"tensor_parallel": 2}), "p-1")
    with pytest.raises(_serve_units.ServeError, match="kind 'vllm'"):
        _serve.plan(topo(router={"kind": "vllm"}), "r-1")


def test_env_file_is_systemd_syntax():
    text = _serve_units.env_file_text({"B": 'say "hi"', "A": "x y"})
    assert text.splitlines()[1:] == ['A="x y"', 'B="say \\"hi\\""']


def test_every_instance_names_its_members_units_and_its_peers_for_a_rolling_update():
    result = _serve.plan(topo(ndecode=2), "r-1", model=SMOLLM, python="/v/bin/python", model_path="/m")
    assert result["problems"] == []
    prefill, decode0, decode1 = result["instances"]
    # the router's node restarts a two-node instance as one group: both members' units, rank order
    assert prefill["units"] == [{"host": "p-1", "name": "sglang-prefill0-rank0.service"},
                                {"host": "p-2", "name": "sglang-prefill0-rank1.service"}]
    assert decode1["units"] == [{"host": "d-2", "name": "sglang-decode1-rank0.service"}]
    # the lone prefill instance has no peer (its restart interrupts serving); each decode instance has one
    assert (prefill["peers"], decode0["peers"], decode1["peers"]) == (0, 1, 1)


def test_each_unit_carries_its_two_files_as_file_set_writes_them():
    result = _serve.plan(topo(), "r-1", model=SMOLLM, python="/v/bin/python", model_path="/m")
    (router,) = result["units"]
    assert router["unit_file"] == {"path": "/etc/systemd/system/sglang-router.service", "content": router["text"],
                                   "mode": "0644", "diff": True}
    # 0600 and never shown in a diff: an instance's environment may carry a token
    assert router["env_file"] == {"path": router["env_path"], "content": router["env_text"], "mode": "0600",
                                  "diff": False}
    engine = _serve.plan(topo(), "p-2", model=SMOLLM, python="/v/bin/python", model_path="/m")["units"][0]
    assert engine["unit_file"]["path"] == "/etc/systemd/system/" + engine["name"]
    assert engine["env_file"]["path"] == "/etc/gpufleet/sglang-serve/sglang-prefill0-rank1.env"


def test_unit_names_parse_back_to_their_instance_and_rank():
    assert _serve_units.parse_unit_name(_serve_units.unit_name("sglang", "decode", 1, 0)) == {
        "prefix": "sglang", "role": "decode", "instance": "decode1", "index": 1, "rank": 0}
    assert _serve_units.parse_unit_name(_serve_units.unit_name("my-site", "prefill", 0, 3))["rank"] == 3
    assert _serve_units.parse_unit_name(_serve_units.router_unit_name("sglang"))["role"] == "router"
    assert _serve_units.parse_unit_name("sglang-decode1-rank0.env") is None
    assert _serve_units.parse_unit_name("sglang-worker0-rank0.service") is None


def test_an_environment_value_on_two_lines_is_refused_naming_it():
    with pytest.raises(UnitValueError, match=r"environment\['A'\] is 'x\\ny': control character '\\n' at 1"):
        _serve_units.env_file_text({"A": "x\ny"})
    # an instance's environment setting: the plan refuses before any file is written (serve_plan fails with it)
    with pytest.raises(UnitValueError, match=r"sglang_decode.environment\['NCCL_DEBUG'\] is 'INFO\\nX=1'"):
        _serve.plan(topo(decode={"port": 30001, "tp": 3, "environment": {"NCCL_DEBUG": "INFO\nX=1"}}), "d-1",
                    model=SMOLLM, python="/v/bin/python", model_path="/m")


# ----------------------------------------------------------------------- ports unique per host, the units' seconds
def _on(host, address="10.0.0.10"):
    return [{"name": host, "address": address}]


def test_a_router_on_an_engine_host_with_the_engines_port_is_refused_naming_both():
    layout = topo(router={"port": 30000})
    layout["router"]["hosts"] = _on("p-1")
    problems = _serve.plan(layout, "p-1", model=SMOLLM)["problems"]
    assert problems == ["host p-1: port 30000 is both sglang_prefill instance 0's --port (port) and the router's "
                        "--port (port); a port serves one process on a host: give each its own port"]


def test_a_routers_prometheus_port_on_an_engines_dist_init_port_is_refused():
    layout = topo(router={"prometheus_port": 5757})
    layout["router"]["hosts"] = _on("d-1", "10.0.0.20")
    (problem,) = _serve.plan(layout, "d-1", model=SMOLLM)["problems"]
    assert problem.startswith("host d-1: port 5757 is both sglang_decode instance 0's --dist-init-addr port "
                              "(dist_init_port) and the router's --prometheus-port (prometheus_port)")


def test_the_same_collision_on_every_member_of_an_instance_is_one_problem_naming_the_hosts():
    settings = {"nnodes": 2, "tp": 6, "dp": 2, "dp_attention": True, "dist_init_port": 30000}
    (problem,) = _serve.plan(topo(prefill=settings), "p-1", model=SMOLLM)["problems"]
    assert problem.startswith("hosts p-1, p-2: port 30000 is both sglang_prefill instance 0's --port (port) and "
                              "sglang_prefill instance 0's --dist-init-addr port (dist_init_port)")


def test_three_owners_of_one_port_are_all_named():
    layout = topo(decode={"port": 30001, "dist_init_port": 30001}, router={"port": 30001})
    layout["router"]["hosts"] = _on("d-1", "10.0.0.20")
    (problem,) = _serve.plan(layout, "d-1", model=SMOLLM)["problems"]
    assert ("port 30001 is sglang_decode instance 0's --port (port), sglang_decode instance 0's --dist-init-addr "
            "port (dist_init_port) and the router's --port (port)") in problem


def test_the_same_port_on_different_hosts_and_a_router_host_of_its_own_pass():
    layout = topo(router={"port": 30000, "prometheus_port": 5757})  # r-1 serves no engine
    assert _serve.plan(layout, "r-1", model=SMOLLM)["problems"] == []
    layout["router"]["hosts"] = _on("p-1")
    layout["router"]["settings"] = {"port": 30080, "prometheus_port": 29000}
    assert _serve.plan(layout, "p-1", model=SMOLLM)["problems"] == []


@pytest.mark.parametrize("option, value, form", [
    ("start_timeout", -1, "1 or more (TimeoutStartSec="),
    ("start_timeout", 0, "1 or more (TimeoutStartSec="),
    ("start_timeout", True, "1 or more (TimeoutStartSec="),
    ("start_timeout", "soon", "1 or more (TimeoutStartSec="),
    ("restart_sec", -5, "0 or more (RestartSec="),
    ("restart_sec", 1.5, "0 or more (RestartSec="),
])
def test_the_units_seconds_out_of_range_are_refused_naming_the_option_and_the_value(option, value, form):
    with pytest.raises(UnitValueError) as refused:
        _serve.plan(topo(), "p-1", model=SMOLLM, **{option: value})
    assert str(refused.value).startswith("%s is %r; expected a whole number of seconds of " % (option, value))
    assert form in str(refused.value)
    with pytest.raises(UnitValueError, match="^%s is " % option):
        _serve_units.unit_text("x", ["/bin/true"], [],
                               **dict({"start_timeout": 10, "restart_sec": 1}, **{option: value}))


def test_restart_sec_0_restarts_at_once():
    (unit,) = _serve.plan(topo(), "p-1", model=SMOLLM, restart_sec=0, start_timeout=1)["units"]
    lines = unit["text"].splitlines()
    assert "RestartSec=0" in lines and "TimeoutStartSec=1" in lines
