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
