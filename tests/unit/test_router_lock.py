# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router locks the sglang_serve role ships (files/router-locks.json, made by scripts/router_lock.py): one lock
per default pin and router Python, whole closures with well-formed digests, and the simulated fleet's mirror pinned
to the same versions (so the hash-checked router install of the serving scenario reads them)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import yaml

from unit_helpers import REPO

LOCKS = json.loads((REPO / "roles" / "sglang_serve" / "files" / "router-locks.json").read_text())
DEFAULTS = yaml.safe_load((REPO / "roles" / "sglang_serve" / "defaults" / "main.yml").read_text())
PINNED = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?==[0-9A-Za-z][0-9A-Za-z.+!_-]*$")

spec = importlib.util.spec_from_file_location("router_lock", REPO / "scripts" / "router_lock.py")
router_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(router_lock)


def pins():
    return [f"{kind}=={version}" for kind, version in DEFAULTS["sglang_serve_router_versions"].items()]


@pytest.mark.parametrize("pin", pins())
@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12"])
def test_every_default_pin_has_a_whole_lock_for_each_router_python(pin, python):
    lock = LOCKS[pin][python]
    assert pin in lock
    for key, digests in lock.items():
        assert PINNED.match(key), key
        assert digests and all(re.fullmatch(r"[0-9a-f]{64}", d) for d in digests), key
        assert len(set(digests)) == len(digests)
    # one version per project: a lock pip can install whole with --require-hashes
    projects = [key.split("==")[0] for key in lock]
    assert len(projects) == len(set(projects))


def test_the_script_makes_locks_for_the_role_s_pins():
    assert sorted(router_lock.PINS) == sorted(pins()) and sorted(LOCKS) == sorted(pins())


def test_the_mirror_serves_the_versions_of_the_python_3_11_locks():
    lines = [ln.split("#", 1)[0].strip() for ln in
             (REPO / "tools" / "fleetsim" / "fixtures" / "wheels.txt").read_text().splitlines()]
    pinned = {ln for ln in lines if "==" in ln}
    for pin in pins():
        assert set(LOCKS[pin]["3.11"]) <= pinned, sorted(set(LOCKS[pin]["3.11"]) - pinned)


@pytest.mark.parametrize("wheel, python, fits", [
    ("grpcio-1.85.3-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "3.11", True),
    ("grpcio-1.85.3-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "3.12", False),
    ("grpcio-1.85.3-cp311-cp311-musllinux_1_1_aarch64.whl", "3.11", True),
    ("grpcio-1.85.3-cp311-cp311-win_amd64.whl", "3.11", False),
    ("grpcio-1.85.3-cp311-cp311-macosx_11_0_universal2.whl", "3.11", False),
    ("smg-1.13.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.12", True),
    ("smg-1.13.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.10", True),
    ("protobuf-7.36.2-cp310-abi3-manylinux2014_x86_64.whl", "3.10", True),
    ("fastapi-0.165.0-py3-none-any.whl", "3.11", True),
    ("smg-1.13.0.tar.gz", "3.11", True),
])
def test_which_files_a_router_python_may_install(wheel, python, fits):
    assert router_lock.fits(wheel, python) is fits
