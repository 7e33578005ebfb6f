"""What a profile says a job's collectives are: written from the iteration templates documented in
tracekit/generate/workloads.py, independently of the generator's code, for the round-trip tests."""

from __future__ import annotations

import math
from typing import Any


def ddp_bucket_count(total: int, first: int, cap: int) -> int:
    return 0 if total <= 0 else 1 + math.ceil(max(0, total - first) / cap)


def job_calls(
    profile: dict[str, Any], cls: str, model: str, world: int, p: dict[str, Any]
) -> dict[str, tuple[int, int]]:
    """op name -> (calls summed over all ranks, group size) for one job.

    `p` holds the job's structure: dense_bytes (ranking), shard (fsdp), tp/pp/dp (llm-3d).
    """
    it = profile["fleet"]["iterations"]
    c = profile["classes"][cls]
    m = c["models"][model]
    out: dict[str, tuple[int, int]] = {}

    def add(op: str, per_rank_calls: int, group: int, ranks: int = world) -> None:
        if per_rank_calls and ranks:
            calls, _ = out.get(op, (0, group))
            out[op] = (calls + per_rank_calls * ranks * it, group)

    def a2a(group: int) -> None:
        calls = int(m.get("a2a_calls", 1))
        if m["a2a_bytes"]["median"] > 0 and calls:
            add("sparse_input_alltoallv", 1, group)
            add("embedding_fwd_alltoallv", calls, group)
            add("embedding_bwd_alltoallv", calls, group)

    if cls == "ranking-ddp":
        add(
            "ddp_bucket_allreduce",
            ddp_bucket_count(p["dense_bytes"], c["first_bucket_bytes"], c["bucket_cap_bytes"]),
            world,
        )
        add("loss_allreduce", c["tiny_allreduces"], world)
        a2a(min(world, c["a2a_group_max"]))
    elif cls == "fsdp":
        shard = p["shard"]
        units = int(m["units"])
        add("fsdp_fwd_allgather", units, shard)
        add("fsdp_bwd_allgather", units, shard)
        add("fsdp_bwd_reducescatter", units, shard)
        if world // shard > 1:
            add("hsdp_replicate_allreduce", units, world // shard)
        add("loss_allreduce", c["tiny_allreduces"], world)
        a2a(world)
    else:
        tp, pp, dp = p["tp"], p["pp"], p["dp"]
        mb, layers = c["micro_batches"], c["layers_per_stage"]
        if tp > 1:
            add("tp_fwd_allreduce", 2 * mb * layers, tp)
            add("tp_bwd_allreduce", 2 * mb * layers, tp)
        boundary_ranks = (pp - 1) * dp * tp
        for op in ("pp_fwd_send", "pp_fwd_recv", "pp_bwd_send", "pp_bwd_recv"):
            add(op, mb, pp, boundary_ranks)
        if dp > 1:
            add("dp_grad_reducescatter", 1, dp)
            add("dp_param_allgather", 1, dp)
        add("loss_allreduce", 1, dp if dp > 1 else (tp if tp > 1 else world))
    return out


COMM_TYPE = {
    "ddp_bucket_allreduce": "ALL_REDUCE",
    "loss_allreduce": "ALL_REDUCE",
    "hsdp_replicate_allreduce": "ALL_REDUCE",
    "tp_fwd_allreduce": "ALL_REDUCE",
    "tp_bwd_allreduce": "ALL_REDUCE",
    "sparse_input_alltoallv": "ALL_TO_ALL",
    "embedding_fwd_alltoallv": "ALL_TO_ALL",
    "embedding_bwd_alltoallv": "ALL_TO_ALL",
    "fsdp_fwd_allgather": "ALL_GATHER",
    "fsdp_bwd_allgather": "ALL_GATHER",
    "dp_param_allgather": "ALL_GATHER",
    "fsdp_bwd_reducescatter": "REDUCE_SCATTER",
    "dp_grad_reducescatter": "REDUCE_SCATTER",
    "pp_fwd_send": "SEND",
    "pp_bwd_send": "SEND",
    "pp_fwd_recv": "RECV",
    "pp_bwd_recv": "RECV",
}


def mean_log2_group(calls: dict[str, tuple[int, int]]) -> float:
    total = sum(n for n, _ in calls.values())
    return sum(n * math.log2(g) for n, g in calls.values()) / total
