# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entry point of ``python -m tools.fleetsim``."""

from __future__ import annotations

import sys

from tools.fleetsim.cli import main

sys.exit(main())
