# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a node for the node_stack gatherers: a node path resolved under a ``root`` directory (``/`` on a node, a
fixture tree in tests), a file's text or sha256 (None when it cannot be read), the tail of a command's output.

Standard library only, Python 3.8+ (this file runs on the managed nodes).
"""

from __future__ import annotations

import os

from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256

__all__ = ["under", "read_text", "sha256_file"]


def under(root, path):
    """``path`` (absolute, as on the node) resolved under ``root``."""
    if not root or root == "/":
        return path
    return os.path.join(root, path.lstrip("/"))


def read_text(path, limit=4 * 1024 * 1024):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def sha256_file(path):
    """:func:`_fileio.file_sha256` of ``path``, or None when it cannot be read."""
    try:
        return file_sha256(path)
    except (IOError, OSError):
        return None


def output_tail(text, lines=5):
    text = (text or "").strip()
    return "\n".join(text.splitlines()[-lines:]) if text else ""
