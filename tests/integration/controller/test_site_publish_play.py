# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the phase roles publish for the site playbook's converged stamp, evaluated by Ansible: the expressions of
site.yml's record task, run through ansible-playbook against the roles' own defaults and vars, give the set of
things the stamp fingerprints. The reads of site.yml itself are unit-tested in tests/unit/test_site_publish.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from unit_helpers import COLLECTIONS, REPO

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan


TORCH = "/opt/venv/lib/python3.12/site-packages/torch"
SITE_PACKAGES = "/opt/venv/lib/python3.12/site-packages"
ALL_ON = {"doca_ofed_enabled": True, "gdrcopy_enabled": True, "gdrcopy_driver": True, "nccl_enabled": True,
          "nvshmem_enabled": True, "deepep_enabled": True, "cuda_toolkit_manage_symlink": True,
          "pytorch_install_pip": True}
ALL_OFF = {name: False for name in ALL_ON}
DEFAULTS: dict = {}


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict:
    """What site_plan's record watches (its watch and packages), for each variant against the roles' defaults and
    vars: every variable named like a published one, evaluated by Ansible, then selected as the action selects."""
    tmp = tmp_path_factory.mktemp("publish")
    files = []
    for role in _site_plan.PHASES:
        for part in ("defaults", "vars"):
            path = REPO / "roles" / role / part / "main.yml"
            if path.is_file():
                files.append(str(path))
    variants = {"defaults": DEFAULTS, "all_on": ALL_ON, "all_off": ALL_OFF}
    out = tmp / "published.json"
    installed = {"python": "/opt/venv/bin/python", "torch_path": TORCH}
    tasks = [{"name": "Set the torch the pytorch role found",
              "ansible.builtin.set_fact": {"pytorch_installed": installed}}]
    for name, variables in variants.items():
        tasks.append({"name": f"Evaluate {name}", "ansible.builtin.set_fact": {
            "results": "{{ results | combine({%r: dict(names | zip(query('ansible.builtin.vars', *names)))}) }}" % name},
            "vars": dict(variables, names="{{ query('ansible.builtin.varnames', '_site_watch') }}")})
    tasks.append({"name": "Write the results", "ansible.builtin.copy": {
        "content": "{{ results | to_nice_json }}", "dest": str(out), "mode": "0644"}})
    play = [{"name": "Published", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars_files": files, "vars": {"results": {}, "ansible_python_interpreter": sys.executable},
             "tasks": tasks}]
    playbook = tmp / "published.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook)],
                          cwd=REPO, env=env, text=True, capture_output=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    values = json.loads(out.read_text(encoding="utf-8"))
    return {name: _site_plan.watched(list(found), found.get) for name, found in values.items()}


BASE_WATCH = {"/usr/local/cuda-13.0/bin/nvcc", "/etc/apt/sources.list.d/gpufleet-cuda.list",
              "/etc/modprobe.d/gpufleet-nvidia.conf", "/etc/modprobe.d",
              "/proc/driver/nvidia/params", "/proc/driver/nvidia/version",
              "/opt/venv/bin/python", SITE_PACKAGES, SITE_PACKAGES + "/torch/version.py",
              "/opt/deepep/unified-env.sh"}


def test_all_off_watches_the_always_managed_paths(published):
    assert set(published["all_off"]["watch"]) == BASE_WATCH
    assert published["all_off"]["packages"] == ["cuda-toolkit-13-0"]


def test_all_on_adds_each_optional_phase(published):
    added = set(published["all_on"]["watch"]) - BASE_WATCH
    assert added == {
        "/usr/local/cuda",
        "/etc/apt/sources.list.d/gpufleet-doca.list", "/etc/apt/preferences.d/gpufleet-mft",
        "/usr/include/infiniband/mlx5_api.h", "/sys/class/infiniband",
        "/opt/deepep/gdrcopy", "/opt/deepep/gdrcopy/lib", "/opt/deepep/gdrcopy/lib/libgdrapi.so*",
        "/opt/deepep/gdrcopy/include", "/sys/module/gdrdrv",
        SITE_PACKAGES + "/nvidia/nccl/lib/libnccl.so*", SITE_PACKAGES + "/nvidia/nccl/include/nccl.h",
        "/opt/deepep/nvshmem", "/opt/deepep/nvshmem/lib", "/opt/deepep/nvshmem/lib/libnvshmem*",
        SITE_PACKAGES + "/deep_ep*"}
    assert sorted(published["all_on"]["packages"]) == sorted([
        "cuda-toolkit-13-0", "doca-ofed", "mft", "python3-pip", "cmake", "ninja-build", "build-essential",
        "libibverbs-dev", "librdmacm-dev"])


def test_defaults_are_all_on_but_the_optional_driver_and_nccl(published):
    assert set(published["all_on"]["watch"]) - set(published["defaults"]["watch"]) == {
        "/sys/module/gdrdrv", SITE_PACKAGES + "/nvidia/nccl/lib/libnccl.so*",
        SITE_PACKAGES + "/nvidia/nccl/include/nccl.h"}
    assert published["defaults"]["packages"] == published["all_on"]["packages"]


def test_lists_hold_unique_non_empty_strings(published):
    for variant in published.values():
        for key in ("watch", "packages"):
            assert all(isinstance(item, str) and item for item in variant[key])
            assert len(variant[key]) == len(set(variant[key]))
