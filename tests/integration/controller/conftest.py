# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller tier of the integration tests: each test runs ``ansible-playbook`` (the collection's action
plugins, roles and filters in a real play on localhost or on hosts whose interpreter does not exist), so it is
not a unit test. No simulated fleet is needed: the fleet skip of tests/integration/conftest.py does not apply.

The inputs are built with the unit tests' own builders (tests/unit: ``unit_helpers`` and the test modules that
define them), so each input has one definition; that directory is put on ``sys.path`` here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "unit"
if str(UNIT) not in sys.path:
    sys.path.insert(0, str(UNIT))

# unit_helpers checks that .collections (the collection's namespace, on sys.path by pytest.ini) is there.
import unit_helpers  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import


@pytest.fixture(autouse=True)
def _fleet_host():
    """Overrides the parent's skip on hosts that cannot run a simulated fleet: these tests run none."""
