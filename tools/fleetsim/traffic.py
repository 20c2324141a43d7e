# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulated RDMA traffic: requests written inside a node, counters bumped by the host.

A node's fake sysfs is read-only from inside the node, so a program that "sends" RDMA traffic there
(the DeepEP fixture tests) asks for it: ``fleetsim-nic-traffic DEV BYTES`` (``tools/fleetsim/node/fleetsim-nic-traffic.py``)
appends one line ``<dev> <bytes>`` to ``/var/lib/fleetsim/traffic.spool`` inside the node. The host
sees that file in the node's ``/var`` overlay upper directory and applies new lines with
:func:`apply_traffic`, which bumps the port counters exactly as ``fleetsim fault --bump-counter`` does
(``Fleet._bump``). How far the spool was read is kept on the host (``offset_file``), never in the node.

``python -m tools.fleetsim.traffic [--fleet F] [--state-dir D] [--interval S] [--once]`` applies the
spools of every node of a fleet, once or every ``interval`` seconds until the fleet is down.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from tools.fleetsim.common import DEFAULT_FLEET, FleetPaths, read_json, state_root
from tools.fleetsim.fleet import Fleet

SPOOL = "lib/fleetsim/traffic.spool"  # relative to the node's /var
OFFSET_NAME = "traffic.offset"
MAX_REQUEST_BYTES = 1 << 50
_DEV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_spool(data: bytes) -> tuple[list[tuple[str, int]], list[str], int]:
    """Parse spool bytes: ``([(dev, bytes)], [bad lines], bytes consumed)``.

    Only complete lines (ending in a newline) are consumed, so a line being written is read next time.
    Blank lines and ``#`` comments are skipped; a malformed line is reported and skipped.
    """
    requests: list[tuple[str, int]] = []
    bad: list[str] = []
    end = data.rfind(b"\n") + 1
    for raw in data[:end].split(b"\n"):
        line = raw.decode("utf-8", "replace").strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _DEV_RE.match(parts[0]) or not parts[1].isdigit() \
                or not 0 < int(parts[1]) <= MAX_REQUEST_BYTES:
            bad.append(line)
            continue
        requests.append((parts[0], int(parts[1])))
    return requests, bad, end


def _read_offset(path: Path) -> int:
    try:
        return int(path.read_text(encoding="utf-8").strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _write_offset(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{value}\n", encoding="utf-8")
    os.replace(tmp, path)


def bump(port_dir: Path, nbytes: int) -> None:
    """Bump the counters under ``port_dir/counters`` by ``nbytes`` of traffic, as Fleet._bump does."""
    # Fleet._bump(self, np, info, nbytes) reads np.sysfs / info["port_dir"] / "counters" and writes through
    # self._write_in_place (a staticmethod): give it the port directory as the sysfs root.
    Fleet._bump(Fleet, SimpleNamespace(sysfs=Path(port_dir)), {"port_dir": "."}, nbytes)


def apply_traffic(node_upper_var_dir, port_dirs, offset_file=None) -> dict:
    """Apply the node's new traffic requests to its counters.

    ``node_upper_var_dir``: the host path of the node's ``/var`` overlay upper directory
    (``NodePaths.upper / "var"``). ``port_dirs``: ``{dev: host path of the device's port directory}``
    (``NodePaths.sysfs / rdma_devices[dev]["port_dir"]``), or a list of port directories whose
    device is the directory two levels up (``.../<dev>/ports/1``). ``offset_file``: where the read
    position is kept (default: ``traffic.offset`` in the node directory, two levels above the upper
    ``var``). Returns ``{applied: {dev: bytes}, unknown: {dev: bytes}, bad: [lines], offset}``.
    """
    var_dir = Path(node_upper_var_dir)
    if isinstance(port_dirs, dict):
        ports = {str(k): Path(v) for k, v in port_dirs.items()}
    else:
        ports = {Path(p).parent.parent.name: Path(p) for p in port_dirs}
    offset_path = Path(offset_file) if offset_file else var_dir.parent.parent / OFFSET_NAME
    offset_path.parent.mkdir(parents=True, exist_ok=True)
    # One applier at a time per node (the supervisor and a `python -m tools.fleetsim.traffic` may both run).
    with open(offset_path.with_name(offset_path.name + ".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _apply_locked(var_dir / SPOOL, ports, offset_path)


def _apply_locked(spool: Path, ports: dict, offset_path: Path) -> dict:
    result: dict = {"applied": {}, "unknown": {}, "bad": [], "offset": 0}
    try:
        size = spool.stat().st_size
    except FileNotFoundError:
        if offset_path.exists():
            _write_offset(offset_path, 0)
        return result
    offset = _read_offset(offset_path)
    if offset > size:  # the spool was truncated or replaced: start over
        offset = 0
    with open(spool, "rb") as fh:
        fh.seek(offset)
        data = fh.read(size - offset)
    requests, bad, consumed = parse_spool(data)
    for dev, nbytes in requests:
        if dev in ports:
            bump(ports[dev], nbytes)
            result["applied"][dev] = result["applied"].get(dev, 0) + nbytes
        else:
            result["unknown"][dev] = result["unknown"].get(dev, 0) + nbytes
    result["bad"] = bad
    result["offset"] = offset + consumed
    if consumed:
        _write_offset(offset_path, offset + consumed)
    return result


def apply_fleet(paths: FleetPaths) -> dict:
    """Apply the spools of every node of a fleet that is up; ``{node: apply_traffic result}``."""
    state = read_json(paths.state)
    out = {}
    for name in sorted((state or {}).get("nodes", {})):
        np = paths.node(name)
        if (read_json(np.status, {}) or {}).get("state") != "up":
            continue
        devices = (read_json(np.boot_info, {}) or {}).get("rdma_devices", {})
        ports = {dev: np.sysfs / info["port_dir"] for dev, info in devices.items() if info.get("port_dir")}
        out[name] = apply_traffic(np.upper / "var", ports, offset_file=np.dir / OFFSET_NAME)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fleetsim.traffic", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--fleet", default=os.environ.get("FLEETSIM_FLEET", DEFAULT_FLEET))
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between passes (default: 0.5)")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    args = parser.parse_args(argv)
    paths = FleetPaths(state_root(args.state_dir), args.fleet)
    while True:
        if not paths.state.exists():
            if args.once:
                print(f"fleet {args.fleet!r} is not up", file=sys.stderr)
                return 1
            return 0  # the fleet went down: nothing left to serve
        for node, result in apply_fleet(paths).items():
            if result["applied"] or result["unknown"] or result["bad"]:
                print(f"{node}: applied {result['applied']} unknown {result['unknown']} bad {result['bad']}",
                      flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
