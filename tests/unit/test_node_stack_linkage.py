# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack gather=[linkage]: the installed DeepEP's linkage record (schema 1, in its build stamp) checked against
a fake node tree shaped like the captured 4 x H200 V2 install (pip NCCL and NVSHMEM on the extension's RUNPATH): the
NCCL that loads, the NVSHMEM host library that would load, each GPU's SM against the embedded SASS/PTX, torch, the
libstdc++ linkage; and the audit rules that turn each failed check into a finding, on that node only."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import linkage as _linkage
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.gather_sets import GatherOptions, gather_node
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import PYTHON_PROBE
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.fact_sets import nvidia_smi_query_argv
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import audit_fleet, evaluate_rules
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack

SITE = "/opt/torch/.venv/lib/python3.12/site-packages"
PYTHON = "/opt/torch/.venv/bin/python"
EXT = SITE + "/deep_ep/_C.cpython-312-x86_64-linux-gnu.so"
NCCL_WHEELS = REPO / "tools" / "fleetsim" / "fixtures" / "wheels"
CATALOGUE = yaml.safe_load((REPO / "roles" / "audit" / "files" / "rules.yml").read_text())
LINKAGE_RULES = ("LINKAGE_NCCL_MISMATCH", "LINKAGE_NVSHMEM_MISMATCH", "LINKAGE_GPU_ARCH_MISSING",
                 "LINKAGE_GPU_ARCH_PTX_ONLY", "LINKAGE_TORCH_CHANGED", "LINKAGE_LIBSTDCXX_STATIC")


def record(generation="v2", nccl="2.30.7", nvshmem="3.4.5", sass=("sm_90",), ptx=(), torch="2.11.0+cu130",
           libstdcxx="shared"):
    """A linkage record of schema 1 shaped like the captured 4 x H200 V2 extension's (readelf/cuobjdump output in
    tests/fixtures/captured/h200x4/deepep_v2_linkage.txt)."""
    needed = ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "libcudart.so.13", "libc10_cuda.so",
              "libnvshmem_host.so.3", "libnccl.so.2", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"]
    if libstdcxx == "shared":
        needed.insert(-3, "libstdc++.so.6")
    return {
        "schema": 1, "artifact": "deepep",
        "objects": [{"path": "deep_ep/_C.cpython-312-x86_64-linux-gnu.so", "needed": needed,
                     "runpath": [SITE + "/nvidia/nvshmem/lib", SITE + "/nvidia/nccl/lib"], "rpath": [],
                     "soname": None, "libstdcxx": libstdcxx,
                     "sass": list(sass) if sass is not None else None,
                     "ptx": list(ptx) if ptx is not None else None}],
        "torch": {"version": torch, "cxx11_abi": True, "cuda": "13.0"} if torch else None,
        "cuda": "13.0",
        "compiler": {"cxx": "/usr/bin/g++", "version": "13.3.0"},
        "nccl": {"header_version": nccl, "root": SITE + "/nvidia/nccl",
                 "library": SITE + "/nvidia/nccl/lib/libnccl.so.2"} if nccl else None,
        "nvshmem": {"host_version": nvshmem, "host_library": SITE + "/nvidia/nvshmem/lib/libnvshmem_host.so.3",
                    "device_version": nvshmem, "device_library": SITE + "/nvidia/nvshmem/lib/libnvshmem_device.a"}
        if nvshmem else None,
        "baked_env": {"EP_NCCL_ROOT_DIR": SITE + "/nvidia/nccl"},
        "warnings": [],
    }


class Node(object):
    """A node tree under ``root``: the torch environment's site-packages with deep_ep (its build stamp), the pip NCCL
    (the fleetsim fixture's libnccl.so.2, which carries `NCCL version X.Y.Z+cuda13.0`) and the pip NVSHMEM."""

    def __init__(self, tmp_path, linkage=None, generation="v2", nccl_wheel="2.30.7", nvshmem_host="3.4.5",
                 torch="2.11.0+cu130", stamp=True):
        self.root = str(tmp_path / "root")
        self.site = self.path(SITE)
        os.makedirs(os.path.join(self.site, "deep_ep"))
        self.packages = [{"name": "torch", "version": torch, "location": SITE},
                         {"name": "deep_ep", "version": "2.1.0+dd758ca", "location": SITE}]
        if stamp:
            data = {"key": "9d0f" * 16, "kind": "deepep", "generation": generation, "version": "2.1.0",
                    "built_against": {"torch": "2.11.0+cu130", "nccl": "2.30.7", "nvshmem": "3.4.5"},
                    "extension_sha256": "0" * 64}
            if linkage is not None:
                data["linkage"] = linkage
            with open(os.path.join(self.site, "deep_ep", ".gpufleet-build.json"), "w") as handle:
                json.dump(data, handle)
        if nccl_wheel:
            lib = os.path.join(self.site, "nvidia", "nccl", "lib")
            os.makedirs(lib)
            shutil.copy(str(NCCL_WHEELS / ("nvidia_nccl_cu13-%s" % nccl_wheel) / "nvidia" / "nccl" / "lib" /
                            "libnccl.so.2"), os.path.join(lib, "libnccl.so.2"))
            self.packages.append({"name": "nvidia-nccl-cu13", "version": nccl_wheel, "location": SITE})
        if nvshmem_host:
            lib = os.path.join(self.site, "nvidia", "nvshmem", "lib")
            os.makedirs(lib)
            with open(os.path.join(lib, "libnvshmem_host.so.3"), "wb") as handle:
                handle.write(b"\x7fELF\x02\x01\x01" + b"\0" * 64 + b"NVSHMEM v%s\0" % nvshmem_host.encode())
            self.packages.append({"name": "nvidia-nvshmem-cu13", "version": nvshmem_host, "location": SITE})

    def path(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def py(self, ok=True):
        if not ok:
            return {"ok": False, "packages": [], "error": "%s failed (rc=127): No such file or directory" % PYTHON}
        return {"ok": True, "packages": self.packages, "error": None}

    def gather(self, gpus=(("9.0",) * 4), env_exports=None, py=None):
        gpu_list = None if gpus is None else [{"index": i, "compute_capability": c} for i, c in enumerate(gpus)]
        return _linkage.gather_linkage(self.root, py or self.py(), gpu_list, env_exports=env_exports)


def check(facts, name):
    found = [c for c in facts["checks"] if c["check"] == name]
    assert len(found) == 1, facts["checks"]
    return found[0]


def test_a_matching_v2_install_passes_every_check(tmp_path):
    facts = Node(tmp_path, record()).gather()
    assert facts["record"]["present"] is True and facts["record"]["generation"] == "v2"
    assert [(c["check"], c["ok"]) for c in facts["checks"]] == [
        ("nccl", True), ("nvshmem", True), ("gpu_arch", True), ("torch", True), ("libstdcxx", True)]
    assert facts["ok"] is True and facts["failed"] == [] and facts["unknown"] == [] and facts["warnings"] == []
    for entry in facts["checks"]:
        assert set(entry) >= {"check", "ok", "expected", "found", "fix", "reason", "warning"}
        assert entry["fix"] is None
    assert check(facts, "nccl")["library"] == SITE + "/nvidia/nccl/lib/libnccl.so.2"
    assert check(facts, "gpu_arch")["gpus"] == [0, 1, 2, 3]


# --- (a) NCCL: the fleetsim fixture libraries carry `NCCL version X.Y.Z+cuda13.0` -------------------------------

@pytest.mark.parametrize("built,loaded,ok,expected", [
    ("2.30.7", "2.30.7", True, "2.30.7"),
    ("2.30.7", "2.28.9", False, "2.30.7"),    # DeepEP #710: a later pip install moved NCCL back
    ("2.28.9", "2.30.7", False, "2.28.9"),    # below 2.31 a newer runtime fails V2's assert too
    ("2.31.0", "2.30.7", False, ">=2.31.0"),  # from 2.31 on the runtime may not be older
], ids=["equal", "older-runtime", "newer-runtime-below-2.31", "2.31-build-older-runtime"])
def test_nccl_rule_on_the_fixture_libraries(tmp_path, built, loaded, ok, expected):
    facts = Node(tmp_path, record(nccl=built), nccl_wheel=loaded).gather()
    entry = check(facts, "nccl")
    assert (entry["ok"], entry["expected"], entry["found"]) == (ok, expected, loaded)
    assert "embedded 'NCCL version' string" in entry["reason"]
    if ok:
        assert entry["fix"] is None and facts["ok"] is True
    else:
        assert facts["ok"] is False and facts["failed"] == ["nccl"]
        assert ("pip install --no-deps --force-reinstall nvidia-nccl-cu13==%s (DeepEP #710)" % built) in entry["fix"]
        assert ("rebuild DeepEP against the loaded NCCL %s" % loaded) in entry["fix"]


@pytest.mark.parametrize("built,loaded,ok", [
    ("2.31.0", "2.31.0", True), ("2.31.0", "2.31.2", True), ("2.31.2", "2.31.0", False), ("2.30.7", "2.31.0", False),
    ("2.32.1", "2.33.0", True),
])
def test_nccl_rule_from_2_31_on(tmp_path, built, loaded, ok):
    node = Node(tmp_path, record(nccl=built))
    with open(node.path(SITE + "/nvidia/nccl/lib/libnccl.so.2"), "wb") as handle:
        handle.write(b"\0" * (5 * 1024 * 1024 - 7) + b"NCCL version %s+cuda13.0\0" % loaded.encode())  # across chunks
    assert check(node.gather(), "nccl")["ok"] is ok


def test_nccl_library_string_wins_over_the_package_metadata(tmp_path):
    """The library file is what loads: a package whose metadata says 2.30.7 but whose libnccl.so.2 was overwritten
    by 2.28.9 (a --no-deps copy) is judged by the file."""
    node = Node(tmp_path, record())
    shutil.copy(str(NCCL_WHEELS / "nvidia_nccl_cu13-2.28.9" / "nvidia" / "nccl" / "lib" / "libnccl.so.2"),
                node.path(SITE + "/nvidia/nccl/lib/libnccl.so.2"))
    entry = check(node.gather(), "nccl")
    assert (entry["ok"], entry["found"]) == (False, "2.28.9")


def test_nccl_without_a_version_string_falls_back_to_the_metadata(tmp_path):
    node = Node(tmp_path, record(), nccl_wheel="2.30.7")
    with open(node.path(SITE + "/nvidia/nccl/lib/libnccl.so.2"), "wb") as handle:
        handle.write(b"\x7fELF no string here")
    entry = check(node.gather(), "nccl")
    assert entry["ok"] is True and "metadata of nvidia-nccl-cu13 2.30.7" in entry["reason"]


def test_nccl_without_pip_package_reads_the_runpath_library(tmp_path):
    node = Node(tmp_path, record(), nccl_wheel=None)
    entry = check(node.gather(), "nccl")
    assert entry["ok"] is None and "not on the extension's RUNPATH" in entry["reason"]
    os.makedirs(node.path(SITE + "/nvidia/nccl/lib"))
    shutil.copy(str(NCCL_WHEELS / "nvidia_nccl_cu13-2.28.9" / "nvidia" / "nccl" / "lib" / "libnccl.so.2"),
                node.path(SITE + "/nvidia/nccl/lib/libnccl.so.2"))
    entry = check(node.gather(), "nccl")
    assert (entry["ok"], entry["found"]) == (False, "2.28.9") and "RUNPATH" in entry["reason"]


@pytest.mark.parametrize("linkage,generation,reason", [
    (record(), "v1", "the build/runtime NCCL rule is DeepEP V2's"),
    (record(nccl=None), "v2", "the linkage record has no NCCL"),
    (dict(record(), nccl={"header_version": None, "root": None, "library": None}), "v2", "is not a version"),
], ids=["v1", "no-nccl", "no-header-version"])
def test_nccl_unknown_says_why(tmp_path, linkage, generation, reason):
    entry = check(Node(tmp_path, linkage, generation=generation).gather(), "nccl")
    assert entry["ok"] is None and reason in entry["reason"] and entry["fix"] is None


# --- (b) NVSHMEM ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device,host,ok", [
    ("3.4.5", "3.4.5", True), ("3.4.5", "3.5.1", True), ("3.5.1", "3.4.5", False), ("3.4.5", "2.11.0", False),
    ("2.11.0", "3.4.5", False), ("3.4.5", "3.4.0", True),
], ids=["same", "newer-host-minor", "older-host-minor", "host-major-older", "host-major-newer", "patch-differs"])
def test_nvshmem_host_device_rule(tmp_path, device, host, ok):
    facts = Node(tmp_path, record(nvshmem=device), nvshmem_host=host).gather()
    entry = check(facts, "nvshmem")
    assert (entry["ok"], entry["found"]) == (ok, host)
    assert entry["library"] == SITE + "/nvidia/nvshmem/lib/libnvshmem_host.so.3"
    assert "the extension's RUNPATH" in entry["reason"] and "embedded 'NVSHMEM v' string" in entry["reason"]
    if not ok:
        assert entry["fix"].startswith("rebuild DeepEP against the NVSHMEM that loads (%s" % entry["library"])
        assert facts["failed"] == ["nvshmem"]


