# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The import probe node_stack runs on a node (``installs.IMPORT_PROBE``), run for real: a ``deep_ep`` that maps
shared objects named as NCCL and NVSHMEM's host library (built here with gcc), read back from /proc/self/maps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import installs


def _shared_object(path, soname):
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / "lib.c"
    source.write_text("int gpufleet_probe_symbol(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,%s" % soname, "-o", str(path), str(source)], check=True,
                   timeout=120)
    return str(path)


@pytest.fixture
def deep_ep(tmp_path):
    """A ``deep_ep`` package whose import loads the libraries listed in LIBS.txt by path (as a second NCCL loaded by
    path beside the one torch links does)."""
    if not shutil.which("gcc"):
        pytest.skip("needs gcc")
    package = tmp_path / "site" / "deep_ep"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import ctypes, os\n__version__ = '1.2.1'\n"
        "for line in open(os.path.join(os.path.dirname(__file__), 'LIBS.txt')).read().split():\n"
        "    ctypes.CDLL(line)\n")
    return package


def probe(package, libs):
    (package / "LIBS.txt").write_text("\n".join(libs) + "\n")
    out = subprocess.run([sys.executable, "-c", installs.IMPORT_PROBE], capture_output=True, text=True, check=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=str(package.parent)))
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_nccl_copies_are_both_named_and_one_nvshmem_host_once(tmp_path, deep_ep):
    pip_nccl = _shared_object(tmp_path / "venv" / "nvidia" / "nccl" / "lib" / "libnccl.so.2", "libnccl.so.2")
    system_nccl = _shared_object(tmp_path / "usr" / "lib" / "libnccl.so.2.30.7", "libnccl.so.2")
    link = tmp_path / "usr" / "lib" / "libnccl.so.2"
    link.symlink_to("libnccl.so.2.30.7")
    host = _shared_object(tmp_path / "nvshmem" / "lib" / "libnvshmem_host.so.3", "libnvshmem_host.so.3")
    data = probe(deep_ep, [pip_nccl, str(link), host])
    assert data["version"] == "1.2.1" and data["file"].endswith("deep_ep/__init__.py")
    # Real paths (the symlink resolved), each file once although the loader maps several segments of each.
    assert data["mapped"] == {"nccl": sorted([pip_nccl, system_nccl]), "nvshmem_host": [host]}


def test_a_process_without_either_library_maps_none(deep_ep):
    assert probe(deep_ep, [])["mapped"] == {}


def test_check_import_passes_the_mapping_on_and_none_when_the_import_fails(tmp_path):
    ok = json.dumps({"file": "/x/deep_ep/__init__.py", "version": "1.2.1",
                     "mapped": {"nccl": ["/a/libnccl.so.2"]}})

    def runner(argv, timeout=None, env=None):
        return (0, ok + "\n", "") if argv[-1] == installs.IMPORT_PROBE else (1, "", "no")

    result = installs.check_import("/usr/bin/python3", "/nonexistent/env.sh", False, runner, 30)
    assert result["ok"] and result["mapped"] == {"nccl": ["/a/libnccl.so.2"], "nvshmem_host": []}
    failed = installs.check_import("/usr/bin/python3", "/nonexistent/env.sh", False,
                                   lambda argv, timeout=None, env=None: (1, "", "ImportError: x"), 30)
    assert failed["ok"] is False and failed["mapped"] is None
