# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repositories and paths the roles' defaults choose follow the node's CPU (ansible_facts.architecture) through the
profile object's host architectures (filter host_arch): a Grace node (aarch64, GB200/GB300 NVL72 trays) gets NVIDIA's
sbsa CUDA repository, DOCA's arm64-sbsa one and the aarch64 libcuda directory; an HGX node the x86_64 ones. Rendered
by ansible-playbook from the roles' own defaults files."""

from __future__ import annotations

import json

import pytest

from play_helpers import dump_task, run_play
from unit_helpers import REPO


def rendered(tmp_path, architecture):
    out = tmp_path / "rendered.json"
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": "/nonexistent/python"},
                         "hosts": {"n1": None}}}
    tasks = [{"name": "Variables of %s" % path, "ansible.builtin.include_vars": str(REPO / "roles" / path)}
             for path in ("cuda_toolkit/defaults/main.yml", "cuda_toolkit/vars/main.yml", "doca_ofed/defaults/main.yml",
                          "preflight/defaults/main.yml")]
    node = {"architecture": architecture, "distribution": "Ubuntu", "distribution_version": "24.04",
            "distribution_major_version": "24"}
    tasks += [{"name": "The node", "ansible.builtin.set_fact": {"ansible_facts": node}},
              {"name": "Render", "ansible.builtin.set_fact": {"got": {
                  "cuda": "{{ cuda_toolkit_apt_repo_url }}", "doca": "{{ doca_ofed_apt_repo_url }}",
                  "libcuda": "{{ preflight_libcuda_dirs }}"}},
               "vars": {"doca_ofed_version": "3.2.1"}},
              dump_task("got", out)]
    run_play(tmp_path, inventory, tasks)
    return json.loads(out.read_text())


@pytest.mark.parametrize("architecture, cuda, doca, libdir", [
    ("aarch64", "/sbsa/", "/ubuntu24.04/arm64-sbsa/", "/usr/lib/aarch64-linux-gnu"),
    ("x86_64", "/x86_64/", "/ubuntu24.04/x86_64/", "/usr/lib/x86_64-linux-gnu"),
])
def test_the_roles_choose_their_repositories_by_the_nodes_cpu(tmp_path, architecture, cuda, doca, libdir):
    got = rendered(tmp_path, architecture)
    assert got["cuda"].startswith("https://developer.download.nvidia.com/compute/cuda/repos/") and \
        got["cuda"].endswith(cuda), got
    assert got["doca"] == "https://linux.mellanox.com/public/repo/doca/3.2.1" + doca, got
    assert got["libcuda"] == [libdir], got
