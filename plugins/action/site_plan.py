# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.deepep.site_plan: the batch planning of playbooks/site.yml, on the controller.

``state=plan`` keys the node's settings and the collection's content, checks the node against its stamp with the
gpufleet.deepep.site_state module, decides its lane (intact, steady, changing), puts it in the group
``gpufleet_site_<lane>`` and sets the facts the play reads (the key, the lane, the reboot throttle of a steady node,
whether it counts as converged). ``state=record`` marks the node converged and, after a full run, records its stamp
with what the phases watch. ``state=report`` names the nodes that did not converge. The logic is
plugins/plugin_utils/_site_plan.py.
"""

from __future__ import annotations

import json
import os

from ansible import constants as C
from ansible.plugins.loader import lookup_loader

from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _node_reader as reader
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _site_plan as sp
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import InProcessAction
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._site_plan import content_hash

_STATE_MODULE = "gpufleet.deepep.site_state"
_IMAGE_MODULE = "gpufleet.deepep.image_boot"
# site_state's check as a node reader (plugin_utils/_node_reader.py): the module_utils it is written in.
_STATE_READER = (("_fileio", "_guard", "_node.site_state"), "_node.site_state", "check", ("SiteStateError",))
# Seconds the reader may take on the node (it reads the stamp and fingerprints what it records: well under one
# second on a healthy node; a watched path on a mount that does not answer fails the plan instead of hanging it).
_STATE_READER_TIMEOUT = 120
# The options of plugins/modules/site_plan.py (its documentation).
ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["plan", "record", "report"], default="plan"),
    stamp=dict(type="path", default="/var/lib/gpufleet-site-converged.json"),
    fast=dict(type="bool", default=True),
    reboot_throttle=dict(type="raw", default=0),
    serial=dict(type="raw", default=[1, "25%"]),
    hosts=dict(type="str", default="all"),
    image_manifest=dict(type="path", default="/etc/gpufleet/image.json"),
)


def cached_content_hash(paths, cache_dir=None):
    """content_hash of ``paths``, once per run: each host's action runs in its own worker process, so the digest is
    kept in the run's local temporary directory (removed when the run ends)."""
    cache_dir = cache_dir or C.DEFAULT_LOCAL_TMP
    name = None
    if cache_dir and os.path.isdir(cache_dir):
        name = os.path.join(cache_dir, "gpufleet-site-content-%s.json"
                            % sp.settings_key([], list(paths))[:16])
        try:
            with open(name, encoding="utf-8") as handle:
                cached = json.load(handle)
            if cached.get("paths") == list(paths):
                return cached["digest"]
        except (OSError, ValueError, AttributeError, KeyError):
            pass
    digest = content_hash(list(paths))
    if name:
        part = "%s.%d" % (name, os.getpid())
        try:
            with open(part, "w", encoding="utf-8") as handle:
                json.dump({"paths": list(paths), "digest": digest}, handle)
            os.replace(part, name)
        except OSError:
            pass
    return digest


def _fact(variables, name):
    """A fact of the host whose variables these are (``ansible_facts.<name>``); None when it has none."""
    facts = variables.get("ansible_facts") or {}
    return facts.get(name) if hasattr(facts, "get") else None


