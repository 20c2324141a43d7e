# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's callback gpufleet.deepep.plugin_preload (plugins/callback/plugin_preload.py) in real
ansible-playbook runs, on a collection of its own made here (named by the option ``collections``, through its
variable GPUFLEET_PRELOAD_COLLECTIONS): every filter, test, action and lookup plugin file records each time Python executes it.
Without the callback every task of every host imports the collection's filter files again (ansible-core's worker
processes walk the whole filter package) and every worker that templates a lookup imports it again; with it, the
playbook process imports each file once and the workers run what it loaded, with the same results; a broken filter
file costs what it costs without the callback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.gpufleet.deepep.plugins.callback import plugin_preload as preload

REPO = Path(__file__).resolve().parents[3]
HOSTS = ["h1", "h2", "h3"]
TASKS = 4

RECORD = '''import os
with open(os.environ["PRELOAD_RECORD"], "a", encoding="utf-8") as record:
    record.write("{name} %d\\n" % os.getpid())
'''
FILTER = '''from __future__ import annotations
{record}

def {func}(value):
    return "{func}(%s)" % value


class FilterModule:
    def filters(self):
        return {{"{func}": {func}}}
'''
TEST = '''from __future__ import annotations
{record}

def even(value):
    return int(value) % 2 == 0


class TestModule:
    def tests(self):
        return {{"even": even}}
'''
ACTION = '''from __future__ import annotations
{record}
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(changed=False, said="said " + str(self._task.args.get("word")))
        return result
'''
LOOKUP = '''from __future__ import annotations
{record}
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return ["looked " + str(term) for term in terms]
'''


def collection(tmp_path: Path, broken: bool = False) -> Path:
    root = tmp_path / "collections" / "ansible_collections" / "t" / "pre"
    for kind in ("filter", "test", "action", "lookup"):
        (root / "plugins" / kind).mkdir(parents=True, exist_ok=True)
    (root / "galaxy.yml").write_text("namespace: t\nname: pre\nversion: 1.0.0\n")
    for func in ("shout", "whisper", "hum"):
        (root / "plugins" / "filter" / f"{func}.py").write_text(
            FILTER.format(record=RECORD.format(name=f"filter/{func}"), func=func))
    (root / "plugins" / "test" / "parity.py").write_text(TEST.format(record=RECORD.format(name="test/parity")))
    (root / "plugins" / "action" / "say.py").write_text(ACTION.format(record=RECORD.format(name="action/say")))
    (root / "plugins" / "lookup" / "look.py").write_text(LOOKUP.format(record=RECORD.format(name="lookup/look")))
    if broken:
        (root / "plugins" / "filter" / "broken.py").write_text("raise RuntimeError('this filter file cannot load')\n")
    return root


def run(tmp_path: Path, collections: str | None, tasks: list[dict] | None = None,
        expect_rc: int = 0) -> tuple[subprocess.CompletedProcess, list[str]]:
    record = tmp_path / "record.txt"
    record.unlink(missing_ok=True)
    if tasks is None:
        tasks = []
        for i in range(TASKS):
            tasks.append({"ansible.builtin.set_fact": {f"v{i}": "{{ inventory_hostname | t.pre.shout }}"}})
        tasks.append({"ansible.builtin.assert": {"that": ["4 is t.pre.even",
                                                          "v0 == 'shout(' ~ inventory_hostname ~ ')'"]}})
        tasks.append({"t.pre.say": {"word": "{{ inventory_hostname }}"}, "register": "said"})
        tasks.append({"ansible.builtin.debug": {"msg": "SAID={{ said.said }} {{ 'x' | t.pre.whisper }}"}})
        tasks.append({"ansible.builtin.debug": {"msg": "LOOKED={{ lookup('t.pre.look', inventory_hostname) }}"}})
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "connection": "local", "gather_facts": False,
                                     "vars": {"ansible_python_interpreter": sys.executable}, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CALLBACKS_ENABLED="gpufleet.deepep.plugin_preload",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="1", PRELOAD_RECORD=str(record),
               ANSIBLE_COLLECTIONS_PATH="%s:%s" % (tmp_path / "collections", REPO / ".collections"))
    env.pop("ANSIBLE_CALLBACK_PLUGINS", None)
    env.pop("GPUFLEET_PRELOAD_COLLECTIONS", None)
    # None: the option's default (this collection alone, so t.pre is not preloaded).
    if collections is not None:
        env["GPUFLEET_PRELOAD_COLLECTIONS"] = collections
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", ",".join(HOSTS) + ",",
                           str(book)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == expect_rc, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = record.read_text().splitlines() if record.exists() else []
    return proc, lines


def loads(lines: list[str], name: str) -> int:
    return sum(1 for line in lines if line.split()[0] == name)


def test_without_the_callback_every_task_and_host_imports_the_filter_files_again(tmp_path):
    collection(tmp_path)
    proc, lines = run(tmp_path, None)
    assert "SAID=said h1 whisper(x)" in proc.stdout
    # Each of the four set_fact tasks on each of the three hosts, the debug on each host: a worker each, and each
    # worker imports every filter file of the package, the ones its task does not use too.
    assert loads(lines, "filter/hum") >= (TASKS + 1) * len(HOSTS)
    # An action plugin ansible-core loads itself in the playbook process (to read its class before queuing the task);
    # a lookup each worker that templates it loads again.
    assert loads(lines, "action/say") == 1
    assert loads(lines, "lookup/look") == len(HOSTS)


def test_with_the_callback_the_playbook_process_imports_each_file_once(tmp_path):
    collection(tmp_path)
    proc, lines = run(tmp_path, "t.pre")
    assert "SAID=said h1 whisper(x)" in proc.stdout and "SAID=said h3 whisper(x)" in proc.stdout
    assert "LOOKED=looked h2" in proc.stdout
    for name in ("filter/shout", "filter/whisper", "filter/hum", "test/parity", "action/say", "lookup/look"):
        assert loads(lines, name) == 1, (name, lines)
    assert len({line.split()[1] for line in lines}) == 1  # one process: the playbook's, before any worker


def test_the_same_results_and_failures_as_without_it(tmp_path):
    collection(tmp_path)
    bad = [{"ansible.builtin.debug": {"msg": "{{ 'x' | t.pre.nonesuch }}"}}]
    off = run(tmp_path, None, bad, expect_rc=2)[0]
    on = run(tmp_path, "t.pre", bad, expect_rc=2)[0]
    for proc in (off, on):
        assert "t.pre.nonesuch" in proc.stdout


def test_a_broken_filter_file_costs_what_it_costs_without_the_callback(tmp_path):
    collection(tmp_path, broken=True)
    for value in (None, "t.pre"):
        # ansible-core skips the file with a warning and the other filters work, with the callback as without it.
        proc, lines = run(tmp_path, value)
        assert "SAID=said h2 whisper(x)" in proc.stdout
        assert "this filter file cannot load" in proc.stdout + proc.stderr
    assert loads(lines, "filter/shout") == 1


def test_preload_outside_a_playbook_loads_nothing_it_cannot_find():
    assert preload.plugin_files("no.such", "filter") == []
    assert not preload.preload(["no.such"])


def test_nothing_is_loaded_when_the_variable_is_unset_or_empty_or_names_no_collection(tmp_path):
    collection(tmp_path)
    for value in ("", "no.such"):
        proc, lines = run(tmp_path, value)
        assert "SAID=said h1 whisper(x)" in proc.stdout
        assert loads(lines, "filter/hum") >= (TASKS + 1) * len(HOSTS)
