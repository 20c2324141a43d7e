# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The running NVIDIA kernel driver's parameters: the names and defaults of nvidia.ko's parameters,
``/proc/driver/nvidia/params`` and ``version`` parsed, the ``RegistryDwords`` string read the way the driver
reads it, and the live facts of ``gpufleet_nvidia``. No Ansible import is needed to use it (it runs on the
target, Python 3.8+, stdlib only).

How the driver reads its parameters (the facts this module relies on):

* The driver splits ``RegistryDwords`` on ``;`` into ``name=value`` pairs after removing spaces; it
  skips a pair with an empty name or value or a second ``=``, and reads the value like
  ``strtoul(value, NULL, 0)`` (decimal, ``0x`` hexadecimal, leading ``0`` octal).
* ``PeerMappingOverride`` is a registry key, not a module parameter: ``NVreg_PeerMappingOverride=1``
  is ignored by the kernel; it only works inside ``NVreg_RegistryDwords``.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_PARAMS_PATH", "DEFAULT_VERSION_PATH", "MODULE_NAME", "PREFIX", "REGISTRY_DWORDS",
           "PEER_MAPPING_OVERRIDE", "STREAM_MEMOPS", "KNOWN_INT_PARAMS", "KNOWN_STRING_PARAMS", "KNOWN_OTHER_PARAMS",
           "KNOWN_DEFAULTS", "REGISTRY_ONLY_KEYS", "UINT32_MAX", "parse_c_uint", "parse_param_value", "parse_params",
           "params_problem", "parse_registry_dwords", "parse_version", "live_dword", "live_facts"]

DEFAULT_PARAMS_PATH = "/proc/driver/nvidia/params"
DEFAULT_VERSION_PATH = "/proc/driver/nvidia/version"

MODULE_NAME = "nvidia"
PREFIX = "NVreg_"
REGISTRY_DWORDS = "RegistryDwords"
PEER_MAPPING_OVERRIDE = "PeerMappingOverride"
STREAM_MEMOPS = "EnableStreamMemOPs"

# Integer parameters of nvidia.ko (open-gpu-kernel-modules nv-reg.h); /proc/driver/nvidia/params
# does not list every one of them, so the live file alone is not the whole list.
KNOWN_INT_PARAMS = frozenset((
    "ResmanDebugLevel", "RmLogonRC", "ModifyDeviceFiles", "DeviceFileUID", "DeviceFileGID",
    "DeviceFileMode", "InitializeSystemMemoryAllocations", "UsePageAttributeTable", "EnableMSI",
    "EnablePCIeGen3", "MemoryPoolSize", "KMallocHeapMaxSize", "VMallocHeapMaxSize", "IgnoreMMIOCheck",
    "EnableStreamMemOPs", "EnableUserNUMAManagement", "NvLinkDisable", "RmProfilingAdminOnly",
    "PreserveVideoMemoryAllocations", "EnableS0ixPowerManagement",
    "S0ixPowerManagementVideoMemoryThreshold", "DynamicPowerManagement",
    "DynamicPowerManagementVideoMemoryThreshold", "RegisterPCIDriver", "EnablePCIERelaxedOrderingMode",
    "EnableResizableBar", "EnableGpuFirmware", "EnableGpuFirmwareLogs", "RmNvlinkBandwidthLinkCount",
    "EnableDbgBreakpoint", "OpenRmEnableUnsupportedGpus", "DmaRemapPeerMmio", "ImexChannelCount",
    "CreateImexChannel0", "GrdmaPciTopoCheckOverride", "EnableNonblockingOpen",
))
KNOWN_STRING_PARAMS = frozenset((
    "RegistryDwords", "RegistryDwordsPerDevice", "RmMsg", "GpuBlacklist", "TemporaryFilePath",
    "ExcludedGpus", "CoherentGPUMemoryMode", "RmNvlinkBandwidth",
))
# nvidia.ko parameters without the NVreg_ prefix.
KNOWN_OTHER_PARAMS = frozenset(("rm_firmware_active", "nv_cap_enable_devfs"))
# Defaults of the integer parameters (nv-reg.h), to tell whether a live value is only the default.
KNOWN_DEFAULTS = {
    "ResmanDebugLevel": 0xFFFFFFFF, "RmLogonRC": 1, "ModifyDeviceFiles": 1, "DeviceFileUID": 0,
    "DeviceFileGID": 0, "DeviceFileMode": 0o666, "InitializeSystemMemoryAllocations": 1,
    "UsePageAttributeTable": 0xFFFFFFFF, "EnablePCIeGen3": 0, "EnableMSI": 1, "EnableStreamMemOPs": 0,
    "RmProfilingAdminOnly": 1, "PreserveVideoMemoryAllocations": 0, "EnableS0ixPowerManagement": 0,
    "S0ixPowerManagementVideoMemoryThreshold": 256, "DynamicPowerManagement": 3,
    "DynamicPowerManagementVideoMemoryThreshold": 200, "OpenRmEnableUnsupportedGpus": 1,
    "EnableUserNUMAManagement": 1, "MemoryPoolSize": 0, "KMallocHeapMaxSize": 0, "VMallocHeapMaxSize": 0,
    "IgnoreMMIOCheck": 0, "NvLinkDisable": 0, "EnablePCIERelaxedOrderingMode": 0, "RegisterPCIDriver": 1,
    "EnableResizableBar": 0, "EnableDbgBreakpoint": 0, "EnableNonblockingOpen": 1, "DmaRemapPeerMmio": 1,
    "RmNvlinkBandwidthLinkCount": 0, "ImexChannelCount": 2048, "CreateImexChannel0": 0,
    "GrdmaPciTopoCheckOverride": 0,
}
# Registry keys that people write as module parameters by mistake (runbook: NVreg_PeerMappingOverride=1).
REGISTRY_ONLY_KEYS = frozenset((PEER_MAPPING_OVERRIDE,))
UINT32_MAX = 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

