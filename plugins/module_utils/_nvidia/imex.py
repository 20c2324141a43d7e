# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA IMEX on a node (node_stack's ``gpufleet_imex``): what multi-node NVLink (MNNVL) needs besides the GPUs'
fabric registration on a GB200/GB300 NVL72 tray.

* The package and service ``nvidia-imex`` (``/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg``) and its control
  tool ``nvidia-imex-ctl``; ``nvidia-imex-ctl -q`` prints ``READY`` (else INITIALIZING, WAITING_FOR_PEERS,
  WAITING_FOR_RECOVERY, UNAVAILABLE).
* ``/etc/nvidia-imex/config.cfg``: ``KEY=VALUE`` lines, ``#`` comments (``SERVER_PORT``, ``IMEX_CMD_PORT``,
  ``IMEX_CMD_ENABLED``, ``IMEX_NODE_CONFIG_FILE``); the nodes config it names (default
  ``/etc/nvidia-imex/nodes_config.cfg``) lists every tray of the domain, one IP address per line.
* The channel: ``/dev/nvidia-caps-imex-channels/channel0``, a character device of the ``nvidia-caps-imex-channels``
  major (``/proc/devices``), made by the driver at load when ``options nvidia NVreg_CreateImexChannel0=1`` is set
  (default 0; a channel made by hand does not survive a reboot).

Read only: the files are read under ``root`` (``/`` on a node, a fixture tree in tests); ``systemctl is-active
nvidia-imex`` and ``nvidia-imex-ctl -q`` go through ``runner(argv, timeout, env) -> (rc, stdout, stderr)``, bounded.
Every missing piece is a fact (``installed: false``, ``present: false``, an ``error`` text), never an exception.
Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import ipaddress
import os
import stat

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_text
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import (
    DEFAULT_MODPROBE_DIRS,
    scan_modprobe,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    PREFIX,
    params_problem,
    parse_params,
)

__all__ = ["CONFIG_PATH", "DEFAULT_NODES_CONFIG", "CHANNEL0_PATH", "CHANNEL_DEVICE_NAME", "CHANNEL0_PARAM",
           "SERVICE", "CTL_STATES", "BIN_DIRS", "parse_config", "parse_nodes_config", "channel_major",
           "service_argv", "ctl_argv", "find_binary", "imex_calls", "gather_imex"]

