"""The collectives of one iteration of each job class, rank by rank, for a RankTrace to record.

One iteration of each class (repeated `fleet.iterations` times), as node records:

* ranking-ddp: sparse-input all-to-all, embedding lookup, forward all-to-allv of pooled embeddings,
  dense forward, dense backward in chunks each followed by its DDP gradient-bucket AllReduce
  (first bucket 1 MiB, then 25 MiB buckets, then the remainder), backward all-to-allv, loss/metric
  AllReduces, optimizer step. All-to-allv sizes differ per rank (lognormal skew): uneven splits.
* fsdp: per unit a forward AllGather, then in reverse a backward AllGather and a ReduceScatter of
  the unit's gradient (plus an AllReduce across replicas when the job is larger than the shard
  group, HSDP); ranking-FSDP models add the embedding all-to-alls.
* llm-3d: per micro-batch and layer 2 tensor-parallel AllReduces forward and 2 backward; pipeline
  send/recv of activations (forward) and gradients (backward) between stages; data-parallel
  ReduceScatter of gradients and AllGather of parameters; a loss AllReduce.

Sizes follow Chakra's comm_size convention (bytes this rank passes in: the local shard for
AllGather, the full input for ReduceScatter), in whole elements of the role's dtype (the profile
names it: fp32 DDP buckets, int64 ids, bf16 shards and activations), which every comm node carries
as its `dtype` attribute. `BUILDERS` holds one builder per class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tracekit.generate.alltoallv import Alltoalls, SplitMatrix
from tracekit.generate.jobs import JobSpec
from tracekit.generate.rank_trace import Groups, RankTrace
from tracekit.parsers.common.names import DTYPE_BYTES

NewTrace = Callable[[int], RankTrace]


def ddp_buckets(total: int, first: int, cap: int) -> list[int]:
    """DDP gradient buckets of `total` bytes: a small first bucket, full buckets, the remainder."""
    if total <= 0:
        return []
    out = [min(first, total)]
    left = total - out[0]
    while left > 0:
        out.append(min(cap, left))
        left -= out[-1]
    return out


def _a2a_steps(
    t: RankTrace, plans: Alltoalls, member: int, group: tuple[int, int], pg: str, iteration: int, phase: str
) -> None:
    """Embedding all-to-allv calls, one per embedding sharding group ("a2a_calls"), each with its
    per-peer splits; `group` is (index, size) of the rank's all-to-all group, `member` its place in it."""
    index, size = group
    calls = plans.p.get("a2a_calls", 1)
    if phase == "fwd":
        _alltoallv(t, "sparse_input_alltoallv", plans.matrix(iteration, "input", index, size), member, pg, plans, True)
        t.comp("embedding_lookup", 2000)
    for k in range(calls):
        matrix = plans.matrix(iteration, f"embedding{k}", index, size, backward=phase == "bwd")
        _alltoallv(t, f"embedding_{phase}_alltoallv", matrix, member, pg, plans, False)
    if phase == "bwd":
        t.comp("embedding_backward", 3000)


def _alltoallv(t: RankTrace, name: str, matrix: SplitMatrix, member: int, pg: str, plans: Alltoalls, ids: bool) -> None:
    dtype = plans.dtype(ids)
    splits = matrix.splits(member)
    size = splits.sent * DTYPE_BYTES[dtype]
    t.coll(
        name,
        "ALL_TO_ALL",
        size,
        pg,
        splits.members,
        dtype,
        splits=splits,
        bus_bytes=matrix.bus_bytes(DTYPE_BYTES[dtype]),
    )


