# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The service manager of a simulated node: a systemd stand-in inside the node's PID 1.

A node has no systemd, yet roles manage long-running services with ``ansible.builtin.systemd_service``. The
node's PID 1 (``nodeinit.py``) runs a :class:`ServiceManager`: it reads unit files the way systemd does
(``/etc/systemd/system`` before ``/run/systemd/system`` before ``/usr/lib/systemd/system`` and ``/lib/...``),
keeps the definition it loaded until ``daemon-reload`` (``NeedDaemonReload=yes`` in between), starts a unit's
``ExecStart=`` as its own process group (the stand-in for its cgroup) with ``Environment=``,
``EnvironmentFile=``, ``WorkingDirectory=``, ``LimitMEMLOCK=``/``LimitNOFILE=`` applied (capped at the host's hard limit
where the sandbox denies raising it; ``show`` reports the unit's value), restarts it after a
failure per ``Restart=`` (``no``, ``on-failure``, ``always``; ``RestartSec=``; at most ``StartLimitBurst=`` starts
in ``StartLimitIntervalSec=``), stops it with SIGTERM then SIGKILL after ``TimeoutStopSec=``, and starts the units
``enable`` linked into ``<target>.wants/`` at every boot. Its output goes to ``/var/log/fleetsim/units/<unit>.log``
(the journal stand-in).

The node's ``systemctl`` (``node/systemctl``) sends its argument vector over ``/run/fleetsim/systemd.sock`` and
prints what comes back: ``show`` (``-p``/``--property``, ``--value``), ``is-active``, ``is-enabled``, ``is-failed``,
``start``, ``stop``, ``restart``, ``try-restart``, ``reload-or-restart``, ``enable``/``disable`` (``--now``),
``daemon-reload``, ``reset-failed``, ``kill`` (``-s``), ``status``, ``cat``, ``list-units``, ``list-unit-files``,
with systemd's exit statuses (0; 1 failure; 3 not active; 4 no such unit) and messages.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

SOCKET = "/run/fleetsim/systemd.sock"
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system",
             "lib/systemd/system")
LOG_DIR = "var/log/fleetsim/units"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Exit by one of these signals is a clean stop for Restart=on-failure (systemd.service(5)).
CLEAN_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)
LIMITS = {"LimitMEMLOCK": resource.RLIMIT_MEMLOCK, "LimitNOFILE": resource.RLIMIT_NOFILE,
          "LimitCORE": resource.RLIMIT_CORE, "LimitSTACK": resource.RLIMIT_STACK}
SUPPORTED_TYPES = ("simple", "exec", "notify", "oneshot")


class UnitError(ValueError):
    """A unit file systemd would not load (LoadState=bad-setting / error)."""


# ----------------------------------------------------------------------------------------- parsing

def parse_unit_text(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (repeated keys accumulate; an empty assignment resets the list), with
    systemd's comment (``#``, ``;``) and backslash-continuation rules."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if pending:
            line = pending + " " + line.lstrip()
            pending = ""
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1].rstrip()
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            current = sections.setdefault(stripped[1:-1], {})
            continue
        if current is None or "=" not in stripped:
            raise UnitError(f"line {raw!r} is not KEY=VALUE inside a [Section]")
        key, value = stripped.split("=", 1)
        key, value = key.strip(), value.strip()
        if value == "":
            current[key] = []
        else:
            current.setdefault(key, []).append(value)
    if pending:
        raise UnitError("the last line ends with a continuation backslash")
    return sections


def parse_environment_assignments(value: str) -> dict[str, str]:
    """``Environment=`` words (shell-like quoting), each ``NAME=VALUE``."""
    out = {}
    for word in shlex.split(value):
        name, sep, val = word.partition("=")
        if sep and name and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name):
            out[name] = val
    return out


