# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AWS EFA's software as gpufleet.deepep.efa_stack reads, judges and installs it: the EFA installer's package list
(the layout AWS ParallelCluster PR #1882 captured, rpm names, and the deb names of Ubuntu), libfabric's version from
fi_info, the aws-ofi-nccl plugin and the efa kernel module, against the efa fabric's floors; an install runs only a
tarball whose sha256 matches, and proves the result."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm import efa
from ansible_collections.gpufleet.deepep.plugins.modules import efa_stack
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS

FLOORS = FABRICS["efa"]["stack_min"]
# AWS ParallelCluster PR #1882 (EFA installer 1.22.0 on an el8 node), verbatim (its package line, one line there, is
# continued with backslashes here).
PCLUSTER_1_22 = """# EFA installer version: 1.22.0
# Debug packages installed: no
# Packages installed:
efa-config-1.13-1.el8.noarch efa-profile-1.5-1.el8.noarch libfabric-aws-1.17.0-1.el8.x86_64 \
libfabric-aws-devel-1.17.0-1.el8.x86_64 openmpi40-aws-4.1.5-1.x86_64 ibacm-43.0-1.el8.x86_64 \
infiniband-diags-43.0-1.el8.x86_64 rdma-core-43.0-1.el8.x86_64
"""
UBUNTU_1_50 = """# EFA installer version: 1.50.0
# Debug packages installed: no
# Packages installed:
efa-config_1.18-1_all libfabric-aws_2.6.0amzn1.0_amd64 libnccl-ofi_1.21.0-1_amd64 rdma-core_58.0-1_amd64
"""


def test_the_package_list_reads_in_both_layouts():
    old = efa.parse_installed_packages(PCLUSTER_1_22)
    assert old["installer"] == "1.22.0"
    assert old["packages"]["libfabric-aws"] == "1.17.0" and old["packages"]["rdma-core"] == "43.0"
    assert old["packages"]["openmpi40-aws"] == "4.1.5"
    new = efa.parse_installed_packages(UBUNTU_1_50)
    assert new["installer"] == "1.50.0" and new["packages"]["libnccl-ofi"] == "1.21.0-1"
    assert efa.parse_installed_packages("garbage\n") == {"installer": None, "packages": {}}


def test_versions_compare_by_their_numbers():
    assert efa.parse_fi_info_version("fi_info: 2.6.0amzn1.0\nlibfabric: 2.6.0amzn1.0\nlibfabric api: 2.6\n") == \
        "2.6.0amzn1.0"
    assert efa.numeric("2.6.0amzn1.0") == (2, 6, 0) and efa.numeric("3.3.0g") == (3, 3, 0)
    assert efa.numeric("1.21.0-1") == (1, 21, 0) and efa.numeric("x") is None


def node(tmp_path, listing=UBUNTU_1_50, libfabric="2.6.0amzn1.0", provider=True, ofi=True, loaded=True,
         kmod="3.3.0"):
    """A node tree as the EFA installer leaves it (each part optional)."""
    root = tmp_path / "root"
    amazon = root / "opt" / "amazon"
    (amazon / "efa" / "bin").mkdir(parents=True)
    if listing is not None:
        (amazon / "efa_installed_packages").write_text(listing)
    if libfabric is not None:
        fi = amazon / "efa" / "bin" / "fi_info"
        fi.write_text("#!/bin/sh\ncase \"$1\" in --version) echo 'fi_info: %s'; echo 'libfabric: %s';;\n"
                      "-p) exit %d;; esac\n" % (libfabric, libfabric, 0 if provider else 61))
        fi.chmod(0o755)
    if ofi:
        (amazon / "ofi-nccl" / "lib").mkdir(parents=True)
        (amazon / "ofi-nccl" / "lib" / "libnccl-net-ofi.so").write_text("x")
    (root / "proc").mkdir()
    modules = "ib_uverbs 200704 1 efa, Live 0x0\nib_core 552960 2 efa,ib_uverbs, Live 0x0\n"
    if loaded:
        modules = "efa 143360 0 - Live 0x0\n" + modules
        (root / "sys" / "module" / "efa").mkdir(parents=True)
        if kmod:
            (root / "sys" / "module" / "efa" / "version").write_text(kmod + "\n")
    (root / "proc" / "modules").write_text(modules)
    return root


def judged(root):
    result = run_module(efa_stack, {"root": str(root), "floors": FLOORS})
    assert not result.failed, result
    facts = result["ansible_facts"]["gpufleet_efa"]
    return facts, dict((c["check"], c) for c in facts["checks"])


def test_a_node_at_the_floors_passes_every_check(tmp_path):
    facts, checks = judged(node(tmp_path))
    assert [c for c in checks.values() if c["ok"] is not True] == []
    assert facts["libfabric_version"] == "2.6.0amzn1.0" and facts["aws_ofi_nccl"]["version"] == "1.21.0-1"
    assert facts["efa_module"] == {"loaded": True, "version": "3.3.0"}


@pytest.mark.parametrize("changes, failing", [
    ({"listing": PCLUSTER_1_22}, ["installer"]),                 # an installer older than EFA-GDA
    ({"listing": None}, ["installer"]),                          # none installed
    ({"libfabric": "1.22.0amzn4.0"}, ["libfabric"]),
    ({"libfabric": None}, ["libfabric", "efa_provider"]),         # no fi_info at all
    ({"provider": False}, ["efa_provider"]),
    ({"ofi": False}, ["aws_ofi_nccl"]),
    ({"loaded": False}, ["efa_module"]),
    ({"kmod": "2.10.0g"}, ["efa_module"]),
])
def test_each_check_fails_alone_with_its_fix(tmp_path, changes, failing):
    dummy, checks = judged(node(tmp_path, **changes))
    assert sorted(name for name, c in checks.items() if c["ok"] is False) == sorted(failing)
    assert all(checks[name]["fix"] for name in failing)


def test_an_unknown_module_version_is_not_judged(tmp_path):
    """Where the kernel module carries no version file (as the simulated node's), loaded is what is judged."""
    dummy, checks = judged(node(tmp_path, kmod=None))
    assert checks["efa_module"]["ok"] is True


def installer(tmp_path, root):
    """An installer tarball whose efa_installer.sh lays out the node under ``root``; (path, sha256)."""
    script = ("#!/bin/bash\nset -e\n[ \"$1\" = -y ] || exit 3\nR=%s\nmkdir -p $R/opt/amazon/efa/bin "
              "$R/opt/amazon/ofi-nccl/lib $R/sys/module/efa $R/proc\necho 'efa 143360 0 - Live 0x0' > $R/proc/modules\n"
              "printf '%%s' '%s' > $R/opt/amazon/efa_installed_packages\n"
              "printf '#!/bin/sh\\ncase \"$1\" in --version) echo libfabric: 2.6.0amzn1.0;; -p) exit 0;; esac\\n' "
              "> $R/opt/amazon/efa/bin/fi_info\nchmod 755 $R/opt/amazon/efa/bin/fi_info\n"
              "echo x > $R/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so\necho 3.3.0 > $R/sys/module/efa/version\n"
              % (root, UBUNTU_1_50))
    path = tmp_path / "aws-efa-installer-1.50.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = script.encode()
        info = tarfile.TarInfo("aws-efa-installer/efa_installer.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_present_installs_from_the_checked_tarball_then_changes_nothing(tmp_path):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "modules").write_text("ib_core 552960 0 - Live 0x0\n")   # no efa yet
    path, digest = installer(tmp_path, root)
    args = {"root": str(root), "state": "present", "installer": str(path), "checksum": "sha256:" + digest,
            "floors": FLOORS, "staging_dir": str(tmp_path)}
    check = run_module(efa_stack, args, check_mode=True)
    assert not check.failed and check["changed"] is True and check["commands"] == []
    assert not (root / "opt").exists()
    first = run_module(efa_stack, args)
    assert not first.failed, first
    assert first["changed"] is True and first["commands"][-1][-1] == "-y"
    assert "installer: found None, expected >= 1.50.0" in first["reasons"]
    again = run_module(efa_stack, args)
    assert not again.failed and again["changed"] is False and again["commands"] == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("gpufleet-efa-")] == []   # staging removed


@pytest.mark.parametrize("args, word", [
    ({"checksum": "sha256:" + "0" * 64}, "has sha256"),
    ({"checksum": None}, "checksum is not given for installer"),
    ({"checksum": "md5:abc"}, "checksum 'md5:abc' is not a sha256; expected sha256:<64 hex digits>"),
    ({"installer": None}, "installer is not given; expected the EFA installer tarball"),
    ({"floors": {"nccl": "2.31.2"}}, "floors has 'nccl'; expected only efa_installer, libfabric, aws_ofi_nccl, efa_kmod"),
    ({"floors": {"libfabric": "new"}}, "floors.libfabric 'new' is not a version; expected N.N.N"),
])
def test_bad_input_is_refused_naming_it_and_nothing_runs(tmp_path, args, word):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "modules").write_text("ib_core 552960 0 - Live 0x0\n")   # no efa yet
    path, digest = installer(tmp_path, root)
    full = dict({"root": str(root), "state": "present", "installer": str(path), "checksum": "sha256:" + digest,
                 "floors": FLOORS, "staging_dir": str(tmp_path)}, **args)
    result = run_module(efa_stack, dict((k, v) for k, v in full.items() if v is not None))
    assert result.failed and word in result["msg"], result["msg"]
    assert not (root / "opt").exists()
