"""Every logical collective of a job into point-to-point transfers, bucket by bucket.

Per process group, the communicator NCCL would build (tracekit.replay.nccl: channels, rings, trees
and the NIC each uses, or those an NCCL INFO log printed) is built once. Each collective gets its
algorithm, protocol, channel count and pipeline depth (NCCL's tuner unless forced). A bucket is all
collectives of one group with the same comm_type, algorithm, channels and pipeline depth: its
template is built once and stamped over the bucket with numpy (tracekit.replay.stamp).

All-to-allv is the recorded split matrix instead of a template: in_splits are elements, so a
transfer is in_splits[j] × the element size (the dtype's, else in_bytes / sum(in_splits)); a sender
without usable splits is read from its receivers' out_splits; its pairs travel like AllToAll's
(p2p channels, PXN). SEND/RECV pairs are one transfer each, split over the p2p channels.

Sizes follow the ingest convention: S = in_bytes, the bytes each rank passes in (Chakra's
comm_size; the local shard for all-gather, the full input for reduce-scatter, the whole send buffer
for all-to-all). The root of Broadcast/Reduce/Gather/Scatter is the group's first member (the
collectives table does not record roots).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.replay import algorithms
from tracekit.replay.algorithms import NotApplicable, Request
from tracekit.replay.collectives import MAX_TOTAL_BYTES, RECORDED
from tracekit.replay.layout import GroupLayout, group_layout
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.nccl.tuning import (
    NCCL_ALGORITHM_NAMES,
    NCCL_PROTOCOL_NAMES,
    NO_DATA,
    OBSERVED,
    Choice,
    choose,
)
from tracekit.replay.splits import split_transfers
from tracekit.replay.stamp import Stamped, part_bytes, stamp

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from tracekit.replay.collectives import JobCollectives
    from tracekit.replay.nccl.comm import CommTopology
    from tracekit.replay.placement import Placement

DEFAULT_MAX_FLOWS = 50_000_000


@dataclass
class Decomposition:
    flows: list[Stamped] = field(default_factory=list)
    rank_of: list[np.ndarray] = field(default_factory=list)  # per Stamped: position -> global rank
    algorithm_of: list[str] = field(default_factory=list)
    choice: dict[int, Choice] = field(default_factory=dict)  # collective_id -> algorithm, protocol, channels
    topologies: list[CommTopology | None] = field(default_factory=list)  # per group
    # with unique=True: a stamped collective -> every collective it stands for (itself included)
    copies: dict[int, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    flow_count: int = 0
    byte_total: float = 0.0  # the bytes stamped so far, copies counted (a float: a bound, never wraps)


def layouts(job: JobCollectives, placement: Placement) -> list[GroupLayout]:
    return [group_layout(members, placement) for members in job.groups]


def decompose(
    job: JobCollectives,
    placement: Placement,
    options: NcclOptions | None = None,
    algorithm: str = "auto",
    max_flows: int = DEFAULT_MAX_FLOWS,
    progress: Any = None,
    unique: bool = False,
) -> Decomposition:
    """Transfers of every collective of `job` (see the module docstring).

    `unique`: stamp one collective per distinct (group, type, size, member sizes) and record in
    `copies` every collective it stands for (what indicators and timings need; the fleet's way).
    """
    import numpy as np
    import polars as pl

    from tracekit.replay.nccl.from_log import communicator

    options = options or NcclOptions()
    known = algorithms.names()
    if algorithm not in ("auto", OBSERVED) and algorithm not in known:
        raise InputError(f"unknown algorithm {algorithm!r}; choose auto, {OBSERVED} or {', '.join(known)}")
    result = Decomposition()
    groups = layouts(job, placement)
    result.topologies = [communicator(layout, placement, options, result.notes) for layout in groups]
    if options.log is not None:
        used = sum(1 for t in result.topologies if t is not None and t.source != "model")
        result.notes.append(f"job {job.job}: {used} of {len(groups)} process group(s) run on the rings and trees of "
                            f"{options.log.path}; the others on NCCL's model")  # fmt: skip
    colls = job.collectives
    uneven = pl.col("is_uneven").fill_null(False) & (pl.col("comm_type") == "ALL_TO_ALL")
    regular = colls.filter((pl.col("group") >= 0) & ~uneven & ~pl.col("comm_type").is_in(NO_DATA))
    skipped = colls.filter(pl.col("comm_type").is_in(NO_DATA)).height
    if skipped:
        result.notes.append(f"job {job.job}: {skipped} barrier(s) move no data: no flows")
    chosen = _choose(regular, groups, result.topologies, placement, options, algorithm, result)
    if algorithm == OBSERVED:
        result.notes.append(f"job {job.job}: {_recorded_note(chosen)}")
    member_bytes = _member_bytes(job, groups)
    fallbacks = 0
    keys = ["group", "comm_type", "algorithm", "channels", "chunks"]
    for (group, comm_type, name, channels, chunks), bucket in chosen.group_by(keys, maintain_order=True):
        layout = groups[int(group)]
        topo = result.topologies[int(group)]
        assert topo is not None
        req = _request(str(comm_type), layout, topo, int(channels), int(chunks), options)
        try:
            template = _template(str(name), req, options.qps, max_flows, job.job, bucket)
        except NotApplicable:
            fallbacks += bucket.height
            fallback = choose(str(comm_type), layout, topo, placement, options, 0, "auto")
            name = fallback.algorithm
            req = _request(str(comm_type), layout, topo, fallback.channels, fallback.chunks, options)
            template = _template(str(name), req, options.qps, max_flows, job.job, bucket)
        ids = bucket["collective_id"].to_numpy()
        sizes = bucket["size"].to_numpy().astype(np.int64)
        per_member = member_bytes(int(group), ids, sizes)
        if unique:
            ids, sizes, per_member = _distinct(result, ids, sizes, per_member)
        _check_budget(result, template.size * len(ids), max_flows, job.job, bucket)
        stamped = stamp(template, ids, sizes, per_member, result.flow_count)
        _check_total(result, stamped, job.job, bucket)
        _add(result, stamped, layout.ranks, str(name))
        if progress:
            progress(len(ids))
    if fallbacks:
        result.notes.append(
            f"job {job.job}: {fallbacks} collective(s) kept their default algorithm: "
            + ("the one NCCL recorded" if algorithm == OBSERVED else algorithm)
            + " does not serve them"
        )
    _uneven(job, colls.filter(uneven), groups, result, placement, options, max_flows)
    pairs = colls.filter(pl.col("group") < 0)
    if unique and pairs.height:
        pairs = _distinct_pairs(result, pairs)
    _point_to_point(job, pairs, placement, options, result, max_flows)
    return result


def _distinct(
    result: Decomposition, ids: np.ndarray, sizes: np.ndarray, per_member: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One collective per distinct (size, member sizes) row; `result.copies` says which others it stands for."""
    import numpy as np

    rows = np.concatenate([sizes[:, None], per_member], axis=1)
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    for k, representative in enumerate(first.tolist()):
        result.copies[int(ids[representative])] = [int(c) for c in ids[inverse == k].tolist()]
    keep = np.sort(first)
    return ids[keep], sizes[keep], per_member[keep]


def _distinct_pairs(result: Decomposition, pairs: pl.DataFrame) -> pl.DataFrame:
    """One send/recv per distinct (sender, receiver, size); `result.copies` says which others it stands for."""
    import polars as pl

    grouped = pairs.group_by("src", "dst", "size", maintain_order=True).agg(pl.col("collective_id"))
    for ids in grouped["collective_id"].to_list():
        result.copies[int(ids[0])] = [int(c) for c in ids]
    firsts = grouped["collective_id"].list.first()
    return pairs.filter(pl.col("collective_id").is_in(firsts.implode()))


def _request(
    comm_type: str, layout: GroupLayout, topo: CommTopology, channels: int, chunks: int, options: NcclOptions
) -> Request:
    used = max(1, min(channels, topo.channels))
    return Request(
        comm_type=comm_type,
        layout=layout,
        topology=topo.first(used),
        root=int(layout.position_of_member[0]) if layout.n else 0,
        channels=channels,
        chunks=chunks,
        pxn=options.pxn,
    )


def _choose(
    colls: pl.DataFrame,
    groups: list[GroupLayout],
    topologies: list[CommTopology | None],
    placement: Placement,
    options: NcclOptions,
    forced: str,
    result: Decomposition,
) -> pl.DataFrame:
    """Each collective with its algorithm, protocol, channels and pipeline pieces (one choice per distinct
    size). With `forced` observed, per distinct size and recorded (algorithm, protocol): the ones NCCL
    recorded running it (NCCL Inspector), with the model's channels and pieces for them; the model's
    whole choice where none was recorded or the replay has no such algorithm."""
    import polars as pl

    observed = forced == OBSERVED
    keys = ["group", "comm_type", "size", *(RECORDED if observed else ())]
    picked = []
    for values in colls.select(keys).unique(maintain_order=True).rows():
        group, comm_type, size = values[:3]
        topo = topologies[group]
        assert topo is not None
        algorithm, chosen = _recorded(values[3], values[4], options) if observed else (forced, options)
        c = choose(comm_type, groups[group], topo, placement, chosen, int(size), algorithm)
        picked.append((*values, c.algorithm, c.protocol, c.channels, c.chunks, c.estimate_us))
    schema = {"group": pl.Int32, "comm_type": pl.String, "size": pl.Int64, **{k: pl.String for k in keys[3:]},
              "algorithm": pl.String, "protocol": pl.String, "channels": pl.Int32, "chunks": pl.Int32,
              "estimate_us": pl.Float64}  # fmt: skip
    table = pl.DataFrame(picked, schema=schema, orient="row")
    out = colls.join(table, on=keys, how="left", nulls_equal=True).filter(pl.col("algorithm") != "")
    for row in out.select("collective_id", "algorithm", "protocol", "channels", "chunks", "estimate_us").iter_rows():
        result.choice[int(row[0])] = Choice(row[1], row[2], int(row[3]), int(row[4]), float(row[5]))
    return out


def _recorded(nccl_algorithm: str | None, nccl_protocol: str | None, options: NcclOptions) -> tuple[str, NcclOptions]:
    """The replay's algorithm and the options (protocol forced) for NCCL's recorded names; auto for none."""
    protocol = NCCL_PROTOCOL_NAMES.get(nccl_protocol or "")
    return (
        NCCL_ALGORITHM_NAMES.get(nccl_algorithm or "", "auto"),
        replace(options, protocol=protocol) if protocol is not None else options,
    )


def _recorded_note(out: pl.DataFrame) -> str:
    import polars as pl

    recorded = out.filter(pl.col("nccl_algorithm").is_not_null())
    unknown = recorded.filter(~pl.col("nccl_algorithm").is_in(list(NCCL_ALGORITHM_NAMES)))
    lacking = ""
    if unknown.height:
        names = ", ".join(sorted(set(unknown["nccl_algorithm"])))[:80]
        lacking = f" ({unknown.height:,} ran {names}, which the replay has no algorithm for)"
    return (
        f"{recorded.height - unknown.height:,} of {out.height:,} collectives replayed with the algorithm and "
        f"protocol NCCL recorded running them (NCCL Inspector v4.2+); the others with NCCL's model's choice{lacking}"
    )


def _template(name: str, req: Request, qps: int, max_flows: int, job: str, bucket: Any) -> Any:
    estimate = _estimate(name, req, qps)
    if estimate > max_flows:
        first = bucket.row(0, named=True)
        raise InputError(
            f"job {job}: {req.comm_type} over {req.layout.n} ranks ({first['op_name']}, collective "
            f"{first['collective_id']}) would need about {estimate:,} transfers with {name}, past the limit of "
            f"{max_flows:,} (raise --max-flows)"
        )
    key = (name, qps, *req.key())
    cached = _CACHE.get(key)
    if cached is None:
        cached = algorithms.template(name, req, qps)
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = cached
    return cached


_CACHE: dict[tuple[Any, ...], Any] = {}


def _estimate(name: str, req: Request, qps: int) -> int:
    """An upper bound of transfers plus dependency entries of one collective, before building it."""
    n = req.layout.n
    width = max(req.channels, 1) * max(qps, 1) * 2  # x2: a PXN hop before a network transfer
    if name == "direct":
        return (n * n * (n + 1) if req.comm_type == "ALL_REDUCE" else n * n) * width
    if name == "ring":
        return 4 * n * n * width * max(req.chunks, 1)
    if name == "collnet":  # a down waits for its slice from every host: hosts^2 x heads per channel piece
        h, heads = req.layout.host_count, max(req.layout.max_per_host, 1)
        return (h * h * heads + 6 * n * heads) * max(req.channels, 1) * max(req.chunks, 1)
    return (8 * n * max(n.bit_length(), 1) + 8 * n) * width * max(req.chunks, 1)


def _check_budget(result: Decomposition, more: int, max_flows: int, job: str, bucket: Any) -> None:
    if result.flow_count + more > max_flows:
        first = bucket.row(0, named=True)
        raise InputError(
            f"job {job}: the replay passes {max_flows:,} transfers at {first['comm_type']} {first['op_name']} "
            f"(collective {first['collective_id']}); raise --max-flows or replay fewer collectives"
        )


def _check_total(result: Decomposition, stamped: Stamped, job: str, bucket: Any) -> None:
    """Refuse the collective at which the job's bytes pass MAX_TOTAL_BYTES (its sums would wrap int64)."""
    import numpy as np
    import polars as pl

    total = float(np.sum(stamped.bytes, dtype=np.float64))
    if not result.copies and result.byte_total + total <= MAX_TOTAL_BYTES:
        result.byte_total += total
        return
    ids, inverse = np.unique(stamped.collective, return_inverse=True)
    weights = stamped.bytes.astype(np.float64)
    # float64 whatever it counts: numpy makes the bincount of no transfers (zero-byte collectives) int64
    per = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(ids)).astype(np.float64)
    per *= np.array([len(result.copies.get(int(i), (i,))) for i in ids.tolist()], dtype=np.float64)
    running = result.byte_total + np.cumsum(per)
    over = np.flatnonzero(running > MAX_TOTAL_BYTES)
    if over.size:
        cid = int(ids[over[0]])
        first = bucket.filter(pl.col("collective_id") == cid).row(0, named=True)
        raise InputError(
            f"job {job}: the replay passes {MAX_TOTAL_BYTES:,} bytes at {first['comm_type']} {first['op_name']} "
            f"(collective {cid}), past what its totals hold in 64 bits; replay fewer collectives"
        )
    result.byte_total = float(running[-1]) if len(running) else result.byte_total


