# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack gather=[sglang]: the SGLang facts of sglang_env state=facts in the node's one call - the same facts
for the same environment (the virtualenv fixture of test_sglang_env), a failure to read them named in gather_errors
(not a module failure), the probe started with the node's others; the facts document the audit builds from it; and
the audit role reading a node in one node_stack task."""

from __future__ import annotations

import threading

import yaml

import test_sglang_env
from test_sglang_env import args
from unit_helpers import REPO, run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang_probe as _sglang_probe
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang_facts as _sglang_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import commands as _commands
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import gather_sets as _gather_sets
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack, sglang_env

# The fixtures of test_sglang_env (a virtualenv with the fixture wheels): the same nodes for both modules.
base_env = test_sglang_env.base_env
env = test_sglang_env.env
no_host_pip_config = test_sglang_env.no_host_pip_config
wheels = test_sglang_env.wheels


def node_stack_args(env, **extra):
    """node_stack options that read what sglang_env reads with ``args(env)``."""
    out = {"gather": ["sglang"], "sglang_python": env["python"], "root": env["proc"],
           "sglang_nvshmem_home": env["nvshmem"], "cuda_home": "/nonexistent-cuda", "timeout": 600}
    out.update(extra)
    return out


def test_gather_sglang_is_what_sglang_env_state_facts_returns(env, tmp_path):
    """Holds and moved included: the constraints file holds an NCCL that is not installed, the DeepGEMM cache has
    files."""
    (env["venv"] / "gpufleet-constraints.txt").write_text("nvidia-nccl-cu12==2.27.5\ndeep-ep==1.2.1\n")
    cache = tmp_path / "dg" / "cache" / "kernels"
    cache.mkdir(parents=True)
    (cache / "a.cubin").write_text("")
    (cache / "b.cubin").write_text("")
    reference = run_module(sglang_env, args(env, dg_cache_dir=str(tmp_path / "dg")), check_mode=True)
    assert not reference.failed, reference.get("msg")
    one = run_module(node_stack, node_stack_args(env, sglang_dg_cache_dir=str(tmp_path / "dg")), check_mode=True)
    assert not one.failed, one.get("msg")
    assert one["changed"] is False and one["gather_errors"] == {}
    assert list(one["ansible_facts"]) == ["gpufleet_sglang"]
    facts = one["ansible_facts"]["gpufleet_sglang"]
    assert facts == reference["ansible_facts"]["gpufleet_sglang"]
    # What they say about this environment, so the equality is not one of empty facts.
    assert facts["versions"]["nccl"] == "2.28.3" and facts["deep_ep"]["collection"] is True
    assert facts["holds"] == {"nvidia-nccl-cu12": "2.27.5", "deep-ep": "1.2.1"}
    assert facts["moved"] == ["nvidia-nccl-cu12 is 2.28.3, held at 2.27.5"]
    assert facts["constraint_file"] == str(env["venv"] / "gpufleet-constraints.txt")
    assert facts["deepgemm_cache"] == {"dir": str(tmp_path / "dg"), "files": 2}
    assert facts["nvshmem_ok"] is True and facts["transfer"]["kernel"] == "6.8.0-1015-gcp"


def test_gather_sglang_with_a_constraint_file_and_the_stack_alongside(env, tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    reference = run_module(sglang_env, args(env, constraint_file=str(constraints)), check_mode=True)
    one = run_module(node_stack, node_stack_args(env, gather=["stack", "sglang"], import_check=False,
                                                 python=env["python"], sglang_constraint_file=str(constraints)),
                     check_mode=True)
    assert not one.failed and not reference.failed
    assert sorted(one["ansible_facts"]) == ["gpufleet_sglang", "gpufleet_stack"]
    assert one["ansible_facts"]["gpufleet_sglang"] == reference["ansible_facts"]["gpufleet_sglang"]
    assert one["ansible_facts"]["gpufleet_sglang"]["holds"] == {"torch": "2.13.0"}
    assert one["ansible_facts"]["gpufleet_sglang"]["moved"] == []


def test_sglang_python_defaults_to_python(env):
    args_ = node_stack_args(env, python=env["python"])
    del args_["sglang_python"]
    result = run_module(node_stack, args_, check_mode=True)
    assert not result.failed and result["ansible_facts"]["gpufleet_sglang"]["python"] == env["python"]


def test_an_interpreter_that_cannot_report_is_a_gather_error(module_runner, tmp_path):
    """The other sets are still returned and the module does not fail; the reason is sglang_env's."""
    missing = str(tmp_path / "no-python")
    result = module_runner(node_stack, {"gather": ["sglang", "nvidia"], "sglang_python": missing,
                                        "params_path": str(tmp_path / "none"), "version_path": str(tmp_path / "none"),
                                        "modprobe_dirs": []}, check_mode=True)
    assert not result.failed
    assert list(result["ansible_facts"]) == ["gpufleet_nvidia"]
    assert "is not an executable file" in result["gather_errors"]["gpufleet_sglang"]
    assert "gpufleet_sglang not gathered" in str(result["warnings"])
    reference = module_runner(sglang_env, {"python": missing}, check_mode=True)
    assert reference.failed and reference["msg"] == result["gather_errors"]["gpufleet_sglang"]

    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    failing.chmod(0o755)
    result = module_runner(node_stack, {"gather": ["sglang"], "sglang_python": str(failing)}, check_mode=True)
    assert not result.failed and result["ansible_facts"] == {}
    assert result["gather_errors"]["gpufleet_sglang"] == "python %s failed to report its packages (rc=3)" % failing


