# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the sglang scenario: SGLang on two DeepEP-ready simulated nodes.

In file order: every node holds what the collection built (torch, NCCL, cuDNN, the collection's deep_ep) with
SGLang, its kernel package and NIXL installed and sgl-deep-ep kept out; the env file; then a plain, unconstrained
`pip install sglang` on one node (what a user might type) moves torch and NCCL and overwrites deep_ep through pip
itself; the playbook in check mode names it and writes nothing; the real run repairs it and a further run changes
nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import testinfra
import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
NODES = sorted(testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("b200_cluster"))
ENV_FILE = "/opt/deepep/sglang-env.sh"
CONSTRAINTS = "/etc/gpufleet/pip-constraints.txt"
MIRROR = "/srv/fleetsim-mirror/wheels"
STORE = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "artifacts"
DG_CACHE = "/var/cache/sglang/deep_gemm"
LOCK = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "sglang-lock.yml"

# Reads the installed stack the way the role proves it: package metadata, and the deep_ep import resolution.
STACK = r"""
import importlib.util, json, os
from importlib import metadata
def v(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
spec = importlib.util.find_spec("deep_ep")
d = os.path.dirname(spec.origin) if spec else None
print(json.dumps({n: v(n) for n in ("sglang", "sglang-kernel", "sgl-kernel", "flashinfer-python", "torch",
                                   "nvidia-nccl-cu12", "nvidia-cudnn-cu12", "nixl-cu12", "nixl-cu13", "nixl",
                                   "sgl-deep-ep", "deep_ep")}
                 | {"deep_ep_dir": d, "stamp": os.path.isfile(os.path.join(d, ".gpufleet-build.json")) if d else False,
                    "init": open(spec.origin).read() if spec else None}))
"""


def node(name):
    return testinfra.get_host(f"ansible://{name}", ansible_inventory=INVENTORY)


def stack(name):
    return json.loads(node(name).check_output("python3 -c %s", STACK))


def sglang_playbook(*args: str) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "ansible-playbook"), "-i", str(Path(INVENTORY).parent), str(REPO / "playbooks" / "sglang.yml"),
           "-e", "sglang_hosts=b200_cluster", "-e", "sglang_model_path=/opt/models/deepseek-v3",
           "-e", f"gpufleet_artifact_store={STORE}", "-e", f"@{LOCK}", *args]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PATH=f"{bindir}:{os.environ.get('PATH', '')}")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    return subprocess.run(cmd, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False, timeout=1500)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def recap(output: str) -> dict[str, dict[str, int]]:
    """``{host: {ok, changed, ...}}`` of the PLAY RECAP (colour codes removed: Molecule forces colour)."""
    out = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", ANSI.sub("", output), re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return out


def test_the_lock_pins_every_package_to_the_mirror_file_pip_chose():
    """playbooks/sglang_lock.yml wrote the closure with the sha256 of each mirror file; sgl-deep-ep is left out."""
    import hashlib

    import yaml

    lock = yaml.safe_load(LOCK.read_text())["sglang_requirements_hashes"]
    assert "sglang==0.5.19" in lock and not any(k.startswith("sgl-deep-ep==") for k in lock), sorted(lock)
    assert any(k.startswith("torch==") for k in lock), sorted(lock)      # a held project, for a repair
    files = {}
    for wheel in node(NODES[0]).check_output(f"ls {MIRROR}").split():
        name, version = re.sub(r"\.(tar\.gz|zip)$", "", wheel).split("-")[:2]
        files.setdefault(f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}", []).append(wheel)
    for key, (digest,) in lock.items():
        assert key in files, (key, sorted(files)[:20])
        data = node(NODES[0]).check_output(f"sha256sum {MIRROR}/{files[key][0]}").split()[0]
        assert len(files[key]) > 1 or data == digest, (key, data, digest)


def test_an_install_from_the_mirror_without_the_lock_is_refused_before_anything_is_installed():
    before = {n: stack(n) for n in NODES}
    run = sglang_playbook("-e", '{"sglang_requirements_hashes": {}}')
    assert run.returncode != 0
    out = ANSI.sub("", run.stdout)
    assert "sglang_requirements_hashes is empty, so SGLang 0.5.19 and its dependencies would be installed" in out, \
        out[-3000:]
    assert "ansible-playbook gpufleet.deepep.sglang_lock" in out
    assert {n: stack(n) for n in NODES} == before


def test_sglang_installed_with_the_pins_held():
    for name in NODES:
        s = stack(name)
        assert s["sglang"] == "0.5.19" and s["sglang-kernel"] == "0.4.10" and s["sgl-kernel"] is None, (name, s)
        assert s["flashinfer-python"] == "0.7.2"
        assert s["torch"] == "2.13.0+cpu", (name, s)
        assert s["nvidia-nccl-cu12"] == "2.28.3" and s["nvidia-cudnn-cu12"] == "9.16.0.29"
        assert s["nixl-cu12"] == "1.5.1" and s["nixl-cu13"] is None and s["nixl"] is None
        assert s["sgl-deep-ep"] is None
        assert s["stamp"] and "__sgl_deep_ep__" not in s["init"], (name, s["deep_ep_dir"])


