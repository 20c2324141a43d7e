# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure logic for the NVIDIA kernel driver's parameters.

Parses ``/proc/driver/nvidia/params`` and ``version``, the ``RegistryDwords`` string, and modprobe
configuration files; models how modprobe and the kernel combine ``options nvidia`` lines; renders the
one line the collection manages; and decides whether a reboot is needed. No Ansible import is needed
to use it (it runs on the target, Python 3.8+, stdlib only).

How the pieces behave (the facts this module relies on):

* kmod reads ``*.conf`` files (not hidden ones) from the modprobe directories; a file in an earlier
  directory hides a file of the same name in a later one (``/etc`` over ``/run`` over
  ``/usr/local/lib`` over ``/usr/lib`` over ``/lib``); the files are then parsed in order of file
  name, whatever their directory. A line continues on the next when it ends with a backslash; a line
  starting with ``#`` is a comment.
* All ``options nvidia`` lines are joined, in that order, into one argument string; the kernel splits
  it the way ``next_arg()`` does (double quotes group, ``name="value"`` loses its quotes) and assigns
  parameters from left to right, so the last assignment of a parameter is the one honoured (a string
  parameter such as ``NVreg_RegistryDwords`` is replaced whole, never merged). Unknown parameters are
  ignored with a kernel warning; a bad value for a known integer parameter makes the module fail to
  load (``Invalid parameters``).
* The driver splits ``RegistryDwords`` on ``;`` into ``name=value`` pairs after removing spaces; it
  skips a pair with an empty name or value or a second ``=``, and reads the value like
  ``strtoul(value, NULL, 0)`` (decimal, ``0x`` hexadecimal, leading ``0`` octal).
* ``PeerMappingOverride`` is a registry key, not a module parameter: ``NVreg_PeerMappingOverride=1``
  is ignored by the kernel; it only works inside ``NVreg_RegistryDwords``.
"""

from __future__ import annotations

import os
import re

DEFAULT_PARAMS_PATH = "/proc/driver/nvidia/params"
DEFAULT_VERSION_PATH = "/proc/driver/nvidia/version"
DEFAULT_CONF_PATH = "/etc/modprobe.d/gpufleet-nvidia.conf"
# kmod's search order (libkmod default_config_paths): earlier directories win on equal file names.
DEFAULT_MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)

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

DWORD_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
OPTION_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UINT32_MAX = 0xFFFFFFFF
MANAGED_HEADER = (
    "# Managed by the gpufleet.deepep collection (module gpufleet.deepep.nvidia_params).\n"
    "# Local changes are overwritten. The nvidia kernel module reads these options when it is\n"
    "# loaded: they take effect at the next reboot (or module reload).\n"
)


class NvidiaParamError(ValueError):
    """Bad input: the message names the value and the expected form."""


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


def _int_input(value):
    """An option value given by a user: an int, or a decimal or 0x-hex string. None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        s = value  # no stripping: "1\n" is not a number a user meant
        if re.fullmatch(r"[0-9]+", s):
            return int(s, 10)
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", s):
            return int(s, 16)
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


# ---------------------------------------------------------------------------------------------
# modprobe configuration
# ---------------------------------------------------------------------------------------------

def join_continuations(text):
    """Logical lines of a modprobe file: a backslash before the newline joins the next line.

    Returns a list of ``(first_line_number, text)``.
    """
    out = []
    buf = []
    start = None
    for number, line in enumerate(text.split("\n"), 1):
        if start is None:
            start = number
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        out.append((start, "".join(buf)))
        buf = []
        start = None
    if buf:
        out.append((start, "".join(buf)))
    return out


