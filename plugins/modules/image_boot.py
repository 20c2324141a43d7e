#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: image_boot
short_description: Recognize an image-born node and finish its first boot
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - With O(state=check), reads the image manifest that C(gpufleet.deepep.node_seal) left on the node, and holds it
    against the node, that is against the running kernel (C(uname -r); a baked image is valid for one kernel, its DKMS and
    precompiled modules are built for it), the GPU arch (from O(nvidia_smi)) and the NIC naming
    (C(/sys/class/infiniband)), and O(site_key) against the key the image was baked with. It returns the decision
    as the fact C(gpufleet_image), with lane C(image) (host-specific work only), C(refused) (the image does not fit this
    node, each reason named) or C(converge) (other settings, so every phase runs). Without a manifest, C(present) is
    false and nothing else is read. It changes nothing.
  - With O(state=booted), after the host-specific work, it records the node's site stamp again from the manifest's
    watch list (the same paths and packages, fingerprinted on this node, with O(site_key)) and writes the boot
    record C(/etc/gpufleet/image-boot.json) (hostname, machine id, when). It refuses on a node whose lane is not
    C(image). The next run of C(playbooks/site.yml) finds the node intact.
options:
  site_key:
    description:
      - The settings key of this run (the fact C(gpufleet_site_key)). 1 to 128 characters of C([0-9A-Za-z._-]).
    type: str
    required: true
  state:
    description: C(check) decides; C(booted) records the stamp after the first boot's work.
    type: str
    choices: [check, booted]
    default: check
  manifest:
    description: The image manifest on the node.
    type: path
    default: /etc/gpufleet/image.json
  stamp:
    description: The site stamp written with O(state=booted).
    type: path
    default: /var/lib/gpufleet-site-converged.json
  nvidia_smi:
    description: The nvidia-smi command that reads the GPUs' compute capability.
    type: str
    default: nvidia-smi
  timeout:
    description: Seconds nvidia-smi may take; 1 to 3600.
    type: int
    default: 60
notes:
  - Supports check mode; with O(state=booted) nothing is written and C(changed) says whether it would be.
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Is this an image-born node, and may it take the fast first boot?
  gpufleet.deepep.image_boot:
    site_key: "{{ ansible_facts.gpufleet_site_key }}"

- name: Record the first boot
  gpufleet.deepep.image_boot:
    site_key: "{{ ansible_facts.gpufleet_site_key }}"
    state: booted
"""

RETURN = r"""
ansible_facts:
  description: The decision.
  returned: always
  type: dict
  contains:
    gpufleet_image:
      description: "C(present), C(lane) (C(image), C(refused), C(converge), or C(none) without a manifest),
        C(refusals), C(reason), C(manifest) (the manifest read) and C(node) (C(kernel), C(gpu), C(nic) read here)."
      type: dict
      sample: {"present": true, "lane": "image", "refusals": [], "reason": "image-born node",
               "node": {"kernel": "6.8.0-52-generic", "gpu": {"arch": ["10.0"], "count": 8},
                        "nic": {"naming": "mlx5", "devices": 8}}}
reason:
  description: One sentence on the outcome.
  returned: always
  type: str
watched:
  description: With O(state=booted), how many paths (glob matches counted) and packages the stamp covers.
  returned: when state is booted
  type: int
