"""Every logical collective of a job into point-to-point transfers, bucket by bucket.

A bucket is all collectives of one process group, one comm_type and one algorithm: its template is
built once and stamped over the bucket with numpy (tracekit.replay.stamp). All-to-allv is the
recorded split matrix instead of a template: in_splits are elements, so a transfer is
in_splits[j] × the element size (the dtype's, else in_bytes / sum(in_splits)); a sender without
usable splits is read from its receivers' out_splits. SEND/RECV pairs are one transfer each.

Sizes follow the ingest convention: S = in_bytes, the bytes each rank passes in (Chakra's
comm_size; the local shard for all-gather, the full input for reduce-scatter, the whole send buffer
for all-to-all). The root of Broadcast/Reduce/Gather/Scatter is the group's first member (the
collectives table does not record roots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.parsers.common.names import dtype_bytes
from tracekit.replay import algorithms
from tracekit.replay.algorithms import NotApplicable
from tracekit.replay.select import NO_DATA, default_algorithm
from tracekit.replay.stamp import Stamped, stamp

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from tracekit.replay.collectives import JobCollectives
    from tracekit.replay.model import NetworkModel
    from tracekit.replay.placement import Placement

DEFAULT_MAX_FLOWS = 50_000_000


@dataclass
class GroupLayout:
    """A group's members in placement order (positions) and where they sit."""

    ranks: np.ndarray  # global rank at each position
    hosts: np.ndarray  # host at each position
    position_of_member: np.ndarray  # group index -> position
    host_count: int
    max_per_host: int

    def positions(self, ranks: np.ndarray) -> np.ndarray:
        """Position of each global rank (which must be a member)."""
        import numpy as np

        order = np.argsort(self.ranks, kind="stable")
        return order[np.searchsorted(self.ranks[order], ranks)]


@dataclass
class Decomposition:
    flows: list[Stamped] = field(default_factory=list)
    rank_of: list[np.ndarray] = field(default_factory=list)  # per Stamped: position -> global rank
    algorithm_of: list[str] = field(default_factory=list)
    algorithm: dict[int, str] = field(default_factory=dict)  # collective_id -> algorithm
    notes: list[str] = field(default_factory=list)
    flow_count: int = 0


def layouts(job: JobCollectives, placement: Placement) -> list[GroupLayout]:
    import numpy as np

    out = []
    for members in job.groups:
        ranks = np.array(members, dtype=np.int64)
        where = placement.locate(ranks)
        order = np.lexsort((ranks, where["gpu"], where["host"], where["rack"], where["pod"]))
        position_of_member = np.empty(len(ranks), dtype=np.int64)
        position_of_member[order] = np.arange(len(ranks))
        hosts = where["host"][order]
        counts = np.unique(hosts, return_counts=True)[1] if len(hosts) else np.zeros(0, dtype=np.int64)
        out.append(
            GroupLayout(ranks[order], hosts, position_of_member, len(counts), int(counts.max()) if len(counts) else 0)
        )
    return out


def decompose(
    job: JobCollectives,
    placement: Placement,
    model: NetworkModel,
    algorithm: str = "auto",
    max_flows: int = DEFAULT_MAX_FLOWS,
    progress: Any = None,
) -> Decomposition:
    """Transfers of every collective of `job` (see the module docstring)."""
    import numpy as np
    import polars as pl

    if algorithm != "auto" and algorithm not in algorithms.ALGORITHMS:
        raise InputError(f"unknown algorithm {algorithm!r}; choose auto or {', '.join(algorithms.ALGORITHMS)}")
    result = Decomposition()
    groups = layouts(job, placement)
    colls = job.collectives
    uneven = pl.col("is_uneven").fill_null(False) & (pl.col("comm_type") == "ALL_TO_ALL")
    regular = colls.filter((pl.col("group") >= 0) & ~uneven & ~pl.col("comm_type").is_in(NO_DATA))
    skipped = colls.filter(pl.col("comm_type").is_in(NO_DATA)).height
    if skipped:
        result.notes.append(f"job {job.job}: {skipped} barrier(s) move no data: no flows")
    chosen = _choose(job, regular, groups, model, algorithm, result)
    member_bytes = _member_bytes(job, groups)
    fallbacks = 0
    for (group, comm_type, name), bucket in chosen.group_by(["group", "comm_type", "algorithm"], maintain_order=True):
        layout = groups[int(group)]
        root = int(layout.position_of_member[0]) if len(layout.ranks) else 0
        try:
            template = _template(str(name), str(comm_type), layout, root, max_flows, job.job, bucket)
        except NotApplicable:
            fallbacks += bucket.height
            name = default_algorithm(
                str(comm_type), len(layout.ranks), layout.host_count, layout.max_per_host, 0, model
            )
            if name is None:
                continue
            template = _template(str(name), str(comm_type), layout, root, max_flows, job.job, bucket)
        ids = bucket["collective_id"].to_numpy()
        _check_budget(result, template.size * len(ids), max_flows, job.job, bucket)
        sizes = bucket["size"].to_numpy().astype(np.int64)
        per_member = member_bytes(int(group), ids, sizes)
        stamped = stamp(template, ids, sizes, per_member, result.flow_count)
        _add(result, stamped, layout.ranks, str(name))
        for cid in ids.tolist():
            result.algorithm[cid] = str(name)
        if progress:
            progress(len(ids))
    if fallbacks:
        result.notes.append(
            f"job {job.job}: {fallbacks} collective(s) kept their default algorithm: {algorithm} does not serve them"
        )
    _uneven(job, colls.filter(uneven), groups, result, max_flows)
    _point_to_point(job, colls.filter(pl.col("group") < 0), result, max_flows)
    return result


