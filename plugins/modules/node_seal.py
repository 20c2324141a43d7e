#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_seal
short_description: Seal a converged node for imaging (generalize it, write its image manifest)
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Proves first that the node is converged and intact (its site stamp holds O(site_key) and every fingerprint
    still matches, as C(playbooks/site.yml) left it); refuses with the reason otherwise. A node sealed already
    (its manifest holds O(site_key), its stamp moved into it) passes too, so a second run changes nothing.
  - Then generalizes it, as azhpc-images and ParallelCluster's C(ami_cleanup.sh) do before a capture. C(/etc/machine-id)
    is emptied (not deleted; systemd writes a fresh one at first boot) and C(/var/lib/dbus/machine-id) becomes the
    link to it. Removed are the SSH host keys (cloud-init or the cloud's guest agent makes new ones at first boot;
    Debian's and Ubuntu's openssh-server alone do not, and sshd does not start without them), cloud-init's state
    (C(cloud-init clean --logs) where installed, bounded by O(timeout)), DHCP leases, udev's
    C(70-persistent-net.rules), apt and pip caches, shell histories, systemd's random seed, the persistent journal's
    per-machine-id directories under C(/var/log/journal) (a clone would carry them beside its own), what the collection wrote
    for this host only (verify logs, serving units, the site stamp, whose watch list goes into the manifest) and
    O(extra_paths). Logs are truncated, not deleted. Login keys are removed only with O(remove_authorized_keys).
  - Kept are driver options (C(/etc/modprobe.d)), DOCA-OFED, every build under C(/opt/deepep), the Python
    environments and the env script.
  - Writes the image manifest O(manifest) atomically (mode C(0644)) and returns it as RV(manifest), for the
    playbook to write the controller's copy. It records the versions (Debian packages of the stamp), the build
    keys (O(build_stamps)), the artifacts' sha256 (every file the stamp fingerprints by content), O(profile),
    O(collection_version), the kernel (C(uname -r)), the GPU arch (from O(nvidia_smi)) and the NIC naming.
