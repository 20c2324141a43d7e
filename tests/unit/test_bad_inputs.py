# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Table-driven bad inputs: module options, filter arguments, role argument specs, play variables, records on disk
and files a module reads. Each case asserts the refusal names the value (or the variable and its file) and the form
expected, and that nothing was written (the directory the module was pointed at is byte-for-byte unchanged)."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from unit_helpers import REPO, render_sysfs_tree

from ansible_collections.gpufleet.deepep.plugins.filter import build_once as build_once_filter
from ansible_collections.gpufleet.deepep.plugins.filter import gpu_arch as gpu_arch_filter
from ansible_collections.gpufleet.deepep.plugins.filter import hca_mapping as hca_filter
from ansible_collections.gpufleet.deepep.plugins.filter import transport_truth as transport_filter
from ansible_collections.gpufleet.deepep.plugins.filter import verify_helpers
from ansible_collections.gpufleet.deepep.plugins.filter import version_helpers
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.module_utils import _guard
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import envscript as _envscript
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia import params as _nvidia_params
from ansible_collections.gpufleet.deepep.plugins.module_utils._store import put_local
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _settings
from ansible_collections.gpufleet.deepep.plugins.modules import (
    artifact_store,
    deepep_jit_cache,
    deepgemm_cache,
    gpu_topology,
    image_boot,
    model_config,
    nccl_env,
    node_stack,
    node_seal,
    nvidia_params,
    play_settings,
    pytorch_bundled_nvshmem,
    rdma_devices,
    serve_plan,
    serve_state,
    sglang_env,
    site_state,
)


