# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The install roles' filters (plugins/filter/install_helpers.py): pip's arguments and whether pip runs (pytorch), the
GCP hand-off's gcloud commands (image), the NVIDIA source directory (gdrcopy), affixed lists (nvidia_peermapping) and
the batch's build records (build_once); each gives what the role's Jinja gave, and refuses bad input by name."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.install_helpers import FilterModule

F = FilterModule().filters()

INDEX = "https://download.pytorch.org/whl/cu129"
TAIL = ["--disable-pip-version-check", "--no-input"]


def refused(name, *args, **kwargs):
    with pytest.raises(AnsibleFilterError) as err:
        F[name](*args, **kwargs)
    message = str(err.value)
    assert message.startswith(name + ": ") and "Traceback" not in message and "unexpected" not in message
    return message


# pip_args ------------------------------------------------------------------------------------------------------------

def test_pip_args_index_only():
    assert F["pip_args"](INDEX, [], "", False, False, "") == ["--index-url " + INDEX] + TAIL


def test_pip_args_everything_in_the_roles_order():
    assert F["pip_args"](INDEX, ["https://a/simple", "https://b/simple"], "/srv/wheels", "no", "yes",
                         "--pre --timeout 60") == [
        "--index-url " + INDEX, "--extra-index-url https://a/simple", "--extra-index-url https://b/simple",
        "--find-links /srv/wheels", "--break-system-packages", "--pre --timeout 60"] + TAIL


def test_pip_args_no_index_drops_the_index():
    assert F["pip_args"](INDEX, [], "/srv/wheels", True, False, "") == [
        "--find-links /srv/wheels", "--no-index"] + TAIL


def test_pip_args_nothing_set():
    assert F["pip_args"]("", [], "", False, False, "") == TAIL


@pytest.mark.parametrize("args, named", [
    ((INDEX, "https://a/simple", "", False, False, ""), "extra_index_urls must be a list of strings, got 'https://a/simple'"),
    ((INDEX, [3], "", False, False, ""), "an item of extra_index_urls must be a string, got 3"),
    ((INDEX, [], "", "maybe", False, ""), "no_index must be a boolean (true/false, yes/no), got 'maybe'"),
    ((INDEX, [], "", False, None, ""), "break_system_packages must be a boolean"),
    ((None, [], "", False, False, ""), "index_url must be a string, got None"),
    ((INDEX, [], "", False, False, ["--pre"]), "extra_args must be a string, got ['--pre']"),
])
def test_pip_args_refuses(args, named):
    assert named in refused("pip_args", *args)


# torch_install_gaps --------------------------------------------------------------------------------------------------

def test_torch_gaps_nothing_to_do():
    gaps = F["torch_install_gaps"]({"torch_version": "2.9.1+cu129", "packages": {"numpy": "2.1.0"}}, "2.9.1",
                                   ["numpy", "ninja_build-x.y"])
    assert gaps == {"version": "2.9.1", "missing": [], "pip_needed": False}


def test_torch_gaps_other_torch_or_none():
    assert F["torch_install_gaps"]({"torch_version": "2.8.0+cu128", "packages": {}}, "2.9.1", [])["pip_needed"]
    gaps = F["torch_install_gaps"]({"torch_version": None}, "2.9.1", [])
    assert gaps == {"version": "", "missing": [], "pip_needed": True}
    assert F["torch_install_gaps"]({}, "2.9.1", [])["pip_needed"]


def test_torch_gaps_version_compared_as_a_string():
    assert not F["torch_install_gaps"]({"torch_version": "2.9"}, 2.9, [])["pip_needed"]


def test_torch_gaps_missing_package_in_probe_order():
    gaps = F["torch_install_gaps"]({"torch_version": "2.9.1", "packages": {"b": None, "a": "1", "c": None}},
                                   "2.9.1", ["a", "b", "c"])
    assert gaps["missing"] == ["b", "c"] and gaps["pip_needed"]


@pytest.mark.parametrize("requirement", ["numpy>=2", "numpy==2.1.0", "pkg[extra]", "pkg\n"])
def test_torch_gaps_a_version_specifier_always_runs_pip(requirement):
    assert F["torch_install_gaps"]({"torch_version": "2.9.1", "packages": {}}, "2.9.1", [requirement])["pip_needed"]


@pytest.mark.parametrize("args, named", [
    (("2.9.1", "2.9.1", []), "the installed torch (the probe's result) must be a dict, got '2.9.1'"),
    (({"torch_version": "2.9.1"}, None, []), "torch_version must be a version string such as 2.9.1, got None"),
    (({"torch_version": "2.9.1"}, "2.9.1", "numpy"), "extra_packages must be a list of strings, got 'numpy'"),
    (({"torch_version": 2}, "2.9.1", []), "torch_version of the probe must be a string, got 2"),
    (({"packages": ["numpy"]}, "2.9.1", []), "packages of the probe must be a dict, got ['numpy']"),
])
def test_torch_gaps_refuses(args, named):
    assert named in refused("torch_install_gaps", *args)


# gcloud_image_argv ---------------------------------------------------------------------------------------------------

GCP = {"gcloud": "gcloud", "project": "p", "zone": "us-central1-b", "instance": "sealed-1", "disk": "",
       "image_name": "img-1", "image_family": "gpufleet-deepep", "storage_location": "", "template_name": "tpl-1",
       "machine_type": "a4-highgpu-8g", "boot_disk_size": "500GB", "network_interfaces": [], "reservation": "",
       "mig_name": "mig-a", "mig_size": 2}


