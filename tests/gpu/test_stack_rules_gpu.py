# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stack catalogue's node reads on a real GPU node (issue 49): what the rules judge, read from the real thing.

- GIN's libmlx5 floor (``gin_gdaki_libmlx5``): the node's own ``libmlx5.so.1`` (rdma-core's ibverbs-providers), read
  by the collection's ELF reader (``v2runtime.libmlx5_facts``), must list exactly the version definitions binutils'
  ``readelf -V`` lists, and the verdict (MLX5_1.8, MLX5_1.19, MLX5_1.25) follows from them.
- NCCL mapped in a process (``DEEPEP_NCCL_MAPPED_TWICE``, DeepEP #710): a real one-rank NCCL communicator of the
  torch environment maps exactly one ``libnccl.so.2``, the one of the environment's pip package, and the import
  probe's ``/proc/self/maps`` reading (``installs.IMPORT_PROBE``, without ``import deep_ep``) finds it; a second copy
  of that library loaded by its path (the #710 state: another install's NCCL beside the pinned one) is found as a
  second mapped file.

Every read is written to ``<results>/stack-rules.json`` (the capture).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import installs, v2runtime

pytestmark = pytest.mark.gpu
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# The probe's /proc/self/maps loop, as node_stack runs it after `import deep_ep` (here after a real NCCL init).
MAPS_LOOP = installs.IMPORT_PROBE.split("mapped = {}\n", 1)[1].split("print(", 1)[0]
NCCL_PROCESS = r"""
import ctypes, json, os, sys
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
t = torch.ones(1024, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
second = sys.argv[2] if len(sys.argv) > 2 else ""
if second:
    ctypes.CDLL(second)
mapped = {}
%s
version = torch.cuda.nccl.version()
# The NCCL this process runs, as the loaded library answers (ncclGetVersion: major * 10000 + minor * 100 + patch):
# torch reports the release it was built against, which the nccl role's source build over the pip files is not.
code = ctypes.c_int(0)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD | os.RTLD_NOW).ncclGetVersion(ctypes.byref(code))
print(json.dumps({"mapped": dict((k, sorted(v)) for k, v in mapped.items()), "sum": float(t.sum()),
                  "torch_nccl": ".".join(str(p) for p in version) if isinstance(version, tuple) else version,
                  "loaded_nccl": "%%d.%%d.%%d" %% (code.value // 10000, code.value %% 10000 // 100, code.value %% 100)}))
dist.destroy_process_group()
""" % MAPS_LOOP


def _capture(results_dir: Path, key: str, value) -> None:
    path = results_dir / "stack-rules.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _readelf_versions(path: str) -> list:
    """The version definitions of ``path`` as binutils lists them (``readelf -V``, section .gnu.version_d)."""
    out = subprocess.run(["readelf", "-V", "-W", path], capture_output=True, text=True, timeout=60, check=True).stdout
    section = out.split("Version definition section", 1)[1].split("Version needs section", 1)[0]
    section = section.split("Version symbols section", 1)[0]
    names = re.findall(r"Name: (\S+)", section)
    return names


def test_the_real_libmlx5_as_the_gin_rule_reads_it(results_dir):
    path = v2runtime.find_libmlx5("/")
    facts = v2runtime.libmlx5_facts("/", path)
    _capture(results_dir, "libmlx5", facts)
    if path is None:
        pytest.skip("no libmlx5.so.1 on this node (rdma-core's ibverbs-providers is not installed): %s" % facts["error"])
    assert facts["error"] is None, facts
    if not shutil.which("readelf"):
        pytest.skip("no readelf (binutils) to hold the collection's ELF reader against")
    binutils = _readelf_versions(os.path.realpath(path))
    _capture(results_dir, "libmlx5_readelf", binutils)
    # readelf also lists the file's own base definition (its soname); the reader keeps the version nodes.
    assert sorted(v for v in facts["versions"] if v.startswith("MLX5_")) == \
        sorted(v for v in binutils if v.startswith("MLX5_")), (facts["versions"], binutils)
    assert facts["required"] == ("MLX5_1.8" in binutils) and facts["gdaki"] == ("MLX5_1.19" in binutils)
    assert facts["optional"] == ("MLX5_1.25" in binutils)


def _nccl_process(gpu_python: str, results_dir: Path, port: int, second: str = "") -> dict:
    env = dict(os.environ, **NO_MULTICAST)
    proc = subprocess.run([gpu_python, "-c", NCCL_PROCESS, str(port)] + ([second] if second else []),
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    (results_dir / ("nccl-process%s.log" % ("-second" if second else ""))).write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_real_nccl_process_maps_one_nccl_and_a_second_copy_is_seen(gpu_python, results_dir, tmp_path):
    one = _nccl_process(gpu_python, results_dir, 29611)
    _capture(results_dir, "nccl_one", one)
    assert one["sum"] == 1024.0
    (lib,) = one["mapped"]["nccl"]
    # The mapped file is the torch environment's pip NCCL, and it says the version the process runs (torch's own
    # release, or the nccl role's source build where an earlier test of the session pinned it over the pip files).
    assert "/nvidia/nccl/lib/libnccl.so" in lib, lib
    assert ("NCCL version " + one["loaded_nccl"]).encode() in Path(lib).read_bytes(), (one, lib)
    copy = tmp_path / "other-nccl" / "libnccl.so.2"
    copy.parent.mkdir()
    shutil.copy2(lib, copy)
    two = _nccl_process(gpu_python, results_dir, 29612, str(copy))
    _capture(results_dir, "nccl_two", two)
    assert two["mapped"]["nccl"] == sorted([lib, str(copy)]), two
