#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_ep_env
short_description: Read and install NCCL EP (nccl-extensions) in the torch environment, within NCCL EP's limits
version_added: 0.3.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - NCCL EP, NVIDIA's expert-parallel API on NCCL's device API, ships as the wheel C(nccl-extensions) (C(nccl.ep) over
    C(nccl/ep/lib/cu13/libnccl_ep.so); it compiles its kernels at first use). It requires C(nvidia-nccl-cu13==2.30.7)
    exactly (its C(cu13) extra), the NCCL the C(nccl) role pins for DeepEP V2.
  - This module reads NCCL EP in the environment of O(python) from its package metadata (no import, no GPU) -
    RV(ansible_facts.gpufleet_nccl_ep); the audit reads the same facts with the V(nccl_ep) set of
    M(gpufleet.deepep.node_stack) (the same reader).
  - With O(state=present) it installs C(nccl-extensions==<version>) and C(cuda-bindings==13.*) (the runtime part of
    the C(cu13) extra; never the extra's NCCL, which stays the C(nccl) role's pin, nor C(nvidia-cutlass-dsl), which
    C(nccl.ep) does not import), from an offline O(wheelhouse) checked against its C(SHA256SUMS) (or
    O(wheelhouse_checksums)) before anything is installed, from a hash lock (O(requirements_hashes), installed with
    C(--require-hashes --no-deps)), or, with O(require_hashes=false), from an index. The environment's NCCL is
    held at its version by a constraints file during the install, and checked unchanged after it.
  - Before installing, NCCL EP v0.1's limits are checked and a node outside them is refused with the reason, nothing
    installed - CUDA 13 only (torch C(+cu13x), C(nvidia-nccl-cu13)), NCCL O(nccl_version) exactly in the
    environment, GPUs of compute capability 9.0 or newer (O(compute_capabilities)), and an EP group of at most 8
    nodes (O(job_nodes)) and 64 GPUs (O(job_nodes) times O(gpus_per_node)).
  - Every command runs under a time limit (O(timeout)). Check mode reads and predicts; it installs nothing.
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
options:
  python:
    description: The interpreter of the torch environment, e.g. C(/opt/torch/.venv/bin/python); an absolute path or a
      name on C(PATH).
    type: str
    default: python3
  state:
    description: V(facts) only reads; V(present) installs (within the limits) and proves the install.
    type: str
    choices: [facts, present]
    default: facts
  version:
    description: The nccl-extensions release to install, C(N.N.N) (C(0.1.0)). Required with O(state=present).
    type: str
  nccl_version:
    description: The NCCL release the environment must hold (the one nccl-extensions O(version) requires exactly).
    type: str
    default: 2.30.7
  compute_capabilities:
    description: The node's GPUs' compute capabilities (C(9.0), C(10.0); M(gpufleet.deepep.gpu_topology)'s
      C(gpus[].compute_capability)); each must be 9.0 or newer. Empty - not checked.
    type: list
    elements: str
    default: []
  gpus_per_node:
    description: The node's GPU count, for the EP group's GPU limit (O(job_nodes) times this, at most 64).
    type: int
    default: 8
  job_nodes:
    description: How many nodes the largest EP group of this node spans (an inventory group of
      C(gpufleet_verify_groups)); at most 8.
    type: int
    default: 1
  wheelhouse:
    description: An offline wheelhouse (a directory of wheels with a C(SHA256SUMS) file) to install from, with
      C(--no-index); every wheel in it is checked against its checksum before anything is installed.
    type: path
  wheelhouse_checksums:
    description: C(wheel file name -> sha256) of the wheels in O(wheelhouse), in place of its C(SHA256SUMS).
    type: dict
  requirements_hashes:
    description: The hash lock of an install from an index - C(project==version -> [sha256]) of every package to
      install (the closure; installed with C(--require-hashes --no-deps)). NCCL itself is refused here (the C(nccl)
      role owns it).
    type: dict
    default: {}
  require_hashes:
    description: Refuse an install from an index without O(requirements_hashes) (a O(wheelhouse) is checked by its
      checksums instead).
    type: bool
    default: true
  index_url:
    description: pip's C(--index-url) for an install without a wheelhouse.
    type: str
  extra_index_urls:
    description: pip's C(--extra-index-url) values.
    type: list
    elements: str
    default: []
  find_links:
    description: pip's C(--find-links) values.
    type: list
    elements: str
    default: []
  no_index:
    description: pip's C(--no-index).
    type: bool
    default: false
  break_system_packages:
    description: pip's C(--break-system-packages) (an install into a system Python that is externally managed).
    type: bool
    default: false
  pip_extra_args:
    description: More arguments for C(pip install).
    type: list
    elements: str
    default: []
  env_script:
    description: The environment script whose C(NCCL_EP_JIT_CACHE_DIR) names NCCL EP's JIT cache (read only).
    type: path
    default: /opt/deepep/unified-env.sh
  timeout:
    description: Seconds each command may run (the probe, pip).
    type: int
    default: 900
