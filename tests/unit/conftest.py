# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the unit tests; the helpers themselves live in unit_helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from unit_helpers import CAPTURED, run_module


@pytest.fixture
def module_runner():
    return run_module


@pytest.fixture
def captured_dir() -> Path:
    return CAPTURED
