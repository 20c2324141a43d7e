# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GB200/GB300 NVL72 trays: the GPUs' NVLink fabric state (``nvidia-smi -q``, ``_nvidia/fabric``) and IMEX
(``_nvidia/imex``) as node_stack's gather sets ``gpu_fabric`` and ``imex`` read them, and the NVL72_* rules of the
catalogue that judge them - each fires on its bad fact, stays quiet on the good one, and on a family whose NVLink
domain does not span hosts."""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest
import yaml

from unit_helpers import FIXTURES, REPO
from findings_pipeline_cases import PREFLIGHT_HOSTS

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.nvlink_spans_hosts import nvlink_spans_hosts
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import gather_sets as _gather_sets
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import fabric as _fabric
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import imex as _imex
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules, validate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import family_spans_hosts, search
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.pipeline import preflight_document
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import SPECS

NVL72 = FIXTURES / "nvl72"
CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
AUDIT_HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())
UUID = "6a130f54-faaa-4b8f-847f-be44ab70f917"
ZERO = "00000000-0000-0000-0000-000000000000"
TRAY = ["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0"]


def smi_text(name):
    return (NVL72 / name).read_text()


def smi_runner(text, rc=0, err="", calls=None):
    def run(argv, timeout=None, env=None):
        if calls is not None:
            calls.append((list(argv), timeout))
        return rc, text, err
    return run


def fabric_facts(name):
    return _fabric.gather_fabric("/usr/bin/nvidia-smi", smi_runner(smi_text(name)), timeout=30)


# --- nvidia-smi -q -----------------------------------------------------------------------------------------------

def test_a_gb200_tray_of_four_ready_gpus():
    facts = fabric_facts("gb200_tray_ready.txt")
    assert facts["error"] is None
    assert (facts["driver_version"], facts["cuda_version"], facts["attached_gpus"]) == ("570.133.20", "12.8", 4)
    assert [g["bus_id"] for g in facts["gpus"]] == TRAY
    assert facts["gpus"][0] == {"bus_id": TRAY[0], "product_name": "NVIDIA GB200", "state": "Completed",
                                "status": "Success", "clique_id": 32766, "cluster_uuid": UUID, "health_summary": None,
                                "bandwidth": "Full", "ready": True, "why": None}
    # The drivers that print a Summary line first under Health.
    assert facts["gpus"][2]["health_summary"] == "Healthy" and facts["gpus"][2]["bandwidth"] == "Full"
    assert facts["all_ready"] is True and facts["supported"] is True
    assert facts["cluster_uuids"] == [UUID] and facts["clique_ids"] == [32766] and facts["not_ready"] == []


def test_one_gpu_in_progress_is_not_ready():
    facts = fabric_facts("gb200_tray_in_progress.txt")
    gpu = facts["gpus"][2]
    assert (gpu["state"], gpu["status"], gpu["clique_id"], gpu["cluster_uuid"]) == ("In Progress", "N/A", None, None)
    assert gpu["ready"] is False and "In Progress, not Completed" in gpu["why"] and "Fabric Manager" in gpu["why"]
    assert facts["all_ready"] is False and facts["not_ready"] == [TRAY[2]]
    assert facts["cluster_uuids"] == [UUID] and facts["clique_ids"] == [32766]


def test_insufficient_resources_with_clique_zero_and_a_zero_uuid():
    facts = fabric_facts("gb200_tray_insufficient.txt")
    bad = facts["gpus"][1]
    assert (bad["state"], bad["status"], bad["clique_id"], bad["cluster_uuid"]) == (
        "Completed", "Insufficient Resources", 0, None)
    assert bad["health_summary"] == "Unhealthy" and bad["bandwidth"] == "Degraded"
    assert bad["ready"] is False and "Status Insufficient Resources, not Success" in bad["why"]
    assert facts["not_ready"] == TRAY[1:3] and facts["clique_ids"] == [0, 32766]


def test_hgx_h100_completed_with_a_zero_uuid_is_not_multi_node():
    facts = fabric_facts("hgx_h100.txt")
    assert facts["attached_gpus"] == 8 and len(facts["gpus"]) == 8
    assert all(g["state"] == "Completed" and g["status"] == "Success" for g in facts["gpus"])
    assert all(g["cluster_uuid"] is None and not g["ready"] for g in facts["gpus"])
    assert "all zero" in facts["gpus"][0]["why"] and "MNNVL" in facts["gpus"][0]["why"]
    assert facts["supported"] is True and facts["cluster_uuids"] == [] and facts["clique_ids"] == [0]


def test_pcie_gpus_print_n_a_and_are_not_supported():
    facts = fabric_facts("pcie_l40s.txt")
    assert [g["state"] for g in facts["gpus"]] == ["N/A", "N/A"]
    assert all(g["clique_id"] is None and g["cluster_uuid"] is None and g["bandwidth"] == "N/A"
               for g in facts["gpus"])
    assert facts["supported"] is False and facts["all_ready"] is False
    assert "reports no NVLink fabric (State N/A)" in facts["gpus"][0]["why"]


def test_a_driver_without_the_fabric_section():
    facts = fabric_facts("a100_no_fabric.txt")
    (gpu,) = facts["gpus"]
    assert gpu["state"] is None and gpu["ready"] is False and "no Fabric section" in gpu["why"]
    assert facts["supported"] is False and facts["error"] is None


def test_other_sections_keys_do_not_leak_into_the_fabric():
    """Platform Info's 'GPU Fabric GUID', GPU Reset Status, MIG Mode: none is read as the Fabric section."""
    facts = fabric_facts("gb200_tray_ready.txt")
    assert all(set(g) == {"bus_id", "product_name", "state", "status", "clique_id", "cluster_uuid",
                          "health_summary", "bandwidth", "ready", "why"} for g in facts["gpus"])


