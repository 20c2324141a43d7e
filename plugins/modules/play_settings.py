#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: play_settings
short_description: Check play-level and role values by their form before any host runs
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Judges each value of O(settings) by its form (batch sizes, percentages, counts, timeouts, a verify profile
    against its thresholds table, an HCA mapping, a GID index, extra environment variables) and fails naming
    every bad value, its variable and the form expected.
  - The playbooks run it on the controller (C(delegate_to) C(localhost)) as their first task, so a bad value
    stops the run before any node is touched, instead of crashing inside ansible-core or silently turning a
    check off.
  - Pure logic; reads and writes nothing. An action plugin of the same name judges the values in the controller's
    own process (no module is sent anywhere), so the check costs no round trip wherever the task runs.
extends_documentation_fragment:
  - gpufleet.deepep.attributes
options:
  settings:
    description: The values to check.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The variable, named in a refusal.
        type: str
        required: true
      value:
        description: Its value.
        type: raw
      form:
        description:
          - C(serial), a positive whole number of hosts, a percentage string such as C(25%) (above 0, at most 100), or
            a non-empty list of those; C(percentage), 0 to 100; C(count), 0 or more; C(positive), 1 or more;
            C(seconds), 1 or more; C(choice), one of O(settings[].choices); C(profile), a profile O(settings[].table)
            knows by name, by its declared GPU family (O(settings[].family)) or by a family token (C(gcp_b200) takes
            C(b200)), or C(default) (also an empty one) for the table's loose C(default) gate. Any other profile
            fails instead of running under that loose gate; one that names or declares a GPU family the table has no
            entry for (C(gcp_b300), C(gb200_nvl72)) naming the family and
            the entry to add to O(settings[].table_name), one that names none (C(mycluster)) asking to name it after
            its family or to set C(default); C(hca_mapping),
            C(auto), empty or C(gpu:hca:port,...) with each GPU once; C(gid_index), C(auto), empty or 0 to 255;
            C(env), a mapping of shell variable names to one-line values; C(release), a release C(N.N.N);
            C(pip_release), a release C(N.N.N) optionally with C(.postN); C(path), an absolute path; C(url), an
            http, https or file URL; C(names), a list of non-empty strings.
          - C(source), a download the role will fetch, as a mapping with the key C(type); O(settings[].name) is the
            role's variable prefix (C(cuda_toolkit), C(nvshmem)), named with its variables in a refusal. Type
            C(tarball) (keys C(url), C(checksum)) needs the checksum or a C(file:) URL; type C(git) (keys C(repo),
            C(ref), C(commit)) a commit, or a ref that is a full commit id; type C(apt) (keys C(repo_url),
            C(keyring_url), C(keyring_checksum), C(trusted)) a key checksum where the key is fetched over the network,
            and no C(trusted) repository over the network. Optional keys are C(allow_unverified) (true accepts it as
            it is), C(title) (what the source is of, in the message), C(hint) (appended to the git fix), and with a
            tarball C(repo) and C(ref) to offer the git fix too.
          - Whole numbers may be given as strings of digits (extra vars arrive as strings).
        type: str
        required: true
        choices: [serial, percentage, count, positive, seconds, choice, profile, hca_mapping, gid_index, env, release, pip_release,
                  path, url, names, source]
      choices:
        description: The allowed values, with O(settings[].form=choice).
        type: list
        elements: raw
      table:
        description: The thresholds table (profile to metrics), with O(settings[].form=profile).
        type: dict
      table_name:
        description: The variable that holds O(settings[].table), named in a refusal of the profile.
        type: str
      family:
        description:
          - With O(settings[].form=profile), the GPU family the profile declares (C(gpufleet_gpu_family), e.g.
            C(b200)); empty for none.
          - A declared family picks the table's entry after the exact profile name and before the family tokens of
            the name; a declared family the table has no entry for is refused naming it, as a profile naming it is.
        type: str
      scope:
        description:
          - With O(settings[].form=profile), the gates' scope. Given, the table is the collection's own gates of that
            scope (one entry per GPU family it has figures for, plugins/plugin_utils/_gpu_families.py) with
            O(settings[].table) as the site's overrides (an entry replaces the collection's entry of its name); a
            family the collection has no gate for is refused naming it and why. Not given, O(settings[].table)
            alone is the table.
        type: str
        choices: [intranode, internode]
notes:
  - Runs the same in check mode.
"""

EXAMPLES = r"""
- name: Check the play's settings on the controller
  gpufleet.deepep.play_settings:
    settings:
      - {name: gpufleet_serial, value: "{{ gpufleet_serial | default([1, '25%']) }}", form: serial}
      - {name: gpufleet_max_fail_percentage, value: "{{ gpufleet_max_fail_percentage | default(50) }}", form: percentage}
      - {name: preflight_min_gpus, value: "{{ preflight_min_gpus | default(1) }}", form: positive}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
settings:
  description: Every value checked, by name, normalised (whole numbers as integers).
  returned: success
  type: dict
  sample: {gpufleet_serial: [1, "25%"], gpufleet_max_fail_percentage: 50}
"""
