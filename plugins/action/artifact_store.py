# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The artifact store (gpufleet.deepep.artifact_store): lookup, get and put of a build key's files.

mode=shared: the store is a path the node mounts; the module of the same name runs there and does everything.
mode=controller: the store is a directory of the controller. lookup reads it here; put fetches the node's files
into <store>/.incoming (checked against the sha256 the node computed) and publishes them here under the store's
lock; get verifies the store's copy here, copies the key's directory to a staging directory in dest on the node,
and runs the module there (mode=shared on that staging directory), which verifies every file after the transfer and
renames them into dest. The logic is module_utils/_store.py; the options are documented in modules/artifact_store.py.
"""

from __future__ import annotations

import os
import shutil

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.module_utils._store import (
    StoreError,
    check_files,
    check_request,
    key_path,
    lookup,
    make_record,
    new_incoming,
    publish,
    verify_file,
)
from ansible_collections.gpufleet.deepep.plugins.modules.artifact_store import ARGUMENT_SPEC, REQUIRED_IF

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
            if params["mode"] == "shared":
                result.update(self._execute_module(module_name=MODULE, module_args=params, task_vars=task_vars))
            else:
                check_request(params["store"], params["kind"], params["key"])
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
        record = lookup(params["store"], params["kind"], params["key"])
        return {"changed": False, "found": record is not None, "record": record or {},
                "path": key_path(params["store"], params["kind"], params["key"])}

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

    def _node_files(self, src, files, task_vars):
        """``{name: {sha256, size}}`` of ``files`` of ``src`` on the node."""
        host = task_vars.get("inventory_hostname")
        out = {}
        for name in check_files(files):
            path = os.path.join(src, name)
            stat = self._execute_module(
                module_name="ansible.legacy.stat", task_vars=task_vars,
                module_args=dict(path=path, get_checksum=True, checksum_algorithm="sha256", follow=True))
            if stat.get("failed"):
                raise StoreError("cannot read %s on %s: %s" % (path, host, stat.get("msg")))
            info = stat.get("stat", {})
            if not info.get("exists") or not info.get("isreg"):
                raise StoreError("%s is not a file on %s: nothing to publish (files must name files of src)"
                                 % (path, host))
            out[name] = {"sha256": info["checksum"], "size": info["size"]}
        return out

    def _put(self, params, task_vars):
        store, kind, key = params["store"], params["kind"], params["key"]
        path = key_path(store, kind, key)
        existing = lookup(store, kind, key)
        if existing is not None:
            return {"changed": False, "published": False, "record": existing, "path": path}
        described = self._node_files(params["src"], params["files"], task_vars)
        record = make_record(kind, key, described, params["host"], params["meta"])
        if self._task.check_mode:
            return {"changed": True, "published": True, "record": record, "path": path}
        incoming = new_incoming(store, kind, key, params["host"])
        try:
            for name in params["files"]:
                remote = os.path.join(params["src"], name)
                local = os.path.join(incoming, name)
                self._sub_action("ansible.legacy.fetch", dict(src=remote, dest=local, flat=True), task_vars)
                verify_file(local, described[name], shown="%s:%s (fetched)" % (params["host"], remote))
                os.chmod(local, 0o644)
        except BaseException:
            shutil.rmtree(incoming, ignore_errors=True)
            raise
        published, stored = publish(store, kind, key, incoming, record)
        return {"changed": published, "published": published, "record": stored, "path": path}

    def _get(self, params, task_vars):
        store, kind, key, dest = params["store"], params["kind"], params["key"], params["dest"]
        if not dest or not os.path.isabs(dest):
            raise StoreError("dest %r must be an absolute path" % (dest,))
        path = key_path(store, kind, key)
        record = lookup(store, kind, key)
        if record is None:
            return {"changed": False, "found": False, "record": {}, "path": path, "copied": []}
        for name, entry in record["files"].items():  # never send a damaged artifact
            verify_file(os.path.join(path, name), entry)
        if self._task.check_mode:
            # The module reads dest on the node against a store of only this record: what it would copy.
            return self._on_node_against(record, dest, path, task_vars, stage=None)
        stage = os.path.join(dest, ".store-%s-%s" % (kind, key[:16]))
        try:
            self._sub_action("ansible.legacy.copy", dict(src=path, dest=os.path.join(stage, kind) + "/", mode="0644",
                                                         directory_mode="0755"), task_vars)
            return self._on_node_against(record, dest, path, task_vars, stage=stage)
        finally:
            self._execute_module(module_name="ansible.legacy.file", task_vars=task_vars,
                                 module_args=dict(path=stage, state="absent"))

    def _on_node_against(self, record, dest, path, task_vars, stage):
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
        args = dict(op="get", mode="shared", store=stage, kind=record["kind"], key=record["key"], dest=dest)
        out = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        if out.get("failed"):
            raise StoreError(out.get("msg") or "the node's check of %s failed" % path)
        out["path"] = path
        return out
