"""The per-rank Chakra .et content of one generated job.

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

Every collective names its process group (pg_name) and each rank's `process_group:init` METADATA
node lists the groups it belongs to with their ranks, so ingest records explicit group sizes.
Sizes follow Chakra's comm_size convention (bytes this rank passes in: the local shard for
AllGather, the full input for ReduceScatter). Identical records are serialized once per job: most
ranks of a job share most of their bytes.

The class builders call a RankTrace per rank; rank_records serializes it as .et records, and
rank_documents, with EtJsonRankTrace, as PyTorch Execution Trace JSON of the same nodes
(`generate --trace-format pytorch-et`), which ingest reads into the same collectives rows.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

from tracekit.generate.jobs import JobSpec
from tracekit.parsers import et_def_pb2
from tracekit.parsers.common.names import C10D_NAMES, PG_INIT_NAME
from tracekit.writers.chakra_et import comm_node, comp_node, recv_node, send_node

ET_VERSION = "0.0.4"
CLOCK_ORIGIN_US = 1_000_000
BACKEND = "cuda:nccl"


class Groups:
    """The job's process groups: name -> (desc, ranks or None for the whole world)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.groups: dict[str, tuple[str, list[int] | None]] = {"0": ("default_pg", None)}

    def add(self, desc: str, ranks: list[int]) -> str:
        """The group's name: "0" for the whole world, "" for a single rank (no group made)."""
        if len(ranks) == self.world:
            return "0"
        if len(ranks) < 2:
            return ""
        name = str(len(self.groups))
        self.groups[name] = (desc, ranks)
        return name

    def entries(self, names: list[str]) -> list[dict[str, Any]]:
        out = []
        for name in dict.fromkeys(["0", *(n for n in names if n)]):
            desc, ranks = self.groups[name]
            out.append(
                {
                    "pg_name": name,
                    "pg_desc": desc,
                    "backend_config": BACKEND,
                    "ranks": [] if ranks is None else ranks,
                    "group_size": self.world if ranks is None else len(ranks),
                }
            )
        return out


class RankTrace:
    """Builds one rank's records; `cache` (shared by the job's ranks) holds serialized records."""

    def __init__(self, cache: dict[tuple[Any, ...], bytes], bytes_per_us: float) -> None:
        self.cache = cache
        self.records: list[bytes] = []
        self.next_id = 0
        self.clock = CLOCK_ORIGIN_US
        self.last: int | None = None
        self.bytes_per_us = bytes_per_us

    def _emit(self, key: tuple[Any, ...], build: Any) -> int:
        node_id = self.next_id
        self.next_id += 1
        full = (node_id, *key)
        payload = self.cache.get(full)
        if payload is None:
            payload = build(node_id).SerializeToString()
            self.cache[full] = payload
        self.records.append(payload)
        self.last = node_id
        return node_id

    def _deps(self, deps: tuple[int, ...] | None) -> tuple[int, ...]:
        if deps is not None:
            return deps
        return () if self.last is None else (self.last,)

    def pg_init(self, entries: list[dict[str, Any]]) -> None:
        text = json.dumps(entries, separators=(",", ":"))
        values = str([text])

        def build(node_id: int) -> Any:
            return et_def_pb2.Node(
                id=node_id,
                name=PG_INIT_NAME,
                type=et_def_pb2.METADATA_NODE,
                inputs=et_def_pb2.IOInfo(values=values),
            )

        self._emit(("pg", values), build)
        self.last = None

    def comp(self, name: str, duration_us: int, deps: tuple[int, ...] | None = None, advance: bool = True) -> int:
        ctrl = self._deps(deps)
        start = self.clock
        node = self._emit(
            ("comp", name, duration_us, ctrl, start),
            lambda i: comp_node(i, name, duration_us, ctrl_deps=ctrl, start_us=start),
        )
        if advance:
            self.clock += duration_us
        return node

    def coll(
        self,
        name: str,
        comm_type: str,
        size: int,
        pg: str,
        logical: int | None = None,
        data: tuple[int, ...] | None = None,
        start: int | None = None,
    ) -> int:
        """A collective; its duration (and so the clock) follows `logical` bytes (same on every rank)."""
        duration = max(1, int((logical if logical is not None else size) / self.bytes_per_us))
        begin = self.clock if start is None else start
        ctrl = () if data is not None else self._deps(None)
        node = self._emit(
            ("coll", name, comm_type, size, pg, ctrl, data, begin, duration),
            lambda i: comm_node(
                i,
                name,
                comm_type,
                size,
                pg,
                ctrl_deps=ctrl,
                data_deps=data or (),
                start_us=begin,
                duration_us=duration,
            ),
        )
        if start is None:
            self.clock += duration
        return node

    def p2p(self, send: bool, name: str, size: int, rank: int, peer: int, tag: int, pg: str) -> int:
        duration = max(1, int(size / self.bytes_per_us))
        ctrl = self._deps(None)
        begin = self.clock
        builder = send_node if send else recv_node
        node = self._emit(
            ("p2p", send, name, size, rank, peer, tag, pg, ctrl, begin),
            lambda i: builder(
                i,
                name,
                size,
                peer,
                rank=rank,
                tag=tag,
                pg_name=pg,
                ctrl_deps=ctrl,
                start_us=begin,
                duration_us=duration,
            ),
        )
        self.clock += duration
        return node


