# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulated fleet's pure parts: mirror building, inventory, names, state dir, node tools."""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from tools.fleetsim import cli, common, fleet, mirror

NODE_TOOLS = common.NODE_TOOLS


# ----------------------------------------------------------------------------------------- mirror

def make_fixtures(root: Path) -> Path:
    deb = root / "debs" / "fsim-test" / "DEBIAN"
    deb.mkdir(parents=True)
    (deb / "control").write_text("Package: fsim-test\nVersion: 2.0\nArchitecture: all\n"
                                 "Maintainer: test <t@example.invalid>\nDescription: test fixture\n")
    (root / "debs" / "fsim-test" / "usr" / "share").mkdir(parents=True)
    (root / "debs" / "fsim-test" / "usr" / "share" / "fsim-test").write_text("x\n")
    (root / "debs" / "not-a-package").mkdir()
    src = root / "sources" / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a\n")
    (src / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (src / "sub" / "run.sh").chmod(0o755)
    (root / "wheels.txt").write_text("# nothing to fetch\n")
    return root


@pytest.mark.skipif(shutil.which("dpkg-deb") is None or shutil.which("dpkg-scanpackages") is None,
                    reason="dpkg-deb/dpkg-scanpackages not installed (scripts/bootstrap.sh installs dpkg-dev)")
def test_mirror_builds_apt_sources_and_wheels(tmp_path, monkeypatch):
    fixtures = make_fixtures(tmp_path / "fixtures")
    wheel_dir = tmp_path / "local"
    wheel_dir.mkdir()
    monkeypatch.setattr(mirror, "LOCAL_WHEEL_DIRS", (str(wheel_dir),))
    dest = mirror.build(tmp_path / "mirror", fixtures=fixtures, quiet=True)

    packages = (dest / "apt" / "Packages").read_text()
    assert "Package: fsim-test\nVersion: 2.0\n" in packages
    assert "Filename: ./fsim-test_2.0_all.deb" in packages
    assert gzip.decompress((dest / "apt" / "Packages.gz").read_bytes()).decode() == packages
    assert "SHA256:" in (dest / "apt" / "Release").read_text()
    assert sorted(p.name for p in (dest / "apt").glob("*.deb")) == ["fsim-test_2.0_all.deb"]

    tarball = dest / "sources" / "tree.tar.gz"
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert (dest / "sources" / "tree.tar.gz.sha256").read_text() == f"{digest}  tree.tar.gz\n"
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["tree", "tree/a.txt", "tree/sub", "tree/sub/run.sh"]
    assert {(m.uid, m.gid, m.uname, m.mtime) for m in members} == {(0, 0, "root", mirror.FIXED_MTIME)}
    assert members[3].mode == 0o755 and members[1].mode == 0o644
    assert (dest / "wheels").is_dir()

    # Reproducible: a rebuild (even of touched files) gives the same bytes.
    os.utime(fixtures / "sources" / "tree" / "a.txt", (1, 1))
    mirror.build(dest, fixtures=fixtures, quiet=True)
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == digest


def test_mirror_skips_a_rebuild_when_nothing_changed(tmp_path, monkeypatch):
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    calls = []
    monkeypatch.setattr(mirror, "build_apt", lambda *a: calls.append("apt"))
    monkeypatch.setattr(mirror, "build_sources", lambda *a: calls.append("sources"))
    mirror.build(tmp_path / "m", fixtures=fixtures, wheels=False, quiet=True)
    mirror.build(tmp_path / "m", fixtures=fixtures, wheels=False, quiet=True)
    assert calls == ["apt", "sources"]
    (fixtures / "wheels.txt").write_text("numpy\n")
    mirror.build(tmp_path / "m", fixtures=fixtures, wheels=False, quiet=True)
    assert calls == ["apt", "sources", "apt", "sources"]


def test_wheel_requirements_drop_extras(tmp_path):
    import zipfile

    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo-1.0.dist-info/METADATA",
                    "Name: demo\nRequires-Dist: filelock\nRequires-Dist: sympy>=1.13\n"
                    'Requires-Dist: pyyaml; extra == "pyyaml"\n')
    assert mirror.wheel_requirements(wheel) == ["filelock", "sympy>=1.13"]
    (tmp_path / "wheels.txt").write_text("# comment\nnumpy  # the array library\n\nnvidia-nvshmem-cu13\n")
    assert mirror.requirement_lines(tmp_path / "wheels.txt") == ["numpy", "nvidia-nvshmem-cu13"]


