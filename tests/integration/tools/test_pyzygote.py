# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The realvm guests' fork server of module runs (tools/pyzygote.py) and its client (tools/vmfleet/guest/
vmfleet-python3.c), run here as the image runs them: the client built static with gcc, the server under the system
Python with the ansible-core copy the image build writes (tools/vmfleet/image.py). What a program and an Ansible
module see through the client is what they see under /usr/bin/python3 (streams, exit status, signals, working
directory, environment, umask), with ansible-core's module_utils already imported; anything else is python3 itself;
a payload of another ansible-core fails by name."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import pyzygote
from tools.vmfleet import image

REPO = Path(__file__).resolve().parents[3]
PYTHON = "/usr/bin/python3"
ANSIBLE = str(Path(sys.executable).parent / "ansible")
RUNS = itertools.count()

pytestmark = pytest.mark.skipif(not os.access(PYTHON, os.X_OK), reason=f"the guests' interpreter {PYTHON} is absent")

PROBE = r'''
import json, os, sys
rest = sys.stdin.read()
os.umask(old := os.umask(0))
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "probe": os.environ.get("PROBE"), "umask": old,
                  "path0": sys.path[0], "name": __name__, "stdin_left": rest, "executable": sys.executable,
                  "preloaded": "ansible.module_utils.basic" in sys.modules}))
sys.stderr.write("to stderr\n")
sys.exit(3)
'''


def _wait_until(predicate, what: str) -> None:
    """A readiness wait, bounded so that a broken server fails the test instead of hanging it (not a speed limit)."""
    tries = 0
    while not predicate():
        tries += 1
        assert tries < 3000, f"waited 300 s for {what}"
        time.sleep(0.1)


def _write_tree(root: Path, version_suffix: str = "") -> Path:
    files = pyzygote.ansible_core_tree()
    if version_suffix:
        files[pyzygote.RELEASE] = files[pyzygote.RELEASE].replace(b'__version__="',
                                                                  b'__version__="' + version_suffix.encode())
    pyzygote.write_tree(str(root), files)
    return root


def _start(tmp: Path, tree: Path) -> tuple[subprocess.Popen, Path]:
    sock = tmp / "zygote.sock"
    log = open(tmp / "server.log", "wb")  # pylint: disable=consider-using-with
    server = subprocess.Popen([PYTHON, str(REPO / "tools" / "pyzygote.py"), "--socket", str(sock),  # pylint: disable=consider-using-with
                               "--tree", str(tree)], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()
    _wait_until(lambda: sock.exists() or server.poll() is not None, "the server's socket")
    assert sock.exists(), (tmp / "server.log").read_text(encoding="utf-8", errors="replace")
    return server, sock


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pyzygote")
    client = tmp / "vmfleet-python3"
    subprocess.run(image.client_build(client), check=True, timeout=300)
    server, sock = _start(tmp, _write_tree(tmp / "tree"))
    yield {"client": str(client), "socket": str(sock), "tmp": tmp}
    _stop(server)


def _env(zygote: dict, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VMFLEET_PYZYGOTE", "PYTHON"))}
    env.update({"VMFLEET_PYZYGOTE_SOCKET": zygote["socket"], **extra})
    return env


def _run(argv: list[str], zygote: dict, source: str = "", **extra) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=source, env=_env(zygote, **extra), cwd=zygote["tmp"], umask=0o027,
                          capture_output=True, text=True, check=False, timeout=300)


def test_a_program_on_stdin_sees_what_it_sees_under_python3(zygote):
    plain = _run([PYTHON], zygote, PROBE, PROBE="x y")
    served = _run([zygote["client"]], zygote, PROBE, PROBE="x y")
    assert (served.returncode, served.stderr) == (plain.returncode, plain.stderr) == (3, "to stderr\n")
    seen, expected = json.loads(served.stdout), json.loads(plain.stdout)
    assert expected["preloaded"] is False and seen["preloaded"] is True
    seen.pop("preloaded")
    expected.pop("preloaded")
    assert seen == expected
    assert seen["umask"] == 0o027 and seen["cwd"] == str(zygote["tmp"]) and seen["argv"] == [""]


def test_an_exception_or_a_signal_ends_it_as_it_ends_python3(zygote):
    for source in ('raise ValueError("bad value 42")\n', "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"):
        plain = _run([PYTHON], zygote, source)
        served = _run([zygote["client"]], zygote, source)
        assert served.returncode == plain.returncode != 0
        assert served.stderr.splitlines()[-1:] == plain.stderr.splitlines()[-1:]
    assert "ValueError: bad value 42" in _run([zygote["client"]], zygote, 'raise ValueError("bad value 42")').stderr


@pytest.mark.parametrize("source", [
    "import atexit, sys, threading, time\natexit.register(lambda: print('atexit ran'))\n"
    "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\nsys.exit(4)\n",
    "import sys\nsys.stdout.write('unflushed')\nsys.exit('a message for stderr')\n",
    "raise KeyboardInterrupt\n",
    "import sys\nsys.exit(None)\n",
    "import sys\nsys.exit(257)\n",
], ids=["threads-and-atexit", "exit-message", "keyboard-interrupt", "exit-none", "exit-257"])
def test_the_end_of_a_program_is_python3s(zygote, source):
    plain = _run([PYTHON], zygote, source)
    served = _run([zygote["client"]], zygote, source)
    assert (served.returncode, served.stdout) == (plain.returncode, plain.stdout)
    assert served.stderr.splitlines()[-1:] == plain.stderr.splitlines()[-1:]


def test_a_signal_to_the_client_ends_its_worker(zygote):
    pidfile = zygote["tmp"] / "worker.pid"
    source = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    client = subprocess.Popen([zygote["client"]], stdin=subprocess.PIPE, env=_env(zygote), text=True)  # pylint: disable=consider-using-with
    client.stdin.write(source)
    client.stdin.close()
    _wait_until(lambda: pidfile.exists() and pidfile.read_text(encoding="utf-8"), "the worker's start")
    worker = int(pidfile.read_text(encoding="utf-8"))
    assert worker != client.pid
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=120) == -signal.SIGTERM
    _wait_until(lambda: not Path(f"/proc/{worker}").exists(), f"the end of worker {worker} after its client's")


