# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One EP test on a node through the verify launcher (run_deepep.sh): the argument spec of the ep_test action, the
launcher's argv, and the three shell commands the action sends (start detached, ask, read back).

The test runs detached from the connection, in its own session (``setsid``): a wrapper shell runs the launcher with
its output into ``<name>.out`` and writes the launcher's exit status into ``<name>.rc`` (by a rename, so a status
file is never half-written) when it ends, however it ends. The action then asks with a plain shell command, not a
module: one SSH exec of ``sh``, not a Python interpreter importing Ansible's module code, which is the whole
difference between a status poll costing milliseconds and one costing a fifth of a CPU-second (more under
emulation).
"""

from __future__ import annotations

import re
import shlex

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify import backends
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.judge import JUDGE_SPEC

__all__ = ["ARGUMENT_SPEC", "GRACE_S", "START_WAIT_S", "LaunchError", "validate", "launcher_argv", "paths", "test_path",
           "start_command", "ask_command", "read_command", "kill_command", "parse_started", "parse_answer", "parse_read", "poll_delays"]

# The options of modules/ep_test.py (its DOCUMENTATION), typed by validate_argument_spec in the action.
ARGUMENT_SPEC = dict(
    launcher=dict(type="str", required=True),
    name=dict(type="str", required=True),
    env_script=dict(type="str", required=True),
    src=dict(type="str", required=True),
    python=dict(type="str", required=True),
    script=dict(type="str"),
    backend=dict(type="str", choices=sorted(backends.BACKENDS) + sorted(backends.ALIASES)),
    scope=dict(type="str", choices=list(backends.SCOPES)),
    num_processes=dict(type="int", required=True),
    rdma=dict(type="bool"),
    args=dict(type="list", elements="str", default=[]),
    env=dict(type="dict", default={}),
    timeout=dict(type="int", required=True),
    kill_after=dict(type="int", default=30),
    poll=dict(type="int", default=10),
    fetch_to=dict(type="path"),
    nic_traffic=dict(type="dict", options=dict(min_bytes=dict(type="int", default=1048576),
                                               mapping=dict(type="str"), mapping_supported=dict(type="bool"))),
    judge=dict(type="dict", options=JUDGE_SPEC),
)

# Seconds past timeout + kill_after before the action gives up asking: the launcher's own bound ends the test first.
GRACE_S = 60
# Seconds the start waits for the wrapper to write its pid.
START_WAIT_S = 10

NAME = re.compile(r"[a-z0-9_-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RUNNING = "running"
LOST = "lost"


class LaunchError(ValueError):
    """A bad argument of ep_test, named with the expected form."""


def _absolute(option, value):
    if not value.startswith("/"):
        raise LaunchError("%s=%r is not an absolute path on the node (expected e.g. /opt/deepep/verify/run_deepep.sh)"
                          % (option, value))
    return value


def _seconds(option, value, at_least=1):
    if isinstance(value, bool) or value < at_least:
        raise LaunchError("%s=%r is not a whole number of seconds of at least %d (expected e.g. 600)"
                          % (option, value, at_least))
    return value


def validate(params):
    """The typed arguments (ARGUMENT_SPEC), judged beyond their types; LaunchError names the first bad one."""
    _absolute("launcher", params["launcher"])
    if not NAME.fullmatch(params["name"]):
        raise LaunchError("name=%r is not a log name (expected lower-case letters, digits, _ and -, such as "
                          "'intranode')" % (params["name"],))
    for option in ("env_script", "src", "python"):
        if not params[option]:
            raise LaunchError("%s is empty (expected a path on the node)" % option)
    if not params["script"] and not (params["backend"] and params["scope"]):
        raise LaunchError("script is empty and backend/scope do not name a test (expected the test's path, relative "
                          "to src or absolute, or a backend and a scope such as backend=v2 scope=intranode)")
    if params["backend"] and params["scope"]:
        # The backend's test of the scope (unless a script of one's own is given), run with its arguments first and
        # its environment under the caller's: a later argument and a caller's variable win.
        try:
            # On the profile's fabric: with the arguments its entry gives the test (DeepEP V2 across EFA nodes,
            # an explicit --num-sms).
            run = backends.scope_of(params["backend"], params["scope"],
                                    fabric=(params.get("judge") or {}).get("fabric"))
        except backends.BackendError as exc:
            raise LaunchError(str(exc))
        params["script"] = params["script"] or run["test"]
        if run["beside_launcher"] and not params["script"].startswith("/"):
            # A test the collection ships (NCCL EP's launcher) lies beside run_deepep.sh, not in DeepEP's tree.
            params["src"] = params["launcher"].rsplit("/", 1)[0] or "/"
        # On a node without an RDMA NIC, the arguments and environment the backend's test runs with there (V2: GIN
        # off, no hybrid kernels).
        own_args = run["args"] + (run["args_without_rdma"] if params.get("rdma") is False else [])
        own_env = dict(run["env"], **(run["env_without_rdma"] if params.get("rdma") is False else {}))
        params["args"] = own_args + list(params["args"])
        params["env"] = dict(own_env, **params["env"])
    if isinstance(params["num_processes"], bool) or params["num_processes"] < 1:
        raise LaunchError("num_processes=%r is not a positive number of processes (expected e.g. 8)"
                          % (params["num_processes"],))
    for key, value in params["env"].items():
        if not ENV_NAME.fullmatch(str(key)):
            raise LaunchError("env key %r is not an environment variable name (expected letters, digits and _, "
                              "not starting with a digit)" % (key,))
        if isinstance(value, (dict, list)) or value is None:
            raise LaunchError("env %s=%r is not a single value (expected a string or a number)" % (key, value))
    _seconds("timeout", params["timeout"])
    _seconds("kill_after", params["kill_after"])
    poll = _seconds("poll", params["poll"])
    if poll > params["timeout"]:
        raise LaunchError("poll=%s is longer than timeout=%s (expected poll <= timeout)" % (poll, params["timeout"]))
    nic = params.get("nic_traffic")
    if nic is not None:
        if not params.get("judge"):
            raise LaunchError("nic_traffic is given without judge (expected judge too: the NIC verdict is the "
                              "record's nic)")
        if nic["min_bytes"] < 1:
            raise LaunchError("nic_traffic.min_bytes=%r is not a positive number of bytes (expected e.g. 1048576)"
                              % (nic["min_bytes"],))
    return params


def skip_reason(params):
    """Why the backend's test of the scope cannot run on ``num_processes`` ranks (``backends.skip_reason``), or None
    (always None without a backend and a scope)."""
    if not (params.get("backend") and params.get("scope")):
        return None
    return backends.skip_reason(params["backend"], params["scope"], params["num_processes"], rdma=params.get("rdma"))


def launcher_argv(params):
    """run_deepep.sh NAME ENV_SCRIPT SRC KILL_AFTER TIMEOUT [NAME=VALUE ...] -- PYTHON SCRIPT NPROC [ARGS ...]"""
    settings = ["%s=%s" % (key, value) for key, value in params["env"].items()]
    return ([params["launcher"], params["name"], params["env_script"], params["src"], str(params["kill_after"]),
             str(params["timeout"])] + settings
            + ["--", params["python"], params["script"], str(params["num_processes"])] + list(params["args"]))


def paths(params):
    """The node's files of one run: the launcher's log, the wrapper's output, status and pid files (beside the
    launcher)."""
    directory = params["launcher"].rsplit("/", 1)[0] or "/"
    base = "%s/%s" % (directory.rstrip("/"), params["name"])
    return {"log": base + ".log", "out": base + ".out", "rc": base + ".rc", "pid": base + ".pid"}


def test_path(params):
    """The test's path on the node: ``script`` when absolute, else under ``src``."""
    script = params["script"]
    return script if script.startswith("/") else "%s/%s" % (params["src"].rstrip("/") or "/", script)


