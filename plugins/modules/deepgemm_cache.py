#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepgemm_cache
short_description: Precompile SGLang's DeepGEMM kernels once per key, pack them, and install them into the cache
version_added: 0.2.0
description:
  - Without precompiled kernels DeepGEMM JIT-compiles about 692 of them in the server's warm-up and DeepEP times out
    (runbook 002). This module runs C(python -m sglang.compile_deep_gemm) with the server's arguments
    (O(precompile_args)) once per key, packs the cache into C(<artifact_dir>/<key>/<key>.tar.gz) (renamed into place
    whole), and installs an artifact into O(cache_dir). M(gpufleet.deepep.artifact_store) carries the artifact to the
    other nodes of the key (the C(gpufleet.deepep.build_once) role, kind C(deepgemm)).
  - The key is the sha256 of the JSON (sorted keys) of the sglang and deep_gemm versions, the model's config.json
    (O(config_sha256)), O(precompile_args), O(gpu_arch_list) and CUDA (O(torch_cuda), else O(cuda_version)) - the
    value the sglang role computed before this module, so artifacts already in a store stay valid.
  - The marker C(<cache_dir>/.gpufleet-deepgemm-<key>.json) says the key is installed. An artifact on the node is
    installed (never a second precompile); without one, the precompile fills a fresh directory under O(artifact_dir)
    (the env script O(env_script) and the SGLang env file O(env_file) sourced, C(SGLANG_DG_CACHE_DIR) pointing at that
    directory), bounded by O(timeout); it is packed, and the archive installed like any other.
  - An install checks every member of the archive first, extracts it beside the cache and renames each top-level
    entry of C(cache/) (a kernel directory) into place whole; entries the cache holds are kept. The marker (C(key),
    C(args), C(from), C(seconds), C(built_by)) is written last, so a reader never sees a half-written cache as current.
  - Check mode reads the marker and the artifact (whose members it checks) and predicts the build or the install; it
    runs nothing and writes nothing.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
