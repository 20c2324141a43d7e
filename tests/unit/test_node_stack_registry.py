# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack's facts sets as one registry (module_utils/_node/gather_sets.py): each set is one entry (name, fact,
options, needs, reader), GATHERABLE and FACT_NAMES derive from it, the module's gather choices (documented and in
its argument spec) are its names and the role sets', the module's options become one GatherOptions in one place,
and gather_node reads exactly the entries asked for, in the registry's order."""

from __future__ import annotations

import pytest
import yaml

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import gather_sets as _gather_sets
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.fact_sets import GatherError
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack


class _Spec(Exception):
    """Raised by the stand-in AnsibleModule to hand back the argument spec."""


def _argument_spec(monkeypatch):
    def capture(argument_spec, **kwargs):
        raise _Spec(argument_spec)
    monkeypatch.setattr(node_stack, "AnsibleModule", capture)
    with pytest.raises(_Spec) as info:
        node_stack.build_module()
    return info.value.args[0]


def test_every_entry_is_one_set_with_its_fact_options_and_needs():
    entries = _gather_sets.GATHER_SETS
    names = [entry.name for entry in entries]
    facts = [entry.fact for entry in entries]
    assert len(set(names)) == len(names) and len(set(facts)) == len(facts)
    assert all(fact.startswith("gpufleet_") for fact in facts)
    assert all(callable(entry.read) and (entry.prepare is None or callable(entry.prepare)) for entry in entries)
    # GATHERABLE and FACT_NAMES are the registry's: the default set first, then the others in the order read.
    assert set(_gather_sets.GATHERABLE) == set(names) and _gather_sets.GATHERABLE[0] == "stack"
    assert [n for n in _gather_sets.GATHERABLE if n != "stack"] == [n for n in names if n != "stack"]
    assert _gather_sets.FACT_NAMES == dict((entry.name, entry.fact) for entry in entries)
    # What a set needs is a need of the pass; what it reads is an option of the pass; no option is read by none.
    need_names = [need.name for need in _gather_sets.NEEDS]
    assert len(set(need_names)) == len(need_names)
    assert all(set(entry.needs) <= set(need_names) for entry in entries)
    assert set(need_names) == set(name for entry in entries for name in entry.needs)
    assert all(set(entry.options) <= set(_gather_sets.GATHER_FIELDS) for entry in entries)
    assert set(name for entry in entries for name in entry.options) == set(_gather_sets.GATHER_FIELDS)


def test_the_module_s_gather_choices_are_the_registry_s_and_the_role_sets(monkeypatch):
    documented = yaml.safe_load(node_stack.DOCUMENTATION)["options"]["gather"]
    spec = _argument_spec(monkeypatch)["gather"]
    expected = list(_gather_sets.GATHERABLE) + list(node_stack.ROLE_SETS)
    assert len(set(expected)) == len(expected)  # no role set shares a stack set's name
    assert sorted(documented["choices"]) == sorted(expected)
    assert spec["choices"] == expected
    assert documented["default"] == spec["default"] == ["stack"]
    # Each set's fact is documented as a return value of the module.
    returned = yaml.safe_load(node_stack.RETURN)["ansible_facts"]["contains"]
    assert set(_gather_sets.FACT_NAMES.values()) <= set(returned)


def test_an_unknown_set_is_refused_naming_it_and_the_expected_ones():
    with pytest.raises(GatherError) as info:
        _gather_sets.gather_node(["stack", "gpu", "rmda"], runner=lambda argv, timeout=None, env=None: (1, "", ""))
    assert str(info.value) == ("gather: unknown gpu, rmda; expected some of stack, nvidia, rdma, gpus, "
                               "bundled_nvshmem, sglang, serve_node, linkage, deepep_v2, nccl_ep, gpu_fabric, imex")
    # The module refuses it before reading anything, naming every choice.
    result = run_module(node_stack, {"gather": ["stack", "rmda"]})
    assert result.failed
    assert "rmda" in result["msg"] and all(name in result["msg"] for name in _gather_sets.GATHERABLE)