def test_constraints_hold_torch_nccl_cudnn_and_deep_ep():
    for name in NODES:
        lines = node(name).file(CONSTRAINTS).content_string.splitlines()
        for pin in ("torch==2.13.0", "nvidia-nccl-cu12==2.28.3", "nvidia-cudnn-cu12==9.16.0.29"):
            assert pin in lines, (name, lines)
        assert any(line.startswith("deep-ep==") for line in lines), (name, lines)


def test_env_file_puts_the_ibgda_nvshmem_first_and_no_pip_nvshmem():
    for name in NODES:
        host = node(name)
        text = host.file(ENV_FILE).content_string
        assert "SGLANG_DG_CACHE_DIR=/var/cache/sglang/deep_gemm" in text
        assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=1024" in text
        ld = host.check_output("bash -c %s", f". {ENV_FILE} && echo $LD_LIBRARY_PATH").split(":")
        assert ld[0] == "/opt/deepep/nvshmem/lib", ld
        assert not any("nvidia/nvshmem" in entry for entry in ld), ld
        assert any(entry.endswith("nvidia/cudnn/lib") for entry in ld), ld
        assert any(entry.endswith("nvidia/cusparselt/lib") for entry in ld), ld


def test_deepgemm_cache_built_once_and_installed_from_the_store():
    keys = sorted(p for p in (STORE / "deepgemm").iterdir() if p.is_dir())
    assert len(keys) == 1, keys
    record = json.loads((keys[0] / "record.json").read_text())
    builder = record["host"]
    assert builder in NODES and record["meta"]["model"] == "DeepseekV3ForCausalLM"
    assert "--tp-size" in record["meta"]["args"] and "deepep" in record["meta"]["args"]
    listings = {}
    for name in NODES:
        host = node(name)
        marker = json.loads(host.file(f"{DG_CACHE}/.gpufleet-deepgemm-{keys[0].name}.json").content_string)
        assert marker["from"] == ("built here" if name == builder else "artifact store"), (name, marker)
        listings[name] = host.check_output(f"cd {DG_CACHE} && find cache -type f | sort")
        assert "fixture cubin" in host.check_output(f"cat $(find {DG_CACHE}/cache -type f | head -1)")
    assert len(set(listings.values())) == 1 and len(listings[builder].splitlines()) >= 8, listings


def test_sglang_rules_warn_about_the_fp8_scales_only():
    """The DeepSeek-V3 FP8 config on B200: the scale-format warning; the DeepGEMM cache is there, nothing critical."""
    proc = sglang_playbook("--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "SGLANG_BLACKWELL_FP8_SCALE" in proc.stdout and "SGLANG_DEEPGEMM_CACHE_MISSING" not in proc.stdout
    counts = recap(proc.stdout)
    assert sorted(counts) == NODES and all(r["changed"] == 0 for r in counts.values()), proc.stdout[-3000:]


def test_unconstrained_install_is_detected_and_repaired():
    victim = NODES[0]
    host = node(victim)
    # What `pip install sglang` does when nothing holds the environment (no constraint named).
    host.check_output(f"python3 -m pip install -q --break-system-packages --no-index --find-links {MIRROR} "
                      "--force-reinstall sglang==0.5.19")
    moved = stack(victim)
    assert moved["torch"] == "2.14.1" and moved["nvidia-nccl-cu12"] == "2.27.5"
    assert moved["sgl-deep-ep"] == "0.1.2.post1" and "__sgl_deep_ep__" in moved["init"]

    check = sglang_playbook("--check", "--diff")
    assert check.returncode == 0, check.stdout[-4000:]
    assert "torch is 2.14.1, held at 2.13.0" in check.stdout
    assert "sgl-deep-ep 0.1.2.post1 is installed" in check.stdout
    assert recap(check.stdout)[victim]["changed"] >= 1
    assert stack(victim)["torch"] == "2.14.1"  # check mode wrote nothing

    run = sglang_playbook()
    assert run.returncode == 0, run.stdout[-4000:]
    repaired = stack(victim)
    assert repaired["torch"] == "2.13.0+cpu" and repaired["nvidia-nccl-cu12"] == "2.28.3"
    assert repaired["sgl-deep-ep"] is None and repaired["stamp"] and "__sgl_deep_ep__" not in repaired["init"]
    assert repaired["sglang"] == "0.5.19"
    host.check_output("bash -c %s", ". /opt/deepep/unified-env.sh && . %s && python3 -c 'import deep_ep, torch; "
                      "print(deep_ep.Buffer, torch.__version__)'" % ENV_FILE)
    others = [n for n in NODES if n != victim]
    assert all(recap(run.stdout)[n]["changed"] == 0 for n in others), run.stdout[-3000:]

    again = sglang_playbook()
    counts = recap(again.stdout)
    assert again.returncode == 0 and sorted(counts) == NODES and all(r["changed"] == 0 for r in counts.values()), \
        again.stdout[-3000:]
