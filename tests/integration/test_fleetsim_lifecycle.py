# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet lifecycle: `down` leaves nothing behind, `status` finds leftovers, a node that never returns."""

from __future__ import annotations

import json
import os
import re
import subprocess

from fleetsim_helpers import REPO, STATE_ROOT, env


def netns_names() -> set[str]:
    try:
        return set(os.listdir("/run/netns"))
    except FileNotFoundError:
        return set()


def mount_lines(needle: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/mountinfo", encoding="utf-8") as fh:
                found += [line for line in fh if needle in line]
        except OSError:
            continue
    return found


def processes(needle: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd:
            found.append(f"{entry}: {cmd}")
    return found


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie waits only for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_down_leaves_no_namespace_mount_link_or_process(make_fleet):
    fleet = make_fleet("down")
    fleet.up("gcp_b200", nodes=2)
    state = fleet.state()
    nodes = state["nodes"]
    links = {state["bridge"]} | {n["veth"] for n in nodes.values()}
    namespaces = {n["netns"] for n in nodes.values()}
    init_pids = [json.loads((fleet.dir / "nodes" / name / "status.json").read_text())["init_pid"] for name in nodes]
    assert namespaces <= netns_names()
    assert all(os.path.exists(f"/sys/class/net/{link}") for link in links)
    assert processes(str(fleet.dir))
    # A process started inside a node, detached from its SSH session, must go down with the node.
    fleet.ssh("gcp-b200-1", "setsid sleep 100000 </dev/null >/dev/null 2>&1 &")

    fleet.cli("down")
    assert not namespaces & netns_names()
    assert not [link for link in links if os.path.exists(f"/sys/class/net/{link}")]
    assert mount_lines(str(fleet.dir)) == []
    assert mount_lines(f"/run/netns/fsim-{fleet.name}-") == []
    assert processes(str(fleet.dir)) == []
    assert not [pid for pid in init_pids if running(pid)]
    status = fleet.cli("status", "--json")
    stale = json.loads(status.stdout)["stale"]
    assert not [ns for ns in stale["netns"] if fleet.name in ns]
    # down is idempotent, with or without --purge.
    fleet.cli("down")
    fleet.cli("down", "--purge")
    assert not fleet.dir.exists()


def test_status_reports_stale_leftovers(make_fleet):
    fleet = make_fleet("stale")
    name = f"fsim-{fleet.name}-ghost"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        out = fleet.cli("status").stdout
        assert "stale leftovers" in out and name in out
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    assert name not in fleet.cli("status").stdout


def test_node_that_never_returns_fails_alone_at_the_reboot_timeout(make_fleet, tmp_path):
    fleet = make_fleet("never")
    fleet.up("gcp_b200", nodes=2, group="b200_cluster")
    fleet.cli("fault", "b200-cluster-2", "--never-return-after-reboot")
    timeout = 15
    inventory = fleet.inventory(tmp_path / "hosts.yml", reboot_timeout=timeout)
    playbook = tmp_path / "reboot.yml"
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    playbook.write_text(
        "- hosts: b200_cluster\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.reboot:\n"
        "        reboot_timeout: '{{ gpufleet_reboot_timeout }}'\n"
        "        connect_timeout: '{{ gpufleet_reboot_connect_timeout }}'\n"
        "        boot_time_command: '{{ gpufleet_reboot_boot_time_command }}'\n"
        "        test_command: '{{ gpufleet_reboot_test_command }}'\n"
        "      register: result\n"
        "      ignore_errors: true\n"
        "    - ansible.builtin.copy:\n"
        f"        dest: '{results_dir}/{{{{ inventory_hostname }}}}.json'\n"
        "        content: '{{ result | to_json }}'\n"
        "        mode: '0644'\n"
        "      delegate_to: localhost\n"
        "    - ansible.builtin.fail:\n"
        "        msg: the node did not come back\n"
        "      when: result is failed\n")
    # Bounded: the play ends once the reboot timeout passes; 300 s is only a guard against a hang.
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)], cwd=REPO, env=env(),
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=300)
    assert proc.returncode == 2, proc.stdout
    recap = dict(re.findall(r"^(b200-cluster-\d+)\s+:.*\bfailed=(\d+)", proc.stdout, re.MULTILINE))
    assert recap == {"b200-cluster-1": "0", "b200-cluster-2": "1"}, proc.stdout
    good = json.loads((results_dir / "b200-cluster-1.json").read_text())
    assert good["rebooted"] is True and not good.get("failed")
    failed = json.loads((results_dir / "b200-cluster-2.json").read_text())
    assert failed["failed"] is True
    assert f"timeout={timeout}" in failed["msg"]
    # It gave up because of its own reboot timeout (it waited that long first), not for another reason.
    assert failed["elapsed"] >= timeout
    # The host's view agrees: one node booted again, the other is down.
    status = json.loads(fleet.cli("status", "--json").stdout)["fleet"]["nodes"]
    assert status["b200-cluster-1"]["state"] == "up"
    assert status["b200-cluster-2"]["state"] == "down"
    assert len(fleet.boots("b200-cluster-1")) == 2
    assert len(fleet.boots("b200-cluster-2")) == 1
    # Clearing the fault and powering the node on brings it back.
    fleet.cli("fault", "b200-cluster-2", "--clear")
    fleet.cli("reboot", "b200-cluster-2")
    assert len(fleet.boots("b200-cluster-2")) == 2
    assert STATE_ROOT in fleet.dir.parents
