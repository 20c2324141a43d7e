# Copyright: (c) 2026, gpufleet.deepep contributors
# Apache License 2.0 (see LICENSE in the collection root)
"""Entry point of ``python -m tools.fleetsim``."""

from __future__ import annotations

import sys

from tools.fleetsim.cli import main

sys.exit(main())
