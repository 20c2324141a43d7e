# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the audit role in one step: build every node's facts document from its registered
node_stack result, judge the fleet against the rule catalogue, find drift, and write fleet.json, fleet.md and
fleet.html into the run directory. Runs in the controller process (no module is sent anywhere), once per play.

Arguments (all set by roles/audit/tasks/main.yml; their spec is ARGUMENT_SPEC of plugin_utils/_audit/report.py,
documented in modules/audit_fleet_report.py, checked with validate_argument_spec):
  rules_file       the rule catalogue (YAML on the controller)
  extra_rules      rules added to the catalogue; disabled_rules: ids left out
  hosts            the hosts to report (default: ansible_play_hosts_all)
  result_var       the registered node_stack result of each host (default audit_r_node); its gpufleet_sglang
                   (gather: [..., sglang]) is the node's SGLang stack
  expect_var       each host's expectations (default audit_expect)
  groups           inventory groups for drift (default: the inventory's); skip_groups: never compared
  output_dir       a fixed run directory, or empty for <output_root>/<UTC timestamp>
  output_root      where timestamped run directories go; latest_link: point <output_root>/latest at the run
  verify_summary   the summary.json of the last verification, shown per node (figures beside gates, transport)
  meta             more keys for the report's meta (inventory, limit, ...)
  fail_on          the severity cut-off of the returned failing (critical, warning, info, none)
Returns run_dir, files, summary, status (host -> ok/critical/warning/info/not_judged/unreachable) and failing (the
hosts at or above fail_on). The report is the audit's output, so it is written under --check too; nothing on the
nodes is touched by this step.
"""

from __future__ import annotations

import datetime
import os

import yaml

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.engine import (
    DEFAULT_DRIFT_SKIP_GROUPS, audit_fleet
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.document import node_document, plain_data
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.expr import AuditError
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.pipeline import levels_at_or_above
from ansible_collections.gpufleet.deepep.plugins.module_utils._fileio import (
    LinkRefused,
    read_json_dict,
    refuse_write_through_link,
    write_atomic,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.verification import (
    VerificationInputError,
    attach_verification,
)
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._audit.report import ARGUMENT_SPEC, render
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._action_args import validated_args

REPORT_FILES = (("fleet.json", "json"), ("fleet.md", "md"), ("fleet.html", "html"))


def load_catalogue(path, extra_rules=None, disabled_rules=None):
    try:
        with open(path, "r", encoding="utf-8") as handle:
            catalogue = yaml.safe_load(handle)
    except (IOError, OSError, yaml.YAMLError) as exc:
        raise AnsibleActionFail("rules_file %s: %s (expected a YAML rule catalogue such as roles/audit/files/"
                                "rules.yml)" % (path, to_native(exc)))
    if not isinstance(catalogue, dict) or not isinstance(catalogue.get("rules"), list):
        raise AnsibleActionFail("rules_file %s: expected a mapping with a rules list" % path)
    disabled = set(disabled_rules or [])
    catalogue = dict(catalogue)
    catalogue["rules"] = [r for r in catalogue["rules"] if r.get("id") not in disabled] + list(extra_rules or [])
    return catalogue


def _not_a_directory(path):
    """What ``path`` (which exists and is not a directory) is, for a refusal."""
    if os.path.islink(path):
        return "a symbolic link to %s, not a directory" % os.path.realpath(path)
    return "a file, not a directory" if os.path.isfile(path) else "not a directory"


def refuse_non_directory(path, option):
    """Refuse ``path`` (a run directory or the root of run directories, the value of ``option``) when it, or the
    deepest part of it that exists, is not a directory: a file would end in ``[Errno 17] File exists`` and a file
    above it in ``Not a directory``. A path that does not exist yet is fine (it is created); links are
    ``refuse_write_through_link``'s."""
    expected = "expected a directory, or a path that does not exist yet below a directory (it is created)"
    if os.path.lexists(path) and not os.path.isdir(path):
        raise AnsibleActionFail("audit_fleet_report: %s %s is %s; %s"
                                % (option, path, _not_a_directory(path), expected))
    current = os.path.dirname(path)
    while current and not os.path.lexists(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    if current and os.path.lexists(current) and not os.path.isdir(current):
        raise AnsibleActionFail("audit_fleet_report: %s %s: %s is %s, so nothing can be created below it; %s"
                                % (option, path, current, _not_a_directory(current), expected))


def _host_var(hostvars, host, name):
    try:
        return plain_data(hostvars[host].get(name))
    except (KeyError, AttributeError):
        return None


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        args = validated_args(self, ARGUMENT_SPEC)
        if not args["rules_file"]:
            raise AnsibleActionFail("rules_file=%r: expected the path of the rule catalogue" % (args["rules_file"],))
        catalogue = load_catalogue(args["rules_file"], plain_data(args.get("extra_rules")),
                                   plain_data(args.get("disabled_rules")))
        hosts = plain_data(args.get("hosts") or task_vars.get("ansible_play_hosts_all") or [])
        hostvars = task_vars.get("hostvars") or {}
        result_var = args["result_var"] or "audit_r_node"
        expect_var = args["expect_var"] or "audit_expect"
        documents = {}
        for host in hosts:
            documents[host] = node_document(host, _host_var(hostvars, host, "group_names"),
                                            _host_var(hostvars, host, result_var),
                                            _host_var(hostvars, host, expect_var))
        groups = plain_data(args.get("groups") if args.get("groups") is not None else task_vars.get("groups"))
        for group, members in (groups or {}).items():
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise AnsibleActionFail("audit_fleet_report: groups %s %r: expected a list of inventory host names "
                                        "(groups: {group: [host, ...]})" % (group, members))
        skip = plain_data(args.get("skip_groups"))
        now = datetime.datetime.now(datetime.timezone.utc)
        output_dir = args.get("output_dir") or ""
        output_root = args.get("output_root") or ""
        # Never through a link: a (dangling) symlink as output_dir would have its target created and written.
        try:
            if output_dir:
                run_dir = refuse_write_through_link(os.path.expanduser(output_dir), "output_dir")
            elif output_root:
                root = refuse_write_through_link(os.path.expanduser(output_root), "output_root")
                run_dir = refuse_write_through_link(os.path.join(root, now.strftime("%Y%m%dT%H%M%SZ")), "output_root")
            else:
                raise AnsibleActionFail("output_dir or output_root is required (where the report goes)")
            refuse_non_directory(run_dir if output_dir else root, "output_dir" if output_dir else "output_root")
        except LinkRefused as exc:
            raise AnsibleActionFail("audit_fleet_report: %s" % to_native(exc))
        verify_path = os.path.expanduser(args.get("verify_summary") or "")
        verify_data = read_json_dict(verify_path) if verify_path else None
        if verify_path and verify_data is None:
            raise AnsibleActionFail("audit_fleet_report: verify_summary=%s cannot be read as a JSON object (missing, "
                                    "unreadable or malformed); expected the summary.json a verification run wrote "
                                    "(playbooks/verify.yml)" % verify_path)
        meta = {"generated_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "check_mode": bool(self._play_context.check_mode),
                "rules_file": args["rules_file"], "run_dir": run_dir}
        meta.update(plain_data(args.get("meta") or {}))
        try:
            fleet = audit_fleet(documents, catalogue, groups=groups or {},
                                skip_groups=DEFAULT_DRIFT_SKIP_GROUPS if skip is None else skip, meta=meta)
            if verify_path:
                attach_verification(fleet, verify_data, source=verify_path)
            rendered = [(name, render(fleet, fmt)) for name, fmt in REPORT_FILES]
        except VerificationInputError as exc:
            raise AnsibleActionFail("audit_fleet_report: verify_summary: %s" % to_native(exc))
        except (AuditError, ValueError) as exc:
            raise AnsibleActionFail("audit: %s" % to_native(exc))
        try:
            if not os.path.isdir(run_dir):
                os.makedirs(run_dir, 0o755)
            files = []
            for name, _text in rendered:  # every file checked before the first is written
                refuse_write_through_link(os.path.join(run_dir, name), "output_dir", what="file in %s" % run_dir)
            for name, text in rendered:
                path = os.path.join(run_dir, name)
                write_atomic(path, text)
                files.append(path)
            if args.get("latest_link") and not output_dir:
                link = os.path.join(os.path.dirname(run_dir), "latest")
                tmp_link = link + ".tmp-%d" % os.getpid()
                os.symlink(os.path.basename(run_dir), tmp_link)
                os.replace(tmp_link, link)
        except LinkRefused as exc:
            raise AnsibleActionFail("audit_fleet_report: %s" % to_native(exc))
        except (IOError, OSError) as exc:
            raise AnsibleActionFail("audit_fleet_report: cannot write the report into %s (%s): %s; expected a "
                                    "directory the controller's user can create and write"
                                    % (run_dir, "output_dir" if output_dir else "output_root",
                                       exc.strerror or to_native(exc)))
        status = dict((host, node["status"]) for host, node in fleet["nodes"].items())
        levels = levels_at_or_above(args["fail_on"])
        result.update(changed=True, run_dir=run_dir, files=files, summary=fleet["summary"], status=status,
                      failing=sorted(host for host, worst in status.items() if worst in levels))
        return result
