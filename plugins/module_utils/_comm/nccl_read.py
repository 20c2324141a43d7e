# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The read half of ``nccl_env``: ``gpufleet_nccl``, the NCCL of a Python environment as it is now.

One function for both readers - gpufleet.deepep.nccl_env (before and after it pins) and node_stack's ``nccl``
gather set. Read only; the interpreter is run once (the site-packages probe), through the caller's runner.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    read_json_dict,
    read_text,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl import (
    BACKUP_MANIFEST,
    BACKUP_NAME,
    NcclError,
    constraint_version,
    describe_nccl_dir,
    find_nccl_package,
    package_for_torch,
    pin_holds,
    pip_conf_constraints,
    read_pin,
    torch_version_in,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_discovery import (
    PROBE_SCRIPT,
    DiscoveryError,
    ordered_site_packages,
    parse_probe,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import NCCL_PIP_PROJECTS

__all__ = ["NcclProbeError", "empty_facts", "resolve_python", "probe_python", "read_nccl", "SYSTEM_CONSTRAINT_FILE"]

SYSTEM_CONSTRAINT_FILE = "/etc/gpufleet/pip-constraints.txt"


class NcclProbeError(NcclError):
    """The interpreter could not be run or did not answer the probe; ``extra`` holds cmd, rc, stdout, stderr."""

    def __init__(self, msg, **extra):
        super().__init__(msg)
        self.extra = extra


def empty_facts():
    """``gpufleet_nccl`` before anything is read."""
    return dict(python=None, python_version=None, prefix=None, virtualenv=False, site_packages=[],
                torch_version=None, package=None, package_version=None, nccl_root=None, version=None,
                header_path=None, header_version=None, library_path=None, library_version=None,
                library_sha256=None, source=None, pinned=False, pin=None, drift=[], constraint_file=None,
                constraint_version=None, pip_config_file=None, pip_config_pins=False, backup_dir=None, backup=None)


def resolve_python(python, which):
    """The interpreter to run for ``python`` (an absolute path, or a name ``which`` finds on PATH)."""
    if not python or not python.strip():
        raise NcclError("python %r is empty; expected an interpreter path such as /opt/torch/.venv/bin/python or a "
                        "name on PATH such as python3" % (python,))
    if os.path.isabs(python):
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise NcclError("python %r is not an executable file; expected the interpreter of the torch environment, "
                            "such as /opt/torch/.venv/bin/python" % (python,))
        return python
    resolved = which(python)
    if not resolved:
        raise NcclError("python %r was not found on PATH; give the interpreter's absolute path" % (python,))
    return resolved


def probe_python(resolved, run):
    """Ask ``resolved`` for its site-packages with ``run(argv) -> (rc, stdout, stderr)``; returns ``(facts,
    install_site)``, the interpreter's part of ``gpufleet_nccl`` and where pip would install."""
    argv = [resolved, "-c", PROBE_SCRIPT]
    rc, out, err = run(argv)
    if rc != 0:
        raise NcclProbeError("python %r failed to report its site-packages directories" % (resolved,), cmd=argv,
                             rc=rc, stdout=out, stderr=err)
    try:
        probe = parse_probe(out)
    except DiscoveryError as exc:
        raise NcclProbeError("python %r: %s" % (resolved, exc), cmd=argv, rc=rc, stdout=out, stderr=err) from None
    prefix = probe.get("prefix") or ""
    site = ordered_site_packages(probe)
    facts = dict(python=resolved, python_version=probe.get("version"), prefix=prefix,
                 virtualenv=bool(prefix) and os.path.isfile(os.path.join(prefix, "pyvenv.cfg")), site_packages=site)
    return facts, probe.get("purelib") or (site or [None])[0]


def read_nccl(facts, install_site, project=None, backup_dir=None, constraint_file=None, pip_config_file=None,
              pin_pip_config=None, constraint_file_from_pin=False):
    """Fill ``facts`` (``gpufleet_nccl``, its interpreter part from :func:`probe_python`) with the environment's
    NCCL: the pip package, its files, the pin record and whether it holds, the backup, the constraints file and
    the pip configuration. ``project``, ``backup_dir``, ``constraint_file``, ``pip_config_file`` and
    ``pin_pip_config`` are nccl_env's options (None: their defaults); with ``constraint_file_from_pin`` (a reader
    that does not know the option), an unset ``constraint_file`` is the one the pin record names. Returns what nccl_env decides from:
    ``project``, ``package``, ``package_dir``, ``pin``, ``backup_dir``, ``constraint_file``, ``pip_config_file``,
    ``pin_pip_config``, ``constraint_before`` and ``pip_conf_before``."""
    site = facts["site_packages"]
    facts["torch_version"] = torch_version_in(site)
    wanted = project
    pkg = find_nccl_package(site, [wanted] if wanted else NCCL_PIP_PROJECTS)
    if wanted is None:
        wanted = pkg["project"] if pkg else package_for_torch(facts["torch_version"])
    facts["package"] = wanted
    facts["package_version"] = pkg["version"] if pkg else None
    package_dir = pkg["dir"] if pkg else (os.path.join(install_site, "nvidia", "nccl") if install_site else None)
    facts["nccl_root"] = pkg["dir"] if pkg else None
    described = describe_nccl_dir(package_dir) if pkg else describe_nccl_dir("/nonexistent")
    for key in ("header_path", "header_version", "library_path", "library_version", "library_sha256"):
        facts[key] = described[key]
    facts["version"] = described["header_version"] or described["library_version"]
    pin = read_pin(package_dir) if package_dir else None
    facts["pin"] = pin
    facts["drift"] = pin_holds(pin, pkg, package_dir) if pin else []
    facts["source"] = (pin or {}).get("source") or ("pip" if pkg else None)
    backup = backup_dir or (os.path.join(package_dir, BACKUP_NAME) if package_dir else None)
    facts["backup_dir"] = backup if pkg or backup_dir else None
    facts["backup"] = read_json_dict(os.path.join(backup, BACKUP_MANIFEST)) if backup else None

    prefix = facts["prefix"]
    if constraint_file is None and constraint_file_from_pin and isinstance((pin or {}).get("constraint_file"), str):
        constraint_file = pin["constraint_file"]
    constraint_file = constraint_file or (
        os.path.join(prefix, "gpufleet-constraints.txt") if facts["virtualenv"] else SYSTEM_CONSTRAINT_FILE)
    pip_config_file = pip_config_file or os.path.join(prefix or "/", "pip.conf")
    pin_pip_config = facts["virtualenv"] if pin_pip_config is None else pin_pip_config
    constraint_before = read_text(constraint_file)
    pip_conf_before = read_text(pip_config_file)
    facts["constraint_file"] = constraint_file
    facts["constraint_version"] = constraint_version(constraint_before, wanted) if wanted else None
    facts["pip_config_file"] = pip_config_file
    facts["pip_config_pins"] = constraint_file in pip_conf_constraints(pip_conf_before)
    facts["pinned"] = _pinned(facts, pin, pin_pip_config)
    return dict(project=wanted, package=pkg, package_dir=package_dir, pin=pin, backup_dir=backup,
                constraint_file=constraint_file, pip_config_file=pip_config_file, pin_pip_config=pin_pip_config,
                constraint_before=constraint_before, pip_conf_before=pip_conf_before)


def _pinned(facts, pin, pin_pip_config):
    if not pin or facts["drift"] or not facts["package"]:
        return False
    if facts["constraint_version"] != pin.get("package_version"):
        return False
    if pin_pip_config and not facts["pip_config_pins"]:
        return False
    return True
