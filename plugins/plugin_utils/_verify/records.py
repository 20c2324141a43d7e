# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the verify roles decide and keep around ep_test's runs: whether a group goes on from its connectivity test
(``group_go``), the record with the NIC traffic (``record_with_nic``) or V2's JIT (``record_with_jit``) the run
caused, the env of an intranode run (``run_env``), the judge option of a sweep pair (``sweep_judge``), the line
that shows an internode run (``run_line``), the message of a failed summary (``failure_message``) and the records of a
play's hosts (``play_records``).

Controller side: pure logic, the standard library and ansible-core's flatten.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.filter.core import flatten

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.jit import jit_verdict
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.traffic import nic_traffic

__all__ = ["group_go", "record_with_nic", "record_with_jit", "run_env", "sweep_judge", "run_line", "failure_message",
           "play_records"]


def _mapping(value, name, form):
    if not isinstance(value, dict):
        raise VerifyInputError("%s: %r is not a mapping; expected %s" % (name, value, form))
    return value


def _list(value, name, form):
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise VerifyInputError("%s: %r is not a list; expected %s" % (name, value, form))
    return list(value)


def _bool(value, name):
    if not isinstance(value, bool):
        raise VerifyInputError("%s: %r is not a boolean; expected true or false" % (name, value))
    return value


def _record(result, name):
    result = _mapping(result, name, "the result ep_test registered (with its record)")
    return _mapping(result.get("record"), name + ".record", "the record of ep_test's judge (a mapping)")


def _hostvars(hostvars):
    if not hasattr(hostvars, "keys") or not hasattr(hostvars, "__getitem__"):
        raise VerifyInputError("hostvars: %r is not a mapping; expected hostvars (inventory hostnames to their vars)"
                               % (hostvars,))
    return hostvars


def _host_var(hostvars, host, name):
    if host not in hostvars:
        raise VerifyInputError("hosts: %r is not a host of hostvars; expected inventory hostnames" % (host,))
    host_vars = hostvars[host]
    if name not in host_vars:
        raise VerifyInputError("host %s has no %s; expected the verify roles to have run on every host of the play"
                               % (host, name))
    return host_vars[name]


def group_go(hostvars, hosts, play_hosts, connectivity=True):
    """Whether an internode group goes on to the full test: without the connectivity test always; with it, when
    every host of the group (``hosts``) is still in the play (``play_hosts``) and the gate of each one's connectivity
    result (``verify_internode_conn_result`` in ``hostvars``) passed."""
    hostvars = _hostvars(hostvars)
    hosts = _list(hosts, "hosts", "the hosts of the group")
    play_hosts = _list(play_hosts, "play_hosts", "the hosts of the play (ansible_play_hosts)")
    if not _bool(connectivity, "connectivity"):
        return True
    members = set(play_hosts) & set(hosts)
    if len(members) != len(hosts):
        return False
    passed = []
    for host in sorted(members):
        result = _host_var(hostvars, host, "verify_internode_conn_result")
        gate = _mapping(_record(result, "%s's verify_internode_conn_result" % host).get("gate"),
                        "%s's verify_internode_conn_result.record.gate" % host,
                        "the gate of ep_test's record (a mapping with passed)")
        if "passed" not in gate:
            raise VerifyInputError("%s's verify_internode_conn_result.record.gate: %r has no passed; expected the gate "
                                   "of ep_test's record" % (host, gate))
        passed.append(bool(gate["passed"]))
    return all(passed)


