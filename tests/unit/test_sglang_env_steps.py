# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sglang_env's commands through the shared runner (module_utils/_runner) and its named steps: what is asked is
checked (observe_request) before the node is read for the plan (observe_node), the plan's reasons come from the
facts alone (plan), and nothing is run before apply."""

from __future__ import annotations

import stat
import sys
from unittest import mock

import pytest

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import StepFailed
from ansible_collections.gpufleet.deepep.plugins.modules import sglang_env


def test_a_command_past_its_bound_fails_naming_the_limit_and_the_command(tmp_path):
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nsleep 20\n")
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    result = run_module(sglang_env, {"python": str(slow), "timeout": 1, "sysfs_root": str(tmp_path)})
    assert result.failed
    assert "ran past its 1 s time limit" in result["msg"] and str(slow) in result["msg"]


def test_the_runner_records_bounds_and_raises_the_shared_step_failure(tmp_path):
    module = mock.MagicMock(params={"timeout": 5})
    env = sglang_env.SglangEnv(module)
    assert env.run(["true"]) == (0, "", "")
    assert env.run(["sh", "-c", "echo $PIP_NO_INPUT$PIP_DISABLE_PIP_VERSION_CHECK$LC_ALL"], record=False)[1] == "11C\n"
    with pytest.raises(StepFailed) as failed:
        env.run(["sh", "-c", "echo no >&2; exit 3"])
    assert failed.value.rc == 3 and failed.value.cmd == ["sh", "-c", "echo no >&2; exit 3"]
    assert "failed (rc=3)" in failed.value.msg and failed.value.extra["stderr"] == "no\n"
    assert env.result["commands"] == [["true"], ["sh", "-c", "echo no >&2; exit 3"]]  # the unrecorded read left out


def _env(tmp_path, **params):
    base = dict(version="0.5.19", kernel_version=None, transfer_engine="none", mooncake_dmabuf=False,
                use_bundled_deepep=False, exclude=[], wheelhouse=None, wheelhouse_checksums=None, cuda_version=None,
                transfer_engine_version=None, hold={}, hold_deep_ep=False, pip_config_file=None, timeout=5)
    base.update(params)
    env = sglang_env.SglangEnv(mock.MagicMock(params=base, check_mode=True))
    env.transfer = {"peermem_loaded": False, "dmabuf": True}
    env.wheelhouse = base["wheelhouse"]
    env.constraint_file = str(tmp_path / "constraints.txt")
    env.python = "/venv/bin/python"
    return env


def _facts(tmp_path, **versions):
    base = {"sglang": None, "kernel": None, "sgl_deep_ep": None, "nixl_package": None, "mooncake_package": None,
            "nixl": None, "mooncake": None, "torch": "2.9.1+cu129"}
    base.update(versions)
    return {"versions": base, "torch_cuda": "12.9", "deep_ep": {}, "virtualenv": True, "prefix": str(tmp_path)}


def test_observe_request_refuses_before_anything_is_read(tmp_path):
    with pytest.raises(StepFailed, match="needs version"):
        _env(tmp_path, version=None).observe_request(_facts(tmp_path))
    with pytest.raises(StepFailed, match="cuda_version 13.0 does not match torch"):
        _env(tmp_path, transfer_engine="nixl", cuda_version="13.0").observe_request(_facts(tmp_path))
    want = _env(tmp_path, transfer_engine="nixl").observe_request(_facts(tmp_path))
    assert want["engine_pkg"] == "nixl-cu12" and want["exclude"] == ["sgl-deep-ep"] and not want["bundled"]


def test_plan_names_every_step_and_an_environment_as_held_plans_none(tmp_path):
    env = _env(tmp_path, hold={"torch": "2.9.1+cu129"})
    facts = _facts(tmp_path, sgl_deep_ep="1.0", nixl_package="nixl")
    probe = {"dists": {"torch": {"version": "2.9.1+cu129"}}}
    want = env.observe_request(facts)
    seen = env.observe_node(probe, facts, want)
    todo = env.plan(facts, want, seen)
    assert todo == ["sgl-deep-ep 1.0 is installed (its deep_ep shadows the collection's): removing it",
                    "sglang None is installed, 0.5.19 is wanted",
                    "constraints %s hold torch==2.9.1+cu129" % env.constraint_file,
                    "%s names the constraints file" % (tmp_path / "pip.conf")]
    assert env.log.commands == []  # planning ran nothing
    (tmp_path / "constraints.txt").write_text(seen["constraints"])
    (tmp_path / "pip.conf").write_text(sglang_env.pip_conf_text(None, env.constraint_file))
    held = _facts(tmp_path, sglang="0.5.19")
    assert env.plan(held, want, env.observe_node(probe, held, want)) == []


# ------------------------------------------------------------------------ holds: names, replaced pins, the file read
@pytest.mark.parametrize("hold, words", [
    ({"torch": "2.9.1", "Torch": "2.8.0"}, "hold names torch twice: torch: 2.9.1 and Torch: 2.8.0 are the same project"),
    ({"nvidia_nccl_cu12": "2.28.3", "nvidia-nccl.cu12": "2.27.0"},
     "hold names nvidia-nccl-cu12 twice: nvidia_nccl_cu12: 2.28.3 and nvidia-nccl.cu12: 2.27.0"),
])
def test_holds_naming_one_project_twice_are_refused_naming_both(tmp_path, hold, words):
    result = run_module(sglang_env, {"python": str(tmp_path / "never-run"), "state": "present", "version": "0.5.19",
                                     "hold": hold})
    assert result.failed and result["msg"].startswith(words), result["msg"]
    assert result["commands"] == []  # refused before anything ran


def test_a_deep_ep_hold_beside_hold_deep_ep_is_refused_naming_the_fix(tmp_path):
    result = run_module(sglang_env, {"python": str(tmp_path / "never-run"), "hold": {"deep_ep": "1.2.1"}})
    assert result.failed and result["msg"].startswith("hold deep_ep: 1.2.1: hold_deep_ep already holds")
    assert "set hold_deep_ep: false" in result["msg"]
    bundled = run_module(sglang_env, {"python": str(tmp_path / "never-run"), "hold": {"deep_ep": "1.2.1"},
                                      "hold_deep_ep": False})
    assert "hold_deep_ep already holds" not in bundled["msg"]  # fails later: the interpreter does not exist


def test_a_hold_over_another_pin_warns_naming_the_package_the_old_pin_and_the_hold(tmp_path):
    env = _env(tmp_path, hold={"Torch": "2.9.1", "nvidia-nccl-cu12": "2.28.3"})
    (tmp_path / "constraints.txt").write_text("# kept\ntorch==2.8.0\nnvidia_nccl_cu12 == 2.28.3\nnumpy<2\n")
    facts = _facts(tmp_path)
    seen = env.observe_node({"dists": {}}, facts, env.observe_request(facts))
    (call,) = env.module.warn.call_args_list
    assert call.args[0] == ("hold torch 2.9.1 replaces torch==2.8.0 in the constraints file %s (the hold wins; change "
                            "the hold if the pin was meant)" % env.constraint_file)
    assert seen["constraints"].splitlines()[1:] == ["torch==2.9.1", "nvidia-nccl-cu12==2.28.3", "numpy<2"]
    # once written, the same hold warns no more
    (tmp_path / "constraints.txt").write_text(seen["constraints"])
    again = _env(tmp_path, hold={"torch": "2.9.1", "nvidia-nccl-cu12": "2.28.3"})
    again.observe_node({"dists": {}}, facts, again.observe_request(facts))
    assert again.module.warn.call_args_list == []


@pytest.mark.parametrize("content, words", [
    (b"torch==2.9.1\n\xff\xfe\x00garbage", "is not UTF-8 text (byte 0xff at offset 13)"),
    (b"torch==2.9.1\n\x00\x01", "is binary (a NUL byte at offset 13)"),
])
def test_a_binary_constraints_file_is_refused_naming_it_and_left_as_it_was(tmp_path, content, words):
    path = tmp_path / "constraints.txt"
    path.write_bytes(content)
    env = _env(tmp_path, hold={"torch": "2.9.1"})
    facts = _facts(tmp_path)
    with pytest.raises(StepFailed) as refused:
        env.observe_node({"dists": {}}, facts, env.observe_request(facts))
    assert str(refused.value).startswith("constraints file %s %s" % (path, words)), str(refused.value)
    assert "repair or remove it" in str(refused.value) and path.read_bytes() == content


def test_state_facts_refuses_a_binary_constraints_file_naming_it(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    result = run_module(sglang_env, {"python": sys.executable, "constraint_file": str(path),
                                     "sysfs_root": str(tmp_path)})
    assert result.failed and result["msg"].startswith("constraints file %s is not UTF-8 text" % path), result["msg"]
