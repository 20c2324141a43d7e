# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the integration tests of the simulated fleet (helpers: fleetsim_helpers.py).

Every test fleet gets a unique name (``it-<pid>-<tag>``); fleetsim picks a free subnet and bridge for it,
and the fixtures always tear it down (``down --purge``), whatever the test did.
"""

from __future__ import annotations

import pytest

from fleetsim_helpers import WHY_NOT, SimFleet


@pytest.fixture(autouse=True)
def _fleet_host():
    """Skip (with the reason) on hosts that cannot run a simulated fleet."""
    if WHY_NOT:
        pytest.skip(WHY_NOT)


@pytest.fixture(scope="module")
def module_fleets():
    """Like make_fleet, for fleets shared by the tests of one module."""
    made: list[SimFleet] = []

    def factory(tag: str) -> SimFleet:
        if WHY_NOT:
            pytest.skip(WHY_NOT)
        fleet = SimFleet(tag)
        fleet.down()
        made.append(fleet)
        return fleet

    yield factory
    for fleet in made:
        fleet.down()


@pytest.fixture
def make_fleet():
    made: list[SimFleet] = []

    def factory(tag: str) -> SimFleet:
        fleet = SimFleet(tag)
        fleet.down()
        made.append(fleet)
        return fleet

    yield factory
    for fleet in made:
        fleet.down()