def test_shipped_fixtures_are_well_formed():
    debs = sorted(p for p in (common.FIXTURES / "debs").iterdir() if p.is_dir())
    assert "fleetsim-hello" in [p.name for p in debs]
    for pkg in debs:
        fields = dict(line.split(": ", 1) for line in (pkg / "DEBIAN" / "control").read_text().splitlines()
                      if ": " in line and not line.startswith(" "))
        assert {"Package", "Version", "Architecture", "Description"} <= set(fields), pkg
    assert {"numpy", "nvidia-nvshmem-cu13"} <= set(mirror.requirement_lines(common.FIXTURES / "wheels.txt"))


# ---------------------------------------------------------------------------- names and inventory

@pytest.mark.parametrize("path", ["/etc/fleetsim", "/var/lib/fleetsim", "/tmp/x", "/root/f", "/usr", "/"])
def test_state_dir_outside_overlaid_paths(path):
    with pytest.raises(common.FleetError):
        common.state_root(path)


def test_names():
    assert common.state_root("/srv/fleetsim") == Path("/srv/fleetsim")
    assert common.node_name("b200_cluster", 3) == "b200-cluster-3"
    assert len(common.host_veth("a-very-long-fleet-name", "b200-cluster-12")) <= 15
    assert common.host_veth("f", "n1") != common.host_veth("f", "n2")
    with pytest.raises(common.FleetError):
        common.check_name("fleet name", "Bad_Name")


def fake_state(root: Path) -> Path:
    paths = common.FleetPaths(root, "demo")
    nodes = {}
    for seq, (group, n, ip) in enumerate([("b200_cluster", 1, "10.9.0.11"), ("b200_cluster", 2, "10.9.0.12"),
                                          ("h100_ib", 1, "10.9.0.13")]):
        name = common.node_name(group, n)
        nodes[name] = {"name": name, "group": group, "profile": "gcp_b200" if group != "h100_ib" else "h100_ib",
                       "n": n, "seq": seq, "ip": ip, "netns": common.netns_name("demo", name),
                       "veth": common.host_veth("demo", name)}
    common.write_json(paths.state, {"fleet": "demo", "bridge": "fsim9", "subnet": "10.9.0.0/24",
                                    "host_ip": "10.9.0.1", "nodes": nodes})
    return paths.state


def test_inventory(tmp_path):
    fake_state(tmp_path)
    fl = fleet.Fleet(tmp_path, "demo")
    out = tmp_path / "inv" / "hosts.yml"
    fl.write_inventory(str(out), reboot_timeout=30)
    inv = yaml.safe_load(out.read_text())
    allvars = inv["all"]["vars"]
    assert allvars["ansible_user"] == "root"
    assert allvars["ansible_python_interpreter"] == "/usr/bin/python3"
    assert allvars["ansible_ssh_private_key_file"] == str(tmp_path / "demo" / "id_ed25519")
    assert "StrictHostKeyChecking=no" in allvars["ansible_ssh_common_args"]
    assert allvars["gpufleet_reboot_timeout"] == 30
    assert allvars["gpufleet_allow_reboot"] is True
    assert {k for k in allvars if k.startswith("gpufleet_reboot_")} >= {
        "gpufleet_reboot_timeout", "gpufleet_reboot_connect_timeout", "gpufleet_reboot_post_reboot_delay",
        "gpufleet_reboot_boot_time_command"}
    children = inv["all"]["children"]
    assert list(children["b200_cluster"]["hosts"]) == ["b200-cluster-1", "b200-cluster-2"]
    assert children["h100_ib"]["hosts"]["h100-ib-1"]["ansible_host"] == "10.9.0.13"
    # A group of one hardware profile carries the collection's profile variables (no role reads fleetsim_profile):
    # inventory-file group vars, which a profile group's group_vars (inventories/fleetsim) override.
    assert children["b200_cluster"]["vars"] == {"gpufleet_profile": "gcp_b200", "gpufleet_gpu_family": "b200",
                                                "gpufleet_fabric": "roce"}
    assert children["h100_ib"]["vars"] == {"gpufleet_profile": "h100_ib", "gpufleet_gpu_family": "h100",
                                           "gpufleet_fabric": "infiniband"}
    assert children["h100_ib"]["hosts"]["h100-ib-1"]["fleetsim_profile"] == "h100_ib"
    assert not [k for k in allvars if k in ("gpufleet_profile", "gpufleet_gpu_family", "gpufleet_fabric")]


def test_a_group_of_mixed_hardware_gets_no_profile_of_its_own(tmp_path):
    state_path = fake_state(tmp_path)
    state = json.loads(state_path.read_text())
    state["nodes"]["h100-ib-1"]["group"] = "b200_cluster"
    state_path.write_text(json.dumps(state))
    children = fleet.Fleet(tmp_path, "demo").inventory()["all"]["children"]
    assert list(children) == ["b200_cluster"] and "vars" not in children["b200_cluster"]