def test_nvshmem_env_script_preload_wins_and_its_versioned_name_gives_the_version(tmp_path):
    """The fleetsim NVSHMEM build installs lib/libnvshmem_host.so.3.4.5 (+ the .so.3 link) without a vendor string;
    the env script preloads it, so it is the host library that loads, not the RUNPATH's."""
    node = Node(tmp_path, record(nvshmem="3.5.1"), nvshmem_host="3.5.1")
    lib = node.path("/opt/deepep/nvshmem/lib")
    os.makedirs(lib)
    with open(os.path.join(lib, "libnvshmem_host.so.3.4.5"), "wb") as handle:
        handle.write(b"\x7fELF fixture")
    os.symlink("libnvshmem_host.so.3.4.5", os.path.join(lib, "libnvshmem_host.so.3"))
    entry = check(node.gather(env_exports={"LD_PRELOAD": "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3"}), "nvshmem")
    assert (entry["ok"], entry["found"], entry["library"]) == (False, "3.4.5",
                                                               "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3")
    assert "LD_PRELOAD" in entry["reason"] and "versioned file name libnvshmem_host.so.3.4.5" in entry["reason"]


def test_nvshmem_unknown_cases(tmp_path):
    node = Node(tmp_path, record(), nvshmem_host=None)
    entry = check(node.gather(), "nvshmem")
    assert entry["ok"] is None and "libnvshmem_host.so.3 is not on the extension's RUNPATH" in entry["reason"]
    entry = check(node.gather(env_exports={"LD_PRELOAD": "/nowhere/libnvshmem_host.so.3"}), "nvshmem")
    assert entry["ok"] is None and "/nowhere/libnvshmem_host.so.3, which does not exist" in entry["reason"]
    entry = check(Node(tmp_path / "b", record(nvshmem=None)).gather(), "nvshmem")
    assert entry["ok"] is None and "has no NVSHMEM" in entry["reason"]


