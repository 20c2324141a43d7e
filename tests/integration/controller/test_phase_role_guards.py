# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the phase roles that are YAML, run through ansible-playbook on localhost.

- Unverified downloads (roles cuda_toolkit, doca_ofed, gdrcopy: tasks/trust.yml): an empty checksum for a
  key or tarball fetched over the network is refused unless ``<role>_allow_unverified``; local ``file:`` URLs
  (the simulated fleet's mirror) pass. The same for NVSHMEM and DeepEP, whose sources the build_once role's trust
  entry point checks with the phase's data (its message names the phase's variables).
- gdrdrv (role gdrcopy, tasks/driver.yml) against a copy of the simulated fleet's GDRCopy fixture source,
  whose ``make driver`` writes a placeholder gdrdrv.ko naming the make variables it got: where ``nv-p2p.h``
  is found, which ``NVIDIA_SRC_DIR`` and ``KVER`` are passed, the refusals with their fixes.

One playbook runs every case (each in a block whose rescue records the failure); the tests read its
results.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from unit_helpers import COLLECTIONS, REPO

GDRCOPY_FIXTURE = REPO / "tools" / "fleetsim" / "fixtures" / "sources" / "gdrcopy-fixture"
DRIVER = "580.95.05"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is needed for the gdrdrv cases")


def _trust_cases() -> dict[str, tuple[str, dict]]:
    https_cuda = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    return {
        "cuda_default": ("cuda_toolkit", {}),
        "cuda_pinned": ("cuda_toolkit", {"cuda_toolkit_apt_keyring_checksum": "sha256:" + "a" * 64}),
        "cuda_allowed": ("cuda_toolkit", {"cuda_toolkit_allow_unverified": True}),
        "cuda_local_trusted": ("cuda_toolkit", {"cuda_toolkit_apt_repo_url": "file:/srv/fleetsim-mirror/apt",
                                                "cuda_toolkit_apt_trusted": True,
                                                "cuda_toolkit_apt_keyring_url": ""}),
        "cuda_remote_trusted": ("cuda_toolkit", {"cuda_toolkit_apt_repo_url": https_cuda,
                                                 "cuda_toolkit_apt_trusted": True}),
        "cuda_local_key": ("cuda_toolkit", {"cuda_toolkit_apt_keyring_url": "file:///srv/mirror/cuda.pub"}),
        "doca_default": ("doca_ofed", {}),
        "doca_disabled": ("doca_ofed", {"doca_ofed_enabled": False}),
        "doca_pinned": ("doca_ofed", {"doca_ofed_apt_keyring_checksum": "sha256:" + "b" * 64}),
        "gdrcopy_default": ("gdrcopy", {}),
        "gdrcopy_ftp": ("gdrcopy", {"gdrcopy_src_url": "FTP://mirror.example/gdrcopy.tar.gz"}),
        "gdrcopy_local": ("gdrcopy", {"gdrcopy_src_url": "file:///srv/fleetsim-mirror/sources/gdrcopy-fixture.tar.gz"}),
        "gdrcopy_pinned": ("gdrcopy", {"gdrcopy_src_checksum": "sha256:" + "c" * 64}),
        "gdrcopy_allowed": ("gdrcopy", {"gdrcopy_allow_unverified": True}),
        "gdrcopy_git": ("gdrcopy", {"gdrcopy_src_type": "git"}),
    }


def _build_once_trust_cases() -> dict[str, tuple[str, str, dict]]:
    """The build_once role's trust entry point, directly and through the source tasks of the phases that feed it."""
    git = {"build_once_title": "NVSHMEM", "build_once_vars": "nvshmem", "build_once_src_type": "git",
           "build_once_src_url": "", "build_once_src_checksum": "",
           "build_once_git_repo": "https://github.com/NVIDIA/nvshmem.git", "build_once_git_ref": "v3.4.5-0"}
    tarball = dict(git, build_once_src_type="tarball", build_once_src_url="https://mirror.example/nvshmem.tar.gz")
    return {
        "build_once_git_pinned": ("build_once", "trust.yml", dict(git, build_once_git_commit="1" * 40)),
        "build_once_git_commit_ref": ("build_once", "trust.yml", dict(git, build_once_git_ref="a" * 40)),
        "build_once_git_tag": ("build_once", "trust.yml", git),
        "build_once_git_allowed": ("build_once", "trust.yml", dict(git, build_once_allow_unverified=True)),
        "build_once_tarball_pinned": ("build_once", "trust.yml",
                                      dict(tarball, build_once_src_checksum="sha256:" + "d" * 64)),
        "build_once_tarball_local": ("build_once", "trust.yml", dict(tarball, build_once_src_url="file:///srv/n.tar.gz")),
        "build_once_tarball": ("build_once", "trust.yml", tarball),
        # The phases' own data, through their source tasks (refused before anything is fetched).
        "nvshmem_tarball": ("nvshmem", "source.yml", {"nvshmem_src_type": "tarball"}),
        "deepep_pr_unpinned": ("deepep", "source.yml", {"deepep_src_git_commit": ""}),
    }


