# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one kernel modules reader (module_utils/_node/kmods) over the layout a real 1 x H200 node showed
(tests/fixtures/captured/h200x1/kernel-modules.txt: mlx5_core, mlx5_ib and ib_core built into the kernel, nvidia and
nvidia_uvm loaded, no /lib/modules/<release>, no lsmod), read through both of node_stack's paths (the ``modules`` set
the preflight judges and ``gpufleet_stack.kernel_modules`` the audit judges), the preflight's judgement and summary
over it, and a kernel that lists its built-in drivers in modules.builtin."""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml

from unit_helpers import FIXTURES, REPO, run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import kmods as _kmods
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import probes as _probes
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.pipeline import preflight_report

H200X1 = FIXTURES / "captured" / "h200x1"
CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
ASKED = ["mlx5_core", "nvidia_peermem"]       # the preflight's default required + optional modules


def captured_sections(text):
    """kernel-modules.txt -> {section title: [lines]} (sections start with ``== title``)."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None and line.strip():
            current.append(line)
    return sections


def captured_root(tmp_path):
    """A node root as the capture shows it: /proc/modules, the kernel release, /sys/module/<name> with an initstate
    file only where the capture read one; no /lib/modules/<release>."""
    sections = captured_sections((H200X1 / "kernel-modules.txt").read_text())
    root = tmp_path / "h200x1"
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "modules").write_text("\n".join(sections["/proc/modules"]) + "\n")
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text(sections["uname -r"][0] + "\n")
    for line in sections["ls /sys/module (selected)"]:
        name, rest = line.split(None, 1)
        if rest.startswith("absent"):
            continue
        directory = root / "sys" / "module" / name
        directory.mkdir(parents=True)
        fields = dict(field.strip().split("=", 1) for field in rest.split(";")[1:])
        for key in ("initstate", "refcnt", "version"):
            if fields.get(key, "-") != "-":
                (directory / key).write_text(fields[key] + "\n")
    return root


def no_lsmod(argv, timeout=None, env=None):
    return 127, "", "bash: line 1: lsmod: command not found"


@pytest.fixture
def h200x1(tmp_path):
    return captured_root(tmp_path)


def test_the_capture_is_rebuilt_as_the_node_showed_it(h200x1):
    assert (h200x1 / "sys/module/nvidia/initstate").read_text() == "live\n"
    assert (h200x1 / "sys/module/mlx5_core").is_dir() and not (h200x1 / "sys/module/mlx5_core/initstate").exists()
    assert not (h200x1 / "sys/module/nvidia_peermem").exists()
    assert not (h200x1 / "lib").exists()


def test_reader_on_the_captured_node(h200x1):
    facts = _kmods.read_kernel_modules(str(h200x1), no_lsmod, ["mlx5_core", "mlx5_ib", "ib_core", "nvidia",
                                                               "nvidia_uvm", "nvidia_peermem", "gdrdrv"])
    assert facts["loaded"] == ["nvidia", "nvidia_uvm"] and facts["source"] == "/proc/modules"
    assert facts["kernel"] == "6.18.44-fc-v657-gpu" and facts["module_dir"] == "/lib/modules/6.18.44-fc-v657-gpu"
    assert facts["module_index"] is None and facts["builtin_index"] is None
    states = facts["states"]
    for name in ("mlx5_core", "mlx5_ib", "ib_core"):
        assert states[name] == {"state": "builtin", "source": "/sys/module/%s" % name, "loadable": None,
                                "reason": "/sys/module/%s exists without initstate: built into the kernel" % name}
    assert states["nvidia"]["state"] == "loaded" and states["nvidia"]["source"] == "/proc/modules"
    assert states["nvidia_peermem"] == {
        "state": "absent", "source": "/lib/modules/6.18.44-fc-v657-gpu", "loadable": False,
        "reason": "not loaded, not built in, and the kernel has no /lib/modules/6.18.44-fc-v657-gpu "
                  "(no loadable modules)"}
    assert facts["builtin"] == ["mlx5_core", "mlx5_ib", "ib_core"]
    assert facts["absent"] == facts["not_in_kernel"] == ["nvidia_peermem", "gdrdrv"]
    assert facts["present"] == {"mlx5_core": True, "mlx5_ib": True, "ib_core": True, "nvidia": True,
                                "nvidia_uvm": True, "nvidia_peermem": False, "gdrdrv": False}


