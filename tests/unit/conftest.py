# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the unit tests; the helpers themselves live in unit_helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from unit_helpers import CAPTURED, render_sysfs_tree, run_module


@pytest.fixture
def module_runner():
    return run_module


@pytest.fixture
def captured_dir() -> Path:
    return CAPTURED


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Fake sysfs trees of shipped fleetsim profiles, rendered once per test file for the tests that only read them."""
    cache = {}

    def get(profile="gcp_b200", **kwargs):
        key = (profile, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = render_sysfs_tree(tmp_path_factory.mktemp(profile), profile, **kwargs)
        return cache[key]

    return get
