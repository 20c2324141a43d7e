# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_stack: the parsers, each probe over a fixture root with a scripted command runner, and the module."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._node import commands as _commands
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import stack as _stack
from ansible_collections.gpufleet.deepep.plugins.modules import node_stack
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import envscript as _envscript
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import installs as _installs
from ansible_collections.gpufleet.deepep.plugins.module_utils._node import probes as _node_probes

NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""

LDCONFIG = """1234 libs found in cache `/etc/ld.so.cache'
\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
\tlibgdrapi.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libgdrapi.so.2
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
"""

ENV_SCRIPT = """#!/bin/bash
# DeepEP environment
export NVSHMEM_HOME=/opt/deepep/nvshmem
export CUDA_HOME=/usr/local/cuda
export LD_LIBRARY_PATH=${NVSHMEM_HOME}/lib:${CUDA_HOME}/lib64:${LD_LIBRARY_PATH:-}
export LD_PRELOAD="${NVSHMEM_HOME}/lib/libnvshmem_host.so.3"
export NVSHMEM_REMOTE_TRANSPORT=ibgda   # force IBGDA
export NVSHMEM_IBGDA_NIC_HANDLER='gpu'
export NVSHMEM_IB_GID_INDEX=3
export DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_0:1,1:mlx5_1:1
FOO=bar
export FOO
export PYTHONPATH=/opt/deepep/DeepEP:${PYTHONPATH:-}
export QUOTED="a b"  # a comment after the value
export PATH=/usr/local/cuda/bin"${PATH:+:${PATH}}"
"""

# Lines only a shell could take: the reader refuses each, naming it, and the import probe is not tried.
SHELL_LINES = """[ -d /lssd/huggingface ] && export HF_HOME=/lssd/huggingface
export A=1 ; echo loaded
export B=$(id -u)
export C=`id -u`
export D="$(touch /tmp/pwned)"
source /etc/profile
export E=unterminated"quote
export F=${G:?boom}
"""

PROBE_OUT = {
    "python_version": "3.12.3", "executable": "/opt/torch/.venv/bin/python",
    "packages": [
        {"name": "torch", "version": "2.11.0+cu130", "location": "/site"},
        {"name": "nvidia-nccl-cu13", "version": "2.28.9", "location": "/site"},
        {"name": "deep_ep", "version": "1.2.1", "location": "/site"},
    ],
}


def write(root, path, text="", mode=None):
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    if mode is not None:
        os.chmod(full, mode)
    return full


