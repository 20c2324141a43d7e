# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang rules of the audit catalogue (roles/audit/files/rules.yml, SGLANG_*): each fires on a state from the
runbook's error catalogue, stays quiet on the close good state, names the fix and carries SGLang's exact error
text; the layout rules agree with the fleetsim compile_deep_gemm fixture, which fails with that same text."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules, validate_rules

CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
RULES = {r["id"]: r for r in validate_rules(CATALOGUE) if r["id"].startswith("SGLANG_")}
MODELS = FIXTURES / "sglang" / "models"
COMPILE_DEEP_GEMM = REPO / "tools" / "fleetsim" / "fixtures" / "shared" / "sglang" / "compile_deep_gemm.py"

# A node with SGLang installed as the role leaves it: every pin held, deep_ep the collection's, NIXL of torch's CUDA.
GOOD = {
    "host": "b200-1", "groups": ["b200_cluster"], "reachable": True, "gather_errors": {},
    "expect": {"sglang": {"tp": 8, "dp": 1, "nnodes": 1, "enable_dp_attention": False, "moe_a2a_backend": "deepep",
                          "deepep_mode": "normal", "env": {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "1024"},
                          "transfer_engine": "nixl", "mooncake_dmabuf": False, "use_bundled_deepep": False}},
    "gpufleet_gpus": {"cuda_arch_list": "10.0"},
    "gpufleet_model": {"path": "/lssd/models/DeepSeek-V3", "architecture": "DeepseekV3ForCausalLM",
                       "num_attention_heads": 128, "num_key_value_heads": 128, "moe": True, "fp8": True,
                       "quantization": "fp8", "scale_fmt": "ue8m0"},
    "gpufleet_sglang": {
        "python": "/usr/bin/python3", "virtualenv": False,
        "versions": {"sglang": "0.5.8", "kernel_package": "sgl-kernel", "kernel": "0.3.21", "torch": "2.9.1+cu129",
                     "nccl": "2.28.3", "nccl_package": "nvidia-nccl-cu12", "cudnn": "9.16.0.29", "nixl": "1.5.1",
                     "nixl_package": "nixl-cu12", "mooncake": None, "sgl_deep_ep": None, "deep_ep": "1.2.1",
                     "typing_extensions": "4.16.0"},
        "torch_cuda": "12.9", "torch_cuda_major": 12, "nixl_cuda_major": 12,
        "deep_ep": {"file": "/usr/local/lib/python3.12/dist-packages/deep_ep/__init__.py", "collection": True,
                    "owners": ["deep_ep 1.2.1"], "foreign_owners": [], "reasons": []},
        "libraries": {"libcudnn.so.9": "/x/nvidia/cudnn/lib/libcudnn.so.9",
                      "libcusparseLt.so.0": "/x/nvidia/cusparselt/lib/libcusparseLt.so.0",
                      "libnvshmem_host.so.3": "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3"},
        "debian_owned": [], "transfer": {"peermem_loaded": False, "open_kernel_module": True, "dmabuf": True},
        "deepgemm_cache": {"dir": "/var/cache/sglang/deep_gemm", "files": 692}, "moved": [],
    },
}

