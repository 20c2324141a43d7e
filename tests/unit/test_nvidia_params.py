# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.deepep.nvidia_params module, run through its main() in tmp_path."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpufleet.deepep.plugins.modules import nvidia_params

DEEPEP_LINE = 'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"'
LIVE_APPLIED = 'EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=1;"\n'
LIVE_APPLIED_HEX = 'EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=0x1"\n'
LIVE_BARE = "EnableStreamMemOPs: 1\nPeerMappingOverride: 1\n"


@pytest.fixture
def node(tmp_path, captured_dir):
    """A fake node: modprobe dirs etc/ and lib/ under tmp_path, live files from the captured H200."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "lib").mkdir()
    params = tmp_path / "params"
    params.write_text((captured_dir / "proc_driver_nvidia_params").read_text())
    version = tmp_path / "version"
    version.write_text((captured_dir / "proc_driver_nvidia_version").read_text())

    class Node:
        root = tmp_path
        conf = tmp_path / "etc" / "gpufleet-nvidia.conf"

        def args(self, **extra):
            base = dict(params_path=str(params), version_path=str(version), conf_path=str(self.conf),
                        modprobe_dirs=[str(tmp_path / "etc"), str(tmp_path / "lib")])
            base.update(extra)
            return base

        def live(self, text):
            if text is None:
                params.unlink()
            else:
                params.write_text(text)

        def put(self, rel, text):
            path = tmp_path / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return path

        def listing(self):
            return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    return Node()


def warnings(result):
    """The warning texts of a result (ansible-core 2.19 returns them as structured summaries)."""
    out = []
    for item in result.get("warnings", []):
        out.append(item["event"]["msg"] if isinstance(item, dict) else item)
    return out


def asked(**extra):
    values = dict(driver_options={"EnableStreamMemOPs": 1}, registry_dwords={"PeerMappingOverride": 1})
    values.update(extra)
    return values


def test_facts_only_on_captured_h200(node, module_runner):
    before = node.listing()
    result = module_runner(nvidia_params, node.args())
    assert not result.failed, result
    assert result["changed"] is False
    assert result["line"] is None
    assert node.listing() == before
    facts = result["ansible_facts"]["gpufleet_nvidia"]
    assert facts["driver_loaded"] is True
    assert facts["driver_version"] == "580.159.04"
    assert facts["driver_open_kernel_module"] is True
    assert facts["params"]["EnableStreamMemOPs"] == 0
    assert facts["params"]["RegistryDwords"] == ""
    assert facts["registry_dwords"] == {}
    assert facts["peer_mapping_override_active"] is False
    assert facts["stream_memops_enabled"] is False
    assert facts["config_files"] == []
    assert facts["persistent"]["driver_options"] == {} and facts["persistent"]["registry_dwords"] == {}
    assert result["reboot_required"] is False and facts["reboot_required"] is False
    assert result["effective"] == facts["persistent"]


def test_facts_only_reports_persistent_files_and_pending_reboot(node, module_runner):
    node.put("lib/nvidia-peermapping.conf", "options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1\n")
    result = module_runner(nvidia_params, node.args())
    assert not result.failed, result
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpufleet_nvidia"]
    (conf,) = facts["config_files"]
    assert conf["path"] == str(node.root / "lib/nvidia-peermapping.conf")
    assert conf["options"] == {"NVreg_RegistryDwords": "PeerMappingOverride=0x1"}
    assert conf["registry_dwords"] == {"PeerMappingOverride": 1}
    assert facts["persistent"]["registry_dwords"] == {"PeerMappingOverride": 1}
    assert result["reboot_required"] is True
    assert any("PeerMappingOverride" in r for r in result["reboot_reasons"])


def test_write_then_idempotent(node, module_runner):
    first = module_runner(nvidia_params, node.args(**asked()))
    assert not first.failed, first
    assert first["changed"] is True
    assert first["line"] == DEEPEP_LINE
    text = node.conf.read_text()
    assert text.startswith("# Managed by the gpufleet.deepep collection")
    assert [line for line in text.splitlines() if not line.startswith("#")] == [DEEPEP_LINE]
    assert stat.S_IMODE(os.stat(node.conf).st_mode) == 0o644
    assert [p for p in os.listdir(node.root / "etc") if p != "gpufleet-nvidia.conf"] == []
    assert first["reboot_required"] is True
    assert first["effective"]["sources"] == {"NVreg_EnableStreamMemOPs": str(node.conf),
                                             "NVreg_RegistryDwords": str(node.conf)}
    second = module_runner(nvidia_params, node.args(**asked()))
    assert not second.failed, second
    assert second["changed"] is False
    assert node.conf.read_text() == text


def test_hex_string_and_prefix_forms_write_the_same_line(node, module_runner):
    result = module_runner(nvidia_params, node.args(
        driver_options={"NVreg_EnableStreamMemOPs": "1"}, registry_dwords={"PeerMappingOverride": "0x1"}))
    assert not result.failed, result
    assert result["line"] == DEEPEP_LINE


def test_mode_is_corrected(node, module_runner):
    module_runner(nvidia_params, node.args(**asked()))
    os.chmod(node.conf, 0o600)
    result = module_runner(nvidia_params, node.args(**asked()))
    assert result["changed"] is True
    assert stat.S_IMODE(os.stat(node.conf).st_mode) == 0o644


def test_creates_missing_modprobe_dir(node, module_runner):
    conf = node.root / "fresh" / "modprobe.d" / "gpufleet-nvidia.conf"
    result = module_runner(nvidia_params, node.args(conf_path=str(conf), modprobe_dirs=[str(conf.parent)],
                                                    **asked()))
    assert not result.failed, result
    assert conf.exists()


def test_check_mode_writes_nothing(node, module_runner):
    before = node.listing()
    result = module_runner(nvidia_params, node.args(**asked()), check_mode=True, diff=True)
    assert not result.failed, result
    assert result["changed"] is True
    assert result["reboot_required"] is True
    assert result["diff"]["before"] == ""
    assert DEEPEP_LINE in result["diff"]["after"]
    assert result["ansible_facts"]["gpufleet_nvidia"]["persistent"]["registry_dwords"] == {"PeerMappingOverride": 1}
    assert node.listing() == before


def test_check_mode_absent_keeps_file(node, module_runner):
    module_runner(nvidia_params, node.args(**asked()))
    text = node.conf.read_text()
    result = module_runner(nvidia_params, node.args(state="absent"), check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["diff"] == {"before": text, "after": "", "before_header": str(node.conf),
                              "after_header": str(node.conf)}
    assert node.conf.read_text() == text


def test_diff_shows_before_and_after(node, module_runner):
    first = module_runner(nvidia_params, node.args(**asked()), diff=True)
    assert first["diff"]["before"] == ""
    assert first["diff"]["after"] == node.conf.read_text()
    old = node.conf.read_text()
    second = module_runner(nvidia_params, node.args(registry_dwords={"PeerMappingOverride": 1}), diff=True)
    assert second["changed"] is True
    assert second["diff"]["before"] == old
    assert 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"\n' in second["diff"]["after"]
    assert "EnableStreamMemOPs" not in second["diff"]["after"]
    assert second["diff"]["after"] == node.conf.read_text()


def test_absent_removes_and_is_idempotent(node, module_runner):
    module_runner(nvidia_params, node.args(**asked()))
    node.live(LIVE_APPLIED)
    result = module_runner(nvidia_params, node.args(state="absent"), diff=True)
    assert not result.failed, result
    assert result["changed"] is True
    assert not node.conf.exists()
    assert result["diff"]["after"] == ""
    # The settings are still live, and the next boot drops them.
    assert result["reboot_required"] is True
    assert len(result["reboot_reasons"]) == 2
    again = module_runner(nvidia_params, node.args(state="absent"))
    assert again["changed"] is False
    assert again["reboot_required"] is False


@pytest.mark.parametrize("live, expected", [
    (LIVE_APPLIED, False),
    (LIVE_APPLIED_HEX, False),
    (LIVE_BARE, False),
    ('EnableStreamMemOPs: 1\nRegistryDwords: ""\n', True),
    ('EnableStreamMemOPs: 0\nRegistryDwords: "PeerMappingOverride=1;"\n', True),
    (None, True),
])
def test_reboot_required_matrix(node, module_runner, live, expected):
    node.live(live)
    result = module_runner(nvidia_params, node.args(**asked()))
    assert not result.failed, result
    assert result["reboot_required"] is expected
    assert bool(result["reboot_reasons"]) is expected
    assert result["ansible_facts"]["gpufleet_nvidia"]["driver_loaded"] is (live is not None)


def test_runbook_leftovers_reported(node, module_runner):
    node.put("etc/nvidia-peermem.conf", "options nvidia NVreg_PeerMappingOverride=1\n")
    node.put("etc/nvidia-peermapping.conf", "options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1\n")
    result = module_runner(nvidia_params, node.args(**asked()))
    assert not result.failed, result
    (item,) = result["effective"]["ineffective"]
    assert item["path"] == str(node.root / "etc/nvidia-peermem.conf")
    assert item["status"] == "registry_key"
    assert 'NVreg_RegistryDwords="PeerMappingOverride=1;"' in item["fix"]
    assert any("nvidia-peermem.conf" in w and "fix:" in w for w in warnings(result))
    # nvidia-peermapping.conf sorts after the managed file but sets the same value: no conflict.
    assert result["conflicts"] == []
    assert result["effective"]["sources"]["NVreg_RegistryDwords"] == str(node.root / "etc/nvidia-peermapping.conf")
    assert result["effective"]["registry_dwords"] == {"PeerMappingOverride": 1}


def test_conflict_that_defeats_the_request_fails_and_writes_nothing(node, module_runner):
    other = node.put("lib/nvidia-peermapping.conf", 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=0;"\n')
    result = module_runner(nvidia_params, node.args(**asked()))
    assert result.failed
    assert str(other) in result["msg"]
    assert "zz-gpufleet-nvidia.conf" in result["msg"]
    assert "Nothing was written" in result["msg"]
    assert not node.conf.exists()
    (conflict,) = result["conflicts"]
    assert conflict["honoured_path"] == str(other)
    assert conflict["defeats_request"] is True


def test_conflict_warn_writes_and_reports_what_the_kernel_gets(node, module_runner):
    other = node.put("etc/zz-local.conf", "options nvidia NVreg_EnableStreamMemOPs=0\n")
    result = module_runner(nvidia_params, node.args(conflicts="warn", **asked()))
    assert not result.failed, result
    assert result["changed"] is True
    assert node.conf.exists()
    assert result["effective"]["driver_options"] == {"EnableStreamMemOPs": 0}
    assert result["effective"]["sources"]["NVreg_EnableStreamMemOPs"] == str(other)
    (conflict,) = result["conflicts"]
    assert conflict["parameter"] == "NVreg_EnableStreamMemOPs" and conflict["defeats_request"] is True
    assert any(str(other) in w and "conflicts=warn" in w for w in warnings(result))
    # What the kernel would get (0) is what the live driver shows: only RegistryDwords is pending.
    assert result["reboot_required"] is True
    assert all("EnableStreamMemOPs" not in r for r in result["reboot_reasons"])


def test_conflict_overridden_by_the_managed_file_is_only_reported(node, module_runner):
    early = node.put("lib/aa-old.conf", 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=0;"\n')
    result = module_runner(nvidia_params, node.args(**asked()))
    assert not result.failed, result
    (conflict,) = result["conflicts"]
    assert conflict["honoured_path"] == str(node.conf)
    assert conflict["defeats_request"] is False
    assert [s["path"] for s in conflict["settings"]] == [str(early), str(node.conf)]
    assert any(str(early) in w for w in warnings(result))


def test_managed_file_hidden_by_same_name_in_earlier_dir_fails(node, module_runner):
    node.put("etc/gpufleet-nvidia.conf", "# emptied by hand\n")
    conf = node.root / "lib" / "gpufleet-nvidia.conf"
    result = module_runner(nvidia_params, node.args(conf_path=str(conf), **asked()))
    assert result.failed
    assert str(node.root / "etc/gpufleet-nvidia.conf") in result["msg"]
    assert not conf.exists()


def test_conf_path_outside_modprobe_dirs_fails(node, module_runner):
    conf = node.root / "elsewhere" / "gpufleet-nvidia.conf"
    result = module_runner(nvidia_params, node.args(conf_path=str(conf), **asked()))
    assert result.failed
    assert "not in modprobe_dirs" in result["msg"]
    assert not conf.exists()


@pytest.mark.parametrize("extra, named", [
    (dict(registry_dwords={"Peer-Mapping": 1}), "Peer-Mapping"),
    (dict(registry_dwords={"PeerMappingOverride": "yes"}), "yes"),
    (dict(registry_dwords={"PeerMappingOverride": -1}), "-1"),
    (dict(driver_options={"Enable Stream": 1}), "Enable Stream"),
    (dict(driver_options={"EnableStreamMemOPs": "on"}), "on"),
    (dict(driver_options={"NVreg_PeerMappingOverride": 1}), "registry_dwords"),
    (dict(state="gone", registry_dwords={"PeerMappingOverride": 1}), "gone"),
    (dict(state="absent", registry_dwords={"PeerMappingOverride": 1}), "state=absent"),
    (dict(conflicts="ignore", registry_dwords={"PeerMappingOverride": 1}), "ignore"),
])
def test_bad_input_fails_naming_the_value_and_writes_nothing(node, module_runner, extra, named):
    before = node.listing()
    result = module_runner(nvidia_params, node.args(**extra))
    assert result.failed
    assert named in result["msg"]
    assert node.listing() == before


def test_bad_conf_path_fails(node, module_runner):
    bad = node.root / "etc" / "gpufleet-nvidia"
    result = module_runner(nvidia_params, node.args(conf_path=str(bad), **asked()))
    assert result.failed
    assert str(bad) in result["msg"] and ".conf" in result["msg"]
    assert not bad.exists()


def test_managed_file_is_read_back_as_modprobe_would(node, module_runner):
    module_runner(nvidia_params, node.args(**asked()))
    os.chmod(node.conf, 0o600)
    result = module_runner(nvidia_params, node.args())
    # Facts only: the file is read, never touched (not even its mode).
    assert stat.S_IMODE(os.stat(node.conf).st_mode) == 0o600
    facts = result["ansible_facts"]["gpufleet_nvidia"]
    (conf,) = facts["config_files"]
    assert conf["options"] == {"NVreg_EnableStreamMemOPs": 1, "NVreg_RegistryDwords": "PeerMappingOverride=1;"}
    assert facts["persistent"]["driver_options"] == {"EnableStreamMemOPs": 1}
    assert facts["persistent"]["registry_dwords"] == {"PeerMappingOverride": 1}
    assert result["changed"] is False


def test_suggested_file_name_sorts_after_the_conflicting_one(node, module_runner):
    node.put("etc/zz.conf", "options nvidia NVreg_EnableStreamMemOPs=0\n")
    result = module_runner(nvidia_params, node.args(**asked()))
    assert result.failed
    suggestion = str(node.root / "etc" / "zzz-gpufleet-nvidia.conf")
    assert suggestion in result["msg"]
    assert os.path.basename(suggestion) > "zz.conf"
    retry = module_runner(nvidia_params, node.args(conf_path=suggestion, **asked()))
    assert not retry.failed, retry
    assert retry["effective"]["sources"]["NVreg_EnableStreamMemOPs"] == suggestion


def test_option_the_params_file_does_not_list_is_warned_not_pending(node, module_runner):
    node.live(LIVE_APPLIED)
    result = module_runner(nvidia_params, node.args(**asked(driver_options={"EnableStreamMemOPs": 1,
                                                                            "EnableNonblockingOpen": 0})))
    assert not result.failed, result
    assert result["reboot_required"] is False
    assert any("EnableNonblockingOpen" in w and "cannot be checked" in w for w in warnings(result))


# A conf_path that is a symbolic link: never replaced, written, chmodded or removed through (check mode too).
def _link_to_target(node, target_text="options nvidia NVreg_EnableStreamMemOPs=0\n"):
    target = node.put("vendor/nvidia-site.conf", target_text)
    os.chmod(target, 0o600)
    os.symlink(str(target), str(node.conf))
    return target


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("request_kind", ["present", "absent", "same content"])
def test_a_conf_path_that_is_a_link_is_refused_naming_the_link_and_its_target(
        node, module_runner, check_mode, request_kind):
    target = _link_to_target(node)
    if request_kind == "same content":  # even nothing to write would chmod the target through the link
        first = node.root / "etc" / "probe.conf"
        module_runner(nvidia_params, node.args(conf_path=str(first), **asked()))
        target.write_text(first.read_text())
        first.unlink()
    before = (target.read_text(), stat.S_IMODE(os.stat(target).st_mode), node.listing())
    args = node.args(state="absent") if request_kind == "absent" else node.args(**asked())
    result = module_runner(nvidia_params, args, check_mode=check_mode)
    assert result.failed, result
    msg = result["msg"]
    assert msg.startswith("conf_path %s is a symbolic link (to %s)" % (node.conf, target)), msg
    assert "never writes, chmods or removes through a link" in msg and "Nothing was written." in msg
    assert "remove the link" in msg and str(target) in msg
    assert os.path.islink(node.conf) and os.readlink(node.conf) == str(target)
    assert (target.read_text(), stat.S_IMODE(os.stat(target).st_mode), node.listing()) == before


def test_a_dangling_conf_link_is_refused_and_not_created_through(node, module_runner):
    os.symlink(str(node.root / "nowhere" / "x.conf"), str(node.conf))
    for check_mode in (True, False):
        result = module_runner(nvidia_params, node.args(**asked()), check_mode=check_mode)
        assert result.failed and "which does not exist" in result["msg"], result
    assert not (node.root / "nowhere").exists() and os.path.islink(node.conf)


def test_a_conf_path_under_a_dangling_link_is_refused(node, module_runner):
    os.symlink(str(node.root / "gone"), str(node.root / "moddir"))
    conf = node.root / "moddir" / "gpufleet-nvidia.conf"
    result = module_runner(nvidia_params, node.args(conf_path=str(conf), modprobe_dirs=[str(node.root / "moddir")],
                                                    **asked()))
    assert result.failed and "dangling symlink" in result["msg"] and "conf_path" in result["msg"], result
    assert not (node.root / "gone").exists()


def test_a_facts_only_run_reads_through_a_conf_link(node, module_runner):
    target = _link_to_target(node)
    result = module_runner(nvidia_params, node.args())
    assert not result.failed and result["changed"] is False, result
    assert os.path.islink(node.conf) and target.read_text() == "options nvidia NVreg_EnableStreamMemOPs=0\n"