def test_the_module_s_options_become_one_gather_options(monkeypatch):
    """Every field of GatherOptions is an option of the module of the same name or one derived in
    DERIVED_GATHER_OPTIONS (root and sysfs_root are the module's private ones); the module's defaults are the
    pass's, but for sglang_python (the module's defaults to its python)."""
    spec = _argument_spec(monkeypatch)
    derived = set(node_stack.DERIVED_GATHER_OPTIONS)
    assert derived <= set(_gather_sets.GATHER_FIELDS)
    assert set(_gather_sets.GATHER_FIELDS) - derived - {"root", "sysfs_root"} <= set(spec)
    params = dict((name, option.get("default")) for name, option in spec.items())
    params.update(root=node_stack._ROOT, sysfs_root=node_stack._SYSFS_ROOT)
    options = node_stack.gather_options(params)
    assert isinstance(options, _gather_sets.GatherOptions)

    def plain(value):
        return list(value) if isinstance(value, tuple) else value
    differ = [field for field in _gather_sets.GATHER_FIELDS
              if plain(getattr(options, field)) != plain(getattr(_gather_sets.GatherOptions(), field))]
    assert differ == ["sglang_python"] and options.sglang_python == options.python
    changed = node_stack.gather_options(dict(params, import_when="changed", sglang_python="/opt/sg/bin/python",
                                             dpkg_packages=["rdma-core"], cuda_home="/opt/cuda"))
    assert changed.import_check == "changed" and changed.sglang_python == "/opt/sg/bin/python"
    assert changed.dpkg_packages == ["rdma-core"] and changed.sglang_cuda_home == "/opt/cuda"
    assert node_stack.gather_options(dict(params, import_check=False, import_when="changed")).import_check is False


def test_gather_node_reads_the_entries_asked_for_in_the_registry_s_order(monkeypatch, tmp_path):
    """Through each entry's reader and prepare only: the sets asked for, once each, in the registry's order
    whatever the order asked; a set its prepare refuses is left out with that error; a reader that raises costs
    its own set."""
    read = []

    def reader(entry):
        def read_set(ctx):
            read.append(entry.name)
            assert isinstance(ctx.options, _gather_sets.GatherOptions) and ctx.options.timeout == 3
            if entry.name == "serve_node":
                raise ValueError("broken")
            return {"set": entry.name, "before": sorted(ctx.facts)}
        return read_set

    entries = []
    for entry in _gather_sets.GATHER_SETS:
        prepare = (lambda ctx: "refused") if entry.name == "sglang" else None
        entries.append(entry._replace(read=reader(entry), prepare=prepare, needs=()))
    monkeypatch.setattr(_gather_sets, "GATHER_SETS", tuple(entries))
    options = _gather_sets.GatherOptions(root=str(tmp_path), sysfs_root=str(tmp_path), timeout=3)
    facts, errors = _gather_sets.gather_node(["deepep_v2", "sglang", "serve_node", "stack", "nvidia"], options,
                                             runner=lambda argv, timeout=None, env=None: (1, "", ""))
    assert read == ["nvidia", "stack", "serve_node", "deepep_v2"]
    assert list(facts) == ["gpufleet_nvidia", "gpufleet_stack", "gpufleet_deepep_v2"]
    assert facts["gpufleet_deepep_v2"]["before"] == ["gpufleet_nvidia", "gpufleet_stack"]
    assert errors == {"gpufleet_sglang": "refused", "gpufleet_serve_node": "ValueError: broken"}


def test_the_default_options_and_set():
    facts, errors = _gather_sets.gather_node(["serve_node"], runner=lambda argv, timeout=None, env=None:
                                             (1, "", "no ip here"))
    assert errors == {} and facts["gpufleet_serve_node"]["deepgemm_dir"] == _gather_sets.GatherOptions().serve_dg_cache_dir
    assert _gather_sets.GatherOptions().timeout == 60 and _gather_sets.GatherOptions().import_check is True
