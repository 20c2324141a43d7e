#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pytorch_bundled_nvshmem
short_description: Find the NVSHMEM bundled into a PyTorch environment and make a custom build win over it
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - PyTorch brings its own NVSHMEM (the pip package C(nvidia-nvshmem-cu12) or C(nvidia-nvshmem-cu13), installed
    at C(<site-packages>/nvidia/nvshmem/lib/), and in some builds a copy under C(torch/lib/)). A process that
    imports torch loads that C(libnvshmem_host.so.3) before a custom build such as C(/opt/deepep/nvshmem),
    whatever C(LD_LIBRARY_PATH) says. A DeepEP linked against the custom device library then fails with
    C(NVSHMEM device library version does not match), and a patched IBGDA transport (the RoCE
    C(Unable to create ah) fix) is never used.
  - This module asks the interpreter O(python) where it imports from, finds every bundled NVSHMEM in those
    site-packages directories (user site included), reads versions from the package metadata and from the
    custom build (C(include/non_abi/nvshmem_version.h), C(include/nvshmem_version.h), the collection's build
    stamp, or a C(VERSION) file), and reports version mismatches and whether the bundled copy would win.
  - O(state=replace_transport) replaces every bundled C(nvshmem_transport_ibgda.so.3) with the custom
    build's (C(nvshmem_transport_ibgda.so.3) or C(nvshmem_transport_ibgda.so.3.0.0), symlinks followed),
    keeping the original once as C(<file>.gpufleet-orig). Files already equal to the custom build's
    (by sha256) are left alone. Each copy goes to a temporary file in the same directory and is renamed into place.
  - O(state=preload) returns the C(LD_PRELOAD) value that makes the custom host library win (plus GDRCopy's
    C(libgdrapi) when O(gdrcopy_home) is given), for the environment script. It changes nothing.
  - To only read these facts (no custom host library needed), gather V(bundled_nvshmem) with
    M(gpufleet.deepep.node_stack); it returns the same C(gpufleet_bundled_nvshmem), read by the same code.
  - A pip reinstall of the NVSHMEM package restores its files; run O(state=replace_transport) again after one.
options:
  python:
    description:
      - The Python interpreter whose environment to inspect (the one that imports torch and DeepEP).
      - An absolute path, or a name looked up on C(PATH).
      - The interpreter is run once, as C(python -c <probe>), to ask for its site-packages directories and user site.
    type: str
    default: python3
  site_packages:
    description:
      - Site-packages directories to inspect instead of asking O(python), in search order.
      - For environments the interpreter cannot be run for, and for tests. Every entry must be an existing directory.
    type: list
    elements: path
  state:
    description:
      - V(preload) (the default) finds and reports and computes the C(LD_PRELOAD) value; it changes nothing, and fails
        when the custom host library is missing. V(replace_transport) replaces the bundled IBGDA transports with the
        custom build's.
      - To read without a custom build, gather V(bundled_nvshmem) with M(gpufleet.deepep.node_stack).
    type: str
    choices: [preload, replace_transport]
    default: preload
  nvshmem_prefix:
    description:
      - The custom NVSHMEM build (the C(prefix) of M(gpufleet.deepep.nvshmem_build)).
    type: path
    default: /opt/deepep/nvshmem
  gdrcopy_home:
    description:
      - A GDRCopy prefix (C(lib/libgdrapi.so.2) is looked for) or the path of C(libgdrapi.so*) itself, added to
        the C(LD_PRELOAD) value after the NVSHMEM host library.
      - With O(state=preload) a GDRCopy library that cannot be found is an error.
    type: path
  timeout:
    description:
      - Seconds the interpreter's site-packages probe may run before it is killed.
    type: int
    default: 120
  env_script:
    description:
      - An environment script (as written by the C(env_script) role). When its C(LD_PRELOAD) line names the
        custom host library, the bundled copy no longer wins (RV(ansible_facts.gpufleet_bundled_nvshmem.bundled_would_win)).
      - A missing file reads as a script that preloads nothing. A directory, a dangling link, a file that is not a
        regular file or one that cannot be read is refused, naming the path and why.
    type: path
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
notes:
  - Replacing files inside a pip package is what the runbooks do to get a patched IBGDA transport used. It
    only helps when the bundled host library and the custom transport are ABI compatible (same NVSHMEM
    major version); prefer the preload when the versions differ.
  - Unlike the runbooks' C(cp), the copy is atomic and the original is kept, so
    C(cp <file>.gpufleet-orig <file>) undoes it.
