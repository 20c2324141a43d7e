# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which NVSHMEM a process of the torch environment loads, the bundled pip copy or the custom build, and the fixes
(``nvshmem_discovery.py`` finds the copies): the LD_PRELOAD value that makes the custom host library win and whether
the environment script sets it, the bundled copies whose version differs from the custom build's, whether a bundled
copy would still win, and the plan for replacing the bundled IBGDA transport. ``read_bundled`` puts them together as
``gpufleet_bundled_nvshmem``, the one reader of ``pytorch_bundled_nvshmem`` and node_stack's ``bundled_nvshmem`` set.

Pure logic, standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_discovery import (
    BACKUP_SUFFIX,
    DiscoveryError,
    custom_transport,
    describe_custom,
    find_bundled,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import VersionError, parse_version

__all__ = [
    "preload_value",
    "env_script_preloads",
    "env_script_problem",
    "mismatches",
    "bundled_would_win",
    "plan_replacements",
    "read_bundled",
]


def preload_value(custom, gdrcopy_lib=None):
    """The LD_PRELOAD value (colon separated) that makes the custom host library win; None without one."""
    if not custom.get("host_lib"):
        return None
    libs = [custom["host_lib"]]
    if gdrcopy_lib:
        libs.append(gdrcopy_lib)
    return ":".join(libs)


_PRELOAD_LINE_RE = re.compile(r"^\s*(?:export\s+)?LD_PRELOAD=(.*)$", re.MULTILINE)


def env_script_problem(path):
    """Why ``path`` cannot be the env_script option (a directory, a device, a FIFO), None when it is a file or
    absent (a missing script preloads nothing)."""
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        return ("env_script %s is a directory; expected the path of an environment script (a file such as "
                "/opt/deepep/unified-env.sh), or leave env_script unset" % path)
    if not os.path.exists(path):
        return ("env_script %s is a dangling symbolic link; expected the path of an environment script (a file such "
                "as /opt/deepep/unified-env.sh), or leave env_script unset" % path)
    if not os.path.isfile(path):
        return ("env_script %s is not a regular file; expected the path of an environment script (a file such as "
                "/opt/deepep/unified-env.sh), or leave env_script unset" % path)
    return None


def env_script_preloads(text, custom):
    """Whether an environment script's LD_PRELOAD names the custom host library (None without a script)."""
    if text is None:
        return None
    host = custom.get("host_lib")
    if not host:
        return False
    lib_dir = os.path.dirname(host)
    prefix = custom.get("prefix") or ""
    for match in _PRELOAD_LINE_RE.finditer(text):
        value = match.group(1)
        candidates = (host, os.path.join(lib_dir, "libnvshmem_host.so"),
                      "${NVSHMEM_HOME}/lib/libnvshmem_host.so", "$NVSHMEM_HOME/lib/libnvshmem_host.so",
                      "${NVSHMEM_DIR}/lib/libnvshmem_host.so", "$NVSHMEM_DIR/lib/libnvshmem_host.so",
                      os.path.join(prefix, "lib", "libnvshmem_host.so"))
        if any(candidate in value for candidate in candidates):
            return True
    return False


def _same_release(left, right):
    try:
        a, b = parse_version(left).release, parse_version(right).release
    except VersionError:
        return left == right
    a, b = list(a), list(b)
    while len(a) < len(b):
        a.append(0)
    while len(b) < len(a):
        b.append(0)
    return a == b


def mismatches(bundled, custom):
    """Bundled copies whose version differs from the custom build's (both known)."""
    out = []
    if not custom.get("version"):
        return out
    for entry in bundled:
        if not entry.get("version") or not entry.get("host_lib"):
            continue
        if not _same_release(entry["version"], custom["version"]):
            out.append({
                "package": entry["package"],
                "lib_dir": entry["lib_dir"],
                "bundled_version": entry["version"],
                "custom_version": custom["version"],
                "message": ("%s %s in %s ships host library %s while the custom NVSHMEM at %s is %s: "
                            "a DeepEP built against the custom device library fails with 'NVSHMEM device "
                            "library version does not match' unless the custom host library is preloaded"
                            % (entry["package"], entry["version"], entry["lib_dir"], entry["version"],
                               custom["prefix"], custom["version"])),
            })
    return out


def bundled_would_win(bundled, custom, preloaded=False):
    """True when a bundled host library exists and neither a preload of the custom host library nor a
    replaced IBGDA transport (every bundled one equal to the custom build's) makes the custom build win."""
    hosts = [entry for entry in bundled if entry.get("host_lib")]
    if not hosts:
        return False
    if preloaded and custom.get("host_lib"):
        return False
    wanted = custom_transport(custom)
    if wanted:
        bundled_ibgda = [t for entry in bundled for t in entry.get("transports") or [] if t["name"] == "ibgda"]
        if bundled_ibgda and all(t["sha256"] == wanted["sha256"] for t in bundled_ibgda):
            return False
    return True


def plan_replacements(bundled, custom, name="ibgda"):
    """What ``replace_transport`` has to do: one entry per bundled transport ``name``.

    Each: ``{'path', 'source', 'before_sha256', 'after_sha256', 'backup', 'needs_backup', 'changed'}``.
    """
    source = custom_transport(custom, name)
    if source is None:
        raise DiscoveryError("the custom NVSHMEM at %r has no nvshmem_transport_%s.so.3 (looked in %s)"
                             % (custom.get("prefix"), name,
                                ", ".join(os.path.join(custom.get("prefix") or "", d) for d in ("lib", "lib64"))))
    plans = []
    for entry in bundled:
        for transport in entry.get("transports") or []:
            if transport["name"] != name:
                continue
            backup = transport["path"] + BACKUP_SUFFIX
            plans.append({
                "path": transport["path"],
                "package": entry["package"],
                "source": source["realpath"],
                "before_sha256": transport["sha256"],
                "after_sha256": source["sha256"],
                "backup": backup,
                "needs_backup": not os.path.exists(backup),
                "changed": transport["sha256"] != source["sha256"],
            })
    return plans


def read_bundled(python, python_version, site_packages, nvshmem_prefix, env_script=None, gdrcopy_lib=None):
    """``gpufleet_bundled_nvshmem`` as it is now: every bundled NVSHMEM of ``site_packages``, the custom build at
    ``nvshmem_prefix``, the LD_PRELOAD value (with ``gdrcopy_lib``), whether ``env_script`` preloads the custom host
    library, the mismatches and whether the bundled copy would win. The one reader of pytorch_bundled_nvshmem and
    node_stack's ``bundled_nvshmem`` set; read only. Raises :class:`DiscoveryError` naming a bad value."""
    if not nvshmem_prefix or not os.path.isabs(nvshmem_prefix):
        raise DiscoveryError("nvshmem_prefix %r must be an absolute path such as /opt/deepep/nvshmem"
                             % (nvshmem_prefix,))
    try:
        bundled = find_bundled(site_packages)
        custom = describe_custom(nvshmem_prefix)
    except (IOError, OSError) as exc:
        raise DiscoveryError("cannot read NVSHMEM libraries: %s" % (exc,)) from None
    preload = preload_value(custom, gdrcopy_lib)
    facts = {
        "python": python,
        "python_version": python_version,
        "site_packages": list(site_packages),
        "bundled": bundled,
        "custom": custom,
        "mismatch": False,
        "mismatches": [],
        "bundled_would_win": False,
        "preload": preload,
        "preload_libs": preload.split(":") if preload else [],
        "env_script_preloads": None,
        "replaced": [],
    }
    if env_script:
        problem = env_script_problem(env_script)  # a directory, a FIFO, a dangling link
        if problem:
            raise DiscoveryError(problem)
        text = None
        if os.path.isfile(env_script):
            try:
                with open(env_script, "r", encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
            except (IOError, OSError) as exc:
                raise DiscoveryError("env_script %s cannot be read (%s); expected a readable environment script (a "
                                     "file such as /opt/deepep/unified-env.sh), or leave env_script unset"
                                     % (env_script, exc.strerror or exc)) from None
        facts["env_script_preloads"] = env_script_preloads(text if text is not None else "", custom)
    found = mismatches(bundled, custom)
    facts["mismatches"] = found
    facts["mismatch"] = bool(found)
    facts["bundled_would_win"] = bundled_would_win(bundled, custom, preloaded=bool(facts["env_script_preloads"]))
    return facts
