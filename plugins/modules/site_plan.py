#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: site_plan
short_description: Plan the batches of playbooks/site.yml, record a converged node, name the nodes that did not converge
version_added: 0.2.0
description:
  - The bookkeeping of C(playbooks/site.yml) in one action (it runs in the controller process; the node is only
    read or stamped by M(gpufleet.deepep.site_state)).
  - With O(state=plan), keys the node's settings (every variable of a phase, C(gpufleet_*) but the play's own
    C(gpufleet_serial), C(gpufleet_max_fail_percentage), C(gpufleet_hosts), C(gpufleet_site_*), C(gpufleet_reboot_*)
    and C(gpufleet_allow_reboot)) with the content a converge rolls out (site.yml, the plugins, the reboot role, the
    rules catalogue and every phase role, hashed once per run), checks the node against its stamp O(stamp) and
    decides its lane. C(intact) (same key, every fingerprint matches, O(fast) and no C(--tags)) runs no phase;
    C(steady) (same key, drift) goes in the first batch and reboots one node at a time; C(changing) (new settings,
    new collection, new node, or settings that cannot be keyed) goes through the canary and the batches. The node
    joins the group C(gpufleet_site_<lane>).
  - The stamp is read with M(gpufleet.deepep.site_state)'s own check, run as one C(python -c) of its module_utils
    (standard library only) under the host's C(ansible_python_interpreter) or the interpreter discovered earlier in
    the run, without a module payload for the node to compile (on a simulated node 0.03 CPU-s instead of 0.15), within
    120 s (a read that does not answer by then fails the task with the file and the bound). When
    the interpreter is left to discovery, or that run gives no result (an interpreter that refuses C(-c), an old
    Python, unexpected output), the module runs instead, with the same result. RV(state_read) says which ran.
  - With O(state=plan), a changing node with a key, with O(fast) and without C(--tags), is also asked whether it
    was born from a golden image (M(gpufleet.deepep.image_boot) reads O(image_manifest) and holds it against the
    node; its decision is the fact C(gpufleet_image)). Lane C(image) puts the node in the group
    C(gpufleet_site_image), a child of C(gpufleet_site_changing) (site.yml's first-boot play takes it; the converge
    play leaves it out); lane C(refused) fails the task with every reason (another kernel, GPU arch or NIC naming);
    lane C(converge) or no manifest changes nothing. Intact and steady nodes are not asked.
  - With O(state=record), marks the node converged and, after a full run (no C(--tags), no phase tag skipped),
    records its stamp with every path and package the phase roles publish (C(<role>_site_watch),
    C(<role>_site_watch_packages)). Never reported changed.
  - With O(state=report), names the nodes of O(hosts) (within C(--limit)) that did not converge; run it once.
author: gpufleet.deepep maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.deepep.attributes
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: The stamp is read in check mode as in a normal run, and never written.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    platforms: posix
  action:
    support: full
    description: Runs in the controller process; the node runs M(gpufleet.deepep.site_state).
options:
  state:
    description: C(plan) the lane of the node, C(record) its stamp after a full run, C(report) the nodes that did not
      converge.
    type: str
    choices: [plan, record, report]
    default: plan
  stamp:
    description: The node's stamp file (M(gpufleet.deepep.site_state)'s O(gpufleet.deepep.site_state#module:path)).
    type: path
    default: /var/lib/gpufleet-site-converged.json
  fast:
    description: With O(state=plan), whether an intact node may skip every phase (C(gpufleet_site_fast)).
    type: bool
    default: true
  reboot_throttle:
    description:
      - With O(state=plan), the reboot throttle of a node that is not steady (C(gpufleet_reboot_throttle); 0 the
        batch); a steady node reboots one at a time. Set as the fact C(gpufleet_site_reboot_throttle), which the
        reboot handler reads first.
    type: raw
    default: 0
  serial:
    description: With O(state=plan), the batches of the changing nodes (C(gpufleet_serial)), returned as a list.
    type: raw
    default: [1, '25%']
  hosts:
    description: With O(state=report), the host pattern of the run (C(gpufleet_hosts)).
    type: str
    default: all
  image_manifest:
    description: With O(state=plan), the image manifest a changing node is asked about
      (M(gpufleet.deepep.image_boot)'s O(gpufleet.deepep.image_boot#module:manifest)).
    type: path
    default: /etc/gpufleet/image.json
notes:
  - "ansible-core reports a task that adds its host to a new group as changed; site.yml's plan task says
    C(changed_when: false)."
  - C(serial) is a play keyword, templated before any host is known; site.yml's converge play puts one batch of every
    steady node before O(serial).
"""

EXAMPLES = r"""
- name: Plan the lane of the node
  gpufleet.deepep.site_plan:
    fast: "{{ gpufleet_site_fast | default(true) }}"
    reboot_throttle: "{{ gpufleet_reboot_throttle | default(0) }}"
  tags: [always]

- name: Record the converged state of the node
  gpufleet.deepep.site_plan:
    state: record
  tags: [always]

- name: Name the nodes that failed or never came back
  gpufleet.deepep.site_plan:
    state: report
    hosts: "{{ gpufleet_hosts | default('all') }}"
  run_once: true
  tags: [always]
"""

RETURN = r"""
lane:
  description: The lane of the node (C(intact), C(steady) or C(changing)).
  returned: state=plan
  type: str
  sample: steady
key:
  description: The settings key of the node (empty when its settings could not be keyed).
  returned: state=plan
  type: str
  sample: 0d1c3f5e9a7b4c2d8e6f0a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d
reason:
  description: Why the node is in its lane (M(gpufleet.deepep.site_state)'s reason).
  returned: state=plan
  type: str
  sample: "the node drifted since its last full converge: /opt/deepep/unified-env.sh: content changed"
msg:
  description: The lane and its reason, as the play prints them; with O(state=report), the nodes that did not converge.
  returned: always
  type: str
  sample: "intact: the node is as its last full converge left it; no phase runs (-e gpufleet_site_fast=false runs them)"
serial:
  description: The batches of the changing nodes (O(serial) as a list).
  returned: state=plan
  type: list
  elements: raw
  sample: [1, 25%]
state_read:
  description: How the stamp was read (C(reader), one C(python -c) of site_state's check; C(module), the
    M(gpufleet.deepep.site_state) module).
  returned: state=plan, when the node's settings could be keyed
  type: str
  sample: reader
image:
  description: With O(state=plan) on a node that was asked (see the description), its image lane (C(image),
    C(refused), C(converge), or C(none) without a manifest).
  returned: state=plan, on a changing node with a key, O(fast) and no C(--tags)
  type: str
  sample: image
drift:
  description: Each difference between the stamp and the node.
  returned: state=plan
  type: list
  elements: str
recorded:
  description: Whether the stamp was recorded (or would be, in check mode).
  returned: state=record
  type: bool
failed_nodes:
  description: The nodes that did not converge.
  returned: state=report
  type: list
  elements: str
  sample: [b200-cluster-3]
ansible_facts:
  description: With O(state=plan), C(gpufleet_site_key), C(gpufleet_site_lane), C(gpufleet_site_reboot_throttle) and
    C(gpufleet_site_converged), and C(gpufleet_image) (M(gpufleet.deepep.image_boot)'s decision) on a node that was
    asked whether it is image-born; with O(state=record), C(gpufleet_site_converged).
  returned: state=plan or state=record
  type: dict
"""