# --- (c) GPU arch -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sass,ptx,caps,outcome", [
    (["sm_90"], [], ["9.0"], [True]),
    (["sm_80"], [], ["8.6"], [True]),              # same major, older minor: binary compatible
    (["sm_90a"], [], ["9.0"], [True]),
    (["sm_90a"], [], ["10.0"], [False]),           # arch-specific cubins run on their own capability only
    (["sm_90"], [], ["10.0"], [False]),
    (["sm_100f"], [], ["10.3"], [True]),
    (["sm_90"], ["sm_90"], ["10.0"], ["warning"]),  # PTX JIT-compiled: a warning, not a failure
    (["sm_90"], ["sm_90a"], ["10.0"], [False]),    # arch-specific PTX cannot be JIT-compiled for another arch
    (["sm_90", "sm_100"], [], ["9.0", "10.0"], [True, True]),
    (["sm_90"], [], ["9.0", "10.0"], [True, False]),
], ids=["exact", "minor-compatible", "90a-on-90", "90a-on-100", "90-on-100", "family", "ptx-jit", "ptx-arch-specific",
        "two-caps", "mixed-node"])
def test_gpu_arch_against_embedded_sass(tmp_path, sass, ptx, caps, outcome):
    facts = Node(tmp_path, record(sass=sass, ptx=ptx)).gather(gpus=caps)
    entries = [c for c in facts["checks"] if c["check"] == "gpu_arch"]
    got = ["warning" if (c["ok"] and c["warning"]) else c["ok"] for c in entries]
    assert got == outcome
    for entry, cap in zip(entries, sorted(set(caps), key=lambda c: tuple(int(x) for x in c.split(".")))):
        assert entry["expected"] == "sm_" + cap.replace(".", "")
        if entry["ok"] is False or entry["warning"]:
            assert entry["fix"].startswith("rebuild DeepEP for the GPU's arch: TORCH_CUDA_ARCH_LIST with %s" % cap)
    if "warning" in outcome:
        assert facts["ok"] is True and facts["warnings"] and "JIT-compiled from PTX sm_90" in facts["warnings"][0]