def test_both_node_stack_paths_agree_on_the_captured_node(h200x1):
    """The ``modules`` set (what the preflight reads) and ``gpufleet_stack.kernel_modules`` (what the audit reads)."""
    result = run_module(node_stack, {"gather": ["modules"], "root": str(h200x1),
                                     "module_names": list(_probes.WATCHED_KERNEL_MODULES)})
    assert not result.failed, result
    modules = result["ansible_facts"]["gpufleet_modules"]
    loaded, present, states = _probes.gather_kernel_modules(str(h200x1), no_lsmod)
    assert present == modules["present"] and states == modules["states"]
    assert loaded == set(modules["loaded"])
    # What node_stack showed on the node (captured/h200x1/node_stack-no-profile.txt), now with the reason.
    shown = yaml.safe_load((H200X1 / "node_stack-no-profile.txt").read_text().split("=>", 1)[1])
    assert present == shown["ansible_facts"]["gpufleet_stack"]["kernel_modules"]
    assert [n for n in _probes.WATCHED_KERNEL_MODULES if states[n]["state"] == "builtin"] == [
        "mlx5_core", "mlx5_ib", "ib_core"]


def test_without_proc_modules_and_lsmod_the_live_sys_modules_count(h200x1):
    (h200x1 / "proc" / "modules").unlink()
    facts = _kmods.read_kernel_modules(str(h200x1), no_lsmod, ["nvidia", "mlx5_core"])
    assert facts["source"] == "/sys/module" and facts["loaded"] == ["nvidia", "nvidia_uvm"]
    assert facts["states"]["nvidia"]["source"] == "/sys/module/nvidia/initstate"
    assert facts["states"]["mlx5_core"]["state"] == "builtin"


def test_a_module_going_away_is_not_loaded(h200x1):
    (h200x1 / "proc" / "modules").write_text("")
    (h200x1 / "sys/module/nvidia_uvm/initstate").write_text("going\n")
    state = _kmods.read_kernel_modules(str(h200x1), no_lsmod, ["nvidia_uvm"])["states"]["nvidia_uvm"]
    assert state["state"] == "absent" and "initstate is going (not live)" in state["reason"]


def modules_builtin_root(tmp_path):
    """A stock kernel: mlx5_core listed in modules.builtin (no /sys/module entry: a driver without parameters),
    nvidia_peermem and mlx5_ib loadable (modules.dep), gdrdrv nowhere."""
    root = tmp_path / "stock"
    release = "6.8.0-1015-gcp"
    (root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "osrelease").write_text(release + "\n")
    (root / "proc" / "modules").write_text("nvidia 14381056 0 - Live 0x0\n")
    moddir = root / "lib" / "modules" / release
    moddir.mkdir(parents=True)
    (moddir / "modules.builtin").write_text("kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko\n"
                                            "kernel/drivers/infiniband/core/ib_core.ko\n")
    (moddir / "modules.dep").write_text(
        "kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko.zst: kernel/drivers/infiniband/core/ib_uverbs.ko.zst\n"
        "updates/dkms/nvidia-peermem.ko.zst: updates/dkms/nvidia.ko.zst\n"
        "updates/dkms/nvidia.ko.zst:\n")
    return root


def test_reader_with_modules_builtin(tmp_path):
    root = modules_builtin_root(tmp_path)
    facts = _kmods.read_kernel_modules(str(root), no_lsmod, ["mlx5_core", "mlx5_ib", "nvidia-peermem", "gdrdrv"])
    states = facts["states"]
    assert states["mlx5_core"]["state"] == "builtin"
    assert states["mlx5_core"]["source"] == "/lib/modules/6.8.0-1015-gcp/modules.builtin"
    # "-" and "_" are one to the kernel: nvidia-peermem.ko is the module nvidia_peermem.
    assert states["nvidia_peermem"] == {"state": "absent", "source": "/lib/modules/6.8.0-1015-gcp/modules.dep",
                                        "loadable": True,
                                        "reason": "not loaded; /lib/modules/6.8.0-1015-gcp/modules.dep lists it"}
    assert states["mlx5_ib"]["loadable"] is True
    assert states["gdrdrv"]["loadable"] is False and "does not list it" in states["gdrdrv"]["reason"]
    assert facts["absent"] == ["mlx5_ib", "nvidia_peermem", "gdrdrv"] and facts["not_in_kernel"] == ["gdrdrv"]
    # The stack's reader is the same one.
    dummy, present, stack_states = _probes.gather_kernel_modules(str(root), no_lsmod)
    assert stack_states["mlx5_core"] == states["mlx5_core"] and present["gdrdrv"] is False