def snapshot(root):
    """{relative path: sha256 or 'dir'} of everything under ``root`` (what 'nothing was written' compares)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return out


# ------------------------------------------------------------------------------------ play variables (play_settings)
TABLE = {"default": {"dispatch_bf16_nvl_gbps": 100}, "b200": {"dispatch_bf16_nvl_gbps": 380}}
NO_DEFAULT = {"b200": {"dispatch_bf16_nvl_gbps": 380}, "h200": {"dispatch_bf16_nvl_gbps": 300}}

BAD_SETTINGS = [
    # serial: gpufleet_serial
    ("serial", 0, "out of range"), ("serial", -1, "out of range"), ("serial", "0", "out of range"),
    ("serial", "abc", "not a whole number"), ("serial", "2\n", "not a whole number"), ("serial", "0%", "percentage"),
    ("serial", "101%", "percentage"), ("serial", "-5%", "not a whole number"), ("serial", "25 %", "not a whole number"),
    ("serial", [], "empty list"), ("serial", [1, 0], "out of range"), ("serial", [1, "x"], "not a whole number"),
    ("serial", True, "not a whole number"), ("serial", 1.5, "not a whole number"), ("serial", None, "not a whole number"),
    ("serial", {"a": 1}, "not a whole number"),
    # percentage: gpufleet_max_fail_percentage
    ("percentage", -1, "out of range"), ("percentage", 101, "out of range"), ("percentage", "50%", "not a whole"),
    ("percentage", "fifty", "not a whole number"), ("percentage", False, "not a whole number"),
    ("percentage", "50\n", "not a whole number"),
    # count: gpufleet_reboot_throttle
    ("count", -1, "out of range"), ("count", "one", "not a whole number"), ("count", 2.5, "not a whole number"),
    ("count", [1], "not a whole number"),
    # positive: preflight_min_gpus
    ("positive", 0, "out of range"), ("positive", -1, "out of range"), ("positive", "", "not a whole number"),
    ("positive", "8 ", "not a whole number"),
    # seconds: timeouts
    ("seconds", 0, "out of range"), ("seconds", "600s", "not a whole number"), ("seconds", -30, "out of range"),
    ("seconds", None, "not a whole number"), ("seconds", "1e3", "not a whole number"),
    # hca_mapping: env_script_hca_mapping
    ("hca_mapping", "0:mlx5_0:1,0:mlx5_1:1", "appears twice"), ("hca_mapping", "0:mlx5_0:1\n", "line break"),
    ("hca_mapping", "a:mlx5_0:1", "not a non-negative integer"), ("hca_mapping", "0:mlx5_0:0", "positive integer"),
    ("hca_mapping", "0:mlx5_0", "missing the port"), ("hca_mapping", "0:mlx5_0:1,,1:mlx5_1:1", "empty"),
    ("hca_mapping", "0:mlx5;0:1", "contains"), ("hca_mapping", 5, "must be a string"),
    ("hca_mapping", "0:$(id):1", "not a device name"),
    # gid_index: env_script_gid_index
    ("gid_index", "three", "not a whole number"), ("gid_index", -1, "out of range"),
    ("gid_index", 256, "out of range"), ("gid_index", "3\n", "not a whole number"), ("gid_index", [3], "not a whole"),
    # env: env_script_extra_env
    ("env", {"BAD NAME": "1"}, "not a shell variable name"), ("env", {"1X": "1"}, "not a shell variable name"),
    ("env", {"X\n": "1"}, "not a shell variable name"), ("env", {"X": "a\nrm -rf /"}, "line break"),
    ("env", {"X": None}, "not a string or number"), ("env", {"X": {"y": 1}}, "not a string or number"),
    ("env", ["X=1"], "not a mapping"), ("env", "X=1", "not a mapping"),
    # choice
    ("choice", "bogus", "not a known choice"),
    # release / pip_release: efa_installer_version, nccl_ep_version, sglang_version
    ("release", "2.30", "not of its form"), ("release", "v2.30.7", "not of its form"), ("release", 2.3, "not of its"),
    ("release", "2.30.7\n", "not of its form"), ("release", "2.30.7.post1", "not of its form"),
    ("release", True, "not of its form"), ("pip_release", "0.5.8rc1", "not of its form"),
    ("pip_release", "0.5", "not of its form"), ("pip_release", None, "not of its form"),
    # path, url, names
    ("path", "var/cache", "not of its form"), ("path", "", "not of its form"), ("path", ["/a"], "not of its form"),
    ("url", "ftp://mirror/x.tar.gz", "not of its form"), ("url", "/srv/x.tar.gz", "not of its form"),
    ("url", "https://", "not of its form"), ("names", "b200_a", "not of its form"),
    ("names", ["b200_a", ""], "not of its form"), ("names", [1], "not of its form"),
    # source: a download's description
    ("source", "https://x/y.tar.gz", "type is tarball, git or apt"), ("source", {"type": "zip"}, "type is tarball"),
]


@pytest.mark.parametrize("form,value,why", BAD_SETTINGS, ids=["%s-%d" % (c[0], i) for i, c in enumerate(BAD_SETTINGS)])
def test_play_settings_refuse(module_runner, tmp_path, form, value, why):
    before = snapshot(tmp_path)
    item = {"name": "gpufleet_var", "value": value, "form": form}
    if form == "choice":
        item["choices"] = ["a", "b"]
    result = module_runner(play_settings, {"settings": [item]})
    assert result.failed, result
    assert "gpufleet_var" in result["msg"] and why in result["msg"], result["msg"]
    shown = [repr(value)] + ([repr(v) for v in value] if isinstance(value, list) else [])
    assert any(text in result["msg"] for text in shown) or (form == "hca_mapping" and str(value)[:6] in result["msg"])
    assert "expected" in result["msg"]
    assert snapshot(tmp_path) == before


BAD_PROFILES = [("b20", NO_DEFAULT, "known profiles b200, h200"), ("", NO_DEFAULT, "known profiles"),
                (None, NO_DEFAULT, "known profiles"), (5, TABLE, "not a string"),
                ("b200", {"b200": {"bogus_gbps": 1}}, "unknown metric"), ("b200", {}, "mapping of profile"),
                ("b200", {"b200": {"dispatch_bf16_nvl_gbps": -3}}, "non-negative"),
                ("a100", TABLE, "names the GPU family a100"), ("gcp_b300", TABLE, "Add an entry for b300"),
                ("mycluster", TABLE, "names no GPU family")]


@pytest.mark.parametrize("profile,table,why", BAD_PROFILES)
def test_unknown_profile_fails_naming_the_known_ones(module_runner, profile, table, why):
    result = module_runner(play_settings, {"settings": [{"name": "verify_intranode_profile", "value": profile,
                                                         "form": "profile", "table": table}]})
    assert result.failed and why in result["msg"] and "verify_intranode_profile" in result["msg"], result["msg"]


@pytest.mark.parametrize("family,why", [
    ("b300", "profile 'mycluster' declares (gpufleet_gpu_family) the GPU family b300 (compute capability 10.3)"),
    ("b400", "GPU family 'b400' (gpufleet_gpu_family) is no family the collection knows; expected one of a100"),
])
def test_a_declared_family_the_table_cannot_gate_fails_through_the_module(module_runner, family, why):
    result = module_runner(play_settings, {"settings": [{"name": "verify_intranode_profile", "value": "mycluster",
                                                         "form": "profile", "table": TABLE, "family": family}]})
    assert result.failed and why in result["msg"] and "verify_intranode_profile" in result["msg"], result["msg"]
    good = module_runner(play_settings, {"settings": [{"name": "verify_intranode_profile", "value": "mycluster",
                                                       "form": "profile", "table": TABLE, "family": "b200"}]})
    assert not good.failed and good["settings"] == {"verify_intranode_profile": "b200"}, good


def test_every_bad_setting_is_named_in_one_failure(module_runner):
    result = module_runner(play_settings, {"settings": [
        {"name": "gpufleet_serial", "value": 0, "form": "serial"},
        {"name": "preflight_min_gpus", "value": -1, "form": "positive"},
        {"name": "gpufleet_reboot_timeout", "value": 600, "form": "seconds"}]})
    assert result.failed and result["msg"].startswith("2 settings refused before any host runs")
    assert "gpufleet_serial=0" in result["msg"] and "preflight_min_gpus=-1" in result["msg"]


GOOD_SETTINGS = [
    ("serial", 1, 1), ("serial", "2", 2), ("serial", "25%", "25%"), ("serial", [1, "25%", "100%"], [1, "25%", "100%"]),
    ("serial", "12.5%", "12.5%"), ("percentage", 0, 0), ("percentage", "100", 100), ("count", 0, 0),
    ("positive", "8", 8), ("seconds", 600, 600), ("hca_mapping", "auto", "auto"), ("hca_mapping", "", ""),
    ("hca_mapping", "1:mlx5_1:1,0:mlx5_0:1", "1:mlx5_1:1,0:mlx5_0:1"), ("gid_index", "auto", "auto"),
    ("gid_index", "3", 3), ("gid_index", "", ""),
    ("env", {"HF_HOME": "/lssd/hf", "N": 3}, {"HF_HOME": "/lssd/hf", "N": 3}),
    ("release", "2.30.7", "2.30.7"), ("pip_release", "0.5.8", "0.5.8"), ("pip_release", "0.5.8.post1", "0.5.8.post1"),
    ("path", "/var/cache/gpufleet", "/var/cache/gpufleet"), ("url", "FILE:///srv/x.tar.gz", "FILE:///srv/x.tar.gz"),
    ("url", "https://efa-installer.amazonaws.com/aws-efa-installer-1.50.0.tar.gz",
     "https://efa-installer.amazonaws.com/aws-efa-installer-1.50.0.tar.gz"), ("names", [], []),
    ("names", ["b200_a", "b200_b"], ["b200_a", "b200_b"]),
]


# A download (form source): verified, local or explicitly accepted passes; anything else is refused naming the
# role's own variables and the ways to fix it (the phase-role guard plays hold the roles' wiring of it).
GIT = {"type": "git", "repo": "https://github.com/NVIDIA/nvshmem.git", "ref": "v3.4.5-0", "title": "NVSHMEM"}
TARBALL = {"type": "tarball", "url": "https://mirror.example/nvshmem.tar.gz", "title": "NVSHMEM"}
APT = {"type": "apt", "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
       "keyring_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub"}
SOURCES_PASS = [
    dict(GIT, commit="1" * 40), dict(GIT, ref="a" * 40), dict(GIT, allow_unverified=True),
    dict(GIT, allow_unverified="true"), dict(TARBALL, checksum="sha256:" + "d" * 64),
    dict(TARBALL, url="file:///srv/n.tar.gz"), dict(TARBALL, url="FILE:///srv/n.tar.gz"),
    dict(APT, keyring_checksum="sha256:" + "a" * 64), dict(APT, keyring_url="file:///srv/mirror/cuda.pub"),
    dict(APT, repo_url="file:/srv/fleetsim-mirror/apt", trusted=True, keyring_url=""),
    dict(APT, trusted="false", keyring_url=""), dict(APT, trusted=True, repo_url="https://x/", allow_unverified=True),
]
SOURCES_REFUSED = [
    (GIT, ["v3.4.5-0 of https://github.com/NVIDIA/nvshmem.git is a moving ref", "nvshmem_src_git_commit is empty",
           "nothing would verify the NVSHMEM source", "git ls-remote https://github.com/NVIDIA/nvshmem.git v3.4.5-0",
           "nvshmem_allow_unverified: true"]),
    (dict(GIT, ref="a" * 39), ["is a moving ref"]), (dict(GIT, allow_unverified=False), ["is a moving ref"]),
    (TARBALL, ["nvshmem_src_url https://mirror.example/nvshmem.tar.gz is fetched over the network",
               "nvshmem_src_checksum is empty", "sha256:<URL of its .sha256 file>", "local file: mirror",
               "nvshmem_allow_unverified"]),
    (dict(TARBALL, repo="https://github.com/NVIDIA/nvshmem.git", ref="v3.4.5-0", hint=" (the tag's commit)"),
     ["or with a git source nvshmem_src_git_commit", "v3.4.5-0) (the tag's commit)"]),
    (dict(TARBALL, url="ftp://mirror/x.tgz", checksum=""), ["ftp://mirror/x.tgz is fetched over the network"]),
    (APT, ["The key https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub is "
           "fetched over the network and nvshmem_apt_keyring_checksum is empty", "Nothing would verify the packages"]),
    (dict(APT, trusted="yes"), ["nvshmem_apt_trusted marks https://developer.download.nvidia.com", "[trusted=yes]"]),
]


@pytest.mark.parametrize("source", SOURCES_PASS)
def test_a_verified_or_accepted_download_passes(module_runner, source):
    result = module_runner(play_settings, {"settings": [{"name": "nvshmem", "value": source, "form": "source"}]})
    assert not result.failed, result.get("msg")
    assert result["settings"]["nvshmem"] == source


@pytest.mark.parametrize("source,names", SOURCES_REFUSED)
def test_an_unverified_download_is_refused_with_the_fix(module_runner, tmp_path, source, names):
    before = snapshot(tmp_path)
    result = module_runner(play_settings, {"settings": [{"name": "nvshmem", "value": source, "form": "source"}]})
    assert result.failed and result["msg"].startswith("1 setting refused"), result
    for name in names:
        assert name in result["msg"], (name, result["msg"])
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("form,value,normal", GOOD_SETTINGS)
def test_play_settings_accept(module_runner, form, value, normal):
    result = module_runner(play_settings, {"settings": [{"name": "v", "value": value, "form": form}]})
    assert not result.failed, result.get("msg")
    assert result["settings"]["v"] == normal


@pytest.mark.parametrize("profile,matched", [("gcp_b200", "b200"), ("b200_cuda13", "b200"), ("default", "default"),
                                             ("", "default"), (None, "default")])
def test_known_or_default_profiles_pass(profile, matched):
    """A profile the table knows, or 'default' (or none) for the loose default gate; 'a100', which TABLE has no entry
    for, no longer takes 'default' (BAD_PROFILES)."""
    assert _settings.check_setting("p", profile, "profile", table=TABLE) == matched


def test_playbooks_check_their_settings_on_the_controller():
    """site.yml checks the play values first, on the controller, stopping every host on a bad one."""
    site = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    first = site[0]["tasks"][0]
    assert "gpufleet.deepep.play_settings" in first and first["delegate_to"] == "localhost"
    assert first["any_errors_fatal"] is True
    names = {s["name"]: s["form"] for s in first["gpufleet.deepep.play_settings"]["settings"]}
    assert names["gpufleet_serial"] == "serial" and names["gpufleet_max_fail_percentage"] == "percentage"
    assert names["gpufleet_reboot_throttle"] == "count" and names["preflight_min_gpus"] == "positive"
    for role in ("verify_intranode", "verify_internode", "audit", "preflight", "env_script"):
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
        assert "gpufleet.deepep.play_settings" in tasks[0], role
        assert tasks[0]["delegate_to"] == "localhost", role


# ------------------------------------------------------------------------------------------------ module options
def nvidia_args(tmp_path, **extra):
    args = {"params_path": str(tmp_path / "params"), "version_path": str(tmp_path / "version"),
            "conf_path": str(tmp_path / "modprobe.d" / "gpufleet-nvidia.conf"),
            "modprobe_dirs": [str(tmp_path / "modprobe.d")]}
    args.update(extra)
    return args


NVIDIA_BAD = [
    ({"driver_options": {"NVreg_EnableStreamMemOPs\n": 1}}, "NVreg_EnableStreamMemOPs\\n"),
    ({"driver_options": {"NVreg_Enable=StreamMemOPs": 1}}, "NVreg_Enable=StreamMemOPs"),
    ({"driver_options": {"NVreg_X": "a\nb"}}, "a\\nb"),
    ({"driver_options": {"NVreg_X": 'say "hi"'}}, "'say \"hi\"'"),
    ({"driver_options": {"": 1}}, "''"),
    ({"driver_options": {"NVreg_": 1}}, "NVreg_"),
    ({"registry_dwords": {"PeerMappingOverride\n": 1}}, "PeerMappingOverride\\n"),
    ({"registry_dwords": {"Peer Mapping": 1}}, "Peer Mapping"),
    ({"registry_dwords": {"PeerMappingOverride": "one"}}, "one"),
    ({"registry_dwords": {"PeerMappingOverride": -1}}, "-1"),
    ({"registry_dwords": {"PeerMappingOverride": 4294967296}}, "4294967296"),
    ({"registry_dwords": {"PeerMappingOverride": "1\n"}}, "1\\n"),
    ({"conf_path_name": "gpufleet-nvidia.txt", "driver_options": {"NVreg_EnableStreamMemOPs": 1}}, ".conf"),
    ({"conf_path_name": ".hidden.conf", "driver_options": {"NVreg_EnableStreamMemOPs": 1}}, ".hidden.conf"),
    ({"state": "absent", "driver_options": {"NVreg_EnableStreamMemOPs": 1}}, "state=absent"),
]


@pytest.mark.parametrize("args,named", NVIDIA_BAD)
def test_nvidia_params_refuses_and_writes_nothing(module_runner, tmp_path, args, named):
    (tmp_path / "modprobe.d").mkdir()
    args = dict(args)
    extra = {}
    if "conf_path_name" in args:
        extra["conf_path"] = str(tmp_path / "modprobe.d" / args.pop("conf_path_name"))
    before = snapshot(tmp_path)
    result = module_runner(nvidia_params, nvidia_args(tmp_path, **dict(args, **extra)))
    assert result.failed, result
    assert named in result["msg"] or named.replace("\\\\", "\\") in result["msg"], result["msg"]
    assert "expected" in result["msg"] or "must" in result["msg"] or "not used" in result["msg"], result["msg"]
    assert snapshot(tmp_path) == before


SITE_BAD = [({"key": "abc\n"}, "'abc\\n'"), ({"key": ""}, "''"), ({"key": "a" * 129}, "a" * 129),
            ({"key": "a b"}, "'a b'"), ({"key": "../x"}, "'../x'"), ({"key": "k", "hash_limit": -1}, "-1"),
            ({"key": "k", "state": "record", "watch": ["etc/x"]}, "'etc/x'"),
            ({"key": "k", "state": "record", "watch": [""]}, "''")]


@pytest.mark.parametrize("args,named", SITE_BAD)
def test_site_state_refuses_and_writes_nothing(module_runner, tmp_path, args, named):
    before = snapshot(tmp_path)
    result = module_runner(site_state, dict(args, path=str(tmp_path / "state" / "stamp.json"),
                                            dpkg_status=str(tmp_path / "status")))
    assert result.failed and named in result["msg"] and "expected" in result["msg"], result["msg"]
    assert snapshot(tmp_path) == before


# Every option of node_seal and image_boot with a form, refused naming the value and the form; nothing written.
IMAGE_KEY = "k" * 64
SEAL_BAD = [
    ({"site_key": ""}, "site_key ''", "expected 1 to 128 characters"),
    ({"site_key": "a b"}, "site_key 'a b'", "expected 1 to 128 characters"),
    ({"site_key": "k" * 129}, "k" * 129, "expected 1 to 128 characters"),
    ({"profile": "b200 gcp"}, "profile 'b200 gcp'", "expected 1 to 64 characters"),
    ({"collection_version": "0.2.0\n"}, "collection_version '0.2.0\\n'", "expected 1 to 64 characters"),
    ({"extra_paths": ["etc/x"]}, "extra_paths entry 'etc/x'", "expected a path or glob pattern"),
    ({"extra_paths": ["/"]}, "extra_paths entry '/'", "not /"),
    ({"extra_paths": ["/opt/../etc"]}, "extra_paths entry '/opt/../etc'", "without '..'"),
    ({"build_stamps": ["opt/*.json"]}, "build_stamps entry 'opt/*.json'", "expected a path or glob pattern"),
    ({"timeout": 0}, "timeout=0", "expected seconds, 1 to 3600"),
    ({"timeout": 3601}, "timeout=3601", "expected seconds, 1 to 3600"),
    ({"timeout": "soon"}, "soon", "int"),
    ({"remove_authorized_keys": "maybe"}, "maybe", "bool"),
    ({"stamp": "/var/lib/"}, "stamp '/var/lib/'", "expected an absolute path of a file"),
    ({"manifest": "/etc/gpufleet/"}, "manifest '/etc/gpufleet/'", "expected an absolute path of a file"),
    ({"cloud_init": "cloud-init clean"}, "cloud_init 'cloud-init clean'", "expected a command name"),
    ({"journalctl": "journalctl --flush"}, "journalctl 'journalctl --flush'", "expected a command name"),
    ({"nvidia_smi": ""}, "nvidia_smi ''", "expected a command name"),
]
BOOT_BAD = [
    ({"site_key": ""}, "site_key ''", "expected 1 to 128 characters"),
    ({"site_key": "../k"}, "site_key '../k'", "expected 1 to 128 characters"),
    ({"state": "sealed"}, "sealed", "check, booted"),
    ({"timeout": 0}, "timeout=0", "expected seconds, 1 to 3600"),
    ({"timeout": "soon"}, "soon", "int"),
    ({"stamp": "/var/lib/"}, "stamp '/var/lib/'", "expected an absolute path of a file"),
    ({"manifest": "/etc/"}, "manifest '/etc/'", "expected an absolute path of a file"),
    ({"nvidia_smi": "nvidia-smi -L"}, "nvidia_smi 'nvidia-smi -L'", "expected a command name"),
]


def test_image_cases_cover_every_option():
    for module, cases in ((node_seal, SEAL_BAD), (image_boot, BOOT_BAD)):
        options = set(yaml.safe_load(module.DOCUMENTATION)["options"])
        assert {name for args, dummy, dummy2 in cases for name in args} == options, module.__name__


@pytest.mark.parametrize("module,args,named,form", [(node_seal,) + c for c in SEAL_BAD] + [(image_boot,) + c for c in BOOT_BAD],
                         ids=["seal-%d" % i for i in range(len(SEAL_BAD))] + ["boot-%d" % i for i in range(len(BOOT_BAD))])
@pytest.mark.parametrize("check_mode", [False, True])
def test_image_modules_refuse_and_write_nothing(module_runner, tmp_path, module, args, named, form, check_mode):
    node = tmp_path / "node"
    (node / "etc").mkdir(parents=True)
    (node / "etc/machine-id").write_text("0123\n")
    before = snapshot(tmp_path)
    full = dict({"site_key": IMAGE_KEY, "root": str(node)}, **args)
    result = module_runner(module, full, check_mode=check_mode)
    assert result.failed, result
    assert named in result["msg"] and form in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"]
    assert snapshot(tmp_path) == before


def _exe(path, body="#!/bin/sh\nexit 0\n"):
    path.write_text(body)
    path.chmod(0o755)
    return path


def module_cases(tmp_path):
    sysfs = str(render_sysfs_tree(tmp_path, "h200_nvlink"))
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    missing = str(tmp_path / "nope")
    return [
        (gpu_topology, {"sysfs_root": missing}, "sysfs %r is not a directory" % missing),
        (gpu_topology, {"sysfs_root": sysfs, "timeout": 0}, "timeout=0"),
        (gpu_topology, {"sysfs_root": sysfs, "nvidia_smi": str(plain)}, "nvidia_smi %r is not an executable" % str(plain)),
        (gpu_topology, {"sysfs_root": sysfs, "timeout": "soon"}, "soon"),
        (rdma_devices, {"sysfs_root": missing}, "sysfs %r is not a directory" % missing),
        (node_stack, {"gather": ["paths"], "timeout": 0}, "timeout=0"),
        (node_stack, {"gather": ["bogus"]}, "bogus"),
        (node_stack, {"gather": ["paths"], "paths": ["relative/path"]}, "relative/path"),
        (node_stack, {"gather": ["jit_cache"]}, "jit_cache_dir None: expected the absolute path of DeepEP V2's JIT cache"),
        (node_stack, {"gather": ["jit_cache"], "jit_cache_dir": "var/cache/jit"},
         "jit_cache_dir 'var/cache/jit': expected the absolute path"),
        (model_config, {"path": missing}, "model path %r is not a directory" % missing),
        (model_config, {"path": "org/model", "offline": True}, "'org/model' is a hub id"),
        (pytorch_bundled_nvshmem, {"python": ""}, "python '' is empty"),
        (pytorch_bundled_nvshmem, {"python": str(plain)}, "python %r is not an executable" % str(plain)),
        (pytorch_bundled_nvshmem, {"python": "no-such-python-here"}, "'no-such-python-here' was not found"),
        (pytorch_bundled_nvshmem, {"python": str(_exe(tmp_path / "py")), "timeout": 0}, "timeout=0"),
        (pytorch_bundled_nvshmem, {"site_packages": [missing]}, repr(missing)),
        (pytorch_bundled_nvshmem, {"state": "nonsense"}, "nonsense"),
        (deepgemm_cache, dict(_dg_node(tmp_path), cache_dir="relative/dg"), "cache_dir: 'relative/dg'"),
        (deepgemm_cache, dict(_dg_node(tmp_path), timeout=0), "timeout: 0"),
        (deepgemm_cache, dict(_dg_node(tmp_path), precompile_args=[]), "precompile_args: []"),
    ]


def test_module_options_refused_and_nothing_written(module_runner, tmp_path):
    cases = module_cases(tmp_path)
    before = snapshot(tmp_path)
    for module, args, named in cases:
        result = module_runner(module, args)
        assert result.failed, (module.__name__, args, result)
        assert named in result["msg"], (module.__name__, result["msg"])
        assert "Traceback" not in result["msg"]
    assert snapshot(tmp_path) == before
    assert len(cases) == 21


# ------------------------------------------------------------------------------------- the artifact store's options
STORE_KEY = "ab" * 32
STORE_FILES = ["a.tar.gz", "a.json"]


def _store_layout(tmp_path):
    """A published key, a source directory, a private file, and links where a careless or hostile user puts them."""
    src = tmp_path / "src"
    src.mkdir()
    for name in STORE_FILES:
        (src / name).write_bytes(name.encode() * 100)
    store = tmp_path / "store"
    put_local(str(store), "nvshmem", STORE_KEY, str(src), STORE_FILES, "n1")
    secret = tmp_path / "secret"
    secret.write_bytes(b"private")
    secret.chmod(0o600)
    linked = tmp_path / "linked-src"
    linked.mkdir()
    (linked / STORE_FILES[0]).symlink_to(secret)
    (linked / STORE_FILES[1]).write_bytes(b"{}")
    (tmp_path / "src-link").symlink_to(src)
    (tmp_path / "up").symlink_to(tmp_path)
    (tmp_path / "dest-real").mkdir()
    (tmp_path / "dest-link").symlink_to(tmp_path / "dest-real")
    return store, src


# (option, value or a function of tmp_path, what the message must say besides the value)
STORE_BAD = [
    ("record_sha256", "ABC", "expected 64 lowercase hex digits"),
    ("record_sha256", "0" * 63, "expected 64 lowercase hex digits"),
    ("record_sha256", "F" * 64, "expected 64 lowercase hex digits"),
    ("record_sha256", "", "expected 64 lowercase hex digits"),
    ("record_sha256", "0" * 64 + "\n", "expected 64 lowercase hex digits"),
    ("record_sha256", "0" * 64, "but record_sha256 pins"),  # well-formed, not the record's digest
    ("lock_timeout", -1, "expected a whole number from 0"),
    ("lock_timeout", 86401, "expected a whole number from 0"),
    ("lock_timeout", "soon", "int"),
    ("src", lambda p: str(p / "src-link"), "is a symbolic link"),
    ("src", lambda p: str(p / "up" / "src"), "is a symbolic link"),
    ("src", lambda p: str(p / "linked-src"), "is a symbolic link"),
    ("src", "relative/src", "must be an absolute path"),
    ("dest", lambda p: str(p / "dest-link"), "is a symbolic link"),
    ("dest", lambda p: str(p / "up" / "dest-new"), "is a symbolic link"),
]


# Each option with the ops that take it (a put of the published key returns before reading src: another key).
STORE_OPS = {"record_sha256": ["lookup", "get", "put"], "lock_timeout": ["put"], "src": ["put"], "dest": ["get"]}
STORE_CASES = [(op,) + case for case in STORE_BAD for op in STORE_OPS[case[0]]]


def test_artifact_store_cases_cover_every_option_of_links_pins_and_lock_waits():
    assert {c[1] for c in STORE_CASES} == set(STORE_OPS)
    assert {c[0] for c in STORE_CASES if c[1] == "record_sha256"} == {"lookup", "get", "put"}


@pytest.mark.parametrize("op,option,value,expected", STORE_CASES,
                         ids=["%s-%s-%d" % (c[0], c[1], i) for i, c in enumerate(STORE_CASES)])
def test_artifact_store_refuses_and_writes_nothing(module_runner, tmp_path, op, option, value, expected):
    store, src = _store_layout(tmp_path)
    value = value(tmp_path) if callable(value) else value
    args = dict(op=op, mode="shared", store=str(store), kind="nvshmem", key=STORE_KEY)
    if op == "get":
        args["dest"] = str(tmp_path / "dest")
    if op == "put":
        args.update(src=str(src), files=STORE_FILES, key="cd" * 32 if option != "record_sha256" else STORE_KEY)
    args[option] = value
    before = snapshot(tmp_path)
    result = module_runner(artifact_store, args)
    assert result.failed, result
    assert option in result["msg"] and expected in result["msg"], result["msg"]
    assert (repr(value) if expected.startswith("expected") else str(value)) in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"]
    assert snapshot(tmp_path) == before


# ----------------------------------------------------------------------------- deepep_jit_cache (DeepEP V2's JIT cache)
def _jit_node(tmp_path):
    """A node with a fake nvcc and a Python whose deep_ep is installed; the module's valid arguments."""
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    _exe(tmp_path / "cuda" / "bin" / "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 12.9, V12.9.86'\n")
    (tmp_path / "site" / "deep_ep").mkdir(parents=True)
    (tmp_path / "site" / "deep_ep" / "__init__.py").write_text("")
    python = _exe(tmp_path / "py", "#!/bin/sh\nPYTHONPATH=%s exec python3 \"$@\"\n" % (tmp_path / "site"))
    return {"cache_dir": str(tmp_path / "jit"), "artifact_dir": str(tmp_path / "arts"), "deepep_key": "ab" * 32,
            "python": str(python), "gpu_arch_list": "9.0", "cuda_home": str(tmp_path / "cuda"),
            "warmup_argv": ["/bin/true"]}


