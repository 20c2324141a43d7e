# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers of vmfleet: bounded commands, stage timers, paths."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("VMFLEET_BUILD_DIR", REPO / "build" / "vm"))
STATE_DIR = Path(os.environ.get("VMFLEET_STATE_DIR", BUILD_DIR / "fleets"))


class VmError(Exception):
    """A step of vmfleet failed; the message says which and why."""


def run(argv: list[str], timeout: float, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run argv with a timeout; raise VmError naming the command when it fails or runs out of time."""
    env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
    env.update(kwargs.pop("env", {}) or {})
    try:
        proc = subprocess.run(argv, timeout=timeout, text=True, capture_output=True, env=env, check=False, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise VmError(f"{' '.join(argv[:4])} ... did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-15:]
        raise VmError(f"{' '.join(argv[:6])} failed (rc {proc.returncode}):\n" + "\n".join(tail))
    return proc


class Stages:
    """Stage timer: every stage's seconds, printed as it ends and kept for a summary."""

    def __init__(self, quiet: bool = False):
        self.times: list[tuple[str, float]] = []
        self.quiet = quiet

    def stage(self, name: str):
        return _Stage(self, name)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)


class _Stage:
    def __init__(self, owner: Stages, name: str):
        self.owner, self.name = owner, name

    def __enter__(self):
        self.start = time.monotonic()
        self.owner.say(f"vmfleet: {self.name} ...")
        return self

    def __exit__(self, *exc):
        seconds = time.monotonic() - self.start
        self.owner.times.append((self.name, seconds))
        self.owner.say(f"vmfleet: {self.name}: {seconds:.1f} s" + (" (failed)" if exc[0] else ""))
        return False