def split_kernel_args(args):
    """Split a module argument string into ``(name, value)`` pairs like the kernel's ``next_arg()``.

    ``value`` is None for a bare word. Double quotes group spaces; quotes around the value (or
    around the whole ``"name=value"``) are removed.
    """
    pairs = []
    i = 0
    n = len(args)
    while i < n and args[i].isspace():
        i += 1
    while i < n:
        quoted = False
        if args[i] == '"':
            i += 1
            quoted = True
        in_quote = quoted
        j = i
        equals = -1
        while j < n:
            ch = args[j]
            if ch.isspace() and not in_quote:
                break
            if equals < 0 and ch == "=":
                equals = j
            if ch == '"':
                in_quote = not in_quote
            j += 1
        word = args[i:j]
        if equals < 0:
            name, value = word, None
            if quoted and name.endswith('"'):
                name = name[:-1]
        else:
            name = args[i:equals]
            value = args[equals + 1:j]
            if value.startswith('"'):
                value = value[1:]
                if value.endswith('"'):
                    value = value[:-1]
            elif quoted and value.endswith('"'):
                value = value[:-1]
        pairs.append((name, value))
        i = j
        while i < n and args[i].isspace():
            i += 1
    return pairs


def parse_modprobe_options(text, module=MODULE_NAME):
    """Every parameter assignment for ``module`` in one modprobe file, in order.

    Returns a list of dicts ``{line, name, value}`` (``value`` None for a bare word). Module names
    compare with ``-`` and ``_`` as equal, as kmod does.
    """
    want = module.replace("-", "_")
    out = []
    for number, line in join_continuations(text):
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) < 2 or fields[0] != "options":
            continue
        if fields[1].replace("-", "_") != want:
            continue
        rest = fields[2] if len(fields) > 2 else ""
        for name, value in split_kernel_args(rest):
            out.append({"line": number, "name": name, "value": value})
    return out


def param_key(name):
    """The parameter an option name sets: kernel names compare with ``-`` equal to ``_``."""
    return name.replace("-", "_")


def classify_option(name, value, live_params=None):
    """Judge one ``name=value`` given to the nvidia module.

    Returns ``(status, reason, fix)`` with status one of ``ok``, ``registry_key`` (a registry key
    written as a module parameter: the kernel ignores it), ``unknown`` (not a parameter the driver
    is known to have: the kernel ignores it), ``invalid`` (a known parameter with a value the kernel
    rejects: the nvidia module would fail to load).
    """
    live_params = live_params or {}
    key = param_key(name)
    bare = key[len(PREFIX):] if key.startswith(PREFIX) else None
    if bare is None:
        if key in KNOWN_OTHER_PARAMS:
            return ("ok", None, None)
        if key in REGISTRY_ONLY_KEYS or key in KNOWN_INT_PARAMS or key in KNOWN_STRING_PARAMS:
            return ("unknown", "%s has no NVreg_ prefix: the nvidia module has no such parameter and the kernel "
                    "ignores it" % name, _fix_for(key, value))
        return ("unknown", "%s is not a parameter of the nvidia module; the kernel ignores it" % name, None)
    if bare in REGISTRY_ONLY_KEYS:
        return ("registry_key",
                "%s is a registry key, not a parameter of the nvidia module: the kernel ignores %s" % (bare, name),
                _fix_for(bare, value))
    known_int = bare in KNOWN_INT_PARAMS or isinstance(live_params.get(bare), int)
    known_str = bare in KNOWN_STRING_PARAMS or (isinstance(live_params.get(bare), str) and bare not in KNOWN_INT_PARAMS)
    if not known_int and not known_str:
        return ("unknown", "%s is not a known parameter of the nvidia module (not in %s nor in the driver's "
                "documented list); the kernel ignores unknown parameters" % (name, DEFAULT_PARAMS_PATH), None)
    if value is None:
        return ("invalid", "%s has no value: the nvidia module would fail to load (Invalid parameters)" % name, None)
    if known_int:
        number = parse_c_uint(value)
        if number is None or number > UINT32_MAX:
            return ("invalid", "%s=%s is not an unsigned integer: the nvidia module would fail to load "
                    "(Invalid parameters)" % (name, value), None)
    return ("ok", None, None)


