#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvshmem_build
short_description: Build NVSHMEM with IBGDA into a prefix, keyed, staged and swapped
version_added: 0.1.0
description:
  - Builds NVSHMEM from a source directory or tarball with the configure flags the field runbooks use
    (IBGDA on; SHMEM, UCX, NCCL, MPI and PMIx off; GDRCopy include when given; examples, tests and the
    nvshmem4py Python wheels off; C(CUDACXX) and C(CMAKE_CUDA_COMPILER) set explicitly; C(CMAKE_CUDA_ARCHITECTURES)
    from O(cuda_arch)).
  - Every input that changes the result (source sha256 or revision, the RoCE fix, configure options, CUDA
    and compiler versions, arch list, and the final configure arguments and environment the build receives, defaults
    this module adds included) goes into a build key. The key is recorded in a stamp file,
    C(<prefix>/.gpufleet-build.json). Same key and a passing verification of the install means no change.
  - A new key builds in C(<prefix>.staging-<key8>), installs there, verifies the staged tree (C(bin/nvshmem-info -a)
    reports C(NVSHMEM_IBGDA_SUPPORT=ON), the host library and the IBGDA transport exist), and only then swaps it
    into O(prefix) by renames (an atomic exchange where the kernel has C(renameat2)). The install it replaces is
    kept as C(<prefix>.previous). A failed or killed build leaves the previous install untouched; leftovers of a
    killed run are removed at the next start.
  - A run holds the lock C(.<name>.lock) beside O(prefix) (fcntl) from the clean-up of leftovers to the swap. A second build of the
    same prefix waits for the first (O(lock_timeout)), then finds its result, or refuses naming the lock and its
    holder; it never removes the first run's staging directory. Check mode takes no lock.
  - A packed install from O(artifact_dir) is unpacked only when its record names the key and its
    C(artifact_sha256) matches the tarball; a record without a checksum, a truncated or an altered tarball is
    refused, named.
  - With O(roce_ah_attr_fix) the module zeroes every local C(struct ibv_ah_attr) declaration in the IBGDA transport
    source before building, the fix for C(Unable to create ah) on RoCE (NVIDIA/nvshmem#21).
  - The stamp of a build holds its linkage record (C(linkage), schema 1, see RV(linkage)) - what each shared object
    under C(lib/) links and embeds, CUDA, the compiler, and the host and device libraries. The packed install and
    its C(nvshmem-<key>.json) record carry it through the artifact store.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
options:
  src:
    description:
      - NVSHMEM source on the target, a directory (the one holding C(CMakeLists.txt)) or a tarball
        (C(.tar.gz), C(.tgz), C(.txz), C(.tar.xz)) holding one.
      - A source directory is copied into the staging directory before it is patched and built; it is never
        modified.
    type: path
    required: true
  sha256:
    description:
      - Expected sha256 of the O(src) tarball, 64 hexadecimal digits (the output of C(sha256sum) without the file
        name). The build fails before doing anything when it differs; a value that is not 64 hexadecimal digits is
        refused up front, named. An empty value counts as unset.
      - Ignored for a source directory (but still checked for its form).
    type: str
  prefix:
    description: Install prefix. Must be an absolute path.
    type: path
    default: /opt/deepep/nvshmem
  cuda_home:
    description: CUDA toolkit root; C(<cuda_home>/bin/nvcc) becomes C(CUDACXX) and C(CMAKE_CUDA_COMPILER).
    type: path
    default: /usr/local/cuda
  cuda_arch:
    description:
      - C(CMAKE_CUDA_ARCHITECTURES), e.g. C(90) (H100/H200), C(100) (B200), C(80) (A100), or several as C(90;100).
      - The PyTorch form (C(9.0), C(10.0)) is accepted and converted. A malformed value is named in the error.
    type: str
    required: true
  ibgda:
    description: Build the IBGDA transport (C(NVSHMEM_IBGDA_SUPPORT=ON)) and require it in the verification.
    type: bool
    default: true
  gdrcopy_home:
    description:
      - GDRCopy install root. When set, C(NVSHMEM_USE_GDRCOPY=ON) with C(GDRCOPY_HOME) and
        C(GDRCOPY_INCLUDE=<gdrcopy_home>/include); when unset, GDRCopy is off.
    type: path
  cmake_options:
    description:
      - Extra C(-D) entries for the configure step; they override the module's defaults. Booleans become
        C(ON)/C(OFF). Part of the build key.
    type: dict
    default: {}
  roce_ah_attr_fix:
    description:
      - Insert C(memset(&X, 0, sizeof(X));) after every C(struct ibv_ah_attr X;) declared inside a function of
        C(src/modules/transport/ibgda/ibgda.cpp) before building (idempotent, part of the build key).
    type: bool
    default: false
  jobs:
    description: Parallel build jobs. Defaults to the number of CPUs of the target.
    type: int
  artifact_dir:
    description:
      - Directory of built installs, one C(nvshmem-<key>.tar.gz) (with its C(nvshmem-<key>.json) record) per build key.
      - After a build, the new install is packed there. When the archive for the wanted key is already there (for
        example copied from the fleet's artifact store), it is unpacked, verified and swapped in instead of building.
      - With an archive for the key, O(src) may be a tarball path that does not exist on this host as long as O(sha256)
        is given (the key only needs the tarball's sha256).
    type: path
  log_lines:
    description: How many lines of the build log a failure reports.
    type: int
    default: 60
  lock_timeout:
    description:
      - Seconds to wait for another build of the same O(prefix) on this node (its lock C(.<name>.lock) beside it) before
        refusing. C(0) refuses at once.
    type: int
    default: 3600
notes:
  - To group hosts by build key before building (build once, distribute), run the module in check mode and read
    RV(key).
  - The build log is kept in C(<prefix>/.gpufleet-build.log) after a successful build, and in
    C(<prefix>.staging-<key8>/build.log) after a failed one (reported as RV(log)).
  - In check mode the module computes the key and reports RV(would_build), and writes nothing. When a build is due
    it checks the source as the real run does (a directory or tarball without C(CMakeLists.txt) at its top, or
    with only one directory holding it, a tarball that cannot be read or with members outside its root) and refuses
    with the same message. A tarball O(src) that is not on the host (allowed with O(sha256)) is a warning in check
    mode; the real run refuses it unless the packed install for the key is in O(artifact_dir) by then.
seealso:
  - module: gpufleet.deepep.deepep_build
"""

EXAMPLES = r"""
- name: Build NVSHMEM 3.4.5 with IBGDA for B200 (sm_100), RoCE fix applied
  gpufleet.deepep.nvshmem_build:
    src: /opt/deepep/src/nvshmem_src_3.4.5-0.txz
    sha256: "{{ nvshmem_src_sha256 }}"
    prefix: /opt/deepep/nvshmem
    cuda_home: /usr/local/cuda
    cuda_arch: "100"
    gdrcopy_home: /opt/deepep/gdrcopy
    roce_ah_attr_fix: true
  register: nvshmem

- name: Show the key and version of the install
  ansible.builtin.debug:
    msg: "NVSHMEM {{ ansible_facts.gpufleet_nvshmem.version }} key {{ ansible_facts.gpufleet_nvshmem.key }}"

- name: What would a build for H200 do? (no changes)
  gpufleet.deepep.nvshmem_build:
    src: /opt/deepep/src/nvshmem-src
    cuda_arch: "9.0"
  check_mode: true
  register: plan
"""

RETURN = r"""
key:
  description: The build key of the requested build (sha256 over all inputs).
  returned: always
  type: str
  sample: 3f9a1c0e5b7d2a4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5
would_build:
  description: Whether the inputs call for a build (new key, or the install at O(prefix) fails verification).
  returned: always
  type: bool
  sample: false
built:
  description: Whether this run built and swapped in a new install.
  returned: always
  type: bool
  sample: true
installed_from:
  description: Where a new install came from, C(build) or C(artifact) (null when nothing changed).
  returned: always
  type: str
  sample: artifact
artifact:
  description: The packed install for the key in O(artifact_dir) (written after a build, or used), or null.
  returned: always
  type: str
  sample: /opt/deepep/artifacts/nvshmem/nvshmem-3f9a1c0e5b7d2a4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5.tar.gz
reason:
  description: Why a build is (or would be) needed, or why not.
  returned: always
  type: str
  sample: "key changed: installed 1b2c3d4e, wanted 3f9a1c0e"
inputs:
  description:
    - The inputs the key was computed over.
    - C(configure) is what the configure step really receives (C(argv), the arguments after C(cmake) with the
      staging source and build directories as C(@SOURCE@) and C(@BUILD@), and C(env)), so a flag the module adds
      or changes changes the key.
  returned: always
  type: dict
  sample: {"source": {"kind": "tarball", "sha256": "..."}, "cuda_arch": "100", "ibgda": true,
           "configure": {"argv": ["-G", "Ninja", "-S", "@SOURCE@", "-B", "@BUILD@", "-DCMAKE_BUILD_TYPE=Release"],
                         "env": {"CUDACXX": "/usr/local/cuda/bin/nvcc"}}}
previous:
  description: Where the replaced install was kept (C(<prefix>.previous)), or null.
  returned: always
  type: str
  sample: /opt/deepep/nvshmem.previous
staging:
  description: The staging directory of the build (removed after a successful swap).
  returned: always
  type: str
  sample: /opt/deepep/nvshmem.staging-3f9a1c0e
log:
  description: Path of the build log, or null when nothing was built.
  returned: always
  type: str
  sample: /opt/deepep/nvshmem/.gpufleet-build.log
log_tail:
  description: The last O(log_lines) lines of the build log on failure.
  returned: failure
  type: list
  elements: str
rc:
  description: Exit status of the failed command.
  returned: failure
  type: int
  sample: 1
cmd:
  description: The failed command.
  returned: failure
  type: list
  elements: str
commands:
  description: The commands run (argv lists), in order.
  returned: always
  type: list
  elements: list
cleaned:
  description: Leftover staging directories of killed or failed runs that were removed (or would be, in check mode).
  returned: always
  type: list
  elements: str
recovered:
  description: What was repaired from a swap interrupted between its renames, or null.
  returned: always
  type: str
  sample: null
ah_attr_fix:
  description: What O(roce_ah_attr_fix) did to the IBGDA transport source of this build.
  returned: when a build ran with O(roce_ah_attr_fix)
  type: dict
  sample: {"file": "src/modules/transport/ibgda/ibgda.cpp", "fixed": 3, "already": 0}
source_cuda:
  description:
    - Whether the source tree's NVSHMEM release (its CMakeLists.txt project() version) builds with the CUDA toolkit
      of O(cuda_home) (the stack catalogue's C(nvshmem_source_cuda13) - 3.8.0 and later need CUDA 13). A C(fail)
      refuses the build before it configures, naming the versions, the source and the fix.
    - C(status) (C(ok), C(fail), or C(unknown) where the tree or the toolkit gives no version), C(reason), C(fix),
      C(source), C(checked).
  returned: when a build ran (not when the packed install was unpacked)
  type: dict
  sample: {"status": "ok", "reason": "NVSHMEM 3.4.5 with CUDA 13.0: below 3.8.0", "fix": null,
           "source": "NVIDIA/nvshmem#95", "checked": "thread only"}
linkage:
  description:
    - The linkage record of the install this run built or unpacked (from its stamp, where it is kept); null when
      nothing changed.
    - C(schema) (1), C(artifact) (C(nvshmem)); C(objects), one per shared object under C(lib/) (links are left out)
      - C(path) (relative to O(prefix)), C(needed), C(runpath), C(rpath), C(soname), C(libstdcxx) (C(shared),
      C(static) or C(none)), C(sass) and C(ptx) (embedded archs from C(<cuda_home>/bin/cuobjdump), else from the
      C(.nv_fatbin) section's entry headers; null where neither can tell).
    - C(cuda) (nvcc), C(compiler) (C(cxx) and the first line of its C(--version)); C(nvshmem) - C(host_version),
      C(host_library), C(device_version), C(device_library) (paths as installed at O(prefix)); C(torch), C(nccl)
      and C(baked_env) null; C(warnings).
  returned: always
  type: dict
  sample:
    schema: 1
    artifact: nvshmem
    objects:
      - {path: lib/libnvshmem_host.so.3.4.5, needed: [libcuda.so.1, libstdc++.so.6, libc.so.6], runpath: [], rpath: [],
         soname: libnvshmem_host.so.3, libstdcxx: shared, sass: [sm_90], ptx: []}
    torch: null
    cuda: 13.0.88
    compiler: {cxx: /usr/bin/c++, version: c++ (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0}
    nccl: null
    nvshmem: {host_version: 3.4.5, host_library: /opt/deepep/nvshmem/lib/libnvshmem_host.so.3.4.5,
              device_version: 3.4.5, device_library: /opt/deepep/nvshmem/lib/libnvshmem_device.a}
    baked_env: null
    warnings: []
verify:
  description: The verification of the install at O(prefix) (or the staged tree when a build ran).
  returned: always
  type: dict
  contains:
    ok:
      description: Whether every check passed.
      type: bool
    problems:
      description: What failed.
      type: list
      elements: str
  sample: {"ok": true, "problems": []}
diff:
  description: Before and after stamp of the install (diff mode).
  returned: when diff mode is on and a build is (or would be) needed
  type: dict
  sample: {"before": "{}\n", "after": "{\"key\": \"...\"}\n"}
ansible_facts:
  description: Facts about the NVSHMEM install at O(prefix).
  returned: always
  type: dict
  contains:
    gpufleet_nvshmem:
      description: The install as it stands after this run (predicted in check mode).
      type: dict
      contains:
        prefix:
          description: Install prefix.
          type: str
          sample: /opt/deepep/nvshmem
        present:
          description: Whether an install exists at the prefix.
          type: bool
          sample: true
        version:
          description: NVSHMEM version (from C(nvshmem-info) or C(include/nvshmem_version.h)).
          type: str
          sample: 3.4.5
        ibgda:
          description: Whether the install has IBGDA support (C(NVSHMEM_IBGDA_SUPPORT=ON) and the transport).
          type: bool
          sample: true
        key:
          description: Build key recorded in the stamp (null without a stamp).
          type: str
          sample: 3f9a1c0e5b7d2a4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5
        libraries:
          description: File names under C(<prefix>/lib).
          type: list
          elements: str
          sample: [libnvshmem_host.so.3, nvshmem_transport_ibgda.so.3, libnvshmem_device.a]
        built_at:
          description: UTC time of the build (ISO 8601), from the stamp.
          type: str
          sample: "2026-11-22T03:04:05Z"
        cuda_arch:
          description: CMAKE_CUDA_ARCHITECTURES of the build, from the stamp.
          type: str
          sample: "100"
        cuda_version:
          description: CUDA version the build used, from the stamp.
          type: str
          sample: 13.0.88
        roce_ah_attr_fix:
          description: Whether the RoCE ah_attr fix is in the build, from the stamp.
          type: bool
          sample: true
        verified:
          description: Whether the install passed verification.
          type: bool
          sample: true
        previous:
          description: Path of the kept previous install, or null.
          type: str
          sample: /opt/deepep/nvshmem.previous
        stamp:
          description: Path of the stamp file.
          type: str
          sample: /opt/deepep/nvshmem/.gpufleet-build.json
reboot_required:
  description: Always false; building NVSHMEM never needs a reboot.
  returned: always
  type: bool
  sample: false
"""

import json
import os
import re
import shutil
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import ArchError, parse_cmake_arch_list
from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import (
    build_key,
    BuildError,
    LOG_NAME,
    read_stamp,
    rebuild_reason,
    short_key,
    source_identity as tree_identity,
    stamp_diff,
    stamp_path,
    write_stamp,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256, write_json_file
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem import (
    apply_ah_attr_fix,
    nvshmem_cmake_args,
    parse_nvshmem_info,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_source import source_cuda_check, tree_version
from ansible_collections.gpufleet.deepep.plugins.module_utils._linkage import (
    installed_library,
    linkage_record,
    LinkageError,
    tree_objects,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import CommandLog, Failed, finish, now, StepFailed
from ansible_collections.gpufleet.deepep.plugins.module_utils._swap import (
    build_lock,
    previous_path,
    repair_leftovers,
    staged_build,
    staging_path,
    swap_in,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import (
    cuda_version_from_nvcc,
    nvshmem_version_from_header,
)

IBGDA_SOURCE = os.path.join("src", "modules", "transport", "ibgda", "ibgda.cpp")
AH_ATTR_FIX_VERSION = 1
# The configure step's source and build directories as the key sees them (they are staging paths named by the key).
SOURCE_MARK = "@SOURCE@"
BUILD_MARK = "@BUILD@"
TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".txz", ".tar.xz", ".tar.bz2", ".tbz2", ".tar")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# The build's copy of a source directory leaves these out at its top (see _copy_ignore).
COPY_SKIPPED_AT_TOP = ("build", "_build")
# How many single directories deep the source root may be (nvshmem-3.4.5/, a release's nested top directory).
SOURCE_ROOT_DEPTH = 8
SOURCE_FORM = ("expected NVSHMEM's source: the directory holding its CMakeLists.txt (or a directory holding only "
               "that one), or a tarball of it")


def sha256_option(value):
    """The sha256 option lower-cased, None when unset or empty; Failed naming the value unless 64 hex digits."""
    if value is None or not value.strip():
        return None
    digest = value.strip().lower()
    if not SHA256_RE.match(digest):
        raise Failed("sha256: %r is not a sha256 digest; expected 64 hexadecimal digits (the output of sha256sum "
                     "without the file name)" % (value,))
    return digest


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            sha256=dict(type="str"),
            prefix=dict(type="path", default="/opt/deepep/nvshmem"),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            cuda_arch=dict(type="str", required=True),
            ibgda=dict(type="bool", default=True),
            gdrcopy_home=dict(type="path"),
            cmake_options=dict(type="dict", default={}),
            roce_ah_attr_fix=dict(type="bool", default=False),
            jobs=dict(type="int"),
            artifact_dir=dict(type="path"),
            log_lines=dict(type="int", default=60),
            lock_timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )


def source_identity(module, runner, src, sha256):
    """``(kind, identity dict)`` for the source: a tarball's sha256 or a directory's git HEAD / tree hash."""
    if not os.path.exists(src) and sha256 and src.endswith(TARBALL_SUFFIXES):
        return {"kind": "tarball", "sha256": sha256.strip().lower()}
    if os.path.isfile(src):
        if not src.endswith(TARBALL_SUFFIXES):
            raise StepFailed("src %s is a file but not a tarball (expected one of %s)"
                             % (src, ", ".join(TARBALL_SUFFIXES)))
        digest = file_sha256(src)
        if sha256 and digest != sha256.strip().lower():
            raise StepFailed("src %s has sha256 %s, expected %s (sha256 option)" % (src, digest, sha256))
        return {"kind": "tarball", "sha256": digest}
    if not os.path.isdir(src):
        raise StepFailed("src %s is neither a source directory nor a tarball" % src)
    return tree_identity(runner.quiet, module.get_bin_path("git"), src)


def _check_members(tarball, members, dest):
    """StepFailed naming the first member of ``tarball`` that would land outside ``dest``, link outside it or is a
    device file."""
    real_dest = os.path.realpath(dest)
    for member in members:
        target = os.path.realpath(os.path.join(dest, member.name))
        if not (target == real_dest or target.startswith(real_dest + os.sep)):
            raise StepFailed("tarball %s has a member outside its root: %s" % (tarball, member.name))
        if member.issym() or member.islnk():
            link = os.path.realpath(os.path.join(os.path.dirname(target), member.linkname)) \
                if member.issym() else os.path.realpath(os.path.join(dest, member.linkname))
            if not (link == real_dest or link.startswith(real_dest + os.sep)):
                raise StepFailed("tarball %s has a link pointing outside its root: %s -> %s"
                                 % (tarball, member.name, member.linkname))
        if member.isdev():
            raise StepFailed("tarball %s holds a device file: %s" % (tarball, member.name))


def _safe_extract(tarball, dest):
    with tarfile.open(tarball) as archive:
        members = archive.getmembers()
        _check_members(tarball, members, dest)
        archive.extractall(dest, members=members)


def _root_problem(shown, top_entries, is_dir, entries_of, has_cmakelists):
    """Walk down single directories from the top as the build does; ``(root, None)`` or ``(None, why)``."""
    current, entries = "", top_entries
    for dummy in range(SOURCE_ROOT_DEPTH):
        if has_cmakelists(current):
            return current, None
        entries = [e for e in entries if not e.startswith(".")]
        if len(entries) == 1 and is_dir(os.path.join(current, entries[0])):
            current = os.path.join(current, entries[0])
            entries = entries_of(current)
            continue
        where = "its top" if not current else "%s, its only directory" % current
        found = ", ".join(sorted(entries)[:8]) or "nothing"
        return None, ("%s holds no CMakeLists.txt at %s (found: %s); %s" % (shown, where, found, SOURCE_FORM))
    return None, "%s: no CMakeLists.txt within %d nested directories; %s" % (shown, SOURCE_ROOT_DEPTH, SOURCE_FORM)


def _dir_root(path, shown, skip_top=()):
    """``_root_problem`` over the directory ``path`` (``skip_top``: top entries the build's copy leaves out)."""
    def listing(rel):
        try:
            return os.listdir(os.path.join(path, rel))
        except OSError:
            return []

    top = [e for e in listing("") if e not in skip_top]
    return _root_problem(shown, top, lambda rel: os.path.isdir(os.path.join(path, rel)), listing,
                         lambda rel: os.path.exists(os.path.join(path, rel, "CMakeLists.txt")))


def dir_source_problem(path):
    """Why the source directory ``path`` would give the build no source root (None when it would)."""
    return _dir_root(path, "src %s" % path, COPY_SKIPPED_AT_TOP)[1]


def tarball_source_problem(tarball, dest):
    """Why the tarball ``tarball`` would give the build no source root (None when it would), reading only its
    member list: a tarball that cannot be read, a member outside ``dest`` (StepFailed, as the extraction refuses),
    no CMakeLists.txt where the build looks for it."""
    try:
        with tarfile.open(tarball) as archive:
            members = archive.getmembers()
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        return "src %s is not a readable tarball (%s); %s" % (tarball, exc, SOURCE_FORM)
    _check_members(tarball, members, dest)
    names, dirs = set(), set()
    for member in members:
        name = os.path.normpath(member.name).lstrip("/")
        if name in ("", "."):
            continue
        names.add(name)
        parts = name.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        if member.isdir():
            dirs.add(name)

    def entries_of(rel):
        prefix = rel + "/" if rel else ""
        return sorted(set(n[len(prefix):].split("/")[0] for n in names | dirs
                          if n.startswith(prefix) and n != rel and n[len(prefix):]))

    return _root_problem("src %s" % tarball, entries_of(""), lambda rel: rel in dirs, entries_of,
                         lambda rel: os.path.join(rel, "CMakeLists.txt") in names)[1]


def _source_root(path):
    """The directory holding CMakeLists.txt in the build's copy of the source at ``path``."""
    root, problem = _dir_root(path, "the NVSHMEM source (%s)" % path)
    if problem:
        raise StepFailed(problem)
    return os.path.join(path, root) if root else path


def _copy_ignore(top):
    def ignore(directory, names):
        skip = [n for n in names if n == ".git"]
        if os.path.normpath(directory) == os.path.normpath(top):
            skip += [n for n in names if n in ("build", "_build")]
        return skip
    return ignore


def artifact_paths(artifact_dir, key):
    base = os.path.join(artifact_dir, "nvshmem-%s" % key)
    return base + ".tar.gz", base + ".json"


def pack_artifact(prefix, artifact_dir, key):
    """Pack the install at ``prefix`` (stamp included) as ``nvshmem-<key>.tar.gz`` with a JSON record."""
    if not os.path.isdir(artifact_dir):
        os.makedirs(artifact_dir, 0o755)
    tarball, record = artifact_paths(artifact_dir, key)
    tmp = tarball + ".%d.tmp" % os.getpid()
    with tarfile.open(tmp, "w:gz") as archive:
        for name in sorted(os.listdir(prefix)):
            archive.add(os.path.join(prefix, name), arcname=name)
    os.rename(tmp, tarball)
    data = dict(read_stamp(prefix) or {})
    data["artifact_sha256"] = file_sha256(tarball)
    write_json_file(record, data)
    return tarball


def unpack_artifact(runner, artifact, staging, prefix, key):
    """Unpack a packed install into ``<staging>/destdir<prefix>`` after checking its record and sha256."""
    tarball, record_path = artifact
    try:
        with open(record_path, "r", encoding="utf-8") as handle:
            record = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise StepFailed("cannot read the record %s of the packed install: %s" % (record_path, exc))
    if not isinstance(record, dict):
        raise StepFailed("the record %s of the packed install is a JSON %s, expected an object"
                         % (record_path, type(record).__name__))
    if record.get("key") != key:
        raise StepFailed("the packed install %s records key %s, not %s" % (tarball, record.get("key"), key))
    expected = record.get("artifact_sha256")
    if not isinstance(expected, str) or len(expected) != 64:
        raise StepFailed("the record %s of the packed install has no artifact_sha256 (64 hex digits), got %r: "
                         "cannot verify %s" % (record_path, expected, tarball))
    digest = file_sha256(tarball)
    if digest != expected:
        raise StepFailed("the packed install %s has sha256 %s, its record says %s"
                         % (tarball, digest, record["artifact_sha256"]))
    staged = os.path.join(staging, "destdir") + prefix
    os.makedirs(staged)
    runner.log("# unpacking %s (sha256 %s)\n" % (tarball, digest))
    _safe_extract(tarball, staged)
    stamp = read_stamp(staged)
    if not stamp or stamp.get("key") != key:
        raise StepFailed("the packed install %s has no stamp for key %s" % (tarball, key))
    return staged


def verify_install(runner, tree, want_ibgda):
    """Check an NVSHMEM install tree; returns a dict with ok, problems, version, ibgda, libraries."""
    problems = []
    lib_dir = os.path.join(tree, "lib")
    libraries = sorted(os.listdir(lib_dir)) if os.path.isdir(lib_dir) else []
    host = [n for n in libraries if n.startswith("libnvshmem_host.so")]
    transport = [n for n in libraries if n.startswith("nvshmem_transport_ibgda.so")]
    if not host:
        problems.append("no host library %s/libnvshmem_host.so*" % lib_dir)
    info = {"version": None, "ibgda": None}
    info_bin = os.path.join(tree, "bin", "nvshmem-info")
    if not os.access(info_bin, os.X_OK):
        problems.append("no %s" % info_bin)
    else:
        rc, out, err = runner.run([info_bin, "-a"], env={"LD_LIBRARY_PATH": lib_dir}, check=False, record=False)
        if rc != 0:
            problems.append("%s -a failed (rc=%d): %s" % (info_bin, rc, (err or out).strip()[-300:]))
        else:
            info = parse_nvshmem_info(out)
    header_version = None
    try:
        with open(os.path.join(tree, "include", "nvshmem_version.h"), "r", encoding="utf-8") as handle:
            header_version = nvshmem_version_from_header(handle.read())
    except (IOError, OSError):
        pass
    ibgda = bool(transport) and info.get("ibgda") is True
    if want_ibgda:
        if info.get("ibgda") is not True:
            problems.append("nvshmem-info -a does not report NVSHMEM_IBGDA_SUPPORT=ON")
        if not transport:
            problems.append("no IBGDA transport %s/nvshmem_transport_ibgda.so*" % lib_dir)
    return {
        "ok": not problems,
        "problems": problems,
        "version": info.get("version") or header_version,
        "ibgda": ibgda,
        "libraries": libraries,
    }


def _facts(prefix, stamp, verify, previous):
    present = os.path.isdir(prefix)
    stamp = stamp or {}
    return {
        "prefix": prefix,
        "present": present,
        "version": verify.get("version") if present else None,
        "ibgda": bool(verify.get("ibgda")) if present else False,
        "key": stamp.get("key"),
        "libraries": verify.get("libraries", []) if present else [],
        "built_at": stamp.get("built_at"),
        "cuda_arch": stamp.get("inputs", {}).get("cuda_arch"),
        "cuda_version": stamp.get("inputs", {}).get("cuda_version"),
        "roce_ah_attr_fix": bool(stamp.get("inputs", {}).get("roce_ah_attr_fix")),
        "verified": bool(verify.get("ok")) if present else False,
        "previous": previous if previous and os.path.isdir(previous) else None,
        "stamp": stamp_path(prefix) if stamp else None,
    }


class NvshmemBuild(object):
    """observe (inputs, key, the install and its stamp, a packed install of the key), plan (nothing, install the
    packed install, or build), apply (stage, verify, swap, pack); ``run`` returns the facts or raises Failed."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.prefix = os.path.normpath(self.p["prefix"])
        self.previous = None
        self.runner = CommandLog()
        self.result = {
            "changed": False, "built": False, "would_build": False, "reboot_required": False,
            "key": None, "reason": "", "inputs": {}, "previous": None, "staging": None, "log": None,
            "commands": self.runner.commands, "cleaned": [], "recovered": None, "verify": {}, "installed_from": None,
            "artifact": None, "linkage": None,
        }

    # --- observe --------------------------------------------------------------------------------

    def check_params(self):
        p = self.p
        if not os.path.isabs(self.prefix) or self.prefix == "/":
            raise Failed("prefix %r must be an absolute path other than /" % p["prefix"])
        try:
            self.cuda_arch = parse_cmake_arch_list(p["cuda_arch"])
        except ArchError as exc:
            raise Failed("cuda_arch: %s" % exc)
        if p["jobs"] is not None and p["jobs"] < 1:
            raise Failed("jobs must be 1 or more, got %d" % p["jobs"])
        if p["lock_timeout"] < 0:
            raise Failed("lock_timeout must be 0 (refuse at once) or more seconds, got %d" % p["lock_timeout"])
        self.sha256 = sha256_option(p["sha256"])
        self.nvcc = os.path.join(p["cuda_home"], "bin", "nvcc")
        if not os.access(self.nvcc, os.X_OK):
            raise Failed("no nvcc at %s: install the CUDA toolkit or set cuda_home (NVSHMEM needs CUDACXX)" % self.nvcc)
        self.cmake = self.module.get_bin_path("cmake")
        if not self.cmake:
            raise Failed("cmake is not installed on the target (install cmake, e.g. the build_deps phase)")
        if p["gdrcopy_home"] and not os.path.isfile(os.path.join(p["gdrcopy_home"], "include", "gdrapi.h")):
            raise Failed("gdrcopy_home %s has no include/gdrapi.h: build GDRCopy's library first (role gdrcopy) "
                         "or leave gdrcopy_home unset" % p["gdrcopy_home"])

    def observe_inputs(self):
        """Everything that changes what gets built, and its key."""
        p = self.p
        try:
            rc, out, err = self.runner.run([self.nvcc, "--version"], record=False, timeout=120)
            self.cuda_version = cuda_version_from_nvcc(out)
            cxx = self.module.get_bin_path("c++") or self.module.get_bin_path("g++")
            self.cxx = cxx
            compiler = None
            if cxx:
                rc, out, err = self.runner.run([cxx, "--version"], record=False, check=False, timeout=120)
                compiler = out.splitlines()[0].strip() if rc == 0 and out else None
            source = source_identity(self.module, self.runner, p["src"], self.sha256)
        except StepFailed as exc:
            raise Failed(exc.msg, rc=exc.rc, cmd=exc.cmd)
        self.inputs = {
            "source": source,
            "cuda_arch": self.cuda_arch,
            "ibgda": p["ibgda"],
            "gdrcopy_home": p["gdrcopy_home"],
            "cmake_options": dict((str(k), v) for k, v in (p["cmake_options"] or {}).items()),
            "roce_ah_attr_fix": AH_ATTR_FIX_VERSION if p["roce_ah_attr_fix"] else False,
            "cuda_home": p["cuda_home"],
            "cuda_version": self.cuda_version,
            "compiler": compiler,
            "prefix": self.prefix,
        }
        try:
            self.inputs["configure"] = self.configure(SOURCE_MARK, BUILD_MARK)
            self.key = build_key("nvshmem", self.inputs)
        except BuildError as exc:
            raise Failed(str(exc))
        self.staging = staging_path(self.prefix, self.key)
        self.previous = previous_path(self.prefix)
        self.result.update(key=self.key, inputs=self.inputs, staging=self.staging)

    def cmake_command(self, source_dir, build_dir):
        """The configure command (argv) and environment the build runs, for these directories."""
        p = self.p
        generator = "Ninja" if self.module.get_bin_path("ninja") else None
        argv, env, dummy = nvshmem_cmake_args(source_dir, build_dir, self.prefix, p["cuda_home"], self.cuda_arch,
                                              ibgda=p["ibgda"], gdrcopy_home=p["gdrcopy_home"],
                                              cmake_options=p["cmake_options"], generator=generator)
        return argv, env

    def configure(self, source_dir, build_dir):
        """What the configure step really receives, for the key: its arguments after C(cmake) and its environment
        (the staging directories, which the key names, as placeholders), so a flag this module adds or changes
        changes the key."""
        argv, env = self.cmake_command(source_dir, build_dir)
        return {"argv": argv[1:], "env": env}

    def repair_leftovers(self):
        """What a killed run left beside the prefix (only reported in check mode)."""
        self.result["cleaned"], self.result["recovered"] = repair_leftovers(self.prefix, self.module.check_mode)

    def observe_install(self):
        prefix = self.prefix
        self.stamp = read_stamp(prefix) if os.path.isdir(prefix) else None
        self.current = verify_install(self.runner, prefix, self.p["ibgda"]) if os.path.isdir(prefix) else {
            "ok": False, "problems": ["%s does not exist" % prefix], "libraries": []}
        self.artifact = artifact_paths(self.p["artifact_dir"], self.key) if self.p["artifact_dir"] else None
        self.have_artifact = bool(self.artifact and os.path.isfile(self.artifact[0])
                                  and os.path.isfile(self.artifact[1]))

    # --- plan -----------------------------------------------------------------------------------

    def plan(self):
        """None when the install is the key's and verifies; else ``'artifact'`` or ``'build'``, with the reason."""
        problem = None if self.current["ok"] else \
            "installed build fails verification: %s" % "; ".join(self.current["problems"])
        reason = rebuild_reason(self.prefix, self.stamp, self.key, problem)
        if reason is None:
            self.result["reason"] = "installed build has key %s and passes verification" % short_key(self.key)
            return None
        if self.have_artifact:
            reason += "; the packed install for the key is in %s" % self.p["artifact_dir"]
            self.result["artifact"] = self.artifact[0]
        if not self.have_artifact:
            self.check_source()
        self.result.update(reason=reason, would_build=not self.have_artifact, changed=True)
        if self.module._diff:
            self.result["diff"] = stamp_diff(self.prefix, self.stamp, self.key, self.inputs)
        return "artifact" if self.have_artifact else "build"

    def check_source(self):
        """The source checks of the build, before it (in check mode too, so that the plan and the real run give
        one verdict): Failed naming the source when the build would refuse it."""
        src = self.p["src"]
        if not os.path.exists(src):
            text = ("src %s does not exist on this host and no packed install for key %s is in %s"
                    % (src, short_key(self.key), self.p["artifact_dir"]))
            if not self.module.check_mode:
                raise Failed(text + " (nothing was built)")
            self.module.warn(text + ": a real run refuses unless one of them is there by then")
            return
        try:
            if os.path.isfile(src):
                problem = tarball_source_problem(src, os.path.join(self.staging, "src"))
            else:
                problem = dir_source_problem(src)
        except StepFailed as exc:
            problem = exc.msg
        if problem:
            raise Failed(problem + " (nothing was built)")

    def check_tree_cuda(self, source_root):
        """Refuse, before configuring, a tree the CUDA toolkit cannot build (the stack catalogue's
        nvshmem_source_cuda13: NVSHMEM 3.8.0 and later need CUDA 13), naming the tree's version and the fix, instead
        of a compile error minutes into the build."""
        try:
            with open(os.path.join(source_root, "CMakeLists.txt"), "r", encoding="utf-8") as handle:
                version = tree_version(handle.read())
        except (IOError, OSError):
            return
        check = source_cuda_check(version or "", self.cuda_version or "")
        self.result["source_cuda"] = check
        if check["status"] == "fail":
            raise StepFailed("%s (%s). Fix: %s (nothing was built)" % (check["reason"], check["source"], check["fix"]))

    # --- apply ----------------------------------------------------------------------------------

    def install_artifact(self):
        """Unpack the packed install of the key into staging, verify it, swap it in."""
        staged = unpack_artifact(self.runner, self.artifact, self.staging, self.prefix, self.key)
        check = verify_install(self.runner, staged, self.p["ibgda"])
        self.result["verify"] = check
        if not check["ok"]:
            raise StepFailed("the packed install %s fails verification: %s"
                             % (self.artifact[0], "; ".join(check["problems"])))
        return swap_in(self.prefix, staged)

    def build(self, log_path):
        """Configure, build and install into staging, verify, stamp, swap in."""
        p, prefix, runner = self.p, self.prefix, self.runner
        if not os.path.exists(p["src"]):
            raise StepFailed("src %s does not exist on this host and no packed install for key %s is in %s"
                             % (p["src"], short_key(self.key), p["artifact_dir"]))
        src_dir = os.path.join(self.staging, "src")
        if os.path.isfile(p["src"]):
            os.makedirs(src_dir)
            _safe_extract(p["src"], src_dir)
        else:
            shutil.copytree(p["src"], src_dir, symlinks=True, ignore=_copy_ignore(p["src"]))
        source_root = _source_root(src_dir)
        self.check_tree_cuda(source_root)
        if p["roce_ah_attr_fix"]:
            self.fix_ah_attr(source_root)
        build_dir = os.path.join(self.staging, "build")
        argv, env = self.cmake_command(source_root, build_dir)
        argv[0] = self.cmake
        env["PATH"] = "%s:%s" % (os.path.join(p["cuda_home"], "bin"), os.environ.get("PATH", "/usr/bin:/bin"))
        runner.run(argv, env=env)
        jobs = p["jobs"] or os.cpu_count() or 1
        runner.run([self.cmake, "--build", build_dir, "--parallel", str(jobs)], env=env)
        destdir = os.path.join(self.staging, "destdir")
        runner.run([self.cmake, "--install", build_dir], env=dict(env, DESTDIR=destdir))
        staged = destdir + prefix
        if not os.path.isdir(staged):
            raise StepFailed("the install step put nothing at %s" % staged)
        check = verify_install(runner, staged, p["ibgda"])
        self.result["verify"] = check
        if not check["ok"]:
            raise StepFailed("the staged build fails verification: %s" % "; ".join(check["problems"]))
        linkage = self.linkage(staged, check["version"])
        write_stamp(staged, {
            "key": self.key, "kind": "nvshmem", "inputs": self.inputs, "built_at": now(),
            "version": check["version"], "ibgda": check["ibgda"], "libraries": check["libraries"],
            "ah_attr_fix": self.result.get("ah_attr_fix"), "module": "gpufleet.deepep.nvshmem_build",
            "linkage": linkage,
        })
        shutil.copyfile(log_path, os.path.join(staged, LOG_NAME))
        return swap_in(prefix, staged)

    def linkage(self, staged, version):
        """The linkage record (module_utils._linkage, schema 1) of the staged install, its paths as installed at
        the prefix; it is kept in the stamp, which the packed install and its JSON record carry."""
        def run(argv, timeout):
            return self.runner.run(argv, check=False, record=False, timeout=timeout)

        objects, warnings = tree_objects(run, self.p["cuda_home"], staged, ("lib",))
        device = installed_library(staged, self.prefix, "libnvshmem_device.a")
        nvshmem = {"host_version": version, "host_library": installed_library(staged, self.prefix, "libnvshmem_host.so*"),
                   "device_version": version if device else None, "device_library": device}
        try:
            return linkage_record("nvshmem", objects, cuda=self.cuda_version,
                                  compiler={"cxx": self.cxx, "version": self.inputs.get("compiler")},
                                  nvshmem=nvshmem, warnings=warnings)
        except LinkageError as exc:
            raise StepFailed("the linkage record of the staged build is malformed: %s" % exc)

    def fix_ah_attr(self, source_root):
        ibgda_src = os.path.join(source_root, IBGDA_SOURCE)
        if not os.path.isfile(ibgda_src):
            raise StepFailed("roce_ah_attr_fix: the source has no IBGDA transport at %s" % IBGDA_SOURCE)
        with open(ibgda_src, "r", encoding="utf-8", errors="surrogateescape") as handle:
            text = handle.read()
        new_text, fixed, already = apply_ah_attr_fix(text)
        if new_text != text:
            with open(ibgda_src, "w", encoding="utf-8", errors="surrogateescape") as handle:
                handle.write(new_text)
        self.result["ah_attr_fix"] = {"file": IBGDA_SOURCE, "fixed": len(fixed), "already": len(already)}
        self.runner.log("# roce_ah_attr_fix: %d declaration(s) zeroed, %d already zeroed\n" % (len(fixed), len(already)))
        if not fixed and not already:
            self.module.warn("roce_ah_attr_fix: no struct ibv_ah_attr declaration found in %s" % IBGDA_SOURCE)

    def apply(self, action):
        """Install the key (from its packed install or by building); the old install stays on any failure."""
        prefix, p = self.prefix, self.p
        header = "# gpufleet.deepep.nvshmem_build %s key %s\n# inputs %s\n" % (now(), self.key, json.dumps(self.inputs))

        def failure(text, step):
            return "%s (the install at %s is unchanged)" % (text if step else "build of NVSHMEM failed: %s" % text, prefix)

        with staged_build(prefix, self.staging, self.runner, self.result, header, p["log_lines"], failure,
                          errors=(EOFError, tarfile.TarError, ArchError)) as log_path:
            swap = self.install_artifact() if action == "artifact" else self.build(log_path)
        self.result["linkage"] = (read_stamp(prefix) or {}).get("linkage")
        if action == "artifact":
            self.result.update(built=False, installed_from="artifact", previous=swap["previous"], log=None)
            return
        self.result.update(built=True, installed_from="build", previous=swap["previous"],
                           log=os.path.join(prefix, LOG_NAME))
        if p["artifact_dir"]:
            try:
                self.result["artifact"] = pack_artifact(prefix, p["artifact_dir"], self.key)
            except (OSError, IOError, tarfile.TarError) as exc:
                raise Failed("NVSHMEM was built and installed at %s, but packing it into %s failed: %s"
                             % (prefix, p["artifact_dir"], exc))

    # --- the decision ---------------------------------------------------------------------------

    def run(self):
        """The facts of the install after the run (``gpufleet_nvshmem``); raises Failed."""
        self.check_params()
        self.observe_inputs()
        try:
            with build_lock(self.prefix, self.p["lock_timeout"], "NVSHMEM build", self.module.check_mode):
                self.repair_leftovers()
                self.observe_install()
                action = self.plan()
                self.result["verify"] = self.current
                if action is None:
                    self.result["previous"] = self.previous if os.path.isdir(self.previous) else None
                    return _facts(self.prefix, self.stamp, self.current, self.previous)
                if self.module.check_mode:
                    facts = _facts(self.prefix, self.stamp, self.current, self.previous)
                    facts.update(key=self.key, cuda_arch=self.cuda_arch, cuda_version=self.cuda_version,
                                 roce_ah_attr_fix=self.p["roce_ah_attr_fix"], ibgda=self.p["ibgda"], present=True)
                    return facts
                self.apply(action)
                return _facts(self.prefix, read_stamp(self.prefix), self.result["verify"], self.previous)
        except BuildError as exc:  # the lock: another build of this prefix runs
            raise Failed(str(exc))


def main():
    module = build_module()
    finish(module, NvshmemBuild(module), "gpufleet_nvshmem")


if __name__ == "__main__":
    main()