class Runner:
    """Scripted command runner: the first matching (argv prefix -> result) answers; records every call."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []
        self.envs = []

    def __call__(self, argv, timeout=None, env=None):
        self.calls.append((list(argv), timeout))
        if env is not None:
            self.envs.append(env)
        for prefix, result in self.answers:
            exact = list(argv[:len(prefix)]) == list(prefix)
            suffix = argv[0].endswith(prefix[0]) and list(argv[1:len(prefix)]) == list(prefix[1:])
            if exact or suffix:
                return result(argv) if callable(result) else result
        return 127, "", "%s: not found" % argv[0]


@pytest.fixture
def node(tmp_path):
    """A fixture root of a configured node."""
    root = tmp_path / "root"
    write(root, "/etc/os-release", 'ID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n'
                                   'PRETTY_NAME="Ubuntu 24.04.1 LTS"\n')
    write(root, "/proc/sys/kernel/osrelease", "6.14.0-1011-gcp\n")
    write(root, "/proc/modules", "nvidia_peermem 16384 0 - Live 0x0\nnvidia 14381056 1 nvidia_peermem, Live 0x0\n"
                                 "mlx5_ib 585728 0 - Live 0x0\n")
    write(root, "/usr/local/cuda/bin/nvcc", "#!/bin/sh\n", 0o755)
    write(root, "/usr/include/infiniband/mlx5_api.h",
          "#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (1 << 0)\n")
    write(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    write(root, "/usr/lib/x86_64-linux-gnu/libnccl.so.2")
    write(root, "/usr/lib/x86_64-linux-gnu/libgdrapi.so.2")
    write(root, "/usr/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 30\n#define NCCL_PATCH 7\n")
    write(root, "/opt/deepep/unified-env.sh", ENV_SCRIPT, 0o755)
    write(root, "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3")
    write(root, "/opt/deepep/nvshmem/lib/nvshmem_transport_ibgda.so.3")
    write(root, "/opt/deepep/nvshmem/.gpufleet-build.json", json.dumps(
        {"key": "k" * 64, "version": "3.5.19", "ibgda": True, "built_at": "2026-11-22T01:00:00Z",
         "inputs": {"cuda_arch": "100", "cuda_version": "13.0.88", "roce_ah_attr_fix": True}}))
    write(root, "/site/deep_ep/__init__.py")
    write(root, "/site/deep_ep/.gpufleet-build.json", json.dumps(
        {"key": "d" * 64, "generation": "v1",
         "built_against": {"torch": "2.9.1+cu129", "arch_list": "10.0", "nvshmem": "3.5.19"},
         "inputs": {"nvshmem": {"root": "/opt/deepep/nvshmem", "version": "3.5.19", "ibgda": True}},
         "hca_mapping_support": True, "wheel": "/opt/deepep/artifacts/deepep/x.whl"}))
    write(root, "/var/run/reboot-required")
    write(root, "/var/run/reboot-required.pkgs", "linux-image-6.14.0-1012-gcp\n")
    return root


def answers(import_rc=1, import_out="", import_err="ImportError: undefined symbol: _ZNK3c10"):
    return [
        (["/nvcc", "--version"], (0, NVCC_13, "")),
        (["dpkg-query"], (1, "rdma-core\t2501mlnx56-1.2501060\tinstalled\nlibibverbs-dev\t2501mlnx56-1\tinstalled\n"
                             "doca-ofed\t3.2.1-0\tinstalled\ngdrcopy\t2.5\tconfig-files\n",
                          "dpkg-query: no packages found matching doca-roce\n")),
        (["ldconfig", "-p"], (0, LDCONFIG, "")),
        (["/opt/torch/.venv/bin/python", "-c", _installs.IMPORT_PROBE], (import_rc, import_out, import_err)),
        (["/opt/torch/.venv/bin/python", "-c"], (0, "noise\n" + json.dumps(PROBE_OUT) + "\n", "")),
    ]


def gather(root, runner, **kw):
    args = dict(root=str(root), python="/opt/torch/.venv/bin/python", runner=runner)
    args.update(kw)
    return _stack.gather_stack(**args)


# --- parsers --------------------------------------------------------------------------------------------

def test_parse_nvcc_version():
    assert _node_probes.parse_nvcc_version(NVCC_13) == ("13.0", "13.0.88")
    assert _node_probes.parse_nvcc_version("garbage") == (None, None)


def test_parse_dpkg_query_keeps_installed_only():
    out = "rdma-core\t50.0-2build2\tinstalled\ngdrcopy\t2.5\tconfig-files\nbroken line\n"
    assert _node_probes.parse_dpkg_query(out) == {"rdma-core": "50.0-2build2"}


def test_parse_ldconfig():
    libs = _node_probes.parse_ldconfig(LDCONFIG)
    assert libs["libcuda.so.1"] == ["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]
    assert "libcuda.so" not in libs


def test_parse_modules_and_lsmod():
    assert _node_probes.parse_proc_modules("a 1 0 - Live 0x0\nb 2 0 - Live 0x0\n") == {"a", "b"}
    assert _node_probes.parse_lsmod("Module                  Size  Used by\nnvidia 1 0\n") == {"nvidia"}


def test_parse_nccl_header():
    assert _node_probes.parse_nccl_header("#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n") == "2.28.9"
    assert _node_probes.parse_nccl_header(None) is None


def test_parse_env_script():
    exports, raw = _envscript.parse_env_script(ENV_SCRIPT)
    assert exports["LD_LIBRARY_PATH"] == "/opt/deepep/nvshmem/lib:/usr/local/cuda/lib64:"
    assert exports["LD_PRELOAD"] == "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3"
    assert exports["NVSHMEM_REMOTE_TRANSPORT"] == "ibgda"
    assert exports["NVSHMEM_IBGDA_NIC_HANDLER"] == "gpu"
    assert exports["NVSHMEM_IB_GID_INDEX"] == "3"
    assert exports["DEEP_EP_DEVICE_TO_HCA_MAPPING"] == "0:mlx5_0:1,1:mlx5_1:1"
    assert exports["FOO"] == "bar"                      # assigned, then exported by name
    assert exports["PYTHONPATH"] == "/opt/deepep/DeepEP:"
    assert exports["QUOTED"] == "a b"
    assert raw["LD_PRELOAD"] == '"${NVSHMEM_HOME}/lib/libnvshmem_host.so.3"'
    assert exports["PATH"] == "/usr/local/cuda/bin"     # nothing inherited: the facts start from an empty environment
    dummy, dummy2, env, errors = _envscript.read_env_script(ENV_SCRIPT, base={"PATH": "/usr/bin", "HOME": "/root"})
    assert errors == []
    assert env["PATH"] == "/usr/local/cuda/bin:/usr/bin" and env["HOME"] == "/root"


def test_read_env_script_refuses_shell_lines_naming_them():
    exports, raw, env, errors = _envscript.read_env_script(SHELL_LINES)
    assert exports == {} and len(errors) == 8
    for number, (error, line) in enumerate(zip(errors, SHELL_LINES.splitlines()), 1):
        assert error.startswith("line %d %r" % (number, line))


def test_parse_env_script_single_quotes_do_not_expand():
    exports, raw = _envscript.parse_env_script("export A=1\nexport B='${A}'\nexport C=\"x${A}y\"\nexport D=${MISSING:-dflt}\n")
    assert exports == {"A": "1", "B": "${A}", "C": "x1y", "D": "dflt"}
    assert raw["B"] == "'${A}'"


def test_parse_os_release():
    info = _node_probes.parse_os_release('ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    assert info["id"] == "debian" and info["version_id"] == "12"


# --- probes over a fixture root -------------------------------------------------------------------------

def test_gather_configured_node(node):
    runner = Runner(answers())
    facts = gather(node, runner, nvidia_reboot_required=True)
    assert facts["os"] == {"id": "ubuntu", "version_id": "24.04", "version_codename": "noble",
                           "pretty_name": "Ubuntu 24.04.1 LTS", "kernel": "6.14.0-1011-gcp"}
    assert facts["cuda"]["release"] == "13.0" and facts["cuda"]["version"] == "13.0.88"
    assert facts["packages"] == {"rdma-core": "2501mlnx56-1.2501060", "libibverbs-dev": "2501mlnx56-1",
                                 "doca-ofed": "3.2.1-0"}
    assert facts["rdma_core"]["doca_version"] == "3.2.1-0"
    assert facts["rdma_core"]["mlx5dv_ok"] is True
    assert facts["kernel_modules"]["nvidia_peermem"] is True and facts["peermem_loaded"] is True
    assert facts["kernel_modules"]["gdrdrv"] is False
    assert facts["libcuda"] == {"so_path": None, "so1_path": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                "stub_path": None, "linkable": False}
    assert facts["gdrcopy"]["library"] == "/usr/lib/x86_64-linux-gnu/libgdrapi.so.2"
    assert facts["gdrcopy"]["gdrdrv_loaded"] is False
    assert facts["torch"] == {"version": "2.11.0+cu130", "cuda": "13.0", "location": "/site", "error": None}
    assert facts["nccl"]["pip_version"] == "2.28.9"
    assert facts["nccl"]["system_version"] == "2.30.7"
    assert facts["nccl"]["loaded_version"] == "2.28.9"       # torch loads its pip NCCL
    assert facts["env_script"]["present"] is True
    assert facts["env_script"]["mode"] == "0755"
    assert facts["env_script"]["sha256"] == hashlib.sha256(ENV_SCRIPT.encode()).hexdigest()
    assert facts["env_script"]["exports"]["NVSHMEM_IB_GID_INDEX"] == "3"
    assert facts["deep_ep_import"]["ok"] is False
    assert "undefined symbol" in facts["deep_ep_import"]["error"]
    assert facts["deep_ep_import"]["env_sourced"] is True
    assert facts["nvshmem"]["present"] is True and facts["nvshmem"]["ibgda"] is True
    assert facts["nvshmem"]["version"] == "3.5.19" and facts["nvshmem"]["cuda_arch"] == "100"
    deepep = facts["deepep"]
    assert deepep["installed"] is True and deepep["generation"] == "v1"
    assert deepep["built_against"]["torch"] == "2.9.1+cu129"
    assert deepep["nvshmem_build"] == {"root": "/opt/deepep/nvshmem", "version": "3.5.19", "ibgda": True}
    assert deepep["import_ok"] is False and deepep["location"] == "/site/deep_ep"
    assert facts["reboot"] == {"required": True,
                               "reasons": ["/var/run/reboot-required", "gpufleet_nvidia.reboot_required"],
                               "packages": ["linux-image-6.14.0-1012-gcp"], "nvidia_reboot_required": True}
    assert facts["errors"] == {}
    # The import probe never runs the env script: no shell, the interpreter itself, with the exports read as data.
    assert not [c for c in runner.calls if c[0][0] in ("bash", "sh")]
    probe = [c for c in runner.calls if c[0] == ["/opt/torch/.venv/bin/python", "-c", _installs.IMPORT_PROBE]][0]
    assert probe[1] == 60
    assert runner.envs[-1]["NVSHMEM_IB_GID_INDEX"] == "3" and runner.envs[-1]["FOO"] == "bar"


def test_import_probe_refused_for_a_script_with_shell_lines(node):
    (node / "opt/deepep/unified-env.sh").write_text(ENV_SCRIPT + SHELL_LINES)
    runner = Runner(answers())
    facts = gather(node, runner)
    assert facts["deep_ep_import"]["ok"] is False
    assert "not plain NAME=value exports" in facts["deep_ep_import"]["error"]
    assert "line 16 '[ -d /lssd/huggingface ]" in facts["deep_ep_import"]["error"]
    assert len(facts["env_script"]["unparsed"]) == 8
    assert not [c for c in runner.calls if _installs.IMPORT_PROBE in c[0]]


def test_gather_import_ok_and_timeout(node):
    ok = gather(node, Runner(answers(0, json.dumps({"file": "/site/deep_ep/__init__.py", "version": "1.2.1"}), "")))
    assert ok["deep_ep_import"]["ok"] is True
    assert ok["deepep"]["import_ok"] is True
    slow = gather(node, Runner(answers(124, "", "")), timeout=5)
    assert slow["deep_ep_import"]["ok"] is False
    assert slow["deep_ep_import"]["error"] == "timed out after 5s"


def test_gather_bare_node(tmp_path):
    """Nothing installed, no commands available: empty facts, no exception."""
    facts = gather(tmp_path, Runner([]), import_check=False)
    assert facts["cuda"]["nvcc_present"] is False
    assert facts["rdma_core"]["mlx5dv_ok"] is False and facts["rdma_core"]["mlx5_header_present"] is False
    assert facts["torch"]["version"] is None
    assert facts["nccl"]["loaded_version"] is None
    assert facts["env_script"]["present"] is False
    assert facts["deep_ep_import"]["checked"] is False
    assert facts["deepep"]["installed"] is False
    assert facts["nvshmem"]["present"] is False
    assert facts["reboot"]["required"] is False
    # An empty root is not a clean node: the stack says so.
    assert set(facts["errors"]) == {"packages", "ldconfig", "python", "root"}
    assert facts["errors"]["root"].startswith("root %s looks empty" % tmp_path)
    assert "rc=127" in facts["errors"]["python"]


# mlx5dv_ok follows the installed NVSHMEM (changed deliberately: this node's NVSHMEM 3.5.19 defines the symbol
# itself, so the header's lack of it is no longer a gap; an older or absent NVSHMEM still needs it).
@pytest.mark.parametrize("installed, ok", [("3.5.19", True), ("3.4.5-0", True), ("3.2.5-1", False), (None, False)])
def test_gather_missing_header_symbols(node, installed, ok):
    write(node, "/usr/include/infiniband/mlx5_api.h", "/* rdma-core 50 */\n")
    stamp = node / "opt" / "deepep" / "nvshmem" / ".gpufleet-build.json"
    if installed is None:
        shutil.rmtree(str(node / "opt" / "deepep" / "nvshmem"))
    else:
        stamp.write_text(json.dumps(dict(json.loads(stamp.read_text()), version=installed)))
    facts = gather(node, Runner(answers()))
    assert facts["nvshmem"]["version"] == installed
    assert facts["rdma_core"]["mlx5dv_symbols"] == {"MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT": False}
    assert facts["rdma_core"]["mlx5dv_ok"] is ok
    rule = facts["rdma_core"]["mlx5dv_rule"]
    assert rule["nvshmem_version"] == installed
    assert rule["missing"] == ([] if ok else ["MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"])
    assert rule["waived"] == (["MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT"] if ok else [])
    assert ("defines MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT itself" in rule["reason"]) is ok


def test_lsmod_fallback_without_proc_modules(node):
    os.remove(node / "proc" / "modules")
    runner = Runner(answers() + [(["lsmod"], (0, "Module Size Used by\ngdrdrv 1 0\n", ""))])
    facts = gather(node, runner)
    assert facts["kernel_modules"]["gdrdrv"] is True
    assert facts["gdrcopy"]["gdrdrv_loaded"] is True
    assert facts["peermem_loaded"] is False


def test_libcuda_unversioned_and_stub(node):
    write(node, "/usr/lib/x86_64-linux-gnu/libcuda.so")
    write(node, "/usr/local/cuda/lib64/stubs/libcuda.so")
    facts = gather(node, Runner(answers()))
    assert facts["libcuda"]["linkable"] is True
    assert facts["libcuda"]["stub_path"] == "/usr/local/cuda/lib64/stubs/libcuda.so"


def test_subprocess_runner_reports_timeout_and_missing():
    slow = _commands.subprocess_runner(["sleep", "5"], timeout=0.2)
    assert slow[0] == 124 and "timed out" in slow[2]
    assert _commands.subprocess_runner(["/nonexistent/binary"])[0] == 127
    rc, out, err = _commands.subprocess_runner(["sh", "-c", "echo $LC_ALL $PYTHONDONTWRITEBYTECODE"])
    assert rc == 0 and out.split() == ["C", "1"] and err == ""


# --- the module -----------------------------------------------------------------------------------------

def test_module_reports_facts_and_changes_nothing(module_runner, tmp_path):
    write(tmp_path, "/opt/deepep/unified-env.sh", "export NVSHMEM_REMOTE_TRANSPORT=ibgda\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = module_runner(node_stack, {"root": str(tmp_path), "import_check": False, "python": "/usr/bin/python3"},
                           check_mode=True)
    assert not result.failed
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpufleet_stack"]
    assert facts["env_script"]["exports"] == {"NVSHMEM_REMOTE_TRANSPORT": "ibgda"}
    assert facts["python"]["ok"] is True
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_module_rejects_bad_timeout(module_runner, tmp_path):
    result = module_runner(node_stack, {"root": str(tmp_path), "timeout": 0})
    assert result.failed
    assert "timeout=0" in result["msg"]


# --- import_check "changed" (node_stack import_when=changed): the torch import only where the install changed ----

def _stamped_install(root, torch="2.11.0+cu130", generation="v1"):
    """The deep_ep install as deepep_build leaves it: the extension and a stamp recording its sha256."""
    ext = "/site/deep_ep_cpp.cpython-312-x86_64-linux-gnu.so" if generation == "v1" else "/site/deep_ep/_C.cpython-312.so"
    write(root, ext, "\x7fELF extension bytes")
    sha = hashlib.sha256((root / ext.lstrip("/")).read_bytes()).hexdigest()
    stamp = json.loads((root / "site/deep_ep/.gpufleet-build.json").read_text())
    stamp.update(extension_sha256=sha, generation=generation)
    stamp["built_against"]["torch"] = torch
    write(root, "/site/deep_ep/.gpufleet-build.json", json.dumps(stamp))
    return root / ext.lstrip("/")


def _imports(runner):
    return [c for c in runner.calls if c[0] == ["/opt/torch/.venv/bin/python", "-c", _installs.IMPORT_PROBE]]


@pytest.mark.parametrize("generation", ["v1", "v2"])
def test_changed_skips_the_import_of_the_recorded_build_with_its_torch(node, generation):
    _stamped_install(node, generation=generation)
    runner = Runner(answers(import_rc=0, import_out='{"file": "/site/deep_ep/__init__.py", "version": "1.2.1"}'))
    facts = gather(node, runner, import_check="changed")
    assert _imports(runner) == []
    imp = facts["deep_ep_import"]
    assert imp["checked"] is False and imp["ok"] is None and "torch 2.11.0+cu130" in imp["skipped"]
    assert facts["deepep"]["import_ok"] is None and facts["deepep"]["installed"] is True
    # always (import_check True) imports the same install
    runner = Runner(answers(import_rc=0, import_out='{"file": "/site/deep_ep/__init__.py", "version": "1.2.1"}'))
    facts = gather(node, runner, import_check=True)
    assert len(_imports(runner)) == 1 and facts["deep_ep_import"]["ok"] is True
    assert facts["deep_ep_import"]["skipped"] is None


@pytest.mark.parametrize("change", ["extension", "torch", "no record", "no stamp", "two extensions"])
def test_changed_imports_whatever_differs(node, change):
    ext = _stamped_install(node)
    stamp_file = node / "site/deep_ep/.gpufleet-build.json"
    if change == "extension":
        ext.write_bytes(ext.read_bytes() + b"patched")
    elif change == "torch":
        stamp = json.loads(stamp_file.read_text())
        stamp["built_against"]["torch"] = "2.9.1+cu129"
        stamp_file.write_text(json.dumps(stamp))
    elif change == "no record":
        stamp = json.loads(stamp_file.read_text())
        del stamp["extension_sha256"]
        stamp_file.write_text(json.dumps(stamp))
    elif change == "no stamp":
        stamp_file.unlink()
    elif change == "two extensions":
        write(node, "/site/deep_ep_cpp.cpython-311-x86_64-linux-gnu.so", "other")
    runner = Runner(answers())
    facts = gather(node, runner, import_check="changed")
    assert len(_imports(runner)) == 1
    assert facts["deep_ep_import"]["checked"] is True and facts["deep_ep_import"]["ok"] is False
    assert "undefined symbol" in facts["deep_ep_import"]["error"] and facts["deep_ep_import"]["skipped"] is None


def test_never_imports_with_import_check_false(node):
    runner = Runner(answers())
    facts = gather(node, runner, import_check=False)
    assert _imports(runner) == [] and facts["deep_ep_import"]["checked"] is False
    assert facts["deep_ep_import"]["skipped"] is None


# --- a node that reads as nothing is not a clean node (issue 46) ---------------------------------------------------

def test_missing_interpreter_is_unknown_torch_and_deepep_not_absent(node):
    """The interpreter the module probes does not exist: torch and DeepEP say so ("not found at <path>"), and the
    stack's error names the option to set, instead of null versions that read as packages not installed."""
    python = str(node / "no-venv/bin/python")
    runner = Runner([])
    facts = gather(node, runner, python=python)
    assert facts["python"]["ok"] is False
    assert facts["torch"]["version"] is None
    assert facts["torch"]["error"] == "python %s not found at %s: torch unknown" % (python, python)
    assert facts["deep_ep_import"]["error"].startswith("python %s not found at %s: DeepEP unknown" % (python, python))
    assert facts["deepep"]["import_error"].startswith("python %s not found at %s" % (python, python))
    assert facts["errors"]["python"].startswith("python %s not found at %s: the torch, NCCL and DeepEP facts" %
                                                (python, python))
    assert "set the python option (audit_python in the audit role)" in facts["errors"]["python"]


