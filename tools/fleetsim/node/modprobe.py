# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleetsim node ``modprobe`` and ``lsmod`` (one file, installed under both names).

The kernel modules of the node's profile (nvidia, mlx5_core, ib_core, ...) are simulated: their list
lives in ``/run/fleetsim/proc-modules``, which the node sees as ``/proc/modules``. ``modprobe
nvidia_peermem`` loads it when the profile (or an installed DOCA-OFED) allows, and fails with the
profile's error otherwise. Any other module goes to the real ``modprobe`` when the host has one.
"""

import json
import os
import sys

# The environment overrides are for the harness's unit tests.
STATE = os.environ.get("FLEETSIM_MODULES_JSON", "/etc/fleetsim/modules.json")
PROC_MODULES = os.environ.get("FLEETSIM_PROC_MODULES", "/run/fleetsim/proc-modules")
REAL_KMOD = os.environ.get("FLEETSIM_REAL_KMOD", "/usr/bin/kmod")


def load_state():
    try:
        with open(STATE, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"base": [], "known": [], "peermem_loads": False, "peermem_error": "", "peermem_size": 16384}


def read_modules():
    mods = []
    try:
        with open(PROC_MODULES, encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 4:
                    used = [] if fields[3] == "-" else [u for u in fields[3].split(",") if u]
                    mods.append({"name": fields[0], "size": int(fields[1]), "used_by": used})
    except OSError:
        pass
    return mods


def write_modules(mods):
    text = "".join(
        "%s %d %d %s Live 0x0000000000000000\n"
        % (m["name"], m["size"], len(m["used_by"]), (",".join(m["used_by"]) + ",") if m["used_by"] else "-")
        for m in mods)
    # Rewrite in place: /proc/modules is a bind mount of this very file.
    with open(PROC_MODULES, "r+", encoding="utf-8") as fh:
        fh.seek(0)
        fh.write(text)
        fh.truncate()


def lsmod():
    print("Module                  Size  Used by")
    for m in read_modules():
        print(("%-19s %8d  %d %s" % (m["name"], m["size"], len(m["used_by"]), ",".join(m["used_by"]))).rstrip())
    return 0


def real_modprobe(argv):
    if os.path.exists(REAL_KMOD):
        os.execv(REAL_KMOD, ["modprobe"] + argv)
    return None


def modprobe(argv):
    remove = quiet = dry_run = False
    names = []
    all_names = False
    rest = list(argv)
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-n", "--dry-run", "--show"):
            dry_run = True
        elif arg in ("-a", "--all"):
            all_names = True
        elif arg in ("-C", "--config", "-d", "--dirname", "-S", "--set-version"):
            i += 1
        elif arg.startswith("-") and len(arg) > 1 and not arg.startswith("--") and set(arg[1:]) <= set("rqnavbsfi"):
            remove = remove or "r" in arg
            quiet = quiet or "q" in arg
            dry_run = dry_run or "n" in arg
            all_names = all_names or "a" in arg
        elif arg.startswith("-"):
            pass
        else:
            names.append(arg)
            if not all_names and not remove:
                break
        i += 1
    if not names:
        sys.stderr.write("modprobe: ERROR: missing module name.\n")
        return 1
    state = load_state()
    known = set(state.get("known", []))
    rc = 0
    for raw in names:
        name = raw.replace("-", "_")
        if name not in known:
            real_modprobe(argv)
            if not quiet:
                sys.stderr.write("modprobe: FATAL: Module %s not found in directory /lib/modules/%s\n"
                                 % (raw, os.uname().release))
            return 1
        mods = read_modules()
        present = {m["name"]: m for m in mods}
        if remove:
            if name not in present:
                continue
            if present[name]["used_by"] or name != "nvidia_peermem":
                if not quiet:
                    sys.stderr.write("modprobe: FATAL: Module %s is in use.\n" % name)
                rc = 1
                continue
            if dry_run:
                continue
            mods = [m for m in mods if m["name"] != name]
            for m in mods:
                m["used_by"] = [u for u in m["used_by"] if u != name]
            write_modules(mods)
            continue
        if name in present:
            continue
        if name == "nvidia_peermem" and not state.get("peermem_loads"):
            if not quiet:
                sys.stderr.write(state.get("peermem_error", "") + "\n")
            rc = 1
            continue
        if dry_run:
            continue
        size = state.get("peermem_size", 16384) if name == "nvidia_peermem" else 16384
        if name == "nvidia_peermem":
            for m in mods:
                if m["name"] in ("nvidia", "ib_core"):
                    m["used_by"].append(name)
        mods.insert(0, {"name": name, "size": size, "used_by": []})
        write_modules(mods)
    return rc


def main():
    prog = os.path.basename(sys.argv[0])
    if prog == "lsmod":
        return lsmod()
    return modprobe(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
