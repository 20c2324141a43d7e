# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Read-only probe of the preflight role (run on the node with python3 -c; Python 3.8+, stdlib only).
# Argument: JSON {python, cuda_home, mlx5dv_header, mlx5dv_symbol, libcuda_dirs}. Prints JSON.
import json
import os
import re
import subprocess
import sys

cfg = json.loads(sys.argv[1])
env = dict(os.environ, LC_ALL="C")
out = {"modules": [], "pip_ok": False, "cuda_version": "", "cuda_source": "", "mlx5dv_header": False,
       "mlx5dv_ok": False, "libcuda": []}


def run(argv):
    try:
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60, check=False)
        return proc.returncode, proc.stdout
    except (OSError, subprocess.SubprocessError):
        return 127, ""


try:
    with open("/proc/modules", encoding="utf-8") as fh:
        out["modules"] = [line.split()[0] for line in fh if line.strip()]
except OSError:
    rc, text = run(["lsmod"])
    out["modules"] = [line.split()[0] for line in text.splitlines()[1:] if line.strip()] if rc == 0 else []

out["pip_ok"] = run([cfg["python"], "-c", "import pip"])[0] == 0

try:
    with open(os.path.join(cfg["cuda_home"], "version.json"), encoding="utf-8") as fh:
        out["cuda_version"] = str(json.load(fh).get("cuda", {}).get("version", ""))
    out["cuda_source"] = "version.json"
except (OSError, ValueError, AttributeError):
    rc, text = run([os.path.join(cfg["cuda_home"], "bin", "nvcc"), "--version"])
    found = re.findall(r"release ([0-9]+\.[0-9]+)", text) if rc == 0 else []
    out["cuda_version"] = found[0] if found else ""
    out["cuda_source"] = "nvcc" if found else ""

try:
    with open(cfg["mlx5dv_header"], encoding="utf-8", errors="replace") as fh:
        out["mlx5dv_header"] = True
        out["mlx5dv_ok"] = cfg["mlx5dv_symbol"] in fh.read()
except OSError:
    pass

dirs = list(cfg["libcuda_dirs"])
if out["cuda_version"]:
    dirs.append(os.path.join(cfg["cuda_home"], "lib64", "stubs"))
for directory in dirs:
    for name in ("libcuda.so", "libcuda.so.1"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            out["libcuda"].append(path)

print(json.dumps(out))
