# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The artifact store's action plugin (mode=controller) in real ansible-playbook runs on localhost: the round trip
through the controller, two controllers publishing one key, links and a rewritten pinned record refused. The store
itself and the module are unit-tested in tests/unit/test_artifact_store.py (whose builders these tests use)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from test_artifact_store import FILES, KEY, make_src, sha, tree
from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils import _store as s
from ansible_collections.gpufleet.deepep.plugins.module_utils import _storefs as fs


@pytest.fixture
def playbook(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local",
                                                          "ansible_python_interpreter": str(REPO / ".venv" / "bin"
                                                                                            / "python")},
                                                 "hosts": {"n1": None}}}))

    def run(name, tasks, *extra, wait=True):
        path = tmp_path / ("%s.yml" % name)
        path.write_text(yaml.safe_dump([{"name": name, "hosts": "n1", "gather_facts": False, "tasks": tasks}],
                                       sort_keys=False))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                   ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / ".ansible"),
                   PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
        cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(path)] + list(extra)
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return proc if not wait else finish(proc)

    return run


def finish(proc, ok=True):
    out = proc.communicate(timeout=300)[0]
    assert (proc.returncode == 0) == ok, out[-4000:]
    return out


def dump(var, tmp_path, name):
    return {"ansible.builtin.copy": {"content": "{{ %s | to_json }}" % var, "dest": str(tmp_path / name),
                                     "mode": "0644"}, "check_mode": False}


def store_task(op, tmp_path, register, **args):
    task = {"gpufleet.deepep.artifact_store": dict(op=op, store=str(tmp_path / "store"), kind="deepep", key=KEY,
                                                   **args),
            "register": register}
    return task


def test_action_plugin_round_trip_on_the_controller(playbook, tmp_path):
    contents = make_src(tmp_path / "node-src")
    os.chmod(str(tmp_path / "node-src" / FILES[0]), 0o600)  # a private file stays private, in the store and on get
    # check mode first: nothing is written, in the store or on the node
    playbook("check", [store_task("put", tmp_path, "r", src=str(tmp_path / "node-src"), files=FILES),
                       dump("r", tmp_path, "check-put.json")], "--check")
    check = json.loads((tmp_path / "check-put.json").read_text())
    assert check["published"] is True and check["changed"] is True and not (tmp_path / "store").exists()

    playbook("publish", [
        store_task("lookup", tmp_path, "before"),
        store_task("put", tmp_path, "put", src=str(tmp_path / "node-src"), files=FILES, meta={"torch": "2.9.1"}),
        store_task("put", tmp_path, "again", src=str(tmp_path / "node-src"), files=FILES),
        store_task("get", tmp_path, "got", dest=str(tmp_path / "node-dest")),
        store_task("get", tmp_path, "got_again", dest=str(tmp_path / "node-dest")),
        {"ansible.builtin.set_fact": {"results": "{{ {'before': before, 'put': put, 'again': again, 'got': got,"
                                                 " 'got_again': got_again} }}"}},
        dump("results", tmp_path, "results.json")])
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["before"]["found"] is False and r["before"]["changed"] is False
    assert r["put"]["published"] is True and r["put"]["changed"] is True
    assert r["put"]["record"]["host"] == "n1" and r["put"]["record"]["meta"] == {"torch": "2.9.1"}
    assert r["put"]["record"]["files"][FILES[0]]["sha256"] == sha(contents[FILES[0]])
    assert r["again"]["published"] is False and r["again"]["changed"] is False
    assert r["again"]["record"] == r["put"]["record"]
    assert r["got"]["found"] is True and r["got"]["changed"] is True and r["got"]["copied"] == FILES
    assert r["got"]["path"] == str(tmp_path / "store" / "deepep" / KEY)
    assert r["got_again"]["changed"] is False
    assert tree(tmp_path / "node-dest") == contents  # no staging directory left
    assert os.listdir(tmp_path / "store" / ".incoming") == []
    stored = tmp_path / "store" / "deepep" / KEY
    assert os.stat(str(stored / FILES[0])).st_mode & 0o777 == 0o600
    assert os.stat(str(tmp_path / "node-dest" / FILES[0])).st_mode & 0o777 == 0o600
    assert os.stat(str(stored / FILES[1])).st_mode & 0o777 == 0o644
    assert r["put"]["record_sha256"] == r["again"]["record_sha256"] == r["got"]["record_sha256"]
    assert r["put"]["record_sha256"] == sha((stored / "record.json").read_bytes())

    # a tampered artifact is refused by name, on the controller before any transfer
    target = tmp_path / "store" / "deepep" / KEY / FILES[1]
    target.write_bytes(target.read_bytes().replace(b"one", b"two"))
    out = finish(playbook("tampered", [store_task("get", tmp_path, "bad", dest=str(tmp_path / "node-dest2"))],
                          wait=False), ok=False)
    assert "%s does not match its record" % target in out and "Traceback" not in out
    assert not (tmp_path / "node-dest2").exists()


