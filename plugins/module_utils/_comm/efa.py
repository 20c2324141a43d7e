# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""AWS EFA's software on a node, as the EFA installer leaves it: read once for the efa_stack module.

What is read (each path under ``root``):

- ``/opt/amazon/efa_installed_packages``, which the installer writes: ``# EFA installer version: 1.22.0``, then
  ``# Packages installed:`` and the packages, rpm style (``libfabric-aws-1.17.0-1.el8.x86_64``, as AWS ParallelCluster
  PR #1882 shows it) or deb style (``libfabric-aws_2.3.0amzn1.0_amd64``).
- libfabric's version from ``/opt/amazon/efa/bin/fi_info --version`` (``libfabric: 2.3.0amzn1.0``) and whether its
  ``efa`` provider is there (``fi_info -p efa``, exit status 0).
- the aws-ofi-nccl plugin NCCL loads (``/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so``; its version from the package
  list: ``libnccl-ofi`` / ``aws-ofi-nccl``).
- the ``efa`` kernel module: loaded or built in (the collection's kernel-module reader, ``_node/kmods``:
  ``/proc/modules``, else ``lsmod``) and its version (``/sys/module/efa/version``; unknown where the file is not
  there, and then not judged).

Floors (the fabric's ``stack_min`` in plugin_utils/_fabrics.py, passed in): what NCCL's GIN over EFA (EFA-GDA) needs.
Standard library only; runs on the managed node.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_text
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.kmods import read_kernel_modules

__all__ = ["EfaError", "INSTALLED_PACKAGES", "FI_INFO", "OFI_NCCL_LIB", "EFA_MODULE", "parse_installed_packages",
           "parse_fi_info_version", "numeric", "read_efa", "checks", "CHECKS"]

INSTALLED_PACKAGES = "/opt/amazon/efa_installed_packages"
FI_INFO = "/opt/amazon/efa/bin/fi_info"
OFI_NCCL_LIB = "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
EFA_MODULE = "/sys/module/efa"
CHECKS = ("installer", "libfabric", "efa_provider", "aws_ofi_nccl", "efa_module")

_INSTALLER_RE = re.compile(r"^#\s*EFA installer version:\s*(\S+)", re.MULTILINE)
_RPM_RE = re.compile(r"^(?P<name>[A-Za-z0-9+._-]+?)-(?P<version>\d[^-]*)-(?P<release>[^-]+)$")
_DEB_RE = re.compile(r"^(?P<name>[A-Za-z0-9+.-]+)_(?P<version>\d[^_]*)(?:_(?P<arch>[A-Za-z0-9]+))?$")
_FI_VERSION_RE = re.compile(r"^libfabric:\s*(\S+)", re.MULTILINE)
_NUMERIC_RE = re.compile(r"^(\d+(?:\.\d+)*)")
_OFI_NCCL_NAMES = ("libnccl-ofi", "aws-ofi-nccl", "libnccl-net-ofi")


class EfaError(ValueError):
    """A value the reader was given is not what it expects; the message names it and the expected form."""


def parse_installed_packages(text):
    """``{installer, packages: {name: version}}`` of the installer's package list (``installer`` None without the
    header line)."""
    found = _INSTALLER_RE.search(text or "")
    packages = {}
    for line in (text or "").splitlines():
        if line.startswith("#"):
            continue
        for token in line.split():
            token = re.sub(r"\.(noarch|x86_64|aarch64|amd64|arm64)$", "", token)
            match = _DEB_RE.match(token) or _RPM_RE.match(token)
            if match:
                packages[match.group("name")] = match.group("version")
    return {"installer": found.group(1) if found else None, "packages": packages}


def parse_fi_info_version(text):
    """libfabric's version from ``fi_info --version`` (``2.3.0amzn1.0``), or None."""
    found = _FI_VERSION_RE.search(text or "")
    return found.group(1) if found else None


def numeric(version):
    """The numeric tuple of a version (``2.3.0amzn1.0`` -> (2, 3, 0), ``3.3.0g`` -> (3, 3, 0)), or None."""
    found = _NUMERIC_RE.match(str(version or ""))
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def read_efa(root, run):
    """The facts (``gpufleet_efa``) of the node under ``root``; ``run(argv, timeout=None, env=None)`` -> (rc, out, err)
    runs its programs."""
    def under(path):
        return os.path.join(root, path.lstrip("/"))

    listing = read_text(under(INSTALLED_PACKAGES))
    parsed = parse_installed_packages(listing) if listing is not None else {"installer": None, "packages": {}}
    fi_info = under(FI_INFO)
    libfabric = provider = None
    if os.access(fi_info, os.X_OK):
        rc, out, dummy = run([fi_info, "--version"])
        libfabric = parse_fi_info_version(out) if rc == 0 else None
        rc, dummy, dummy2 = run([fi_info, "-p", "efa"])
        provider = rc == 0
    ofi = next((parsed["packages"][name] for name in _OFI_NCCL_NAMES if name in parsed["packages"]), None)
    module_dir = under(EFA_MODULE)
    kmod = (read_text(os.path.join(module_dir, "version")) or "").strip() or None
    listed = read_kernel_modules(root, run, names=("efa",))["present"]["efa"]
    return {
        "installed": listing is not None,
        "installer_version": parsed["installer"],
        "packages": parsed["packages"],
        "libfabric_version": libfabric,
        "efa_provider": provider,
        "aws_ofi_nccl": {"library": OFI_NCCL_LIB if os.path.isfile(under(OFI_NCCL_LIB)) else None, "version": ofi},
        "efa_module": {"loaded": bool(listed), "version": kmod},
    }


def _check(name, ok, found, expected, fix):
    return {"check": name, "ok": ok, "found": found, "expected": expected, "fix": None if ok else fix}


def _at_least(found, floor):
    """True / False against ``floor``; None where either side is unknown."""
    have, want = numeric(found), numeric(floor)
    if have is None or want is None:
        return None
    return have >= want


def checks(facts, floors):
    """One entry per CHECKS item: ``{check, ok (true/false, or None where it could not be judged), found, expected,
    fix}``; ``floors``: ``{efa_installer, libfabric, aws_ofi_nccl, efa_kmod}`` (versions, or missing)."""
    if not isinstance(floors, dict):
        raise EfaError("floors %r is not a mapping of efa_installer, libfabric, aws_ofi_nccl, efa_kmod to versions"
                       % (floors,))
    out = []
    want = floors.get("efa_installer")
    ok = _at_least(facts["installer_version"], want) if facts["installed"] else False
    out.append(_check("installer", ok, facts["installer_version"], want and ">= %s" % want,
                      "install the EFA installer %s or newer (efa_installer.sh -y): it brings the efa driver, "
                      "rdma-core, libfabric and aws-ofi-nccl together" % want))
    want = floors.get("libfabric")
    out.append(_check("libfabric", _at_least(facts["libfabric_version"], want) if facts["libfabric_version"] else False,
                      facts["libfabric_version"], want and ">= %s" % want,
                      "libfabric %s or newer (the EFA installer's): NCCL's GIN over EFA (EFA-GDA) needs its GDA "
                      "operations" % want))
    out.append(_check("efa_provider", facts["efa_provider"] is True, facts["efa_provider"], True,
                      "libfabric lists no efa provider (fi_info -p efa): the efa driver or rdma-core's EFA provider "
                      "is missing; rerun the EFA installer"))
    want = floors.get("aws_ofi_nccl")
    ofi = facts["aws_ofi_nccl"]
    ok = bool(ofi["library"]) and (_at_least(ofi["version"], want) if ofi["version"] else None) is not False
    out.append(_check("aws_ofi_nccl", ok if ofi["library"] else False, ofi["version"] or ofi["library"],
                      want and ">= %s" % want,
                      "aws-ofi-nccl %s or newer at %s (the EFA installer's): NCCL reaches EFA through it, and its "
                      "GIN plugin from 1.21.0 on" % (want, OFI_NCCL_LIB)))
    want = floors.get("efa_kmod")
    kmod = facts["efa_module"]
    ok = kmod["loaded"] and (_at_least(kmod["version"], want) if kmod["version"] else None) is not False
    out.append(_check("efa_module", bool(ok), kmod["version"] or kmod["loaded"], want and ">= %s" % want,
                      "load the efa kernel module %s or newer (modprobe efa; the EFA installer builds it)" % want))
    return out