@pytest.mark.parametrize("rc, out, err, text", [
    (9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
     "/usr/bin/nvidia-smi -q failed (rc=9): NVIDIA-SMI has failed because it couldn't communicate"),
    (6, "No devices were found\n", "", "/usr/bin/nvidia-smi -q failed (rc=6): No devices were found"),
    (124, "", "timed out after 30s", "/usr/bin/nvidia-smi -q timed out after 30s"),
    (0, "garbage\n", "", "printed no GPU block"),
])
def test_a_failing_nvidia_smi_is_a_fact(rc, out, err, text):
    calls = []
    facts = _fabric.gather_fabric("/usr/bin/nvidia-smi", smi_runner(out, rc, err, calls), timeout=30)
    assert calls == [(["/usr/bin/nvidia-smi", "-q"], 30)]
    assert text in facts["error"]
    assert facts["gpus"] == [] and facts["all_ready"] is False and facts["supported"] is False


def test_no_nvidia_smi_runs_nothing():
    facts = _fabric.gather_fabric(None, smi_runner("", calls=None), timeout=30)
    assert facts["error"].startswith("nvidia-smi not found") and facts["gpus"] == []


# --- IMEX --------------------------------------------------------------------------------------------------------

def imex_tree(tmp_path, installed=True, config=True, nodes=True, channel=True, proc=True, option=True,
              live="CreateImexChannel0: 1\n"):
    root = tmp_path / "root"
    (root / "etc" / "nvidia-imex").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "proc").mkdir()
    modprobe = tmp_path / "modprobe.d"
    modprobe.mkdir()
    if installed:
        for name in ("nvidia-imex", "nvidia-imex-ctl"):
            path = root / "usr" / "bin" / name
            path.write_text("#!/bin/sh\n")
            path.chmod(0o755)
    if config:
        shutil.copy(NVL72 / "imex" / "config.cfg", root / "etc" / "nvidia-imex" / "config.cfg")
    if nodes:
        shutil.copy(NVL72 / "imex" / "nodes_config.cfg", root / "etc" / "nvidia-imex" / "nodes_config.cfg")
    if channel:
        (root / "dev" / "nvidia-caps-imex-channels").mkdir(parents=True)
        (root / "dev" / "nvidia-caps-imex-channels" / "channel0").write_text("")
    if proc:
        shutil.copy(NVL72 / "imex" / "proc_devices", root / "proc" / "devices")
    if option:
        shutil.copy(NVL72 / "imex" / "nvidia-imex.conf", modprobe / "nvidia-imex.conf")
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nEnableStreamMemOPs: 0\n" + (live or ""))
    return str(root), str(params), [str(modprobe)]


