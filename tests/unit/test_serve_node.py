# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving preflight from the engine nodes' facts (serve_plan state=facts, plugins/module_utils/_serve/node.py) and
the plan's per-node rules and environment (plugins/plugin_utils/_serve/plan.py): the env scripts' values in the units,
the NIC of Gloo/NCCL/SGLang from the node's interfaces, the DeepGEMM cache of an instance's exact arguments."""
import json
import shlex
from pathlib import Path

import jinja2
import pytest

from ansible_collections.gpufleet.deepep.plugins.filter import serve_role
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve.inputs import instance_settings
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import node as _serve_node
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import rules as _serve_rules
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import units as _serve_units

REPO = Path(__file__).resolve().parents[2]
IP_ADDR = (REPO / "tests/fixtures/serve/ip-addr-debian12.json").read_text()
DSV3 = {"path": "/m/DeepSeek-V3", "num_attention_heads": 128, "moe": True}
SMOLLM = {"path": "/opt/models/smollm2-135m", "num_attention_heads": 9, "moe": False}


def render(template, **variables):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO)), keep_trailing_newline=True,
                             trim_blocks=True)  # ansible's template settings
    env.filters["quote"] = lambda value: shlex.quote(str(value))
    env.filters["comment"] = lambda value, decoration="": "# " + value
    env.filters["bool"] = bool
    return env.get_template(template).render(**variables)


UNIFIED = render("roles/env_script/templates/unified-env.sh.j2", env_script_path="/opt/deepep/unified-env.sh",
                 env_script_env={"env": [["CUDA_HOME", "/usr/local/cuda", "CUDA toolkit"],
                                         ["NVSHMEM_HOME", "/opt/nvshmem", "custom NVSHMEM"],
                                         ["NVSHMEM_IB_ENABLE_IBGDA", "1", "IBGDA"],
                                         ["NVSHMEM_HCA_PREFIX", "mlx5", "prefix"],
                                         ["DEEP_EP_DEVICE_TO_HCA_MAPPING", "0:mlx5_0:1,1:mlx5_3:1", "mapping"],
                                         ["EXTRA", "it's $not expanded", "env_script_extra_env"]],
                                 "path": ["/usr/local/cuda/bin"],
                                 "ld_library_path": ["/opt/nvshmem/lib", "/usr/local/cuda/lib64"],
                                 "ld_preload": "/opt/nvshmem/lib/libnvshmem_host.so.3", "pythonpath": []})
SGLANG = render("roles/sglang/templates/sglang-env.sh.j2", ansible_managed="Managed by gpufleet.deepep",
                inventory_hostname="d1", env_script_path="/opt/deepep/unified-env.sh",
                ansible_facts={"gpufleet_sglang": {"python": "/opt/sglang-venv/bin/python",
                                                   "ld_library_path": ["/opt/nvshmem/lib",
                                                                       "/opt/sglang-venv/nvidia/cublas/lib"]}},
                sglang_dg_cache_dir="/var/cache/sglang/deep_gemm", sglang_offline=True,
                sglang_server={"env": {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": 1024}})


def test_env_scripts_as_written_by_the_roles_become_unit_values_in_source_order():
    env = _serve_units.parse_env_script(SGLANG, _serve_units.parse_env_script(UNIFIED))
    assert env["NVSHMEM_IB_ENABLE_IBGDA"] == "1"
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] == "0:mlx5_0:1,1:mlx5_3:1"
    assert env["EXTRA"] == "it's $not expanded"  # single-quoted by the role: literal
    assert env["PATH"] == "/usr/local/cuda/bin:" + _serve_units.SYSTEM_PATH  # a unit has no login PATH to append to
    # sglang-env.sh is sourced second and prepends its own directories to the env script's
    assert env["LD_LIBRARY_PATH"] == ("/opt/nvshmem/lib:/opt/sglang-venv/nvidia/cublas/lib:"
                                      "/opt/nvshmem/lib:/usr/local/cuda/lib64")
    assert env["LD_PRELOAD"] == "/opt/nvshmem/lib/libnvshmem_host.so.3"
    assert env["SGLANG_DG_CACHE_DIR"] == "/var/cache/sglang/deep_gemm" and env["HF_HUB_OFFLINE"] == "1"
    assert env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "1024"
    # and the unit's environment file reads back the same values
    assert _serve_units.parse_env_file(_serve_units.env_file_text(env)) == env


@pytest.mark.parametrize("line", ["export A=$HOME/x", "export A=\"${B}\"", "export A=`date`", "export A=a b",
                                  "export A='open", "export A=\"x${A:+:${A}}\"; rm -rf /"])
def test_a_value_a_shell_would_expand_is_refused_naming_it(line):
    with pytest.raises(_serve_units.ServeError, match=r"env.sh:2: .*A"):
        _serve_units.parse_env_script("# x\n" + line + "\n", path="env.sh")


def test_ip_addr_capture_parsed():
    interfaces = _serve_node.parse_ip_addr(IP_ADDR)
    by_name = {i["name"]: i for i in interfaces}
    assert by_name["eth0"] == {"name": "eth0", "up": True, "ipv4": ["192.0.2.2"]}  # IPv6 left out
    assert by_name["ifb0"] == {"name": "ifb0", "up": False, "ipv4": []}
    assert by_name["fsim0"]["ipv4"] == ["10.213.0.1"]
    with pytest.raises(_serve_units.ServeError, match="no JSON"):
        _serve_node.parse_ip_addr("Object \"addr\" is unknown")


def test_gather_node_reads_scripts_markers_and_interfaces(tmp_path):
    (tmp_path / "unified-env.sh").write_text(UNIFIED)
    dg = tmp_path / "dg"
    dg.mkdir()
    (dg / ".gpufleet-deepgemm-abc.json").write_text(json.dumps({"key": "abc", "args": ["--tp-size", 8]}))
    (dg / ".gpufleet-deepgemm-bad.json").write_text("{")
    calls = []

    def runner(argv, timeout, env=None):
        calls.append((argv, timeout))
        return 0, IP_ADDR, ""
    facts = _serve_node.gather_node([str(tmp_path / "unified-env.sh"), str(tmp_path / "sglang-env.sh")], str(dg),
                                    runner, timeout=7)
    assert calls == [(["ip", "-j", "addr", "show"], 7)]
    assert facts["env"]["NVSHMEM_HOME"] == "/opt/nvshmem"
    assert facts["missing_env_scripts"] == [str(tmp_path / "sglang-env.sh")] and facts["errors"] == []
    assert facts["deepgemm"][0]["args"] == ["--tp-size", "8"] and "error" in facts["deepgemm"][1]
    failed = _serve_node.gather_node([], "", lambda argv, timeout, env=None: (124, "", "timed out after 7s"))
    assert failed["interfaces"] is None and "exited 124" in failed["interfaces_error"]


def topo(prefill=None, decode=None):
    return {"prefill": {"hosts": [{"name": "p1", "address": "10.0.0.1"}, {"name": "p2", "address": "10.0.0.2"}],
                        "settings": prefill or {"nnodes": 2, "tp": 16}},
            "decode": {"hosts": [{"name": "d1", "address": "10.0.0.3"}], "settings": decode or {"tp": 8, "port": 30001}},
            "router": {"hosts": [{"name": "r1", "address": "10.0.0.4"}], "settings": {}}}


def node(address, env=None, deepgemm=(), extra=()):
    interfaces = [{"name": "lo", "up": True, "ipv4": ["127.0.0.1"]}, {"name": "enp0s19", "up": True, "ipv4": [address]},
                  {"name": "docker0", "up": True, "ipv4": ["172.17.0.1"]}] + list(extra)
    return {"interfaces": interfaces, "interfaces_error": "", "env": env or {}, "env_scripts": [],
            "missing_env_scripts": [], "deepgemm": list(deepgemm), "errors": []}


def nodes(**over):
    out = {"p1": node("10.0.0.1"), "p2": node("10.0.0.2"), "d1": node("10.0.0.3")}
    out.update(over)
    return out


def test_nic_variables_decided_from_the_node_and_env_script_values_in_the_unit():
    facts = nodes(p2=node("10.0.0.2", env={"NVSHMEM_IB_ENABLE_IBGDA": "1", "PATH": "/usr/local/cuda/bin:/usr/bin"}))
    result = _serve.plan(topo(), "p2", model=DSV3, nodes=facts, engine_version="0.5.19")
    assert result["problems"] == []
    (unit,) = result["units"]
    env = unit["env"]
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == env["SGLANG_LOCAL_IP_NIC"] == "enp0s19"
    assert env["NVSHMEM_IB_ENABLE_IBGDA"] == "1" and env["GPUFLEET_SGLANG_VERSION"] == "0.5.19"
    assert 'NVSHMEM_IB_ENABLE_IBGDA="1"' in unit["env_text"].splitlines()
    # the router's unit takes none of the engines' environment
    (router,) = _serve.plan(topo(), "r1", model=DSV3, nodes=facts)["units"]
    assert "GLOO_SOCKET_IFNAME" not in router["env"]


def test_a_changed_env_script_changes_the_engine_environment_file():
    before = _serve.plan(topo(), "d1", nodes=nodes(d1=node("10.0.0.3", env={"NVSHMEM_HCA_PREFIX": "mlx5"})))
    after = _serve.plan(topo(), "d1", nodes=nodes(d1=node("10.0.0.3", env={"NVSHMEM_HCA_PREFIX": "bnxt_re"})))
    assert before["units"][0]["env_text"] != after["units"][0]["env_text"]
    assert before["units"][0]["text"] == after["units"][0]["text"]


def test_instance_environment_wins_over_the_env_script_and_a_set_nic_is_kept():
    environment = {"NCCL_SOCKET_IFNAME": "=enp0s19", "NVSHMEM_HCA_PREFIX": "mlx5_1"}
    facts = nodes(d1=node("10.0.0.3", env={"NVSHMEM_HCA_PREFIX": "mlx5"}))
    result = _serve.plan(topo(decode={"tp": 8, "port": 30001, "environment": environment}), "d1", nodes=facts)
    assert result["problems"] == []
    env = result["units"][0]["env"]
    assert env["NCCL_SOCKET_IFNAME"] == "=enp0s19" and env["GLOO_SOCKET_IFNAME"] == "enp0s19"
    assert env["NVSHMEM_HCA_PREFIX"] == "mlx5_1"


def test_gloo_interface_absent_on_the_node_is_refused_naming_the_nics():
    facts = nodes(p2=node("10.0.0.2", env={"GLOO_SOCKET_IFNAME": "eth0"}))
    problems = _serve.plan(topo(), "p1", nodes=facts)["problems"]
    (problem,) = problems
    assert problem.startswith("sglang_prefill instance 0 (p2): GLOO_SOCKET_IFNAME=eth0 names no interface of p2")
    assert "enp0s19 10.0.0.2, docker0 172.17.0.1" in problem and "set it to enp0s19" in problem
    # every host of the fleet refuses it, so no unit starts anywhere
    assert _serve.plan(topo(), "r1", nodes=facts)["problems"] == problems


def test_multi_node_nccl_on_another_nic_is_refused_one_node_is_not():
    wrong = {"NCCL_SOCKET_IFNAME": "docker"}
    problems = _serve.plan(topo(), "p1", nodes=nodes(p1=node("10.0.0.1", env=wrong)))["problems"]
    assert len(problems) == 1 and "selects docker0, not enp0s19 that carries 10.0.0.1" in problems[0]
    assert _serve.plan(topo(), "d1", nodes=nodes(d1=node("10.0.0.3", env=wrong)))["problems"] == []
    excluded = {"NCCL_SOCKET_IFNAME": "^docker,lo"}
    assert _serve.plan(topo(), "p1", nodes=nodes(p1=node("10.0.0.1", env=excluded)))["problems"] == []


def test_address_on_no_interface_is_refused():
    facts = nodes(d1=node("10.9.9.9"))
    (problem,) = _serve.plan(topo(), "d1", nodes=facts)["problems"]
    assert ("sglang_decode instance 0 (d1): the address 10.0.0.3 the other nodes reach d1 at is on none of its "
            "interfaces") in problem and "set sglang_serve_fabric_address (or ansible_host) of d1" in problem
    # a DNS name cannot be matched to an interface: judged by the topology alone
    named = topo()
    named["decode"]["hosts"][0]["address"] = "d1.fabric"
    assert _serve.plan(named, "d1", nodes=facts)["problems"] == []


DG_ARGS = ["--model-path", "/m/DeepSeek-V3", "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention",
           "--moe-a2a-backend", "deepep", "--deepep-mode", "low_latency"]


def deepep_decode():
    return {"tp": 8, "dp": 8, "dp_attention": True, "port": 30001, "moe_a2a_backend": "deepep",
            "deepep_mode": "low_latency"}


def test_deepgemm_cache_of_the_exact_arguments_is_required_for_a_deepep_moe_instance():
    good = nodes(d1=node("10.0.0.3", deepgemm=[{"key": "k", "args": DG_ARGS, "file": "/x"}]))
    assert _serve.plan(topo(decode=deepep_decode()), "d1", model=DSV3, model_path="/m/DeepSeek-V3",
                       nodes=good)["problems"] == []
    other = list(DG_ARGS)
    other[other.index("low_latency")] = "normal"  # the prefill layout's cache is not the decode layout's
    bad = nodes(d1=node("10.0.0.3", deepgemm=[{"key": "k", "args": other, "file": "/x"}]))
    (problem,) = _serve.plan(topo(decode=deepep_decode()), "d1", model=DSV3, model_path="/m/DeepSeek-V3",
                             nodes=bad)["problems"]
    assert problem.startswith("sglang_decode instance 0 (d1): no DeepGEMM cache on d1 for this instance's arguments "
                              "(" + " ".join(DG_ARGS) + "; cached: ")
    assert "deepep_mode low_latency" in problem and "sglang_serve_deepgemm_required: false" in problem
    assert _serve.plan(topo(decode=deepep_decode()), "d1", model=DSV3, model_path="/m/DeepSeek-V3", nodes=bad,
                       deepgemm_required=False)["problems"] == []
    # a dense model, or no DeepEP, compiles no DeepGEMM MoE kernels: no cache needed
    assert _serve.plan(topo(), "d1", model=DSV3, nodes=bad)["problems"] == []


def test_deepgemm_args_match_what_the_sglang_role_precompiles():
    """The sglang role's sglang_deepgemm_args for the same layout (roles/sglang/defaults/main.yml)."""
    cfg = instance_settings(deepep_decode(), "sglang_decode")
    assert _serve_rules.deepgemm_args("/m/DeepSeek-V3", cfg) == DG_ARGS
    defaults = (REPO / "roles/sglang/defaults/main.yml").read_text()
    assert "gpufleet.deepep.sglang_deepgemm_args(sglang_model_path)" in defaults
    server = {"tp": cfg["tp"], "dp": cfg["dp"], "enable_dp_attention": cfg["dp_attention"],
              "moe_a2a_backend": cfg["moe_a2a_backend"], "deepep_mode": cfg["deepep_mode"],
              "extra_args": cfg["extra_args"]}
    assert serve_role.FilterModule().filters()["sglang_deepgemm_args"](server, "/m/DeepSeek-V3") == DG_ARGS


def test_missing_env_script_refused_where_deepep_serves_else_warned():
    missing = node("10.0.0.3")
    missing["missing_env_scripts"] = ["/opt/deepep/unified-env.sh"]
    result = _serve.plan(topo(), "d1", nodes=nodes(d1=missing))
    assert result["problems"] == [] and "unified-env.sh is missing" in result["warnings"][0]
    dg = dict(missing, deepgemm=[{"args": DG_ARGS}])
    (problem,) = _serve.plan(topo(decode=deepep_decode()), "d1", model=DSV3, model_path="/m/DeepSeek-V3",
                             nodes=nodes(d1=dg))["problems"]
    assert "the env script /opt/deepep/unified-env.sh is missing; DeepEP needs its NVSHMEM values" in problem
