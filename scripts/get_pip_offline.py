# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for pip's ``get-pip.py`` bootstrap script, used by ``ansible-test sanity --venv``.

ansible-test downloads get-pip.py from a host this project's machines cannot reach. This script does the same job
from what every CPython ships: it bootstraps pip with ``ensurepip`` and then installs the requested packages
(e.g. ``pip==24.2``) from the configured package index. get-pip's own flags (``--no-setuptools``, ``--no-wheel``)
are dropped because plain pip does not know them.
"""

from __future__ import annotations

import subprocess
import sys


def main() -> None:
    args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
    # In a child process: ensurepip clears the PIP_* settings and pip.conf of the process it runs in.
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
    if args:
        subprocess.check_call([sys.executable, "-m", "pip", "install", *args])


if __name__ == "__main__":
    main()