def imex_runner(service=(0, "active\n", ""), ctl=(0, "READY\n", ""), calls=None):
    def run(argv, timeout=None, env=None):
        if calls is not None:
            calls.append((list(argv), timeout))
        if argv[:2] == ["systemctl", "is-active"]:
            return service
        if argv[0].endswith("nvidia-imex-ctl"):
            return ctl
        return 127, "", "unexpected %r" % (argv,)
    return run


@pytest.fixture
def char_devices(monkeypatch):
    """The channel files of the fixture trees count as character devices (a test cannot mknod one)."""
    monkeypatch.setattr(_imex, "_is_char_device", os.path.isfile)


def test_imex_on_a_healthy_tray(tmp_path, char_devices):
    root, params, dirs = imex_tree(tmp_path)
    calls = []
    facts = _imex.gather_imex(root, imex_runner(calls=calls), timeout=20, params_path=params, modprobe_dirs=dirs)
    assert calls == [(["systemctl", "is-active", "nvidia-imex"], 20), (["/usr/bin/nvidia-imex-ctl", "-q"], 20)]
    assert facts["installed"] is True and facts["binary"] == "/usr/bin/nvidia-imex"
    config = facts["config"]
    assert (config["present"], config["server_port"], config["cmd_port"], config["cmd_enabled"]) == (
        True, 50000, 50005, True)
    assert config["node_config_file"] == "/etc/nvidia-imex/nodes_config.cfg" and config["unparsed"] == []
    assert config["values"]["BIND_INTERFACE_IP"] == "" and config["values"]["IMEX_WAIT_FOR_QUORUM"] == "FULL"
    nodes = facts["nodes_config"]
    assert nodes["present"] is True and len(nodes["addresses"]) == 18 and nodes["entries"] == nodes["addresses"]
    assert nodes["addresses"][0] == "10.114.7.11"
    assert facts["channel"] == {"path": "/dev/nvidia-caps-imex-channels/channel0", "present": True,
                                "char_device": True, "registered": True, "major": 238}
    assert facts["channel0_option"] == {"configured": 1, "source": dirs[0] + "/nvidia-imex.conf", "live": 1,
                                        "set": True}
    assert facts["service"] == {"state": "active", "active": True, "error": None}
    assert facts["ctl"] == {"path": "/usr/bin/nvidia-imex-ctl", "state": "READY", "ready": True, "error": None}


def test_imex_missing_everywhere_is_facts_not_errors(tmp_path):
    root, params, dirs = imex_tree(tmp_path, installed=False, config=False, nodes=False, channel=False, proc=False,
                                   option=False, live=None)
    calls = []
    facts = _imex.gather_imex(root, imex_runner(service=(3, "inactive\n", ""), calls=calls), timeout=20,
                              params_path=params, modprobe_dirs=dirs)
    assert [argv for argv, dummy in calls] == [["systemctl", "is-active", "nvidia-imex"]]  # no ctl to run
    assert facts["installed"] is False and facts["binary"] is None
    assert facts["config"]["present"] is False and facts["config"]["values"] == {}
    assert facts["config"]["node_config_file"] == "/etc/nvidia-imex/nodes_config.cfg"
    assert facts["nodes_config"] == {"path": "/etc/nvidia-imex/nodes_config.cfg", "present": False, "entries": [],
                                     "addresses": []}
    assert facts["channel"] == {"path": "/dev/nvidia-caps-imex-channels/channel0", "present": False,
                                "char_device": False, "registered": False, "major": None}
    assert facts["channel0_option"] == {"configured": None, "source": None, "live": None, "set": False}
    assert facts["service"] == {"state": "inactive", "active": False, "error": None}
    assert facts["ctl"]["state"] is None and "not installed" in facts["ctl"]["error"]


