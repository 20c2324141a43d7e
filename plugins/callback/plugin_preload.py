# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load the collection's controller plugins once per playbook process, before its workers fork.

ansible-core runs every task of every host in a worker process forked from the playbook process. A worker that
templates a collection filter or test (``gpufleet.deepep.fabric``) imports *every* file of that collection's
``plugins/filter`` package to find the name (ansible-core's Jinja2Loader walks the whole package), and every
``plugin_utils`` module they import, compiling each from source (the collection loader never reads bytecode); a
task that templates a collection lookup does the same for the lookup and its imports. (Action plugins are not
among them: ansible-core loads a task's action plugin in the playbook process before it forks.) The worker
exits after the task, so the next task of the next host does it all again: measured, a ``set_fact`` using one
collection filter cost 0.29 CPU-s per task and host against 0.06 with a builtin filter, 80 % of it those imports;
the audit of 16 simulated nodes spent 8.9 controller CPU-s without this callback and 5.7 with it.

At the start of the playbook this callback loads, in the playbook process, every filter, test and lookup
plugin file of the collections of its option ``collections`` (this collection by default), so the forked workers
find them loaded (ansible-core's plugin loaders cache each file's module by path). What the plugins do is
unchanged: they are the same modules, loaded earlier. A plugin that fails to load is left to fail where a task
uses it, with ansible-core's own message.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: plugin_preload
type: aggregate
short_description: Load the collection's filter, test and lookup plugins once, before the workers fork
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - At the start of the playbook, loads every filter, test and lookup plugin file of the collections in
    O(collections) in the playbook process, so that the worker process of each task and host finds them loaded
    instead of importing and compiling them again (ansible-core's worker of a task that templates one collection
    filter imports every filter file of that collection).
  - Changes no result; saves controller CPU in proportion to tasks times hosts. Enable it in C(callbacks_enabled)
    (the collection's own C(ansible.cfg) does).
options:
  collections:
    description:
      - The collections whose plugins are loaded; empty for none.
    type: list
    elements: str
    default: [gpufleet.deepep]
    env:
      - name: GPUFLEET_PRELOAD_COLLECTIONS
    ini:
      - section: callback_plugin_preload
        key: collections
requirements:
  - enable in callbacks_enabled
"""

import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import PluginLoader, filter_loader, lookup_loader, test_loader

KINDS = (("filter", filter_loader), ("test", test_loader), ("lookup", lookup_loader))


def plugin_files(collection: str, kind: str) -> list[str]:
    """The module names of the plugin files of one kind in a collection, [] when it has none."""
    try:
        package = importlib.import_module(f"ansible_collections.{collection}.plugins.{kind}")
    except ImportError:
        return []
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if not info.ispkg)


def preload(collections: list[str]) -> dict[str, list[str]]:
    """Load the filter, test and lookup plugin files of the collections; returns {kind: [loaded names]}."""
    loaded: dict[str, list[str]] = {}
    for collection in collections:
        for kind, loader in KINDS:
            for name in plugin_files(collection, kind):
                fqcn = f"{collection}.{name}"
                try:
                    if kind == "lookup":
                        found = loader.get_with_context(fqcn, class_only=True).object
                    else:
                        # The file as the Jinja2Loader's own walk loads it (PluginLoader's method: one file, cached
                        # by path), not one name of it.
                        found = PluginLoader.get_with_context(loader, fqcn).object
                except Exception:  # pylint: disable=broad-exception-caught
                    # Left to fail where a task uses it, with ansible-core's own message.
                    continue
                if found is not None:
                    loaded.setdefault(kind, []).append(fqcn)
    return loaded


class CallbackModule(CallbackBase):
    """Loads the named collections' controller plugins in the playbook process."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.deepep.plugin_preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.loaded: dict[str, list[str]] = {}

    def v2_playbook_on_start(self, playbook):
        collections = [name.strip() for name in (self.get_option("collections") or []) if name and name.strip()]
        if collections:
            self.loaded = preload(collections)
            self._display.vvv("plugin_preload: %d plugin files loaded" % sum(map(len, self.loaded.values())))
