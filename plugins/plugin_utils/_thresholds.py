# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Bandwidth thresholds per profile: the metrics a threshold may name (``METRICS``), the choice of one profile's
thresholds out of a table (``select_thresholds``, which refuses a profile the table has no gate for instead of
handing it the loose ``default`` gate) and ``VerifyInputError``, the error of the verification's input.

Read by the controller alone: the verification's judge and gate (``_verify``), play_settings' check of a profile
(``_settings``) and the verify_thresholds filter; no module imports it, so it is not shipped to the nodes.
"""

from __future__ import annotations

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._gpu_families import (
    FAMILIES,
    ungated_reason,
    compute_capability,
    family_of,
    gate_table,
    profile_tokens,
    token_key,
)

# Threshold keys: where each one is read in the deepep_bandwidth result.
METRICS = {
    "dispatch_bf16_nvl_gbps": ("dispatch", "bf16", "nvl_gbps"),
    "dispatch_bf16_rdma_gbps": ("dispatch", "bf16", "rdma_gbps"),
    "dispatch_fp8_nvl_gbps": ("dispatch", "fp8", "nvl_gbps"),
    "dispatch_fp8_rdma_gbps": ("dispatch", "fp8", "rdma_gbps"),
    "combine_nvl_gbps": ("combine", "nvl_gbps"),
    "combine_rdma_gbps": ("combine", "rdma_gbps"),
    # The low-latency test's slowest rank (its own dispatch and combine figures: NVLink on one node, RDMA across).
    "ll_dispatch_gbps": ("low_latency", "dispatch_gbps"),
    "ll_combine_gbps": ("low_latency", "combine_gbps"),
}


# What an entry may carry beside its metrics: the gates per GPU count, and what the gate rests on (the collection's
# own gates in _gpu_families.GATES carry them; a site's override may).
META = ("by_gpus", "source", "measured_with", "provisional")


class VerifyInputError(ValueError):
    """An argument is not what the verification expects; the message names it and the expected form."""


def _gpu_count(value, where):
    """``value`` (an int or its decimal text, 1 or more; never a bool) as an int; VerifyInputError naming it."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or str(int(text)) != text or int(text) < 1:
        raise VerifyInputError("%s: %r is not a GPU count; expected a whole number of GPUs such as 2, 4 or 8"
                               % (where, value))
    return int(text)


def _check_metrics(where, entry):
    if not isinstance(entry, dict):
        raise VerifyInputError("%s must be a mapping of metric to GB/s; got %r" % (where, entry))
    for metric, value in entry.items():
        if metric not in METRICS:
            raise VerifyInputError("%s has unknown metric %r; expected some of %s"
                                   % (where, metric, ", ".join(sorted(METRICS) + list(META))))
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise VerifyInputError("%s[%r] must be a non-negative number of GB/s or null; got %r" % (where, metric, value))


def _check_meta(where, entry):
    if entry.get("source") is not None and not isinstance(entry["source"], str):
        raise VerifyInputError("%s.source must be text saying where the figures come from; got %r"
                               % (where, entry["source"]))
    if entry.get("provisional") is not None and not isinstance(entry["provisional"], str):
        raise VerifyInputError("%s.provisional must be text saying why the gate is not measured; got %r"
                               % (where, entry["provisional"]))
    measured = entry.get("measured_with")
    if measured is not None and (not isinstance(measured, list) or not all(isinstance(x, str) for x in measured)):
        raise VerifyInputError("%s.measured_with must be a list of backend names (deepep_v1, deepep_v2); got %r"
                               % (where, measured))


