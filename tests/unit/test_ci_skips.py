# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/conftest.py: under CI=true a skip fails the run (a missing tool must not hide a failure); elsewhere it
stays a skip. xfail and the GPU suite's marker are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()
TESTS = '''
import shutil
import pytest

pytestmark = pytest.mark.skipif(shutil.which("no-such-tool-gpufleet") is None, reason="needs no-such-tool-gpufleet")

def test_needs_the_tool():
    assert True
'''
MIXED = '''
import pytest

def test_passes():
    assert True

@pytest.mark.xfail(reason="known crash", strict=True)
def test_known_crash():
    raise RuntimeError("crash")

@pytest.mark.gpu
def test_on_a_gpu_node():
    pytest.skip("no NVIDIA GPU visible")
'''
MODULE_SKIP = '''
import pytest
pytest.importorskip("no_such_module_gpufleet")

def test_never_collected():
    assert True
'''


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    gpu: GPU node\n")
    pytester.makepyfile(test_tool=TESTS, test_mixed=MIXED)
    return pytester


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_under_ci_a_missing_tool_fails_the_run_with_its_reason(suite, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1, xfailed=1, skipped=1)  # skipif: its setup fails
    result.stdout.fnmatch_lines(["*test_needs_the_tool skipped under CI=true: needs no-such-tool-gpufleet*"])
    assert result.ret != 0


def test_under_ci_a_module_skipped_at_collection_fails_the_run(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    suite.makepyfile(test_module_skip=MODULE_SKIP)
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_module_skip.py skipped under CI=true*no_such_module_gpufleet*"])
    assert result.ret != 0


@pytest.mark.parametrize("value", [None, "false", ""])
def test_outside_ci_a_missing_tool_is_a_skip(suite, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    suite.makepyfile(test_module_skip=MODULE_SKIP)
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, xfailed=1, skipped=3)
    assert result.ret == 0
