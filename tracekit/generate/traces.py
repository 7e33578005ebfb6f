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
AllGather, the full input for ReduceScatter), in whole elements of the role's dtype (the profile
names it: fp32 DDP buckets, int64 ids, bf16 shards and activations), which every comm node carries
as its `dtype` attribute. An all-to-allv's per-peer sizes are one matrix per call and group,
M[i][j] = elements rank i sends rank j = (its per-peer mean) x r_i x c_j, with r (each rank's volume)
and c (each peer's share, mean 1) lognormal by the model's `uneven_sigma`, drawn per job and call:
rank i's in_splits is row i, its out_splits column i, so every rank's splits agree with its peers'
(the embeddings' backward all-to-allv sends the forward's matrix transposed). A collective takes as
long on every rank of its group as its busiest rank needs at `fleet.link_gbps`: its bytes by
nccl-tests' bus-bandwidth definition (S x 2(n-1)/n for all-reduce, ...), or for an all-to-allv the
most any rank sends or receives, so no rank reads above the link's speed. Identical records are
serialized once per job: most ranks of a job share most of their bytes.

The class builders call a RankTrace per rank; rank_records serializes it as .et records, and
rank_documents, with EtJsonRankTrace, as PyTorch Execution Trace JSON of the same nodes
(`generate --trace-format pytorch-et`), which ingest reads into the same collectives rows.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.generate.jobs import JobSpec
from tracekit.parsers import et_def_pb2
from tracekit.parsers.common.names import C10D_NAMES, DTYPE_BYTES, PG_INIT_NAME
from tracekit.writers.chakra_et import comm_node, comp_node, int64_list_fields, recv_node, send_node

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


@dataclass(frozen=True, eq=False)
class Splits:
    """One rank's share of an all-to-allv (member `member` of `matrix`): elements it sends to /
    receives from each group member (ins, outs), their sums, and the same as the serialized `attr`
    fields of a Chakra Node (in_split_size, out_split_size)."""

    matrix: SplitMatrix
    member: int

    @property
    def ins(self) -> list[int]:
        return list(self.matrix.matrix[self.member].tolist())

    @property
    def outs(self) -> list[int]:
        return list(self.matrix.matrix[:, self.member].tolist())

    @property
    def members(self) -> int:
        return len(self.matrix.matrix)

    @property
    def sent(self) -> int:
        return int(self.matrix.row_sums[self.member])

    @property
    def received(self) -> int:
        return int(self.matrix.column_sums[self.member])

    @property
    def fields(self) -> bytes:
        return self.matrix.fields(self.member)


class RankTrace:
    """Builds one rank's records; `cache` (shared by the job's ranks) holds serialized records."""

    def __init__(self, cache: dict[tuple[Any, ...], bytes], bytes_per_us: float) -> None:
        self.cache = cache
        self.records: list[bytes] = []
        self.next_id = 0
        self.clock = CLOCK_ORIGIN_US
        self.last: int | None = None
        self.bytes_per_us = bytes_per_us
        self.durations: dict[tuple[str, int, int], int] = {}

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

    def duration(self, bus_bytes: float) -> int:
        """Microseconds the link takes for `bus_bytes` (whole microseconds, rounded up, at least 1)."""
        return max(1, math.ceil(bus_bytes / self.bytes_per_us))

    def lasts(self, comm_type: str, size: int, group: int) -> int:
        """duration() of a collective whose ranks pass in `size` bytes each (memoized per job)."""
        key = (comm_type, size, group)
        found = self.durations.get(key)
        if found is None:
            found = self.durations[key] = self.duration(bus(comm_type, size, group))
        return found

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
        group: int,
        dtype: str,
        data: tuple[int, ...] | None = None,
        start: int | None = None,
        splits: Splits | None = None,
        bus_bytes: float | None = None,
    ) -> int:
        """A collective over a group of `group` ranks; it lasts what its bus bytes take on the link
        (`bus_bytes` where the ranks' sizes differ, else this rank's, by bus_bytes()), the same on
        every rank, and moves the clock on unless it starts at `start`."""
        duration = self.lasts(comm_type, size, group) if bus_bytes is None else self.duration(bus_bytes)
        begin = self.clock if start is None else start
        ctrl = () if data is not None else self._deps(None)

        def build(i: int) -> Any:
            attrs: dict[str, Any] = {"dtype": dtype}
            if splits is not None:
                attrs["out_msg_nelems"] = splits.received
            return comm_node(
                i,
                name,
                comm_type,
                size,
                pg,
                ctrl_deps=ctrl,
                data_deps=data or (),
                start_us=begin,
                duration_us=duration,
                attrs=attrs,
            )

        if splits is None:
            node = self._emit(("coll", name, comm_type, size, pg, dtype, ctrl, data, begin, duration), build)
        else:  # every rank's splits differ: nothing to share, the split fields appended as bytes
            node = self.next_id
            self.next_id += 1
            self.records.append(build(node).SerializeToString() + splits.fields)
            self.last = node
        if start is None:
            self.clock += duration
        return node

    def p2p(self, send: bool, name: str, size: int, rank: int, peer: int, tag: int, pg: str, dtype: str) -> int:
        duration = self.duration(size)
        ctrl = self._deps(None)
        begin = self.clock
        builder = send_node if send else recv_node
        node = self._emit(
            ("p2p", send, name, size, rank, peer, tag, pg, dtype, ctrl, begin),
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
                attrs={"dtype": dtype},
            ),
        )
        self.clock += duration
        return node