def test_gcloud_image_create_from_the_instance_disk():
    assert F["gcloud_image_argv"](GCP, "image_create") == [
        "gcloud", "compute", "images", "create", "img-1", "--source-disk", "sealed-1", "--source-disk-zone",
        "us-central1-b", "--family", "gpufleet-deepep", "--project", "p"]


def test_gcloud_image_create_from_a_disk_with_a_storage_location():
    argv = F["gcloud_image_argv"](dict(GCP, disk="disk-9", storage_location="us"), "image_create")
    assert argv[5:7] == ["--source-disk", "disk-9"] and argv[-2:] == ["--storage-location", "us"]


def test_gcloud_template_create():
    assert F["gcloud_image_argv"](GCP, "template_create") == [
        "gcloud", "compute", "instance-templates", "create", "tpl-1", "--project", "p", "--machine-type",
        "a4-highgpu-8g", "--image", "img-1", "--image-project", "p", "--boot-disk-size", "500GB",
        "--maintenance-policy", "TERMINATE"]
    argv = F["gcloud_image_argv"](dict(GCP, network_interfaces=["nic-type=GVNIC", "nic-type=MRDMA,no-address"],
                                       reservation="res-1"), "template_create")
    assert argv[17:] == ["--network-interface=nic-type=GVNIC", "--network-interface=nic-type=MRDMA,no-address",
                         "--reservation-affinity", "specific", "--reservation", "res-1"]


def test_gcloud_mig_steps():
    assert F["gcloud_image_argv"](GCP, "mig_set_template") == [
        "gcloud", "compute", "instance-groups", "managed", "set-instance-template", "mig-a", "--template", "tpl-1",
        "--zone", "us-central1-b", "--project", "p"]
    assert F["gcloud_image_argv"](GCP, "mig_resize") == [
        "gcloud", "compute", "instance-groups", "managed", "resize", "mig-a", "--size", "2",
        "--zone", "us-central1-b", "--project", "p"]


def test_gcloud_refuses():
    assert "step must be one of image_create, template_create, mig_set_template, mig_resize, got 'delete'" in refused(
        "gcloud_image_argv", GCP, "delete")
    lacking = dict(GCP)
    del lacking["zone"]
    assert "the GCP settings lack zone (keys wanted: gcloud, project, zone," in refused(
        "gcloud_image_argv", lacking, "mig_resize")
    assert "the GCP settings must be a dict, got 'p'" in refused("gcloud_image_argv", "p", "mig_resize")
    assert "an item of network_interfaces must be a string, got 1" in refused(
        "gcloud_image_argv", dict(GCP, network_interfaces=[1]), "template_create")


# nvidia_src_dir ------------------------------------------------------------------------------------------------------

DIRS = ["/usr/src/nvidia-570.1/nvidia", "/usr/src/nvidia-580.95.05/nvidia", "/usr/src/nvidia-580.95/nvidia"]


@pytest.mark.parametrize("version, expected", [
    ("580.95.05", DIRS[1]),
    ("580.95", DIRS[2]),      # not 580.95.05, a longer version
    ("580.9", DIRS[0]),       # none names it: the first
    ("no-driver-version", DIRS[0]),
    ("570.1", DIRS[0]),
])
def test_nvidia_src_dir(version, expected):
    assert F["nvidia_src_dir"](DIRS, version) == expected


def test_nvidia_src_dir_at_the_end_and_none():
    assert F["nvidia_src_dir"](["/a", "/usr/src/nvidia-580.95"], "580.95") == "/usr/src/nvidia-580.95"
    assert F["nvidia_src_dir"]([], "580.95") == ""


def test_nvidia_src_dir_refuses():
    assert "dirs must be a list of strings, got '/usr/src'" in refused("nvidia_src_dir", "/usr/src", "580")
    assert "driver_version must be a string, got 580" in refused("nvidia_src_dir", DIRS, 580)


# affixed -------------------------------------------------------------------------------------------------------------

def test_affixed():
    assert F["affixed"](["a", "b"], "<", ">") == ["<a>", "<b>"]
    assert F["affixed"](["a"]) == ["a"]
    assert F["affixed"]([], "x") == []


def test_affixed_refuses():
    assert "an item of items must be a string, got None" in refused("affixed", ["a", None], "x")
    assert "prefix must be a string, got 3" in refused("affixed", ["a"], 3)


# play_records --------------------------------------------------------------------------------------------------------

def test_play_records_in_host_order_of_one_kind():
    record = {"kind": "deepep", "host": "n1", "key": "ab"}
    hostvars = {"n1": {"build_once_record": record}, "n2": {"build_once_record": {"kind": "nvshmem"}},
                "n3": {}, "n4": {"build_once_record": None}}
    assert F["play_records"](hostvars, ["n3", "n1", "n2", "n4"], "deepep") == [{}, record, {}, {}]


def test_play_records_refuses():
    assert "hostvars has no host 'n9' (hosts must be inventory hostnames)" in refused(
        "play_records", {"n1": {}}, ["n9"], "deepep")
    assert "hosts must be a list of strings, got 'n1'" in refused("play_records", {"n1": {}}, "n1", "deepep")
    assert "kind must be a string, got None" in refused("play_records", {"n1": {}}, ["n1"], None)
    assert "hostvars must be a mapping of inventory hostnames to their vars, got ['n1']" in refused(
        "play_records", ["n1"], ["n1"], "deepep")
