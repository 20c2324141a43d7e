# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Version helpers: module_utils._versions and the version_helpers filters."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import version_helpers
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    VersionError,
    at_least,
    compare_versions,
    cuda_tag,
    cuda_tag_to_version,
    cuda_version_from_home,
    cuda_version_from_nvcc,
    cuda_version_from_version_json,
    dist_info_version,
    find_dist_info,
    nccl_version_from_header,
    nccl_version_from_header_file,
    nccl_version_from_pip,
    normalize_project_name,
    parse_version,
    pip_package_version,
    split_torch_version,
    torch_index_url,
)

# nvcc --version of the CUDA 13.0 toolkit (as on the 2 x H200 node and the CI machine)
NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""

NCCL_H = """/*************************************************************************
 * Copyright (c) 2015-2021, NVIDIA CORPORATION. All rights reserved.
 ************************************************************************/

#ifndef NCCL_H_
#define NCCL_H_

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
"""


def metadata(name: str, version: str) -> str:
    return "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: x\n\nVersion: 0.0.0 (body)\n" % (name, version)


def make_dist(site, project_dir: str, name: str, version: str):
    info = site / ("%s-%s.dist-info" % (project_dir, version))
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata(name, version))
    return info


# ---------------------------------------------------------------------------------------------
# parse / compare


@pytest.mark.parametrize(
    "older, newer",
    [
        ("2.28.9", "2.30.4"),
        ("2.30.4", "2.30.7"),
        ("2.9.1", "2.10.0"),
        ("2.10.0a0", "2.10.0"),
        ("2.11.0.dev20260101", "2.11.0a0"),
        ("2.30.4rc1", "2.30.4"),
        ("3.5.19", "3.5.19-1"),
        ("v3.5.19-1", "3.5.20"),
        ("13.0", "13.0.88"),
        ("12.9.1", "13.0"),
        ("2.11.0", "2.11.0.post1"),
    ],
)
def test_ordering(older, newer):
    assert compare_versions(older, newer) == -1
    assert compare_versions(newer, older) == 1
    assert parse_version(older) < parse_version(newer)


@pytest.mark.parametrize(
    "left, right",
    [("2.9.1+cu129", "2.9.1"), ("v3.5.19-1", "3.5.19-1"), ("13.0", "13.0.0"), ("2.11.0+cu130", "2.11.0+cpu")],
)
def test_equal(left, right):
    assert compare_versions(left, right) == 0
    assert parse_version(left) == parse_version(right)


def test_parts():
    torch = parse_version("2.11.0+cu130")
    assert (torch.major, torch.minor, torch.patch, torch.local) == (2, 11, 0, "cu130")
    assert torch.public == "2.11.0"
    tag = parse_version("v3.5.19-1")
    assert tag.text == "3.5.19-1" and tag.revision == 1 and tag.public == "3.5.19"
    assert parse_version("2.10.0a0").public == "2.10.0a0"
    assert str(parse_version(" 13.0.88 ")) == "13.0.88"
    assert parse_version(13) == parse_version("13.0")


@pytest.mark.parametrize("version, floor, expected", [
    ("2.30.7", "2.30.4", True),
    ("2.30.4", "2.30.4", True),
    ("2.28.9", "2.30.4", False),
    ("2.30.4rc1", "2.30.4", False),
    ("2.11.0+cu130", "2.10", True),
    ("2.9.1+cu129", "2.10", False),
    ("v3.5.19-1", "3.5.19", True),
])
def test_at_least(version, floor, expected):
    assert at_least(version, floor) is expected


@pytest.mark.parametrize("bad", ["", "two.thirty", "2.30.4+", "10,0", "latest", None, True, [2, 30]])
def test_bad_versions_are_named(bad):
    with pytest.raises(VersionError) as info:
        parse_version(bad)
    assert repr(bad) in str(info.value)
    assert "2.30.4" in str(info.value)      # the expected form is shown


# ---------------------------------------------------------------------------------------------
# torch / CUDA tags


