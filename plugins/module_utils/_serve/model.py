# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A model directory as the serving plan reads it: ``gpufleet_model``, the facts of its ``config.json``.

One reader for the two callers: the ``model_config`` module and ``node_stack``'s ``model`` set (the serving role
reads an engine node in one module run). Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import json
import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import (
    SglangError,
    is_hub_id,
    model_facts,
)


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