# (option, bad value, what the message names besides the option): every option with a form to check. nccl_root,
# warmup_chdir and measure_loaded's free forms are covered by type (a path, a bool) alone.
JIT_BAD = [
    ("cache_dir", "relative/jit", "'relative/jit'"), ("cache_dir", "/", "'/'"),
    ("artifact_dir", "arts", "'arts'"), ("deepep_key", "abc", "'abc'"), ("deepep_key", "AB" * 32, "AB" * 32),
    ("python", "/nonexistent/python3", "/nonexistent/python3"), ("gpu_arch_list", "sm90", "'sm90'"),
    ("gpu_arch_list", [], "gpu_arch_list"), ("gpu_arch_list", "", "gpu_arch_list"),
    ("cuda_home", "/nonexistent/cuda", "/nonexistent/cuda/bin/nvcc"), ("key_env", {"EP_DISABLE_GIN": "1"}, "EP_DISABLE_GIN"),
    ("key_env", {"EP_JIT_DEBUG": True}, "EP_JIT_DEBUG=True"), ("warmup_argv", [], "warmup_argv"),
    ("warmup_env", {"EP_DISABLE_GIN": True}, "EP_DISABLE_GIN=True"), ("warmup_env", {"A=B": "1"}, "A=B"),
    ("warmup_timeout", 0, "0"), ("warmup_timeout", -5, "-5"), ("warmup_timeout", "soon", "soon"),
    ("measure_loaded", "maybe", "maybe"), ("owner", "no-such-user-gpufleet", "'no-such-user-gpufleet'"),
    ("group", "no-such-group-gpufleet", "'no-such-group-gpufleet'"), ("mode", "rwx", "'rwx'"), ("mode", "0644", "'0644'"),
    ("mode", "0855", "'0855'")]


def test_jit_cases_cover_every_option_with_a_form():
    free = {"nccl_root", "warmup_chdir"}
    spec = set(yaml.safe_load(deepep_jit_cache.DOCUMENTATION)["options"])
    assert {c[0] for c in JIT_BAD} == spec - free