def parse_environment_file(text: str) -> tuple[dict[str, str], list[str]]:
    """An ``EnvironmentFile=``: ``NAME=VALUE`` lines; ``#``/``;`` comments; one level of single or double quotes
    removed; lines that are not assignments (``export X=1`` included) are ignored, as systemd does, and
    returned as warnings."""
    env, warnings = {}, []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, val = line.partition("=")
        name = name.strip()
        if not sep or not name or not all(c.isalnum() or c == "_" for c in name) or name[0].isdigit():
            warnings.append(f"line {number}: {raw!r} is not NAME=VALUE; ignoring")
            continue
        val = val.strip()
        if len(val) >= 2 and val[0] == val[-1] == '"':
            val = val[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        elif len(val) >= 2 and val[0] == val[-1] == "'":
            val = val[1:-1]
        env[name] = val
    return env, warnings


def expand_command(line: str, env: dict[str, str]) -> list[str]:
    """An ``ExecStart=`` line as argv: systemd's prefixes (``-``, ``@``, ``+``, ``!``) dropped, quoting as in
    systemd.service(5), ``${NAME}`` replaced inside words and a lone ``$NAME`` split into words, ``$$`` read as
    ``$`` and ``%%`` as ``%`` (the escapes sglang_serve's units write)."""
    while line and line[0] in "-@+!:":
        line = line[1:]
    argv = []
    for word in shlex.split(line):
        if word.startswith("$") and not word.startswith("${") and word[1:].replace("_", "a").isalnum():
            argv += env.get(word[1:], "").split()
            continue
        out, i = "", 0
        while i < len(word):
            if word.startswith(("$$", "%%"), i):
                out += word[i]
                i += 2
            elif word.startswith("${", i) and "}" in word[i:]:
                end = word.index("}", i)
                out += env.get(word[i + 2:end], "")
                i = end + 1
            else:
                out += word[i]
                i += 1
        argv.append(out)
    if not argv or not argv[0].startswith("/"):
        raise UnitError(f"ExecStart={line!r}: the command must be an absolute path")
    return argv


def parse_seconds(value: str, default: float) -> float:
    """``90``, ``90s``, ``5min``, ``1h``, ``500ms``, ``infinity``."""
    value = (value or "").strip()
    if not value:
        return default
    if value == "infinity":
        return float("inf")
    units = (("ms", 0.001), ("min", 60.0), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
    total = 0.0
    for part in value.split():
        for suffix, factor in units:
            if part.endswith(suffix) and part[:-len(suffix)].replace(".", "", 1).isdigit():
                total += float(part[:-len(suffix)]) * factor
                break
        else:
            if not part.replace(".", "", 1).isdigit():
                raise UnitError(f"{value!r} is not a time span such as 90s or 5min")
            total += float(part)
    return total


def parse_limit(value: str) -> int:
    value = value.strip()
    if value == "infinity":
        return resource.RLIM_INFINITY
    factors = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if value[-1:] in factors and value[:-1].isdigit():
        return int(value[:-1]) * factors[value[-1]]
    if not value.isdigit():
        raise UnitError(f"{value!r} is not a limit such as infinity, 65536 or 8M")
    return int(value)


class Unit:
    """One loaded ``.service`` definition."""

    def __init__(self, name: str, path: Path | None):
        self.name = name
        self.path = path
        self.mtime = path.stat().st_mtime_ns if path else None
        self.sections: dict[str, dict[str, list[str]]] = {}
        self.load_error = ""
        if path is not None:
            try:
                self.sections = parse_unit_text(path.read_text(encoding="utf-8"))
                self.validate()
            except (OSError, UnicodeDecodeError, UnitError) as exc:
                self.load_error = str(exc)

    def get(self, section: str, key: str, default: str = "") -> str:
        values = self.sections.get(section, {}).get(key) or []
        return values[-1] if values else default

    def all(self, section: str, key: str) -> list[str]:
        return list(self.sections.get(section, {}).get(key) or [])

    def validate(self) -> None:
        if "Service" not in self.sections:
            raise UnitError("no [Service] section")
        if not self.all("Service", "ExecStart"):
            raise UnitError("Service has no ExecStart= setting")
        if self.service_type not in SUPPORTED_TYPES:
            raise UnitError(f"Type={self.service_type} is not one of {', '.join(SUPPORTED_TYPES)} (fleetsim)")
        if self.restart not in ("no", "on-failure", "always", "on-abnormal", "on-abort", "on-success"):
            raise UnitError(f"Restart={self.restart} is not a restart setting")
        for key in LIMITS:
            if self.get("Service", key):
                parse_limit(self.get("Service", key))
        parse_seconds(self.get("Service", "TimeoutStartSec"), 90)
        parse_seconds(self.get("Service", "TimeoutStopSec"), 90)
        parse_seconds(self.get("Service", "RestartSec"), 0.1)
        user = self.get("Service", "User", "root")
        if user not in ("root", "0"):
            raise UnitError(f"User={user}: fleetsim runs services as root only")

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def service_type(self) -> str:
        return self.get("Service", "Type", "simple")

    @property
    def restart(self) -> str:
        return self.get("Service", "Restart", "no")

    @property
    def wanted_by(self) -> list[str]:
        out = []
        for value in self.all("Install", "WantedBy"):
            out += value.split()
        return out

    def changed_on_disk(self) -> bool:
        if self.path is None:
            return False
        try:
            return self.path.stat().st_mtime_ns != self.mtime
        except OSError:
            return True


# ----------------------------------------------------------------------------------------- runtime state

class State:
    """The run-time state of one unit (what ``systemctl show`` reports besides its definition)."""

    def __init__(self):
        self.active = "inactive"   # inactive | activating | active | deactivating | failed
        self.sub = "dead"          # dead | running | exited | auto-restart | failed | stop-sigterm
        self.result = "success"    # success | exit-code | signal | start-limit-hit | resources
        self.main_pid = 0
        self.exec_status = 0
        self.exec_code = ""
        self.n_restarts = 0
        self.starts: list[float] = []
        self.invocation = ""
        self.enter_active = 0.0
        self.stopping = False
        self.restart_timer: threading.Timer | None = None
        self.exited = threading.Event()


class ServiceManager:
    """The units of one node. ``root`` is the node's file system root (``/`` inside a node; a directory in tests)."""

    def __init__(self, root: str = "/", log=None):
        self.root = Path(root)
        self.lock = threading.RLock()
        self.units: dict[str, Unit] = {}
        self.states: dict[str, State] = {}
        self.pids: dict[int, str] = {}
        self.early_exits: dict[int, int] = {}
        self.log = log or (lambda msg: None)
        self.boot_time = time.time()

    # -------------------------------------------------------------- unit files
    @staticmethod
    def canonical(name: str) -> str:
        return name if "." in name else name + ".service"

    def find_file(self, name: str) -> Path | None:
        for sub in UNIT_DIRS:
            path = self.root / sub / name
            if path.is_file():
                return path
        return None

    def unit(self, name: str) -> Unit:
        """The loaded definition (loaded now when first asked for, as systemd loads units on demand)."""
        name = self.canonical(name)
        with self.lock:
            unit = self.units.get(name)
            if unit is None or (not unit.found and self.find_file(name) is not None):
                unit = Unit(name, self.find_file(name))
                self.units[name] = unit
            return unit

    def state(self, name: str) -> State:
        return self.states.setdefault(self.canonical(name), State())

    def daemon_reload(self) -> None:
        with self.lock:
            for name in list(self.units):
                self.units[name] = Unit(name, self.find_file(name))

    def wants_links(self, unit: Unit) -> list[Path]:
        return [self.root / "etc/systemd/system" / f"{target}.wants" / unit.name for target in unit.wanted_by]

    def enabled_state(self, unit: Unit) -> str:
        if not unit.found:
            return ""
        if not unit.wanted_by:
            return "static"
        return "enabled" if any(link.is_symlink() or link.exists() for link in self.wants_links(unit)) else "disabled"

    # -------------------------------------------------------------- process control
    def start(self, name: str) -> tuple[int, str]:
        unit = self.unit(name)
        if not unit.found:
            return 5, f"Failed to start {unit.name}: Unit {unit.name} not found."
        if unit.load_error:
            return 1, f"Failed to start {unit.name}: Unit {unit.name} has a bad unit file setting ({unit.load_error})."
        with self.lock:
            st = self.state(unit.name)
            if st.active in ("active", "activating") and st.main_pid:
                return 0, ""
            if st.restart_timer:
                st.restart_timer.cancel()
                st.restart_timer = None
            st.n_restarts = 0
            rc, msg = self._spawn(unit, st)
            exited = st.exited
        if rc == 0 and unit.service_type == "oneshot":  # start returns when a oneshot's process has exited
            exited.wait(parse_seconds(unit.get("Service", "TimeoutStartSec"), 90))
            if st.result != "success":
                return 1, (f"Job for {unit.name} failed because the control process exited with error code.\n"
                           f"See \"systemctl status {unit.name}\" and \"journalctl -xeu {unit.name}\" for details.")
        return rc, msg

    def _spawn(self, unit: Unit, st: State) -> tuple[int, str]:
        now = time.monotonic()
        burst = int(unit.get("Unit", "StartLimitBurst", unit.get("Service", "StartLimitBurst", "5")))
        interval = parse_seconds(unit.get("Unit", "StartLimitIntervalSec", "10s"), 10)
        st.starts = [t for t in st.starts if now - t < interval] + [now]
        if burst and len(st.starts) > burst:
            st.active, st.sub, st.result, st.main_pid = "failed", "failed", "start-limit-hit", 0
            self.log(f"{unit.name}: start request repeated too quickly")
            return 1, (f"Job for {unit.name} failed.\nSee \"systemctl status {unit.name}\" and "
                       f"\"journalctl -xeu {unit.name}\" for details.")
        env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
        st.invocation = uuid.uuid4().hex
        env["INVOCATION_ID"] = st.invocation
        for value in unit.all("Service", "Environment"):
            env.update(parse_environment_assignments(value))
        for value in unit.all("Service", "EnvironmentFile"):
            optional = value.startswith("-")
            path = self.root / value.lstrip("-").lstrip("/")
            try:
                file_env, warnings = parse_environment_file(path.read_text(encoding="utf-8"))
            except OSError:
                if optional:
                    continue
                st.active, st.sub, st.result = "failed", "failed", "resources"
                return 1, (f"Job for {unit.name} failed because of unavailable resources or another system error.\n"
                           f"Failed to load environment files: {value.lstrip('-')}: No such file or directory")
            for warning in warnings:
                self.log(f"{unit.name}: {path}: {warning}")
            env.update(file_env)
        try:
            argv = expand_command(unit.get("Service", "ExecStart"), env)
        except (UnitError, ValueError) as exc:
            st.active, st.sub, st.result = "failed", "failed", "resources"
            return 1, f"Job for {unit.name} failed: {exc}"
        limits = [(LIMITS[key], parse_limit(unit.get("Service", key))) for key in LIMITS if unit.get("Service", key)]
        cwd = unit.get("Service", "WorkingDirectory", "/").lstrip("-") or "/"
        log_dir = self.root / LOG_DIR
        log_dir.mkdir(parents=True, exist_ok=True)

        def child_setup():
            for which, value in limits:
                try:
                    resource.setrlimit(which, (value, value))
                except (ValueError, OSError):
                    # The host may not let even root raise a hard limit (no CAP_SYS_RESOURCE in the sandbox, where
                    # systemd as PID 1 has it): take the most the host allows; `show` still reports the unit's value.
                    hard = resource.getrlimit(which)[1]
                    resource.setrlimit(which, (hard if value == resource.RLIM_INFINITY else min(value, hard), hard))
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)

        with open(log_dir / f"{unit.name}.log", "ab") as out:
            out.write(f"-- {time.strftime('%Y-%m-%dT%H:%M:%S')} fleetsim systemd: starting {unit.name}: "
                      f"{shlex.join(argv)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                        preexec_fn=child_setup)  # pylint: disable=subprocess-popen-preexec-fn
            except OSError as exc:
                st.active, st.sub, st.result, st.main_pid = "failed", "failed", "exit-code", 0
                st.exec_status, st.exec_code = 203, "exited"
                out.write(f"-- {unit.name}: failed at step EXEC spawning {argv[0]}: {exc.strerror}\n".encode())
                if unit.service_type == "simple":
                    return 0, ""
                return 1, (f"Job for {unit.name} failed because the control process exited with error code.\n"
                           f"See \"systemctl status {unit.name}\" and \"journalctl -xeu {unit.name}\" for details.")
        proc.returncode = 0  # the reaper (PID 1's waitpid loop) owns the child, not Popen
        st.main_pid = proc.pid
        st.stopping = False
        st.exited = threading.Event()
        st.active, st.sub, st.result = "active", "running", "success"
        st.enter_active = time.time()
        self.pids[proc.pid] = unit.name
        if proc.pid in self.early_exits:
            self.child_exited(proc.pid, self.early_exits.pop(proc.pid))
        return 0, ""

    def child_exited(self, pid: int, status: int) -> bool:
        """Called by PID 1's reaper for every reaped child; True when it was a unit's main process."""
        with self.lock:
            name = self.pids.pop(pid, None)
            if name is None:
                return False
            unit = self.units.get(name) or self.unit(name)
            st = self.state(name)
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                st.exec_code, st.exec_status = "killed", sig
                clean = sig in CLEAN_SIGNALS
            else:
                code = os.WEXITSTATUS(status)
                st.exec_code, st.exec_status = "exited", code
                clean = code == 0
            st.main_pid = 0
            st.exited.set()
            self._kill_group(pid, signal.SIGKILL if st.stopping else signal.SIGTERM)
            if st.stopping:
                st.active, st.sub, st.result = "inactive", "dead", "success"
                return True
            st.result = "success" if clean else ("signal" if st.exec_code == "killed" else "exit-code")
            self.log(f"{name}: main process {pid} {st.exec_code} status={st.exec_status} ({st.result})")
            restart = unit.restart == "always" or (unit.restart == "on-failure" and not clean) or \
                (unit.restart == "on-abnormal" and st.exec_code == "killed" and not clean) or \
                (unit.restart == "on-success" and clean)
            if restart:
                st.active, st.sub = "activating", "auto-restart"
                delay = parse_seconds(unit.get("Service", "RestartSec"), 0.1)
                st.restart_timer = threading.Timer(delay, self._auto_restart, args=(name,))
                st.restart_timer.daemon = True
                st.restart_timer.start()
            elif clean and unit.service_type == "oneshot":
                st.active, st.sub = "inactive", "dead"
            elif clean:
                st.active, st.sub = "inactive", "dead"
            else:
                st.active, st.sub = "failed", "failed"
            return True

    def _auto_restart(self, name: str) -> None:
        with self.lock:
            st = self.state(name)
            st.restart_timer = None
            if st.active != "activating" or st.sub != "auto-restart":
                return
            st.n_restarts += 1
            self._spawn(self.unit(name), st)

    @staticmethod
    def _kill_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, name: str) -> tuple[int, str]:
        unit = self.unit(name)
        if not unit.found and self.canonical(name) not in self.states:
            return 5, f"Failed to stop {unit.name}: Unit {unit.name} not loaded."
        with self.lock:
            st = self.state(unit.name)
            if st.restart_timer:
                st.restart_timer.cancel()
                st.restart_timer = None
            pid = st.main_pid
            if not pid:
                if st.active != "failed":
                    st.active, st.sub = "inactive", "dead"
                return 0, ""
            st.stopping = True
            st.active, st.sub = "deactivating", "stop-sigterm"
            exited = st.exited
        self._kill_group(pid, signal.SIGTERM)
        if not exited.wait(parse_seconds(unit.get("Service", "TimeoutStopSec"), 90)):
            self._kill_group(pid, signal.SIGKILL)
            exited.wait(10)
        with self.lock:
            st.active, st.sub, st.stopping = "inactive", "dead", False
        return 0, ""

    def kill(self, name: str, sig: int) -> tuple[int, str]:
        st = self.state(name)
        if not st.main_pid:
            return 1, f"Failed to kill unit {self.canonical(name)}: No main process to kill"
        self._kill_group(st.main_pid, sig)
        return 0, ""

    def boot(self, enabled_in: Path | None = None) -> list[str]:
        """Start the units enabled into multi-user.target / default.target (After= order among them). With
        ``enabled_in`` (a node's own upper layer), only the units whose links lie there: those enabled in the node."""
        started = []
        base = (Path(enabled_in) if enabled_in else self.root) / "etc/systemd/system"
        names = []
        for target in ("default.target.wants", "multi-user.target.wants"):
            for link in sorted((base / target).glob("*.service")) if (base / target).is_dir() else []:
                if link.name not in names:
                    names.append(link.name)
        order = sorted(names, key=lambda n: (len([a for a in self.unit(n).get("Unit", "After").split()
                                                  if a in names]), n))
        for name in order:
            rc, msg = self.start(name)
            self.log(f"boot: start {name}: rc={rc} {msg}".strip())
            started.append(name)
        return started

    # -------------------------------------------------------------- properties
    def properties(self, name: str) -> dict[str, str]:
        unit = self.unit(name)
        st = self.states.get(unit.name) or State()
        props = {
            "Type": unit.service_type,
            "Restart": unit.restart,
            "MainPID": str(st.main_pid),
            "ExecMainPID": str(st.main_pid),
            "ExecMainCode": {"exited": "1", "killed": "2"}.get(st.exec_code, "0"),
            "ExecMainStatus": str(st.exec_status),
            "NRestarts": str(st.n_restarts),
            "Result": st.result,
            "Id": unit.name,
            "Names": unit.name,
            "Description": unit.get("Unit", "Description", unit.name),
            "LoadState": "not-found" if not unit.found else ("bad-setting" if unit.load_error else "loaded"),
            "ActiveState": st.active,
            "SubState": st.sub,
            "FragmentPath": str(unit.path) if unit.path else "",
            "UnitFileState": self.enabled_state(unit),
            "NeedDaemonReload": "yes" if unit.changed_on_disk() else "no",
            "InvocationID": st.invocation,
            "ActiveEnterTimestamp": time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(st.enter_active))
            if st.enter_active else "",
            "ActiveEnterTimestampMonotonic": str(int(st.enter_active * 1e6)) if st.enter_active else "0",
            "TimeoutStartUSec": _usec(parse_seconds(unit.get("Service", "TimeoutStartSec"), 90)),
            "TimeoutStopUSec": _usec(parse_seconds(unit.get("Service", "TimeoutStopSec"), 90)),
            "Environment": " ".join(unit.all("Service", "Environment")),
            "EnvironmentFiles": " ".join("%s (ignore_errors=%s)" % (v.lstrip("-"), "yes" if v.startswith("-") else "no")
                                         for v in unit.all("Service", "EnvironmentFile")),
            "ExecStart": unit.get("Service", "ExecStart"),
        }
        for key in LIMITS:
            raw = unit.get("Service", key)
            if raw and not unit.load_error:
                value = parse_limit(raw)
                props[key] = "infinity" if value == resource.RLIM_INFINITY else str(value)
        if unit.load_error:
            props["LoadError"] = f"org.freedesktop.systemd1.BadUnitSetting \"{unit.load_error}\""
        return props

    # -------------------------------------------------------------- systemctl
    def systemctl(self, argv: list[str]) -> tuple[int, str, str]:  # noqa: C901 (one verb table)
        """Run one ``systemctl`` command; (exit status, stdout, stderr)."""
        props_wanted: list[str] = []
        value_only = now = False
        signame = "SIGTERM"
        words = []
        it = iter(argv)
        for arg in it:
            if arg in ("-p", "--property"):
                props_wanted += next(it, "").split(",")
            elif arg.startswith("--property="):
                props_wanted += arg.split("=", 1)[1].split(",")
            elif arg == "--value":
                value_only = True
            elif arg == "--now":
                now = True
            elif arg in ("-s", "--signal"):
                signame = next(it, "SIGTERM")
            elif arg.startswith("--signal="):
                signame = arg.split("=", 1)[1]
            elif arg.startswith("-"):
                continue  # --no-pager, -l, --full, --no-block, --quiet, ...
            else:
                words.append(arg)
        if not words:
            words = ["list-units"]
        verb, names = words[0], [self.canonical(n) for n in words[1:]]
        out, err, rc = [], [], 0

        if verb == "daemon-reload":
            self.daemon_reload()
        elif verb == "show":
            for i, name in enumerate(names):
                props = self.properties(name)
                keys = props_wanted or sorted(props)
                if i:
                    out.append("")
                for key in keys:
                    value = props.get(key, "")
                    out.append(value if value_only else f"{key}={value}")
        elif verb in ("is-active", "is-failed"):
            rc = 3 if verb == "is-active" else 1
            for name in names:
                active = self.properties(name)["ActiveState"]
                out.append(active)
                if (verb == "is-active" and active == "active") or (verb == "is-failed" and active == "failed"):
                    rc = 0
        elif verb == "is-enabled":
            rc = 1
            for name in names:
                unit = self.unit(name)
                if not unit.found:
                    err.append(f"Failed to get unit file state for {name}: No such file or directory")
                    continue
                state = self.enabled_state(unit)
                out.append(state)
                if state in ("enabled", "static"):
                    rc = 0
        elif verb in ("start", "stop", "restart", "try-restart", "reload-or-restart", "reload"):
            for name in names:
                if self.unit(name).found and self.unit(name).changed_on_disk():
                    err.append(f"Warning: The unit file, source configuration file or drop-ins of {name} changed on "
                               "disk. Run 'systemctl daemon-reload' to reload units.")
                if verb == "stop":
                    code, msg = self.stop(name)
                elif verb == "start":
                    code, msg = self.start(name)
                elif verb == "try-restart" and self.properties(name)["ActiveState"] != "active":
                    code, msg = 0, ""
                else:
                    self.stop(name)
                    code, msg = self.start(name)
                if code:
                    rc = code if code != 5 else 5
                    err.append(msg)
        elif verb in ("enable", "disable"):
            for name in names:
                unit = self.unit(name)
                if not unit.found:
                    err.append(f"Failed to {verb} unit: Unit file {name} does not exist.")
                    rc = 1
                    continue
                if not unit.wanted_by:
                    err.append(f"The unit files have no installation config (WantedBy=, RequiredBy=, Also=,\n"
                               f"Alias= settings in the [Install] section) for {name}.")
                for link in self.wants_links(unit):
                    if verb == "enable" and not link.is_symlink():
                        link.parent.mkdir(parents=True, exist_ok=True)
                        os.symlink(str(Path("/") / unit.path.relative_to(self.root)), link)
                        err.append(f"Created symlink {link} \u2192 {unit.path}.")
                    elif verb == "disable" and (link.is_symlink() or link.exists()):
                        link.unlink()
                        err.append(f"Removed \"{link}\".")
                if now:
                    code, msg = self.start(name) if verb == "enable" else self.stop(name)
                    if code:
                        rc = 1
                        err.append(msg)
        elif verb == "reset-failed":
            for name in names or list(self.states):
                st = self.state(name)
                if st.active == "failed":
                    st.active, st.sub, st.result = "inactive", "dead", "success"
                st.starts = []
        elif verb == "kill":
            sig = getattr(signal, signame if signame.startswith("SIG") else "SIG" + signame, None)
            if sig is None and signame.isdigit():
                sig = int(signame)
            for name in names:
                code, msg = self.kill(name, sig or signal.SIGTERM)
                if code:
                    rc = 1
                    err.append(msg)
        elif verb == "status":
            rc = 0
            for name in names:
                p = self.properties(name)
                if p["LoadState"] == "not-found":
                    err.append(f"Unit {name} could not be found.")
                    rc = 4
                    continue
                out += [f"\u25cf {name} - {p['Description']}",
                        f"     Loaded: {p['LoadState']} ({p['FragmentPath']}; {p['UnitFileState']})",
                        f"     Active: {p['ActiveState']} ({p['SubState']})",
                        f"   Main PID: {p['MainPID']}"]
                log = self.root / LOG_DIR / f"{name}.log"
                if log.is_file():
                    out += log.read_text(errors="replace").splitlines()[-10:]
                if p["ActiveState"] != "active":
                    rc = 3
        elif verb == "cat":
            for name in names:
                unit = self.unit(name)
                if not unit.found:
                    err.append(f"No files found for {name}.")
                    rc = 1
                    continue
                out += [f"# {unit.path}", unit.path.read_text(encoding="utf-8").rstrip("\n")]
        elif verb in ("list-units", "list-unit-files"):
            files = set()
            for sub in UNIT_DIRS:
                if (self.root / sub).is_dir():
                    files.update(p.name for p in (self.root / sub).glob("*.service"))
            for name in sorted(files | set(self.states)):
                p = self.properties(name)
                if verb == "list-units":
                    out.append(f"{name} {p['LoadState']} {p['ActiveState']} {p['SubState']} {p['Description']}")
                else:
                    out.append(f"{name} {p['UnitFileState']}")
        else:
            err.append(f"Unknown command verb '{verb}' (fleetsim systemd stand-in).")
            rc = 1
        text = "\n".join(out)
        return rc, text + ("\n" if out else ""), "\n".join(e for e in err if e) + ("\n" if err else "")

    # -------------------------------------------------------------- socket server
    def serve(self, path: str = SOCKET) -> threading.Thread:
        """Answer ``systemctl`` clients on a unix socket (one JSON request and one JSON answer a connection)."""
        if os.path.exists(path):
            os.unlink(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        os.chmod(path, 0o600)
        srv.listen(64)

        def handle(conn):
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                try:
                    argv = json.loads(data.decode())["argv"]
                    rc, out, err = self.systemctl([str(a) for a in argv])
                except Exception as exc:  # pylint: disable=broad-except  # answer, never kill PID 1
                    rc, out, err = 1, "", f"fleetsim systemd: {type(exc).__name__}: {exc}\n"
                conn.sendall((json.dumps({"rc": rc, "stdout": out, "stderr": err}) + "\n").encode())

        def loop():
            while True:
                conn, _addr = srv.accept()
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        thread = threading.Thread(target=loop, name="systemd", daemon=True)
        thread.start()
        return thread


def _usec(seconds: float) -> str:
    if seconds == float("inf"):
        return "infinity"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}min"
    return f"{seconds:g}s"
