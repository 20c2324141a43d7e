# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify of the build scenario: build once, distribute, over three simulated nodes.

The tests run in file order and change the fleet: after checking the first converge (one build per key,
two installs from the store), they change torch on every node (check mode first: it writes nothing; then one
rebuild of DeepEP for the fleet), and finally kill a DeepEP build midway (the previous install keeps working,
the store gets nothing).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import testinfra
import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parents[1]))
REPO = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
STORE = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "artifacts"
STATE_DIR = Path(os.environ.get("FLEETSIM_STATE_DIR", "/srv/fleetsim"))
FLEET = os.environ["FLEETSIM_FLEET"]
NODES = sorted(testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("b200_cluster"))
CANARY = NODES[0]
ENV_SCRIPT = "/opt/deepep/unified-env.sh"
RECORDS = "/var/lib/gpufleet-build-records"
TORCH_VARIANT = "2.13.0+fixture1"
SLOW_MARK = "gpufleet-build-scenario: a build that never ends"
# How long the killed-build test waits for the builder's setup.py to appear (the converge's first tasks take about
# a minute on a 2-core machine), and for the converge to end once it is killed.
BUILD_START_LIMIT = 600
CONVERGE_END_LIMIT = 300


def node(name):
    return testinfra.get_host(f"ansible://{name}", ansible_inventory=INVENTORY)


def playbook(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "ansible-playbook"), "-i", str(Path(INVENTORY).parent), str(SCENARIO / name), *args]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PATH=f"{bindir}:{os.environ.get('PATH', '')}")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    proc = subprocess.run(cmd, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} {' '.join(args)} failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}")
    return proc


def store_keys(kind: str) -> dict[str, dict]:
    """``{key: record.json}`` of the store."""
    base = STORE / kind
    if not base.is_dir():
        return {}
    return {d.name: json.loads((d / "record.json").read_text()) for d in base.iterdir() if d.is_dir()}


def records() -> list[dict]:
    """Every record of how an install arrived, on every node (written by converge.yml)."""
    out = []
    for name in NODES:
        text = node(name).check_output(
            "python3 -c %s", "import glob, json; print(json.dumps([json.load(open(f)) for f in "
            f"sorted(glob.glob('{RECORDS}/*.json'))]))")
        out.extend(json.loads(text))
    return out


def arrivals(kind: str, key: str) -> dict[str, str]:
    return {r["host"]: r["from"] for r in records() if r["kind"] == kind and r["key"] == key}


def stamp(name: str, path: str) -> dict:
    return json.loads(node(name).file(path).content_string)


def deepep_stamp(name: str) -> dict:
    """The build stamp of the installed deep_ep, found without importing it (a torch change breaks the import)."""
    code = ("import importlib.util, json, os; spec = importlib.util.find_spec('deep_ep'); "
            "d = list(spec.submodule_search_locations)[0]; "
            "print(json.dumps(json.load(open(os.path.join(d, '.gpufleet-build.json')))))")
    return json.loads(node(name).check_output("python3 -c %s", code).strip().splitlines()[-1])


def deepep_state(name: str) -> dict:
    """What the env script's Python imports: deep_ep's version, file, the torch it runs with, and its stamp."""
    code = ("import json, deep_ep, importlib.metadata as m; "
            "print(json.dumps({'version': m.version('deep_ep'), 'torch': deep_ep.TORCH_VERSION, "
            "'file': deep_ep.__file__}))")
    out = node(name).check_output("env -i PATH=/usr/bin:/bin bash -c %s",
                                  f"source {ENV_SCRIPT} && python3 -c \"{code}\"")
    return dict(json.loads(out.strip().splitlines()[-1]), stamp=deepep_stamp(name))


def sourced_env(name: str) -> dict:
    out = node(name).check_output("env -i PATH=/usr/bin:/bin bash -c %s", f"source {ENV_SCRIPT} && env -0")
    return dict(item.partition("=")[::2] for item in out.split("\0") if "=" in item)


def only_key(kind: str) -> str:
    keys = store_keys(kind)
    assert len(keys) == 1, keys
    return next(iter(keys))


def test_one_build_per_key_two_installs_from_the_store():
    for kind in ("nvshmem", "deepep"):
        key = only_key(kind)
        published = store_keys(kind)[key]
        assert published["host"] == CANARY  # the canary batch of serial [1, 2] builds
        assert sorted(os.listdir(STORE / kind / key)) == sorted(list(published["files"]) + ["record.json"])
        assert arrivals(kind, key) == {CANARY: "build", **{n: "artifact" for n in NODES[1:]}}
    assert not list((STORE / ".incoming").iterdir())


