# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Commands of the build modules: argv lists with LC_ALL=C, each bounded by a timeout, recorded, and logged to
the build log once it exists; the one exit of the observe/plan/apply modules (``finish``), the one timestamp of
their records (``now``) and the one check of a directory option (``check_dir_option``).

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import datetime
import os
import subprocess

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import TOOLING_STOPS, unexpected_message

__all__ = ["StepFailed", "Failed", "CommandLog", "run_bounded", "log_tail", "finish", "now", "check_dir_option",
           "DEFAULT_TIMEOUT"]

# A whole NVSHMEM or DeepEP build is one command; nothing the modules run takes longer than this on a build node.
DEFAULT_TIMEOUT = 4 * 3600


def run_bounded(argv, timeout, env=None, cwd=None):
    """Run ``argv`` (a list) with ``env`` added to this process's environment and LC_ALL=C; ``(rc, stdout, stderr)``.

    rc 124 (and a line in stderr) when it ran past ``timeout`` seconds and was killed, 127 when it is missing.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["LC_ALL"] = "C"
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return 127, "", "%s: %s" % (argv[0], exc.strerror or exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            proc.kill()
        out, err = proc.communicate()
        return 124, out.decode("utf-8", "replace"), err.decode("utf-8", "replace") + (
            "\ntimed out after %ss: %s" % (timeout, " ".join(argv)))
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


class StepFailed(Exception):
    """A build step failed: ``msg`` for the user, ``rc`` and ``cmd`` when a command failed, ``extra`` result keys."""

    def __init__(self, msg, rc=None, cmd=None, **extra):
        super(StepFailed, self).__init__(msg)
        self.msg = msg
        self.rc = rc
        self.cmd = cmd
        self.extra = extra


class CommandLog(object):
    """Runs commands (``run_bounded``: LC_ALL=C, each bounded by ``timeout`` seconds), records their argv in
    ``commands`` and, once ``log_path`` is set, appends each command line and its output to the build log."""

    def __init__(self, log_path=None, timeout=DEFAULT_TIMEOUT, runner=run_bounded):
        self._runner = runner
        self.log_path = log_path
        self.timeout = timeout
        self.commands = []

    def log(self, text):
        if self.log_path and text:
            with open(self.log_path, "a", encoding="utf-8", errors="replace") as handle:
                handle.write(text)

    def run(self, argv, env=None, cwd=None, check=True, record=True, timeout=None):
        if record:
            self.commands.append(list(argv))
        if self.log_path:
            env_text = " ".join("%s=%s" % (k, v) for k, v in sorted((env or {}).items()))
            self.log("\n$ %s%s\n" % ((env_text + " ") if env_text else "", " ".join(argv)))
        rc, out, err = self._runner(list(argv), timeout or self.timeout, env=env, cwd=cwd)
        self.log(out)
        self.log(err)
        if check and rc != 0:
            what = "timed out after %ss" % (timeout or self.timeout) if rc == 124 else "failed (rc=%d)" % rc
            raise StepFailed("command %s: %s" % (what, " ".join(argv)), rc=rc, cmd=list(argv),
                             stdout=out[-4000:], stderr=err[-4000:])
        return rc, out, err

    def quiet(self, argv, timeout=None, env=None):
        """A read-only probe: run ``argv`` unrecorded and unchecked; ``(rc, stdout, stderr)``."""
        return self.run(argv, env=env, check=False, record=False, timeout=timeout)


def log_tail(path, lines):
    """The last ``lines`` lines of the build log at ``path`` ([] when there is none)."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()[-lines:]
    except (IOError, OSError, TypeError):
        return []


class Failed(Exception):
    """Ends a build module's run with ``msg`` and the extra result keys ``extra`` (``main()`` turns it into
    ``fail_json``)."""

    def __init__(self, msg, **extra):
        super(Failed, self).__init__(msg)
        self.msg = msg
        self.extra = extra


def finish(module, job, fact_name):
    """The one exit of a build module: ``job.run()`` gives the facts (``ansible_facts.<fact_name>``) beside
    ``job.result``; a Failed it raises ends the module with its message, ``job.result`` and its extra keys."""
    try:
        facts = job.run()
    except Failed as exc:
        job.result.update(exc.extra)
        module.fail_json(msg=exc.msg, **job.result)
    except Exception as exc:  # pylint: disable=broad-except
        # the last resort (_guard): no traceback reaches the user; what the job recorded so far is kept
        if type(exc).__name__ in TOOLING_STOPS:
            raise
        module.fail_json(msg=unexpected_message(fact_name, exc), **job.result)
    module.exit_json(ansible_facts={fact_name: facts}, **job.result)


def now():
    """The time now in UTC as the records, stamps and logs write it: ``2026-01-31T12:00:00Z``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_dir_option(name, value, example):
    """Refuse the directory option ``name`` unless ``value`` is an absolute path other than ``/`` and not a
    symbolic link (a module that makes, chmods or chowns the directory would act on the link's target); Failed
    names the option, the value and ``example``."""
    if not os.path.isabs(value) or os.path.normpath(value) == "/":
        raise Failed("%s: %r is not an absolute path other than /; expected a directory such as %s"
                     % (name, value, example))
    if os.path.islink(value):
        raise Failed("%s: %r is a symbolic link; expected a directory (links are not followed)" % (name, value))