def test_the_sglang_probe_starts_with_the_others_and_is_bounded(tmp_path):
    """The SGLang probe is one of the node's prefetched commands (started up front, off the caller's thread), with
    the timeout given; a probe past it is a gather error naming the time limit."""
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.write_text("")
    python.chmod(0o755)
    main = threading.current_thread()
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv, threading.current_thread() is main, timeout))
        if argv[-1] == _sglang_probe.PROBE_SCRIPT:
            return 124, "", "timed out after 7s"
        return 1, "", "not here"

    facts, errors = _gather_sets.gather_node(["sglang"], _gather_sets.GatherOptions(
        root=str(tmp_path), sglang_python=str(python), timeout=7), runner=runner)
    assert facts == {}
    assert [(c[0][0], c[1], c[2]) for c in calls] == [(str(python), False, 7)]
    assert "ran past its 7 s time limit" in errors["gpufleet_sglang"]


def test_a_name_on_path_is_resolved_as_sglang_env_does(tmp_path, monkeypatch):
    python = tmp_path / "bin" / "mypython"
    python.parent.mkdir()
    python.write_text("")
    python.chmod(0o755)
    monkeypatch.setenv("PATH", str(python.parent))
    assert _sglang_facts.resolve_python("mypython", _commands.find_executable) == str(python)
    _facts, errors = _gather_sets.gather_node(
        ["sglang"], _gather_sets.GatherOptions(sglang_python="not-there", root=str(tmp_path)),
        runner=lambda argv, timeout=None, env=None: (1, "", ""))
    assert errors["gpufleet_sglang"] == ("python 'not-there' was not found on PATH; give the interpreter's absolute "
                                         "path")


# --- the facts document of the audit ---------------------------------------------------------------------