@pytest.mark.parametrize("option,value,named", JIT_BAD, ids=["%s-%d" % (c[0], i) for i, c in enumerate(JIT_BAD)])
@pytest.mark.parametrize("check_mode", [False, True])
def test_deepep_jit_cache_refuses_and_writes_nothing(module_runner, tmp_path, option, value, named, check_mode):
    args = dict(_jit_node(tmp_path), **{option: value})
    before = snapshot(tmp_path)
    result = module_runner(deepep_jit_cache, args, check_mode=check_mode)
    if check_mode and option in ("python", "cuda_home"):
        # check mode cannot plan without nvcc or deep_ep: it says why and writes nothing
        assert not result.failed and result["key"] is None and named in result["msg"], result
    else:
        assert result.failed, result
        assert option in result["msg"] or option == "cuda_home", result["msg"]
        assert named in result["msg"], result["msg"]
        assert "expected" in result["msg"] or "cannot key" in result["msg"] or "must be one of" in result["msg"] \
            or "unable to convert" in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"]
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------ deepgemm_cache (SGLang's DeepGEMM)
def _dg_node(tmp_path):
    """A node with an env file; the module's valid arguments (the interpreter is never run: every case is refused
    before the precompile)."""
    env_file = tmp_path / "sglang-env.sh"
    if not env_file.exists():
        env_file.write_text("export A=1\n")
    return {"cache_dir": str(tmp_path / "dg"), "artifact_dir": str(tmp_path / "dg-arts"), "python": "/usr/bin/python3",
            "sglang_version": "0.5.19", "deep_gemm_version": "2.1.1", "config_sha256": "9f" * 32,
            "precompile_args": ["--model-path", "/opt/models/m", "--tp-size", "8"], "gpu_arch_list": "10.0",
            "torch_cuda": "12.9", "env_file": str(env_file)}


# (option, bad value, what the message names besides the option): every option with a form to check.
DG_BAD = [
    ("cache_dir", "relative/dg", "'relative/dg'"), ("cache_dir", "/", "'/'"), ("artifact_dir", "arts", "'arts'"),
    ("artifact_dir", "/", "'/'"), ("python", "python3", "'python3'"), ("sglang_version", "0.5 19", "'0.5 19'"),
    ("sglang_version", "", "sglang_version"), ("deep_gemm_version", "2.1\n", "'2.1\\n'"),
    ("config_sha256", "abc", "'abc'"), ("config_sha256", "AB" * 32, "AB" * 32), ("config_sha256", "", "config_sha256"),
    ("precompile_args", [], "[]"), ("precompile_args", ["--tp-size", "8", "--timeout", "5"], "--timeout"),
    ("gpu_arch_list", "sm90", "'sm90'"),
    ("gpu_arch_list", ["10.0"], "['10.0']"), ("gpu_arch_list", 10, "10"), ("torch_cuda", "twelve", "'twelve'"),
    ("cuda_version", "cuda12", "'cuda12'"), ("env_script", "unified-env.sh", "'unified-env.sh'"),
    ("env_file", "sglang-env.sh", "'sglang-env.sh'"), ("env_file", "/nonexistent/sglang-env.sh", "does not exist"),
    ("timeout", 0, "0"), ("timeout", -5, "-5"), ("timeout", "soon", "soon")]


def test_dg_cases_cover_every_option():
    spec = set(yaml.safe_load(deepgemm_cache.DOCUMENTATION)["options"])
    assert {c[0] for c in DG_BAD} == spec


@pytest.mark.parametrize("option,value,named", DG_BAD, ids=["%s-%d" % (c[0], i) for i, c in enumerate(DG_BAD)])
@pytest.mark.parametrize("check_mode", [False, True])
def test_deepgemm_cache_refuses_and_writes_nothing(module_runner, tmp_path, option, value, named, check_mode):
    args = dict(_dg_node(tmp_path), **{option: value})
    if option == "cuda_version":
        args["torch_cuda"] = None  # the key takes cuda_version only without torch's
    before = snapshot(tmp_path)
    result = module_runner(deepgemm_cache, args, check_mode=check_mode)
    if check_mode and (option == "env_file" and value.startswith("/") or value == ""):
        # check mode needs no env file (the role writes it in the same run), and says it cannot key the cache yet
        # before SGLang is installed: it writes nothing either way
        assert not result.failed, result
        assert value != "" or (result["key"] is None and option in result["msg"]), result
    else:
        assert result.failed, result
        assert option in result["msg"] or (option == "cuda_version" and "torch_cuda/cuda_version" in result["msg"]), \
            result["msg"]
        assert named in result["msg"], result["msg"]
        assert "expected" in result["msg"] or "unable to convert" in result["msg"] \
            or "is of type" in result["msg"], result["msg"]
    assert "Traceback" not in result.get("msg", "")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("option", ["cache_dir", "artifact_dir"])
@pytest.mark.parametrize("which", ["deepgemm_cache", "deepep_jit_cache"])
@pytest.mark.parametrize("check_mode", [False, True])
def test_cache_modules_refuse_a_linked_directory(module_runner, tmp_path, which, option, check_mode):
    """Both caches refuse a symlinked cache_dir or artifact_dir before anything (the JIT cache's would be chmodded
    and chowned through the link): the one check_dir_option."""
    module, args = (deepgemm_cache, _dg_node(tmp_path)) if which == "deepgemm_cache" else \
        (deepep_jit_cache, _jit_node(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "linked"))
    args[option] = str(tmp_path / "linked")
    before = snapshot(tmp_path)
    result = module_runner(module, args, check_mode=check_mode)
    assert result.failed and "%s: %r is a symbolic link" % (option, args[option]) in result["msg"], result
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------------ records of the wrong shape
STAMPS = [
    ("[]", "type list"), ("\"x\"", "type str"), ("{\"key\": 5}", "'key' is 5"), ("{}", "lacks the key 'key'"),
    ("{\"key\": \"k\", \"watch\": []}", "'watch' is []"), ("{\"key\": \"k\", \"packages\": [\"a\"]}", "'packages'"),
    ("{\"key\": \"k\", \"recorded_at\": 5}", "'recorded_at' is 5"), ("{\"key\": \"k\", \"format\": \"1\"}", "'format'"),
    ("{\"key\": \"k\", \"watch\": {\"/x\": \"file\"}}", "watch['/x']"),
    ("{\"key\": \"k\", \"watch\": {\"/x\": {\"kind\": \"file\"}}}", "its size is not a int"),
    ("{\"key\": \"k\", \"watch\": {\"/x\": {\"kind\": \"link\", \"target\": 3}}}", "its target"),
    ("{\"key\": \"k\", \"watch\": {\"/x\": {\"kind\": \"dir\", \"entries\": [1]}}}", "entries are not all strings"),
    ("{\"key\": \"k\", \"watch\": {\"/x\": {\"kind\": \"glob\", \"matches\": {\"/y\": {\"kind\": \"nope\"}}}}}", "a match"),
    ("{\"key\": \"k\", \"watch\": {\"/x\": {\"kind\": \"teleport\"}}}", "kind out of"),
    ("{\"key\": \"k\", \"packages\": {\"a\": 1}}", "packages['a'] is 1"),
    ("{not json", "is not JSON"),
]


@pytest.mark.parametrize("text,why", STAMPS)
def test_stamp_of_the_wrong_shape_is_refused_naming_the_file(module_runner, tmp_path, text, why):
    stamp = tmp_path / "stamp.json"
    stamp.write_text(text)
    before = snapshot(tmp_path)
    result = module_runner(site_state, {"path": str(stamp), "key": "k", "dpkg_status": str(tmp_path / "none")},
                           check_mode=True)
    assert not result.failed, result.get("msg")
    assert result["steady"] is False and result["intact"] is False
    assert str(stamp) in result["reason"] and why in result["reason"], result["reason"]
    assert snapshot(tmp_path) == before


def test_check_record_names_file_key_value_and_type():
    with pytest.raises(_guard.RecordShapeError, match=r"build record /x: 'sha256' is 5 \(int\), expected str"):
        _guard.check_record("/x", {"sha256": 5}, {"sha256": "str"}, what="build record")


# ------------------------------------------------- what a build's linkage record reads from the wheel it built
GOOD_ENVS = "# Pre-installed environment variables\npersistent_envs = dict()\n"
WHEEL_BAD = [
    ("envs.py", "persistent_envs = dict(\n", "deep_ep/envs.py is not valid Python"),
    ("envs.py", GOOD_ENVS + "persistent_envs['EP_JIT_CACHE_DIR'] = os.getenv('HOME')\n",
     "deep_ep/envs.py line 3 assigns persistent_envs something that is not a literal"),
    ("envs.py", GOOD_ENVS + "persistent_envs['EP JIT'] = '1'\n", "key 'EP JIT' is not an environment variable name"),
    ("envs.py", GOOD_ENVS + "persistent_envs[7] = '1'\n", "key 7 is not an environment variable name"),
    ("extension", "first 1000 bytes", "is truncated"),
    ("extension", None, "holds no DeepEP extension (deep_ep/_C*.so or deep_ep_cpp*.so)"),
    ("extension", "not an object", "deep_ep/_C.cpython-311-x86_64-linux-gnu.so is not an ELF object"),
]


@pytest.mark.parametrize("part, content, why", WHEEL_BAD)
def test_a_wheel_whose_linkage_cannot_be_read_is_refused_naming_it(tmp_path, part, content, why):
    import shutil
    import subprocess
    import zipfile

    from ansible_collections.gpufleet.deepep.plugins.modules import deepep_build

    if not shutil.which("gcc"):
        pytest.skip("needs gcc for a real extension")
    src = tmp_path / "ext.c"
    src.write_text("int answer(void) { return 42; }\n")
    ext = tmp_path / "ext.so"
    subprocess.run(["gcc", "-fPIC", "-shared", str(src), "-o", str(ext)], check=True, timeout=300)
    wheel = tmp_path / "wheel" / "deep_ep-2.1.0-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(str(wheel), "w") as archive:
        if part == "extension":
            if content == "first 1000 bytes":  # the real extension, cut short
                archive.writestr("deep_ep/_C.cpython-311-x86_64-linux-gnu.so", ext.read_bytes()[:1000])
            elif content is not None:
                archive.writestr("deep_ep/_C.cpython-311-x86_64-linux-gnu.so", "#!/bin/sh\necho not an extension\n")
            archive.writestr("deep_ep/envs.py", GOOD_ENVS)
        else:
            archive.write(str(ext), "deep_ep/_C.cpython-311-x86_64-linux-gnu.so")
            archive.writestr("deep_ep/envs.py", content)
    before = snapshot(tmp_path / "wheel")
    with pytest.raises(deepep_build.StepFailed) as info:
        deepep_build.wheel_linkage(str(wheel), "v2")
    assert why in info.value.msg and wheel.name in info.value.msg, info.value.msg
    if part == "envs.py":
        assert "expected persistent_envs['NAME'] = 'value' lines" in info.value.msg
    assert snapshot(tmp_path / "wheel") == before


# ------------------------------------------------------------------------------------------------------- filters
FILTER_BAD = [
    (hca_filter.hca_mapping, ("0:mlx5_0:1,0:mlx5_1:1",), {}, "GPU 0 appears twice"),
    (hca_filter.hca_mapping, ("0:mlx5_0:1\n",), {}, "line break"),
    (hca_filter.hca_mapping, ("x:mlx5_0:1",), {}, "GPU 'x'"),
    (hca_filter.hca_mapping, ("0:mlx5_0:one",), {}, "port 'one'"),
    (hca_filter.hca_mapping, ("",), {}, "empty"),
    (hca_filter.hca_mapping, (7,), {}, "int 7"),
    (hca_filter.hca_mapping, ([{"gpu": 0, "hca": "mlx5_0"}],), {}, "lacks port"),
    (hca_filter.hca_mapping, ([{"gpu": True, "hca": "mlx5_0", "port": 1}],), {}, "GPU True"),
    (hca_filter.hca_mapping, ({0: "mlx5_0"},), {}, "'mlx5_0'"),
    (hca_filter.hca_mapping, ("0:mlx5_0:1",), {"output": "xml"}, "'xml'"),
    (verify_helpers.verify_thresholds, (NO_DEFAULT, "b20"), {}, "known profiles b200, h200"),
    (verify_helpers.verify_thresholds, (TABLE, 5), {}, "profile 5 is not a string"),
    (verify_helpers.verify_thresholds, (TABLE, "mycluster"), {"family": "b300"},
     "profile 'mycluster' declares (gpufleet_gpu_family) the GPU family b300"),
    (verify_helpers.verify_thresholds, (TABLE, "mycluster"), {"family": "B200"},
     "GPU family 'B200' (gpufleet_gpu_family)"),
    (gpu_arch_filter.gpu_arch, ("b400", "torch"), {}, "'b400' is no GPU family the collection knows; expected one of"),
    (gpu_arch_filter.gpu_arch, (["b200"], "cmake"), {}, "GPU family ['b200'] is a list, not a family name"),
    (gpu_arch_filter.gpu_arch, ("b200", "sm"), {}, "notation 'sm' is not one of torch, cmake"),
    (gpu_arch_filter.gpu_arch, ("b200", "torch"), {"as_list": "yes"}, "as_list must be true or false; got 'yes'"),
    (verify_helpers.verify_thresholds, ([], "b200"), {}, "[]"),
    (verify_helpers.verify_thresholds, ({"b200": {"fast_gbps": 1}}, "b200"), {}, "'fast_gbps'"),
    (verify_helpers.verify_thresholds, ({"b200": {"dispatch_bf16_nvl_gbps": "fast"}}, "b200"), {}, "'fast'"),
    (version_helpers.cuda_tag, ("abc",), {}, "'abc'"),
    (version_helpers.cuda_tag, ("13.0\nx",), {}, "13.0\\nx"),
    (version_helpers.torch_index_url, ("13.0",), {"nightly": "yes"}, "'yes'"),
    (build_once_filter.build_leaders, ("x",), {}, "got str"),
    (build_once_filter.build_leaders, ([{"key": "zz", "host": "n1"}],), {}, "'zz'"),
    (build_once_filter.build_leaders, ([{"key": "abcdef0123\n", "host": "n1"}],), {}, "'abcdef0123\\n'"),
    (build_once_filter.build_leaders, ([5],), {}, "record 0 is a int"),
    (build_once_filter.build_leaders, ([],), {"want": ""}, "''"),
    (transport_filter.transport_truth, (7,), {}, "output must be a string, a list of lines or a command result"),
    (transport_filter.transport_truth, ({"rc": 1},), {}, "command result with stdout/stderr; got keys ['rc']"),
    (transport_filter.transport_truth, (["ok", None],), {}, "item 1 is a NoneType (None)"),
    (transport_filter.transport_gate, ("",), {"policy": {"allow_path": ["p2p"]}},
     "policy key(s) 'allow_path' unknown; expected a mapping with some of allow_paths"),
    (transport_filter.transport_gate, ("",), {"policy": "intranode_only"}, "got a str ('intranode_only')"),
    (transport_filter.transport_gate, ("",), {"policy": {"allow_paths": ["nvlink"]}},
     "allow_paths entry 'nvlink' is not one of p2p, shm, net, net_gdrdma"),
    (transport_filter.transport_gate, ("",), {"policy": {"allow_transports": "p2p"}},
     "allow_transports must be a list of p2p/ibgda/ibrc/ucx/ibdevx/libfabric; got 'p2p'"),
    (transport_filter.transport_gate, ("",), {"policy": {"allow_networks": [""]}},
     "allow_networks entries must be non-empty strings; got ''"),
    (transport_filter.transport_gate, ("",), {"policy": {"allow_gin": ["CPU"]}},
     "allow_gin entry 'CPU' is not one of GDAKI, EFA_GDA, PROXY, GPI, none"),
    (transport_filter.transport_gate, ("",), {"policy": {"require_ibgda": "yes"}},
     "require_ibgda must be true or false; got 'yes' (str)"),
    (transport_filter.transport_gate, ("",), {"policy": {"allow_cpu_fallback": 1}},
     "allow_cpu_fallback must be true or false; got 1 (int)"),
    (transport_filter.transport_gate, ("",), {"policy": {"require_nccl_match": "no"}},
     "require_nccl_match must be true or false; got 'no' (str)"),
    (transport_filter.transport_gate, ("",), {"policy": {"require_mnnvl": "no"}},
     "require_mnnvl must be true or false; got 'no' (str)"),
    (transport_filter.transport_gate, ({"nvshmem": [], "nccl": {}, "deepep": {}},), {},
     "truth must be the mapping transport_truth returns"),
] + [
    # transport_policy: a bad value of every policy key, in an entry and in its by_backend, names the profile
    (transport_filter.transport_policy, ({"default": {}, "b200": {key: bad}}, "gcp_b200", "v1"), {},
     "transport policy 'b200': policy %s" % key)
    for key, bad in (("allow_paths", ["nvlink"]), ("allow_transports", "p2p"), ("allow_networks", [""]),
                     ("allow_gin", ["CPU"]), ("require_ibgda", "yes"), ("allow_cpu_fallback", 1),
                     ("require_nccl_match", "no"), ("require_mnnvl", "yes"))
] + [
    (transport_filter.transport_policy, ({"default": {"by_backend": {"v2": {key: bad}}}}, "x", "v1"), {},
     "transport policy 'default' by_backend['v2']: policy %s" % key)
    for key, bad in (("allow_paths", "p2p"), ("allow_gin", ["gdaki-ish"]), ("require_ibgda", "true"))
] + [
    (transport_filter.transport_policy, ({"default": {"allow_path": ["p2p"]}}, "x", "v1"), {},
     "transport policy 'default': policy key(s) 'allow_path' unknown; expected a mapping with some of allow_paths"),
    (transport_filter.transport_policy, ({"default": {"by_backend": {"v3": {}}}}, "x", "v2"), {},
     "by_backend key 'v3' is not a backend; expected one of deepep_v1, deepep_v2, nccl_ep, v1, v2"),
    (transport_filter.transport_policy, ({"default": {"by_backend": ["v2"]}}, "x", "v2"), {},
     "by_backend must be a mapping of backend to policy keys; got ['v2']"),
    (transport_filter.transport_policy, ({"default": {"by_backend": {"v1": "ibgda"}}}, "x", "v1"), {},
     "by_backend['v1'] must be a mapping"),
    (transport_filter.transport_policy, ({"default": "p2p"}, "x", "v1"), {},
     "transport policy 'default' must be a mapping"),
    (transport_filter.transport_policy, ([], "b200", "v1"), {}, "transport policies must be a mapping of profile name"),
    (transport_filter.transport_policy, ({"default": {}}, 5, "v1"), {}, "profile 5 is not a string"),
    (transport_filter.transport_policy, ({}, "x"), {"backend": "v3"},
     "backend 'v3' is not one the collection runs; expected one of deepep_v1, deepep_v2, nccl_ep, v1, v2"),
    (transport_filter.transport_policy, ({}, "x"), {}, "transport_policy: backend is not given; expected one of"),
    (transport_filter.transport_policy, ({}, "x", "v1"), {"scope": "engram"},
     "DeepEP V1 has no engram test (scope='engram'); expected one of internode, intranode, low_latency_internode"),
    (transport_filter.transport_verdict, ("",), {"policy": {"allow_gin": "GDAKI"}},
     "transport_verdict: policy allow_gin must be a list of GDAKI/EFA_GDA/PROXY/GPI/none; got 'GDAKI'"),
    (transport_filter.transport_verdict, (7,), {}, "output must be a string, a list of lines or a command result"),
] + [
    # nvshmem_rdma_needs / mlx5dv_verdict: an NVSHMEM version of another form names the value and the form expected
    (func, args_of(bad), {}, "%s: nvshmem_version: %r is not an NVSHMEM version such as 3.4.5-0, 3.4.5 or v3.4.5-0"
     % (func.__name__, bad))
    for func, args_of in ((version_helpers.nvshmem_rdma_needs, lambda v: (v,)),
                          (version_helpers.mlx5dv_verdict, lambda v: ({"present": True, "symbols": {}}, v)))
    for bad in ("latest", "3", "3.4.x", "3.4.5rc1", "3.4.5-0\n", "3.4.5+cu129", "v", "3.4.5-0-1", "main")
] + [
    (version_helpers.nvshmem_rdma_needs, (bad,), {},
     "nvshmem_rdma_needs: nvshmem_version: %r is not an NVSHMEM version such as 3.4.5-0, 3.4.5 or v3.4.5-0 "
     "(major.minor[.patch][-package]), or empty for an unknown version (got a %s; quote the version in YAML)"
     % (bad, type(bad).__name__))
    for bad in (3.4, 345, True, ["3.4.5"], {"version": "3.4.5"})
] + [
    # mlx5dv_verdict: header facts of another shape than node_stack's gpufleet_symbols entry
    (version_helpers.mlx5dv_verdict, (header, "3.4.5-0"), {},
     "mlx5dv_verdict: header: %r is not a header's facts (expected {present: true|false, symbols: {SYMBOL: "
     "true|false}}" % (header,))
    for header in ("/usr/include/infiniband/mlx5_api.h", None, {"present": True}, {"symbols": {}},
                   {"present": "yes", "symbols": {}}, {"present": True, "symbols": ["MLX5DV_X"]},
                   {"present": True, "symbols": {"MLX5DV_X": "no"}}, {"present": True, "symbols": {1: True}})
] + [
    (verify_helpers.verify_sweep_plan, ("n1,n2,n3",), {}, "hosts must be a list of host names"),
    (verify_helpers.verify_sweep_plan, (["n1", "n1", "n2"],), {}, "must not repeat a host"),
    (verify_helpers.verify_sweep_plan, (["n1", "a+b", "n2"],), {}, "non-empty host names without '+'"),
    (verify_helpers.verify_sweep_verdict, (["n1", "n2", "n3"], {"n1+n3": False}), {},
     "results name pair(s) n1+n3 that the sweep of n1, n2, n3 does not run; expected some of n1+n2, n2+n3"),
    (verify_helpers.verify_sweep_verdict, (["n1", "n2", "n3"], {"n1+n2": "failed"}), {},
     "results['n1+n2'] must be true/false"),
    (verify_helpers.verify_sweep_verdict, (["n1", "n2", "n3"], "n1+n2"), {},
     "results must be a mapping of pair name (a+b) to passed"),
    (verify_helpers.verify_sweep_verdict, (["n1", "n2", "n3"], [{"pair": "n1+n2", "passed": "no"}]), {},
     "each sweep report must be {pair: 'a+b', passed: true/false}"),
]


def test_transport_policy_cases_cover_every_policy_key():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import POLICY_KEYS

    named = {key for func, args, _k, _n in FILTER_BAD if func is transport_filter.transport_policy
             if isinstance(args[0], dict) for entry in args[0].values() if isinstance(entry, dict)
             for key in entry if key in POLICY_KEYS}
    assert named == set(POLICY_KEYS)


@pytest.mark.parametrize("role", ["verify_intranode", "verify_internode"])
def test_the_roles_transport_policies_are_the_sites_and_the_backends_are_valid(role):
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import check_policy

    table = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())[role + "_transport_policies"]
    assert table == {}
    for backend in ("v1", "v2"):
        chosen = transport_filter.transport_policy(table, "gcp_b200", backend, role.split("_")[1])
        assert chosen["matched"] is None and check_policy(chosen["policy"]), (role, backend)


