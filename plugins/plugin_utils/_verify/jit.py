# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What DeepEP V2's JIT did in a verification run: kernels compiled or loaded, and how long the run took.

V2 compiles its kernels at first use into ``<EP_JIT_CACHE_DIR>/cache/kernel.<name>.<digest>/`` and loads them from
there afterwards; it never removes one. So the cache read before and after the run (node_stack's ``jit_cache`` set,
``gpufleet_deepep_jit``) says what the run did: the kernels it added it compiled, and with none added every kernel
it needed was there to load. The run's wall time is its first-dispatch time both ways (on 2 x H100, DeepEP V2
dd758ca's elastic test ran 68.1 s with a cold cache, 11 kernels compiled, and 44.9 s warm).

``jit_verdict(before, after, run_seconds, require_warm)`` returns ``{state, compiled, loaded, kernel_count,
cache_dir, run_seconds, from, warmup, passed, reasons, brief}``. ``state``: ``cold`` (an empty cache filled by this
run), ``warm`` (nothing compiled, kernels loaded), ``partial`` (the cache held kernels but the run compiled more: a
key input differs from the warm-up's, such as an EP_JIT_* switch, the shapes or the arch), ``unused`` (no kernel
there before or after: the run compiled into another cache). With ``require_warm`` a run that compiled a kernel,
or used another cache, fails with the fix.

Pure logic, standard library only, Python 3.8+.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._thresholds import VerifyInputError

__all__ = ["jit_verdict", "run_seconds_of", "JIT_STATES"]

JIT_STATES = ("cold", "warm", "partial", "unused")
# ansible.builtin.command's ``delta``: H:MM:SS.ffffff
DELTA_RE = re.compile(r"(\d+):([0-5]\d):([0-5]\d(?:\.\d+)?)\Z")
FACT_KEYS = ("cache_dir", "kernel_count")


def run_seconds_of(value):
    """Seconds as a float from a number or a command's ``delta`` (``0:01:08.110889``); None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise VerifyInputError("run_seconds: %r is not a duration; expected seconds (a number) or a command's delta "
                               "such as 0:01:08.110889" % (value,))
    if isinstance(value, (int, float)):
        if value < 0:
            raise VerifyInputError("run_seconds: %r is negative; expected seconds >= 0" % (value,))
        return round(float(value), 1)
    match = DELTA_RE.match(str(value).strip())
    if not match:
        raise VerifyInputError("run_seconds: %r is not a duration; expected seconds (a number) or a command's delta "
                               "such as 0:01:08.110889" % (value,))
    hours, minutes, seconds = match.groups()
    return round(int(hours) * 3600 + int(minutes) * 60 + float(seconds), 1)


def _facts(value, name):
    if not isinstance(value, dict) or any(key not in value for key in FACT_KEYS):
        raise VerifyInputError("%s: expected node_stack's gpufleet_deepep_jit facts (a mapping with %s); got %r"
                               % (name, " and ".join(FACT_KEYS), value))
    count = value["kernel_count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise VerifyInputError("%s.kernel_count: %r is not a kernel count; expected an integer >= 0" % (name, count))
    return value


def _fmt(seconds):
    return "n/a" if seconds is None else "%.1f s" % seconds


def jit_verdict(before, after, run_seconds=None, require_warm=False):
    """The JIT part of a V2 verification run from the cache facts ``before`` and ``after`` it (see the module
    docstring)."""
    before, after = _facts(before, "before"), _facts(after, "after")
    if not isinstance(require_warm, bool):
        raise VerifyInputError("require_warm: %r is not a boolean; expected true or false" % (require_warm,))
    if before["cache_dir"] != after["cache_dir"]:
        raise VerifyInputError("before and after name different caches (%r, %r); expected the facts of one "
                               "EP_JIT_CACHE_DIR" % (before["cache_dir"], after["cache_dir"]))
    seconds = run_seconds_of(run_seconds)
    cache = after["cache_dir"]
    had, has = before["kernel_count"], after["kernel_count"]
    reasons = []
    if has < had:
        # V2 never deletes a kernel: something else emptied the cache while the test ran.
        reasons.append("the JIT cache %s lost kernels during the run (%d before, %d after): something else removed "
                       "them (a cache cleaner, another deploy); V2 never deletes one" % (cache, had, has))
        compiled, loaded, state = 0, has, "partial"
    else:
        compiled = has - had
        loaded = had
        state = ("unused" if had == 0 and has == 0 else "cold" if had == 0
                 else "warm" if compiled == 0 else "partial")
    if require_warm and state in ("cold", "partial") and compiled:
        why = ("the cache was empty" if state == "cold" else
               "the cache held %d kernels of another key or other shapes (an EP_JIT_* switch, the arch, the nvcc, the "
               "install paths or the test's shapes differ from the warm-up's)" % had)
        reasons.append("V2 compiled %d kernel(s) at first dispatch although a warm cache is required: %s in %s; warm it "
                       "with the deepep role (deepep_jit_warmup_argv covering this test's shapes) or unpack the key's "
                       "artifact" % (compiled, why, cache))
    if require_warm and state == "unused":
        reasons.append("no V2 kernel in %s before or after the run: the test compiled into another cache (set "
                       "EP_JIT_CACHE_DIR to %s in the env script, or verify_intranode_jit_cache_dir to the cache the "
                       "env script names)" % (cache, cache))
    warmup = {"compiled_seconds": after.get("compiled_seconds"), "loaded_seconds": after.get("loaded_seconds"),
              "compiled": after.get("compiled"), "loaded": after.get("loaded")}
    brief = {"cold": "cold: %d compiled" % compiled, "warm": "warm: 0 compiled, %d cached" % loaded,
             "partial": "partial: %d compiled, %d cached before" % (compiled, loaded),
             "unused": "no kernel in %s" % cache}[state]
    brief += ", run %s" % _fmt(seconds)
    if after.get("from"):
        brief += " (cache %s; warm-up %s cold, %s warm)" % (
            "from the store" if after["from"] == "store" else "compiled here", _fmt(warmup["compiled_seconds"]),
            _fmt(warmup["loaded_seconds"]))
    return {"state": state, "compiled": compiled, "loaded": loaded, "kernel_count": has, "cache_dir": cache,
            "run_seconds": seconds, "from": after.get("from"), "key": after.get("key"), "warmup": warmup,
            "passed": not reasons, "reasons": reasons, "brief": brief}