seealso:
  - module: gpufleet.deepep.nvshmem_build
  - module: gpufleet.deepep.node_stack
    description: Its V(bundled_nvshmem) gather set reads C(gpufleet_bundled_nvshmem) without changing anything.
"""

EXAMPLES = r"""
- name: Read the NVSHMEM bundled into the torch environment (nothing needs to be built)
  gpufleet.deepep.node_stack:
    gather: [bundled_nvshmem]
    python: /opt/torch/.venv/bin/python
    nvshmem_prefix: /opt/deepep/nvshmem

- name: Use the patched IBGDA transport of the custom build (RoCE "Unable to create ah")
  gpufleet.deepep.pytorch_bundled_nvshmem:
    python: /opt/torch/.venv/bin/python
    state: replace_transport
    nvshmem_prefix: /opt/deepep/nvshmem

- name: Compute the LD_PRELOAD value for the environment script
  gpufleet.deepep.pytorch_bundled_nvshmem:
    python: /opt/torch/.venv/bin/python
    state: preload
    gdrcopy_home: /opt/deepep/gdrcopy
  register: nvshmem_preload

- name: Write it into the environment script
  ansible.builtin.lineinfile:
    path: /opt/deepep/env.sh
    regexp: '^export LD_PRELOAD='
    line: 'export LD_PRELOAD="{{ ansible_facts.gpufleet_bundled_nvshmem.preload }}${LD_PRELOAD:+:$LD_PRELOAD}"'
    mode: "0644"

- name: Fail when a bundled host library of another version would be loaded
  ansible.builtin.assert:
    that: not (ansible_facts.gpufleet_bundled_nvshmem.mismatch and ansible_facts.gpufleet_bundled_nvshmem.bundled_would_win)
    fail_msg: "{{ ansible_facts.gpufleet_bundled_nvshmem.mismatches | map(attribute='message') | list }}"
"""

RETURN = r"""
changed:
  description: Whether a bundled transport was (or, in check mode, would be) replaced.
  returned: always
  type: bool
  sample: false
diff:
  description: Per replaced transport, its sha256 before and after (diff mode only).
  returned: when diff mode is on and O(state=replace_transport)
  type: list
  elements: dict
  sample:
    - before: "sha256: 5d41402abc4b2a76b9719d911017c592...\n"
      after: "sha256: 7d793037a0760186574b0282f2f435e7...\n"
      before_header: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3
      after_header: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3
