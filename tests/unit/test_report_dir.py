# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the report_dir lookup: where reports go on the controller."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleLookupError

from ansible_collections.gpufleet.deepep.plugins.lookup.report_dir import report_dir


def test_default_is_gpufleet_reports_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report_dir("audit") == str(tmp_path / "gpufleet-reports" / "audit")
    assert report_dir("verify", base="") == str(tmp_path / "gpufleet-reports" / "verify")


def test_relative_and_absolute_bases(tmp_path):
    assert report_dir("audit", base="out/r", cwd=str(tmp_path)) == str(tmp_path / "out" / "r" / "audit")
    assert report_dir("verify", base="/srv/reports/", cwd="/elsewhere") == "/srv/reports/verify"


@pytest.mark.parametrize("kind", ["", "Audit", "../etc", "audit\n", "a/b", None, 3])
def test_bad_kinds_are_refused_by_name(kind):
    with pytest.raises(AnsibleLookupError, match="is not a report kind"):
        report_dir(kind)


@pytest.mark.parametrize("base", ["a\nb", ["x"], 7])
def test_bad_bases_are_refused_by_name(base):
    with pytest.raises(AnsibleLookupError, match="is not a directory path"):
        report_dir("audit", base=base)


@pytest.mark.parametrize("kind", ["dangling", "to_dir"])
def test_a_verify_run_directory_that_is_a_link_is_refused_before_anything_is_written(tmp_path, kind):
    """roles/verify_common (run_dir.yml, the run directory of verify_intranode/internode/serving): no report is
    written through a link."""
    import os
    import subprocess

    import yaml

    from unit_helpers import REPO

    link = tmp_path / "run"
    link.symlink_to(tmp_path / "elsewhere" if kind == "dangling" else tmp_path)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Run directory", "ansible.builtin.include_role": {"name": "gpufleet.deepep.verify_common",
                                                                   "tasks_from": "run_dir.yml"},
         "vars": {"verify_common_run_dir": str(link)}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(playbook)], cwd=str(tmp_path), env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "verify_common_run_dir %s: is a symlink; nothing is written through a link" % link in proc.stdout
    assert not (tmp_path / "elsewhere").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["play.yml", "run"]
