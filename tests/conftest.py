# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Under CI (``CI=true``), a skipped test fails the run.

The tests skip, with the reason, where a tool they need is missing (nvcc and the CUDA headers, make, cmake, pip,
setuptools, the torch wheel, a host that can run a simulated fleet...). On a developer's machine that is a hint;
in CI it would hide a failure, so there a skip is reported as a failure naming the reason: install the tool
(scripts/bootstrap.sh installs every one the tests need). The GPU suite (marker ``gpu``) is exempt: it skips
where no GPU is and never runs in CI. Expected failures (xfail) are not skips and are left alone.
"""

from __future__ import annotations

import os

import pytest

CI_VALUES = ("1", "true", "yes")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def _fail_the_skip(report, where: str) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    report.outcome = "failed"
    report.longrepr = (f"{where} skipped under CI=true: {reason}\n"
                       "A skip in CI hides a failure: install what the test needs (scripts/bootstrap.sh).")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (in_ci() and report.skipped and not hasattr(report, "wasxfail")
            and item.get_closest_marker("gpu") is None):
        _fail_the_skip(report, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and "tests/gpu" not in str(collector.path):
        _fail_the_skip(report, collector.nodeid)
