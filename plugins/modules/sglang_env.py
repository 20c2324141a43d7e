#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_env
short_description: Read, install and guard SGLang in the DeepEP-ready torch environment
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Reads the SGLang stack of the Python environment of O(python) from its package metadata, without importing
    torch, SGLang or DeepEP - versions of sglang, the kernel package (C(sgl-kernel) before sglang 0.5.15,
    C(sglang-kernel) after), flashinfer, torch (and the CUDA it was built for), NCCL, cuDNN, cuSPARSELt, NIXL,
    Mooncake and C(sgl-deep-ep); which C(deep_ep) file C(import deep_ep) resolves to and whether it is the build the
    collection made (its C(.gpufleet-build.json) stamp, the C(deep_ep) wheel's RECORD, no other package owning
    C(deep_ep) files); the environment's own NVIDIA library directories (for C(LD_LIBRARY_PATH), pip's NVSHMEM left
    out) and whether C(libcudnn.so.9) and C(libcusparseLt.so.0) resolve there.
  - With O(state=present) it installs SGLang O(version) without letting it move what the collection built. The
    projects of O(hold) (torch, the pinned NCCL and cuDNN) and the collection's C(deep_ep) are written as
    C(project==version) lines into the environment's pip constraints file (the one the C(nccl_env) module keeps,
    other lines kept) named by the environment's C(pip.conf); the held NVIDIA wheels are installed at their
    versions with C(--no-deps); the sglang wheel is installed with C(--no-deps) and then its requirements less
    O(exclude) - C(sgl-deep-ep), whose top-level C(deep_ep) would shadow or overwrite the collection's DeepEP,
    is kept out unless O(use_bundled_deepep=true). The transfer engine (O(transfer_engine)) follows.
  - After every install the environment is read again and the pins are proved from its metadata - every held
    project at its version, C(deep_ep) still the collection's build, libnvshmem resolving to O(nvshmem_home). What
    moved is repaired once (C(sgl-deep-ep) removed, held projects and the collection's DeepEP wheel reinstalled with
    C(--no-deps)); what still moved fails the task with each project named (RV(ansible_facts.gpufleet_sglang.moved)).
    The same repair runs on a later run when something moved in between (for example a plain C(pip install sglang)).
  - An offline O(wheelhouse) is checked against its C(SHA256SUMS) (or O(wheelhouse_checksums)) before anything is
    installed from it.
  - With O(state=lock) it installs nothing and writes nothing on the node; pip resolves what O(state=present) would
    install on this node (SGLang O(version) without its dependencies, then its requirements less O(exclude), the
    kernel re-pin and the transfer engine, and each held project by itself) from the same sources under the same
    holds, as dry runs (C(pip install --dry-run --report)), and the module returns each package with the sha256 of
    the file pip chose (RV(requirements_hashes)), the lock that O(requirements_hashes) takes on every node of the
    profile, so an install from an index is hash-checked (C(--require-hashes)). Make it on a node where SGLang is not
    installed yet; it refuses one where it is, whose closure would leave out what is installed.
  - Every command runs under a time limit (O(timeout)).