def test_transport_gate_cases_cover_every_policy_key():
    from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import POLICY_KEYS

    named = {key for func, _a, kwargs, _n in FILTER_BAD if func is transport_filter.transport_gate
             for key in (kwargs.get("policy") if isinstance(kwargs.get("policy"), dict) else {})}
    assert named >= set(POLICY_KEYS)


@pytest.mark.parametrize("func,args,kwargs,named", FILTER_BAD,
                         ids=["%s-%d" % (c[0].__name__, i) for i, c in enumerate(FILTER_BAD)])
def test_filters_refuse_naming_the_value(func, args, kwargs, named):
    filters = {}
    for module in (hca_filter, verify_helpers, version_helpers, build_once_filter, transport_filter, gpu_arch_filter):
        filters.update(module.FilterModule().filters())
    with pytest.raises(AnsibleFilterError) as err:
        filters[func.__name__](*args, **kwargs)
    assert named in str(err.value), str(err.value)


def test_unexpected_error_in_a_filter_is_a_filter_error_naming_the_input():
    def broken(value):
        return value["missing"]
    wrapped = guard_filters({"broken": broken})["broken"]
    with pytest.raises(AnsibleFilterError, match=r"broken: unexpected KeyError: 'missing' \(input \{'a': 1\}\)"):
        wrapped({"a": 1})


# ---------------------------------------------------------------------------------------------- role argument specs
WRONG = {"int": ["abc", [1], {"a": 1}], "bool": ["maybe", [True]], "list": [{"a": 1}], "dict": ["notadict", [1]]}


def argument_spec_cases():
    cases = []
    for spec_file in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"]
        for entry, spec in sorted(specs.items()):
            for name, option in sorted((spec.get("options") or {}).items()):
                for value in WRONG.get(option.get("type", "str"), []):
                    if option.get("options") and not isinstance(value, str):
                        continue  # ansible-core's validator raises TypeError on a list for a dict with suboptions
                    cases.append((spec_file.parts[-3], entry, name, value))
                if option.get("choices") and option.get("type", "str") == "str":
                    cases.append((spec_file.parts[-3], entry, name, "no-such-choice"))
    return cases


ARG_CASES = argument_spec_cases()


def test_argument_spec_cases_cover_every_role():
    assert len({c[0] for c in ARG_CASES}) == len(list((REPO / "roles").glob("*/meta/argument_specs.yml")))
    assert len(ARG_CASES) > 150


@pytest.mark.parametrize("role,entry,name,value", ARG_CASES,
                         ids=["%s.%s.%s-%d" % (c[0], c[1], c[2], i) for i, c in enumerate(ARG_CASES)])
def test_role_argument_specs_refuse_wrong_types(role, entry, name, value):
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"][entry]
    options = dict(spec["options"])
    result = ArgumentSpecValidator(options).validate({name: value})
    errors = [str(e) for e in result.errors]
    assert errors, "%s.%s accepted %r" % (role, name, value)
    assert any(name in e for e in errors), errors
    if options[name].get("type") in ("int", "bool") and isinstance(value, str):
        assert any(value in e for e in errors), errors


