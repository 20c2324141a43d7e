# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The facts sets node_stack reads besides ``gpufleet_stack``, each in the shape its own module reports it:
``gpufleet_nvidia`` (nvidia_params asked for nothing), ``gpufleet_gpus`` (gpu_topology) and
``gpufleet_bundled_nvshmem`` (pytorch_bundled_nvshmem's reader). A set that cannot be read raises
``GatherError`` naming the bad value and the expected form.

Read only. Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import json
import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._hca_mapping import topology_facts
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import (
    DEFAULT_MODPROBE_DIRS, scan_modprobe
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import read_text
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.request import reboot_check
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    DEFAULT_VERSION_PATH,
    live_facts,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_discovery import (
    DiscoveryError,
    ordered_site_packages,
    parse_probe,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_winner import read_bundled
from ansible_collections.gpufleet.deepep.plugins.module_utils._pci import (
    NVIDIA_SMI_QUERY_FIELDS,
    gpu_count_problem,
    list_gpus,
    nvidia_smi_query_argv,
    query_nvidia_smi,
    suspect_gpus,
)

__all__ = ["NVIDIA_SMI_QUERY_FIELDS", "GatherError", "gather_nvidia", "gather_gpus", "nvidia_smi_query_argv",
           "gather_bundled_nvshmem"]


class GatherError(Exception):
    """One facts set could not be gathered; the message names the bad value and the expected form."""


def gather_nvidia(params_path=DEFAULT_PARAMS_PATH, version_path=DEFAULT_VERSION_PATH,
                  modprobe_dirs=DEFAULT_MODPROBE_DIRS):
    """``gpufleet_nvidia`` as gpufleet.deepep.nvidia_params reports it when asked for nothing (read only)."""
    for what, path in (("params_path", params_path), ("version_path", version_path)):
        if os.path.isdir(path):
            raise GatherError("%s %s is a directory, expected a file" % (what, path))
    live = live_facts(read_text(params_path) if os.path.exists(params_path) else None,
                      read_text(version_path) if os.path.exists(version_path) else None)
    dirs = [os.path.normpath(d) for d in modprobe_dirs]
    persistent = scan_modprobe(dirs, live_params=live["params"])
    reboot, reasons, _unverified = reboot_check(live, persistent, {"driver_options": {}, "registry_dwords": {}})
    facts = dict(live)
    facts["config_files"] = persistent["config_files"]
    facts["persistent"] = dict((k, v) for k, v in persistent.items() if k != "config_files")
    facts["reboot_required"] = reboot
    facts["reboot_reasons"] = reasons
    return facts


def check_sysfs(sysfs_root):
    if not os.path.isdir(sysfs_root):
        raise GatherError("sysfs_root %r is not a directory (expected the path of /sys or of a tree shaped like "
                          "it)" % (sysfs_root,))


def gather_gpus(sysfs_root, rdma, nvidia_smi, runner, timeout=60):
    """``gpufleet_gpus`` as gpufleet.deepep.gpu_topology reports it, reusing the ``gpufleet_rdma`` facts."""
    check_sysfs(sysfs_root)
    gpus = list_gpus(sysfs_root)
    unreadable = suspect_gpus(sysfs_root)
    # The same run of nvidia-smi as gpu_topology's (_pci.query_nvidia_smi): a timed-out query is this set's error
    # (gpu_topology fails), never "not used"; what else went wrong is in nvidia_smi.error.
    answer = query_nvidia_smi(nvidia_smi if (gpus or unreadable) else None, runner, timeout)
    if answer["fatal"]:
        raise GatherError(answer["fatal"])
    info, rows, nvlink = answer["info"], answer["rows"], answer["nvlink"]
    info["path"] = nvidia_smi
    problem = gpu_count_problem(gpus, rows)
    if problem:
        raise GatherError(problem)
    return topology_facts(gpus, rdma, smi_rows=rows, nvlink=nvlink, smi_info=info,
                          unreadable=[bdf for bdf, dummy in unreadable])


def gather_bundled_nvshmem(python, py, nvshmem_prefix, env_script=None, gdrcopy_lib=None):
    """``gpufleet_bundled_nvshmem`` read by gpufleet.deepep.pytorch_bundled_nvshmem's reader
    (:func:`nvshmem_winner.read_bundled`), from the site-packages layout the Python probe ``py``
    (:func:`gather_python`) read."""
    if not nvshmem_prefix or not os.path.isabs(nvshmem_prefix):
        raise GatherError("nvshmem_prefix %r must be an absolute path such as /opt/deepep/nvshmem"
                          % (nvshmem_prefix,))
    if not py["ok"]:
        raise GatherError("python %r failed to report its site-packages directories: %s" % (python, py["error"]))
    try:
        probe = parse_probe(json.dumps(py.get("site")) if py.get("site") else py.get("site_error") or "")
    except DiscoveryError as exc:
        raise GatherError("python %r: %s" % (python, exc))
    try:
        return read_bundled(python, probe.get("version"), ordered_site_packages(probe), nvshmem_prefix,
                            env_script=env_script, gdrcopy_lib=gdrcopy_lib)
    except DiscoveryError as exc:
        raise GatherError(str(exc)) from None
