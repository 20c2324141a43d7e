# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build once, distribute: the build_leaders filter, the store settings the nvshmem and deepep roles share, and
the build_once role they feed with their data."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.build_once import FilterModule, build_leaders
from unit_helpers import REPO

K1 = "3f9a1c0e" * 8
K2 = "9d0f5c3e" * 8


def rec(host, key=K1, stored=False, want=True, publish=False):
    return {"host": host, "key": key, "stored": stored, "want": want, "publish": publish}


def test_first_host_of_each_key_builds():
    records = [rec("n1"), rec("n2"), rec("n3", key=K2), rec("n4", key=K2)]
    assert build_leaders(records) == {K1: "n1", K2: "n3"}


def test_batch_order_decides_not_host_names():
    assert build_leaders([rec("node-9"), rec("node-1")]) == {K1: "node-9"}


def test_a_stored_key_is_never_built_again():
    assert build_leaders([rec("n1", stored=True), rec("n2", stored=True)]) == {}


def test_hosts_that_need_nothing_are_skipped():
    # n1 is up to date with the key; n2 needs it built.
    assert build_leaders([rec("n1", want=False), rec("n2")]) == {K1: "n2"}
    assert build_leaders([rec("n1", want=False), rec("n2", want=False)]) == {}


def test_hosts_without_a_key_are_ignored():
    # A host that skipped the phase (nvshmem_enabled false, failed plan in check mode) has an empty record.
    assert build_leaders([{}, {"host": "n2", "key": None}, rec("n3")]) == {K1: "n3"}


def test_other_flags_pick_publishers():
    records = [rec("n1", want=False, publish=False), rec("n2", want=False, publish=True), rec("n3", publish=True)]
    assert build_leaders(records, "publish") == {K1: "n2"}
    assert build_leaders(records) == {K1: "n3"}


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match="expected a list"):
        build_leaders({"host": "n1"})
    with pytest.raises(AnsibleFilterError, match="record 1 is a str"):
        build_leaders([rec("n1"), "n2"])
    with pytest.raises(AnsibleFilterError, match="key 'latest', expected a hex build key"):
        build_leaders([rec("n1", key="latest")])
    with pytest.raises(AnsibleFilterError, match="names no host"):
        build_leaders([{"key": K1, "want": True}])
    with pytest.raises(AnsibleFilterError, match="want must name a flag"):
        build_leaders([rec("n1")], "")


def test_filter_is_registered():
    # The registered filter is build_leaders behind the collection's last-resort handler.
    wrapped = FilterModule().filters()["build_leaders"]
    assert wrapped.__name__ == "build_leaders" and wrapped([]) == build_leaders([]) == {}


def _yaml(path):
    return yaml.safe_load((REPO / path).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["artifact_store", "artifact_store_mode"])
def test_both_roles_default_the_store_alike(name):
    """Both roles read gpufleet_<name> (each must work alone) and must fall back to the same default."""
    nvshmem = _yaml("roles/nvshmem/defaults/main.yml")[f"nvshmem_{name}"]
    deepep = _yaml("roles/deepep/defaults/main.yml")[f"deepep_{name}"]
    assert f"gpufleet_{name} | default(" in nvshmem
    assert nvshmem == deepep
    specs = [_yaml(f"roles/{role}/meta/argument_specs.yml")["argument_specs"]["main"]["options"][f"{role}_{name}"]
             for role in ("nvshmem", "deepep")]
    assert specs[0]["type"] == specs[1]["type"]
    assert specs[0].get("choices") == specs[1].get("choices")


@pytest.mark.parametrize("role", ["nvshmem", "deepep"])
def test_every_default_is_validated(role):
    """Every role default has its spec; beyond them the spec documents the inventory-wide gpufleet_* variables the
    role reads (gpufleet_gpu_family), which no role defines."""
    defaults = _yaml(f"roles/{role}/defaults/main.yml")
    options = _yaml(f"roles/{role}/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(name for name in options if not name.startswith("gpufleet_"))


def _build_once_includes(role):
    """The include_role/import_role tasks of ``role`` that feed build_once: (entry point, vars) each."""
    found = []

    def walk(tasks):
        for task in tasks or []:
            for action in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                args = task.get(action)
                if args and args.get("name") == "gpufleet.deepep.build_once":
                    found.append((args.get("tasks_from", "main"), task.get("vars", {})))
            walk(task.get("block"))

    for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
        walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


def test_build_once_defaults_are_validated():
    defaults = _yaml("roles/build_once/defaults/main.yml")
    specs = _yaml("roles/build_once/meta/argument_specs.yml")["argument_specs"]
    for name, value in defaults.items():
        options = [spec["options"][name] for spec in specs.values() if name in spec["options"]]
        assert options, f"build_once default {name} is validated by no entry point"
        assert all(option.get("default") == value and not option.get("required") for option in options), name


# The deepep role distributes two keys through main: the wheel and DeepEP V2's JIT cache (tasks/jit.yml).
@pytest.mark.parametrize("role,entries", [("nvshmem", ["download", "main", "trust"]),
                                          ("deepep", ["download", "main", "main", "trust"])])
def test_the_phases_feed_every_required_input_of_build_once(role, entries):
    specs = _yaml("roles/build_once/meta/argument_specs.yml")["argument_specs"]
    includes = _build_once_includes(role)
    assert sorted(entry for entry, dummy in includes) == entries
    for entry, variables in includes:
        options = specs[entry]["options"]
        required = {name for name, option in options.items() if option.get("required")}
        missing, unknown = sorted(required - set(variables)), sorted(set(variables) - set(options))
        assert not missing, f"{role} does not give build_once {entry} {missing}"
        assert not unknown, f"{role} gives build_once {entry} inputs it does not validate: {unknown}"
    main = dict(includes)["main"]
    assert main["build_once_kind"] == role
    assert (REPO / "roles" / "build_once" / "tasks" / f"module_{role}.yml").is_file()


@pytest.mark.parametrize("role", ["nvshmem", "deepep", "build_once"])
def test_no_task_reads_what_a_module_returns(role):
    """The wheel's name comes from deepep_build's return value, not from a slurp of its build record."""
    for path in (REPO / "roles" / role / "tasks").glob("*.yml"):
        text = path.read_text(encoding="utf-8")
        assert "ansible.builtin.slurp" not in text and "b64decode" not in text, path