def test_arguments_or_no_server_run_python3_itself(zygote):
    argv = _run([zygote["client"], "-c", "import sys; print(sys.argv, 'ansible.module_utils.basic' in sys.modules)"],
                zygote)
    assert argv.stdout.strip() == "['-c'] False"
    gone = _run([zygote["client"]], zygote, PROBE, VMFLEET_PYZYGOTE_SOCKET=str(zygote["tmp"] / "absent.sock"))
    assert gone.returncode == 3 and json.loads(gone.stdout)["preloaded"] is False
    off = _run([zygote["client"]], zygote, PROBE, VMFLEET_PYZYGOTE_OFF="1")
    assert json.loads(off.stdout)["preloaded"] is False


def _ansible(zygote: dict, interpreter: str, module: str, args: str = "", pipelining: bool = True) -> tuple[int, dict]:
    """An ad hoc run on localhost, its module piped to the interpreter's stdin as over SSH or run as a file; its return
    code and the module's result as the tree callback writes it, without the run's times."""
    tree = zygote["tmp"] / f"tree-{next(RUNS)}"
    proc = subprocess.run([ANSIBLE, "localhost", "-m", module, "-a", args, "-e",
                           f"ansible_python_interpreter={interpreter}"], cwd=REPO, capture_output=True, text=True,
                          check=False, timeout=600,
                          env=_env(zygote, ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1",
                                   ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.tree", ANSIBLE_CALLBACK_TREE_DIR=str(tree),
                                   ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_PIPELINING=str(pipelining)))
    assert (tree / "localhost").is_file(), proc.stdout + proc.stderr
    result = json.loads((tree / "localhost").read_text(encoding="utf-8"))
    for volatile in ("start", "end", "delta"):
        result.pop(volatile, None)
    return proc.returncode, result


def _without_atime(result):
    """A module result without stat's atime: the first read of a file whose atime is a day old moves it (relatime), so
    the two runs of one stat may see two atimes."""
    rc, data = result
    if isinstance(data, dict) and isinstance(data.get("stat"), dict):
        data = dict(data, stat=dict((k, v) for k, v in data["stat"].items() if k != "atime"))
    return rc, data


@pytest.mark.parametrize("pipelining", [True, False], ids=["stdin", "file"])
@pytest.mark.parametrize("module,args", [
    ("ansible.builtin.ping", "data=pong2"),
    ("ansible.builtin.shell", "echo from-the-module; echo to-stderr >&2; umask"),
    ("ansible.builtin.stat", "path=/etc/hostname get_checksum=true"),
    ("ansible.builtin.command", "false"),
    ("gpufleet.deepep.rdma_devices", ""),
])
def test_module_runs_match_python3(zygote, module, args, pipelining):
    served = _ansible(zygote, zygote["client"], module, args, pipelining)
    assert _without_atime(served) == _without_atime(_ansible(zygote, PYTHON, module, args, pipelining))
    assert served[0] == (2 if args == "false" else 0)  # ansible's return code for a failed task
    if args == "false":
        assert (served[1]["rc"], served[1]["msg"]) == (1, "non-zero return code")


