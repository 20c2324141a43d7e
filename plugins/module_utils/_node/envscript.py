# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The env script read as data, never run: its ``[export ]NAME=value`` and ``export NAME...`` lines expanded the way
a shell would, every other line refused by name (conditionals, commands, command substitution). The audit's
``env_script`` facts and the environment of the ``import deep_ep`` probe come from here.

Serving reads the same scripts with its own reader (``_serve_units.parse_env_script``), on purpose: a unit's
EnvironmentFile takes literal values only, so that reader refuses every ``$`` expansion but the append form
``"${NAME:+:${NAME}}"`` (raising on the first such line, where this one expands ``$NAME``, ``${NAME:-w}``... and
collects the lines it does not take), ends PATH with a service's system PATH, and skips non-``export`` lines.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import sha256_file, under

__all__ = ["EnvLineError", "read_env_script", "parse_env_script", "read_script_text", "gather_env_script",
           "import_probe_env"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN_LINE_RE = re.compile(r"(export[ \t]+)?(%s)=(.*)" % _NAME)
_EXPORT_NAMES_RE = re.compile(r"export((?:[ \t]+%s)+)" % _NAME)
_DOLLAR_NAME_RE = re.compile(r"\$(%s)" % _NAME)
_BRACE_RE = re.compile(r"\$\{(%s)(\}|:-|:\+|-|\+)" % _NAME)
_BARE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:,=+@%-~")


class EnvLineError(ValueError):
    """A line of the env script that the data reader does not take (it would need a shell)."""


def _dollar(raw, i, lookup):
    """Expand the ``$`` expansion at ``raw[i]``: ``$NAME``, ``${NAME}``, ``${NAME:-w}``, ``${NAME-w}``,
    ``${NAME:+w}``, ``${NAME+w}`` (``w`` may hold expansions of its own). Returns (text, next index)."""
    match = _DOLLAR_NAME_RE.match(raw, i)
    if match:
        return lookup(match.group(1)) or "", match.end()
    match = _BRACE_RE.match(raw, i)
    if not match:
        raise EnvLineError("a $ expansion other than $NAME or ${NAME[:-+]word} (command substitution, arithmetic, "
                           "special parameters)")
    name, op = match.group(1), match.group(2)
    value = lookup(name)
    if op == "}":
        return value or "", match.end()
    j, word = match.end(), []
    while True:
        if j >= len(raw):
            raise EnvLineError("an unterminated ${...}")
        char = raw[j]
        if char == "}":
            break
        if char == "$":
            text, j = _dollar(raw, j, lookup)
            word.append(text)
            continue
        if char in "'\"`\\":
            raise EnvLineError("a quote or backslash inside ${...}")
        word.append(char)
        j += 1
    word = "".join(word)
    if op == ":-":
        result = value if value else word
    elif op == "-":
        result = value if value is not None else word
    elif op == ":+":
        result = word if value else ""
    else:
        result = word if value is not None else ""
    return result, j + 1


def _shell_word(raw, lookup):
    """The value of ``NAME=<raw>``: one word of single-quoted, double-quoted (with $ expansions) and bare parts,
    then nothing but blanks and a comment. Anything a shell would run or interpret otherwise is an EnvLineError."""
    out = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                raise EnvLineError("an unterminated single quote")
            out.append(raw[i + 1:end])
            i = end + 1
        elif char == '"':
            j = i + 1
            while True:
                if j >= len(raw):
                    raise EnvLineError("an unterminated double quote")
                ch = raw[j]
                if ch == '"':
                    break
                if ch == "\\" and j + 1 < len(raw) and raw[j + 1] in '"\\$`':
                    out.append(raw[j + 1])
                    j += 2
                elif ch == "`":
                    raise EnvLineError("a command substitution (`...`)")
                elif ch == "$":
                    text, j = _dollar(raw, j, lookup)
                    out.append(text)
                else:
                    out.append(ch)
                    j += 1
            i = j + 1
        elif char == "$":
            text, i = _dollar(raw, i, lookup)
            out.append(text)
        elif char in " \t":
            rest = raw[i:].strip()
            if rest and not rest.startswith("#"):
                raise EnvLineError("more after the value (%r)" % rest[:40])
            break
        elif char in _BARE_CHARS:
            out.append(char)
            i += 1
        else:
            raise EnvLineError("the character %r, which only a shell would interpret" % char)
    return "".join(out)


def read_env_script(text, base=None):
    """Read an env script as data, never running it: its ``[export ]NAME=value`` and ``export NAME...`` lines.

    ``base`` is the environment it starts from (None: empty, as for the facts; the import probe passes its own
    environment, so ``${PATH:+:${PATH}}`` appends the inherited value). Returns ``(exports, raw, env, errors)``:
    the exported variables in file order, their unexpanded right-hand sides, the whole resulting environment
    (``base`` plus every exported variable), and one message per line it does not take (conditionals, commands,
    command substitution...), naming the line.
    """
    base = dict(base or {})
    values, exported = dict(base), set(base)
    exports, raw_values, errors = {}, {}, []

    def lookup(name):
        return values.get(name)

    for number, line in enumerate((text or "").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGN_LINE_RE.fullmatch(stripped)
        try:
            if match:
                value = _shell_word(match.group(3), lookup)
                name = match.group(2)
                values[name] = value
                if match.group(1) or name in exported:
                    exported.add(name)
                    exports[name] = value
                    raw_values[name] = match.group(3).strip()
                continue
            match = _EXPORT_NAMES_RE.fullmatch(stripped)
            if match:
                for name in match.group(1).split():
                    exported.add(name)
                    if name in values:
                        exports[name] = values[name]
                continue
            raise EnvLineError("not an assignment or export of plain values")
        except EnvLineError as exc:
            errors.append("line %d %r: %s" % (number, stripped[:120], exc))
    env = dict((name, values[name]) for name in exported if name in values)
    return exports, raw_values, env, errors


def parse_env_script(text):
    """The exported variables (expanded, from an empty environment) and their raw right-hand sides."""
    exports, raw, dummy, dummy2 = read_env_script(text)
    return exports, raw


def read_script_text(path, limit=4 * 1024 * 1024):
    """``(text or None, problem or None)``: the env script's text, or why it cannot be read as one - an OS error,
    bytes that are not UTF-8 text or a NUL byte (a binary file: each of its "lines" would be reported as a line the
    reader does not take, which reads as a script, not as the wrong file)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit)
    except (IOError, OSError) as exc:
        return None, "cannot read the env script %s: %s" % (path, exc.strerror or exc)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, ("the env script %s is not UTF-8 text (byte 0x%02x at offset %d): not read as a script "
                      "(expected the shell script of export lines the env_script role writes)"
                      % (path, data[exc.start], exc.start))
    if "\0" in text:
        return None, ("the env script %s holds NUL bytes (a binary file, not a script): not read (expected the shell "
                      "script of export lines the env_script role writes)" % path)
    return text, None


def gather_env_script(root, path):
    """The env script's facts; ``error`` says why a present script could not be read as text (its exports are then
    empty and nothing is listed as unparsed)."""
    full = under(root, path)
    result = {"path": path, "present": os.path.isfile(full), "sha256": None, "mode": None, "exports": {},
              "exports_raw": {}, "unparsed": [], "error": None}
    if not result["present"]:
        return result
    result["sha256"] = sha256_file(full)
    try:
        result["mode"] = "%04o" % (os.stat(full).st_mode & 0o7777)
    except OSError:
        pass
    text, problem = read_script_text(full)
    if problem:
        result["error"] = problem
        return result
    exports, raw, dummy, errors = read_env_script(text)
    result["exports"], result["exports_raw"], result["unparsed"] = exports, raw, errors
    return result


def import_probe_env(env_script, env_present):
    """``(env or None, refusal or None)``: the environment the import probe runs with, read from the env script
    as data on top of this process's environment; a refusal when the script cannot be read as text or has lines
    that are not data."""
    if not env_present:
        return None, None
    text, problem = read_script_text(env_script)
    if problem:
        return None, problem + "; the import is not tried"
    dummy, dummy2, env, errors = read_env_script(text, base=os.environ)
    if errors:
        return None, ("the env script %s has lines that are not plain NAME=value exports, so it is not read and the "
                      "import is not tried (the audit never runs the script): %s" % (env_script, "; ".join(errors[:5])))
    return env, None
