# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A model directory as the serving plan reads it: ``gpufleet_model``, the facts of its ``config.json``.

One reader for the two callers: the ``model_config`` module and ``node_stack``'s ``model`` set (the serving role
reads an engine node in one module run). Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import SglangError

_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_hub_id(value):
    """``org/name`` that is not a path on this node."""
    return bool(_HUB_ID_RE.fullmatch(str(value or ""))) and not str(value).startswith((".", "/"))


# The counts model_facts reads, each under its names in config.json (the first one given counts), and the least
# value it takes: heads, layers and sizes are positive; a config may give 0 routed experts (a dense model).
_COUNTS = (
    ("num_attention_heads", ("num_attention_heads", "n_head", "num_heads"), 1),
    ("num_key_value_heads", ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"), 1),
    ("num_experts", ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"), 0),
    ("hidden_size", ("hidden_size",), 1),
    ("num_hidden_layers", ("num_hidden_layers",), 1),
    ("max_position_embeddings", ("max_position_embeddings",), 1),
)


def _count(config, text_cfg, names, minimum):
    """The first of ``names`` given (the top level before ``text_config``) as a whole number >= ``minimum``; None
    when none is given. SglangError naming the key (``text_config.<key>`` when read there), the value and the form
    when it is not one - a JSON true, a string, a fraction or a negative number is no count."""
    for name in names:
        for where, cfg in (("", config), ("text_config.", text_cfg)):
            value = cfg.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise SglangError("%s%s is %s%s; expected %s integer" % (
                    where, name, json.dumps(value) if isinstance(value, (bool, int, float, str)) else repr(value),
                    " (a boolean, not a number)" if isinstance(value, bool) else "",
                    "a positive" if minimum > 0 else "a non-negative"))
            return value
    return None


def model_facts(config, config_text=None):
    """Facts of a model's ``config.json`` (a dict): architecture, heads, experts, quantization. A count given as
    anything but a whole number in its range raises SglangError naming the key and the value."""
    if not isinstance(config, dict):
        raise SglangError("config.json must hold a JSON object, got %s" % type(config).__name__)
    text_cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = dict(text_cfg)
    merged.update(dict((k, v) for k, v in config.items() if v is not None))
    counts = dict((fact, _count(config, text_cfg, names, minimum)) for fact, names, minimum in _COUNTS)
    heads, kv, experts = counts["num_attention_heads"], counts["num_key_value_heads"], counts["num_experts"]
    quant = merged.get("quantization_config") if isinstance(merged.get("quantization_config"), dict) else None
    quant_method = (quant or {}).get("quant_method") or (quant or {}).get("quant_algo")
    fmt = (quant or {}).get("fmt")
    archs = merged.get("architectures") if isinstance(merged.get("architectures"), list) else []
    return {
        "architectures": [str(a) for a in archs],
        "architecture": str(archs[0]) if archs else None,
        "model_type": merged.get("model_type"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv if kv is not None else heads,
        "hidden_size": counts["hidden_size"],
        "num_hidden_layers": counts["num_hidden_layers"],
        "num_experts": experts,
        "moe": experts is not None and experts > 1,
        "quantization": quant_method,
        "quantization_fmt": fmt,
        "fp8": bool(quant_method and "fp8" in str(quant_method).lower()),
        "scale_fmt": (quant or {}).get("scale_fmt"),
        "max_position_embeddings": counts["max_position_embeddings"],
        "config_sha256": hashlib.sha256(config_text.encode() if isinstance(config_text, str)
                                        else (config_text or b"")).hexdigest() if config_text is not None else None,
    }


class ModelError(Exception):
    """A model path or config.json the serving plan cannot take: the message names it and the expected form;
    ``facts`` are what was read before it (None where nothing was)."""

    def __init__(self, msg, facts=None):
        super().__init__(msg)
        self.facts = facts


def read_model(path, offline=True, root="/"):
    """``gpufleet_model`` for the model at ``path``: a local directory's config.json facts (with ``path`` and
    ``hub_id`` false), or, with ``offline`` false, ``hub_id`` true for a hub id such as ``org/name``. ``root`` is
    the tree the node's paths are read under (``/``, or a tree shaped like a node's root); messages name the node's
    paths. Raises ModelError naming what is wrong."""
    facts = {"path": path, "hub_id": False}
    local = path if root in ("/", "") or not os.path.isabs(path) else os.path.join(root, path.lstrip("/"))
    if not os.path.isdir(local):
        if is_hub_id(path):
            if offline:
                raise ModelError("model %r is a hub id, but this site is offline (offline=true): download the model "
                                 "to a directory on the node and give that path (e.g. /lssd/models/%s)"
                                 % (path, path.split("/")[-1]), facts)
            facts["hub_id"] = True
            return facts
        raise ModelError("model path %r is not a directory; expected a local model directory holding config.json "
                         "(or, with offline=false, a hub id such as deepseek-ai/DeepSeek-V3)" % path)
    config_path = os.path.join(path, "config.json")
    try:
        with open(os.path.join(local, "config.json"), "rb") as handle:
            raw = handle.read()
        config = json.loads(raw.decode("utf-8"))
        facts.update(model_facts(config, raw))
    except (IOError, OSError) as exc:
        raise ModelError("cannot read %s: %s; a model directory needs its config.json" % (config_path, exc)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError("%s is not valid JSON: %s" % (config_path, exc)) from None
    except SglangError as exc:
        raise ModelError("%s: %s" % (config_path, exc)) from None
    if facts.get("num_attention_heads") is None:
        raise ModelError("%s names no attention head count (num_attention_heads, n_head or num_heads); expected a "
                         "positive integer" % config_path, facts)
    return facts