def _min_bytes(value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise VerifyInputError("min_bytes: %r is not a byte count; expected an integer >= 0" % (value,))
    return value


def record_with_nic(result, before, after, min_bytes=1048576, mapping=None, mapping_supported=None):
    """ep_test's record of an internode run with ``nic``: unless the run timed out, the NIC traffic it caused
    (``nic_traffic`` of the ``gpufleet_rdma`` counters ``before`` and ``after`` it, with the run's BF16 dispatch RDMA
    figure and the GPU-NIC ``mapping`` it ran with, ``mapping_supported`` whether DeepEP applies it), else None."""
    record = _record(result, "result")
    if result.get("timed_out"):
        return dict(record, nic=None)
    try:
        gbps = record["parsed"]["dispatch"]["bf16"]["rdma_gbps"]
    except (KeyError, TypeError):
        raise VerifyInputError("result.record.parsed: %r has no dispatch.bf16.rdma_gbps; expected the parsed "
                               "output of an internode test" % (record.get("parsed"),)) from None
    return dict(record, nic=nic_traffic(before, after, min_bytes=_min_bytes(min_bytes), rdma_gbps=gbps,
                                        mapping=mapping, mapping_supported=mapping_supported))


def _jit_facts(registered, name):
    registered = _mapping(registered, name, "the registered result of gpufleet.deepep.node_stack with jit_cache")
    facts = registered.get("ansible_facts")
    if not isinstance(facts, dict) or "gpufleet_deepep_jit" not in facts:
        raise VerifyInputError("%s: %r has no ansible_facts.gpufleet_deepep_jit; expected the registered result of "
                               "gpufleet.deepep.node_stack with jit_cache" % (name, registered))
    return facts["gpufleet_deepep_jit"]


def record_with_jit(result, before=None, after=None, enabled=True, require_warm=False):
    """ep_test's record of an intranode run with ``jit``: when ``enabled``, what V2's JIT did in it (``jit_verdict``
    of the cache facts that node_stack registered ``before`` and ``after`` the run, with the run's seconds), else
    None. ``require_warm``: a boolean, or a string or number Ansible reads as one (yes, no, 1, 0...)."""
    record = _record(result, "result")
    try:
        require_warm = boolean(require_warm, strict=True)
    except TypeError:
        raise VerifyInputError("require_warm: %r is not a boolean; expected true or false" % (require_warm,)) from None
    if _bool(enabled, "enabled"):
        jit = jit_verdict(_jit_facts(before, "before"), _jit_facts(after, "after"), run_seconds=result.get("seconds"),
                          require_warm=require_warm)
    else:
        jit = None
    return dict(record, jit=jit)


def run_env(env, jit_cache_dir=None, transport_env=None):
    """The env of an intranode run: the site's ``env``, then EP_JIT_CACHE_DIR (when given), then the transport env
    (when given); a later one wins. ep_test puts the backend's own env for the scope under it."""
    env = dict(_mapping(env, "env", "the env of the run (a mapping of names to values)"))
    if jit_cache_dir is not None:
        if not isinstance(jit_cache_dir, str) or not jit_cache_dir:
            raise VerifyInputError("jit_cache_dir: %r is not a path; expected the JIT cache directory or none"
                                   % (jit_cache_dir,))
        env["EP_JIT_CACHE_DIR"] = jit_cache_dir
    if transport_env is not None:
        env.update(_mapping(transport_env, "transport_env", "the transport env (a mapping of names to values)"))
    return env


def sweep_judge(judge, pair, group, host):
    """The judge option of ``host``'s run in a sweep ``pair`` of ``group``: ``judge`` with the stage sweep and the
    record's scope, group and rank."""
    judge = _mapping(judge, "judge", "the judge option of the internode runs")
    pair = _mapping(pair, "pair", "a pair of verify_sweep_plan (name, master, ranks)")
    if "name" not in pair:
        raise VerifyInputError("pair: %r has no name; expected a pair of verify_sweep_plan" % (pair,))
    ranks = _mapping(pair.get("ranks"), "pair.ranks", "the ranks of the pair (host to rank)")
    if host not in ranks:
        raise VerifyInputError("host: %r is not in pair %r; expected one of %s"
                               % (host, pair["name"], ", ".join(map(str, ranks))))
    return dict(judge, stage="sweep", record={"scope": "%s (sweep of %s)" % (pair["name"], group),
                                              "group": group, "rank": ranks[host]})


def run_line(run, port):
    """One line that shows an internode run: its group, world size, rendezvous and ranks."""
    run = _mapping(run, "run", "an internode run (group, world_size, master, master_addr, fabric_interface, ranks)")
    missing = [key for key in ("group", "world_size", "master", "master_addr", "fabric_interface", "ranks")
               if key not in run]
    if missing:
        raise VerifyInputError("run: %r has no %s; expected an internode run with its master address"
                               % (run, ", ".join(missing)))
    ranks = _mapping(run["ranks"], "run.ranks", "the ranks of the run (host to rank)")
    return "%s: WORLD_SIZE=%s MASTER_ADDR=%s (%s, %s) MASTER_PORT=%s RANK: %s" % (
        run["group"], run["world_size"], run["master_addr"], run["master"], run["fabric_interface"], port,
        ", ".join("%s=%s" % item for item in ranks.items()))


def failure_message(summary, what, run_dir, name, reasons=True):
    """The message of a summary that failed: the hosts that failed (each once), their reasons when ``reasons``, and
    the summary file."""
    summary = _mapping(summary, "summary", "a verify_summary result (with failures)")
    failures = _list(summary.get("failures"), "summary.failures", "the failures of a verify_summary result")
    for index, failure in enumerate(failures):
        if not isinstance(failure, dict) or "host" not in failure or "reasons" not in failure:
            raise VerifyInputError("summary.failures[%d]: %r is not a failure; expected a mapping with host and "
                                   "reasons" % (index, failure))
    hosts, seen = [], set()
    for failure in failures:
        # Each host once, the first spelling kept (Jinja's unique, which ignores the case of strings).
        key = failure["host"].lower() if isinstance(failure["host"], str) else failure["host"]
        if key not in seen:
            seen.add(key)
            hosts.append(failure["host"])
    text = "%s failed on %s" % (what, ", ".join(map(str, hosts)))
    if _bool(reasons, "reasons"):
        text += ": " + "; ".join(map(str, flatten([failure["reasons"] for failure in failures])))
    return "%s (summary: %s/%s.md)" % (text, run_dir, name)


def play_records(hostvars, hosts, internode=True):
    """The verification records of a play's ``hosts`` (in their order): each host's intranode record, its
    low-latency record, the records of V2's other tests and NCCL EP's beside DeepEP where it has them (not empty),
    then, with ``internode``,
    every host's internode records (one level flattened, nulls left out)."""
    hostvars = _hostvars(hostvars)
    hosts = _list(hosts, "hosts", "the hosts of the play (ansible_play_hosts)")
    # The low-latency record is optional (a play of an older verify role sets none).
    one_node = [record for host in hosts
                for record in [_host_var(hostvars, host, "verify_intranode_record"),
                               hostvars[host].get("verify_intranode_ll_record")]
                + list(hostvars[host].get("verify_intranode_extras_records") or [])
                + list(hostvars[host].get("verify_intranode_nccl_ep_records") or [])]
    records = [record for record in one_node if record]
    if _bool(internode, "internode"):
        records += flatten([_host_var(hostvars, host, "verify_internode_records") for host in hosts], levels=1)
    return records