def test_two_controllers_publishing_one_key_leave_one_artifact(playbook, tmp_path):
    make_src(tmp_path / "src-a", b"aaa")
    make_src(tmp_path / "src-b", b"bbb")
    procs = [playbook("c%s" % tag, [store_task("put", tmp_path, "put", src=str(tmp_path / ("src-%s" % tag)),
                                               files=FILES),
                                    dump("put", tmp_path, "put-%s.json" % tag)], wait=False)
             for tag in ("a", "b")]
    for proc in procs:
        finish(proc)
    results = [json.loads((tmp_path / ("put-%s.json" % tag)).read_text()) for tag in ("a", "b")]
    assert sorted(r["published"] for r in results) == [False, True]
    record = s.lookup(str(tmp_path / "store"), "deepep", KEY)
    assert results[0]["record"] == results[1]["record"] == record
    for name, entry in record["files"].items():
        fs.verify_file(str(tmp_path / "store" / "deepep" / KEY / name), entry)
    assert os.listdir(tmp_path / "store" / ".incoming") == []


def test_action_plugin_refuses_links_and_a_rewritten_pinned_record(playbook, tmp_path):
    make_src(tmp_path / "node-src")
    secret = tmp_path / "secret"
    secret.write_bytes(b"private")
    secret.chmod(0o600)
    (tmp_path / "node-src" / FILES[0]).unlink()
    (tmp_path / "node-src" / FILES[0]).symlink_to(secret)
    out = finish(playbook("link", [store_task("put", tmp_path, "r", src=str(tmp_path / "node-src"), files=FILES)],
                          wait=False), ok=False)
    assert "%s is a symbolic link (to %s)" % (tmp_path / "node-src" / FILES[0], secret) in out, out[-3000:]
    assert "Traceback" not in out and not (tmp_path / "store" / "deepep").exists()

    make_src(tmp_path / "node-src2")
    playbook("publish", [store_task("put", tmp_path, "put", src=str(tmp_path / "node-src2"), files=FILES),
                         dump("put", tmp_path, "put.json")])
    pin = json.loads((tmp_path / "put.json").read_text())["record_sha256"]
    keydir = tmp_path / "store" / "deepep" / KEY
    (keydir / FILES[0]).write_bytes(b"evil")
    record = json.loads((keydir / "record.json").read_text())
    record["files"][FILES[0]] = {"sha256": sha(b"evil"), "size": 4}
    (keydir / "record.json").write_text(json.dumps(record))
    found = sha((keydir / "record.json").read_bytes())
    out = finish(playbook("pinned", [store_task("get", tmp_path, "got", dest=str(tmp_path / "node-dest"),
                                                record_sha256=pin)], wait=False), ok=False)
    assert "has sha256 %s, but record_sha256 pins %s" % (found, pin) in out, out[-3000:]
    assert not (tmp_path / "node-dest").exists()

    # dest under a link on the node: refused before anything is copied through it
    (keydir / "record.json").unlink()
    (keydir / FILES[0]).unlink()
    (keydir / FILES[1]).unlink()
    keydir.rmdir()
    playbook("again", [store_task("put", tmp_path, "put", src=str(tmp_path / "node-src2"), files=FILES)])
    (tmp_path / "real-parent").mkdir()
    (tmp_path / "parent").symlink_to(tmp_path / "real-parent")
    out = finish(playbook("dest-link", [store_task("get", tmp_path, "got", dest=str(tmp_path / "parent" / "dest"))],
                          wait=False), ok=False)
    assert "%s is a symbolic link" % (tmp_path / "parent") in out, out[-3000:]
    assert os.listdir(tmp_path / "real-parent") == []  # nothing copied through the link
