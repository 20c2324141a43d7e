# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A profile declares its GPU family once (gpufleet_gpu_family) and the roles derive the rest, in a real play: the
defaults of the preflight, nvshmem, deepep and verify roles templated by ansible-playbook over every host of
inventories/example and of the simulated fleet's inventory (the harness's inventory file beside
inventories/fleetsim), as the roles would see them. Each profile's derived arch is what its group_vars spelt before
(tests/unit/test_gpu_arch.py: BEFORE), its verify gate the same entry, a value set explicitly still wins, and a
harness group outside any profile is gated by its simulated hardware (no role reads fleetsim_profile)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from test_gpu_arch import BEFORE
from unit_helpers import REPO

from tools.fleetsim import fleet

DEFAULTS = [str(REPO / "roles" / role / "defaults" / "main.yml")
            for role in ("preflight", "nvshmem", "deepep", "verify_intranode", "verify_internode")]
DERIVED = {
    "arch": "[preflight_expected_cuda_arch, nvshmem_cuda_arch, deepep_arch_list]",
    "profile": "verify_intranode_profile",
    "intranode": "(verify_intranode_thresholds | gpufleet.deepep.verify_thresholds(verify_intranode_profile, "
                 "family=verify_intranode_gpu_family, scope='intranode')).matched",
    "internode": "(verify_internode_thresholds | gpufleet.deepep.verify_thresholds(verify_internode_profile, "
                 "family=verify_internode_gpu_family, scope='internode')).matched",
}


def derive(tmp_path, inventories, *extra):
    """{host: {arch, profile, intranode, internode}} as a play over ``inventories`` templates the roles' defaults."""
    out = tmp_path / "derived.json"
    derived = dict((key, "{{ %s }}" % expression) for key, expression in DERIVED.items())
    every = "dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, 'derived')))"
    play = [{"hosts": "all", "gather_facts": False, "vars_files": DEFAULTS, "tasks": [
        {"name": "Derive", "ansible.builtin.set_fact": {"derived": derived}},
        {"name": "Dump", "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % every, "dest": str(out)},
         "delegate_to": "localhost", "run_once": True,
         "vars": {"ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python")}},
    ]}]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"))
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), str(path), "-e", "ansible_connection=local"]
    for inventory in inventories:
        argv += ["-i", str(inventory)]
    proc = subprocess.run(argv + list(extra), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300, check=False)
    return proc, (json.loads(out.read_text()) if proc.returncode == 0 else None)


def _profile_of_host(inventory, host):
    """The profile group (a child of all in hosts.yml) that holds ``host``, at any depth."""
    def holds(node):
        node = node or {}
        return host in (node.get("hosts") or {}) or any(holds(sub) for sub in (node.get("children") or {}).values())
    top = yaml.safe_load((REPO / "inventories" / inventory / "hosts.yml").read_text())["all"]["children"]
    return next(name for name, node in top.items() if holds(node))


def test_every_example_host_derives_the_arch_and_gate_its_profile_spelt_before(tmp_path):
    proc, derived = derive(tmp_path, [REPO / "inventories" / "example"])
    assert proc.returncode == 0, proc.stdout[-4000:]

    def hosts(node):
        node = node or {}
        return set(node.get("hosts") or {}) | set().union(*[hosts(sub) for sub in (node.get("children") or {}).values()])
    # every host of the example inventory, so a platform added there is derived here too
    assert set(derived) == hosts(yaml.safe_load((REPO / "inventories" / "example" / "hosts.yml").read_text())["all"])
    assert len(derived) >= 17, sorted(derived)
    for host, values in derived.items():
        family, preflight, nvshmem, deepep = BEFORE[_profile_of_host("example", host)]
        assert values["arch"] == [preflight, nvshmem, deepep], (host, values)
        assert values["intranode"] == values["internode"] == family, (host, values)


def test_an_explicit_setting_wins_over_the_derived_one(tmp_path):
    proc, derived = derive(tmp_path, [REPO / "inventories" / "example"], "-l", "h100-node-1",
                           "-e", "nvshmem_cuda_arch=90a", "-e", '{"preflight_expected_cuda_arch": ["9.0", "10.0"]}')
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert derived["h100-node-1"]["arch"] == [["9.0", "10.0"], "90a", "9.0"]


def test_the_simulated_fleet_declares_its_family_without_a_simulator_variable(tmp_path):
    """The harness's inventory file gives a group its hardware's profile and family as group vars: a group that joins a
    profile of inventories/fleetsim (b200_cluster) takes that profile's; one outside every profile (gcp_b200, the
    harness's default group) is gated by its hardware, as fleetsim_profile in the verify roles' defaults did."""
    groups = {"b200_cluster": ("b200-cluster-1", "gcp_b200"), "gcp_b200": ("gcp-b200-1", "gcp_b200"),
              "h100_ib": ("h100-ib-1", "h100_ib")}
    harness = {"all": {"children": dict(
        (group, {"hosts": {host: {"fleetsim_profile": hardware}}, "vars": fleet.profile_vars(hardware)})
        for group, (host, hardware) in groups.items())}}
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(harness))
    proc, derived = derive(tmp_path, [tmp_path / "fleet.yml", REPO / "inventories" / "fleetsim"])
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert derived["b200-cluster-1"] == {"arch": [["10.0"], "100", "10.0"], "profile": "b200_gcp_cuda129",
                                         "intranode": "b200", "internode": "b200"}
    assert derived["gcp-b200-1"] == {"arch": [["10.0"], "100", "10.0"], "profile": "gcp_b200",
                                     "intranode": "b200", "internode": "b200"}
    assert derived["h100-ib-1"] == {"arch": [["9.0"], "90", "9.0"], "profile": "h100_ib",
                                    "intranode": "h100", "internode": "h100"}


@pytest.mark.parametrize("family, named", [
    ("b400", "gpu_arch: 'b400' is no GPU family the collection knows; expected one of a100"),
])
def test_an_unknown_family_fails_the_play_naming_it(tmp_path, family, named):
    proc = derive(tmp_path, [REPO / "inventories" / "example"], "-l", "h100-node-1", "-e",
                  "gpufleet_gpu_family=%s" % family)[0]
    assert proc.returncode != 0 and named in " ".join(proc.stdout.split()), proc.stdout[-4000:]
    assert "Traceback" not in proc.stdout