ansible_facts:
  description: Facts about the bundled and custom NVSHMEM.
  returned: always
  type: dict
  contains:
    gpufleet_bundled_nvshmem:
      description: What was found and decided.
      returned: always
      type: dict
      contains:
        python:
          description: The interpreter inspected (resolved path), null when O(site_packages) was given.
          type: str
          sample: /opt/torch/.venv/bin/python
        python_version:
          description: Its version, null when O(site_packages) was given.
          type: str
          sample: 3.12.3
        site_packages:
          description: The site-packages directories inspected, in the interpreter's search order.
          type: list
          elements: str
          sample: [/opt/torch/.venv/lib/python3.12/site-packages]
        bundled:
          description: Every NVSHMEM copy found in them, in search order (the first one is what gets imported).
          type: list
          elements: dict
          contains:
            package:
              description: The pip project (C(nvidia-nvshmem-cu13), C(nvidia-nvshmem-cu12), C(nvidia-nvshmem)), or C(torch) for a copy in C(torch/lib).
              type: str
            version:
              description: The NVSHMEM version (package metadata; file name for a torch copy), null when unknown.
              type: str
            version_source:
              description: C(metadata), C(file name), or null.
              type: str
            metadata:
              description: The package's METADATA file, null for a torch copy.
              type: str
            site_packages:
              description: The site-packages directory holding it.
              type: str
            lib_dir:
              description: The directory of its libraries.
              type: str
            host_lib:
              description: Its C(libnvshmem_host.so*), null when absent.
              type: str
            device_lib:
              description: Its C(libnvshmem_device.a)/C(.bc), null when absent (pip wheels of CUDA 13 ship none).
              type: str
            transports:
              description:
                - Its transport plugins, one per kind, each with C(name) (e.g. C(ibgda)), C(path), C(realpath),
                  C(sha256), C(backup) (the C(.gpufleet-orig) copy, null when none) and C(original_sha256)
                  (of the backup when there is one, else of the file).
              type: list
              elements: dict
          sample:
            - package: nvidia-nvshmem-cu13
              version: 3.4.5
              version_source: metadata
              metadata: /opt/torch/.venv/lib/python3.12/site-packages/nvidia_nvshmem_cu13-3.4.5.dist-info/METADATA
              site_packages: /opt/torch/.venv/lib/python3.12/site-packages
              lib_dir: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib
              host_lib: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3
              device_lib: null
              transports:
                - name: ibgda
                  path: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3
                  realpath: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3
                  sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
                  backup: null
                  original_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        custom:
          description:
            - The custom build at O(nvshmem_prefix) - C(prefix), C(exists), C(lib_dir), C(version),
              C(version_source) (the file the version was read from), C(host_lib), C(device_lib) and
              C(transports) (as for RV(ansible_facts.gpufleet_bundled_nvshmem.bundled)); null where absent.
          type: dict
          sample:
            prefix: /opt/deepep/nvshmem
            exists: true
            lib_dir: /opt/deepep/nvshmem/lib
            version: 3.5.19
            version_source: /opt/deepep/nvshmem/include/non_abi/nvshmem_version.h
            host_lib: /opt/deepep/nvshmem/lib/libnvshmem_host.so.3
            device_lib: /opt/deepep/nvshmem/lib/libnvshmem_device.a
            transports: []
        mismatch:
          description: Whether a bundled host library's version differs from the custom build's (both known).
          type: bool
          sample: true
        mismatches:
          description: One entry per such copy - C(package), C(lib_dir), C(bundled_version), C(custom_version), C(message).
          type: list
          elements: dict
          sample:
            - package: nvidia-nvshmem-cu13
              lib_dir: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib
              bundled_version: 3.4.5
              custom_version: 3.5.19
              message: "nvidia-nvshmem-cu13 3.4.5 in ... ships host library 3.4.5 while the custom NVSHMEM ..."
        bundled_would_win:
          description:
            - True when a bundled host library exists and nothing makes the custom build win - no preload
              (O(state=preload), or an O(env_script) that preloads the custom host library) and no bundled
              IBGDA transport left that differs from the custom build's.
          type: bool
          sample: true
        preload:
          description: The C(LD_PRELOAD) value (colon separated) that makes the custom host library win; null without a custom host library.
          type: str
          sample: /opt/deepep/nvshmem/lib/libnvshmem_host.so.3:/opt/deepep/gdrcopy/lib/libgdrapi.so.2
        preload_libs:
          description: The libraries of RV(ansible_facts.gpufleet_bundled_nvshmem.preload), as a list.
          type: list
          elements: str
          sample: [/opt/deepep/nvshmem/lib/libnvshmem_host.so.3, /opt/deepep/gdrcopy/lib/libgdrapi.so.2]
        env_script_preloads:
          description: Whether O(env_script) preloads the custom host library; null when no script was given.
          type: bool
          sample: null
        replaced:
          description:
            - With O(state=replace_transport), one entry per bundled IBGDA transport - C(path), C(package),
              C(source) (the custom file copied), C(before_sha256), C(after_sha256), C(backup) and C(changed).
              Empty otherwise.
          type: list
          elements: dict
          sample:
            - path: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3
              package: nvidia-nvshmem-cu13
              source: /opt/deepep/nvshmem/lib/nvshmem_transport_ibgda.so.3.0.0
              before_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
              after_sha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
              backup: /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3.gpufleet-orig
              changed: true
