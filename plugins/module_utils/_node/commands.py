# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's read-only commands: one run in the C locale (``subprocess_runner``), many started together and
answered from that run (``PrefetchRunner``), and an executable found in PATH and the sbin directories.

Standard library only (this file runs on the managed nodes).
"""

from __future__ import annotations

import os
import subprocess
import threading

__all__ = ["C_ENV", "SBIN_DIRS", "subprocess_runner", "PrefetchRunner", "find_executable"]

C_ENV = {"LC_ALL": "C", "LANG": "C", "PYTHONDONTWRITEBYTECODE": "1"}
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def subprocess_runner(argv, timeout=None, env=None):
    """Run a command list with LC_ALL=C, return (rc, stdout, stderr); rc 124 on timeout, 127 if missing."""
    full_env = dict(os.environ)
    full_env.update(C_ENV)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=timeout, env=full_env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return 124, out, err + "\ntimed out after %ss" % timeout
    except OSError as exc:
        return 127, "", str(exc)
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


class PrefetchRunner(object):
    """A runner that starts the given commands at once, each in its own thread, and answers a later call
    with the same argv from that run (waiting for it). Other calls go to the wrapped runner. The probes of a
    node are independent, so the slowest one (``import deep_ep`` imports torch) bounds the time, not their sum.
    """

    def __init__(self, runner, calls):
        self._runner = runner
        self._results = {}
        self._threads = {}
        self._envs = {}
        for call in calls:
            argv, timeout = call[0], call[1]
            env = call[2] if len(call) > 2 else None
            key = tuple(argv)
            if key in self._threads:
                continue
            self._envs[key] = env
            thread = threading.Thread(target=self._run, args=(key, list(argv), timeout, env))
            thread.daemon = True
            self._threads[key] = thread
            thread.start()

    def _run(self, key, argv, timeout, env=None):
        try:
            self._results[key] = self._runner(argv, timeout=timeout, env=env)
        except Exception as exc:  # a runner that raises must not leave the caller waiting forever
            self._results[key] = (1, "", "%s: %s" % (type(exc).__name__, exc))

    def __call__(self, argv, timeout=None, env=None):
        key = tuple(argv)
        thread = self._threads.get(key)
        if thread is None or (env or None) != (self._envs.get(key) or None):
            return self._runner(argv, timeout=timeout, env=env)
        thread.join()
        return self._results[key]

    def join(self):
        for thread in self._threads.values():
            thread.join()


def find_executable(name, path=None):
    """``name`` if it holds a slash, else its first executable match in PATH and the sbin directories."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep)
    for directory in [d for d in dirs if d] + [d for d in SBIN_DIRS if d not in dirs]:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
