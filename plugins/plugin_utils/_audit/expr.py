# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The expressions of the audit rules: jmespath compiled (and cached) and evaluated with the audit's own
functions, and the version and arch helpers behind those functions. ``AuditError`` names a malformed expression.

Pure controller-side logic (no Ansible objects); needs the Python library jmespath on the controller
(``HAS_JMESPATH``; without it ``compile_expression`` and ``search`` raise ``AuditError``).

The jmespath functions of the audit, besides the standard ones, that rule conditions may use:

``version_cmp(a, b)``
    -1, 0 or 1 comparing two version strings numerically (``2.28.9`` < ``2.30.4``, ``2.11.0+cu130`` ==
    ``2.11.0``); null when either side is missing or has no number.
``arch_covers(built, needed)``
    true when every arch of ``needed`` is in ``built`` (lists or strings such as ``9.0;10.0``, ``9.0a``,
    ``90``, ``sm_90``); null when either side is missing.
``arch_list(value)``
    the normalised arch list (``["9.0", "10.0"]``) of a list or string; null when missing.
``to_int(value)``
    the integer of a number or a decimal string; null otherwise (``to_number`` also accepts floats).
``mod(a, b)``, ``int_div(a, b)``
    ``a % b`` and ``a // b`` of integers (or decimal strings); null when either is missing or ``b`` is 0
    (layout rules: attention heads divisible by the attention TP size, TP by the node count).
``without_prefix(strings, prefix)``
    the strings of a list that do not start with ``prefix`` (``[]`` when the list is missing; every
    string when the prefix is null or empty is not wanted, so then ``[]``).
