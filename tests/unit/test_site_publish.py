# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the phase roles publish for the site playbook's converged stamp.

Each phase role of playbooks/site.yml publishes, in its vars/main.yml, ``<role>_site_watch`` (the paths and glob
patterns it manages) and ``<role>_site_watch_packages`` (the Debian packages it installs); site.yml's record
task collects every such variable by name. These tests read site.yml itself: a phase role that publishes
nothing fails here, and the expressions of the record task, run through ansible-playbook against the roles'
own defaults and vars, give the set of things the stamp fingerprints.
"""

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

SITE = REPO / "playbooks" / "site.yml"
PREFIX = "gpufleet.deepep."


def _site() -> list:
    return yaml.safe_load(SITE.read_text(encoding="utf-8"))


def _phase_roles() -> list[str]:
    """The roles imported by the converge play, in order, once each (the reboot handler is a dependency)."""
    converge = next(play for play in _site() if play["name"] == "Converge GPU nodes to a DeepEP-ready state")
    names = []
    for task in converge["tasks"]:
        name = (task.get("ansible.builtin.import_role") or {}).get("name", "")
        if name.startswith(PREFIX) and name[len(PREFIX):] not in names:
            names.append(name[len(PREFIX):])
    return names


def _record_task() -> dict:
    for play in _site():
        for task in play.get("tasks", []):
            args = task.get("gpufleet.deepep.site_plan") or {}
            if args.get("state") == "record":
                return args
    raise AssertionError("site.yml has no site_plan record task")


def test_site_imports_the_phase_roles():
    assert _phase_roles() == ["preflight", "cuda_toolkit", "doca_ofed", "nvidia_peermapping", "gdrcopy", "pytorch",
                              "nccl", "nvshmem", "deepep", "env_script"]


@pytest.mark.parametrize("role", _phase_roles())
def test_every_phase_role_publishes_what_it_manages(role):
    path = REPO / "roles" / role / "vars" / "main.yml"
    assert path.is_file(), f"phase role {role} publishes nothing: {path} is missing"
    published = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [name for name in (f"{role}_site_watch", f"{role}_site_watch_packages") if name not in published]
    assert not missing, f"phase role {role} does not publish {', '.join(missing)} in {path}"


def test_record_task_collects_by_name_not_by_role():
    record = _record_task()
    text = json.dumps(record)
    # site_plan's record collects <role>_site_watch and <role>_site_watch_packages by name, whatever the role.
    found = _site_plan.watched(["newrole_site_watch", "newrole_site_watch_packages", "newrole_site_watcher"],
                               {"newrole_site_watch": ["/a"], "newrole_site_watch_packages": ["p"],
                                "newrole_site_watcher": ["/b"]}.get)
    assert found == {"watch": ["/a"], "packages": ["p"]}
    for role in _phase_roles():
        assert f"{role}_" not in text, f"site.yml names a variable of role {role} in its record task"


def test_content_key_covers_every_phase_role():
    plan = _site()[0]
    assert [task for task in plan["tasks"] if "gpufleet.deepep.site_plan" in task]
    prefixes = _site_plan.PREFIXES
    paths = _site_plan.content_paths(str(REPO / "playbooks"))
    assert set(_phase_roles()) <= set(prefixes)
    assert {str(REPO / "roles" / role) for role in _phase_roles()} <= set(paths)
    # The preflight phase judges the node by the catalogue's preflight rules: the key covers them too.
    assert str(REPO / "roles" / "audit" / "files" / "rules.yml") in paths
    # The build phases include the build_once role: a change to it re-runs them.
    assert str(REPO / "roles" / "build_once") in paths


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
    for role in _phase_roles():
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
