# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for nvidia-smi on a simulated node: answers from the node's hardware JSON.

Python 3 standard library only (runs with the node's /usr/bin/python3). The JSON is the one
tools/fleetsim/fakehw.py writes (write_hw_json); its path comes from the environment variable
FLEETSIM_HW_JSON, default /etc/fleetsim/hardware.json. A missing file, or "driver_loaded": false in it,
answers like nvidia-smi without a loaded driver (exit status 9).

Answers:
  nvidia-smi                                  the summary table
  nvidia-smi -L | --list-gpus
  nvidia-smi --query-gpu=F1,F2,... --format=csv[,noheader][,nounits] [-i IDS]
  nvidia-smi topo -m | --matrix
  nvidia-smi nvlink -s | --status [-i IDS]
  nvidia-smi --version
  nvidia-smi -q [-i IDS]                      the GPUs' names, bus ids and Fabric sections

Not executable in the repository: fakehw.install_fake_nvidia_smi() installs it with a
#!/usr/bin/python3 line.
"""

from __future__ import annotations

import json
import os
import sys
import time

DEFAULT_JSON = "/etc/fleetsim/hardware.json"
# A node's fault knob over its GPUs' fabric state (JSON of Fabric keys, e.g. {"state": "In Progress"}): what a tray
# shows while the NVLink switch trays have not registered it, or after a failure (Status "Insufficient Resources").
FABRIC_FAULT = "/etc/fleetsim/gpu-fabric.json"
RC_INVALID = 2
RC_NO_DRIVER = 9

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

PROCESSES = """
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""


def _mib(value):
    return f"{value} MiB"


def _watts(value):
    return f"{float(value):.2f} W"


def _hex_id(value):
    return f"0x{value:08X}"


# field name -> (unit for the csv header or None, value with units, value without units)
def _fields(data, gpu):
    drv = data["driver"]
    bus = gpu["pci_bus_id"]
    dom, bus_no, devfn = bus.split(":")
    free = gpu["memory_total_mib"] - gpu["memory_used_mib"]
    gen = {"32.0 GT/s PCIe": "5", "16.0 GT/s PCIe": "4", "8.0 GT/s PCIe": "3"}.get(gpu["pcie"]["speed"], "4")
    table = {
        "index": (None, str(gpu["index"]), str(gpu["index"])),
        "count": (None, str(len(data["gpus"])), str(len(data["gpus"]))),
        "name": (None, gpu["name"], gpu["name"]),
        "serial": (None, gpu["serial"], gpu["serial"]),
        "uuid": (None, gpu["uuid"], gpu["uuid"]),
        "pci.bus_id": (None, bus, bus),
        "pci.domain": (None, f"0x{int(dom, 16):04X}", f"0x{int(dom, 16):04X}"),
        "pci.bus": (None, f"0x{bus_no}", f"0x{bus_no}"),
        "pci.device": (None, f"0x{devfn.split('.')[0]}", f"0x{devfn.split('.')[0]}"),
        "pci.device_id": (None, _hex_id((gpu["pci_device_id"] << 16) | 0x10DE),
                          _hex_id((gpu["pci_device_id"] << 16) | 0x10DE)),
        "pci.sub_device_id": (None, _hex_id(gpu["pci_subsystem_id"]), _hex_id(gpu["pci_subsystem_id"])),
        "pcie.link.gen.current": (None, gen, gen),
        "pcie.link.gen.max": (None, gen, gen),
        "pcie.link.width.current": (None, str(gpu["pcie"]["width"]), str(gpu["pcie"]["width"])),
        "pcie.link.width.max": (None, str(gpu["pcie"]["width"]), str(gpu["pcie"]["width"])),
        "driver_version": (None, drv["version"], drv["version"]),
        "vbios_version": (None, gpu["vbios_version"], gpu["vbios_version"]),
        "compute_cap": (None, gpu["compute_cap"], gpu["compute_cap"]),
        "persistence_mode": (None, gpu["persistence_mode"], gpu["persistence_mode"]),
        "display_mode": (None, "Disabled", "Disabled"),
        "display_active": (None, "Disabled", "Disabled"),
        "pstate": (None, "P0", "P0"),
        "mig.mode.current": (None, "Disabled", "Disabled"),
        "mig.mode.pending": (None, "Disabled", "Disabled"),
        "ecc.mode.current": (None, "Enabled", "Enabled"),
        "compute_mode": (None, "Default", "Default"),
        "memory.total": ("MiB", _mib(gpu["memory_total_mib"]), str(gpu["memory_total_mib"])),
        "memory.used": ("MiB", _mib(gpu["memory_used_mib"]), str(gpu["memory_used_mib"])),
        "memory.free": ("MiB", _mib(free), str(free)),
        "memory.reserved": ("MiB", _mib(0), "0"),
        "power.draw": ("W", _watts(gpu["power_draw_w"]), f"{float(gpu['power_draw_w']):.2f}"),
        "power.limit": ("W", _watts(gpu["power_limit_w"]), f"{float(gpu['power_limit_w']):.2f}"),
        "enforced.power.limit": ("W", _watts(gpu["power_limit_w"]), f"{float(gpu['power_limit_w']):.2f}"),
        "temperature.gpu": (None, str(gpu["temperature_c"]), str(gpu["temperature_c"])),
        "utilization.gpu": ("%", "0 %", "0"),
        "utilization.memory": ("%", "0 %", "0"),
        "clocks.max.sm": ("MHz", "1980 MHz", "1980"),
        "clocks.sm": ("MHz", "1980 MHz", "1980"),
        "fan.speed": ("%", "[N/A]", "[N/A]"),
        "fabric.state": (None, _fabric(gpu)["state"], _fabric(gpu)["state"]),
        "fabric.status": (None, _fabric(gpu)["status"], _fabric(gpu)["status"]),
    }
    aliases = {
        "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
        "pci.device_id": "pci.device_id", "pci.sub_device_id": "pci.sub_device_id",
        "persistence-mode": "persistence_mode", "power.draw.instant": "power.draw",
        "temperature.gpu.tlimit": "temperature.gpu", "clocks.current.sm": "clocks.sm",
    }
    return table, aliases


def _fabric(gpu):
    """The GPU's Fabric section: the hardware's, with the node's fault knob over it."""
    fabric = dict(gpu.get("fabric") or {})
    try:
        with open(FABRIC_FAULT, encoding="utf-8") as handle:
            fabric.update((str(k), str(v)) for k, v in json.load(handle).items())
    except (OSError, ValueError, AttributeError):
        pass
    return fabric


def full_query(data, ids):
    """nvidia-smi -q, the parts the collection reads: the header, each GPU's name, bus id and Fabric section."""
    gpus = _select(data, ids)
    if gpus is None:
        return 6
    drv = data["driver"]
    out = ["", "==============NVSMI LOG==============", "",
           "Timestamp                                 : %s" % time.strftime("%a %b %d %H:%M:%S %Y"),
           "Driver Version                            : %s" % drv["version"],
           "CUDA Version                              : %s" % drv["cuda_version"], "",
           "Attached GPUs                             : %d" % len(data["gpus"])]
    for gpu in gpus:
        fab = _fabric(gpu)
        out += ["GPU %s" % gpu["pci_bus_id"],
                "    Product Name                          : %s" % gpu["name"],
                "    GPU UUID                              : %s" % gpu["uuid"],
                "    Fabric",
                "        State                             : %s" % fab.get("state", "N/A"),
                "        Status                            : %s" % fab.get("status", "N/A"),
                "        CliqueId                          : %s" % fab.get("clique_id", "N/A"),
                "        ClusterUUID                       : %s" % fab.get("cluster_uuid", "N/A"),
                "        Health"]
        if fab.get("health", "N/A") != "N/A":
            out.append("            Summary                       : %s" % fab["health"])
        out += ["            Bandwidth                     : %s" % fab.get("bandwidth", "N/A"), ""]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _load():
    path = os.environ.get("FLEETSIM_HW_JSON", DEFAULT_JSON)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if data.get("driver_loaded", True) is False:
        return None
    return data


def _select(data, ids):
    if ids is None:
        return data["gpus"]
    chosen = []
    for tok in ids.split(","):
        tok = tok.strip()
        for gpu in data["gpus"]:
            if tok in (str(gpu["index"]), gpu["uuid"], gpu["pci_bus_id"], gpu["pci_bus_id"][4:]) \
                    or tok.upper() == gpu["pci_bus_id"][4:]:
                chosen.append(gpu)
                break
        else:
            sys.stderr.write("No devices were found\n")
            return None
    return chosen


def query_gpu(data, fields_arg, fmt, ids):
    if fmt is None:
        sys.stdout.write("ERROR: Option --format must be set when --query-gpu is used.\n")
        return RC_INVALID
    opts = [o.strip() for o in fmt.split(",") if o.strip()]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        sys.stdout.write(f'"{fmt}" is not a valid format. Please run \'nvidia-smi --help-query-gpu\' for help.\n')
        return RC_INVALID
    noheader, nounits = "noheader" in opts, "nounits" in opts
    names = [f.strip() for f in fields_arg.split(",") if f.strip()]
    gpus = _select(data, ids)
    if gpus is None:
        return 6
    if not gpus:
        sys.stdout.write("No devices were found\n")
        return 6
    table, aliases = _fields(data, gpus[0])
    for name in names:
        if aliases.get(name, name) not in table:
            sys.stdout.write(f'Field "{name}" is not a valid field to query.\n\n')
            return RC_INVALID
    out = []
    if not noheader:
        header = []
        for name in names:
            unit = table[aliases.get(name, name)][0]
            header.append(name if (unit is None or nounits) else f"{name} [{unit}]")
        out.append(", ".join(header))
    for gpu in gpus:
        table = _fields(data, gpu)[0]
        out.append(", ".join(table[aliases.get(n, n)][2 if nounits else 1] for n in names))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def list_gpus(data):
    for gpu in data["gpus"]:
        sys.stdout.write(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
    return 0


def topo_matrix(data):
    labels = data["topology"]["labels"]
    matrix = data["topology"]["matrix"]
    ngpu = len(data["gpus"])
    lines = ["\t" + "\t".join(labels + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i, label in enumerate(labels):
        cells = [" X " if c == "X" else c for c in matrix[i]]
        if i < ngpu:
            gpu = data["gpus"][i]
            cells += [gpu["cpu_affinity"], str(gpu["numa_node"]), "", "N/A"]
        lines.append(label + "\t" + "\t".join(cells))
    text = "\n".join(lines) + "\n" + LEGEND
    if data.get("nics"):
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: {n['name']}\n" for k, n in enumerate(data["nics"]))
    sys.stdout.write(text)
    return 0


def nvlink_status(data, ids):
    gpus = _select(data, ids)
    if gpus is None:
        return 6
    for gpu in gpus:
        sys.stdout.write(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
        links = gpu["nvlink"]["links"]
        if not links:
            sys.stdout.write("\tNVML: Unable to retrieve NVLink information as all links are inActive\n")
        for link in range(links):
            sys.stdout.write(f"\t Link {link}: {gpu['nvlink']['link_gbps']:.3f} GB/s\n")
    return 0


def summary_table(data):
    drv = data["driver"]
    rule = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    out = [time.strftime("%a %b %d %H:%M:%S %Y") + "       ",
           "+" + "-" * 89 + "+",
           "| " + f"NVIDIA-SMI {drv['version']:<23}Driver Version: {drv['version']:<15}"
           f"CUDA Version: {drv['cuda_version']:<9}"[:88].ljust(88) + "|",
           rule,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for gpu in data["gpus"]:
        pm = "On" if gpu["persistence_mode"] == "Enabled" else "Off"
        out.append(f"| {gpu['index']:>3}  {gpu['name'][:29]:<30}{pm:>3}  |   {gpu['pci_bus_id']} Off "
                   f"| {'0':>20} |")
        out.append(f"| N/A   {gpu['temperature_c']:>2}C    P0 {str(gpu['power_draw_w']) + 'W':>15} / "
                   f"{str(gpu['power_limit_w']) + 'W':>5} | {str(gpu['memory_used_mib']) + 'MiB':>10} / "
                   f"{str(gpu['memory_total_mib']) + 'MiB':>9} | {'0%':>7}{'Default':>13} |")
        out.append("|" + " " * 41 + "|" + " " * 24 + "|" + f"{'Disabled':>21} |")
        out.append(rule)
    sys.stdout.write("\n".join(out) + "\n" + PROCESSES)
    return 0


def version(data):
    drv = data["driver"]
    sys.stdout.write(f"NVIDIA-SMI version  : {drv['version']}\nNVML version        : {drv['version'].split('.')[0]}"
                     f".{drv['version'].split('.')[1]}\nDRIVER version      : {drv['version']}\n"
                     f"CUDA Version        : {drv['cuda_version']}\n")
    return 0


def _opt(args, names):
    """Pop an option given as --name=value, --name value or -x value; return its value or None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
                del args[i:i + 2]
                return value
            if name.startswith("--") and arg.startswith(name + "="):
                del args[i]
                return arg[len(name) + 1:]
    return None


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    data = _load()
    if data is None:
        sys.stdout.write(NO_DRIVER)
        return RC_NO_DRIVER
    if not args:
        return summary_table(data)
    if args[0] == "topo":
        if len(args) == 2 and args[1] in ("-m", "--matrix"):
            return topo_matrix(data)
        sys.stdout.write(INVALID_ARGS)
        return RC_INVALID
    if args[0] == "nvlink":
        rest = args[1:]
        ids = _opt(rest, ["-i", "--id"])
        if rest in (["-s"], ["--status"]):
            return nvlink_status(data, ids)
        sys.stdout.write(INVALID_ARGS)
        return RC_INVALID
    if args in (["-L"], ["--list-gpus"]):
        return list_gpus(data)
    if args == ["--version"]:
        return version(data)
    if args and args[0] in ("-q", "--query"):
        rest = args[1:]
        ids = _opt(rest, ["-i", "--id"])
        if rest:
            sys.stdout.write(INVALID_ARGS)
            return RC_INVALID
        return full_query(data, ids)
    query = _opt(args, ["--query-gpu"])
    if query is not None:
        fmt = _opt(args, ["--format"])
        ids = _opt(args, ["-i", "--id"])
        if args:
            sys.stdout.write(INVALID_ARGS)
            return RC_INVALID
        return query_gpu(data, query, fmt, ids)
    sys.stdout.write(INVALID_ARGS)
    return RC_INVALID


if __name__ == "__main__":
    sys.exit(main())