def test_a_module_directory_without_modules_dep_leaves_loadable_unknown(tmp_path):
    root = modules_builtin_root(tmp_path)
    (root / "lib/modules/6.8.0-1015-gcp/modules.dep").unlink()
    state = _kmods.read_kernel_modules(str(root), no_lsmod, ["mlx5_ib"])["states"]["mlx5_ib"]
    assert state["state"] == "absent" and state["loadable"] is None
    assert "modules.dep cannot be read" in state["reason"]


@pytest.mark.parametrize("name", ["../etc", "mlx5 core", "", "x" * 65])
def test_a_bad_module_name_is_refused_naming_it(tmp_path, name):
    result = run_module(node_stack, {"gather": ["modules"], "root": str(tmp_path), "module_names": [name]})
    assert result.failed
    assert "module_names: %r is not a kernel module name" % name in result["msg"]
    assert "such as mlx5_core" in result["msg"] and "Traceback" not in json.dumps(result)


# --- the preflight over the captured node ---------------------------------------------------------------

def preflight_document(modules, require_rdma=True):
    """The preflight's document for the rules (roles/preflight/tasks/main.yml) of a node with one H200 and no RDMA
    device, as captured, with the kernel modules read by node_stack."""
    return {
        "host": "gpu-node-1", "gather_errors": {},
        "gpufleet_nvidia": {"driver_loaded": True, "driver_version": "580.159.04"},
        "gpufleet_rdma": {"devices": [], "active_devices": []},
        "gpufleet_gpus": {"gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}]},
        "modules": modules,
        "cuda": {"home": "/usr/local/cuda-13.0", "version": "13.0", "release": "13.0"},
        "pip_ok": True, "mlx5dv_ok": True, "mlx5dv": {"ok": True, "waived": [], "reason": ""},
        "libcuda_found": [{"path": "/usr/local/nvidia/lib64/libcuda.so", "dir": "/usr/local/nvidia/lib64",
                           "name": "libcuda.so"}],
        "expect": {"min_gpus": 1, "driver_min_version": "550", "cuda_arch": [], "cuda_version": "",
                   "cuda_by_play": False, "pip_by_play": True, "python": "/usr/bin/python3",
                   "require_rdma": require_rdma, "min_active_rdma": 1,
                   "required_modules": ["mlx5_core"] if require_rdma else [], "optional_modules": ["nvidia_peermem"],
                   "require_mlx5dv": True, "mlx5dv_by_play": True, "libcuda_dirs": ["/usr/local/nvidia/lib64"],
                   "nvshmem_version": "3.4.5-0"},
    }


def render_report(modules, findings):
    """The preflight role's report (plugin_utils/_audit/pipeline.py, preflight_report) as the role gives it."""
    document = dict(preflight_document(modules), gpufleet_nvidia={"driver_version": "580.159.04"}, gpufleet_rdma={},
                    gpufleet_gpus={"gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}]},
                    cuda={"version": "13.0", "release": "13.0"}, pip_ok=True, mlx5dv_ok=True, libcuda_found=[])
    document["expect"] = dict(document["expect"], cuda_home="/usr/local/cuda-13.0")
    return preflight_report(document, findings, kernel=modules["kernel"])


def test_preflight_on_the_captured_node_fails_for_rdma_only(h200x1):
    modules = _kmods.read_kernel_modules(str(h200x1), no_lsmod, ASKED)
    findings = evaluate_rules(preflight_document(modules), CATALOGUE, context="preflight", order="catalogue")
    failures = [f["message"] for f in findings if f["severity"] == "critical"]
    notes = [f["message"] for f in findings if f["severity"] != "critical"]
    # What the role said on the node (captured/h200x1/site-check-preflight.txt) and what it says now.
    captured = (H200X1 / "site-check-preflight.txt").read_text()
    assert "'FAIL: Kernel module mlx5_core is not loaded. Fix: modprobe mlx5_core.'" in captured
    assert "modules loaded: none" in captured
    assert failures == [
        "RDMA: no devices under /sys/class/infiniband (mlx5_core is built into the kernel). Fix: check the NICs "
        "(lspci -d 15b3:), that mlx5_ib is loaded or built in (modprobe mlx5_ib) and the messages of the driver "
        "(dmesg | grep mlx5); or set preflight_require_rdma: false for single-node use."]
    assert notes == [
        "Kernel module mlx5_core is built into kernel 6.18.44-fc-v657-gpu: nothing to load (it is not in "
        "/proc/modules).",
        "Kernel module nvidia_peermem is not loaded, and the kernel has no module for it (optional: NVSHMEM IBGDA "
        "falls back to dma-buf)."]
    report = render_report(modules, findings)
    assert report["failures"] == failures and report["notes"] == notes
    assert report["modules_loaded"] == ["nvidia", "nvidia_uvm"] and report["modules_builtin"] == ["mlx5_core"]
    summary = [line for line in report["summary"] if "modules loaded" in line]
    assert summary == ["PeerMappingOverride live: False | modules loaded: mlx5_core (built in)"]
    assert not [line for line in report["summary"] if re.search(r"modprobe mlx5_core\b", line)]


def test_preflight_on_the_captured_node_without_rdma_passes(h200x1):
    modules = _kmods.read_kernel_modules(str(h200x1), no_lsmod, ["nvidia_peermem"])
    findings = evaluate_rules(preflight_document(modules, require_rdma=False), CATALOGUE, context="preflight",
                              order="catalogue")
    assert [f["severity"] for f in findings] == ["info"]


def test_preflight_with_modules_builtin_and_a_loadable_driver(tmp_path):
    root = modules_builtin_root(tmp_path)
    modules = _kmods.read_kernel_modules(str(root), no_lsmod, ["mlx5_core", "mlx5_ib", "nvidia_peermem"])
    doc = preflight_document(modules)
    doc["expect"]["required_modules"] = ["mlx5_core", "mlx5_ib"]
    found = evaluate_rules(doc, CATALOGUE, context="preflight", order="catalogue")
    assert [(f["id"], f["message"]) for f in found if f["id"].startswith("PREFLIGHT_MODULE")] == [
        ("PREFLIGHT_MODULE_MISSING", "Kernel module mlx5_ib is not loaded. Fix: modprobe mlx5_ib."),
        ("PREFLIGHT_MODULE_BUILTIN", "Kernel module mlx5_core is built into kernel 6.8.0-1015-gcp: nothing to load "
                                     "(it is not in /proc/modules)."),
        ("PREFLIGHT_MODULE_OPTIONAL", "Kernel module nvidia_peermem is not loaded (optional: NVSHMEM IBGDA falls "
                                      "back to dma-buf).")]
    summary = render_report(modules, found)["summary"]
    assert "PeerMappingOverride live: False | modules loaded: mlx5_core (built in)" in summary


def test_preflight_names_a_required_module_the_kernel_does_not_have(tmp_path):
    root = modules_builtin_root(tmp_path)
    modules = _kmods.read_kernel_modules(str(root), no_lsmod, ["gdrdrv"])
    doc = preflight_document(modules)
    doc["expect"]["required_modules"] = ["gdrdrv"]
    (finding,) = [f for f in evaluate_rules(doc, CATALOGUE, context="preflight") if f["id"].startswith("PREFLIGHT_MOD")]
    assert finding["id"] == "PREFLIGHT_MODULE_NOT_IN_KERNEL" and finding["severity"] == "critical"
    assert finding["message"].startswith(
        "Kernel module gdrdrv is neither loaded nor built into kernel 6.8.0-1015-gcp, and the kernel has no module for "
        "it (it is not in /lib/modules/6.8.0-1015-gcp/modules.dep), so modprobe gdrdrv cannot load it.")
    assert copy.deepcopy(modules)["not_in_kernel"] == ["gdrdrv"]
