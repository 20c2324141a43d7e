# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL EP's dispatch and combine on this node's GPUs (and across nodes), measured as NCCL EP's own ep_bench
measures them, without MPI: the verify launcher's test for the backend nccl_ep.

    python nccl_ep_bench.py --num-processes N [--algorithm ll|ht] [--tokens T] [--hidden H] [--top-k K]
                            [--experts E] [--warmup W] [--iters I] [--seed S]

Ranks: N processes on this node, one per GPU; across nodes MASTER_ADDR, MASTER_PORT, WORLD_SIZE (nodes) and RANK
(this node's index), the settings DeepEP's tests read, so the verify roles start either the same way. Global rank 0
serves a small TCP rendezvous (the NCCL unique id, barriers, the figures' gather) in place of MPI.

The method is ep_bench's (contrib/nccl_ep/ep_bench.cu, NCCL tag nccl-ep-v0.1.0): BF16 tokens, LL routing from
abs(randn)+1 scores with ten selections masked (as DeepEP's test_low_latency.py), HT routing a random permutation;
paired dispatch + combine iterations timed with CUDA events recorded around each call, a stream sync and a barrier
between iterations, the first timed iteration dropped; bytes: LL valid selections x hidden x 2 (both ways), HT the
tokens a rank sends and receives x hidden x 2. Local rank 0 of every node prints ep_bench's configuration block and
the summary across all ranks ("=== Summary (Low Latency, across N ranks) ===" ...), which the collection's parser
reads (ep_bench's own output parses the same way): each node's log holds the group's figures, as each node of a
verify group judges its own log. After the timed iterations, the last dispatch and combine are checked: the tokens received
against the selections sent, and the combined tokens against what the routing makes of known expert outputs; a
mismatch prints ``Validation: FAILED`` and exits 1.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import sys
import threading
import time

BF16_ONE = 0x3F80  # 1.0 in bfloat16
EXPERT_OUTPUT = 1.0
TOLERANCE = 2e-2


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="NCCL EP dispatch/combine benchmark (ep_bench's method, no MPI)")
    parser.add_argument("--num-processes", type=int, default=8, help="processes (GPUs) on this node")
    parser.add_argument("--algorithm", choices=("ll", "ht"), default="ll", help="low latency or high throughput")
    parser.add_argument("--tokens", type=int, default=0, help="tokens per rank (default: LL 128, HT 4096)")
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a rank waits for the others at a rendezvous before it gives up")
    args = parser.parse_args(argv)
    if args.tokens <= 0:
        args.tokens = 128 if args.algorithm == "ll" else 4096
    for name in ("num_processes", "hidden", "top_k", "experts", "iters"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1 (got %d)" % (name.replace("_", "-"), getattr(args, name)))
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more (got %d)" % args.warmup)
    return args


def layout_of(args):
    """(nodes, node rank, ranks, master address, master port) from the environment DeepEP's tests read."""
    nodes = int(os.environ.get("WORLD_SIZE", "1"))
    node_rank = int(os.environ.get("RANK", "0"))
    if nodes < 1 or not 0 <= node_rank < nodes:
        raise SystemExit("WORLD_SIZE=%s RANK=%s is not a node layout (expected 0 <= RANK < WORLD_SIZE)"
                         % (os.environ.get("WORLD_SIZE"), os.environ.get("RANK")))
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "0") or 0)
    return nodes, node_rank, nodes * args.num_processes, addr, port


def check_shape(args, n_ranks):
    """ep_bench's own refusals, named: experts split evenly over the ranks, top-k within the experts."""
    if args.experts % n_ranks:
        return "num_experts (%d) must be divisible by nRanks (%d)" % (args.experts, n_ranks)
    if args.top_k > args.experts:
        return "top_k (%d) must be <= num_experts (%d)" % (args.top_k, args.experts)
    return None


# ---------------------------------------------------------------------------------------------------------------
# Routing and bytes (ep_bench's generateRandomTopkIndicesLL / randperm, calculateLowLatencyBytes and the HT counts)
# ---------------------------------------------------------------------------------------------------------------

def routing(np, args, rank):
    """topk_idx [tokens, top_k] int64 of one rank: LL from abs(randn)+1 scores with ten selections masked (-1), HT a
    random permutation of the experts per token; seeded by seed + rank."""
    rng = np.random.default_rng(args.seed + rank)
    if args.algorithm == "ll":
        scores = np.abs(rng.standard_normal((args.tokens, args.experts))) + 1.0
        idx = np.argsort(-scores, axis=1, kind="stable")[:, :args.top_k].astype(np.int64)
        for dummy in range(10):
            idx[rng.integers(0, args.tokens), rng.integers(0, args.top_k)] = -1
        return idx
    return np.stack([rng.permutation(args.experts)[:args.top_k] for dummy in range(args.tokens)]).astype(np.int64)


def ranks_hit(np, idx, local_experts):
    """Per token, the distinct destination ranks of its valid selections (a list of sorted arrays)."""
    return [np.unique(row[row >= 0] // local_experts) for row in idx]


def byte_counts(np, args, idx, n_ranks, rank, local_ranks):
    """What one rank moves: LL selections x hidden x 2 both ways; HT tokens to distinct ranks (send), with the part
    that leaves the node (RDMA)."""
    per_token = args.hidden * 2
    local_experts = args.experts // n_ranks
    if args.algorithm == "ll":
        valid = int((idx >= 0).sum())
        return {"selections": valid, "dispatch": valid * per_token, "combine": valid * per_token}
    node = rank // local_ranks
    sent = rdma = 0
    for hit in ranks_hit(np, idx, local_experts):
        sent += len(hit)
        rdma += int(sum(1 for r in hit if int(r) // local_ranks != node))
    return {"send_tokens": sent, "rdma_send_tokens": rdma, "dispatch": sent * per_token, "combine": sent * per_token,
            "rdma": rdma * per_token}


# ---------------------------------------------------------------------------------------------------------------
# The rendezvous: global rank 0 serves it; every rank (rank 0 too) is a client
# ---------------------------------------------------------------------------------------------------------------

class Rendezvous:
    """Rank 0 listens; each rank connects, says its rank; ``exchange(key, value)`` returns every rank's value for
    the key once all have sent it (the unique id, a barrier, the figures)."""

    def __init__(self, addr, port, n_ranks, rank, timeout):
        self.n_ranks, self.rank, self.timeout = n_ranks, rank, timeout
        self.server = None
        if rank == 0:
            self.server = _Server(addr, port, n_ranks, timeout)
            port = self.server.port
        self.sock = _connect(addr, port, timeout)
        self.reader = self.sock.makefile("r")
        self._send({"rank": rank})

    def _send(self, obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def exchange(self, key, value):
        self._send({"key": key, "value": value})
        line = self.reader.readline()
        if not line:
            raise SystemExit("rank %d: the rendezvous closed while waiting for %r (another rank died?)"
                             % (self.rank, key))
        return json.loads(line)

    def barrier(self, key):
        self.exchange(key, None)

    def close(self):
        """Hang up (the server sees every rank gone and ends) and, on rank 0, wait for the server to end."""
        self.reader.close()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.server:
            self.server.join(self.timeout)


def _connect(addr, port, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=timeout)
            sock.settimeout(timeout)
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("no rendezvous at %s:%d within %.0f s (expected global rank 0 to listen there)"
                                 % (addr, port, timeout))
            time.sleep(0.2)


class _Server(threading.Thread):
    def __init__(self, addr, port, n_ranks, timeout):
        super().__init__(daemon=True)
        self.n_ranks, self.timeout = n_ranks, timeout
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("0.0.0.0" if addr not in ("127.0.0.1", "localhost") else addr, port))
        self.listener.listen(n_ranks)
        self.listener.settimeout(timeout)
        self.port = self.listener.getsockname()[1]
        self.start()

    def run(self):
        peers = {}
        try:
            while len(peers) < self.n_ranks:
                conn, _addr = self.listener.accept()
                conn.settimeout(self.timeout)
                reader = conn.makefile("r")
                peers[json.loads(reader.readline())["rank"]] = (conn, reader)
            while True:
                values = {}
                for rank, (conn, reader) in sorted(peers.items()):
                    line = reader.readline()
                    if not line:
                        return
                    values[rank] = json.loads(line)["value"]
                reply = (json.dumps([values[r] for r in range(self.n_ranks)]) + "\n").encode()
                for conn, _reader in peers.values():
                    conn.sendall(reply)
        except (OSError, ValueError):
            return
        finally:
            for conn, reader in peers.values():
                reader.close()
                conn.close()
            self.listener.close()


# ---------------------------------------------------------------------------------------------------------------
# One rank
# ---------------------------------------------------------------------------------------------------------------

def rank_main(local_rank, args, port):
    nodes, node_rank, n_ranks, addr, _port = layout_of(args)
    rank = node_rank * args.num_processes + local_rank
    rdv = Rendezvous(addr, port, n_ranks, rank, args.timeout)
    try:
        return _run(args, rdv, local_rank, rank, n_ranks, nodes)
    finally:
        rdv.close()


def _run(args, rdv, local_rank, rank, n_ranks, nodes):
    import numpy as np
    from cuda.bindings import runtime as cudart
    from cuda.core import Device
    import nccl.core as nccl_core
    import nccl.ep as nccl_ep

    def check(result):
        err = result[0]
        if err != cudart.cudaError_t.cudaSuccess:
            raise RuntimeError("CUDA error %s" % (err,))
        return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)

    device = Device(local_rank)
    device.set_current()
    stream = device.create_stream()
    sptr = int(stream.handle)
    buffers = []

    def tensor(dtype, itemsize, *shape, host=None):
        nbytes = itemsize
        for size in shape:
            nbytes *= size
        ptr = int(check(cudart.cudaMalloc(nbytes)))
        buffers.append(ptr)
        check(cudart.cudaMemsetAsync(ptr, 0, nbytes, sptr))
        if host is not None:
            host = np.ascontiguousarray(host)
            check(cudart.cudaMemcpyAsync(ptr, host.ctypes.data, host.nbytes,
                                         cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, sptr))
        return ptr, nccl_ep.Tensor(ptr, dtype=int(dtype), shape=shape)

    def read(ptr, dtype, count):
        out = np.empty(count, dtype=dtype)
        check(cudart.cudaMemcpyAsync(out.ctypes.data, ptr, out.nbytes, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                                     sptr))
        check(cudart.cudaStreamSynchronize(sptr))
        return out

    uid = nccl_core.get_unique_id() if rank == 0 else None
    shared = rdv.exchange("uid", uid.as_bytes.hex() if uid is not None else None)[0]
    comm = nccl_core.Communicator.init(n_ranks, rank, nccl_core.UniqueId.from_bytes(bytes.fromhex(shared)))

    is_ll = args.algorithm == "ll"
    local_experts = args.experts // n_ranks
    max_recv = args.tokens * n_ranks
    config = nccl_ep.GroupConfig(
        algorithm=nccl_ep.Algorithm.LOW_LATENCY if is_ll else nccl_ep.Algorithm.HIGH_THROUGHPUT,
        num_experts=args.experts, max_dispatch_tokens_per_rank=args.tokens, max_recv_tokens_per_rank=max_recv,
        max_token_bytes=args.hidden * 2, num_qp_per_rank=local_experts if is_ll else 0)
    group = nccl_ep.Group.create(comm, config)

    idx = routing(np, args, rank)
    counts = byte_counts(np, args, idx, n_ranks, rank, args.num_processes)
    weights = np.full((args.tokens, args.top_k), 1.0 / args.top_k, dtype=np.float32)
    _p, topk = tensor(nccl_core.INT64, 8, args.tokens, args.top_k, host=idx)
    layout = nccl_ep.Layout.EXPERT_MAJOR if is_ll else nccl_ep.Layout.FLAT
    handle = group.create_handle(layout, topk, config=nccl_ep.HandleConfig(), stream=stream)
    tokens_in = np.zeros((args.tokens, args.hidden), dtype=np.uint16)
    tokens_in[:, :] = BF16_ONE
    _p, x = tensor(nccl_core.BFLOAT16, 2, args.tokens, args.hidden, host=tokens_in)
    _p, w = tensor(nccl_core.FLOAT32, 4, args.tokens, args.top_k, host=weights)
    if is_ll:
        recv_shape = (local_experts, args.tokens * n_ranks, args.hidden)
        _p, recv = tensor(nccl_core.BFLOAT16, 2, *recv_shape)
        counter_ptr, counter = tensor(nccl_core.INT32, 4, local_experts)
        dispatch_in = nccl_ep.DispatchInputs(tokens=x)
        dispatch_out = nccl_ep.DispatchOutputs(tokens=recv)
        dispatch_layout = nccl_ep.LayoutInfo(expert_counters=counter)
        eo_host = np.full(recv_shape, BF16_ONE, dtype=np.uint16)
        _p, expert_out = tensor(nccl_core.BFLOAT16, 2, *recv_shape, host=eo_host)
        out_ptr, combined = tensor(nccl_core.BFLOAT16, 2, args.tokens, args.hidden)
        combine_in = nccl_ep.CombineInputs(tokens=expert_out)
        combine_out = nccl_ep.CombineOutputs(tokens=combined, topk_weights=w)
    else:
        recv_ptr, recv = tensor(nccl_core.BFLOAT16, 2, max_recv, args.hidden)
        _p, recv_w = tensor(nccl_core.FLOAT32, 4, max_recv, args.top_k)
        recv_idx_ptr, recv_idx = tensor(nccl_core.INT64, 8, max_recv, args.top_k)
        dispatch_in = nccl_ep.DispatchInputs(tokens=x, topk_weights=w)
        dispatch_out = nccl_ep.DispatchOutputs(tokens=recv, topk_weights=recv_w, topk_idx=recv_idx)
        dispatch_layout = None
        eo_host = np.full((max_recv, args.hidden), BF16_ONE, dtype=np.uint16)
        _p, expert_out = tensor(nccl_core.BFLOAT16, 2, max_recv, args.hidden, host=eo_host)
        out_ptr, combined = tensor(nccl_core.BFLOAT16, 2, args.tokens, args.hidden)
        combine_in = nccl_ep.CombineInputs(tokens=expert_out)
        combine_out = nccl_ep.CombineOutputs(tokens=combined)
    check(cudart.cudaStreamSynchronize(sptr))

    def dispatch():
        handle.dispatch(dispatch_in, dispatch_out, layout_info=dispatch_layout, config=nccl_ep.DispatchConfig(),
                        stream=stream)
        if is_ll:
            handle.complete(stream=stream)

    def combine():
        handle.combine(combine_in, combine_out, config=nccl_ep.CombineConfig(), stream=stream)
        if is_ll:
            handle.complete(stream=stream)

    for i in range(args.warmup):
        dispatch()
        check(cudart.cudaStreamSynchronize(sptr))
        combine()
        check(cudart.cudaStreamSynchronize(sptr))
        rdv.barrier("warmup")
    events = [[check(cudart.cudaEventCreate()) for dummy in range(4)] for dummy in range(args.iters)]
    for ev in events:
        check(cudart.cudaEventRecord(ev[0], sptr))
        dispatch()
        check(cudart.cudaEventRecord(ev[1], sptr))
        check(cudart.cudaStreamSynchronize(sptr))
        check(cudart.cudaEventRecord(ev[2], sptr))
        combine()
        check(cudart.cudaEventRecord(ev[3], sptr))
        check(cudart.cudaStreamSynchronize(sptr))
        rdv.barrier("iter")
    times = {"dispatch": [], "combine": [], "total": []}
    for ev in events:
        times["dispatch"].append(float(check(cudart.cudaEventElapsedTime(ev[0], ev[1]))))
        times["combine"].append(float(check(cudart.cudaEventElapsedTime(ev[2], ev[3]))))
        times["total"].append(float(check(cudart.cudaEventElapsedTime(ev[0], ev[3]))))
        for e in ev:
            check(cudart.cudaEventDestroy(e))
    if len(events) > 1:
        times = dict((k, v[1:]) for k, v in times.items())

    # The last iteration's outputs, checked.
    errors = []
    combined_host = read(out_ptr, np.uint16, args.tokens * args.hidden).reshape(args.tokens, args.hidden)
    combined_f = (combined_host.astype(np.uint32) << 16).view(np.float32)
    if is_ll:
        received = int(read(counter_ptr, np.int32, local_experts).sum())
        expected = [EXPERT_OUTPUT * float(weights[t][idx[t] >= 0].sum()) for t in range(args.tokens)]
    else:
        received = None
        expected = [EXPERT_OUTPUT * len(hit) for hit in ranks_hit(np, idx, local_experts)]
    for t in range(args.tokens):
        got = combined_f[t]
        if not np.allclose(got, expected[t], rtol=TOLERANCE, atol=TOLERANCE):
            errors.append("token %d: combined %.4f..%.4f, expected %.4f"
                          % (t, float(got.min()), float(got.max()), expected[t]))
            break
    versions = {"nccl": str(nccl_core.get_version().libnccl), "nccl_ep": str(nccl_ep.get_lib_version()),
                "device": device.name}
    figures = rdv.exchange("figures", {"rank": rank, "versions": versions, "times": times, "counts": counts, "received": received,
                                       "errors": errors, "targets": _targets(np, idx, local_experts, n_ranks)})
    handle.destroy()
    group.destroy()
    comm.destroy()
    for ptr in buffers:
        cudart.cudaFree(ptr)
    if local_rank == 0:
        return report(args, figures, n_ranks, nodes)
    return 0


def _targets(np, idx, local_experts, n_ranks):
    """How many of this rank's valid selections go to each rank (LL's received tokens, summed, are these)."""
    out = [0] * n_ranks
    for e in idx[idx >= 0]:
        out[int(e) // local_experts] += 1
    return out


# ---------------------------------------------------------------------------------------------------------------
# Each node's report (its local rank 0), in ep_bench's summary format
# ---------------------------------------------------------------------------------------------------------------

def _stats(values):
    return sum(values) / len(values), min(values), max(values)


def report(args, figures, n_ranks, nodes):
    ll = args.algorithm == "ll"
    print("=== NCCL EP Performance Benchmark ===")
    print("Configuration:")
    print("  Algorithm:       %s" % ("LOW_LATENCY" if ll else "HIGH_THROUGHPUT"))
    print("  Layout:          %s" % ("expert-major" if ll else "flat"))
    print("  Ranks:           %d" % n_ranks)
    print("  Nodes:           %d" % nodes)
    print("  Tokens:          %d" % args.tokens)
    print("  Hidden:          %d" % args.hidden)
    print("  Top-k:           %d" % args.top_k)
    print("  Experts:         %d (local: %d)" % (args.experts, args.experts // n_ranks))
    print("  Warmup iters:    %d" % args.warmup)
    print("  Benchmark iters: %d" % args.iters)
    print("  Dispatch dtype:  BF16")
    print("  NCCL:            %s" % figures[0]["versions"]["nccl"])
    print("  NCCL EP:         %s" % figures[0]["versions"]["nccl_ep"])
    print("  GPU:             %s" % figures[0]["versions"]["device"])
    errors = []
    for fig in figures:
        errors.extend("rank %d: %s" % (fig["rank"], e) for e in fig["errors"])
    if ll:
        sent = [sum(f["targets"][r] for f in figures) for r in range(n_ranks)]
        for fig in figures:
            if fig["received"] != sent[fig["rank"]]:
                errors.append("rank %d: received %d tokens, the ranks sent it %d"
                              % (fig["rank"], fig["received"], sent[fig["rank"]]))
    name = "Low Latency" if ll else "High Throughput BF16"
    print("\n=== Summary (%s, across %d ranks) ===" % (name, n_ranks))
    per_rank = {}
    for kind in ("dispatch", "combine", "total"):
        rows = []
        for fig in figures:
            avg_ms = _stats(fig["times"][kind])[0]
            nbytes = fig["counts"]["dispatch"] + fig["counts"]["combine"] if kind == "total" else \
                fig["counts"][kind]
            rows.append((fig["rank"], avg_ms, (nbytes / 1e9) / (avg_ms / 1e3) if avg_ms > 0 else 0.0))
        per_rank[kind] = rows
    if ll:
        print("\n--- Host-observed performance ---")
        for kind, label in (("dispatch", "Dispatch (BF16):  "), ("combine", "Combine (BF16):   "),
                            ("total", "Total (D+C):      ")):
            rows = per_rank[kind]
            avg, low, high = _stats([r[1] * 1e3 for r in rows])
            tps = [r[2] for r in rows]
            lo = min(rows, key=lambda r: r[2])
            hi = max(rows, key=lambda r: r[2])
            print("%savg=%.2f us, min=%.2f us, max=%.2f us" % (label, avg, low, high))
            print("                  throughput: avg=%.2f GB/s, min=%.2f GB/s (rank %d), max=%.2f GB/s (rank %d)"
                  % (sum(tps) / len(tps), lo[2], lo[0], hi[2], hi[0]))
        selections = sum(f["counts"]["selections"] for f in figures) // len(figures)
        print("\nByte counts: dispatch=%.2f MB (BF16), combine=%.2f MB (BF16), selections=%u"
              % (figures[0]["counts"]["dispatch"] / 1e6, figures[0]["counts"]["combine"] / 1e6, selections))
    else:
        print("NOTE: total time = kernel time + memcpyD2D + misc")
        print("--- BW based on total time ---")
        for kind in ("dispatch", "combine"):
            rows = per_rank[kind]
            avg, low, high = _stats([r[1] * 1e3 for r in rows])
            rdma = [f["counts"]["rdma"] / 1e9 / (_stats(f["times"][kind])[0] / 1e3) for f in figures]
            total = [r[2] for r in rows]
            nvl = [t - r for t, r in zip(total, rdma)]
            print("%s total=%.2f us (min=%.2f, max=%.2f)" % ((kind.capitalize() + ":").ljust(12), avg, low, high))
            print("             send: total_bw=%.2f  nvl_bw=%.2f  rdma_bw=%.2f GB/s"
                  % (sum(total) / len(total), sum(nvl) / len(nvl), sum(rdma) / len(rdma)))
        avg, low, high = _stats([r[1] * 1e3 for r in per_rank["total"]])
        print("Total (D+C): avg=%.2f us, min=%.2f us, max=%.2f us" % (avg, low, high))
    if errors:
        print("\nValidation: FAILED (%d)" % len(errors))
        for line in errors[:16]:
            print("  " + line)
        return 1
    print("\nValidation: passed")
    return 0


def _child(local_rank, args, port):
    """One local rank's process: its exit status is the rank's result (a rank that fails says why first)."""
    try:
        code = rank_main(local_rank, args, port)
    except SystemExit as exc:
        print("rank %d: %s" % (local_rank, exc), flush=True)
        code = 1
    except Exception as exc:  # pylint: disable=broad-except
        print("rank %d: %s: %s" % (local_rank, type(exc).__name__, exc), flush=True)
        code = 1
    sys.stdout.flush()
    os._exit(code)  # pylint: disable=protected-access


def main(argv=None):
    args = parse_args(argv)
    nodes, node_rank, n_ranks, addr, port = layout_of(args)
    problem = check_shape(args, n_ranks)
    if problem:
        print("Error: %s" % problem)
        return 2
    if nodes == 1 and not port:
        with socket.socket() as probe:
            probe.bind((addr, 0))
            port = probe.getsockname()[1]
    elif not port:
        print("Error: MASTER_PORT is not set (expected the rendezvous port on MASTER_ADDR across nodes)")
        return 2
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_child, args=(i, args, port)) for i in range(args.num_processes)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    codes = [1 if proc.exitcode is None or proc.exitcode < 0 else proc.exitcode for proc in procs]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
