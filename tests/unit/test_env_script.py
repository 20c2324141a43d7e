# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The env_script role's templates, rendered with the facts the collection's modules return.

The facts come from running gpufleet.deepep.rdma_devices and gpu_topology against sysfs trees the
simulated fleet's fakehw renders (gcp_b200 after DOCA-OFED, h100_ib, h200_nvlink). The rendered script
must pass ``bash -n`` and, sourced by bash, export exactly what the facts decide.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from unit_helpers import REPO, run_module

ROLE = REPO / "roles" / "env_script"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is needed to check the script")


def role_defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))


def fabric_settings(variables: dict) -> dict:
    """The two defaults the fabric decides, as the role's filter (gpufleet.deepep.fabric) gives them for the fabric of
    ``variables`` (a Templar of this process does not load the collection's filters by name)."""
    from ansible_collections.gpufleet.deepep.plugins.filter.fabric import fabric

    name = variables.get("env_script_fabric", variables.get("gpufleet_fabric", ""))
    name = "" if name is None or "{{" in str(name) else name
    return {"env_script_fabric_ibgda": fabric(name, "ibgda", default=True),
            "env_script_fabric_env": fabric(name, "env", default=[])}


def render(text: str, variables: dict):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template(text))


_FACTS: dict = {}


def node_facts(tmp_path: Path, profile: str, naming: str = "as-profile") -> dict:
    """ansible_facts of a simulated node: what rdma_devices and gpu_topology return for its hardware."""
    if (profile, naming) not in _FACTS:
        _FACTS[(profile, naming)] = _node_facts(tmp_path, profile, naming)
    return json.loads(json.dumps(_FACTS[(profile, naming)]))