"""

import datetime
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import read_json_dict
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import image as im
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import site_state as ss
from ansible_collections.gpufleet.deepep.plugins.module_utils._runner import run_bounded

# The node's root, under which every path is read; private (no option): unit tests point it at a tree.
_ROOT = "/"


def check_options(p):
    im.check_key("site_key", p["site_key"])
    if not 1 <= p["timeout"] <= 3600:
        raise im.ImageError("timeout=%r is out of range (expected seconds, 1 to 3600)" % p["timeout"])
    for name in ("stamp", "manifest"):
        if not p[name].startswith("/") or p[name].endswith("/"):
            raise im.ImageError("%s %r is not a file path (expected an absolute path of a file)" % (name, p[name]))
    if not p["nvidia_smi"] or any(c.isspace() for c in p["nvidia_smi"]):
        raise im.ImageError("nvidia_smi %r is not a command (expected a command name or absolute path, no spaces)"
                            % p["nvidia_smi"])


def decide(p, runner):
    root = p["root"]
    manifest = im.read_manifest(im.under(root, p["manifest"]))
    if manifest is None:
        return {"present": False, "lane": "none", "refusals": [], "reason": "no image manifest: not image-born",
                "manifest": {}, "node": {}}
    node = {"kernel": im.kernel_release(root), "gpu": im.gpu_facts(p["nvidia_smi"], runner, p["timeout"]),
            "nic": im.nic_facts(root), "machine_id": im.machine_id(root)}
    out = dict(im.boot_decision(manifest, node, p["site_key"]), present=True, manifest=manifest, node=node)
    node["machine_id"] = bool(node["machine_id"])
    return out


def run(module, runner=run_bounded):
    p = dict(module.params, root=_ROOT)
    result = {"changed": False, "ansible_facts": {}}
    try:
        check_options(p)
        facts = decide(p, runner)
        result["ansible_facts"]["gpufleet_image"] = facts
        result["reason"] = facts["reason"]
        if p["state"] == "check":
            return result
        if facts["lane"] != "image":
            raise im.ImageError("state=booted on a node whose image lane is %r: %s (expected an image-born node "
                                "that fits its image)" % (facts["lane"], facts["reason"]))
        root = p["root"]
        manifest = facts["manifest"]
        stamp_full = im.under(root, p["stamp"])
        problem = ss.stamp_target_problem(stamp_full)  # refused in check mode too, as a real boot record would be
        if problem:
            raise ss.SiteStateError(problem)
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
        # The paths are the node's own: fingerprinted here, under the root the node sees.
        watch = [im.under(root, w) for w in manifest["site_watch"]]
        content = ss.record_content(p["site_key"], watch, manifest["site_packages"], now,
                                    dpkg_status=im.under(root, "/var/lib/dpkg/status"))
        if root not in ("", "/"):
            content["watch"] = {"/" + k[len(root):].lstrip("/"): v for k, v in content["watch"].items()}
        old, dummy = ss.read_stamp(stamp_full)
        result["watched"] = ss.watched_count(content)
        boot_full = im.under(root, im.BOOT_RECORD)
        boot = read_json_dict(boot_full) or {}
        mid = im.machine_id(root)
        same = ss.same_record(old, content) and boot.get("machine_id") == mid
        if same:
            result["reason"] = "the first boot of this image-born node is recorded already"
            return result
        result.update(changed=True, reason="recorded the first boot of an image-born node (%s)" % facts["reason"])
        if not module.check_mode:
            ss.write_stamp(stamp_full, content)
            im.write_manifest(boot_full, {"booted_at": now, "hostname": socket.gethostname(), "machine_id": mid,
                                          "sealed_at": manifest.get("sealed_at"), "site_key": p["site_key"]})
        return result
    except (im.ImageError, ss.SiteStateError) as exc:
        module.fail_json(msg=str(exc), **result)
    except OSError as exc:
        where = getattr(exc, "filename", "") or ""
        module.fail_json(msg="cannot record the first boot: %s: %s" % (where, exc.strerror or exc), **result)
    return result


def _main():
    module = AnsibleModule(
        argument_spec=dict(
            site_key=dict(type="str", required=True, no_log=False),
            state=dict(type="str", choices=["check", "booted"], default="check"),
            manifest=dict(type="path", default=im.DEFAULT_MANIFEST),
            stamp=dict(type="path", default=im.DEFAULT_STAMP),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


def main():
    guarded("image_boot", _main)


if __name__ == "__main__":
    main()
