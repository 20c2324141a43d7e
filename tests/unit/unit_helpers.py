# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers for the collection's unit tests (import them from here, never from conftest).

Modules and module_utils are imported through the collection namespace
(``ansible_collections.gpufleet.deepep...``); ``scripts/bootstrap.sh`` links the checkout at
``.collections/ansible_collections/gpufleet/deepep``; under pytest, pytest.ini puts ``.collections`` on sys.path,
and this file does too, for the programs that import it outside pytest (test_deepep_build's module runner).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".collections"
if not (COLLECTIONS / "ansible_collections" / "gpufleet" / "deepep").exists():
    raise RuntimeError("run scripts/bootstrap.sh (or `make bootstrap`) first: .collections is missing")
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

FIXTURES = REPO / "tests" / "fixtures"
CAPTURED = FIXTURES / "captured" / "h200x2"


class ModuleResult(dict):
    """The JSON a module printed, plus whether it failed."""

    @property
    def failed(self) -> bool:
        return bool(self.get("failed"))


# Where a module reads the node's files: ``root`` and ``sysfs_root`` in a test's args name fixture trees; they are
# no module options, but the module's private constants, set for the one run (the first that the module has).
TREE_KEYS = {"root": ("_ROOT",), "sysfs_root": ("_SYSFS_ROOT", "_PROC_ROOT")}


@contextlib.contextmanager
def node_trees(module, args: dict):
    """Point ``module`` at the fixture trees ``args`` names (``root``, ``sysfs_root``) for the block; yields the args
    the module itself takes (those keys left out)."""
    args = dict(args)
    saved = []
    try:
        for key, names in TREE_KEYS.items():
            name = next((n for n in names if hasattr(module, n)), None)
            if key in args and name is not None:
                saved.append((name, getattr(module, name)))
                setattr(module, name, args.pop(key))
        yield args
    finally:
        for name, value in reversed(saved):
            setattr(module, name, value)


def run_module(module, args: dict, check_mode: bool = False, diff: bool = False) -> ModuleResult:
    """Run ``module.main()`` with ``args`` and return what it printed as a dict.

    Works for exit_json and fail_json alike (both end in SystemExit); the caller asserts on
    ``result.failed`` and the keys. A module file that only documents an action (no ``main``: play_settings,
    serve_plan) runs as that action, in this process, the way the controller runs it. ``root`` and
    ``sysfs_root`` in ``args`` point the module at fixture trees (:func:`node_trees`).
    """
    if not hasattr(module, "main"):
        return ModuleResult(_run_action(module, args, check_mode))
    with node_trees(module, args) as module_args:
        return _run_main(module, module_args, check_mode, diff)


def _run_main(module, args: dict, check_mode: bool, diff: bool) -> ModuleResult:
    from ansible.module_utils.testing import patch_module_args

    full = dict(args)
    full["_ansible_check_mode"] = check_mode
    full["_ansible_diff"] = diff
    full.setdefault("_ansible_remote_tmp", "/tmp")
    full.setdefault("_ansible_keep_remote_files", False)
    from ansible.module_utils import _internal

    out = io.StringIO()
    # Once a test has imported controller-side code (filters, the template engine), ansible-core flags the
    # process as the controller and prints module warnings to stderr instead of returning them. Modules run
    # on targets, so run them as a target would.
    was_controller = _internal.is_controller
    _internal.is_controller = False
    # A module runs in a fresh process on its target: no warnings or deprecations of earlier runs in this one.
    from ansible.module_utils.common import warnings as module_warnings

    module_warnings._global_warnings.clear()
    module_warnings._global_deprecations.clear()
    try:
        with patch_module_args(full), contextlib.redirect_stdout(out):
            with pytest.raises(SystemExit):
                module.main()
    finally:
        _internal.is_controller = was_controller
    text = out.getvalue().strip()
    # The module prints exactly one JSON document.
    return ModuleResult(json.loads(text))


def _run_action(module, args, check_mode):
    """The result of the action a docs-only module file documents, for a task with ``args`` (a refusal of its
    arguments as a failed result, as ansible-playbook reports it)."""
    import importlib

    from ansible.errors import AnsibleActionFail

    name = module.__name__.rsplit(".", 1)[1]
    plugin = importlib.import_module("ansible_collections.gpufleet.deepep.plugins.action." + name)
    try:
        result = action_plugin(plugin, name, args, check_mode).run(task_vars={})
    except AnsibleActionFail as exc:
        result = {"failed": True, "changed": False, "msg": exc.message}
    return json.loads(json.dumps(result))


def render_sysfs_tree(tmp_path: Path, profile="gcp_b200", name: str = "sys", **kwargs) -> Path:
    """Render a fleetsim profile's fake sysfs (a profile name or a profile dict) under ``tmp_path/name``."""
    from tools.fleetsim import fakehw

    prof = fakehw.load_profile(profile) if isinstance(profile, str) else profile
    root = tmp_path / name
    fakehw.render_sysfs(prof, root, **kwargs)
    return root


def siblings(prefix):
    """The names beside ``prefix`` (a path) that begin with its name: the prefix, its staging and previous trees."""
    parent, base = os.path.split(prefix)
    return sorted(n for n in os.listdir(parent) if n.startswith(base))


# The first of two builds of one prefix: it holds the prefix's build lock, makes its staging directory, says so
# with a file and waits until its stdin closes.
_FIRST_BUILD = (
    "import os, sys\nsys.path.insert(0, sys.argv[1])\n"
    "from ansible_collections.gpufleet.deepep.plugins.module_utils._swap import PrefixLock\n"
    "with PrefixLock(sys.argv[2], timeout=0):\n"
    "    os.makedirs(sys.argv[3]); open(sys.argv[4], 'w').close(); sys.stdin.read()\n")


@contextlib.contextmanager
def first_build_holding_the_lock(prefix, staging, ready):
    """Another process (the first build) holds the build lock of ``prefix`` while the block runs and has made
    ``staging``; it creates ``ready`` once it has both (wait for that), and ends with the block. Gives its Popen."""
    first = subprocess.Popen([sys.executable, "-c", _FIRST_BUILD, str(COLLECTIONS), str(prefix), str(staging),
                              str(ready)], stdin=subprocess.PIPE)
    try:
        yield first
    finally:
        first.stdin.close()
        first.wait(timeout=60)


def action_plugin(plugin, name, args, check_mode=False):
    """``plugin``'s ActionModule for a task ``gpufleet.deepep.<name>`` with ``args`` (no connection, a mock one)."""
    from unittest import mock

    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task
    from ansible.template import Templar

    task = Task()
    task.action = "gpufleet.deepep.%s" % name
    task.args = args
    task.check_mode = check_mode
    context = PlayContext()
    context.check_mode = check_mode
    loader = DataLoader()
    return plugin.ActionModule(task, mock.MagicMock(), context, loader, Templar(loader), None)
