# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack gather=[initramfs, torch, hca_mapping]: the facts that replace the roles' own probes (lsinitramfs
parsed in Jinja, the pytorch role's python -c script, verify_internode's import probe)."""

from __future__ import annotations

import json
import os
import sys

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import role_facts as _role_facts
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack

LSINITRAMFS = """usr/lib/modules/6.8.0-31-generic/kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko.zst
usr/lib/modules/6.8.0-31-generic/updates/dkms/nvidia.ko.zst
usr/lib/modules/6.8.0-31-generic/updates/dkms/nvidia-uvm.ko.zst
usr/lib/modules/6.8.0-31-generic/updates/dkms/nvidia_drm.ko.zst
etc/modprobe.d/nvidia-graphics-drivers-kms.conf
"""


def _write(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)


def test_initramfs_with_nvidia_modules_listed_with_its_timeout(tmp_path):
    _write(tmp_path / "boot" / "initrd.img-6.8.0-31-generic", "image")
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv, timeout))
        return 0, LSINITRAMFS, ""

    facts = _role_facts.gather_initramfs(str(tmp_path), "/boot/initrd.img-6.8.0-31-generic", runner, timeout=9)
    assert calls == [(["lsinitramfs", str(tmp_path / "boot" / "initrd.img-6.8.0-31-generic")], 9)]
    # nvidia_drm.ko is not nvidia-<x>.ko nor nvidia.ko: the rule of the role stays what it was.
    assert facts == {"path": "/boot/initrd.img-6.8.0-31-generic", "present": True, "listed": True, "nvidia": True,
                     "nvidia_modules": ["usr/lib/modules/6.8.0-31-generic/updates/dkms/nvidia-uvm.ko.zst",
                                        "usr/lib/modules/6.8.0-31-generic/updates/dkms/nvidia.ko.zst"],
                     "error": None}


def test_initramfs_without_nvidia(tmp_path):
    _write(tmp_path / "boot" / "initrd.img", "image")
    facts = _role_facts.gather_initramfs(str(tmp_path), "/boot/initrd.img",
                                         lambda argv, timeout=None, env=None: (0, "etc/fstab\nbin/sh\n", ""))
    assert facts["listed"] is True and facts["nvidia"] is False and facts["nvidia_modules"] == []


def test_initramfs_absent_runs_nothing(tmp_path):
    def runner(argv, timeout=None, env=None):
        raise AssertionError("lsinitramfs must not run for an absent image")

    result = run_module(node_stack, {"gather": ["initramfs"], "root": str(tmp_path),
                                     "initramfs_path": "/boot/initrd.img-6.8.0"}, check_mode=True)
    assert not result.failed, result
    assert result["ansible_facts"]["gpufleet_initramfs"] == {
        "path": "/boot/initrd.img-6.8.0", "present": False, "listed": False, "nvidia": False, "nvidia_modules": [],
        "error": None}
    assert _role_facts.gather_initramfs(str(tmp_path), "/boot/initrd.img-6.8.0", runner)["present"] is False


def test_initramfs_unlistable_says_why(tmp_path):
    _write(tmp_path / "boot" / "initrd.img", "image")
    facts = _role_facts.gather_initramfs(str(tmp_path), "/boot/initrd.img",
                                         lambda argv, timeout=None, env=None: (124, "", "timed out after 120s"))
    assert facts["present"] is True and facts["listed"] is False and facts["nvidia"] is False
    assert "lsinitramfs /boot/initrd.img failed (rc=124)" in facts["error"] and "timed out" in facts["error"]


def test_initramfs_path_missing_or_relative_is_refused(tmp_path):
    for params in ({}, {"initramfs_path": "boot/initrd.img"}):
        result = run_module(node_stack, dict(gather=["initramfs"], root=str(tmp_path), **params))
        assert result.failed
        assert "initramfs_path" in result["msg"] and "expected an image such as /boot/initrd.img" in result["msg"]
        assert "Traceback" not in json.dumps(result)


def _fake_site(tmp_path, torch_version="2.11.0+cu130", cuda="13.0", numpy_version="2.3.4"):
    site = tmp_path / "site-packages"
    _write(site / "torch" / "__init__.py", "raise ImportError('torch must not be imported by the probe')\n")
    _write(site / "torch" / "version.py", "__version__ = %r\ncuda = %r\n" % (torch_version, cuda))
    _write(site / ("torch-%s.dist-info" % torch_version) / "METADATA",
           "Metadata-Version: 2.1\nName: torch\nVersion: %s\n" % torch_version)
    if numpy_version:
        _write(site / ("numpy-%s.dist-info" % numpy_version) / "METADATA",
               "Metadata-Version: 2.1\nName: numpy\nVersion: %s\n" % numpy_version)
    return site


def test_torch_read_without_importing_it(tmp_path, monkeypatch):
    site = _fake_site(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(site))
    result = run_module(node_stack, {"gather": ["torch"], "python": sys.executable,
                                     "torch_packages": ["numpy>=2", "einops"]}, check_mode=True)
    assert not result.failed, result
    torch = result["ansible_facts"]["gpufleet_torch"]
    assert torch["torch_version"] == "2.11.0+cu130" and torch["torch_cuda"] == "13.0"
    assert torch["torch_path"] == str(site / "torch")
    assert torch["packages"] == {"numpy": "2.3.4", "einops": None} and torch["numpy_version"] == "2.3.4"
    assert torch["python"] and torch["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert torch["error"] is None


def test_torch_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    facts = _role_facts.gather_torch(sys.executable, [], _stack_runner(), timeout=30)
    assert facts["torch_version"] is None and facts["torch_path"] is None and facts["packages"] == {}
    assert facts["python"] and facts["error"] is None


def test_torch_interpreter_missing_says_why(tmp_path):
    facts = _role_facts.gather_torch(str(tmp_path / "bin" / "python"), ["numpy"], _stack_runner(), timeout=30)
    assert facts["python"] is None and facts["torch_version"] is None and facts["packages"] == {}
    assert facts["error"].startswith("%s failed (rc=127)" % (tmp_path / "bin" / "python"))


def test_torch_probe_is_bounded():
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append(timeout)
        return 124, "", "timed out after 5s"

    facts = _role_facts.gather_torch("/usr/bin/python3", [], runner, timeout=5)
    assert calls == [5] and "rc=124" in facts["error"]


def test_torch_bad_requirement_is_refused():
    result = run_module(node_stack, {"gather": ["torch"], "torch_packages": [">=2"]})
    assert result.failed and "'>=2' is not a pip requirement" in result["msg"]


def _stack_runner():
    from ansible_collections.gpufleet.deepep.plugins.module_utils._node.commands import subprocess_runner
    return subprocess_runner


def _fake_deep_ep(tmp_path, supported=True, broken=False):
    site = tmp_path / "deepep-site"
    body = "class Buffer:\n"
    body += "    def _setup_device_hca_mapping(self):\n        pass\n" if supported else "    pass\n"
    if broken:
        body = "raise ImportError('deep_ep_cpp.so: undefined symbol: _ZN3c10')\n"
    _write(site / "deep_ep" / "__init__.py", body)
    return site


def test_hca_mapping_from_the_env_script(tmp_path):
    site = _fake_deep_ep(tmp_path)
    _write(tmp_path / "opt" / "deepep" / "unified-env.sh",
           'echo sourced\nexport PYTHONPATH="%s"\nexport DEEP_EP_DEVICE_TO_HCA_MAPPING="0:mlx5_0,1:mlx5_1"\n' % site)
    result = run_module(node_stack, {"gather": ["hca_mapping"], "root": str(tmp_path), "python": sys.executable,
                                     "env_script": "/opt/deepep/unified-env.sh"}, check_mode=True)
    assert not result.failed, result
    assert result["ansible_facts"]["gpufleet_hca_mapping"] == {
        "mapping": "0:mlx5_0,1:mlx5_1", "supported": True, "import_error": None, "env_sourced": True, "error": None}


def test_hca_mapping_unsupported_and_broken_deep_ep(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEP_EP_DEVICE_TO_HCA_MAPPING", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(_fake_deep_ep(tmp_path / "old", supported=False)))
    facts = _role_facts.gather_hca_mapping(str(tmp_path), sys.executable, "/nonexistent.sh", _stack_runner())
    assert facts == {"mapping": "", "supported": False, "import_error": None, "env_sourced": False, "error": None}
    monkeypatch.setenv("PYTHONPATH", str(_fake_deep_ep(tmp_path / "broken", broken=True)))
    facts = _role_facts.gather_hca_mapping(str(tmp_path), sys.executable, "/nonexistent.sh", _stack_runner())
    assert facts["supported"] is None and facts["error"] is None
    assert facts["import_error"] == "ImportError: deep_ep_cpp.so: undefined symbol: _ZN3c10"


def test_hca_mapping_probe_failure_says_why(tmp_path):
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append((argv[0], timeout))
        return 127, "", "python9: not found"

    facts = _role_facts.gather_hca_mapping(str(tmp_path), "python9", "/opt/deepep/unified-env.sh", runner, timeout=11)
    assert calls == [("bash", 11)]
    assert facts["supported"] is None and facts["mapping"] == ""
    assert facts["error"] == "the probe with python9 failed (rc=127): python9: not found"
