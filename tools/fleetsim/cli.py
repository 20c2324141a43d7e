# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python -m tools.fleetsim``: the simulated fleet's command line (run as root from the repo root)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from tools.fleetsim.common import DEFAULT_FLEET, TORCH_CHOICES, FleetError, state_root

USAGE_EXAMPLES = """\
examples:
  python -m tools.fleetsim up --profile gcp_b200 --nodes 4 --group b200_cluster
  python -m tools.fleetsim up --profile h100_ib --nodes 2          # add two nodes, group h100_ib
  python -m tools.fleetsim inventory --output build/inventory.yml
  python -m tools.fleetsim exec b200-cluster-1 -- cat /proc/driver/nvidia/params
  python -m tools.fleetsim fault b200-cluster-2 --never-return-after-reboot
  python -m tools.fleetsim image capture b200-cluster-1 --name golden      # a sealed node's disk
  python -m tools.fleetsim up --profile gcp_b200 --nodes 2 --group b200_cluster --image golden
  python -m tools.fleetsim status
  python -m tools.fleetsim down --purge
environment: FLEETSIM_FLEET (fleet name), FLEETSIM_STATE_DIR (state root, default /srv/fleetsim)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.fleetsim", epilog=USAGE_EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="A simulated GPU fleet on this host: network, PID and mount "
                                                 "namespaces, sshd and fake hardware per node.")
    parser.add_argument("--fleet", default=os.environ.get("FLEETSIM_FLEET", DEFAULT_FLEET),
                        help="fleet name (default: %(default)s)")
    parser.add_argument("--state-dir", default=None,
                        help="state root, outside /etc /opt /usr /var /root /tmp (default: $FLEETSIM_STATE_DIR "
                             "or /srv/fleetsim)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start nodes (adds to a running fleet)")
    up.add_argument("--profile", required=True, help="node profile (tools/fleetsim/profiles/<name>.yml)")
    up.add_argument("--nodes", type=int, default=1, help="how many nodes (default: 1)")
    up.add_argument("--group", help="inventory group; nodes are named <group>-<n> (default: the profile name)")
    up.add_argument("--subnet", help="private IPv4 network of a new fleet (default: first free 10.213.K.0/24)")
    up.add_argument("--bridge", help="host-only bridge of a new fleet (default: fsimK)")
    up.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the nodes' sshd (default: 120)")
    up.add_argument("--no-mirror", action="store_true", help="do not build or refresh the local mirror")
    up.add_argument("--image", help="start the nodes from an image of this fleet (`image capture`): its disk, their "
                                    "own hostnames, addresses, machine-ids and host keys")
    up.add_argument("--torch", choices=TORCH_CHOICES, default="real",
                    help="the torch wheel the nodes find in the mirror's wheels/: the real CPU wheel (default) or a "
                         "stand-in that has only torch's version (for scenarios where torch is a precondition)")

    down = sub.add_parser("down", help="stop the fleet; idempotent")
    down.add_argument("--purge", action="store_true", help="also delete the fleet's directory (disks, logs)")
    down.add_argument("--quiet", action="store_true", help="say nothing")

    st = sub.add_parser("status", help="nodes and their states, and stale leftovers of any fleet")
    st.add_argument("--json", action="store_true", help="print JSON")

    rb = sub.add_parser("reboot", help="power-cycle a node (or power on a halted one) and wait for it")
    rb.add_argument("node")
    rb.add_argument("--no-wait", action="store_true")
    rb.add_argument("--wait", type=float, default=120.0)

    ex = sub.add_parser("exec", help="run a command inside a node: exec NODE -- CMD...")
    ex.add_argument("node")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)

    inv = sub.add_parser("inventory", help="write the Ansible YAML inventory of the fleet")
    inv.add_argument("--output", "-o", help="file to write (default: stdout)")
    inv.add_argument("--reboot-timeout", type=int, help="gpufleet_reboot_timeout (default: 120)")

    fault = sub.add_parser("fault", help="fault knobs for tests")
    fault.add_argument("node")
    fault.add_argument("--never-return-after-reboot", action="store_true",
                       help="the node stays down after its next reboot")
    fault.add_argument("--port-down", action="append", default=[], metavar="DEV",
                       help="RDMA device whose port goes DOWN (now and at every boot)")
    fault.add_argument("--port-up", action="append", default=[], metavar="DEV", help="undo --port-down")
    fault.add_argument("--bump-counter", action="append", default=[], metavar="DEV",
                       help="add traffic to DEV's port counters (the host writes them, the node sees them)")
    fault.add_argument("--bytes", type=int, default=4096, help="bytes of traffic for --bump-counter")
    fault.add_argument("--port-rate", action="append", default=[], metavar="DEV=RATE",
                       help="set DEV's port rate as sysfs writes it (e.g. 'rocep145s0=200 Gb/sec (2X NDR)': a link "
                            "trained down) until the node's next boot; the profile's rate comes back at boot")
    fault.add_argument("--clear", action="store_true", help="remove every fault of the node first")

    img = sub.add_parser("image", help="images: capture a sealed node's disk (its copy-on-write layer and /root)")
    img.add_argument("action", choices=["capture"])
    img.add_argument("node")
    img.add_argument("--name", required=True, help="image name ([a-z0-9-])")

    log = sub.add_parser("boots", help="the fleet's boot log (JSON lines: event, node, boot_id, time)")
    log.add_argument("--node")

    mir = sub.add_parser("mirror", help="build the local mirror now")
    mir.add_argument("--dest", help="directory (default: <state root>/.mirrors/<fixtures digest>, as fleets use)")
    mir.add_argument("--no-wheels", action="store_true", help="skip the pip wheelhouse")
    mir.add_argument("--force", action="store_true", help="rebuild even when no fixture changed")
    return parser


def _need_root() -> None:
    if os.geteuid() != 0:
        raise FleetError("fleetsim needs root (namespaces, mounts, links)")
    for tool in ("ip", "unshare", "nsenter", "mount", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise FleetError(f"{tool} not found; run scripts/bootstrap.sh")
    if not os.path.exists("/usr/sbin/sshd"):
        raise FleetError("/usr/sbin/sshd not found: install openssh-server (scripts/bootstrap.sh)")


def print_status(data: dict, stale: dict) -> None:
    if not data["up"]:
        print(f"fleet {data['fleet']}: not up")
    else:
        print(f"fleet {data['fleet']}: bridge {data['bridge']} subnet {data['subnet']}")
        print(f"  {'NODE':<24} {'GROUP':<16} {'PROFILE':<12} {'ADDRESS':<15} {'STATE':<10} BOOT ID")
        for name, node in data["nodes"].items():
            print(f"  {name:<24} {node['group']:<16} {node['profile']:<12} {node['ip']:<15} "
                  f"{node['state']:<10} {node['boot_id'] or '-'}")
    found = {k: v for k, v in stale.items() if v}
    if found:
        print("stale leftovers (run `down` for their fleet, or remove them by hand):")
        for kind, items in found.items():
            for item in items:
                print(f"  {kind}: {item if isinstance(item, str) else json.dumps(item, sort_keys=True)}")
    else:
        print("no stale leftovers")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Imported here so that `--help` works without the fleet's dependencies.
    from tools.fleetsim import fleet as fleetmod
    from tools.fleetsim import mirror
    try:
        root = state_root(args.state_dir)
        if args.command == "mirror":
            # Under the root's lock, as `up` builds it: scenarios running side by side never build one mirror twice.
            with fleetmod.root_locked(root):
                dest = mirror.build(args.dest or mirror.fleet_mirror_dir(root), wheels=not args.no_wheels,
                                    force=args.force, cache=root / ".cache")
            print(dest)
            return 0
        fl = fleetmod.Fleet(root, args.fleet)
        if args.command == "inventory":
            text = fl.write_inventory(args.output, args.reboot_timeout)
            if args.output:
                print(f"inventory of fleet {args.fleet} written to {args.output}")
            else:
                sys.stdout.write(text)
            return 0
        if args.command == "boots":
            for entry in fleetmod.boot_log(root, args.fleet):
                if not args.node or entry["node"] == args.node:
                    print(json.dumps(entry, sort_keys=True))
            return 0
        _need_root()
        if args.command == "up":
            names = fl.up(args.profile, args.nodes, args.group, args.subnet, args.bridge, args.wait,
                          build_mirror=not args.no_mirror, torch=args.torch, image=args.image)
            state = fl.load()
            for name in names:
                print(f"{name} up at {state['nodes'][name]['ip']} ({args.profile})")
            return 0
        if args.command == "down":
            fl.down(purge=args.purge, quiet=args.quiet)
            return 0
        if args.command == "status":
            data = fl.status()
            stale = fleetmod.leftovers(root)
            if args.json:
                print(json.dumps({"fleet": data, "stale": stale}, indent=2, sort_keys=True))
            else:
                print_status(data, stale)
            return 0
        if args.command == "reboot":
            st = fl.reboot(args.node, args.wait, no_wait=args.no_wait)
            print(f"{args.node}: {st.get('state')} boot_id {st.get('boot_id')}")
            return 0
        if args.command == "exec":
            cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
            return fl.exec(args.node, cmd)
        if args.command == "image":
            info = fl.capture(args.node, args.name)
            print(f"image {info['name']} captured from {info['node']} ({info['profile']})")
            return 0
        if args.command == "fault":
            faults = fl.fault(args.node, never_return=True if args.never_return_after_reboot else None,
                              port_down=args.port_down, port_up=args.port_up, bump=args.bump_counter,
                              nbytes=args.bytes, clear=args.clear, port_rate=args.port_rate)
            print(f"{args.node}: faults {json.dumps(faults, sort_keys=True)}")
            return 0
    except FleetError as exc:
        print(f"fleetsim: {exc}", file=sys.stderr)
        return 1
    return 2
