#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_env
short_description: Read and pin the NCCL of a Python (torch) environment
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - DeepEP V2 needs NCCL 2.30.4 or newer at build and at run time, and aborts with C(Duplicate NCCL runtime) when a
    second NCCL is loaded beside the one torch loads. Torch loads the library of the pip package
    C(nvidia-nccl-cu13) (or C(nvidia-nccl-cu12)), C(<site-packages>/nvidia/nccl/lib/libnccl.so.2), so an
    C(LD_PRELOAD) of another C(libnccl) is no fix; the pip package's own files must be the wanted NCCL.
  - This module reads the NCCL of the environment of O(python) - the pip package and its version (package metadata),
    C(nvidia/nccl/include/nccl.h) (C(NCCL_MAJOR)/C(NCCL_MINOR)/C(NCCL_PATCH)) and C(nvidia/nccl/lib/libnccl.so.2)
    (sha256 and the C(NCCL version X.Y.Z) string compiled into it). It needs no GPU and does not import torch.
  - With O(state=present) it pins NCCL O(version) there. O(source=pip) installs C(<package>==<version>) with
    C(--no-deps) (torch pins an older NCCL; its other requirements are left alone). O(source=build) copies an NCCL
    source build (O(build_dir), the C(build/) of C(make src.build)) over the pip package's files - C(include/**) and
    C(lib/libnccl.so.2) - after keeping the package's original files once in O(backup_dir); each file goes to a
    temporary file in the same directory and is renamed into place, and files already equal (by sha256) are left alone.
  - To keep the pin, it writes the line C(<package>==<version>) into a pip constraints file (O(constraint_file),
    other lines kept) and names that file in the C([install] constraint) setting of the environment's pip
    configuration (O(pin_pip_config)). A later C(pip install) that needs another NCCL then fails with a resolver
    conflict instead of replacing it (DeepEP issue 710). With O(source=build) the line holds the pip package at the
    version whose files were replaced, so pip leaves those files alone.
  - It records the pin in C(<site-packages>/nvidia/nccl/.gpufleet-pin.json) (the files' sha256). On a rerun, a pin that
    no longer holds (the package was reinstalled, downgraded or removed, a file was replaced) is put back, with the
    reasons in RV(reasons).
  - To read the NCCL of an environment without pinning, gather the V(nccl) set of M(gpufleet.deepep.node_stack)
    (the same reader, the same C(gpufleet_nccl) facts); RV(ansible_facts.gpufleet_nccl.drift) says why a recorded pin
    no longer holds.
options:
  python:
    description:
      - The interpreter of the environment (the one that imports torch and DeepEP), e.g. C(/opt/torch/.venv/bin/python).
      - An absolute path, or a name looked up on C(PATH). It is run as C(python -c <probe>) to ask for its
        site-packages directories and prefix, and as C(python -m pip install ...) with O(source=pip).
    type: str
    default: python3
  state:
    description:
      - V(present) pins O(version). (To only read, gather V(nccl) with M(gpufleet.deepep.node_stack).)
    type: str
    choices: [present]
    default: present
  version:
    description:
      - The NCCL release to pin, C(N.N.N) (for example C(2.30.7); not C(v2.30.7-1), not C(2.30)).
      - Required. With O(source=build) the C(nccl.h) of O(build_dir) must declare it.
    type: str
  source:
    description:
      - Where the wanted NCCL comes from. V(pip) installs the pip package at O(version); V(build) copies the files of
        an NCCL source build (O(build_dir)) over the installed pip package's files.
    type: str
    choices: [pip, build]
    default: pip
  build_dir:
    description:
      - With O(source=build), the output directory of NCCL's C(make src.build) (C(BUILDDIR), by default the source
        tree's C(build/)) - it must hold C(include/nccl.h) and C(lib/libnccl.so.2).
    type: path
  package:
    description:
      - The pip project of NCCL, C(nvidia-nccl-cu13) for CUDA 13 torch wheels, C(nvidia-nccl-cu12) for CUDA 12 ones.
      - 'Default: the NCCL pip package installed in the environment; when none is, the one matching the CUDA of the
        installed torch (C(+cu130) -> C(nvidia-nccl-cu13)).'
    type: str
  index_url:
    description: The package index for O(source=pip) (C(pip --index-url)); unset, pip's own configuration decides.
    type: str
  extra_index_urls:
    description: Further package indexes (C(pip --extra-index-url)).
    type: list
    elements: str
    default: []
  find_links:
    description: Local wheel directories or URLs (C(pip --find-links)), for air-gapped sites.
    type: list
    elements: str
    default: []
  no_index:
    description: Use only O(find_links) (C(pip --no-index)).
    type: bool
    default: false
  break_system_packages:
    description:
      - Pass C(--break-system-packages) to pip, needed to install into an externally managed system Python (PEP 668,
        Debian 12, Ubuntu 24.04). Not needed for a virtualenv.
    type: bool
    default: false
  pip_extra_args:
    description: Further arguments for C(pip install), one list entry per argument.
    type: list
    elements: str
    default: []
  constraint_file:
    description:
      - The pip constraints file that holds the pin. Only the line of the NCCL package is managed; other lines are kept.
      - 'Default: C(<venv>/gpufleet-constraints.txt) for a virtualenv, C(/etc/gpufleet/pip-constraints.txt) for the
        system Python.'
    type: path
  pin_pip_config:
    description:
      - Name O(constraint_file) in the C([install] constraint) setting of O(pip_config_file), so every later
        C(pip install) of this environment honours it. C(PIP_CONSTRAINT) in the environment overrides it.
      - 'Default: true for a virtualenv (its C(pip.conf) is read by that environment''s pip only), false for the system
        Python, where C(<sys.prefix>/pip.conf) (C(/usr/pip.conf)) is read by every pip run by a Python of that prefix:
        set it to true there on purpose.'
    type: bool
  pip_config_file:
    description:
      - The pip configuration file to edit with O(pin_pip_config). Other sections and settings are kept.
      - 'Default: C(<sys.prefix>/pip.conf), the "site" configuration pip reads for this interpreter
        (C(<venv>/pip.conf) for a virtualenv).'
    type: path
  backup_dir:
    description:
      - With O(source=build), where the pip package's original C(include/) and C(lib/) files are kept, once, before the
        first copy (with a C(manifest.json)). C(pip install --force-reinstall <package>==<its version> --no-deps) is the
        other way back.
      - 'Default: C(<site-packages>/nvidia/nccl/.gpufleet-orig).'
    type: path
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
notes:
  - The pip package's RECORD keeps the hashes of the files pip installed; C(pip uninstall) and reinstalls still work
    after O(source=build), and put the package's own files back (which a rerun then undoes).
  - Run the module (the C(nccl) role) again after installs that may touch NCCL (DeepEP, SGLang, vLLM), at the end of
    C(site.yml); what the constraint did not stop is put back there. Tools that do not read C(pip.conf) (uv,
    C(PIP_CONFIG_FILE=/dev/null)) are not stopped by the constraint.
  - C(torch.cuda.nccl.version()) is not used; it needs a CUDA device.
seealso:
  - module: gpufleet.deepep.deepep_build
  - module: gpufleet.deepep.node_stack
    description: Its V(nccl) gather set reads C(gpufleet_nccl) without pinning.
"""

EXAMPLES = r"""
- name: Read the NCCL of the torch environment (without pinning)
  gpufleet.deepep.node_stack:
    gather: [nccl]
    python: /opt/torch/.venv/bin/python

- name: Pin NCCL 2.30.7 from PyPI for DeepEP V2
  gpufleet.deepep.nccl_env:
    python: /opt/torch/.venv/bin/python
    version: 2.30.7

- name: Pin NCCL 2.30.7 from an air-gapped wheel directory
  gpufleet.deepep.nccl_env:
    python: /opt/torch/.venv/bin/python
    version: 2.30.7
    find_links: [/srv/wheels]
    no_index: true

- name: Pin an NCCL built from source (make -j32 src.build NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90")
  gpufleet.deepep.nccl_env:
    python: /opt/torch/.venv/bin/python
    version: 2.30.7
    source: build
    build_dir: /opt/deepep/nccl/build-2.30.7-sm90

- name: Build DeepEP V2 against that NCCL
  gpufleet.deepep.deepep_build:
    src: /opt/deepep/src/DeepEP
    generation: v2
    python: /opt/torch/.venv/bin/python
    nccl_root: "{{ ansible_facts.gpufleet_nccl.nccl_root }}"
"""

RETURN = r"""
changed:
  description: Whether the pin was (or, in check mode, would be) made or put back.
  returned: always
  type: bool
  sample: true
reasons:
  description: Why something changed (or would change), one sentence each; empty when nothing did.
  returned: always
  type: list
  elements: str
  sample:
    - "nvidia-nccl-cu13 was 2.28.9 when NCCL 2.30.7 was pinned and is 2.27.3 now: a later install replaced it (DeepEP #710)"
    - "2 file(s) of /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl differ from build_dir (nccl.h says 2.27.3, wanted 2.30.7)"
commands:
  description: The commands run (argv lists); in check mode the ones that would run.
  returned: always
  type: list
  elements: list
  sample: [["/opt/torch/.venv/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-deps",
            "nvidia-nccl-cu13==2.30.7"]]
copied:
  description: With O(source=build), the files copied (or to copy) over the pip package's, relative to its directory.
  returned: always
  type: list
  elements: str
  sample: [include/nccl.h, lib/libnccl.so.2]
backed_up:
  description: Whether the pip package's original files were (or would be) kept in O(backup_dir) by this run.
  returned: always
  type: bool
  sample: true
diff:
  description: Before and after of the constraints file, the pip configuration and the NCCL files (diff mode only).
  returned: when diff mode is on
  type: list
  elements: dict
  sample:
    - before: "# pip constraints ...\nnvidia-nccl-cu13==2.28.9\n"
      after: "# pip constraints ...\nnvidia-nccl-cu13==2.30.7\n"
      before_header: /opt/torch/.venv/gpufleet-constraints.txt
      after_header: /opt/torch/.venv/gpufleet-constraints.txt
ansible_facts:
  description: Facts about the NCCL of the environment.
  returned: always
  type: dict
  contains:
    gpufleet_nccl:
      description: The NCCL of the environment of O(python), as it is after the run (as it is now in check mode).
      returned: always
      type: dict
      contains:
        python:
          description: The interpreter (resolved path).
          type: str
          sample: /opt/torch/.venv/bin/python
        python_version:
          description: Its version.
          type: str
          sample: 3.12.3
        prefix:
          description: Its C(sys.prefix).
          type: str
          sample: /opt/torch/.venv
        virtualenv:
          description: Whether the interpreter is a virtualenv (C(<prefix>/pyvenv.cfg) exists).
          type: bool
          sample: true
        site_packages:
          description: Its site-packages directories, in search order.
          type: list
          elements: str
          sample: [/opt/torch/.venv/lib/python3.12/site-packages]
        torch_version:
          description: The installed torch (package metadata), null when none.
          type: str
          sample: 2.11.0+cu130
        package:
          description: The NCCL pip project (installed, or to install), null when none is known.
          type: str
          sample: nvidia-nccl-cu13
        package_version:
          description: The installed version of RV(ansible_facts.gpufleet_nccl.package) (metadata), null when not installed.
          type: str
          sample: 2.28.9
        nccl_root:
          description:
            - The pip package's directory C(<site-packages>/nvidia/nccl) (C(include/), C(lib/)), null when not installed.
              Give it to M(gpufleet.deepep.deepep_build) as C(nccl_root).
          type: str
          sample: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
        version:
          description: The NCCL the environment uses - the version its C(nccl.h) declares (else the library's), null when unknown.
          type: str
          sample: 2.30.7
        header_path:
          description: C(<nccl_root>/include/nccl.h), null when absent.
          type: str
          sample: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/include/nccl.h
        header_version:
          description: The version C(nccl.h) declares.
          type: str
          sample: 2.30.7
        library_path:
          description: C(<nccl_root>/lib/libnccl.so.2), null when absent.
          type: str
          sample: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
        library_version:
          description: The version compiled into the library (C(NCCL version X.Y.Z)), else its file name's, else null.
          type: str
          sample: 2.30.7
        library_sha256:
          description: The library's sha256.
          type: str
          sample: 3b7e3e1f3d0b3f7f0f14a0c1c1a4a0e0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6
        source:
          description: Where the pinned NCCL came from (V(pip) or V(build), from the pin record); V(pip) for an unpinned pip package; null without one.
          type: str
          sample: build
        pinned:
          description:
            - Whether a pin holds - the pin record's files are there unchanged, the constraints file holds the package's
              line and, where O(pin_pip_config) applies, the pip configuration names the file.
          type: bool
          sample: true
        pin:
          description: The pin record (C(version), C(source), C(package), C(package_version), C(build_dir), C(constraint_file), C(files)), null when none.
          type: dict
          sample: {"version": "2.30.7", "source": "build", "package": "nvidia-nccl-cu13", "package_version": "2.28.9"}
        drift:
          description: Why the recorded pin does not hold (before this run put it back), one sentence each.
          type: list
          elements: str
          sample: ["nvidia-nccl-cu13 was 2.28.9 when NCCL 2.30.7 was pinned and is 2.27.3 now: a later install replaced it (DeepEP #710)"]
        constraint_file:
          description: The pip constraints file.
          type: str
          sample: /opt/torch/.venv/gpufleet-constraints.txt
        constraint_version:
          description: The version the constraints file holds for the package, null when none.
          type: str
          sample: 2.28.9
        pip_config_file:
          description: The pip configuration file considered.
          type: str
          sample: /opt/torch/.venv/pip.conf
        pip_config_pins:
          description: Whether that file names the constraints file in C([install] constraint).
          type: bool
          sample: true
        backup_dir:
          description: Where the pip package's original files are kept, null when no package is installed.
          type: str
          sample: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/.gpufleet-orig
        backup:
          description: The backup's manifest (C(package), C(package_version), C(header_version), C(files)), null when there is no backup.
          type: dict
          sample: {"package": "nvidia-nccl-cu13", "package_version": "2.28.9", "header_version": "2.28.9"}
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._http import HttpInputError, check_sources, url_secrets
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    copy_atomic,
    CopyMismatch,
    file_sha256,
    write_atomic,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import CommandLog, StepFailed
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl import (
    BACKUP_MANIFEST,
    LIB_NAME,
    PIN_NAME,
    NcclError,
    check_project,
    check_release,
    constraint_text,
    describe_build_dir,
    package_files,
    pin_record,
    pip_conf_text,
    pip_install_argv,
    plan_overlay,
    build_dir_files,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl_read import (
    NcclProbeError,
    empty_facts,
    probe_python,
    read_nccl,
    resolve_python,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._versions import NCCL_PIP_PROJECTS


def build_module():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="str", default="python3"),
            state=dict(type="str", choices=["present"], default="present"),
            version=dict(type="str"),
            source=dict(type="str", choices=["pip", "build"], default="pip"),
            build_dir=dict(type="path"),
            package=dict(type="str"),
            index_url=dict(type="str"),
            extra_index_urls=dict(type="list", elements="str", default=[]),
            find_links=dict(type="list", elements="str", default=[]),
            no_index=dict(type="bool", default=False),
            break_system_packages=dict(type="bool", default=False),
            pip_extra_args=dict(type="list", elements="str", default=[]),
            constraint_file=dict(type="path"),
            pin_pip_config=dict(type="bool"),
            pip_config_file=dict(type="path"),
            backup_dir=dict(type="path"),
        ),
        required_if=[("state", "present", ("version",)), ("source", "build", ("build_dir",))],
        supports_check_mode=True,
    )
    # A password in a package source is refused (check_source), and kept out of the result (invocation too).
    for value in [module.params["index_url"]] + list(module.params["extra_index_urls"] or []):
        module.no_log_values.update(url_secrets(value))
    return module


class NcclEnv(object):
    """Read, decide and act for one run; ``result`` is what the module returns."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.runner = CommandLog()
        self.result = dict(changed=False, reasons=[], commands=self.runner.commands, copied=[], backed_up=False,
                           ansible_facts=dict(gpufleet_nccl=empty_facts()))
        self.facts = self.result["ansible_facts"]["gpufleet_nccl"]

    def fail(self, msg, **extra):
        extra.update(self.result)
        self.module.fail_json(msg=msg, **extra)

    # --- read (module_utils._comm.nccl_read, shared with node_stack's nccl set) ----------------------

    def probe(self):
        try:
            self.python = resolve_python(self.p["python"], self.module.get_bin_path)
            probed, self.install_site = probe_python(
                self.python, lambda argv: self.runner.run(argv, check=False, record=False))
        except NcclProbeError as exc:
            self.fail(to_native(exc), **exc.extra)
        except NcclError as exc:
            self.fail(to_native(exc))
        self.facts.update(probed)

    def read(self):
        """Everything about the environment's NCCL, into the facts."""
        state = read_nccl(self.facts, self.install_site, project=self.project, backup_dir=self.p["backup_dir"],
                          constraint_file=self.p["constraint_file"], pip_config_file=self.p["pip_config_file"],
                          pin_pip_config=self.p["pin_pip_config"])
        for key, value in state.items():
            setattr(self, key, value)

    # --- decide ---------------------------------------------------------------------------------

    def decide_pip(self, version):
        facts = self.facts
        pkg = self.package
        reasons = []
        if pkg is None:
            reasons.append("no NCCL pip package is installed for %s: install %s==%s" % (self.python, self.project,
                                                                                        version))
        elif pkg["version"] != version:
            reasons.append("%s %s is installed, NCCL %s is wanted" % (pkg["project"], pkg["version"], version))
        else:
            if facts["header_version"] != version:
                reasons.append("%s declares NCCL %s, not %s: its files were replaced; reinstalling %s==%s"
                               % (facts["header_path"] or "include/nccl.h of %s" % self.package_dir,
                                  facts["header_version"], version, pkg["project"], version))
            elif facts["library_version"] and facts["library_version"] != version:
                reasons.append("%s is NCCL %s, not %s: reinstalling %s==%s" % (
                    facts["library_path"], facts["library_version"], version, pkg["project"], version))
            elif self.pin and self.pin.get("source") == "pip" and facts["drift"]:
                reasons.extend(facts["drift"])
        self.install_argv = None
        if reasons:
            if self.pin and facts["drift"]:
                reasons = [r for r in facts["drift"] if r not in reasons] + reasons
            self.install_argv = pip_install_argv(
                self.python, self.project, version, index_url=self.p["index_url"],
                extra_index_urls=self.p["extra_index_urls"], find_links=self.p["find_links"],
                no_index=self.p["no_index"], force_reinstall=bool(pkg and pkg["version"] == version),
                break_system_packages=self.p["break_system_packages"], extra_args=self.p["pip_extra_args"])
            self.runner.commands.append(self.install_argv)
        return reasons

    def decide_build(self, version):
        pkg = self.package
        if pkg is None:
            self.fail("source=build copies the NCCL build over the files of the environment's NCCL pip package, but "
                      "%s has none (looked for %s in %s); install it first (torch brings it; or source=pip)"
                      % (self.python, self.project or " / ".join(NCCL_PIP_PROJECTS),
                         ", ".join(self.facts["site_packages"])))
        try:
            self.build = describe_build_dir(self.p["build_dir"], version)
            self.plans = plan_overlay(self.package_dir, build_dir_files(self.p["build_dir"]))
        except NcclError as exc:
            self.fail(to_native(exc))
        except (IOError, OSError) as exc:
            self.fail("cannot read build_dir %s: %s" % (self.p["build_dir"], to_native(exc)))
        changed = [plan for plan in self.plans if plan["changed"]]
        reasons = []
        if changed:
            drift = self.facts["drift"] if self.pin and self.pin.get("source") == "build" else []
            reasons.extend(drift)
            reasons.append("%d file(s) of %s differ from build_dir %s (nccl.h says %s, wanted %s)"
                           % (len(changed), self.package_dir, self.p["build_dir"], self.facts["header_version"],
                              version))
        self.result["copied"] = [plan["rel"] for plan in changed]
        self.needs_backup = bool(changed) and not os.path.isfile(os.path.join(self.backup_dir, BACKUP_MANIFEST)) \
            and not (self.pin and self.pin.get("source") == "build" and not self.facts["drift"])
        return reasons

    # --- act ------------------------------------------------------------------------------------

    def write_text(self, path, text, mode=0o644):
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        write_atomic(path, text, mode=mode)

    def take_backup(self):
        backup = self.backup_dir
        parent = os.path.dirname(backup)
        if not os.path.isdir(parent):
            os.makedirs(parent, 0o755)
        staging = tempfile.mkdtemp(prefix=".%s." % os.path.basename(backup), suffix=".tmp", dir=parent)
        try:
            files = {}
            for rel in package_files(self.package_dir):
                dest = os.path.join(staging, rel)
                if not os.path.isdir(os.path.dirname(dest)):
                    os.makedirs(os.path.dirname(dest), 0o755)
                shutil.copy2(os.path.join(self.package_dir, rel), dest)
                files[rel] = file_sha256(dest)
            manifest = {"package": self.package["project"], "package_version": self.package["version"],
                        "header_version": self.facts["header_version"], "package_dir": self.package_dir,
                        "files": files}
            with open(os.path.join(staging, BACKUP_MANIFEST), "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, sort_keys=True, indent=2)
                handle.write("\n")
            os.chmod(staging, 0o755)
            if os.path.isdir(backup):
                shutil.rmtree(backup)   # a backup without a manifest: an interrupted one
            os.rename(staging, backup)
        finally:
            if os.path.isdir(staging):
                shutil.rmtree(staging)

    def copy_file(self, plan):
        target = plan["target"]
        directory = os.path.dirname(target)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        mode = 0o755 if os.access(plan["source"], os.X_OK) else 0o644
        try:  # a symlink at target is replaced by the file
            copy_atomic(plan["source"], target, mode=mode, expect_sha256=plan["after_sha256"],
                        tmp_prefix=".gpufleet-nccl.")
        except CopyMismatch:
            self.fail("copy of %s to %s does not match the source's sha256; build_dir changed while copying"
                      % (plan["source"], target))

    def verify(self, version, source):
        """Re-read after acting: the package files must now declare ``version``."""
        self.read()
        facts = self.facts
        if facts["header_version"] != version:
            self.fail("after pinning NCCL %s (%s), %s declares %s; expected %s" % (
                version, source, facts["header_path"] or "no nccl.h in %s" % self.package_dir,
                facts["header_version"], version))
        if facts["library_version"] and facts["library_version"] != version:
            self.fail("after pinning NCCL %s (%s), %s is NCCL %s"
                      % (version, source, facts["library_path"], facts["library_version"]))

    # --- the run --------------------------------------------------------------------------------

    def check_params(self):
        """The package asked for (or None) into ``project``; the release to pin."""
        p = self.p
        self.project = None
        if p["package"] is not None:
            try:
                self.project = check_project(p["package"])
            except NcclError as exc:
                self.fail(to_native(exc))
        try:
            check_sources(p["index_url"], p["extra_index_urls"], p["find_links"])
        except HttpInputError as exc:
            self.fail(to_native(exc))
        try:
            return check_release(p["version"])
        except NcclError as exc:
            self.fail(to_native(exc))
        return None

    def plan(self, version):
        """Decide what pins ``version``: the install or the copies, the constraints file, the pip configuration and
        the pin record; sets the result's changed, reasons and backed_up."""
        source = self.p["source"]
        self.needs_backup = False
        self.plans = []
        self.install_argv = None
        if source == "pip":
            reasons = self.decide_pip(version)
            self.carrier = version
        else:
            reasons = self.decide_build(version)
            self.carrier = self.package["version"]
        reasons.extend(self.plan_config())
        self.files_changed = bool(self.install_argv) or any(plan["changed"] for plan in self.plans)
        pin = self.pin or {}
        record_missing = self.pin is None or pin.get("version") != version or pin.get("source") != source \
            or pin.get("package_version") != self.carrier or pin.get("constraint_file") != self.constraint_file
        if record_missing and not self.files_changed:
            reasons.append("record the pin of NCCL %s (%s) in %s"
                           % (version, source, os.path.join(self.package_dir, PIN_NAME)))
        self.result["changed"] = bool(reasons)
        self.result["reasons"] = reasons
        self.result["backed_up"] = self.needs_backup
        return bool(reasons)

    def plan_config(self):
        """The constraints file and the pip configuration after the run; the reasons they change."""
        reasons = []
        self.constraint_after = constraint_text(self.constraint_before, self.project, self.carrier)
        if self.constraint_after != self.constraint_before:
            reasons.append("constraints file %s: %s==%s (was %s)" % (
                self.constraint_file, self.project, self.carrier, self.facts["constraint_version"] or "no line"))
        self.pip_conf_after = self.pip_conf_before
        if self.pin_pip_config:
            self.pip_conf_after = pip_conf_text(self.pip_conf_before, self.constraint_file)
        if self.pip_conf_after != self.pip_conf_before:
            reasons.append("pip configuration %s: [install] constraint names %s"
                           % (self.pip_config_file, self.constraint_file))
        return reasons

    def apply(self, version):
        """Write the configuration, install or copy; fails naming what did not work."""
        try:
            if self.constraint_after != self.constraint_before:
                self.write_text(self.constraint_file, self.constraint_after)
            if self.pip_conf_after != self.pip_conf_before:
                self.write_text(self.pip_config_file, self.pip_conf_after)
            if self.install_argv:
                self.runner.run(self.install_argv, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"}, record=False)
            if self.needs_backup:
                self.take_backup()
            for plan in self.plans:
                if plan["changed"]:
                    self.copy_file(plan)
        except StepFailed as exc:
            self.fail("%s; check index_url / find_links / no_index (is %s==%s there?)" % (exc.msg, self.project,
                                                                                          version),
                      rc=exc.rc, cmd=exc.cmd, **exc.extra)
        except (IOError, OSError) as exc:
            self.fail("cannot pin NCCL %s in %s: %s" % (version, self.package_dir, to_native(exc)))

    def record_pin(self, version):
        """After ``verify``: write the pin record (the files' sha256) and re-read the facts."""
        source = self.p["source"]
        files = {}
        if source == "build":
            files = dict((plan["rel"], plan["after_sha256"]) for plan in self.plans)
        else:
            for rel in (os.path.join("include", "nccl.h"), os.path.join("lib", LIB_NAME)):
                if os.path.isfile(os.path.join(self.package_dir, rel)):
                    files[rel] = file_sha256(os.path.join(self.package_dir, rel))
        record = pin_record(version, source, self.project, self.package["version"], files,
                            build_dir=self.p["build_dir"] if source == "build" else None,
                            constraint_file=self.constraint_file)
        try:
            self.write_text(os.path.join(self.package_dir, PIN_NAME), json.dumps(record, sort_keys=True, indent=2)
                            + "\n")
        except (IOError, OSError) as exc:
            self.fail("cannot write the pin record in %s: %s" % (self.package_dir, to_native(exc)))
        self.read()

    def run(self):
        version = self.check_params()
        self.probe()
        self.read()
        if not self.project and self.p["source"] == "pip":
            self.fail("no NCCL pip package is installed for %s and the installed torch (%s) names no CUDA version; "
                      "set package (nvidia-nccl-cu13 for CUDA 13, nvidia-nccl-cu12 for CUDA 12)"
                      % (self.python, self.facts["torch_version"]))
        changed = self.plan(version)
        if self.module._diff:
            self.result["diff"] = self.diff(version, self.constraint_after, self.pip_conf_after, self.files_changed)
        if not changed or self.module.check_mode:
            self.module.exit_json(**self.result)
        self.apply(version)
        self.verify(version, self.p["source"])
        self.record_pin(version)
        self.module.exit_json(**self.result)

    def diff(self, version, constraint_after, pip_conf_after, files_changed):
        out = []
        if constraint_after != self.constraint_before:
            out.append(dict(before=self.constraint_before or "", after=constraint_after,
                            before_header=self.constraint_file, after_header=self.constraint_file))
        if pip_conf_after != self.pip_conf_before:
            out.append(dict(before=self.pip_conf_before or "", after=pip_conf_after,
                            before_header=self.pip_config_file, after_header=self.pip_config_file))
        if files_changed:
            facts = self.facts
            before = "%s %s\nnccl.h: %s\nlibnccl.so.2: %s (sha256 %s)\n" % (
                self.project, facts["package_version"] or "(not installed)", facts["header_version"],
                facts["library_version"], facts["library_sha256"])
            if self.plans:
                lib = [plan for plan in self.plans if plan["rel"].endswith(".so.2")]
                after = "%s %s (files of build_dir %s)\nnccl.h: %s\nlibnccl.so.2: %s (sha256 %s)\n" % (
                    self.project, facts["package_version"], self.p["build_dir"], version, version,
                    lib[0]["after_sha256"] if lib else None)
            else:
                after = "%s %s\nnccl.h: %s\nlibnccl.so.2: %s\n" % (self.project, version, version, version)
            header = self.package_dir or "nvidia/nccl"
            out.append(dict(before=before, after=after, before_header=header, after_header=header))
        return out


def _main():
    NcclEnv(build_module()).run()


def main():
    guarded("nccl_env", _main)


if __name__ == "__main__":
    main()
