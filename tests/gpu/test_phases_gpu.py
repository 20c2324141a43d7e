# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the phase roles read on a real GPU node: the preflight checks, and the fast path's converged stamp.

Both stages are read-only (tests/gpu/playbooks/phases.yml). The expected values come from the node itself,
read here by other means (``nvidia-smi``, ``nvcc``, ``/proc``), never from what the roles reported.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.gpu.gpu_helpers import load, run_stage, tail

pytestmark = pytest.mark.gpu


def smi(*query: str) -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(query), "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_preflight_reads_the_real_node(results_dir, gpu_python, num_gpus):
    proc = run_stage("preflight", results_dir, gpu_python, {}, playbook="phases.yml")
    assert proc.returncode == 0, tail(proc)
    got = load(results_dir, "preflight.json")
    assert got["report"]["failures"] == [], got["report"]
    # GPUs, their arch and the driver, as nvidia-smi tells them.
    assert got["gpus"]["gpu_count"] == num_gpus
    caps = sorted(set(smi("compute_cap")), key=lambda c: tuple(int(x) for x in c.split(".")))
    assert got["gpus"]["cuda_arch_list"] == ";".join(caps), got["gpus"]
    assert got["nvidia"]["driver_loaded"] is True
    assert got["nvidia"]["driver_version"] == smi("driver_version")[0]
    # The live parameters are the driver's own file, parsed.
    params = open("/proc/driver/nvidia/params", encoding="utf-8").read()
    for name in ("EnableStreamMemOPs", "RegistryDwords"):
        line = next(line for line in params.splitlines() if line.startswith(name + ":"))
        assert str(got["nvidia"]["params"][name]) == line.split(":", 1)[1].strip().strip('"'), name
    # The toolkit, as nvcc tells it.
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    nvcc_out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    release = re.search(r"release (\d+\.\d+)", nvcc_out).group(1)
    assert got["probe"]["cuda_version"].startswith(release), got["probe"]
    assert got["probe"]["pip_ok"] is True
    assert got["probe"]["libcuda"], "libcuda.so not found"


def test_site_stamp_is_stable_on_the_real_node(results_dir, gpu_python):
    proc = run_stage("site_state", results_dir, gpu_python, {}, playbook="phases.yml")
    assert proc.returncode == 0, tail(proc)
    got = load(results_dir, "site-state.json")
    assert got["record"]["changed"] is True
    stamp = load(results_dir, "site-stamp.json")
    watch = stamp["watch"]
    # The driver's live parameters are read although procfs reports size 0, and the big CUDA library of torch goes
    # by size and mtime, not a hash of hundreds of MB.
    assert watch["/proc/driver/nvidia/params"]["kind"] == "file" and watch["/proc/driver/nvidia/params"]["size"] > 0
    torch_cuda = next(v for k, v in watch.items() if k.endswith("/torch/lib/libtorch_cuda.so"))
    assert torch_cuda["kind"] == "file" and "mtime_ns" in torch_cuda
    # Nothing moved between the record and two checks: a converged node stays intact from run to run.
    for check in got["checks"]:
        assert (check["steady"], check["intact"], check["drift"]) == (True, True, []), check
