# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/verify_common's run directory (run_dir.yml, the run directory of verify_intranode/internode/serving) in a
real ansible-playbook run: no report is written through a link. The report_dir lookup itself is unit-tested in
tests/unit/test_report_dir.py."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kind", ["dangling", "to_dir"])
def test_a_verify_run_directory_that_is_a_link_is_refused_before_anything_is_written(tmp_path, kind):
    """roles/verify_common (run_dir.yml, the run directory of verify_intranode/internode/serving): no report is
    written through a link."""
    import os
    import subprocess

    import yaml

    from unit_helpers import REPO

    link = tmp_path / "run"
    link.symlink_to(tmp_path / "elsewhere" if kind == "dangling" else tmp_path)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Run directory", "ansible.builtin.include_role": {"name": "gpufleet.deepep.verify_common",
                                                                   "tasks_from": "run_dir.yml"},
         "vars": {"verify_common_run_dir": str(link)}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(playbook)], cwd=str(tmp_path), env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "verify_common_run_dir %s: is a symlink; nothing is written through a link" % link in proc.stdout
    assert not (tmp_path / "elsewhere").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["play.yml", "run"]