def test_missing_interpreter_without_the_import_still_says_deepep_is_unknown(node):
    python = str(node / "no-venv/bin/python")
    facts = gather(node, Runner([]), python=python, import_check=False)
    assert facts["deep_ep_import"]["checked"] is False and facts["deep_ep_import"]["error"] is None
    assert facts["deepep"]["import_ok"] is None
    assert "not found at %s" % python in facts["deepep"]["import_error"]


def test_interpreter_on_path_that_is_not_there(node, monkeypatch):
    monkeypatch.setenv("PATH", str(node / "empty-bin"))
    facts = gather(node, Runner([]), python="python3-gpufleet-none")
    assert facts["torch"]["error"] == "python python3-gpufleet-none not found on PATH: torch unknown"


def test_interpreter_that_runs_but_cannot_report_is_named_with_its_failure(node):
    import sys
    runner = Runner([([sys.executable, "-c"], (1, "", "SyntaxError: boom"))])
    facts = gather(node, runner, python=sys.executable)
    assert facts["torch"]["error"].startswith("python %s could not report its packages (" % sys.executable)
    assert "SyntaxError: boom" in facts["errors"]["python"]


def test_interpreter_without_torch_says_where_torch_was_looked_for(node):
    """The captured no-profile node: /usr/bin/python3 runs, torch lives in a venv; the fact says which
    interpreter was asked and what to set, not just null."""
    probe = dict(PROBE_OUT, packages=[])
    runner = Runner(answers()[:4] + [(["/opt/torch/.venv/bin/python", "-c"], (0, json.dumps(probe), ""))])
    facts = gather(node, runner)
    assert facts["python"]["ok"] is True and "python" not in facts["errors"]
    assert facts["torch"]["version"] is None
    assert facts["torch"]["error"] == ("no torch package in the environment of /opt/torch/.venv/bin/python (where "
                                       "torch lives in a virtual environment, set the python option to its "
                                       "interpreter)")