# rule id -> (changes that make it fire, close changes that keep it quiet, the error text SGLang prints)
CASES = {
    "SGLANG_ATTENTION_TP_HEADS": (
        {"gpufleet_model.num_attention_heads": 9, "expect.sglang.tp": 2},
        {"gpufleet_model.num_attention_heads": 9, "expect.sglang.tp": 3},
        "AssertionError: assert self.total_num_heads % tp_size == 0"),
    "SGLANG_TP_NNODES": (
        {"expect.sglang.tp": 12, "expect.sglang.nnodes": 8},
        {"expect.sglang.tp": 16, "expect.sglang.nnodes": 2},
        "tp_size must be divisible by number of nodes"),
    "SGLANG_MULTINODE_DP": (
        {"expect.sglang.tp": 16, "expect.sglang.nnodes": 2, "expect.sglang.dp": 2},
        {"expect.sglang.tp": 16, "expect.sglang.nnodes": 2, "expect.sglang.dp": 2,
         "expect.sglang.enable_dp_attention": True},
        "multi-node data parallel is not supported unless dp attention!"),
    "SGLANG_DEEPEP_DISPATCH_TOKENS": (
        {"expect.sglang.env.SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "2048"},
        {"expect.sglang.env.SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "1024"},
        "assert self.num_max_dispatch_tokens_per_rank <= 1024"),
    "SGLANG_DEEP_EP_SHADOWED": (
        {"gpufleet_sglang.deep_ep.collection": False, "gpufleet_sglang.versions.sgl_deep_ep": "0.1.2.post1",
         "gpufleet_sglang.deep_ep.foreign_owners": ["sgl-deep-ep 0.1.2.post1"]},
        {"gpufleet_sglang.deep_ep.collection": False, "expect.sglang.use_bundled_deepep": True},
        "timeout (dispatch CPU)"),
    "SGLANG_PINS_MOVED": (
        {"gpufleet_sglang.moved": ["torch is 2.14.1, held at 2.9.1"]},
        {"gpufleet_sglang.moved": []},
        "undefined symbol: _ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"),
    "SGLANG_NIXL_CUDA_MISMATCH": (
        {"gpufleet_sglang.nixl_cuda_major": 13, "gpufleet_sglang.versions.nixl_package": "nixl-cu13"},
        {"gpufleet_sglang.nixl_cuda_major": None, "gpufleet_sglang.versions.nixl_package": None},
        "NIXL library version mismatch"),
    "SGLANG_MOONCAKE_NO_PEERMEM": (
        {"expect.sglang.transfer_engine": "mooncake", "gpufleet_sglang.versions.mooncake": "0.3.13.post1"},
        {"expect.sglang.transfer_engine": "mooncake", "gpufleet_sglang.versions.mooncake": "0.3.13.post1",
         "expect.sglang.mooncake_dmabuf": True},
        "RdmaTransport: Failed to register memory"),
    "SGLANG_DEEPGEMM_CACHE_MISSING": (
        {"gpufleet_sglang.deepgemm_cache.files": 0},
        {"gpufleet_sglang.deepgemm_cache.files": 0, "gpufleet_model.moe": False},
        "RuntimeError: DeepEP error: timeout (dispatch CPU)"),
    "SGLANG_BLACKWELL_FP8_SCALE": (
        {"gpufleet_model.scale_fmt": None},
        {"gpufleet_model.scale_fmt": None, "gpufleet_gpus.cuda_arch_list": "9.0"},
        "DeepGemm is enabled but the scale_fmt of checkpoint is not ue8m0. This might cause accuracy degradation "
        "on Blackwell."),
    "SGLANG_LIB_UNRESOLVED": (
        {"gpufleet_sglang.libraries.libcusparseLt\\.so\\.0": None},
        {"gpufleet_sglang.libraries.libcusparseLt\\.so\\.0": "/x/libcusparseLt.so.0"},
        "ImportError: libcusparseLt.so.0: cannot open shared object file"),
    "SGLANG_NCCL_NOT_DEEPEP_BUILD": (
        {"gpufleet_deepep": {"installed": True, "generation": "v1", "built_against": {"nccl": "2.27.5"}}},
        # DeepEP built against the very NCCL SGLang holds (site.yml's nccl phase pins the same one)
        {"gpufleet_deepep": {"installed": True, "generation": "v1", "built_against": {"nccl": "2.28.3"}}},
        "undefined symbol ncclGetLsaDevicePointer"),
    "SGLANG_TYPING_EXTENSIONS_DEBIAN": (
        {"gpufleet_sglang.debian_owned": ["typing-extensions"]},
        {"gpufleet_sglang.debian_owned": ["typing-extensions"], "gpufleet_sglang.virtualenv": True},
        "ERROR: Cannot uninstall typing_extensions 4.10.0, RECORD file not found."),
}


def mutate(doc, changes):
    out = copy.deepcopy(doc)
    for path, value in changes.items():
        keys = [k.replace("\\.", ".") for k in path.replace("\\.", "\0").split(".")]
        keys = [k.replace("\0", ".") for k in keys]
        node = out
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return out


def ids(doc):
    return [f["id"] for f in evaluate_rules(doc, CATALOGUE)]


def test_every_sglang_rule_has_a_case():
    assert set(RULES) == set(CASES)


def test_issue_15_rules_are_there():
    assert {"SGLANG_ATTENTION_TP_HEADS", "SGLANG_TP_NNODES", "SGLANG_MULTINODE_DP", "SGLANG_DEEPEP_DISPATCH_TOKENS",
            "SGLANG_DEEP_EP_SHADOWED", "SGLANG_NIXL_CUDA_MISMATCH", "SGLANG_MOONCAKE_NO_PEERMEM",
            "SGLANG_DEEPGEMM_CACHE_MISSING", "SGLANG_BLACKWELL_FP8_SCALE", "SGLANG_LIB_UNRESOLVED",
            "SGLANG_TYPING_EXTENSIONS_DEBIAN"} <= set(RULES)


def test_good_node_has_no_sglang_findings():
    assert [i for i in ids(GOOD) if i.startswith("SGLANG_")] == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_with_the_runbook_error_and_a_fix(rule_id):
    fire, _quiet, error = CASES[rule_id]
    found = [f for f in evaluate_rules(mutate(GOOD, fire), CATALOGUE) if f["id"] == rule_id]
    assert len(found) == 1
    assert error in " ".join(RULES[rule_id]["description"].split()), RULES[rule_id]["description"]
    assert len(found[0]["fix"].split()) >= 8 and found[0]["source"]


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_quiet_on_the_close_good_state(rule_id):
    assert rule_id not in ids(mutate(GOOD, CASES[rule_id][1]))


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_quiet_without_sglang_facts(rule_id):
    """A DeepEP node without SGLang (no gpufleet_sglang, no model, no expect.sglang) triggers none of them."""
    doc = {k: v for k, v in GOOD.items() if k not in ("gpufleet_sglang", "gpufleet_model")}
    doc["expect"] = {}
    assert rule_id not in ids(doc)


def test_attention_tp_is_tp_over_dp_with_dp_attention():
    doc = mutate(GOOD, {"gpufleet_model.num_attention_heads": 9, "expect.sglang.tp": 6, "expect.sglang.dp": 2,
                        "expect.sglang.enable_dp_attention": True})
    assert "SGLANG_ATTENTION_TP_HEADS" not in ids(doc)  # attention TP 3 divides 9
    doc = mutate(doc, {"expect.sglang.enable_dp_attention": False})
    assert "SGLANG_ATTENTION_TP_HEADS" in ids(doc)      # attention TP 6 does not


def test_nixl_meta_package_fires():
    assert "SGLANG_NIXL_CUDA_MISMATCH" in ids(mutate(GOOD, {"gpufleet_sglang.versions.nixl_package": "nixl"}))


def test_mooncake_with_peermem_is_quiet():
    doc = mutate(GOOD, {"expect.sglang.transfer_engine": "mooncake", "gpufleet_sglang.transfer.peermem_loaded": True})
    assert "SGLANG_MOONCAKE_NO_PEERMEM" not in ids(doc)


def _compile(tmp_path, model, *args, env=None):
    full = dict(os.environ, SGLANG_DG_CACHE_DIR=str(tmp_path / "dg"), HF_HUB_OFFLINE="1", **(env or {}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo 10.0; done\n")
    smi.chmod(0o755)
    full["PATH"] = "%s:%s" % (bin_dir, full.get("PATH", ""))
    return subprocess.run([sys.executable, str(COMPILE_DEEP_GEMM), "--model-path", str(model), *args],
                          capture_output=True, text=True, env=full, timeout=60, check=False)


@pytest.mark.parametrize("rule_id,argv,env", [
    ("SGLANG_ATTENTION_TP_HEADS", ["--tp", "2"], None),
    ("SGLANG_TP_NNODES", ["--tp", "3", "--nnodes", "2"], None),
    ("SGLANG_MULTINODE_DP", ["--tp", "2", "--dp", "2", "--nnodes", "2"], None),
])
def test_fixture_compile_deep_gemm_fails_with_the_rule_text(tmp_path, rule_id, argv, env):
    """The fleetsim compile_deep_gemm (what the Molecule scenario runs) refuses the same layouts with SGLang's
    text, which the rule's description quotes."""
    proc = _compile(tmp_path, MODELS / "smollm2-135m", *argv, env=env)
    assert proc.returncode == 1
    assert CASES[rule_id][2] in proc.stderr
    assert not (tmp_path / "dg" / "cache").exists()


def test_fixture_compile_deep_gemm_dispatch_tokens(tmp_path):
    proc = _compile(tmp_path, MODELS / "deepseek-v3-config", "--tp", "8", "--moe-a2a-backend", "deepep",
                    env={"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "2048", "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1 and CASES["SGLANG_DEEPEP_DISPATCH_TOKENS"][2] in proc.stderr


def test_fixture_compile_deep_gemm_writes_keyed_cache(tmp_path):
    proc = _compile(tmp_path, MODELS / "smollm2-135m", "--tp", "3")
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.relative_to(tmp_path / "dg") for p in (tmp_path / "dg").rglob("*") if p.is_file())
    assert files and all(str(f).startswith("cache/kernel.") for f in files)
    again = _compile(tmp_path, MODELS / "smollm2-135m", "--tp", "3")
    assert again.returncode == 0
    assert sorted(p.relative_to(tmp_path / "dg") for p in (tmp_path / "dg").rglob("*") if p.is_file()) == files
    other = _compile(tmp_path, MODELS / "smollm2-135m", "--tp", "1")
    assert other.returncode == 0
    assert len([p for p in (tmp_path / "dg").rglob("*") if p.is_file()]) > len(files)


def test_fixture_compile_deep_gemm_refuses_hub_ids_offline(tmp_path):
    proc = _compile(tmp_path, "deepseek-ai/DeepSeek-V3", "--tp", "8")
    assert proc.returncode == 1 and "HF_HUB_OFFLINE=1" in proc.stderr


def test_fixture_compile_deep_gemm_rejects_unknown_arguments(tmp_path):
    proc = _compile(tmp_path, MODELS / "smollm2-135m", "--tp", "3", "--no-such-flag")
    assert proc.returncode == 2 and "unrecognized arguments: --no-such-flag" in proc.stderr


def test_model_configs_are_valid_json():
    for cfg in MODELS.glob("*/config.json"):
        assert isinstance(json.loads(cfg.read_text()), dict)


@pytest.mark.parametrize("arch, fires", [("10.0", True), ("10.3", True), ("9.0;10.3", True), ("9.0", False),
                                         ("12.0", False)])
def test_blackwell_scale_rule_covers_every_sm100_family(arch, fires):
    """B300 and GB300 (10.3) run DeepGEMM's SM100 kernels as B200 does: the rule was written for '10.0' alone and
    stayed quiet on them."""
    found = "SGLANG_BLACKWELL_FP8_SCALE" in ids(mutate(GOOD, {"gpufleet_model.scale_fmt": None,
                                                              "gpufleet_gpus.cuda_arch_list": arch}))
    assert found is fires