def nested_bool_cases():
    """Every boolean suboption of a role's dict variable (e.g. sglang_server.enable_dp_attention), with a string
    that is not a boolean: YAML's "no" and friends are truthy strings once inside a dict, so the spec types them."""
    cases = []
    for spec_file in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"]
        for entry, spec in sorted(specs.items()):
            for name, option in sorted((spec.get("options") or {}).items()):
                for sub, suboption in sorted((option.get("options") or {}).items()):
                    if suboption.get("type") == "bool":
                        cases += [(spec_file.parts[-3], entry, name, sub, v) for v in ("maybe", "nope", "2")]
    return cases


NESTED_BOOL_CASES = nested_bool_cases()


@pytest.mark.parametrize("role,entry,name,sub,value", NESTED_BOOL_CASES,
                         ids=["%s.%s.%s-%d" % (c[0], c[2], c[3], i) for i, c in enumerate(NESTED_BOOL_CASES)])
def test_role_argument_specs_refuse_a_nested_boolean_that_is_not_one(role, entry, name, sub, value):
    options = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"][
        entry]["options"]
    errors = [str(e) for e in ArgumentSpecValidator(options).validate({name: {sub: value}}).errors]
    assert any(sub in e and value in e for e in errors), errors


def test_nested_boolean_cases_cover_the_serving_settings():
    assert ("sglang", "main", "sglang_server", "enable_dp_attention", "maybe") in NESTED_BOOL_CASES


# ------------------------------------------------- linkage records of the wrong shape (node_stack gather: [linkage])
# Every key of the schema-1 linkage record (and of its objects and sub-mappings) with a value of the wrong type: the
# record is not used, every check is null, and the reason names the stamp, the key, the value and the expected form.
LINKAGE_BAD = [
    ("schema", "1", None), ("artifact", 5, "'artifact' is 5 (int), expected str"),
    ("objects", "deep_ep/_C.so", "'objects' is 'deep_ep/_C.so' (str), expected list"),
    ("objects", [], "'objects' is [], expected at least one object"),
    ("objects", ["deep_ep/_C.so"], "objects[0]) %s is JSON of type str, expected an object"),
    ("torch", "2.11.0", "'torch' is '2.11.0' (str), expected dict|null"),
    ("cuda", 13.0, "'cuda' is 13.0 (float), expected str|null"),
    ("compiler", ["g++"], "'compiler' is ['g++'] (list), expected dict"),
    ("nccl", "2.30.7", "'nccl' is '2.30.7' (str), expected dict|null"),
    ("nvshmem", ["3.4.5"], "'nvshmem' is ['3.4.5'] (list), expected dict|null"),
    ("baked_env", "EP_JIT_CACHE_DIR=/x", "'baked_env' is 'EP_JIT_CACHE_DIR=/x' (str), expected dict|null"),
    ("warnings", "none", "'warnings' is 'none' (str), expected list"),
    ("torch.version", 2.11, "(torch) %s: 'version' is 2.11 (float), expected str|null"),
    ("torch.cxx11_abi", "yes", "(torch) %s: 'cxx11_abi' is 'yes' (str), expected bool|null"),
    ("torch.cuda", 13, "(torch) %s: 'cuda' is 13 (int), expected str|null"),
    ("nccl.header_version", 2.3, "(nccl) %s: 'header_version' is 2.3 (float), expected str|null"),
    ("nccl.root", ["/x"], "(nccl) %s: 'root' is ['/x'] (list), expected str|null"),
    ("nccl.library", 1, "(nccl) %s: 'library' is 1 (int), expected str|null"),
    ("nvshmem.host_version", 3, "(nvshmem) %s: 'host_version' is 3 (int), expected str|null"),
    ("nvshmem.host_library", True, "(nvshmem) %s: 'host_library' is True (bool), expected str|null"),
    ("nvshmem.device_version", 3.4, "(nvshmem) %s: 'device_version' is 3.4 (float), expected str|null"),
    ("nvshmem.device_library", {}, "(nvshmem) %s: 'device_library' is {} (dict), expected str|null"),
    ("compiler.cxx", 1, "(compiler) %s: 'cxx' is 1 (int), expected str|null"),
    ("compiler.version", 13, "(compiler) %s: 'version' is 13 (int), expected str|null"),
    ("objects.0.path", None, "(objects[0]) %s: 'path' is None (NoneType), expected str"),
    ("objects.0.needed", "libnccl.so.2", "(objects[0]) %s: 'needed' is 'libnccl.so.2' (str), expected list"),
    ("objects.0.needed", [1], "(objects[0]) %s: 'needed' is [1], expected a list of strings"),
    ("objects.0.runpath", "/a:/b", "(objects[0]) %s: 'runpath' is '/a:/b' (str), expected list"),
    ("objects.0.rpath", [None], "(objects[0]) %s: 'rpath' is [None], expected a list of strings"),
    ("objects.0.soname", 1, "(objects[0]) %s: 'soname' is 1 (int), expected str|null"),
    ("objects.0.libstdcxx", None, "(objects[0]) %s: 'libstdcxx' is None (NoneType), expected str"),
    ("objects.0.sass", "sm_90", "(objects[0]) %s: 'sass' is 'sm_90' (str), expected list|null"),
    ("objects.0.ptx", [90], "(objects[0]) %s: 'ptx' is [90], expected a list of strings"),
]


def test_linkage_bad_cases_cover_every_key_of_the_schema():
    from test_node_stack_linkage import record as linkage_record
    linkage = linkage_record()
    keys = set(linkage) | set("%s.%s" % (k, sub) for k in ("torch", "nccl", "nvshmem", "compiler")
                              for sub in linkage[k]) | set("objects.0.%s" % k for k in linkage["objects"][0])
    assert keys == set(key for key, dummy, dummy2 in LINKAGE_BAD)


@pytest.mark.parametrize("key,value,why", LINKAGE_BAD, ids=["%s=%r" % (c[0], c[1]) for c in LINKAGE_BAD])
def test_linkage_record_of_the_wrong_shape_is_not_used_and_named(tmp_path, key, value, why):
    from test_node_stack_linkage import SITE, Node, record as linkage_record
    linkage = linkage_record()
    node_value = linkage
    parts = key.split(".")
    for part in parts[:-1]:
        node_value = node_value[int(part)] if isinstance(node_value, list) else node_value[part]
    node_value[int(parts[-1]) if isinstance(node_value, list) else parts[-1]] = value
    node = Node(tmp_path, linkage)
    before = snapshot(node.root)
    facts = node.gather()
    stamp = SITE + "/deep_ep/.gpufleet-build.json"
    assert facts["ok"] is None and facts["record"]["present"] is False and facts["failed"] == []
    if why is None:  # a schema other than 1 is a build before linkage records
        why = "no linkage record of schema 1 in the build stamp %s (its linkage has schema '1'" % stamp
    why = why.replace("%s", stamp) if "%s" in why else why
    assert why in facts["record"]["reason"] and stamp in facts["record"]["reason"], facts["record"]["reason"]
    assert all(c["ok"] is None and c["reason"] == facts["record"]["reason"] for c in facts["checks"])
    assert snapshot(node.root) == before


# --------------------------------------------------------------------------------- files a module reads, as data
ENV_BAD = ["[ -d /x ] && export A=1", "export A=1; reboot", "export A=$(id -u)", "export A=`id -u`",
           "export A=\"$(touch /tmp/x)\"", "source /etc/profile", ". /etc/profile", "export A='unterminated",
           "export A=${B:?boom}", "export A=1 2", "eval export A=1", "export A=>x", "A=1 python -c 1",
           "export A=${B:-$(id)}", "export A=$((1+1))", "alias ls=rm", "function f { :; }", "export A=a|b"]


@pytest.mark.parametrize("line", ENV_BAD)
def test_env_script_lines_a_shell_would_interpret_are_refused_naming_them(line):
    exports, raw, env, errors = _envscript.read_env_script("export OK=1\n" + line + "\n")
    assert exports.get("OK") == "1"
    assert len(errors) == 1 and errors[0].startswith("line 2 %r" % line.strip()), errors


@pytest.mark.parametrize("text", [os.urandom(64).decode("latin-1"), "\x00\x01\x02", "hello world\n", "\ufffd\ufffd",
                                  "Name: value\nrandom junk line\n", ""])
def test_random_bytes_in_the_params_file_are_not_a_loaded_driver(text):
    live = _nvidia_params.live_facts(text, None)
    assert live["driver_loaded"] is False and live["params_unreadable"]


def test_real_params_file_is_a_loaded_driver(captured_dir):
    live = _nvidia_params.live_facts((captured_dir / "proc_driver_nvidia_params").read_text(), None)
    assert live["driver_loaded"] is True and live["params_unreadable"] is None


def test_random_params_file_warns_naming_it(module_runner, tmp_path):
    (tmp_path / "params").write_bytes(os.urandom(256))
    result = module_runner(nvidia_params, nvidia_args(tmp_path), check_mode=True)
    assert not result.failed
    assert result["ansible_facts"]["gpufleet_nvidia"]["driver_loaded"] is False
    assert any(str(tmp_path / "params") in str(w) for w in result["warnings"])


# --------------------------------------------------------------------------------------- the last-resort handler
def test_unexpected_exception_becomes_a_failure_naming_the_input(capsys, monkeypatch):
    from ansible.module_utils import basic

    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(
        {"ANSIBLE_MODULE_ARGS": {"path": "/var/lib/x.json", "_ansible_check_mode": False}}).encode())

    def body():
        raise KeyError("values")

    with pytest.raises(SystemExit) as exit_info:
        _guard.guarded("site_state", body)
    assert exit_info.value.code == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["failed"] is True
    assert printed["msg"].startswith("site_state: unexpected KeyError: 'values'")
    assert '"path": "/var/lib/x.json"' in printed["msg"] and "_ansible" not in printed["msg"]
    assert "Traceback" not in printed["msg"]


def test_every_module_main_is_guarded():
    # the build modules end through _runner.finish, which holds the same last resort (tested below); the action-only
    # modules are documentation (their action plugin holds the last resort)
    for path in sorted((REPO / "plugins" / "modules").glob("*.py")):
        text = path.read_text()
        if path.name == "__init__.py" or "\ndef main(" not in text:
            continue
        assert "guarded(\"%s\", _main)" % path.stem in text or "    finish(module, " in text, path.name


def test_a_build_module_ends_an_unexpected_error_as_a_failure_naming_it():
    from ansible_collections.gpufleet.deepep.plugins.module_utils import _runner

    class Module:
        def fail_json(self, **kw):
            raise SystemExit(kw)

        def exit_json(self, **kw):  # pragma: no cover - the job raises
            raise AssertionError(kw)

    class Job:
        result = {"changed": False, "log": "/var/log/x.log"}

        def run(self):
            raise KeyError("sha256")

    with pytest.raises(SystemExit) as stop:
        _runner.finish(Module(), Job(), "gpufleet_nccl_build")
    failure = stop.value.args[0]
    assert failure["msg"].startswith("gpufleet_nccl_build: unexpected KeyError: 'sha256'")
    assert failure["log"] == "/var/log/x.log" and "Traceback" not in failure["msg"]


def test_no_anchored_match_left_in_validation():
    """Validation regexes are full matches: no ``re.match(r"^...$")`` that would take a trailing newline."""
    import re

    for path in sorted((REPO / "plugins").rglob("*.py")):
        text = path.read_text()
        assert not re.search(r're\.match\(r"\^[^"]*\$"', text), path


# ------------------------------------------- issue 28, class 5: nested shapes and URLs of the serving and state modules
def _topology():
    return {"prefill": {"hosts": [{"name": "p-1", "address": "10.0.0.10"}], "settings": {"tp": 1}},
            "decode": {"hosts": [{"name": "d-1", "address": "10.0.0.20"}], "settings": {"port": 30001}},
            "router": {"hosts": [{"name": "r-1", "address": "10.0.0.30"}], "settings": {}}}


def _set(path, value):
    """A copy of the topology with ``value`` at ``path`` (a tuple of keys/indexes)."""
    def apply(topology):
        node = topology
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return topology
    return apply


