# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fork server for the Python that runs Ansible modules on an emulated test guest (vmfleet).

Under QEMU's software emulation a module run costs 3-6 s of the guest's one vCPU, and most of it is not the module:
importing ``ansible.module_utils.basic`` and what it pulls in took 2.8 s of a 3.8 s ``ping`` on an idle guest
(``python3 -X importtime``), every run again. This server imports ansible-core's module_utils once (a copy of the
controller's own, installed in the image beside it and keyed into the image), then forks a worker per module run that
starts where a fresh interpreter would be after those imports. The client (``vmfleet-python3``, the guests'
``ansible_python_interpreter``) hands the worker the module (a file's path, or the code on stdin when Ansible
pipelines), its standard streams, working directory, environment and umask over a Unix socket, forwards the signals
that end a session and exits with the worker's status; anything else (options, more arguments, no server) it runs
with ``/usr/bin/python3`` itself. Only ansible-core's pinned module_utils are preloaded: the module and the collection's
module_utils come from the run's AnsiballZ payload as always (the ``ansible`` package searches the payload first), so
the code under test is the code that was sent. A payload of another ansible-core than the preloaded copy fails the
run with a message, never runs mixed code.

What differs from ``python3`` reading the module on stdin, by construction: the worker's parent is the server (its
cgroup is the server's unit), and the modules imported before the run were imported by the server. Stdlib only.
"""

from __future__ import annotations

import array
import builtins
import io
import os
import signal
import socket
import struct
import sys
import types

# What a module run imports before its module's own code (AnsiballZ's wrapper, its loader and AnsibleModule), and
# the HTTP client some modules use.
PRELOAD = ("ansible.module_utils.basic", "ansible.module_utils._internal._ansiballz._loader",
           "ansible.module_utils.common.text.converters", "ansible.module_utils.urls", "base64", "datetime",
           "runpy", "tempfile", "zipfile", "shutil", "json", "subprocess")
# The payload's ``ansible/__init__.py`` (ansible-core's module_common writes it with its ``__version__``); the tree's
# is written the same way from the controller's ansible-core (tools/vmfleet/image.py), so equal bytes mean the same
# ansible-core.
RELEASE = "ansible/__init__.py"
HEADER = struct.Struct("!I")
MAX_REQUEST = 4 << 20


class PayloadFirst(list):
    """The preloaded ``ansible`` package's search path: the ``ansible`` directory of each AnsiballZ payload
    (``ansible_<module>_payload.zip``, the name AnsiballZ's wrapper gives it) on
    ``sys.path`` first (the module, ``ansible.modules.*``, is only there), then the preloaded copy. A payload whose
    ``ansible/__init__.py`` (its ansible-core version) differs from the copy's ends the run with a message."""

    def __init__(self, paths, release: bytes):
        super().__init__(paths)
        self.release = release
        self.checked: set[str] = set()

    def __iter__(self):
        for entry in list(sys.path):
            name = os.path.basename(entry)
            if name.startswith("ansible_") and name.endswith("_payload.zip") and os.path.isfile(entry):
                if entry not in self.checked:
                    self._check(entry)
                yield entry + "/ansible"
        yield from list.__iter__(self)

    def _check(self, entry: str) -> None:
        import zipfile  # pylint: disable=import-outside-toplevel

        with zipfile.ZipFile(entry) as payload:
            try:
                sent = payload.read(RELEASE)
            except KeyError:
                sent = b"(none)"
        if sent != self.release:
            sys.stderr.write(f"pyzygote: the payload {entry} carries another ansible-core than the one this server "
                             "preloaded: rebuild the guest image (its key covers ansible-core) or run modules with "
                             "/usr/bin/python3\n")
            sys.stderr.flush()
            os._exit(70)
        self.checked.add(entry)


def preload(tree: str, modules=PRELOAD) -> None:
    """Import ansible-core's module_utils from ``tree`` (a directory holding ``ansible/``) and ``modules``."""
    import importlib  # pylint: disable=import-outside-toplevel

    sys.path.insert(0, tree)
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        sys.path.remove(tree)
    ansible = sys.modules["ansible"]
    with open(os.path.join(tree, RELEASE), "rb") as handle:
        ansible.__path__ = PayloadFirst(ansible.__path__, handle.read())
    # What is loaded now stays out of the collector's way in every worker (its passes would write to the objects'
    # pages, copied on write): the usual practice of a preforking server.
    import gc  # pylint: disable=import-outside-toplevel

    gc.collect()
    gc.freeze()


def parse_request(data: bytes) -> tuple[str, int, str, dict[str, str]]:
    """``cwd NUL umask NUL script NUL NAME=VALUE NUL ...`` as the client sends it (``script`` empty: the code comes
    on stdin); the working directory, the umask, the script and the environment."""
    fields = data.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) < 3:
        raise ValueError("a request holds the working directory, the umask and the script")
    env = {}
    for item in fields[3:]:
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return os.fsdecode(fields[0]), int(fields[1], 8), os.fsdecode(fields[2]), env


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = conn.recv(size)
        if not chunk:
            raise EOFError("the client closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _receive(conn: socket.socket) -> tuple[list[int], bytes]:
    fds = array.array("i")
    msg, ancdata, _flags, _addr = conn.recvmsg(HEADER.size, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    if len(fds) != 3:
        raise ValueError(f"expected the client's 3 standard streams, got {len(fds)} descriptors")
    msg += _recv_exact(conn, HEADER.size - len(msg)) if len(msg) < HEADER.size else b""
    (size,) = HEADER.unpack(msg)
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes is over {MAX_REQUEST}")
    return list(fds), _recv_exact(conn, size)


def _worker(fds: list[int], cwd: str, umask: int, script: str, env: dict[str, str]) -> None:
    """Become the interpreter the client would have started: its streams, directory, umask and environment, the
    module's code read from ``script`` (as ``python3 SCRIPT``) or from stdin (as ``python3``) and run as
    ``__main__``. Never returns: the code's end, SystemExit or exception ends this process as it ends ``python3``
    (its status, the traceback on stderr, _shutdown)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                                       buffering=1)
    os.umask(umask)
    os.environ.clear()
    os.environ.update(env)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError:
            pass
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    if script:
        with open(script, "rb") as handle:
            source = handle.read()
        sys.argv = [script]
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        main.__file__ = script
        filename = script
    else:
        source = io.open(0, "rb", closefd=False).read()
        sys.argv = [""]
        sys.path[0] = ""
        filename = "<stdin>"
    sys.modules["__main__"] = main
    interrupted = False
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)  # pylint: disable=exec-used
        status = 0
    except SystemExit as exc:
        status = exit_status(exc.code)
    except BaseException:  # pylint: disable=broad-except  # what python3 does with an uncaught exception
        interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
        sys.excepthook(*sys.exc_info())
        status = 1
    _shutdown(status, interrupted)


def exit_status(code) -> int:
    """The exit status python3 makes of ``SystemExit(code)`` (a code neither None nor an int is printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # pylint: disable=broad-except
        pass
    return 1


def _shutdown(status: int, interrupted: bool) -> None:
    """End the worker as the interpreter's finalization would for the program (its non-daemon threads awaited, its
    atexit functions, the standard streams flushed; python3 exits 120 when that flush fails, and by SIGINT after an
    uncaught KeyboardInterrupt), without tearing the interpreter down: the teardown of a process forked from the
    server writes to every object's page (copy on write), 115 ms of an empty run's 130 on this machine."""
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # pylint: disable=protected-access
    import atexit  # pylint: disable=import-outside-toplevel

    atexit._run_exitfuncs()  # pylint: disable=protected-access
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # pylint: disable=broad-except
            if stream is sys.stdout and status == 0:
                status = 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _supervise(conn: socket.socket) -> None:
    """One run: receive the request, fork its worker, send the worker's pid, then its wait status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        fds, data = _receive(conn)
        cwd, umask, script, env = parse_request(data)
    except (OSError, ValueError, EOFError) as exc:
        sys.stderr.write(f"pyzygote: a bad request: {exc}\n")
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _worker(fds, cwd, umask, script, env)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(struct.pack("=i", pid))
        status = os.waitpid(pid, 0)[1]
        conn.sendall(struct.pack("=i", status))
    except OSError:
        pass
    os._exit(0)


def serve(path: str) -> None:
    """Accept runs on the Unix socket ``path`` (root only) forever, a supervisor process per run."""
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    server.bind(path)
    os.umask(old)
    server.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the supervisors are reaped by the kernel
    while True:
        conn = server.accept()[0]
        if os.fork() == 0:
            server.close()
            _supervise(conn)
        conn.close()


def ansible_core_tree() -> dict[str, bytes]:
    """What a server preloads, as files relative to its tree: the module_utils of the ansible-core that runs the
    playbooks (this Python's: call it on the controller), and ``ansible/__init__.py`` and
    ``ansible/module_utils/__init__.py`` written as ansible-core writes them into each module's payload (the server
    compares the payload's ``ansible/__init__.py`` with its own)."""
    import ansible  # pylint: disable=import-outside-toplevel
    from ansible.release import __author__, __version__  # pylint: disable=import-outside-toplevel

    package = os.path.dirname(os.path.realpath(ansible.__file__))
    namespace = b"from pkgutil import extend_path\n__path__=extend_path(__path__,__name__)\n"
    tree = {RELEASE: namespace + b'__version__="' + __version__.encode() + b'"\n__author__="' + __author__.encode()
            + b'"\n', "ansible/module_utils/__init__.py": namespace}
    top = os.path.dirname(package)
    for directory, dirs, files in os.walk(os.path.join(package, "module_utils")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, top).replace(os.sep, "/")
            if rel not in tree:
                with open(path, "rb") as handle:
                    tree[rel] = handle.read()
    return tree


def tree_key(files: dict[str, bytes]) -> str:
    """The sha256 of a tree (``ansible_core_tree()``): every file's path and bytes."""
    import hashlib  # pylint: disable=import-outside-toplevel  # not in a module run's sitecustomize

    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + files[rel] + b"\0")
    return digest.hexdigest()


def write_tree(dest: str, files: dict[str, bytes]) -> None:
    """``files`` (``ansible_core_tree()``) under ``dest``, written into a new directory renamed into place: a tree
    is complete or absent."""
    if os.path.isdir(dest):
        return
    work = f"{dest}.tmp-{os.getpid()}"
    for rel, data in files.items():
        target = os.path.join(work, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)
    try:
        os.rename(work, dest)
    except OSError:  # another process wrote the same tree first
        import shutil  # pylint: disable=import-outside-toplevel

        shutil.rmtree(work, ignore_errors=True)


def request(script: str = "") -> bytes:
    """This process's request: working directory, umask, ``script`` (empty: the code is on stdin), environment."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    umask = os.umask(0)
    os.umask(umask)
    fields = [os.fsencode(cwd), b"%o" % umask, os.fsencode(script)]
    fields += [os.fsencode(name) + b"=" + os.fsencode(value) for name, value in os.environ.items()]
    return b"\0".join(fields) + b"\0"


def hand_over(path: str, script: str = "") -> None:
    """The client's part in Python (what ``vmfleet-python3`` does in C), for a Python that is already running, as the
    fleetsim nodes' sitecustomize is: hand this process's module run to the server at ``path`` and end this process
    with the worker's status. Returns, having read nothing, when no server takes the run."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        body = request(script)
        socket.send_fds(conn, [HEADER.pack(len(body))], [0, 1, 2])
        conn.sendall(body)
        pid = struct.unpack("=i", _recv_exact(conn, 4))[0]
    except (OSError, EOFError):
        conn.close()
        return
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM):
        signal.signal(sig, lambda signum, _frame: os.kill(pid, signum))
    try:
        status = struct.unpack("=i", _recv_exact(conn, 4))[0]
    except (OSError, EOFError):
        sys.stderr.write(f"pyzygote: the fork server lost worker {pid}\n")
        os._exit(255)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def module_run(argv: list[str], executable: str, virtualenv: bool | None = None,
               server_python: str = "/usr/bin/python3") -> str | None:
    """What ``python3`` was started for when it is an Ansible module run the server can take: ``""`` for the code on
    stdin (pipelining; not a terminal), the script's path for an ``AnsiballZ_*.py`` file; None for anything else,
    and for any Python but the server's own (a virtualenv's, ``virtualenv`` defaulting to this one's, runs its own
    packages)."""
    if virtualenv is None:
        virtualenv = sys.prefix != sys.base_prefix
    if executable != server_python or virtualenv:
        return None
    if argv == [""]:
        return None if os.isatty(0) else ""
    if len(argv) == 1 and os.path.basename(argv[0]).startswith("AnsiballZ_") and argv[0].endswith(".py"):
        return argv[0]
    return None


# What a node's sitecustomize gains (fleetsim, each boot): a module run of the system Python handed to the node's
# server, never in the way of anything else.
SITE_HOOK = """
# {origin}: Ansible module runs to the node's fork server (the collection's tools/pyzygote.py).
try:
    import sys as _pyzygote_sys
    # Only what may be a module run imports the hook (module_run decides).
    if _pyzygote_sys.argv == [""] or (len(_pyzygote_sys.argv) == 1 and "AnsiballZ_" in _pyzygote_sys.argv[0]):
        _pyzygote_sys.path.insert(0, "{directory}")
        try:
            import pyzygote as _pyzygote
        finally:
            _pyzygote_sys.path.remove("{directory}")
        _pyzygote_script = _pyzygote.module_run(_pyzygote_sys.argv, _pyzygote_sys.executable)
        if _pyzygote_script is not None:
            _pyzygote.hand_over("{socket}", _pyzygote_script)
except Exception:  # pylint: disable=broad-except
    pass
"""


def site_hook(text: str, directory: str, socket_path: str, origin: str) -> str:
    """A sitecustomize's ``text`` with the hook that hands module runs to the server at ``socket_path``, importing
    this file as ``<directory>/pyzygote.py``."""
    return text.rstrip("\n") + "\n" + SITE_HOOK.format(origin=origin, directory=directory, socket=socket_path)


def main(argv=None) -> None:
    import argparse  # pylint: disable=import-outside-toplevel  # not in a module run's sitecustomize

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--socket", required=True, help="the Unix socket the client connects to")
    parser.add_argument("--tree", required=True, help="the directory holding the copy of ansible-core's ansible/")
    args = parser.parse_args(argv)
    preload(args.tree)
    serve(args.socket)


if __name__ == "__main__":
    main()