def _even_splits(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (k < extra) for k in range(parts)]


class EtJsonRankTrace(RankTrace):
    """One rank's nodes as PyTorch ET JSON nodes (tracekit.writers.pytorch_et) instead of .et records.

    Same calls, ids, clock and `last` as RankTrace, so a builder makes the same nodes in both formats:
    node id = .et id + 3 (ids 1 and 2 are the process and thread nodes), rf_id = .et id + 1. Compute
    nodes are ops named as in the .et; collectives are record_param_comms nodes whose in_msg_nelems
    times the dtype size is the .et comm_size (BFloat16, or Byte for an odd size). The ET tree is
    flat (every op under the thread node): plain ET has no times and no dependency edges.
    """

    def __init__(self, bytes_per_us: float, rank: int, tensor_ids: list[int]) -> None:
        super().__init__({}, bytes_per_us)
        from tracekit.writers import pytorch_et

        self._w = pytorch_et
        self.rank = rank
        self.device = f"cuda:{rank % 8}"
        self.nodes: list[dict[str, Any]] = [pytorch_et.thread_node()]
        # pg_name -> (desc, global ranks, size, this rank's group-local rank, rank start, rank stride)
        self.pgs: dict[str, tuple[str, list[int], int, int, int, int]] = {}
        self.seqs: dict[tuple[str, bool], int] = {}
        self.tensor_ids = tensor_ids

    def _next(self) -> int:
        node_id = self.next_id
        self.next_id += 1
        self.last = node_id
        return node_id

    def _tensor_id(self) -> int:
        self.tensor_ids[0] += 1
        return self.tensor_ids[0]

    def pg_init(self, entries: list[dict[str, Any]]) -> None:
        world = next(e["group_size"] for e in entries if e["pg_name"] == "0")
        groups = [{**e, "group_count": len(entries)} for e in entries]
        for e in entries:
            ranks = e["ranks"] or list(range(world))
            local = ranks.index(self.rank) if self.rank in ranks else -1
            start, stride = self._w.rank_range(e["ranks"])
            self.pgs[e["pg_name"]] = (e["pg_desc"], e["ranks"], e["group_size"], local, start, stride)
        node_id = self._next()
        self.nodes.append(self._w.pg_init_node(node_id + 3, groups, rf_id=node_id + 1))
        self.last = None

    def comp(self, name: str, duration_us: int, deps: tuple[int, ...] | None = None, advance: bool = True) -> int:
        node_id = self._next()
        self.nodes.append(self._w.op_node(node_id + 3, name, node_id + 1))
        if advance:
            self.clock += duration_us
        return node_id

    def _group(self, pg: str) -> tuple[str, list[int], int, int, int, int]:
        found = self.pgs.get(pg)
        return found if found is not None else ("", [self.rank], 1, 0, self.rank, 1)  # "": a one-rank group

    def _comm(
        self,
        collective: str,
        pg: str,
        size: int,
        in_nelems: int,
        out_nelems: int,
        rank_arg: int,
        in_splits: list[int] | None = None,
        out_splits: list[int] | None = None,
        p2p: bool = False,
    ) -> int:
        desc, _, group_size, _, start, stride = self._group(pg)
        seq = self.seqs.get((pg, p2p), 0) + 1
        self.seqs[(pg, p2p)] = seq
        node_id = self._next()
        in_id = self._tensor_id()
        self.nodes.append(
            self._w.comm_node(
                node_id + 3,
                collective,
                rf_id=node_id + 1,
                seq=seq,
                dtype="BFloat16" if size % 2 == 0 else "Byte",
                in_nelems=in_nelems,
                out_nelems=out_nelems,
                rank=rank_arg,
                pg_name=pg,
                pg_desc=desc,
                pg_size=group_size,
                rank_start=start,
                rank_stride=stride,
                in_splits=in_splits,
                out_splits=out_splits,
                tensor_ids=(in_id, in_id if collective == "allreduce" else self._tensor_id()),
                device=self.device,
                p2p=p2p,
            )
        )
        return node_id

    def coll(
        self,
        name: str,
        comm_type: str,
        size: int,
        pg: str,
        logical: int | None = None,
        data: tuple[int, ...] | None = None,
        start: int | None = None,
    ) -> int:
        duration = max(1, int((logical if logical is not None else size) / self.bytes_per_us))
        itemsize = 2 if size % 2 == 0 else 1
        nelems = size // itemsize
        _, _, group_size, local, _, _ = self._group(pg)
        in_splits = out_splits = None
        collective = C10D_NAMES[comm_type]
        if comm_type == "ALL_TO_ALL":
            if "alltoallv" in name.replace("_", ""):
                collective = "all_to_allv"
            out_nelems = max(1, (logical if logical is not None else size) // itemsize)
            # An all-to-allv's per-peer splits are not part of the generated fleet (the .et format
            # has none), so none are written rather than made up; an even all-to-all's are implied.
            if collective != "all_to_allv":
                in_splits = _even_splits(nelems, group_size)
                out_splits = _even_splits(out_nelems, group_size)
        elif comm_type == "ALL_GATHER":
            out_nelems = nelems * group_size
        elif comm_type == "REDUCE_SCATTER":
            out_nelems = nelems // group_size
        else:
            out_nelems = nelems
        node = self._comm(collective, pg, size, nelems, out_nelems, local, in_splits, out_splits)
        if start is None:
            self.clock += duration
        return node

    def p2p(self, send: bool, name: str, size: int, rank: int, peer: int, tag: int, pg: str) -> int:
        duration = max(1, int(size / self.bytes_per_us))
        nelems = size // (2 if size % 2 == 0 else 1)
        ranks = self._group(pg)[1]
        local_peer = ranks.index(peer) if peer in ranks else peer
        node = self._comm("send" if send else "recv", pg, size, nelems, nelems, local_peer, p2p=True)
        self.clock += duration
        return node

    def document(self, spec: JobSpec) -> dict[str, Any]:
        """The rank's ET JSON document: `time` is the job's start (UTC), `start_ts` in ms."""
        start_ms = int(spec.started_at.timestamp() * 1000)
        return self._w.document(
            [*self.nodes, self._w.process_node()],
            pid=1000 + self.rank,
            time=spec.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            start_ts=start_ms,
            finish_ts=start_ms + (self.clock - CLOCK_ORIGIN_US) // 1000,
        )


NewTrace = Callable[[int], RankTrace]


def _skews(seed: int, rank: int, count: int, sigma: float) -> list[float]:
    if sigma <= 0:
        return [1.0] * count
    rng = random.Random(f"skew:{seed}:{rank}")
    import math

    return [math.exp(sigma * rng.gauss(0.0, 1.0)) for _ in range(count)]


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


def rank_records(
    spec: JobSpec, profile: dict[str, Any], cache: dict[tuple[Any, ...], bytes]
) -> Iterator[tuple[int, list[bytes]]]:
    """(rank, Node records) for every rank of the job, in rank order."""
    bytes_per_us = _bytes_per_us(profile)
    for rank, trace in _BUILDERS[spec.cls](spec, profile, lambda _rank: RankTrace(cache, bytes_per_us), bytes_per_us):
        yield rank, trace.records


def rank_documents(spec: JobSpec, profile: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(rank, PyTorch ET JSON document) for every rank of the job, in rank order: the same nodes as
    rank_records, written as ExecutionTraceObserver does (see EtJsonRankTrace)."""
    bytes_per_us = _bytes_per_us(profile)
    tensor_ids = [0]

    def new(rank: int) -> EtJsonRankTrace:
        return EtJsonRankTrace(bytes_per_us, rank, tensor_ids)

    for rank, trace in _BUILDERS[spec.cls](spec, profile, new, bytes_per_us):
        yield rank, trace.document(spec)


def _bytes_per_us(profile: dict[str, Any]) -> float:
    return float(profile["fleet"].get("link_gbps", 400.0) * 1e3 / 8)


def _a2a_steps(t: RankTrace, spec: JobSpec, rank: int, pg: str, p: dict[str, Any], iteration: int, phase: str) -> None:
    """Embedding all-to-allv calls, one per embedding sharding group ("a2a_calls"), sizes skewed per rank."""
    calls = p.get("a2a_calls", 1)
    skews = _skews(spec.seed, rank * 1000 + iteration * 2 + (phase == "bwd"), calls + 1, p["uneven_sigma"])
    if phase == "fwd":
        t.coll(
            "sparse_input_alltoallv",
            "ALL_TO_ALL",
            max(1, round(p["input_bytes"] * skews[0])),
            pg,
            logical=p["input_bytes"],
        )
        t.comp("embedding_lookup", 2000)
    for k in range(calls):
        t.coll(
            f"embedding_{phase}_alltoallv",
            "ALL_TO_ALL",
            max(1, round(p["a2a_bytes"] * skews[k + 1])),
            pg,
            logical=p["a2a_bytes"],
        )
    if phase == "bwd":
        t.comp("embedding_backward", 3000)


def _ranking(spec: JobSpec, profile: dict[str, Any], new: NewTrace, bpu: float) -> Iterator[tuple[int, Any]]:
    cls = profile["classes"][spec.cls]
    p = spec.params
    world, group = spec.world_size, p["a2a_group"]
    groups = Groups(world)
    a2a_names = [groups.add("embedding_a2a", list(range(b, b + group))) for b in range(0, world, group)]
    buckets = ddp_buckets(p["dense_bytes"], cls["first_bucket_bytes"], cls["bucket_cap_bytes"])
    iterations = profile["fleet"]["iterations"]
    for rank in range(world):
        t = new(rank)
        a2a = a2a_names[rank // group]
        t.pg_init(groups.entries([a2a]))
        for it in range(iterations):
            t.comp("data_loader", 1000)
            _a2a_steps(t, spec, rank, a2a, p, it, "fwd")
            t.comp("dense_forward", 20000)
            chunk = t.last
            bucket_ids = []
            for b, size in enumerate(buckets):
                chunk = t.comp(f"dense_backward_{b}", 2000, deps=(chunk,) if chunk is not None else ())
                bucket_ids.append(t.coll("ddp_bucket_allreduce", "ALL_REDUCE", size, "0", data=(chunk,), start=t.clock))
            t.clock += sum(max(1, int(s / bpu)) for s in buckets[-1:])
            t.last = chunk
            _a2a_steps(t, spec, rank, a2a, p, it, "bwd")
            for _ in range(cls["tiny_allreduces"]):
                t.coll("loss_allreduce", "ALL_REDUCE", cls["tiny_bytes"], "0")
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
    unit = p["unit_bytes"]
    shard_bytes = -(-unit // shard)
    iterations = profile["fleet"]["iterations"]
    for rank in range(world):
        t = new(rank)
        sg = shard_names[rank // shard]
        rg = rep_names[rank % shard]
        t.pg_init(groups.entries([sg] + ([rg] if replicas > 1 else [])))
        for it in range(iterations):
            t.comp("data_loader", 1000)
            if p["a2a_bytes"]:
                _a2a_steps(t, spec, rank, "0", p, it, "fwd")
            for u in range(p["units"]):
                t.coll("fsdp_fwd_allgather", "ALL_GATHER", shard_bytes, sg, logical=unit)
                t.comp(f"forward_unit_{u}", 3000)
            for u in reversed(range(p["units"])):
                t.coll("fsdp_bwd_allgather", "ALL_GATHER", shard_bytes, sg, logical=unit)
                t.comp(f"backward_unit_{u}", 6000)
                t.coll("fsdp_bwd_reducescatter", "REDUCE_SCATTER", unit, sg)
                if replicas > 1:
                    t.coll("hsdp_replicate_allreduce", "ALL_REDUCE", shard_bytes, rg)
            if p["a2a_bytes"]:
                _a2a_steps(t, spec, rank, "0", p, it, "bwd")
            for _ in range(cls["tiny_allreduces"]):
                t.coll("loss_allreduce", "ALL_REDUCE", cls["tiny_bytes"], "0")
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
    stage_tp_bytes = max(1, p["param_bytes"] // (pp * tp))
    iterations = profile["fleet"]["iterations"]
    for rank in range(world):
        t = new(rank)
        tpg, ppg, dpg = per_rank[rank]
        stage = rank // stride
        t.pg_init(groups.entries([tpg, ppg, dpg]))
        for _ in range(iterations):
            for m in range(p["micro_batches"]):
                if stage > 0:
                    t.p2p(False, "pp_fwd_recv", p["pp_bytes"], rank, rank - stride, m, ppg)
                for layer in range(p["layers"]):
                    t.comp(f"forward_layer_{layer}", 1500)
                    if tp > 1:
                        t.coll("tp_fwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg)
                        t.coll("tp_fwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg)
                if stage < pp - 1:
                    t.p2p(True, "pp_fwd_send", p["pp_bytes"], rank, rank + stride, m, ppg)
            for m in range(p["micro_batches"]):
                if stage < pp - 1:
                    t.p2p(False, "pp_bwd_recv", p["pp_bytes"], rank, rank + stride, m, ppg)
                for layer in reversed(range(p["layers"])):
                    t.comp(f"backward_layer_{layer}", 3000)
                    if tp > 1:
                        t.coll("tp_bwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg)
                        t.coll("tp_bwd_allreduce", "ALL_REDUCE", p["tp_bytes"], tpg)
                if stage > 0:
                    t.p2p(True, "pp_bwd_send", p["pp_bytes"], rank, rank - stride, m, ppg)
            if dp > 1:
                t.coll("dp_grad_reducescatter", "REDUCE_SCATTER", stage_tp_bytes, dpg)
                t.coll("dp_param_allgather", "ALL_GATHER", -(-stage_tp_bytes // dp), dpg, logical=stage_tp_bytes)
            loss_group = dpg if dp > 1 else (tpg if tp > 1 else "0")
            t.coll("loss_allreduce", "ALL_REDUCE", cls["tiny_bytes"], loss_group)
            t.comp("optimizer_step", 5000)
        yield rank, t


_BUILDERS = {"ranking-ddp": _ranking, "fsdp": _fsdp, "llm-3d": _llm}
