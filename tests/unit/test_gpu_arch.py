# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A profile declares its GPU family once (issue 48, "a profile is one object"): ``gpufleet_gpu_family`` in its
group_vars, from which the roles derive the arch settings it used to spell three times in two notations
(``preflight_expected_cuda_arch``, ``nvshmem_cuda_arch``, ``deepep_arch_list``) and by which the verify roles choose
its bandwidth gate. Here: the filter that derives them (plugins/filter/gpu_arch.py), the roles' defaults that call it,
the inventories that declare the family and spell no arch, the gate chosen by the declared family, and the simulated
fleet's own profile variables. The same derivation through a real play over the inventories:
tests/integration/controller/test_profile_family_play.py."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import gpu_arch as ga
from ansible_collections.gpufleet.deepep.plugins.filter import verify_helpers as vf
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _gpu_families as gf
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _settings, _thresholds
from ansible_collections.gpufleet.deepep.plugins.modules import play_settings
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _settings

from tools.fleetsim import fakehw

from unit_helpers import REPO

# The three arch settings a profile no longer spells: variable -> (role, notation, as a list).
DERIVED = {"preflight_expected_cuda_arch": ("preflight", "torch", True),
           "nvshmem_cuda_arch": ("nvshmem", "cmake", False),
           "deepep_arch_list": ("deepep", "torch", False)}
INVENTORIES = ("example", "fleetsim")
# What each profile's group_vars spelt before it declared its family (preflight_expected_cuda_arch,
# nvshmem_cuda_arch, deepep_arch_list), and the family it declares now; a profile added since (b300, h200_p5en) with what
# it derives: sm_103 is its own arch, never the B200's 10.0 (b300, gb300_nvl72).
BEFORE = {"b300": ("b300", ["10.3"], "103", "10.3"), "h200_p5en": ("h200", ["9.0"], "90", "9.0"),
          "gb200_nvl72": ("gb200", ["10.0"], "100", "10.0"), "gb300_nvl72": ("gb300", ["10.3"], "103", "10.3"),
          "b200_cuda13": ("b200", ["10.0"], "100", "10.0"), "b200_gcp_cuda129": ("b200", ["10.0"], "100", "10.0"),
          "h100": ("h100", ["9.0"], "90", "9.0"), "h200": ("h200", ["9.0"], "90", "9.0"),
          "a100": ("a100", ["8.0"], "80", "8.0")}


