# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Read-only probe of the cuda_toolkit role (run on the node with python3 -c; Python 3.8+, stdlib only).
# Arguments: the toolkit directory and the symlink. Prints JSON: the toolkit's version (version.json, else
# nvcc --version), where it came from, and what the symlink points at (null: not a symlink or absent).
import json
import os
import re
import subprocess
import sys

home, link = sys.argv[1], sys.argv[2]
out = {"version": "", "source": "", "symlink": None, "symlink_exists": os.path.lexists(link)}
try:
    with open(os.path.join(home, "version.json"), encoding="utf-8") as fh:
        out["version"] = str(json.load(fh).get("cuda", {}).get("version", ""))
    out["source"] = "version.json"
except (OSError, ValueError, AttributeError):
    try:
        proc = subprocess.run([os.path.join(home, "bin", "nvcc"), "--version"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False,
                              env=dict(os.environ, LC_ALL="C"))
        found = re.findall(r"release ([0-9]+\.[0-9]+)", proc.stdout) if proc.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        found = []
    if found:
        out["version"], out["source"] = found[0], "nvcc"
if os.path.islink(link):
    out["symlink"] = os.readlink(link)
print(json.dumps(out))
