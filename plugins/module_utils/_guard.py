# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last resort of every module's main(): an exception that escapes the module's own checks becomes a failure
that names the module, the error, the file it was about (when the error names one) and the module's inputs, never
a Python traceback. Strict shape checks of JSON records read from disk live here too.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import json
import re
import sys

__all__ = ["guarded", "unexpected_message", "RecordShapeError", "check_record"]

# Exceptions ansible-test's import and validate-modules sanity tests raise from AnsibleModule() on purpose.
TOOLING_STOPS = frozenset(("ImporterAnsibleModuleException", "AnsibleModuleCallError", "AnsibleModuleNotInitialized",
                           "AnsibleModuleImportError"))
_SECRET_RE = re.compile(r"(?i)(pass|secret|token|key_data|private)")


def _inputs():
    """The module's arguments as given (internal ``_ansible_*`` keys and secret-looking ones left out)."""
    try:
        from ansible.module_utils import basic
        raw = getattr(basic, "_ANSIBLE_ARGS", None)
        if not raw:
            return None
        data = json.loads(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)
        args = data.get("ANSIBLE_MODULE_ARGS", data) if isinstance(data, dict) else None
        if not isinstance(args, dict):
            return None
        return dict((k, ("<hidden>" if _SECRET_RE.search(k) else v)) for k, v in sorted(args.items())
                    if not k.startswith("_ansible"))
    except Exception:  # pylint: disable=broad-except
        return None


def unexpected_message(module_name, exc):
    """The failure message for ``exc``, an exception none of ``module_name``'s checks caught."""
    what = "%s: unexpected %s: %s" % (module_name, type(exc).__name__, exc)
    filename = getattr(exc, "filename", None)
    if filename and str(filename) not in what:
        what += " (file %s)" % filename
    inputs = _inputs()
    if inputs:
        text = json.dumps(inputs, sort_keys=True, default=str)
        what += "; inputs: %s" % (text if len(text) <= 600 else text[:600] + "...")
    return what + ". This is a bug or an input the module does not check yet; the node was left as it was found " \
                  "or as the last completed step left it."


def guarded(module_name, body):
    """Run ``body()``; an exception out of it ends the module as a failure (JSON on stdout, exit status 1).

    ``SystemExit`` (exit_json, fail_json) passes through untouched.
    """
    try:
        body()
    except Exception as exc:  # pylint: disable=broad-except
        if type(exc).__name__ in TOOLING_STOPS:
            raise  # ansible-test stops a module this way to read its argument spec: not a failure of the module
        sys.stdout.write(json.dumps({"failed": True, "changed": False, "msg": unexpected_message(module_name, exc)}))
        sys.stdout.write("\n")
        sys.stdout.flush()
        sys.exit(1)  # pylint: disable=ansible-bad-function


class RecordShapeError(ValueError):
    """A JSON record (stamp, build record) parsed but has the wrong shape; the message names the file."""


_TYPES = {"str": str, "int": int, "bool": bool, "dict": dict, "list": list, "float": (int, float)}


def check_record(path, data, shape, what="record"):
    """Check ``data`` (parsed JSON from ``path``) against ``shape``: {key: type name or (type name, required)}.

    Types: str, int (never bool), bool, dict, list, float (int or float), and ``X|null`` for nullable. Raises
    RecordShapeError naming the file, the key, the value found and the expected type.
    """
    if not isinstance(data, dict):
        raise RecordShapeError("%s %s is JSON of type %s, expected an object ({...})"
                               % (what, path, type(data).__name__))
    for key, spec in shape.items():
        kind, required = spec if isinstance(spec, tuple) else (spec, True)
        if key not in data:
            if required:
                raise RecordShapeError("%s %s lacks the key %r (expected %s)" % (what, path, key, kind))
            continue
        value = data[key]
        nullable = kind.endswith("|null")
        base = kind[:-5] if nullable else kind
        if value is None and nullable:
            continue
        ok = isinstance(value, _TYPES[base]) and not (base in ("int", "float") and isinstance(value, bool))
        if not ok:
            raise RecordShapeError("%s %s: %r is %r (%s), expected %s"
                                   % (what, path, key, value, type(value).__name__, kind))
    return data
