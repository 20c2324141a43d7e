# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router_lock_installed filter (plugins/filter/serving_helpers.py): whether the router's virtualenv already
holds every project of the lock the sglang_serve role installs it from (then the role leaves pip out). The
installed side is the listing of a real router venv (smg 1.13.0 on Python 3.11, installed by the role on a
molecule/realvm guest); the lock is the one the role ships."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.serving_helpers import router_lock_installed

ROOT = Path(__file__).resolve().parents[2]
SITE = "/opt/gpufleet/router-smg/lib/python3.11/site-packages"
CAPTURED = (ROOT / "tests/fixtures/captured/realvm/router-smg-site-packages.txt").read_text().split()
DIST_INFOS = [SITE + "/" + name for name in CAPTURED if name.endswith(".dist-info")]
LOCKS = json.loads((ROOT / "roles/sglang_serve/files/router-locks.json").read_text())
LOCK = LOCKS["smg==1.13.0"]["3.11"]


def test_the_capture_is_a_router_venv_with_the_lock_installed_and_pip_beside_it():
    names = {path.rsplit("/", 1)[1] for path in DIST_INFOS}
    assert "smg-1.13.0.dist-info" in names and "typing_extensions-4.16.0.dist-info" in names
    assert any(name.startswith("pip-") for name in names)  # the venv's own pip, not in the lock
    assert len(LOCK) == 7


def test_every_pin_installed_at_its_version_means_nothing_to_install():
    assert router_lock_installed(DIST_INFOS, LOCK) is True
    # basenames work too, and a trailing slash
    assert router_lock_installed([p.rsplit("/", 1)[1] + "/" for p in DIST_INFOS], LOCK) is True


def test_a_missing_project_or_another_version_means_pip_runs():
    without_grpcio = [p for p in DIST_INFOS if not p.endswith("/grpcio-1.85.3.dist-info")]
    assert router_lock_installed(without_grpcio, LOCK) is False
    older = [p.replace("smg-1.13.0", "smg-1.12.0") for p in DIST_INFOS]
    assert router_lock_installed(older, LOCK) is False
    # the other router's lock on the same venv: not installed
    assert router_lock_installed(DIST_INFOS, LOCKS["sglang-router==0.3.2"]["3.11"]) is False
    assert router_lock_installed([], LOCK) is False


def test_names_compare_as_pep_503_normalizes_them():
    # dist-info directories spell typing-extensions as typing_extensions, PyYAML as PyYAML or pyyaml
    assert router_lock_installed([SITE + "/typing_extensions-4.16.0.dist-info", SITE + "/PyYAML-6.0.4.dist-info"],
                                 {"typing-extensions==4.16.0": ["a" * 64], "pyyaml==6.0.4": ["b" * 64]}) is True


def test_an_entry_that_is_not_project_equals_version_is_never_taken_as_installed():
    assert router_lock_installed(DIST_INFOS, {"smg>=1.13.0": ["a" * 64]}) is False
    assert router_lock_installed(DIST_INFOS, {"smg==": ["a" * 64]}) is False


def test_files_that_are_not_dist_info_directories_are_ignored():
    assert router_lock_installed([SITE + "/smg", SITE + "/smg-1.13.0.egg-info"], {"smg==1.13.0": ["a" * 64]}) is False


@pytest.mark.parametrize("bad, lock, expected", [
    ("smg-1.13.0.dist-info", LOCK, "expected a list of [*].dist-info paths"),
    ([{"path": "x"}], LOCK, "expected a list of [*].dist-info paths"),
    (DIST_INFOS, {}, "expected a non-empty mapping project==version"),
    (DIST_INFOS, ["smg==1.13.0"], "expected a non-empty mapping project==version"),
])
def test_bad_input_is_refused_naming_it(bad, lock, expected):
    with pytest.raises(AnsibleFilterError, match=expected):
        router_lock_installed(bad, lock)