def _fix_for(key, value):
    if key in REGISTRY_ONLY_KEYS:
        shown = value if value not in (None, "") else "1"
        return 'options nvidia NVreg_RegistryDwords="%s=%s;" (gpufleet.deepep.nvidia_params registry_dwords: ' \
               '{%s: %s})' % (key, shown, key, shown)
    return "options nvidia %s%s=%s" % (PREFIX, key, value if value is not None else "VALUE")


def typed_option_value(name, value):
    """A config value as facts show it: int for integer parameters, str otherwise, None if absent."""
    if value is None:
        return None
    key = param_key(name)
    bare = key[len(PREFIX):] if key.startswith(PREFIX) else key
    if bare not in KNOWN_STRING_PARAMS:
        number = parse_c_uint(value)
        if number is not None:
            return number
    return value


def order_config_files(dirs, listings):
    """Apply kmod's file selection and order.

    ``dirs`` is the ordered list of directories; ``listings`` maps a directory to the file names in
    it. Only ``*.conf`` names that do not start with ``.`` count. Returns ``(read, shadowed)``:
    ``read`` the paths kmod parses, sorted by file name; ``shadowed`` a list of
    ``(path, shadowed_by)`` for files hidden by a file of the same name in an earlier directory.
    """
    chosen = {}
    shadowed = []
    for directory in dirs:
        for name in sorted(listings.get(directory, ())):
            if name.startswith(".") or not name.endswith(".conf"):
                continue
            path = os.path.join(directory, name)
            if name in chosen:
                if os.path.normpath(chosen[name]) != os.path.normpath(path):
                    shadowed.append((path, chosen[name]))
                continue
            chosen[name] = path
    read = [chosen[name] for name in sorted(chosen)]
    return read, shadowed


def scan_modprobe(dirs, overrides=None, live_params=None):
    """Read the modprobe directories and model what the kernel would get for the nvidia module.

    ``overrides`` maps a path to the content it is about to have (None: it will not exist), so a
    planned write can be judged before it is made. Returns the ``persistent`` facts: ``config_files``
    (every file that sets nvidia options, in the order the kernel sees them, plus shadowed ones),
    ``assignments`` (every assignment in order) and the merged view (see :func:`merge`).
    """
    overrides = dict((os.path.normpath(p), c) for p, c in (overrides or {}).items())
    seen_dirs = []
    for directory in dirs:
        directory = os.path.normpath(directory)
        if directory not in seen_dirs:
            seen_dirs.append(directory)
    listings = {}
    for directory in seen_dirs:
        names = set()
        try:
            entries = os.listdir(directory) if os.path.isdir(directory) else []
        except (IOError, OSError):
            entries = []
        for name in entries:
            if not os.path.isdir(os.path.join(directory, name)):
                names.add(name)
        for path, content in overrides.items():
            if os.path.dirname(path) == directory:
                base = os.path.basename(path)
                if content is None:
                    names.discard(base)
                else:
                    names.add(base)
        listings[directory] = sorted(names)
    read, shadowed = order_config_files(seen_dirs, listings)

    files = []
    assignments = []
    for path in read:
        text = _read_planned(path, overrides)
        if text is None:
            continue
        entries = parse_modprobe_options(text)
        if not entries:
            continue
        files.append(_file_facts(path, entries, None, live_params))
        for entry in entries:
            assignments.append(dict(entry, path=path))
    for path, by in shadowed:
        text = _read_planned(path, overrides)
        entries = parse_modprobe_options(text) if text is not None else []
        if entries:
            files.append(_file_facts(path, entries, by, live_params))
    merged = merge(assignments, live_params)
    merged["config_files"] = files
    return merged


def _read_planned(path, overrides):
    if path in overrides:
        return overrides[path]
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except (IOError, OSError):
        return None


