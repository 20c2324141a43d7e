# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Boot semantics of the simulated fleet: modprobe options, DOCA-OFED rename, modules at boot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.fleetsim import boot, fakehw, modprobe_conf


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def params_file(proc_dir: Path) -> dict:
    out = {}
    for line in (proc_dir / "params").read_text().splitlines():
        name, value = line.split(":", 1) if ":" in line else (line, "")
        out[name.strip()] = value.strip()
    return out


def boot_params(root: Path, tmp_path: Path, profile_name: str = "gcp_b200") -> dict:
    profile = fakehw.load_profile(profile_name)
    plan = boot.plan_boot(root, profile)
    proc = tmp_path / "proc"
    fakehw.render_nvidia_proc(profile, proc, nvidia_options=plan["nvidia_options"])
    return params_file(proc)


# ------------------------------------------------------------------------------- the modprobe parser

@pytest.mark.parametrize("line, expected", [
    ('options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"', "PeerMappingOverride=1;"),
    ("options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1", "PeerMappingOverride=0x1"),
    ("options nvidia NVreg_RegistryDwords=PeerMappingOverride=1", "PeerMappingOverride=1"),
    ('options nvidia "NVreg_RegistryDwords=PeerMappingOverride=1;RmFoo=2"', "PeerMappingOverride=1;RmFoo=2"),
    ("options nvidia NVreg_RegistryDwords='PeerMappingOverride=1'", "'PeerMappingOverride=1'"),
])
def test_registry_dwords_forms(line, expected):
    params = modprobe_conf.module_params([line + "\n"], "nvidia")
    assert params["NVreg_RegistryDwords"] == expected


def test_quoted_value_keeps_spaces():
    params = modprobe_conf.module_params(['options nvidia NVreg_RmMsg="a b c" NVreg_X=1\n'], "nvidia")
    assert params == {"NVreg_RmMsg": "a b c", "NVreg_X": "1"}


def test_later_files_and_lines_win_and_other_modules_are_ignored():
    texts = [
        "# comment\noptions nvidia NVreg_EnableStreamMemOPs=0 NVreg_RegistryDwords=A=1\n",
        "options nvidia_drm modeset=1\noptions nvidia NVreg_EnableStreamMemOPs=1\n",
        "options nvidia \\\nNVreg_RegistryDwords=PeerMappingOverride=1\n",
    ]
    params = modprobe_conf.module_params(texts, "nvidia")
    assert params == {"NVreg_EnableStreamMemOPs": "1", "NVreg_RegistryDwords": "PeerMappingOverride=1"}
    # kmod drops only the backslash and the newline: the next line's indentation splits the argument.
    split = modprobe_conf.module_params(["options nvidia NVreg_RegistryDwords=\\\n  A=1\n"], "nvidia")
    assert split == {"NVreg_RegistryDwords": "", "A": "1"}
    assert modprobe_conf.module_params(texts, "nvidia-drm") == {"modeset": "1"}


def test_bare_parameter_has_no_value():
    assert modprobe_conf.split_kernel_args("foo bar=1") == [("foo", None), ("bar", "1")]
    assert modprobe_conf.nvidia_registry_options({"NVreg_X": None, "NVreg_Y": "2", "other": "1"}) == {"Y": "2"}


def test_config_file_order_and_masking(tmp_path):
    write(tmp_path, "lib/modprobe.d/50-nvidia.conf", "options nvidia NVreg_EnableStreamMemOPs=1\n")
    write(tmp_path, "lib/modprobe.d/10-early.conf", "options nvidia NVreg_RegistryDwords=A=1\n")
    write(tmp_path, "etc/modprobe.d/90-late.conf", "options nvidia NVreg_RegistryDwords=B=2\n")
    write(tmp_path, "etc/modprobe.d/ignored.txt", "options nvidia NVreg_RegistryDwords=C=3\n")
    # Same name in /etc hides the one in /lib.
    write(tmp_path, "etc/modprobe.d/50-nvidia.conf", "# emptied by the admin\n")
    names = [p.relative_to(tmp_path).as_posix() for p in modprobe_conf.config_files(tmp_path)]
    assert names == ["lib/modprobe.d/10-early.conf", "etc/modprobe.d/50-nvidia.conf", "etc/modprobe.d/90-late.conf"]
    assert modprobe_conf.read_module_params("nvidia", tmp_path) == {"NVreg_RegistryDwords": "B=2"}


def test_dev_null_link_masks_a_file(tmp_path):
    write(tmp_path, "lib/modprobe.d/nvidia.conf", "options nvidia NVreg_EnableStreamMemOPs=1\n")
    (tmp_path / "etc/modprobe.d").mkdir(parents=True)
    os.symlink("/dev/null", tmp_path / "etc/modprobe.d/nvidia.conf")
    assert modprobe_conf.read_module_params("nvidia", tmp_path) == {}


@pytest.mark.parametrize("text, number", [("1", 1), ("0x1", 1), ("010", 8), ("+7", 7), ("x", None), ("-1", None)])
def test_parse_uint(text, number):
    assert modprobe_conf.parse_uint(text) == number


def test_modules_to_load(tmp_path):
    write(tmp_path, "etc/modules-load.d/peermem.conf", "# load at boot\nnvidia-peermem\n")
    write(tmp_path, "etc/modules", "; legacy file\nib_umad\n")
    assert modprobe_conf.modules_to_load(tmp_path) == ["nvidia_peermem", "ib_umad"]


