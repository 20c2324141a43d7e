# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleetsim node ``systemctl``: ``reboot``/``poweroff``/``halt``/``kexec`` power the simulated node off or cycle it;
every other verb goes to the node's service manager (the systemd stand-in in PID 1, tools/fleetsim/systemd.py)
over its socket, which answers with systemd's output and exit status."""
import json
import os
import socket
import sys

SOCKET = "/run/fleetsim/systemd.sock"


def main(argv):
    for arg in argv:
        if arg.startswith("-"):
            continue
        if arg in ("reboot", "kexec", "soft-reboot"):
            os.execv("/usr/sbin/reboot", ["reboot"])
        if arg in ("poweroff", "halt"):
            os.execv("/usr/sbin/poweroff", ["poweroff"])
        break
    if not os.path.exists(SOCKET):
        sys.stderr.write("System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                         "Failed to connect to bus: Host is down\n")
        return 1
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(SOCKET)
        conn.sendall((json.dumps({"argv": argv}) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        answer = json.loads(data.decode())
    except (OSError, ValueError) as exc:
        sys.stderr.write("Failed to connect to bus: %s\n" % exc)
        return 1
    finally:
        conn.close()
    sys.stdout.write(answer["stdout"])
    sys.stderr.write(answer["stderr"])
    return answer["rc"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
