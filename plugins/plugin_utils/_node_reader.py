# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A read-only check of the collection run on a node as one ``python -c``, without a module.

A module run pays, on the node, for Python compiling its payload: ansible-core's ``basic`` and what it imports
(about 10,900 lines, from a zip, so never cached as bytecode) before the module reads anything. For a check that
needs none of it and runs on every node of every converge (site.yml's plan reading the converged stamp), that is
most of the node's work: on a simulated node, ``site_state``'s check of a 37-path stamp costs 0.15-0.16 CPU-s as a
module and 0.03 s this way.

The program is the module_utils the check is written in (standard library only, Python 3.8+, as every module_utils
file that runs on a node), compressed into the command line with a short loader; the node prints one JSON line.
Anything unexpected (no such interpreter, an old Python, a traceback, output that is not the program's) returns
None, and the caller runs the module instead: the result is the same, only slower.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import shlex
import zlib

__all__ = ["program", "command", "parse", "interpreter"]

PREFIX = "ansible_collections.gpufleet.deepep.plugins.module_utils."

# The loader: each module_utils file becomes a module of its real name (parent packages empty), in order, so their
# own imports of each other resolve; then one function is called, bounded by an alarm (a path that does not answer
# raises TimeoutError inside the read). Expected errors (the check's own exception types, OSError, the timeout) are
# reported as {"error": ...}; anything else is a traceback and a non-zero exit.
LOADER = r"""
import base64, json, signal, sys, types, zlib
data = json.loads(zlib.decompress(base64.b64decode(sys.argv[1])).decode("utf-8"))
def expired(signum, frame):
    raise TimeoutError("%s(%s) did not finish in %d s" % (data["function"], ", ".join(
        "%s=%r" % item for item in sorted(data["kwargs"].items())), data["timeout"]))
for name, source in data["modules"]:
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            mod = types.ModuleType(pkg)
            mod.__path__ = []
            sys.modules[pkg] = mod
    mod = types.ModuleType(name)
    mod.__file__ = "<gpufleet %s>" % name
    sys.modules[name] = mod
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)
target = sys.modules[data["module"]]
expected = tuple(getattr(target, n) for n in data["errors"]) + (OSError,)
signal.signal(signal.SIGALRM, expired)
signal.alarm(data["timeout"])
try:
    out = {"result": getattr(target, data["function"])(**data["kwargs"])}
except expected as exc:
    out = {"error": "%s" % (getattr(exc, "strerror", None) or exc)}
sys.stdout.write("\n" + data["marker"] + json.dumps(out) + "\n")
"""

MARKER = "gpufleet-node-reader:"


@functools.lru_cache(maxsize=None)
def _source(name):
    """The text of the collection's module_utils file ``name`` (a dotted name under module_utils)."""
    spec = importlib.util.find_spec(PREFIX + name)
    if spec is None or not spec.origin:
        raise ImportError("module_utils %s not found" % name)
    with open(spec.origin, encoding="utf-8") as handle:
        return handle.read()


def program(modules, module, function, kwargs, errors=(), timeout=120):
    """The payload (base64 of the compressed JSON) that calls ``module.function(**kwargs)`` after loading
    ``modules`` (module_utils names, dependencies first), within ``timeout`` seconds (a whole number, 1 or more)."""
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise ValueError("timeout %r is not a number of seconds (expected a whole number, 1 or more)" % (timeout,))
    data = {"modules": [[PREFIX + name, _source(name)] for name in modules], "module": PREFIX + module,
            "function": function, "kwargs": kwargs, "errors": list(errors), "marker": MARKER, "timeout": timeout}
    return base64.b64encode(zlib.compress(json.dumps(data).encode("utf-8"), 9)).decode("ascii")


def command(python, payload):
    """The shell command: the interpreter as configured (a path, or a command line such as ``/usr/bin/env python3``,
    as ansible-core uses it), the loader and the payload."""
    return "%s -c %s %s" % (python, shlex.quote(LOADER), payload)


def parse(rc, stdout):
    """``{"result": ...}`` or ``{"error": message}`` from a run of the program, or None when the run is not one
    (non-zero exit, no marker line, a line that is not a JSON object)."""
    if rc != 0:
        return None
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            if isinstance(data, dict) and (isinstance(data.get("result"), dict) or isinstance(data.get("error"), str)):
                return data
            return None
    return None


def interpreter(value, discovered):
    """The interpreter a module would run under when it is known without asking the node: the host's
    ``ansible_python_interpreter`` (unless it asks for discovery, ``auto*``), else the interpreter discovered
    earlier in the run; None otherwise (the caller runs the module, which discovers it)."""
    for candidate in (value, discovered):
        if isinstance(candidate, str) and candidate.strip() and not candidate.strip().startswith("auto"):
            return candidate.strip()
    return None
