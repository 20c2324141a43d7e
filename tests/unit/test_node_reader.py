# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_node_reader.py: a read-only check run on a node as one ``python -c`` of its module_utils.

The program runs under this interpreter with ``-I -S`` (no site-packages, no collection on the path: only what the
command line carries), and must give exactly what the check gives in-process, for every state of the stamp."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _node_reader as reader

KEY = "a" * 64
STATE = (("_fileio", "_guard", "_node.site_state"), "_node.site_state")
BARE = "%s -I -S" % sys.executable


def run(function, kwargs, errors=("SiteStateError",), timeout=120):
    payload = reader.program(STATE[0], STATE[1], function, kwargs, errors, timeout=timeout)
    proc = subprocess.run(reader.command(BARE, payload), shell=True, capture_output=True, text=True, timeout=60,
                          check=False)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def stamped(tmp_path):
    watched = tmp_path / "unified-env.sh"
    watched.write_text("export A=1\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libnvshmem_host.so.3").write_text("x")
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps(ss.record_content(KEY, [str(watched), str(tmp_path / "lib" / "*.so*")], ["bash"],
                                                  "2026-11-27T00:00:00+00:00")))
    return tmp_path, stamp, watched


def both(stamp, key):
    rc, out, err = run("check", {"path": str(stamp), "key": key})
    assert rc == 0, err
    return reader.parse(rc, out), {"result": ss.check(str(stamp), key)}


def test_every_state_of_the_stamp_reads_as_the_check_in_process(stamped):
    tmp_path, stamp, watched = stamped
    node, local = both(stamp, KEY)
    assert node == local and node["result"]["intact"] is True and node["result"]["watched"] == 3
    watched.write_text("export A=2\n")
    (tmp_path / "lib" / "libnvshmem_host.so.4").write_text("y")
    node, local = both(stamp, KEY)
    assert node == local and node["result"]["steady"] and not node["result"]["intact"]
    what = sorted(d.split(": ", 1)[1].split(" (")[0] for d in node["result"]["drift"])
    assert what == ["content changed", "now file of 1 bytes"]
    node, local = both(stamp, "b" * 64)
    assert node == local and node["result"]["steady"] is False
    assert node["result"]["reason"] == "the settings or the collection changed since the last full converge"
    stamp.write_text("{not json")
    node, local = both(stamp, KEY)
    assert node == local and node["result"]["reason"].startswith("converged stamp %s is not JSON" % stamp)
    stamp.write_text(json.dumps({"format": 1, "key": KEY, "watch": {"/x": {"kind": "file"}}, "packages": {}}))
    node, local = both(stamp, KEY)
    assert node == local and "refused" in node["result"]["reason"]
    node, local = both(tmp_path / "none.json", KEY)
    assert node == local and node["result"]["reason"].startswith("no converged stamp at ")


def test_the_check_s_own_errors_are_reported_and_anything_else_is_no_result(tmp_path):
    rc, out, err = run("fingerprint_watch", {"paths": ["relative/path"]})
    assert rc == 0 and reader.parse(rc, out) == {
        "error": "watch entry 'relative/path' is not an absolute path (expected a path or glob pattern such as "
                 "/opt/deepep/nvshmem/lib/libnvshmem*)"}
    rc, out, err = run("check", {"path": str(tmp_path / "s.json"), "nope": 1})  # a TypeError: a traceback
    assert rc != 0 and "TypeError" in err and reader.parse(rc, out) is None


def test_a_read_that_does_not_answer_is_stopped_by_the_bound_and_named(stamped):
    """A file the check reads that blocks on open (dpkg's status as a FIFO with no writer, as on a mount that does not
    answer) ends at the timeout: the TimeoutError is an OSError, which the check names as the file it could not read,
    with the call and the bound; the process exits normally, so the plan fails with it instead of hanging."""
    tmp_path, stamp, dummy = stamped
    fifo = tmp_path / "status"
    os.mkfifo(fifo)
    kwargs = {"path": str(stamp), "key": KEY, "dpkg_status": str(fifo)}
    rc, out, err = run("check", kwargs, timeout=1)
    assert rc == 0 and reader.parse(rc, out) == {
        "error": "cannot read dpkg status %s: check(dpkg_status=%r, key=%r, path=%r) did not finish in 1 s"
                 % (fifo, str(fifo), KEY, str(stamp))}


@pytest.mark.parametrize("timeout", [0, -5, 1.5, "60", True, None])
def test_a_timeout_that_is_not_a_whole_number_of_seconds_is_named(timeout):
    with pytest.raises(ValueError, match=r"timeout %s is not a number of seconds \(expected a whole number, 1 or "
                                         r"more\)" % re.escape(repr(timeout))):
        reader.program(STATE[0], STATE[1], "check", {"path": "/x", "key": KEY}, timeout=timeout)


@pytest.mark.parametrize("rc, stdout", [
    (1, reader.MARKER + '{"result": {}}'),
    (0, ""),
    (0, "Python 2.7 says something else\n"),
    (0, reader.MARKER + "{truncated"),
    (0, reader.MARKER + '["not", "an", "object"]'),
    (0, reader.MARKER + '{"result": "not a dict"}'),
])
def test_output_that_is_not_the_program_s_is_no_result(rc, stdout):
    assert reader.parse(rc, stdout) is None


def test_the_result_line_is_found_after_other_output():
    assert reader.parse(0, "motd\nbecome noise\n%s{\"result\": {\"intact\": true}}\n" % reader.MARKER) == {
        "result": {"intact": True}}


def test_the_interpreter_is_the_configured_or_discovered_one_never_a_guess():
    assert reader.interpreter("/usr/bin/python3", None) == "/usr/bin/python3"
    assert reader.interpreter(" /usr/bin/env python3 ", "/usr/bin/python3.11") == "/usr/bin/env python3"
    assert reader.interpreter("auto_silent", "/usr/bin/python3.11") == "/usr/bin/python3.11"
    assert reader.interpreter(None, "/usr/bin/python3.11") == "/usr/bin/python3.11"
    assert reader.interpreter("auto", None) is None and reader.interpreter(None, None) is None
    assert reader.interpreter("", "") is None


def test_the_command_line_stays_small():
    """The whole program travels in the command line: well under what a shell or sshd takes."""
    payload = reader.program(STATE[0], STATE[1], "check", {"path": "/var/lib/x.json", "key": KEY}, ("SiteStateError",))
    assert len(reader.command("/usr/bin/python3", payload)) < 32768
