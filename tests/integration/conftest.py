# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the integration tests of the simulated fleet (helpers: fleetsim_helpers.py).

Every test fleet gets a unique name (``it-<pid>-<tag>``); fleetsim picks a free subnet and bridge for it,
and the fixtures always tear it down (``down --purge``), whatever the test did.

The collection's namespace (``ansible_collections.gpufleet.deepep``, the checkout linked under ``.collections`` by
``scripts/bootstrap.sh``) is put on sys.path here, for every integration test: ``make test`` runs the fleets' half
(``--ignore=tests/integration/controller``) and the controller's half as two pytest runs, and a half must not
depend on the other's conftest for its imports.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleetsim_helpers import WHY_NOT, SimFleet

COLLECTIONS = Path(__file__).resolve().parents[2] / ".collections"
if not (COLLECTIONS / "ansible_collections" / "gpufleet" / "deepep").exists():
    raise RuntimeError("run scripts/bootstrap.sh (or `make bootstrap`) first: .collections is missing")
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


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