options:
  site_key:
    description:
      - The settings key the node's stamp must hold (the fact C(gpufleet_site_key), as C(gpufleet.deepep.site_plan)
        computes it). 1 to 128 characters of C([0-9A-Za-z._-]).
    type: str
    required: true
  stamp:
    description: The site stamp of the node (C(gpufleet.deepep.site_state)'s O(gpufleet.deepep.site_state#module:path)).
    type: path
    default: /var/lib/gpufleet-site-converged.json
  manifest:
    description: The image manifest written on the node.
    type: path
    default: /etc/gpufleet/image.json
  profile:
    description: The profile of the node (C(gpufleet_profile)), recorded in the manifest; empty when the inventory has none.
    type: str
    default: ""
  collection_version:
    description: The collection's version, recorded in the manifest (C(galaxy.yml)'s version).
    type: str
    default: ""
  remove_authorized_keys:
    description:
      - Also remove C(/root/.ssh/authorized_keys) and every C(/home/*/.ssh/authorized_keys).
      - Off by default. azhpc-images removes them because its images are public and Packer's key is temporary; an
        image of this collection stays in the operator's project, where the cloud's guest agent injects the keys of
        the metadata at boot anyway, and a key removed here locks out every clone on a site without such an agent.
    type: bool
    default: false
  extra_paths:
    description: More absolute paths or glob patterns to remove (site-specific host identity).
    type: list
    elements: str
    default: []
  build_stamps:
    description: Glob patterns of the builds' stamps (C(<prefix>/.gpufleet-build.json)), whose keys go into the manifest.
    type: list
    elements: str
    default: ["/opt/deepep/*/.gpufleet-build.json"]
  cloud_init:
    description: The cloud-init command; C(cloud-init clean --logs) runs only when it is found.
    type: str
    default: cloud-init
  journalctl:
    description:
      - The journalctl command. Where the node keeps a persistent journal (C(/var/log/journal/<machine-id>)),
        C(journalctl --relinquish-var) runs first (systemd 243 and later) so that systemd-journald writes to C(/run)
        until the next boot; then the journal's directories are removed. Without it journald creates its file again
        under the old machine id at once (measured on a Debian 12 guest, which put its shutdown's log, 8 MB
        preallocated, into the image). A failure is reported in RV(commands) and the directories are removed all the
        same.
    type: str
    default: journalctl
  nvidia_smi:
    description: The nvidia-smi command that reads the GPUs' compute capability.
    type: str
    default: nvidia-smi
  timeout:
    description: Seconds each command (nvidia-smi, cloud-init, journalctl) may take; 1 to 3600.
    type: int
    default: 120
notes:
  - Supports check mode and diff mode; check mode returns in RV(actions) the exact list of what would be removed,
    emptied or run, and RV(manifest) as it would be written, and writes nothing.
  - Run it last on the node. Without host keys, sshd accepts no new connection until the node boots again; Ansible's
    open connection is kept. Stop the node and capture its disk next.
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: full
"""

EXAMPLES = r"""
- name: What would sealing remove?
  gpufleet.deepep.node_seal:
    site_key: "{{ ansible_facts.gpufleet_site_key }}"
  check_mode: true
  diff: true

- name: Seal the node
  gpufleet.deepep.node_seal:
    site_key: "{{ ansible_facts.gpufleet_site_key }}"
    profile: "{{ gpufleet_profile }}"
    collection_version: 0.2.0
  register: seal
"""

RETURN = r"""
actions:
  description: What the seal removed, emptied, linked or ran (in check mode, would), in order.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/machine-id", "action": "empty", "why": "the machine id"}]
commands:
  description: The commands run (C(cloud-init clean --logs)), each with its rc and the end of its stderr.
  returned: always
  type: list
  elements: dict
manifest:
  description: The image manifest (as written, or as check mode would write it).
  returned: always
  type: dict
  sample: {"format": 1, "site_key": "9f2c", "kernel": "6.8.0-52-generic", "gpu": {"arch": ["10.0"], "count": 8},
           "nic": {"naming": "mlx5", "devices": 8}, "profile": "b200_gcp_cuda129"}
manifest_path:
  description: Where the manifest is on the node.
  returned: always
  type: str
sealed:
  description: The node was sealed already (nothing left to do, the manifest kept).
  returned: always
  type: bool
reason:
  description: One sentence on the outcome.
  returned: always
  type: str
"""

import datetime
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import image as im
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import run_bounded

# The node's root, under which every path is read; private (no option): unit tests point it at a tree.
_ROOT = "/"


def check_options(p):
    im.check_key("site_key", p["site_key"])
    im.check_name("profile", p["profile"])
    im.check_name("collection_version", p["collection_version"])
    im.check_paths("extra_paths", p["extra_paths"])
    im.check_paths("build_stamps", p["build_stamps"])
    if not 1 <= p["timeout"] <= 3600:
        raise im.ImageError("timeout=%r is out of range (expected seconds, 1 to 3600)" % p["timeout"])
    for name in ("stamp", "manifest"):
        if not p[name].startswith("/") or p[name].endswith("/"):
            raise im.ImageError("%s %r is not a file path (expected an absolute path of a file)" % (name, p[name]))
    for name in ("cloud_init", "journalctl", "nvidia_smi"):
        if not p[name] or any(c.isspace() for c in p[name]):
            raise im.ImageError("%s %r is not a command (expected a command name or absolute path, no spaces)"
                                % (name, p[name]))


def _which(root, command):
    if command.startswith("/"):
        return command if os.access(im.under(root, command), os.X_OK) else None
    if root not in ("", "/"):
        for d in ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"):
            if os.access(im.under(root, d + "/" + command), os.X_OK):
                return d + "/" + command
        return None
    return shutil.which(command)


def run(module, runner=run_bounded):
    p = dict(module.params, root=_ROOT)
    root = p["root"]
    result = {"changed": False, "actions": [], "commands": [], "manifest": {}, "manifest_path": p["manifest"],
              "sealed": False}
    try:
        check_options(p)
        manifest_full = im.under(root, p["manifest"])
        stamp_full = im.under(root, p["stamp"])
        existing = None
        if not os.path.lexists(stamp_full):
            existing = im.read_manifest(manifest_full)
        if existing is not None and existing["site_key"] == p["site_key"]:
            # Sealed before with these settings: finish what is left (a log written since), keep the manifest.
            manifest = existing
            result["sealed"] = True
        else:
            stamp = im.stamp_for_image(stamp_full, p["site_key"], im.under(root, "/var/lib/dpkg/status"))
            now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
            manifest = im.make_manifest(
                stamp, p["site_key"], p["profile"], p["collection_version"], im.kernel_release(root),
                im.gpu_facts(p["nvidia_smi"], runner, p["timeout"]), im.nic_facts(root),
                im.build_records(root, p["build_stamps"]), now)
            im.relative_to_root(manifest, root)
        cloud_init = _which(root, p["cloud_init"])
        actions = im.plan_seal(root, p["remove_authorized_keys"], p["extra_paths"],
                               cloud_init if (cloud_init and not result["sealed"]) else None, p["stamp"],
                               journalctl=_which(root, p["journalctl"]))
        result.update(actions=actions, manifest=manifest)
        changed = bool(actions) or not result["sealed"]
        result["changed"] = changed
        if module._diff:
            before = "".join("%s\n" % a["path"] for a in actions if a["action"] != "run")
            after = "".join("%s (%s)\n" % (a["path"], "emptied" if a["action"] == "empty" else "linked")
                            for a in actions if a["action"] in ("empty", "link"))
            result["diff"] = [{"before_header": "sealing: paths removed, emptied or relinked",
                               "after_header": "sealed", "before": before, "after": after}]
        if not changed:
            result["reason"] = "the node is sealed already: nothing left to remove"
            return result
        result["reason"] = ("sealed the node: %d paths removed, emptied or relinked; image manifest %s"
                            % (len([a for a in actions if a["action"] != "run"]), p["manifest"]))
        if module.check_mode:
            result["reason"] = "would s" + result["reason"][1:]
            return result
        if not result["sealed"]:
            # The manifest first: a seal cut short leaves a node that names its image and finishes on the next run.
            im.write_manifest(manifest_full, manifest)
        result["commands"] = im.apply_seal(actions, root, runner, p["timeout"])
        return result
    except (im.ImageError, ss.SiteStateError) as exc:
        module.fail_json(msg=str(exc), **result)
    except OSError as exc:
        where = getattr(exc, "filename", "") or ""
        module.fail_json(msg="cannot seal the node: %s: %s" % (where, exc.strerror or exc), **result)
    return result


def _main():
    module = AnsibleModule(
        argument_spec=dict(
            site_key=dict(type="str", required=True, no_log=False),
            stamp=dict(type="path", default=im.DEFAULT_STAMP),
            manifest=dict(type="path", default=im.DEFAULT_MANIFEST),
            profile=dict(type="str", default=""),
            collection_version=dict(type="str", default=""),
            remove_authorized_keys=dict(type="bool", default=False),
            extra_paths=dict(type="list", elements="str", default=[]),
            build_stamps=dict(type="list", elements="str", default=["/opt/deepep/*/.gpufleet-build.json"]),
            cloud_init=dict(type="str", default="cloud-init"),
            journalctl=dict(type="str", default="journalctl"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


def main():
    guarded("node_seal", _main)


if __name__ == "__main__":
    main()
