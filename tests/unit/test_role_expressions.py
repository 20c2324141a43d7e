# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Long Jinja expressions of the roles split into named role vars (issue 48's measure): each OLD_* expression, as the
role held it before, and the role's expression now (read from the role's files with the vars it names: defaults,
vars/main.yml, the task's vars) render the same with ansible's Templar over many combinations of their inputs."""

from __future__ import annotations

import datetime
import itertools
import pickle
import random
import subprocess
import sys

import yaml
from ansible.errors import AnsibleError

from unit_helpers import REPO

MISSING = object()  # the variable is not defined
DEFAULT = object()  # the variable is the role's default
DEBUG = False


def _trusted(value):
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value) if ("{{" in value or "{%" in value) else value
    if isinstance(value, dict):
        return dict((k, _trusted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _yaml(role, path):
    file = REPO / "roles" / role / path
    return (yaml.safe_load(file.read_text(encoding="utf-8")) or {}) if file.is_file() else {}


def _tasks(items):
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def task(role, tasks_file, name):
    found = [t for t in _tasks(_yaml(role, "tasks/" + tasks_file) or _yaml(role, tasks_file)) if t.get("name") == name]
    assert len(found) == 1, "%s: %d tasks named %r" % (tasks_file, len(found), name)
    return found[0]


def role_vars(role, *tasks_):
    """The role's defaults, then its vars/main.yml, then the vars of the given tasks, as the play would see them."""
    out = dict(_yaml(role, "defaults/main.yml"))
    out.update(_yaml(role, "vars/main.yml"))
    for one in tasks_:
        out.update(one.get("vars") or {})
    return out


def render(expression, variables, inputs):
    """The expression rendered with the variables and the inputs (MISSING: the variable undefined, DEFAULT: as the
    variables have it); an error is rendered as its class, so that old and new failing alike compare equal."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    merged = dict(variables)
    for name, value in inputs.items():
        if value is DEFAULT:
            continue
        if value is MISSING:
            merged.pop(name, None)
        else:
            merged[name] = value
    templar = Templar(loader=DataLoader(), variables=_trusted(merged))
    try:
        return templar.template(_trusted(expression))
    except AnsibleError as err:
        return type(err).__name__ + (": " + str(err).splitlines()[0] if DEBUG else "")


def combinations(limit=None, **axes):
    """Every combination of the axes' values, or (limit) that many of them drawn alike on every run."""
    names = list(axes)
    every = [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]
    return every if limit is None or limit >= len(every) else random.Random(48).sample(every, limit)


def assert_same(old, new, old_vars, new_vars, cases):
    count = 0
    for inputs in cases:
        before, after = render(old, old_vars, inputs), render(new, new_vars, inputs)
        assert after == before, "inputs %r: old %r, new %r" % (inputs, before, after)
        assert not isinstance(before, str) or not before.startswith("Ansible"), "inputs %r: %s" % (inputs, before)
        count += 1
    assert count > 0
    return count


# audit ---------------------------------------------------------------------------------------------------------------

OLD_AUDIT_SGLANG_EXPECT = """{{ (sglang_server | default({})) | combine({'transfer_engine': sglang_transfer_engine | default('none'),
                                           'mooncake_dmabuf': sglang_mooncake_dmabuf | default(false) | bool,
                                           'use_bundled_deepep': sglang_use_bundled_deepep | default(false) | bool}) }}"""
OLD_AUDIT_SERVING = """{{ inventory_hostname in (groups[sglang_serve_prefill_group | default('sglang_prefill')] | default([])
                          + groups[sglang_serve_decode_group | default('sglang_decode')] | default([])
                          + groups[sglang_serve_router_group | default('sglang_router')] | default([])) }}"""
OLD_AUDIT_ROUTER_URL = """{{ ('http://127.0.0.1:%d' % ((sglang_serve_router | default({})).port | default(30080) | int))
   if inventory_hostname in groups[sglang_serve_router_group | default('sglang_router')] | default([]) else '' }}"""