def _driver_cases(tmp: Path) -> dict[str, dict]:
    usr_src = tmp / "usr-src"
    for branch in ("nvidia-570.172.08", f"nvidia-{DRIVER}"):
        (usr_src / branch / "nvidia").mkdir(parents=True)
        (usr_src / branch / "nvidia" / "nv-p2p.h").write_text("/* nv-p2p.h */\n")
    explicit = tmp / "explicit-src"
    explicit.mkdir()
    (explicit / "nv-p2p.h").write_text("/* nv-p2p.h */\n")
    empty = tmp / "empty-src"
    empty.mkdir()

    def source(name: str, vmflags_script: bool = True) -> str:
        dest = tmp / "src" / name
        shutil.copytree(GDRCOPY_FIXTURE, dest)
        if not vmflags_script:
            (dest / "scripts" / "test_gdrdrv_HAVE_VM_FLAGS_SET.sh").unlink()
        return str(dest)

    base = {"gdrcopy_driver_load": False, "gdrcopy_jobs": 1, "gdrcopy_build_key": "unit",
            "gdrcopy_nvidia_src_search_paths": [str(usr_src)]}
    nvidia = {"gpufleet_nvidia": {"driver_version": DRIVER}}
    return {
        # The source of the loaded driver's branch, though another sorts first.
        "found_for_driver": dict(base, gdrcopy_src_dir=source("found"),
                                 ansible_facts=dict(nvidia, kernel="6.8.0-1015-gcp")),
        # No driver version known: the first in sorted order.
        "found_first": dict(base, gdrcopy_src_dir=source("first"), ansible_facts={"kernel": "6.8.0-1015-gcp"}),
        "explicit": dict(base, gdrcopy_src_dir=source("explicit"), gdrcopy_nvidia_src_dir=str(explicit),
                         ansible_facts=dict(nvidia, kernel="6.8.0-1015-gcp")),
        "missing": dict(base, gdrcopy_src_dir=source("missing"), gdrcopy_nvidia_src_search_paths=[str(empty)],
                        ansible_facts=dict(nvidia, kernel="6.8.0-1015-gcp")),
        "old_source_new_kernel": dict(base, gdrcopy_src_dir=source("old-new", vmflags_script=False),
                                      ansible_facts=dict(nvidia, kernel="6.8.0-1015-gcp")),
        "old_source_old_kernel": dict(base, gdrcopy_src_dir=source("old-old", vmflags_script=False),
                                      ansible_facts=dict(nvidia, kernel="5.15.0-119-generic")),
    }


