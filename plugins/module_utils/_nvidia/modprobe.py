# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The modprobe configuration of the nvidia module: the ``modprobe.d`` files read the way kmod reads them,
their ``options nvidia`` lines split the way the kernel splits module arguments, each assignment judged
(ignored, rejected or honoured) and the assignments merged into what the kernel would get at the next load.
No Ansible import is needed to use it (it runs on the target, Python 3.8+, stdlib only).

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
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    KNOWN_INT_PARAMS,
    KNOWN_OTHER_PARAMS,
    KNOWN_STRING_PARAMS,
    MODULE_NAME,
    PREFIX,
    REGISTRY_DWORDS,
    REGISTRY_ONLY_KEYS,
    UINT32_MAX,
    parse_c_uint,
    parse_registry_dwords,
)

__all__ = ["DEFAULT_MODPROBE_DIRS", "join_continuations", "split_kernel_args", "parse_modprobe_options", "param_key",
           "classify_option", "typed_option_value", "order_config_files", "scan_modprobe", "merge"]

# kmod's search order (libkmod default_config_paths): earlier directories win on equal file names.
DEFAULT_MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)


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
