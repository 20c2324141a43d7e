# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack gather=[model]: model_config's facts in the node's one call (the serving role reads an engine node in
one module run) - the same facts for the same directory, the same refusals with the same messages, the node's paths
read under ``root``, and the set beside the others in one call."""

from __future__ import annotations

import shutil

import pytest

from unit_helpers import REPO, run_module

from ansible_collections.gpufleet.deepep.plugins.modules import model_config, node_stack

MODELS = REPO / "tests" / "fixtures" / "sglang" / "models"


@pytest.mark.parametrize("model", ["smollm2-135m", "deepseek-v3-config"])
def test_the_model_set_is_what_model_config_returns(model):
    path = str(MODELS / model)
    alone = run_module(model_config, {"path": path})
    merged = run_module(node_stack, {"gather": ["model"], "model_path": path})
    assert not alone.failed and not merged.failed, (alone, merged)
    assert merged["ansible_facts"]["gpufleet_model"] == alone["ansible_facts"]["gpufleet_model"]
    assert merged["ansible_facts"]["gpufleet_model"]["num_attention_heads"] > 0


def test_under_a_root_the_node_path_is_read_there_and_named_as_the_node_sees_it(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(MODELS / "smollm2-135m", root / "opt/models/smollm2-135m")
    result = run_module(node_stack, {"gather": ["model"], "model_path": "/opt/models/smollm2-135m",
                                     "root": str(root)})
    facts = result["ansible_facts"]["gpufleet_model"]
    assert facts["path"] == "/opt/models/smollm2-135m"
    assert facts == dict(run_module(model_config, {"path": str(root / "opt/models/smollm2-135m")})
                         ["ansible_facts"]["gpufleet_model"], path="/opt/models/smollm2-135m")
    (root / "opt/models/smollm2-135m/config.json").write_text("{not json")
    bad = run_module(node_stack, {"gather": ["model"], "model_path": "/opt/models/smollm2-135m", "root": str(root)})
    assert bad.failed and bad["msg"].startswith("/opt/models/smollm2-135m/config.json is not valid JSON"), bad["msg"]


@pytest.mark.parametrize("path,offline,named", [
    ("deepseek-ai/DeepSeek-V3", True, "is a hub id, but this site is offline"),
    ("/nonexistent/model", True, "model path '/nonexistent/model' is not a directory"),
])
def test_a_model_it_cannot_take_fails_with_model_configs_message(path, offline, named):
    alone = run_module(model_config, {"path": path, "offline": offline})
    merged = run_module(node_stack, {"gather": ["model", "serve_node"], "model_path": path, "model_offline": offline})
    assert alone.failed and merged.failed
    assert named in merged["msg"] and merged["msg"] == alone["msg"]


def test_a_hub_id_online_and_a_config_without_heads(tmp_path):
    online = run_module(node_stack, {"gather": ["model"], "model_path": "deepseek-ai/DeepSeek-V3",
                                     "model_offline": False})
    assert online["ansible_facts"]["gpufleet_model"] == {"path": "deepseek-ai/DeepSeek-V3", "hub_id": True}
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 576}')
    alone = run_module(model_config, {"path": str(tmp_path)})
    merged = run_module(node_stack, {"gather": ["model"], "model_path": str(tmp_path)})
    assert merged.failed and merged["msg"] == alone["msg"] and "no attention head count" in merged["msg"]


def test_the_model_set_without_a_path_is_refused_by_name():
    result = run_module(node_stack, {"gather": ["model"]})
    assert result.failed and "gather holds model but model_path is empty" in result["msg"]


def test_the_model_set_beside_the_serve_node_set_in_one_call(tmp_path):
    env_script = tmp_path / "env.sh"
    env_script.write_text("export NCCL_SOCKET_IFNAME=eth0\n")
    result = run_module(node_stack, {"gather": ["model", "serve_node"], "model_path": str(MODELS / "smollm2-135m"),
                                     "serve_env_scripts": [str(env_script)], "serve_dg_cache_dir": str(tmp_path)})
    assert not result.failed, result
    assert set(result["ansible_facts"]) == {"gpufleet_model", "gpufleet_serve_node"}
    assert result["ansible_facts"]["gpufleet_model"]["architecture"] == "LlamaForCausalLM"
