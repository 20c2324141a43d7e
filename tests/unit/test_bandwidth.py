# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""DeepEP test output parsing: module_utils._bandwidth and the deepep_bandwidth filter."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.deepep.plugins.filter.deepep_bandwidth import FilterModule, deepep_bandwidth
from ansible_collections.gpufleet.deepep.plugins.plugin_utils._verify.bandwidth import (
    BandwidthInputError,
    normalize_test,
    parse_output,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURED = FIXTURES / "captured" / "h200x2"
WRITTEN = FIXTURES / "deepep_output"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.fixture
def intranode() -> str:
    return read(CAPTURED / "deepep_v1_test_intranode_2gpu.txt")


# ---------------------------------------------------------------------------------------------
# Real captures of the 2 x H200 node


def test_captured_v1_intranode(intranode):
    bw = parse_output(intranode)
    assert bw["generation"] == "v1"
    assert bw["test"] == "intranode"
    assert bw["complete"] is True
    assert bw["cases"] == {"passed": 24, "failed": 0}
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": 340.61, "rdma_gbps": None}
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": 247.83, "rdma_gbps": None}
    assert bw["combine"] == {"nvl_gbps": 293.21, "rdma_gbps": None}
    assert bw["low_latency"] is None
    assert bw["elastic"] is None
    assert bw["errors"] == []


def test_captured_v2_legacy_intranode_needs_the_test_name_for_its_generation():
    text = read(CAPTURED / "deepep_v2pkg_legacy_test_intranode_2gpu.txt")
    plain = parse_output(text)
    named = parse_output(text, test="tests/legacy/test_intranode.py")
    assert plain["generation"] == "v1"          # the output alone is V1-shaped
    assert named["generation"] == "v2"
    assert named["test"] == "intranode"
    assert named["cases"] == {"passed": 24, "failed": 0}
    assert named["dispatch"]["bf16"]["nvl_gbps"] == 339.79
    assert named["dispatch"]["fp8"]["nvl_gbps"] == 245.74
    assert named["combine"]["nvl_gbps"] == 287.72
    assert named["complete"] is True


def test_captured_v1_low_latency_two_records_on_one_line():
    bw = parse_output(read(CAPTURED / "deepep_v1_test_low_latency_2gpu.txt"))
    assert bw["test"] == "low_latency"
    assert bw["generation"] == "v1"
    assert bw["complete"] is True
    assert bw["cases"] == {"passed": 2, "failed": 0}
    ll = bw["low_latency"]
    assert ll["dispatch_gbps"] == 261.71 and ll["dispatch_slowest_rank"] == 0
    assert ll["combine_gbps"] == 367.94 and ll["combine_slowest_rank"] == 1
    assert ll["dispatch_combine_gbps"] == 308.49 and ll["slowest_rank"] == 1
    assert ll["ranks"] == 2
    # the IBGDA init message is a warning on a NIC-less node, not an error of the run
    assert bw["errors"] == []


def test_captured_v2_segfault_is_incomplete():
    bw = parse_output(read(CAPTURED / "deepep_v2_test_ep_segfault.txt"))
    assert bw["generation"] == "v2"
    assert bw["test"] == "elastic"
    assert bw["complete"] is False
    assert bw["cases"] == {"passed": 0, "failed": 0}
    assert "Fatal Python error: Segmentation fault" in bw["errors"]
    assert set(bw["elastic"]) == {"dispatch", "expanded_dispatch", "cached_dispatch", "combine", "reduced_combine"}
    assert all(value is None for value in bw["elastic"].values())
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": None, "rdma_gbps": None}


def test_captured_v2_faulthandler_segfault_names_the_signal():
    bw = parse_output(read(CAPTURED / "deepep_v2_test_ep_segfault.txt"))
    # faulthandler prints no process number: one entry for the signal, however many ranks printed it.
    assert bw["crashed"] == [{"process": None, "signal": "SIGSEGV"}]


def test_captured_h100_spawn_sigsegv_is_a_crash_of_process_0():
    # 2 x H100, V2 dd758ca tests/elastic/test_ep.py: torch's spawn reports the dead child and exits 1 itself.
    bw = parse_output(read(FIXTURES / "captured" / "h100x2" / "deepep_v2_test_ep_spawn_sigsegv.txt"))
    assert bw["test"] == "elastic" and bw["generation"] == "v2"
    assert bw["crashed"] == [{"process": 0, "signal": "SIGSEGV"}]
    assert bw["complete"] is False
    # the first case started ("Testing with ...") and never finished
    assert bw["cases"] == {"passed": 0, "failed": 1}
    assert any("terminated with signal SIGSEGV" in line for line in bw["errors"])


@pytest.mark.parametrize("name, slowest", [
    ("cold", {"dispatch": (564, 1), "combine": (595, 1), "reduced_combine": (509, 1)}),
    ("warm", {"dispatch": (565, 1), "combine": (596, 0), "reduced_combine": (518, 0)}),
])
def test_captured_h100_elastic_without_gin_finishes_with_its_figures(name, slowest):
    # 2 x H100, no NIC, V2 dd758ca built by the collection (shared libstdc++), EP_DISABLE_GIN=1, no hybrid kernels,
    # --test-first-only: one FP8 case, five kinds of line per rank; scale-out is 1 x, so no RDMA figure.
    bw = parse_output(read(FIXTURES / "captured" / "h100x2" / f"deepep_v2_test_ep_elastic_nogin_{name}.txt"))
    assert bw["test"] == "elastic" and bw["generation"] == "v2"
    assert bw["complete"] is True and bw["crashed"] == [] and bw["errors"] == []
    assert bw["cases"] == {"passed": 1, "failed": 0}
    for kind, (gbps, rank) in slowest.items():
        entry = bw["elastic"][kind]
        assert (entry["su_gbps"], entry["rank"], entry["so_gbps"], entry["num_ranks"]) == (gbps, rank, 0, 2), kind
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": slowest["dispatch"][0], "rdma_gbps": None}
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": None, "rdma_gbps": None}     # the first case is FP8 only
    assert bw["combine"] == {"nvl_gbps": slowest["combine"][0], "rdma_gbps": None}


def test_captured_h100_elastic_on_4_ranks_finishes_with_the_slowest_rank_of_four():
    # 4 x H100 (NV18 all pairs), V2 dd758ca built by the collection, EP_DISABLE_GIN=1, cold JIT cache: the run that
    # died with SIGSEGV before the extension linked the shared libstdc++ (captured/h200x4) finishes on four ranks.
    bw = parse_output(read(FIXTURES / "captured" / "h100x4" / "deepep_v2_test_ep_elastic_nogin_cold_4gpu.txt"))
    assert bw["test"] == "elastic" and bw["generation"] == "v2"
    assert bw["complete"] is True and bw["crashed"] == [] and bw["errors"] == []
    assert bw["cases"] == {"passed": 1, "failed": 0}
    expected = {"dispatch": (360, 0), "expanded_dispatch": (360, 0), "cached_dispatch": (357, 0), "combine": (403, 0),
                "reduced_combine": (394, 0)}
    for kind, (gbps, rank) in expected.items():
        entry = bw["elastic"][kind]
        assert (entry["su_gbps"], entry["rank"], entry["so_gbps"], entry["num_ranks"]) == (gbps, rank, 0, 4), kind
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": 360, "rdma_gbps": None}
    assert bw["combine"] == {"nvl_gbps": 403, "rdma_gbps": None}


@pytest.mark.parametrize("line, expected", [
    ("torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGABRT",
     [{"process": 3, "signal": "SIGABRT"}]),
    ("Segmentation fault (core dumped)", [{"process": None, "signal": "SIGSEGV"}]),
    ("Fatal Python error: Bus error", [{"process": None, "signal": "SIGBUS"}]),
    ("Aborted (core dumped)", [{"process": None, "signal": "SIGABRT"}]),
    ("subprocess died with <Signals.SIGKILL: 9>", [{"process": None, "signal": "SIGKILL"}]),
    # the launcher line and the fault line of the same death are one entry
    ("Fatal Python error: Segmentation fault\nprocess 1 terminated with signal SIGSEGV",
     [{"process": 1, "signal": "SIGSEGV"}]),
    ("process 0 terminated with exit code 1", []),
])
def test_crashed_reads_each_launchers_signal_line(line, expected):
    bw = parse_output("Running all test cases:\n" + line + "\n", test="elastic")
    assert bw["crashed"] == expected
    assert bw["complete"] is False


def test_a_clean_run_has_no_crash(intranode):
    assert parse_output(intranode)["crashed"] == []


# ---------------------------------------------------------------------------------------------
# Outputs written from the runbooks' figures


def test_internode_two_b200_nodes():
    bw = parse_output(read(WRITTEN / "v1_test_internode_b200_2node_node0.txt"))
    assert bw["test"] == "internode"
    assert bw["generation"] == "v1"
    assert bw["complete"] is True
    assert bw["cases"] == {"passed": 24, "failed": 0}
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": 232.61, "rdma_gbps": 70.84}
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": 268.93, "rdma_gbps": 81.27}
    assert bw["combine"] == {"nvl_gbps": 249.47, "rdma_gbps": 75.12}


def test_internode_timeout_dispatch_cpu():
    bw = parse_output(read(WRITTEN / "v1_test_internode_timeout_dispatch_cpu.txt"))
    assert bw["test"] == "internode"
    assert bw["complete"] is False
    assert bw["cases"] == {"passed": 0, "failed": 1}
    assert "RuntimeError: DeepEP error: timeout (dispatch CPU)" in bw["errors"]
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": None, "rdma_gbps": None}


def test_v2_test_ep_gb200_ep4():
    bw = parse_output(read(WRITTEN / "v2_test_ep_gb200_ep4_sm32.txt"))
    assert bw["generation"] == "v2"
    assert bw["test"] == "elastic"
    assert bw["complete"] is True
    assert bw["cases"] == {"passed": 2, "failed": 0}
    el = bw["elastic"]
    # slowest rank over both cases (BF16 and FP8 dispatch), single scale-out rank: judged on SU
    assert el["dispatch"] == {"so_gbps": 0, "su_gbps": 811, "rank": 2, "num_ranks": 4, "time_us": 162.107}
    assert el["expanded_dispatch"]["su_gbps"] == 812
    assert el["cached_dispatch"] == {"so_gbps": 0, "su_gbps": 800, "rank": 2, "num_ranks": 4, "time_us": 164.426}
    assert el["combine"]["su_gbps"] == 822 and el["combine"]["rank"] == 2
    assert el["reduced_combine"]["su_gbps"] == 460 and el["reduced_combine"]["rank"] == 1
    # top level: per dispatch dtype; no scale-out in a 1 x 4 run, so no RDMA figure
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": 860, "rdma_gbps": None}
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": 811, "rdma_gbps": None}
    assert bw["combine"] == {"nvl_gbps": 822, "rdma_gbps": None}


def test_v2_split_nvlink_domain_shows_the_low_figure():
    bw = parse_output(read(WRITTEN / "v2_test_ep_gb200_ep8_split_nvlink_domain.txt"))
    assert bw["complete"] is True
    assert bw["dispatch"]["bf16"]["nvl_gbps"] == 94
    assert bw["dispatch"]["fp8"]["nvl_gbps"] == 91
    assert bw["combine"]["nvl_gbps"] == 93
    assert bw["elastic"]["combine"]["num_ranks"] == 8


def test_v2_scale_out_judged_on_rdma():
    text = "\n".join([
        "Config:",
        " > Ranks: 2 x 8",
        " > Testing with do_handle_copy=0, expert_alignment=1, use_fp8_dispatch=1, num_bias=0, "
        "with_previous_event=0, async_with_compute_stream=0, allocate_on_comm_stream=0 ...",
        "   * EP:   0/16 | dispatch: 90 GB/s (SO), 270 GB/s (SU), 400.000 us, 1 bytes | copy: 1 GB/s, 1.000 us",
        "   * EP:   3/16 | dispatch: 81 GB/s (SO), 290 GB/s (SU), 420.000 us, 1 bytes | copy: 1 GB/s, 1.000 us",
        "   @ EP:   0/16 | combine: 84 GB/s (SO), 250 GB/s (SU), 500.000 us, 1 bytes | reduce: 1 GB/s, 1.000 us",
        "   @ EP:   3/16 | combine: 88 GB/s (SO), 240 GB/s (SU), 490.000 us, 1 bytes | reduce: 1 GB/s, 1.000 us",
        "",
    ])
    bw = parse_output(text)
    assert bw["elastic"]["dispatch"]["rank"] == 3
    assert bw["elastic"]["dispatch"]["so_gbps"] == 81
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": 290, "rdma_gbps": 81}
    assert bw["dispatch"]["bf16"] == {"nvl_gbps": None, "rdma_gbps": None}
    assert bw["combine"] == {"nvl_gbps": 250, "rdma_gbps": 84}
    assert bw["elastic"]["expanded_dispatch"] is None
    assert bw["cases"] == {"passed": 1, "failed": 0}
    assert bw["complete"] is True


def test_v2_cut_in_the_second_case():
    lines = read(WRITTEN / "v2_test_ep_gb200_ep4_sm32.txt").splitlines()
    second = max(i for i, line in enumerate(lines) if "> Testing with" in line)
    bw = parse_output("\n".join(lines[:second + 6]))
    assert bw["complete"] is False
    assert bw["cases"] == {"passed": 1, "failed": 1}
    assert bw["dispatch"]["bf16"]["nvl_gbps"] == 860
    assert bw["dispatch"]["fp8"]["nvl_gbps"] == 811


# ---------------------------------------------------------------------------------------------
# Formats of the runbooks and reference, and noisy output


def test_runbook_000_expected_output_lines():
    text = "\n".join([
        "[testing] Running with BF16, without top-k (async=False, previous=False) ... passed",
        "[testing] Running with BF16, without top-k (async=True, previous=False) ... passed",
        "[tuning] Best dispatch (BF16): SMs 24, NVL chunk 24, 35.55 GB/s (NVL)",
        "[tuning] Best combine: SMs 24, NVL chunk 16: 36.64 GB/s (NVL)",
    ])
    bw = parse_output(text)
    assert bw["test"] == "intranode"
    assert bw["cases"] == {"passed": 2, "failed": 0}
    assert bw["dispatch"]["bf16"]["nvl_gbps"] == 35.55
    assert bw["dispatch"]["fp8"]["nvl_gbps"] is None
    assert bw["combine"]["nvl_gbps"] == 36.64
    assert bw["complete"] is True


def test_reference_integer_internode_line():
    text = ("[tuning] Best dispatch (FP8): SMs 24, NVL chunk 16, RDMA chunk 8: 70 GB/s (RDMA), 231 GB/s (NVL)\n"
            "[tuning] Best combine: SMs 24, NVL chunk 6, RDMA chunk 16: 75 GB/s (RDMA), 245 GB/s (NVL)\n")
    bw = parse_output(text)
    assert bw["test"] == "internode"
    assert bw["dispatch"]["fp8"] == {"nvl_gbps": 231, "rdma_gbps": 70}
    assert bw["combine"] == {"nvl_gbps": 245, "rdma_gbps": 75}
    # no [testing] line: nothing shows the cases ran, so not complete
    assert bw["complete"] is False


def test_ansi_prefixes_and_crlf(intranode):
    noisy = "\r\n".join("\x1b[32m[default0]:\x1b[0m [rank 0]: " + line for line in intranode.splitlines())
    assert parse_output(noisy) == parse_output(intranode)


def test_two_nodes_interleaved_report_the_slower():
    node0 = read(WRITTEN / "v1_test_internode_b200_2node_node0.txt").splitlines()
    node1 = [line.replace("81.27 GB/s (RDMA)", "79.02 GB/s (RDMA)") for line in node0]
    merged = []
    for a, b in zip(node0, node1):
        merged.extend(["node-a: " + a, "node-b: " + b])
    bw = parse_output("\n".join(merged))
    assert bw["dispatch"]["bf16"]["rdma_gbps"] == 79.02
    assert bw["dispatch"]["bf16"]["nvl_gbps"] == 268.93
    assert bw["cases"] == {"passed": 48, "failed": 0}
    assert bw["complete"] is True


def test_pass_mark_pushed_to_its_own_line_by_another_rank():
    text = ("[testing] Running with FP8, with top-k (async=True, previous=True) ...[rank 1] NVSHMEM WARN: slow\n"
            " passed\n"
            "[tuning] Best dispatch (FP8): SMs 24, NVL chunk 24, 247.83 GB/s (NVL), t: 243.45 us\n"
            "[tuning] Best combine: SMs 24, NVL chunk 7: 293.21 GB/s (NVL), t: 399.07 us\n")
    bw = parse_output(text)
    assert bw["cases"] == {"passed": 1, "failed": 0}
    assert bw["complete"] is True


def test_truncated_intranode_is_incomplete(intranode):
    cut = intranode[:intranode.index("[tuning] Best dispatch (BF16)")]
    bw = parse_output(cut)
    assert bw["complete"] is False
    assert bw["cases"] == {"passed": 24, "failed": 0}
    assert bw["dispatch"]["fp8"]["nvl_gbps"] == 247.83
    assert bw["dispatch"]["bf16"]["nvl_gbps"] is None
    assert bw["combine"]["nvl_gbps"] is None


def test_assertion_in_a_case_counts_as_failed(intranode):
    head = intranode[:intranode.index("[testing] Running with FP8")]
    text = head + ("[testing] Running with FP8, without top-k (async=False, previous=False) ...Traceback "
                   "(most recent call last):\n  File \"tests/test_intranode.py\", line 120, in test_main\n"
                   "AssertionError: 4096 != 4095\n")
    bw = parse_output(text)
    assert bw["cases"] == {"passed": 4, "failed": 1}
    assert bw["complete"] is False
    assert "AssertionError: 4096 != 4095" in bw["errors"]


def test_low_latency_missing_rank_is_incomplete():
    text = read(CAPTURED / "deepep_v1_test_low_latency_2gpu.txt")
    text = "\n".join(line for line in text.splitlines() if "[rank 1] Dispatch send/recv" not in line)
    bw = parse_output(text)
    assert bw["complete"] is False
    assert bw["low_latency"]["ranks"] == 2


def test_low_latency_of_the_second_node_prints_its_global_ranks_and_is_complete():
    """Across two nodes of 2 GPUs the second node's log holds ranks 2 and 3 only (DeepEP prints the global rank):
    complete, as the first node's; a rank missing in between is not."""
    text = read(CAPTURED / "deepep_v1_test_low_latency_2gpu.txt").replace("[rank 1]", "[rank 3]").replace(
        "[rank 0]", "[rank 2]")
    bw = parse_output(text)
    assert bw["complete"] is True and bw["cases"] == {"passed": 2, "failed": 0} and bw["low_latency"]["ranks"] == 2
    assert bw["low_latency"]["slowest_rank"] in (2, 3)
    lines = text.replace("[rank 3]", "[rank 4]").splitlines()
    gap = "\n".join(line for line in lines if "[rank 4] Dispatch send/recv" not in line)
    assert parse_output(gap)["complete"] is False


def test_empty_output_of_a_hung_run():
    bw = parse_output("")
    assert bw["test"] is None and bw["generation"] is None and bw["complete"] is False
    named = parse_output("", test="internode")
    assert named["test"] == "internode" and named["generation"] == "v1" and named["complete"] is False


# ---------------------------------------------------------------------------------------------
# Input forms and errors


def test_input_forms_agree(intranode):
    expected = parse_output(intranode)
    assert parse_output(intranode.splitlines()) == expected
    assert parse_output(intranode.encode()) == expected
    assert parse_output({"stdout": intranode, "stderr": "", "rc": 0}) == expected
    assert parse_output({"stdout_lines": intranode.splitlines(), "stderr_lines": []}) == expected


def test_stderr_of_a_command_result_is_read():
    result = {"stdout": "", "stderr": read(CAPTURED / "deepep_v2_test_ep_segfault.txt"), "rc": -11}
    assert parse_output(result)["errors"] == ["Fatal Python error: Segmentation fault"]


@pytest.mark.parametrize(
    "bad, named",
    [
        (42, "int"),
        (None, "NoneType"),
        (["ok", 3], "item 1 is a int"),
        ({"rc": 1}, "stdout/stderr"),
    ],
)
def test_malformed_input_is_named(bad, named):
    with pytest.raises(BandwidthInputError, match=named):
        parse_output(bad)
    with pytest.raises(AnsibleFilterError, match="deepep_bandwidth: .*" + named):
        deepep_bandwidth(bad)


def test_bad_arguments_are_named():
    with pytest.raises(AnsibleFilterError, match="'test_everything'"):
        deepep_bandwidth("", test="test_everything")
    with pytest.raises(AnsibleFilterError, match="'v3'"):
        deepep_bandwidth("", generation="v3")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("intranode", ("intranode", None)),
        ("tests/test_internode.py", ("internode", "v1")),
        ("/opt/deepep/DeepEP/tests/legacy/test_intranode.py", ("intranode", "v2")),
        ("test_low_latency.py", ("low_latency", None)),
        ("low-latency", ("low_latency", None)),
        ("tests/elastic/test_ep.py", ("elastic", "v2")),
        ("test_ep", ("elastic", "v2")),
    ],
)
def test_test_names(name, expected):
    assert normalize_test(name) == expected


def test_filter_is_registered():
    assert FilterModule().filters()["deepep_bandwidth"].__name__ == "deepep_bandwidth"


def test_sidecar_docs_match_the_signature():
    import inspect

    import yaml

    from ansible_collections.gpufleet.deepep.plugins.filter import deepep_bandwidth as plugin

    docs = yaml.safe_load(Path(plugin.__file__).with_name("deepep_bandwidth.yml").read_text())
    assert docs["DOCUMENTATION"]["name"] == "deepep_bandwidth"
    params = list(inspect.signature(deepep_bandwidth).parameters)
    assert set(docs["DOCUMENTATION"]["options"]) == {"_input"} | set(params[1:])
    returned = set(docs["RETURN"]["_value"]["contains"])
    assert returned == set(parse_output(""))      # every key the parser returns is documented