# (what is changed in a good topology, the args beside it, the place named, the form named)
SERVE_PLAN_BAD = [
    (_set(("prefill",), "p-1"), {}, "topology prefill 'p-1'", "expected a mapping {hosts: [...], settings: {...}}"),
    (_set(("bogus",), {}), {}, "unknown role(s) bogus", "expected some of prefill, decode, router"),
    (_set(("prefill", "hosts"), "p-1"), {}, "sglang_prefill hosts 'p-1'", "expected a list of {name: <inventory name>"),
    (_set(("prefill", "hosts", 0), "p-1"), {}, "sglang_prefill host 0 'p-1'", "address: <IP or DNS name>}"),
    (_set(("decode", "hosts", 0), {"name": "d-1"}), {}, "sglang_decode host 0 {'name': 'd-1'}", "expected a list of"),
    (_set(("decode", "hosts", 0), None), {}, "sglang_decode host 0 None", "expected a list of"),
    (_set(("router", "hosts", 0), {"name": 5, "address": "x"}), {}, "router host 0", "expected a list of"),
    (_set(("decode", "settings"), "tp=2"), {}, "sglang_decode settings 'tp=2'", "expected a mapping of setting: value"),
    (_set(("router", "settings"), [1]), {}, "router settings [1]", "expected a mapping of setting: value"),
    (_set(("decode", "settings", "extra_args"), [{"a": 1}]), {}, "sglang_decode: extra_args item {'a': 1}",
     "expected a list of strings"),
    (_set(("decode", "settings", "environment"), {"A": {"b": 1}}), {}, "sglang_decode: environment 'A': {'b': 1}",
     "expected NAME: value with a string or number value"),
    (_set(("decode", "settings", "environment"), {"A": None}), {}, "sglang_decode: environment 'A': None",
     "expected NAME: value"),
    (_set(("decode", "settings", "port"), 70000), {}, "sglang_decode: port is 70000", "expected a TCP port, 1 to 65535"),
    (_set(("decode", "settings", "port"), "30o01"), {}, "sglang_decode: port is '30o01'", "expected a TCP port"),
    (_set(("prefill", "settings", "bootstrap_port"), True), {}, "sglang_prefill: bootstrap_port is True",
     "expected a TCP port"),
    (_set(("router", "settings", "port"), 99999), {}, "router: port is 99999", "expected a TCP port, 1 to 65535"),
    (_set(("router", "settings", "prometheus_port"), 65536), {}, "router: prometheus_port is 65536", "TCP port"),
    (_set(("decode", "settings", "tp"), 1.5), {}, "sglang_decode: tp is 1.5", "expected a positive integer"),
    (_set(("decode", "settings", "dp"), "two"), {}, "sglang_decode: dp is 'two'", "expected a positive integer"),
    (_set(("router", "settings", "health_check_timeout_secs"), [5]), {}, "router: health_check_timeout_secs is [5]",
     "expected a positive integer"),
    (lambda t: t, {"model": {"num_attention_heads": "nine"}}, "model num_attention_heads 'nine'",
     "expected a positive integer"),
    (lambda t: t, {"model": {"num_attention_heads": True}}, "model num_attention_heads True", "positive integer"),
    (lambda t: t, {"nodes": {"d-1": "x"}}, "nodes d-1 'x'", "expected the node's serve_node facts, a mapping"),
    (lambda t: t, {"nodes": {"d-1": {"env": ["A=1"]}}}, "nodes d-1 env ['A=1']", "expected a mapping NAME: value"),
]


@pytest.mark.parametrize("change,extra,place,form", SERVE_PLAN_BAD,
                         ids=["serve_plan-%d" % i for i in range(len(SERVE_PLAN_BAD))])
def test_serve_plan_refuses_a_malformed_nested_value_naming_it(module_runner, tmp_path, change, extra, place, form):
    before = snapshot(tmp_path)
    args = dict({"topology": change(_topology()), "host": "d-1", "config_dir": str(tmp_path)}, **extra)
    result = module_runner(serve_plan, args)
    assert result.failed, result
    assert place in result["msg"] and form in result["msg"], result["msg"]
    assert "unexpected" not in result["msg"] and "Traceback" not in result["msg"]
    assert snapshot(tmp_path) == before


URL_FORM = "expected an http(s)://<host>[:<port>]/<path> or file:///<path> URL"
# (module, option, value, why): every option of the serving and state modules that takes a URL
URL_BAD = [
    (serve_state, "router_url", "http://127.0.0.1:30o80", "Port could not be cast to integer value"),
    (serve_state, "router_url", "http://127.0.0.1:99999", "Port out of range"),
    (serve_state, "router_url", "ftp://127.0.0.1:30080", "scheme 'ftp' is not http or https"),
    (serve_state, "router_url", "http://:30080", "no host"),
    (serve_state, "router_url", "http://127.0.0.1:30080/\nx", "control character"),
    (sglang_env, "index_url", "http://pypi:abc/simple", "Port could not be cast to integer value"),
    (sglang_env, "index_url", "pypi.example.org/simple", "scheme '' is not http or https"),
    (sglang_env, "extra_index_urls", ["http://pypi:abc/simple"], "Port could not be cast"),
    (sglang_env, "find_links", ["wheels/here"], "scheme '' is not http or https"),
    (sglang_env, "find_links", ["https://mirror:0/w"], "port 0 is not a port"),
    (nccl_env, "index_url", "http://pypi:abc/simple", "Port could not be cast to integer value"),
    (nccl_env, "extra_index_urls", ["https://user:pw@pypi/simple"], "credentials in the URL"),
    (nccl_env, "find_links", ["http://mirror:65536/w"], "Port out of range"),
]


URL_IDS = ["%s-%s-%d" % (c[0].__name__.rsplit(".", 1)[-1], c[1], i) for i, c in enumerate(URL_BAD)]


@pytest.mark.parametrize("module,option,value,why", URL_BAD, ids=URL_IDS)
def test_a_malformed_url_is_refused_naming_option_value_and_form(module_runner, tmp_path, module, option, value, why):
    import sys

    from ansible_collections.gpufleet.deepep.plugins.module_utils import _http

    before = snapshot(tmp_path)
    args = {option: value}
    if module is sglang_env:
        args.update(python=sys.executable, state="present", version="0.5.8", sysfs_root=str(tmp_path),
                    constraint_file=str(tmp_path / "constraints.txt"))
    elif module is nccl_env:
        args.update(python=sys.executable, version="2.30.7")
    else:
        args.update(config_dir=str(tmp_path))
    result = module_runner(module, args)
    assert result.failed, result
    shown = value[0] if isinstance(value, list) else value
    assert result["msg"].startswith("%s %r: " % (option, _http.redact_url(shown))), result["msg"]  # no password
    assert why in result["msg"] and "expected" in result["msg"]
    assert (URL_FORM if module is not serve_state else "expected http://<host>:<port>") in result["msg"]
    assert snapshot(tmp_path) == before


# sglang_env's nested options (holds, versions, names, checksums, requirement hashes): (option, value, named, form)
SGLANG_ENV_BAD = [
    ("hold", {"torch": [1]}, "hold torch [1]", "expected a version such as 2.9.1"),
    ("hold", {"torch": {"v": 1}}, "hold torch {'v': 1}", "expected a version"),
    ("hold", {"torch": True}, "hold torch True", "expected a version"),
    ("hold", {"torch": "2.9\n1"}, "hold torch '2.9\\n1'", "expected a version"),
    ("hold", {"bad name!": "1"}, "hold 'bad name!'", "expected project: version"),
    ("version", "0.5.8;x", "version '0.5.8;x'", "expected a release such as 0.5.8"),
    ("kernel_version", "a b", "kernel_version 'a b'", "expected a release"),
    ("transfer_engine_version", "1.5.1\n", "transfer_engine_version '1.5.1\\n'", "expected a release"),
    ("cuda_version", "twelve", "cuda_version 'twelve'", "expected a CUDA release such as 12.9"),
    ("exclude", ["bad name!"], "exclude 'bad name!'", "expected pip project names"),
    ("ignore_installed", ["a/b"], "ignore_installed 'a/b'", "expected pip project names"),
    ("wheelhouse_checksums", {"a.whl": [1]}, "wheelhouse_checksums a.whl [1]", "expected a sha256 (64 hex digits)"),
    ("wheelhouse_checksums", {"a.whl": "zz"}, "wheelhouse_checksums a.whl 'zz'", "expected a sha256"),
    ("wheelhouse_checksums", {"../a.whl": "0" * 64}, "wheelhouse_checksums '../a.whl'", "expected <wheel file name>"),
    # class 6: the digests of hash-pinned online installs
    ("requirements_hashes", {"sglang": ["0" * 64]}, "requirements_hashes 'sglang'", "expected project==version:"),
    ("requirements_hashes", {"sglang>=0.5": ["0" * 64]}, "requirements_hashes 'sglang>=0.5'", "project==version"),
    ("requirements_hashes", {"sglang==0.5.8": "abc"}, "requirements_hashes sglang==0.5.8: 'abc'",
     "is not a list of sha256 digests"),
    ("requirements_hashes", {"sglang==0.5.8": []}, "requirements_hashes sglang==0.5.8: []", "sha256 digests"),
    ("requirements_hashes", {"sglang==0.5.8": [{"a": 1}]}, "requirements_hashes sglang==0.5.8", "sha256 digests"),
    ("requirements_hashes", {"sglang==0.5.8": ["0" * 64], "SGLang==0.5.9": ["1" * 64]},
     "SGLang==0.5.9: sglang is pinned twice", "expected project==version"),
]


@pytest.mark.parametrize("option,value,named,form", SGLANG_ENV_BAD,
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(SGLANG_ENV_BAD)])
def test_sglang_env_refuses_a_malformed_nested_option_before_anything(module_runner, tmp_path, option, value,
                                                                      named, form):
    import sys

    before = snapshot(tmp_path)
    args = {"python": sys.executable, "state": "present", "version": "0.5.8", "sysfs_root": str(tmp_path),
            "constraint_file": str(tmp_path / "constraints.txt"), "pip_config_file": str(tmp_path / "pip.conf")}
    args[option] = value
    result = module_runner(sglang_env, args)
    assert result.failed, result
    assert named in result["msg"] and form in result["msg"], result["msg"]
    assert result["commands"] == [] and "unexpected" not in result["msg"]
    assert snapshot(tmp_path) == before


def test_serve_state_refuses_a_ca_path_that_is_not_a_file(module_runner, tmp_path):
    missing = str(tmp_path / "ca.pem")
    result = module_runner(serve_state, {"router_url": "https://127.0.0.1:30080", "ca_path": missing,
                                         "config_dir": str(tmp_path)})
    assert result.failed and result["msg"] == "ca_path %r: not a file; expected a PEM file of CA certificates" % missing


# ----------------------------------------------- issue 28, class 7: controller-side writers refuse to write through links
@pytest.mark.parametrize("layout,named,why", [
    ("link_to_dir", "out", "is a symlink"), ("dangling", "out", "is a symlink"),
    ("dangling_parent", "out/run", "is a dangling symlink"), ("file_link", "real/fleet.json", "is a symlink"),
])
def test_refuse_links_names_the_option_and_the_link(tmp_path, layout, named, why):
    from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import LinkRefused, refuse_write_through_link

    target = tmp_path / "target"
    if layout == "link_to_dir":
        target.mkdir()
        (tmp_path / "out").symlink_to(target)
    elif layout in ("dangling", "dangling_parent"):
        (tmp_path / "out").symlink_to(target)
    else:
        (tmp_path / "real").mkdir()
        (tmp_path / "real" / "fleet.json").symlink_to(target)

    def entries():  # links are listed, not followed (a dangling one has nothing to read)
        return sorted(os.path.join(d, n) for d, dirs, files in os.walk(str(tmp_path)) for n in dirs + files)

    before = entries()
    with pytest.raises(LinkRefused) as info:
        refuse_write_through_link(str(tmp_path / named), "output_dir")
    assert str(info.value).startswith("output_dir %r: " % str(tmp_path / named)) and why in str(info.value)
    assert "nothing is written through a link - expected a" in str(info.value)
    assert entries() == before
    assert os.path.isdir(str(target)) == (layout == "link_to_dir")  # no target created


def _uri_tasks():
    """Every ansible.builtin.uri task of the roles and playbooks, with its file (blocks walked)."""
    def walk(tasks, path):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key), path)
            if "ansible.builtin.uri" in task:
                yield path, task

    for path in sorted(list((REPO / "roles").glob("*/tasks/*.yml")) + list((REPO / "playbooks").glob("*.yml"))):
        data = yaml.safe_load(path.read_text()) or []
        plays = [p for p in data if isinstance(p, dict) and "hosts" in p]
        if plays:
            for play in plays:
                for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                    yield from walk(play.get(key), path)
        else:
            yield from walk(data, path)


