# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The artifact store (gpufleet.deepep.artifact_store): lookup, get and put of a build key's files.

mode=shared: the store is a path the node mounts; the module of the same name runs there and does everything.
mode=controller: the store is a directory of the controller. lookup reads it here; put has the module describe the
node's files there (op=describe: sha256, size and mode, links refused), fetches them into <store>/.incoming (checked
against that sha256, given the source's mode & 0755) and publishes them here under the store's lock; get verifies
the store's copy here (links refused, the record's pin checked), copies the key's directory with its modes to a
staging directory in dest on the node, and runs the module there (mode=shared on that staging directory), which
verifies every file after the transfer and renames them into dest. The logic is module_utils/_store.py; the options are documented in modules/artifact_store.py.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._store import (
    ARGUMENT_SPEC,
    REQUIRED_IF,
    StoreError,
    check_lock_timeout,
    check_pin,
    check_request,
    key_path,
    lookup_entry,
    make_record,
    new_incoming,
    publish,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._storefs import store_mode, verify_file

MODULE = "gpufleet.deepep.artifact_store"


class ActionModule(ActionBase):

    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        validation, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF)
        params = dict(validation.validated_parameters)
        params["host"] = params.get("host") or task_vars.get("inventory_hostname") or "unknown"
        try:
            if params["mode"] == "shared" or params["op"] == "describe":
                result.update(self._execute_module(module_name=MODULE, module_args=params, task_vars=task_vars))
            else:
                check_request(params["store"], params["kind"], params["key"])
                check_lock_timeout(params["lock_timeout"])
                check_pin(params.get("record_sha256"))
                operation = {"lookup": self._lookup, "get": self._get, "put": self._put}[params["op"]]
                result.update(operation(params, task_vars))
        except StoreError as exc:
            result.update(failed=True, changed=False, msg="artifact store %s: %s" % (params["store"], exc))
        except (IOError, OSError, AnsibleError) as exc:
            result.update(failed=True, changed=False, msg="artifact store %s (%s %s): %s"
                          % (params["store"], params["kind"], params["key"], to_native(exc)))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    # ----------------------------------------------------------------------------------------
    # mode=controller

    def _lookup(self, params, task_vars):
        record, digest = lookup_entry(params["store"], params["kind"], params["key"], params.get("record_sha256"))
        return {"changed": False, "found": record is not None, "record": record or {},
                "path": key_path(params["store"], params["kind"], params["key"]), "record_sha256": digest}

    def _sub_action(self, name, args, task_vars):
        task = self._task.copy()
        task.args = args
        action = self._shared_loader_obj.action_loader.get(
            name, task=task, connection=self._connection, play_context=self._play_context, loader=self._loader,
            templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        out = action.run(task_vars=task_vars)
        if out.get("failed"):
            raise StoreError("%s %s failed: %s" % (name, args.get("src"), out.get("msg")))
        return out

    def _node_files(self, params, task_vars):
        """``{name: {sha256, size, mode}}`` of ``files`` of ``src`` on the node, read there by the module
        (op=describe: a link, or a src under one, is refused by name)."""
        args = dict(op="describe", mode="shared", store=params["store"], kind=params["kind"], key=params["key"],
                    src=params["src"], files=params["files"])
        out = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if out.get("failed"):
            msg = out.get("msg") or "the module failed"
            prefix = "artifact store %s: " % params["store"]
            raise StoreError("%s (on %s)" % (msg[len(prefix):] if msg.startswith(prefix) else msg,
                                             task_vars.get("inventory_hostname")))
        described = out.get("files") or {}
        for name in params["files"]:
            entry = described.get(name) or {}
            try:
                entry["mode"] = int(str(entry.get("mode")), 8)
            except ValueError:
                raise StoreError("the node described %s without a mode: %r" % (name, entry))
        return described

    def _put(self, params, task_vars):
        store, kind, key = params["store"], params["kind"], params["key"]
        path = key_path(store, kind, key)
        existing, digest = lookup_entry(store, kind, key, params.get("record_sha256"))
        if existing is not None:
            return {"changed": False, "published": False, "record": existing, "path": path, "record_sha256": digest}
        described = self._node_files(params, task_vars)
        record = make_record(kind, key, dict((name, {"sha256": described[name]["sha256"],
                                                     "size": described[name]["size"]}) for name in params["files"]),
                             params["host"], params["meta"])
        if self._task.check_mode:
            return {"changed": True, "published": True, "record": record, "path": path, "record_sha256": ""}
        incoming = new_incoming(store, kind, key, params["host"], params["lock_timeout"])
        try:
            for name in params["files"]:
                remote = os.path.join(params["src"], name)
                local = os.path.join(incoming.path, name)  # a fresh 0700 directory: nothing there is exposed
                self._sub_action("ansible.legacy.fetch", dict(src=remote, dest=local, flat=True), task_vars)
                verify_file(local, record["files"][name], shown="%s:%s (fetched)" % (params["host"], remote))
                os.chmod(local, store_mode(described[name]["mode"]))
        except BaseException:
            incoming.discard()
            raise
        published, stored, digest = publish(store, kind, key, incoming, record, params["lock_timeout"],
                                            params.get("record_sha256"))
        return {"changed": published, "published": published, "record": stored, "path": path,
                "record_sha256": digest}

    def _get(self, params, task_vars):
        store, kind, key, dest = params["store"], params["kind"], params["key"], params["dest"]
        if not dest or not os.path.isabs(dest):
            raise StoreError("dest %r must be an absolute path" % (dest,))
        path = key_path(store, kind, key)
        record, digest = lookup_entry(store, kind, key, params.get("record_sha256"))
        if record is None:
            return {"changed": False, "found": False, "record": {}, "path": path, "copied": [], "record_sha256": ""}
        for name, entry in record["files"].items():  # never send a damaged artifact
            verify_file(os.path.join(path, name), entry)
        if self._task.check_mode:
            # The module reads dest on the node against a store of only this record: what it would copy.
            return dict(self._on_node_against(record, dest, path, task_vars, stage=None), record_sha256=digest)
        stage = os.path.join(dest, ".store-%s-%s" % (kind, key[:16]))
        # Nothing is copied through a link: the module refuses a dest that is or lies under one before it reads a
        # store (here one that cannot exist, so it writes nothing).
        self._on_node_refuse_any_link(dest, stage, record, task_vars)
        try:
            # mode=preserve: each file keeps the stored mode (the source's & 0755), a private file stays private.
            self._sub_action("ansible.legacy.copy", dict(src=path, dest=os.path.join(stage, kind) + "/",
                                                         mode="preserve", directory_mode="0755"), task_vars)
            return self._on_node_against(record, dest, path, task_vars, stage=stage, pin=digest)
        finally:
            self._execute_module(module_name="ansible.legacy.file", task_vars=task_vars,
                                 module_args=dict(path=stage, state="absent"))

    def _on_node_refuse_any_link(self, dest, stage, record, task_vars):
        args = dict(op="get", mode="shared", store=os.path.join(stage, ".none"), kind=record["kind"],
                    key=record["key"], dest=dest)
        out = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if out.get("failed"):
            msg = out.get("msg") or "the node's check of %s failed" % dest
            prefix = "artifact store %s: " % args["store"]
            raise StoreError("%s (on %s)" % (msg[len(prefix):] if msg.startswith(prefix) else msg,
                                             task_vars.get("inventory_hostname")))

    def _on_node_against(self, record, dest, path, task_vars, stage, pin=None):
        """Run the module's get on the node: against ``stage`` (the key's directory copied there), or in check mode
        against the record alone (``stage`` None: what dest lacks)."""
        if stage is None:
            out = {"changed": False, "found": True, "record": record, "path": path, "copied": []}
            for name, entry in record["files"].items():
                stat = self._execute_module(
                    module_name="ansible.legacy.stat", task_vars=task_vars,
                    module_args=dict(path=os.path.join(dest, name), get_checksum=True, checksum_algorithm="sha256"))
                info = stat.get("stat", {})
                if not (info.get("exists") and info.get("checksum") == entry["sha256"]
                        and info.get("size") == entry["size"]):
                    out["copied"].append(name)
            out["changed"] = bool(out["copied"])
            return out
        # The staged record must be the bytes checked here: the node checks the stage against their digest.
        args = dict(op="get", mode="shared", store=stage, kind=record["kind"], key=record["key"], dest=dest,
                    record_sha256=pin)
        out = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if out.get("failed"):
            raise StoreError(out.get("msg") or "the node's check of %s failed" % path)
        out["path"] = path
        return out
