#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: serve_state
short_description: Facts of a node's SGLang serving - its units' state and SGLang version, the router's workers
version_added: 0.2.0
author: gpufleet.deepep maintainers (@gpufleet)
description:
  - Read only. Lists the units C(gpufleet.deepep.sglang_serve) wrote on the node (an environment file
    C(<prefix>-<role><index>-rank<rank>.env) or C(<prefix>-router.env) in O(config_dir)), and for each its systemd
    state (C(systemctl show), bounded by O(timeout)) and the SGLang version its environment names
    (C(GPUFLEET_SGLANG_VERSION)).
  - With O(router_url) (the router's node), reads the router's C(/readiness) (200 only once a healthy
    prefill/decode pair exists) and C(/workers) (types, health, counts).
  - The audit judges these facts with its C(SERVING_*) rules.
options:
  config_dir:
    description: Where the serving units' environment files are (C(sglang_serve_config_dir)).
    type: path
    default: /etc/gpufleet/sglang-serve
  prefix:
    description:
      - The units' name prefix (C(sglang_serve_unit_prefix)); letters, digits, C(.), C(_) or C(-), starting with a
        letter or digit, without C(..), at most 64 characters (the rule the plan applies to the units it writes).
    type: str
    default: sglang
  router_url:
    description:
      - The router as the node reaches it, e.g. C(http://127.0.0.1:30080); empty on engine nodes.
      - Credentials in the URL (C(user:password@)) are refused; the refusal shows the URL with the password as
        C(***).
    type: str
    default: ""
  timeout:
    description:
      - Seconds each C(systemctl) call may take, and the deadline of each HTTP exchange with the router (connect,
        TLS handshake, headers and body together; a router that trickles its answer is cut off at it).
    type: int
    default: 10
  validate_certs:
    description:
      - Check the certificate of an C(https) O(router_url) (against the system's CAs, or O(ca_path)) and its host
        name. Set V(false) only for a router with a self-signed certificate you trust otherwise.
    type: bool
    default: true
  ca_path:
    description: A PEM file of the CA certificates that sign the router's certificate; unset, the system's CAs.
    type: path
extends_documentation_fragment:
  - gpufleet.deepep.attributes
  - gpufleet.deepep.attributes.facts
"""

EXAMPLES = r"""
- name: Read the serving state of the router's node
  gpufleet.deepep.serve_state:
    router_url: http://127.0.0.1:30080
"""

RETURN = r"""
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    gpufleet_serving:
      description: The node's serving state.
      returned: always
      type: dict
      contains:
        config_dir:
          description: O(config_dir).
          type: str
        prefix:
          description: O(prefix).
          type: str
        units:
          description:
            - One entry a unit - C(unit), C(env_file), C(role) (prefill, decode, router), C(instance) (e.g.
              C(decode1)), C(rank), C(sglang_version), C(load_state), C(active_state), C(sub_state),
              C(unit_file_state), C(main_pid), C(restarts), C(error) (what could not be read, else null; e.g. an
              environment file that is not UTF-8 text is named there, and the other units are still read).
          type: list
          elements: dict
        router:
          description:
            - Null without O(router_url); else C(url), C(ready), C(readiness_status), C(error), C(prefill_count),
              C(decode_count) and C(workers) (C(url), C(worker_type), C(is_healthy), C(bootstrap_port)); a worker
              is healthy only when the router's C(is_healthy) is a JSON C(true) (another value is named in C(error)).
            - C(ready) is true only when C(/readiness) answers 200 and C(/workers) answers 200 with a JSON object
              with a C(workers) list; any other C(/workers) answer (not JSON, a JSON list, an error) is named in
              C(error).
          type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.deepep.plugins.module_utils._guard import guarded
from ansible_collections.gpufleet.deepep.plugins.module_utils._http import url_secrets
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve.state import ServeStateInputError, serving_facts


def _main():
    module = AnsibleModule(argument_spec=dict(
        config_dir=dict(type="path", default="/etc/gpufleet/sglang-serve"),
        prefix=dict(type="str", default="sglang"),
        router_url=dict(type="str", default=""),
        timeout=dict(type="int", default=10),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
    ), supports_check_mode=True)
    p = module.params
    module.no_log_values.update(url_secrets(p["router_url"]))  # a password in it: in no message, nor invocation
    try:
        facts = serving_facts(p["config_dir"], p["prefix"], p["router_url"], p["timeout"],
                              validate_certs=p["validate_certs"], ca_path=p["ca_path"])
    except ServeStateInputError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"gpufleet_serving": facts})


def main():
    guarded("serve_state", _main)


if __name__ == "__main__":
    main()
