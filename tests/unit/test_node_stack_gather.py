# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack gather=[...]: the facts of nvidia_params, rdma_devices, gpu_topology and pytorch_bundled_nvshmem in
one call, equal to what those modules return on the same node; per-set errors; the concurrent probes; and the
facts document the audit builds from the result."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from test_pytorch_bundled_nvshmem import make_custom, make_site
from unit_helpers import CAPTURED, render_sysfs_tree

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import probes as _node_probes
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import commands as _commands
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import gather_sets as _gather_sets
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import NOT_GATHERED, node_document
from ansible_collections.gpufleet.deepep.plugins.modules import (
    gpu_topology,
    node_stack,
    nvidia_params,
    pytorch_bundled_nvshmem,
    rdma_devices,
)
from tools.fleetsim import fakehw

ALL = ["stack", "nvidia", "rdma", "gpus", "bundled_nvshmem"]


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node assembled from fixtures: fake sysfs and nvidia-smi of gcp_b200, the captured H200 driver files, a
    modprobe file that asks for PeerMappingOverride (not live: reboot pending), a venv whose site-packages holds
    pip NVSHMEM, a custom NVSHMEM build and an env script that preloads it."""
    sysfs = render_sysfs_tree(tmp_path, "gcp_b200")
    profile = fakehw.load_profile("gcp_b200")
    hw = tmp_path / "hw.json"
    fakehw.write_hw_json(profile, hw)
    smi = fakehw.install_fake_nvidia_smi(tmp_path / "bin" / "nvidia-smi")
    monkeypatch.setenv("FLEETSIM_HW_JSON", str(hw))
    params = tmp_path / "params"
    params.write_text((CAPTURED / "proc_driver_nvidia_params").read_text().replace("PeerMappingOverride=1;", ""))
    version = tmp_path / "version"
    version.write_text((CAPTURED / "proc_driver_nvidia_version").read_text())
    modprobe = tmp_path / "modprobe.d"
    modprobe.mkdir()
    (modprobe / "gpufleet-nvidia.conf").write_text(
        'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"\n')
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    make_site(Path(site))
    prefix = make_custom(tmp_path / "nvshmem")
    env_script = tmp_path / "env.sh"
    env_script.write_text('export NVSHMEM_HOME=%s\nexport LD_PRELOAD="${NVSHMEM_HOME}/lib/libnvshmem_host.so.3"\n'
                          % prefix)

    class Node:
        args = {
            "sysfs_root": str(sysfs), "nvidia_smi": str(smi), "params_path": str(params),
            "version_path": str(version), "modprobe_dirs": [str(modprobe)], "python": str(python),
            "nvshmem_prefix": str(prefix), "env_script": str(env_script),
        }

        def only(self, *names):
            return dict((k, self.args[k]) for k in names)

    return Node()


def test_one_call_returns_what_each_facts_module_returns(node, module_runner):
    one = module_runner(node_stack, dict(node.args, gather=ALL, import_check=False), check_mode=True)
    assert not one.failed, one.get("msg")
    assert one["changed"] is False and one["gather_errors"] == {}
    facts = one["ansible_facts"]
    assert sorted(facts) == ["gpufleet_bundled_nvshmem", "gpufleet_gpus", "gpufleet_nvidia", "gpufleet_rdma",
                             "gpufleet_stack"]

    nvidia = module_runner(nvidia_params, node.only("params_path", "version_path", "modprobe_dirs"),
                           check_mode=True)
    rdma = module_runner(rdma_devices, node.only("sysfs_root"), check_mode=True)
    gpus = module_runner(gpu_topology, node.only("sysfs_root", "nvidia_smi"), check_mode=True)
    bundled = module_runner(pytorch_bundled_nvshmem, dict(node.only("python", "nvshmem_prefix", "env_script"),
                                                          state="preload"), check_mode=True)
    for result in (nvidia, rdma, gpus, bundled):
        assert not result.failed, result.get("msg")
    assert facts["gpufleet_nvidia"] == nvidia["ansible_facts"]["gpufleet_nvidia"]
    assert facts["gpufleet_rdma"] == rdma["ansible_facts"]["gpufleet_rdma"]
    assert facts["gpufleet_gpus"] == gpus["ansible_facts"]["gpufleet_gpus"]
    assert facts["gpufleet_bundled_nvshmem"] == bundled["ansible_facts"]["gpufleet_bundled_nvshmem"]

    # What the facts say about this node, so the equality above is not one of empty sets.
    assert facts["gpufleet_nvidia"]["reboot_required"] is True
    assert facts["gpufleet_gpus"]["nvidia_smi"]["used"] is True and facts["gpufleet_gpus"]["gpu_count"] == 8
    assert len(facts["gpufleet_rdma"]["devices"]) == 8
    assert facts["gpufleet_bundled_nvshmem"]["bundled"] and facts["gpufleet_bundled_nvshmem"]["env_script_preloads"]
    # The pending reboot of the driver, gathered in the same call, counts for the stack.
    assert facts["gpufleet_stack"]["reboot"]["nvidia_reboot_required"] is True
    assert "gpufleet_nvidia.reboot_required" in facts["gpufleet_stack"]["reboot"]["reasons"]
    assert [p["name"] for p in facts["gpufleet_stack"]["nccl"]["pip"]] == []
    assert facts["gpufleet_stack"]["python"]["ok"] is True


def test_default_gathers_the_stack_only(node, module_runner):
    result = module_runner(node_stack, dict(node.args, import_check=False), check_mode=True)
    assert not result.failed, result.get("msg")
    assert list(result["ansible_facts"]) == ["gpufleet_stack"]


def test_a_set_that_cannot_be_gathered_is_named_and_the_others_are_returned(node, module_runner, tmp_path):
    args = dict(node.args, gather=ALL, import_check=False, sysfs_root=str(tmp_path / "no-sys"),
                python=str(tmp_path / "no-python"))
    result = module_runner(node_stack, args, check_mode=True)
    assert not result.failed
    errors = result["gather_errors"]
    assert sorted(errors) == ["gpufleet_bundled_nvshmem", "gpufleet_gpus", "gpufleet_rdma"]
    assert "no-sys" in errors["gpufleet_rdma"] and "is not a directory" in errors["gpufleet_gpus"]
    assert "no-python" in errors["gpufleet_bundled_nvshmem"]
    assert sorted(result["ansible_facts"]) == ["gpufleet_nvidia", "gpufleet_stack"]
    # The stack still reports why its Python probe failed.
    assert "no-python" in result["ansible_facts"]["gpufleet_stack"]["errors"]["python"]
    # Three sets not gathered, and the missing interpreter named where users look, with the option to set.
    assert len(result["warnings"]) == 4
    assert result["gather_warnings"]["gpufleet_stack"][0].startswith(
        "python %s not found at %s" % (args["python"], args["python"]))


def test_nvidia_smi_that_is_not_executable_costs_the_gpu_facts_only(node, module_runner, tmp_path):
    result = module_runner(node_stack, dict(node.args, gather=["rdma", "gpus"], nvidia_smi=str(tmp_path / "none")),
                           check_mode=True)
    assert not result.failed
    assert "is not an executable file" in result["gather_errors"]["gpufleet_gpus"]
    assert list(result["ansible_facts"]) == ["gpufleet_rdma"]


def test_probes_start_together_and_each_runs_once():
    """The import probe waits until the Python probe has started: that only ends if both run at once."""
    started = threading.Event()
    calls = []
    lock = threading.Lock()

    def runner(argv, timeout=None, env=None):
        with lock:
            calls.append(argv[0])
        if argv[0] == "slow-import":
            return (0, "", "") if started.wait(60) else (1, "", "ran alone")
        if argv[0] == "python-probe":
            started.set()
        return 0, argv[0], ""

    prefetch = _commands.PrefetchRunner(runner, [(["slow-import"], 5), (["python-probe"], 5), (["python-probe"], 5)])
    assert prefetch(["slow-import"]) == (0, "", "")
    assert prefetch(["python-probe"]) == (0, "python-probe", "")
    assert prefetch(["other"]) == (0, "other", "")
    prefetch.join()
    assert sorted(calls) == ["other", "python-probe", "slow-import"]


def test_a_runner_that_raises_is_an_error_result():
    def runner(argv, timeout=None, env=None):
        raise RuntimeError("boom")

    prefetch = _commands.PrefetchRunner(runner, [(["x"], 1)])
    assert prefetch(["x"]) == (1, "", "RuntimeError: boom")


def test_python_probe_reports_packages_and_site_layout_in_one_run():
    py = _node_probes.gather_python(sys.executable, _commands.subprocess_runner, 60)
    assert py["ok"] is True, py["error"]
    assert py["site"]["executable"] and isinstance(py["site"]["sys_path"], list)
    assert py["site_error"] is None


# --- the facts document of the audit ---------------------------------------------------------------------

def test_document_of_a_gathered_node():
    result = {"changed": False, "gather_errors": {}, "ansible_facts": {
        "gpufleet_stack": {"nvshmem": {"version": "3.5.19"}, "deepep": {"installed": True}},
        "gpufleet_nvidia": {"driver_loaded": True}, "gpufleet_rdma": {"devices": []}}}
    doc = node_document("n1", ["g"], result, {"hca_prefix": "mlx5"})
    assert doc["reachable"] is True and doc["unreachable_reason"] is None
    assert doc["groups"] == ["g"] and doc["expect"] == {"hca_prefix": "mlx5"}
    assert doc["gpufleet_nvshmem"] == {"version": "3.5.19"} and doc["gpufleet_deepep"] == {"installed": True}
    assert doc["gpufleet_gpus"] is None and doc["gather_errors"] == {}


def test_document_of_an_unreachable_node():
    doc = node_document("n2", ["g"], {"unreachable": True, "msg": "ssh: connect to host port 1: refused",
                                      "changed": False}, {})
    assert doc["reachable"] is False and "refused" in doc["unreachable_reason"]
    assert doc["gpufleet_stack"] is None and doc["gather_errors"] == {}


def test_document_of_a_node_that_never_got_there_or_failed():
    assert node_document("n3", [], None)["unreachable_reason"] == NOT_GATHERED
    failed = node_document("n4", [], {"failed": True, "msg": "MODULE FAILURE", "gather_errors": {"gpufleet_rdma": "x"}})
    assert failed["reachable"] is True
    assert failed["gather_errors"] == {"gpufleet_rdma": "x", "node_stack": "MODULE FAILURE"}


def test_module_documentation_lists_every_gather_choice():
    doc = node_stack.DOCUMENTATION
    for name in _gather_sets.GATHERABLE:
        assert "V(%s)" % name in doc
        assert "RV(ansible_facts.%s)" % _gather_sets.FACT_NAMES[name] in doc


def test_every_command_of_a_node_runs_in_the_prefetch(tmp_path):
    """No probe waits for another: each command gather_node runs was started up front, none from the caller's
    thread (which would run it after the ones before it). Only fallbacks (``/sbin/ldconfig`` when ``ldconfig``
    fails, ``lsmod`` without ``/proc/modules``) would run later; this node needs neither."""
    root = tmp_path / "root"
    (root / "usr/local/cuda/bin").mkdir(parents=True)
    (root / "usr/local/cuda/bin/nvcc").write_text("")
    (root / "opt/deepep").mkdir(parents=True)
    (root / "opt/deepep/unified-env.sh").write_text("export NVSHMEM_REMOTE_TRANSPORT=ibgda\n")
    (root / "proc").mkdir()
    (root / "proc/modules").write_text("nvidia 1 0 - Live 0x0\n")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    main = threading.current_thread()
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv[0], threading.current_thread() is main, timeout))
        if argv[0] == "ldconfig":
            return 0, "", ""
        return 1, "", "not here"

    options = _gather_sets.GatherOptions(
        root=str(root), sysfs_root=str(render_sysfs_tree(tmp_path)), params_path=str(tmp_path / "none"),
        version_path=str(tmp_path / "none"), modprobe_dirs=[], nvidia_smi=str(smi), python="/opt/py/bin/python",
        nvshmem_prefix="/opt/deepep/nvshmem", timeout=7)
    facts, errors = _gather_sets.gather_node(ALL, options, runner=runner)
    started = sorted(os.path.basename(c[0]) for c in calls)
    # No shell: the import probe runs the interpreter itself, with the env script's exports read as data.
    assert started == ["dpkg-query", "ldconfig", "nvcc", "nvidia-smi", "nvidia-smi", "python", "python"]
    assert [c for c in calls if c[1]] == []
    # The probes that may hang are bounded by the timeout given.
    assert all(c[2] == 7 for c in calls if os.path.basename(c[0]) in ("python", "nvidia-smi"))
    assert sorted(facts) == ["gpufleet_gpus", "gpufleet_nvidia", "gpufleet_rdma", "gpufleet_stack"]
    assert "python" in errors["gpufleet_bundled_nvshmem"]


def test_document_takes_the_sglang_and_model_facts_where_the_audit_read_them():
    """The audit's one node_stack call reads SGLang, the served model and the serving units (sets sglang, model and
    serving, role_set_errors=record): the document takes them from its result."""
    node = {"changed": False, "gather_errors": {}, "ansible_facts": {"gpufleet_stack": {}}}
    sglang = {"versions": {"sglang": "0.5.8", "nccl": "2.28.3"}}
    model = {"architecture": "DeepseekV3ForCausalLM"}
    with_sglang = {"changed": False, "gather_errors": {},
                   "ansible_facts": {"gpufleet_stack": {}, "gpufleet_sglang": sglang, "gpufleet_model": model}}
    doc = node_document("n1", [], with_sglang, {})
    assert doc["gpufleet_sglang"]["versions"]["nccl"] == "2.28.3"
    assert doc["gpufleet_model"] == {"architecture": "DeepseekV3ForCausalLM"} and doc["gpufleet_serving"] is None
    # Not read on this node (a node the inventory gives no SGLang): null, no gap reported.
    skipped = node_document("n2", [], node, {})
    assert skipped["gpufleet_sglang"] is None and skipped["gpufleet_model"] is None and skipped["gather_errors"] == {}
    # Read, but the environment has no sglang distribution: the SGLANG_* rules have nothing to judge.
    absent = {"changed": False, "gather_errors": {},
              "ansible_facts": {"gpufleet_stack": {}, "gpufleet_sglang": {"versions": {"sglang": None, "nccl": "2.27.5"}}}}
    assert node_document("n3", [], absent, {})["gpufleet_sglang"] is None
    # A failure is a gap of the facts (FACTS_INCOMPLETE), not a silent pass.
    failed = dict(node, gather_errors={"gpufleet_model": "model_path '/m': /m/config.json: not found"})
    doc = node_document("n4", [], failed, {})
    assert doc["gather_errors"] == {"gpufleet_model": "model_path '/m': /m/config.json: not found"}
    assert doc["gpufleet_model"] is None
    # An unreachable node keeps nothing of them.
    gone = node_document("n5", [], {"unreachable": True, "msg": "refused", "ansible_facts": with_sglang["ansible_facts"]},
                         {})
    assert gone["gpufleet_sglang"] is None and gone["gpufleet_model"] is None
