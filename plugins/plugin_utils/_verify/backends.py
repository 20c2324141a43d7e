# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The EP backends the verify roles run, one descriptor each (as kubespray's network_plugin/<name>): per scope its
test, the arguments and environment that test runs with, and the transport policy its run is held to; the
generation its output is parsed as, and whether it compiles kernels at run time (a JIT cache to report).

ep_test resolves a backend's test, arguments, environment and transport policy here, so a role names the backend and
the scope (``backend: v2, scope: intranode``) instead of choosing the test file, V2's arguments and the policy in a
V1/V2 branch of its own; a new backend is a new entry of ``BACKENDS`` (and its output parser), not a change of the
roles. ``audit_runs`` says where the audit's rules of a backend (a rule's ``backends``) judge a node: a JMESPath
condition over its facts document (V2: the profile expects V2, or the installed build is V2).

Backends: DeepEP V1, DeepEP V2 and NCCL EP (whose test is the collection's launcher over ``nccl.ep``, beside the
verify launcher, high throughput for ``intranode``/``internode`` and low latency for the ``low_latency_*`` scopes).

Scopes: ``intranode`` (the GPUs of one node over NVLink), ``internode`` (every node of a group at once, also the
sweep's pairs), ``scaleup`` (every tray of one NVLink domain that spans hosts at once, GB200/GB300 NVL72: the
one-node test run across the trays, over multi-node NVLink and no NIC), ``low_latency_intranode`` and
``low_latency_internode`` (the decode kernels on one node over NVLink, and across the nodes of a group over RDMA). A
backend lists only the scopes it has a test for; asking another is refused by name. A scope's ``ranks`` lists the
process counts its test's kernels exist for (DeepEP's intranode kernels: 2, 4 and 8, ``SWITCH_RANKS`` in
csrc/kernels/intranode.cu); on another count the run is skipped with that reason (``skip_reason``), never started to
crash; ``divides`` (NCCL EP's benchmark: 256 experts) the count must divide. The trees the descriptors follow:
DeepEP V1 (its ``legacy`` branch, 567632d), DeepEP V2 (dd758ca, ``tests/elastic/``: test_ep.py covers one node and
many).

Transport policies (keys of ``transport_gate.check_policy``). Intranode: the GPUs talk over NVLink only (NCCL
channels P2P, NVSHMEM P2P), no CPU fallback. Across nodes (IB or RoCE NICs, NCCL's ``IB`` network either way): V1
runs NVSHMEM IBGDA with the GPU as NIC handler and no CPU-proxy fallback, NCCL with GPUDirect RDMA where it crosses
nodes; V2 runs NCCL GIN as GDAKI (not the CPU proxy, not none). V2 runs on the NCCL it was built against (DeepEP
#688: below NCCL 2.31 the two must match exactly). A site's own policy (``transport_policy``'s ``overrides``) is
merged over these per profile; the collection's are the strict ones every profile runs under.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FabricError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import fabric as fabric_of
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import test_args as fabric_test_args
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import token_key
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport import TransportInputError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.transport_gate import check_policy

__all__ = ["BACKENDS", "ALIASES", "SCOPES", "BackendError", "backend", "resolve", "test_of", "scope_of",
           "skip_reason", "check_overrides", "transport_policy"]

# The last four: DeepEP V2's other tests (tests/elastic/, experimental in the V2 release): Engram (0 SM, over RDMA),
# PP (0 SM send/recv, over RDMA), CP's all-gather/reduce-scatter (agrs, copy engine over NVLink), the barrier.
SCOPES = ("intranode", "internode", "scaleup", "low_latency_intranode", "low_latency_internode", "engram", "pp", "agrs",
          "barrier")

_NVLINK_ONLY = {"allow_paths": ["p2p"], "allow_transports": ["p2p"], "allow_cpu_fallback": False}
_RDMA = {"allow_networks": ["IB"], "allow_paths": ["p2p", "shm", "net_gdrdma"], "allow_cpu_fallback": False}
_IBGDA = dict(_RDMA, require_ibgda=True)
# Low latency on one node: NVSHMEM writes to the peers over NVLink (P2P); IBGDA may come up beside it on a node with
# NICs (DeepEP asks NVSHMEM for it), and a CPU-proxied path is refused as everywhere.
_LL_ONE_NODE = dict(_NVLINK_ONLY, allow_transports=["p2p", "ibgda"])
_INTRANODE_RANKS = [2, 4, 8]
# Across the trays of one NVLink domain (GB200/GB300 NVL72): NCCL's multi-node NVLink (MNNVL, its channels P2P), no
# network path, no CPU-proxied path. DeepEP V2's scale-up team is NCCL's LSA team, which MNNVL makes the domain.
_MNNVL = dict(_NVLINK_ONLY, require_mnnvl=True)
# V2's other tests on one node: no CPU-proxied path; where they need RDMA the NIC decides, not NVLink.
_NO_PROXY = {"allow_cpu_fallback": False}
# What the lent 1 x H200 (no NIC, GIN off, V2 dd758ca, NCCL 2.30.7) showed: the barrier ran (1.402 us); the
# all-gather/reduce-scatter asserted "nccl_context->num_ranks > 1" (csrc/elastic/buffer.hpp:382); test_pp.py asserts
# num_ranks > 1 and reads the RDMA rate through ibstat; Engram's fetch (over RDMA) died with
# CUDA_ERROR_MISALIGNED_ADDRESS in engram_fetch (tests/fixtures/captured/h200x1/v2-extras-1gpu.json).
_NEEDS_NIC_ENGRAM = ("Engram fetches over RDMA: on a node without a GIN-capable NIC its fetch died with "
                     "CUDA_ERROR_MISALIGNED_ADDRESS (1 x H200, V2 dd758ca)")
_NEEDS_NIC_PP = "PP sends and receives over RDMA and reads the NIC's rate through ibstat"

_NEP_TEST = "nccl_ep_bench.py"
# One node: NCCL's own paths between the GPUs over NVLink (LSA), nothing proxied through the CPU; NCCL EP brings up
# no NVSHMEM. Across nodes: NCCL's IB network with GPUDirect RDMA and GIN as GDAKI (NCCL_GIN_TYPE=3, what NCCL EP's
# RELEASE.md recommends on InfiniBand and RoCE), not the CPU proxy.
_NEP_ONE_NODE = {"allow_paths": ["p2p"], "allow_cpu_fallback": False}
_NEP_RDMA = dict(_RDMA, allow_gin=["GDAKI"])
_NEP_GIN = {"NCCL_GIN_TYPE": "3"}
# The shapes of DeepEP's tests, so the two backends run side by side on the same work: high throughput as DeepEP's
# intranode test (4096 tokens, hidden 7168, top-8, 256 experts: also ep_bench's HT default), low latency as DeepEP's
# test_low_latency.py (128 tokens, hidden 7168, top-8, 288 experts; NVIDIA's reference table used 256, and the lent
# H200 gave the same within run-to-run spread on both: 235-247 / 365-383 GB/s at 256, 252-259 / 376-378 at 288).
# The experts split evenly over the ranks (ep_bench refuses another count).
_NEP_EXPERTS = 256
_NEP_LL_EXPERTS = 288
_NEP_LL_ARGS = ["--algorithm", "ll", "--experts", str(_NEP_LL_EXPERTS)]

BACKENDS = {
    "deepep_v1": {
        "title": "DeepEP V1",
        "generation": "v1",
        "jit": False,
        # Where the audit's rules of this backend judge a node (its facts document, the audit engine's JMESPath).
        "audit_runs": "gpufleet_deepep.generation == 'v1'",
        "scopes": {
            "intranode": {"test": "tests/test_intranode.py", "transport": _NVLINK_ONLY, "ranks": _INTRANODE_RANKS},
            "internode": {"test": "tests/test_internode.py", "transport": _IBGDA},
            # No scaleup: V1's normal kernels do not span the trays of an NVL72 domain (DeepEP #579, open: "currently
            # not public"); asking it is refused by name.
            "low_latency_intranode": {"test": "tests/test_low_latency.py", "transport": _LL_ONE_NODE},
            "low_latency_internode": {"test": "tests/test_low_latency.py", "transport": _IBGDA},
        },
    },
    "deepep_v2": {
        "title": "DeepEP V2",
        "generation": "v2",
        "jit": True,
        "audit_runs": "expect.deepep_v2 == `true` || gpufleet_deepep.generation == 'v2'",
        "scopes": {
            # One node: the elastic test without RDMA (GIN off, no hybrid mode).
            "intranode": {"test": "tests/elastic/test_ep.py", "args": ["--allow-hybrid-mode", "0"],
                          "env": {"EP_DISABLE_GIN": "1"}, "transport": dict(_NVLINK_ONLY, require_nccl_match=True)},
            "internode": {"test": "tests/elastic/test_ep.py",
                          "transport": dict(_RDMA, allow_gin=["GDAKI"], require_nccl_match=True)},
            # The trays of one NVLink domain: the elastic test across hosts with GIN off and no hybrid kernels, so
            # every rank is a scale-up peer (NCCL's LSA team over MNNVL) and nothing goes through a NIC.
            "scaleup": {"test": "tests/elastic/test_ep.py", "args": ["--allow-hybrid-mode", "0"],
                        "env": {"EP_DISABLE_GIN": "1", "NCCL_MNNVL_ENABLE": "1"},
                        "transport": dict(_MNNVL, require_nccl_match=True)},
            # V2 keeps V1's low-latency kernels behind its legacy buffer (over NVSHMEM, as V1).
            "low_latency_intranode": {"test": "tests/legacy/test_low_latency.py", "transport": _LL_ONE_NODE},
            "low_latency_internode": {"test": "tests/legacy/test_low_latency.py", "transport": _IBGDA},
            # The other tests, on one node: GIN off and no hybrid kernels where the node has no NIC (as the elastic
            # test there); min_ranks and needs_rdma say what the hardware must have, else the run is skipped.
            "engram": {"test": "tests/elastic/test_engram.py", "transport": _NO_PROXY, "needs_rdma": _NEEDS_NIC_ENGRAM},
            "pp": {"test": "tests/elastic/test_pp.py", "transport": _NO_PROXY, "min_ranks": 2,
                   "needs_rdma": _NEEDS_NIC_PP},
            "agrs": {"test": "tests/elastic/test_agrs.py", "transport": _NO_PROXY, "min_ranks": 2,
                     "env_without_rdma": {"EP_DISABLE_GIN": "1"}},
            "barrier": {"test": "tests/elastic/test_barrier.py", "transport": _NO_PROXY,
                        "args_without_rdma": ["--allow-hybrid-mode", "0"], "env_without_rdma": {"EP_DISABLE_GIN": "1"}},
        },
    },
    # NCCL EP (NVIDIA/nccl contrib/nccl_ep, the wheel nccl-extensions 0.1.0 with libnccl_ep 0.2.0, on NCCL 2.30.7):
    # dispatch and combine on NCCL's device API, LSA over NVLink and GIN over RDMA. Its test is the collection's own
    # launcher over nccl.ep (roles/verify_common/files/nccl_ep_bench.py, placed beside the verify launcher; NCCL EP
    # ships no test runnable without MPI): high throughput for the normal scopes, low latency for the decode ones,
    # on DeepEP's tests' shapes. It compiles its kernels at run time (NCCL_EP_JIT_NVCC / CUDA_HOME's nvcc).
    "nccl_ep": {
        "title": "NCCL EP",
        "generation": "nccl_ep",
        # libnccl_ep compiles its kernels at run time into a cache of its own; ``jit`` says V2's cache, which the
        # verify roles read and report, so it is False here.
        "jit": False,
        "audit_runs": "expect.nccl_ep == `true` || gpufleet_nccl_ep.installed == `true`",
        "scopes": {
            "intranode": {"test": _NEP_TEST, "beside_launcher": True, "args": ["--algorithm", "ht"],
                          "transport": _NEP_ONE_NODE, "divides": _NEP_EXPERTS},
            "internode": {"test": _NEP_TEST, "beside_launcher": True, "args": ["--algorithm", "ht"],
                          "env": _NEP_GIN, "transport": _NEP_RDMA},
            "low_latency_intranode": {"test": _NEP_TEST, "beside_launcher": True, "args": _NEP_LL_ARGS,
                                      "transport": _NEP_ONE_NODE, "divides": _NEP_LL_EXPERTS},
            "low_latency_internode": {"test": _NEP_TEST, "beside_launcher": True, "args": _NEP_LL_ARGS,
                                      "env": _NEP_GIN, "transport": _NEP_RDMA},
        },
    },
}

# The names the roles' generation settings use (verify_intranode_generation: v2).
ALIASES = {"v1": "deepep_v1", "v2": "deepep_v2"}

_OVERRIDE_FORM = ("a mapping of profile name, GPU family or default to a policy (keys of transport_gate's policy, "
                  "optionally by_backend: {backend: policy keys})")


class BackendError(VerifyInputError):
    """A backend or scope the collection has no descriptor for, named with the ones it has."""


def _names():
    return ", ".join(sorted(BACKENDS) + sorted(ALIASES))


def backend(name):
    """The descriptor of ``name`` (a backend name or its alias), with its ``name`` and ``tests`` (scope -> test);
    BackendError naming it."""
    key = ALIASES.get(name, name) if isinstance(name, str) else name
    if key not in BACKENDS:
        raise BackendError("backend %r is not one the collection runs; expected one of %s" % (name, _names()))
    descriptor = dict(BACKENDS[key], name=key)
    descriptor["tests"] = dict((scope, entry["test"]) for scope, entry in descriptor["scopes"].items())
    return descriptor


def resolve(name, gathered=None, v2_tests=False):
    """The descriptor of ``name``, where ``auto`` is resolved on what the node has: the generation of the installed
    DeepEP (``gathered``, node_stack's ``gpufleet_deepep.generation``: ``v1`` or ``v2``) when known, else V2 when its
    tree has V2's tests (``v2_tests``: tests/elastic/test_ep.py exists), else V1."""
    if name == "auto":
        name = gathered if gathered in ("v1", "v2") else ("v2" if v2_tests else "v1")
    return backend(name)


def scope_of(name, scope, fabric=None):
    """What ``name`` runs for ``scope``: ``{test, args, env, transport, args_without_rdma, env_without_rdma,
    beside_launcher}`` (args and env empty where it has none; ``beside_launcher``: the test ships with the collection
    and lies beside the verify launcher, not in the backend's source tree). On the profile's ``fabric``, ``args`` ends
    with what the fabric's entry gives that test (``_fabrics.test_args``: DeepEP V2 across EFA nodes, ``--num-sms``).
    BackendError for a scope it has no test for, or a fabric the collection does not know."""
    descriptor = backend(name)
    if scope not in descriptor["scopes"]:
        raise BackendError("%s has no %s test (scope=%r); expected one of %s, or a script of your own"
                           % (descriptor["title"], scope, scope, ", ".join(sorted(descriptor["scopes"]))))
    entry = descriptor["scopes"][scope]
    try:
        on_fabric = fabric_test_args(fabric, descriptor["name"], scope)
    except FabricError as exc:
        raise BackendError(str(exc))
    return {"test": entry["test"], "args": list(entry.get("args") or []) + on_fabric,
            "env": dict(entry.get("env") or {}),
            "transport": dict(entry["transport"]), "args_without_rdma": list(entry.get("args_without_rdma") or []),
            "env_without_rdma": dict(entry.get("env_without_rdma") or {}),
            "beside_launcher": bool(entry.get("beside_launcher"))}


def skip_reason(name, scope, num_processes, rdma=None):
    """Why backend ``name`` cannot run its ``scope`` test on ``num_processes`` local ranks (its kernels exist for
    other counts, it needs more ranks) or on a node without an RDMA NIC (``rdma`` False; None: not known, not
    judged), or None where it can; BackendError for a scope it has no test for."""
    descriptor = backend(name)
    scope_of(name, scope)
    entry = descriptor["scopes"][scope]
    ranks, least = entry.get("ranks"), entry.get("min_ranks")
    count = int(num_processes)
    if ranks and count not in ranks:
        return ("not run: %s's %s kernels exist for %s local ranks (DeepEP's SWITCH_RANKS), and this node runs %d"
                % (descriptor["title"], scope, ", ".join(str(n) for n in ranks), count))
    experts = entry.get("divides")
    if experts and experts % count:
        return ("not run: %s's %s test splits %d experts evenly over the ranks, and this node runs %d"
                % (descriptor["title"], scope, experts, count))
    if least and count < least:
        return ("not run: %s's %s test needs at least %d ranks, and this node runs %d"
                % (descriptor["title"], scope, least, count))
    if entry.get("needs_rdma") and rdma is False:
        return "not run: the node has no RDMA NIC, and %s's %s test needs one (%s)" % (
            descriptor["title"], scope, entry["needs_rdma"])
    return None


def test_of(name, scope):
    """The test ``name`` runs for ``scope``, relative to its source tree; BackendError for a scope it has none for."""
    return scope_of(name, scope)["test"]


def _checked(where, keys):
    try:
        check_policy(keys)
    except TransportInputError as exc:
        raise BackendError("%s: %s" % (where, exc)) from exc
    return keys


def check_overrides(overrides):
    """Every entry of a site's policy table checked (a typo in any profile fails before any run)."""
    if not isinstance(overrides, dict):
        raise BackendError("transport policies must be %s; got %r" % (_OVERRIDE_FORM, overrides))
    for name, entry in overrides.items():
        entry = {} if entry is None else entry
        if not isinstance(entry, dict):
            raise BackendError("transport policy %r must be a mapping (%s); got %r" % (name, _OVERRIDE_FORM, entry))
        own = _checked("transport policy %r" % (name,), dict((k, v) for k, v in entry.items() if k != "by_backend"))
        by_backend = entry.get("by_backend") or {}
        if not isinstance(by_backend, dict):
            raise BackendError("transport policy %r by_backend must be a mapping of backend to policy keys; got %r"
                               % (name, by_backend))
        for key, keys in by_backend.items():
            if ALIASES.get(key, key) not in BACKENDS:
                raise BackendError("transport policy %r by_backend key %r is not a backend; expected one of %s"
                                   % (name, key, _names()))
            if not isinstance(keys, dict):
                raise BackendError("transport policy %r by_backend[%r] must be a mapping of policy keys; got %r"
                                   % (name, key, keys))
            _checked("transport policy %r by_backend[%r]" % (name, key), dict(own, **keys))


def _matched(overrides, profile, family):
    """The key of ``overrides`` a profile takes: its exact name, its declared family, a key that is a token of its
    name (the gates' token rule), then ``default``; None when none applies."""
    if profile and profile in overrides:
        return profile
    if family and family in overrides:
        return family
    token = token_key(overrides, profile)
    if token is not None:
        return token
    return "default" if "default" in overrides else None


def _on_fabric(descriptor, scope, policy, name):
    """The backend's policy of a scope across nodes on the profile's fabric ``name``: the NCCL networks the fabric
    has, and the backend refused by name where its policy needs what the fabric lacks (IBGDA, a GIN type)."""
    if "allow_networks" not in policy:
        return policy
    fab = fabric_of(name)
    why = fab["refuses"].get(descriptor["name"])
    if why:
        raise BackendError("%s cannot run %s on the fabric %s: %s" % (descriptor["title"], scope, fab["title"], why))
    if policy.get("require_ibgda") and not fab["ibgda"]:
        raise BackendError("%s runs %s over NVSHMEM IBGDA, which the fabric %s does not have; expected a backend whose "
                           "policy the fabric meets" % (descriptor["title"], scope, fab["title"]))
    out = dict(policy, allow_networks=list(fab["nccl_networks"]))
    if policy.get("allow_gin"):
        # A descriptor's GDAKI is GIN driven by the GPU: on this fabric, the GPU-initiated type it has.
        out["allow_gin"] = list(dict.fromkeys(fab["gin_gpu"] if gin == "GDAKI" else gin for gin in policy["allow_gin"]))
        if not set(out["allow_gin"]) & set(fab["gin"]):
            raise BackendError("%s runs %s over NCCL GIN %s, which the fabric %s does not have (it has %s)"
                               % (descriptor["title"], scope, "/".join(policy["allow_gin"]), fab["title"],
                                  "/".join(fab["gin"]) or "none"))
    return out


def transport_policy(name, scope, overrides=None, profile=None, family=None, fabric=None):
    """The transport policy a run of backend ``name`` in ``scope`` is held to: the descriptor's, on the profile's
    ``fabric`` where one is declared (its NCCL networks across nodes; a backend that needs what it lacks refused), with
    the site's entry for the profile merged over it (``overrides``: profile name, GPU family or ``default`` -> policy
    keys, and ``by_backend`` -> keys for one backend; a key given replaces the descriptor's key of that name).

    Returns ``{backend, scope, profile, fabric, matched, policy}``; ``matched`` is the site's entry taken, or None
    where the collection's policy applies as it is. BackendError names a bad backend, scope, fabric, entry, key or
    value."""
    if profile is not None and not isinstance(profile, str):
        raise BackendError("profile %r is not a string; expected a profile name" % (profile,))
    descriptor = backend(name)
    policy = scope_of(name, scope)["transport"]
    if fabric:
        policy = _on_fabric(descriptor, scope, policy, fabric)
    overrides = {} if overrides is None else overrides
    check_overrides(overrides)
    matched = _matched(overrides, profile, family)
    if matched is not None:
        entry = overrides[matched] or {}
        policy.update((k, v) for k, v in entry.items() if k != "by_backend")
        by_backend = entry.get("by_backend") or {}
        for key in (descriptor["name"],) + tuple(alias for alias, target in ALIASES.items() if target == descriptor["name"]):
            policy.update(by_backend.get(key) or {})
    return {"backend": descriptor["name"], "scope": scope, "profile": profile, "fabric": fabric or None,
            "matched": matched, "policy": policy}