def _file_facts(path, entries, shadowed_by, live_params):
    options = {}
    dwords = None
    ineffective = []
    for entry in entries:
        status, reason, fix = classify_option(entry["name"], entry["value"], live_params)
        options[entry["name"]] = typed_option_value(entry["name"], entry["value"])
        if param_key(entry["name"]) == PREFIX + REGISTRY_DWORDS and entry["value"] is not None:
            dwords = parse_registry_dwords(entry["value"])[0]
        if status != "ok":
            ineffective.append({"path": path, "line": entry["line"], "option": entry["name"],
                                "value": entry["value"], "status": status, "reason": reason, "fix": fix})
    return {"path": path, "shadowed_by": shadowed_by, "options": options, "registry_dwords": dwords,
            "ineffective": ineffective}


def merge(assignments, live_params=None):
    """The merged view of ordered assignments: the last assignment of each parameter wins.

    Returns ``driver_options`` (bare name -> typed value, RegistryDwords excluded),
    ``registry_dwords`` (parsed from the honoured RegistryDwords, {} when none is set),
    ``registry_dwords_raw`` (that string or None), ``sources`` (``NVreg_Name`` -> path honoured),
    ``ineffective`` (assignments the kernel ignores or rejects) and ``conflicts`` (parameters set to
    different values in different files, with the one honoured).
    """
    by_param = {}
    order = []
    ineffective = []
    for entry in assignments:
        status, reason, fix = classify_option(entry["name"], entry["value"], live_params)
        if status != "ok":
            ineffective.append({"path": entry["path"], "line": entry["line"], "option": entry["name"],
                                "value": entry["value"], "status": status, "reason": reason, "fix": fix})
            continue
        key = param_key(entry["name"])
        if key not in by_param:
            by_param[key] = []
            order.append(key)
        by_param[key].append(entry)
    driver_options = {}
    sources = {}
    raw = None
    for key in order:
        last = by_param[key][-1]
        sources[key] = last["path"]
        if key == PREFIX + REGISTRY_DWORDS:
            raw = last["value"]
        else:
            driver_options[key[len(PREFIX):]] = typed_option_value(key, last["value"])
    dwords, dword_ignored = parse_registry_dwords(raw)
    conflicts = []
    for key in order:
        settings = by_param[key]
        values = set()
        for entry in settings:
            values.add(_comparable(key, entry["value"]))
        if len(values) < 2:
            continue
        last = settings[-1]
        conflicts.append({
            "parameter": key,
            "settings": [{"path": e["path"], "line": e["line"], "value": e["value"]} for e in settings],
            "honoured_path": last["path"],
            "honoured_value": last["value"],
            "defeats_request": False,
        })
    return {
        "driver_options": driver_options,
        "registry_dwords": dwords,
        "registry_dwords_raw": raw,
        "registry_dwords_ignored": dword_ignored,
        "sources": sources,
        "ineffective": ineffective,
        "conflicts": conflicts,
    }


def _comparable(key, value):
    if key == PREFIX + REGISTRY_DWORDS:
        return tuple(sorted(parse_registry_dwords(value)[0].items()))
    return typed_option_value(key, value)


# ---------------------------------------------------------------------------------------------
# The request
# ---------------------------------------------------------------------------------------------

def validate_registry_dwords(dwords):
    """Check ``registry_dwords`` input; return name -> int. Raises NvidiaParamError."""
    if dwords is None:
        return {}
    if not isinstance(dwords, dict):
        raise NvidiaParamError("registry_dwords must be a dict of NAME: integer, got %r" % (dwords,))
    clean = {}
    for name, value in dwords.items():
        if not isinstance(name, str) or not DWORD_NAME_RE.fullmatch(name):
            raise NvidiaParamError(
                "registry_dwords key %r is not a valid registry key name: expected letters, digits and "
                "underscores only ([A-Za-z0-9_]+), e.g. PeerMappingOverride" % (name,))
        number = _int_input(value)
        if number is None or number < 0 or number > UINT32_MAX:
            raise NvidiaParamError(
                "registry_dwords value %r for %s is not a 32-bit unsigned integer: expected an integer "
                "0..4294967295, or a string of decimal digits or 0x-hexadecimal such as '0x1'" % (value, name))
        clean[name] = number
    return clean


