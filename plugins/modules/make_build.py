#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: make_build
short_description: Build the GDRCopy library or NCCL with make into a prefix, keyed, staged and swapped
version_added: 0.2.0
description:
  - The make builds of the collection (GDRCopy's C(make lib lib_install), NCCL's C(make src.build)) on the same path
    as M(gpufleet.deepep.nvshmem_build) and M(gpufleet.deepep.deepep_build).
  - Every input that changes the result (O(kind), O(version), the source identity, the CUDA home, the make variables,
    for NCCL the C(NVCC_GENCODE), the prefix) goes into a build key (sha256 of their canonical JSON, computed here).
    The key is recorded in the stamp C(<prefix>/.gpufleet-build.json). The same key and a complete install mean
    no change.
  - The source identity is O(source_id) when given (for a tarball, its URL and checksum, so that the key is
    known before the source is fetched), else the git C(HEAD) of O(src) (and a hash of its tree when it has local
    changes), else a hash of the tree.
  - A new key builds in C(<prefix>.staging-<key8>) from a copy of O(src) (the source is never written), checks the
    staged install (GDRCopy C(include/gdrapi.h) and C(lib/libgdrapi.so); NCCL C(include/nccl.h) and
    C(lib/libnccl.so)), stamps it and swaps it into O(prefix) (an atomic C(renameat2) exchange where the kernel has
    it). The install it replaces is kept as C(<prefix>.previous); a failed or killed build leaves it untouched,
    and the next run removes what a killed one left.
  - A run holds the lock C(.<name>.lock) beside O(prefix) (fcntl) from that clean-up to the swap. A second build of
    the same prefix waits for the first (O(lock_timeout)) or refuses naming the lock's holder; it never removes the
    first run's staging directory. Check mode takes no lock and writes nothing.
  - The stamp of a build holds its linkage record (C(linkage), schema 1, see RV(linkage)) - what each shared object
    under C(lib/) links and embeds, CUDA, the compiler and, for NCCL, the header version and the library as
    installed at O(prefix).
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
options:
  kind:
    description:
      - What is built. C(gdrcopy) runs C(make prefix=<prefix> DESTDIR=<staging> CUDA=<cuda_home> lib lib_install);
        C(nccl) runs C(make src.build NVCC_GENCODE=<gencode> CUDA_HOME=<cuda_home> BUILDDIR=<staging>).
    type: str
    required: true
    choices: [gdrcopy, nccl]
  src:
    description:
      - The source tree on the target (the directory with the top-level C(Makefile)). It may be absent in check
        mode and when the installed build already has the key, as long as O(source_id) is given.
    type: path
    required: true
  source_id:
    description:
      - What identifies the source, for example C(<tarball URL>#<checksum>) or C(<git repository>@<commit>).
        Unset, the source tree itself is identified (git C(HEAD) or a hash of its files).
    type: str
  version:
    description: The version built (recorded in the stamp and part of the key), e.g. C(2.5.1) or C(2.30.7).
    type: str
    required: true
  prefix:
    description:
      - Where the build goes, an absolute path other than C(/). GDRCopy installs there (C(include/), C(lib/)); for
        NCCL it is the C(BUILDDIR) (C(include/nccl.h), C(lib/libnccl.so*)).
    type: path
    required: true
  cuda_home:
    description: CUDA toolkit root (C(CUDA) for GDRCopy, C(CUDA_HOME) for NCCL).
    type: path
    default: /usr/local/cuda
  cuda_arch_list:
    description:
      - NCCL only. The CUDA archs to build for, C(9.0), C(9.0;10.0), C(9.0a) or C(10.0+PTX) (C(;), C(,) or spaces
        between entries, or a list); made into C(NVCC_GENCODE). Ignored when O(gencode) is set.
    type: raw
  gencode:
    description: NCCL only. C(NVCC_GENCODE) as given to make (e.g. C(-gencode=arch=compute_90,code=sm_90)).
    type: str
  make_vars:
    description: Extra make variables (C(NAME=value) arguments), e.g. C(CC) set to C(gcc-12).
    type: dict
    default: {}
  jobs:
    description: C(make -j). Defaults to the number of CPUs of the target.
    type: int
  timeout:
    description: Seconds the make command may run before it is killed and the build fails.
    type: int
    default: 7200
  lock_timeout:
    description:
      - Seconds to wait for another build of the same O(prefix) on this node (its lock C(.<name>.lock) beside it)
        before refusing. C(0) refuses at once.
    type: int
    default: 3600
  log_lines:
    description: How many lines of the build log a failure reports.
    type: int
    default: 60
notes:
  - The build log is kept in C(<prefix>/.gpufleet-build.log) after a successful build and in
    C(<prefix>.staging-<key8>/build.log) after a failed one (reported as RV(log)).
  - Run it in check mode to learn the key (and whether a build is due) before fetching the source.
  - When a build is due, an O(src) that is there but is not a directory with a top-level C(Makefile) (an empty
    directory, a file) is refused with the same message in check mode and in the real run.
seealso:
  - module: gpufleet.deepep.nvshmem_build
  - module: gpufleet.deepep.nccl_env
"""

EXAMPLES = r"""
- name: Which GDRCopy build is due? (no source needed yet)
  gpufleet.deepep.make_build:
    kind: gdrcopy
    src: /opt/deepep/src/gdrcopy-2.5.1
    source_id: https://github.com/NVIDIA/gdrcopy/archive/refs/tags/v2.5.1.tar.gz#sha256:...
    version: "2.5.1"
    prefix: /opt/deepep/gdrcopy
  check_mode: true
  register: gdrcopy_plan

- name: Build NCCL for the GPUs of the node
  gpufleet.deepep.make_build:
    kind: nccl
    src: /opt/deepep/src/nccl-2.30.7
    version: "2.30.7"
    prefix: /opt/deepep/nccl/build-2.30.7
    cuda_arch_list: "{{ ansible_facts.gpufleet_gpus.cuda_arch_list }}"
"""

RETURN = r"""
key:
  description: Build key of the requested build.
  returned: success
  type: str
  sample: 4b2d0f6c9e1a3b5d7f9e1c3a5b7d9f1e3c5a7b9d1f3e5c7a9b1d3f5e7c9a1b3d
inputs:
  description: The inputs the key was computed over.
  returned: success
  type: dict
  sample: {"kind": "nccl", "version": "2.30.7", "gencode": "-gencode=arch=compute_90,code=sm_90"}
would_build:
  description: Whether a build is (or would be) needed.
  returned: always
  type: bool
  sample: false
built:
  description: Whether this run built and swapped in a new install.
  returned: always
  type: bool
  sample: true
reason:
  description: Why the module built or did nothing.
  returned: always
  type: str
  sample: installed build has key 4b2d0f6c and is complete
previous:
  description: The install the last swap replaced (C(<prefix>.previous)), or null.
  returned: always
  type: str
  sample: /opt/deepep/gdrcopy.previous
cleaned:
  description: Staging directories of killed or failed runs that were removed (or would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: []
recovered:
  description: The repair of a swap a killed run interrupted, or null.
  returned: always
  type: str
  sample: null
log:
  description: The build log, or null when nothing was built.
  returned: always
  type: str
  sample: /opt/deepep/gdrcopy/.gpufleet-build.log
log_tail:
  description: The last lines of the build log of a failed build.
  returned: failure
  type: list
  elements: str
commands:
  description: The commands run (argv lists).
  returned: always
  type: list
  elements: list
rc:
  description: Exit status of the failed command.
  returned: failure
  type: int
cmd:
  description: The failed command.
  returned: failure
  type: list
  elements: str
linkage:
  description:
    - The linkage record of the build this run made (also kept in its stamp under C(linkage)); null when nothing
      was built.
    - C(schema) (1), C(artifact) (O(kind)); C(objects), one per shared object under C(lib/) (links are left out) -
      C(path) (relative to O(prefix)), C(needed), C(runpath), C(rpath), C(soname), C(libstdcxx) (C(shared),
      C(static) or C(none)), C(sass) and C(ptx) (embedded archs from C(<cuda_home>/bin/cuobjdump), else from the
      C(.nv_fatbin) section's entry headers; null where neither can tell).
    - C(cuda) (nvcc of O(cuda_home), or null), C(compiler) - C(cxx) (the C++ compiler for NCCL, C(CXX) of
      O(make_vars) or the environment, else C(g++); the C compiler for GDRCopy, C(CC), else C(cc)) and the first line
      of its C(--version).
    - C(nccl) (O(kind=nccl)) - C(header_version) (C(include/nccl.h)), C(root) (O(prefix)) and C(library) (the
      C(libnccl.so.2) as installed); C(torch), C(nvshmem) and C(baked_env) null; C(warnings).
  returned: always
  type: dict
  sample:
    schema: 1
    artifact: nccl
    objects:
      - {path: lib/libnccl.so.2.30.7, needed: [libc.so.6], runpath: [], rpath: [], soname: libnccl.so.2,
         libstdcxx: static, sass: [sm_90], ptx: [sm_90]}
    torch: null
    cuda: 13.0.88
    compiler: {cxx: g++, version: g++ (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0}
    nccl: {header_version: 2.30.7, root: /opt/deepep/nccl/build-2.30.7,
           library: /opt/deepep/nccl/build-2.30.7/lib/libnccl.so.2.30.7}
    nvshmem: null
    baked_env: null
    warnings: []
diff:
  description: Before and after stamp (diff mode).
  returned: when diff mode is on and a build is (or would be) needed
  type: dict
ansible_facts:
  description: Facts about the build at O(prefix), named after O(kind).
  returned: success
  type: dict
  contains:
    gpufleet_gdrcopy_build:
      description: The GDRCopy build at O(prefix) after the run (predicted in check mode), for O(kind=gdrcopy).
      type: dict
      contains:
        prefix:
          description: O(prefix).
          type: str
        present:
          description: Whether a complete build is at O(prefix).
          type: bool
        key:
          description: Its build key (from its stamp), or null.
          type: str
        current:
          description: Whether it is the complete build of the requested key.
          type: bool
        version:
          description: Its version (from its stamp), or null.
          type: str
        missing:
          description: The files of a complete build that are missing.
          type: list
          elements: str
      sample: {"prefix": "/opt/deepep/gdrcopy", "present": true, "key": "4b2d...", "current": true,
               "version": "2.5.1", "missing": []}
    gpufleet_nccl_build:
      description:
        - The NCCL build at O(prefix) after the run (predicted in check mode), for O(kind=nccl); the same fields as
          RV(ansible_facts.gpufleet_gdrcopy_build).
      type: dict
      sample: {"prefix": "/opt/deepep/nccl/build-2.30.7", "present": true, "key": "4b2d...", "current": true,
               "version": "2.30.7", "missing": []}
"""

import glob
import json
import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.deepep.plugins.module_utils._arch import ArchError, nvcc_gencode
from ansible_collections.gpufleet.deepep.plugins.module_utils._buildkey import (
    build_key,
    BuildError,
    LOG_NAME,
    read_stamp,
    rebuild_reason,
    short_key,
    source_identity,
    stamp_diff,
    write_stamp,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._linkage import (
    compiler_from_version_output,
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
    nccl_version_from_header_file,
)

# What a complete build has, per kind: (path under the prefix, glob).
EXPECTED = {
    "gdrcopy": ("include/gdrapi.h", "lib/libgdrapi.so*"),
    "nccl": ("include/nccl.h", "lib/libnccl.so*"),
}


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            kind=dict(type="str", required=True, choices=["gdrcopy", "nccl"]),
            src=dict(type="path", required=True),
            source_id=dict(type="str"),
            version=dict(type="str", required=True),
            prefix=dict(type="path", required=True),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            cuda_arch_list=dict(type="raw"),
            gencode=dict(type="str"),
            make_vars=dict(type="dict", default={}),
            jobs=dict(type="int"),
            timeout=dict(type="int", default=7200),
            lock_timeout=dict(type="int", default=3600),
            log_lines=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )


# The names GNU make reads without -f, in its order.
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")


def missing_files(kind, tree):
    """The files of a complete ``kind`` build that ``tree`` lacks."""
    return [pattern for pattern in EXPECTED[kind] if not glob.glob(os.path.join(tree, pattern))]


class MakeBuild(object):
    """observe (inputs and key, the build at the prefix and its stamp), plan (nothing or build), apply (copy the
    source, make into staging, check, stamp, swap); ``run`` returns the facts or raises Failed."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.runner = CommandLog()
        self.result = {"changed": False, "built": False, "would_build": False, "key": None, "inputs": {},
                       "reason": "", "previous": None, "cleaned": [], "recovered": None, "log": None,
                       "commands": self.runner.commands, "linkage": None}

    # --- observe --------------------------------------------------------------------------------

    def check_params(self):
        p = self.p
        self.prefix = os.path.normpath(p["prefix"])
        if not os.path.isabs(self.prefix) or self.prefix == "/":
            raise Failed("prefix %r must be an absolute path other than /" % p["prefix"])
        for name in ("jobs", "timeout"):
            if p[name] is not None and p[name] < 1:
                raise Failed("%s must be 1 or more, got %d" % (name, p[name]))
        if p["lock_timeout"] < 0:
            raise Failed("lock_timeout must be 0 (refuse at once) or more seconds, got %d" % p["lock_timeout"])
        if not p["version"].strip() or any(c.isspace() for c in p["version"]):
            raise Failed("version %r must be a release such as 2.5.1 (no spaces)" % p["version"])
        for name, value in p["make_vars"].items():
            if not name or not name.replace("_", "").isalnum() or "\n" in str(value):
                raise Failed("make_vars entry %r=%r: expected a make variable name (letters, digits, _) and a "
                             "one-line value" % (name, value))
        self.gencode = None
        if p["kind"] == "nccl":
            if p["gencode"]:
                self.gencode = p["gencode"].strip()
            elif p["cuda_arch_list"] not in (None, "", []):
                try:
                    self.gencode = nvcc_gencode(p["cuda_arch_list"])
                except ArchError as exc:
                    raise Failed("cuda_arch_list: %s (or set gencode, e.g. -gencode=arch=compute_90,code=sm_90)" % exc)
            else:
                raise Failed("kind nccl needs cuda_arch_list (e.g. 9.0 or 9.0;10.0) or gencode")
        if not p["source_id"] and not os.path.isdir(p["src"]):
            raise Failed("src %s is not a directory and no source_id identifies the source" % p["src"])

    def source_identity(self):
        if self.p["source_id"]:
            return {"kind": "id", "id": self.p["source_id"]}
        return source_identity(self.runner.quiet, self.module.get_bin_path("git"), self.p["src"])

    def observe_inputs(self):
        p = self.p
        try:
            self.inputs = {
                "kind": p["kind"], "version": p["version"], "source": self.source_identity(),
                "cuda_home": p["cuda_home"], "gencode": self.gencode, "prefix": self.prefix,
                "make_vars": dict((str(k), str(v)) for k, v in p["make_vars"].items()),
            }
            self.key = build_key(p["kind"], self.inputs)
        except BuildError as exc:
            raise Failed("cannot compute the %s build key: %s" % (p["kind"], exc))
        self.staging = staging_path(self.prefix, self.key)
        self.previous = previous_path(self.prefix)
        self.result.update(key=self.key, inputs=self.inputs)

    def repair_leftovers(self):
        """What a killed run left beside the prefix (only reported in check mode)."""
        self.result["cleaned"], self.result["recovered"] = repair_leftovers(self.prefix, self.module.check_mode)

    def observe_install(self):
        present = os.path.isdir(self.prefix)
        self.stamp = read_stamp(self.prefix) if present else None
        self.missing = missing_files(self.p["kind"], self.prefix) if present else list(EXPECTED[self.p["kind"]])

    # --- plan -----------------------------------------------------------------------------------

    def plan(self):
        """False when the build at the prefix is the key's and complete; else True, with the reason."""
        problem = "the build at %s lacks %s" % (self.prefix, ", ".join(self.missing)) if self.missing else None
        reason = rebuild_reason(self.prefix, self.stamp, self.key, problem)
        if reason is None:
            self.result["reason"] = "installed build has key %s and is complete" % short_key(self.key)
            return False
        self.check_source()
        self.result.update(reason=reason, would_build=True, changed=True)
        if self.module._diff:
            self.result["diff"] = stamp_diff(self.prefix, self.stamp, self.key, self.inputs)
        return True

    def check_source(self):
        """The source checks of the build, before it and in check mode too (one verdict for the plan and the run):
        Failed naming O(src) when it is there but is no source tree with a top-level Makefile. An absent source
        is left to the real run (check mode plans before the fetch)."""
        src = self.p["src"]
        if not os.path.lexists(src):
            if not self.module.check_mode:
                raise Failed("src %s is not a source directory (fetch the source first); nothing was built" % src)
            return
        if not os.path.isdir(src):
            raise Failed("src %s is not a directory; expected the %s source tree (the directory with the top-level "
                         "Makefile); nothing was built" % (src, self.p["kind"]))
        if not any(os.path.isfile(os.path.join(src, name)) for name in MAKEFILES):
            try:
                found = ", ".join(sorted(e for e in os.listdir(src) if not e.startswith("."))[:8]) or "nothing"
            except OSError as exc:
                found = "cannot list it: %s" % (exc.strerror or exc)
            raise Failed("src %s has no Makefile at its top (found: %s); expected the %s source tree (the directory "
                         "with the top-level Makefile); nothing was built" % (src, found, self.p["kind"]))

    # --- apply ----------------------------------------------------------------------------------

    def make_argv(self, staged):
        p = self.p
        jobs = p["jobs"] or os.cpu_count() or 1
        extra = ["%s=%s" % (k, v) for k, v in sorted(p["make_vars"].items())]
        if p["kind"] == "gdrcopy":
            return ["make", "-j%d" % jobs, "prefix=%s" % self.prefix, "DESTDIR=%s" % staged[:-len(self.prefix)],
                    "CUDA=%s" % p["cuda_home"]] + extra + ["lib", "lib_install"]
        return ["make", "-j%d" % jobs, "src.build", "NVCC_GENCODE=%s" % self.gencode, "CUDA_HOME=%s" % p["cuda_home"],
                "BUILDDIR=%s" % staged] + extra

    def build(self):
        p, runner = self.p, self.runner
        if not os.path.isdir(p["src"]):
            raise StepFailed("src %s is not a source directory (fetch the source first)" % p["src"])
        make = self.module.get_bin_path("make")
        if not make:
            raise StepFailed("make is not installed on the target (install build-essential, the build_deps phase)")
        work = os.path.join(self.staging, "src")
        shutil.copytree(p["src"], work, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        staged = os.path.join(self.staging, "destdir") + self.prefix if p["kind"] == "gdrcopy" \
            else os.path.join(self.staging, "build")
        argv = self.make_argv(staged)
        argv[0] = make
        runner.run(argv, cwd=work, timeout=p["timeout"])
        missing = missing_files(p["kind"], staged)
        if missing:
            raise StepFailed("make put no %s into %s" % (" or ".join(missing), staged))
        write_stamp(staged, {"key": self.key, "kind": p["kind"], "version": p["version"], "inputs": self.inputs,
                             "built_at": now(), "module": "gpufleet.deepep.make_build",
                             "linkage": self.linkage(staged)})
        shutil.copyfile(runner.log_path, os.path.join(staged, LOG_NAME))
        return swap_in(self.prefix, staged)

    def linkage(self, staged):
        """The linkage record (module_utils._linkage, schema 1) of the staged build, its paths as installed at the
        prefix; kept in the stamp."""
        p, runner = self.p, self.runner

        def run(argv, timeout):
            return runner.run(argv, check=False, record=False, timeout=timeout)

        objects, warnings = tree_objects(run, p["cuda_home"], staged, ("lib",))
        cuda = None
        nvcc = os.path.join(p["cuda_home"], "bin", "nvcc")
        if os.access(nvcc, os.X_OK):
            rc, out, err = run([nvcc, "--version"], 120)
            cuda = cuda_version_from_nvcc(out) if rc == 0 else None
        # make's defaults: NCCL's C++ is $(CXX) (g++), GDRCopy's library is C, $(CC) (cc).
        name = "CXX" if p["kind"] == "nccl" else "CC"
        cxx = str(p["make_vars"].get(name) or os.environ.get(name) or ("g++" if name == "CXX" else "cc")).split()[0]
        path = cxx if os.path.isabs(cxx) else self.module.get_bin_path(cxx)
        version = None
        if path:
            rc, out, err = run([path, "--version"], 120)
            version = compiler_from_version_output(out) if rc == 0 else None
        nccl = None
        if p["kind"] == "nccl":
            nccl = {"header_version": nccl_version_from_header_file(staged), "root": self.prefix,
                    "library": installed_library(staged, self.prefix, "libnccl.so.2")
                    or installed_library(staged, self.prefix, "libnccl.so*")}
        try:
            return linkage_record(p["kind"], objects, cuda=cuda, compiler={"cxx": cxx, "version": version},
                                  nccl=nccl, warnings=warnings)
        except LinkageError as exc:
            raise StepFailed("the linkage record of the staged build is malformed: %s" % exc)

    def apply(self):
        """Build the key and swap it in; the build at the prefix stays on any failure."""
        p, prefix = self.p, self.prefix
        header = "# gpufleet.deepep.make_build %s %s key %s\n# inputs %s\n" % (
            now(), p["kind"], self.key, json.dumps(self.inputs, sort_keys=True))
        with staged_build(prefix, self.staging, self.runner, self.result, header, p["log_lines"],
                          lambda text, step: "%s build failed: %s (the build at %s is unchanged)" % (p["kind"], text, prefix)):
            swap = self.build()
        self.result.update(built=True, previous=swap["previous"], log=os.path.join(prefix, LOG_NAME),
                           linkage=(read_stamp(prefix) or {}).get("linkage"))

    def facts(self, predicted=False):
        stamp = {"key": self.key, "version": self.p["version"]} if predicted else (read_stamp(self.prefix) or {})
        missing = [] if predicted else missing_files(self.p["kind"], self.prefix) \
            if os.path.isdir(self.prefix) else list(EXPECTED[self.p["kind"]])
        return {
            "prefix": self.prefix, "present": not missing, "key": stamp.get("key"),
            "current": stamp.get("key") == self.key and not missing, "version": stamp.get("version"),
            "missing": missing,
        }

    # --- the decision ---------------------------------------------------------------------------

    def run(self):
        """The facts of the build at the prefix after the run (``gpufleet_<kind>_build``); raises Failed."""
        self.check_params()
        self.observe_inputs()
        try:
            with build_lock(self.prefix, self.p["lock_timeout"], "%s build" % self.p["kind"], self.module.check_mode):
                self.repair_leftovers()
                self.observe_install()
                if not self.plan():
                    self.result["previous"] = self.previous if os.path.isdir(self.previous) else None
                    return self.facts()
                if self.module.check_mode:
                    return self.facts(predicted=True)
                self.apply()
                return self.facts()
        except BuildError as exc:  # the lock: another build of this prefix runs
            raise Failed(str(exc))


def main():
    module = build_module()
    finish(module, MakeBuild(module), "gpufleet_%s_build" % module.params["kind"])


if __name__ == "__main__":
    main()
