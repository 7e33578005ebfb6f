"""Benchmark of the replay decomposition: flows/s, and two ratios to baselines measured in the same run.

Workload: one synthetic job of `--ranks` ranks (8 GPUs per host) with `--collectives` collectives in
its whole-world group, a DLRM/FSDP-like mix: ring AllReduce, ring AllGather, ring ReduceScatter,
direct AllToAll (sizes 64 KiB .. 64 MiB), on 16 NCCL channels with 2 QPs per connection, decomposed by
tracekit.replay.decompose + the flows table (channels, QPs, ranks, hosts, racks, NICs, rails,
depends_on) of tracekit.replay.assemble.flow_frame.

Baselines:
* write: the time to write a table of the same number of rows and the same columns to Parquet
  (polars, zstd) — what merely storing the flows costs. ratio = decomposition / write.
* loop: a plain Python loop that emits the same ring AllReduce flows one by one (src, dst, bytes,
  step, dependency), timed on the first collectives and scaled to the same flow count.
  speedup = loop / decomposition.

    python bench/bench_replay.py                      # 128 ranks, 400 collectives
    python bench/bench_replay.py --ranks 256 --collectives 200
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.replay.assemble import flow_frame
from tracekit.replay.collectives import JobCollectives
from tracekit.replay.decompose import decompose
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.placement import Placement

MIX = ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL")


def synthetic_job(ranks: int, count: int, seed: int = 0) -> JobCollectives:
    rng = np.random.default_rng(seed)
    sizes = (2 ** rng.integers(16, 27, size=count)).astype(np.int64)
    colls = pl.DataFrame(
        {
            "collective_id": np.arange(count, dtype=np.int64),
            "group": np.zeros(count, dtype=np.int32),
            "key": [f"o{i}" for i in range(count)],
            "comm_type": [MIX[i % len(MIX)] for i in range(count)],
            "op_name": ["bench"] * count,
            "pg_name": ["0"] * count,
            "n": np.full(count, ranks, dtype=np.int32),
            "participants": np.full(count, ranks, dtype=np.int32),
            "size": sizes,
            "start_us": np.arange(count, dtype=np.float64) * 1000.0,
            "duration_us": np.full(count, 100.0),
            "is_uneven": [False] * count,
            "src": pl.Series([None] * count, dtype=pl.Int32),
            "dst": pl.Series([None] * count, dtype=pl.Int32),
            "order": np.arange(count, dtype=np.int64),
        }
    )
    parts = pl.DataFrame(
        schema={
            "collective_id": pl.Int64,
            "rank": pl.Int32,
            "trace_id": pl.String,
            "op_id": pl.Int64,
            "in_bytes": pl.Int64,
            "in_splits": pl.List(pl.Int64),
            "out_splits": pl.List(pl.Int64),
            "dtype": pl.String,
            "in_elems": pl.Int64,
            "start_us": pl.Float64,
        }
    )
    return JobCollectives("bench", ranks, [tuple(range(ranks))], [None], colls, parts)


def decomposition(job: JobCollectives, channels: int = 16, qps: int = 2) -> tuple[float, pl.DataFrame]:
    """Decompose every collective (ring for AllReduce; AllToAll keeps direct) on `channels` NCCL channels
    with `qps` QPs per connection, and build the flows table."""
    started = time.perf_counter()
    options = NcclOptions(channels=channels, qps=qps)
    parts = decompose(job, Placement(), options, algorithm="ring", max_flows=10**9)
    flows = flow_frame(parts, Placement(), job.world_size)
    return time.perf_counter() - started, flows


def write_baseline(flows: pl.DataFrame) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        flows.write_parquet(Path(tmp) / "flows.parquet")
        return time.perf_counter() - started


def loop_baseline(ranks: int, sizes: list[int], flows_needed: int) -> float:
    """Python loop emitting ring AllReduce flows one by one; scaled to flows_needed."""
    started = time.perf_counter()
    emitted = 0
    rows = []
    for size in sizes:
        q, r = divmod(size, ranks)
        for k in range(2 * (ranks - 1)):
            for i in range(ranks):
                chunk = (i - k) % ranks
                dep = (k - 1) * ranks + (i - 1) % ranks if k else -1
                rows.append((k, i, (i + 1) % ranks, q + (chunk < r), dep, i // 8, ((i + 1) % ranks) // 8))
                emitted += 1
        if emitted >= 200_000:
            break
    elapsed = time.perf_counter() - started
    return elapsed * flows_needed / emitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=128)
    parser.add_argument("--collectives", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    job = synthetic_job(args.ranks, args.collectives)
    runs = [decomposition(job) for _ in range(args.repeat)]
    seconds = min(t for t, _ in runs)
    flows = runs[0][1]
    write = min(write_baseline(flows) for _ in range(args.repeat))
    loop = loop_baseline(args.ranks, job.collectives["size"].to_list(), flows.height)
    rate = flows.height / seconds
    print(f"{args.collectives} collectives over {args.ranks} ranks -> {flows.height:,} flows")
    print(f"decomposition: {seconds:.3f} s = {rate:,.0f} flows/s (best of {args.repeat})")
    print(f"baseline write Parquet: {write:.3f} s; ratio decomposition/write = {seconds / write:.2f}")
    print(f"baseline Python loop (scaled): {loop:.3f} s; speedup loop/decomposition = {loop / seconds:.1f}x")


if __name__ == "__main__":
    main()
