# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit on the SGLang nodes (runs before test_sglang.py, on the converged state): playbooks/audit.yml reads the
SGLang stack and the served model's config.json on every node of the group, judges the SGLANG_* rules with them, and
finds on the nodes as the sglang role left them only what the model deserves (DeepSeek-V3's FP8 checkpoint has no
ue8m0 scales: SGLANG_BLACKWELL_FP8_SCALE, a warning on B200); with a server layout the model cannot take (tp 7 for
its 128 attention heads) the same audit names SGLANG_ATTENTION_TP_HEADS on every node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INVENTORY = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
MODEL = "/opt/models/deepseek-v3"  # converge.yml's sglang_model_path


def audit(name, *extra):
    out = EPHEMERAL / name
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", INVENTORY,
                          str(REPO / "playbooks" / "audit.yml"), "-l", "b200_cluster",
                          "-e", "audit_output_dir=%s" % out, "-e", "sglang_model_path=%s" % MODEL] + list(extra),
                         check=False, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:]
    return json.loads((out / "fleet.json").read_text())


@pytest.fixture(scope="module")
def clean():
    return audit("audit-sglang")


def test_audit_reads_sglang_and_the_model(clean):
    assert sorted(clean["nodes"]) == ["b200-cluster-1", "b200-cluster-2"]
    for node in clean["nodes"].values():
        facts = node["facts"]
        assert facts["gather_errors"] == {}
        assert facts["gpufleet_sglang"]["versions"]["sglang"] == "0.5.19"  # the mirror's fixture release
        assert facts["gpufleet_sglang"]["deep_ep"]["collection"] is True
        assert facts["gpufleet_model"]["architecture"] == "DeepseekV3ForCausalLM"
        assert facts["expect"]["sglang"]["tp"] == 8 and facts["expect"]["sglang"]["transfer_engine"] == "nixl"


def test_converged_sglang_nodes_have_only_the_models_warning(clean):
    """Pins held, deep_ep the collection's, NIXL of torch's CUDA, DeepGEMM cache present: no critical finding; the
    DeepSeek-V3 config (quantization fp8, no scale_fmt) on B200 is the runbook's Blackwell FP8 warning."""
    for name, node in clean["nodes"].items():
        found = {f["id"]: f["severity"] for f in node["findings"]}
        assert found == {"SGLANG_BLACKWELL_FP8_SCALE": "warning"}, (name, found)


def test_sglang_rules_fire_in_the_audit():
    bad = audit("audit-sglang-tp7", "-e", json.dumps({"sglang_server": {
        "tp": 7, "dp": 1, "nnodes": 1, "enable_dp_attention": False, "moe_a2a_backend": "deepep",
        "deepep_mode": "normal", "env": {"SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "1024"}}}))
    for name, node in bad["nodes"].items():
        found = {f["id"]: f for f in node["findings"]}
        assert "SGLANG_ATTENTION_TP_HEADS" in found, (name, sorted(found))
        assert found["SGLANG_ATTENTION_TP_HEADS"]["severity"] == "critical"