# ------------------------------------------------------------------------------------ boot rendering

@pytest.mark.parametrize("conf, shown", [
    ('options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"', '"PeerMappingOverride=1;"'),
    ("options nvidia NVreg_RegistryDwords=PeerMappingOverride=0x1", '"PeerMappingOverride=0x1"'),
    ("options nvidia NVreg_RegistryDwords=PeerMappingOverride=1", '"PeerMappingOverride=1"'),
])
def test_boot_renders_registry_dwords(tmp_path, conf, shown):
    root = tmp_path / "root"
    write(root, "etc/modprobe.d/nvidia-peermem.conf", conf + "\n")
    params = boot_params(root, tmp_path)
    assert params["RegistryDwords"] == shown


def test_boot_renders_integer_options_in_decimal(tmp_path):
    root = tmp_path / "root"
    write(root, "etc/modprobe.d/a.conf", "options nvidia NVreg_EnableStreamMemOPs=0x1\n")
    write(root, "etc/modprobe.d/b.conf", "options nvidia NVreg_PeerMappingOverride=1\n")  # not a parameter
    params = boot_params(root, tmp_path)
    assert params["EnableStreamMemOPs"] == "1"
    assert "PeerMappingOverride" not in params
    assert params["RegistryDwords"] == '""'


def test_boot_without_options_shows_the_profile_defaults(tmp_path):
    params = boot_params(tmp_path / "empty", tmp_path)
    assert params["EnableStreamMemOPs"] == "0"
    assert params["RegistryDwords"] == '""'


def test_doca_ofed_renames_rocep_to_mlx5(tmp_path):
    profile = fakehw.load_profile("gcp_b200")
    root = tmp_path / "root"
    before = boot.plan_boot(root, profile)
    assert before["nic_naming"] == "as-profile" and not before["doca_ofed"]
    names = sorted(fakehw.render_sysfs(profile, tmp_path / "s1", nic_naming=before["nic_naming"])["rdma_devices"])
    assert names and all(n.startswith("rocep") for n in names)

    write(root, "var/lib/dpkg/status", "Package: doca-ofed\nStatus: install ok installed\nVersion: 1\n\n")
    after = boot.plan_boot(root, profile)
    assert after["doca_ofed"] and after["nic_naming"] == "mlx5"
    renamed = sorted(fakehw.render_sysfs(profile, tmp_path / "s2", nic_naming=after["nic_naming"])["rdma_devices"])
    assert renamed == [f"mlx5_{i}" for i in range(len(names))]


def test_doca_marker_file_and_removed_package(tmp_path):
    root = tmp_path / "root"
    write(root, "var/lib/dpkg/status", "Package: doca-ofed\nStatus: deinstall ok config-files\n\n")
    assert not boot.doca_ofed_installed(root)
    write(root, "etc/fleetsim/doca-ofed-installed", "")
    assert boot.doca_ofed_installed(root)


def test_peermem_loads_at_boot_only_when_it_can(tmp_path):
    profile = fakehw.load_profile("gcp_b200")
    root = tmp_path / "root"
    write(root, "etc/modules-load.d/nvidia-peermem.conf", "nvidia_peermem\n")
    profile["nvidia_peermem"]["loads"] = False
    plan = boot.plan_boot(root, profile)
    assert "nvidia_peermem" not in plan["modules_loaded"]
    assert "nvidia_peermem" not in boot.proc_modules(profile, plan)
    profile["nvidia_peermem"]["loads"] = True
    plan = boot.plan_boot(root, profile)
    assert plan["modules_loaded"] == ["nvidia_peermem"]
    lines = {line.split()[0]: line.split() for line in boot.proc_modules(profile, plan).splitlines()}
    assert "nvidia_peermem" in lines
    assert "nvidia_peermem" in lines["nvidia"][3]


def test_port_down_fault_reaches_the_rendered_port(tmp_path):
    profile = fakehw.load_profile("gcp_b200")
    first = sorted(fakehw.rdma_device_names(profile).values())[0]
    plan = boot.plan_boot(tmp_path / "root", profile, {"port_down": [first]})
    summary = boot.render_boot(profile, plan, tmp_path / "sysfs", tmp_path / "proc", tmp_path / "hw.json", 0)
    port = tmp_path / "sysfs" / summary["rdma_devices"][first]["port_dir"]
    assert "DOWN" in (port / "state").read_text()
    assert summary["nvidia_loaded"]
    assert (tmp_path / "hw.json").is_file()


def test_bad_integer_option_keeps_the_driver_from_loading(tmp_path):
    import json

    profile = fakehw.load_profile("gcp_b200")
    root = tmp_path / "root"
    write(root, "etc/modprobe.d/bad.conf", "options nvidia NVreg_EnableStreamMemOPs=yes\n")
    plan = boot.plan_boot(root, profile)
    summary = boot.render_boot(profile, plan, tmp_path / "sysfs", tmp_path / "proc", tmp_path / "hw.json", 0)
    assert not summary["nvidia_loaded"]
    assert not (tmp_path / "proc" / "params").exists()
    assert json.loads((tmp_path / "hw.json").read_text())["driver_loaded"] is False
