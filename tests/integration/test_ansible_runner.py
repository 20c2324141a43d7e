# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's playbooks run through ansible-runner's Python API, the engine AWX and Automation Platform
run jobs with (process isolation off, as in an Execution Environment), against a simulated fleet; the outcome is
read the way AWX reads it: from the per-host events (``runner_on_ok``, ``runner_on_failed``,
``runner_on_unreachable``), the final ``playbook_on_stats`` and the job events runner writes under
``artifacts/<ident>/job_events/``, never from the text output.

One fleet of three gcp_b200 nodes: a first converge (site.yml, every node in one batch), the audit (every node
audited, nothing changed), a converge that changes nothing (every node intact), and the same converge with one
node's Python broken: that node, and only it, has a ``runner_on_failed`` event, the stats count its failure, the
job fails, and the other nodes stay intact. Every run is bounded (runner's ``timeout``); the fleet is torn down
whatever happens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleetsim_helpers import REPO, VENV_BIN, env

ansible_runner = pytest.importorskip("ansible_runner")

GROUP = "b200_cluster"
NODES = ["b200-cluster-1", "b200-cluster-2", "b200-cluster-3"]
BROKEN = NODES[1]
RUN_TIMEOUT = 1800  # seconds: the first converge of three nodes on a loaded 2-core machine stays well inside it
HOST_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")


class Job:
    """One ansible-runner run and its events, as AWX keeps them."""

    def __init__(self, runner, events: list):
        self.runner, self.events = runner, events

    @property
    def stats(self) -> dict:
        return self.runner.stats or {}

    def host_events(self, kind: str, host: str | None = None) -> list:
        return [e for e in self.events if e.get("event") == kind
                and (host is None or e.get("event_data", {}).get("host") == host)]

    def hosts_with(self, kind: str) -> set:
        return {e["event_data"]["host"] for e in self.host_events(kind)}

    def text(self) -> str:
        return "".join(e.get("stdout", "") + "\n" for e in self.events)[-6000:]


@pytest.fixture(scope="module")
def fleet(module_fleets):
    fleet = module_fleets("runner")
    fleet.up("gcp_b200", nodes=len(NODES), group=GROUP)
    return fleet


@pytest.fixture(scope="module")
def inventory(fleet, tmp_path_factory) -> Path:
    """An inventory directory as a job's project would hold it: the fleet's hosts and the collection's fleetsim
    settings (its groups and group_vars)."""
    root = tmp_path_factory.mktemp("inventory")
    fleet.inventory(root / "10-fleet.yml")
    shutil.copy(REPO / "inventories" / "fleetsim" / "hosts.yml", root / "20-fleetsim.yml")
    (root / "group_vars").symlink_to(REPO / "inventories" / "fleetsim" / "group_vars")
    return root


@pytest.fixture(scope="module")
def launch(inventory, tmp_path_factory):
    def run(playbook: str, extravars: dict | None = None, limit: str = GROUP) -> Job:
        private = tmp_path_factory.mktemp("job")
        events: list = []

        def keep(event: dict) -> bool:
            events.append(event)
            return True  # runner keeps (and writes) only the events a handler returns True for

        variables = env()
        variables["PATH"] = "%s:%s" % (VENV_BIN, variables.get("PATH", ""))
        runner = ansible_runner.run(
            private_data_dir=str(private), project_dir=str(REPO), playbook=str(REPO / "playbooks" / playbook),
            inventory=str(inventory), limit=limit, extravars=extravars or {}, event_handler=keep, quiet=True,
            timeout=RUN_TIMEOUT, process_isolation=False,
            envvars={key: variables[key] for key in ("PATH", "ANSIBLE_CONFIG", "ANSIBLE_COLLECTIONS_PATH",
                                                     "PYTHONDONTWRITEBYTECODE")})
        assert runner.status in ("successful", "failed"), "%s: %s (rc %s)\n%s" % (
            playbook, runner.status, runner.rc, Job(runner, events).text())
        return Job(runner, events)

    return run


@pytest.fixture(scope="module")
def converged(launch):
    job = launch("site.yml", {"gpufleet_serial": "100%"})
    assert job.runner.status == "successful", job.text()
    assert job.hosts_with("runner_on_failed") == set() and job.hosts_with("runner_on_unreachable") == set()
    assert set(NODES) <= set(job.stats["ok"]), job.stats
    return job


PLAN_TASK = "Plan the lane of the node"  # site.yml's first play; site_plan also records and reports later


def _plan_results(job: Job) -> dict:
    return {e["event_data"]["host"]: e["event_data"]["res"] for e in job.host_events("runner_on_ok")
            if e["event_data"].get("task") == PLAN_TASK}


def test_first_converge_reports_every_node_ok_and_changed(converged):
    stats = converged.stats
    assert set(NODES) <= set(stats["changed"]), stats
    assert not stats.get("failures") and not stats.get("dark"), stats
    for node in NODES:
        assert converged.host_events("runner_on_ok", node), node
    # The stats event closes the job, as AWX's job summary reads it.
    assert converged.events[-1]["event"] == "playbook_on_stats"


def test_audit_through_runner_reads_every_node_and_changes_nothing(converged, launch, tmp_path):
    out = tmp_path / "audit"
    job = launch("audit.yml", {"audit_output_dir": str(out)})
    assert job.runner.status == "successful" and job.runner.rc == 0, job.text()
    stats = job.stats
    assert set(NODES) <= set(stats["ok"]), stats
    assert not stats.get("failures") and not stats.get("dark"), stats
    # Nothing changed on a node: the one change is the report the controller writes (run once, delegated to
    # localhost, counted on the first host).
    changed = [e["event_data"] for e in job.host_events("runner_on_ok") if e["event_data"]["res"].get("changed")]
    assert [e["task_action"] for e in changed] == ["gpufleet.deepep.audit_fleet_report"], changed
    node_tasks = [e["event_data"] for e in job.host_events("runner_on_ok")
                  if e["event_data"]["task_action"] == "gpufleet.deepep.node_stack"]
    assert sorted(e["host"] for e in node_tasks) == NODES
    assert not any(e["res"].get("changed") for e in node_tasks)
    assert job.hosts_with("runner_on_ok") >= set(NODES)
    assert job.hosts_with("runner_on_failed") == set()
    report = json.loads((out / "fleet.json").read_text())
    assert report["summary"]["nodes"] == len(NODES) and report["summary"]["unreachable"] == 0, report["summary"]
    assert sorted(report["nodes"]) == NODES


def test_noop_converge_through_runner_finds_every_node_intact(converged, launch):
    job = launch("site.yml")
    assert job.runner.status == "successful" and job.runner.rc == 0, job.text()
    assert not job.stats.get("changed") and not job.stats.get("failures"), job.stats
    lanes = {host: res["lane"] for host, res in _plan_results(job).items()}
    assert lanes == dict.fromkeys(NODES, "intact"), lanes
    # No phase ran: no event of any phase role's task on any node.
    assert not [e for e in job.host_events("runner_on_ok") if e["event_data"].get("role") == "preflight"]


def test_a_broken_node_is_that_hosts_failure_event(converged, launch, fleet):
    # A broken image: the node's /usr/bin/python3 (the inventory's interpreter) fails every module.
    fleet.ssh(BROKEN, "mv /usr/bin/python3 /usr/bin/python3.saved && "
                      "printf '#!/bin/sh\\necho broken image >&2\\nexit 3\\n' > /usr/bin/python3 && "
                      "chmod 755 /usr/bin/python3")
    try:
        job = launch("site.yml")
    finally:
        fleet.ssh(BROKEN, "mv -f /usr/bin/python3.saved /usr/bin/python3")
    assert job.runner.status == "failed" and job.runner.rc == 2, (job.runner.status, job.runner.rc)
    assert job.hosts_with("runner_on_failed") == {BROKEN}
    failed = job.host_events("runner_on_failed", BROKEN)[0]["event_data"]
    assert (failed["task"], failed["task_action"]) == (PLAN_TASK, "gpufleet.deepep.site_plan"), failed["task"]
    assert "broken image" in json.dumps(failed["res"]), failed["res"]
    assert job.stats["failures"] == {BROKEN: 1}, job.stats
    assert not job.stats.get("dark"), job.stats
    lanes = {host: res["lane"] for host, res in _plan_results(job).items()}
    assert lanes == {node: "intact" for node in NODES if node != BROKEN}, lanes
    # What AWX stores: the same failure among the job events runner wrote as JSON files.
    written = [json.loads(path.read_text()) for path in
               Path(job.runner.config.artifact_dir, "job_events").glob("*.json")]
    assert {e["event_data"]["host"] for e in written if e["event"] == "runner_on_failed"} == {BROKEN}
    assert [e for e in written if e["event"] == "playbook_on_stats"]
