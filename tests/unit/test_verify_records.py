# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify roles' decisions and records in Python (plugin_utils/_verify/records.py, through the filters of
verify_helpers.py) and site.yml's play hosts (site_helpers.py): the go/no-go of a group, the records with NIC
traffic (ep_test's nic_traffic) and JIT, the env of a run, the sweep's judge, the plan line, the failure message, the play's records."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import site_helpers as sf
from ansible_collections.gpufleet.deepep.plugins.filter import verify_helpers as vf
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.records import record_with_nic

CACHE = "/var/cache/ep-jit"
MB = 1 << 20


def filters():
    return vf.FilterModule().filters()


def conn(passed):
    return {"verify_internode_conn_result": {"record": {"gate": {"passed": passed}}}}


def rdma(counters):
    devices = [{"name": "mlx5_%d" % i, "active": True,
                "ports": [{"port": 1, "active": True, "state": "ACTIVE",
                           "counters": {"port_xmit_data": value, "port_rcv_data": value}}]}
               for i, value in enumerate(counters)]
    return {"devices": devices, "active_devices": [d["name"] for d in devices]}


def jit_facts(count):
    return {"ansible_facts": {"gpufleet_deepep_jit": {
        "cache_dir": CACHE, "key": None, "current": False, "kernels": [], "kernel_count": count, "from": None,
        "compiled_seconds": None, "loaded_seconds": None, "compiled": None, "loaded": None}}}


# --- the go/no-go of a group --------------------------------------------------------------------------------------
@pytest.mark.parametrize("play, passed, connectivity, expected", [
    (["a", "b"], {"a": True, "b": True}, True, True),
    (["a", "b"], {"a": True, "b": False}, True, False),
    (["a"], {"a": True, "b": True}, True, False),            # b left the play
    (["a", "b", "x"], {"a": True, "b": True}, True, True),   # x is not of the group
    (["a"], {"a": False, "b": False}, False, True),          # no connectivity test: always on
])
def test_group_go(play, passed, connectivity, expected):
    hostvars = {host: conn(value) for host, value in passed.items()}
    hostvars["x"] = {}
    assert filters()["verify_group_go"](hostvars, ["a", "b"], play, connectivity=connectivity) is expected


@pytest.mark.parametrize("args, message", [
    (({"a": {}}, ["a"], ["a"]), "host a has no verify_internode_conn_result"),
    (({"a": conn(True)}, "a", ["a"]), "hosts: 'a' is not a list"),
    (({"a": conn(True)}, ["a"], ["a"], "yes"), "connectivity: 'yes' is not a boolean"),
    (({"a": {"verify_internode_conn_result": {"skipped": True}}}, ["a"], ["a"]), "record: None is not a mapping"),
    (([], ["a"], ["a"]), "hostvars: [] is not a mapping"),
])
def test_group_go_bad_input(args, message):
    with pytest.raises(AnsibleFilterError, match="^verify_group_go: ") as err:
        vf.verify_group_go(*args)
    assert message in str(err.value)


# --- the record with NIC traffic ----------------------------------------------------------------------------------
def internode(timed_out=False, gbps=45.0):
    return {"timed_out": timed_out,
            "record": {"host": "a", "gate": {"passed": True}, "parsed": {"dispatch": {"bf16": {"rdma_gbps": gbps}}}}}


def test_record_nic():
    record = record_with_nic(internode(), rdma([0, 0]), rdma([5 * MB, 5 * MB]), min_bytes=MB)
    assert record["host"] == "a" and record["gate"] == {"passed": True}
    assert [nic["bytes"] for nic in record["nic"]["nics"]] == [20 * MB, 20 * MB]
    assert record["nic"]["passed"] and record["nic"]["idle"] == []
    # the mapping the run had is what the slow-rail check compares
    mapped = record_with_nic(internode(), rdma([0, 0]), rdma([5 * MB, 5 * MB]), min_bytes=MB,
                             mapping="0:mlx5_0:1,1:mlx5_1:1", mapping_supported=True)
    assert mapped["nic"]["passed"], mapped["nic"]
    assert record_with_nic(internode(timed_out=True), None, None)["nic"] is None


@pytest.mark.parametrize("result, kwargs, message", [
    ({"record": {"parsed": {}}, "timed_out": False}, {}, "result.record.parsed: {} has no dispatch.bf16.rdma_gbps"),
    (internode(), {"min_bytes": "big"}, "min_bytes: 'big' is not a byte count"),
    ({"skipped": True}, {}, "result.record: None is not a mapping"),
])
def test_record_nic_bad_input(result, kwargs, message):
    with pytest.raises(VerifyInputError) as err:
        record_with_nic(result, rdma([0]), rdma([0]), **kwargs)
    assert message in str(err.value)


# --- the record with the JIT --------------------------------------------------------------------------------------
def intranode(seconds=68.11):
    return {"seconds": seconds, "record": {"host": "a", "stage": "intranode"}}


def test_record_jit():
    record = vf.verify_record_jit(intranode(), jit_facts(0), jit_facts(11), True)
    assert record["stage"] == "intranode"
    assert (record["jit"]["state"], record["jit"]["compiled"], record["jit"]["run_seconds"]) == ("cold", 11, 68.1)
    assert record["jit"]["passed"]
    assert not vf.verify_record_jit(intranode(), jit_facts(0), jit_facts(11), True, require_warm="yes")["jit"]["passed"]
    assert vf.verify_record_jit(intranode(), {"skipped": True}, {"skipped": True}, False)["jit"] is None


@pytest.mark.parametrize("args, kwargs, message", [
    ((intranode(), {"skipped": True}, jit_facts(1), True), {}, "before: {'skipped': True} has no "
                                                               "ansible_facts.gpufleet_deepep_jit"),
    ((intranode(), jit_facts(1), jit_facts(1), "on"), {}, "enabled: 'on' is not a boolean"),
    ((intranode(), jit_facts(1), jit_facts(1), True), {"require_warm": "maybe"}, "require_warm: 'maybe' is not a "
                                                                                 "boolean"),
])
def test_record_jit_bad_input(args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match="^verify_record_jit: ") as err:
        vf.verify_record_jit(*args, **kwargs)
    assert message in str(err.value)


# --- the env of a run ---------------------------------------------------------------------------------------------
def test_run_env():
    site = {"EP_A": "1", "EP_JIT_CACHE_DIR": "/old"}
    assert vf.verify_run_env({}) == {}
    assert vf.verify_run_env(site) == site
    assert vf.verify_run_env(site, jit_cache_dir=CACHE, transport_env={"EP_A": "2"}) == {
        "EP_A": "2", "EP_JIT_CACHE_DIR": CACHE}
    assert vf.verify_run_env(site, jit_cache_dir=CACHE, transport_env={"EP_JIT_CACHE_DIR": "/t"}) == {
        "EP_A": "1", "EP_JIT_CACHE_DIR": "/t"}


@pytest.mark.parametrize("args, kwargs, message", [
    (("EP_A=1",), {}, "env: 'EP_A=1' is not a mapping"),
    (({},), {"jit_cache_dir": ""}, "jit_cache_dir: '' is not a path"),
    (({},), {"transport_env": ["X=1"]}, "transport_env: ['X=1'] is not a mapping"),
])
def test_run_env_bad_input(args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match="^verify_run_env: ") as err:
        vf.verify_run_env(*args, **kwargs)
    assert message in str(err.value)


# --- the sweep's judge, the plan line, the failure message --------------------------------------------------------
def test_sweep_judge():
    pair = {"name": "a+b", "ranks": {"a": 0, "b": 1}}
    judge = {"profile": "h200", "stage": "internode", "record": {"old": 1}}
    assert vf.verify_sweep_judge(judge, pair, "rack1", "b") == {
        "profile": "h200", "stage": "sweep", "record": {"scope": "a+b (sweep of rack1)", "group": "rack1", "rank": 1}}
    with pytest.raises(AnsibleFilterError, match="^verify_sweep_judge: host: 'c' is not in pair 'a\\+b'; expected "
                                                 "one of a, b"):
        vf.verify_sweep_judge(judge, pair, "rack1", "c")


def test_run_line():
    run = {"group": "rack1", "world_size": 2, "master": "n1", "master_addr": "10.8.0.2", "fabric_interface": "ib0",
           "ranks": {"n1": 0, "n2": 1}}
    assert vf.verify_run_line(run, 29500) == ("rack1: WORLD_SIZE=2 MASTER_ADDR=10.8.0.2 (n1, ib0) MASTER_PORT=29500 "
                                              "RANK: n1=0, n2=1")
    with pytest.raises(AnsibleFilterError, match="^verify_run_line: run: .* has no master_addr, fabric_interface"):
        vf.verify_run_line({"group": "g", "world_size": 1, "master": "n1", "ranks": {}}, 1)


def test_failure_message():
    summary = {"failures": [{"host": "n1", "reasons": ["slow"]}, {"host": "N1", "reasons": ["x", "y"]},
                            {"host": "n2", "reasons": []}]}
    assert vf.verify_failure_message(summary, "Intranode verification", "/r", "s") == (
        "Intranode verification failed on n1, n2: slow; x; y (summary: /r/s.md)")
    assert vf.verify_failure_message(summary, "DeepEP verification", "/r", "s", reasons=False) == (
        "DeepEP verification failed on n1, n2 (summary: /r/s.md)")
    with pytest.raises(AnsibleFilterError, match="^verify_failure_message: summary.failures\\[0\\]: 'n1' is not a "
                                                 "failure; expected a mapping with host and reasons"):
        vf.verify_failure_message({"failures": ["n1"]}, "X", "/r", "s")


# --- the records of a play ----------------------------------------------------------------------------------------
def test_play_records():
    hostvars = {"a": {"verify_intranode_record": {"host": "a"}, "verify_internode_records": [{"c": 1}, None]},
                "b": {"verify_intranode_record": {}, "verify_internode_records": [{"c": 2}]}}
    assert vf.verify_play_records(hostvars, ["a", "b"]) == [{"host": "a"}, {"c": 1}, {"c": 2}]
    assert vf.verify_play_records(hostvars, ["b"]) == [{"c": 2}]
    with pytest.raises(AnsibleFilterError, match="^verify_play_records: host b has no verify_internode_records"):
        vf.verify_play_records({"b": {"verify_intranode_record": {}}}, ["b"])
    with pytest.raises(AnsibleFilterError, match="^verify_play_records: hosts: 'z' is not a host of hostvars"):
        vf.verify_play_records(hostvars, ["z"])


# --- site.yml's play hosts ----------------------------------------------------------------------------------------
def test_site_play_hosts():
    groups = {"all": ["n1", "n2", "n3", "n4"], "gpufleet_site_steady": ["n3"],
              "gpufleet_site_changing": ["n4", "n1", "n2"], "gpufleet_site_image": ["n2"]}
    assert sf.site_play_hosts(groups) == ["n3", "n1", "n4"]
    assert sf.site_play_hosts({"all": ["n1"]}) == []
    assert "site_play_hosts" in sf.FilterModule().filters()


@pytest.mark.parametrize("groups, message", [
    ({"gpufleet_site_steady": []}, "is not the inventory's groups; expected a mapping of group names"),
    ({"all": ["n1"], "gpufleet_site_steady": "n1"}, "groups['gpufleet_site_steady']: 'n1' is not a list of hosts"),
])
def test_site_play_hosts_bad_input(groups, message):
    with pytest.raises(AnsibleFilterError, match="^site_play_hosts: ") as err:
        sf.site_play_hosts(groups)
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)