@pytest.mark.parametrize("content, says", [
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4, "is not UTF-8 text (byte 0x80 at offset 136)"),
    (b"export A=1\n\xff\xfe\xfdexport B=2\n", "is not UTF-8 text (byte 0xff at offset 11)"),
    (b"export A=1\n" + b"\x00" * 64, "holds NUL bytes (a binary file, not a script)"),
])
def test_binary_env_script_is_unreadable_not_a_script_of_unparsed_lines(node, content, says):
    path = node / "opt/deepep/unified-env.sh"
    path.write_bytes(content)
    runner = Runner(answers())
    facts = gather(node, runner)
    env = facts["env_script"]
    assert env["present"] is True and env["sha256"] == hashlib.sha256(content).hexdigest()
    assert env["exports"] == {} and env["unparsed"] == []
    assert env["error"].startswith("the env script %s " % path) and says in env["error"]
    assert facts["errors"]["env_script"] == env["error"]
    # The import is not tried with an environment read from the wrong file.
    assert _imports(runner) == []
    assert facts["deep_ep_import"]["ok"] is False and says in facts["deep_ep_import"]["error"]


def test_readable_env_script_has_no_error(node):
    facts = gather(node, Runner(answers()))
    assert facts["env_script"]["error"] is None and "env_script" not in facts["errors"]