@pytest.mark.parametrize("sass,ptx,generation,gpus,reason", [
    (None, None, "v2", ["9.0"], "cuobjdump was absent at build time"),
    ([], [], "v2", ["9.0"], "DeepEP V2 compiles its kernels on the node (JIT)"),
    (["sm_90"], [], "v2", None, "compute capabilities are unknown"),
    (["sm_90"], [], "v2", [], "no NVIDIA GPU"),
    (["sm_90"], [], "v2", [None], "compute capability None unknown"),
], ids=["no-cuobjdump", "v2-jit", "gpus-unknown", "no-gpu", "cap-unknown"])
def test_gpu_arch_unknown_says_why(tmp_path, sass, ptx, generation, gpus, reason):
    facts = Node(tmp_path, record(sass=sass, ptx=ptx), generation=generation).gather(gpus=gpus)
    entry = check(facts, "gpu_arch")
    assert entry["ok"] is None and reason in entry["reason"]


def test_gpu_arch_every_object_with_device_code_must_cover_the_gpu(tmp_path):
    """A wheel of two objects: the second's kernels lack sm_100, so a B200 fails although the first has it; an object
    without device code is not judged."""
    linkage = record(sass=["sm_90", "sm_100"])
    linkage["objects"].append(dict(linkage["objects"][0], path="deep_ep/_kernels.so", sass=["sm_90"], ptx=[]))
    linkage["objects"].append(dict(linkage["objects"][0], path="deep_ep/_host_only.so", sass=[], ptx=[]))
    entries = [c for c in Node(tmp_path, linkage).gather(gpus=["9.0", "10.0"])["checks"] if c["check"] == "gpu_arch"]
    assert [(c["expected"], c["ok"]) for c in entries] == [("sm_90", True), ("sm_100", False)]
    assert "deep_ep/_kernels.so has neither SASS nor PTX" in entries[1]["reason"]
    assert entries[1]["found"] == ("deep_ep/_C.cpython-312-x86_64-linux-gnu.so: SASS sm_90, sm_100; PTX none | "
                                   "deep_ep/_kernels.so: SASS sm_90; PTX none")


