# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The batch planning of playbooks/site.yml (action gpufleet.deepep.site_plan): its phases (``PHASES``), what a
converge rolls out (``content_paths``), the settings key of a node (``settings_names``, ``settings_key``), its lane
from its stamp (``decide``), the batches of the changing nodes (``batches``), whether a run ran every phase
(``full_run``), what the phases watch (``watched``), the nodes that did not converge (``report``) and the hosts
of the converge play (``play_hosts``).

Controller only: pure logic over the values the action reads from the play; standard library and ansible-core.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible.module_utils.common.json import get_encoder
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import BuildError, tree_hash
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256

__all__ = ["PHASES", "PREFIXES", "PHASE_TAGS", "LANES", "SitePlanError", "content_hash", "content_paths", "settings_names",
           "settings_key", "decide", "batches", "full_run", "watched", "report", "play_hosts"]

# The phases of site.yml's converge play, the one list of them: each name is at once the role site.yml imports
# (roles/<name>), the tag of its imports and the prefix of its variables. A role imported twice is one phase
# (doca_ofed: the install, then its check after the reboot; nccl: the pin, then the pin put back after DeepEP).
# The order is not site.yml's run order (nccl runs before nvshmem) but the order of the key: content_paths hashes
# the roles in this order, so a new order would re-key every converged node once. A new phase goes at the end.
# tests/unit/test_phase_list.py holds this list and site.yml to each other.
PHASES = ("preflight", "cuda_toolkit", "doca_ofed", "nvidia_peermapping", "gdrcopy", "pytorch", "nvshmem", "deepep",
          "nccl", "env_script", "nccl_ep", "efa", "imex")
# The variables of every phase (the settings key covers each variable with one of these prefixes), and the play's.
PREFIXES = ("gpufleet",) + PHASES
# The tags of the phases: a run that skips one of them (or always) is not a full run.
PHASE_TAGS = PHASES + ("always",)
LANES = ("intact", "steady", "changing")
# Variables of the play itself, not of a phase: never part of the key.
_NOT_SETTINGS = re.compile(r"^gpufleet_(serial|max_fail_percentage|hosts|site_|reboot_|allow_reboot)")
_WATCH = re.compile(r"^(?!gpufleet_)[a-z0-9_]+_site_watch$")
_WATCH_PACKAGES = re.compile(r"^(?!gpufleet_)[a-z0-9_]+_site_watch_packages$")
NOT_KEYED = "its settings could not be keyed"


class SitePlanError(ValueError):
    """A value of the plan is not what it expects; the message names it and the expected form."""


def content_paths(playbook_dir, prefixes=PREFIXES):
    """What a converge rolls out: site.yml, every plugin, the reboot handler's role, the build_once role the build
    phases include, the rules catalogue (the preflight phase judges the node by its preflight rules), the image role
    (the first boot of an image-born node) and the role of every phase."""
    if not isinstance(playbook_dir, str) or not os.path.isabs(playbook_dir):
        raise SitePlanError("playbook_dir %r is not an absolute path (expected the directory of site.yml)"
                            % (playbook_dir,))
    root = os.path.dirname(playbook_dir)
    return ([playbook_dir + "/site.yml", root + "/plugins", root + "/roles/reboot", root + "/roles/build_once",
             root + "/roles/audit/files/rules.yml", root + "/roles/image"]
            + [root + "/roles/" + p for p in prefixes if p != "gpufleet"])


def settings_names(names, prefixes=PREFIXES):
    """The variables the key covers, sorted: each name with a phase prefix, but not the play's own."""
    pattern = re.compile("^(" + "|".join(prefixes) + ")_")
    # Jinja's sort, which site.yml used: case-insensitive, stable.
    return sorted((n for n in names if pattern.search(n) and not _NOT_SETTINGS.match(n)), key=str.lower)