def test_a_regular_file_is_not_the_channel_device(tmp_path):
    root, params, dirs = imex_tree(tmp_path)
    facts = _imex.gather_imex(root, imex_runner(), params_path=params, modprobe_dirs=dirs)
    assert facts["channel"]["present"] is True and facts["channel"]["char_device"] is False


@pytest.mark.parametrize("ctl, state, ready, error", [
    ((0, "WAITING_FOR_PEERS\n", ""), "WAITING_FOR_PEERS", False, None),
    ((0, "UNAVAILABLE\n", ""), "UNAVAILABLE", False, None),
    ((1, "", "Connection refused: is IMEX_CMD_ENABLED=1?"), None, None, "printed no IMEX state"),
    ((124, "", ""), None, None, "timed out after 60s"),
])
def test_imex_ctl_states(tmp_path, char_devices, ctl, state, ready, error):
    root, params, dirs = imex_tree(tmp_path)
    facts = _imex.gather_imex(root, imex_runner(ctl=ctl), params_path=params, modprobe_dirs=dirs)["ctl"]
    assert (facts["state"], facts["ready"]) == (state, ready)
    assert (error is None and facts["error"] is None) or error in facts["error"]


@pytest.mark.parametrize("service, state, error", [
    ((3, "failed\n", ""), "failed", None),
    ((127, "", "No such file or directory"), None, "systemctl not found"),
    ((124, "", ""), None, "timed out"),
])
def test_imex_service_states(tmp_path, service, state, error):
    root, params, dirs = imex_tree(tmp_path)
    facts = _imex.gather_imex(root, imex_runner(service=service), params_path=params, modprobe_dirs=dirs)["service"]
    assert facts["state"] == state and facts["active"] is False
    assert (error is None and facts["error"] is None) or error in facts["error"]


def test_imex_config_reading():
    values, unparsed = _imex.parse_config("# c\nSERVER_PORT = 50001\nIMEX_CMD_ENABLED=0\n"
                                          "IMEX_NODE_CONFIG_FILE=\"/etc/imex/nodes.cfg\"\nnot a line\n")
    assert values == {"SERVER_PORT": "50001", "IMEX_CMD_ENABLED": "0", "IMEX_NODE_CONFIG_FILE": "/etc/imex/nodes.cfg"}
    assert unparsed == ["not a line"]
    entries, addresses = _imex.parse_nodes_config("# rack\n\n10.0.0.1\n10.0.0.2  # tray 2\nfd00::3\ntray-04\n")
    assert entries == ["10.0.0.1", "10.0.0.2", "fd00::3", "tray-04"] and addresses == entries[:3]
    assert _imex.channel_major("Character devices:\n238 nvidia-caps-imex-channels\n\nBlock devices:\n") == 238
    assert _imex.channel_major("Block devices:\n238 nvidia-caps-imex-channels\n") is None


def test_the_nodes_config_the_config_names_is_read(tmp_path, char_devices):
    root, params, dirs = imex_tree(tmp_path, nodes=False)
    cfg = tmp_path / "root" / "etc" / "nvidia-imex" / "config.cfg"
    cfg.write_text(cfg.read_text().replace("/etc/nvidia-imex/nodes_config.cfg", "/etc/nvidia-imex/rack-a07.cfg"))
    (tmp_path / "root" / "etc" / "nvidia-imex" / "rack-a07.cfg").write_text("10.114.7.11\n")
    facts = _imex.gather_imex(root, imex_runner(), params_path=params, modprobe_dirs=dirs)
    assert facts["nodes_config"] == {"path": "/etc/nvidia-imex/rack-a07.cfg", "present": True,
                                     "entries": ["10.114.7.11"], "addresses": ["10.114.7.11"]}


# --- the gather sets -----------------------------------------------------------------------------------------------

