# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fault isolation of an internode group: the pairwise sweep run after the all-node test failed its gate, and
the verdict naming the node or the pair (link, NIC, cable) that is slow or broken.

The sweep is a chain: the group's hosts in order, each with the next (N-1 pairs, the fewest that put every node
in a run with a neighbour and every inner node in two). The pairs run in two rounds of disjoint pairs (first
(h0,h1), (h2,h3), ...; then (h1,h2), (h3,h4), ...), so the sweep costs two test runs of wall time whatever the
group size, and never more than N-1 pair runs. A node is named when every pair it is in failed and it is in two
(its neighbours passed elsewhere); a failed pair with no such node is named as the pair (their link or one of
the two NICs: the end node of a chain has only one pair, so the pair is as far as the sweep can say). Every pair
failed is a fabric-wide problem, unless one node is in all of them (the middle of three). A binary
split was not chosen: a half of one node cannot run an internode test, so it ends in pairs anyway, and it needs
log2(N) rounds one after another instead of two.

Pure logic, standard library only, Python 3.8+.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["SweepInputError", "sweep_plan", "sweep_verdict", "pair_name"]


class SweepInputError(VerifyInputError):
    """The hosts or results of a sweep are not what it reads; the message names the bad one."""


def pair_name(first, second):
    return "%s+%s" % (first, second)


def _hosts(hosts):
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise SweepInputError("hosts must be a list of host names (the group in rank order); got %r" % (hosts,))
    if not all(isinstance(h, str) and h.strip() and "+" not in h for h in hosts):
        raise SweepInputError("hosts must be non-empty host names without '+'; got %r" % (list(hosts),))
    if len(set(hosts)) != len(hosts):
        raise SweepInputError("hosts must not repeat a host; got %r" % (list(hosts),))
    return list(hosts)


def sweep_plan(hosts):
    """The chain of pairs over ``hosts``: ``{pairs: [{name, hosts, master, round}], rounds}``.

    Fewer than three hosts: no pairs (a group of two is its own pair; the all-node test already named it).
    """
    hosts = _hosts(hosts)
    if len(hosts) < 3:
        return {"pairs": [], "rounds": 0}
    pairs = []
    for index in range(len(hosts) - 1):
        first, second = hosts[index], hosts[index + 1]
        pairs.append({"name": pair_name(first, second), "hosts": [first, second], "master": first,
                      "ranks": {first: 0, second: 1}, "round": 1 + index % 2})
    return {"pairs": pairs, "rounds": 2}


def _merge_reports(reports):
    merged = {}
    for report in reports:
        if not isinstance(report, dict) or not isinstance(report.get("pair"), str) \
                or not isinstance(report.get("passed"), bool):
            raise SweepInputError("each sweep report must be {pair: 'a+b', passed: true/false}; got %r" % (report,))
        merged[report["pair"]] = merged.get(report["pair"], True) and report["passed"]
    return merged


def sweep_verdict(hosts, results, group=None):
    """Name the bad node or pair from the sweep's ``results``: pair name -> passed (or -> a record with ``passed``),
    or a list of ``{pair, passed}`` as each member of a pair reports it (a pair passes when every report passed).

    Returns ``{nodes, pairs, failed_pairs, passed_pairs, implicated, verdict}``: ``nodes`` the nodes every pair of
    which failed (in two pairs), ``pairs`` the failed pairs no named node explains, ``implicated`` the hosts the
    verdict names (those nodes, the members of those pairs, every host when every pair that ran failed),
    ``verdict`` one sentence. With ``group`` (the inventory group swept), also ``records``: host -> the sweep's
    verification record on that host (stage ``isolation``; it fails on an implicated host with the verdict as
    its reason), which the verify summary reads beside the test records.
    """
    hosts = _hosts(hosts)
    plan = sweep_plan(hosts)
    if isinstance(results, (list, tuple)):
        results = _merge_reports(results)
    if not isinstance(results, dict):
        raise SweepInputError("results must be a mapping of pair name (a+b) to passed (true/false), or a list of "
                              "{pair, passed}; got %r" % (results,))
    names = [p["name"] for p in plan["pairs"]]
    unknown = sorted(k for k in results if k not in names)
    if unknown:
        raise SweepInputError("results name pair(s) %s that the sweep of %s does not run; expected some of %s"
                              % (", ".join(unknown), ", ".join(hosts), ", ".join(names) or "none"))
    passed = {}
    for name in names:
        value = results.get(name)
        if isinstance(value, dict):
            value = value.get("passed")
        if value is None:
            continue
        if not isinstance(value, bool):
            raise SweepInputError("results[%r] must be true/false (or a record with passed); got %r" % (name, value))
        passed[name] = value
    failed = [n for n in names if passed.get(n) is False]
    ok = [n for n in names if passed.get(n) is True]
    nodes = []
    for host in hosts:
        mine = [p["name"] for p in plan["pairs"] if host in p["hosts"]]
        if len(mine) == 2 and all(passed.get(n) is False for n in mine):
            nodes.append(host)
    pairs = [n for n in failed if not any(h in nodes for h in n.split("+"))]
    if not plan["pairs"]:
        verdict = "no sweep: a group of %d node(s) is its own pair" % len(hosts)
    elif not passed:
        verdict = "the sweep gave no result"
    elif failed and len(failed) == len(names) and not (len(nodes) == 1 and not pairs):
        verdict = ("every pair failed: a fabric-wide or configuration problem (switch, subnet, the profile's gate), "
                   "not one node")
    elif not failed:
        verdict = ("every pair passed: the failure needs the whole group (scale, or a transient), not one node or "
                   "pair")
    else:
        parts = []
        if nodes:
            many = len(nodes) > 1
            parts.append("node%s %s (every pair with %s failed)"
                         % ("s" if many else "", ", ".join(nodes), "them" if many else "it"))
        if pairs:
            parts.append("pair%s %s (their link, or a NIC of one of the two)" % ("s" if len(pairs) > 1 else "",
                                                                                 ", ".join(pairs)))
        verdict = "slow or broken: " + "; ".join(parts)
    implicated = [host for host in hosts if host in nodes or any(host in pair.split("+") for pair in pairs)
                  or (failed and not ok)]
    result = {"nodes": nodes, "pairs": pairs, "failed_pairs": failed, "passed_pairs": ok, "implicated": implicated,
              "verdict": verdict}
    if group is not None:
        isolation = dict(result)
        result["records"] = dict((host, _isolation_record(host, group, isolation, host in implicated))
                                 for host in hosts)
    return result


def _isolation_record(host, group, verdict, named):
    """The sweep's verification record on ``host``: failed, with the verdict as its reason, where it is named."""
    return {"host": host, "scope": "%s (pairwise sweep)" % group, "group": group, "stage": "isolation",
            "test": "pairwise sweep", "parsed": {}, "isolation": verdict,
            "gate": {"passed": not named, "status": "fail" if named else "pass",
                     "reasons": ["pairwise sweep of %s: %s" % (group, verdict["verdict"])] if named else [],
                     "diagnosis": []}}