``slow_rails(devices, names)``
    the NICs of ``names`` (the node's GPU NICs) whose ACTIVE port rate is below the highest among them:
    ``[{name, rate_gbps, peers_gbps}]`` (``_rdma.slow_rails``; ``[]`` when either is missing).
``unique(list)``
    the list without repeated values, first occurrence kept (``[]`` when missing).
``difference(a, b)``
    the values of list ``a`` that are not in list ``b``, in order (``[]`` when ``a`` is missing).
``cuda_floor(archs)``
    the first CUDA release whose nvcc compiles for every arch of ``archs`` (a list or string as ``arch_list``
    takes it), from the GPU profile object (``_gpu_families.MIN_CUDA_BY_ARCH``: ``10.3`` -> ``12.9``); null when
    the list is missing or names no capability the collection knows.
``fabric_refusal(fabric, backend)``
    why ``backend`` (``deepep_v1``, ``deepep_v2``, ``nccl_ep``) cannot run across nodes on ``fabric`` (the profile
    object's ``_fabrics.FABRICS``: DeepEP V1 on ``efa``); null where it can, or no or an unknown fabric is given.
``fabric_nccl_floor(fabric)``
    the first NCCL whose GIN runs on ``fabric`` (``2.31.2`` on ``efa``); null for none, or no or an unknown fabric.
``fabric_env_gaps(fabric, exports)``
    the variables of ``fabric``'s entry (``_fabrics.FABRICS[...]["env"]``: ``NCCL_GIN_TYPE=5`` on ``efa``) that the
    mapping ``exports`` (the env script's) does not set to their value, each as ``NAME=value`` (what it should be);
    ``[]`` for no or an unknown fabric, or a fabric without variables.
``fabric_offers(fabric, what)``
    whether ``fabric`` offers ``what`` (the profile object's boolean keys of ``_fabrics.FABRICS``: ``ibgda``, NVSHMEM's
    GPU-initiated transport; ``mlx5dv``, rdma-core's mlx5 direct verbs): false on ``efa`` for both, true on
    ``infiniband``/``roce``; null for no or an unknown fabric, or a key that is not a yes/no of the entry. The rules
    about NVSHMEM IBGDA and mlx5 (the env script's IBGDA exports, the GPU-NIC mapping, libmlx5) hold where it is not
    false, as the env_script role exports them.
``family_host_arch(family)``
    the CPU architecture of the hosts of GPU ``family`` (``_gpu_families.SPECS``: ``aarch64`` for ``gb200``/``gb300``,
    ``x86_64`` for the HGX families); null for no or an unknown family.
``family_spans_hosts(family)``
    whether the NVLink domain of GPU ``family`` spans hosts (``_gpu_families.SPECS``: ``nvlink_domain_gpus`` above
    ``gpus_per_node``: ``gb200``/``gb300`` NVL72 trays, 4 GPUs each in a 72-GPU domain); false for the HGX families;
    null for no or an unknown family. The multi-node NVLink rules (fabric state, IMEX) judge only where it is true.
``host_arch_name(arch)``
    ``arch`` as the collection names it (``aarch64`` for ``arm64``, ``x86_64`` for ``amd64``); null when unknown.
"""

from __future__ import annotations

import re
import traceback

from ansible_collections.gpufleet.deepep.plugins.module_utils._rdma import slow_rails
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    VersionError,
    compare_versions,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._fabrics import FABRICS
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import MIN_CUDA_BY_ARCH, SPECS, spans_hosts
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._host_arch import HostArchError, normalize

try:
    import jmespath
    from jmespath import functions as _jp_functions

    HAS_JMESPATH = True
    JMESPATH_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised only without jmespath
    jmespath = None
    _jp_functions = None
    HAS_JMESPATH = False
    JMESPATH_IMPORT_ERROR = traceback.format_exc()

__all__ = ["HAS_JMESPATH", "JMESPATH_IMPORT_ERROR", "AuditError", "parse_version", "version_cmp",
           "normalize_arch_list", "arch_covers", "cuda_floor", "fabric_refusal", "fabric_nccl_floor", "fabric_env_gaps",
           "fabric_offers", "family_host_arch", "family_spans_hosts", "host_arch_name", "without_prefix",
           "int_mod", "int_div", "unique", "difference",
           "compile_expression", "search", "truthy"]

_VERSION_RE = re.compile(r"(\d+(?:\.\d+)*)")
_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d+)(?:\.(\d+))?([a-z]?)(?:\+ptx)?$", re.IGNORECASE)


class AuditError(Exception):
    """A rule, a drift entry or a facts document is malformed; the message names it."""


def parse_version(value):
    """Return the numeric tuple of a version string (``"2.11.0+cu130"`` -> ``(2, 11, 0)``) or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        return None
    match = _VERSION_RE.search(value)
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def version_cmp(left, right):
    """Compare two version strings: -1, 0, 1, or None when either is not a version.

    Uses the collection's version rules (``_versions.compare_versions``: pre-releases sort before the
    release, ``+cu130`` labels are ignored); values they reject are compared by their leading numbers.
    """
    if left is None or right is None or isinstance(left, bool) or isinstance(right, bool):
        return None
    try:
        return compare_versions(left, right)
    except VersionError:
        pass
    a, b = parse_version(left), parse_version(right)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    a = a + (0,) * (width - len(a))
    b = b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def normalize_arch_list(value):
    """Return the sorted arch list ``["9.0", "10.0"]`` of a list or string, or None when missing.

    Accepts ``9.0``, ``9.0a``, ``90``, ``sm_90``, ``10.0+PTX``, separated by ``;``, ``,`` or spaces.
    Unknown tokens are kept verbatim so a comparison with them fails visibly.
    """
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        tokens = re.split(r"[;,\s]+", value.strip())
    elif isinstance(value, (list, tuple)):
        tokens = []
        for item in value:
            tokens.extend(re.split(r"[;,\s]+", str(item).strip()))
    else:
        return None
    out = set()
    for token in tokens:
        if not token:
            continue
        match = _ARCH_RE.fullmatch(token)
        if not match:
            out.add(token)
            continue
        major, minor = match.group(1), match.group(2)
        if minor is None:
            # "90" / "sm_100": the last digit is the minor version.
            if len(major) < 2:
                out.add(token)
                continue
            major, minor = major[:-1], major[-1]
        out.add("%d.%d" % (int(major), int(minor)))
    if not out:
        return None
    return sorted(out, key=lambda a: parse_version(a) or (999,))


def arch_covers(built, needed):
    """True when every arch in ``needed`` is in ``built``; None when either is missing."""
    have, want = normalize_arch_list(built), normalize_arch_list(needed)
    if have is None or want is None:
        return None
    return set(want).issubset(have)


def cuda_floor(archs):
    """The first CUDA release that compiles for every arch of ``archs`` (the highest floor among them), or None when
    the list is missing or names no capability of ``MIN_CUDA_BY_ARCH`` (an unknown arch has no floor to hold)."""
    floors = [MIN_CUDA_BY_ARCH[arch] for arch in normalize_arch_list(archs) or [] if arch in MIN_CUDA_BY_ARCH]
    if not floors:
        return None
    best = floors[0]
    for floor in floors[1:]:
        if version_cmp(floor, best) == 1:
            best = floor
    return best


def _fabric_entry(fabric):
    """``fabric``'s entry of the profile object, or None (no fabric, or one the collection does not know)."""
    return FABRICS.get(fabric) if isinstance(fabric, str) else None


def fabric_refusal(fabric, backend):
    """Why ``backend`` cannot run across nodes on ``fabric``, or None (no fabric, an unknown one, or one it runs on)."""
    entry = _fabric_entry(fabric)
    return (entry.get("refuses") or {}).get(backend) if entry and isinstance(backend, str) else None


def fabric_nccl_floor(fabric):
    """The first NCCL whose GIN runs on ``fabric``, or None (no fabric, an unknown one, or no floor)."""
    entry = _fabric_entry(fabric)
    return entry.get("nccl_min") if entry else None


def fabric_env_gaps(fabric, exports):
    """``NAME=value`` for each of ``fabric``'s variables that ``exports`` does not set to its value ([] for no fabric,
    an unknown one, or one without variables)."""
    entry = _fabric_entry(fabric)
    exports = exports if isinstance(exports, dict) else {}
    return ["%s=%s" % (name, value) for name, value, _why in (entry or {}).get("env", ())
            if str(exports.get(name)) != value]


def fabric_offers(fabric, what):
    """Whether ``fabric`` offers ``what`` (a yes/no key of its ``_fabrics.FABRICS`` entry), or None (no fabric, an
    unknown one, or a key that is not a yes/no of the entry)."""
    entry = _fabric_entry(fabric)
    value = entry.get(what) if entry and isinstance(what, str) else None
    return value if isinstance(value, bool) else None


def family_host_arch(family):
    """The CPU architecture of GPU ``family``'s hosts, or None (no family, or an unknown one)."""
    spec = SPECS.get(family) if isinstance(family, str) else None
    return spec["host_arch"] if spec else None


def family_spans_hosts(family):
    """Whether GPU ``family``'s NVLink domain spans hosts (more GPUs in the domain than on one node), or None (no
    family, or an unknown one)."""
    return spans_hosts(family) if isinstance(family, str) and family in SPECS else None


def host_arch_name(arch):
    """``arch`` as the collection names it, or None when it is not one it knows."""
    try:
        return normalize(arch)
    except HostArchError:
        return None


def _to_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def without_prefix(strings, prefix):
    if not isinstance(strings, list) or not isinstance(prefix, str) or not prefix:
        return []
    return [s for s in strings if isinstance(s, str) and not s.startswith(prefix)]


def int_mod(left, right):
    """``left % right`` of two integers (or decimal strings); null when either is missing or ``right`` is 0."""
    a, b = _to_int(left), _to_int(right)
    if a is None or not b:
        return None
    return a % b


def int_div(left, right):
    """``left // right`` of two integers (or decimal strings); null when either is missing or ``right`` is 0."""
    a, b = _to_int(left), _to_int(right)
    if a is None or not b:
        return None
    return a // b


def unique(values):
    if not isinstance(values, list):
        return []
    out = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def difference(left, right):
    if not isinstance(left, list):
        return []
    right = right if isinstance(right, list) else []
    return [value for value in left if value not in right]


if HAS_JMESPATH:

    class _AuditFunctions(_jp_functions.Functions):
        """Extra jmespath functions available to rule conditions."""

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_version_cmp(self, left, right):
            return version_cmp(left, right)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_arch_covers(self, built, needed):
            return arch_covers(built, needed)

        @_jp_functions.signature({"types": []})
        def _func_arch_list(self, value):
            return normalize_arch_list(value)

        @_jp_functions.signature({"types": []})
        def _func_to_int(self, value):
            return _to_int(value)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_without_prefix(self, strings, prefix):
            return without_prefix(strings, prefix)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_mod(self, left, right):
            return int_mod(left, right)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_int_div(self, left, right):
            return int_div(left, right)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_slow_rails(self, devices, names):
            return slow_rails(devices, names)

        @_jp_functions.signature({"types": []})
        def _func_unique(self, values):
            return unique(values)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_difference(self, left, right):
            return difference(left, right)

        @_jp_functions.signature({"types": []})
        def _func_cuda_floor(self, archs):
            return cuda_floor(archs)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_fabric_refusal(self, fabric, backend):
            return fabric_refusal(fabric, backend)

        @_jp_functions.signature({"types": []})
        def _func_fabric_nccl_floor(self, fabric):
            return fabric_nccl_floor(fabric)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_fabric_env_gaps(self, fabric, exports):
            return fabric_env_gaps(fabric, exports)

        @_jp_functions.signature({"types": []}, {"types": []})
        def _func_fabric_offers(self, fabric, what):
            return fabric_offers(fabric, what)

        @_jp_functions.signature({"types": []})
        def _func_family_host_arch(self, family):
            return family_host_arch(family)

        @_jp_functions.signature({"types": []})
        def _func_family_spans_hosts(self, family):
            return family_spans_hosts(family)

        @_jp_functions.signature({"types": []})
        def _func_host_arch_name(self, arch):
            return host_arch_name(arch)

    _OPTIONS = jmespath.Options(custom_functions=_AuditFunctions())
else:  # pragma: no cover
    _OPTIONS = None


def _require_jmespath():
    if not HAS_JMESPATH:
        raise AuditError("the audit needs the Python library jmespath on the controller: %s" % JMESPATH_IMPORT_ERROR)


_COMPILED = {}


def compile_expression(expression, where):
    """Compile (and cache) a jmespath expression; errors name the rule or drift entry."""
    _require_jmespath()
    if not isinstance(expression, str) or not expression.strip():
        raise AuditError("%s: expected a non-empty jmespath expression string, got %r" % (where, expression))
    cached = _COMPILED.get(expression)
    if cached is None:
        try:
            cached = jmespath.compile(expression)
        except jmespath.exceptions.JMESPathError as exc:
            raise AuditError("%s: invalid jmespath expression %r: %s" % (where, expression, exc))
        _COMPILED[expression] = cached
    return cached


def search(expression, document, where="expression"):
    """Evaluate a jmespath expression (with the audit functions) over a document."""
    compiled = compile_expression(expression, where)
    try:
        return compiled.search(document, options=_OPTIONS)
    except jmespath.exceptions.JMESPathError as exc:
        raise AuditError("%s: evaluating %r failed: %s" % (where, expression, exc))


def truthy(value):
    """jmespath's notion of truth: false, null, empty strings, lists and objects are false."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict)) and not value:
        return False
    return True