def test_node_stack_reads_both_sets_in_one_pass(tmp_path, char_devices):
    root, params, dirs = imex_tree(tmp_path)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    text = smi_text("gb200_tray_ready.txt")
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append(list(argv))
        if argv == [str(smi), "-q"]:
            return 0, text, ""
        return imex_runner()(argv, timeout, env)
    options = _gather_sets.GatherOptions(root=root, sysfs_root=str(tmp_path), nvidia_smi=str(smi), params_path=params,
                                         modprobe_dirs=tuple(dirs), timeout=15)
    facts, errors = _gather_sets.gather_node(["imex", "gpu_fabric"], options, runner=runner)
    assert errors == {} and list(facts) == ["gpufleet_gpu_fabric", "gpufleet_imex"]
    assert facts["gpufleet_gpu_fabric"]["all_ready"] is True and facts["gpufleet_gpu_fabric"]["nvidia_smi"] == str(smi)
    assert facts["gpufleet_imex"]["ctl"]["ready"] is True
    # Each command once; no nvidia-smi query of the gpus set (its sysfs has no GPU) and nothing else.
    assert sorted(map(tuple, calls)) == sorted([(str(smi), "-q"), ("systemctl", "is-active", "nvidia-imex"),
                                                ("/usr/bin/nvidia-imex-ctl", "-q")])
    assert _gather_sets.FACT_NAMES["gpu_fabric"] == "gpufleet_gpu_fabric"
    assert _gather_sets.FACT_NAMES["imex"] == "gpufleet_imex"


def test_an_unusable_nvidia_smi_is_the_fabric_fact_s_error(tmp_path):
    options = _gather_sets.GatherOptions(root=str(tmp_path), sysfs_root=str(tmp_path),
                                         nvidia_smi=str(tmp_path / "missing-smi"))
    facts, errors = _gather_sets.gather_node(["gpu_fabric"], options,
                                             runner=lambda argv, timeout=None, env=None: (127, "", "no"))
    assert errors == {} and facts["gpufleet_gpu_fabric"]["error"].startswith("nvidia-smi not found")


# --- which families span hosts ----------------------------------------------------------------------------------

def test_the_families_whose_nvlink_domain_spans_hosts():
    spanning = sorted(name for name in SPECS if family_spans_hosts(name))
    assert spanning == ["gb200", "gb300"]
    assert family_spans_hosts("b200") is False and family_spans_hosts("h100") is False
    assert family_spans_hosts(None) is None and family_spans_hosts("") is None and family_spans_hosts("x9") is None
    assert search("family_spans_hosts(expect.gpu_family)", {"expect": {"gpu_family": "gb300"}}) is True
    assert [nvlink_spans_hosts(f) for f in ("gb200", "gb300", "b300", "", None)] == [True, True, False, False, False]
    with pytest.raises(AnsibleFilterError, match="GPU family 'gb400' is not one of"):
        nvlink_spans_hosts("gb400")


# --- the rules -----------------------------------------------------------------------------------------------------

def good_imex():
    return {"installed": True, "binary": "/usr/bin/nvidia-imex",
            "config": {"path": "/etc/nvidia-imex/config.cfg", "present": True, "values": {}, "unparsed": [],
                       "server_port": 50000, "cmd_port": 50005, "cmd_enabled": True,
                       "node_config_file": "/etc/nvidia-imex/nodes_config.cfg"},
            "nodes_config": {"path": "/etc/nvidia-imex/nodes_config.cfg", "present": True,
                             "entries": ["10.114.7.11", "10.114.7.12"], "addresses": ["10.114.7.11", "10.114.7.12"]},
            "channel": {"path": "/dev/nvidia-caps-imex-channels/channel0", "present": True, "char_device": True,
                        "registered": True, "major": 238},
            "channel0_option": {"configured": 1, "source": "/etc/modprobe.d/nvidia-imex.conf", "live": 1, "set": True},
            "service": {"state": "active", "active": True, "error": None},
            "ctl": {"path": "/usr/bin/nvidia-imex-ctl", "state": "READY", "ready": True, "error": None}}