def _case_tasks(name: str, role: str, tasks_from: str, variables: dict, src_dir: str | None,
                before: list | None = None) -> dict:
    record = ["'failed': guard_failed", "'msg': guard_msg"]
    after = []
    if src_dir:
        after.append({"name": f"Read the built gdrdrv.ko of {name}",
                      "ansible.builtin.slurp": {"src": f"{src_dir}/src/gdrdrv/gdrdrv.ko"},
                      "register": "guard_ko", "failed_when": False})
        record += ["'ko': guard_ko.content | default('') | b64decode",
                   "'nvidia_src': gdrcopy_driver_state.nvidia_src_dir | default('')",
                   "'loaded': gdrcopy_driver_state.loaded | default(none)",
                   "'error': gdrcopy_driver_state.error | default(none)"]
    return {
        "name": f"Case {name}",
        "block": [
            {"name": "Reset the case",
             "ansible.builtin.set_fact": {"guard_failed": False, "guard_msg": "", "gdrcopy_driver_state": {}}},
            *(before or []),
            {"name": f"Run {role} {tasks_from}",
             "ansible.builtin.include_role": {"name": f"gpufleet.deepep.{role}", "tasks_from": tasks_from},
             "vars": variables},
        ],
        "rescue": [{"name": "Record the failure",
                    "ansible.builtin.set_fact": {"guard_failed": True,
                                                 "guard_msg": "{{ ansible_failed_result.msg | default('') }}"}}],
        "always": after + [{"name": f"Record {name}", "ansible.builtin.set_fact": {
            "guard_results": "{{ guard_results | combine({'%s': {%s}}) }}" % (name, ", ".join(record))}}],
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("guards")
    tasks = [_case_tasks(name, role, "trust.yml", variables, None)
             for name, (role, variables) in _trust_cases().items()]
    tasks += [_case_tasks(name, role, tasks_from, variables, None)
              for name, (role, tasks_from, variables) in _build_once_trust_cases().items()]
    driver_cases = _driver_cases(tmp)
    tasks += [_case_tasks(name, "gdrcopy", "driver.yml", variables, variables["gdrcopy_src_dir"])
              for name, variables in driver_cases.items()]
    # The same build again, its gdrdrv.ko removed: the stamp's key (read by node_stack) matches, so make does not run.
    again = driver_cases["found_for_driver"]
    tasks.append(_case_tasks("found_for_driver_again", "gdrcopy", "driver.yml", again, again["gdrcopy_src_dir"],
                             before=[{"name": "Remove the built gdrdrv.ko", "ansible.builtin.file": {
                                 "path": again["gdrcopy_src_dir"] + "/src/gdrdrv/gdrdrv.ko", "state": "absent"}}]))
    out = tmp / "results.json"
    tasks.append({"name": "Write the results", "ansible.builtin.copy": {
        "content": "{{ guard_results | to_nice_json }}", "dest": str(out), "mode": "0644"}})
    play = [{"name": "Phase role guards", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"guard_results": {}, "ansible_python_interpreter": sys.executable}, "tasks": tasks}]
    playbook = tmp / "guards.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook)],
                          cwd=REPO, env=env, text=True, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", ["cuda_pinned", "cuda_allowed", "cuda_local_trusted", "cuda_local_key",
                                  "doca_disabled", "doca_pinned", "gdrcopy_local", "gdrcopy_pinned",
                                  "gdrcopy_allowed", "gdrcopy_git"])
def test_verified_or_local_downloads_pass(results, case):
    assert results[case]["failed"] is False, results[case]["msg"]


@pytest.mark.parametrize("case, names", [
    ("cuda_default", ["https://developer.download.nvidia.com/compute/cuda/repos/", "3bf863cc.pub",
                      "cuda_toolkit_apt_keyring_checksum", "cuda_toolkit_allow_unverified"]),
    ("cuda_remote_trusted", ["[trusted=yes]", "cuda_toolkit_apt_trusted", "cuda_toolkit_allow_unverified"]),
    ("doca_default", ["https://linux.mellanox.com/public/repo/doca/", "GPG-KEY-Mellanox.pub",
                      "doca_ofed_apt_keyring_checksum", "doca_ofed_allow_unverified"]),
    ("gdrcopy_default", ["https://github.com/NVIDIA/gdrcopy/archive/refs/tags/v2.5.1.tar.gz",
                         "gdrcopy_src_checksum", "gdrcopy_allow_unverified"]),
    ("gdrcopy_ftp", ["FTP://mirror.example/gdrcopy.tar.gz", "gdrcopy_src_checksum"]),
])
def test_unverified_network_downloads_are_refused_with_the_fix(results, case, names):
    assert results[case]["failed"] is True
    for name in names:
        assert name in results[case]["msg"]


def test_gdrdrv_uses_the_source_of_the_loaded_driver(results):
    case = results["found_for_driver"]
    assert case["failed"] is False, case["msg"]
    assert case["nvidia_src"].endswith(f"/usr-src/nvidia-{DRIVER}/nvidia")
    # make driver from the project root: the detection ran (kernel 6.8 defines vm_flags_set).
    assert f"NVIDIA_SRC_DIR={case['nvidia_src']})" in case["ko"]
    assert "for kernel 6.8.0-1015-gcp (HAVE_VM_FLAGS_SET=y," in case["ko"]