options:
  python:
    description: The interpreter of the torch environment, e.g. C(/opt/torch/.venv/bin/python); an absolute path or a
      name on C(PATH).
    type: str
    default: python3
  state:
    description: V(facts) only reads (the reader of M(gpufleet.deepep.node_stack)'s V(sglang) set, which the
      roles use); V(present) installs and guards; V(lock) resolves what V(present) would
      install and returns its hash lock (RV(requirements_hashes)), changing nothing.
    type: str
    choices: [facts, present, lock]
    default: facts
  version:
    description: The SGLang release to install (C(0.5.8), C(0.5.23)). Required with O(state=present) and
      O(state=lock).
    type: str
  kernel_version:
    description: Install the kernel package (C(sgl-kernel) or C(sglang-kernel), by O(version)) at this version
      after SGLang's own requirements (the runbook's C(sgl-kernel==0.3.21) re-pin); unset, the one SGLang requires.
    type: str
  hold:
    description:
      - C(project -> version) held fixed in the environment, e.g. torch 2.9.1, nvidia-nccl-cu12 2.28.3 and
        nvidia-cudnn-cu12 9.16.0.29. C(torch) without a version (empty string) holds the version installed now
        (or pinned already).
      - Held NVIDIA wheels that are missing or at another version are installed with C(--no-deps); torch is never
        installed by this module except to put back the held version after something moved it.
      - Project names compare as pip compares them (PEP 503 - case, C(-), C(_) and C(.) alike); two keys naming the
        same project (C(torch) and C(Torch)) are refused naming both, before anything is read. C(deep_ep) is refused
        here while O(hold_deep_ep) holds the collection's build.
      - A hold is written over any other line of its project in the constraints file - the hold wins, as the newer
        word of the site (a torch upgrade of the profile). When that line pins something else (C(torch==2.8.0)
        under a hold of C(torch 2.9.1), or C(nvidia-nccl-cu12==2.28.3) that M(gpufleet.deepep.nccl_env) keeps), the
        task warns naming the package, the line replaced and the new hold; keep the two in agreement, or the other
        writer and this module replace each other's pin on every run.
      - An empty version keeps the version the constraints file pins, else the one installed.
      - A constraints file (or pip.conf) that is not UTF-8 text is refused naming the file - it would read as no
        pins, and be rewritten with the holds alone.
    type: dict
    default: {}
  hold_deep_ep:
    description: Hold the installed C(deep_ep) distribution (the collection's build) at its version and require
      C(import deep_ep) to be that build. Ignored with O(use_bundled_deepep=true).
    type: bool
    default: true
  use_bundled_deepep:
    description: Let SGLang install C(sgl-deep-ep) and its C(deep_ep) (not built for the node's NVSHMEM/IBGDA).
    type: bool
    default: false
  exclude:
    description: Further projects of SGLang's requirements to keep out (C(sgl-deep-ep) is always added unless
      O(use_bundled_deepep=true)).
    type: list
    elements: str
    default: []
  transfer_engine:
    description:
      - V(nixl) installs the NIXL build of torch's CUDA major (C(nixl-cu12)/C(nixl-cu13), not the C(nixl) meta
        package); V(mooncake) installs C(mooncake-transfer-engine) - refused unless C(nvidia_peermem) is loaded or
        DMA-BUF registration is available and O(mooncake_dmabuf=true); V(none) installs neither.
    type: str
    choices: [none, nixl, mooncake]
    default: none
  transfer_engine_version:
    description: The version of the transfer engine package; unset, the newest the source offers.
    type: str
  cuda_version:
    description: The CUDA release (C(12.9)) that picks the NIXL build when torch carries no C(+cuXXX) label (a CPU
      build); unset, torch's.
    type: str
  mooncake_dmabuf:
    description: The Mooncake build registers GPU memory through DMA-BUF (newer Mooncake) where the node offers it.
    type: bool
    default: false
  nvshmem_home:
    description: The IBGDA NVSHMEM build DeepEP runs on; its C(lib/libnvshmem_host.so.3) must exist and stays ahead
      of pip's NVSHMEM in RV(ansible_facts.gpufleet_sglang.ld_library_path).
    type: path
  cuda_home:
    description: The CUDA toolkit whose C(lib64) joins RV(ansible_facts.gpufleet_sglang.ld_library_path).
    type: path
    default: /usr/local/cuda
  index_url:
    description: The package index (C(pip --index-url)); unset, pip's own configuration.
    type: str
  extra_index_urls:
    description: Further indexes (C(pip --extra-index-url)).
    type: list
    elements: str
    default: []
  find_links:
    description: Wheel directories or URLs (C(pip --find-links)).
    type: list
    elements: str
    default: []
  no_index:
    description: Do not use any index (C(pip --no-index)).
    type: bool
    default: false
  wheelhouse:
    description: An offline wheelhouse directory; every C(*.whl) in it must match O(wheelhouse_checksums) or the
      C(SHA256SUMS) file beside them, then it is used as C(--no-index --find-links).
    type: path
  wheelhouse_checksums:
    description: C(file name -> sha256) of the wheelhouse's wheels; unset, its C(SHA256SUMS) file.
    type: dict
  requirements_hashes:
    description:
      - C(project==version -> [sha256, ...]) of every package installed from the index (or O(find_links)), for
        example the key C(sglang==0.5.8) with the list of its wheels' digests.
      - Given, every C(pip install) of the module is hash-checked - the packages go through a requirements file with
        their digests, C(--require-hashes) and C(--no-deps), so pip refuses a download whose digest is not listed
        and resolves nothing itself. SGLang's requirements (and an unversioned transfer engine) are installed at
        their pinned versions, together with every other pin (the set is the lock of SGLang's requirements and
        their dependencies), less O(exclude); a requirement already installed and not pinned is left as it is. A
        package asked for without an entry fails the task naming it, before pip runs. The collection's own DeepEP
        wheel is checked against its own digest.
      - Empty (the default), installs are not hash-checked (only an offline O(wheelhouse) is verified).
    type: dict
    default: {}
  break_system_packages:
    description: Pass C(--break-system-packages) (a system Python under PEP 668).
    type: bool
    default: false
  ignore_installed:
    description: Projects installed with C(pip install --ignore-installed) before SGLang when their installed copy
      has no RECORD (installed by Debian, e.g. C(typing_extensions) on Ubuntu 24.04, which pip cannot uninstall).
      Unset, every requirement of SGLang found in that state.
    type: list
    elements: str
  pip_extra_args:
    description: Further arguments for every C(pip install).
    type: list
    elements: str
    default: []
  constraint_file:
    description: The constraints file; unset, C(<venv>/gpufleet-constraints.txt) (a virtualenv) or
      C(/etc/gpufleet/pip-constraints.txt) (the system Python) - the file C(nccl_env) keeps.
    type: path
  pip_config_file:
    description: The pip configuration naming the constraints file; unset, C(<prefix>/pip.conf).
    type: path
  repair:
    description: Repair what moved (once per run); false fails naming it instead.
    type: bool
    default: true
  dg_cache_dir:
    description: The DeepGEMM cache directory the service uses (C(SGLANG_DG_CACHE_DIR)); its C(cache/) files are
      counted in RV(ansible_facts.gpufleet_sglang.deepgemm_cache).
    type: path
  timeout:
    description: Seconds each command may run (pip installs, probes).
    type: int
    default: 1800
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
notes:
  - Reads package metadata and files only; SGLang, torch and DeepEP are not imported (no GPU needed).
seealso:
  - module: gpufleet.deepep.nccl_env
  - module: gpufleet.deepep.model_config
"""

EXAMPLES = r"""
- name: Read the SGLang stack
  gpufleet.deepep.sglang_env:
    python: /usr/bin/python3

- name: SGLang 0.5.8 with NIXL, torch/NCCL/cuDNN and the collection's DeepEP held
  gpufleet.deepep.sglang_env:
    python: /usr/bin/python3
    state: present
    version: "0.5.8"
    kernel_version: "0.3.21"
    hold: {torch: "2.9.1", nvidia-nccl-cu12: "2.28.3", nvidia-cudnn-cu12: "9.16.0.29"}
    transfer_engine: nixl
    nvshmem_home: /opt/deepep/nvshmem
    break_system_packages: true
"""

RETURN = r"""
changed:
  description: Whether anything was installed, removed or written (or would be, in check mode).
  returned: always
  type: bool
reasons:
  description: Why the module acted (or would act), one line each.
  returned: always
  type: list
  elements: str