def test_a_script_file_runs_as_python3_runs_it(zygote):
    script = zygote["tmp"] / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    plain = _run([PYTHON, str(script)], zygote, "left on stdin")
    served = _run([zygote["client"], str(script)], zygote, "left on stdin")
    assert (served.returncode, served.stderr) == (plain.returncode, plain.stderr) == (3, "to stderr\n")
    seen, expected = json.loads(served.stdout), json.loads(plain.stdout)
    assert (expected.pop("preloaded"), seen.pop("preloaded")) == (False, True)
    assert seen == expected
    assert seen["argv"] == [str(script)] and seen["path0"] == str(zygote["tmp"]) and seen["stdin_left"] == "left on stdin"


def test_a_payload_of_another_ansible_core_fails_by_name(zygote, tmp_path):
    server, sock = _start(tmp_path, _write_tree(tmp_path / "tree", version_suffix="0.0.0-other+"))
    try:
        other = dict(zygote, socket=str(sock))
        rc, result = _ansible(other, zygote["client"], "ansible.builtin.ping")
    finally:
        _stop(server)
    assert rc != 0 and "module_stdout" in result and result["module_stdout"] == ""
    assert "carries another ansible-core than the one this server preloaded" in result["module_stderr"]


def test_the_python_client_hands_a_run_over_as_the_c_client_does(zygote):
    hand = (f"import sys; sys.path.insert(0, {str(REPO / 'tools')!r}); import pyzygote; "
            f"pyzygote.hand_over({zygote['socket']!r}, '')")
    plain = _run([PYTHON], zygote, PROBE, PROBE="z")
    served = _run([PYTHON, "-c", hand], zygote, PROBE, PROBE="z")
    assert (served.returncode, served.stderr) == (plain.returncode, plain.stderr) == (3, "to stderr\n")
    seen, expected = json.loads(served.stdout), json.loads(plain.stdout)
    assert (expected.pop("preloaded"), seen.pop("preloaded")) == (False, True)
    assert seen == expected
    killed = _run([PYTHON, "-c", hand], zygote, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    assert killed.returncode == -signal.SIGTERM
    gone = _run([PYTHON, "-c", hand.replace(zygote["socket"], str(zygote["tmp"] / "absent.sock")) + "; print('mine')"],
                zygote, PROBE)
    assert (gone.returncode, gone.stdout) == (0, "mine\n")  # no server: the caller goes on as itself


@pytest.mark.parametrize("argv,executable,virtualenv,expected", [
    ([""], PYTHON, False, ""),
    (["/root/.ansible/tmp/ansible-tmp-1/AnsiballZ_ping.py"], PYTHON, False,
     "/root/.ansible/tmp/ansible-tmp-1/AnsiballZ_ping.py"),
    (["-c"], PYTHON, False, None),
    (["-m"], PYTHON, False, None),
    (["/opt/job.py"], PYTHON, False, None),
    (["/tmp/AnsiballZ_ping.py", "explode"], PYTHON, False, None),
    ([""], "/opt/sglang-venv/bin/python", False, None),
    ([""], PYTHON, True, None),
])
def test_what_a_node_hands_over(argv, executable, virtualenv, expected):
    with open(os.devnull, encoding="utf-8") as devnull:  # stdin is not a terminal for a module run
        saved = os.dup(0)
        os.dup2(devnull.fileno(), 0)
        try:
            assert pyzygote.module_run(argv, executable, virtualenv) == expected
        finally:
            os.dup2(saved, 0)
            os.close(saved)


def test_a_sitecustomize_with_the_hook_hands_only_module_runs_over(zygote, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        pyzygote.site_hook("# the distribution's own\n", str(REPO / "tools"), zygote["socket"], "test"), encoding="utf-8")
    served = _run([PYTHON], zygote, PROBE, PYTHONPATH=str(tmp_path))
    assert served.returncode == 3 and json.loads(served.stdout)["preloaded"] is True
    script = tmp_path / "AnsiballZ_probe.py"
    script.write_text(PROBE, encoding="utf-8")
    as_file = _run([PYTHON, str(script)], zygote, "", PYTHONPATH=str(tmp_path))
    assert json.loads(as_file.stdout)["preloaded"] is True and json.loads(as_file.stdout)["argv"] == [str(script)]
    other = _run([PYTHON, "-c", "import sys; print('ansible.module_utils.basic' in sys.modules)"], zygote,
                 PYTHONPATH=str(tmp_path))
    assert other.stdout == "False\n"