def test_gdrdrv_state_comes_from_the_gathered_facts(results):
    case = results["found_for_driver"]
    # gdrcopy_driver_load is false in these cases and no gdrdrv is loaded here: nothing loaded, no insmod error.
    assert case["loaded"] is False and case["error"] == ""


def test_gdrdrv_with_the_stamped_key_is_not_built_again(results):
    case = results["found_for_driver_again"]
    assert case["failed"] is False, case["msg"]
    assert case["nvidia_src"] == results["found_for_driver"]["nvidia_src"]
    assert case["ko"] == ""
    assert case["loaded"] is False and case["error"] == ""


def test_gdrdrv_without_a_driver_version_takes_the_first_source(results):
    case = results["found_first"]
    assert case["failed"] is False, case["msg"]
    assert case["nvidia_src"].endswith("/usr-src/nvidia-570.172.08/nvidia")
    assert f"NVIDIA_SRC_DIR={case['nvidia_src']})" in case["ko"]


def test_gdrdrv_explicit_source_wins(results):
    case = results["explicit"]
    assert case["failed"] is False, case["msg"]
    assert case["nvidia_src"].endswith("/explicit-src")
    assert f"NVIDIA_SRC_DIR={case['nvidia_src']})" in case["ko"]


def test_gdrdrv_without_nv_p2p_h_is_refused_with_the_fix(results):
    case = results["missing"]
    assert case["failed"] is True
    assert "needs nv-p2p.h" in case["msg"] and "empty-src" in case["msg"]
    assert f"({DRIVER})" in case["msg"] and "gdrcopy_nvidia_src_dir" in case["msg"]
    assert case["ko"] == ""


def test_gdrdrv_source_without_vm_flags_detection_is_refused_on_kernels_from_6_3(results):
    case = results["old_source_new_kernel"]
    assert case["failed"] is True
    assert "redefinition of 'vm_flags_set'" in case["msg"] and "6.8.0-1015-gcp" in case["msg"]
    assert case["ko"] == ""


def test_gdrdrv_source_without_vm_flags_detection_builds_on_older_kernels(results):
    case = results["old_source_old_kernel"]
    assert case["failed"] is False, case["msg"]
    assert "for kernel 5.15.0-119-generic (HAVE_VM_FLAGS_SET=," in case["ko"]


@pytest.mark.parametrize("case", ["build_once_git_pinned", "build_once_git_commit_ref", "build_once_git_allowed",
                                  "build_once_tarball_pinned", "build_once_tarball_local"])
def test_build_once_passes_verified_sources(results, case):
    assert results[case]["failed"] is False, results[case]["msg"]


@pytest.mark.parametrize("case, names", [
    ("build_once_git_tag", ["v3.4.5-0 of https://github.com/NVIDIA/nvshmem.git is a moving ref",
                            "nvshmem_src_git_commit", "git ls-remote https://github.com/NVIDIA/nvshmem.git v3.4.5-0",
                            "nvshmem_allow_unverified", "nothing would verify the NVSHMEM source"]),
    ("build_once_tarball", ["nvshmem_src_url https://mirror.example/nvshmem.tar.gz is fetched over the network",
                            "nvshmem_src_checksum is empty", "nvshmem_allow_unverified"]),
    ("nvshmem_tarball", ["nvshmem_src_url https://github.com/NVIDIA/nvshmem/archive/refs/tags/v3.4.5-0.tar.gz",
                         "nvshmem_src_checksum", "nvshmem_allow_unverified"]),
    ("deepep_pr_unpinned", ["refs/pull/466/head of https://github.com/deepseek-ai/DeepEP.git is a moving ref",
                            "deepep_src_git_commit", "the defaults pin DeepEP PR 466",
                            "nothing would verify the DeepEP source", "deepep_allow_unverified"]),
])
def test_build_once_refuses_unverified_sources_naming_the_phase_variables(results, case, names):
    assert results[case]["failed"] is True
    for name in names:
        assert name in results[case]["msg"], results[case]["msg"]