def tray_doc(family="gb200", fabric="gb200_tray_ready.txt", **imex_changes):
    doc = copy.deepcopy(AUDIT_HEALTHY)
    doc["expect"] = dict(doc.get("expect") or {}, gpu_family=family)
    doc["gpufleet_gpu_fabric"] = fabric_facts(fabric) if isinstance(fabric, str) else fabric
    imex = good_imex()
    for path, value in imex_changes.items():
        node = imex
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    doc["gpufleet_imex"] = imex
    return doc


NVL72_RULES = [r for r in CATALOGUE["rules"] if r["id"].startswith("NVL72_")]


def nvl72(doc, context="audit"):
    """The NVL72_* findings of ``doc`` in ``context`` (the audit's document: the preflight's other rules read keys of
    the preflight's own document)."""
    return evaluate_rules(doc, NVL72_RULES, context=context)


FAILED_SMI = _fabric.gather_fabric("/usr/bin/nvidia-smi", smi_runner("", 9, "couldn't communicate with the driver"))

# rule id -> the document that makes it fire (its close, good state is tray_doc())
CASES = {
    "NVL72_FABRIC_NOT_READ": tray_doc(fabric=FAILED_SMI),
    "NVL72_FABRIC_NOT_READY": tray_doc(fabric="gb200_tray_in_progress.txt"),
    "NVL72_FABRIC_SPLIT": tray_doc(fabric="gb200_tray_split.txt"),
    "NVL72_IMEX_NOT_INSTALLED": tray_doc(installed=False, binary=None),
    "NVL72_IMEX_INACTIVE": tray_doc(service__state="failed", service__active=False),
    "NVL72_IMEX_CHANNEL_MISSING": tray_doc(channel__present=False, channel__char_device=False,
                                           channel__registered=False),
    "NVL72_IMEX_CHANNEL0_NOT_SET": tray_doc(channel0_option__configured=None, channel0_option__source=None,
                                            channel0_option__set=False),
    "NVL72_IMEX_NODES_CONFIG": tray_doc(nodes_config__present=False, nodes_config__entries=[],
                                        nodes_config__addresses=[]),
    "NVL72_IMEX_NOT_READY": tray_doc(ctl__state="WAITING_FOR_PEERS", ctl__ready=False),
}
CRITICAL = {"NVL72_FABRIC_NOT_READY", "NVL72_FABRIC_SPLIT", "NVL72_IMEX_NOT_INSTALLED", "NVL72_IMEX_INACTIVE",
            "NVL72_IMEX_CHANNEL_MISSING", "NVL72_IMEX_NODES_CONFIG", "NVL72_IMEX_NOT_READY"}


def _contexts(rule_id):
    """The fabric state is the hardware's, judged before anything is installed and after; IMEX is the imex phase's
    to install (after the reboot that makes its channel), so the audit alone judges it."""
    return ["audit", "preflight"] if rule_id.startswith("NVL72_FABRIC_") else ["audit"]


def test_every_nvl72_rule_has_a_case_and_is_judged_in_its_contexts():
    rules = [r for r in validate_rules(CATALOGUE) if r["id"].startswith("NVL72_")]
    assert {r["id"] for r in rules} == set(CASES)
    for rule in rules:
        assert rule["when"] == _contexts(rule["id"]) and rule.get("message") and rule["fix"] and rule["source"]
        assert rule["severity"] == ("critical" if rule["id"] in CRITICAL else "warning"), rule["id"]


@pytest.mark.parametrize("family", ["gb200", "gb300"])
def test_a_healthy_tray_is_quiet(family):
    assert nvl72(tray_doc(family)) == [] and nvl72(tray_doc(family), "preflight") == []
    # The whole audit catalogue on the audit's healthy node, now a healthy tray: nothing.
    assert evaluate_rules(tray_doc(family), CATALOGUE) == []


@pytest.mark.parametrize("context", ["audit", "preflight"])
@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_on_its_case(rule_id, context):
    found = nvl72(CASES[rule_id], context)
    if context not in _contexts(rule_id):
        assert found == []
        return
    assert [f["id"] for f in found] == [rule_id]
    assert found[0]["message"] and "{" not in found[0]["message"]


