# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command line of vmfleet (``python -m tools.vmfleet ...``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from tools.vmfleet.common import Stages, VmError
from tools.vmfleet.fleet import Fleet
from tools.vmfleet.image import ensure_image, image_dir, variant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.vmfleet", description=__doc__)
    parser.add_argument("--fleet", default=os.environ.get("VMFLEET_FLEET", "default"))
    parser.add_argument("--quiet", action="store_true", help="no stage lines")
    sub = parser.add_subparsers(dest="cmd", required=True)
    img = sub.add_parser("image", help="build the guest image when the package list has none yet; print its directory")
    img.add_argument("--gpu", action="store_true", help="the GPU variant (guests of up --gpu-profile)")
    up = sub.add_parser("up", help="boot guests (builds the image first when needed)")
    up.add_argument("--group", default="realvm")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    up.add_argument("--from-image", metavar="NAME", help="boot clones of a captured image of this fleet")
    up.add_argument("--gpu-profile", metavar="PROFILE",
                    help="GPU guests: the image's GPU variant with fleetsim's simulated hardware of PROFILE "
                         "(tools/fleetsim/profiles) rendered at every boot; the whole fleet runs one profile")
    cap = sub.add_parser("capture", help="power a guest off and keep its disk as an image of the fleet (removed by down)")
    cap.add_argument("node")
    cap.add_argument("--image", required=True, metavar="NAME")
    inv = sub.add_parser("inventory", help="print (or write) the fleet's Ansible inventory")
    inv.add_argument("-o", "--output")
    inv.add_argument("--reboot-timeout", type=int, default=300)
    ex = sub.add_parser("exec", help="run a command on a guest over SSH")
    ex.add_argument("node")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("status", help="the fleet's state (JSON)")
    sub.add_parser("down", help="stop every guest and remove the fleet's files (idempotent)")
    args = parser.parse_args(argv)
    stages = Stages(quiet=args.quiet)
    try:
        if args.cmd == "image":
            with stages.stage("image"):
                print(ensure_image(stages, *variant(args.gpu)))
            return 0
        fleet = Fleet(args.fleet, stages)
        if args.cmd == "up":
            with stages.stage("up"):
                fleet.up(args.group, args.nodes, args.accel, from_image=args.from_image, gpu_profile=args.gpu_profile)
            stages.say("vmfleet: stage times: " + ", ".join(f"{n} {s:.1f} s" for n, s in stages.times))
        elif args.cmd == "capture":
            with stages.stage("capture"):
                record = fleet.capture(args.node, args.image)
            print(json.dumps(record, indent=2, sort_keys=True))
            stages.say("vmfleet: stage times: " + ", ".join(f"{n} {s:.1f} s" for n, s in stages.times))
        elif args.cmd == "inventory":
            text = f"# Inventory of the VM fleet {fleet.name!r} (written by `python -m tools.vmfleet inventory`).\n"
            text += yaml.safe_dump(fleet.inventory(args.reboot_timeout), sort_keys=False, default_flow_style=False)
            if args.output:
                Path(args.output).parent.mkdir(parents=True, exist_ok=True)
                Path(args.output).write_text(text, encoding="utf-8")
            else:
                sys.stdout.write(text)
        elif args.cmd == "exec":
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            proc = fleet.exec(args.node, command)
            sys.stdout.write(proc.stdout)
            sys.stderr.write(proc.stderr)
            return proc.returncode
        elif args.cmd == "status":
            state = fleet.load()
            state["image_for_current_list"] = str(image_dir())
            print(json.dumps(state, indent=2, sort_keys=True))
        elif args.cmd == "down":
            stopped = fleet.down()
            stages.say(f"vmfleet: fleet {fleet.name} down (stopped: {', '.join(stopped) or 'none'})")
    except VmError as exc:
        print(f"vmfleet: error: {exc}", file=sys.stderr)
        return 1
    return 0