def test_gpu_arch_v1_without_any_code_is_not_judged(tmp_path):
    # Nothing to hold the GPUs against (the record lists no device code at all): unknown with the reason, not a guess.
    entry = check(Node(tmp_path, record(sass=[], ptx=[]), generation="v1").gather(), "gpu_arch")
    assert entry["ok"] is None and "no SASS or PTX in any object" in entry["reason"]


# --- (d) torch, (e) libstdc++ ---------------------------------------------------------------------------------

@pytest.mark.parametrize("installed,ok", [("2.11.0+cu130", True), ("2.9.1+cu129", False), ("2.11.0+cu129", False)])
def test_torch_unchanged_since_the_build(tmp_path, installed, ok):
    entry = check(Node(tmp_path, record(), torch=installed).gather(), "torch")
    assert (entry["ok"], entry["expected"], entry["found"]) == (ok, "2.11.0+cu130", installed)
    assert (entry["fix"] is None) is ok
    if not ok:
        assert "rebuild DeepEP after the torch change" in entry["fix"]


def test_torch_unknown(tmp_path):
    node = Node(tmp_path, record(torch=None))
    assert "has no torch version" in check(node.gather(), "torch")["reason"]
    node = Node(tmp_path / "b", record())
    node.packages = [p for p in node.packages if p["name"] != "torch"]
    entry = check(node.gather(), "torch")
    assert entry["ok"] is None and "torch is not installed" in entry["reason"]


@pytest.mark.parametrize("generation,libstdcxx,ok,warned", [
    ("v2", "shared", True, False), ("v2", "none", True, False), ("v2", "static", False, False),
    ("v1", "static", True, True), ("v2", "dynamic", None, False),
])
def test_libstdcxx(tmp_path, generation, libstdcxx, ok, warned):
    facts = Node(tmp_path, record(libstdcxx=libstdcxx), generation=generation).gather()
    entry = check(facts, "libstdcxx")
    assert entry["ok"] is ok and bool(entry["warning"]) is warned
    if ok is False:
        assert "SIGSEGV" in entry["reason"] and "libstdc++.so" in entry["fix"]
        assert "deep_ep/_C.cpython-312-x86_64-linux-gnu.so: static" == entry["found"]
    if ok is None:  # a value the schema does not know: the record is refused whole, named (the writer's rule)
        assert "linkage.objects[0].libstdcxx is 'dynamic', expected shared, static or none" in entry["reason"]
        assert all(c["ok"] is None for c in facts["checks"])


