# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of a node's kernel modules (node_stack's ``modules`` set, which the preflight judges, and the
``kernel_modules`` of ``gpufleet_stack``, which the audit judges), aware of drivers built into the kernel.

A module is
- ``loaded``: listed in ``/proc/modules`` (else in ``lsmod``), or ``/sys/module/<name>/initstate`` is ``live``;
- ``builtin``: ``/sys/module/<name>`` exists without ``initstate`` (a driver built into the kernel has no
  ``initstate``), or ``/lib/modules/<release>/modules.builtin`` lists it;
- ``absent``: neither. ``loadable`` then says whether ``modprobe`` can load it: true when
  ``/lib/modules/<release>/modules.dep`` lists it, false when it does not or the kernel has no
  ``/lib/modules/<release>`` at all, null when that cannot be told.

Each state comes with its ``source`` (the file that said so). Kernel module names treat ``-`` and ``_`` alike; names
are reported with ``_`` as ``/proc/modules`` does.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpufleet.deepep.plugins.module_utils._node.nodeio import read_text, under

__all__ = ["KernelModuleNameError", "MODULE_NAME_RE", "parse_proc_modules", "parse_lsmod", "parse_module_list",
           "kernel_release", "read_kernel_modules"]

MODULE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
_KO_SUFFIX_RE = re.compile(r"\.ko(\.(xz|zst|gz|bz2))?\Z")
LIST_LIMIT = 32 * 1024 * 1024


class KernelModuleNameError(ValueError):
    """A kernel module name asked for is not in the expected form."""


def _norm(name):
    return name.replace("-", "_")


def parse_proc_modules(text):
    """``/proc/modules`` text -> set of module names."""
    return set(_norm(line.split()[0]) for line in (text or "").splitlines() if line.strip())


def parse_lsmod(text):
    """``lsmod`` output (a ``Module Size Used by`` header, then one module per line) -> set of names."""
    names = set()
    for line in (text or "").splitlines():
        fields = line.split()
        if fields and fields[0] != "Module":
            names.add(_norm(fields[0]))
    return names


def parse_module_list(text):
    """``modules.builtin`` (one ``kernel/.../name.ko`` a line) or ``modules.dep`` (``kernel/.../name.ko.zst: deps``)
    text -> set of module names."""
    names = set()
    for line in (text or "").splitlines():
        path = line.split(":", 1)[0].strip()
        if not path:
            continue
        base = os.path.basename(path)
        stem = _KO_SUFFIX_RE.sub("", base)
        if stem != base and stem:
            names.add(_norm(stem))
    return names


def kernel_release(root):
    """The running kernel's release (``/proc/sys/kernel/osrelease``; ``uname -r`` on the node itself), or None."""
    text = read_text(under(root, "/proc/sys/kernel/osrelease"))
    if text is None and (not root or root == "/"):
        text = os.uname()[2]
    text = (text or "").strip()
    return text or None


def _loaded_modules(root, runner, timeout):
    """(set of loaded names, where the list came from): ``/proc/modules``, else ``lsmod``, else every
    ``/sys/module/<name>`` whose ``initstate`` is ``live``; (empty set, None) when none of them can be read."""
    text = read_text(under(root, "/proc/modules"))
    if text is not None:
        return parse_proc_modules(text), "/proc/modules"
    rc, out, dummy = runner(["lsmod"], timeout=timeout, env=None)
    if rc == 0:
        return parse_lsmod(out), "lsmod"
    sys_module = under(root, "/sys/module")
    try:
        entries = sorted(os.listdir(sys_module))
    except (IOError, OSError):
        return set(), None
    live = set(name for name in entries
               if (read_text(os.path.join(sys_module, name, "initstate")) or "").strip() == "live")
    return live, "/sys/module"


def _absent(module_dir, dir_present, index_path, available, name):
    """``(loadable, source, reason)`` of a module that is neither loaded nor built in."""
    if module_dir is None:
        return None, None, "not loaded; the kernel release is unknown, so its modules were not looked up"
    if not dir_present:
        return False, module_dir, ("not loaded, not built in, and the kernel has no %s (no loadable modules)"
                                   % module_dir)
    if index_path is None:
        return None, None, ("not loaded; %s/modules.dep cannot be read, so whether the kernel has it is unknown"
                            % module_dir)
    if name in available:
        return True, index_path, "not loaded; %s lists it" % index_path
    return False, index_path, "not loaded, not built in, and %s does not list it" % index_path


