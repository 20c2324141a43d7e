# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The artifact store (module_utils/_store.py, module and action plugin gpufleet.deepep.artifact_store): put, lookup
and get round trips, sha256 verified at every get, truncated and tampered artifacts and malformed records refused by
name, two publishers of one key (threads, processes, two ansible-playbook controllers), check mode."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import threading

import pytest
import yaml

from unit_helpers import REPO

from ansible_collections.gpufleet.deepep.plugins.module_utils import _store as s
from ansible_collections.gpufleet.deepep.plugins.modules import artifact_store

KEY = "ab" * 32
FILES = ["nvshmem-%s.tar.gz" % KEY[:8], "nvshmem-%s.json" % KEY[:8]]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_src(path, tag=b"one"):
    path.mkdir(parents=True, exist_ok=True)
    contents = {FILES[0]: b"tarball " + tag * 1000, FILES[1]: b'{"built": "%s"}' % tag}
    for name, data in contents.items():
        (path / name).write_bytes(data)
    return contents


def tree(path):
    """Every path under ``path`` with its bytes (directories as None): what a test compares before and after."""
    out = {}
    for current, dirs, files in os.walk(path):
        for name in dirs:
            out[os.path.relpath(os.path.join(current, name), path)] = None
        for name in files:
            full = os.path.join(current, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, path)] = handle.read()
    return out


@pytest.fixture
def published(tmp_path):
    store = tmp_path / "store"
    contents = make_src(tmp_path / "src")
    result = s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "node-1", {"version": "3.5.19"})
    return store, contents, result


# --------------------------------------------------------------------------------------------
# module_utils/_store.py


def test_put_lookup_get_round_trip(published, tmp_path):
    store, contents, result = published
    assert result["published"] is True and result["changed"] is True
    keydir = store / "nvshmem" / KEY
    assert result["path"] == str(keydir)
    assert sorted(os.listdir(keydir)) == sorted(FILES + ["record.json"])
    record = json.loads((keydir / "record.json").read_text())
    assert list(record["files"]) == FILES  # install order kept
    assert record["files"][FILES[0]] == {"sha256": sha(contents[FILES[0]]), "size": len(contents[FILES[0]])}
    assert (record["kind"], record["key"], record["host"], record["meta"]) == ("nvshmem", KEY, "node-1",
                                                                               {"version": "3.5.19"})
    assert s.lookup(str(store), "nvshmem", KEY) == record
    assert s.lookup(str(store), "nvshmem", "cd" * 32) is None
    assert os.listdir(store / ".incoming") == []

    dest = tmp_path / "dest" / "sub"
    got = s.get_local(str(store), "nvshmem", KEY, str(dest))
    assert got["found"] is True and got["changed"] is True and got["copied"] == FILES
    assert tree(dest) == contents  # no temp file left, no record copied
    again = s.get_local(str(store), "nvshmem", KEY, str(dest))
    assert again["changed"] is False and again["copied"] == []
    missing = s.get_local(str(store), "nvshmem", "cd" * 32, str(tmp_path / "other"))
    assert missing["found"] is False and not (tmp_path / "other").exists()


def test_get_verifies_sha256_and_refuses_a_tampered_file_by_name(published, tmp_path):
    store, contents = published[:2]
    target = store / "nvshmem" / KEY / FILES[0]
    data = bytearray(target.read_bytes())
    data[10] ^= 0x01  # same size, other bytes
    target.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    with pytest.raises(s.StoreError) as info:
        s.get_local(str(store), "nvshmem", KEY, str(dest))
    assert str(target) in str(info.value) and "does not match its record" in str(info.value)
    assert sha(bytes(data)) in str(info.value) and sha(contents[FILES[0]]) in str(info.value)
    assert tree(dest) == {}  # nothing installed, no temp file left


def test_get_refuses_a_truncated_file_by_name_before_copying(published, tmp_path):
    store, contents = published[:2]
    target = store / "nvshmem" / KEY / FILES[1]
    target.write_bytes(contents[FILES[1]][:5])
    dest = tmp_path / "dest"
    with pytest.raises(s.StoreError) as info:
        s.get_local(str(store), "nvshmem", KEY, str(dest))
    assert str(target) in str(info.value)
    assert "truncated: 5 of the %d bytes" % len(contents[FILES[1]]) in str(info.value)
    assert not dest.exists()


def test_a_file_that_grew_is_refused(published, tmp_path):
    store = published[0]
    target = store / "nvshmem" / KEY / FILES[0]
    target.write_bytes(target.read_bytes() + b"x")
    with pytest.raises(s.StoreError, match="changed after publication"):
        s.get_local(str(store), "nvshmem", KEY, str(tmp_path / "dest"))