CONFIG_PATH = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
CHANNEL0_PATH = "/dev/nvidia-caps-imex-channels/channel0"
CHANNEL_DEVICE_NAME = "nvidia-caps-imex-channels"
CHANNEL0_PARAM = "CreateImexChannel0"
SERVICE = "nvidia-imex"
CTL = "nvidia-imex-ctl"
CTL_STATES = ("READY", "INITIALIZING", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY", "UNAVAILABLE")
# Where the packages put the binaries (nvidia-imex, nvidia-imex-<branch>: /usr/bin), searched under ``root``.
BIN_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin")


def _under(root, path):
    if not root or root == "/":
        return path
    return os.path.join(root, path.lstrip("/"))


def _unquote(value):
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_config(text):
    """``(values, unparsed)`` of an IMEX config: ``KEY=VALUE`` lines (``#`` comments and blank lines skipped,
    quotes around a value removed, the last assignment of a key kept) and the lines that are not such a line."""
    values, unparsed = {}, []
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip() or " " in key.strip():
            unparsed.append(stripped)
            continue
        values[key.strip()] = _unquote(value.strip())
    return values, unparsed


def parse_nodes_config(text):
    """``(entries, addresses)`` of an IMEX nodes config: every non-comment line's first word (``entries``) and those
    that are IP addresses (``addresses``), in file order."""
    entries, addresses = [], []
    for line in (text or "").splitlines():
        stripped = line.split("#", 1)[0].strip()
        if not stripped:
            continue
        word = stripped.split()[0]
        entries.append(word)
        try:
            ipaddress.ip_address(word)
        except ValueError:
            continue
        addresses.append(word)
    return entries, addresses


def channel_major(text):
    """The major number of ``nvidia-caps-imex-channels`` among the character devices of ``/proc/devices``, or None."""
    section = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.endswith("devices:"):
            section = stripped
            continue
        fields = stripped.split()
        if section == "Character devices:" and len(fields) == 2 and fields[1] == CHANNEL_DEVICE_NAME \
                and fields[0].isdigit():
            return int(fields[0])
    return None


def _int(value):
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _flag(value):
    number = _int(value)
    return None if number is None else number != 0


def service_argv():
    return ["systemctl", "is-active", SERVICE]


def ctl_argv(ctl):
    return [ctl, "-q"]


def find_binary(root, name):
    """The node path of executable ``name`` in :data:`BIN_DIRS` under ``root``, or None."""
    for directory in BIN_DIRS:
        path = os.path.join(directory, name)
        full = _under(root, path)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return path
    return None


def imex_calls(root, timeout):
    """The commands :func:`gather_imex` runs (to start them early): the service state, and the control tool's
    state where it is installed."""
    calls = [(service_argv(), timeout)]
    ctl = find_binary(root, CTL)
    if ctl:
        calls.append((ctl_argv(ctl), timeout))
    return calls


def _is_char_device(path):
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except (IOError, OSError):
        return False


def _tail(text, lines=3):
    text = (text or "").strip()
    return "\n".join(text.splitlines()[-lines:]) if text else ""


def _service(runner, timeout):
    rc, out, err = runner(service_argv(), timeout=timeout, env=None)
    word = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else None
    if rc == 127:
        return {"state": None, "active": False, "error": "systemctl not found: %s" % (_tail(err) or "rc=127")}
    if rc == 124:
        return {"state": None, "active": False, "error": "systemctl is-active %s timed out after %ss" % (SERVICE, timeout)}
    return {"state": word, "active": rc == 0 and word == "active",
            "error": None if word else "systemctl is-active %s printed nothing (rc=%s): %s" % (SERVICE, rc, _tail(err))}


def _ctl(ctl, runner, timeout):
    if not ctl:
        return {"path": None, "state": None, "ready": None, "error": "%s is not installed" % CTL}
    rc, out, err = runner(ctl_argv(ctl), timeout=timeout, env=None)
    words = [w for w in (out or "").split() if w in CTL_STATES]
    if rc == 124:
        return {"path": ctl, "state": None, "ready": None, "error": "%s -q timed out after %ss" % (ctl, timeout)}
    if not words:
        return {"path": ctl, "state": None, "ready": None,
                "error": "%s -q (rc=%s) printed no IMEX state (expected one of %s): %s"
                         % (ctl, rc, ", ".join(CTL_STATES), _tail(err or out) or "no output")}
    return {"path": ctl, "state": words[0], "ready": words[0] == "READY", "error": None}


def _channel0_option(params_path, modprobe_dirs):
    params_text = read_text(params_path) if params_path and os.path.isfile(params_path) else None
    live = None
    if params_text is not None and params_problem(params_text) is None:
        value = parse_params(params_text).get(CHANNEL0_PARAM)
        live = value if isinstance(value, int) and not isinstance(value, bool) else None
    persistent = scan_modprobe([os.path.normpath(d) for d in modprobe_dirs])
    configured = persistent["driver_options"].get(CHANNEL0_PARAM)
    configured = configured if isinstance(configured, int) and not isinstance(configured, bool) else None
    return {"configured": configured, "source": persistent["sources"].get(PREFIX + CHANNEL0_PARAM), "live": live,
            "set": configured == 1}


def gather_imex(root, runner, timeout=60, params_path=DEFAULT_PARAMS_PATH, modprobe_dirs=DEFAULT_MODPROBE_DIRS):
    """``gpufleet_imex``: IMEX on the node (read only; see the module docstring).

    Keys: ``installed`` (the ``nvidia-imex`` binary is there; ``binary`` its path), ``config`` (``path``,
    ``present``, ``values`` - every KEY=VALUE, ``unparsed``, ``server_port``, ``cmd_port``, ``cmd_enabled``,
    ``node_config_file``), ``nodes_config`` (``path``, ``present``, ``entries``, ``addresses``), ``channel``
    (``path``, ``present``, ``char_device``, ``registered`` - the major is in /proc/devices, ``major``),
    ``channel0_option`` (``configured`` - NVreg_CreateImexChannel0 in the modprobe files, ``source``, ``live`` - the
    loaded driver's, ``set`` - configured to 1), ``service`` (``state`` as systemctl prints it, ``active``, ``error``)
    and ``ctl`` (``path``, ``state`` as ``nvidia-imex-ctl -q`` prints it, ``ready``, ``error``)."""
    binary = find_binary(root, SERVICE)
    config_text = read_text(_under(root, CONFIG_PATH))
    values, unparsed = parse_config(config_text)
    node_config_file = values.get("IMEX_NODE_CONFIG_FILE") or DEFAULT_NODES_CONFIG
    nodes_text = read_text(_under(root, node_config_file)) if os.path.isabs(node_config_file) else None
    entries, addresses = parse_nodes_config(nodes_text)
    channel_path = _under(root, CHANNEL0_PATH)
    major = channel_major(read_text(_under(root, "/proc/devices")))
    return {
        "installed": binary is not None,
        "binary": binary,
        "config": {"path": CONFIG_PATH, "present": config_text is not None, "values": values, "unparsed": unparsed,
                   "server_port": _int(values.get("SERVER_PORT")), "cmd_port": _int(values.get("IMEX_CMD_PORT")),
                   "cmd_enabled": _flag(values.get("IMEX_CMD_ENABLED")), "node_config_file": node_config_file},
        "nodes_config": {"path": node_config_file, "present": nodes_text is not None, "entries": entries,
                         "addresses": addresses},
        "channel": {"path": CHANNEL0_PATH, "present": os.path.lexists(channel_path),
                    "char_device": _is_char_device(channel_path), "registered": major is not None, "major": major},
        "channel0_option": _channel0_option(params_path, modprobe_dirs),
        "service": _service(runner, timeout),
        "ctl": _ctl(find_binary(root, CTL), runner, timeout),
    }