def start_command(argv, files, test=None):
    """Remove the files of an earlier run, start the launcher in a session of its own with every descriptor away
    from the connection, and print ``started <pid>``: the pid the wrapper shell wrote itself (the session's leader,
    whether ``setsid`` had to fork or not), waited for up to START_WAIT_S. With ``test`` (its path on the node),
    print ``no test`` and start nothing when it is not a file there."""
    q = shlex.quote
    if test is not None:
        return "if [ -f {test} ]; then {start}; else echo 'no test'; fi".format(
            test=q(test), start=start_command(argv, files))
    wrapper = ('echo $$ >%s; t=$(date +%%s.%%N); "$@" >%s 2>&1 </dev/null; r=$?; '
               'echo "$r $t $(date +%%s.%%N)" >%s.tmp; mv -f %s.tmp %s'
               % (q(files["pid"]), q(files["out"]), q(files["rc"]), q(files["rc"]), q(files["rc"])))
    return ("rm -f {log} {out} {rc} {rc}.tmp {pid} && "
            "{{ setsid sh -c {wrapper} sh {argv} </dev/null >/dev/null 2>&1 & }} && "
            "i=0; while [ ! -s {pid} ] && [ $i -lt {tries} ]; do sleep 0.1; i=$((i + 1)); done; "
            "if [ -s {pid} ]; then echo \"started $(cat {pid})\"; else echo 'no pid file'; fi"
            .format(log=q(files["log"]), out=q(files["out"]), rc=q(files["rc"]), pid=q(files["pid"]),
                    wrapper=q(wrapper), argv=" ".join(q(arg) for arg in argv), tries=START_WAIT_S * 10))