"""

EXAMPLES = r"""
- name: Install NCCL EP from the site's checked wheelhouse
  gpufleet.deepep.nccl_ep_env:
    python: /opt/torch/.venv/bin/python
    state: present
    version: 0.1.0
    wheelhouse: /opt/deepep/wheelhouse/nccl-ep
    compute_capabilities: ["9.0"]
    gpus_per_node: 8
    job_nodes: 2

- name: Read NCCL EP
  gpufleet.deepep.nccl_ep_env:
    python: /opt/torch/.venv/bin/python
"""

RETURN = r"""
changed:
  description: Whether NCCL EP was (in check mode, would be) installed.
  returned: always
  type: bool
reasons:
  description: Why it was installed.
  returned: always
  type: list
  elements: str
  sample: [nccl-extensions is not installed in /opt/torch/.venv/bin/python]
commands:
  description: The commands run (in check mode, the install that would run).
  returned: always
  type: list
  elements: list
ansible_facts:
  description: Facts.
  returned: always
  type: complex
  contains:
    gpufleet_nccl_ep:
      description:
        - NCCL EP in the environment of O(python), after the run.
        - C(installed), C(version), C(location) (its site-packages), C(library) (the C(libnccl_ep.so) of the
          environment's CUDA major - the wheel ships C(lib/cu12) and C(lib/cu13) - else the first there) and
          C(library_cuda) (the CUDA major of its C(lib/cuNN)); C(requires_nccl) (the NCCL release its C(cu13) extra
          pins); C(nccl) (C(package), C(version) - what its C(nccl.h) says, the C(nccl) role's source build copied
          over the package's files included - C(package_version) - the pip metadata's - and C(cuda_major) of the
          environment's NCCL pip package);
          C(torch_cuda); C(dependencies) (C(nccl4py), C(cuda-core), C(cuda-bindings), C(cuda-pathfinder), C(numpy)
          -> version or null) and C(missing) (those absent while NCCL EP is installed); C(jit_cache_dir) (the env
          script's C(NCCL_EP_JIT_CACHE_DIR)) and C(jit_kernels) (the compiled kernels there); C(error) (why the
          environment could not be read).
        - C(checks) - C(library), C(cuda_13), C(nccl_version), C(dependencies), C(gpu_arch) (with
          O(compute_capabilities)), each C(check), C(status) (C(pass), C(fail) or C(not_applicable)), C(found),
          C(reason), C(fix).
      returned: always
      type: dict
      sample: {installed: true, version: 0.1.0, library_cuda: 13, requires_nccl: 2.30.7,
               nccl: {package: nvidia-nccl-cu13, version: 2.30.7, package_version: 2.30.7, cuda_major: 13},
               missing: [], jit_kernels: 4}
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl import NcclError
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl_ep import (
    NcclEpError,
    arch_value,
    check_release,
    hash_lines,
    install_specs,
    pip_argv,
    read_nccl_ep,
    refusals,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl_read import resolve_python
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._http import HttpInputError, check_sources, url_secrets
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.envscript import gather_env_script
from ansible_collections.gpufleet.deepep.plugins.module_utils._node.probes import gather_python
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import CommandLog, StepFailed
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_install import wheelhouse_problems


class NcclEpEnv(object):
    """One run: read, check the limits, install, prove."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.runner = CommandLog(timeout=self.p["timeout"])
        self.result = dict(changed=False, reasons=[], commands=self.runner.commands)

    def fail(self, msg, **extra):
        extra.update(self.result)
        self.module.fail_json(msg=msg, **extra)

    def python(self):
        """The interpreter, resolved as the nccl module resolves it (nccl_read.resolve_python)."""
        try:
            return resolve_python(self.p["python"], self.module.get_bin_path)
        except NcclError as exc:
            self.fail(to_native(exc))
        return None

    def read(self):
        def run(argv, timeout=None, env=None):
            return self.runner.quiet(argv, timeout=timeout, env=env)
        py = gather_python(self.resolved, run, self.p["timeout"])
        exports = gather_env_script("/", self.p["env_script"])["exports"]
        return read_nccl_ep(py, env_exports=exports, gpus=self.p["compute_capabilities"])

    def check_params(self):
        p = self.p
        try:
            if p["state"] == "present":
                check_release(p["version"], "version")
            check_release(p["nccl_version"], "nccl_version")
            for cap in p["compute_capabilities"]:
                arch_value(cap)
            self.lock = hash_lines(p["requirements_hashes"])
        except NcclEpError as exc:
            self.fail(to_native(exc))
        if p["job_nodes"] < 1 or p["gpus_per_node"] < 1:
            self.fail("job_nodes %r and gpus_per_node %r: expected positive integers (the nodes of the largest EP "
                      "group and the node's GPU count)" % (p["job_nodes"], p["gpus_per_node"]))
        try:
            check_sources(p["index_url"], p["extra_index_urls"], p["find_links"])
        except HttpInputError as exc:
            self.fail(to_native(exc))
        if p["wheelhouse"] and not os.path.isdir(p["wheelhouse"]):
            self.fail("wheelhouse %s is not a directory; expected the offline wheelhouse of NCCL EP (its wheels and "
                      "SHA256SUMS)" % p["wheelhouse"])

    def check_wheelhouse(self):
        house = self.p["wheelhouse"]
        problems = wheelhouse_problems(house, self.p["wheelhouse_checksums"])
        if problems:
            self.fail("wheelhouse %s failed its checksums, nothing installed: %s" % (house, "; ".join(problems)))

    def plan(self, facts):
        """Why an install is needed ([] when NCCL EP is there at the version with what it imports)."""
        want = self.p["version"]
        if not facts["installed"]:
            return ["nccl-extensions is not installed in %s" % self.resolved]
        reasons = []
        if facts["version"] != want:
            reasons.append("nccl-extensions %s is installed, %s is wanted" % (facts["version"], want))
        if facts["missing"]:
            reasons.append("nccl.ep imports %s, not installed" % ", ".join(facts["missing"]))
        if not facts["library"]:
            reasons.append("nccl-extensions %s has no nccl/ep/lib/cu*/libnccl_ep.so" % facts["version"])
        return reasons

    def install(self, facts):
        p = self.p
        if p["wheelhouse"]:
            self.check_wheelhouse()
        elif not self.lock and p["require_hashes"]:
            self.fail("requirements_hashes is empty, so nccl-extensions %s would be installed from %s without a hash "
                      "check; install from a checksummed wheelhouse, give the hash lock (project==version -> "
                      "[sha256]), or set require_hashes: false"
                      % (p["version"], p["index_url"] or ", ".join(p["find_links"]) or "the default index"))
        tmp = tempfile.mkdtemp(prefix="gpufleet-nccl-ep-")
        try:
            nccl = facts["nccl"]
            constraint = os.path.join(tmp, "constraints.txt")
            with open(constraint, "w", encoding="utf-8") as handle:
                handle.write("%s==%s\n" % (nccl["package"], nccl["package_version"]))
            requirements = None
            if self.lock and not p["wheelhouse"]:
                requirements = os.path.join(tmp, "requirements.txt")
                with open(requirements, "w", encoding="utf-8") as handle:
                    handle.write("\n".join(self.lock) + "\n")
            argv = pip_argv(self.resolved, specs=install_specs(p["version"]), wheelhouse=p["wheelhouse"],
                            requirements_file=requirements, constraint_file=constraint, index_url=p["index_url"],
                            extra_index_urls=p["extra_index_urls"], find_links=p["find_links"],
                            no_index=p["no_index"], break_system_packages=p["break_system_packages"],
                            extra_args=p["pip_extra_args"])
            try:
                self.runner.run(argv, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
            except StepFailed as exc:
                self.fail("%s; nothing of NCCL EP's was proved installed (is nccl-extensions==%s there, with "
                          "cuda-bindings 13?)" % (exc.msg, p["version"]), rc=exc.rc, cmd=exc.cmd, **exc.extra)
        finally:
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)

    def prove(self, before, after):
        want = self.p["version"]
        problems = []
        if after["version"] != want:
            problems.append("nccl-extensions is %s after the install, not %s" % (after["version"], want))
        if after["missing"]:
            problems.append("nccl.ep imports %s, still not installed" % ", ".join(after["missing"]))
        if (after["nccl"] or {}).get("version") != (before["nccl"] or {}).get("version"):
            problems.append("the install moved the environment's NCCL from %s to %s"
                            % ((before["nccl"] or {}).get("version"), (after["nccl"] or {}).get("version")))
        if after["requires_nccl"] and after["requires_nccl"] != self.p["nccl_version"]:
            problems.append("nccl-extensions %s requires NCCL %s, not nccl_version %s"
                            % (after["version"], after["requires_nccl"], self.p["nccl_version"]))
        if problems:
            self.fail("; ".join(problems), ansible_facts={"gpufleet_nccl_ep": after})

    def run(self):
        self.check_params()
        self.resolved = self.python()
        facts = self.read()
        if facts["error"]:
            self.fail("cannot read the environment of %s: %s" % (self.resolved, facts["error"]),
                      ansible_facts={"gpufleet_nccl_ep": facts})
        if self.p["state"] == "facts":
            self.module.exit_json(ansible_facts={"gpufleet_nccl_ep": facts}, **self.result)
        p = self.p
        refused = refusals(facts, p["nccl_version"], p["compute_capabilities"], p["job_nodes"], p["gpus_per_node"])
        if refused:
            self.fail("NCCL EP %s is refused on this node, nothing installed: %s" % (p["version"], "; ".join(refused)),
                      refused=refused, ansible_facts={"gpufleet_nccl_ep": facts})
        reasons = self.plan(facts)
        self.result.update(changed=bool(reasons), reasons=reasons)
        if reasons and not self.module.check_mode:
            self.install(facts)
            after = self.read()
            self.prove(facts, after)
            facts = after
        self.module.exit_json(ansible_facts={"gpufleet_nccl_ep": facts}, **self.result)


def build_module():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="str", default="python3"),
            state=dict(type="str", choices=["facts", "present"], default="facts"),
            version=dict(type="str"),
            nccl_version=dict(type="str", default="2.30.7"),
            compute_capabilities=dict(type="list", elements="str", default=[]),
            gpus_per_node=dict(type="int", default=8),
            job_nodes=dict(type="int", default=1),
            wheelhouse=dict(type="path"),
            wheelhouse_checksums=dict(type="dict"),
            requirements_hashes=dict(type="dict", default={}),
            require_hashes=dict(type="bool", default=True),
            index_url=dict(type="str"),
            extra_index_urls=dict(type="list", elements="str", default=[]),
            find_links=dict(type="list", elements="str", default=[]),
            no_index=dict(type="bool", default=False),
            break_system_packages=dict(type="bool", default=False),
            pip_extra_args=dict(type="list", elements="str", default=[]),
            env_script=dict(type="path", default="/opt/deepep/unified-env.sh"),
            timeout=dict(type="int", default=900),
        ),
        required_if=[("state", "present", ("version",))],
        supports_check_mode=True,
    )
    for value in [module.params["index_url"]] + list(module.params["extra_index_urls"] or []):
        module.no_log_values.update(url_secrets(value))
    return module


def _main():
    module = build_module()
    NcclEpEnv(module).run()


def main():
    guarded("nccl_ep_env", _main)


if __name__ == "__main__":
    main()