def _empty_node_args(tmp_path):
    root, sysfs = tmp_path / "empty-root", tmp_path / "empty-sys"
    root.mkdir()
    sysfs.mkdir()
    return {"root": str(root), "sysfs_root": str(sysfs), "import_check": False,
            "params_path": str(tmp_path / "no-params"), "version_path": str(tmp_path / "no-version"),
            "nvidia_smi": "/bin/true", "python": "/usr/bin/python3"}


def test_empty_root_and_sysfs_are_not_a_clean_node(module_runner, tmp_path):
    args = _empty_node_args(tmp_path)
    result = module_runner(node_stack, dict(args, gather=["stack", "nvidia", "rdma", "gpus"]), check_mode=True)
    assert not result.failed, result.get("msg")
    assert result["gather_errors"] == {}
    warned = result["gather_warnings"]
    assert sorted(warned) == ["gpufleet_gpus", "gpufleet_nvidia", "gpufleet_rdma", "gpufleet_stack"]
    stack = result["ansible_facts"]["gpufleet_stack"]
    assert stack["errors"]["root"].startswith("root %s looks empty" % args["root"])
    assert warned["gpufleet_stack"] == [stack["errors"]["root"]]
    pci = os.path.join(args["sysfs_root"], "bus", "pci", "devices")
    assert warned["gpufleet_rdma"] == warned["gpufleet_gpus"]
    assert warned["gpufleet_gpus"][0].startswith("sysfs_root %s looks empty: no PCI device under %s" %
                                                 (args["sysfs_root"], pci))
    assert warned["gpufleet_nvidia"][0].startswith("no NVIDIA driver found: neither params_path %s nor version_path"
                                                   % args["params_path"])
    # Each sentence is one warning, naming every set it concerns.
    messages = [w if isinstance(w, str) else str(w) for w in result["warnings"]]
    assert len(messages) == 3
    assert any("gpufleet_gpus, gpufleet_rdma: sysfs_root" in m for m in messages)