def _choose(
    job: JobCollectives, colls: pl.DataFrame, groups: list[GroupLayout], model: NetworkModel, forced: str, r: Any
) -> pl.DataFrame:
    import polars as pl

    names = []
    for row in colls.select("group", "comm_type", "size").iter_rows():
        layout = groups[row[0]]
        if forced != "auto":
            names.append(forced)
            continue
        names.append(
            default_algorithm(row[1], len(layout.ranks), layout.host_count, layout.max_per_host, row[2], model) or ""
        )
    return colls.with_columns(algorithm=pl.Series(names, dtype=pl.String)).filter(pl.col("algorithm") != "")


def _template(name: str, comm_type: str, layout: GroupLayout, root: int, max_flows: int, job: str, bucket: Any) -> Any:
    n = len(layout.ranks)
    estimate = _estimate(name, comm_type, n)
    if estimate > max_flows:
        first = bucket.row(0, named=True)
        raise InputError(
            f"job {job}: {comm_type} over {n} ranks ({first['op_name']}, collective {first['collective_id']}) would "
            f"need about {estimate:,} transfers with {name}, past the limit of {max_flows:,} (raise --max-flows)"
        )
    return _cached_template(name, comm_type, layout, root)


def _cached_template(name: str, comm_type: str, layout: GroupLayout, root: int) -> Any:
    key = (name, comm_type, layout.hosts.tobytes(), root)
    cached = _CACHE.get(key)
    if cached is None:
        cached = algorithms.template(name, comm_type, layout.hosts, root)
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = cached
    return cached


_CACHE: dict[tuple[Any, ...], Any] = {}


def _estimate(name: str, comm_type: str, n: int) -> int:
    """An upper bound of transfers plus dependency entries of one collective, before building it."""
    if name == "direct":
        return n * n * (n + 1) if comm_type == "ALL_REDUCE" else n * n
    if name == "ring":
        return 4 * n * n
    return 8 * n * max(n.bit_length(), 1) + 8 * n


def _check_budget(result: Decomposition, more: int, max_flows: int, job: str, bucket: Any) -> None:
    if result.flow_count + more > max_flows:
        first = bucket.row(0, named=True)
        raise InputError(
            f"job {job}: the replay passes {max_flows:,} transfers at {first['comm_type']} {first['op_name']} "
            f"(collective {first['collective_id']}); raise --max-flows or replay fewer collectives"
        )


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
    job: JobCollectives, colls: pl.DataFrame, groups: list[GroupLayout], result: Decomposition, cap: int
) -> None:
    """All-to-allv: one transfer per non-zero entry of the recorded split matrix (bytes)."""
    import numpy as np

    if not colls.height:
        return
    parts = job.participants.filter(job.participants["collective_id"].is_in(colls["collective_id"].implode()))
    by_coll = {int(k[0]): v for k, v in parts.partition_by("collective_id", as_dict=True).items()}
    issues: dict[str, int] = {}
    for row in colls.iter_rows(named=True):
        layout = groups[row["group"]]
        n = len(layout.ranks)
        _check_budget(result, n * n, cap, job.job, colls.filter(colls["collective_id"] == row["collective_id"]))
        matrix = _split_matrix(by_coll.get(row["collective_id"]), layout, issues)
        if matrix is None:  # no usable splits at all: an even all-to-all of the recorded sizes
            _count(issues, "no usable split lists: replayed as an even all-to-all")
            template = _cached_template("direct", "ALL_TO_ALL", layout, 0)
            ids = np.array([row["collective_id"]], dtype=np.int64)
            sizes = np.array([row["size"]], dtype=np.int64)
            stamped = stamp(
                template, ids, sizes, _member_bytes(job, groups)(row["group"], ids, sizes), result.flow_count
            )
        else:
            src, dst = np.nonzero(matrix > 0)
            keep = src != dst
            src, dst = src[keep], dst[keep]
            count = len(src)
            stamped = Stamped(
                collective=np.full(count, row["collective_id"], dtype=np.int64),
                step=np.zeros(count, dtype=np.int32),
                src=src.astype(np.int32),
                dst=dst.astype(np.int32),
                bytes=matrix[src, dst].astype(np.int64),
                dep_ptr=np.zeros(count + 1, dtype=np.int64),
                dep_idx=np.zeros(0, dtype=np.int64),
            )
        _add(result, stamped, layout.ranks, "direct")
        result.algorithm[row["collective_id"]] = "direct"
    for issue, count in issues.items():
        result.notes.append(f"job {job.job}: all-to-allv: {issue} ({count} case(s))")


