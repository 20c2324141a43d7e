# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cuda_toolkit_apt_distro's default: the distribution part of NVIDIA's CUDA repository URL from the node's facts
(Ubuntu by release, ubuntu2404; Debian by major version only, debian12, whatever the point release)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def distro(facts):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    role = REPO / "roles" / "cuda_toolkit"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    role_vars = yaml.safe_load((role / "vars" / "main.yml").read_text(encoding="utf-8"))
    variables = dict((name, trust_as_template(value) if isinstance(value, str) else value)
                     for name, value in role_vars.items())
    templar = Templar(loader=DataLoader(), variables=dict(variables, ansible_facts=facts))
    return templar.template(trust_as_template(defaults["cuda_toolkit_apt_distro"]))


@pytest.mark.parametrize("facts, expected", [
    ({"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"}, "ubuntu2404"),
    ({"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"}, "ubuntu2204"),
    # Debian 12's point releases (ansible's distribution_version reads /etc/debian_version): NVIDIA's path is debian12.
    ({"distribution": "Debian", "distribution_version": "12.12", "distribution_major_version": "12"}, "debian12"),
    ({"distribution": "Debian", "distribution_version": "12", "distribution_major_version": "12"}, "debian12"),
    ({}, "ubuntu2404"),
])
def test_the_repository_distribution_from_the_facts(facts, expected):
    assert distro(facts) == expected
