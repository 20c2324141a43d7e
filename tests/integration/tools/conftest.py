# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tests of the test harness itself (tools/: fleetsim's boot, hardware, mirror, systemd stand-in and traffic
spool, vmfleet, the fixture DeepEP tests, scripts/molecule_run.py). They call the harness's code and programs
without starting a fleet, so the fleet skip of tests/integration/conftest.py does not apply; they live beside the
integration tests that use the harness, not among the collection's unit tests.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fleet_host():
    """Overrides the parent's skip on hosts that cannot run a simulated fleet: these tests start none."""