@pytest.mark.parametrize("family", ["b200", "h100", "b300", "", None])
@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_quiet_where_the_family_does_not_span_hosts(rule_id, family):
    doc = copy.deepcopy(CASES[rule_id])
    doc["expect"]["gpu_family"] = family
    assert nvl72(doc) == [] and nvl72(doc, "preflight") == []


def test_rules_quiet_where_the_sets_were_not_gathered():
    doc = tray_doc()
    doc["gpufleet_gpu_fabric"] = doc["gpufleet_imex"] = None
    assert nvl72(doc) == [] and nvl72(doc, "preflight") == []


def test_not_ready_names_the_gpus_with_their_state_and_status():
    (finding,) = nvl72(tray_doc(fabric="gb200_tray_insufficient.txt"))
    assert finding["severity"] == "critical"
    assert finding["evidence"]["not_ready"] == [
        {"bus_id": TRAY[1], "state": "Completed", "status": "Insufficient Resources", "clique_id": 0,
         "cluster_uuid": None},
        {"bus_id": TRAY[2], "state": "Completed", "status": "Insufficient Resources", "clique_id": 0,
         "cluster_uuid": None}]
    assert finding["message"].startswith(
        "GPUs not ready for multi-node NVLink: 00000009:01:00.0 (State Completed, Status Insufficient Resources), "
        "00000018:01:00.0 (State Completed, Status Insufficient Resources) - fabric registration Completed with Status "
        "Insufficient Resources, not Success")
    for words in ("Fabric Manager", "NVLink switch trays", "nvidia-smi -q", "Fabric"):
        assert words in finding["message"]
    assert "Fabric Manager" in finding["fix"] and "nvidia-smi -q" in finding["fix"]


def test_an_hgx_node_in_a_gb200_profile_is_not_ready_and_pcie_too():
    for name in ("hgx_h100.txt", "pcie_l40s.txt", "a100_no_fabric.txt"):
        assert [f["id"] for f in nvl72(tray_doc(fabric=name))] == ["NVL72_FABRIC_NOT_READY"], name


def test_split_names_both_domains():
    (finding,) = nvl72(CASES["NVL72_FABRIC_SPLIT"])
    assert "ClusterUUIDs %s, b2f0c7a1-1d2e-4c3b-9a8f-7e6d5c4b3a21; cliques 32766, 1" % UUID in finding["message"]


def test_imex_messages_name_what_is_missing():
    def message(rule_id):
        return nvl72(CASES[rule_id])[0]["message"]
    assert message("NVL72_IMEX_CHANNEL_MISSING").startswith(
        "/dev/nvidia-caps-imex-channels/channel0 is absent (nvidia-caps-imex-channels not registered in /proc/devices)")
    assert "NVreg_CreateImexChannel0=1" in message("NVL72_IMEX_CHANNEL_MISSING")
    assert "(configured: unset; the loaded driver's: 1)" in message("NVL72_IMEX_CHANNEL0_NOT_SET")
    assert message("NVL72_IMEX_INACTIVE").startswith("The nvidia-imex service is not active (failed)")
    assert message("NVL72_IMEX_NOT_READY").startswith("nvidia-imex-ctl -q reports WAITING_FOR_PEERS, not READY")
    assert "/etc/nvidia-imex/nodes_config.cfg missing" in message("NVL72_IMEX_NODES_CONFIG")


def test_an_inactive_or_absent_imex_does_not_pile_up_findings():
    """Not installed: only that (no service, config or READY finding); inactive: not also 'not READY'."""
    doc = tray_doc(installed=False, service__state="inactive", service__active=False, config__present=False,
                   ctl__state=None, ctl__ready=None)
    assert [f["id"] for f in nvl72(doc)] == ["NVL72_IMEX_NOT_INSTALLED"]
    doc = tray_doc(service__state="inactive", service__active=False, ctl__state="UNAVAILABLE", ctl__ready=False)
    assert [f["id"] for f in nvl72(doc)] == ["NVL72_IMEX_INACTIVE"]


