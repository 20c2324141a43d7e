#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_params
short_description: Report the NVIDIA driver's live parameters and manage its persistent options
version_added: 0.1.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Reads the live parameters of the loaded NVIDIA kernel driver (C(/proc/driver/nvidia/params)) and its
    version, and returns them as facts under C(ansible_facts.gpufleet_nvidia), including the parsed
    C(RegistryDwords) and whether C(PeerMappingOverride) and stream memory operations are active.
  - Reads every modprobe configuration file the way modprobe does and reports what each sets for the
    C(nvidia) module, the merged options the kernel would receive at the next load, options the kernel
    would ignore (such as the C(NVreg_PeerMappingOverride=1) of old runbooks) and conflicts between files.
  - With O(registry_dwords) or O(driver_options), writes exactly one line, for example
    C(options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"), to
    O(conf_path), atomically, with a header that marks the file as managed. The line holds exactly what
    was asked, in a stable order (driver options sorted by name, then C(NVreg_RegistryDwords) with its keys
    sorted by name). With O(state=absent) the file is removed.
  - Called with neither O(registry_dwords) nor O(driver_options) (or both empty) and O(state=present), it
    only reports facts and never writes.
  - Returns RV(reboot_required) whenever the persistent configuration asks for something the live driver
    does not show, or the driver is not loaded. The options only take effect when the module is loaded,
    so reboot (or reload the module) to apply them.
options:
  params_path:
    description:
      - The driver's live parameter file. When it is missing the driver counts as not loaded.
    type: path
    default: /proc/driver/nvidia/params
  version_path:
    description:
      - The driver's version file.
    type: path
    default: /proc/driver/nvidia/version
  conf_path:
    description:
      - The modprobe configuration file this module manages. It must end in C(.conf) (modprobe ignores
        other files) and should lie in one of O(modprobe_dirs). Its directory is created (mode C(0755)) when
        missing. The file is written with mode C(0644).
      - modprobe reads files in order of file name, and for a parameter set several times the last setting
        wins; a file that sorts after this one can override it (see O(conflicts)).
      - Nothing is written, chmodded or removed through a link, as elsewhere in the collection. When the run would
        manage the file (something asked, or O(state=absent)), a O(conf_path) that is a symbolic link (or lies
        under a dangling one) fails, in check mode too, naming the link and its target - replacing the link would
        leave the target with its options, writing through it would change a file this module does not own. Point
        O(conf_path) at a real file or remove the link. A facts-only run reads through it.
    type: path
    default: /etc/modprobe.d/gpufleet-nvidia.conf
  modprobe_dirs:
    description:
      - The modprobe configuration directories, in modprobe's order of precedence. A file in an earlier
        directory hides a file of the same name in a later one; the files are then read in order of file
        name, whatever their directory.
    type: list
    elements: path
    default:
      - /etc/modprobe.d
      - /run/modprobe.d
      - /usr/local/lib/modprobe.d
      - /usr/lib/modprobe.d
      - /lib/modprobe.d
  registry_dwords:
    description:
      - >-
        Registry keys to set through C(NVreg_RegistryDwords), as a dict of name to value, for example
        C({PeerMappingOverride: 1}).
      - Names are letters, digits and underscores. Values are integers from 0 to 4294967295, given as
        integers or as strings of decimal digits or C(0x) hexadecimal (V("0x1")); they are written in decimal.
      - The driver replaces the whole C(RegistryDwords) string with the last one modprobe passes, so every
        key wanted must be listed here.
    type: dict
  driver_options:
    description:
      - >-
        Parameters of the C(nvidia) kernel module, as a dict of name to value, for example
        C({EnableStreamMemOPs: 1}). Names are accepted with or without the C(NVreg_) prefix.
      - Integer parameters take integers or strings of decimal digits or C(0x) hexadecimal; string
        parameters (such as C(RmMsg)) take strings without double quotes, backslashes or newlines.
      - C(RegistryDwords) is set through O(registry_dwords), and C(PeerMappingOverride), a registry key, is
        refused here with that fix.
    type: dict
  state:
    description:
      - V(present) writes O(conf_path) with what is asked (when something is asked).
      - V(absent) removes O(conf_path); O(registry_dwords) and O(driver_options) must not be given.
    type: str
    choices: [present, absent]
    default: present
  conflicts:
    description:
      - What to do when another modprobe file would override what is asked, so that the kernel would not
        get it at the next load (a file that sorts after O(conf_path) and sets the same parameter to another
        value, a same-named file in an earlier directory that hides O(conf_path), or O(conf_path) outside
        O(modprobe_dirs)).
      - V(fail) fails before writing anything, naming the file and the fix.
      - V(warn) writes O(conf_path) anyway and warns; RV(effective) and RV(conflicts) then show what the
        kernel would really get, and RV(reboot_required) is computed from that.
      - Conflicts that do not defeat the request (a file that sorts before O(conf_path), or one that sets
        the same value) are always reported as warnings.
    type: str
    choices: [fail, warn]
    default: fail
notes:
  - The kernel ignores parameters a module does not have (with a warning in the kernel log), so a line
    such as C(options nvidia NVreg_PeerMappingOverride=1) has no effect; this module reports it in
    C(ineffective) with the fix. A bad value for an integer parameter makes the driver fail to load; it is
    reported with status C(invalid).
  - If the nvidia module is loaded from the initramfs, the initramfs holds its own copy of the modprobe
    configuration and must be regenerated (for example with C(update-initramfs -u)) for a change to apply.
  - Options given on the kernel command line (C(nvidia.NVreg_...)) are not read by this module.
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.files
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
seealso:
  - name: DeepEP, NVSHMEM IBGDA and PeerMappingOverride
    description: The driver options DeepEP documents for GPU-initiated RDMA.
    link: https://github.com/deepseek-ai/DeepEP
"""

EXAMPLES = r"""
- name: Report the driver's live and persistent parameters (changes nothing)
  gpufleet.deepep.nvidia_params:

- name: Show whether PeerMappingOverride is live
  ansible.builtin.debug:
    msg: "PeerMappingOverride active: {{ ansible_facts.gpufleet_nvidia.peer_mapping_override_active }}"

- name: Persist the options DeepEP needs (takes effect at the next reboot)
  gpufleet.deepep.nvidia_params:
    driver_options:
      EnableStreamMemOPs: 1
    registry_dwords:
      PeerMappingOverride: 1
  register: gpufleet_nvidia_result

- name: Say that a reboot is pending
  ansible.builtin.debug:
    msg: "{{ gpufleet_nvidia_result.reboot_reasons }}"
  when: gpufleet_nvidia_result.reboot_required

- name: Write even though another file overrides it, and only warn
  gpufleet.deepep.nvidia_params:
    registry_dwords:
      PeerMappingOverride: "0x1"
    conflicts: warn

- name: Remove the managed file
  gpufleet.deepep.nvidia_params:
    state: absent
"""

RETURN = r"""
conf_path:
  description: The managed file.
  returned: always
  type: str
  sample: /etc/modprobe.d/gpufleet-nvidia.conf
line:
  description: The C(options nvidia) line asked for (written, or to be written in check mode); null when nothing
    is asked or O(state=absent).
  returned: always
  type: str
  sample: options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"
reboot_required:
  description:
    - True when the persistent configuration (after this run) asks for something the live driver does not
      show, when the driver is not loaded and the configuration asks for anything, or when this run removed
      a setting that is still live. The options take effect only when the nvidia module is loaded.
  returned: always
  type: bool
  sample: true
reboot_reasons:
  description: Why a reboot is required, one sentence per parameter; empty when none is.
  returned: always
  type: list
  elements: str
  sample:
    - "EnableStreamMemOPs: persistent config sets 1, the live driver shows 0"
    - "RegistryDwords PeerMappingOverride: persistent config sets 1, the live driver shows nothing"
effective:
  description: What the kernel would get at the next load of the nvidia module, after this run (predicted in
    check mode); the same dictionary as C(ansible_facts.gpufleet_nvidia.persistent), described there.
  returned: always
  type: dict
  sample:
    driver_options:
      EnableStreamMemOPs: 1
    registry_dwords:
      PeerMappingOverride: 1
    registry_dwords_raw: PeerMappingOverride=1;
    registry_dwords_ignored: []
    sources:
      NVreg_EnableStreamMemOPs: /etc/modprobe.d/gpufleet-nvidia.conf
      NVreg_RegistryDwords: /etc/modprobe.d/gpufleet-nvidia.conf
    ineffective: []
    conflicts: []
conflicts:
  description: Parameters that several modprobe files set to different values (the same list as
    C(ansible_facts.gpufleet_nvidia.persistent.conflicts), described there).
  returned: always
  type: list
  elements: dict
  sample:
    - parameter: NVreg_RegistryDwords
      settings:
        - path: /etc/modprobe.d/gpufleet-nvidia.conf
          line: 4
          value: PeerMappingOverride=1;RMForceStaticBar1=1;
        - path: /etc/modprobe.d/nvidia-peermapping.conf
          line: 1
          value: PeerMappingOverride=0x1
      honoured_path: /etc/modprobe.d/nvidia-peermapping.conf
      honoured_value: PeerMappingOverride=0x1
      defeats_request: true
diff:
  description: Before and after content of O(conf_path), in diff mode.
  returned: when diff mode is on
  type: dict
  sample:
    before: ""
    after: |
      # Managed by the gpufleet.deepep collection (module gpufleet.deepep.nvidia_params).
      options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"
    before_header: /etc/modprobe.d/gpufleet-nvidia.conf
    after_header: /etc/modprobe.d/gpufleet-nvidia.conf
ansible_facts:
  description: Facts about the NVIDIA driver.
  returned: always
  type: dict
  contains:
    gpufleet_nvidia:
      description: The driver's live state, its persistent configuration and what is pending.
      returned: always
      type: dict
      contains:
        driver_loaded:
          description:
            - Whether the driver is loaded (O(params_path) exists and holds printable C(Name) C(value) lines, a name
              and a value separated by a colon; random bytes or other text there do not count, see
              RV(ansible_facts.gpufleet_nvidia.params_unreadable)).
          returned: always
          type: bool
          sample: true
        params_unreadable:
          description: Why O(params_path) exists but was not read as the params of a loaded driver; null otherwise.
          returned: always
          type: str
          sample: null
        driver_version:
          description: The driver version from O(version_path); null when unknown.
          returned: always
          type: str
          sample: 580.159.04
        driver_open_kernel_module:
          description: True for the open GPU kernel module, false for the proprietary one, null when unknown.
          returned: always
          type: bool
          sample: true
        params:
          description: Every line of O(params_path) as name to value; numbers as integers, quoted values as
            strings without the quotes. Empty when the driver is not loaded.
          returned: always
          type: dict
          sample:
            EnableStreamMemOPs: 0
            DeviceFileMode: 438
            RegistryDwords: ""
            ResmanDebugLevel: 4294967295
        registry_dwords:
          description: The live C(RegistryDwords) parsed as the driver does, name to integer (C(0x) hexadecimal
            and octal read as the driver reads them).
          returned: always
          type: dict
          sample:
            PeerMappingOverride: 1
        registry_dwords_ignored:
          description: Pieces of the live C(RegistryDwords) the driver skips, each with C(entry) and C(reason).
          returned: always
          type: list
          elements: dict
          sample: []
        peer_mapping_override_active:
          description: Whether C(PeerMappingOverride) is live and non-zero (from C(RegistryDwords), or from a bare
            C(PeerMappingOverride) line of O(params_path)).
          returned: always
          type: bool
          sample: false
        stream_memops_enabled:
          description: Whether the live C(EnableStreamMemOPs) is non-zero.
          returned: always
          type: bool
          sample: false
        config_files:
          description:
            - Every modprobe file that sets options for the nvidia module, in the order modprobe reads them,
              then the files hidden by a same-named file in an earlier directory (after this run; predicted in
              check mode).
          returned: always
          type: list
          elements: dict
          contains:
            path:
              description: The file.
              type: str
              sample: /etc/modprobe.d/nvidia-peermem.conf
            shadowed_by:
              description: The same-named file that hides this one (modprobe does not read it); null when read.
              type: str
              sample: null
            options:
              description: Each option the file gives the nvidia module, name as written to value (integer for
                integer parameters, string otherwise, null for a bare word); when a name repeats the last wins.
              type: dict
              sample:
                NVreg_PeerMappingOverride: 1
            registry_dwords:
              description: The file's C(NVreg_RegistryDwords) parsed, or null when the file does not set it.
              type: dict
              sample: null
            ineffective:
              description: Options of this file the kernel ignores or rejects (same form as
                C(persistent.ineffective)).
              type: list
              elements: dict
              sample:
                - path: /etc/modprobe.d/nvidia-peermem.conf
                  line: 1
                  option: NVreg_PeerMappingOverride
                  value: "1"
                  status: registry_key
                  reason: "PeerMappingOverride is a registry key, not a parameter of the nvidia module: the
                    kernel ignores NVreg_PeerMappingOverride"
                  fix: 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"
                    (gpufleet.deepep.nvidia_params registry_dwords: {PeerMappingOverride: 1})'
        persistent:
          description: The merged options the kernel would get at the next load of the nvidia module (after
            this run; predicted in check mode). The same dictionary is returned as RV(effective).
          returned: always
          type: dict
          contains:
            driver_options:
              description: Parameter name (without C(NVreg_)) to the honoured value, C(RegistryDwords) excluded.
              type: dict
              sample:
                EnableStreamMemOPs: 1
            registry_dwords:
              description: The honoured C(RegistryDwords) parsed, name to integer; empty when none is set.
              type: dict
              sample:
                PeerMappingOverride: 1
            registry_dwords_raw:
              description: The honoured C(RegistryDwords) string as the kernel gets it; null when none is set.
              type: str
              sample: PeerMappingOverride=1;
            registry_dwords_ignored:
              description: Pieces of the honoured C(RegistryDwords) the driver would skip, with C(entry) and
                C(reason).
              type: list
              elements: dict
              sample: []
            sources:
              description: C(NVreg_) parameter name to the file whose setting is honoured.
              type: dict
              sample:
                NVreg_RegistryDwords: /etc/modprobe.d/nvidia-peermapping.conf
            ineffective:
              description:
                - Options the kernel would ignore or reject, each with C(path), C(line), C(option), C(value),
                  C(status), C(reason) and C(fix) (a corrected line, or null).
                - C(status) is V(registry_key) (a registry key given as a module parameter, such as
                  C(NVreg_PeerMappingOverride), which the kernel ignores), V(unknown) (not a parameter of the
                  nvidia module, ignored) or V(invalid) (a value the kernel rejects, so the nvidia module would
                  fail to load).
              type: list
              elements: dict
              sample:
                - path: /etc/modprobe.d/nvidia-peermem.conf
                  line: 1
                  option: NVreg_PeerMappingOverride
                  value: "1"
                  status: registry_key
                  reason: "PeerMappingOverride is a registry key, not a parameter of the nvidia module: the
                    kernel ignores NVreg_PeerMappingOverride"
                  fix: 'options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;"
                    (gpufleet.deepep.nvidia_params registry_dwords: {PeerMappingOverride: 1})'
            conflicts:
              description:
                - Parameters set to different values by different settings (C(RegistryDwords) compared as parsed
                  keys, so C(PeerMappingOverride=1;) and C(PeerMappingOverride=0x1) agree).
                - Each has C(parameter), C(settings) (every C(path), C(line), C(value) in the order the kernel
                  applies them), C(honoured_path) and C(honoured_value) (the last one, which the kernel keeps)
                  and C(defeats_request) (true when it overrides what this run asked for).
              type: list
              elements: dict
              sample: []
        reboot_required:
          description: The same as RV(reboot_required).
          returned: always
          type: bool
          sample: true
        reboot_reasons:
          description: The same as RV(reboot_reasons).
          returned: always
          type: list
          elements: str
          sample:
            - "RegistryDwords PeerMappingOverride: persistent config sets 1, the live driver shows nothing"
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    LinkRefused,
    refuse_write_through_link,
    write_atomic,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.modprobe import (
    DEFAULT_MODPROBE_DIRS, scan_modprobe
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.request import (
    DEFAULT_CONF_PATH,
    NvidiaParamError,
    check_request,
    managed_settings,
    reboot_check,
    render_file,
    render_line,
    validate_driver_options,
    validate_registry_dwords,
)
from ansible_collections.gpufleet.deepep.plugins.module_utils._nvidia.params import (
    DEFAULT_PARAMS_PATH,
    DEFAULT_VERSION_PATH,
    live_facts,
)

FILE_MODE = 0o644


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            params_path=dict(type="path", default=DEFAULT_PARAMS_PATH),
            version_path=dict(type="path", default=DEFAULT_VERSION_PATH),
            conf_path=dict(type="path", default=DEFAULT_CONF_PATH),
            modprobe_dirs=dict(type="list", elements="path", default=list(DEFAULT_MODPROBE_DIRS)),
            registry_dwords=dict(type="dict"),
            driver_options=dict(type="dict"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            conflicts=dict(type="str", choices=["fail", "warn"], default="fail"),
        ),
        supports_check_mode=True,
    )


def _read(module, path, what):
    """The text of ``path``, or None when it does not exist."""
    if not os.path.exists(path):
        return None
    if os.path.isdir(path):
        module.fail_json(msg="%s %s is a directory, expected a file" % (what, path))
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s %s: %s" % (what, path, to_native(exc)))
    return None


def _write(module, path, content):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    write_atomic(path, content, mode=FILE_MODE, tmp_prefix=".gpufleet-nvidia.")


def _removed(before, after):
    """What ``before`` sets that ``after`` no longer sets (or sets to another value)."""
    out = {}
    for kind in ("driver_options", "registry_dwords"):
        out[kind] = dict((k, v) for k, v in before[kind].items() if after[kind].get(k) != v)
    return out


def _later_name(conf_path, others):
    """A file name beside ``conf_path`` that sorts after every file in ``others``."""
    last = max(os.path.basename(o) for o in others)
    name = "zz-" + os.path.basename(conf_path)
    while name <= last:
        name = "z" + name
    return os.path.join(os.path.dirname(conf_path), name)


def _defeat_message(defeated, conf_path, not_read, written):
    parts = []
    files = []
    for item in defeated:
        if item["honoured_path"] is None or item["honoured_path"] == conf_path:
            parts.append("%s: modprobe would not pass %r from %s (%s)"
                         % (item["parameter"], item["asked"], conf_path, not_read or "it is not read"))
            continue
        files.append(item["honoured_path"])
        parts.append("%s: %s sets it again after %s, so the kernel would honour %r instead of %r"
                     % (item["parameter"], item["honoured_path"], conf_path, item["honoured_value"], item["asked"]))
    fixes = []
    if files:
        fixes.append("remove the nvidia option from %s (or delete the file if it only holds leftovers), or set "
                     "conf_path to a file name that sorts after it, such as %s"
                     % (", ".join(sorted(set(files))), _later_name(conf_path, files)))
    if not_read:
        fixes.append("put conf_path in one of modprobe_dirs where no same-named file in an earlier directory "
                     "hides it")
    if written:
        tail = "It is written anyway (conflicts=warn)."
    else:
        fixes.append("or set conflicts=warn to write it anyway")
        tail = "Nothing was written."
    return ("the persistent nvidia options would not be what was asked: %s. Fix: %s. %s"
            % ("; ".join(parts), "; ".join(fixes), tail))


class NvidiaParams(object):
    """observe (the live driver, the managed file), plan (the file wanted, what modprobe would pass, the reboot
    check and the facts), apply (write or remove the file); ``run`` ends the module."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.conf_path = os.path.normpath(self.p["conf_path"])
        self.dirs = [os.path.normpath(d) for d in self.p["modprobe_dirs"]]
        self.state = self.p["state"]
        self.result = dict(changed=False, conf_path=self.conf_path, line=None, reboot_required=False,
                           reboot_reasons=[], effective={}, conflicts=[])

    def fail(self, msg):
        self.module.fail_json(msg=msg, **self.result)

    # --- observe --------------------------------------------------------------------------------

    def check_params(self):
        conf_path = self.conf_path
        if not conf_path.endswith(".conf") or os.path.basename(conf_path).startswith("."):
            self.fail("conf_path %r is not a file modprobe reads: expected a path ending in .conf whose name does "
                      "not start with a dot, e.g. %s" % (self.p["conf_path"], DEFAULT_CONF_PATH))
        if self.state == "absent" and (self.p["registry_dwords"] or self.p["driver_options"]):
            self.fail("state=absent removes %s; registry_dwords and driver_options are not used with it "
                      "(expected neither, or state=present)" % conf_path)

    def observe_live(self):
        p = self.p
        params_text = _read(self.module, p["params_path"], "params_path")
        version_text = _read(self.module, p["version_path"], "version_path")
        self.live = live_facts(params_text, version_text)
        if params_text is not None and self.live["params_unreadable"]:
            self.module.warn("params_path %s is not the params file of a loaded driver (%s): the driver counts as "
                             "not loaded" % (p["params_path"], self.live["params_unreadable"]))

    def check_request(self):
        """The asked registry keys and driver options, validated against the live driver's parameters."""
        try:
            self.dwords = validate_registry_dwords(self.p["registry_dwords"])
            self.options, option_warnings = validate_driver_options(self.p["driver_options"], self.live["params"])
        except NvidiaParamError as exc:
            self.fail(to_native(exc))
        for warning in option_warnings:
            self.module.warn(warning)

    def observe_conf(self):
        self.current = _read(self.module, self.conf_path, "conf_path")

    def refuse_links(self):
        """Never write, chmod or remove through a link: a conf_path that is a symbolic link is refused whenever the
        run would manage it (state=absent, or something asked), in check mode too; a dangling link above it also."""
        conf_path = self.conf_path
        manages = self.state == "absent" or self.result["line"] is not None
        if not manages:
            return
        if os.path.islink(conf_path):
            link = os.readlink(conf_path)
            target = os.path.realpath(conf_path)
            where = target if os.path.exists(conf_path) else "%s, which does not exist" % target
            self.fail("conf_path %s is a symbolic link (to %s); nvidia_params never writes, chmods or removes through "
                      "a link: replacing it would leave %s with its own options, and writing through it would change "
                      "a file this module does not own. Fix: point conf_path at a real .conf file (the target itself, "
                      "%s, if it is the file to manage and lies in modprobe_dirs), or remove the link (keeping what "
                      "its target sets, if anything) and run again. Nothing was written."
                      % (conf_path, link, where, target))
        try:
            refuse_write_through_link(conf_path, "conf_path", what="file")
        except LinkRefused as exc:
            self.fail("%s. Nothing was written." % to_native(exc))

    # --- plan -----------------------------------------------------------------------------------

    def plan_file(self):
        """The content wanted at conf_path (None: no file), and the line asked for."""
        if self.state == "absent":
            self.desired = None
            return
        line = render_line(self.options, self.dwords)
        self.result["line"] = line
        self.desired = render_file(line) if line is not None else self.current

    def plan_persistent(self):
        """What modprobe would pass after the run, whether it reads conf_path, and what defeats the request."""
        conf_path, dirs = self.conf_path, self.dirs
        self.persistent = scan_modprobe(dirs, overrides={conf_path: self.desired}, live_params=self.live["params"])
        self.not_read = None
        if os.path.dirname(conf_path) not in dirs:
            self.not_read = "%s is not in modprobe_dirs (%s), so modprobe never reads it" % (
                os.path.dirname(conf_path), ", ".join(dirs))
        else:
            for entry in self.persistent["config_files"]:
                if entry["path"] == conf_path and entry["shadowed_by"]:
                    self.not_read = "%s hides it: a same-named file in an earlier directory wins" % entry["shadowed_by"]
        if self.not_read and self.desired is not None and self.result["line"] is not None:
            self.module.warn("conf_path %s: %s" % (conf_path, self.not_read))
        self.defeated = check_request(self.persistent, conf_path, self.options, self.dwords) \
            if self.state == "present" else []
        self.result["effective"] = dict((k, v) for k, v in self.persistent.items() if k != "config_files")
        self.result["conflicts"] = self.persistent["conflicts"]

    def plan_reboot(self):
        """Whether a reboot is pending after the run, and the facts."""
        reboot, reasons, unverified = reboot_check(self.live, self.persistent, _removed(
            managed_settings(self.current), managed_settings(self.desired)))
        for name in unverified:
            self.module.warn("%s is set in the persistent config but %s does not list it, so whether it is live "
                             "cannot be checked; it does not count towards reboot_required"
                             % (name, self.p["params_path"]))
        self.result["reboot_required"] = reboot
        self.result["reboot_reasons"] = reasons
        facts = dict(self.live)
        facts["config_files"] = self.persistent["config_files"]
        facts["persistent"] = self.result["effective"]
        facts["reboot_required"] = reboot
        facts["reboot_reasons"] = reasons
        self.result["ansible_facts"] = dict(gpufleet_nvidia=facts)

    def judge(self):
        """Fail on a defeated request (conflicts=fail), else warn about every conflict and ignored option."""
        persistent, defeated = self.persistent, self.defeated
        if defeated and self.p["conflicts"] == "fail":
            self.fail(_defeat_message(defeated, self.conf_path, self.not_read, written=False))
        for item in persistent["ineffective"]:
            self.module.warn("%s line %s: %s%s" % (item["path"], item["line"], item["reason"],
                                                   "; fix: %s" % item["fix"] if item["fix"] else ""))
        for conflict in persistent["conflicts"]:
            where = ", ".join("%s (%s)" % (s["path"], s["value"]) for s in conflict["settings"])
            self.module.warn("%s is set to different values by %s; the kernel honours the last: %s%s"
                             % (conflict["parameter"], where, conflict["honoured_path"],
                                " which defeats what was asked" if conflict["defeats_request"] else ""))
        if defeated:
            self.module.warn(_defeat_message(defeated, self.conf_path, self.not_read, written=True))

    # --- apply ----------------------------------------------------------------------------------

    def apply(self):
        """Write (or remove) conf_path when it differs, outside check mode; set its mode; the result's changed."""
        conf_path, current, desired = self.conf_path, self.current, self.desired
        changed = current != desired
        if self.module._diff:
            self.result["diff"] = dict(before=current or "", after=desired or "", before_header=conf_path,
                                       after_header=conf_path)
        if changed and not self.module.check_mode:
            try:
                if desired is None:
                    os.unlink(conf_path)
                else:
                    _write(self.module, conf_path, desired)
            except (IOError, OSError) as exc:
                self.fail("cannot write %s: %s" % (conf_path, to_native(exc)))
        if self.result["line"] is not None and (current is not None or not self.module.check_mode):
            changed = self.module.set_mode_if_different(conf_path, FILE_MODE, changed)
        self.result["changed"] = changed

    # --- the run --------------------------------------------------------------------------------

    def run(self):
        self.check_params()
        self.observe_live()
        self.check_request()
        self.observe_conf()
        self.plan_file()
        self.refuse_links()
        self.plan_persistent()
        self.plan_reboot()
        self.judge()
        self.apply()
        self.module.exit_json(**self.result)


def run(module):
    NvidiaParams(module).run()


def _main():
    run(build_module())


def main():
    guarded("nvidia_params", _main)


if __name__ == "__main__":
    main()
