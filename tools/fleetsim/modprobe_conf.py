# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a simulated node's kernel makes of ``options <module> ...`` lines at boot.

This is the simulator's own reading of modprobe configuration, written from kmod's and the
kernel's behaviour and deliberately independent of the collection's module_utils, so that the
simulator does not share a bug with the code it tests:

* configuration directories in kmod's priority order; a file name found in several directories
  is read only from the first one (so ``/etc/modprobe.d/x.conf`` masks ``/lib/modprobe.d/x.conf``),
  and a file that is a link to ``/dev/null`` masks the name without adding anything;
* only ``*.conf`` files count; they are read sorted by file name across all directories;
* a backslash at the end of a line continues it; ``#`` starts a comment line;
* ``options MODULE ARGS``: ``-`` and ``_`` are the same in module names; every options line of a
  module is appended in reading order, and the kernel then parses the argument string left to
  right (so a later value of the same parameter wins);
* the kernel's argument splitting: white space separates arguments except inside double quotes,
  and quotes around a value (``p="a b"``) or around a whole argument (``"p=a b"``) are dropped.
"""

from __future__ import annotations

import os
from pathlib import Path

# kmod's search order (the first directory that holds a file name wins).
CONFIG_DIRS = (
    "etc/modprobe.d",
    "run/modprobe.d",
    "usr/local/lib/modprobe.d",
    "lib/modprobe.d",
    "usr/lib/modprobe.d",
)


def normalize_module(name: str) -> str:
    return name.replace("-", "_")


def config_files(root: str | os.PathLike = "/") -> list[Path]:
    """The modprobe configuration files under ``root``, in the order kmod reads them."""
    chosen: dict[str, Path] = {}
    for rel in CONFIG_DIRS:
        directory = Path(root) / rel
        try:
            entries = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for name in entries:
            if not name.endswith(".conf") or name in chosen:
                continue
            chosen[name] = directory / name
    files = []
    for name in sorted(chosen):
        path = chosen[name]
        if path.is_symlink() and os.readlink(path) == "/dev/null":
            continue
        if path.is_file():
            files.append(path)
    return files


def logical_lines(text: str) -> list[str]:
    """Physical lines joined at trailing backslashes; blank and comment lines dropped."""
    out = []
    pending = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        line = pending + raw
        pending = ""
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        out.append(stripped)
    if pending.strip() and not pending.strip().startswith("#"):
        out.append(pending.strip())
    return out


def module_option_string(texts: list[str], module: str) -> str:
    """The argument string modprobe hands to the kernel for ``module`` (options lines joined)."""
    want = normalize_module(module)
    parts = []
    for text in texts:
        for line in logical_lines(text):
            fields = line.split(None, 2)
            if len(fields) < 3 or fields[0] != "options":
                continue
            if normalize_module(fields[1]) != want:
                continue
            parts.append(fields[2].strip())
    return " ".join(p for p in parts if p)


def split_kernel_args(args: str) -> list[tuple[str, str | None]]:
    """Split a module argument string like the kernel's ``next_arg()`` does.

    Returns ``(name, value)`` pairs in order; ``value`` is ``None`` for a bare ``name``.
    """
    result: list[tuple[str, str | None]] = []
    i = 0
    n = len(args)
    while i < n:
        while i < n and args[i].isspace():
            i += 1
        if i >= n:
            break
        quoted = False
        if args[i] == '"':
            quoted = True
            i += 1
        in_quote = quoted
        start = i
        equals = -1
        while i < n:
            ch = args[i]
            if ch.isspace() and not in_quote:
                break
            if equals < 0 and ch == "=":
                equals = i
            if ch == '"':
                in_quote = not in_quote
            i += 1
        token_end = i
        if equals < 0:
            name = args[start:token_end]
            if quoted and name.endswith('"'):
                name = name[:-1]
            result.append((name, None))
        else:
            name = args[start:equals]
            value = args[equals + 1:token_end]
            if value.startswith('"'):
                value = value[1:]
                if value.endswith('"'):
                    value = value[:-1]
            elif quoted and value.endswith('"'):
                value = value[:-1]
            result.append((name, value))
        if i < n:
            i += 1
    return result


def module_params(texts: list[str], module: str) -> dict[str, str | None]:
    """Parameter name -> final value for ``module`` (later values win, first-seen order kept)."""
    params: dict[str, str | None] = {}
    for name, value in split_kernel_args(module_option_string(texts, module)):
        key = name.replace("-", "_")
        params.pop(key, None)
        params[key] = value
    return params


def read_module_params(module: str, root: str | os.PathLike = "/") -> dict[str, str | None]:
    """``module_params`` over the configuration files found under ``root``."""
    texts = []
    for path in config_files(root):
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return module_params(texts, module)


def nvidia_registry_options(params: dict[str, str | None]) -> dict[str, str]:
    """The ``NVreg_*`` parameters of the nvidia module, keyed without the prefix.

    The nvidia driver ignores (with a kernel warning) any other parameter name, and a bare
    ``NVreg_X`` without a value is rejected; both are dropped here the same way.
    """
    out: dict[str, str] = {}
    for name, value in params.items():
        if not name.startswith("NVreg_") or value is None:
            continue
        out[name[len("NVreg_"):]] = value
    return out


def parse_uint(value: str) -> int | None:
    """The kernel's ``kstrtouint(value, 0)``: decimal, ``0x`` hex or leading-``0`` octal."""
    text = value.strip()
    if text.startswith("+"):
        text = text[1:]
    try:
        if text.lower().startswith("0x"):
            number = int(text[2:], 16)
        elif len(text) > 1 and text.startswith("0"):
            number = int(text[1:], 8)
        else:
            number = int(text, 10)
    except ValueError:
        return None
    if number < 0 or number > 0xFFFFFFFF:
        return None
    return number


def modules_to_load(root: str | os.PathLike = "/") -> list[str]:
    """Module names that systemd-modules-load would load at boot (``modules-load.d``, ``/etc/modules``)."""
    dirs = ("etc/modules-load.d", "run/modules-load.d", "usr/local/lib/modules-load.d",
            "lib/modules-load.d", "usr/lib/modules-load.d")
    chosen: dict[str, Path] = {}
    for rel in dirs:
        directory = Path(root) / rel
        try:
            entries = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for name in entries:
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = directory / name
    paths = [chosen[name] for name in sorted(chosen)]
    legacy = Path(root) / "etc/modules"
    if legacy.is_file():
        paths.append(legacy)
    modules: list[str] = []
    for path in paths:
        if path.is_symlink() and os.readlink(path) == "/dev/null":
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            name = normalize_module(line.split()[0])
            if name not in modules:
                modules.append(name)
    return modules