"""

import copy
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import run_bounded
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import copy_atomic, CopyMismatch
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_discovery import (
    PROBE_SCRIPT,
    DiscoveryError,
    find_bundled,
    find_gdrcopy_lib,
    ordered_site_packages,
    parse_probe,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nvshmem_winner import (
    bundled_would_win,
    plan_replacements,
    read_bundled,
)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            python=dict(type="str", default="python3"),
            site_packages=dict(type="list", elements="path"),
            state=dict(type="str", choices=["preload", "replace_transport"], default="preload"),
            nvshmem_prefix=dict(type="path", default="/opt/deepep/nvshmem"),
            gdrcopy_home=dict(type="path"),
            env_script=dict(type="path"),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )


def _facts(result):
    return result["ansible_facts"]["gpufleet_bundled_nvshmem"]


def _discover_site_packages(module, result):
    params = module.params
    facts = _facts(result)
    if params["site_packages"] is not None:
        bad = [p for p in params["site_packages"] if not os.path.isdir(p)]
        if bad:
            module.fail_json(msg="site_packages entries must be existing directories; not a directory: %s"
                             % ", ".join(repr(p) for p in bad), **result)
        return list(params["site_packages"])

    python = params["python"]
    if not python or not python.strip():
        module.fail_json(msg="python %r is empty; expected an interpreter path such as /opt/torch/.venv/bin/python "
                         "or a name on PATH such as python3" % (python,), **result)
    if os.path.isabs(python):
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            module.fail_json(msg="python %r is not an executable file; expected the interpreter of the torch "
                             "environment, such as /opt/torch/.venv/bin/python" % (python,), **result)
        resolved = python
    else:
        resolved = module.get_bin_path(python)
        if not resolved:
            module.fail_json(msg="python %r was not found on PATH; give the interpreter's absolute path" % (python,),
                             **result)
    argv = [resolved, "-c", PROBE_SCRIPT]
    if params["timeout"] < 1:
        module.fail_json(msg="timeout=%r: expected a positive number of seconds" % params["timeout"], **result)
    rc, out, err = run_bounded(argv, params["timeout"])
    if rc == 124:
        module.fail_json(msg="python %r did not report its site-packages within timeout=%ss and was killed; raise "
                             "timeout (seconds) if the interpreter is slow to start" % (resolved, params["timeout"]),
                         cmd=argv, rc=rc, **result)
    if rc != 0:
        module.fail_json(msg="python %r failed to report its site-packages directories" % (resolved,),
                         cmd=argv, rc=rc, stdout=out, stderr=err, **result)
    try:
        probe = parse_probe(out)
    except DiscoveryError as exc:
        module.fail_json(msg="python %r: %s" % (resolved, to_native(exc)), cmd=argv, rc=rc, stdout=out,
                         stderr=err, **result)
    facts["python"] = resolved
    facts["python_version"] = probe.get("version")
    return ordered_site_packages(probe)


def _replace(module, plan):
    """Back up (once) and atomically replace ``plan['path']`` with ``plan['source']``."""
    path = plan["path"]
    directory = os.path.dirname(path)
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = 0o755
    if plan["needs_backup"]:
        copy_atomic(path, plan["backup"], mode=mode, tmp_prefix=".gpufleet-orig.")
    try:
        copy_atomic(plan["source"], path, mode=mode, expect_sha256=plan["after_sha256"],
                    tmp_prefix=".gpufleet-transport.")
    except CopyMismatch:
        module.fail_json(msg="copy of %s to %s does not match the source checksum; the source changed while "
                         "copying" % (plan["source"], path))


class BundledNvshmem(object):
    """observe (the interpreter's site-packages, the bundled and the custom NVSHMEM, the preload), plan (the
    transports to replace), apply (replace them and re-read), then judge whether the bundled copy would win."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.state = self.params["state"]
        self.result = dict(changed=False, ansible_facts=dict(gpufleet_bundled_nvshmem=dict(
            python=None, python_version=None, site_packages=[], bundled=[], custom=None, mismatch=False,
            mismatches=[], bundled_would_win=False, preload=None, preload_libs=[], env_script_preloads=None,
            replaced=[])))
        self.facts = _facts(self.result)
        self.plans = []

    def fail(self, msg):
        self.module.fail_json(msg=msg, **self.result)

    # --- observe --------------------------------------------------------------------------------

    def check_params(self):
        prefix = self.params["nvshmem_prefix"]
        if not prefix or not os.path.isabs(prefix):
            self.fail("nvshmem_prefix %r must be an absolute path such as /opt/deepep/nvshmem" % (prefix,))
        self.prefix = prefix

    def observe(self):
        """The interpreter's site-packages, then everything else read by the reader node_stack's bundled_nvshmem
        set shares (module_utils._comm.nvshmem_winner.read_bundled): every bundled copy, the custom build, the
        LD_PRELOAD value (with GDRCopy's library), whether env_script preloads the custom host library."""
        params = self.params
        self.site_packages = _discover_site_packages(self.module, self.result)
        self.facts["site_packages"] = self.site_packages
        gdrcopy_lib = None
        if params["gdrcopy_home"]:
            gdrcopy_lib = find_gdrcopy_lib(params["gdrcopy_home"])
            if gdrcopy_lib is None and self.state == "preload":
                self.fail("gdrcopy_home %r holds no libgdrapi.so* (looked in it and its lib/ and lib64/); expected a "
                          "GDRCopy prefix such as /opt/deepep/gdrcopy" % (params["gdrcopy_home"],))
        try:
            self.facts.update(read_bundled(self.facts["python"], self.facts["python_version"], self.site_packages,
                                           self.prefix, env_script=params["env_script"], gdrcopy_lib=gdrcopy_lib))
        except DiscoveryError as exc:
            self.fail(to_native(exc))
        self.bundled = self.facts["bundled"]
        self.custom = self.facts["custom"]
        self.mismatches = self.facts["mismatches"]
        if self.state == "preload" and not self.facts["preload"]:
            self.fail("no custom NVSHMEM host library under nvshmem_prefix %r (looked for lib/libnvshmem_host.so.3 "
                      "and lib64/); build it first (gpufleet.deepep.nvshmem_build) or point nvshmem_prefix at it"
                      % (self.prefix,))

    # --- plan -----------------------------------------------------------------------------------

    def plan(self):
        """The transports to replace (state=replace_transport); whether any changes."""
        if self.state == "replace_transport":
            try:
                self.plans = plan_replacements(self.bundled, self.custom)
            except DiscoveryError as exc:
                self.fail("%s; build NVSHMEM with IBGDA first (gpufleet.deepep.nvshmem_build) or point "
                          "nvshmem_prefix at it" % to_native(exc))
            if not self.plans:
                self.module.warn("no bundled nvshmem_transport_ibgda.so.3 in %s: nothing to replace"
                                 % (", ".join(self.site_packages) or "the interpreter's site-packages"))
        self.changed = any(plan["changed"] for plan in self.plans)
        self.facts["replaced"] = [dict((k, v) for k, v in plan.items() if k != "needs_backup") for plan in self.plans]
        if self.module._diff and self.state == "replace_transport":
            self.result["diff"] = [dict(before="sha256: %s\n" % plan["before_sha256"],
                                        after="sha256: %s\n" % plan["after_sha256"],
                                        before_header=plan["path"], after_header=plan["path"])
                                   for plan in self.plans if plan["changed"]]

    # --- apply ----------------------------------------------------------------------------------

    def apply(self):
        """Replace the changed transports (outside check mode) and re-read what is there now."""
        for plan in self.plans:
            if not plan["changed"]:
                continue
            try:
                _replace(self.module, plan)
            except (IOError, OSError) as exc:
                self.fail("cannot replace %s with %s: %s" % (plan["path"], plan["source"], to_native(exc)))
        self.bundled = find_bundled(self.site_packages)
        self.facts["bundled"] = self.bundled

    # --- the run --------------------------------------------------------------------------------

    def judge(self):
        """Whether the bundled copy would win after the run (as the replacement would leave it in check mode)."""
        judged = self.bundled
        if self.changed and self.module.check_mode:
            # judge the state the replacement would leave, without touching the reported facts
            judged = copy.deepcopy(self.bundled)
            after = dict((plan["path"], plan["after_sha256"]) for plan in self.plans)
            for entry in judged:
                for transport in entry["transports"]:
                    if transport["path"] in after:
                        transport["sha256"] = after[transport["path"]]
        preloaded = self.state == "preload" or bool(self.facts["env_script_preloads"])
        self.facts["bundled_would_win"] = bundled_would_win(judged, self.custom, preloaded=preloaded)
        if self.facts["bundled_would_win"] and self.facts["mismatch"]:
            for item in self.mismatches:
                self.module.warn(item["message"])

    def run(self):
        self.check_params()
        self.observe()
        self.plan()
        if self.changed and not self.module.check_mode:
            self.apply()
        self.judge()
        self.result["changed"] = self.changed
        self.module.exit_json(**self.result)


def run(module):
    BundledNvshmem(module).run()


def _main():
    run(build_module())


def main():
    guarded("pytorch_bundled_nvshmem", _main)


if __name__ == "__main__":
    main()
