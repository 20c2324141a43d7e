# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of a serving unit: the unit names sglang_serve gives (and reads back), the systemd service text,
the EnvironmentFile (written and read back), and the env scripts (env_script's, the sglang role's) read into the
literal values of a unit's environment; ``ServeError``, the error of serving's logic.

The env scripts are read here, not with ``_node/envscript``, on purpose: a unit's EnvironmentFile takes literal values
only, so this reader refuses (with ``ServeError``, naming the file and line) every ``$`` expansion but the one
append form ``"${NAME:+:${NAME}}"`` that the roles write, ends PATH with a service's system PATH, and skips lines
that are not ``export``; ``_node/envscript`` (the audit's facts, the import probe) expands ``$NAME``/``${NAME:-w}``...
against the values read so far and collects the lines it does not take.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import (
    UnitValueError,
    check_env_name,
    check_env_value,
    check_line,
    check_prefix,
    check_seconds,
    env_file_path,
    env_file_value,
    exec_line,
)

__all__ = [
    "ServeError", "SYSTEM_PATH", "unit_name", "router_unit_name", "parse_unit_name", "parse_env_script",
    "env_file_text", "parse_env_file", "unit_text", "START_TIMEOUT_FORM", "RESTART_SEC_FORM",
]

# The forms of the units' two numbers of seconds, as the refusals name them.
START_TIMEOUT_FORM = "a whole number of seconds of 1 or more (TimeoutStartSec=; e.g. 3600)"
RESTART_SEC_FORM = "a whole number of seconds of 0 or more (RestartSec=; 0 restarts at once, e.g. 5)"
# What a service's PATH ends with (a unit starts with none of a login shell's variables).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_EXPORT_RE = re.compile(r"export\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


class ServeError(ValueError):
    """A topology or setting the plan cannot honour."""


def unit_name(prefix, role, index, rank):
    return "%s-%s%d-rank%d.service" % (check_prefix(prefix), role, index, rank)


def router_unit_name(prefix):
    return "%s-router.service" % check_prefix(prefix)


_ENV_LINE_RE = re.compile(r'(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<plain>[^"\s]*))')
_UNIT_NAME_RE = re.compile(r"(?P<prefix>[A-Za-z0-9_.-]+?)-"
                           r"(?:(?P<role>prefill|decode)(?P<index>[0-9]+)-rank(?P<rank>[0-9]+)|(?P<router>router))"
                           r"\.service")


def parse_unit_name(name):
    """The inverse of unit_name / router_unit_name: ``{prefix, role, instance, index, rank}``, or None for a name
    sglang_serve does not write."""
    match = _UNIT_NAME_RE.fullmatch(name)
    if not match:
        return None
    try:
        check_prefix(match.group("prefix"))
    except UnitValueError:
        return None
    if match.group("router"):
        return {"prefix": match.group("prefix"), "role": "router", "instance": "router", "index": 0, "rank": 0}
    return {"prefix": match.group("prefix"), "role": match.group("role"),
            "instance": "%s%s" % (match.group("role"), match.group("index")), "index": int(match.group("index")),
            "rank": int(match.group("rank"))}


def _shell_word(text, name, where):
    """The literal value of one shell word as the env scripts write it (single quotes, double quotes, plain
    characters, and ``${NAME:+:${NAME}}``, the caller's own value appended, which is left out): ``(value, appends)``.
    Anything else that would expand (another ``$``, a backquote, a second word) is refused: a unit cannot run a
    shell."""
    marker = "${%s:+:${%s}}" % (name, name)
    out = []
    appends = False
    i = 0
    quote = None
    while i < len(text):
        char = text[i]
        if quote is None and char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ServeError("%s: unterminated single quote in %s" % (where, name))
            out.append(text[i + 1:end])
            i = end + 1
            continue
        if text.startswith(marker, i):
            appends = True
            i += len(marker)
            continue
        if char == '"':
            quote = None if quote else '"'
            i += 1
            continue
        if char == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if char in "$`" or (quote is None and char in " \t;&|<>()"):
            raise ServeError("%s: %s=%s is not a literal value (it would expand %r in a shell); a unit's "
                             "environment file takes literal values only" % (where, name, text, text[i:i + 20]))
        out.append(char)
        i += 1
    if quote:
        raise ServeError("%s: unterminated double quote in %s" % (where, name))
    return "".join(out), appends


def parse_env_script(text, base=None, path="<env script>"):
    """The environment a service gets from sourcing ``text`` (the env script of env_script, SGLang's of the sglang
    role) after ``base``: ``export NAME=value`` lines in order; a value that appends the caller's own
    (``"${NAME:+:${NAME}}"``) is joined to the earlier script's, and PATH to the system's. Other lines are
    skipped. Stricter than ``_envscript.read_env_script`` (which expands ``$NAME`` and collects errors): any other
    expansion raises ServeError, since a unit's environment file takes literal values only."""
    env = dict(base or {})
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith("export"):
            continue
        match = _EXPORT_RE.fullmatch(line)
        if not match:
            raise ServeError("%s:%d: expected export NAME=value, got %r" % (path, number, line[:120]))
        name = match.group("name")
        value, appends = _shell_word(match.group("value"), name, "%s:%d" % (path, number))
        if appends:
            earlier = env.get(name) or (SYSTEM_PATH if name == "PATH" else "")
            value = "%s:%s" % (value, earlier) if earlier and value else (value or earlier)
        env[name] = value
    return env


def env_file_text(env, where="environment"):
    """A systemd EnvironmentFile: NAME="value" lines, values quoted for systemd (backslash, quote escaped); a name
    or value ``unitvalues`` refuses raises UnitValueError naming ``where[NAME]``."""
    lines = ["# Written by gpufleet.deepep (sglang_serve); systemd EnvironmentFile syntax"]
    for name in sorted(env):
        field = "%s[%r]" % (where, name)
        check_env_name(name, "%s name" % field)
        lines.append("%s=%s" % (name, env_file_value(env[name], field)))
    return "\n".join(lines) + "\n"


def parse_env_file(text, path="<env file>"):
    """``NAME="value"`` lines of a systemd EnvironmentFile (comments and blank lines skipped) -> dict."""
    env = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _ENV_LINE_RE.fullmatch(line)
        if not match:
            raise ServeError("%s:%d: expected NAME=\"value\", got %r" % (path, number, line[:120]))
        value = match.group("quoted")
        if value is not None:
            value = re.sub(r"\\(.)", r"\1", value)
        else:
            value = match.group("plain")
        try:
            env[match.group("name")] = check_env_value(value, "%s:%d %s" % (path, number, match.group("name")))
        except UnitValueError as exc:
            raise ServeError(str(exc))
    return env


def unit_text(description, argv, env_files, start_timeout, restart_sec, after=(), memlock=True, fields=None):
    """A systemd service: the argv quoted for ExecStart (``unitvalues.exec_line``: ``%``, ``$``, quotes escaped the
    way systemd reads them back; ``fields`` names the arguments in a refusal), the env files, Restart=on-failure, a
    long start timeout. A value with a control character, a ``start_timeout`` below 1 or a ``restart_sec`` below 0
    (or either not a whole number) raises UnitValueError."""
    start_timeout = check_seconds(start_timeout, "start_timeout", 1, START_TIMEOUT_FORM)
    restart_sec = check_seconds(restart_sec, "restart_sec", 0, RESTART_SEC_FORM)
    description = check_line(description, "Description").replace("%", "%%")
    after = [check_line(a, "After[%d]" % i, "a unit name").replace("%", "%%") for i, a in enumerate(after)]
    lines = ["# Written by gpufleet.deepep (sglang_serve)", "[Unit]", "Description=%s" % description,
             "After=network-online.target %s" % " ".join(after) if after else "After=network-online.target",
             "StartLimitIntervalSec=600", "StartLimitBurst=20", "", "[Service]", "Type=simple"]
    for number, path in enumerate(env_files):
        lines.append("EnvironmentFile=%s" % env_file_path(path, "EnvironmentFile[%d]" % number))
    lines.append("ExecStart=%s" % exec_line(argv, fields))
    if memlock:
        lines.append("LimitMEMLOCK=infinity")
    lines += ["LimitNOFILE=1048576", "TimeoutStartSec=%d" % start_timeout, "TimeoutStopSec=60",
              "Restart=on-failure", "RestartSec=%d" % restart_sec, "KillMode=control-group", "",
              "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"