def settings_key(values, content):
    """The settings key: sha256 of ``{'settings': values, 'content': content}`` as sorted JSON (the form site.yml's
    ``to_json(sort_keys=true) | hash('sha256')`` gave it)."""
    text = json.dumps({"settings": list(values), "content": content}, cls=get_encoder("tagless"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _bool(value, name):
    try:
        return boolean(value, strict=True)
    except TypeError as exc:
        raise SitePlanError("%s %r is not a boolean (expected true or false)" % (name, value)) from exc


def decide(state, fast=True, run_tags=("all",), reboot_throttle=0):
    """The lane of a node from its ``site_state`` check (None: its settings could not be keyed).

    intact: the stamp's key and every fingerprint match, the run is fast and untagged; no phase runs. steady: same
    key, but drift (or a tagged or slow run of an intact node); the node goes in the first batch and reboots one at a
    time. changing: new settings, new collection, new node; the canary and the batches. Returns ``{lane, reason,
    msg, reboot_throttle}``."""
    state = state if isinstance(state, dict) else {}
    fast = _bool(fast, "gpufleet_site_fast")
    if state.get("intact") and fast and list(run_tags or []) == ["all"]:
        lane = "intact"
    else:
        lane = "steady" if state.get("steady") else "changing"
    reason = state.get("reason", NOT_KEYED) if state else NOT_KEYED
    msg = "%s: %s" % (lane, reason)
    if lane == "intact":
        msg += "; no phase runs (-e gpufleet_site_fast=false runs them)"
    return {"lane": lane, "reason": reason, "msg": msg,
            "reboot_throttle": 1 if state.get("steady") else reboot_throttle}


def batches(serial):
    """The batches of the changing nodes: ``gpufleet_serial`` as a list (a number or percentage is one batch size)."""
    if isinstance(serial, (list, tuple)):
        return list(serial)
    return [serial]


def image_candidate(lane, key, fast, run_tags):
    """Whether the plan asks the node if it was born from a golden image: a changing node with a key, on the fast
    path, in a run without --tags (a run with --tags is a full run of those phases, not a first boot)."""
    return lane == "changing" and bool(key) and bool(fast) and full_run(run_tags, ())


def full_run(run_tags, skip_tags):
    """Whether every phase ran: no --tags, and no phase tag skipped (Molecule skips only its notest tags)."""
    return list(run_tags or []) == ["all"] and not set(skip_tags or []) & set(PHASE_TAGS)


def _strings(values):
    out = []
    stack = list(values)
    while stack:
        value = stack.pop(0)
        if isinstance(value, (list, tuple)):
            stack[0:0] = list(value)
        elif value in (None, "None", "null"):  # Ansible's flatten leaves these out
            continue
        else:
            text = str(value)
            if text and text not in out:
                out.append(text)
    return out


def watched(names, lookup):
    """What the phases manage, as each role publishes it (``<role>_site_watch`` and ``<role>_site_watch_packages``):
    ``{watch, packages}``, each flattened, as text, without empties and duplicates. ``lookup(name)`` gives a
    variable's value; ``names`` are the variables of the play."""
    return {"watch": _strings(lookup(n) for n in names if _WATCH.search(n)),
            "packages": _strings(lookup(n) for n in names if _WATCH_PACKAGES.search(n))}


def report(targets, converged):
    """The line on the nodes of the run: ``targets`` the hosts of the run, ``converged`` those that converged (or
    were intact)."""
    failed = [h for h in targets if h not in converged]
    if failed:
        return "%d of %d nodes did not converge: %s" % (len(failed), len(targets), ", ".join(failed))
    return "All %d nodes converged." % len(targets)


# The content key: one digest over the collection content a converge rolls out (the content_hash lookup and the
# site_plan action).
SKIP_DIRS = (".git", "__pycache__")
SKIP_SUFFIXES = (".pyc", ".pyo")


def content_hash(paths):
    """sha256 over each path's identity: a tree hash for a directory, the content hash for a file."""
    digest = hashlib.sha256()
    for path in paths:
        if not isinstance(path, str) or not os.path.isabs(path):
            raise SitePlanError("content_hash: %r is not an absolute path (expected a directory or file on the "
                                "controller, such as playbook_dir ~ '/../roles')" % (path,))
        name = os.path.normpath(path)
        if os.path.isdir(name):
            try:
                part = "D " + tree_hash(name, exclude_dirs=SKIP_DIRS, exclude_suffixes=SKIP_SUFFIXES)
            except (BuildError, OSError) as exc:
                raise SitePlanError("content_hash: cannot read %s: %s" % (name, exc))
        elif os.path.isfile(name):
            part = "F " + file_sha256(name)
        else:
            raise SitePlanError("content_hash: %s is neither a directory nor a file" % name)
        digest.update(("%s %s\n" % (os.path.basename(name), part)).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def play_hosts(groups):
    """The hosts of site.yml's converge play, in inventory order: the steady nodes (gpufleet_site_steady), then the
    changing ones (gpufleet_site_changing) but for those that get an image (gpufleet_site_image); a group that does
    not exist is empty."""
    if not isinstance(groups, dict) or not isinstance(groups.get("all"), (list, tuple)):
        raise SitePlanError("groups: %r is not the inventory's groups; expected a mapping of group names to host lists "
                            "with 'all'" % (groups,))

    def members(name):
        hosts = groups.get(name, [])
        if not isinstance(hosts, (list, tuple)):
            raise SitePlanError("groups[%r]: %r is not a list of hosts; expected a list of inventory hostnames"
                                % (name, hosts))
        return hosts

    steady, changing, image = (members("gpufleet_site_steady"), members("gpufleet_site_changing"),
                               members("gpufleet_site_image"))
    every = groups["all"]
    return ([host for host in every if host in steady]
            + [host for host in every if host in changing and host not in image])
