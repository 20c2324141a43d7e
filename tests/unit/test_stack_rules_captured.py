# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stack catalogue's rules over what a real H200 node gave (tests/fixtures/captured/h200x1/stack-rules.json,
written by tests/gpu/test_stack_rules_gpu.py on the lent machine, 2026-12-01):

- its libmlx5 (rdma-core 50, libmlx5.so.1.24.50.0, newest MLX5_1.24) as the collection's ELF reader read it, and as
  binutils' readelf listed it: V2's libmlx5 check passes (MLX5_1.8 and GIN GDAKI's MLX5_1.19 there), with Data
  Direct off (no MLX5_1.25) said as a note, not a failure (the refuted "GIN needs MLX5_1.25");
- the NCCL a real one-rank NCCL process mapped: one copy is quiet, the second copy the run loaded by its path (the
  #710 state) is DEEPEP_NCCL_MAPPED_TWICE with both paths."""

from __future__ import annotations

import copy
import json

import yaml

from unit_helpers import FIXTURES, REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._catalogue import REFUTED
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import evaluate_rules
from test_deepep_v2_runtime import base_facts, decided

CAPTURE = json.loads((FIXTURES / "captured" / "h200x1" / "stack-rules.json").read_text())
CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
HEALTHY = json.loads((FIXTURES / "audit" / "healthy_node.json").read_text())


def test_the_captured_libmlx5_reads_as_binutils_lists_it():
    lib = CAPTURE["libmlx5"]
    assert lib["versions"] == [v for v in CAPTURE["libmlx5_readelf"] if v.startswith("MLX5_")]
    assert (lib["newest"], lib["required"], lib["gdaki"], lib["optional"]) == ("MLX5_1.24", True, True, False)


def test_v2_libmlx5_check_passes_on_the_real_library_with_data_direct_off():
    facts = base_facts()
    facts["libmlx5"] = copy.deepcopy(CAPTURE["libmlx5"])
    check = decided(facts, "libmlx5")
    assert check["status"] == "pass" and check["found"] == "MLX5_1.24", check
    assert "defines MLX5_1.8 and MLX5_1.19 (GIN GDAKI)" in check["reason"]
    assert "no MLX5_1.25: NCCL's Data Direct stays off (optional" in check["reason"]
    assert "gin_needs_mlx5_1_25" in REFUTED


def _mapped(doc, mapped):
    doc = copy.deepcopy(doc)
    doc["gpufleet_stack"]["deep_ep_import"] = {"ok": True, "mapped": mapped}
    return doc


def test_one_mapped_nccl_is_quiet_and_the_second_copy_is_found():
    one = [f for f in evaluate_rules(_mapped(HEALTHY, CAPTURE["nccl_one"]["mapped"]), CATALOGUE)
           if f["id"] == "DEEPEP_NCCL_MAPPED_TWICE"]
    assert one == []
    two = [f for f in evaluate_rules(_mapped(HEALTHY, CAPTURE["nccl_two"]["mapped"]), CATALOGUE)
           if f["id"] == "DEEPEP_NCCL_MAPPED_TWICE"]
    assert len(two) == 1 and two[0]["severity"] == "critical"
    for path in CAPTURE["nccl_two"]["mapped"]["nccl"]:
        assert path in json.dumps(two[0]["evidence"]), two[0]["evidence"]