def _ranking(spec: JobSpec, profile: dict[str, Any], new: NewTrace, bpu: float) -> Iterator[tuple[int, Any]]:
    cls = profile["classes"][spec.cls]
    p = spec.params
    world, group = spec.world_size, p["a2a_group"]
    groups = Groups(world)
    a2a_names = [groups.add("embedding_a2a", list(range(b, b + group))) for b in range(0, world, group)]
    buckets = ddp_buckets(p["dense_bytes"], cls["first_bucket_bytes"], cls["bucket_cap_bytes"])
    iterations = profile["fleet"]["iterations"]
    plans = Alltoalls(spec, p)
    dense, tiny = p["dense_dtype"], p["tiny_dtype"]
    for rank in range(world):
        t = new(rank)
        a2a = a2a_names[rank // group]
        place = (rank // group, group)
        t.pg_init(groups.entries([a2a]))
        for it in range(iterations):
            t.comp("data_loader", 1000)
            _a2a_steps(t, plans, rank % group, place, a2a, it, "fwd")
            t.comp("dense_forward", 20000)
            chunk = t.last
            bucket_ids = []
            for b, size in enumerate(buckets):
                chunk = t.comp(f"dense_backward_{b}", 2000, deps=(chunk,) if chunk is not None else ())
                bucket_ids.append(
                    t.coll("ddp_bucket_allreduce", "ALL_REDUCE", size, "0", world, dense, data=(chunk,), start=t.clock)
                )
            t.clock += sum(t.lasts("ALL_REDUCE", s, world) for s in buckets[-1:])
            t.last = chunk
            _a2a_steps(t, plans, rank % group, place, a2a, it, "bwd")
            for _ in range(cls["tiny_allreduces"]):
                t.coll("loss_allreduce", "ALL_REDUCE", cls["tiny_bytes"], "0", world, tiny)
            before = () if t.last is None else (t.last,)
            t.comp("optimizer_step", 5000, deps=(*before, *bucket_ids))
        yield rank, t


def _fsdp(spec: JobSpec, profile: dict[str, Any], new: NewTrace, bpu: float) -> Iterator[tuple[int, Any]]:
    cls = profile["classes"][spec.cls]
    p = spec.params
    world, shard, replicas = spec.world_size, p["shard"], p["replicate"]
    groups = Groups(world)
    shard_names = [groups.add("fsdp_shard", list(range(b, b + shard))) for b in range(0, world, shard)]
    rep_names = [groups.add("fsdp_replicate", list(range(i, world, shard))) for i in range(shard)]
    dtype, tiny = p["dtype"], p["tiny_dtype"]
    itemsize = DTYPE_BYTES[dtype]
    unit = p["unit_bytes"]
    shard_bytes = -(-unit // itemsize // shard) * itemsize
    iterations = profile["fleet"]["iterations"]
    plans = Alltoalls(spec, p)
    for rank in range(world):
        t = new(rank)
        sg = shard_names[rank // shard]
        rg = rep_names[rank % shard]
        t.pg_init(groups.entries([sg] + ([rg] if replicas > 1 else [])))
        for it in range(iterations):
            t.comp("data_loader", 1000)
            if p["a2a_bytes"]:
                _a2a_steps(t, plans, rank, (0, world), "0", it, "fwd")
            for u in range(p["units"]):
                t.coll("fsdp_fwd_allgather", "ALL_GATHER", shard_bytes, sg, shard, dtype)
                t.comp(f"forward_unit_{u}", 3000)
            for u in reversed(range(p["units"])):
                t.coll("fsdp_bwd_allgather", "ALL_GATHER", shard_bytes, sg, shard, dtype)
                t.comp(f"backward_unit_{u}", 6000)
                t.coll("fsdp_bwd_reducescatter", "REDUCE_SCATTER", unit, sg, shard, dtype)
                if replicas > 1:
                    t.coll("hsdp_replicate_allreduce", "ALL_REDUCE", shard_bytes, rg, replicas, dtype)
            if p["a2a_bytes"]:
                _a2a_steps(t, plans, rank, (0, world), "0", it, "bwd")
            for _ in range(cls["tiny_allreduces"]):
                t.coll("loss_allreduce", "ALL_REDUCE", cls["tiny_bytes"], "0", world, tiny)
            t.comp("optimizer_step", 5000)
        yield rank, t


def llm_layout(world: int, tp: int, pp: int, dp: int) -> tuple[Groups, list[tuple[str, str, str]]]:
    """Groups and, per rank, its (tp, pp, dp) group names. rank = stage*(dp*tp) + d*tp + t."""
    groups = Groups(world)
    tp_names = [groups.add("tp", list(range(b, b + tp))) for b in range(0, world, tp)]
    pp_names = {}
    for d in range(dp):
        for k in range(tp):
            pp_names[(d, k)] = groups.add("pp", [s * dp * tp + d * tp + k for s in range(pp)])
    dp_names = {}
    for s in range(pp):
        for k in range(tp):
            dp_names[(s, k)] = groups.add("dp", [s * dp * tp + d * tp + k for d in range(dp)])
    per_rank = []
    for rank in range(world):
        s, rem = divmod(rank, dp * tp)
        d, k = divmod(rem, tp)
        per_rank.append((tp_names[rank // tp], pp_names[(d, k)], dp_names[(s, k)]))
    return groups, per_rank


def _llm(spec: JobSpec, profile: dict[str, Any], new: NewTrace, bpu: float) -> Iterator[tuple[int, Any]]:
    cls = profile["classes"][spec.cls]
    p = spec.params
    world, tp, pp, dp = spec.world_size, p["tp"], p["pp"], p["dp"]
    groups, per_rank = llm_layout(world, tp, pp, dp)
    stride = dp * tp
    dtype, tiny = p["dtype"], p["tiny_dtype"]
    itemsize = DTYPE_BYTES[dtype]
    stage_tp_bytes = max(1, p["param_bytes"] // itemsize // (pp * tp)) * itemsize
    gathered_bytes = -(-stage_tp_bytes // itemsize // dp) * itemsize
    iterations = profile["fleet"]["iterations"]
    for rank in range(world):
        t = new(rank)
        tpg, ppg, dpg = per_rank[rank]
        stage = rank // stride
        t.pg_init(groups.entries([tpg, ppg, dpg]))
        for _ in range(iterations):
            for m in range(p["micro_batches"]):
                if stage > 0:
                    t.p2p(False, "pp_fwd_recv", p["pp_bytes"], rank, rank - stride, m, ppg, dtype)
                for layer in range(p["layers"]):
                    t.comp(f"forward_layer_{layer}", 1500)
                    if tp > 1:
                        t.coll("tp_fwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg, tp, dtype)
                        t.coll("tp_fwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg, tp, dtype)
                if stage < pp - 1:
                    t.p2p(True, "pp_fwd_send", p["pp_bytes"], rank, rank + stride, m, ppg, dtype)
            for m in range(p["micro_batches"]):
                if stage < pp - 1:
                    t.p2p(False, "pp_bwd_recv", p["pp_bytes"], rank, rank + stride, m, ppg, dtype)
                for layer in reversed(range(p["layers"])):
                    t.comp(f"backward_layer_{layer}", 3000)
                    if tp > 1:
                        t.coll("tp_bwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg, tp, dtype)
                        t.coll("tp_bwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg, tp, dtype)
                if stage > 0:
                    t.p2p(True, "pp_bwd_send", p["pp_bytes"], rank, rank - stride, m, ppg, dtype)
            if dp > 1:
                t.coll("dp_grad_reducescatter", "REDUCE_SCATTER", stage_tp_bytes, dpg, dp, dtype)
                t.coll("dp_param_allgather", "ALL_GATHER", gathered_bytes, dpg, dp, dtype)
            loss_group, loss_size = (dpg, dp) if dp > 1 else ((tpg, tp) if tp > 1 else ("0", world))
            t.coll("loss_allreduce", "ALL_REDUCE", cls["tiny_bytes"], loss_group, loss_size, tiny)
            t.comp("optimizer_step", 5000)
        yield rank, t


BUILDERS = {"ranking-ddp": _ranking, "fsdp": _fsdp, "llm-3d": _llm}