# With expect.fabric (the profile's gpufleet_fabric), added after the split as one more key of the same form.
# gpu_family added deliberately (the NVL72_* rules judge where the profile's family spans hosts).
OLD_AUDIT_EXPECT = """{{ {'hca_prefix': audit_expected_hca_prefix if audit_expected_hca_prefix | length > 0 else none,
    'fabric': audit_expected_fabric if audit_expected_fabric | length > 0 else none,
    'gpu_family': audit_expected_gpu_family if audit_expected_gpu_family | length > 0 else none,
    'profile': audit_profile if audit_profile | length > 0 else none,
    'intranode_only': gpufleet_intranode_only | default(false) | bool,
    'deepep_v2': audit_expected_deepep_v2 | bool,
    'nccl_ep': audit_expected_nccl_ep | bool,
    'nccl_pin': (nccl_version | default('') if nccl_enabled | default(false) | bool else '') or none,
    'sglang': audit_sglang_expect if audit_sglang | bool else none,
    'unset': ([] if audit_profile | length > 0 else ['gpufleet_profile'])
             + ([] if gpufleet_intranode_only is defined else ['gpufleet_intranode_only'])
             + ([] if deepep_generation is defined else ['deepep_generation'])
             + ([] if audit_expected_hca_prefix | length > 0 else ['audit_expected_hca_prefix'])}
   | combine(audit_expect_extra) }}"""

GROUPS = {"sglang_prefill": ["p1"], "sglang_decode": ["d1", "d2"], "sglang_router": ["r1"],
          "pf": ["n1"], "dc": ["n2"], "rt": ["n3", "p1"], "all": ["p1", "d1", "d2", "r1", "n1", "n2", "n3", "x"]}


def _audit_old_vars():
    old = dict(_yaml("audit", "defaults/main.yml"), audit_sglang_expect=OLD_AUDIT_SGLANG_EXPECT,
               audit_serving=OLD_AUDIT_SERVING, audit_serving_router_url=OLD_AUDIT_ROUTER_URL)
    return old


def test_audit_serving_hosts_and_router_url():
    old_vars, new_vars = _audit_old_vars(), role_vars("audit")
    new_serving, new_url = new_vars["audit_serving"], new_vars["audit_serving_router_url"]
    cases = combinations(
        300, inventory_hostname=["p1", "d2", "r1", "n1", "n2", "n3", "x"],
        groups=[GROUPS, {"all": ["x"]}, dict(GROUPS, sglang_decode=[])],
        sglang_serve_prefill_group=[MISSING, "pf", "nosuch"],
        sglang_serve_decode_group=[MISSING, "dc"],
        sglang_serve_router_group=[MISSING, "rt", "nosuch"],
        sglang_serve_router=[MISSING, {}, {"port": 31000}, {"port": "8443"}])
    assert assert_same(OLD_AUDIT_SERVING, new_serving, old_vars, new_vars, cases) == 300
    assert assert_same(OLD_AUDIT_ROUTER_URL, new_url, old_vars, new_vars, cases) == 300


def test_audit_sglang_expect():
    cases = combinations(sglang_server=[MISSING, {}, {"tp": 8, "dp": 8, "transfer_engine": "x"}],
                         sglang_transfer_engine=[MISSING, "nixl"],
                         sglang_mooncake_dmabuf=[MISSING, "yes", False],
                         sglang_use_bundled_deepep=[MISSING, True, "no"])
    new_vars = role_vars("audit")
    assert assert_same(OLD_AUDIT_SGLANG_EXPECT, new_vars["audit_sglang_expect"], _audit_old_vars(), new_vars,
                       cases) == 54


