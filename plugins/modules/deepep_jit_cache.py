#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_jit_cache
short_description: Warm DeepEP V2's JIT kernel cache once per key, pack it, and unpack it into a node-local cache
version_added: 0.2.0
description:
  - DeepEP V2 compiles its kernels at first use into C(<EP_JIT_CACHE_DIR>/cache/kernel.<name>.<digest>/) and has no
    precompile entry point; the only way to warm a cache is to run the kernels. This module runs that warm-up
    (O(warmup_argv), bounded by O(warmup_timeout)) once per key, packs the kernels into
    C(<artifact_dir>/<key>/jit-cache.tar) with the record C(jit.json) (written last), and unpacks an artifact into
    O(cache_dir). M(gpufleet.deepep.artifact_store) carries the artifact to the other nodes of the key (the
    C(gpufleet.deepep.build_once) role, kind C(deepep_jit)).
  - The key (sha256 of canonical JSON) covers what DeepEP's own digest covers, so that a cache never travels to a node
    where it would miss - O(deepep_key) (the DeepEP build), O(gpu_arch_list), nvcc's version (C(nvcc --version) of
    O(cuda_home), or of C(EP_JIT_NVCC_COMPILER) in O(key_env)), the installed package directory of C(deep_ep) under
    O(python) and O(python) itself, O(nccl_root), and O(key_env).
  - An artifact on the node is unpacked (never a second warm-up); without one, the warm-up compiles into a fresh
    directory under O(artifact_dir), which is packed, and the archive is unpacked into O(cache_dir) like any other.
    Each kernel directory appears in O(cache_dir) by one rename, whole; the record C(.gpufleet-jit.json) (key,
    kernels, whether they were compiled here or came from the store, the warm-up times) is written last. Kernels the
    cache already holds are kept.
  - Check mode runs only the read-only probes (nvcc's version, where C(deep_ep) is installed) and predicts the build
    or the install; it writes nothing.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
options:
  cache_dir:
    description:
      - The node-local JIT cache directory (C(EP_JIT_CACHE_DIR) of the env script), an absolute path other than
        C(/), not a symbolic link (the module sets its mode and owner). Keep it off shared filesystems - concurrent compiles race on NFS (DeepEP issue 683).
    type: path
    required: true
  artifact_dir:
    description: Where the node keeps JIT artifacts, one directory per key (C(<artifact_dir>/<key>/)); an absolute path other than C(/), not a symbolic link.
    type: path
    required: true
  deepep_key:
    description: The build key of the installed DeepEP (the C(key) M(gpufleet.deepep.deepep_build) returns), 64 hex digits.
    type: str
    required: true
  python:
    description: The interpreter that has the installed C(deep_ep) (part of the key, with the package's directory).
    type: path
    required: true
  gpu_arch_list:
    description: The node's CUDA archs (C(9.0), C(10.0a); a list or a string with C(;), C(,) or spaces).
    type: raw
    required: true
  cuda_home:
    description: The CUDA toolkit whose C(bin/nvcc) DeepEP's JIT uses.
    type: path
    default: /usr/local/cuda
  nccl_root:
    description: The NCCL root DeepEP's JIT includes (C(EP_NCCL_ROOT_DIR)); empty for the pip NCCL.
    type: str
    default: ""
  key_env:
    description:
      - The environment variables that enter DeepEP's JIT digest, with their values at run time, for example
        C(EP_JIT_DEBUG) set to C(0). Only C(EP_JIT_DEBUG), C(EP_JIT_PTXAS_CHECK), C(EP_JIT_PTXAS_VERBOSE),
        C(EP_JIT_DUMP_ASM), C(EP_JIT_DUMP_PTX), C(EP_JIT_DUMP_SASS), C(EP_JIT_NVCC_COMPILER), C(EP_GIN_GDAKI_DEBUG)
        and C(EP_NUM_TOPK_IDX_BITS) are accepted. They are also set for the warm-up.
    type: dict
    default: {}
  warmup_argv:
    description:
      - The warm-up command as an argv list, run with C(EP_JIT_CACHE_DIR) set to the directory it fills, for
        example O(python) C(tests/elastic/test_ep.py --num-processes 2 --test-first-only --skip-perf-test) in the
        DeepEP source tree (O(warmup_chdir)).
    type: list
    elements: str
    required: true
  warmup_chdir:
    description: The directory the warm-up runs in (DeepEP's source tree); unset, O(artifact_dir).
    type: path
  warmup_env:
    description: More environment of the warm-up (for example C(EP_DISABLE_GIN) set to C(1) on a node without a NIC).
    type: dict
    default: {}
  warmup_timeout:
    description: Seconds a warm-up may run before it is killed and the module fails (nothing is packed or installed).
    type: int
    default: 1800
  measure_loaded:
    description:
      - Run the warm-up once more against O(cache_dir) after the kernels are in place, to report the warm time and
        prove that every kernel loads (a compile there means the key missed an input).
    type: bool
    default: false
  owner:
    description: The owner of O(cache_dir), its directories and files (the service user); unset, root.
    type: str
  group:
    description: The group of O(cache_dir), its directories and files; unset, the owner's primary group.
    type: str
  mode:
    description:
      - The mode of O(cache_dir) and its kernel directories, three octal digits (files get its read and write bits
        less group and world write). V(0755) lets every service user load the kernels; a service user that must
        compile new shapes needs to own the directory (O(owner)).
    type: str
    default: "0755"
notes:
  - The real DeepEP V2 prints nothing about its cache; compiled and loaded are counted from the kernel directories
    before and after a warm-up.
seealso:
  - module: gpufleet.deepep.deepep_build
  - module: gpufleet.deepep.artifact_store
"""

EXAMPLES = r"""
- name: Plan the JIT cache (key, build or install)
  gpufleet.deepep.deepep_jit_cache:
    cache_dir: /var/cache/deepep/jit
    artifact_dir: /opt/deepep/artifacts/deepep_jit
    deepep_key: "{{ ansible_facts.gpufleet_deepep.key }}"
    python: /usr/bin/python3
    gpu_arch_list: "{{ ansible_facts.gpufleet_gpus.cuda_arch_list }}"
    warmup_argv: [/usr/bin/python3, tests/elastic/test_ep.py, --num-processes, "2", --test-first-only, --skip-perf-test]
    warmup_chdir: /opt/deepep/DeepEP
    warmup_env: {EP_DISABLE_GIN: "1"}
  check_mode: true
  register: jit_plan
"""

RETURN = r"""
key:
  description: The key of the JIT cache (null in check mode when it cannot be known yet, see RV(msg)).
  returned: always
  type: str
  sample: 9c1e0b2d4f6a8c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2a4c6e8b0d2f4a6c8e
inputs:
  description: The inputs the key was computed over.
  returned: success
  type: dict
  sample: {"deepep": "4b2d...", "arch_list": ["9.0"], "nvcc": "12.9.86", "deepep_dir": "/usr/lib/python3/dist-packages/deep_ep",
           "python": "/usr/bin/python3", "nccl_root": "/opt/deepep/nccl/build-2.30.7", "env": {}}
would_build:
  description: Whether a warm-up (a compile of the kernels here) is, or would be, needed.
  returned: always
  type: bool
would_install:
  description: Whether the cache gets (or would get) the kernels of the key.
  returned: always
  type: bool
reason:
  description: Why.
  returned: success
  type: str
  sample: the cache has no record of key 9c1e0b2d
archive:
  description: The artifact's archive of the key on this node (C(<artifact_dir>/<key>/jit-cache.tar)).
  returned: success
  type: str
kernels:
  description: The kernel directories of the key's artifact that are (or would be) in the cache.
  returned: success
  type: list
  elements: str
  sample: ["kernel.dispatch.1f2e3d4c5b6a7980"]
added:
  description: The kernel directories this run put (or would put) into the cache.
  returned: success
  type: list
  elements: str
warmup:
  description:
    - The warm-up that compiled the kernels (on the node that built the key), C({compiled, loaded, seconds, rc}); null
      when none ran.
  returned: success
  type: dict
  sample: {"compiled": 11, "loaded": 0, "seconds": 68.1, "rc": 0}
loaded_warmup:
  description: The warm-up against the filled cache (O(measure_loaded)), with the same fields; null when none ran.
  returned: success
  type: dict
  sample: {"compiled": 0, "loaded": 11, "seconds": 44.9, "rc": 0}
msg:
  description: Why check mode cannot plan yet (no nvcc, no C(deep_ep) installed), or the failure.
  returned: when it applies
  type: str
ansible_facts:
  description: Facts about the node's JIT cache.
  returned: success
  type: complex
  contains:
    gpufleet_deepep_jit:
      description:
        - The cache after the run (predicted in check mode) - C(cache_dir), C(key), C(current) (its record names the
          key and every kernel is there), C(kernels) (kernel names present), C(kernel_count), C(from) (C(compiled)
          when this node's warm-up compiled them, C(store) when they came from the artifact, null when unknown),
          C(compiled_seconds) (the builder's cold warm-up), C(loaded_seconds) (the last warm run measured here),
          C(compiled) and C(loaded) (the kernel counts of those runs).
      type: dict
      sample: {"cache_dir": "/var/cache/deepep/jit", "key": "9c1e...", "current": true, "kernels": ["dispatch"],
               "kernel_count": 1, "from": "store", "compiled_seconds": 68.1, "loaded_seconds": 44.9,
               "compiled": 11, "loaded": 11}
"""

import grp
import os
import pwd
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.deepep_jit import (
    ARCHIVE_NAME,
    ARTIFACT_RECORD,
    RECORD_NAME,
    JitError,
    cache_facts,
    check_key_env,
    check_mode_string,
    jit_key,
    list_kernels,
    pack,
    plan,
    read_record,
    unpack,
    warmup_counts,
    write_record,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import write_json_file
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import (
    check_dir_option, CommandLog, Failed, finish, now,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import cuda_version_from_nvcc

PROBE_TIMEOUT = 120
DIR_EXAMPLE = "/var/cache/deepep/jit"
FIND_DEEP_EP = ("import importlib.util; s = importlib.util.find_spec('deep_ep'); "
                "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')")


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            cache_dir=dict(type="path", required=True),
            artifact_dir=dict(type="path", required=True),
            deepep_key=dict(type="str", required=True, no_log=False),
            python=dict(type="path", required=True),
            gpu_arch_list=dict(type="raw", required=True),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            nccl_root=dict(type="str", default=""),
            key_env=dict(type="dict", default={}, no_log=False),
            warmup_argv=dict(type="list", elements="str", required=True),
            warmup_chdir=dict(type="path"),
            warmup_env=dict(type="dict", default={}),
            warmup_timeout=dict(type="int", default=1800),
            measure_loaded=dict(type="bool", default=False),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="str", default="0755"),
        ),
        supports_check_mode=True,
    )


def _ids(owner, group):
    """``(uid, gid)`` of ``owner``/``group`` (-1 where unset); Failed naming the option when one is unknown."""
    uid = gid = -1
    if owner:
        try:
            entry = pwd.getpwnam(owner)
        except KeyError:
            raise Failed("owner: user %r does not exist on this node; expected an existing user (the service user)"
                         % owner)
        uid, gid = entry.pw_uid, entry.pw_gid
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise Failed("group: group %r does not exist on this node; expected an existing group" % group)
    return uid, gid


class JitCache(object):
    """observe (the key's inputs, the cache, the artifact), plan (nothing, install or warm-up), apply."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.log = CommandLog(timeout=PROBE_TIMEOUT)
        self.result = {"changed": False, "key": None, "would_build": False, "would_install": False}

    def validate(self):
        p = self.p
        check_dir_option("cache_dir", p["cache_dir"], DIR_EXAMPLE)
        check_dir_option("artifact_dir", p["artifact_dir"], DIR_EXAMPLE)
        if p["warmup_timeout"] <= 0:
            raise Failed("warmup_timeout: %r is not a positive number of seconds; expected e.g. 1800"
                         % p["warmup_timeout"])
        if not p["warmup_argv"]:
            raise Failed("warmup_argv is empty; expected the warm-up command as a list, e.g. [python, "
                         "tests/elastic/test_ep.py, --num-processes, '2', --test-first-only, --skip-perf-test]")
        for name in ("warmup_env", "key_env"):
            for var, value in p[name].items():
                if not isinstance(value, (str, int)) or isinstance(value, bool) or "=" in str(var) or not var:
                    raise Failed("%s: %s=%r is not NAME: string; expected e.g. {EP_DISABLE_GIN: '1'}"
                                 % (name, var, value))
        try:
            self.mode = check_mode_string(p["mode"])
            self.key_env = check_key_env(p["key_env"])
        except JitError as exc:
            raise Failed(str(exc))
        self.uid, self.gid = _ids(p["owner"], p["group"])

    def probe(self):
        """``(nvcc version, deep_ep directory)``; either None when it cannot be read (the message in ``why``)."""
        nvcc = self.key_env.get("EP_JIT_NVCC_COMPILER") or os.path.join(self.p["cuda_home"], "bin", "nvcc")
        rc, out, err = self.log.quiet([nvcc, "--version"])
        version = cuda_version_from_nvcc(out) if rc == 0 else None
        rc2, out2, dummy = self.log.quiet([self.p["python"], "-c", FIND_DEEP_EP])
        lines = out2.strip().splitlines() if rc2 == 0 else []
        deepep_dir = lines[-1] if lines and os.path.isabs(lines[-1]) else None
        why = []
        if version is None:
            why.append("%s --version gave no nvcc release (rc %d%s)" % (nvcc, rc, ": " + err.strip()[-200:] if err.strip() else ""))
        if deepep_dir is None:
            why.append("deep_ep is not installed in %s" % self.p["python"])
        return version, deepep_dir, "; ".join(why)

    def facts(self, key, kernels_override=None):
        return cache_facts(self.p["cache_dir"], key, kernels=kernels_override)

    def warmup(self, cache, kernels=None):
        """Run the warm-up with EP_JIT_CACHE_DIR=``cache``; ``{compiled, loaded, seconds, rc}`` (loaded: of
        ``kernels`` when given, the key's, else of every kernel the cache held)."""
        before = [k["dir"] for k in list_kernels(cache)]
        env = dict((k, str(v)) for k, v in self.p["warmup_env"].items())
        env.update(self.key_env)
        env["EP_JIT_CACHE_DIR"] = cache
        start = time.monotonic()
        rc, out, err = self.log.run(self.p["warmup_argv"], env=env, cwd=self.p["warmup_chdir"] or self.p["artifact_dir"],
                                    check=False, timeout=self.p["warmup_timeout"])
        seconds = round(time.monotonic() - start, 1)
        if rc != 0:
            what = "timed out after %ss" % self.p["warmup_timeout"] if rc == 124 else "failed (rc=%d)" % rc
            raise Failed("the JIT warm-up %s: %s (EP_JIT_CACHE_DIR=%s); nothing was packed or installed"
                         % (what, " ".join(self.p["warmup_argv"]), cache), rc=rc,
                         stdout=out[-3000:], stderr=err[-3000:])
        counts = warmup_counts([d for d in before if kernels is None or d in kernels],
                               [k["dir"] for k in list_kernels(cache)])
        return {"compiled": counts["compiled"], "loaded": counts["loaded"], "seconds": seconds, "rc": rc}

    def run(self):
        p = self.p
        self.validate()
        version, deepep_dir, why = self.probe()
        if version is None or deepep_dir is None:
            if self.module.check_mode:
                self.result.update(msg="cannot plan the JIT cache yet: %s" % why, would_build=True, would_install=True)
                return self.facts(None)
            raise Failed("cannot key the JIT cache: %s" % why)
        try:
            key, inputs = jit_key(p["deepep_key"], p["gpu_arch_list"], version, deepep_dir, p["python"],
                                  p["nccl_root"], self.key_env)
        except JitError as exc:
            raise Failed(str(exc))
        decision = plan(key, p["cache_dir"], p["artifact_dir"])
        artifact = os.path.join(p["artifact_dir"], key)
        archive = os.path.join(artifact, ARCHIVE_NAME)
        self.result.update(key=key, inputs=inputs, would_build=decision["would_build"],
                           would_install=decision["would_install"], reason=decision["reason"], archive=archive,
                           kernels=[], added=[], warmup=None, loaded_warmup=None)
        if decision["artifact"]:
            try:
                added, present = unpack(archive, p["cache_dir"], check_mode=True)
            except (JitError, OSError, EnvironmentError) as exc:
                raise Failed("the JIT artifact %s cannot be used: %s" % (archive, exc))
            self.result.update(kernels=added + present, added=added)
        if not decision["would_install"]:
            return self.facts(key)
        self.result["changed"] = True
        if self.module.check_mode:
            return self.facts(key)
        compiled = None
        if decision["would_build"]:
            compiled = self.build(key, inputs, artifact, archive)
        built = read_record(os.path.join(artifact, ARTIFACT_RECORD)) or {}
        try:
            added, present = unpack(archive, p["cache_dir"], self.mode, self.uid, self.gid)
        except (JitError, OSError, EnvironmentError) as exc:
            raise Failed("unpacking the JIT artifact %s into cache_dir %s failed: %s; the cache keeps what it had"
                         % (archive, p["cache_dir"], exc))
        self.result.update(kernels=added + present, added=added, warmup=compiled)
        record = {"key": key, "inputs": inputs, "kernels": added + present, "installed_at": now(),
                  "from": "compiled" if compiled else "store", "built_by": built.get("host"),
                  "compiled_seconds": built.get("warmup", {}).get("seconds"),
                  "compiled": built.get("warmup", {}).get("compiled"), "loaded_seconds": None, "loaded": None}
        if p["measure_loaded"]:
            warm = self.warmup(p["cache_dir"], kernels=set(added + present))
            self.result["loaded_warmup"] = warm
            record.update(loaded_seconds=warm["seconds"], loaded=warm["loaded"])
            if warm["compiled"]:
                record["missed"] = warm["compiled"]
        write_record(p["cache_dir"], record)
        os.chown(os.path.join(p["cache_dir"], RECORD_NAME), self.uid, self.gid)
        return self.facts(key)

    def build(self, key, inputs, artifact, archive):
        """The warm-up into a fresh directory, packed into ``artifact`` (its record last); the warm-up's figures."""
        p = self.p
        os.makedirs(p["artifact_dir"], 0o755, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".jit-warmup-%s." % key[:8], dir=p["artifact_dir"])
        staged = tempfile.mkdtemp(prefix=".jit-artifact-%s." % key[:8], dir=p["artifact_dir"])
        try:
            warm = self.warmup(scratch)
            try:
                kernels = pack(scratch, os.path.join(staged, ARCHIVE_NAME))
            except JitError as exc:
                raise Failed("%s (warm-up: %s)" % (exc, " ".join(p["warmup_argv"])))
            write_json_file(os.path.join(staged, ARTIFACT_RECORD),
                            {"key": key, "inputs": inputs, "kernels": kernels, "warmup": warm,
                             "host": os.uname()[1], "built_at": now()}, tmp_prefix=".jit.")
            os.chmod(staged, 0o755)
            if os.path.isdir(artifact):  # an incomplete artifact (no record): replaced whole
                shutil.rmtree(artifact)
            os.rename(staged, artifact)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(staged, ignore_errors=True)
        return warm


def main():
    module = build_module()
    finish(module, JitCache(module), "gpufleet_deepep_jit")


if __name__ == "__main__":
    main()