commands:
  description: The commands run (or that would run, in check mode).
  returned: always
  type: list
  elements: list
repaired:
  description: What moved and was put back during this run.
  returned: always
  type: list
  elements: str
requirements_hashes:
  description: With O(state=lock), C(project==version -> [sha256]) of every package pip would install (names
    normalized, the excluded projects left out), ready for O(requirements_hashes).
  returned: when O(state=lock)
  type: dict
  sample: {"sglang==0.5.8": ["3f1c...e2"], "numpy==2.2.6": ["9a41...07"]}
lock:
  description: With O(state=lock), what the lock was resolved for.
  returned: when O(state=lock)
  type: dict
  contains:
    packages:
      description: How many packages the lock holds.
      type: int
    requested:
      description: The requirements resolved (SGLang, the kernel re-pin, the transfer engine, the held projects).
      type: list
      elements: str
    excluded:
      description: Requirements of SGLang left out of the lock, as the install leaves them out (O(exclude),
        C(sgl-deep-ep) unless O(use_bundled_deepep)).
      type: list
      elements: str
    holds:
      description: The C(project -> version) held while resolving (as O(state=present) holds them); the held
        projects are resolved too, so a repair that reinstalls one is hash-checked.
      type: dict
    unlocked_holds:
      description: Held C(project==version) the sources do not offer (a torch from another index), left out of
        the lock; a repair of one of them fails naming it.
      type: list
      elements: str
    python:
      description: The interpreter whose pip resolved it.
      type: str