# --- no record: every check null, with the reason -----------------------------------------------------------

OLD_SHAPE = {"extension": "deep_ep/_C.so", "needed": ["libnccl.so.2"], "rpath": [], "runpath": [], "soname": None,
             "libstdcxx": "shared", "warnings": []}


@pytest.mark.parametrize("kind,reason", [
    ("no-linkage", "no linkage record in the build stamp"),
    ("old-shape", "no linkage record of schema 1 in the build stamp"),
    ("no-objects", "'objects' is [], expected at least one object of the extension"),
    ("no-stamp", "the installed DeepEP has no build stamp"),
    ("no-deepep", "DeepEP is not installed"),
    ("python-failed", "packages could not be read"),
])
def test_no_record_gives_null_checks_with_the_reason(tmp_path, kind, reason):
    linkage = {"no-linkage": None, "old-shape": OLD_SHAPE, "no-objects": dict(record(), objects=[])}.get(kind, record())
    node = Node(tmp_path, linkage, stamp=kind != "no-stamp")
    if kind == "no-deepep":
        node.packages = [p for p in node.packages if p["name"] != "deep_ep"]
    facts = node.gather(py=node.py(ok=kind != "python-failed"))
    assert facts["ok"] is None and facts["failed"] == [] and facts["record"]["present"] is False
    assert reason in facts["record"]["reason"]
    assert [c["check"] for c in facts["checks"]] == list(_linkage.CHECKS)
    for entry in facts["checks"]:
        assert entry["ok"] is None and reason in entry["reason"] and entry["fix"] is None


# --- node_stack: gather_node wires the set (one Python probe, nvidia-smi's compute_cap) --------------------------

def test_gather_node_linkage_uses_the_probe_and_nvidia_smi(tmp_path, tree):
    node = Node(tmp_path, record(sass=["sm_100"]))
    sysfs = tree("gcp_b200")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append(list(argv))
        if argv[:2] == [PYTHON, "-c"] and argv[2] == PYTHON_PROBE:
            return 0, json.dumps({"python_version": "3.12.3", "packages": node.packages, "site": None}), ""
        if argv == nvidia_smi_query_argv(str(smi)):
            return 0, "", ""  # no rows: the PCI tree's device ids give the capability (B200: 10.0)
        return 127, "", "not in this test"

    options = GatherOptions(root=node.root, sysfs_root=str(sysfs), nvidia_smi=str(smi), python=PYTHON, timeout=5)
    facts, errors = gather_node(["linkage"], options, runner=runner)
    assert errors == {} and list(facts) == ["gpufleet_linkage"]
    linkage = facts["gpufleet_linkage"]
    assert linkage["ok"] is True, linkage["checks"]
    arch = check(linkage, "gpu_arch")
    assert arch["expected"] == "sm_100" and arch["gpus"] == list(range(8))
    assert sum(1 for c in calls if c[:2] == [PYTHON, "-c"]) == 1


def test_node_stack_module_without_deepep_reports_null_checks(module_runner, tmp_path):
    """The module end to end on an interpreter without DeepEP (the test's own): read only, nothing fails, every
    check null with the reason."""
    result = module_runner(node_stack, {"gather": ["linkage"], "python": sys.executable, "root": str(tmp_path),
                                        "sysfs_root": str(tmp_path / "sys"), "timeout": 60}, check_mode=True)
    assert not result.failed, result.get("msg")
    assert result["gather_errors"] == {} and result["changed"] is False
    facts = result["ansible_facts"]["gpufleet_linkage"]
    assert facts["ok"] is None and facts["record"]["present"] is False
    assert [c["check"] for c in facts["checks"]] == list(_linkage.CHECKS)
    assert all(c["ok"] is None and c["reason"] == facts["record"]["reason"] for c in facts["checks"])
    assert "DeepEP is not installed" in facts["record"]["reason"] or "no build stamp" in facts["record"]["reason"]
    assert os.listdir(str(tmp_path)) == []


# --- the audit: each failed check is a finding on that node only, naming the fix --------------------------------

def _doc(host, linkage_facts):
    return node_document(host, ["fleet"], {"ansible_facts": {"gpufleet_linkage": linkage_facts}, "gather_errors": {}})