@pytest.mark.parametrize("change, expected", [
    (lambda r: r["files"][FILES[0]].pop("sha256"), "files.%s.sha256 is missing" % FILES[0]),
    (lambda r: r["files"][FILES[0]].update(sha256="ABC"), "files.%s.sha256 is 'ABC'" % FILES[0]),
    (lambda r: r["files"][FILES[1]].update(size="12"), "files.%s.size is '12'" % FILES[1]),
    (lambda r: r.update(files=FILES), "files is [%r, %r]" % tuple(FILES)),
    (lambda r: r.update(key="cd" * 32), "it records nvshmem %s" % ("cd" * 32)),
    (lambda r: r.pop("host"), "host is missing"),
    (lambda r: r.update(meta=[]), "meta is []"),
    (lambda r: r["files"].update({"../x": {"sha256": "0" * 64, "size": 1}}), "not a plain file name"),
])
def test_a_record_of_the_wrong_shape_is_refused_with_its_field(published, tmp_path, change, expected):
    store = published[0]
    path = store / "nvshmem" / KEY / "record.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    for call in (lambda: s.lookup(str(store), "nvshmem", KEY),
                 lambda: s.get_local(str(store), "nvshmem", KEY, str(tmp_path / "dest"))):
        with pytest.raises(s.StoreError) as info:
            call()
        assert str(path) in str(info.value) and expected in str(info.value), str(info.value)
        assert "publish the key again" in str(info.value)


def test_a_record_that_is_not_json_or_absent_is_refused(published):
    store = published[0]
    path = store / "nvshmem" / KEY / "record.json"
    path.write_text("{not json")
    with pytest.raises(s.StoreError, match="%s is not JSON" % path):
        s.lookup(str(store), "nvshmem", KEY)
    path.unlink()
    with pytest.raises(s.StoreError, match="holds no readable record.json"):
        s.lookup(str(store), "nvshmem", KEY)


@pytest.mark.parametrize("kwargs, expected", [
    ({"store": "relative"}, "must be an absolute path"),
    ({"kind": "wheels"}, "kind 'wheels' is not one of nvshmem, deepep, nccl, gdrcopy, deepgemm"),
    ({"key": "ABCDEF0123456789"}, "lowercase hex, 16 to 64"),
    ({"key": "abc"}, "lowercase hex, 16 to 64"),
    ({"files": ["a/b"]}, "not a plain file name"),
    ({"files": ["record.json"]}, "not a plain file name"),
    ({"files": [FILES[0], FILES[0]]}, "listed twice"),
    ({"files": ["absent.tar.gz"]}, "absent.tar.gz is not a file"),
])
def test_bad_requests_name_the_value(tmp_path, kwargs, expected):
    make_src(tmp_path / "src")
    args = dict(store=str(tmp_path / "store"), kind="nvshmem", key=KEY, src=str(tmp_path / "src"), files=FILES,
                host="n1")
    args.update(kwargs)
    with pytest.raises(s.StoreError, match=expected):
        s.put_local(**args)
    assert not (tmp_path / "store" / "nvshmem").exists()


def test_a_key_of_the_first_layout_counts_as_absent_and_is_replaced(tmp_path):
    store = tmp_path / "store"
    legacy = store / "nvshmem" / KEY
    legacy.mkdir(parents=True)
    (legacy / "published.json").write_text(json.dumps({"kind": "nvshmem", "key": KEY, "files": FILES}))
    (legacy / FILES[0]).write_bytes(b"unchecked")
    assert s.lookup(str(store), "nvshmem", KEY) is None
    contents = make_src(tmp_path / "src")
    result = s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
    assert result["published"] is True
    stored = tree(legacy)
    assert json.loads(stored.pop("record.json")) == result["record"] and stored == contents


def test_check_mode_writes_nothing(tmp_path, published):
    store = published[0]
    before = tree(tmp_path)
    other = "cd" * 32
    plan = s.put_local(str(store), "nvshmem", other, str(tmp_path / "src"), FILES, "n2", check_mode=True)
    assert plan["published"] is True and plan["changed"] is True and list(plan["record"]["files"]) == FILES
    got = s.get_local(str(store), "nvshmem", KEY, str(tmp_path / "dest"), check_mode=True)
    assert got["changed"] is True and got["copied"] == FILES
    reused = s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n2", check_mode=True)
    assert reused["published"] is False and reused["changed"] is False
    assert tree(tmp_path) == before