def _add(result: Decomposition, stamped: Stamped, ranks: np.ndarray, name: str) -> None:
    result.flows.append(stamped)
    result.rank_of.append(ranks)
    result.algorithm_of.append(name)
    result.flow_count += len(stamped.src)


def _member_bytes(job: JobCollectives, groups: list[GroupLayout]) -> Any:
    """A function (group, collective ids, sizes) -> (C, n) bytes each position passed in (S if unknown)."""
    import numpy as np

    parts = job.participants.select("collective_id", "rank", "in_bytes").drop_nulls()
    by_coll = {int(k[0]): v for k, v in parts.partition_by("collective_id", as_dict=True).items()}

    def lookup(group: int, ids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        layout = groups[group]
        out = np.repeat(sizes[:, None], len(layout.ranks), axis=1)
        for row, cid in enumerate(ids.tolist()):
            seen = by_coll.get(cid)
            if seen is not None and seen.height:
                out[row, layout.positions(seen["rank"].to_numpy())] = seen["in_bytes"].to_numpy()
        return out

    return lookup


def _uneven(
    job: JobCollectives,
    colls: pl.DataFrame,
    groups: list[GroupLayout],
    result: Decomposition,
    placement: Placement,
    options: NcclOptions,
    cap: int,
) -> None:
    """All-to-allv: one transfer per non-zero entry of the recorded split matrix (bytes), sent as NCCL's p2p."""
    import numpy as np

    from tracekit.replay.algorithms.base import split_qps
    from tracekit.replay.algorithms.p2p import Pairs, hops

    if not colls.height:
        return
    parts = job.participants.filter(job.participants["collective_id"].is_in(colls["collective_id"].implode()))
    by_coll = {int(k[0]): v for k, v in parts.partition_by("collective_id", as_dict=True).items()}
    issues: dict[str, int] = {}
    for row in colls.iter_rows(named=True):
        layout = groups[row["group"]]
        topo = result.topologies[row["group"]]
        assert topo is not None
        one = colls.filter(colls["collective_id"] == row["collective_id"])
        c = choose("ALL_TO_ALL", layout, topo, placement, options, int(row["size"]), "auto")
        req = _request("ALL_TO_ALL", layout, topo, c.channels, c.chunks, options)
        where = f"job {job.job}: ALL_TO_ALL {row['op_name']} (collective {row['collective_id']})"
        transfers = split_transfers(by_coll.get(row["collective_id"]), layout, issues, where)
        ids = np.array([row["collective_id"]], dtype=np.int64)
        sizes = np.array([row["size"]], dtype=np.int64)
        if transfers is None:  # no usable splits at all: an even all-to-all of the recorded sizes
            _count(issues, "no usable split lists: replayed as an even all-to-all")
            template = _template("direct", req, options.qps, cap, job.job, one)
            stamped = stamp(
                template, ids, sizes, _member_bytes(job, groups)(row["group"], ids, sizes), result.flow_count
            )
        else:  # the work follows the non-zero splits, never the n x n pairs of the group
            src, dst = transfers.src, transfers.dst
            _check_budget(result, len(src), cap, job.job, one)
            zeros = np.zeros(len(src), dtype=np.int64)
            pairs = Pairs(src=src, dst=dst, lo=zeros, hi=zeros + 1, basis=np.arange(len(src)), den=1, step=zeros)
            template = split_qps(hops(req, pairs), options.qps)
            _check_budget(result, template.size, cap, job.job, one)
            stamped = stamp(template, ids, sizes, transfers.bytes[None, :], result.flow_count)
        _check_total(result, stamped, job.job, one)
        _add(result, stamped, layout.ranks, "direct")
        result.choice[row["collective_id"]] = Choice("direct", c.protocol, c.channels, 1)
    for issue, count in issues.items():
        result.notes.append(f"job {job.job}: all-to-allv: {issue} ({count} case(s))")


def _count(issues: dict[str, int], issue: str) -> None:
    issues[issue] = issues.get(issue, 0) + 1


def _point_to_point(
    job: JobCollectives,
    colls: pl.DataFrame,
    placement: Placement,
    options: NcclOptions,
    result: Decomposition,
    cap: int,
) -> None:
    """SEND/RECV pairs: each over its own two-rank communicator (as PyTorch opens one per pair), on the two
    GPUs' own NICs, split over the p2p channels per peer and the QPs."""
    import numpy as np

    from tracekit.replay.algorithms.base import NET

    if not colls.height:
        return
    channels = max(options.p2p_channels, 1)
    where_src = placement.locate(colls["src"].to_numpy().astype(np.int64))
    where_dst = placement.locate(colls["dst"].to_numpy().astype(np.int64))
    cross = where_src["host"] != where_dst["host"]
    qps = np.where(cross, max(options.qps, 1), 1)
    per = channels * qps  # pieces per pair
    _check_budget(result, int(per.sum()), cap, job.job, colls)
    owner = np.repeat(np.arange(colls.height), per)
    piece = np.arange(int(per.sum()), dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
    sizes = colls["size"].to_numpy().astype(np.int64)
    count = len(owner)
    link = np.where(cross[owner], NET, 0).astype(np.int8)
    stamped = Stamped(
        collective=colls["collective_id"].to_numpy().astype(np.int64)[owner],
        step=np.zeros(count, dtype=np.int32),
        src=np.zeros(count, dtype=np.int32),
        dst=np.ones(count, dtype=np.int32),
        bytes=part_bytes(sizes[owner], 1, np.zeros(count, dtype=np.int64), np.ones(count, dtype=np.int64)),
        dep_ptr=np.zeros(count + 1, dtype=np.int64),
        dep_idx=np.zeros(0, dtype=np.int64),
        channel=(piece // qps[owner]).astype(np.int16),
        link=link,
        src_nic=np.where(cross, where_src["nic"], -1)[owner].astype(np.int16),
        dst_nic=np.where(cross, where_dst["nic"], -1)[owner].astype(np.int16),
        qp=(piece % qps[owner]).astype(np.int16),
        pxn=np.zeros(count, dtype=bool),
        switch=np.zeros(count, dtype=np.int8),
    )
    stamped.bytes = part_bytes(sizes[owner], per[owner], piece, piece + 1)
    keep = stamped.bytes > 0
    if not keep.all():
        for name in (f.name for f in fields(stamped) if f.name not in ("dep_ptr", "dep_idx")):  # per-flow arrays
            setattr(stamped, name, getattr(stamped, name)[keep])
        owner = owner[keep]
        stamped.dep_ptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    # Positions 0 and 1 of a pair are its sender and receiver: keep the global ranks per flow.
    pair_ranks = np.stack([colls["src"].to_numpy(), colls["dst"].to_numpy()], axis=1).astype(np.int64)
    _check_total(result, stamped, job.job, colls)
    result.flows.append(stamped)
    result.rank_of.append(pair_ranks[owner])
    result.algorithm_of.append("p2p")
    result.flow_count += len(stamped.src)
    for cid in colls["collective_id"].to_list():
        result.choice[int(cid)] = Choice("p2p", options.protocol or "simple", channels, 1)
