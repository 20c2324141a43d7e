# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleetsim node tool ``fleetsim-nic-traffic``: ask the host to count simulated RDMA traffic on a NIC.

Installed in the node as /usr/local/bin/fleetsim-nic-traffic (the supervisor adds the shebang).

Usage: fleetsim-nic-traffic DEV BYTES [DEV BYTES ...]

The node's /sys is read-only, so the request goes to /var/lib/fleetsim/traffic.spool (one line
"<dev> <bytes>" per request, appended with O_APPEND); the host applies it to the port counters of DEV
(port_xmit_data/port_rcv_data in 4-byte words, packets per 4 KiB), as `fleetsim fault --bump-counter`.
DEV must be an RDMA device of the node (/sys/class/infiniband/DEV).
"""
import os
import re
import sys

SPOOL = os.environ.get("FLEETSIM_TRAFFIC_SPOOL", "/var/lib/fleetsim/traffic.spool")
SYSFS = os.environ.get("FLEETSIM_SYSFS_ROOT", "/sys")
DEV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        sys.stderr.write(__doc__.split("\n\n", maxsplit=3)[2] + "\n")
        return 2
    lines = []
    for dev, count in zip(argv[0::2], argv[1::2]):
        if not DEV_RE.match(dev):
            sys.stderr.write("fleetsim-nic-traffic: %r is not an RDMA device name\n" % dev)
            return 2
        if not os.path.isdir(os.path.join(SYSFS, "class/infiniband", dev)):
            sys.stderr.write("fleetsim-nic-traffic: no RDMA device %s under %s/class/infiniband\n" % (dev, SYSFS))
            return 1
        if not count.isdigit() or int(count) < 1:
            sys.stderr.write("fleetsim-nic-traffic: BYTES must be a positive integer; got %r\n" % count)
            return 2
        lines.append("%s %d\n" % (dev, int(count)))
    os.makedirs(os.path.dirname(SPOOL), exist_ok=True)
    fd = os.open(SPOOL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(lines).encode())
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
