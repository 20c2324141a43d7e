# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The request of gpufleet.deepep.nvidia_params: ``driver_options`` and ``registry_dwords`` validated, the one
``options nvidia`` line the collection manages rendered, the request checked against the merged modprobe
configuration, and whether the live driver needs a reboot to match it.

The driver's live parameters are in ``params``, the modprobe configuration in ``modprobe``. No Ansible import is needed
to use it (it runs on the target, Python 3.8+, stdlib only).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import (
    merge,
    parse_modprobe_options,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    KNOWN_DEFAULTS,
    KNOWN_INT_PARAMS,
    KNOWN_STRING_PARAMS,
    MODULE_NAME,
    PREFIX,
    REGISTRY_DWORDS,
    REGISTRY_ONLY_KEYS,
    UINT32_MAX,
    live_dword,
)

__all__ = [
    "DEFAULT_CONF_PATH", "DWORD_NAME_RE", "OPTION_NAME_RE", "MANAGED_HEADER", "NvidiaParamError",
    "validate_registry_dwords", "validate_driver_options", "render_dwords", "render_line", "render_file",
    "check_request", "reboot_check", "managed_settings",
]

DEFAULT_CONF_PATH = "/etc/modprobe.d/gpufleet-nvidia.conf"
DWORD_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
OPTION_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MANAGED_HEADER = (
    "# Managed by the gpufleet.deepep collection (module gpufleet.deepep.nvidia_params).\n"
    "# Local changes are overwritten. The nvidia kernel module reads these options when it is\n"
    "# loaded: they take effect at the next reboot (or module reload).\n"
)


class NvidiaParamError(ValueError):
    """Bad input: the message names the value and the expected form."""


# ---------------------------------------------------------------------------------------------
# Numbers given by a user
# ---------------------------------------------------------------------------------------------

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
