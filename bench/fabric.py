"""The fabric stage: the fluid solver on a ring all-reduce and an all-to-all, routed on the ideal
fabric and on Meta's AI Zone with ECMP, against sorting as many floats in the same run.

Workloads (128 ranks on 16 hosts of 8 GPUs, one 400G NIC per GPU, NVLink 450 GB/s):
* ring all-reduce of 1 GiB, NCCL-like: 16 channels x 2 QPs, 2 x 127 steps; channel c enters host
  h at local GPU (c + h) % 8 and leaves from the next one down, so every hop between hosts stays
  on one rail; the flow of step k at ring position i waits for step k - 1 at position i - 1
  (both QPs: the chunk it forwards): 1,040,384 flows, 130,048 of them on the network.
* all-to-all of 64 MiB per rank: 128 x 127 flows, all released at once.

Each solve is timed alone (wall and CPU); the baseline is np.sort of as many float64 values,
timed in the same process just before. `python bench/fabric.py` runs the full stage alone.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import numpy as np

from bench.suite import Context, Measure, Row, ratio_row, stage
from tracekit.fabric import Endpoints, FlowEnds, preset, route, simulate

GPUS_PER_HOST = 8
MESSAGE_LATENCY_S = 2e-6  # per-message software latency added to every path [est]


@dataclass
class Workload:
    name: str
    flows: FlowEnds
    bytes: np.ndarray
    dep_ptr: np.ndarray | None
    dep_idx: np.ndarray | None


def endpoints(ranks: int) -> Endpoints:
    hosts = ranks // GPUS_PER_HOST
    return Endpoints(
        hosts=hosts, gpus_per_host=GPUS_PER_HOST, nics_per_host=GPUS_PER_HOST, nic_Bps=50e9, nvlink_Bps=450e9
    )


def ring_all_reduce(ranks: int, channels: int, qps: int, size: float) -> Workload:
    """2(n-1) dependent steps of the ring algorithm, per channel and QP (see the module docstring)."""
    hosts, g = ranks // GPUS_PER_HOST, GPUS_PER_HOST
    local = (np.arange(channels)[:, None, None] + np.arange(hosts)[None, :, None] - np.arange(g)[None, None, :]) % g
    order = (np.arange(hosts)[None, :, None] * g + local).reshape(channels, ranks)  # rank at ring position
    steps = 2 * (ranks - 1)
    k, i, c, q = (
        a.ravel()
        for a in np.meshgrid(np.arange(steps), np.arange(ranks), np.arange(channels), np.arange(qps), indexing="ij")
    )
    src, dst = order[c, i], order[c, (i + 1) % ranks]
    inside = src // g == dst // g
    flows = FlowEnds(
        np.where(inside, -1, src), np.where(inside, -1, dst), src, dst, c * qps + q, np.where(inside, 0, 1)
    )
    waits = k > 0
    dep_ptr = np.concatenate(([0], np.cumsum(np.where(waits, qps, 0))))
    prev = ((k[waits] - 1) * ranks + (i[waits] - 1) % ranks) * channels + c[waits]
    dep_idx = (prev[:, None] * qps + np.arange(qps)[None, :]).ravel()
    return Workload(
        f"ring {ranks}r {channels}x{qps}",
        flows,
        np.full(len(k), size / ranks / channels / qps),
        dep_ptr,
        dep_idx,
    )


def all_to_all(ranks: int, size: float) -> Workload:
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(ranks), np.arange(ranks), indexing="ij"))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    inside = src // GPUS_PER_HOST == dst // GPUS_PER_HOST
    flows = FlowEnds(
        np.where(inside, -1, src), np.where(inside, -1, dst), src, dst, np.zeros(len(src), int), np.where(inside, 0, 1)
    )
    return Workload(f"a2a {ranks}x{ranks - 1}", flows, np.full(len(src), size / ranks), None, None)


def measure(started: tuple[float, float]) -> Measure:
    """Wall and CPU seconds since `started` (perf_counter, process_time), and the peak memory."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Measure(time.perf_counter() - started[0], time.process_time() - started[1], peak)


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def sort_baseline(count: int) -> Measure:
    values = np.random.default_rng(0).random(count)
    started = clock()
    np.sort(values)
    return measure(started)


def solve_rows(work: Workload, fabric: str, ranks: int) -> list[Row]:
    """Route the workload on the preset `fabric`, then solve it: a row for each, against np.sort."""
    net = preset(fabric).build(endpoints(ranks))
    started = clock()
    inc = route(net, work.flows)
    routed = measure(started)
    base = sort_baseline(work.flows.size)
    latency = inc.path_latency_s + MESSAGE_LATENCY_S
    started = clock()
    r = simulate(inc, net.capacity_Bps, work.bytes, np.zeros(work.flows.size), latency, work.dep_ptr, work.dep_idx)
    solved = measure(started)
    shape = f"{r.events:,} steps, makespan {r.makespan_s * 1e3:.3f} ms"
    baseline = "np.sort, as many floats"
    n = work.flows.size
    return [
        ratio_row("fabric", f"route {work.name} {fabric}", routed, base, baseline, amount=n, unit="flows"),
        ratio_row(
            "fabric", f"solve {work.name} {fabric}", solved, base, baseline, amount=n, unit="flows", target=shape
        ),
    ]


@stage(
    "fabric", "the fluid solver: a 128-rank ring all-reduce (16 ch x 2 QPs) and all-to-all, ideal and Meta AI Zone ECMP"
)
def fabric_stage(ctx: Context) -> list[Row]:
    ranks = 16 if ctx.quick else 128
    size = 2**30
    rows: list[Row] = []
    for work in (ring_all_reduce(ranks, 16, 2, size), all_to_all(ranks, 2**26)):
        for fabric in ("ideal", "meta-ai-zone"):
            rows.extend(solve_rows(work, fabric, ranks))
    return rows


if __name__ == "__main__":
    import tempfile
    from pathlib import Path

    from bench.suite import print_header, print_rows

    print_header()
    print_rows(fabric_stage(Context(Path(tempfile.mkdtemp()), quick=False, fleet_jobs=0)))