def bus(comm_type: str, size: int, group: int) -> float:
    """Bytes a rank's link carries for one collective of `size` bytes passed in (nccl-tests' bus
    bytes: S x 2(n-1)/n for all-reduce, S x n x (n-1)/n for all-gather (S the shard), S x (n-1)/n for
    reduce-scatter and all-to-all, S for the rest)."""
    if group <= 1:
        return 0.0
    if comm_type == "ALL_REDUCE":
        return size * 2.0 * (group - 1) / group
    if comm_type == "ALL_GATHER":
        return float(size * (group - 1))
    if comm_type in ("REDUCE_SCATTER", "ALL_TO_ALL"):
        return size * (group - 1) / group
    return float(size)


class EtJsonRankTrace(RankTrace):
    """One rank's nodes as PyTorch ET JSON nodes (tracekit.writers.pytorch_et) instead of .et records.

    Same calls, ids, clock and `last` as RankTrace, so a builder makes the same nodes in both formats:
    node id = .et id + 3 (ids 1 and 2 are the process and thread nodes), rf_id = .et id + 1. Compute
    nodes are ops named as in the .et; collectives are record_param_comms nodes in the call's dtype,
    whose in_msg_nelems times its size is the .et comm_size, with the all-to-allv's splits. The ET
    tree is flat (every op under the thread node): plain ET has no times and no dependency edges.
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
        dtype: str,
        in_nelems: int,
        out_nelems: int,
        rank_arg: int,
        splits: Splits | None = None,
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
                dtype=dtype,
                in_nelems=in_nelems,
                out_nelems=out_nelems,
                rank=rank_arg,
                pg_name=pg,
                pg_desc=desc,
                pg_size=group_size,
                rank_start=start,
                rank_stride=stride,
                in_splits=splits.ins if splits else None,
                out_splits=splits.outs if splits else None,
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
        group: int,
        dtype: str,
        data: tuple[int, ...] | None = None,
        start: int | None = None,
        splits: Splits | None = None,
        bus_bytes: float | None = None,
    ) -> int:
        duration = self.lasts(comm_type, size, group) if bus_bytes is None else self.duration(bus_bytes)
        nelems = size // DTYPE_BYTES[dtype]
        _, _, group_size, local, _, _ = self._group(pg)
        collective = C10D_NAMES[comm_type]
        if comm_type == "ALL_TO_ALL":
            collective = "all_to_allv" if splits is not None else collective
            out_nelems = splits.received if splits is not None else nelems
        elif comm_type == "ALL_GATHER":
            out_nelems = nelems * group_size
        elif comm_type == "REDUCE_SCATTER":
            out_nelems = nelems // group_size
        else:
            out_nelems = nelems
        node = self._comm(collective, pg, dtype, nelems, out_nelems, local, splits)
        if start is None:
            self.clock += duration
        return node

    def p2p(self, send: bool, name: str, size: int, rank: int, peer: int, tag: int, pg: str, dtype: str) -> int:
        duration = self.duration(size)
        nelems = size // DTYPE_BYTES[dtype]
        ranks = self._group(pg)[1]
        local_peer = ranks.index(peer) if peer in ranks else peer
        node = self._comm("send" if send else "recv", pg, dtype, nelems, nelems, local_peer, p2p=True)
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


class SplitMatrix:
    """One all-to-allv of a group: M[i][j] elements from member i to member j (see the module
    docstring), drawn from the job's seed and the call's key."""

    def __init__(self, seed: int, key: str, members: int, per_rank: int, sigma: float) -> None:
        rng = random.Random(f"splits:{seed}:{key}")
        volume = np.array([math.exp(sigma * rng.gauss(0.0, 1.0)) if sigma > 0 else 1.0 for _ in range(members)])
        share = np.array([math.exp(sigma * rng.gauss(0.0, 1.0)) if sigma > 0 else 1.0 for _ in range(members)])
        share /= share.mean()
        self._set(np.rint(per_rank / members * np.outer(volume, share)).astype(np.int64))

    def _set(self, matrix: np.ndarray) -> None:
        self.matrix = matrix
        self.row_sums, self.column_sums = matrix.sum(axis=1), matrix.sum(axis=0)
        self._busiest = self._busiest_member()
        self._fields: list[bytes] | None = None

    def transposed(self) -> SplitMatrix:
        out = object.__new__(SplitMatrix)
        out._set(self.matrix.T)
        return out

    def splits(self, member: int) -> Splits:
        return Splits(self, member)

    def fields(self, member: int) -> bytes:
        """Member's in_split_size and out_split_size as serialized Node `attr` fields."""
        if self._fields is None:
            ins = int64_list_fields("in_split_size", self.matrix)
            outs = int64_list_fields("out_split_size", self.matrix.T)
            self._fields = [a + b for a, b in zip(ins, outs, strict=True)]
        return self._fields[member]

    def bus_bytes(self, itemsize: int) -> float:
        """The most any member's link carries: what it sends or receives from the others, or its
        input's bus bytes (S x (n-1)/n), whichever is more."""
        return self._busiest * itemsize

    def _busiest_member(self) -> float:
        m = self.matrix
        n = len(m)
        own = np.diagonal(m)
        sent, received = self.row_sums - own, self.column_sums - own
        by_definition = self.row_sums * (n - 1) / n
        return float(max(sent.max(), received.max(), by_definition.max()))


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


class Alltoalls:
    """The job's embedding all-to-allv calls, one SplitMatrix per (iteration, call, group), made
    once and shared by the ranks (the backward call sends the forward's matrix transposed)."""

    def __init__(self, spec: JobSpec, p: dict[str, Any]) -> None:
        self.seed, self.p = spec.seed, p
        self.made: dict[tuple[Any, ...], SplitMatrix] = {}

    def matrix(self, iteration: int, call: str, group: int, members: int, backward: bool = False) -> SplitMatrix:
        key = (iteration, call, group, backward)
        found = self.made.get(key)
        if found is None:
            if backward:
                found = self.matrix(iteration, call, group, members).transposed()
            else:
                p = self.p
                ids = call == "input"
                per_rank = (p["input_bytes"] if ids else p["a2a_bytes"]) // DTYPE_BYTES[self.dtype(ids)]
                found = SplitMatrix(self.seed, f"{iteration}:{call}:{group}", members, per_rank, p["uneven_sigma"])
            self.made[key] = found
        return found

    def dtype(self, ids: bool) -> str:
        return str(self.p["ids_dtype"] if ids else self.p["a2a_dtype"])


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


_BUILDERS = {"ranking-ddp": _ranking, "fsdp": _fsdp, "llm-3d": _llm}
