# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The values that reach a serving unit or environment file (``_serve/unitvalues``): every field the plan writes
refuses control characters by name, ExecStart= and EnvironmentFile= are written so that systemd reads back the
same argv and values (checked against a reader of systemd's documented rules), the unit-name prefix is one rule
for the plan and serve_state, and the booleans of serving settings and router replies are typed."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter import serving_helpers
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._serve import plan as _serve
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import state as _state
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import units as _units
from ansible_collections.gpufleet.deepep.plugins.module_utils._serve import unitvalues as _uv
from ansible_collections.gpufleet.deepep.plugins.plugin_utils import _serving_gate as _gate
from ansible_collections.gpufleet.deepep.plugins.modules import serve_plan, serve_state

MODEL = {"path": "/m", "num_attention_heads": 8, "moe": False}


def topo(prefill=None, decode=None, router=None, hosts=None):
    hosts = hosts or {}

    def part(role, base, settings):
        return {"hosts": hosts.get(role, [{"name": "%s-1" % role[0], "address": "10.0.0.%d" % base}]),
                "settings": settings or {}}
    return {"prefill": part("prefill", 10, prefill), "decode": part("decode", 20, dict({"port": 30001}, **(decode or {}))),
            "router": part("router", 30, router)}


def plan_args(**over):
    args = {"topology": topo(), "host": "p-1", "model": MODEL, "model_path": "/m", "python": "/v/bin/python"}
    args.update(over)
    return args


# ------------------------------------------------------------------------------ systemd's reading, per its manual
def systemd_exec_split(line):
    """argv of an ExecStart= value as systemd.service(5) "Command lines" and systemd.unit(5) "Specifiers" read it:
    words split on whitespace, single or double quotes group a word, the C escapes (\\\\ \\" \\' \\; ...) are
    decoded, ``$$`` is a ``$`` and ``%%`` a ``%``; a lone ``$`` (a variable) or ``%`` (a specifier) would be expanded,
    which the writer must never leave - it raises here."""
    escapes = {"\\": "\\", '"': '"', "'": "'", ";": ";", "n": "\n", "t": "\t", "s": " "}
    words, word, quote, in_word, i = [], [], None, False, 0
    while i < len(line):
        char = line[i]
        if char in "%$":
            if line[i + 1:i + 2] != char:
                raise AssertionError("unescaped %r at %d of %r: systemd would expand it" % (char, i, line))
            word.append(char)
            in_word = True
            i += 2
            continue
        if char == "\\":
            nxt = line[i + 1:i + 2]
            if nxt not in escapes:
                raise AssertionError("unknown escape \\%s in %r" % (nxt, line))
            word.append(escapes[nxt])
            in_word = True
            i += 2
            continue
        if quote:
            if char == quote:
                quote = None
            else:
                word.append(char)
        elif char in "\"'":
            quote, in_word = char, True
        elif char in " \t":
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
        else:
            word.append(char)
            in_word = True
        i += 1
    assert quote is None, "unterminated quote in %r" % line
    if in_word:
        words.append("".join(word))
    return words


LEGAL_ARGS = ["plain", "with space", "100%", "%n", "$HOME", "${HOME}", "a$$b", "'single'", '"double"', "back\\slash",
              ";", "a;b", "", "~/x", "é-ünïcode", "--json-model-override-args={\"rope\": {\"factor\": 2}}", "%%", "$"]


@pytest.mark.parametrize("arg", LEGAL_ARGS)
def test_exec_start_reads_back_the_same_argument(arg):
    argv = ["/opt/v env/bin/python%", "-m", "sglang.launch_server", arg, "--tail"]
    assert systemd_exec_split(_uv.exec_line(argv)) == argv


def test_every_legal_argument_at_once_reads_back_from_the_unit_text():
    argv = ["/v/bin/python"] + LEGAL_ARGS
    text = _units.unit_text("d", argv, ["/etc/x%i/a.env"], 60, 5)
    lines = text.splitlines()
    (exec_start,) = [l for l in lines if l.startswith("ExecStart=")]
    assert systemd_exec_split(exec_start[len("ExecStart="):]) == argv
    assert "EnvironmentFile=/etc/x%%i/a.env" in lines  # a specifier there too


ENV_VALUES = ["plain", "with space", 'quote " inside', "back\\slash\\n", "$HOME", "${X:-y}", "100%", "", "'"]


def test_environment_file_reads_back_the_same_values():
    env = dict(("V%d" % i, v) for i, v in enumerate(ENV_VALUES))
    assert _units.parse_env_file(_units.env_file_text(env)) == env


# ------------------------------------------------------------------------------ every field refuses a control char
CONTROL = ["\n", "\r", "\x00", "\x1b", "\t", "\x7f"]
# (where the value goes in serve_plan's arguments, the field the refusal names)
FIELDS = [
    ("python", "python"), ("model_path", "model_path"), ("prefix", "prefix"), ("config_dir", "config_dir"),
    ("router_venv", "router_venv"), ("secrets_env_file", "secrets_env_file"), ("engine_version", "engine_version"),
    ("prefill.host", "sglang_prefill.host"), ("prefill.dist_init_addr", "sglang_prefill.dist_init_addr"),
    ("prefill.moe_a2a_backend", "sglang_prefill.moe_a2a_backend"),
    ("prefill.deepep_config", "sglang_prefill.deepep_config"),
    ("decode.extra_args", "sglang_decode.extra_args[1]"), ("decode.environment", "sglang_decode.environment['X']"),
    ("decode.environment_name", "sglang_decode.environment name"),
    ("router.host", "router.host"), ("router.health_check_endpoint", "router.health_check_endpoint"),
    ("router.extra_args", "router.extra_args[1]"),
    ("hosts.name", "topology.decode.hosts[0].name"), ("hosts.address", "topology.decode.hosts[0].address"),
]


def args_with(field, value):
    """serve_plan's arguments with ``value`` in ``field`` (a legal value around it)."""
    if "." not in field:
        base = {"python": "/v/bin/", "config_dir": "/etc/", "router_venv": "/opt/", "secrets_env_file": "/etc/s"}
        return plan_args(**{field: base.get(field, "x") + value})
    part, key = field.split(".")
    if part == "hosts":
        host = {"name": "d-1", "address": "10.0.0.20"}
        host[key] = host[key] + value
        return plan_args(topology=topo(hosts={"decode": [host]}), host="d-1")
    if key == "extra_args":
        settings = {"extra_args": ["--ok", "--bad" + value]}
    elif key == "environment":
        settings = {"environment": {"X": "v" + value}}
    elif key == "environment_name":
        settings = {"environment": {"X" + value: "v"}}
    else:
        settings = {key: ("0.0.0.0:5757" if key == "dist_init_addr" else "x") + value}
    return plan_args(topology=topo(**{part: settings}))


@pytest.mark.parametrize("field,named", FIELDS, ids=[f[0] for f in FIELDS])
@pytest.mark.parametrize("char", CONTROL, ids=[repr(c) for c in CONTROL])
def test_serve_plan_refuses_a_control_character_naming_the_field(module_runner, field, named, char):
    result = module_runner(serve_plan, args_with(field, char))
    assert result.failed, result
    msg = result["msg"]
    assert msg.startswith(named + " is "), msg
    assert repr(char)[1:-1] in msg  # the value, as repr
    assert "expected" in msg and "Traceback" not in msg
    assert "units" not in result or not result["units"]  # nothing planned to be written


@pytest.mark.parametrize("field", ["python", "config_dir", "router_venv", "secrets_env_file"])
def test_paths_written_into_a_unit_are_absolute(module_runner, field):
    result = module_runner(serve_plan, plan_args(**{field: "relative/path"}))
    assert result.failed
    assert result["msg"] == "%s is 'relative/path'; expected an absolute path (e.g. /opt/venv/bin/python)" % field


BAD_PREFIXES = ["../x", "a/b", "..", "a..b", "-x", ".x", "a b", "a:b", "a@b", "a\\b", "x" * 65, "", "a$b", "a%b"]


@pytest.mark.parametrize("prefix", BAD_PREFIXES)
def test_a_unit_prefix_is_refused_alike_by_the_plan_and_serve_state(module_runner, tmp_path, prefix):
    planned = module_runner(serve_plan, plan_args(prefix=prefix))
    state = module_runner(serve_state, {"prefix": prefix, "config_dir": str(tmp_path)})
    expected = ("prefix is %r; expected a unit name prefix of letters, digits, '.', '_' or '-', starting with a "
                "letter or digit, without '/' or '..', at most 64 characters (e.g. sglang)" % prefix)
    assert planned.failed and state.failed
    assert planned["msg"] == state["msg"] == expected
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("prefix", ["sglang", "serve-01", "a.b_c", "x" * 64])
def test_a_good_prefix_names_the_units_and_reads_back(prefix):
    result = _serve.plan(topo(), "p-1", model=MODEL, python="/v/bin/python", model_path="/m", prefix=prefix)
    (unit,) = result["units"]
    assert _units.parse_unit_name(unit["name"])["prefix"] == prefix


def test_the_reader_skips_a_unit_name_the_writer_would_refuse():
    assert _units.parse_unit_name("..-decode0-rank0.service") is None
    assert _units.parse_unit_name("-x-router.service") is None


def test_an_env_file_read_back_with_a_control_character_names_the_file_and_variable():
    with pytest.raises(_units.ServeError, match=r"/e.env:2 A is 'x\\x1by'"):
        _units.parse_env_file("# c\nA=\"x\x1by\"\n", "/e.env")


# ------------------------------------------------------------------------------ the HF token, sglang_server.env
def test_serve_env_file_filter_writes_what_the_plan_writes():
    env = {"HF_TOKEN": "hf_abc", "B": 'x "y"'}
    assert serving_helpers.serve_env_file(env) == _units.env_file_text(env)


@pytest.mark.parametrize("char", CONTROL, ids=[repr(c) for c in CONTROL])
def test_a_secret_value_is_refused_by_variable_never_shown(char):
    token = "hf_SECRET" + char
    with pytest.raises(AnsibleFilterError) as err:
        serving_helpers.serve_env_file({"HF_TOKEN": token}, where="sglang_serve_hf_token", secret=True)
    assert "sglang_serve_hf_token is not one line of text" in str(err.value)
    assert "SECRET" not in str(err.value)


@pytest.mark.parametrize("env,named", [({"A": "x\ny"}, "sglang_server.env['A'] is 'x\\ny'"),
                                       ({"A B": "x"}, "sglang_server.env['A B'] name is 'A B'"),
                                       ({"1A": "x"}, "sglang_server.env['1A'] name is '1A'"),
                                       ({"A": ["x"]}, "sglang_server.env['A'] is ['x']")])
def test_server_environment_refused_naming_the_variable(env, named):
    with pytest.raises(AnsibleFilterError, match=re.escape(named)):
        serving_helpers.serve_env_file(env, where="sglang_server.env")


# ------------------------------------------------------------------------------ booleans
BOOL_FIELDS = [("prefill", "dp_attention", "sglang_prefill.dp_attention"), ("router", "mini_lb", "router.mini_lb"),
               ("model", "moe", "model.moe")]
NOT_BOOLEAN = ["maybe", "", "2", 2, -1, None, [], {}, "nope", 0.5]


# model.moe left null is the model's facts without the key (not judged), as before
BOOL_CASES = [f + (v,) for f in BOOL_FIELDS for v in NOT_BOOLEAN if not (f[0] == "model" and v is None)]


@pytest.mark.parametrize("part,key,named,value", BOOL_CASES, ids=["%s-%r" % (c[2], c[3]) for c in BOOL_CASES])
def test_a_boolean_setting_refuses_what_is_not_a_boolean(module_runner, part, key, named, value):
    if part == "model":
        args = plan_args(model=dict(MODEL, moe=value), debug=True)
    else:
        args = plan_args(topology=topo(**{part: {key: value}}), debug=True)
    result = module_runner(serve_plan, args)
    assert result.failed
    assert result["msg"] == ("%s is %r; expected a boolean (true/false, or one of Ansible's yes/no, on/off, 1/0)"
                             % (named, value))


@pytest.mark.parametrize("value,meant", [(True, True), (False, False), ("no", False), ("No", False), ("off", False),
                                         ("false", False), ("0", False), (0, False), ("yes", True), ("on", True),
                                         ("1", True), (1, True), ("TRUE", True)])
def test_a_boolean_setting_means_what_it_says(value, meant):
    result = _serve.plan(topo(prefill={"tp": 2, "dp": 2, "dp_attention": value, "moe_a2a_backend": "deepep"},
                              router={"mini_lb": value}), "p-1",
                         model=dict(MODEL, moe=value), python="/v/bin/python", model_path="/m", debug=True)
    (unit,) = result["units"]
    assert ("--enable-dp-attention" in unit["argv"]) is meant
    assert ("--mini-lb" in result["router"]["argv"]) is meant
    # deepep on a dense model is refused; "no" is a dense model, not a truthy string
    assert any("moe_a2a_backend deepep on a dense model" in p for p in result["problems"]) is not meant


REPLIES = ["true", "false", "yes", 1, 0, None, [], {"x": 1}]


def _workers_reply(value):
    return {"workers": [{"url": "http://10.0.0.10:30000", "worker_type": "prefill", "is_healthy": value,
                         "bootstrap_port": 8998}, {"url": "http://10.0.0.20:30001", "worker_type": "decode",
                                                   "is_healthy": True}],
            "stats": {"prefill_count": 1, "decode_count": 1}}


@pytest.mark.parametrize("value", REPLIES, ids=[repr(v) for v in REPLIES])
def test_serve_state_reads_is_healthy_as_a_json_boolean_only(value):
    def get(url, timeout):
        return (200, _workers_reply(value), None) if url.endswith("/workers") else (200, None, None)
    facts = _state.router_facts("http://127.0.0.1:30080", 5, get=get)
    assert [w["is_healthy"] for w in facts["workers"]] == [False, True]
    assert facts["error"] == ("http://127.0.0.1:30080/workers: workers[0].is_healthy is %r; expected a JSON boolean "
                              "(true or false)" % (value,))


def test_serve_state_takes_real_booleans():
    def get(url, timeout):
        return (200, _workers_reply(True), None) if url.endswith("/workers") else (200, None, None)
    facts = _state.router_facts("http://127.0.0.1:30080", 5, get=get)
    assert [w["is_healthy"] for w in facts["workers"]] == [True, True] and facts["error"] is None


GATE_PLAN = {"router": {"port": 30080, "kind": "smg", "hosts": ["r-1"]}, "expected_workers": {"prefill": 1, "decode": 1},
             "instances": [{"role": "prefill", "bootstrap_port": 8998}, {"role": "decode", "bootstrap_port": None}]}


@pytest.mark.parametrize("value", REPLIES, ids=[repr(v) for v in REPLIES])
def test_serving_gate_counts_a_worker_healthy_only_on_a_json_true(value):
    workers = {"status": 200, "json": _workers_reply(value)}
    assert _gate.workers_settled(workers, GATE_PLAN) is False
    record = _gate.router_records({"readiness": {"status": 200}, "workers": workers}, GATE_PLAN, "r-1")[1]
    assert record["gate"]["passed"] is False
    assert "unhealthy workers: http://10.0.0.10:30000" in record["gate"]["reasons"]
    assert ("workers[0].is_healthy is %r; expected a JSON boolean (true or false)" % (value,)) in record["gate"]["reasons"]
    assert record["figures"]["healthy"] == "1/2"


def test_serving_gate_passes_real_booleans():
    workers = {"status": 200, "json": _workers_reply(True)}
    assert _gate.workers_settled(workers, GATE_PLAN) is True


@pytest.mark.parametrize("value, minimum, expected", [
    (3600, 1, 3600), ("3600", 1, 3600), (" 5 ", 0, 5), (0, 0, 0), (7.0, 1, 7),
])
def test_seconds_take_whole_numbers_from_their_minimum(value, minimum, expected):
    assert _uv.check_seconds(value, "start_timeout", minimum, "whole seconds") == expected


@pytest.mark.parametrize("value, minimum", [
    (-1, 1), (0, 1), (-5, 0), (True, 0), (False, 0), (1.5, 0), ("5s", 0), ("", 0), (None, 0), ([5], 0),
    ("1\nExecStartPre=/bin/sh", 0),
])
def test_seconds_out_of_range_or_not_whole_are_refused_naming_field_and_value(value, minimum):
    with pytest.raises(_uv.UnitValueError) as refused:
        _uv.check_seconds(value, "restart_sec", minimum, "whole seconds, %d or more" % minimum)
    assert str(refused.value) == "restart_sec is %r; expected whole seconds, %d or more" % (value, minimum)


# --- serve_files_changed: which instances restart for their unit or environment file ---------------------------
def _plan_units():
    def unit(instance, env_path, unit_name):
        return {"instance": instance, "env_file": {"path": env_path, "content": "A=1\n", "mode": "0600"},
                "unit_file": {"path": "/etc/systemd/system/" + unit_name, "content": "[Unit]\n", "mode": "0644"}}
    return [unit("sglang-prefill0", "/etc/x/p0.env", "p0.service"),
            unit("sglang-prefill0", "/etc/x/p0-rank1.env", "p0-rank1.service"),
            unit("sglang-decode0", "/etc/x/d0.env", "d0.service")]


def _written(path, content=False, mode=False):
    return {"path": path, "content_changed": content, "mode_changed": mode, "changed": content or mode}


def test_serve_files_changed_names_written_files_and_a_mode_only_change_only_when_asked():
    changed = serving_helpers.FilterModule().filters()["serve_files_changed"]
    same = [_written("/etc/x/p0.env"), _written("/etc/x/p0-rank1.env"), _written("/etc/x/d0.env")]
    assert changed(_plan_units(), same, "env_file", content_only=True) == []
    tightened = [_written("/etc/x/p0.env", mode=True)] + same[1:]
    assert changed(_plan_units(), tightened, "env_file", content_only=True) == []  # 0644 -> 0600: no restart
    assert changed(_plan_units(), tightened, "env_file") == ["sglang-prefill0"]
    rotated = same[:2] + [_written("/etc/x/d0.env", content=True)]
    assert changed(_plan_units(), rotated, "env_file", content_only=True) == ["sglang-decode0"]
    second_rank = [same[0], _written("/etc/x/p0-rank1.env", content=True), same[2]]
    assert changed(_plan_units(), second_rank, "env_file", True) == ["sglang-prefill0"]  # once, for its second rank
    assert changed(_plan_units(), [], "env_file", True) == ["sglang-prefill0", "sglang-decode0"]  # none reported
    units = [_written("/etc/systemd/system/p0.service"), _written("/etc/systemd/system/p0-rank1.service"),
             _written("/etc/systemd/system/d0.service", mode=True)]
    assert changed(_plan_units(), units, "unit_file") == ["sglang-decode0"]


@pytest.mark.parametrize("units, written, which, named", [
    ("x", [], "env_file", "are not two lists and a file key"),
    (_plan_units(), [], "text", "are not two lists and a file key"),
    (_plan_units(), [{"path": "/p"}], "env_file", "without path and changed"),
    ([{"instance": "a", "env_file": {}}], [], "env_file", r"without instance and env_file.path"),
])
def test_serve_files_changed_refuses_other_shapes_naming_them(units, written, which, named):
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="serve_files_changed: .*%s" % named):
        serving_helpers.serve_files_changed(units, written, which)
