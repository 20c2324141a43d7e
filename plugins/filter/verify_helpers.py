# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of the fleet verification (roles verify_intranode and verify_internode).

Each filter is documented in ``<filter name>.yml`` beside this file. The logic lives in ``plugins/plugin_utils/_verify/``
and ``_thresholds.py``; the master address is checked here with netaddr, on the controller. A run's judgement (its
gate, the connectivity test) is ep_test's judge option (``_verify/judge.py``), not a filter.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._filter_guard import guard_filters
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.plan import fabric_interface, internode_plan
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import (
    VerifyInputError,
    select_thresholds,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.backends import resolve as _resolve_backend
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.jit import jit_verdict
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import records as _records
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.stages import intranode_stages, internode_stages
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.summary import render_markdown, summarize
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.sweep import sweep_plan, sweep_verdict
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.traffic import nic_traffic

try:
    import netaddr
except ImportError:
    netaddr = None


def _call(name, func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except VerifyInputError as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc)) from exc


def verify_ranks(groups, inventory_groups, masters=None, only_hosts=None):
    """Internode runs over inventory groups: master (rank 0) first, then the group's order."""
    return _call("verify_ranks", internode_plan, groups, inventory_groups, masters=masters, only_hosts=only_hosts)


def _ip(text):
    try:
        return netaddr.IPAddress(str(text).split("%", 1)[0])
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return None


def verify_master_address(facts, address=None, interface=None, ansible_host=None):
    """Check (or choose) MASTER_ADDR: an address of the master on its fabric-facing interface."""
    if netaddr is None:
        raise AnsibleFilterError("verify_master_address: the netaddr Python library is required on the controller "
                                 "(pip install netaddr)")
    chosen = _call("verify_master_address", fabric_interface, facts, interface=interface, ansible_host=ansible_host)
    own = [ip for ip in (_ip(a) for a in chosen["addresses"]) if ip is not None]
    if not own:
        raise AnsibleFilterError("verify_master_address: interface %r of the master has no IP address"
                                 % chosen["interface"])
    if address in (None, ""):
        usable = [ip for ip in own if ip.version == 4 and not ip.is_loopback()] or [ip for ip in own if not ip.is_loopback()]
        if not usable:
            raise AnsibleFilterError("verify_master_address: interface %r of the master has only loopback addresses"
                                     % chosen["interface"])
        picked = usable[0]
    else:
        picked = _ip(address)
        if picked is None:
            raise AnsibleFilterError("verify_master_address: %r is not an IP address; expected an IPv4 or IPv6 "
                                     "address of the master, e.g. 10.8.0.2" % (address,))
        if picked.is_loopback() or str(picked) in ("0.0.0.0", "::"):
            raise AnsibleFilterError("verify_master_address: %s cannot be MASTER_ADDR (loopback or unspecified); "
                                     "use the master's address on %s" % (picked, chosen["interface"]))
        if picked not in own:
            raise AnsibleFilterError("verify_master_address: %s is not an address of the master on its fabric-facing "
                                     "interface %s (addresses: %s)"
                                     % (picked, chosen["interface"], ", ".join(str(ip) for ip in own)))
    return {"address": str(picked), "interface": chosen["interface"], "version": picked.version,
            "addresses": [str(ip) for ip in own]}


def verify_thresholds(table, profile=None, gpus=None, family=None, scope=None):
    """The thresholds of a profile: exact name, then the GPU family it declares (``family``, gpufleet_gpu_family),
    then a family token of the name (b200, h200...); ``default`` only for the profile ``default`` or none, any other
    profile refused; with ``gpus``, the gate measured for that GPU count where the entry has one (``by_gpus``); with
    ``scope``, ``table`` overrides the collection's gates of that scope."""
    return _call("verify_thresholds", select_thresholds, table, profile, gpus, family=family, scope=scope)


def verify_nic_traffic(before, after, min_bytes=1048576, rdma_gbps=None, mapping=None, mapping_supported=None):
    """Judge port_xmit_data of every ACTIVE NIC before and after an internode run."""
    return _call("verify_nic_traffic", nic_traffic, before, after, min_bytes=min_bytes, rdma_gbps=rdma_gbps,
                 mapping=mapping, mapping_supported=mapping_supported)