def validate_driver_options(options, live_params=None):
    """Check ``driver_options`` input; return bare name -> int or str. Raises NvidiaParamError.

    Names may carry the ``NVreg_`` prefix or not. Also returns warnings for names the driver is not
    known to have, as ``(clean, warnings)``.
    """
    live_params = live_params or {}
    if options is None:
        return {}, []
    if not isinstance(options, dict):
        raise NvidiaParamError("driver_options must be a dict of NAME: value, got %r" % (options,))
    clean = {}
    given = {}
    warnings = []
    for name, value in options.items():
        if not isinstance(name, str) or not OPTION_NAME_RE.fullmatch(name):
            raise NvidiaParamError(
                "driver_options key %r is not a parameter name: expected an identifier such as "
                "EnableStreamMemOPs or NVreg_EnableStreamMemOPs ([A-Za-z_][A-Za-z0-9_]*)" % (name,))
        bare = name[len(PREFIX):] if name.startswith(PREFIX) else name
        if not bare:
            raise NvidiaParamError("driver_options key %r has nothing after the NVreg_ prefix: expected e.g. "
                                   "NVreg_EnableStreamMemOPs" % (name,))
        if bare in given:
            raise NvidiaParamError("driver_options sets %s twice (as %r and %r): give it once"
                                   % (bare, given[bare], name))
        given[bare] = name
        if bare == REGISTRY_DWORDS:
            raise NvidiaParamError(
                "driver_options key %r: RegistryDwords is managed through the registry_dwords option, "
                "e.g. registry_dwords: {PeerMappingOverride: 1}" % (name,))
        if bare in REGISTRY_ONLY_KEYS:
            raise NvidiaParamError(
                "driver_options key %r: %s is a registry key, not a parameter of the nvidia module (the "
                "kernel ignores NVreg_%s); set it with registry_dwords: {%s: %s}"
                % (name, bare, bare, bare, value))
        is_str = (bare in KNOWN_STRING_PARAMS
                  or (isinstance(live_params.get(bare), str) and bare not in KNOWN_INT_PARAMS))
        if is_str:
            if not isinstance(value, str) or '"' in value or "\\" in value or "\n" in value or "\r" in value:
                raise NvidiaParamError(
                    "driver_options value %r for %s is not accepted: %s is a string parameter; expected a "
                    "string without double quotes, backslashes or newlines" % (value, name, bare))
            clean[bare] = value
            continue
        number = _int_input(value)
        if number is None or number < 0 or number > UINT32_MAX:
            raise NvidiaParamError(
                "driver_options value %r for %s is not an unsigned integer: expected an integer "
                "0..4294967295, or a string of decimal digits or 0x-hexadecimal such as '0x1'" % (value, name))
        clean[bare] = number
        if bare not in KNOWN_INT_PARAMS and bare not in live_params:
            warnings.append("driver_options: %s is not a known parameter of the nvidia module; if the driver "
                            "does not have it, the kernel ignores NVreg_%s" % (name, bare))
    return clean, warnings


def render_dwords(dwords):
    """``{PeerMappingOverride: 1}`` -> ``PeerMappingOverride=1;`` (sorted by name)."""
    return "".join("%s=%d;" % (name, dwords[name]) for name in sorted(dwords))


def render_line(driver_options, dwords):
    """The one ``options nvidia`` line for the request, in a stable order: driver options sorted by
    name, then ``NVreg_RegistryDwords`` last. Returns None when nothing is asked."""
    parts = []
    for name in sorted(driver_options):
        value = driver_options[name]
        if isinstance(value, str):
            parts.append('%s%s="%s"' % (PREFIX, name, value))
        else:
            parts.append("%s%s=%d" % (PREFIX, name, value))
    if dwords:
        parts.append('%s%s="%s"' % (PREFIX, REGISTRY_DWORDS, render_dwords(dwords)))
    if not parts:
        return None
    return "options %s %s" % (MODULE_NAME, " ".join(parts))


def render_file(line):
    return MANAGED_HEADER + line + "\n"


