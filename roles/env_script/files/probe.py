# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Read-only probe of the env_script role (run on the node with python3 -c; Python 3.8+, stdlib only).
# Argument: JSON {script, nvshmem_lib, gdrcopy_lib}. Prints JSON: whether the libraries are installed, whether
# gdrdrv is loaded (/proc/modules, else lsmod), and the script as it is (sha1, mode, uid, gid; null when absent) and
# whether its directory exists.
import hashlib
import json
import os
import stat
import subprocess
import sys

cfg = json.loads(sys.argv[1])
out = {"nvshmem_built": os.path.exists(cfg["nvshmem_lib"]), "gdrcopy_built": os.path.isdir(cfg["gdrcopy_lib"]),
       "gdrdrv_loaded": False, "dir_exists": os.path.isdir(os.path.dirname(cfg["script"])), "script": None}
try:
    with open("/proc/modules", encoding="utf-8") as fh:
        modules = fh.read().splitlines()
except OSError:
    try:
        modules = subprocess.run(["lsmod"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                                 timeout=60, check=False).stdout.splitlines()[1:]
    except (OSError, subprocess.SubprocessError):
        modules = []
out["gdrdrv_loaded"] = any(line.split()[:1] == ["gdrdrv"] for line in modules)
try:
    st = os.lstat(cfg["script"])
    if stat.S_ISREG(st.st_mode):
        digest = hashlib.sha1()
        with open(cfg["script"], "rb") as fh:
            digest.update(fh.read())
        out["script"] = {"sha1": digest.hexdigest(), "mode": "%04o" % stat.S_IMODE(st.st_mode),
                         "uid": st.st_uid, "gid": st.st_gid}
except OSError:
    pass
print(json.dumps(out))
