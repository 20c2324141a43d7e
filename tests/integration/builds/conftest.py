# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The build tier of the integration tests: real wheel builds (setuptools, the system Python) and pip installs into
virtualenvs under tmp_path, the real CPU torch wheel among them, so minutes of work, not unit tests. No simulated
fleet is needed: the fleet skip of tests/integration/conftest.py does not apply.

The inputs are built with the unit tests' own helpers (tests/unit: ``unit_helpers``), so each has one definition;
that directory is put on ``sys.path`` here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "unit"
if str(UNIT) not in sys.path:
    sys.path.insert(0, str(UNIT))

# unit_helpers checks that .collections (the collection's namespace, on sys.path by pytest.ini) is there.
from unit_helpers import run_module  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(autouse=True)
def _fleet_host():
    """Overrides the parent's skip on hosts that cannot run a simulated fleet: these tests start none."""


@pytest.fixture
def module_runner():
    """The unit tests' module runner (unit_helpers.run_module): a module's main() in this process, its result."""
    return run_module
