#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: efa_stack
short_description: Read and install AWS EFA's software (the EFA installer) for NCCL's GIN over EFA
version_added: 0.3.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - On AWS P5, P5en and P6 instances the GPUs reach each other across nodes through EFA devices. DeepEP V2 runs there
    over NCCL's GIN as EFA-GDA (NCCL 2.31.2 or newer), which needs the EFA installer's software - the C(efa) kernel
    module, rdma-core, libfabric with its C(efa) provider and the aws-ofi-nccl plugin NCCL loads
    (C(/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so)).
  - This module reads that software - RV(ansible_facts.gpufleet_efa) - and judges it against O(floors) (the efa
    fabric's C(stack_min) in the collection's profile object), one check each with its fix.
  - With O(state=present), where a check fails it verifies the installer tarball O(installer) against O(checksum)
    before anything runs, unpacks it in a staging directory, runs its C(efa_installer.sh) with O(installer_args)
    under O(timeout), removes the staging directory, and reads the node again; it fails naming every check that still
    fails. A node whose checks pass is left as it is.
  - Check mode reads and predicts; it unpacks and installs nothing.
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
options:
  state:
    description: V(facts) only reads; V(present) installs where a check fails, and proves the install.
    type: str
    choices: [facts, present]
    default: facts
  installer:
    description: The EFA installer tarball on the node (C(aws-efa-installer-<version>.tar.gz)); required with
      O(state=present) where something is to be installed.
    type: path
  checksum:
    description: The installer tarball's sha256, C(sha256:<64 hex digits>) or the bare digits; required with
      O(installer) unless O(allow_unverified).
    type: str
  allow_unverified:
    description: Run an installer whose checksum is not given (not for production).
    type: bool
    default: false
  installer_args:
    description: The arguments of C(efa_installer.sh) (C(-y) answers its questions; C(--skip-kmod) where the kernel
      module is managed elsewhere).
    type: list
    elements: str
    default: ["-y"]
  floors:
    description: The versions the node must hold - C(efa_installer), C(libfabric), C(aws_ofi_nccl), C(efa_kmod)
      (each C(N.N.N); a missing one is not judged).
    type: dict
    default: {}
  staging_dir:
    description: The parent of the staging directory the installer is unpacked in.
    type: path
    default: /var/tmp
  timeout:
    description: Seconds each command may run (the installer builds the kernel module with DKMS).
    type: int
    default: 1800
"""

EXAMPLES = r"""
- name: Read EFA's software
  gpufleet.deepep.efa_stack:
    floors: "{{ 'efa' | gpufleet.deepep.fabric('stack_min') }}"