def test_audit_expect():
    note = task("audit", "main.yml", "Note what the node's profile expects")
    new_vars = role_vars("audit", note)
    new = note["ansible.builtin.set_fact"]["audit_expect"]
    cases = combinations(300, doca_ofed_wanted_hca_prefix=[MISSING, "", "mlx5"],
                         gpufleet_profile=[MISSING, "", "h200"],
                         gpufleet_intranode_only=[MISSING, True, "no"],
                         gpufleet_fabric=[MISSING, "roce"],
                         gpufleet_gpu_family=[MISSING, "", "gb200"],
                         deepep_generation=[MISSING, "v2", "auto"],
                         nccl_enabled=[MISSING, True, False],
                         nccl_version=[MISSING, "2.32.3"],
                         sglang_version=[MISSING, "0.5.8"],
                         sglang_enabled=[MISSING, False],
                         sglang_server=[MISSING, {"tp": 8}],
                         sglang_transfer_engine=[MISSING, "mooncake"],
                         audit_expect_extra=[{}, {"profile": "other", "extra": [1]}])
    assert assert_same(OLD_AUDIT_EXPECT, new, _audit_old_vars(), new_vars, cases) == 300


# preflight and sglang: the findings pipeline's arguments ---------------------------------------------------------------

OLD_PREFLIGHT_JUDGED = """{{ preflight_node | gpufleet.deepep.findings_pipeline(
     lookup('ansible.builtin.file', preflight_rules_file) | from_yaml, 'preflight',
     host=inventory_hostname, profile=gpufleet_profile | default('-'),
     kernel=ansible_facts.kernel | default('?'), settings=preflight_settings) }}"""
OLD_SGLANG_JUDGED = """{{ ansible_facts | gpufleet.deepep.findings_pipeline(
     lookup('ansible.builtin.file', sglang_rules_file) | from_yaml, 'sglang',
     host=inventory_hostname, groups=group_names, fail_on=sglang_fail_on,
     settings={'stage': sglang_judge_stage, 'server': sglang_server,
               'transfer_engine': sglang_transfer_engine, 'mooncake_dmabuf': sglang_mooncake_dmabuf,
               'use_bundled_deepep': sglang_use_bundled_deepep}) }}"""


