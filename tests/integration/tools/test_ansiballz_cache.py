# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The harness callback tools/callbacks/gpufleet_ansiballz_cache.py in real ansible-playbook runs, on a collection
of its own made here (a module that imports a module_util): a second process starts with the payloads the first
built (proved by a planted payload that only the cache can have supplied), a changed module_util is never served
from the cache, nothing is kept without GPUFLEET_ANSIBALLZ_CACHE, a cache that cannot be written costs no run, and
old fingerprints are pruned."""

from __future__ import annotations

import base64
import dataclasses
import io
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from tools.callbacks import gpufleet_ansiballz_cache as abz

REPO = Path(__file__).resolve().parents[3]

MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.t.abz.plugins.module_utils.word import WORD


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, word=WORD)


if __name__ == "__main__":
    main()
'''
NAME = "ansible_collections.t.abz.plugins.modules.say-ZIP_DEFLATED-none"


def collection(tmp_path: Path, word: str) -> Path:
    root = tmp_path / "collections" / "ansible_collections" / "t" / "abz"
    (root / "plugins" / "modules").mkdir(parents=True, exist_ok=True)
    (root / "plugins" / "module_utils").mkdir(parents=True, exist_ok=True)
    (root / "galaxy.yml").write_text("namespace: t\nname: abz\nversion: 1.0.0\n")
    (root / "plugins" / "modules" / "say.py").write_text(MODULE)
    (root / "plugins" / "module_utils" / "word.py").write_text("WORD = %r\n" % word)
    return root


def run(tmp_path: Path, cache: Path | str | None) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "vars": {"ansible_python_interpreter": sys.executable},
                                     "tasks": [{"t.abz.say": {}, "register": "said"},
                                               {"ansible.builtin.debug": {"msg": "WORD={{ said.word }}"}}]}]))
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tools" / "callbacks"),
               ANSIBLE_CALLBACKS_ENABLED="gpufleet_ansiballz_cache", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"), ANSIBLE_NOCOLOR="1")
    env.pop("GPUFLEET_ANSIBALLZ_CACHE", None)
    if cache is not None:
        env["GPUFLEET_ANSIBALLZ_CACHE"] = str(cache)
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(book)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc


def fingerprints(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir()) if cache.is_dir() else []


def test_a_second_process_runs_the_payload_the_first_one_built(tmp_path):
    collection(tmp_path, "one")
    cache = tmp_path / "cache"
    assert "WORD=one" in run(tmp_path, cache).stdout
    [entry_dir] = fingerprints(cache)
    assert [p.name for p in entry_dir.iterdir()] == [NAME]
    # Plant a payload whose module_util says something the source does not: only the cache can supply it.
    entry = entry_dir / NAME
    cached = pickle.loads(entry.read_bytes())
    source = zipfile.ZipFile(io.BytesIO(base64.b64decode(cached.zip_data)))
    planted = io.BytesIO()
    with zipfile.ZipFile(planted, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("module_utils/word.py"):
                data = b"WORD = 'from-the-cache'\n"
            out.writestr(info, data)
    entry.write_bytes(pickle.dumps(dataclasses.replace(cached, zip_data=base64.b64encode(planted.getvalue()))))
    assert "WORD=from-the-cache" in run(tmp_path, cache).stdout


def test_a_changed_module_util_is_built_again_never_served_from_the_cache(tmp_path):
    root = collection(tmp_path, "one")
    cache = tmp_path / "cache"
    assert "WORD=one" in run(tmp_path, cache).stdout
    (root / "plugins" / "module_utils" / "word.py").write_text("WORD = 'two'\n")
    assert "WORD=two" in run(tmp_path, cache).stdout
    assert len(fingerprints(cache)) == 2  # the new sources' payload under a fingerprint of its own
    os.utime(root / "plugins" / "modules" / "say.py")  # touched only: another fingerprint, built again
    assert "WORD=two" in run(tmp_path, cache).stdout and len(fingerprints(cache)) == 3


def test_nothing_is_kept_without_the_variable(tmp_path):
    collection(tmp_path, "one")
    proc = run(tmp_path, None)
    assert "WORD=one" in proc.stdout and "gpufleet_ansiballz_cache" not in proc.stdout + proc.stderr
    assert not (tmp_path / "cache").exists()
    assert "WORD=one" in run(tmp_path, "").stdout  # set but empty: off as well


def test_a_cache_that_cannot_be_written_costs_no_run(tmp_path):
    collection(tmp_path, "one")
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be\n")
    proc = run(tmp_path, blocker)
    assert "WORD=one" in proc.stdout
    assert blocker.read_text() == "a file where the cache directory should be\n"


def test_the_oldest_fingerprints_beyond_the_limit_are_pruned_never_the_current(tmp_path):
    cache = tmp_path / "cache"
    names = ["%064x" % n for n in range(5)]
    for age, name in enumerate(names):
        (cache / name).mkdir(parents=True)
        os.utime(cache / name, (1_000_000 + age, 1_000_000 + age))
    (cache / "not-a-fingerprint").mkdir()
    abz.prune(str(cache), names[0], limit=3)
    # names[0] is the oldest but current; the two newest others stay with it.
    assert sorted(p.name for p in cache.iterdir()) == sorted([names[0], names[3], names[4], "not-a-fingerprint"])


def test_the_fingerprint_follows_every_root_file(tmp_path):
    root = tmp_path / "r"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.py").write_text("A = 1\n")
    first = abz.fingerprint([str(root)])
    assert abz.fingerprint([str(root)]) == first
    (root / "sub" / "b.py").write_text("")
    second = abz.fingerprint([str(root)])
    assert second != first
    (root / "sub" / "__pycache__").mkdir()
    (root / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"bytecode no payload holds")
    assert abz.fingerprint([str(root)]) == second
    (root / "sub" / "a.py").write_text("A = 2\n")  # same size, a new modification time
    os.utime(root / "sub" / "a.py", ns=(1, 1))
    assert abz.fingerprint([str(root)]) not in (first, second)