def test_split_torch_version():
    assert split_torch_version("2.9.1+cu129\n") == {
        "version": "2.9.1", "cuda_tag": "cu129", "cuda_version": "12.9", "local": "cu129"}
    assert split_torch_version("2.11.0+cu130")["cuda_version"] == "13.0"
    assert split_torch_version("2.6.0+cu118")["cuda_version"] == "11.8"
    assert split_torch_version("2.11.0") == {"version": "2.11.0", "cuda_tag": None, "cuda_version": None,
                                             "local": None}
    assert split_torch_version("2.11.0+cpu")["cuda_tag"] is None
    assert split_torch_version("2.10.0a0+git1234abc")["version"] == "2.10.0a0"


def test_cuda_tags():
    assert cuda_tag("13.0.88") == "cu130"
    assert cuda_tag("12.9") == "cu129"
    assert cuda_tag("cu126") == "cu126"
    assert cuda_tag_to_version("cu130") == "13.0"
    assert cuda_tag_to_version("rocm6.2") is None
    with pytest.raises(VersionError, match="'12.10'"):
        cuda_tag("12.10")


@pytest.mark.parametrize("value, named", [
    ("2.9.1+garbage", "carry no label"),   # a torch version with a typo in its label: no cu29
    ("12.9+garbage", "carry no label"),    # a stray label is not dropped: no cu129 from it
    ("13.0rc1", "carry no label"),
    ("2.9.1", "CUDA 2 does not exist"),    # a torch version given for the CUDA one
])
def test_a_cuda_version_that_is_no_cuda_release_is_refused_naming_it(value, named):
    with pytest.raises(VersionError, match="'%s' is not a CUDA release.*%s.*expected a CUDA release" % (
            value.replace("+", "[+]"), named)):
        cuda_tag(value)
    with pytest.raises(VersionError, match="'%s' is not a CUDA release" % value.replace("+", "[+]")):
        torch_index_url(value)
    with pytest.raises(AnsibleFilterError, match="is not a CUDA release"):
        version_helpers.FilterModule().filters()["cuda_tag"](value)


def test_torch_index_url():
    assert torch_index_url("13.0") == "https://download.pytorch.org/whl/cu130"
    assert torch_index_url("cu129", nightly=True) == "https://download.pytorch.org/whl/nightly/cu129"
    assert torch_index_url("12.9.1", base="https://mirror.local/torch/") == "https://mirror.local/torch/cu129"
    assert torch_index_url("12.9", base="file:///srv/mirror/torch") == "file:///srv/mirror/torch/cu129"
    # A plain-http mirror only with the explicit opt-in.
    assert torch_index_url("12.9.1", base="http://mirror.local/torch/", allow_http=True) == \
        "http://mirror.local/torch/cu129"
    with pytest.raises(VersionError, match="base ''"):
        torch_index_url("13.0", base="")


@pytest.mark.parametrize("base, kwargs, named", [
    ("http://mirror.local/torch", {}, "base 'http://mirror.local/torch' is a plain-http index"),
    ("HTTP://mirror.local/torch", {}, "is a plain-http index"),
    ("mirror.local/torch", {}, "base 'mirror.local/torch' is not an index URL; expected https://"),
    ("ftp://mirror.local/torch", {}, "base 'ftp://mirror.local/torch' is not an index URL"),
    ("https://mirror local/torch", {}, "is not an index URL"),
    (["https://x"], {}, "base ['https://x'] is not an index URL"),
    ("http://mirror.local/torch", {"allow_http": "yes"}, "allow_http 'yes' is not a boolean"),
])
def test_torch_index_url_refuses_an_unauthenticated_or_malformed_base_naming_it(base, kwargs, named):
    with pytest.raises(VersionError) as info:
        torch_index_url("12.9", base=base, **kwargs)
    assert named in str(info.value)
    with pytest.raises(AnsibleFilterError, match="torch_index_url: "):
        version_helpers.FilterModule().filters()["torch_index_url"]("12.9", base=base, **kwargs)
    if "plain-http" in named:
        assert "allow_http=true" in str(info.value) and "pytorch_index_allow_http" in str(info.value)


