# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The artifact store (module_utils/_store.py, module and action plugin gpufleet.deepep.artifact_store): put, lookup
and get round trips, sha256 verified at every get, truncated and tampered artifacts and malformed records refused by
name, two publishers of one key (threads, processes), check mode. The action plugin in real ansible-playbook
runs: tests/integration/controller/test_artifact_store_play.py."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import threading

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils import _store as s
from ansible_collections.gpufleet.deepep.plugins.module_utils import _storefs as fs
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
    ({"kind": "wheels"}, "kind 'wheels' is not one of nvshmem, deepep, deepgemm, deepep_jit"),
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
        fs.verify_file(os.path.join(store, "deepep", KEY, name), entry)
    assert os.listdir(os.path.join(store, ".incoming")) == []
    assert os.listdir(os.path.join(store, "deepep")) == [KEY]


def test_the_lock_wait_is_bounded(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    with fs.StoreLock(str(store)):
        with pytest.raises(s.StoreError, match="stayed locked for 0.3 s"):
            with fs.StoreLock(str(store), timeout=0.3, poll=0.05):
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
    args = dict(mode="shared", store=str(tmp_path / "store"), kind="deepgemm", key=KEY)
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
# Hardening: links, modes, pinned record digests, the lock wait, a killed publisher's staging directory


def _module_put(module_runner, store, src, files=None, **extra):
    args = dict(op="put", mode="shared", store=str(store), kind="nvshmem", key=KEY, src=str(src),
                files=files or FILES, host="n1", **extra)
    out = module_runner(artifact_store, args)
    if out.failed:
        raise s.StoreError(out["msg"])
    assert "Traceback" not in json.dumps(out)
    return out


def _module_describe(module_runner, store, src, files=None):
    out = module_runner(artifact_store, dict(op="describe", mode="shared", store=str(store), kind="nvshmem", key=KEY,
                                             src=str(src), files=files or FILES))
    if out.failed:
        raise s.StoreError(out["msg"])
    return out


PUTS = {
    "put_local": lambda runner, store, src: s.put_local(str(store), "nvshmem", KEY, str(src), FILES, "n1"),
    "module put": _module_put,
    "module describe": _module_describe,
}


def _link_file(tmp_path, src):
    """A listed file that is a link to a private file elsewhere."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"private key")
    secret.chmod(0o600)
    (src / FILES[0]).unlink()
    (src / FILES[0]).symlink_to(secret)
    return src, src / FILES[0]


def _dangling(tmp_path, src):
    (src / FILES[1]).unlink()
    (src / FILES[1]).symlink_to(tmp_path / "nowhere")
    return src, src / FILES[1]


def _src_is_link(tmp_path, src):
    link = tmp_path / "src-link"
    link.symlink_to(src)
    return link, link


def _component_is_link(tmp_path, src):
    (tmp_path / "real").mkdir()
    src.rename(tmp_path / "real" / "src")
    (tmp_path / "up").symlink_to(tmp_path / "real")
    return tmp_path / "up" / "src", tmp_path / "up"


def _fifo(tmp_path, src):
    (src / FILES[1]).unlink()
    os.mkfifo(str(src / FILES[1]))
    return src, src / FILES[1]


SOURCE_LINKS = {"file is a link": (_link_file, "is a symbolic link"), "dangling link": (_dangling, "symbolic link"),
                "src is a link": (_src_is_link, "is a symbolic link"),
                "a directory above src is a link": (_component_is_link, "is a symbolic link"),
                "file is a FIFO": (_fifo, "is not a regular file")}


@pytest.mark.parametrize("how", sorted(PUTS))
@pytest.mark.parametrize("case", sorted(SOURCE_LINKS))
def test_put_refuses_a_link_in_its_source_naming_it(module_runner, tmp_path, how, case):
    make_src(tmp_path / "src")
    make, expected = SOURCE_LINKS[case]
    src, named = make(tmp_path, tmp_path / "src")
    store = tmp_path / "store"
    with pytest.raises(s.StoreError) as info:
        PUTS[how](module_runner, store, src)
    assert str(named) in str(info.value) and expected in str(info.value), str(info.value)
    assert "Traceback" not in str(info.value)
    assert not (store / "nvshmem").exists()  # nothing published
    assert not (store / ".incoming").exists() or os.listdir(store / ".incoming") == []


def _entry(store):
    return store / "nvshmem" / KEY


def _record_link(store, tmp_path):
    record = _entry(store) / "record.json"
    copy = tmp_path / "record-copy.json"
    copy.write_bytes(record.read_bytes())
    record.unlink()
    record.symlink_to(copy)
    return record


def _file_link(store, tmp_path):
    target = _entry(store) / FILES[0]
    copy = tmp_path / "file-copy"
    copy.write_bytes(target.read_bytes())  # the same bytes: only the link is wrong
    target.unlink()
    target.symlink_to(copy)
    return target


def _extra_link(store, tmp_path):
    extra = _entry(store) / "extra"
    extra.symlink_to("/etc/passwd")
    return extra


def _hard_link(store, tmp_path):
    target = _entry(store) / FILES[1]
    os.link(str(target), str(tmp_path / "other-name"))
    return target


def _key_dir_link(store, tmp_path):
    real = tmp_path / "elsewhere"
    _entry(store).rename(real)
    _entry(store).symlink_to(real)
    return _entry(store)


def _kind_dir_link(store, tmp_path):
    real = tmp_path / "kind-elsewhere"
    (store / "nvshmem").rename(real)
    (store / "nvshmem").symlink_to(real)
    return store / "nvshmem"


STORE_LINKS = {"record.json is a link": (_record_link, "is a symbolic link"),
               "a file is a link": (_file_link, "is a symbolic link"),
               "an extra link": (_extra_link, "is a symbolic link"),
               "a file has two hard links": (_hard_link, "has 2 hard links"),
               "the key directory is a link": (_key_dir_link, "is a symbolic link"),
               "the kind directory is a link": (_kind_dir_link, "is a symbolic link")}


@pytest.mark.parametrize("op", ["lookup", "get", "module get", "put again"])
@pytest.mark.parametrize("case", sorted(STORE_LINKS))
def test_a_link_inside_the_store_entry_is_refused_naming_it(module_runner, published, tmp_path, op, case):
    store = published[0]
    make, expected = STORE_LINKS[case]
    named = make(store, tmp_path)
    dest = tmp_path / "dest"
    calls = {
        "lookup": lambda: s.lookup(str(store), "nvshmem", KEY),
        "get": lambda: s.get_local(str(store), "nvshmem", KEY, str(dest)),
        "module get": lambda: module_runner(artifact_store, dict(op="get", mode="shared", store=str(store),
                                                                 kind="nvshmem", key=KEY, dest=str(dest))),
        "put again": lambda: s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n2"),
    }
    if op == "module get":
        out = calls[op]()
        assert out.failed and "Traceback" not in json.dumps(out)
        message = out["msg"]
    else:
        with pytest.raises(s.StoreError) as info:
            calls[op]()
        message = str(info.value)
    assert str(named) in message and expected in message, message
    assert not dest.exists()  # nothing installed


def _dest_link(tmp_path):
    (tmp_path / "real-dest").mkdir()
    (tmp_path / "dest").symlink_to(tmp_path / "real-dest")
    return tmp_path / "dest", tmp_path / "dest"


def _dest_under_link(tmp_path):
    (tmp_path / "real-parent").mkdir()
    (tmp_path / "parent").symlink_to(tmp_path / "real-parent")
    return tmp_path / "parent" / "dest", tmp_path / "parent"


@pytest.mark.parametrize("make", [_dest_link, _dest_under_link])
def test_get_refuses_a_dest_that_is_or_lies_under_a_link(published, tmp_path, make):
    store = published[0]
    dest, named = make(tmp_path)
    with pytest.raises(s.StoreError) as info:
        s.get_local(str(store), "nvshmem", KEY, str(dest))
    assert "dest %s: %s is a symbolic link" % (dest, named) in str(info.value)
    assert not os.listdir(os.path.realpath(str(named)))  # nothing written through the link


def test_get_replaces_a_link_planted_in_dest_instead_of_writing_through_it(published, tmp_path):
    store, contents = published[:2]
    dest = tmp_path / "dest"
    dest.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    (dest / FILES[0]).symlink_to(victim)
    got = s.get_local(str(store), "nvshmem", KEY, str(dest))
    assert got["copied"] == FILES
    assert victim.read_bytes() == b"keep me"
    assert not (dest / FILES[0]).is_symlink() and (dest / FILES[0]).read_bytes() == contents[FILES[0]]


MODES = [(0o600, 0o600), (0o640, 0o640), (0o644, 0o644), (0o755, 0o755), (0o666, 0o644), (0o777, 0o755),
         (0o4755, 0o755), (0o2750, 0o750), (0o1777, 0o755), (0o400, 0o400)]


@pytest.mark.parametrize("source,stored", MODES, ids=["%04o" % m[0] for m in MODES])
def test_published_files_keep_the_source_mode_less_write_and_setid_bits(tmp_path, source, stored):
    make_src(tmp_path / "src")
    os.chmod(str(tmp_path / "src" / FILES[0]), source)
    store = tmp_path / "store"
    s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
    assert os.stat(str(_entry(store) / FILES[0])).st_mode & 0o7777 == stored
    assert os.stat(str(_entry(store) / FILES[1])).st_mode & 0o7777 == 0o644  # written by the test: 0644
    s.get_local(str(store), "nvshmem", KEY, str(tmp_path / "dest"))
    assert os.stat(str(tmp_path / "dest" / FILES[0])).st_mode & 0o7777 == stored


def test_a_private_source_is_not_world_readable_in_the_store(tmp_path):
    make_src(tmp_path / "src")
    os.chmod(str(tmp_path / "src" / FILES[0]), 0o600)
    store = tmp_path / "store"
    s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
    assert not os.stat(str(_entry(store) / FILES[0])).st_mode & 0o077
    described = s.describe_sources(str(tmp_path / "src"), FILES)
    assert described[FILES[0]]["mode"] == 0o600


def _rewrite_pair(store):
    """Rewrite a file and its record consistently (what anyone who can write the store can do)."""
    target = _entry(store) / FILES[0]
    target.write_bytes(b"evil tarball")
    path = _entry(store) / "record.json"
    record = json.loads(path.read_text())
    record["files"][FILES[0]] = {"sha256": sha(b"evil tarball"), "size": len(b"evil tarball")}
    path.write_text(json.dumps(record, indent=2) + "\n")


def test_put_returns_the_digest_of_the_record_it_wrote(published):
    store, dummy, result = published
    assert result["record_sha256"] == sha((_entry(store) / "record.json").read_bytes())
    assert s.lookup_entry(str(store), "nvshmem", KEY) == (result["record"], result["record_sha256"])


@pytest.mark.parametrize("op", ["lookup", "get", "put again", "module lookup", "module get"])
def test_a_pinned_record_digest_refuses_a_rewritten_record_and_files(module_runner, published, tmp_path, op):
    store, dummy, result = published
    pin = result["record_sha256"]
    dest = tmp_path / "dest"

    def call(pin):
        if op == "lookup":
            return {"record_sha256": s.lookup_entry(str(store), "nvshmem", KEY, pin)[1]}
        if op == "get":
            return s.get_local(str(store), "nvshmem", KEY, str(dest), pin=pin)
        if op == "put again":
            return s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n2", pin=pin)
        args = dict(op=op.split()[1], mode="shared", store=str(store), kind="nvshmem", key=KEY, record_sha256=pin)
        if op == "module get":
            args["dest"] = str(dest)
        out = module_runner(artifact_store, args)
        if out.failed:
            raise s.StoreError(out["msg"])
        return out

    assert call(pin)["record_sha256"] == pin  # the pin matches: used as before
    assert call(None)["record_sha256"] == pin  # no pin: unchanged behaviour
    if dest.exists():
        for name in os.listdir(dest):
            os.unlink(os.path.join(dest, name))
    _rewrite_pair(store)
    found = sha((_entry(store) / "record.json").read_bytes())
    assert call(None)["record_sha256"] == found  # a consistent pair passes the checksums: only a pin tells
    if dest.exists():
        for name in os.listdir(dest):
            os.unlink(os.path.join(dest, name))
    with pytest.raises(s.StoreError) as info:
        call(pin)
    message = str(info.value)
    assert "nvshmem/%s" % KEY in message and pin in message and found in message, message
    assert "record_sha256 pins %s" % pin in message and "gpufleet_artifact_record_pins" in message
    assert not dest.exists() or os.listdir(dest) == []  # nothing installed


@pytest.mark.parametrize("pin", ["ABC", "0" * 63, "A" * 64, "g" * 64, "", " " + "0" * 63, "0" * 65])
@pytest.mark.parametrize("op", ["lookup", "get", "put"])
def test_a_malformed_pin_is_refused_naming_the_option_and_the_form(module_runner, published, tmp_path, op, pin):
    store = published[0]
    args = dict(op=op, mode="shared", store=str(store), kind="nvshmem", key=KEY, record_sha256=pin)
    args.update({"get": dict(dest=str(tmp_path / "dest")), "put": dict(src=str(tmp_path / "src"), files=FILES),
                 "lookup": {}}[op])
    out = module_runner(artifact_store, args)
    assert out.failed and "record_sha256 %r is not a record digest (expected 64 lowercase hex digits" % pin in out["msg"]
    assert not (tmp_path / "dest").exists()


def test_the_lock_wait_names_the_lock_its_holder_and_the_option(module_runner, tmp_path):
    make_src(tmp_path / "src")
    store = tmp_path / "store"
    lock = str(store / ".lock")
    with fs.StoreLock(str(store)):
        with pytest.raises(s.StoreError) as info:
            s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1", timeout=0.2)
        out = module_runner(artifact_store, dict(op="put", mode="shared", store=str(store), kind="nvshmem", key=KEY,
                                                 src=str(tmp_path / "src"), files=FILES, lock_timeout=0))
    for message in (str(info.value), out["msg"]):
        assert "the store lock %s stayed locked for" % lock in message, message
        assert "held by pid %d since " % os.getpid() in message
        assert "raise lock_timeout (gpufleet_artifact_lock_timeout for the roles)" in message
    assert "stayed locked for 0.2 s" in str(info.value) and "stayed locked for 0 s" in out["msg"]
    assert out.failed and not (store / "nvshmem").exists()
    assert s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1", timeout=0)["published"]


@pytest.mark.parametrize("value, expected", [
    (-1, "lock_timeout -1 is not a wait in seconds (expected a whole number from 0, one try, to 86400)"),
    (86401, "lock_timeout 86401 is not a wait in seconds"),
    ("soon", "lock_timeout"),
])
def test_a_bad_lock_timeout_is_refused_naming_it(module_runner, tmp_path, value, expected):
    make_src(tmp_path / "src")
    out = module_runner(artifact_store, dict(op="put", mode="shared", store=str(tmp_path / "store"), kind="nvshmem",
                                             key=KEY, src=str(tmp_path / "src"), files=FILES, lock_timeout=value))
    assert out.failed and expected in out["msg"] and "Traceback" not in out["msg"], out["msg"]
    assert not (tmp_path / "store").exists()


def _killed_publisher(store, conn):
    incoming = s.new_incoming(store, "nvshmem", KEY, "killed-host")
    with open(os.path.join(incoming.path, FILES[0]), "wb") as handle:
        handle.write(b"half a tarball")
    conn.send(incoming.path)  # written to the pipe before the kill (a Queue's feeder thread would not be)
    os.kill(os.getpid(), 9)  # killed: no cleanup runs, the kernel drops the flock


def test_a_killed_publishers_staging_directory_is_removed_at_the_next_start(tmp_path):
    store = tmp_path / "store"
    ctx = multiprocessing.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_killed_publisher, args=(str(store), writer))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -9
    assert reader.poll(10)
    stale = reader.recv()
    assert os.path.isdir(stale)
    incoming = store / ".incoming"
    live = s.new_incoming(str(store), "deepep", KEY, "live-host")  # a publication still running: held
    unrelated = incoming / "not-ours"
    unrelated.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    planted = incoming / ("deepgemm-%s-evil.abcdefgh" % KEY[:16])
    planted.symlink_to(outside)  # named like ours, but a link: never followed nor removed through
    make_src(tmp_path / "src")
    result = s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
    assert result["published"] is True
    assert not os.path.exists(stale)
    assert os.path.isdir(live.path) and unrelated.is_dir() and planted.is_symlink()
    assert (outside / "keep").read_text() == "x"
    live.discard()
    assert not os.path.exists(live.path)
    assert sorted(os.listdir(incoming)) == sorted(["not-ours", planted.name])


def test_clean_incoming_keeps_what_a_live_publication_holds(tmp_path):
    store = tmp_path / "store"
    held = s.new_incoming(str(store), "nvshmem", KEY, "h")
    assert s.clean_incoming(str(store)) == []
    held.fd, fd = None, held.fd
    os.close(fd)  # its publisher is gone
    assert s.clean_incoming(str(store)) == [held.path] and not os.path.exists(held.path)


def test_the_lock_file_is_never_followed(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (store / ".lock").symlink_to(victim)
    make_src(tmp_path / "src")
    with pytest.raises(s.StoreError, match="store lock %s: it is a symbolic link" % (store / ".lock")):
        s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
    assert victim.read_text() == "precious"


# --------------------------------------------------------------------------------------------
# A store that cannot hold its lock; the warning of an unpinned install from a shared store


def _warnings(result):
    """The warning texts of a module result (ansible-core 2.19 returns them as structured summaries)."""
    return [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]


def _store_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    return tmp_path / "afile", "it is a file, not a directory"


def _store_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    return tmp_path / "afile" / "store", "%s is a file, not a directory" % (tmp_path / "afile")


def _store_is_a_dangling_link(tmp_path):
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "store"))
    return tmp_path / "store", "it is a symbolic link (to %s) that does not lead to a directory" % (tmp_path / "gone")


def _store_under_proc(tmp_path):
    return "/proc/gpufleet-no-store", "the lock file cannot be created there (No such file or directory)"


@pytest.mark.parametrize("make", [_store_is_a_file, _store_under_a_file, _store_is_a_dangling_link, _store_under_proc])
@pytest.mark.parametrize("how", ["put_local", "module put"])
def test_a_store_that_cannot_hold_its_lock_is_refused_naming_the_option_and_the_path(
        module_runner, tmp_path, make, how):
    make_src(tmp_path / "src")
    store, why = make(tmp_path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(s.StoreError) as info:
        if how == "put_local":
            s.put_local(str(store), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
        else:
            _module_put(module_runner, store, tmp_path / "src")
    message = str(info.value)
    assert "store %s is not a writable directory and cannot hold the store lock %s/.lock" % (store, store) in message
    assert why in message and "gpufleet_artifact_store" in message and "set store" in message, message
    assert "Errno" not in message and "Traceback" not in message
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


def test_a_lock_that_flock_refuses_names_the_store_and_the_file_system(monkeypatch, tmp_path):
    import errno
    import fcntl as real_fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(real_fcntl, "flock", no_locks)
    make_src(tmp_path / "src")
    with pytest.raises(s.StoreError) as info:
        s.put_local(str(tmp_path / "store"), "nvshmem", KEY, str(tmp_path / "src"), FILES, "n1")
    message = str(info.value)
    assert "store %s cannot hold a lock: flock on %s/.lock failed" % (tmp_path / "store", tmp_path / "store") in message
    assert "nolock" in message and "gpufleet_artifact_store" in message, message


def test_an_install_from_an_unpinned_shared_store_warns_with_the_digest_to_pin(module_runner, published, tmp_path):
    store, contents, result = published
    digest = result["record_sha256"]
    args = dict(op="get", mode="shared", store=str(store), kind="nvshmem", key=KEY, dest=str(tmp_path / "dest"))
    plan = module_runner(artifact_store, args, check_mode=True)
    assert not plan.failed and [w for w in _warnings(plan) if "would install nvshmem/%s" % KEY in w]
    got = module_runner(artifact_store, args)
    assert not got.failed and tree(tmp_path / "dest") == contents
    (warning,) = [w for w in _warnings(got) if "unpinned record" in w]
    assert "installed nvshmem/%s" % KEY in warning and digest in warning and "node-1" in warning
    assert "gpufleet_artifact_record_pins" in warning and "{%s: %s}" % (KEY, digest) in warning
    # Nothing copied (the files are there already): nothing to warn about.
    assert not [w for w in _warnings(module_runner(artifact_store, args)) if "unpinned" in w]
    # Pinned: no warning.
    os.unlink(str(tmp_path / "dest" / FILES[0]))
    pinned = module_runner(artifact_store, dict(args, record_sha256=digest))
    assert not pinned.failed and pinned["copied"] == [FILES[0]] and not _warnings(pinned)
    # A lookup only reads: no warning.
    assert not _warnings(module_runner(artifact_store, dict(op="lookup", mode="shared", store=str(store),
                                                            kind="nvshmem", key=KEY)))
