# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.model_config and the SGLang helpers of sglang_env without a virtualenv: the kernel package and
NIXL build per version, the NVIDIA library directories, a model's config.json read and refused by key and value,
pip's installation report made a hash lock, a pinned version against a spec. (sglang_env against a real virtualenv
and pip: tests/integration/builds/test_sglang_env.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from unit_helpers import FIXTURES, run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import model as _model
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang as _sglang
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang_probe as _sglang_probe
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import sglang_request as _sglang_request
from ansible_collections.gpufleet.deepep.plugins.modules import model_config, sglang_env

MODELS = FIXTURES / "sglang" / "models"


def test_kernel_package_rename_and_nixl_build():
    assert _sglang.kernel_package_for("0.5.8") == "sgl-kernel"
    assert _sglang.kernel_package_for("0.5.14") == "sgl-kernel"
    assert _sglang.kernel_package_for("0.5.15") == "sglang-kernel"
    assert _sglang.kernel_package_for("0.5.23") == "sglang-kernel"
    assert _sglang.torch_cuda("2.9.1+cu129") == "12.9" and _sglang.torch_cuda("2.11.0+cu130") == "13.0"
    assert _sglang.torch_cuda("2.13.0+cpu", "cuda = None\n") is None
    assert _sglang.nixl_package_for("12.9") == "nixl-cu12" and _sglang.nixl_package_for("13.0") == "nixl-cu13"
    with pytest.raises(_sglang.SglangError, match="no NIXL build"):
        _sglang.nixl_package_for("11.8")


def test_nvidia_lib_dirs_leave_pip_nvshmem_out(tmp_path):
    for name in ("cudnn", "nccl", "nvshmem", "cusparselt"):
        (tmp_path / "nvidia" / name / "lib").mkdir(parents=True)
    dirs = _sglang_probe.nvidia_lib_dirs([str(tmp_path)])
    assert [Path(d).parent.name for d in dirs] == ["cudnn", "cusparselt", "nccl"]


def test_model_config_facts():
    result = run_module(model_config, {"path": str(MODELS / "smollm2-135m")})
    f = result["ansible_facts"]["gpufleet_model"]
    assert (f["architecture"], f["num_attention_heads"], f["num_key_value_heads"], f["moe"]) == \
        ("LlamaForCausalLM", 9, 3, False)
    ds = run_module(model_config, {"path": str(MODELS / "deepseek-v3-config")})["ansible_facts"]["gpufleet_model"]
    assert ds["moe"] and ds["num_experts"] == 256 and ds["fp8"] and ds["scale_fmt"] is None
    assert len(ds["config_sha256"]) == 64


def test_model_config_refuses_hub_ids_offline():
    result = run_module(model_config, {"path": "deepseek-ai/DeepSeek-V3"})
    assert result.failed and "offline" in result["msg"] and "/lssd/models/DeepSeek-V3" in result["msg"]
    online = run_module(model_config, {"path": "deepseek-ai/DeepSeek-V3", "offline": False})
    assert not online.failed and online["ansible_facts"]["gpufleet_model"]["hub_id"] is True


def test_model_config_bad_directory(tmp_path):
    result = run_module(model_config, {"path": str(tmp_path)})
    assert result.failed and "config.json" in result["msg"]
    (tmp_path / "config.json").write_text("{not json")
    result = run_module(model_config, {"path": str(tmp_path)})
    assert result.failed and "not valid JSON" in result["msg"]


@pytest.mark.parametrize("key", ["num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads",
                                 "hidden_size", "num_hidden_layers", "num_experts", "n_routed_experts",
                                 "max_position_embeddings"])
@pytest.mark.parametrize("value, shown", [(True, "true (a boolean, not a number)"), ("abc", '"abc"'),
                                          ("64", '"64"'), (8.5, "8.5"), (-1, "-1")])
def test_a_count_that_is_not_an_integer_is_refused_naming_the_key_and_the_value(key, value, shown):
    config = {"num_attention_heads": 8} if key not in ("num_attention_heads", "n_head") else {}
    config[key] = value
    with pytest.raises(_sglang.SglangError) as refused:
        _model.model_facts(config)
    expected = "a non-negative" if key in ("num_experts", "n_routed_experts") else "a positive"
    assert str(refused.value) == "%s is %s; expected %s integer" % (key, shown, expected)


def test_a_count_of_the_text_config_is_named_there_and_zero_experts_is_a_dense_model():
    with pytest.raises(_sglang.SglangError, match=r"^text_config.num_attention_heads is 0; expected a positive"):
        _model.model_facts({"text_config": {"num_attention_heads": 0}})
    facts = _model.model_facts({"num_attention_heads": 8, "num_experts": 0, "max_position_embeddings": 4096})
    assert facts["num_experts"] == 0 and facts["moe"] is False and facts["max_position_embeddings"] == 4096