def select_thresholds(table, profile=None, gpus=None, table_name=None, family=None, scope=None, backend=None):
    """The thresholds of ``profile`` from ``table`` (profile -> {metric: min GB/s or null, by_gpus: {N: {...}}}).

    With ``scope`` (``intranode``, ``internode``) the collection's own gates of that scope (``_gpu_families.GATES``,
    the profile object's) are the table and ``table`` holds the site's overrides: an entry of it replaces the
    collection's entry of the same name (or adds one). Without, ``table`` alone is the table.

    Exact name first; then ``family``, the GPU family the profile declares (``gpufleet_gpu_family``: ``b200``),
    when it declares one: the declaration says what the hardware is, so it wins over a family word the name happens
    to carry, and a declared family the table has no entry for is refused as a profile naming it is; then the first
    table key found as a token of the profile name (split on ``_``, ``-``, ``.`` and white space: ``gcp_b200`` and
    ``b200_cuda13`` take ``b200``). The ``default`` entry is the gate only of a profile that asks for it:
    ``default`` itself, or no profile and no family at all (the verify roles turn an unset profile into the declared
    family, else into ``default``). Any other profile the table does not match is refused, because the loose
    ``default`` gate would pass a node far below its hardware's speed (a B300 node at a quarter of its NVLink speed
    passed the 100 GB/s default): one that names or declares a GPU family (``_gpu_families``: ``gcp_b300``,
    ``gb200_nvl72``) is told to add that family's entry to the table; one that names none (``mycluster``) to name
    the profile after its family or to set it to ``default``. ``table_name`` is the table's variable, named in those
    refusals.

    Values of ``default`` fill what the chosen entry leaves out. DeepEP's intranode figures depend on how many GPUs
    take part (on H100/H200 NV18 BF16 dispatch falls from about 330 GB/s on 2 GPUs to about 260 on 4, while combine
    rises from about 285 to 355), so an entry may carry ``by_gpus``: the gates measured for that GPU count, over the
    entry's own values; the entry's own values are the family gate for counts nobody measured.
    ``backend`` (with ``scope``): the EP backend whose run is judged; its own gates (``_gpu_families.BACKEND_GATES``:
    NCCL EP's) replace DeepEP's of the same family, and a family it does not run is refused with the reason.
    Returns ``{profile, matched, thresholds, gpus, shape, source, measured_with, provisional}``; ``shape`` says
    whether the gate was measured for ``gpus`` GPUs (``measured``), comes from the family's gate for other counts
    (``family``), or no count was given (``any``); the last three are the entry's own (None where it has none):
    where its figures come from, the backends whose runs measured them, why nobody measured them on this hardware.
    """
    if scope is not None:
        try:
            gates = gate_table(scope, backend)
        except ValueError as exc:
            raise VerifyInputError(str(exc)) from exc
        table = {} if table is None else table
    if not isinstance(table, dict) or not (table or scope):
        raise VerifyInputError("thresholds must be a mapping of profile name to {metric: GB/s}; got %r" % (table,))
    if scope is not None:
        table = dict(gates, **dict((str(key), value) for key, value in table.items()))
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise VerifyInputError("thresholds[%r] must be a mapping of metric to GB/s; got %r" % (name, entry))
        _check_metrics("thresholds[%r]" % name, dict((k, v) for k, v in entry.items() if k not in META))
        _check_meta("thresholds[%r]" % name, entry)
        shapes = entry.get("by_gpus", {})
        if not isinstance(shapes, dict):
            raise VerifyInputError("thresholds[%r].by_gpus must be a mapping of GPU count to {metric: GB/s}; got %r"
                                   % (name, shapes))
        for count, shape in shapes.items():
            _gpu_count(count, "thresholds[%r].by_gpus" % name)
            _check_metrics("thresholds[%r].by_gpus[%r]" % (name, count), shape)
    count = None if gpus in (None, "") else _gpu_count(gpus, "gpus")
    if profile is not None and not isinstance(profile, str):
        raise VerifyInputError("profile %r is not a string; expected a profile name out of %s"
                               % (profile, ", ".join(sorted(map(str, table)))))
    if family not in (None, "") and (not isinstance(family, str) or family not in FAMILIES):
        raise VerifyInputError("GPU family %r (gpufleet_gpu_family) is no family the collection knows; expected one "
                               "of %s, or empty where the profile declares none"
                               % (family, ", ".join(sorted(FAMILIES))))
    matched = None
    if profile and profile in table:
        matched = profile
    elif family:
        matched = next((key for key in table if key != "default" and str(key).lower() == family), None)
        if matched is None:
            raise VerifyInputError(_unmatched(table, profile, table_name or "the thresholds table", declared=family,
                                              scope=scope, backend=backend))
    elif profile:
        matched = token_key(table, profile)
    if matched is None:
        if profile and profile != "default":
            raise VerifyInputError(_unmatched(table, profile, table_name or "the thresholds table", scope=scope,
                                              backend=backend))
        if "default" not in table:
            raise VerifyInputError("profile %r matches no entry of the thresholds table and it has no 'default' entry, "
                                   "so no gate would apply; expected one of the known profiles %s (or a name with one "
                                   "of them as a '_'/'-' token), or add a 'default' entry"
                                   % (profile, ", ".join(sorted(map(str, table)))))
        matched = "default"
    thresholds = dict((k, v) for k, v in (table.get("default") or {}).items() if k not in META)
    entry = table[matched]
    thresholds.update((k, v) for k, v in entry.items() if k not in META)
    shape = "any"
    if count is not None:
        shape = "family"
        for key, values in (entry.get("by_gpus") or {}).items():
            if _gpu_count(key, "by_gpus") == count:
                thresholds.update(values)
                shape = "measured"
    return {"profile": profile, "matched": matched, "thresholds": thresholds, "gpus": count, "shape": shape,
            "source": entry.get("source"), "measured_with": entry.get("measured_with"),
            "provisional": entry.get("provisional")}