def test_document_takes_gpufleet_sglang_from_the_node_stack_result():
    sglang = {"versions": {"sglang": "0.5.8", "nccl": "2.28.3"}}
    node = {"changed": False, "gather_errors": {}, "ansible_facts": {"gpufleet_stack": {}, "gpufleet_sglang": sglang}}
    assert node_document("n1", [], node, {})["gpufleet_sglang"] == sglang
    # Gathered, but no sglang distribution: null, as with the separate sglang_env result before.
    absent = {"changed": False, "gather_errors": {}, "ansible_facts": {
        "gpufleet_stack": {}, "gpufleet_sglang": {"versions": {"sglang": None}}}}
    assert node_document("n2", [], absent, {})["gpufleet_sglang"] is None
    # Could not be gathered: a gap of the facts (FACTS_INCOMPLETE) under the same name as before.
    failed = {"changed": False, "gather_errors": {"gpufleet_sglang": "python '/x' is not an executable file"},
              "ansible_facts": {"gpufleet_stack": {}}}
    doc = node_document("n3", [], failed, {})
    assert doc["gpufleet_sglang"] is None
    assert doc["gather_errors"] == {"gpufleet_sglang": "python '/x' is not an executable file"}
    plain = {"changed": False, "gather_errors": {}, "ansible_facts": {"gpufleet_stack": {}}}
    # Not gathered and nothing registered (a node the inventory gives no SGLang): null, no gap.
    doc = node_document("n7", [], plain, {})
    assert doc["gpufleet_sglang"] is None and doc["gather_errors"] == {}


# --- the audit role ----------------------------------------------------------------------------------------

def _audit_tasks():
    return yaml.safe_load((REPO / "roles" / "audit" / "tasks" / "main.yml").read_text())


def _module(task):
    return next(k for k in task if k.startswith(("gpufleet.deepep.", "ansible.builtin.")))


def test_audit_reads_the_stack_and_sglang_in_one_node_stack_task():
    tasks = _audit_tasks()
    modules = [_module(t) for t in tasks]
    assert modules.count("gpufleet.deepep.node_stack") == 1
    assert "gpufleet.deepep.sglang_env" not in modules
    task = tasks[modules.index("gpufleet.deepep.node_stack")]
    assert task["register"] == "audit_r_node" and task["check_mode"] is True
    options = task["gpufleet.deepep.node_stack"]
    # sglang joins the gathered sets where audit_sglang, with the variables the sglang_env task was given.
    assert options["gather"] == "{{ audit_gather_sets }}"
    assert task["vars"]["audit_gather_wanted"]["sglang"] == "{{ audit_sglang | bool }}"
    for option, variable in (("sglang_python", "audit_sglang_python"), ("sglang_nvshmem_home", "audit_sglang_nvshmem_home"),
                             ("sglang_dg_cache_dir", "audit_sglang_dg_cache_dir"), ("cuda_home", "audit_cuda_home"),
                             ("timeout", "audit_probe_timeout")):
        assert variable in options[option], option
    # No later task reads the node's SGLang stack or registers audit_r_sglang.
    assert not any(t.get("register") == "audit_r_sglang" for t in tasks)
    assert all("audit_r_sglang" not in yaml.safe_dump(t) for t in tasks)


def test_the_gather_expression_of_the_audit_role():
    """The gather list the role's expression renders, with and without SGLang (ansible's own templating)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    task = [t for t in _audit_tasks() if "gpufleet.deepep.node_stack" in t][0]
    options = task["gpufleet.deepep.node_stack"]

    def trusted(value):
        if isinstance(value, dict):
            return dict((k, trusted(v)) for k, v in value.items())
        return trust_as_template(value) if isinstance(value, str) else value

    base = ["stack", "nvidia", "rdma", "gpus", "bundled_nvshmem", "linkage", "deepep_v2", "nccl_ep"]
    for audit_sglang, model, serving, fabric, expected in (
            (True, "", False, False, base + ["sglang"]), (False, "", False, False, base),
            (False, "", False, True, base + ["gpu_fabric", "imex"]),
            (True, "/opt/models/dsv3", True, False, base + ["sglang", "model", "serving"]),
            (False, "/opt/models/dsv3", True, False, base + ["serving"])):
        variables = dict(trusted(task["vars"]), audit_sglang=audit_sglang, audit_nvlink_fabric=fabric,
                         audit_serving=serving, audit_sglang_model_path=model)
        templar = Templar(loader=DataLoader(), variables=variables)
        assert templar.template(trust_as_template(options["gather"])) == expected
    assert set(_gather_sets.GATHERABLE) >= set(base + ["sglang", "gpu_fabric", "imex"])
