#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_config
short_description: Facts of a local model directory's config.json (architecture, heads, experts, quantization)
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Reads C(config.json) of a model directory on the node - the one C(--model-path) of SGLang will load - and
    returns what the SGLang layout rules need - the architecture, the attention and KV head counts (attention TP
    must divide the attention heads), the routed experts (a MoE model), the quantization method and FP8 scale
    format, and the sha256 of C(config.json) (the DeepGEMM cache key).
  - A Hugging Face hub id (C(org/name)) that is not a directory on the node is refused when O(offline=true),
    since offline sites serve models from local directories only. With O(offline=false) a hub id is reported as such
    (RV(ansible_facts.gpufleet_model.hub_id)) with no config facts.
  - Multimodal configs with a C(text_config) are read through it. Read-only; no network, no import of transformers.
  - The counts it reads (the attention and KV heads, the routed experts, C(hidden_size), C(num_hidden_layers),
    C(max_position_embeddings), under any of the names listed below) must be JSON integers - a string, a JSON
    C(true), a fraction or a number below the range (0 or less; below 0 for the experts) fails the task naming the
    file, the key and the value. A config.json without an attention head count fails too.
options:
  path:
    description: The model directory (holding C(config.json)), or a hub id C(org/name).
    type: str
    required: true
  offline:
    description: The site has no hub access; a hub id is an error.
    type: bool
    default: true
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.facts
"""

EXAMPLES = r"""
- name: Read the model SGLang will serve
  gpufleet.deepep.model_config:
    path: /lssd/models/DeepSeek-V3
"""

RETURN = r"""
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    gpufleet_model:
      description: The model's config facts.
      returned: always
      type: dict
      contains:
        path:
          description: The model directory, or the hub id.
          type: str
        hub_id:
          description: O(path) is a hub id, not a local directory (with O(offline=false)).
          type: bool
        architecture:
          description: The first of C(architectures), e.g. C(DeepseekV3ForCausalLM).
          type: str
        architectures:
          description: C(architectures) of config.json.
          type: list
          elements: str
        model_type:
          description: C(model_type).
          type: str
        num_attention_heads:
          description: Attention heads (C(num_attention_heads), C(n_head) or C(num_heads); must be divisible by the
            attention TP size).
          type: int
        num_key_value_heads:
          description: KV heads (C(num_key_value_heads), C(num_kv_heads) or C(multi_query_group_num); the attention
            heads when config.json names none).
          type: int
        hidden_size:
          description: C(hidden_size).
          type: int
        num_hidden_layers:
          description: C(num_hidden_layers).
          type: int
        num_experts:
          description: Routed experts (C(n_routed_experts), C(num_experts), C(num_local_experts), C(moe_num_experts)),
            null for a dense model.
          type: int
        moe:
          description: A mixture-of-experts model (DeepEP dispatch, DeepGEMM grouped GEMMs).
          type: bool
        quantization:
          description: C(quantization_config.quant_method) (C(fp8), C(awq), ...), null when unquantized.
          type: str
        fp8:
          description: The checkpoint is FP8.
          type: bool
        scale_fmt:
          description: C(quantization_config.scale_fmt) (C(ue8m0) is what DeepGEMM expects on Blackwell), null when
            absent.
          type: str
        quantization_fmt:
          description: C(quantization_config.fmt) (C(e4m3), ...), null when absent.
          type: str
        max_position_embeddings:
          description: C(max_position_embeddings), null when config.json names none.
          type: int
        config_sha256:
          description: sha256 of config.json.
          type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.model import ModelError, read_model


def _main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="str", required=True),
                                              offline=dict(type="bool", default=True)),
                           supports_check_mode=True)
    try:
        facts = read_model(module.params["path"], module.params["offline"])
    except ModelError as exc:
        extra = {"ansible_facts": {"gpufleet_model": exc.facts}} if exc.facts is not None else {}
        module.fail_json(msg=str(exc), **extra)
    module.exit_json(changed=False, ansible_facts={"gpufleet_model": facts})


def main():
    guarded("model_config", _main)


if __name__ == "__main__":
    main()