def test_pci_devices_without_a_gpu_say_no_gpu_found(module_runner, tmp_path):
    args = _empty_node_args(tmp_path)
    dev = tmp_path / "empty-sys/bus/pci/devices/0000:00:1f.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    (dev / "class").write_text("0x060100\n")
    result = module_runner(node_stack, dict(args, gather=["rdma", "gpus"]), check_mode=True)
    assert not result.failed, result.get("msg")
    assert result["ansible_facts"]["gpufleet_gpus"]["gpu_count"] == 0
    assert result["gather_warnings"] == {"gpufleet_gpus": [
        "no NVIDIA GPU found under %s (no PCI function of vendor 0x10de with a display or 3D controller class)"
        % os.path.join(args["sysfs_root"], "bus", "pci", "devices")]}


def test_root_that_is_not_a_directory_is_refused(module_runner, tmp_path):
    result = module_runner(node_stack, {"root": str(tmp_path / "nowhere"), "import_check": False})
    assert result.failed
    assert result["msg"] == ("root %r is not a directory (expected / or a tree shaped like a node's root)"
                             % str(tmp_path / "nowhere"))


def test_configured_root_gives_no_root_warning(node):
    facts = gather(node, Runner(answers()))
    assert "root" not in facts["errors"]
    assert _stack.set_warnings({"gpufleet_stack": facts}, root=str(node)) == {}