@pytest.mark.parametrize("config, words", [
    ({"num_attention_heads": "abc"}, 'num_attention_heads is "abc"; expected a positive integer'),
    ({"num_attention_heads": True}, "num_attention_heads is true (a boolean, not a number); expected a positive"),
    ({"num_attention_heads": 8, "num_key_value_heads": "eight"}, 'num_key_value_heads is "eight"; expected'),
    ({"num_attention_heads": 8, "hidden_size": False}, "hidden_size is false (a boolean, not a number)"),
])
def test_model_config_names_the_file_the_key_and_the_value_of_a_bad_count(tmp_path, config, words):
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = run_module(model_config, {"path": str(tmp_path)})
    assert result.failed and result["msg"].startswith("%s: %s" % (tmp_path / "config.json", words)), result["msg"]
    assert "names no attention head count" not in result["msg"]


def test_lock_needs_a_version():
    result = run_module(sglang_env, {"state": "lock", "python": sys.executable})
    assert result.failed and "state is lock but all of the following are missing: version" in result["msg"]


REPORT_ITEM = {"metadata": {"name": "Flashinfer_Python", "version": "0.7.2"},
               "download_info": {"url": "file:///w/flashinfer_python-0.7.2-py3-none-any.whl",
                                 "archive_info": {"hashes": {"sha256": "a" * 64}}}}


@pytest.mark.parametrize("report, exclude, expected, skipped", [
    ({"version": "1", "install": [REPORT_ITEM]}, (), {"flashinfer-python==0.7.2": ["a" * 64]}, []),
    # pip before 22.3 wrote only archive_info.hash
    ({"version": "1", "install": [{**REPORT_ITEM, "download_info": {
        "url": "https://x/f.whl", "archive_info": {"hash": "sha256=" + "B" * 64}}}]}, (),
     {"flashinfer-python==0.7.2": ["b" * 64]}, []),
    ({"version": "1", "install": [REPORT_ITEM]}, ("flashinfer_python",), {}, ["flashinfer-python==0.7.2"]),
    ({"version": "1", "install": []}, (), {}, []),
])
def test_lock_from_report(report, exclude, expected, skipped):
    assert _sglang_request.lock_from_report(report, exclude=exclude) == (expected, skipped)


@pytest.mark.parametrize("report, words", [
    (None, "expected pip's installation report version 1"),
    ({"version": "0", "install": []}, "expected pip's installation report version 1"),
    ({"version": "1", "install": {}}, "expected pip's installation report version 1"),
    ({"version": "1", "install": [{"metadata": {"name": "x"}, "download_info": {}}]}, "install[0]"),
    ({"version": "1", "install": [{"metadata": {"name": "x y", "version": "1"}, "download_info": {}}]}, "install[0]"),
    ({"version": "1", "install": [{"metadata": {"name": "src", "version": "1.0"},
                                   "download_info": {"url": "file:///src", "dir_info": {}}}]},
     "src==1.0 from file:///src has no sha256 in pip's report"),
    ({"version": "1", "install": [{**REPORT_ITEM, "download_info": {"url": "u", "archive_info": {
        "hashes": {"sha256": "xyz"}}}}]}, "flashinfer-python==0.7.2 from u has no sha256"),
    ({"version": "1", "install": [REPORT_ITEM, {**REPORT_ITEM,
                                                "metadata": {"name": "flashinfer-python", "version": "0.6.1"}}]},
     "flashinfer-python comes twice in pip's report (0.7.2 and 0.6.1)"),
])
def test_a_report_the_lock_cannot_use_is_refused_naming_the_entry(report, words):
    with pytest.raises(_sglang.SglangError) as err:
        _sglang_request.lock_from_report(report)
    assert words in str(err.value)


@pytest.mark.parametrize("spec, line, error", [
    ("torch==2.13.0+cpu", "torch==2.13.0+cpu --hash=sha256:" + "c" * 64, None),
    # a hold without the local label (the profile's torch version) is met by the pinned +cpu build (PEP 440)
    ("torch==2.13.0", "torch==2.13.0+cpu --hash=sha256:" + "c" * 64, None),
    ("torch==2.13.0+cu130", None, "requirements_hashes pins torch==2.13.0+cpu, but torch==2.13.0+cu130 is asked for"),
    ("torch==2.12.0", None, "requirements_hashes pins torch==2.13.0+cpu, but torch==2.12.0 is asked for"),
])
def test_a_pinned_version_meets_a_spec_as_pip_would(spec, line, error):
    pins = _sglang_request.check_requirements_hashes({"torch==2.13.0+cpu": ["c" * 64]})
    if error:
        with pytest.raises(_sglang.SglangError) as err:
            _sglang_request.hashed_requirements([spec], pins)
        assert error in str(err.value)
    else:
        assert _sglang_request.hashed_requirements([spec], pins) == line + "\n"
