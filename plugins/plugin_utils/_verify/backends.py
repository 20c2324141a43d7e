# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The EP backends the verify roles run, one descriptor each (as kubespray's network_plugin/<name>): its tests per
scope, the generation its output is parsed as, and whether it compiles kernels at run time (a JIT cache to report).
ep_test resolves a backend's test and parser here, so a role names the backend and the scope (``backend: v2,
scope: intranode``) instead of choosing the test file and the parser in a V1/V2 branch of its own.

Scopes: ``intranode`` (the GPUs of one node over NVLink), ``internode`` (every node of a group at once, also the
sweep's pairs), ``low_latency`` (the decode path: RDMA, or NVLink P2P within one node). A backend lists only the
scopes it has a test for; asking another is refused by name. The trees the descriptors follow: DeepEP V1 (its
``legacy`` branch, 567632d), DeepEP V2 (dd758ca, ``tests/elastic/``: test_ep.py covers one node and many).
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["BACKENDS", "ALIASES", "SCOPES", "BackendError", "backend", "resolve", "test_of"]

SCOPES = ("intranode", "internode", "low_latency")

BACKENDS = {
    "deepep_v1": {
        "title": "DeepEP V1",
        "generation": "v1",
        "tests": {"intranode": "tests/test_intranode.py", "internode": "tests/test_internode.py",
                  "low_latency": "tests/test_low_latency.py"},
        "jit": False,
    },
    "deepep_v2": {
        "title": "DeepEP V2",
        "generation": "v2",
        "tests": {"intranode": "tests/elastic/test_ep.py", "internode": "tests/elastic/test_ep.py"},
        "jit": True,
    },
}

# The names the roles' generation settings use (verify_intranode_generation: v2).
ALIASES = {"v1": "deepep_v1", "v2": "deepep_v2"}


class BackendError(VerifyInputError):
    """A backend or scope the collection has no descriptor for, named with the ones it has."""


def backend(name):
    """The descriptor of ``name`` (a backend name or its alias), with its ``name``; BackendError naming it."""
    key = ALIASES.get(name, name)
    if key not in BACKENDS:
        raise BackendError("backend %r is not one the collection runs; expected one of %s"
                           % (name, ", ".join(sorted(BACKENDS) + sorted(ALIASES))))
    return dict(BACKENDS[key], name=key)


def resolve(name, gathered=None, v2_tests=False):
    """The descriptor of ``name``, where ``auto`` is resolved on what the node has: the generation of the installed
    DeepEP (``gathered``, node_stack's ``gpufleet_deepep.generation``: ``v1`` or ``v2``) when known, else V2 when its
    tree has V2's tests (``v2_tests``: tests/elastic/test_ep.py exists), else V1."""
    if name == "auto":
        name = gathered if gathered in ("v1", "v2") else ("v2" if v2_tests else "v1")
    return backend(name)


def test_of(name, scope):
    """The test ``name`` runs for ``scope``, relative to its source tree; BackendError for a scope it has none for."""
    descriptor = backend(name)
    if scope not in descriptor["tests"]:
        raise BackendError("%s has no %s test (scope=%r); expected one of %s, or a script of your own"
                           % (descriptor["title"], scope, scope, ", ".join(sorted(descriptor["tests"]))))
    return descriptor["tests"][scope]