- name: Install it from the installer tarball where a check fails
  gpufleet.deepep.efa_stack:
    state: present
    installer: /var/cache/gpufleet/efa/aws-efa-installer-1.50.0.tar.gz
    checksum: "sha256:{{ efa_installer_sha256 }}"
    floors: "{{ 'efa' | gpufleet.deepep.fabric('stack_min') }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts read (after the install where there was one).
  returned: always
  type: dict
  contains:
    gpufleet_efa:
      description:
        - C(installed) (the installer's package list is there), C(installer_version), C(packages) (name -> version),
          C(libfabric_version), C(efa_provider) (libfabric lists it), C(aws_ofi_nccl) (C(library), C(version)),
          C(efa_module) (C(loaded), C(version)), and C(checks) - C(check), C(ok), C(found), C(expected), C(fix) each.
      type: dict
      sample: {installed: true, installer_version: 1.50.0, libfabric_version: 2.6.0amzn1.0, efa_provider: true,
               aws_ofi_nccl: {library: /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so, version: 1.21.0},
               efa_module: {loaded: true, version: 3.3.0}, packages: {libfabric-aws: 2.6.0amzn1.0},
               checks: [{check: installer, ok: true, found: 1.50.0, expected: ">= 1.50.0", fix: null}]}
reasons:
  description: Why the installer runs (each failed check); empty when nothing is to be done.
  returned: always
  type: list
  elements: str
  sample: ["installer: found null, expected >= 1.50.0"]
commands:
  description: The commands run that changed the node (argv lists).
  returned: always
  type: list
  elements: list
  sample: [["/var/tmp/gpufleet-efa-x/aws-efa-installer/efa_installer.sh", "-y"]]
"""

import os
import re
import shutil
import tarfile
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.efa import EfaError, checks, numeric, read_efa
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import file_sha256
from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import CommandLog, StepFailed

# Where the node's files are read (tests point it at a fixture tree).
_ROOT = "/"
_SHA256_RE = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")
_FLOORS = ("efa_installer", "libfabric", "aws_ofi_nccl", "efa_kmod")


class EfaStack(object):
    """One run: read, judge, install where a check fails, prove."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.runner = CommandLog(timeout=self.p["timeout"])
        self.result = dict(changed=False, reasons=[], commands=self.runner.commands)

    def fail(self, msg, **extra):
        extra.update(self.result)
        self.module.fail_json(msg=msg, **extra)

    def check_params(self):
        p = self.p
        if p["timeout"] < 1:
            self.fail("timeout %r: expected a positive number of seconds" % (p["timeout"],))
        for name, value in sorted((p["floors"] or {}).items()):
            if name not in _FLOORS:
                self.fail("floors has %r; expected only %s" % (name, ", ".join(_FLOORS)))
            if value is not None and numeric(value) is None:
                self.fail("floors.%s %r is not a version; expected N.N.N (2.6.0)" % (name, value))
        if p["checksum"] and not _SHA256_RE.match(p["checksum"].strip()):
            self.fail("checksum %r is not a sha256; expected sha256:<64 hex digits>" % (p["checksum"],))

    def read(self):
        facts = read_efa(_ROOT, self.runner.quiet)
        try:
            facts["checks"] = checks(facts, self.p["floors"] or {})
        except EfaError as exc:
            self.fail(to_native(exc))
        return facts

    def verify_installer(self):
        p = self.p
        path = p["installer"]
        if not path:
            self.fail("installer is not given; expected the EFA installer tarball on the node "
                      "(aws-efa-installer-<version>.tar.gz) to install what the checks name: %s"
                      % "; ".join(self.result["reasons"]))
        if not os.path.isfile(path):
            self.fail("installer %s is not a file; expected the EFA installer tarball (aws-efa-installer-<version>"
                      ".tar.gz)" % path)
        if not p["checksum"]:
            if not p["allow_unverified"]:
                self.fail("checksum is not given for installer %s, so it would run unverified; give its sha256 "
                          "(sha256:<64 hex digits>) or set allow_unverified: true (not for production)" % path)
            return
        want = _SHA256_RE.match(p["checksum"].strip()).group(1).lower()
        found = file_sha256(path)
        if found != want:
            self.fail("installer %s has sha256 %s, expected %s: nothing was run" % (path, found, want))

    def install(self):
        stage = tempfile.mkdtemp(prefix="gpufleet-efa-", dir=self.p["staging_dir"])
        try:
            try:
                with tarfile.open(self.p["installer"], "r:*") as tar:
                    for member in tar.getmembers():
                        name = os.path.normpath(member.name)
                        if name.startswith("..") or os.path.isabs(name) or member.issym() or member.islnk():
                            self.fail("installer %s holds %r outside its own tree or a link; expected a plain "
                                      "tarball" % (self.p["installer"], member.name))
                    tar.extractall(stage)  # nosec - members checked above
            except (tarfile.TarError, OSError) as exc:
                self.fail("installer %s is not a readable tarball: %s" % (self.p["installer"], to_native(exc)))
            scripts = [os.path.join(dirpath, "efa_installer.sh") for dirpath, dummy, files in os.walk(stage)
                       if "efa_installer.sh" in files]
            if len(scripts) != 1:
                self.fail("installer %s holds %d efa_installer.sh; expected one (the EFA installer's tarball)"
                          % (self.p["installer"], len(scripts)))
            argv = ["bash", scripts[0]] + list(self.p["installer_args"])
            try:
                self.runner.run(argv, cwd=os.path.dirname(scripts[0]))
            except StepFailed as exc:
                self.fail("%s; the EFA installer did not finish (see its output)" % exc.msg, rc=exc.rc, cmd=exc.cmd,
                          **exc.extra)
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def run(self):
        self.check_params()
        facts = self.read()
        if self.p["state"] == "facts":
            self.module.exit_json(ansible_facts={"gpufleet_efa": facts}, **self.result)
        failed = [c for c in facts["checks"] if c["ok"] is False]
        reasons = ["%s: found %s, expected %s" % (c["check"], c["found"], c["expected"]) for c in failed]
        self.result.update(changed=bool(reasons), reasons=reasons)
        if reasons and not self.module.check_mode:
            self.verify_installer()
            self.install()
            facts = self.read()
            still = [c for c in facts["checks"] if c["ok"] is False]
            if still:
                told = ["%s: found %s, expected %s. Fix: %s" % (c["check"], c["found"], c["expected"], c["fix"])
                        for c in still]
                self.fail("after the EFA installer: %s" % "; ".join(told), ansible_facts={"gpufleet_efa": facts})
        self.module.exit_json(ansible_facts={"gpufleet_efa": facts}, **self.result)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["facts", "present"], default="facts"),
            installer=dict(type="path"),
            checksum=dict(type="str"),
            allow_unverified=dict(type="bool", default=False),
            installer_args=dict(type="list", elements="str", default=["-y"]),
            floors=dict(type="dict", default={}),
            staging_dir=dict(type="path", default="/var/tmp"),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )


def _main():
    module = build_module()
    EfaStack(module).run()


def main():
    guarded("efa_stack", _main)


if __name__ == "__main__":
    main()
