# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the simulated RDMA traffic spool (tools/fleetsim/traffic.py, node tool fleetsim-nic-traffic)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from tools.fleetsim import traffic
from tools.fleetsim.common import REPO

NODE_TOOL = REPO / "tools" / "fleetsim" / "node" / "fleetsim-nic-traffic.py"


def make_port(root, dev, value=0):
    port = root / "sys" / "class" / "infiniband" / dev / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    for name in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"):
        (port / "counters" / name).write_text("%d\n" % value)
    return port


def counter(port, name="port_xmit_data"):
    return int((port / "counters" / name).read_text())


def test_parse_spool_complete_lines_only():
    requests, bad, consumed = traffic.parse_spool(b"mlx5_0 4096\n# note\n\nbad line here\nmlx5_1 0\nmlx5_1 8192\nmlx5_2 12")
    assert requests == [("mlx5_0", 4096), ("mlx5_1", 8192)]
    assert bad == ["bad line here", "mlx5_1 0"]
    assert consumed == len(b"mlx5_0 4096\n# note\n\nbad line here\nmlx5_1 0\nmlx5_1 8192\n")


def test_apply_traffic_bumps_like_fault_and_reads_each_line_once(tmp_path):
    node = tmp_path / "nodes" / "n1"
    var = node / "upper" / "var"
    ports = {dev: make_port(node / "hw", dev) for dev in ("mlx5_0", "mlx5_1")}
    spool = var / traffic.SPOOL
    spool.parent.mkdir(parents=True)
    spool.write_text("mlx5_0 4096\nmlx5_1 1048576\nmlx5_9 4096\nmlx5_0 40")
    got = traffic.apply_traffic(var, ports)
    assert got["applied"] == {"mlx5_0": 4096, "mlx5_1": 1048576} and got["unknown"] == {"mlx5_9": 4096}
    assert counter(ports["mlx5_0"]) == 1024 and counter(ports["mlx5_1"]) == 262144
    assert counter(ports["mlx5_1"], "port_xmit_packets") == 256 and counter(ports["mlx5_1"], "port_rcv_data") == 262144
    assert (node / traffic.OFFSET_NAME).read_text().strip() == str(len("mlx5_0 4096\nmlx5_1 1048576\nmlx5_9 4096\n"))
    # Nothing new: no change. Then the partial line completes and one more arrives.
    assert traffic.apply_traffic(var, ports)["applied"] == {}
    with open(spool, "a") as fh:
        fh.write("96\nmlx5_1 4096\n")
    got = traffic.apply_traffic(var, list(ports.values()))
    assert got["applied"] == {"mlx5_0": 4096, "mlx5_1": 4096}
    assert counter(ports["mlx5_0"]) == 2048


def test_apply_traffic_restarts_after_truncation_and_without_spool(tmp_path):
    var = tmp_path / "upper" / "var"
    port = make_port(tmp_path / "hw", "mlx5_0")
    offset = tmp_path / "offset"
    assert traffic.apply_traffic(var, {"mlx5_0": port}, offset_file=offset)["applied"] == {}
    spool = var / traffic.SPOOL
    spool.parent.mkdir(parents=True)
    spool.write_text("mlx5_0 4096\n" * 3)
    traffic.apply_traffic(var, {"mlx5_0": port}, offset_file=offset)
    spool.write_text("mlx5_0 8192\n")
    assert traffic.apply_traffic(var, {"mlx5_0": port}, offset_file=offset)["applied"] == {"mlx5_0": 8192}
    assert counter(port) == 3 * 1024 + 2048


def test_node_tool_appends_requests(tmp_path):
    make_port(tmp_path, "mlx5_0")
    spool = tmp_path / "var" / "traffic.spool"
    env = dict(os.environ, FLEETSIM_TRAFFIC_SPOOL=str(spool), FLEETSIM_SYSFS_ROOT=str(tmp_path / "sys"))
    run = [sys.executable, str(NODE_TOOL)]
    assert subprocess.run(run + ["mlx5_0", "4096", "mlx5_0", "10"], check=False, env=env).returncode == 0
    assert spool.read_text() == "mlx5_0 4096\nmlx5_0 10\n"
    bad = subprocess.run(run + ["mlx5_7", "1"], check=False, env=env, stderr=subprocess.PIPE,
                         universal_newlines=True)
    assert bad.returncode == 1 and "no RDMA device mlx5_7" in bad.stderr
    assert subprocess.run(run + ["mlx5_0", "-3"], check=False, env=env, stderr=subprocess.DEVNULL).returncode == 2
    assert subprocess.run(run + ["mlx5_0"], check=False, env=env, stderr=subprocess.DEVNULL).returncode == 2
    requests, bad_lines, dummy = traffic.parse_spool(spool.read_bytes())
    assert requests == [("mlx5_0", 4096), ("mlx5_0", 10)] and bad_lines == []


def test_concurrent_appliers_count_each_request_once(tmp_path):
    var = tmp_path / "upper" / "var"
    port = make_port(tmp_path / "hw", "mlx5_0")
    spool = var / traffic.SPOOL
    spool.parent.mkdir(parents=True)
    spool.write_text("mlx5_0 4096\n" * 200)
    results = []
    workers = [threading.Thread(target=lambda: results.append(traffic.apply_traffic(var, {"mlx5_0": port})))
               for dummy in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sum(r["applied"].get("mlx5_0", 0) for r in results) == 200 * 4096
    assert counter(port) == 200 * 1024