options:
  cache_dir:
    description:
      - The DeepGEMM cache the service reads (C(SGLANG_DG_CACHE_DIR) of the env file), an absolute path other than C(/), not a
        symbolic link.
    type: path
    required: true
  artifact_dir:
    description:
      - Where the node keeps DeepGEMM artifacts, one directory per key (C(<artifact_dir>/<key>/<key>.tar.gz)), and the
        precompile's scratch directories; an absolute path other than C(/), not a symbolic link.
    type: path
    required: true
  python:
    description: The interpreter of the SGLang environment that runs C(-m sglang.compile_deep_gemm).
    type: path
    required: true
  sglang_version:
    description:
      - The installed sglang version (C(sglang_env)'s C(versions.sglang)), part of the key. Null only in check mode
        before SGLang is installed; then the key cannot be known yet (RV(msg)).
    type: str
  deep_gemm_version:
    description: The installed deep_gemm version (C(sglang_env)'s C(versions.deep_gemm)), part of the key; null when absent.
    type: str
  config_sha256:
    description:
      - The sha256 of the model's config.json (M(gpufleet.deepep.model_config)'s C(config_sha256)), 64 hex digits,
        part of the key. Null only in check mode (the key cannot be known yet).
    type: str
  precompile_args:
    description:
      - The arguments of C(python -m sglang.compile_deep_gemm), the server's own (the kernel shapes depend on them),
        for example C([--model-path, /opt/models/m, --tp-size, '8', --moe-a2a-backend, deepep]); part of the key and
        of the marker. C(--timeout) is not one of them (O(timeout)).
    type: list
    elements: str
    required: true
  gpu_arch_list:
    description:
      - The node's CUDA archs as M(gpufleet.deepep.gpu_topology) reports them (C(cuda_arch_list), such as C(10.0) or
        C(9.0;10.0)), part of the key as given; empty or null when unknown.
    type: raw
  torch_cuda:
    description: The CUDA version torch was built for (C(sglang_env)'s C(torch_cuda)), part of the key; empty or null when unknown.
    type: str
  cuda_version:
    description: The CUDA version the key takes when O(torch_cuda) is empty (the sglang role's C(sglang_cuda_version)).
    type: str
    default: ""
  env_script:
    description: The env script sourced before the precompile when it exists (the fleet's C(unified-env.sh)).
    type: path
    default: /opt/deepep/unified-env.sh
  env_file:
    description:
      - The SGLang env file sourced before the precompile (LD_LIBRARY_PATH of the IBGDA NVSHMEM for DeepEP); it must
        exist for a precompile. C(SGLANG_DG_CACHE_DIR) is set after it, to the scratch directory.
    type: path
    required: true
  timeout:
    description:
      - Seconds the precompile may take, passed as C(--timeout); the command is killed 300 seconds after that, and the
        module fails with its output's tail (nothing is packed or installed).
    type: int
    default: 3600
notes:
  - The marker's C(from) is C(built here) on the node whose precompile filled the cache in this run, C(artifact store)
    where the cache came from an artifact.
seealso:
  - module: gpufleet.deepep.artifact_store
  - module: gpufleet.deepep.model_config
  - module: gpufleet.deepep.sglang_env
"""

EXAMPLES = r"""
- name: Plan the DeepGEMM cache (key, build or install)
  gpufleet.deepep.deepgemm_cache:
    cache_dir: /var/cache/sglang/deep_gemm
    artifact_dir: /var/cache/sglang/deepgemm-staging
    python: /usr/bin/python3
    sglang_version: "{{ ansible_facts.gpufleet_sglang.versions.sglang }}"
    deep_gemm_version: "{{ ansible_facts.gpufleet_sglang.versions.deep_gemm }}"
    config_sha256: "{{ ansible_facts.gpufleet_model.config_sha256 }}"
    precompile_args: [--model-path, /opt/models/deepseek-v3, --tp-size, "8", --moe-a2a-backend, deepep]
    gpu_arch_list: "{{ ansible_facts.gpufleet_gpus.cuda_arch_list }}"
    torch_cuda: "{{ ansible_facts.gpufleet_sglang.torch_cuda }}"
    env_file: /opt/deepep/sglang-env.sh
  check_mode: true
  register: dg_plan
"""

RETURN = r"""
key:
  description: The key of the DeepGEMM cache (null in check mode when it cannot be known yet, see RV(msg)).
  returned: always
  type: str
  sample: 64b8700692a59a50a2f022e8ba2bd4255e5e864fa35d17329248fb5f33711e70
inputs:
  description: The inputs the key was computed over.
  returned: when the key is known
  type: dict
  sample: {"sglang": "0.5.19", "deep_gemm": "2.1.1", "config": "9f86...", "args": ["--model-path", "/opt/models/m"],
           "arch": "10.0", "cuda": "12.9"}
would_build:
  description: Whether a precompile here is, or would be, needed.
  returned: always
  type: bool
would_install:
  description: Whether the cache gets (or would get) the kernels of the key.
  returned: always
  type: bool
reason:
  description: Why.
  returned: when the key is known
  type: str
  sample: the cache has no marker of key 64b87006
archive:
  description: The key's artifact on this node (C(<artifact_dir>/<key>/<key>.tar.gz)).
  returned: when the key is known
  type: str
added:
  description: The top-level entries of the cache (kernel directories) this run put (or would put) into it.
  returned: when the key is known
  type: list
  elements: str
kept:
  description: The top-level entries of the artifact the cache already held (kept as they were).
  returned: when the key is known
  type: list
  elements: str
seconds:
  description: How long the precompile ran here, in seconds; null when none ran.
  returned: when the key is known
  type: float
  sample: 412.7
output:
  description: The last lines (up to 20) of the precompile's standard output; empty when none ran.
  returned: when the key is known
  type: list
  elements: str
  sample: ["compile_deep_gemm: 24 kernels for DeepseekV3ForCausalLM (tp 8, dp 1, attention tp 8) in /x/cache"]
stdout:
  description: The tail of the failed precompile's standard output.
  returned: failure of the precompile
  type: str
stderr:
  description: The tail of the failed precompile's standard error.
  returned: failure of the precompile
  type: str
rc:
  description: The exit status of the failed precompile (124 when it ran past its time and was killed).
  returned: failure of the precompile
  type: int
msg:
  description: Why check mode cannot plan yet, or the failure.
  returned: when it applies
  type: str
ansible_facts:
  description: Facts about the node's DeepGEMM cache.
  returned: success
  type: complex
  contains:
    gpufleet_deepgemm:
      description:
        - The cache after the run (predicted in check mode) - C(cache_dir), C(key), C(current) (the marker of the
          key is there), C(from) (C(built here) or C(artifact store), null before an install), C(seconds) (the
          precompile's on the node that built the key, null when unknown), C(built_by) (that node) and
          C(entry_count) (the top-level entries of C(cache/)).
      type: dict
      sample: {"cache_dir": "/var/cache/sglang/deep_gemm", "key": "64b8...", "current": true, "from": "artifact store",
               "seconds": 412.7, "built_by": "node-1", "entry_count": 24}
"""

import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import (
    check_dir_option, CommandLog, Failed, finish, now,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.deepgemm import (
    DeepGemmError,
    archive_path,
    cache_facts,
    dg_key,
    list_entries,
    pack,
    plan,
    unpack,
    write_marker,
)

# Seconds the precompile may run past its own --timeout before it is killed.
GRACE = 300
DIR_EXAMPLE = "/var/cache/sglang/deep_gemm"
TAIL_LINES = 20
# The server's environment: the env script when present and the SGLang env file, then the scratch cache instead of
# the service's. Arguments: the env script, the env file, the scratch cache, the interpreter, then the precompile's.
SCRIPT = ('[ -f "$1" ] && . "$1"; . "$2" || exit 1; export SGLANG_DG_CACHE_DIR="$3"; python="$4"; shift 4; '
          'exec "$python" -m sglang.compile_deep_gemm "$@"')


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            cache_dir=dict(type="path", required=True),
            artifact_dir=dict(type="path", required=True),
            python=dict(type="path", required=True),
            sglang_version=dict(type="str"),
            deep_gemm_version=dict(type="str"),
            config_sha256=dict(type="str"),
            precompile_args=dict(type="list", elements="str", required=True),
            gpu_arch_list=dict(type="raw"),
            torch_cuda=dict(type="str"),
            cuda_version=dict(type="str", default=""),
            env_script=dict(type="path", default="/opt/deepep/unified-env.sh"),
            env_file=dict(type="path", required=True),
            timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )


def _tail(text, lines=TAIL_LINES):
    return [line for line in text.splitlines() if line.strip()][-lines:]


class DeepGemmCache(object):
    """observe (the key, the marker, the artifact), plan (nothing, install or precompile), apply."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.log = CommandLog(timeout=GRACE)
        self.result = {"changed": False, "key": None, "would_build": False, "would_install": False}

    def validate(self):
        p = self.p
        check_dir_option("cache_dir", p["cache_dir"], DIR_EXAMPLE)
        check_dir_option("artifact_dir", p["artifact_dir"], DIR_EXAMPLE)
        if p["timeout"] <= 0:
            raise Failed("timeout: %r is not a positive number of seconds; expected e.g. 3600" % p["timeout"])
        for name in ("python", "env_file", "env_script"):
            if not os.path.isabs(p[name]):
                raise Failed("%s: %r is not an absolute path; expected e.g. %s"
                             % (name, p[name], {"python": "/usr/bin/python3", "env_file": "/opt/deepep/sglang-env.sh",
                                                "env_script": "/opt/deepep/unified-env.sh"}[name]))

    def missing(self):
        """The inputs without which the key cannot be known (before SGLang is installed, in check mode)."""
        return [name for name in ("sglang_version", "config_sha256") if self.p[name] in (None, "")]

    def run(self):
        p = self.p
        self.validate()
        arch = p["gpu_arch_list"]
        cuda = p["torch_cuda"] or p["cuda_version"] or ""
        missing = self.missing()
        try:
            if missing:
                # the forms of the inputs that are there are still checked
                dg_key(p["sglang_version"] or None, p["deep_gemm_version"], p["config_sha256"] or None,
                       p["precompile_args"], arch, cuda)
                if self.module.check_mode:
                    self.result.update(msg="cannot key the DeepGEMM cache yet: %s unknown (null)" % ", ".join(missing),
                                       would_build=True, would_install=True)
                    return cache_facts(p["cache_dir"], None)
                raise Failed("%s: null; expected %s" % (", ".join(missing), " and ".join(
                    {"sglang_version": "the installed sglang version (sglang_env's versions.sglang)",
                     "config_sha256": "the sha256 of the model's config.json (model_config's config_sha256)"}[m]
                    for m in missing)))
            key, inputs = dg_key(p["sglang_version"], p["deep_gemm_version"], p["config_sha256"],
                                 p["precompile_args"], arch, cuda)
        except DeepGemmError as exc:
            raise Failed(str(exc))
        decision = plan(key, p["cache_dir"], p["artifact_dir"])
        archive = archive_path(p["artifact_dir"], key)
        self.result.update(key=key, inputs=inputs, would_build=decision["would_build"],
                           would_install=decision["would_install"], reason=decision["reason"], archive=archive,
                           added=[], kept=[], seconds=None, output=[])
        if decision["artifact"]:
            try:
                added, kept, dummy = unpack(archive, p["cache_dir"], check_mode=True)
            except (DeepGemmError, OSError) as exc:
                raise Failed("the DeepGEMM artifact %s cannot be used: %s" % (archive, exc))
            self.result.update(added=added, kept=kept)
        if not decision["would_install"]:
            return cache_facts(p["cache_dir"], key)
        self.result["changed"] = True
        if self.module.check_mode:
            return dict(cache_facts(p["cache_dir"], key), current=True,
                        entry_count=len(set(list_entries(p["cache_dir"])) | set(self.result["added"])))
        built = None
        if decision["would_build"]:
            built = self.build(key, inputs, archive)
        try:
            added, kept, record = unpack(archive, p["cache_dir"])
        except (DeepGemmError, OSError) as exc:
            raise Failed("installing the DeepGEMM artifact %s into cache_dir %s failed: %s; the cache keeps what it "
                         "had" % (archive, p["cache_dir"], exc))
        self.result.update(added=added, kept=kept)
        write_marker(p["cache_dir"], key, {
            "key": key, "args": list(p["precompile_args"]), "from": "built here" if built else "artifact store",
            "seconds": record.get("seconds"), "built_by": record.get("host"), "installed_at": now()})
        return cache_facts(p["cache_dir"], key)

    def precompile(self, scratch):
        """Run the precompile with SGLANG_DG_CACHE_DIR=``scratch``; ``(seconds, stdout)``."""
        p = self.p
        argv = (["bash", "-c", SCRIPT, "compile_deep_gemm", p["env_script"], p["env_file"], scratch, p["python"]]
                + list(p["precompile_args"]) + ["--timeout", str(p["timeout"])])
        start = time.monotonic()
        rc, out, err = self.log.run(argv, env={"SGLANG_DG_CACHE_DIR": scratch}, cwd=p["artifact_dir"], check=False,
                                    timeout=p["timeout"] + GRACE)
        seconds = round(time.monotonic() - start, 1)
        if rc != 0:
            what = ("timed out after %ss (timeout %s + %ss)" % (p["timeout"] + GRACE, p["timeout"], GRACE)
                    if rc == 124 else "failed (rc=%d)" % rc)
            tail = _tail(out + "\n" + err)
            raise Failed("python -m sglang.compile_deep_gemm %s: %s %s; nothing was packed or installed. Its output "
                         "ends: %s" % (what, p["python"], " ".join(p["precompile_args"]), " | ".join(tail)),
                         rc=rc, stdout=out[-4000:], stderr=err[-4000:])
        self.result.update(seconds=seconds, output=_tail(out))
        return seconds, out

    def build(self, key, inputs, archive):
        """The precompile into a fresh directory, packed into ``archive`` (renamed into place whole)."""
        p = self.p
        if not os.path.isfile(p["env_file"]):
            raise Failed("env_file: %r does not exist; expected the SGLang env file the sglang role writes (sourced "
                         "before the precompile); nothing was precompiled" % p["env_file"])
        os.makedirs(p["artifact_dir"], 0o755, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".deepgemm-build-%s." % key[:8], dir=p["artifact_dir"])
        try:
            os.chmod(scratch, 0o755)
            seconds, dummy = self.precompile(scratch)
            directory = os.path.dirname(archive)
            created = not os.path.isdir(directory)
            os.makedirs(directory, 0o755, exist_ok=True)
            try:
                pack(scratch, archive, {"key": key, "inputs": inputs, "host": os.uname()[1], "seconds": seconds,
                                        "built_at": now(), "output": self.result["output"][-1:]})
            except BaseException as exc:
                if created:
                    shutil.rmtree(directory, ignore_errors=True)
                if isinstance(exc, DeepGemmError):
                    raise Failed("%s (precompile: %s -m sglang.compile_deep_gemm %s)"
                                 % (exc, p["python"], " ".join(p["precompile_args"])))
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return True


def main():
    module = build_module()
    finish(module, DeepGemmCache(module), "gpufleet_deepgemm")


if __name__ == "__main__":
    main()