def _yaml(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _defaults(role):
    return _yaml(REPO / "roles" / role / "defaults" / "main.yml")


def _options(role):
    return _yaml(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


# ----------------------------------------------------------------------------------------------------- the filter
ARCH = [("a100", "8.0", "80"), ("a800", "8.0", "80"), ("h100", "9.0", "90"), ("h800", "9.0", "90"),
        ("h200", "9.0", "90"), ("h20", "9.0", "90"), ("b200", "10.0", "100"), ("gb200", "10.0", "100"),
        ("b300", "10.3", "103"), ("gb300", "10.3", "103")]


def _filters():
    """The filters as Ansible calls them (guarded: an unexpected error names the filter)."""
    return ga.FilterModule().filters()


def test_every_family_of_the_registry_is_checked_below():
    assert sorted(family for family, _t, _c in ARCH) == sorted(gf.FAMILIES)


@pytest.mark.parametrize("family,torch,cmake", ARCH)
def test_the_filter_gives_every_family_in_both_notations(family, torch, cmake):
    arch = _filters()["gpu_arch"]
    assert arch(family, "torch") == torch and arch(family, "cmake") == cmake
    assert arch(family, "torch", as_list=True) == [torch] and arch(family, "cmake", as_list=True) == [cmake]


@pytest.mark.parametrize("family", [None, ""])
def test_no_family_declared_gives_nothing_so_the_roles_read_the_gpus(family):
    assert ga.gpu_arch(family, "torch") == "" and ga.gpu_arch(family, "cmake") == ""
    assert ga.gpu_arch(family, "torch", as_list=True) == []


@pytest.mark.parametrize("family", ["b400", "B200", "gh200", " b200", "default"])
def test_an_unknown_family_is_refused_naming_it_and_the_known_ones(family):
    for notation in ("torch", "cmake"):
        with pytest.raises(AnsibleFilterError) as info:
            _filters()["gpu_arch"](family, notation)
        message = str(info.value)
        assert message.startswith("gpu_arch: %r is no GPU family the collection knows; expected one of a100, a800, "
                                  "b200, b300, gb200, gb300, h100, h20, h200, h800" % family), message
        assert "gpufleet_gpu_family" in message and "unexpected" not in message


@pytest.mark.parametrize("family", [100, 9.0, ["b200"], {"family": "b200"}, True])
def test_a_family_that_is_not_a_name_is_refused_naming_its_type(family):
    with pytest.raises(AnsibleFilterError, match=r"gpu_arch: GPU family .* is a %s, not a family name"
                       % type(family).__name__):
        _filters()["gpu_arch"](family, "torch")


@pytest.mark.parametrize("notation", ["sm", "TORCH", "", None, "pytorch"])
def test_an_unknown_notation_is_refused_naming_the_two(notation):
    with pytest.raises(AnsibleFilterError, match=r"gpu_arch: notation %s is not one of torch, cmake"
                       % re.escape(repr(notation))):
        _filters()["gpu_arch"]("b200", notation)


def test_as_list_must_be_a_boolean():
    with pytest.raises(AnsibleFilterError, match="gpu_arch: as_list must be true or false; got 'yes'"):
        ga.gpu_arch("b200", "torch", as_list="yes")


def test_the_filter_is_documented_as_it_is_called():
    doc = _yaml(REPO / "plugins" / "filter" / "gpu_arch.yml")["DOCUMENTATION"]
    assert doc["name"] == "gpu_arch" and doc["positional"] == "_input, notation"
    assert doc["options"]["notation"]["choices"] == list(ga.NOTATIONS)
    assert doc["options"]["as_list"] == {"description": doc["options"]["as_list"]["description"], "type": "bool",
                                         "default": False}


# --------------------------------------------------------------------------------------------- the roles' defaults
@pytest.mark.parametrize("variable", sorted(DERIVED))
def test_the_roles_derive_their_arch_setting_from_the_declared_family(variable):
    """The default calls the filter on gpufleet_gpu_family (one short expression: the logic is the filter's); a value
    the user sets wins by Ansible's precedence (any inventory, play or extra var beats a role default)."""
    role, notation, as_list = DERIVED[variable]
    expected = "{{ gpufleet_gpu_family | default('') | gpufleet.deepep.gpu_arch('%s'%s) }}" % (
        notation, ", as_list=true" if as_list else "")
    assert _defaults(role)[variable] == expected
    options = _options(role)
    # a templated default is described, not shown as a value (the spec's default would be the raw template)
    assert "default" not in options[variable] and "gpufleet_gpu_family" in str(options[variable]["description"])
    assert options["gpufleet_gpu_family"]["type"] == "str" and "default" not in options["gpufleet_gpu_family"]
    assert options[variable]["type"] == ("list" if as_list else "str")


def test_no_role_default_reads_a_simulator_variable():
    """Issue 48 point 7: the simulated fleet's variables (fleetsim_*) stay out of the roles; its inventory provides
    gpufleet_profile and gpufleet_gpu_family like any site's."""
    for path in sorted((REPO / "roles").glob("*/defaults/main.yml")):
        assert "fleetsim" not in path.read_text(), path
    for path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        assert "fleetsim_profile" not in path.read_text(), path


@pytest.mark.parametrize("role, choices", [("verify_intranode", 3), ("verify_internode", 4)])
def test_the_verify_roles_read_the_declared_family(role, choices):
    defaults = _defaults(role)
    assert defaults[role + "_gpu_family"] == "{{ gpufleet_gpu_family | default('') }}"
    # unset, the profile is the declared family (its own gate), else 'default' (the loose gate, asked for)
    assert defaults[role + "_profile"] == "{{ gpufleet_profile | default(%s_gpu_family or 'default') }}" % role
    options = _options(role)
    assert options[role + "_gpu_family"]["type"] == "str" and "default" not in options[role + "_gpu_family"]
    # every choice of the gate passes the family: the checks before any host runs (the stage's and the low-latency
    # stage's), and the judge of every run (ep_test's judge option; the roles choose no gate in Jinja any more)
    text = "\n".join(path.read_text() for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")))
    assert text.count('family: "{{ %s_gpu_family }}"' % role) == choices, text
    assert text.count("form: profile") == (3 if role == "verify_internode" else 2), text
    assert text.count("gpufleet.deepep.ep_test:") == len(re.findall(r"^    judge:", text, re.M)) >= 1
    calls = re.findall(r"gpufleet\.deepep\.verify_thresholds\(([^)]*)\)", text)
    assert all("family=%s_gpu_family" % role in call for call in calls), calls


# ----------------------------------------------------------------------------------------------- the inventories
def _profile_groups(inventory):
    """The profile groups of an inventory: the groups directly under ``all`` in its hosts.yml."""
    return sorted(_yaml(REPO / "inventories" / inventory / "hosts.yml")["all"]["children"])


def _ancestors(inventory):
    """group -> its parent groups, from the inventory's hosts.yml."""
    parents = {}

    def walk(name, node):
        for child, sub in ((node or {}).get("children") or {}).items():
            parents.setdefault(child, []).append(name)
            walk(child, sub)

    walk("all", _yaml(REPO / "inventories" / inventory / "hosts.yml")["all"])
    return parents


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_every_profile_declares_its_gpu_family_once_and_spells_no_arch(inventory):
    """So the arch cannot be written twice again: each profile group's group_vars declares gpufleet_gpu_family, a
    family of the registry, and no group_vars file of the inventory sets one of the derived variables. A group below
    a profile (b200_sglang_current) takes its parent's family and does not declare it again."""
    group_vars = REPO / "inventories" / inventory / "group_vars"
    profiles = _profile_groups(inventory)
    assert set(profiles) == set(BEFORE), profiles
    for profile in profiles:
        values = _yaml(group_vars / ("%s.yml" % profile))
        assert values.get("gpufleet_gpu_family") in gf.FAMILIES, (inventory, profile)
        assert values["gpufleet_gpu_family"] == BEFORE[profile][0], (inventory, profile)
        # where the profile's name carries a family word, it is the declared family
        assert gf.family_of(values.get("gpufleet_profile")) in (None, values["gpufleet_gpu_family"]), profile
    parents = _ancestors(inventory)
    for path in sorted(group_vars.glob("*.yml")):
        values = _yaml(path)
        spelt = sorted(set(values) & set(DERIVED))
        assert not spelt, "%s spells %s: declare gpufleet_gpu_family instead" % (path, ", ".join(spelt))
        if path.stem not in profiles and "gpufleet_gpu_family" in values:
            raise AssertionError("%s declares gpufleet_gpu_family again below its profile %s"
                                 % (path, parents.get(path.stem)))
        if path.stem not in profiles and "gpufleet_profile" in values:
            assert set(parents.get(path.stem, [])) & set(profiles), path


@pytest.mark.parametrize("inventory", INVENTORIES)
@pytest.mark.parametrize("profile", sorted(BEFORE))
def test_the_derived_arch_is_what_each_profile_spelt_before(inventory, profile):
    family = _yaml(REPO / "inventories" / inventory / "group_vars" / ("%s.yml" % profile))["gpufleet_gpu_family"]
    derived = (ga.gpu_arch(family, "torch", as_list=True), ga.gpu_arch(family, "cmake"), ga.gpu_arch(family, "torch"))
    assert derived == BEFORE[profile][1:], (inventory, profile, derived)


# ------------------------------------------------------------------------------------------ the gate by the family
def _tables():
    """(the role's thresholds variable, the table its gate is chosen from: the profile object's gates of the role's
    scope with the role's overrides over them, as select_thresholds(..., scope=) builds it)."""
    return [(role + "_thresholds", dict(gf.gate_table(role.split("_")[1]), **_defaults(role)[role + "_thresholds"]))
            for role in ("verify_intranode", "verify_internode")]


@pytest.mark.parametrize("profile,family,matched", [
    ("mycluster", "h200", "h200"),        # named after its site: gated as its hardware, no longer refused
    ("gcp_b200", "h100", "h100"),         # the declaration wins over a family word the name carries
    ("b200_gcp_cuda129", "b200", "b200"),
    ("", "a100", "a100"), (None, "b200", "b200"),
    ("default", "b200", "default"),       # 'default' by name asks for the loose gate knowingly
    ("h100_ib", "", "h100"), ("h100_ib", None, "h100"),   # no family declared: the name's token, as before
])
def test_the_gate_is_chosen_by_the_declared_family_after_the_exact_name(profile, family, matched):
    for name, table in _tables():
        chosen = _thresholds.select_thresholds(table, profile, table_name=name, family=family)
        assert chosen["matched"] == matched, (name, profile, family)
        assert vf.verify_thresholds(table, profile, family=family)["matched"] == matched
    # an entry named as the profile itself still comes first
    table = dict(_tables()[0][1], mycluster={"dispatch_bf16_nvl_gbps": 1})
    assert _thresholds.select_thresholds(table, "mycluster", family="h200")["matched"] == "mycluster"


def test_the_gate_of_a_declared_family_keeps_its_gpu_count_shape():
    table = _tables()[0][1]
    chosen = _thresholds.select_thresholds(table, "mycluster", gpus=4, family="h100")
    assert chosen["shape"] == "measured" and chosen["thresholds"] == \
        _thresholds.select_thresholds(table, "h100", gpus=4)["thresholds"]


@pytest.mark.parametrize("family", ["a800", "h20"])
def test_a_declared_family_without_a_gate_is_refused_as_a_profile_naming_it_is(family):
    for name, table in _tables():
        with pytest.raises(_thresholds.VerifyInputError) as info:
            _thresholds.select_thresholds(table, "mycluster", table_name=name, family=family)
        message = str(info.value)
        assert message.startswith("profile 'mycluster' declares (gpufleet_gpu_family) the GPU family %s (compute "
                                  "capability %s), and %s has no %s entry (it gates a100, b200, b300, gb200, gb300, "
                                  "h100, h200, h800)"
                                  % (family, gf.FAMILIES[family], name, family)), message
        # the same refusal, word for word after the subject, as a profile whose name carries that family
        named = str(pytest.raises(_thresholds.VerifyInputError, _thresholds.select_thresholds, table, "site_" + family,
                                  table_name=name).value)
        assert message.split(" the GPU family ", 1)[1] == named.split(" the GPU family ", 1)[1]
        assert "Add an entry for %s to %s" % (family, name) in message and "set the profile to 'default'" in message
    # a name carrying a gated family does not rescue a declared family without a gate
    with pytest.raises(_thresholds.VerifyInputError, match="declares .* the GPU family h20"):
        _thresholds.select_thresholds(_tables()[0][1], "b200_lab", family="h20")
    # through the scope, the refusal says why the collection has no gate for it
    with pytest.raises(_thresholds.VerifyInputError, match="the collection has no intranode gate for %s \\(%s"
                       % (family, re.escape(gf.UNGATED[family]))):
        _thresholds.select_thresholds({}, "mycluster", family=family, scope="intranode")


@pytest.mark.parametrize("family", ["b400", "B200", 100, ["b200"]])
def test_an_unknown_declared_family_is_refused_listing_the_known_ones(family):
    with pytest.raises(_thresholds.VerifyInputError) as info:
        _thresholds.select_thresholds(_tables()[0][1], "mycluster", family=family)
    assert str(info.value).startswith("GPU family %r (gpufleet_gpu_family) is no family the collection knows; "
                                      "expected one of a100, a800, b200" % (family,)), str(info.value)


def test_the_check_before_any_host_runs_takes_the_family():
    name, table = _tables()[0]
    item = {"name": "verify_intranode_profile", "form": "profile", "table": table, "table_name": name}
    assert _settings.check_setting("p", "mycluster", "profile", table=table, family="h200") == "h200"
    assert _settings.judge([dict(item, value="mycluster", family="h200")]) == \
        {"changed": False, "settings": {"verify_intranode_profile": "h200"}}
    assert _settings.judge([dict(item, value="gcp_b200", family="")]) == \
        {"changed": False, "settings": {"verify_intranode_profile": "b200"}}
    refused = _settings.judge([dict(item, value="mycluster", family="a800")])
    assert refused["failed"] is True and refused["msg"].startswith(
        "1 setting refused before any host runs: verify_intranode_profile: profile 'mycluster' declares "
        "(gpufleet_gpu_family) the GPU family a800"), refused["msg"]
    # as the verify roles call it: the role's overrides (none) over the collection's gates of the scope
    scoped = dict(item, table={}, scope="intranode")
    assert _settings.judge([dict(scoped, value="site", family="b300")]) == \
        {"changed": False, "settings": {"verify_intranode_profile": "b300"}}
    refused = _settings.judge([dict(scoped, value="site", family="h20")])
    assert "the collection has no intranode gate for h20" in refused["msg"], refused
    assert "family" in _settings.ARGUMENT_SPEC["settings"]["options"]
    options = yaml.safe_load(play_settings.DOCUMENTATION)["options"]["settings"]["suboptions"]
    assert options["family"]["type"] == "str" and options["scope"]["choices"] == ["intranode", "internode"]
    assert sorted(options) == sorted(_settings.ARGUMENT_SPEC["settings"]["options"])


def test_the_gate_does_not_change_for_the_shipped_profiles():
    """Each shipped profile and scenario is gated as before: the declared family is the one its name carried."""
    for inventory in INVENTORIES:
        for profile in BEFORE:
            values = _yaml(REPO / "inventories" / inventory / "group_vars" / ("%s.yml" % profile))
            for name, table in _tables():
                with_family = _thresholds.select_thresholds(table, values["gpufleet_profile"], table_name=name,
                                                            family=values["gpufleet_gpu_family"])
                by_name = _thresholds.select_thresholds(table, values["gpufleet_profile"], table_name=name)
                assert with_family == by_name, (inventory, profile, name)
    verify = _yaml(REPO / "molecule" / "verify" / "molecule.yml")["provisioner"]["inventory"]["group_vars"]["all"]
    assert (verify["gpufleet_profile"], verify["gpufleet_gpu_family"]) == ("gcp_b200", "b200")


# ------------------------------------------------------------------------------------------ the simulated fleet
@pytest.mark.parametrize("name", fakehw.list_profiles())
def test_fleetsim_hardware_has_the_family_the_registry_gives_its_gpus(name):
    """The simulated fleet's inventory gives a harness group its hardware's gpufleet_gpu_family (tools/fleetsim
    fleet.profile_vars), read from the GPU model's name by the simulator itself: it agrees with the registry."""
    profile = fakehw.load_profile(name)
    family = fakehw.gpu_family(profile)
    assert family == gf.family_of(profile["gpu_model"]["name"]), name
    assert gf.compute_capability(family) == profile["gpu_model"]["compute_capability"], name


def test_fakehw_reads_the_model_word_of_the_gpu_name():
    for model, family in (("NVIDIA B200", "b200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"),
                          ("NVIDIA H200", "h200"), ("GB200", "gb200")):
        profile = copy.deepcopy({"gpu_model": {"name": model}})
        assert fakehw.gpu_family(profile) == family, model


@pytest.mark.parametrize("name", fakehw.list_profiles())
def test_fleetsim_hardware_declares_the_fabric_its_nics_run(name):
    """The simulated fleet's inventory gives a harness group with RDMA NICs its hardware's gpufleet_fabric (the NIC
    model's link layer), a fabric of the profile object's table whose RDMA transport is what the node's
    gpufleet_rdma facts read on that hardware; a group without RDMA NICs declares none."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS
    from tools.fleetsim import fleet

    profile = fakehw.load_profile(name)
    declared = fleet.profile_vars(name).get("gpufleet_fabric")
    if not profile.get("nics"):
        assert declared is None, name
        return
    assert declared in FABRICS, name
    layer = profile["nic_model"]["link_layer"]
    assert FABRICS[declared]["rdma_transport"] == {"InfiniBand": "infiniband", "Ethernet": "roce",
                                                   "Unknown": "efa"}[layer], name
    if layer == "Unknown":
        assert profile["nic_model"]["driver"] == FABRICS[declared]["kernel_module"] == "efa", name


def test_the_example_profiles_declare_the_fabric_of_their_nics():
    """The example profiles with RDMA NICs declare their fabric once; the NVLink-only ones declare none."""
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS

    group_vars = REPO / "inventories" / "example" / "group_vars"
    declared = {}
    for path in sorted(group_vars.glob("*.yml")):
        data = _yaml(path) or {}
        if "gpufleet_gpu_family" in data:
            declared[path.stem] = (data.get("gpufleet_fabric"), bool(data.get("gpufleet_intranode_only")))
    for name, (fabric, intranode_only) in declared.items():
        assert (fabric is None) == intranode_only, name
        assert fabric is None or fabric in FABRICS, name
    assert declared["h100"][0] == "infiniband" and declared["b200_gcp_cuda129"][0] == "roce"


# ------------------------------------------------------------------------------------------ the fabric filter
def test_the_fabric_filter_reads_the_profile_objects_fabrics():
    from ansible_collections.gpufleet.deepep.plugins.filter import fabric as ff
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS

    assert ff.fabric("efa", "kernel_module") == "efa" and ff.fabric("roce", "kernel_module") == "mlx5_core"
    assert ff.fabric("efa", "mlx5dv") is False and ff.fabric("infiniband", "mlx5dv") is True
    names = [name for name, dummy, dummy2 in ff.fabric("efa", "env")]
    assert names == ["NCCL_GIN_TYPE", "NCCL_SYM_GIN_KERNELS_ENABLE", "FI_PROVIDER"]
    assert ff.fabric("", "env", default=[]) == [] and ff.fabric(None, "mlx5dv", default=True) is True
    # a copy: a caller cannot change the table
    ff.fabric("efa", "env").clear()
    assert FABRICS["efa"]["env"]
    for every in FABRICS.values():
        assert set(ff.SETTINGS) <= set(every)


@pytest.mark.parametrize("name, setting, word", [
    ("ib", "env", "fabric 'ib' is not one the collection knows; expected one of efa, infiniband, roce"),
    ("efa", "speed", "setting 'speed' is not one of"),
    ("", "env", "no fabric declared (gpufleet_fabric is empty) and no default given for 'env'"),
    (["efa"], "env", "is a list, not a fabric name"),
])
def test_the_fabric_filter_refuses_naming_the_value(name, setting, word):
    from ansible_collections.gpufleet.deepep.plugins.filter import fabric as ff

    with pytest.raises(AnsibleFilterError, match=re.escape(word)):
        ff.fabric(name, setting)


# ------------------------------------------------------------------------------------------ the host_arch filter
@pytest.mark.parametrize("arch, cuda, doca, multiarch, deb", [
    ("x86_64", "x86_64", "x86_64", "x86_64-linux-gnu", "amd64"),
    ("aarch64", "sbsa", "arm64-sbsa", "aarch64-linux-gnu", "arm64"),
    ("arm64", "sbsa", "arm64-sbsa", "aarch64-linux-gnu", "arm64"),
])
def test_the_host_arch_filter_names_each_cpus_artifacts(arch, cuda, doca, multiarch, deb):
    from ansible_collections.gpufleet.deepep.plugins.filter.host_arch import host_arch

    got = [host_arch(arch, s) for s in ("cuda_repo", "doca_repo", "multiarch", "deb")]
    assert got == [cuda, doca, multiarch, deb]


def test_every_familys_hosts_have_their_artifacts_named():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._host_arch import HOST_ARCHES

    assert {spec["host_arch"] for spec in gf.SPECS.values()} <= set(HOST_ARCHES)


@pytest.mark.parametrize("arch, setting, word", [
    ("riscv64", "deb", "host architecture 'riscv64' is not one the collection knows; expected one of aarch64, x86_64"),
    ("x86_64", "rpm", "setting 'rpm' is not one of cuda_repo, doca_repo, multiarch, deb"),
    (None, "deb", "host architecture None is not one the collection knows"),
])
def test_the_host_arch_filter_refuses_naming_the_value(arch, setting, word):
    from ansible_collections.gpufleet.deepep.plugins.filter.host_arch import host_arch

    with pytest.raises(AnsibleFilterError, match=re.escape(word)):
        host_arch(arch, setting)