def _module_state(root, name, loaded, source, builtin, builtin_path, available, index_path, module_dir, dir_present):
    """``{state, source, loadable, reason}`` of one module (see the module's docstring)."""
    if name in loaded and source != "/sys/module":
        return {"state": "loaded", "source": source, "loadable": None, "reason": "listed in %s" % source}
    sys_dir = "/sys/module/%s" % name
    initstate = read_text(under(root, sys_dir + "/initstate"))
    if initstate is not None and initstate.strip() == "live":
        return {"state": "loaded", "source": sys_dir + "/initstate", "loadable": None,
                "reason": "%s/initstate is live" % sys_dir}
    if initstate is None and os.path.isdir(under(root, sys_dir)):
        return {"state": "builtin", "source": sys_dir, "loadable": None,
                "reason": "%s exists without initstate: built into the kernel" % sys_dir}
    if name in builtin:
        return {"state": "builtin", "source": builtin_path, "loadable": None,
                "reason": "listed in %s: built into the kernel" % builtin_path}
    loadable, where, reason = _absent(module_dir, dir_present, index_path, available, name)
    if initstate is not None:
        reason = "%s/initstate is %s (not live); %s" % (sys_dir, initstate.strip() or "empty", reason)
    return {"state": "absent", "source": where, "loadable": loadable, "reason": reason}


def read_kernel_modules(root, runner, names=(), timeout=30):
    """The kernel modules of the node under ``root``.

    Returns ``{loaded, source, kernel, module_dir, module_index, builtin_index, states, present, builtin, absent,
    not_in_kernel}``: ``loaded`` every loaded module (sorted) and ``source`` where that list came from
    (``/proc/modules``, ``lsmod``, ``/sys/module``, or None when none could be read); ``kernel`` the release;
    ``module_dir`` ``/lib/modules/<release>`` (None when the release is unknown); ``module_index`` and ``builtin_index``
    its ``modules.dep`` and ``modules.builtin`` where they were read (else None); for each of ``names``: ``states[name]`` ``{state, source, loadable, reason}``,
    ``present[name]`` (loaded or built in), and the names ``builtin``, ``absent`` and ``not_in_kernel`` (absent and no
    module for them in the kernel's module directory), in the order of ``names``.

    ``runner(argv, timeout, env) -> (rc, stdout, stderr)`` runs ``lsmod`` where ``/proc/modules`` cannot be read. A name
    that is not a kernel module name raises :class:`KernelModuleNameError` naming it.
    """
    wanted = []
    for name in names or ():
        if not isinstance(name, str) or not MODULE_NAME_RE.match(name):
            raise KernelModuleNameError("module_names: %r is not a kernel module name (expected letters, digits, '_' "
                                        "or '-', such as mlx5_core)" % (name,))
        if _norm(name) not in wanted:
            wanted.append(_norm(name))
    loaded, source = _loaded_modules(root, runner, timeout)
    release = kernel_release(root)
    module_dir = "/lib/modules/%s" % release if release and "/" not in release else None
    builtin, builtin_path, available, index_path, dir_present = set(), None, set(), None, False
    if module_dir is not None:
        dir_present = os.path.isdir(under(root, module_dir))
        text = read_text(under(root, module_dir + "/modules.builtin"), LIST_LIMIT) if dir_present else None
        if text is not None:
            builtin, builtin_path = parse_module_list(text), module_dir + "/modules.builtin"
        text = read_text(under(root, module_dir + "/modules.dep"), LIST_LIMIT) if dir_present else None
        if text is not None:
            available, index_path = parse_module_list(text), module_dir + "/modules.dep"
    facts = {"loaded": sorted(loaded), "source": source, "kernel": release, "module_dir": module_dir,
             "module_index": index_path, "builtin_index": builtin_path,
             "states": {}, "present": {}, "builtin": [], "absent": [], "not_in_kernel": []}
    for name in wanted:
        state = _module_state(root, name, loaded, source, builtin, builtin_path, available, index_path, module_dir,
                              dir_present)
        facts["states"][name] = state
        facts["present"][name] = state["state"] != "absent"
        if state["state"] == "builtin":
            facts["builtin"].append(name)
        elif state["state"] == "absent":
            facts["absent"].append(name)
            if state["loadable"] is False:
                facts["not_in_kernel"].append(name)
    return facts