def _node_facts(tmp_path: Path, profile: str, naming: str) -> dict:
    from tools.fleetsim import fakehw
    from ansible_collections.gpufleet.deepep.plugins.modules import gpu_topology, rdma_devices

    prof = fakehw.load_profile(profile)
    root = tmp_path / profile
    fakehw.render_sysfs(prof, root, nic_naming=naming)
    hw_json = tmp_path / f"{profile}-hardware.json"
    fakehw.write_hw_json(prof, hw_json, nic_naming=naming)
    nvidia_smi = fakehw.install_fake_nvidia_smi(tmp_path / "bin" / "nvidia-smi")
    facts = {}
    rdma = run_module(rdma_devices, {"sysfs_root": str(root)})
    assert not rdma.failed, rdma
    facts.update(rdma["ansible_facts"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLEETSIM_HW_JSON", str(hw_json))
        gpus = run_module(gpu_topology, {"sysfs_root": str(root), "nvidia_smi": str(nvidia_smi)})
    assert not gpus.failed, gpus
    facts.update(gpus["ansible_facts"])
    return facts


def render_script(tmp_path: Path, facts: dict, nvshmem_built: bool = True, gdrcopy_built: bool = False,
                  bundled: dict | None = None, hostname: str = "node-1", **overrides) -> tuple[Path, dict]:
    variables = role_defaults()
    variables.update(overrides)
    variables["inventory_hostname"] = hostname
    facts = dict(facts)
    if bundled is not None:
        facts["gpufleet_bundled_nvshmem"] = bundled
    variables["ansible_facts"] = facts
    # What the role's probe (files/probe.py) finds for <nvshmem>/lib/libnvshmem_host.so.3 and <gdrcopy>/lib.
    variables["env_script_installed"] = {"nvshmem_built": nvshmem_built, "gdrcopy_built": gdrcopy_built}
    variables.update((k, v) for k, v in fabric_settings(variables).items() if k not in overrides)
    # Role defaults refer to other roles' variables and facts with default(): resolve them like Ansible would.
    for name, value in list(variables.items()):
        if name.startswith("env_script_") and name not in overrides and isinstance(value, str) and "{{" in value:
            variables[name] = render(value, variables)
    decided = render((ROLE / "templates" / "env.json.j2").read_text(encoding="utf-8"), variables)
    env = json.loads(decided) if isinstance(decided, str) else decided
    variables["env_script_env"] = env
    script = render((ROLE / "templates" / "unified-env.sh.j2").read_text(encoding="utf-8"), variables)
    path = tmp_path / "unified-env.sh"
    path.write_text(script, encoding="utf-8")
    return path, env


def bash_n(path: Path) -> None:
    proc = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def sourced(path: Path, start: dict | None = None) -> dict:
    """The environment bash has after sourcing the script (from a clean, known environment)."""
    base = {"PATH": "/usr/bin:/bin"}
    base.update(start or {})
    proc = subprocess.run([BASH, "-c", 'source "$1" && env -0', "bash", str(path)], capture_output=True,
                          env=base, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out = {}
    for item in proc.stdout.split(b"\0"):
        if b"=" in item:
            key, dummy, value = item.partition(b"=")
            out[key.decode()] = value.decode()
    return out


BUNDLED = {
    "bundled": [{"package": "nvidia-nvshmem-cu13", "version": "3.4.5",
                 "host_lib": "/usr/local/lib/python3.11/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3"}],
    "preload": "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3",
}


def test_gcp_b200_after_doca(tmp_path):
    facts = node_facts(tmp_path, "gcp_b200", naming="mlx5")
    path, dummy = render_script(tmp_path, facts, bundled=BUNDLED)
    bash_n(path)
    env = sourced(path, {"LD_LIBRARY_PATH": "/existing"})
    assert env["CUDA_HOME"] == "/usr/local/cuda"
    assert env["NVSHMEM_HOME"] == env["NVSHMEM_DIR"] == "/opt/deepep/nvshmem"
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda"
    assert env["NVSHMEM_IB_ENABLE_IBGDA"] == "1"
    assert env["NVSHMEM_IBGDA_NIC_HANDLER"] == "gpu"
    assert env["NVSHMEM_HCA_PREFIX"] == "mlx5"
    assert env["NVSHMEM_IB_GID_INDEX"] == "3"
    assert env["NVSHMEM_DISABLE_CUDA_VMM"] == "1"
    assert env["NVSHMEM_ENABLE_NIC_PE_MAPPING"] == "1"
    # gcp_b200: GPU k shares a PCIe switch with NIC k, so each GPU gets its own mlx5_k.
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"] == ",".join(f"{i}:mlx5_{i}:1" for i in range(8))
    assert env["EP_NIC_NAME"] == "mlx5_0"
    assert env["LD_PRELOAD"] == "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3"
    assert env["LD_LIBRARY_PATH"] == "/opt/deepep/nvshmem/lib:/usr/local/cuda/lib64:/existing"
    assert env["PATH"].split(":")[0] == "/usr/local/cuda/bin"
    assert "GDRCOPY_HOME" not in env


def test_rocep_names_before_doca(tmp_path):
    facts = node_facts(tmp_path, "gcp_b200", naming="rocep")
    path, dummy = render_script(tmp_path, facts)
    env = sourced(path)
    assert env["NVSHMEM_HCA_PREFIX"] == "rocep"
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"].startswith("0:rocep")
    assert env["EP_NIC_NAME"].startswith("rocep")


def test_infiniband_has_no_gid_index_nor_vmm_switch(tmp_path):
    facts = node_facts(tmp_path, "h100_ib")
    assert facts["gpufleet_rdma"]["transport"] == "infiniband"
    path, dummy = render_script(tmp_path, facts)
    bash_n(path)
    env = sourced(path)
    assert env["NVSHMEM_HCA_PREFIX"] == "mlx5"
    assert "NVSHMEM_IB_GID_INDEX" not in env
    assert "NVSHMEM_DISABLE_CUDA_VMM" not in env
    assert env["DEEP_EP_DEVICE_TO_HCA_MAPPING"].count(":mlx5_") == 8


def test_node_without_nics(tmp_path):
    facts = node_facts(tmp_path, "h200_nvlink")
    path, dummy = render_script(tmp_path, facts)
    bash_n(path)
    env = sourced(path)
    for name in ("NVSHMEM_HCA_PREFIX", "NVSHMEM_IB_GID_INDEX", "NVSHMEM_DISABLE_CUDA_VMM",
                 "NVSHMEM_ENABLE_NIC_PE_MAPPING", "DEEP_EP_DEVICE_TO_HCA_MAPPING", "EP_NIC_NAME"):
        assert name not in env, name
    assert env["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda"


@pytest.mark.parametrize("nvshmem_built,bundled,env_script_ld_preload,expected", [
    (True, BUNDLED, "auto", BUNDLED["preload"]),
    (True, {"bundled": [], "preload": BUNDLED["preload"]}, "auto", None),  # nothing bundled: nothing to beat
    (False, BUNDLED, "auto", None),  # no custom build: nothing to preload
    (True, BUNDLED, "never", None),
])
def test_ld_preload_only_when_a_bundled_nvshmem_would_win(tmp_path, nvshmem_built, bundled, env_script_ld_preload,
                                                          expected):
    facts = node_facts(tmp_path, "gcp_b200", naming="mlx5")
    path, dummy = render_script(tmp_path, facts, nvshmem_built=nvshmem_built, bundled=bundled,
                                env_script_ld_preload=env_script_ld_preload)
    env = sourced(path)
    assert env.get("LD_PRELOAD") == expected


def test_gdrcopy_and_explicit_values(tmp_path):
    facts = node_facts(tmp_path, "gcp_b200", naming="mlx5")
    path, dummy = render_script(tmp_path, facts, gdrcopy_built=True, env_script_nic_handler="cpu",
                                env_script_gid_index=5, env_script_hca_mapping="", env_script_ep_nic_name="mlx5_3",
                                env_script_pythonpath=["/opt/deepep/DeepEP"],
                                env_script_extra_env={"NVSHMEM_DEBUG": "WARN", "ODD_VALUE": "it's \"quoted\" $HOME `x`"})
    bash_n(path)
    env = sourced(path, {"PYTHONPATH": "/p"})
    assert env["GDRCOPY_HOME"] == "/opt/deepep/gdrcopy"
    assert env["LD_LIBRARY_PATH"] == "/opt/deepep/nvshmem/lib:/opt/deepep/gdrcopy/lib:/usr/local/cuda/lib64"
    assert env["NVSHMEM_IBGDA_NIC_HANDLER"] == "cpu"
    assert env["NVSHMEM_IB_GID_INDEX"] == "5"
    assert "DEEP_EP_DEVICE_TO_HCA_MAPPING" not in env and "NVSHMEM_ENABLE_NIC_PE_MAPPING" not in env
    assert env["EP_NIC_NAME"] == "mlx5_3"
    assert env["PYTHONPATH"] == "/opt/deepep/DeepEP:/p"
    assert env["NVSHMEM_DEBUG"] == "WARN"
    assert env["ODD_VALUE"] == "it's \"quoted\" $HOME `x`"


def test_defaults_follow_the_facts_of_the_nvshmem_and_deepep_phases(tmp_path):
    # No inventory wiring: the role's defaults read nvshmem_home and deepep_pythonpath, set by the earlier phases.
    facts = node_facts(tmp_path, "gcp_b200", naming="mlx5")
    path, dummy = render_script(tmp_path, facts, nvshmem_home="/opt/site/nvshmem-3.5",
                                deepep_pythonpath=["/opt/deepep/DeepEP"])
    env = sourced(path)
    assert env["NVSHMEM_HOME"] == env["NVSHMEM_DIR"] == "/opt/site/nvshmem-3.5"
    assert env["LD_LIBRARY_PATH"].split(":")[0] == "/opt/site/nvshmem-3.5/lib"
    assert env["PYTHONPATH"] == "/opt/deepep/DeepEP"
    # A phase turned off leaves nvshmem_home empty: the default prefix, and nothing on PYTHONPATH.
    path, dummy = render_script(tmp_path, facts, nvshmem_home="", deepep_pythonpath=[])
    env = sourced(path)
    assert env["NVSHMEM_HOME"] == "/opt/deepep/nvshmem" and "PYTHONPATH" not in env


def test_script_is_stable_and_says_where_it_comes_from(tmp_path):
    facts = node_facts(tmp_path, "gcp_b200", naming="mlx5")
    first, dummy = render_script(tmp_path, facts, bundled=BUNDLED)
    text = first.read_text(encoding="utf-8")
    second, dummy = render_script(tmp_path, facts, bundled=BUNDLED)
    assert second.read_text(encoding="utf-8") == text  # no dates or run-dependent content: idempotent
    assert text.startswith("#!/usr/bin/env bash\n# Managed by gpufleet.deepep")


def test_nodes_of_one_profile_get_the_same_script(tmp_path):
    """The audit compares env_script_sha256 within a group: nothing host-specific may be in the file."""
    facts = node_facts(tmp_path, "gcp_b200", naming="mlx5")
    one, dummy = render_script(tmp_path, facts, bundled=BUNDLED, hostname="b200-cluster-1")
    text = one.read_text(encoding="utf-8")
    two, dummy = render_script(tmp_path, facts, bundled=BUNDLED, hostname="b200-cluster-2")
    assert "b200-cluster-1" not in text
    assert two.read_text(encoding="utf-8") == text


# --- the DeepEP V2 block -----------------------------------------------------------------------------------------

V2_VARIABLES = ("EP_NIC_NAME", "EP_DISABLE_GIN", "EP_JIT_CACHE_DIR")


@pytest.mark.parametrize("profile, naming, disable_gin, nic", [
    ("h200_nvlink", "as-profile", "1", None),      # no RDMA device: no GIN, V2 needs EP_DISABLE_GIN=1
    ("h100_ib", "as-profile", None, "mlx5_0"),     # ACTIVE InfiniBand devices: GIN, never disabled
    ("gcp_b200", "mlx5", None, "mlx5_0"),
    ("gcp_b200", "rocep", None, "rocep"),
])
def test_v2_block_follows_the_active_rdma_devices(tmp_path, profile, naming, disable_gin, nic):
    facts = node_facts(tmp_path, profile, naming=naming)
    path, decided = render_script(tmp_path, facts)
    bash_n(path)
    env = sourced(path)
    assert env.get("EP_DISABLE_GIN") == disable_gin
    if nic is None:
        assert "EP_NIC_NAME" not in env
    else:
        assert env["EP_NIC_NAME"].startswith(nic)
        assert env["EP_NIC_NAME"] == facts["gpufleet_rdma"]["active_devices"][0]
    assert "NCCL_CUMEM_ENABLE" not in env
    assert "NCCL_CUMEM_ENABLE" not in path.read_text()


@pytest.mark.parametrize("setting, profile, expected", [
    ("auto", "h200_nvlink", "1"), ("auto", "h100_ib", None),
    ("1", "h100_ib", "1"), ("1", "h200_nvlink", "1"),
    ("", "h200_nvlink", None), ("", "h100_ib", None),
])
def test_ep_disable_gin_setting(tmp_path, setting, profile, expected):
    path, dummy = render_script(tmp_path, node_facts(tmp_path, profile), env_script_ep_disable_gin=setting)
    assert sourced(path).get("EP_DISABLE_GIN") == expected


@pytest.mark.parametrize("profile", ["h200_nvlink", "h100_ib"])
def test_every_v2_variable_is_documented_in_the_script_and_the_readme(tmp_path, profile):
    path, decided = render_script(tmp_path, node_facts(tmp_path, profile))
    lines = path.read_text().splitlines()
    exported = [i for i, line in enumerate(lines) if line.startswith("export EP_")]
    assert exported
    for index in exported:
        name = lines[index].split()[1].split("=")[0]
        assert name in V2_VARIABLES
        comment = lines[index - 1]
        assert comment.startswith("# DeepEP V2: ") and len(comment) > 60, comment
    readme = (ROLE / "README.md").read_text()
    spec = (ROLE / "meta" / "argument_specs.yml").read_text()
    for name in V2_VARIABLES:
        assert ("`%s`" % name in readme or "`%s=" % name in readme) and name in spec


def settings_check(**variables):
    """The role's "Check the settings against the node" assert, judged with ``variables``: (passed, message)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Render the script from the facts")["block"]
    task = next(t for t in block if t.get("name", "").startswith("Check the settings against the node"))
    values = role_defaults()
    values.update({"inventory_hostname": "h100-1", "env_script_installed": {"gdrdrv_loaded": True}})
    values.update(variables)
    values.update({k: render(v, values) for k, v in task["vars"].items()})
    assert task["ansible.builtin.assert"]["that"] == "env_script_check.ok"
    failed = [render(check["msg"], values) for check in task["loop"] if render(check["ok"], values) not in (True, "True")]
    return not failed, " ".join(failed)


ACTIVE = {"gpufleet_rdma": {"active_devices": ["mlx5_0", "mlx5_1"]}}


@pytest.mark.parametrize("variables, passed, words", [
    ({"ansible_facts": ACTIVE}, True, None),
    ({"ansible_facts": ACTIVE, "env_script_ep_nic_name": "mlx5_1"}, True, None),
    ({"ansible_facts": ACTIVE, "env_script_ep_nic_name": "mlx5_7"},
     False, "env_script_ep_nic_name is mlx5_7, which is not an ACTIVE RDMA device of h100-1 (expected auto, or one "
            "of: mlx5_0, mlx5_1)"),
    ({"ansible_facts": {"gpufleet_rdma": {"active_devices": []}}, "env_script_ep_nic_name": "mlx5_0"},
     False, "(expected auto, or one of: none)"),
    ({"ansible_facts": ACTIVE, "env_script_extra_env": {"NCCL_CUMEM_ENABLE": "0"}},
     False, "env_script_extra_env sets NCCL_CUMEM_ENABLE=0, which breaks DeepEP V2"),
    ({"ansible_facts": ACTIVE, "env_script_extra_env": {"NCCL_CUMEM_ENABLE": 0}}, False, "expected it left out"),
    ({"ansible_facts": ACTIVE, "env_script_extra_env": {"NCCL_CUMEM_ENABLE": "1"}}, True, None),
])
def test_the_role_refuses_an_inactive_nic_and_cumem_off(variables, passed, words):
    ok, message = settings_check(**variables)
    assert ok is passed
    if words:
        assert words in message
    else:
        assert message.strip() == ""


@pytest.mark.parametrize("overrides,expected", [
    ({}, "/var/cache/deepep/jit"),
    ({"deepep_jit_cache_dir": "/local/nvme/deepep-jit"}, "/local/nvme/deepep-jit"),
    ({"env_script_ep_jit_cache_dir": "/scratch/jit"}, "/scratch/jit"),
    ({"env_script_ep_jit_cache_dir": ""}, None),
])
def test_ep_jit_cache_dir_is_the_node_local_cache(tmp_path, overrides, expected):
    """DeepEP V2's JIT cache: the deepep role's node-local directory, with the reason in the script's comment."""
    path, dummy = render_script(tmp_path, node_facts(tmp_path, "h200_nvlink"), **overrides)
    bash_n(path)
    env = sourced(path)
    assert env.get("EP_JIT_CACHE_DIR") == expected
    if expected:
        assert "node-local (NFS races: DeepEP #683)" in path.read_text()