def _answer(files):
    q = shlex.quote
    return "printf 'rc=%%s\\n' \"$(cat %s)\"; cat %s 2>/dev/null" % (q(files["rc"]), q(files["out"]))


def ask_command(files, pid):
    """Print ``rc=N`` and the run's output once the status file is there, ``running`` while the session leader
    lives (a zombie does not), ``lost`` when it is gone without a status (the node rebooted, something killed it).
    The status file is looked for again after the leader is found gone: it writes the status just before it exits."""
    q = shlex.quote
    answer = _answer(files)
    return ("if [ -e {rc} ]; then {answer}; elif kill -0 {pid} 2>/dev/null && ! grep -qs ') Z ' /proc/{pid}/stat; "
            "then echo {running}; elif [ -e {rc} ]; then {answer}; else echo {lost}; fi"
            .format(rc=q(files["rc"]), answer=answer, pid=int(pid), running=RUNNING, lost=LOST))


def read_command(path):
    """The text of one node file, and whether it was there (a first line ``present`` or ``absent``)."""
    q = shlex.quote
    return "if [ -r {p} ]; then echo present; cat {p}; else echo absent; fi".format(p=q(path))


def kill_command(pid):
    """Best effort past the bound: every process of the run's session, then its process group."""
    return ("pkill -KILL -s {pid} 2>/dev/null; kill -KILL -- -{pid} 2>/dev/null; true".format(pid=int(pid)))


def parse_started(stdout, test=None):
    """The session id ``start_command`` printed, or LaunchError with what came back instead (``test``: the test's
    path, named when the node has no such file)."""
    match = re.search(r"^started ([0-9]+)\s*$", stdout or "", re.M)
    if (stdout or "").strip() == "no test":
        raise LaunchError("the test %s is not a file on the node: nothing was started; expected src to be the source "
                          "tree that holds it (DeepEP's, where the verify roles' *_src point) or script an absolute "
                          "path" % (test or "to run",))
    if not match:
        raise LaunchError("the launcher did not start: the node answered %r (expected 'started <pid>')"
                          % ((stdout or "").strip()[:200],))
    return int(match.group(1))


def parse_answer(stdout):
    """(state, rc, seconds, output) from ``ask_command``'s answer: ('running', None, None, ''), ('lost', None, None,
    ''), or ('finished', rc, seconds the launcher ran, output). The wrapper writes ``RC START END`` (the clock's
    seconds with nanoseconds); a first field that is not a number gives rc -1, and seconds are None when the times
    are missing, unreadable or out of order (a clock stepped back)."""
    text = stdout or ""
    first, dummy, rest = text.partition("\n")
    first = first.strip()
    if first in (RUNNING, LOST):
        return first, None, None, ""
    if not first.startswith("rc="):
        raise LaunchError("the node answered %r to the status question (expected 'running', 'lost' or 'rc=<n>')"
                          % (text.strip()[:200],))
    fields = first[3:].split()
    if not fields or not re.fullmatch(r"-?[0-9]+", fields[0]):
        return "finished", -1, None, rest
    return "finished", int(fields[0]), _seconds_between(fields[1:3]), rest


def _seconds_between(times):
    """END - START in seconds (3 decimals) from the wrapper's two clock readings, or None."""
    if len(times) != 2:
        return None
    try:
        start, end = float(times[0]), float(times[1])
    except ValueError:
        return None
    return round(end - start, 3) if end >= start else None


def parse_read(stdout):
    """(present, text) from ``read_command``'s answer."""
    first, dummy, rest = (stdout or "").partition("\n")
    return first.strip() == "present", rest


def poll_delays(poll):
    """Seconds to sleep before each next question: 1, 2, 4, ... up to ``poll``, then ``poll``.

    A test that ends within seconds is seen within about its own time, not a whole ``poll`` later; a long one costs
    at most log2(poll) more questions than a fixed interval."""
    delay = 1
    while True:
        yield min(delay, poll)
        delay = min(delay * 2, poll)