def test_each_mismatch_is_found_only_on_its_node(tmp_path):
    nodes = {
        "ok": Node(tmp_path / "ok", record()).gather(),
        "nccl": Node(tmp_path / "nccl", record(), nccl_wheel="2.28.9").gather(),
        "nvshmem": Node(tmp_path / "nvshmem", record(nvshmem="3.5.1"), nvshmem_host="3.4.5").gather(),
        "arch": Node(tmp_path / "arch", record(sass=["sm_90"])).gather(gpus=["10.0"] * 8),
        "ptx": Node(tmp_path / "ptx", record(sass=["sm_90"], ptx=["sm_90"])).gather(gpus=["10.0"] * 8),
        "torch": Node(tmp_path / "torch", record(), torch="2.9.1+cu129").gather(),
        "libstdcxx": Node(tmp_path / "libstdcxx", record(libstdcxx="static")).gather(),
        "norecord": Node(tmp_path / "norecord", None).gather(),
    }
    expected = {"ok": [], "nccl": ["LINKAGE_NCCL_MISMATCH"], "nvshmem": ["LINKAGE_NVSHMEM_MISMATCH"],
                "arch": ["LINKAGE_GPU_ARCH_MISSING"], "ptx": ["LINKAGE_GPU_ARCH_PTX_ONLY"],
                "torch": ["LINKAGE_TORCH_CHANGED"], "libstdcxx": ["LINKAGE_LIBSTDCXX_STATIC"], "norecord": []}
    documents = [_doc(host, facts) for host, facts in nodes.items()]
    for document in documents:
        found = [f for f in evaluate_rules(document, CATALOGUE) if f["id"].startswith("LINKAGE_")]
        assert [f["id"] for f in found] == expected[document["host"]], document["host"]
        for finding in found:
            check_fix = [c for c in document["gpufleet_linkage"]["checks"] if c["fix"]][0]["fix"]
            assert ("Fix: %s." % check_fix) in finding["message"]
    fleet = audit_fleet(dict((d["host"], d) for d in documents), CATALOGUE)
    assert dict((host, [f["id"] for f in node["findings"]]) for host, node in fleet["nodes"].items()) == expected
    assert fleet["nodes"]["nccl"]["status"] == "critical" and fleet["nodes"]["ptx"]["status"] == "warning"
    assert fleet["nodes"]["norecord"]["status"] == "ok"


def test_audit_messages_name_the_values_and_the_fix(tmp_path):
    document = _doc("n1", Node(tmp_path, record(), nccl_wheel="2.28.9").gather())
    finding = [f for f in evaluate_rules(document, CATALOGUE) if f["id"] == "LINKAGE_NCCL_MISMATCH"][0]
    assert finding["severity"] == "critical"
    assert finding["message"].startswith(
        "DeepEP V2 was built against NCCL 2.30.7; the torch environment loads NCCL 2.28.9 (%s/nvidia/nccl/lib/"
        "libnccl.so.2)." % SITE)
    assert "pip install --no-deps --force-reinstall nvidia-nccl-cu13==2.30.7 (DeepEP #710)" in finding["message"]
    document = _doc("n2", Node(tmp_path / "b", record(sass=["sm_90"])).gather(gpus=["9.0", "10.0"]))
    finding = [f for f in evaluate_rules(document, CATALOGUE) if f["id"] == "LINKAGE_GPU_ARCH_MISSING"][0]
    assert finding["message"].startswith("GPU 1 needs sm_100; the extension embeds SASS sm_90; PTX none. Fix: rebuild")


@pytest.mark.parametrize("rule_id", LINKAGE_RULES)
def test_linkage_rules_quiet_on_unknown_and_missing_facts(tmp_path, rule_id):
    """A node without a record (every check null), or whose linkage set was not gathered, has no LINKAGE finding."""
    unknown = _doc("n1", Node(tmp_path, None).gather())
    missing = node_document("n2", [], {"ansible_facts": {}, "gather_errors": {"gpufleet_linkage": "boom"}})
    for document in (unknown, missing):
        assert rule_id not in [f["id"] for f in evaluate_rules(document, CATALOGUE)]


def test_linkage_facts_go_into_the_document_as_they_are(tmp_path):
    facts = Node(tmp_path, record()).gather()
    document = _doc("n1", copy.deepcopy(facts))
    assert document["gpufleet_linkage"] == facts
    assert node_document("n2", [], {"ansible_facts": {}})["gpufleet_linkage"] is None