def assert_same_with_collection(*args):
    """assert_same in a fresh interpreter whose plugin loader finds the collection (.collections), so that its filters
    resolve by their FQCN (in this process the collection may already be imported as a plain package)."""
    script = ("import pickle, sys\n"
              "from ansible.plugins.loader import init_plugin_loader\n"
              "init_plugin_loader([sys.argv[1]])\n"
              "sys.path[:0] = [sys.argv[2]]\n"
              "import test_role_expressions\n"
              "print(test_role_expressions.assert_same(*pickle.load(sys.stdin.buffer)))\n")
    proc = subprocess.run([sys.executable, "-c", script, str(REPO / ".collections"), str(REPO / "tests" / "unit")],
                          input=pickle.dumps(args), capture_output=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return int(proc.stdout.decode().split()[-1])


def test_preflight_judged():
    from findings_pipeline_cases import PREFLIGHT_HOSTS
    from test_findings_pipeline import preflight_settings

    judge = task("preflight", "judge.yml", "Describe the node for the rules")
    new_vars = dict(role_vars("preflight", judge), role_path=str(REPO / "roles" / "preflight"))
    new = judge["ansible.builtin.set_fact"]["preflight_judged"]
    cases = [dict(inventory_hostname=host, preflight_node=PREFLIGHT_HOSTS[host]["preflight_node"],
                  preflight_settings=preflight_settings(host), ansible_facts=facts, **profile)
             for host in sorted(PREFLIGHT_HOSTS) for profile in ({}, {"gpufleet_profile": "b200_roce"})
             for facts in ({}, {"kernel": "6.8.0-1015-gcp"})]
    assert assert_same_with_collection(OLD_PREFLIGHT_JUDGED, new, new_vars, new_vars, cases) == 16


def test_sglang_judged():
    from findings_pipeline_cases import SGLANG_HOSTS

    judge = task("sglang", "judge.yml", "Judge the SGLang rules ({{ sglang_judge_stage }})")
    new_vars = dict(role_vars("sglang", judge), role_path=str(REPO / "roles" / "sglang"))
    new = judge["vars"]["sglang_judged"]
    cases = []
    for host, host_vars in sorted(SGLANG_HOSTS.items()):
        switched = {"sglang_mooncake_dmabuf": True, "sglang_use_bundled_deepep": "yes"}
        for groups, switches in ((["all"], {}), (["sglang_prefill"], switched)):
            inputs = dict((k, v) for k, v in host_vars.items() if k != "case_facts")
            cases.append(dict(inputs, inventory_hostname=host, ansible_facts=host_vars["case_facts"],
                              group_names=groups, **switches))
    assert assert_same_with_collection(OLD_SGLANG_JUDGED, new, new_vars, new_vars, cases) == 8


# build_once, env_script, sglang_serve, image, deepep: sub-expressions named by task vars --------------------------------

OLD_BUILD_ONCE_PLAN_MSG = """{{ 'Would build ' ~ build_once_title ~ ' ' ~ build_once_plan.key[:8] ~ ' here and publish '
   ~ build_once_artifact_name ~ ' to ' ~ build_once_store
   if build_once_builder == inventory_hostname
   else 'Would install ' ~ build_once_title ~ ' ' ~ build_once_plan.key[:8] ~ ' from '
        ~ ((build_once_artifact_name ~ ' on this host') if not build_once_plan.would_build
           else 'the artifact store')
        ~ (' (built by ' ~ build_once_builder ~ ')' if build_once_builder | length > 0 else '') }}
({{ build_once_plan.reason | default('') }})"""
OLD_ENV_SCRIPT_GATHER = """{{ ['modules', 'paths']
   + (['rdma'] if env_script_reread or ansible_facts.gpufleet_rdma is not defined else [])
   + (['gpus'] if env_script_reread or ansible_facts.gpufleet_gpus is not defined else []) }}"""
OLD_SGLANG_SERVE_READY = """router {{ sglang_serve_plan.router.url }} ready: {{ sglang_serve_workers.json.stats.prefill_count }} prefill and
{{ sglang_serve_workers.json.stats.decode_count }} decode workers healthy
({{ ((now(utc=true) - sglang_serve_t0 | to_datetime('%Y-%m-%dT%H:%M:%S.%f')).total_seconds()) | round(1) }} s
after the plan)."""
OLD_IMAGE_NOT_READY = """The image-born node {{ inventory_hostname }} is not DeepEP-ready after its first boot:
import deep_ep: {{ image_post_boot.ansible_facts.gpufleet_stack.deep_ep_import.error | default('not tried') }};
mapping: {{ image_post_boot.ansible_facts.gpufleet_hca_mapping.error | default('none') }}."""
OLD_DEEPEP_JIT_REPORT = """JIT cache {{ deepep_jit_cache_dir }}: {{ jit.kernel_count | default(0) }} kernels
({{ jit.kernels | default([]) | join(', ') }}), {{ origins[jit.from] | default('not filled yet') }};
cold warm-up {{ jit.compiled_seconds | default('n/a', true) }} s ({{ jit.compiled | default('?', true) }} compiled),
warm {{ jit.loaded_seconds | default('n/a', true) }} s ({{ jit.loaded | default('?', true) }} loaded)"""


def folded(text):
    """A YAML folded scalar's value (>-): the lines joined by single spaces."""
    return " ".join(text.split("\n"))


def test_build_once_plan_report():
    report = task("build_once", "main.yml", "Report the plan (check mode)")
    new_vars = role_vars("build_once", report)
    cases = combinations(inventory_hostname=["n1", "n2"], build_once_builder=["", "n1", "n3"],
                         build_once_title=["DeepEP", "NVSHMEM 3.4.5"], build_once_artifact_name=["the wheel"],
                         build_once_store=["/srv/store", "s3://b/p"],
                         build_once_plan=[{"key": "0123456789abcdef", "would_build": True, "reason": "new key"},
                                          {"key": "fedcba98", "would_build": False},
                                          {"key": "ab", "would_build": False, "reason": ""}])
    assert assert_same(folded(OLD_BUILD_ONCE_PLAN_MSG), report["ansible.builtin.debug"]["msg"], new_vars, new_vars,
                       cases) == 72


def test_env_script_gather():
    read = task("env_script", "main.yml", "Read the node")
    new_vars = role_vars("env_script", read)
    facts = [{}, {"gpufleet_rdma": {"devices": []}}, {"gpufleet_gpus": {}}, {"gpufleet_rdma": {}, "gpufleet_gpus": {}}]
    cases = combinations(env_script_reread=[True, False, DEFAULT], reboot_done=[MISSING, True, False],
                         ansible_facts=facts)
    assert assert_same(OLD_ENV_SCRIPT_GATHER, read["gpufleet.deepep.node_stack"]["gather"], new_vars, new_vars,
                       cases) == 36


def test_sglang_serve_ready_report():
    say = task("sglang_serve", "main.yml", "Say how the fleet serves")
    new_vars = role_vars("sglang_serve", say)
    moments = [datetime.datetime(2026, 1, 2, 3, 4, 5, 650000), datetime.datetime(2026, 1, 2, 4, 0, 0)]
    cases = [{"now": (lambda utc=False, moment=moment: moment), "sglang_serve_t0": t0,
              "sglang_serve_plan": {"router": {"url": url}},
              "sglang_serve_workers": {"json": {"stats": {"prefill_count": 2, "decode_count": decode}}}}
             for moment in moments for t0 in ("2026-01-02T03:00:00.000000", "2026-01-02T03:04:05.123456")
             for url in ("http://10.0.0.1:30080", "https://r:8443") for decode in (1, 4)]
    assert assert_same(folded(OLD_SGLANG_SERVE_READY), say["ansible.builtin.debug"]["msg"], new_vars, new_vars,
                       cases) == 16


def test_image_first_boot_refusal():
    check = task("image", "first_boot.yml", "Check that DeepEP imports and applies this node's mapping")
    new_vars = role_vars("image", check)
    results = [{}, {"ansible_facts": {}},
               {"ansible_facts": {"gpufleet_stack": {"deep_ep_import": {"ok": False, "error": "No module named x"}},
                                  "gpufleet_hca_mapping": {"error": "GPU 3 has no NIC"}}},
               {"ansible_facts": {"gpufleet_stack": {"deep_ep_import": {"ok": True, "error": None}},
                                  "gpufleet_hca_mapping": {"error": None}}},
               {"ansible_facts": {"gpufleet_stack": {}, "gpufleet_hca_mapping": {}}}]
    cases = combinations(inventory_hostname=["img-1"], image_post_boot=results)
    assert assert_same(folded(OLD_IMAGE_NOT_READY), check["ansible.builtin.assert"]["fail_msg"], new_vars, new_vars,
                       cases) == 5


def test_deepep_jit_report():
    report = task("deepep", "jit.yml", "Report the JIT cache (compiled or loaded, and the warm-up times)")
    new_vars = role_vars("deepep", report)
    # (a record without "from" fails in both: origins[jit.from])
    records = [{"kernel_count": 2, "kernels": ["a", "b"], "from": "compiled", "compiled_seconds": 68.1,
                "compiled": 11, "loaded_seconds": None, "loaded": 0},
               {"kernel_count": 1, "kernels": ["a"], "from": "store", "loaded_seconds": 1.5, "loaded": 1},
               {"from": "elsewhere", "compiled_seconds": 0, "compiled": "", "loaded_seconds": "", "loaded": None}]
    cases = combinations(deepep_jit_cache_dir=["/var/cache/deepep/jit"],
                         ansible_facts=[{"gpufleet_deepep_jit": r} for r in records])
    assert assert_same(folded(OLD_DEEPEP_JIT_REPORT), report["ansible.builtin.debug"]["msg"], new_vars, new_vars,
                       cases) == 3


# doca_ofed -----------------------------------------------------------------------------------------------------------

# Deliberately changed (issue 51): DOCA-OFED is also installed for DeepEP V2's GIN across nodes, and the note says why.
OLD_DOCA_OFED_HEADER_NOTE = """{{ doca_ofed_mlx5dv_header }} lacks {{ doca_ofed_mlx5dv_symbol }}, not needed: {{ doca_ofed_mlx5dv_rule }}.
{{ 'DOCA-OFED is installed for the device names.' if doca_ofed_rename_needed
   else ('DOCA-OFED is installed for DeepEP V2 across nodes (NCCL GIN: libmlx5 MLX5_1.19, ibstat).'
         if doca_ofed_needed else 'No DOCA-OFED for it.') }}"""


def test_doca_ofed_header_note():
    say = task("doca_ofed", "main.yml", "Say why rdma-core's header needs no DOCA-OFED")
    new_vars = role_vars("doca_ofed", say)
    cases = combinations(doca_ofed_needed=[True, False, "True"], doca_ofed_rename_needed=[True, False],
                         doca_ofed_mlx5dv_rule=["NVSHMEM 3.4.5 defines it itself", ""],
                         doca_ofed_mlx5dv_symbol=[DEFAULT, "OTHER_SYMBOL"])
    assert assert_same(folded(OLD_DOCA_OFED_HEADER_NOTE), say["ansible.builtin.debug"]["msg"], new_vars, new_vars,
                       cases) == 24


# sglang: the lock file's body, from copy's content to the role's template -----------------------------------------------

OLD_SGLANG_LOCK_CONTENT = """---
# SGLang {{ sglang_version }} hash lock: {{ sglang_lock.lock.packages }} packages resolved by pip on {{ inventory_hostname }}
# ({{ sglang_lock.lock.python }}) for {{ sglang_lock.lock.requested | join(', ') }}, holding
# {{ sglang_lock.lock.holds | dictsort | map('join', '==') | join(', ') or 'nothing' }};
# left out: {{ sglang_lock.lock.excluded | join(', ') or 'nothing' }}.
# Made by playbooks/sglang_lock.yml; every install of the profile checks each download against it.
{{ {'sglang_requirements_hashes': sglang_lock.requirements_hashes} | to_nice_yaml(indent=2, width=200) }}
"""


def test_sglang_lock_template():
    write = task("sglang", "lock.yml", "Write the lock on the controller ({{ sglang_lock_file }})")
    template = REPO / "roles" / "sglang" / "templates" / write["ansible.builtin.template"]["src"]
    digest = ["%064x" % n for n in range(3)]
    locks = [{"lock": {"packages": 2, "python": "3.12.3", "requested": ["sglang==0.5.8"], "holds": {},
                       "excluded": []}, "requirements_hashes": {"sglang==0.5.8": digest[:1]}},
             {"lock": {"packages": 40, "python": "3.10.12", "requested": ["sglang==0.5.8", "nixl"],
                       "holds": {"torch": "2.9.1", "deep_ep": "1.2.1"}, "excluded": ["deep_ep", "nvidia-nccl-cu12"]},
              "requirements_hashes": {"a" * 150 + "==1.0": digest[1:], "sglang==0.5.8": digest[:1]}}]
    cases = combinations(sglang_version=["0.5.8", 0.5], inventory_hostname=["n1"], sglang_lock=locks)
    assert assert_same(OLD_SGLANG_LOCK_CONTENT, template.read_text(encoding="utf-8"), {}, {}, cases) == 4