def _publish_in_process(store, src, barrier, queue):
    barrier.wait(timeout=60)
    result = s.put_local(store, "deepep", KEY, src, FILES, os.path.basename(src))
    queue.put(result)


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_two_publishers_of_one_key_leave_one_artifact(tmp_path, how):
    store = str(tmp_path / "store")
    sources = [str(tmp_path / name) for name in ("host-a", "host-b")]
    contents = [make_src(tmp_path / "host-a", b"aaa"), make_src(tmp_path / "host-b", b"bbb")]
    if how == "threads":
        barrier, results = threading.Barrier(2), []

        def publish(src):
            barrier.wait(timeout=60)
            results.append(s.put_local(store, "deepep", KEY, src, FILES, os.path.basename(src)))

        workers = [threading.Thread(target=publish, args=(src,)) for src in sources]
    else:
        ctx = multiprocessing.get_context("fork")
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        workers = [ctx.Process(target=_publish_in_process, args=(store, src, barrier, queue)) for src in sources]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert not worker.is_alive()
    if how == "processes":
        results = [queue.get(timeout=10) for dummy in workers]
        assert all(worker.exitcode == 0 for worker in workers)
    assert sorted(r["published"] for r in results) == [False, True]
    winner = next(r for r in results if r["published"])
    loser = next(r for r in results if not r["published"])
    record = s.lookup(store, "deepep", KEY)
    assert loser["record"] == winner["record"] == record
    won = contents[sources.index(os.path.join(str(tmp_path), record["host"]))]
    stored = tree(os.path.join(store, "deepep", KEY))
    assert json.loads(stored.pop("record.json")) == record
    assert stored == won  # the files of the publisher the record names, not a mix
    for name, entry in record["files"].items():
        s.verify_file(os.path.join(store, "deepep", KEY, name), entry)
    assert os.listdir(os.path.join(store, ".incoming")) == []
    assert os.listdir(os.path.join(store, "deepep")) == [KEY]


def test_the_lock_wait_is_bounded(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    with s.StoreLock(str(store)):
        with pytest.raises(s.StoreError, match="stayed locked for 0.3 s"):
            with s.StoreLock(str(store), timeout=0.3, poll=0.05):
                pass


# --------------------------------------------------------------------------------------------
# The module (mode=shared, on the node)


def test_module_failures_are_messages_not_tracebacks(module_runner, published, tmp_path):
    store = published[0]
    (store / "nvshmem" / KEY / "record.json").write_text(json.dumps({"kind": "nvshmem"}))
    out = module_runner(artifact_store, dict(op="get", mode="shared", store=str(store), kind="nvshmem", key=KEY,
                                             dest=str(tmp_path / "dest")))
    assert out.failed and "Traceback" not in json.dumps(out)
    assert out["msg"].startswith("artifact store %s: %s/nvshmem/%s/record.json is not a usable store record"
                                 % (store, store, KEY))
    bad = module_runner(artifact_store, dict(op="lookup", mode="shared", store=str(store), kind="nvshmem", key="XY"))
    assert bad.failed and "key 'XY' is not a build key" in bad["msg"]


def test_module_put_and_get_in_shared_mode(module_runner, tmp_path):
    contents = make_src(tmp_path / "src")
    args = dict(mode="shared", store=str(tmp_path / "store"), kind="gdrcopy", key=KEY)
    plan = module_runner(artifact_store, dict(args, op="put", src=str(tmp_path / "src"), files=FILES, host="n1"),
                         check_mode=True)
    assert plan["published"] is True and not (tmp_path / "store").exists()
    put = module_runner(artifact_store, dict(args, op="put", src=str(tmp_path / "src"), files=FILES, host="n1"))
    assert put["published"] is True and put["changed"] is True and put["record"]["host"] == "n1"
    again = module_runner(artifact_store, dict(args, op="put", src=str(tmp_path / "src"), files=FILES, host="n2"))
    assert again["published"] is False and again["changed"] is False and again["record"]["host"] == "n1"
    found = module_runner(artifact_store, dict(args, op="lookup"))
    assert found["found"] is True and found["record"] == put["record"]
    got = module_runner(artifact_store, dict(args, op="get", dest=str(tmp_path / "dest")))
    assert got["found"] is True and got["changed"] is True and tree(tmp_path / "dest") == contents


# --------------------------------------------------------------------------------------------
# The action plugin (mode=controller) in real ansible-playbook runs on localhost


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
        s.verify_file(str(tmp_path / "store" / "deepep" / KEY / name), entry)
    assert os.listdir(tmp_path / "store" / ".incoming") == []