def test_every_node_runs_the_build_of_the_key():
    nvshmem_key, deepep_key = only_key("nvshmem"), only_key("deepep")
    for name in NODES:
        assert stamp(name, "/opt/deepep/nvshmem/.gpufleet-build.json")["key"] == nvshmem_key
        assert node(name).file("/opt/deepep/nvshmem/lib/libnvshmem_host.so.3").exists
        state = deepep_state(name)
        assert state["stamp"]["key"] == deepep_key
        assert state["stamp"]["hca_mapping_support"] is True  # PR #466
        assert "/site-packages/" in state["file"] or "/dist-packages/" in state["file"]


def test_every_node_has_the_linkage_record_the_build_wrote():
    """The linkage record (schema 1) is written once, at the build, and travels with the artifact: the nodes that
    installed from the store carry the builder's record, byte for byte."""
    deepep_key = only_key("deepep")
    stored = json.loads((STORE / "deepep" / deepep_key / "build.json").read_text())["linkage"]
    assert stored["schema"] == 1 and stored["artifact"] == "deepep"
    extension = stored["objects"][0]
    assert extension["path"].startswith("deep_ep") and "/opt/deepep/nvshmem/lib" in extension["runpath"] + extension["rpath"]
    assert stored["nvshmem"]["host_library"].startswith("/opt/deepep/nvshmem/lib/libnvshmem_host.so.3")
    assert stored["nvshmem"]["device_library"] == "/opt/deepep/nvshmem/lib/libnvshmem_device.a"
    nvshmem = {name: stamp(name, "/opt/deepep/nvshmem/.gpufleet-build.json")["linkage"] for name in NODES}
    assert nvshmem[CANARY]["artifact"] == "nvshmem" and nvshmem[CANARY]["objects"]
    for name in NODES:
        assert nvshmem[name] == nvshmem[CANARY]
        assert deepep_stamp(name)["linkage"] == stored


def test_env_script_takes_the_phases_facts():
    for name in NODES:
        env = sourced_env(name)
        assert env["NVSHMEM_HOME"] == "/opt/deepep/nvshmem"
        assert env["LD_LIBRARY_PATH"].split(":")[0] == "/opt/deepep/nvshmem/lib"
        assert "PYTHONPATH" not in env  # DeepEP is installed into the Python that has torch
        assert "LD_PRELOAD" not in env  # the CPU torch bundles no NVSHMEM: nothing would win over the custom one


def stand_in_torch(directory: Path, version: str) -> Path:
    """A wheel of a stand-in torch at ``version``: the fixtures only read torch.__version__."""
    dist = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpufleet-build-scenario\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        record.append(f"{name},sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = directory / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def snapshot() -> dict:
    state = {"store": {k: sorted(store_keys(k)) for k in ("nvshmem", "deepep")}}
    for name in NODES:
        host = node(name)
        state[name] = {
            "nvshmem": stamp(name, "/opt/deepep/nvshmem/.gpufleet-build.json")["key"],
            "deepep": deepep_stamp(name)["key"],
            "artifacts": host.check_output("find /opt/deepep/artifacts /opt/deepep -maxdepth 2 | sort"),
        }
    return state


def test_torch_change_check_mode_writes_nothing_then_one_rebuild(tmp_path):
    before = snapshot()
    playbook("stage.yml", "-e", f"stage_file={stand_in_torch(tmp_path, TORCH_VARIANT)}")

    # Check mode sees the new key on every node and writes nothing, on the nodes or in the store.
    check = playbook("converge.yml", "--check", "--diff", "-e", '{"build_serial": ["100%"]}')
    assert "Would build DeepEP" in check.stdout
    after_check = snapshot()
    for name in NODES:
        assert after_check[name]["artifacts"] == before[name]["artifacts"]
    assert after_check["store"] == before["store"]

    # All three nodes in one batch: the first builds, the other two install its wheel.
    playbook("converge.yml", "-e", '{"build_serial": ["100%"]}')
    deepep = store_keys("deepep")
    assert sorted(store_keys("nvshmem")) == before["store"]["nvshmem"]  # torch is no NVSHMEM input
    new = sorted(set(deepep) - set(before["store"]["deepep"]))
    assert len(new) == 1, deepep
    assert deepep[new[0]]["host"] == CANARY
    assert arrivals("deepep", new[0]) == {CANARY: "build", **{n: "artifact" for n in NODES[1:]}}
    for name in NODES:
        state = deepep_state(name)
        assert state["torch"] == TORCH_VARIANT
        assert state["stamp"]["key"] == new[0]
        assert state["stamp"]["built_against"]["torch"] == TORCH_VARIANT


def slow_source(directory: Path) -> Path:
    """The mirror's DeepEP V1 + PR #466 fixture with a setup.py that sleeps after its build summary."""
    mirror = Path(json.loads((STATE_DIR / FLEET / "state.json").read_text())["mirror"]) / "sources" / \
        "deepep-v1-pr466-fixture.tar.gz"
    out = directory / "deepep-slow-fixture.tar.gz"
    with tarfile.open(mirror) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("/setup.py"):
                data = data.replace(b"    # noinspection PyBroadException\n",
                                    f"    import time  # {SLOW_MARK}\n    time.sleep(86400)\n\n"
                                    "    # noinspection PyBroadException\n".encode(), 1)
                assert SLOW_MARK.encode() in data
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def fleetsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.fleetsim", "--fleet", FLEET, *args], cwd=REPO, text=True,
                          capture_output=True, check=False, timeout=120)


