# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the scenarios' testinfra tests read from a simulated fleet: its boot log, a node's driver parameters and the
environment the env script gives; and the collection's playbooks they run against it (verify, audit, any other),
each run's output kept in the scenario's ephemeral directory. Imported by path (molecule/shared is put on sys.path by
the test module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def boot_log() -> list[dict]:
    """Every boot event of the scenario's fleet, in order: {"node", "event": "up"|"down", "boot_id", "time"}."""
    root = Path(os.environ.get("FLEETSIM_STATE_DIR", "/srv/fleetsim"))
    path = root / os.environ["FLEETSIM_FLEET"] / "boots.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def live_params(host) -> dict:
    """/proc/driver/nvidia/params of the node, name to value (as text, quotes kept)."""
    params = {}
    for line in host.file("/proc/driver/nvidia/params").content_string.splitlines():
        name, dummy, value = line.partition(":")
        params[name.strip()] = value.strip()
    return params


def sourced_env(host, script: str) -> dict:
    """The environment bash has on the node after sourcing ``script`` from a clean one."""
    # check_output quotes its arguments itself.
    out = host.check_output("env -i PATH=/usr/bin:/bin bash -c %s", f"source {script} && env -0")
    env = {}
    for item in out.split("\0"):
        if "=" in item:
            key, dummy, value = item.partition("=")
            env[key] = value
    return env


def playbook(repo: Path, inventory: str, log_dir: Path, name: str, *extra: str, log: str = "",
             timeout: int = 1200):
    """``ansible-playbook -i INVENTORY playbooks/NAME EXTRA...`` from the checkout ``repo`` with its ansible.cfg, the
    output (stdout and stderr together) written to ``log_dir/<log><name's stem>.log``; the CompletedProcess."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory,
                          str(repo / "playbooks" / name)] + list(extra),
                         check=False, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=timeout)
    (log_dir / f"{log}{Path(name).stem}.log").write_text(run.stdout)
    return run


def verify_run(repo: Path, inventory: str, run_dir: Path, groups: list, *extra: str):
    """playbooks/verify.yml over ``groups`` into ``run_dir`` (its log beside it); (the run, summary.json or None)."""
    run = playbook(repo, inventory, run_dir.parent, "verify.yml", "-e", json.dumps({"gpufleet_verify_groups": groups}),
                   "-e", "gpufleet_verify_run_dir=%s" % run_dir, *extra, log=run_dir.name + "-")
    summary = run_dir / "summary.json"
    return run, (json.loads(summary.read_text()) if summary.is_file() else None)


def audit_run(repo: Path, inventory: str, out_dir: Path, limit: str) -> dict:
    """playbooks/audit.yml over ``limit`` into ``out_dir``, never failing on findings; its fleet.json (the run must
    succeed)."""
    run = playbook(repo, inventory, out_dir.parent, "audit.yml", "-l", limit, "-e", "audit_output_dir=%s" % out_dir,
                   "-e", "audit_fail_on=none", log=out_dir.name + "-")
    assert run.returncode == 0, run.stdout[-4000:]
    return json.loads((out_dir / "fleet.json").read_text())