def check_request(persistent, conf_path, driver_options, dwords):
    """Mark the conflicts that defeat the request and list what is not honoured.

    ``persistent`` is the merged view after the planned write. Returns a list of dicts
    ``{parameter, asked, honoured_value, honoured_path}`` for every asked parameter whose honoured
    value differs (an asked registry key missing or different counts; extra keys set elsewhere do
    not). Also sets ``defeats_request`` on the matching entries of ``persistent['conflicts']``.
    """
    defeated = []
    sources = persistent["sources"]
    for name in sorted(driver_options):
        key = PREFIX + name
        honoured = persistent["driver_options"].get(name)
        if honoured != driver_options[name]:
            defeated.append({"parameter": key, "asked": driver_options[name], "honoured_value": honoured,
                             "honoured_path": sources.get(key)})
    if dwords:
        key = PREFIX + REGISTRY_DWORDS
        honoured = persistent["registry_dwords"]
        if any(honoured.get(k) != v for k, v in dwords.items()):
            defeated.append({"parameter": key, "asked": render_dwords(dwords),
                             "honoured_value": persistent["registry_dwords_raw"],
                             "honoured_path": sources.get(key)})
    names = set(d["parameter"] for d in defeated)
    for conflict in persistent["conflicts"]:
        if conflict["parameter"] in names and conflict["honoured_path"] != conf_path:
            conflict["defeats_request"] = True
    return defeated


def reboot_check(live, persistent, removed=None):
    """Decide whether the live driver differs from what the persistent config asks.

    ``live`` is :func:`live_facts`; ``persistent`` the merged view after this run; ``removed`` what
    this run took out of the managed file (``driver_options`` and ``registry_dwords`` dicts): if the
    driver still runs with a removed value, a reboot is needed to drop it. Returns
    ``(reboot_required, reasons, unverified)``; ``unverified`` names the driver options the live
    params file does not list (it does not show every parameter), which cannot be checked and do not
    count as pending, so that a role never reboots in a loop for them.
    """
    reasons = []
    unverified = []
    asks = bool(persistent["driver_options"]) or bool(persistent["registry_dwords"])
    if not live["driver_loaded"]:
        if asks:
            reasons.append("the nvidia driver is not loaded (%s is missing): the persistent options apply when "
                           "it is loaded" % DEFAULT_PARAMS_PATH)
        return bool(reasons), reasons, unverified
    params = live["params"]
    for name in sorted(persistent["driver_options"]):
        want = persistent["driver_options"][name]
        if name not in params:
            unverified.append(name)
            continue
        have = params.get(name)
        if have != want:
            reasons.append("%s: persistent config sets %r, the live driver shows %r" % (name, want, have))
    for name in sorted(persistent["registry_dwords"]):
        want = persistent["registry_dwords"][name]
        have = live_dword(params, live["registry_dwords"], name)
        if have != want:
            reasons.append("RegistryDwords %s: persistent config sets %d, the live driver shows %s"
                           % (name, want, "nothing" if have is None else have))
    removed = removed or {}
    for name in sorted(removed.get("driver_options", {})):
        value = removed["driver_options"][name]
        if name not in persistent["driver_options"] and params.get(name) == value \
                and KNOWN_DEFAULTS.get(name) != value:
            reasons.append("%s=%r was removed from the persistent config but is still live" % (name, value))
    for name in sorted(removed.get("registry_dwords", {})):
        value = removed["registry_dwords"][name]
        if name not in persistent["registry_dwords"] and \
                live_dword(params, live["registry_dwords"], name) == value:
            reasons.append("RegistryDwords %s=%d was removed from the persistent config but is still live"
                           % (name, value))
    return bool(reasons), reasons, unverified


def managed_settings(text):
    """What a managed file (or any file) sets for nvidia, as ``driver_options`` / ``registry_dwords``."""
    if not text:
        return {"driver_options": {}, "registry_dwords": {}}
    entries = parse_modprobe_options(text)
    merged = merge([dict(e, path="") for e in entries])
    return {"driver_options": merged["driver_options"], "registry_dwords": merged["registry_dwords"]}