hashed_requirements:
  description: The lines (C(project==version --hash=sha256:...)) of the last hash-checked install.
  returned: when O(requirements_hashes) is given and something was installed
  type: list
  elements: str
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    gpufleet_sglang:
      description: The SGLang stack of the environment.
      returned: always
      type: dict
      contains:
        python:
          description: The interpreter.
          type: str
        virtualenv:
          description: Whether the environment is a virtualenv.
          type: bool
        site_packages:
          description: Its site-packages directories, in import order.
          type: list
          elements: str
        versions:
          description: Installed versions (null when absent) of sglang, kernel (the kernel package), kernel_package
            (its name), flashinfer, torch, nccl (with nccl_package), cudnn, cusparselt, nixl (with nixl_package),
            mooncake, sgl_deep_ep, deep_ep.
          type: dict
        torch_cuda:
          description: The CUDA release torch was built for (C(12.9)), null for a CPU build.
          type: str
        torch_cuda_major:
          description: Its major (12), null for a CPU build.
          type: int
        deepgemm_cache:
          description: C(dir) and C(files) (count) of the DeepGEMM cache, null without O(dg_cache_dir).
          type: dict
        nixl_cuda_major:
          description: The CUDA major of the installed NIXL build (12 or 13), null when none is installed.
          type: int
        deep_ep:
          description: C(file) and C(dir) that C(import deep_ep) resolves to, C(collection) (the collection's build),
            C(stamp_key), C(wheel), C(version), C(owners) and C(foreign_owners) of C(deep_ep) files,
            C(modified_files), C(reasons) (why it is not the collection's).
          type: dict
        nvidia_lib_dirs:
          description: C(<site>/nvidia/*/lib) of the environment, pip's NVSHMEM left out.
          type: list
          elements: str
        ld_library_path:
          description: The C(LD_LIBRARY_PATH) entries for the runtime env file - the IBGDA NVSHMEM's lib, CUDA's
            lib64, torch's lib, then the NVIDIA library directories.
          type: list
          elements: str
        libraries:
          description: Where C(libcudnn.so.9), C(libcusparseLt.so.0) and C(libnvshmem_host.so.3) resolve on
            RV(ansible_facts.gpufleet_sglang.ld_library_path) (null where they do not).
          type: dict
        nvshmem_ok:
          description: libnvshmem resolves to O(nvshmem_home) first (true), does not (false), or no O(nvshmem_home)
            was given (null).
          type: bool
        debian_owned:
          description: Installed projects without a RECORD (installed by Debian; pip cannot uninstall them).
          type: list
          elements: str
        transfer:
          description: C(peermem_loaded), C(open_kernel_module), C(kernel), C(dmabuf) of the node.
          type: dict
        holds:
          description: The C(project -> version) held by this run (with O(state=facts), the constraints file's).
          type: dict
        constraint_file:
          description: The constraints file.
          type: str
        moved:
          description: What is not as held (after this run); empty when every pin holds.
          type: list
          elements: str
"""

import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._http import url_secrets
from ansible_collections.gpufleet.deepep.plugins.module_utils._comm.nccl import (
    constraint_text,
    pip_conf_constraints,
    pip_conf_text,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import CommandLog, StepFailed
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang import (
    SglangError,
    kernel_package_for,
    nixl_package_for,
    normalize,
    transfer_engine_check,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_install import (
    REQUIRES_SCRIPT,
    moved,
    wheelhouse_problems,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_probe import (
    deep_ep_state,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_request import (
    check_request,
    hashed_requirements,
    lock_from_report,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.sglang_facts import (
    SglangProbeError,
    constraint_entries,
    constraint_lines,
    facts_of,
    gather_sglang,
    probe as read_probe,
    probe_versions,
    read_pip_file,
    resolve_python,
)


# The project name at the head of a requirement string (PEP 508).
_REQ_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")

# pip's own variables of every command (run_bounded adds LC_ALL=C).
PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
# The prefix of the /proc reads; private (no option): unit tests point it at a tree.
_PROC_ROOT = "/"


class SglangEnv(object):
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.log = CommandLog(timeout=self.p["timeout"])
        self.commands = self.log.commands
        self.result = dict(changed=False, reasons=[], commands=self.commands, repaired=[],
                           ansible_facts=dict(gpufleet_sglang={}))

    # --- running ---------------------------------------------------------------------------------

    def run(self, argv, check=True, record=True):
        """A command through the shared runner (module_utils/_runner): bounded by O(timeout), recorded in
        ``commands`` unless ``record`` is false, StepFailed when it fails and ``check``."""
        rc, out, err = self.log.run(argv, env=PIP_ENV, check=check, record=record)
        if rc == 124:  # a read past its bound fails too (its rc is not the answer)
            raise StepFailed("command ran past its %d s time limit (timeout): %s" % (self.p["timeout"], " ".join(argv)),
                             rc=rc, cmd=list(argv), stdout=out[-4000:], stderr=err[-4000:])
        return rc, out, err

    def pip(self, *args):
        argv = [self.python, "-m", "pip", "install", "--disable-pip-version-check"]
        if self.p["break_system_packages"]:
            argv.append("--break-system-packages")
        if self.wheelhouse:
            argv += ["--no-index", "--find-links", self.wheelhouse]
        else:
            if self.p["no_index"]:
                argv.append("--no-index")
            if self.p["index_url"]:
                argv += ["--index-url", self.p["index_url"]]
            for url in self.p["extra_index_urls"]:
                argv += ["--extra-index-url", url]
            for link in self.p["find_links"]:
                argv += ["--find-links", link]
        argv += ["--constraint", self.constraint_file]
        argv += list(self.p["pip_extra_args"])
        if not self.pins:
            return argv + list(args)
        # Hash-pinned (requirements_hashes): the packages go through a requirements file with their sha256 digests
        # and pip checks every download against them (--require-hashes). pip resolves nothing (--no-deps): an
        # install that would pull dependencies carries the whole pinned set instead (the lock, less the excluded
        # projects), so every package installed is one the site pinned, with its digest.
        flags = [a for a in args if a.startswith("-")]
        specs = [a for a in args if not a.startswith("-")]
        installed = ()
        if any("==" not in spec and not os.path.isfile(spec) for spec in specs):
            installed = list((self.probe().get("dists") or {}).keys())
        try:
            text = hashed_requirements(specs, self.pins, with_lock="--no-deps" not in flags,
                                       exclude=self.hash_exclude, installed=installed)
        except SglangError as exc:
            raise StepFailed(str(exc))
        fd, path = tempfile.mkstemp(prefix="gpufleet-sglang-", suffix=".txt", dir=self.module.tmpdir)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        self.result["hashed_requirements"] = text.splitlines()
        return argv + flags + ([] if "--no-deps" in flags else ["--no-deps"]) + ["--require-hashes", "-r", path]

    def pip_uninstall(self, project):
        """``pip uninstall -y`` (PEP 668 refuses it in a system Python too, without --break-system-packages)."""
        argv = [self.python, "-m", "pip", "uninstall", "-y"]
        if self.p["break_system_packages"]:
            argv.append("--break-system-packages")
        return argv + [project]

    # --- reading (the shared read-only facts of module_utils._sglang_facts) -------------------------

    def _probe_runner(self, argv, timeout=None, env=None):
        """The runner of the shared readers: this module's bounded run, not recorded, rc returned."""
        return self.run(argv, check=False, record=False)

    @staticmethod
    def _read(function, *args, **kwargs):
        """A reader of module_utils._sglang_facts, its SglangError raised as this module's StepFailed."""
        try:
            return function(*args, **kwargs)
        except SglangProbeError as exc:
            raise StepFailed(str(exc), stderr=exc.stderr)
        except SglangError as exc:
            raise StepFailed(str(exc))

    def probe(self):
        return self._read(read_probe, self.python, self._probe_runner, self.p["timeout"])

    def facts_of(self, probe_result):
        return facts_of(probe_result, self.python, self.transfer, nvshmem_home=self.p["nvshmem_home"],
                        cuda_home=self.p["cuda_home"], dg_cache_dir=self.p["dg_cache_dir"])

    # --- the run ---------------------------------------------------------------------------------

    def main(self):
        try:
            self.pins = check_request(self.p)  # the nested shapes, before anything is read or written
        except SglangError as exc:
            raise StepFailed(str(exc))
        self.hash_exclude = list(self.p["exclude"]) + ([] if self.p["use_bundled_deepep"] else ["sgl-deep-ep"])
        self.python = self._read(resolve_python, self.p["python"], self.module.get_bin_path)
        facts, probe_result = self._read(
            gather_sglang, self.python, self._probe_runner, self.p["timeout"], nvshmem_home=self.p["nvshmem_home"],
            cuda_home=self.p["cuda_home"], dg_cache_dir=self.p["dg_cache_dir"],
            constraint_file=self.p["constraint_file"], sysfs_root=_PROC_ROOT,
            held=self.p["state"] == "facts")
        self.transfer = facts["transfer"]
        self.wheelhouse = self.p["wheelhouse"]
        self.result["ansible_facts"]["gpufleet_sglang"] = facts
        self.constraint_file = facts["constraint_file"]
        if self.p["state"] == "facts":
            # What the constraints file holds, and what is not as held (a later unconstrained install): read above.
            return self.result
        if self.p["state"] == "lock":
            self.lock(probe_result, facts)
            return self.result
        self.present(probe_result, facts)
        return self.result

    def wanted_holds(self, facts, probe):
        holds = {}
        for project, version in (self.p["hold"] or {}).items():
            project = normalize(project)
            version = "" if version is None else str(version)
            if not version:
                version = (probe.get("dists") or {}).get(project, {}).get("version") or ""
                existing = self._read(constraint_lines, self.constraint_file).get(project)
                version = existing or version
            if not version:
                raise StepFailed("hold %s has no version and %s is not installed in %s; give its version, e.g. "
                                 "%s: 2.9.1" % (project, project, self.python, project))
            holds[project] = version
        bundled = self.p["use_bundled_deepep"]
        if self.p["hold_deep_ep"] and not bundled:
            de = facts["deep_ep"]
            version = self._read(constraint_lines, self.constraint_file).get("deep-ep") or de.get("version")
            if (not version or not (de.get("stamp_key") or self._stamp_before)) and self.module.check_mode:
                # A check run before the site's deepep phase installed DeepEP: predict, do not fail.
                self.result["reasons"].append("deep_ep will be held once the deepep role installed the collection's "
                                              "build (%s)" % "; ".join(de.get("reasons") or ["not installed"]))
                return holds
            if not version or not (de.get("stamp_key") or self._stamp_before):
                raise StepFailed("hold_deep_ep: %s has no DeepEP built by the collection (%s); run the deepep role "
                                 "(playbooks/site.yml) before SGLang, or set use_bundled_deepep: true"
                                 % (self.python, "; ".join(de.get("reasons") or ["deep_ep not installed"])))
            holds["deep-ep"] = version
        return holds

    def present(self, probe, facts):
        """state=present: observe, plan, apply - then prove the pins held."""
        want = self.observe_request(facts)
        seen = self.observe_node(probe, facts, want)
        todo = self.plan(facts, want, seen)
        todo = self.result["reasons"] + todo
        self.result["reasons"] = todo
        if not todo:
            facts["moved"] = []
            return
        self.result["changed"] = True
        if self.module.check_mode:
            facts["moved"] = seen["moved"]
            return
        self.apply(probe, facts, want, seen)
        self.verify(probe, want, seen)

    def lock(self, probe, facts):
        """state=lock: pip resolves, as dry runs under the holds present would write, what present would install on
        this node - sglang without its dependencies, then its requirements less the excluded projects with the
        kernel re-pin and the transfer engine (what is installed already satisfies its requirement, as in the
        install) - and each held project by itself (a repair reinstalls it by version); the result is their hash
        lock. Nothing is installed or written on the node (the holds go to a temporary constraints file), so it runs
        in check mode too. Made where SGLang is not installed yet: there the install's closure is what pip chooses."""
        want = self.observe_request(facts)
        installed = (probe.get("dists") or {}).get("sglang") or {}
        if installed.get("version"):
            raise StepFailed("sglang %s is installed in %s: a lock made here would leave out what is installed; make "
                             "it on a node of the profile before SGLang is installed (after site.yml, before "
                             "playbooks/sglang.yml)" % (installed["version"], self.python))
        seen = self.observe_node(probe, facts, want)
        fd, constraints = tempfile.mkstemp(prefix="gpufleet-sglang-lock-", suffix=".txt", dir=self.module.tmpdir)
        with os.fdopen(fd, "w") as handle:
            handle.write(seen["constraints"] or "")
        top = "sglang==%s" % self.p["version"]
        report = self._resolve([top], constraints, "--no-deps")
        if not report["install"]:
            raise StepFailed("pip's dry run of %s chose nothing to install" % top)
        hashes = self._lock_of(report, ())[0]
        excluded = set(normalize(e) for e in want["exclude"])
        requires, dropped = [], []
        for req in (report["install"][0].get("metadata") or {}).get("requires_dist") or []:
            name = _REQ_NAME.match(str(req))
            (dropped if name and normalize(name.group(0)) in excluded else requires).append(str(req))
        requested = []
        if self.p["kernel_version"]:
            requested.append("%s==%s" % (want["kernel_pkg"], self.p["kernel_version"]))
        if want["engine_pkg"]:
            requested.append(want["engine_pkg"] + (("==" + self.p["transfer_engine_version"])
                                                   if self.p["transfer_engine_version"] else ""))
        if requires or requested:
            hashes.update(self._lock_of(self._resolve(requires + requested, constraints), want["exclude"])[0])
        # The held projects, each by itself; one the sources do not offer (a torch from another index, the
        # collection's deep_ep) stays out of the lock and is named.
        held = ["%s==%s" % (project, version) for project, version in sorted(seen["holds"].items())
                if project != "deep-ep"]
        unlocked = []
        for spec in list(held):
            try:
                report = self._resolve([spec], constraints, "--no-deps", "--ignore-installed")
            except StepFailed as exc:
                words = [ln.strip() for ln in (exc.extra.get("stderr") or "").splitlines() if ln.startswith("ERROR")]
                unlocked.append(spec)
                held.remove(spec)
                self.result["reasons"].append("%s is held but left out of the lock: %s"
                                              % (spec, " ".join(words[:2]) or exc))
                continue
            hashes.update(self._lock_of(report, ())[0])
        self.result["requirements_hashes"] = hashes
        self.result["lock"] = {"packages": len(hashes), "requested": [top] + requested + held,
                               "excluded": dropped, "holds": seen["holds"], "unlocked_holds": unlocked,
                               "python": self.python}

    def _resolve(self, specs, constraints, *flags):
        """pip's installation report of a dry run of ``specs`` with ``flags`` under the ``constraints`` file;
        StepFailed naming the specs and pip's words when it cannot resolve them."""
        report = os.path.join(self.module.tmpdir, "gpufleet-sglang-lock-report.json")
        saved, self.pins = self.pins, {}     # resolving, not installing: no --require-hashes of an older lock
        try:
            argv = self.pip("--dry-run", "--quiet", "--report", report, *(list(flags) + specs))
        finally:
            self.pins = saved
        argv[argv.index("--constraint") + 1] = constraints   # the holds of this run, not the node's file
        rc, out, err = self.run(argv, check=False)
        if rc != 0:
            raise StepFailed("pip could not resolve %s from the sources given (rc=%s): %s"
                             % (", ".join(specs), rc, (err or out).strip()[-1500:]),
                             rc=rc, cmd=argv, stdout=out[-4000:], stderr=err[-4000:])
        try:
            with open(report) as handle:
                data = json.load(handle)
        except (OSError, IOError, ValueError) as exc:
            raise StepFailed("pip's resolver report %s could not be read: %s" % (report, exc))
        if not isinstance(data, dict) or not isinstance(data.get("install"), list):
            raise StepFailed("pip's resolver report %s is not a report of pip install (no install list)" % report)
        return data

    @staticmethod
    def _lock_of(report, exclude):
        try:
            return lock_from_report(report, exclude=exclude)
        except SglangError as exc:
            raise StepFailed("pip's resolver report: %s" % exc)

    # --- observe: what is asked, checked against the node before anything is done ----------------------

    def observe_request(self, facts):
        """The request, checked: ``{kernel_pkg, engine, engine_pkg, bundled, exclude}``; StepFailed naming a bad
        version, a wheelhouse that fails its checksums, or a transfer engine the node cannot run."""
        p = self.p
        if not p["version"]:
            raise StepFailed("state=%s needs version, the SGLang release such as 0.5.8" % p.get("state", "present"))
        try:
            kernel_pkg = kernel_package_for(p["version"])
        except SglangError as exc:
            raise StepFailed("version: %s" % exc)
        if self.wheelhouse:
            self.check_wheelhouse()
        engine = p["transfer_engine"]
        refusal = transfer_engine_check(engine, self.transfer["peermem_loaded"], self.transfer["dmabuf"],
                                        p["mooncake_dmabuf"])
        if refusal:
            raise StepFailed(refusal)
        bundled = p["use_bundled_deepep"]
        return {"kernel_pkg": kernel_pkg, "engine": engine, "engine_pkg": self.engine_package(engine, facts),
                "bundled": bundled, "exclude": list(p["exclude"]) + ([] if bundled else ["sgl-deep-ep"])}

    def check_wheelhouse(self):
        problems = wheelhouse_problems(self.wheelhouse, self.p["wheelhouse_checksums"])
        if problems:
            raise StepFailed("wheelhouse %s failed its checksums: %s" % (self.wheelhouse, "; ".join(problems)))

    def engine_package(self, engine, facts):
        """The distribution of the transfer engine (the NIXL build of torch's CUDA major), None for none."""
        p = self.p
        if engine == "mooncake":
            return "mooncake-transfer-engine"
        if engine != "nixl":
            return None
        cuda = facts["torch_cuda"] or p["cuda_version"]
        if not cuda:
            raise StepFailed("transfer_engine=nixl: torch %s carries no CUDA label (+cuXXX); give cuda_version "
                             "(e.g. 12.9) so the matching nixl-cu12/nixl-cu13 build is chosen"
                             % facts["versions"]["torch"])
        if facts["torch_cuda"] and p["cuda_version"] and \
                facts["torch_cuda"].split(".", 1)[0] != str(p["cuda_version"]).split(".", 1)[0]:
            raise StepFailed("cuda_version %s does not match torch %s (CUDA %s); NIXL must match torch's CUDA major"
                             % (p["cuda_version"], facts["versions"]["torch"], facts["torch_cuda"]))
        try:
            return nixl_package_for(cuda)
        except SglangError as exc:
            raise StepFailed("transfer_engine=nixl: %s" % exc)

    def observe_node(self, probe, facts, want):
        """What holds now: ``{holds, moved, constraints_before, constraints, pip_conf, pin_conf, conf_before}``.
        The constraints file and pip.conf are read as text or refused (a binary file reads as no pins); a hold that
        replaces another pin of its project in the constraints file is warned about, naming both."""
        self._stamp_before = facts["deep_ep"].get("stamp_key")
        self.collection_wheel = facts["deep_ep"].get("wheel")
        before = self._read(read_pip_file, self.constraint_file, "constraints file")
        pip_conf = self.p["pip_config_file"] or os.path.join(prefix_or_root(facts), "pip.conf")
        conf_before = self._read(read_pip_file, pip_conf, "pip configuration")
        holds = self.wanted_holds(facts, probe)
        facts["holds"] = holds
        held_deep_ep = facts["deep_ep"] if "deep-ep" in holds else None
        pinned = constraint_entries(before)
        constraints = before
        for project, version in sorted(holds.items()):
            replaced = [line for line in pinned.get(project, []) if not _pins_version(line, version)]
            if replaced:
                self.module.warn("hold %s %s %s %s in the constraints file %s (the hold wins; change the hold "
                                 "if the pin was meant)"
                                 % (project, version, "overrides, for the lock," if self.p.get("state") == "lock"
                                    else "replaces", " and ".join(replaced), self.constraint_file))
            constraints = constraint_text(constraints, project, version)
        return {"holds": holds, "moved": moved(None, probe_versions(probe), holds, held_deep_ep, want["bundled"]),
                "constraints_before": before, "constraints": constraints, "pip_conf": pip_conf,
                "pin_conf": facts["virtualenv"] or bool(self.p["pip_config_file"]), "conf_before": conf_before}

    # --- plan: what is to be done, in words (the reasons) ------------------------------------------------

    def plan(self, facts, want, seen):
        p = self.p
        versions = facts["versions"]
        engine, engine_pkg, holds = want["engine"], want["engine_pkg"], seen["holds"]
        todo = []
        if seen["moved"]:
            todo.append("repair: %s" % "; ".join(seen["moved"]))
        if not want["bundled"] and versions["sgl_deep_ep"]:
            todo.append("sgl-deep-ep %s is installed (its deep_ep shadows the collection's): removing it"
                        % versions["sgl_deep_ep"])
        if versions["sglang"] != p["version"]:
            todo.append("sglang %s is installed, %s is wanted" % (versions["sglang"], p["version"]))
        if p["kernel_version"] and versions["kernel"] != p["kernel_version"]:
            todo.append("%s %s is installed, %s is wanted"
                        % (want["kernel_pkg"], versions["kernel"], p["kernel_version"]))
        if engine_pkg and (normalize(engine_pkg) != (versions["nixl_package"] if engine == "nixl"
                                                     else versions["mooncake_package"])
                           or (p["transfer_engine_version"] and p["transfer_engine_version"]
                               != (versions["nixl"] if engine == "nixl" else versions["mooncake"]))):
            todo.append("transfer engine %s%s is not installed" % (
                engine_pkg, ("==" + p["transfer_engine_version"]) if p["transfer_engine_version"] else ""))
        if engine == "nixl" and versions["nixl_package"] == "nixl":
            todo.append("the nixl meta package is installed (it pulls both CUDA builds): replacing it with %s"
                        % engine_pkg)
        if seen["constraints"] != seen["constraints_before"]:
            todo.append("constraints %s hold %s" % (self.constraint_file,
                                                    ", ".join("%s==%s" % kv for kv in sorted(holds.items()))))
        if seen["pin_conf"] and self.constraint_file not in pip_conf_constraints(seen["conf_before"]):
            todo.append("%s names the constraints file" % seen["pip_conf"])
        return todo

    # --- apply: hold, repair, install ----------------------------------------------------------------

    def apply(self, probe, facts, want, seen):
        p = self.p
        versions = facts["versions"]
        engine, engine_pkg = want["engine"], want["engine_pkg"]
        # Hold first: constraints, pip.conf.
        self.write(self.constraint_file, seen["constraints"])
        if seen["pin_conf"]:
            self.write(seen["pip_conf"], pip_conf_text(seen["conf_before"], self.constraint_file))
        # Repair and put the held projects in place (never torch unless it moved).
        self.repair(probe, facts, seen["holds"], want["bundled"])
        # SGLang without its dependencies, then its requirements less the excluded projects.
        if versions["sglang"] != p["version"] or not self._requirements_met(probe, want["exclude"]):
            self.install_sglang(want["exclude"])
        if p["kernel_version"]:
            self.run(self.pip("--no-deps", "--force-reinstall", "%s==%s" % (want["kernel_pkg"], p["kernel_version"])))
        if engine == "nixl" and probe_versions(self.probe()).get("nixl"):
            self.run(self.pip_uninstall("nixl"))
        if engine_pkg:
            spec = engine_pkg + (("==" + p["transfer_engine_version"]) if p["transfer_engine_version"] else "")
            self.install_checked([spec], "transfer engine %s" % engine_pkg)

    def install_sglang(self, exclude):
        p = self.p
        self.run(self.pip("--no-deps", "sglang==%s" % p["version"]))
        rc, out, err = self.run([self.python, "-c", REQUIRES_SCRIPT, "sglang"], record=False)
        try:
            reqs = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise StepFailed("could not read the requirements of sglang %s: %r" % (p["version"], out[-300:]))
        kept, dropped = self._split(reqs, exclude)
        self.result["excluded_requirements"] = dropped
        debian = set(self.facts_of(self.probe())["debian_owned"])
        wanted_ignore = [normalize(x) for x in (p["ignore_installed"] if p["ignore_installed"] is not None
                                                else [r[0] for r in reqs])]
        for project in sorted(debian & set(wanted_ignore) & set(normalize(r[0]) for r in reqs)):
            self.run(self.pip("--ignore-installed", "--no-deps", project))
        if kept:
            self.install_checked(kept, "the requirements of sglang %s" % p["version"])

    def verify(self, probe, want, seen):
        """Prove the pins held after the install; repair once, then fail naming what moved."""
        p = self.p
        holds, bundled = seen["holds"], want["bundled"]
        after = self.probe()
        after_facts = self.facts_of(after)
        left = moved(probe_versions(probe), probe_versions(after), holds,
                     after_facts["deep_ep"] if "deep-ep" in holds else None, bundled)
        if left:
            if not p["repair"]:
                raise StepFailed("the install moved what the collection holds: %s" % "; ".join(left))
            self.repair(after, after_facts, holds, bundled)
            after = self.probe()
            after_facts = self.facts_of(after)
            left = moved(probe_versions(probe), probe_versions(after), holds,
                         after_facts["deep_ep"] if "deep-ep" in holds else None, bundled)
        after_facts.update(holds=holds, constraint_file=self.constraint_file, moved=left)
        self.result["ansible_facts"]["gpufleet_sglang"] = after_facts
        if left:
            raise StepFailed("after repair, still not as held: %s" % "; ".join(left))
        if p["nvshmem_home"] and after_facts["nvshmem_ok"] is False:
            raise StepFailed("libnvshmem_host.so.3 does not resolve to %s/lib (found %s): DeepEP would load another "
                             "NVSHMEM than its IBGDA build; rerun the nvshmem role"
                             % (p["nvshmem_home"], after_facts["libraries"]["libnvshmem_host.so.3"]))

    @staticmethod
    def _split(reqs, exclude):
        excluded = set(normalize(e) for e in exclude)
        kept = [r[1] for r in reqs if normalize(r[0]) not in excluded]
        dropped = [r[1] for r in reqs if normalize(r[0]) in excluded]
        return kept, dropped

    def _requirements_met(self, probe, exclude):
        """Whether sglang's requirements (less the excluded) are installed - a cheap check by name only."""
        rc, out, err = self.run([self.python, "-c", REQUIRES_SCRIPT, "sglang"], check=False, record=False)
        if rc != 0:
            return False
        try:
            reqs = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False
        kept, _dropped = self._split(reqs, exclude)
        names = set(normalize(r[0]) for r in reqs if r[1] in kept)
        return names <= set((probe.get("dists") or {}).keys())

    def install_checked(self, specs, what):
        try:
            self.run(self.pip(*specs))
        except StepFailed as exc:
            text = (exc.extra.get("stderr") or "") + (exc.extra.get("stdout") or "")
            if "ResolutionImpossible" in text or "conflict" in text.lower():
                lines = [ln.strip() for ln in text.splitlines() if "requires" in ln or "depends on" in ln
                         or "constraint" in ln.lower() or "conflict" in ln.lower()]
                raise StepFailed("%s conflict with what the constraints file %s holds (torch, NCCL, cuDNN, deep_ep): "
                                 "%s. Choose the SGLang release made for the held torch (the profile's sglang_version "
                                 "and torch version go together), or change the held version deliberately."
                                 % (what, self.constraint_file, " | ".join(lines[:8]) or text[-800:]),
                                 **exc.extra)
            raise

    def repair(self, probe, facts, holds, bundled):
        versions = probe_versions(probe)
        done = []
        if not bundled and versions.get("sgl-deep-ep"):
            self.run(self.pip_uninstall("sgl-deep-ep"))
            done.append("removed sgl-deep-ep %s" % versions["sgl-deep-ep"])
        nvidia = []
        torch_moved = None
        for project, version in sorted(holds.items()):
            if project == "deep-ep":
                continue
            if moved(None, versions, {project: version}):
                if project == "torch":
                    torch_moved = version
                else:
                    nvidia.append("%s==%s" % (project, version))
        if torch_moved:
            self.run(self.pip("--no-deps", "--force-reinstall", "torch==%s" % torch_moved))
            done.append("torch put back to %s (was %s)" % (torch_moved, versions.get("torch")))
        if nvidia:
            self.run(self.pip("--no-deps", "--force-reinstall", *nvidia))
            done.append("reinstalled %s" % ", ".join(nvidia))
        if "deep-ep" in holds and not bundled:
            state = deep_ep_state(self.probe()) if done else facts["deep_ep"]
            if not state["collection"]:
                wheel = self.collection_wheel or state.get("wheel")
                if not wheel or not os.path.isfile(wheel):
                    raise StepFailed("deep_ep is not the collection's build (%s) and its wheel %s is not on the node; "
                                     "rerun the deepep role" % ("; ".join(state["reasons"]), wheel))
                self.run(self.pip("--no-deps", "--force-reinstall", wheel))
                done.append("reinstalled the collection's DeepEP from %s" % wheel)
                self._restore_stamp(facts)
        self.result["repaired"].extend(done)

    def _restore_stamp(self, facts):
        """pip put the wheel's files back; the build stamp deepep_build wrote beside them stays if the directory did."""
        stamp_dir = facts["deep_ep"].get("dir")
        if stamp_dir and not os.path.isfile(os.path.join(stamp_dir, ".gpufleet-build.json")):
            self.result["reasons"].append("the deep_ep build stamp is gone from %s: rerun the deepep role to write it"
                                          % stamp_dir)

    def write(self, path, text):
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            os.chmod(tmp, 0o644)
            self.module.atomic_move(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _pins_version(line, version):
    """Whether the constraint ``line`` (``project==version``, any spacing) pins exactly ``version``."""
    name, sep, pinned = line.partition("==")
    return bool(sep) and pinned.strip() == str(version) and not any(c in name.strip() for c in "<>!~=;[@ ")


def prefix_or_root(facts):
    return facts.get("prefix") or "/"


def _main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="str", default="python3"),
            state=dict(type="str", choices=["facts", "present", "lock"], default="facts"),
            version=dict(type="str"),
            kernel_version=dict(type="str"),
            hold=dict(type="dict", default={}),
            hold_deep_ep=dict(type="bool", default=True),
            use_bundled_deepep=dict(type="bool", default=False),
            exclude=dict(type="list", elements="str", default=[]),
            transfer_engine=dict(type="str", choices=["none", "nixl", "mooncake"], default="none"),
            transfer_engine_version=dict(type="str"),
            cuda_version=dict(type="str"),
            mooncake_dmabuf=dict(type="bool", default=False),
            nvshmem_home=dict(type="path"),
            cuda_home=dict(type="path", default="/usr/local/cuda"),
            index_url=dict(type="str"),
            extra_index_urls=dict(type="list", elements="str", default=[]),
            find_links=dict(type="list", elements="str", default=[]),
            no_index=dict(type="bool", default=False),
            wheelhouse=dict(type="path"),
            wheelhouse_checksums=dict(type="dict"),
            requirements_hashes=dict(type="dict", default={}),
            break_system_packages=dict(type="bool", default=False),
            ignore_installed=dict(type="list", elements="str"),
            pip_extra_args=dict(type="list", elements="str", default=[]),
            constraint_file=dict(type="path"),
            pip_config_file=dict(type="path"),
            repair=dict(type="bool", default=True),
            dg_cache_dir=dict(type="path"),
            timeout=dict(type="int", default=1800),
        ),
        required_if=[("state", "present", ("version",)), ("state", "lock", ("version",))],
        supports_check_mode=True,
    )
    # A password in a package source is refused (check_source), and kept out of the result (invocation too).
    for value in [module.params["index_url"]] + list(module.params["extra_index_urls"] or []):
        module.no_log_values.update(url_secrets(value))
    env = SglangEnv(module)
    try:
        result = env.main()
    except StepFailed as exc:
        extra = dict(env.result)
        extra.update(dict((key, value) for key, value in (("rc", exc.rc), ("cmd", exc.cmd)) if value is not None))
        extra.update(exc.extra)
        module.fail_json(msg=to_native(exc), **extra)
    except (OSError, IOError) as exc:
        module.fail_json(msg="sglang_env: %s" % to_native(exc), **env.result)
    module.exit_json(**result)


def main():
    guarded("sglang_env", _main)


if __name__ == "__main__":
    main()