URI_TASKS = list(_uri_tasks())
URI_IDS = ["%s:%s" % (p.relative_to(REPO), t.get("name", "?")[:40]) for p, t in URI_TASKS]


@pytest.mark.parametrize("path,task", URI_TASKS, ids=URI_IDS)
def test_every_http_request_of_the_roles_has_a_deadline_for_the_whole_exchange(path, task):
    """uri's own timeout bounds each socket read; the task timeout bounds the exchange (issue 28, class 4)."""
    assert task["ansible.builtin.uri"].get("timeout") is not None, (path, task["name"])
    assert task.get("timeout") is not None, (path, task["name"])
    own = task["ansible.builtin.uri"]["timeout"]
    deadline = str(task["timeout"])
    named = re.fullmatch(r"\{\{ (\w+) \}\}", deadline)
    if named:  # a role variable (sglang_serve_exchange_timeout): its default keeps the read's bound plus 30 s
        role = path.parent.parent
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
        assert isinstance(own, int) and defaults[named.group(1)] == own + 30, (path, task["name"], deadline)
        assert spec[named.group(1)]["type"] == "int", (path, named.group(1))
    elif isinstance(own, int):
        assert deadline == str(own + 30), (path, task["name"])
    else:
        assert "| int + 30" in deadline, (path, task["name"])


def test_the_uri_tasks_are_found():
    assert len(URI_TASKS) >= 14


# ----------------------------------------------- node_stack gather: [deepep_v2]: the options of V2's runtime checks
BAD_DEEPEP_V2 = [
    ({"deepep_v2_nic_name": "mlx5 0"}, "deepep_v2_nic_name='mlx5 0'"),
    ({"deepep_v2_nic_name": "../mlx5_0"}, "deepep_v2_nic_name='../mlx5_0'"),
    ({"deepep_v2_nic_name": "mlx5_0\nexport X=1"}, "deepep_v2_nic_name='mlx5_0\\nexport X=1'"),
    ({"deepep_v2_nic_name": "m" * 65}, "deepep_v2_nic_name='" + "m" * 65 + "'"),
    ({"deepep_v2_over_rdma": "sometimes"}, "deepep_v2_over_rdma"),
    ({"deepep_v2_across_nodes": "maybe"}, "deepep_v2_across_nodes"),
    ({"gather": ["deepep_v2", "deepep_v3"]}, "deepep_v3"),
]


@pytest.mark.parametrize("args, named", BAD_DEEPEP_V2, ids=[str(i) for i in range(len(BAD_DEEPEP_V2))])
def test_node_stack_deepep_v2_options_refused_and_nothing_written(module_runner, tmp_path, args, named):
    before = snapshot(tmp_path)
    result = module_runner(node_stack, dict({"gather": ["deepep_v2"], "root": str(tmp_path),
                                             "sysfs_root": str(tmp_path)}, **args))
    assert result.failed, result
    assert named in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"]
    if "nic_name" in named:
        assert "expected an RDMA device name" in result["msg"]
    assert snapshot(tmp_path) == before


# ------------------------------------- site_state: where the stamp cannot go, and a dpkg status that cannot be read
def _stamp_over_link(tmp_path):
    (tmp_path / "real.json").write_text("{}\n")
    os.symlink(str(tmp_path / "real.json"), str(tmp_path / "stamp.json"))
    return {"path": str(tmp_path / "stamp.json")}, ["is a symlink (to %s)" % (tmp_path / "real.json"), "expected"]


def _stamp_under_file(tmp_path):
    (tmp_path / "var").write_text("x\n")
    return ({"path": str(tmp_path / "var" / "stamp.json")},
            ["its parent %s is a file" % (tmp_path / "var"), "expected a directory"])


def _stamp_without_dpkg(tmp_path):
    return ({"path": str(tmp_path / "stamp.json"), "packages": ["rdma-core"]},
            ["cannot read dpkg status %s" % (tmp_path / "no-status"), "expected dpkg's status file"])


@pytest.mark.parametrize("make", [_stamp_over_link, _stamp_under_file, _stamp_without_dpkg])
@pytest.mark.parametrize("check_mode", [False, True])
def test_site_state_record_refuses_link_file_parent_and_missing_dpkg(module_runner, tmp_path, make, check_mode):
    args, named = make(tmp_path)
    before = snapshot(tmp_path)
    links = sorted(p.name for p in tmp_path.iterdir() if p.is_symlink())
    result = module_runner(site_state, dict({"key": "k", "state": "record", "watch": [],
                                             "dpkg_status": str(tmp_path / "no-status")}, **args),
                           check_mode=check_mode)
    assert result.failed, result
    assert all(n in result["msg"] for n in named), result["msg"]
    assert "Traceback" not in result["msg"] and "File exists" not in result["msg"]
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_symlink()) == links


def test_node_stack_refuses_a_root_that_is_not_a_directory(module_runner, tmp_path):
    (tmp_path / "root-file").write_text("x\n")
    before = snapshot(tmp_path)
    result = module_runner(node_stack, {"root": str(tmp_path / "root-file"), "gather": ["stack", "paths"],
                                        "paths": ["/etc"]})
    assert result.failed
    assert "root %r is not a directory (expected / or a tree shaped like" % str(tmp_path / "root-file") \
        in result["msg"]
    assert snapshot(tmp_path) == before


# -------------------------------------------------------- serving inputs (issue 46 C): ports, seconds, counts, holds
def _router_on(host, address):
    def apply(topology):
        topology["router"]["hosts"] = [{"name": host, "address": address}]
        return topology
    return apply


# (what is changed in a good topology, the args beside it, the words of the refusal)
SERVING_INPUTS_BAD = [
    (lambda t: _set(("router", "settings"), {"port": 30001})(_router_on("d-1", "10.0.0.20")(t)), {},
     "host d-1: port 30001 is both sglang_decode instance 0's --port (port) and the router's --port (port)"),
    (lambda t: _set(("router", "settings"), {"prometheus_port": 5757})(_router_on("d-1", "10.0.0.20")(t)), {},
     "host d-1: port 5757 is both sglang_decode instance 0's --dist-init-addr port (dist_init_port) and the "
     "router's --prometheus-port (prometheus_port)"),
    (_set(("decode", "settings", "dist_init_port"), 30001), {},
     "host d-1: port 30001 is both sglang_decode instance 0's --port (port) and sglang_decode instance 0's "
     "--dist-init-addr port (dist_init_port)"),
    (lambda t: t, {"start_timeout": -1}, "start_timeout is -1; expected a whole number of seconds of 1 or more"),
    (lambda t: t, {"start_timeout": 0}, "start_timeout is 0; expected a whole number of seconds of 1 or more"),
    (lambda t: t, {"restart_sec": -5}, "restart_sec is -5; expected a whole number of seconds of 0 or more"),
]


@pytest.mark.parametrize("change,extra,words", SERVING_INPUTS_BAD,
                         ids=["serving-%d" % i for i in range(len(SERVING_INPUTS_BAD))])
def test_serve_plan_refuses_colliding_ports_and_bad_seconds_naming_them(
        module_runner, tmp_path, change, extra, words):
    before = snapshot(tmp_path)
    args = dict({"topology": change(_topology()), "host": "d-1", "config_dir": str(tmp_path)}, **extra)
    result = module_runner(serve_plan, args)
    assert result.failed, result
    assert words in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"] and "unexpected" not in result["msg"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("config, words", [
    ({"num_attention_heads": "abc"}, 'num_attention_heads is "abc"; expected a positive integer'),
    ({"num_attention_heads": True},
     "num_attention_heads is true (a boolean, not a number); expected a positive integer"),
    ({"num_attention_heads": 8, "num_hidden_layers": "61"}, 'num_hidden_layers is "61"; expected a positive integer'),
    ({"num_attention_heads": 8, "n_routed_experts": -2}, "n_routed_experts is -2; expected a non-negative integer"),
])
def test_model_config_names_the_file_key_and_value_of_a_count_that_is_no_integer(
        module_runner, tmp_path, config, words):
    (tmp_path / "config.json").write_text(json.dumps(config))
    before = snapshot(tmp_path)
    result = module_runner(model_config, {"path": str(tmp_path)})
    assert result.failed and result["msg"] == "%s: %s" % (tmp_path / "config.json", words), result["msg"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("check_mode", [False, True])
def test_sglang_env_refuses_colliding_holds_and_a_binary_constraints_file_writing_nothing(module_runner, tmp_path,
                                                                                          check_mode):
    import sys  # this section is appended; the file's imports stay as they are

    constraints = tmp_path / "constraints.txt"
    constraints.write_bytes(b"torch==2.9.1\n\xc3\x28 not text\n")
    before = snapshot(tmp_path)
    twice = module_runner(sglang_env, {"python": str(tmp_path / "none"), "state": "present", "version": "0.5.19",
                                       "hold": {"torch": "2.9.1", "Torch": "2.8.0"},
                                       "constraint_file": str(constraints)}, check_mode=check_mode)
    assert twice.failed and "hold names torch twice: torch: 2.9.1 and Torch: 2.8.0" in twice["msg"], twice["msg"]
    binary = module_runner(sglang_env, {"python": sys.executable, "constraint_file": str(constraints),
                                        "sysfs_root": str(tmp_path)}, check_mode=check_mode)
    assert binary.failed and binary["msg"].startswith("constraints file %s is not UTF-8 text" % constraints)
    assert "Traceback" not in twice["msg"] + binary["msg"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("check_mode", [False, True])
def test_hardening3_nics_builds_and_env_script_refuse_or_warn_by_name(module_runner, tmp_path, check_mode):
    """Issue 46 part E: entries of class/infiniband that are no devices, a malformed sha256, an env_script that is a
    directory - each named, nothing written, no traceback."""
    from ansible_collections.gpufleet.deepep.plugins.modules import nvshmem_build, pytorch_bundled_nvshmem, rdma_devices

    sysfs = render_sysfs_tree(tmp_path, nic_naming="mlx5")
    ib = sysfs / "class" / "infiniband"
    (ib / "mlx5_9").symlink_to("../../devices/nowhere/infiniband/mlx5_9")
    (ib / "mlx5_10").write_text("x")
    (ib / "mlx5_0" / "ports" / "1" / "rate").write_text("fast")
    work = tmp_path / "work"  # what must stay unwritten (the sysfs tree holds a dangling link snapshot cannot read)
    env_dir = work / "env.sh"
    env_dir.mkdir(parents=True)
    before = snapshot(work)
    rdma = module_runner(rdma_devices, {"sysfs_root": str(sysfs)}, check_mode=check_mode)
    assert not rdma.failed and [d["name"] for d in rdma["ansible_facts"]["gpufleet_rdma"]["devices"]] == [
        "mlx5_%d" % i for i in range(8)]
    warnings = " | ".join(w if isinstance(w, str) else w["event"]["msg"] for w in rdma.get("warnings", []))
    assert "class/infiniband/mlx5_9 is not listed as an RDMA device: a dangling symbolic link" in warnings
    assert "class/infiniband/mlx5_10 is not listed as an RDMA device: not a directory" in warnings
    assert "RDMA device mlx5_0 port 1: rate 'fast' is not a rate" in warnings

    bad_sha = module_runner(nvshmem_build, {"src": str(work / "nvshmem.tar.gz"), "sha256": "deadbeef",
                                            "prefix": str(work / "opt" / "nvshmem"), "cuda_arch": "90"},
                            check_mode=check_mode)
    assert bad_sha.failed and bad_sha["msg"].startswith("sha256: 'deadbeef' is not a sha256 digest; expected 64 "
                                                        "hexadecimal digits"), bad_sha["msg"]

    env = module_runner(pytorch_bundled_nvshmem, {"site_packages": [str(work)], "env_script": str(env_dir),
                                                  "nvshmem_prefix": str(work / "nvshmem")}, check_mode=check_mode)
    assert env.failed and env["msg"].startswith("env_script %s is a directory" % env_dir), env["msg"]
    for result in (bad_sha, env):
        assert "Traceback" not in result["msg"] and "unexpected" not in result["msg"]
    assert snapshot(work) == before