class ActionModule(InProcessAction):

    MODULE = "site_plan"
    ARGUMENT_SPEC = ARGUMENT_SPEC
    EXPECTED = (sp.SitePlanError,)
    # state=plan and state=record run gpufleet.deepep.site_state on the node.
    _requires_connection = True

    def compute(self, params, task_vars):
        return getattr(self, "_" + params["state"])(params, task_vars)

    def _values(self, names, task_vars):
        templar = self._templar.copy_with_new_env(available_variables=task_vars)
        return templar.template([task_vars[n] for n in names])

    def _key(self, task_vars):
        """The settings key of the node ('' when its settings or the content cannot be read)."""
        try:
            content = cached_content_hash(sp.content_paths(task_vars.get("playbook_dir")))
            return sp.settings_key(self._values(sp.settings_names(list(task_vars)), task_vars), content)
        except Exception:  # pylint: disable=broad-except
            # As site.yml's rescue did: the node goes through the batches, its reason says why.
            return ""

    def _plan(self, args, task_vars):
        key = self._key(task_vars)
        state = None
        if key:
            state = self._check_state(args["stamp"], key, task_vars)
            if state.get("failed"):
                return dict(state, changed=False)
        decision = sp.decide(state, fast=args["fast"], run_tags=task_vars.get("ansible_run_tags", ["all"]),
                             reboot_throttle=args["reboot_throttle"])
        lane = decision["lane"]
        out = {
            "changed": False, "lane": lane, "key": key, "reason": decision["reason"], "msg": decision["msg"],
            "serial": sp.batches(args["serial"]), "drift": (state or {}).get("drift", []),
            "add_group": "gpufleet_site_%s" % lane, "parent_groups": [],
            "ansible_facts": {"gpufleet_site_key": key, "gpufleet_site_lane": lane,
                              "gpufleet_site_reboot_throttle": decision["reboot_throttle"],
                              "gpufleet_site_converged": lane == "intact"},
            "_ansible_verbose_always": True,
        }
        if state is not None:
            out["state_read"] = state["state_read"]
        if sp.image_candidate(lane, key, args["fast"], task_vars.get("ansible_run_tags", ["all"])):
            return self._image(out, args, task_vars)
        return out

    def _check_state(self, stamp, key, task_vars):
        """site_state's check of the node (``state=check``): as one ``python -c`` of its module_utils when the
        node's interpreter is known (no module payload to compile on the node), else, or when that run is not
        one, the module itself. ``state_read`` says which ran."""
        python = reader.interpreter(self._values(["ansible_python_interpreter"], task_vars)[0]
                                    if "ansible_python_interpreter" in task_vars else None,
                                    _fact(task_vars, "discovered_interpreter_python"))
        if python:
            modules, module, function, errors = _STATE_READER
            payload = reader.program(modules, module, function, {"path": stamp, "key": key}, errors,
                                     timeout=_STATE_READER_TIMEOUT)
            run = self._low_level_execute_command(reader.command(python, payload), sudoable=True)
            read = reader.parse(run.get("rc"), run.get("stdout"))
            if read is not None and "error" in read:
                return {"failed": True, "msg": read["error"], "path": stamp, "state_read": "reader"}
            if read is not None:
                return dict(read["result"], changed=False, path=stamp, state_read="reader")
        state = self._execute_module(module_name=_STATE_MODULE, module_args={"path": stamp, "key": key},
                                     task_vars=task_vars)
        return dict(state, state_read="module")

    def _image(self, out, args, task_vars):
        """A changing node may be born from a golden image: gpufleet.deepep.image_boot reads its manifest (intact
        and steady nodes pay nothing for this). Lane image: the node joins gpufleet_site_image, a child group of
        gpufleet_site_changing (so it is in both, as before); refused: the plan fails with every reason."""
        image = self._execute_module(module_name=_IMAGE_MODULE, task_vars=task_vars,
                                     module_args={"site_key": out["key"], "manifest": args["image_manifest"]})
        if image.get("failed"):
            return dict(image, changed=False)
        facts = (image.get("ansible_facts") or {}).get("gpufleet_image") or {}
        out["ansible_facts"]["gpufleet_image"] = facts
        out["image"] = facts.get("lane", "none")
        if out["image"] == "refused":
            return dict(out, failed=True, msg="%s was born from an image that does not fit it: %s"
                        % (task_vars.get("inventory_hostname"), "; ".join(facts.get("refusals") or [])))
        if out["image"] == "image":
            out.update(add_group="gpufleet_site_image", parent_groups=["gpufleet_site_changing"])
        return out

    def _record(self, args, task_vars):
        # The plan set it as a fact: read it where facts live (not as a top-level variable, which exists only while
        # inject_facts_as_vars is on).
        key = _fact(task_vars, "gpufleet_site_key") or ""
        out = {"changed": False, "ansible_facts": {"gpufleet_site_converged": True}}
        if not key:
            return dict(out, recorded=False, msg="no stamp recorded: the settings of the node could not be keyed")
        if not sp.full_run(task_vars.get("ansible_run_tags", ["all"]), task_vars.get("ansible_skip_tags", [])):
            return dict(out, recorded=False, msg="no stamp recorded: not every phase ran (--tags or --skip-tags)")
        names = list(task_vars)
        watch = sp.watched(names, lambda n: self._values([n], task_vars)[0])
        state = self._execute_module(module_name=_STATE_MODULE, task_vars=task_vars,
                                     module_args={"path": args["stamp"], "key": key, "state": "record",
                                                  "watch": watch["watch"], "packages": watch["packages"]})
        # Bookkeeping of the play, not a setting of the node: never reported changed.
        return dict(out, **dict(state, changed=False, recorded=not state.get("failed")))

    def _report(self, args, task_vars):
        pattern = "%s:&%s" % (args["hosts"], task_vars.get("ansible_limit") or "all")
        finder = lookup_loader.get("ansible.builtin.inventory_hostnames", loader=self._loader, templar=self._templar)
        targets = finder.run([pattern], variables=task_vars)
        hostvars = task_vars.get("hostvars", {})
        # Converged: the plan or the stamp recorded it as a fact, or the image lane set it (set_fact) for the play.
        converged = [h for h in targets if h in hostvars
                     and (_fact(hostvars[h], "gpufleet_site_converged") or hostvars[h].get("gpufleet_site_converged"))]
        failed = [h for h in targets if h not in converged]
        return {"changed": False, "failed_nodes": failed, "msg": sp.report(targets, converged),
                "_ansible_verbose_always": True}
