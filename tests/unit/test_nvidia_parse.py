# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers and decisions of module_utils/_nvidia/request.py (no Ansible needed)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import request as nv
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import modprobe as _modprobe
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import params as _nvidia_params

PROPRIETARY_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)


# --- /proc/driver/nvidia/params and version --------------------------------------------------


def test_captured_params_every_line_typed(captured_dir):
    text = (captured_dir / "proc_driver_nvidia_params").read_text()
    params = _nvidia_params.parse_params(text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(params) == len(lines) == 42
    for line in lines:
        name, raw = line.split(":", 1)
        raw = raw.strip()
        value = params[name.strip()]
        if raw.startswith('"'):
            assert isinstance(value, str) and value == raw.strip('"')
        else:
            assert isinstance(value, int) and value == int(raw)
    assert params["EnableStreamMemOPs"] == 0
    assert params["ResmanDebugLevel"] == 4294967295
    assert params["DeviceFileMode"] == 438
    assert params["RegistryDwords"] == ""
    assert params["CoherentGPUMemoryMode"] == ""


def test_captured_live_facts(captured_dir):
    facts = _nvidia_params.live_facts((captured_dir / "proc_driver_nvidia_params").read_text(),
                                      (captured_dir / "proc_driver_nvidia_version").read_text())
    assert facts["driver_loaded"] is True
    assert facts["driver_version"] == "580.159.04"
    assert facts["driver_open_kernel_module"] is True
    assert facts["registry_dwords"] == {}
    assert facts["registry_dwords_ignored"] == []
    assert facts["peer_mapping_override_active"] is False
    assert facts["stream_memops_enabled"] is False


def test_version_proprietary_and_missing():
    parsed = _nvidia_params.parse_version(PROPRIETARY_VERSION)
    assert parsed["version"] == "550.54.15"
    assert parsed["open_kernel_module"] is False
    assert _nvidia_params.parse_version("") == {"version": None, "open_kernel_module": None, "line": None}


def test_driver_not_loaded():
    facts = _nvidia_params.live_facts(None, None)
    assert facts["driver_loaded"] is False
    assert facts["params"] == {} and facts["registry_dwords"] == {}
    assert facts["driver_version"] is None
    assert facts["peer_mapping_override_active"] is False
    assert facts["stream_memops_enabled"] is False


@pytest.mark.parametrize("raw, expected", [
    ("PeerMappingOverride=1;", {"PeerMappingOverride": 1}),
    ("PeerMappingOverride=0x1", {"PeerMappingOverride": 1}),
    ("PeerMappingOverride=0X1;", {"PeerMappingOverride": 1}),
    ("PeerMappingOverride=1;RMForceStaticBar1=0x10;", {"PeerMappingOverride": 1, "RMForceStaticBar1": 16}),
    (" PeerMappingOverride = 1 ; RmFoo=2", {"PeerMappingOverride": 1, "RmFoo": 2}),
    ("RmFoo=010", {"RmFoo": 8}),
    ("PeerMappingOverride=0;", {"PeerMappingOverride": 0}),
    (";;", {}),
    ("", {}),
    (None, {}),
])
def test_registry_dwords_forms(raw, expected):
    dwords, ignored = _nvidia_params.parse_registry_dwords(raw)
    assert dwords == expected
    assert ignored == []


@pytest.mark.parametrize("raw, entry", [
    ("PeerMappingOverride", "PeerMappingOverride"),
    ("PeerMappingOverride=", "PeerMappingOverride="),
    ("=1", "=1"),
    ("A=1=2", "A=1=2"),
    ("A=one", "A=one"),
    ("A=0x100000000", "A=0x100000000"),
])
def test_registry_dwords_pieces_the_driver_skips(raw, entry):
    dwords, ignored = _nvidia_params.parse_registry_dwords("PeerMappingOverride=1;" + raw)
    assert dwords["PeerMappingOverride"] == 1 or raw.startswith("PeerMappingOverride")
    assert [i["entry"] for i in ignored] == [entry]


def test_params_registry_dwords_line_forms():
    text = 'EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=0x1"\n'
    facts = _nvidia_params.live_facts(text, None)
    assert facts["registry_dwords"] == {"PeerMappingOverride": 1}
    assert facts["peer_mapping_override_active"] is True
    assert facts["stream_memops_enabled"] is True


def test_params_bare_peer_mapping_override_line():
    facts = _nvidia_params.live_facts('PeerMappingOverride: 1\nRegistryDwords: ""\n', None)
    assert facts["params"]["PeerMappingOverride"] == 1
    assert facts["registry_dwords"] == {}
    assert facts["peer_mapping_override_active"] is True
    assert _nvidia_params.live_facts("PeerMappingOverride: 0\n", None)["peer_mapping_override_active"] is False


# --- modprobe files --------------------------------------------------------------------------


def _opts(text):
    return [(e["name"], e["value"]) for e in _modprobe.parse_modprobe_options(text)]


def test_modprobe_deepep_form():
    text = 'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"\n'
    assert _opts(text) == [("NVreg_EnableStreamMemOPs", "1"), ("NVreg_RegistryDwords", "PeerMappingOverride=1;")]


def test_modprobe_unquoted_registry_dwords_of_runbook_001():
    assert _opts("options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1\n") == [
        ("NVreg_RegistryDwords", "PeerMappingOverride=0x1")]
    merged = _modprobe.merge([dict(e, path="/etc/modprobe.d/nvidia-peermapping.conf") for e in
                              _modprobe.parse_modprobe_options("options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1\n")])
    assert merged["registry_dwords"] == {"PeerMappingOverride": 1}
    assert merged["ineffective"] == []


def test_modprobe_comments_continuations_and_other_modules():
    text = (
        "# options nvidia NVreg_EnableStreamMemOPs=7\n"
        "#options nvidia NVreg_EnableStreamMemOPs=8\n"
        "\n"
        "options nvidia-drm modeset=1\n"
        "options nvidia_uvm uvm_perf_prefetch_enable=0\n"
        "blacklist nouveau\n"
        "options nvidia NVreg_EnableStreamMemOPs=1 \\\n"
        "    NVreg_RegistryDwords=\"PeerMappingOverride=1;\"\n"
        "options\tnvidia\tNVreg_DeviceFileMode=0666\n"
    )
    entries = _modprobe.parse_modprobe_options(text)
    assert [(e["name"], e["value"], e["line"]) for e in entries] == [
        ("NVreg_EnableStreamMemOPs", "1", 7),
        ("NVreg_RegistryDwords", "PeerMappingOverride=1;", 7),
        ("NVreg_DeviceFileMode", "0666", 9),
    ]
    assert _modprobe.typed_option_value("NVreg_DeviceFileMode", "0666") == 438


def test_kernel_arg_splitting_quotes():
    assert _modprobe.split_kernel_args('NVreg_RmMsg="a b c" "NVreg_TemporaryFilePath=/var/tmp x" bare') == [
        ("NVreg_RmMsg", "a b c"), ("NVreg_TemporaryFilePath", "/var/tmp x"), ("bare", None)]


def test_bare_peer_mapping_override_of_runbook_000_is_ineffective():
    entries = _modprobe.parse_modprobe_options("options nvidia NVreg_PeerMappingOverride=1\n")
    merged = _modprobe.merge([dict(e, path="/etc/modprobe.d/nvidia-peermem.conf") for e in entries])
    assert merged["registry_dwords"] == {} and merged["driver_options"] == {}
    (item,) = merged["ineffective"]
    assert item["status"] == "registry_key"
    assert item["option"] == "NVreg_PeerMappingOverride"
    assert "ignores NVreg_PeerMappingOverride" in item["reason"]
    assert 'NVreg_RegistryDwords="PeerMappingOverride=1;"' in item["fix"]


@pytest.mark.parametrize("name, value, status", [
    ("NVreg_EnableStreamMemOPs", "1", "ok"),
    ("NVreg_EnableStreamMemOPs", "0x1", "ok"),
    ("NVreg_RegistryDwords", "PeerMappingOverride=1;", "ok"),
    ("NVreg_RmMsg", "anything", "ok"),
    ("NVreg_PeerMappingOverride", "1", "registry_key"),
    ("PeerMappingOverride", "1", "unknown"),
    ("EnableStreamMemOPs", "1", "unknown"),
    ("NVreg_NoSuchThing", "1", "unknown"),
    ("#", None, "unknown"),
    ("NVreg_EnableStreamMemOPs", "yes", "invalid"),
    ("NVreg_EnableStreamMemOPs", None, "invalid"),
])
def test_classify_option(name, value, status):
    got, reason, _fix = _modprobe.classify_option(name, value)
    assert got == status
    assert (reason is None) == (status == "ok")


def test_classify_uses_live_params_for_unlisted_names():
    assert _modprobe.classify_option("NVreg_BrandNewKnob", "1", {"BrandNewKnob": 0})[0] == "ok"
    assert _modprobe.classify_option("NVreg_BrandNewKnob", "1", {})[0] == "unknown"


def test_file_order_etc_hides_lib_and_names_sort_across_dirs():
    dirs = ["/etc/modprobe.d", "/run/modprobe.d", "/lib/modprobe.d"]
    listings = {
        "/etc/modprobe.d": ["nvidia.conf", "zz-local.conf", ".hidden.conf", "notes.txt"],
        "/run/modprobe.d": ["b.conf"],
        "/lib/modprobe.d": ["nvidia.conf", "a.conf", "zzz.conf"],
    }
    read, shadowed = _modprobe.order_config_files(dirs, listings)
    assert read == ["/lib/modprobe.d/a.conf", "/run/modprobe.d/b.conf", "/etc/modprobe.d/nvidia.conf",
                    "/etc/modprobe.d/zz-local.conf", "/lib/modprobe.d/zzz.conf"]
    assert shadowed == [("/lib/modprobe.d/nvidia.conf", "/etc/modprobe.d/nvidia.conf")]


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return [str(tmp_path / "etc"), str(tmp_path / "lib")]


def test_scan_last_file_name_wins_whatever_the_directory(tmp_path):
    dirs = _tree(tmp_path, {
        "etc/gpufleet-nvidia.conf": 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n',
        "lib/nvidia-peermapping.conf": 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=0;"\n',
    })
    view = _modprobe.scan_modprobe(dirs)
    assert view["registry_dwords"] == {"PeerMappingOverride": 0}
    assert view["sources"]["NVreg_RegistryDwords"] == str(tmp_path / "lib/nvidia-peermapping.conf")
    (conflict,) = view["conflicts"]
    assert conflict["parameter"] == "NVreg_RegistryDwords"
    assert conflict["honoured_path"] == str(tmp_path / "lib/nvidia-peermapping.conf")
    assert [s["path"] for s in conflict["settings"]] == [str(tmp_path / "etc/gpufleet-nvidia.conf"),
                                                         str(tmp_path / "lib/nvidia-peermapping.conf")]


def test_scan_same_name_in_etc_overrides_lib(tmp_path):
    dirs = _tree(tmp_path, {
        "etc/nvidia.conf": "options nvidia NVreg_EnableStreamMemOPs=1\n",
        "lib/nvidia.conf": "options nvidia NVreg_EnableStreamMemOPs=0\n",
    })
    view = _modprobe.scan_modprobe(dirs)
    assert view["driver_options"] == {"EnableStreamMemOPs": 1}
    assert view["conflicts"] == []
    by_path = dict((f["path"], f) for f in view["config_files"])
    assert by_path[str(tmp_path / "lib/nvidia.conf")]["shadowed_by"] == str(tmp_path / "etc/nvidia.conf")
    assert by_path[str(tmp_path / "etc/nvidia.conf")]["shadowed_by"] is None


def test_scan_equal_values_in_two_forms_do_not_conflict(tmp_path):
    dirs = _tree(tmp_path, {
        "etc/gpufleet-nvidia.conf": 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n',
        "etc/nvidia-peermapping.conf": "options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1\n",
    })
    view = _modprobe.scan_modprobe(dirs)
    assert view["conflicts"] == []
    assert view["registry_dwords"] == {"PeerMappingOverride": 1}


def test_scan_planned_content_overrides_disk(tmp_path):
    dirs = _tree(tmp_path, {"etc/other.conf": "options nvidia NVreg_EnableStreamMemOPs=0\n"})
    planned = str(tmp_path / "etc/gpufleet-nvidia.conf")
    view = _modprobe.scan_modprobe(dirs, overrides={planned: "options nvidia NVreg_EnableStreamMemOPs=1\n"})
    assert view["driver_options"] == {"EnableStreamMemOPs": 0}  # other.conf sorts after gpufleet-nvidia.conf
    assert nv.check_request(view, planned, {"EnableStreamMemOPs": 1}, {}) == [{
        "parameter": "NVreg_EnableStreamMemOPs", "asked": 1, "honoured_value": 0,
        "honoured_path": str(tmp_path / "etc/other.conf")}]
    assert view["conflicts"][0]["defeats_request"] is True
    removed = _modprobe.scan_modprobe(dirs, overrides={str(tmp_path / "etc/other.conf"): None})
    assert removed["config_files"] == [] and removed["driver_options"] == {}


# --- the request -----------------------------------------------------------------------------


def test_render_line_stable_order():
    line = nv.render_line({"RmMsg": "x y", "EnableStreamMemOPs": 1}, {"Zeta": 2, "PeerMappingOverride": 1})
    assert line == ('options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RmMsg="x y" '
                    'NVreg_RegistryDwords="PeerMappingOverride=1;Zeta=2;"')
    assert nv.render_line({"EnableStreamMemOPs": 1}, {"PeerMappingOverride": 1}) == \
        'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"'
    assert nv.render_line({}, {}) is None


def test_rendered_line_parses_back_to_the_request():
    line = nv.render_line({"EnableStreamMemOPs": 1}, {"PeerMappingOverride": 1, "RMForceStaticBar1": 1})
    settings = nv.managed_settings(nv.render_file(line))
    assert settings == {"driver_options": {"EnableStreamMemOPs": 1},
                        "registry_dwords": {"PeerMappingOverride": 1, "RMForceStaticBar1": 1}}


@pytest.mark.parametrize("given, expected", [
    ({"PeerMappingOverride": 1}, {"PeerMappingOverride": 1}),
    ({"PeerMappingOverride": "0x1"}, {"PeerMappingOverride": 1}),
    ({"PeerMappingOverride": "1"}, {"PeerMappingOverride": 1}),
    ({"RM_Key_2": 4294967295}, {"RM_Key_2": 4294967295}),
    (None, {}),
])
def test_validate_registry_dwords_accepts(given, expected):
    assert nv.validate_registry_dwords(given) == expected


@pytest.mark.parametrize("given, named", [
    ({"Peer-Mapping": 1}, "Peer-Mapping"),
    ({"Peer Mapping": 1}, "Peer Mapping"),
    ({"A;B": 1}, "A;B"),
    ({"PeerMappingOverride": "one"}, "one"),
    ({"PeerMappingOverride": 1.5}, "1.5"),
    ({"PeerMappingOverride": True}, "True"),
    ({"PeerMappingOverride": -1}, "-1"),
    ({"PeerMappingOverride": 4294967296}, "4294967296"),
    ({"PeerMappingOverride": "0xZZ"}, "0xZZ"),
])
def test_validate_registry_dwords_rejects(given, named):
    with pytest.raises(nv.NvidiaParamError) as err:
        nv.validate_registry_dwords(given)
    assert named in str(err.value)
    assert "expected" in str(err.value)


def test_validate_driver_options_prefix_and_types():
    clean, warnings = nv.validate_driver_options(
        {"NVreg_EnableStreamMemOPs": 1, "DeviceFileMode": "0x1b6", "RmMsg": "a b"})
    assert clean == {"EnableStreamMemOPs": 1, "DeviceFileMode": 438, "RmMsg": "a b"}
    assert warnings == []
    clean, warnings = nv.validate_driver_options({"BrandNewKnob": 1})
    assert clean == {"BrandNewKnob": 1}
    assert len(warnings) == 1 and "BrandNewKnob" in warnings[0]


@pytest.mark.parametrize("given, named", [
    ({"1Enable": 1}, "1Enable"),
    ({"Enable-Stream": 1}, "Enable-Stream"),
    ({"NVreg_": 1}, "NVreg_"),
    ({"NVreg_EnableStreamMemOPs": "on"}, "on"),
    ({"EnableStreamMemOPs": False}, "False"),
    ({"RegistryDwords": "PeerMappingOverride=1"}, "RegistryDwords"),
    ({"NVreg_PeerMappingOverride": 1}, "registry_dwords: {PeerMappingOverride: 1}"),
    ({"EnableStreamMemOPs": 1, "NVreg_EnableStreamMemOPs": 1}, "twice"),
    ({"RmMsg": 'a"b'}, 'a"b'),
])
def test_validate_driver_options_rejects(given, named):
    with pytest.raises(nv.NvidiaParamError) as err:
        nv.validate_driver_options(given)
    assert named in str(err.value)


def _persistent(driver_options=None, dwords=None):
    return {"driver_options": driver_options or {}, "registry_dwords": dwords or {}}


@pytest.mark.parametrize("params_text, persistent, removed, expected", [
    # live shows what is asked
    ('EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=0x1"\n',
     _persistent({"EnableStreamMemOPs": 1}, {"PeerMappingOverride": 1}), None, False),
    # live shows it through a bare line
    ("EnableStreamMemOPs: 1\nPeerMappingOverride: 1\n",
     _persistent({"EnableStreamMemOPs": 1}, {"PeerMappingOverride": 1}), None, False),
    # live does not show it
    ('EnableStreamMemOPs: 0\nRegistryDwords: ""\n', _persistent({}, {"PeerMappingOverride": 1}), None, True),
    ('EnableStreamMemOPs: 0\nRegistryDwords: ""\n', _persistent({"EnableStreamMemOPs": 1}), None, True),
    # driver not loaded
    (None, _persistent({}, {"PeerMappingOverride": 1}), None, True),
    (None, _persistent(), None, False),
    # nothing asked, live anything
    ('RegistryDwords: ""\n', _persistent(), None, False),
    # a removed setting that is still live
    ('EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=1;"\n', _persistent(),
     {"driver_options": {}, "registry_dwords": {"PeerMappingOverride": 1}}, True),
    ('EnableStreamMemOPs: 1\nRegistryDwords: ""\n', _persistent(),
     {"driver_options": {"EnableStreamMemOPs": 1}, "registry_dwords": {}}, True),
    # a removed setting that is not live (or only the default) needs nothing
    ('EnableStreamMemOPs: 0\nRegistryDwords: ""\n', _persistent(),
     {"driver_options": {"EnableStreamMemOPs": 0}, "registry_dwords": {"PeerMappingOverride": 1}}, False),
])
def test_reboot_matrix(params_text, persistent, removed, expected):
    live = _nvidia_params.live_facts(params_text, None)
    required, reasons, unverified = nv.reboot_check(live, persistent, removed)
    assert required is expected
    assert bool(reasons) is expected
    assert unverified == []


def test_reboot_check_does_not_loop_on_options_the_params_file_does_not_list():
    live = _nvidia_params.live_facts('EnableStreamMemOPs: 1\nRegistryDwords: ""\n', None)
    required, reasons, unverified = nv.reboot_check(
        live, _persistent({"EnableStreamMemOPs": 1, "EnableNonblockingOpen": 0}))
    assert (required, reasons, unverified) == (False, [], ["EnableNonblockingOpen"])
