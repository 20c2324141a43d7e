# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The values of serving that reach a root systemd unit or an environment file, checked and quoted one way for the
plan (serve_plan), the writer (``units.unit_text``/``units.env_file_text``) and the reader (``units.parse_env_file``,
``units.parse_unit_name``, serve_state); and the booleans of serving settings and of the router's replies.

What is done with each kind of value, per systemd.service(5) "Command lines", systemd.unit(5) "Specifiers" and
systemd.exec(5) "EnvironmentFile=":

- every value: control characters (newline, carriage return, NUL, tab, ... U+0000-U+001F, U+007F) are refused:
  systemd reads a unit and an environment file line by line, so such a value would become a line of its own;
- an ``ExecStart=`` argument (``exec_argument``): escaped, never refused for its other characters - ``%`` is
  written ``%%`` (a specifier otherwise), ``$`` is written ``$$`` (``$VAR``/``${VAR}`` are expanded otherwise,
  even inside quotes), and an argument that is not a plain word is double-quoted with ``\\`` and ``"`` escaped (the
  C escapes systemd documents), so systemd reads back the very argument the plan made;
- the executable (``python``, the router's venv): an absolute path (systemd's rule for a command), then escaped as
  any argument;
- an ``EnvironmentFile=`` path: an absolute path; ``%`` is written ``%%`` (systemd expands specifiers there);
- an environment file's name: ``[A-Za-z_][A-Za-z0-9_]*``; its value: double-quoted, ``\\`` and ``"`` escaped
  (``$`` has no meaning in an EnvironmentFile);
- a number of seconds (``TimeoutStartSec=``, ``RestartSec=``; ``check_seconds``): a whole number from a minimum on,
  never a boolean - systemd reads ``TimeoutStartSec=0`` as no timeout at all and ignores a negative span (it logs
  a warning and keeps its default, 90 s for a start), while ``RestartSec=0`` restarts at once;
- the unit-name prefix: refused unless it is letters, digits, ``_``, ``.`` or ``-`` starting with a letter or
  digit, without ``..`` and at most 64 characters (systemd's unit-name characters less ``:``, ``@`` and ``\\``; the
  unit names are also file names under /etc/systemd/system).

``UnitValueError`` (a ``ValueError``) names the field (e.g. ``sglang_prefill.extra_args[3]``), the value (repr) and
the expected form.

Booleans: ``setting_bool`` (a setting from the user's YAML) takes a real boolean or one of Ansible's documented
boolean strings (yes/no, true/false, on/off, y/n, t/f, 1/0, any case) and refuses anything else by name;
``reply_bool`` (a JSON reply) takes a real boolean only.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import re

__all__ = [
    "UnitValueError", "PREFIX_RE", "ENV_NAME_RE", "check_line", "check_prefix", "check_env_name", "check_env_value",
    "check_abs_path", "check_seconds", "exec_argument", "exec_line", "env_file_path", "env_file_value", "setting_bool",
    "reply_bool",
]

PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# An argument written bare: nothing systemd would split, unquote, unescape or expand.
_PLAIN_RE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_TRUE = frozenset(("yes", "on", "1", "true", "y", "t"))
_FALSE = frozenset(("no", "off", "0", "false", "n", "f"))


class UnitValueError(ValueError):
    """A value that must not reach a unit or environment file as it is; the message names the field, the value and
    the expected form."""


def check_line(value, field, expected="one line of text"):
    """``value`` as a string of one line without control characters, else UnitValueError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UnitValueError("%s is %r; expected %s" % (field, value, expected))
    text = str(value)
    bad = _CONTROL_RE.search(text)
    if bad:
        raise UnitValueError("%s is %r: control character %r at %d; expected %s without newlines, NUL or other "
                             "control characters (systemd reads units and environment files line by line)"
                             % (field, text, bad.group(0), bad.start(), expected))
    return text


def check_prefix(value, field="prefix"):
    """The unit-name prefix: letters, digits, '_', '.', '-' (starting with a letter or digit), no '..', <= 64."""
    text = check_line(value, field, "a unit name prefix")
    if not PREFIX_RE.fullmatch(text) or ".." in text:
        raise UnitValueError("%s is %r; expected a unit name prefix of letters, digits, '.', '_' or '-', starting "
                             "with a letter or digit, without '/' or '..', at most 64 characters (e.g. sglang)"
                             % (field, text))
    return text


def check_abs_path(value, field):
    text = check_line(value, field, "an absolute path")
    if not text.startswith("/"):
        raise UnitValueError("%s is %r; expected an absolute path (e.g. /opt/venv/bin/python)" % (field, text))
    return text


def check_seconds(value, field, minimum, expected):
    """``value`` as a whole number of seconds >= ``minimum`` (an int, or a string or float holding one; never a
    boolean), else UnitValueError naming ``field``, the value and ``expected``."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        number = int(value)
    if number is None or number < minimum:
        raise UnitValueError("%s is %r; expected %s" % (field, value, expected))
    return number


def check_env_name(value, field):
    text = check_line(value, field, "an environment variable name")
    if not ENV_NAME_RE.fullmatch(text):
        raise UnitValueError("%s is %r; expected an environment variable name matching [A-Za-z_][A-Za-z0-9_]*"
                             % (field, text))
    return text


def check_env_value(value, field):
    return check_line(value, field, "an environment value of one line")


def exec_argument(arg, field):
    """One ExecStart= argument as systemd reads it back: ``%`` -> ``%%``, ``$`` -> ``$$``; a word that is not plain
    double-quoted with ``\\`` and ``"`` escaped; a lone ``;`` written ``\\;``."""
    text = check_line(arg, field, "an argument of one line")
    if _PLAIN_RE.fullmatch(text):
        return text
    if text == ";":
        return "\\;"
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"%s"' % text


def exec_line(argv, fields=None):
    """The ExecStart= value of ``argv`` (its first element an absolute path); ``fields[i]`` names argument i."""
    if not argv:
        raise UnitValueError("ExecStart has no command; expected an absolute path and its arguments")
    fields = fields or ["argv[%d]" % i for i in range(len(argv))]
    check_abs_path(argv[0], fields[0])
    return " ".join(exec_argument(a, f) for a, f in zip(argv, fields))


def env_file_path(path, field):
    """An EnvironmentFile= path: absolute, one line; ``%`` written ``%%``."""
    return check_abs_path(path, field).replace("%", "%%")


def env_file_value(value, field):
    """A value of an EnvironmentFile line, double-quoted (``\\`` and ``"`` escaped)."""
    text = check_env_value(value, field)
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def setting_bool(value, field):
    """A boolean setting from the user's YAML: a real bool, or one of Ansible's boolean strings; else refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return True
    if isinstance(value, str) and value.strip().lower() in _FALSE:
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise UnitValueError("%s is %r; expected a boolean (true/false, or one of Ansible's yes/no, on/off, 1/0)"
                         % (field, value))


def reply_bool(value, field):
    """A boolean of a JSON reply: true or false only."""
    if isinstance(value, bool):
        return value
    raise UnitValueError("%s is %r; expected a JSON boolean (true or false)" % (field, value))