@pytest.mark.parametrize("text, local, tag", [
    ("2.9.1+cu129", "cu129", "cu129"), ("2.9.1+CU129", "CU129", "cu129"), ("2.11.0+cpu", "cpu", None),
    ("2.1.0+cpu.cxx11.abi", "cpu.cxx11.abi", None), ("2.5.1+rocm6.2", "rocm6.2", None),
    ("2.5.1+rocm6.2.4", "rocm6.2.4", None), ("2.7.0+xpu", "xpu", None),
    ("2.10.0a0+git1234abc", "git1234abc", None), ("2.6.0a0+ecf3bae40a.nv25.01", "ecf3bae40a.nv25.01", None),
    ("2.1.0a0+32f93b1", "32f93b1", None), ("2.11.0", None, None),
])
def test_torch_build_labels_are_read(text, local, tag):
    parts = split_torch_version(text)
    assert (parts["local"], parts["cuda_tag"]) == (local, tag)


@pytest.mark.parametrize("text", ["2.9.1+garbage", "2.9.1+cuda12.9", "2.9.1+cu1290", "2.9.1+cpux", "2.13.0+standin"])
def test_an_unknown_torch_build_label_is_refused_naming_it_and_the_forms(text):
    local = text.split("+", 1)[1]
    with pytest.raises(VersionError) as info:
        split_torch_version(text)
    message = str(info.value)
    assert message.startswith("%r has the local version label +%s" % (text, local)), message
    assert "+cuNNN" in message and "+cpu" in message and "+rocmX.Y" in message


# ---------------------------------------------------------------------------------------------
# NCCL


def test_nccl_header_defines():
    assert nccl_version_from_header(NCCL_H) == "2.28.9"


def test_nccl_header_code_only():
    assert nccl_version_from_header("#define NCCL_VERSION_CODE 23007\n") == "2.30.7"
    assert nccl_version_from_header("#define NCCL_VERSION_CODE 2708\n") == "2.7.8"   # pre-2.9 encoding


def test_nccl_header_without_version():
    assert nccl_version_from_header("#ifndef NCCL_H_\n#define NCCL_H_\n#endif\n") is None
    with pytest.raises(VersionError, match="bytes"):
        nccl_version_from_header(b"#define NCCL_MAJOR 2")


def test_nccl_header_file(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "nccl.h").write_text(NCCL_H.replace("MINOR 28", "MINOR 30").replace("PATCH 9", "PATCH 7"))
    assert nccl_version_from_header_file(str(tmp_path)) == "2.30.7"
    assert nccl_version_from_header_file(str(tmp_path / "include" / "nccl.h")) == "2.30.7"
    assert nccl_version_from_header_file(str(tmp_path / "missing")) is None


def test_pip_metadata(tmp_path):
    site = tmp_path / "site-packages"
    make_dist(site, "nvidia_nccl_cu13", "nvidia-nccl-cu13", "2.28.9")
    make_dist(site, "nvidia_nvshmem_cu13", "nvidia-nvshmem-cu13", "3.4.5")
    assert pip_package_version(str(site), "nvidia-nccl-cu13") == "2.28.9"
    assert pip_package_version([str(tmp_path / "nowhere"), str(site)], "NVIDIA_NVSHMEM_CU13") == "3.4.5"
    assert pip_package_version(str(site), "nvidia-nccl-cu12") is None
    found = nccl_version_from_pip([str(site)])
    assert found["project"] == "nvidia-nccl-cu13" and found["version"] == "2.28.9"
    assert found["metadata"].endswith("METADATA")
    assert nccl_version_from_pip([str(tmp_path)]) is None


def test_dist_info_without_metadata_uses_the_directory_name(tmp_path):
    (tmp_path / "nvidia_nccl_cu12-2.27.3.dist-info").mkdir()
    found = find_dist_info(str(tmp_path), "nvidia-nccl-cu12")
    assert found["version"] == "2.27.3"