def test_inventory_of_a_fleet_that_is_not_up(tmp_path):
    with pytest.raises(common.FleetError, match="not up"):
        fleet.Fleet(tmp_path, "nothing").inventory()


# ------------------------------------------------------------------------------------- node tools

def run_tool(name: str, args: list[str], env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    link = tmp_path / "bin" / name
    link.parent.mkdir(exist_ok=True)
    if not link.exists():
        shutil.copyfile(NODE_TOOLS / ("modprobe.py" if name in ("modprobe", "lsmod") else name), link)
        link.chmod(0o755)
    cmd = [sys.executable, str(link)] if name in ("modprobe", "lsmod") else ["sh", str(link)]
    return subprocess.run(cmd + args, env={**os.environ, **env}, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)


def test_modprobe_and_lsmod(tmp_path):
    state = tmp_path / "modules.json"
    proc_modules = tmp_path / "proc-modules"
    proc_modules.write_text("nvidia 100 0 - Live 0x0\nib_core 50 0 - Live 0x0\n")
    env = {"FLEETSIM_MODULES_JSON": str(state), "FLEETSIM_PROC_MODULES": str(proc_modules),
           "FLEETSIM_REAL_KMOD": str(tmp_path / "no-kmod")}
    state.write_text(json.dumps({"known": ["nvidia", "ib_core", "nvidia_peermem"], "peermem_loads": False,
                                 "peermem_error": "modprobe: ERROR: could not insert 'nvidia_peermem': "
                                                  "Invalid argument", "peermem_size": 123}))
    refused = run_tool("modprobe", ["nvidia-peermem"], env, tmp_path)
    assert refused.returncode == 1 and "Invalid argument" in refused.stderr
    state.write_text(json.dumps({"known": ["nvidia", "ib_core", "nvidia_peermem"], "peermem_loads": True,
                                 "peermem_size": 123}))
    assert run_tool("modprobe", ["nvidia_peermem"], env, tmp_path).returncode == 0
    lsmod = run_tool("lsmod", [], env, tmp_path).stdout.splitlines()
    assert lsmod[0].split() == ["Module", "Size", "Used", "by"]
    assert lsmod[1].split() == ["nvidia_peermem", "123", "0"]
    assert lsmod[2].split() == ["nvidia", "100", "1", "nvidia_peermem"]
    assert run_tool("modprobe", ["-r", "nvidia"], env, tmp_path).returncode == 1  # in use
    assert run_tool("modprobe", ["-r", "nvidia_peermem"], env, tmp_path).returncode == 0
    assert "nvidia_peermem" not in proc_modules.read_text()
    missing = run_tool("modprobe", ["-q", "no_such_module"], env, tmp_path)
    assert missing.returncode == 1 and missing.stderr == ""


@pytest.mark.parametrize("name, args, action", [
    ("reboot", [], "reboot"),
    ("reboot", ["--poweroff"], "poweroff"),
    ("shutdown", ["-r", "+0", "Reboot initiated by Ansible"], "reboot"),
    ("shutdown", ["-r", "now"], "reboot"),
    ("shutdown", ["now"], "poweroff"),
    ("shutdown", ["-h", "now"], "poweroff"),
    ("poweroff", [], "poweroff"),
    ("halt", [], "poweroff"),
])
def test_power_switch_actions(tmp_path, name, args, action):
    link = tmp_path / name
    shutil.copyfile(NODE_TOOLS / "reboot", link)
    proc = subprocess.run(["sh", str(link), *args], env={**os.environ, "FLEETSIM_POWER_DRY_RUN": "1"},
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert proc.returncode == 0
    assert proc.stdout.strip() == action


def test_shutdown_cancel_does_nothing(tmp_path):
    link = tmp_path / "shutdown"
    shutil.copyfile(NODE_TOOLS / "reboot", link)
    proc = subprocess.run(["sh", str(link), "-c"], env={**os.environ, "FLEETSIM_POWER_DRY_RUN": "1"},
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert proc.returncode == 0 and proc.stdout == ""


def test_network_choice_avoids_other_fleets(tmp_path, monkeypatch):
    fake_state(tmp_path)  # fleet "demo" on fsim9 / 10.9.0.0/24
    monkeypatch.setattr(fleet.Fleet, "_subnet_free", staticmethod(lambda net, bridge: str(net) != "10.213.0.0/24"))
    fl = fleet.Fleet(tmp_path, "other")
    assert fl._choose_network(None, None) == ("10.213.1.0/24", "fsim1")
    assert fl._choose_network("10.77.0.0/24", "fsimx") == ("10.77.0.0/24", "fsimx")
    with pytest.raises(common.FleetError, match="another fleet"):
        fl._choose_network("10.77.0.0/24", "fsim9")
    with pytest.raises(common.FleetError, match="overlaps"):
        fl._choose_network("10.9.0.0/16", "fsimy")
    with pytest.raises(common.FleetError, match="private"):
        fl._choose_network("8.8.8.0/24", "fsimz")


def test_mirror_command_builds_under_the_state_roots_lock(tmp_path, monkeypatch, capsys):
    """`fleetsim mirror` takes the lock `up` takes, so two scenarios never build one mirror at the same time."""
    held = []

    def fake_build(dest, **kwargs):
        with open(tmp_path / ".lock", "a+", encoding="utf-8") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
            else:
                fcntl.flock(other, fcntl.LOCK_UN)
                held.append(False)
        return dest

    monkeypatch.setattr(cli, "state_root", lambda value=None: tmp_path)
    monkeypatch.setattr(mirror, "build", fake_build)
    assert cli.main(["mirror", "--dest", str(tmp_path / "m")]) == 0
    assert held == [True]
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    # Released afterwards: the next taker gets it at once.
    with fleet.root_locked(tmp_path):
        pass


# ----------------------------------------------------------------------------------------- boot failures

def test_a_supervisor_that_died_is_named_with_its_exit_status_or_the_signal_that_killed_it():
    """The error of a node that did not boot says how its supervisor ended (it is the up process's child)."""
    killed = subprocess.Popen(["sleep", "60"])
    killed.kill()
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    for proc in (killed, exited):  # until each is a zombie: ended, not yet reaped
        while Path(f"/proc/{proc.pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
    assert fleet.Fleet._supervisor_exit(killed.pid) == "; its supervisor was killed by signal SIGKILL"
    assert fleet.Fleet._supervisor_exit(exited.pid) == "; its supervisor exited with status 3"
    running = subprocess.Popen(["sleep", "60"])
    try:
        assert fleet.Fleet._supervisor_exit(running.pid) == ""
    finally:
        running.kill()
        running.wait()
    assert fleet.Fleet._supervisor_exit(1) == ""  # not this process's child
    assert fleet.Fleet._supervisor_exit(None) == ""


def test_a_started_supervisor_keeps_its_exit_status_through_later_commands(tmp_path):
    """subprocess reaps a dropped Popen's child at the next Popen: `up` starts more nodes and commands after a
    supervisor, so it holds each one, and the error still says how one that died early ended."""
    fl = fleet.Fleet(tmp_path, "f1")
    fl.paths.node("n-1").console.parent.mkdir(parents=True)
    python = tmp_path / "python"  # stands in for the interpreter: `python -m tools.fleetsim.supervisor DIR NODE`
    python.write_text("#!/bin/sh\nexec sleep 60\n")
    python.chmod(0o755)
    node = {"name": "n-1"}
    fl._start_supervisor({"python": str(python), "repo": str(tmp_path)}, node)
    pid = node["supervisor_pid"]
    os.kill(pid, signal.SIGKILL)
    for dummy in range(3):
        subprocess.run(["true"], check=True)  # each Popen runs subprocess's clean-up of dropped children
    assert fleet.Fleet._supervisor_exit(pid) == "; its supervisor was killed by signal SIGKILL"


def test_a_recorded_supervisor_pid_counts_only_while_it_is_that_fleets_and_nodes():
    """PIDs are reused (pid_max may be 32768): a PID kept in one fleet's state that now belongs to another fleet's
    supervisor, or to another node's, is not this node's supervisor (its `down` must never signal it)."""
    mine = fleet.supervisor_needle("/srv/fleetsim/mol-a", "b200-cluster-1")
    others = [["/srv/fleetsim/mol-b", "b200-cluster-1"], ["/srv/fleetsim/mol-a", "b200-cluster-11"]]
    sleep = [sys.executable, "-c", "import time; time.sleep(60)", "tools.fleetsim.supervisor"]
    procs = [subprocess.Popen(sleep + args) for args in others + [["/srv/fleetsim/mol-a", "b200-cluster-1"]]]
    try:
        assert all(fleet.proc_alive(p.pid, fleet.SUPERVISOR_NEEDLE) for p in procs)  # the old, too wide test
        assert [fleet.proc_alive(p.pid, mine) for p in procs] == [False, False, True]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