def _split_matrix(parts: pl.DataFrame | None, layout: GroupLayout, issues: dict[str, int]) -> np.ndarray | None:
    """Bytes from position p to position q (-1 where nothing says); None when no row has usable splits."""
    import numpy as np

    if parts is None:
        return None
    n = len(layout.ranks)
    matrix = np.full((n, n), -1, dtype=np.int64)
    member_order = layout.position_of_member  # group index -> position
    known = False
    received: list[tuple[int, np.ndarray]] = []
    for row in parts.iter_rows(named=True):
        position = int(layout.positions(np.array([row["rank"]]))[0])
        elem = _element_bytes(row)
        for column, target in (("in_splits", "send"), ("out_splits", "recv")):
            splits = row[column]
            if splits is None:
                continue
            if len(splits) != n or elem is None or any(s is None or s < 0 for s in splits):
                _count(issues, f"{column} unusable (length != group size, negative, or no element size)")
                continue
            values = np.zeros(n, dtype=np.int64)
            values[member_order] = np.array(splits, dtype=np.int64) * elem
            if target == "send":
                matrix[position, :] = values
                known = True
            else:
                received.append((position, values))
    for position, values in received:  # a receiver's out_splits fill what no sender said
        sent_to = matrix[:, position]
        unknown = sent_to < 0
        if (~unknown & (sent_to != values)).any():
            _count(issues, "a sender's in_splits and its receiver's out_splits disagree: the sender's are used")
        sent_to[unknown] = values[unknown]
        known = known or bool(unknown.any())
    if not known:
        return None
    if (matrix < 0).any():
        _count(issues, "pairs between ranks without trace rows are unknown and left out")
    return matrix


def _count(issues: dict[str, int], issue: str) -> None:
    issues[issue] = issues.get(issue, 0) + 1


def _element_bytes(row: dict[str, Any]) -> int | None:
    size = dtype_bytes(row["dtype"])
    if size:
        return size
    splits = row["in_splits"] or row["out_splits"]
    total = sum(s for s in splits or [] if s is not None and s > 0)
    if row["in_bytes"] and total and row["in_bytes"] % total == 0:
        return row["in_bytes"] // total
    return None


def _point_to_point(job: JobCollectives, colls: pl.DataFrame, result: Decomposition, cap: int) -> None:
    import numpy as np

    if not colls.height:
        return
    _check_budget(result, colls.height, cap, job.job, colls)
    count = colls.height
    stamped = Stamped(
        collective=colls["collective_id"].to_numpy().astype(np.int64),
        step=np.zeros(count, dtype=np.int32),
        src=np.zeros(count, dtype=np.int32),
        dst=np.ones(count, dtype=np.int32),
        bytes=colls["size"].to_numpy().astype(np.int64),
        dep_ptr=np.zeros(count + 1, dtype=np.int64),
        dep_idx=np.zeros(0, dtype=np.int64),
    )
    # Positions 0 and 1 of a pair are its sender and receiver: keep the global ranks per flow.
    result.flows.append(stamped)
    result.rank_of.append(np.stack([colls["src"].to_numpy(), colls["dst"].to_numpy()], axis=1).astype(np.int64))
    result.algorithm_of.append("p2p")
    result.flow_count += count
    for cid in colls["collective_id"].to_list():
        result.algorithm[cid] = "p2p"