def test_dist_info_headers_only():
    assert dist_info_version(metadata("torch", "2.11.0+cu130")) == ("torch", "2.11.0+cu130")
    assert normalize_project_name("Nvidia_NCCL.cu13") == "nvidia-nccl-cu13"


# ---------------------------------------------------------------------------------------------
# CUDA


def test_cuda_from_nvcc():
    assert cuda_version_from_nvcc(NVCC_13) == "13.0.88"
    assert cuda_version_from_nvcc("Cuda compilation tools, release 12.4") == "12.4"
    assert cuda_version_from_nvcc("bash: nvcc: command not found") is None


def test_cuda_from_version_json(tmp_path):
    data = {"cuda": {"name": "CUDA SDK", "version": "13.0.2"}, "cuda_nvcc": {"name": "CUDA NVCC", "version": "13.0.88"}}
    assert cuda_version_from_version_json(json.dumps(data)) == "13.0.2"
    assert cuda_version_from_version_json(json.dumps({"cuda_nvcc": {"version": "12.9.86"}})) == "12.9.86"
    assert cuda_version_from_version_json("not json") is None
    (tmp_path / "version.json").write_text(json.dumps(data))
    assert cuda_version_from_home(str(tmp_path)) == "13.0.2"


def test_cuda_from_old_version_txt(tmp_path):
    (tmp_path / "version.txt").write_text("CUDA Version 11.0.228\n")
    assert cuda_version_from_home(str(tmp_path)) == "11.0.228"
    assert cuda_version_from_home(str(tmp_path / "none")) is None


# ---------------------------------------------------------------------------------------------
# Filters


def test_filters():
    filters = version_helpers.FilterModule().filters()
    # nvshmem_rdma_needs and mlx5dv_verdict joined (tests/unit/test_nvshmem_rdma.py covers them)
    assert set(filters) == {"cuda_tag", "torch_index_url", "nvshmem_rdma_needs", "mlx5dv_verdict"}
    assert filters["cuda_tag"]("13.0.88") == "cu130"
    assert filters["torch_index_url"]("13.0", nightly=True) == "https://download.pytorch.org/whl/nightly/cu130"


@pytest.mark.parametrize("name, args, named", [
    ("cuda_tag", ("thirteen",), "'thirteen'"),
    ("torch_index_url", ("13.0", "https://x", "yes"), "'yes'"),
])
def test_filter_errors_name_the_value(name, args, named):
    with pytest.raises(AnsibleFilterError, match=name + ": .*" + named):
        version_helpers.FilterModule().filters()[name](*args)


@pytest.mark.parametrize("name", ["cuda_tag", "torch_index_url"])
def test_every_filter_has_sidecar_docs_matching_its_signature(name):
    import inspect
    from pathlib import Path

    import yaml

    doc_file = Path(version_helpers.__file__).with_name(name + ".yml")
    docs = yaml.safe_load(doc_file.read_text())
    assert docs["DOCUMENTATION"]["name"] == name
    assert docs["RETURN"]["_value"]["description"]
    func = version_helpers.FilterModule().filters()[name]
    params = list(inspect.signature(func).parameters)
    documented = set(docs["DOCUMENTATION"]["options"])
    assert documented == {"_input"} | set(params[1:])


def test_nvshmem_version_header():
    from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import nvshmem_version_from_header

    header = ("#ifndef NVSHMEM_VERSION_H\n#define NVSHMEM_VERSION_H\n#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n"
              "#define NVSHMEM_VENDOR_MINOR_VERSION 4\n#define NVSHMEM_VENDOR_PATCH_VERSION 5\n"
              "#define NVSHMEM_TRANSPORT_PLUGIN_MAJOR_VERSION 4\n#endif\n")
    assert nvshmem_version_from_header(header) == "3.4.5"
    assert nvshmem_version_from_header("#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n") is None
    assert nvshmem_version_from_header(None) is None
