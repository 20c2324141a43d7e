# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print one line per file, directory and link under /etc, /opt and /usr/local of the node it runs on:
path, type, mode, owner, size, mtime, inode and sha256 (files up to 1 MiB; larger ones, such as the CUDA
toolkit's libraries, are covered by size, mtime and inode, which any write or copy-up changes) or the target
(links). Run through the harness (`python -m tools.fleetsim exec NODE -- python3 -c "<this file>"`) before
and after the audit."""

import hashlib
import os
import stat

ROOTS = ("/etc", "/opt", "/usr/local")
HASH_LIMIT = 1 << 20


def describe(path):
    st = os.lstat(path)
    kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else \
        "f" if stat.S_ISREG(st.st_mode) else "o"
    extra = ""
    if kind == "f" and st.st_size <= HASH_LIMIT:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 16), b""):
                    digest.update(block)
            extra = digest.hexdigest()
        except OSError as exc:
            extra = "unreadable:%s" % exc.errno
    elif kind == "l":
        extra = os.readlink(path)
    mtime = "-" if kind == "d" else "%d:%d" % (st.st_mtime_ns, st.st_ino)
    return "%s %s %o %d:%d %d %s %s" % (path, kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                                        st.st_size if kind == "f" else 0, mtime, extra)


lines = []
for root in ROOTS:
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(top, name)
            try:
                lines.append(describe(path))
            except OSError:
                lines.append("%s vanished" % path)
print("\n".join(lines))
