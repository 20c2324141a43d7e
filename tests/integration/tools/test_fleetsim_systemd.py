# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated nodes' systemd stand-in (tools/fleetsim/systemd.py), driven the way systemctl and
ansible.builtin.systemd_service drive it, with real child processes in a temporary root."""
import os
import resource
import signal
import sys
import threading
import time

import pytest

from tools.fleetsim import systemd


class Reaper:
    """PID 1's waitpid loop, limited to the manager's own children (pytest has others)."""

    def __init__(self, manager):
        self.manager = manager
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            for pid in list(self.manager.pids):
                try:
                    got, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    continue
                if got:
                    self.manager.child_exited(got, status)
            time.sleep(0.02)


@pytest.fixture(name="mgr")
def fixture_mgr(tmp_path):
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    manager = systemd.ServiceManager(str(tmp_path))
    reaper = Reaper(manager)
    yield manager
    for name in list(manager.states):
        manager.stop(name)
    reaper.stop.set()


def write_unit(root, name, service, install="WantedBy=multi-user.target\n"):
    path = root / "etc/systemd/system" / name
    path.write_text(f"[Unit]\nDescription=test {name}\n\n[Service]\n{service}\n[Install]\n{install}")
    return path


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def show(mgr, name, prop):
    rc, out, _err = mgr.systemctl(["show", name, "-p", prop, "--value"])
    assert rc == 0
    return out.strip()


def test_unknown_unit_reads_like_systemd(mgr):
    rc, out, _err = mgr.systemctl(["show", "nope.service"])
    assert rc == 0
    assert "LoadState=not-found" in out.splitlines()
    assert "ActiveState=inactive" in out.splitlines()
    rc, out, err = mgr.systemctl(["is-enabled", "nope"])
    assert (rc, out) == (1, "")
    assert "No such file or directory" in err
    assert mgr.systemctl(["start", "nope"])[0] == 5


def test_start_stop_environment_and_limits(mgr, tmp_path):
    envfile = tmp_path / "etc/svc.env"
    envfile.write_text("# comment\nFOO=bar\nQUOTED=\"a b\"\nexport BAD=1\n")
    out = tmp_path / "out.txt"
    script = (f"import os,resource,time; open({str(out)!r},'w').write(os.environ['FOO']+'|'+os.environ['QUOTED']+'|'"
              "+str(os.environ.get('BAD'))+'|'+os.environ['ARG']+'|'+str(resource.getrlimit(resource.RLIMIT_NOFILE)[0]));"
              " time.sleep(60)")
    write_unit(tmp_path, "svc.service",
               "Environment=ARG=from-unit\nEnvironmentFile=/etc/svc.env\nEnvironmentFile=-/nonexistent\n"
               f"LimitNOFILE=4096\nExecStart={sys.executable} -c \"{script}\"\n")
    assert mgr.systemctl(["is-active", "svc"])[:2] == (3, "inactive\n")
    assert mgr.systemctl(["is-enabled", "svc"])[:2] == (1, "disabled\n")
    assert mgr.systemctl(["start", "svc"])[0] == 0
    assert show(mgr, "svc", "ActiveState") == "active"
    assert int(show(mgr, "svc", "MainPID")) > 0
    assert show(mgr, "svc", "LimitNOFILE") == "4096"
    assert wait_for(out.exists)
    assert wait_for(lambda: out.read_text().count("|") == 4)
    assert out.read_text() == "bar|a b|None|from-unit|4096"
    assert mgr.systemctl(["stop", "svc"])[0] == 0
    assert show(mgr, "svc", "ActiveState") == "inactive"
    assert show(mgr, "svc", "MainPID") == "0"


def test_restart_on_failure_after_kill_and_clean_stop(mgr, tmp_path):
    write_unit(tmp_path, "eng.service", f"Restart=on-failure\nRestartSec=0.2\nExecStart={sys.executable} -c "
                                        "\"import time; time.sleep(60)\"\n")
    mgr.systemctl(["start", "eng"])
    first = int(show(mgr, "eng", "MainPID"))
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: show(mgr, "eng", "MainPID") not in ("0", str(first)))
    assert show(mgr, "eng", "ActiveState") == "active"
    assert show(mgr, "eng", "NRestarts") == "1"
    # SIGTERM is a clean stop: Restart=on-failure does not restart it.
    second = int(show(mgr, "eng", "MainPID"))
    os.kill(second, signal.SIGTERM)
    assert wait_for(lambda: show(mgr, "eng", "ActiveState") == "inactive")
    assert show(mgr, "eng", "MainPID") == "0"


def test_exit_code_without_restart_fails_and_start_limit(mgr, tmp_path):
    write_unit(tmp_path, "bad.service", f"ExecStart={sys.executable} -c \"raise SystemExit(3)\"\n")
    mgr.systemctl(["start", "bad"])
    assert wait_for(lambda: show(mgr, "bad", "ActiveState") == "failed")
    assert show(mgr, "bad", "Result") == "exit-code"
    assert show(mgr, "bad", "ExecMainStatus") == "3"
    assert mgr.systemctl(["is-failed", "bad"])[0] == 0
    write_unit(tmp_path, "loop.service", f"Restart=always\nRestartSec=0\nStartLimitBurst=3\n"
                                         f"ExecStart={sys.executable} -c \"raise SystemExit(1)\"\n")
    mgr.systemctl(["start", "loop"])
    assert wait_for(lambda: show(mgr, "loop", "Result") == "start-limit-hit")
    assert show(mgr, "loop", "ActiveState") == "failed"


def test_enable_links_boot_and_daemon_reload(mgr, tmp_path):
    path = write_unit(tmp_path, "boot.service", f"ExecStart={sys.executable} -c \"import time; time.sleep(60)\"\n")
    rc, _out, err = mgr.systemctl(["enable", "boot.service"])
    assert rc == 0 and "Created symlink" in err
    link = tmp_path / "etc/systemd/system/multi-user.target.wants/boot.service"
    assert link.is_symlink() and os.readlink(link) == "/etc/systemd/system/boot.service"
    assert mgr.systemctl(["is-enabled", "boot", "-l"])[:2] == (0, "enabled\n")
    # A fresh manager (the next boot) starts what is enabled.
    fresh = systemd.ServiceManager(str(tmp_path))
    reaper = Reaper(fresh)
    try:
        assert fresh.boot() == ["boot.service"]
        assert show(fresh, "boot", "ActiveState") == "active"
    finally:
        fresh.stop("boot")
        reaper.stop.set()
    # An edited unit file is used only after daemon-reload.
    time.sleep(0.01)
    path.write_text(path.read_text().replace("Description=test boot.service", "Description=edited"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert show(mgr, "boot", "NeedDaemonReload") == "yes"
    assert show(mgr, "boot", "Description") == "test boot.service"
    assert mgr.systemctl(["daemon-reload"])[0] == 0
    assert show(mgr, "boot", "Description") == "edited"
    assert show(mgr, "boot", "NeedDaemonReload") == "no"
    assert mgr.systemctl(["disable", "boot"])[0] == 0
    assert not link.exists()


def test_bad_settings_are_refused(mgr, tmp_path):
    write_unit(tmp_path, "rel.service", "ExecStart=python3 -m x\n")
    mgr.systemctl(["daemon-reload"])
    rc, _out, err = mgr.systemctl(["start", "rel"])
    assert rc == 1 and "absolute path" in err
    write_unit(tmp_path, "lim.service", "LimitMEMLOCK=lots\nExecStart=/bin/true\n")
    assert show(mgr, "lim", "LoadState") == "bad-setting"


@pytest.mark.parametrize("text,expected", [
    ("90", 90.0), ("5min", 300.0), ("1h 30s", 3630.0), ("500ms", 0.5), ("infinity", float("inf"))])
def test_time_spans(text, expected):
    assert systemd.parse_seconds(text, 0) == expected


def test_memlock_infinity():
    assert systemd.parse_limit("infinity") == resource.RLIM_INFINITY
    assert systemd.parse_limit("8M") == 8 * 1024 * 1024


def test_exec_start_reads_the_escapes_the_serving_units_write():
    from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.unitvalues import exec_line

    argv = ["/v/bin/python", "-m", "x", "$HOME", "${A}", "100%", "%n", "a b", 'q"uote', "back\\slash"]
    assert systemd.expand_command(exec_line(argv), {"HOME": "/root", "A": "a"}) == argv
