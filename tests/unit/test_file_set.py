# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""file_set: a set of files in one module run; content and mode changes told apart; check mode writes nothing;
a bad entry writes nothing and is named; a write is atomic."""

from __future__ import annotations

import os
import re
import stat
from unittest import mock

import pytest

from unit_helpers import run_module

from ansible_collections.gpufleet.deepep.plugins.modules import file_set


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def _files(tmp_path, token="hf_a"):
    return [{"path": str(tmp_path / "u.service"), "content": "[Unit]\nDescription=x\n", "mode": "0644"},
            {"path": str(tmp_path / "u.env"), "content": 'HF_TOKEN="%s"\n' % token, "mode": "0600", "diff": False}]


def test_first_write_check_mode_and_a_second_run(tmp_path):
    checked = run_module(file_set, {"files": _files(tmp_path)}, check_mode=True, diff=True)
    assert checked["changed"] and sorted(os.listdir(tmp_path)) == []
    assert [(f["existed"], f["content_changed"], f["mode_changed"]) for f in checked["files"]] == [(False, True,
                                                                                                    False)] * 2
    # diff mode shows the unit's text, never the environment file's (it may carry a token)
    assert checked["diff"][0]["after"].startswith("[Unit]")
    assert "hf_a" not in str(checked["diff"]) and checked["diff"][1]["after"] == "(content not shown)\n"

    first = run_module(file_set, {"files": _files(tmp_path)})
    assert first["changed"] and [f["changed"] for f in first["files"]] == [True, True]
    assert (tmp_path / "u.env").read_text() == 'HF_TOKEN="hf_a"\n' and _mode(tmp_path / "u.env") == 0o600
    assert _mode(tmp_path / "u.service") == 0o644
    assert sorted(os.listdir(tmp_path)) == ["u.env", "u.service"]  # no temporary file left

    again = run_module(file_set, {"files": _files(tmp_path)})
    assert not again["changed"] and [f["changed"] for f in again["files"]] == [False, False]
    assert not run_module(file_set, {"files": _files(tmp_path)}, check_mode=True)["changed"]


def test_a_mode_alone_is_set_without_a_content_change_and_a_new_content_is_one(tmp_path):
    run_module(file_set, {"files": _files(tmp_path)})
    env = tmp_path / "u.env"
    env.chmod(0o644)
    inode = env.stat().st_ino
    checked = run_module(file_set, {"files": _files(tmp_path)}, check_mode=True, diff=True)
    assert checked["files"][1] == {"path": str(env), "existed": True, "content_changed": False,
                                   "mode_changed": True, "changed": True}
    assert checked["diff"] == [{"before_header": str(env), "after_header": str(env), "before": "mode 0644\n",
                                "after": "mode 0600\n"}]
    assert _mode(env) == 0o644
    tightened = run_module(file_set, {"files": _files(tmp_path)})
    assert tightened["files"][1]["mode_changed"] and not tightened["files"][1]["content_changed"]
    assert _mode(env) == 0o600 and env.stat().st_ino == inode  # set in place, not rewritten

    rotated = run_module(file_set, {"files": _files(tmp_path, token="hf_b")})
    assert [f["content_changed"] for f in rotated["files"]] == [False, True]
    assert env.read_text() == 'HF_TOKEN="hf_b"\n' and _mode(env) == 0o600


@pytest.mark.parametrize("mutate, named", [
    (lambda f, t: f[0].update(path="relative/u.service"), r"files\[0\] path 'relative/u.service': expected an absolute"),
    (lambda f, t: f[1].update(path=f[0]["path"]), r"files\[1\] path .*: the path is given twice"),
    (lambda f, t: f[1].update(mode="600x"), r"files\[1\] mode '600x' .*expected permission bits as an octal string"),
    (lambda f, t: f[1].update(mode="0800"), r"files\[1\] mode '0800'"),
    (lambda f, t: f[1].update(path=str(t / "missing" / "u.env")), "its directory .*missing' does not exist"),
    (lambda f, t: (t / "adir").mkdir() or f[1].update(path=str(t / "adir")), "exists and is not a regular file"),
    (lambda f, t: os.symlink(str(t / "elsewhere"), str(t / "link")) or f[1].update(path=str(t / "link")),
     "is a symbolic link .*nothing is written through a link"),
])
def test_a_bad_entry_is_named_and_nothing_is_written(tmp_path, mutate, named):
    files = _files(tmp_path)
    mutate(files, tmp_path)
    before = sorted(os.listdir(tmp_path))
    result = run_module(file_set, {"files": files})
    assert result.failed and "Traceback" not in result["msg"]
    assert result["msg"].startswith("file_set: ")
    assert re.search(named, result["msg"]), result["msg"]
    assert sorted(os.listdir(tmp_path)) == before  # the good entry before the bad one is not written either
    assert not (tmp_path / "elsewhere").exists()


def test_check_mode_takes_a_missing_directory_as_one_an_earlier_task_makes(tmp_path):
    files = [{"path": str(tmp_path / "conf.d" / "u.env"), "content": "A=1\n", "mode": "0600"}]
    checked = run_module(file_set, {"files": files}, check_mode=True)
    assert not checked.failed and checked["files"][0]["content_changed"] and not (tmp_path / "conf.d").exists()
    refused = run_module(file_set, {"files": files})
    assert refused.failed and "its directory %r does not exist" % str(tmp_path / "conf.d") in refused["msg"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    run_module(file_set, {"files": _files(tmp_path)})
    with mock.patch.object(file_set.AnsibleModule, "atomic_move", side_effect=OSError(28, "No space left on device")):
        result = run_module(file_set, {"files": _files(tmp_path, token="hf_b")})
    assert result.failed and "writing %s failed" % (tmp_path / "u.env") in result["msg"]
    assert "No space left on device" in result["msg"]
    assert (tmp_path / "u.env").read_text() == 'HF_TOKEN="hf_a"\n'
    assert sorted(os.listdir(tmp_path)) == ["u.env", "u.service"]