def test_killed_build_leaves_the_previous_install_working(tmp_path):
    before = snapshot()
    versions = {name: deepep_state(name) for name in NODES}
    source = slow_source(tmp_path)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    playbook("stage.yml", "-e", f"stage_file={source}")

    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "ansible-playbook"), "-i", str(Path(INVENTORY).parent), str(SCENARIO / "converge.yml"),
           "--tags", "deepep", "-e", '{"build_serial": ["100%"], "build_max_fail_percentage": 100}',
           "-e", f"deepep_src_url=file:///var/tmp/{source.name}", "-e", f"deepep_src_checksum=sha256:{digest}"]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PATH=f"{bindir}:{os.environ.get('PATH', '')}")
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    log = tmp_path / "converge.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        killed = None
        deadline = time.monotonic() + BUILD_START_LIMIT
        # Until the builder's setup.py runs, the play ends, or BUILD_START_LIMIT passes.
        while proc.poll() is None and killed is None and time.monotonic() < deadline:
            found = fleetsim("exec", CANARY, "--", "pgrep", "-f", "[s]etup.py bdist_wheel")
            pids = found.stdout.split() if found.returncode == 0 else []
            if pids:
                fleetsim("exec", CANARY, "--", "kill", "-KILL", *pids)
                killed = pids
            else:
                time.sleep(2)
        try:
            proc.wait(timeout=CONVERGE_END_LIMIT if killed else 0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert killed, f"the build did not start within {BUILD_START_LIMIT} s:\n{output[-4000:]}"
    assert proc.returncode != 0
    assert "build failed" in output  # the builder's module
    assert f"its build on {CANARY} failed" in output  # the other two: nothing to install, nothing built

    after = snapshot()
    assert after["store"] == before["store"]  # no half-written artifact, no new key
    assert not list((STORE / ".incoming").iterdir())
    for name in NODES:
        state = deepep_state(name)  # still imports, under the env script
        assert state["version"] == versions[name]["version"]
        assert state["stamp"]["key"] == versions[name]["stamp"]["key"] == before[name]["deepep"]
        assert after[name]["nvshmem"] == before[name]["nvshmem"]


# ------------------------------------------------------------------------------ DeepEP V2's JIT cache, built once
JIT_DIR = "/var/cache/deepep/jit"
JIT_KERNELS = 7  # the V2 fixture's kernels (deep_ep/jit.py)
NCCL_FIXTURE = "/opt/fixture-nccl-2.30.7"
NCCL_H = ("#ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_MAJOR 2\n#define NCCL_MINOR 30\n#define NCCL_PATCH 7\n"
          "#define NCCL_SUFFIX \"\"\n#define NCCL_VERSION_CODE 23007\n"
          "#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
          "(X) * 10000 + (Y) * 100 + (Z))\n#endif\n")


def v2_args(*extra: str) -> list[str]:
    """converge.yml's arguments for the mirror's DeepEP V2 fixture against the fixture NCCL root."""
    source = "file:///srv/fleetsim-mirror/sources/deepep-v2-fixture.tar.gz"
    return ["-e", f"deepep_src_url={source}", "-e", f"deepep_src_checksum=sha256:{source}.sha256",
            "-e", f"deepep_nccl_root={NCCL_FIXTURE}", *extra]


def jit_record(name: str) -> dict | None:
    host = node(name)
    path = f"{JIT_DIR}/.gpufleet-jit.json"
    return json.loads(host.file(path).content_string) if host.file(path).exists else None


def jit_kernels(name: str) -> list[str]:
    out = node(name).check_output(f"ls -1 {JIT_DIR}/cache 2>/dev/null || true")
    return sorted(line for line in out.split() if line.startswith("kernel."))


def test_v2_jit_cache_compiled_on_one_node_loaded_from_the_store_on_the_others():
    for name in NODES:
        code = (f"import os; os.makedirs('{NCCL_FIXTURE}/include', exist_ok=True); "
                f"open('{NCCL_FIXTURE}/include/nccl.h', 'w').write({NCCL_H!r})")
        node(name).run_expect([0], "python3 -c %s", code)
    playbook("converge.yml", *v2_args())
    jit = store_keys("deepep_jit")
    assert len(jit) == 1, jit
    key, published = next(iter(jit.items()))
    assert published["host"] == CANARY and sorted(published["files"]) == ["jit-cache.tar", "jit.json"]
    kernels = jit_kernels(CANARY)
    assert len(kernels) == JIT_KERNELS
    cold = jit_record(CANARY)
    assert cold["key"] == key and cold["from"] == "compiled" and cold["compiled"] == JIT_KERNELS
    for name in NODES:
        record = jit_record(name)
        assert record["key"] == key and record["kernels"] == kernels and jit_kernels(name) == kernels
        assert record["from"] == ("compiled" if name == CANARY else "store")
        # The warm run after the fill loaded every kernel and compiled none (a compile would be a missed key input).
        assert record["loaded"] == JIT_KERNELS and "missed" not in record
        # The cold warm-up sleeps 0.4 s a kernel compiled; a warm one compiles nothing.
        assert record["compiled_seconds"] == cold["compiled_seconds"] >= JIT_KERNELS * 0.4
        assert record["loaded_seconds"] < record["compiled_seconds"]
        assert node(name).file(JIT_DIR).mode == 0o755
        assert sourced_env(name)["EP_JIT_CACHE_DIR"] == JIT_DIR
        assert deepep_state(name)["version"].startswith("2.")


def test_v2_jit_cache_rerun_changes_nothing_and_check_mode_predicts_a_new_key():
    before = {name: jit_record(name) for name in NODES}
    playbook("converge.yml", *v2_args())
    assert {name: jit_record(name) for name in NODES} == before
    assert len(store_keys("deepep_jit")) == 1
    # A key input changes (an EP_JIT_* switch the services run with): check mode predicts the warm-up, writes nothing.
    debug = ["-e", '{"deepep_jit_key_env": {"EP_JIT_DEBUG": "1"}, "build_serial": ["100%"]}']
    check = playbook("converge.yml", "--check", *v2_args(*debug))
    assert "Would build DeepEP V2 JIT cache" in check.stdout, check.stdout[-4000:]
    assert {name: jit_record(name) for name in NODES} == before and len(store_keys("deepep_jit")) == 1
    playbook("converge.yml", *v2_args(*debug))
    jit = store_keys("deepep_jit")
    assert len(jit) == 2
    new = next(k for k in jit if k != before[CANARY]["key"])
    assert jit[new]["host"] == CANARY
    for name in NODES:
        record = jit_record(name)
        assert record["key"] == new and record["from"] == ("compiled" if name == CANARY else "store")
        assert len(jit_kernels(name)) == 2 * JIT_KERNELS  # the first key's kernels stay: DeepEP may still use them


def test_v2_jit_cache_a_node_added_later_starts_warm_from_the_store():
    late = NODES[-1]
    node(late).run_expect([0], f"rm -rf {JIT_DIR} /opt/deepep/artifacts/deepep_jit")
    stored = store_keys("deepep_jit")
    debug = ["-e", '{"deepep_jit_key_env": {"EP_JIT_DEBUG": "1"}}']
    playbook("converge.yml", "--limit", late, *v2_args(*debug))
    record = jit_record(late)
    assert record["from"] == "store" and record["loaded"] == JIT_KERNELS and "missed" not in record
    assert len(jit_kernels(late)) == JIT_KERNELS
    assert store_keys("deepep_jit") == stored


def verify_v2(tmp_path: Path, *extra: str) -> dict[str, dict]:
    """playbooks/verify.yml's intranode stage on the V2 fixture tree: ``{host: summary row}``."""
    run_dir = tmp_path / "verify"
    playbook(str(REPO / "playbooks" / "verify.yml"), "--tags", "intranode", "-e", f"gpufleet_verify_run_dir={run_dir}",
             "-e", "verify_intranode_generation=v2", "-e", "gpufleet_verify_fail=false", *extra)
    summary = json.loads((run_dir / "intranode-summary.json").read_text())
    return {row["host"]: row for row in summary["rows"] if row["stage"] == "intranode"}


def test_v2s_other_tests_run_where_the_hardware_allows_and_are_skipped_with_the_reason_elsewhere(tmp_path):
    """DeepEP V2's Engram, PP, all-gather/reduce-scatter and barrier after the elastic test: on 8 GPUs with NICs
    each finishes with its figures recorded (not gated); on one rank PP and agrs are skipped with the reason and the
    others still run (what the lent H200 showed of the rank rules)."""
    node = NODES[0]
    run_dir = tmp_path / "verify"
    for limit, nproc in ((node, 0), (node, 1)):
        playbook(str(REPO / "playbooks" / "verify.yml"), "--tags", "intranode", "--limit", limit,
                 "-e", f"gpufleet_verify_run_dir={run_dir}/{nproc}", "-e", "verify_intranode_generation=v2",
                 "-e", "gpufleet_verify_fail=false", "-e", f"verify_intranode_num_processes={nproc}")
    full = json.loads((run_dir / "0" / "intranode-summary.json").read_text())["rows"]
    extras = {row["stage"]: row for row in full if row["stage"] in ("engram", "pp", "agrs", "barrier")}
    assert sorted(extras) == ["agrs", "barrier", "engram", "pp"], full
    for stage, row in extras.items():
        assert row["passed"] and row["status"] == "pass" and row["test"] == f"tests/elastic/test_{stage}.py", row
        assert row["figures"] and all(value > 0 for value in row["figures"].values()), row
        assert not any((row.get("thresholds") or {}).values()), row
        assert "recorded, not gated" in row["gate_provisional"], row
        assert (run_dir / "0" / node / f"{stage}.log").is_file()
    assert extras["barrier"]["figures"]["barrier_us"] > 1.4 and extras["agrs"]["figures"]["size_mb"] == 67
    one = {row["stage"]: row for row in json.loads((run_dir / "1" / "intranode-summary.json").read_text())["rows"]}
    for stage in ("pp", "agrs"):
        assert one[stage]["status"] == "skipped" and one[stage]["passed"], one[stage]
        assert one[stage]["reasons"] == [f"not run: DeepEP V2's {stage} test needs at least 2 ranks, and this node "
                                         "runs 1"]
        assert not (run_dir / "1" / node / f"{stage}.log").exists()
    assert one["barrier"]["status"] == "pass" and one["engram"]["status"] == "pass"
    table = (run_dir / "1" / "intranode-summary.md").read_text()
    assert "(2 not run on their hardware: DeepEP V2's agrs test needs at least 2 ranks" in table


def test_verify_says_whether_v2_compiled_or_loaded_its_kernels(tmp_path):
    # The nodes converged first hold the kernels of both keys (with and without EP_JIT_DEBUG); the late node was
    # converged with EP_JIT_DEBUG=1 only, so its cache holds that key's kernels and verify (run without the switch)
    # has to compile the kernels it runs. verify_jit reads the cache before and after each run.
    late = NODES[-1]
    before = {name: len(jit_kernels(name)) for name in NODES}
    rows = verify_v2(tmp_path, "-e", "verify_intranode_jit_require_warm=true")
    for name in NODES:
        jit = rows[name]["jit"]
        assert jit["cache_dir"] == JIT_DIR and jit["run_seconds"] > 0, jit
        if name == late:
            # another key's kernels only: the run compiled its own, and a required warm cache fails the node
            assert (jit["state"], jit["compiled"], jit["loaded"]) == ("partial", JIT_KERNELS, before[name]), jit
            assert not rows[name]["passed"] and "JIT: V2 compiled 7 kernel(s)" in rows[name]["reasons"][0]
        else:
            assert (jit["state"], jit["compiled"], jit["loaded"]) == ("warm", 0, before[name]), jit
            assert jit["from"] in ("compiled", "store") and rows[name]["passed"], rows[name]
        # the transport that ran: V2's lines (NCCL, no GIN with EP_DISABLE_GIN=1, DeepEP on the pinned NCCL)
        assert rows[name]["transport"]["passed"], rows[name]["transport"]
        assert rows[name]["transport"]["truth"]["deepep"]["nccl_version"] == "2.30.7"
    # The late node's cache now holds the kernels the verify run compiled: a second run finds it warm.
    again = verify_v2(tmp_path, "--limit", late, "-e", "verify_intranode_jit_require_warm=true")[late]["jit"]
    assert (again["state"], again["compiled"], again["loaded"]) == ("warm", 0, before[late] + JIT_KERNELS)
