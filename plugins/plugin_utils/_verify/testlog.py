# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A test's log as the parsers read it, and the signs in it that a run did not end normally.

``log_text`` takes a string, a list of lines or a command result (``stdout``/``stderr``) and gives one text without
ANSI colour codes, carriage returns made line breaks. ``error_lines``, ``crashed`` and ``fatal`` read what any
backend's test prints when it fails: exception lines, DeepEP's own errors and timeouts, a process that died of a
signal as each launcher reports it. The bandwidth parser (``bandwidth.py``) and the transport truth
(``transport.py``) read logs through it. Pure logic, standard library only.
"""

from __future__ import annotations

import re

__all__ = ["LogInputError", "log_text", "error_lines", "crashed", "fatal"]


class LogInputError(ValueError):
    """The input is not a log this reader can take; the message names it."""


# ANSI CSI/OSC sequences; carriage returns become line breaks so progress-style rewrites stay apart.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

# Signs that a run did not end normally.
_FATAL_RES = (
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"Fatal Python error"),
    re.compile(r"Segmentation fault"),
    re.compile(r"core dumped"),
    re.compile(r"DeepEP error"),
    re.compile(r"\btimeout \((?:dispatch|combine|notify|cached)[^)\n]*\)"),
    re.compile(r"terminated with (?:signal|exit code)"),
    re.compile(r"Process(?:Raised|Exited)Exception"),
    re.compile(r"^\s*(?:Killed|Aborted)\b", re.MULTILINE),
    re.compile(r"CUDA error:"),
)
# Lines worth reporting as the reason (exception lines, fatal signals, DeepEP's own errors).
_ERROR_LINE_RE = re.compile(
    r"^[^\n]*?((?:Fatal Python error:[^\n]*|Segmentation fault[^\n]*|"
    r"(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::[^\n]*)?|"
    r"DeepEP error:[^\n]*|CUDA error:[^\n]*|Killed|Aborted(?: \(core dumped\))?))[ \t]*$",
    re.MULTILINE)
_MAX_ERRORS = 20

# A process that died of a signal, as the launchers report it: torch.multiprocessing.spawn
# ("process 0 terminated with signal SIGSEGV"), Python's faulthandler ("Fatal Python error: Segmentation
# fault"), a shell ("Segmentation fault (core dumped)") and timeout(1)/subprocess ("died with <Signals.SIGABRT: 6>").
_SPAWN_SIGNAL_RE = re.compile(r"\bprocess (\d+) terminated with signal (SIG[A-Z]+)", re.IGNORECASE)
_SIGNAL_WORDS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}
_FAULT_RE = re.compile(r"^(?:Fatal Python error: )?(%s)\b" % "|".join(_SIGNAL_WORDS), re.MULTILINE)
_SIGNALS_RE = re.compile(r"<Signals\.(SIG[A-Z]+): \d+>")


def _text_of(output):
    """Accept a string, a list of lines, or a command result (``stdout``/``stderr``)."""
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        if not any(k in output for k in ("stdout", "stderr", "stdout_lines", "stderr_lines")):
            raise LogInputError(
                "a mapping given as test output must be a command result with stdout/stderr; got keys %s"
                % (sorted(str(k) for k in output)[:10],))
        parts = []
        for key, lines_key in (("stdout", "stdout_lines"), ("stderr", "stderr_lines")):
            value = output.get(key)
            if value is None and output.get(lines_key) is not None:
                value = output.get(lines_key)
            if value is not None:
                parts.append(_text_of(value))
        return "\n".join(parts)
    if isinstance(output, (list, tuple)):
        for index, line in enumerate(output):
            if not isinstance(line, (str, bytes)):
                raise LogInputError("test output lines must be strings; item %d is a %s (%r)"
                                    % (index, type(line).__name__, line))
        return "\n".join(_text_of(line) for line in output)
    raise LogInputError("test output must be a string, a list of lines or a command result with "
                        "stdout/stderr; got a %s (%r)" % (type(output).__name__, output))


def _clean(text):
    text = _ANSI_RE.sub("", text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def log_text(output):
    """The text of ``output`` (a string, bytes, a list of lines or a command result), cleaned; LogInputError."""
    return _clean(_text_of(output))


def error_lines(text):
    """The lines worth reporting as the reason a run failed (at most 20), DeepEP's timeouts among them."""
    found = []
    for match in _ERROR_LINE_RE.finditer(text):
        line = match.group(1).strip()[:200]
        if line and line not in found:
            found.append(line)
        if len(found) >= _MAX_ERRORS:
            break
    # DeepEP's timeouts can come without an exception line (stderr lost); keep them visible.
    for match in re.finditer(r"\btimeout \((?:dispatch|combine|notify|cached)[^)\n]*\)", text):
        if not any(match.group(0) in line for line in found) and len(found) < _MAX_ERRORS:
            found.append(match.group(0))
    return found


def crashed(text):
    """The processes that died of a signal: ``[{process, signal}]`` (``process`` null where not printed)."""
    found = []
    for match in _SPAWN_SIGNAL_RE.finditer(text):
        entry = {"process": int(match.group(1)), "signal": match.group(2).upper()}
        if entry not in found:
            found.append(entry)
    named = set(entry["signal"] for entry in found)
    loose = [_SIGNAL_WORDS[m.group(1)] for m in _FAULT_RE.finditer(text)]
    loose += [m.group(1) for m in _SIGNALS_RE.finditer(text)]
    for signal in loose:
        # A fault line without a process number adds a signal no launcher line named already.
        if signal not in named:
            named.add(signal)
            found.append({"process": None, "signal": signal})
    return found


def fatal(text):
    """Whether the log shows a run that did not end normally."""
    return any(regex.search(text) for regex in _FATAL_RES)