def test_the_audit_document_carries_both_sets():
    facts = {"gpufleet_gpu_fabric": fabric_facts("gb200_tray_ready.txt"), "gpufleet_imex": good_imex()}
    doc = node_document("tray-07", ["gb200"], {"ansible_facts": facts, "gather_errors": {}},
                        expect={"gpu_family": "gb200"})
    assert doc["gpufleet_gpu_fabric"]["all_ready"] is True and doc["gpufleet_imex"]["installed"] is True
    bare = node_document("hgx-1", ["b200"], {"ansible_facts": {}, "gather_errors": {}}, expect={"gpu_family": "b200"})
    assert bare["gpufleet_gpu_fabric"] is None and bare["gpufleet_imex"] is None


def test_the_roles_read_the_sets_only_where_the_family_spans_hosts():
    audit = (REPO / "roles" / "audit" / "tasks" / "main.yml").read_text()
    gather = next(task for task in yaml.safe_load(audit) if "gpufleet.deepep.node_stack" in task)
    wanted = gather["vars"]["audit_gather_wanted"]
    assert wanted["gpu_fabric"] == wanted["imex"] == "{{ audit_nvlink_fabric | bool }}"
    assert gather["gpufleet.deepep.node_stack"]["gather"] == "{{ audit_gather_sets }}"
    audit_defaults = yaml.safe_load((REPO / "roles" / "audit" / "defaults" / "main.yml").read_text())
    assert audit_defaults["audit_nvlink_fabric"] == "{{ audit_expected_gpu_family | gpufleet.deepep.nvlink_spans_hosts }}"
    assert "gpu_family: \"{{ audit_expected_gpu_family" in audit
    preflight = (REPO / "roles" / "preflight" / "tasks" / "main.yml").read_text()
    assert "(['gpu_fabric'] if preflight_nvlink_fabric | bool else [])" in preflight
    defaults = yaml.safe_load((REPO / "roles" / "preflight" / "defaults" / "main.yml").read_text())
    assert defaults["preflight_nvlink_fabric"] == "{{ preflight_gpu_family | gpufleet.deepep.nvlink_spans_hosts }}"


def test_the_preflight_document_carries_both_sets_and_the_whole_catalogue_judges_them():
    """The preflight role's document (pipeline.preflight_document of its node_stack result) holds both sets; the
    whole catalogue in the preflight context fires the NVL72 rule on a gb200 profile only."""
    golden = json.loads((FIXTURES / "findings_pipeline" / "golden.json").read_text())
    expect = golden["pf-healthy"]["preflight_document"]["expect"]
    names = ("min_gpus", "driver_min_version", "cuda_arch", "cuda_version", "cuda_home", "cuda_by_play", "pip_by_play",
             "python", "require_rdma", "min_active_rdma", "required_modules", "optional_modules", "require_mlx5dv",
             "mlx5dv_by_play", "mlx5dv_header", "mlx5dv_symbol", "nvshmem_version", "libcuda_dirs", "deepep_v2",
             "deepep_internode", "fabric", "nccl_version", "gpu_family", "host_arch")
    settings = dict(((name, expect[name]) for name in names), deepep_v2_nic_name="auto", env_script_by_play=True,
                    deepep_commit="", nvshmem_source=True)
    node = copy.deepcopy(PREFLIGHT_HOSTS["pf-healthy"]["preflight_node"])
    node["ansible_facts"]["gpufleet_gpu_fabric"] = fabric_facts("gb200_tray_in_progress.txt")
    node["ansible_facts"]["gpufleet_imex"] = good_imex()
    for family, fired in (("gb200", ["NVL72_FABRIC_NOT_READY"]), ("b200", [])):
        doc = preflight_document(node, "tray-07", dict(settings, gpu_family=family))
        assert doc["gpufleet_gpu_fabric"]["not_ready"] == [TRAY[2]] and doc["gpufleet_imex"]["installed"] is True
        found = [f["id"] for f in evaluate_rules(doc, CATALOGUE, context="preflight") if f["id"].startswith("NVL72_")]
        assert found == fired, family