def parse_c_uint(text):
    """Read ``text`` as C's ``strtoul(text, NULL, 0)`` would, whole string only.

    Returns the integer, or None when ``text`` is not a complete unsigned number in C notation
    (decimal, ``0x`` hexadecimal, ``0``-prefixed octal; an optional leading ``+``).
    """
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s.startswith("+"):
        s = s[1:]
    if not s:
        return None
    try:
        if s[:2] in ("0x", "0X"):
            return int(s[2:], 16) if s[2:] and re.fullmatch(r"[0-9a-fA-F]+", s[2:]) else None
        if not s.isdigit() or not s.isascii():
            return None
        if len(s) > 1 and s[0] == "0":
            return int(s, 8)
        return int(s, 10)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# /proc/driver/nvidia
# ---------------------------------------------------------------------------------------------

def parse_param_value(raw):
    """Type one value of the params file: ``"..."`` -> str, a number -> int, else the raw str."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        return raw[1:-1]
    if re.fullmatch(r"[0-9]+", raw):
        return int(raw, 10)
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", raw):
        return int(raw, 16)
    return raw


_PARAM_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def parse_params(text):
    """Parse ``/proc/driver/nvidia/params`` (``Name: value`` lines) into a dict, every line typed.

    Lines whose name is not an identifier are left out (see :func:`params_problem`)."""
    params = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        name, value = line.split(":", 1)
        name = name.strip()
        if not _PARAM_NAME_RE.fullmatch(name):
            continue
        params[name] = parse_param_value(value)
    return params


def params_problem(text):
    """Why ``text`` is not the params file of a loaded driver, or None when it is one.

    The driver writes printable ``Name: value`` lines only; random bytes, NULs or a file of other lines do not
    show that the driver is loaded."""
    if text is None:
        return "the file is missing"
    if not text.strip():
        return "the file is empty"
    if "\ufffd" in text or any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return "the file holds bytes that are not printable text"
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, dummy = line.partition(":")
        if not sep or not _PARAM_NAME_RE.fullmatch(name.strip()):
            return "line %d %r is not a 'Name: value' line" % (number, line[:80])
    return None


def parse_registry_dwords(value):
    """Parse a RegistryDwords string the way the driver does.

    Accepts ``PeerMappingOverride=1;``, ``PeerMappingOverride=0x1``, several ``;``-separated pairs,
    an empty string or None. Returns ``(dwords, ignored)``: the dict of name -> int, and the list of
    pieces the driver skips (each a dict with ``entry`` and ``reason``).
    """
    dwords = {}
    ignored = []
    if value is None:
        return dwords, ignored
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    cleaned = re.sub(r"\s+", "", str(value))
    for token in cleaned.split(";"):
        if token == "":
            continue
        parts = token.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            ignored.append({"entry": token, "reason": "expected NAME=VALUE"})
            continue
        number = parse_c_uint(parts[1])
        if number is None or number > UINT32_MAX:
            ignored.append({"entry": token, "reason": "value is not a 32-bit unsigned integer"})
            continue
        dwords[parts[0]] = number
    return dwords, ignored


def parse_version(text):
    """Parse ``/proc/driver/nvidia/version``: driver version and whether it is the open kernel module."""
    result = {"version": None, "open_kernel_module": None, "line": None}
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            result["line"] = line[len("NVRM version:"):].strip()
            break
    if result["line"] is None:
        return result
    line = result["line"]
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)\b", line)
    if match is None:
        match = re.search(r"\b(\d+\.\d+(?:\.\d+)*)\b", line)
    if match is not None:
        result["version"] = match.group(1)
    if "Open Kernel Module" in line:
        result["open_kernel_module"] = True
    elif "Kernel Module" in line:
        result["open_kernel_module"] = False
    return result


def live_dword(params, dwords, name):
    """The live value of registry key ``name``: from RegistryDwords, else a bare ``name: N`` params line."""
    if name in dwords:
        return dwords[name]
    bare = params.get(name)
    if isinstance(bare, int) and not isinstance(bare, bool):
        return bare
    return None


def live_facts(params_text, version_text):
    """Facts about the running driver. ``params_text`` None means the driver is not loaded; text that is not a
    params file (:func:`params_problem`) counts as not loaded too, with the reason in ``params_unreadable``."""
    problem = params_problem(params_text) if params_text is not None else None
    if problem is not None:
        params_text = None
    params = parse_params(params_text) if params_text is not None else {}
    version = parse_version(version_text) if version_text is not None else parse_version("")
    raw_dwords = params.get(REGISTRY_DWORDS)
    dwords, ignored = parse_registry_dwords(raw_dwords if isinstance(raw_dwords, str) else None)
    pmo = live_dword(params, dwords, PEER_MAPPING_OVERRIDE)
    memops = params.get(STREAM_MEMOPS)
    return {
        "driver_loaded": params_text is not None,
        "params_unreadable": problem,
        "driver_version": version["version"],
        "driver_open_kernel_module": version["open_kernel_module"],
        "params": params,
        "registry_dwords": dwords,
        "registry_dwords_ignored": ignored,
        "peer_mapping_override_active": bool(pmo),
        "stream_memops_enabled": isinstance(memops, int) and memops != 0,
    }
