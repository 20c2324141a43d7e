# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Bandwidth thresholds per profile: the metrics a threshold may name (``METRICS``), the choice of one profile's
thresholds out of a table (``select_thresholds``) and ``VerifyInputError``, the error of the verification's input.

Shared by the controller's verification gate (plugin_utils/_verify/gate.py) and the settings check that a node-side
module also runs (``_settings``), so it lives here, where both may import it. Pure logic, standard library only.
"""

from __future__ import annotations

import re

# Threshold keys: where each one is read in the deepep_bandwidth result.
METRICS = {
    "dispatch_bf16_nvl_gbps": ("dispatch", "bf16", "nvl_gbps"),
    "dispatch_bf16_rdma_gbps": ("dispatch", "bf16", "rdma_gbps"),
    "dispatch_fp8_nvl_gbps": ("dispatch", "fp8", "nvl_gbps"),
    "dispatch_fp8_rdma_gbps": ("dispatch", "fp8", "rdma_gbps"),
    "combine_nvl_gbps": ("combine", "nvl_gbps"),
    "combine_rdma_gbps": ("combine", "rdma_gbps"),
}


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
                                   % (where, metric, ", ".join(sorted(METRICS) + ["by_gpus"])))
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise VerifyInputError("%s[%r] must be a non-negative number of GB/s or null; got %r" % (where, metric, value))


def select_thresholds(table, profile=None, gpus=None):
    """The thresholds of ``profile`` from ``table`` (profile -> {metric: min GB/s or null, by_gpus: {N: {...}}}).

    Exact name first, then the first table key found as a ``_``/``-`` separated token of the profile
    name (``gcp_b200`` and ``b200_cuda13`` take ``b200``), then ``default``. Values of ``default`` fill
    what the chosen entry leaves out. DeepEP's intranode figures depend on how many GPUs take part (on H100/H200
    NV18 BF16 dispatch falls from about 330 GB/s on 2 GPUs to about 260 on 4, while combine rises from about 285
    to 355), so an entry may carry ``by_gpus``: the gates measured for that GPU count, over the entry's own
    values; the entry's own values are the family gate for counts nobody measured.
    Returns ``{profile, matched, fallback, known, thresholds, gpus, shape}``; ``fallback`` is true when a profile
    was given that matches no entry (neither by name nor by a family token), so the ``default`` gate applies to it
    (``fallback_message`` says so in words); ``known`` lists the table's profiles and families (``default`` left
    out); ``shape`` says whether the gate was measured for ``gpus`` GPUs (``measured``), comes from the family's
    gate for other counts (``family``), or no count was given (``any``).
    """
    if not isinstance(table, dict) or not table:
        raise VerifyInputError("thresholds must be a mapping of profile name to {metric: GB/s}; got %r" % (table,))
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise VerifyInputError("thresholds[%r] must be a mapping of metric to GB/s; got %r" % (name, entry))
        _check_metrics("thresholds[%r]" % name, dict((k, v) for k, v in entry.items() if k != "by_gpus"))
        shapes = entry.get("by_gpus", {})
        if not isinstance(shapes, dict):
            raise VerifyInputError("thresholds[%r].by_gpus must be a mapping of GPU count to {metric: GB/s}; got %r"
                                   % (name, shapes))
        for count, shape in shapes.items():
            _gpu_count(count, "thresholds[%r].by_gpus" % name)
            _check_metrics("thresholds[%r].by_gpus[%r]" % (name, count), shape)
    count = None if gpus in (None, "") else _gpu_count(gpus, "gpus")
    matched = None
    if profile and profile in table:
        matched = profile
    elif profile:
        tokens = [t for t in re.split(r"[_\-.\s]+", str(profile).lower()) if t]
        for key in table:
            if key != "default" and str(key).lower() in tokens:
                matched = key
                break
    if profile is not None and not isinstance(profile, str):
        raise VerifyInputError("profile %r is not a string; expected a profile name out of %s"
                               % (profile, ", ".join(sorted(map(str, table)))))
    if matched is None and "default" not in table:
        raise VerifyInputError("profile %r matches no entry of the thresholds table and it has no 'default' entry, so "
                               "no gate would apply; expected one of the known profiles %s (or a name with one of "
                               "them as a '_'/'-' token), or add a 'default' entry"
                               % (profile, ", ".join(sorted(map(str, table)))))
    thresholds = dict((k, v) for k, v in (table.get("default") or {}).items() if k != "by_gpus")
    entry = table[matched] if matched is not None else table.get("default") or {}
    thresholds.update((k, v) for k, v in entry.items() if k != "by_gpus")
    shape = "any"
    if count is not None:
        shape = "family"
        for key, values in (entry.get("by_gpus") or {}).items():
            if _gpu_count(key, "by_gpus") == count:
                thresholds.update(values)
                shape = "measured"
    return {"profile": profile, "matched": matched or ("default" if "default" in table else None),
            "fallback": bool(profile) and matched is None,
            "known": sorted(str(key) for key in table if key != "default"),
            "thresholds": thresholds, "gpus": count, "shape": shape}


def fallback_message(chosen, name="profile"):
    """The warning for a ``select_thresholds`` result whose profile fell back to ``default`` (None otherwise);
    ``name`` is the variable that holds the profile."""
    if not chosen.get("fallback"):
        return None
    gate = ", ".join("%s >= %s" % (metric, value) for metric, value in sorted(chosen["thresholds"].items())
                     if value is not None) or "nothing gated"
    return ("%s=%r is no profile or GPU family of the thresholds table (known: %s; a profile is matched by its name "
            "or by a family as a '_'/'-' token, gcp_b200 -> b200), so the loose 'default' gate applies (%s): a node "
            "far below its hardware's speed passes. Name the profile after its family (e.g. <family>_<site>) or add "
            "an entry for it to the thresholds table"
            % (name, chosen["profile"], ", ".join(chosen["known"]) or "none", gate))