def verify_jit(before, after, run_seconds=None, require_warm=False):
    """What DeepEP V2's JIT did in a run: kernels compiled or loaded, from the cache facts before and after it."""
    return _call("verify_jit", jit_verdict, before, after, run_seconds=run_seconds, require_warm=require_warm)


def ep_backend(name, gathered=None, v2_tests=False):
    """The descriptor of an EP backend (its tests per scope, generation, JIT) by name or generation; ``auto``
    resolved from the installed DeepEP's generation (``gathered``), else whether the tree has V2's tests."""
    return _call("ep_backend", _resolve_backend, name, gathered=gathered, v2_tests=v2_tests)


def verify_summary(records, missing_hosts=None):
    """Summary data (rows, failures, counts) of verification records."""
    return _call("verify_summary", summarize, records, missing_hosts=missing_hosts)


def verify_summary_markdown(summary, title=None):
    """Markdown table of a verify_summary result."""
    return _call("verify_summary_markdown", render_markdown, summary, title=title)


def verify_sweep_plan(hosts):
    """The pairwise sweep of a group (a chain of N-1 pairs in two rounds of disjoint pairs)."""
    return _call("verify_sweep_plan", sweep_plan, hosts)


def verify_sweep_verdict(hosts, results, group=None):
    """The node or pair the sweep's results name; with ``group``, each host's isolation record too."""
    return _call("verify_sweep_verdict", sweep_verdict, hosts, results, group=group)


def verify_group_go(hostvars, hosts, play_hosts, connectivity=True):
    """Whether an internode group goes on from its connectivity test to the full test."""
    return _call("verify_group_go", _records.group_go, hostvars, hosts, play_hosts, connectivity=connectivity)


def verify_record_jit(result, before=None, after=None, enabled=True, require_warm=False):
    """ep_test's record of an intranode run with what V2's JIT did in it (jit)."""
    return _call("verify_record_jit", _records.record_with_jit, result, before=before, after=after, enabled=enabled,
                 require_warm=require_warm)


def verify_run_env(env, jit_cache_dir=None, transport_env=None):
    """The env of an intranode run (the site's env, the JIT cache, the transport env)."""
    return _call("verify_run_env", _records.run_env, env, jit_cache_dir=jit_cache_dir, transport_env=transport_env)


def verify_sweep_judge(judge, pair, group, host):
    """The judge option of a host's run in a sweep pair."""
    return _call("verify_sweep_judge", _records.sweep_judge, judge, pair, group, host)


def verify_run_line(run, port):
    """One line that shows an internode run."""
    return _call("verify_run_line", _records.run_line, run, port)


def verify_failure_message(summary, what, run_dir, name, reasons=True):
    """The message of a verification summary that failed."""
    return _call("verify_failure_message", _records.failure_message, summary, what, run_dir, name, reasons=reasons)


def verify_play_records(hostvars, hosts, internode=True):
    """The verification records of a play's hosts (intranode and low latency, then internode)."""
    return _call("verify_play_records", _records.play_records, hostvars, hosts, internode=internode)


def verify_intranode_stages(backend, scopes, settings):
    """The stages of a node's verification, each one ep_test run (verify_intranode's one test task loops over them)."""
    return _call("verify_intranode_stages", intranode_stages, backend, scopes, settings)


def verify_internode_stages(scope, settings):
    """The stages of a node in a group's run, each one ep_test run (verify_internode's one test task loops over them)."""
    return _call("verify_internode_stages", internode_stages, scope, settings)


class FilterModule:
    """Fleet verification filters."""

    def filters(self):
        return guard_filters({
            "ep_backend": ep_backend,
            "verify_ranks": verify_ranks,
            "verify_master_address": verify_master_address,
            "verify_thresholds": verify_thresholds,
            "verify_nic_traffic": verify_nic_traffic,
            "verify_jit": verify_jit,
            "verify_summary": verify_summary,
            "verify_summary_markdown": verify_summary_markdown,
            "verify_sweep_plan": verify_sweep_plan,
            "verify_sweep_verdict": verify_sweep_verdict,
            "verify_group_go": verify_group_go,
            "verify_record_jit": verify_record_jit,
            "verify_run_env": verify_run_env,
            "verify_sweep_judge": verify_sweep_judge,
            "verify_run_line": verify_run_line,
            "verify_failure_message": verify_failure_message,
            "verify_play_records": verify_play_records,
            "verify_intranode_stages": verify_intranode_stages,
            "verify_internode_stages": verify_internode_stages,
        })