def _unmatched(table, profile, table_name, declared=None, scope=None, backend=None):
    """Why ``profile``, which no entry of ``table`` matches, is refused, and the fix, in words. ``declared`` is the
    GPU family the profile declares (gpufleet_gpu_family), refused like a family its name carries; ``scope`` says
    the table is the collection's gates of that scope with ``table_name`` as the site's overrides."""
    known = sorted(str(key) for key in table if key != "default")
    gated = ", ".join(known) or "no family"
    loose = ", ".join("%s >= %s" % (metric, value) for metric, value in sorted((table.get("default") or {}).items())
                      if metric not in META and value is not None) or "nothing gated"
    family = declared or family_of(profile)
    if family is not None:
        names = "declares (gpufleet_gpu_family)" if declared else "names"
        if scope is not None:
            why = ungated_reason(family, scope, backend) or "no gate was written for it"
            return ("profile %r %s the GPU family %s (compute capability %s), and the collection has no %s gate for "
                    "%s (%s; plugins/plugin_utils/_gpu_families.py gates %s) nor does %s give one; a named family "
                    "never takes the loose 'default' gate (%s), which would pass %s nodes far below their speed. Add "
                    "an entry for %s to %s with gates measured on %s nodes, or set the profile to 'default' to run "
                    "under the loose gate knowingly"
                    % (profile, names, family, compute_capability(family), scope, family, why, gated, table_name,
                       loose, family, family, table_name, family))
        return ("profile %r %s the GPU family %s (compute capability %s), and %s has no %s entry (it gates %s); a "
                "named family never takes the loose 'default' gate (%s), which would pass %s nodes far below their "
                "speed. Add an entry for %s to %s with gates measured on %s nodes, or set the profile to 'default' "
                "to run under the loose gate knowingly"
                % (profile, names, family, compute_capability(family), table_name, family, gated, loose, family,
                   family, table_name, family))
    text = ("profile %r matches no entry of %s, by name or by a '_'/'-' token (known profiles %s), and names no GPU "
            "family (%s)" % (profile, table_name, gated, ", ".join(sorted(FAMILIES))))
    if "default" in table:
        return text + ("; the loose 'default' gate (%s) applies only to a profile that asks for it. Name the profile "
                       "after its GPU family (<family>_<site>, e.g. h200_%s), or set it to 'default' to accept that "
                       "gate" % (loose, profile_tokens(profile)[0] if profile_tokens(profile) else "site"))
    return text + "; name the profile after its GPU family (<family>_<site>) or add an entry for it to %s" % table_name
