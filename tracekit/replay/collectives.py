"""From the per-rank `collectives` rows of one job to logical collectives (one per operation).

How participants are found:

* Groups: a collective's members are the global ranks of its process group
  (`process_groups.ranks`, in group order; an empty list means the whole world, unless the group's
  size says it is smaller: then the group is not described). A row without a
  `pg_name` ran in the default group, the whole world (PyTorch records no name for it in some
  traces: this is a guess, counted in the notes). A `pg_name` the job's process_groups do not
  describe is given the ranks seen issuing collectives on it.
* Matching: the rows of the same operation on different ranks share (pg_name, seq) where the trace
  records `seq` (PyTorch's per-group sequence number); otherwise the k-th collective a rank issued
  in a group (by start time, then op_id) is matched with the k-th of every other member. Rows must
  also agree on comm_type; a row that disagrees forms its own (partial) collective.
* Point-to-point: the k-th SEND from a to b is matched with the k-th RECV at b from a; either side
  alone is enough.
* Partial traces: a collective seen on only some members still has all its members (the group
  says who they are); the bytes of members without a row are taken as the collective's size S, the
  largest in_bytes seen. Notes count such collectives.

Every value read from the dataset is bounded before it sizes anything: world size, group sizes and
ranks must be below MAX_RANKS, sizes below MAX_BYTES; a bad row is skipped with a note naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracekit.errors import InputError
from tracekit.replay.placement import MAX_RANKS
from tracekit.schema import COMM_TYPE_TABLE, ONE_SIDED

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset

# A collective larger than 2^50 bytes (1 PiB) is a corrupt value, not a message; so is a transfer.
MAX_BYTES = 1 << 50
# The bytes all of a job's transfers move (each counted as often as it occurs): below 2^62 (4 EiB), every
# total, matrix cell and indicator summed from them fits int64 with room to spare.
MAX_TOTAL_BYTES = 1 << 62
P2P = ("SEND", "RECV")
# The comm_types of the data model (tracekit.schema.COMM_TYPE_TABLE) the replay models: a row of another
# one is skipped, a one-sided put or signal (no receive to match, no algorithm) with a note of its own.
COMM_TYPES = tuple(c.name for c in COMM_TYPE_TABLE if c.name not in ONE_SIDED)
_COLUMNS = (
    "rank, trace_id, op_id, op_name, comm_type, is_uneven, pg_name, group_size, peer, dtype, in_elems, "
    "in_bytes, in_splits, out_splits, seq, start_us, duration_us"
)
# With the algorithm and protocol NCCL recorded running each row (NCCL Inspector: observed_collectives),
# for `--algorithm observed`: columns of the rows and of the logical collectives.
RECORDED = ("nccl_algorithm", "nccl_protocol")
_JOINED = (
    ", ".join(f"c.{name.strip()}" for name in _COLUMNS.split(","))
    + ", m.algorithm as nccl_algorithm, m.protocol as nccl_protocol from collectives c left join ("
    # one row per record whatever the table holds (a damaged copy may repeat one), so no row is doubled
    "select job_id, rank, trace_id, record_id, any_value(algorithm) as algorithm, any_value(protocol) as protocol "
    "from observed_collectives group by job_id, rank, trace_id, record_id"
    ") m on m.job_id = c.job_id and m.rank = c.rank and m.trace_id = c.trace_id and m.record_id = c.op_id"
)


@dataclass
class JobCollectives:
    """One job's logical collectives and who took part in each."""

    job: str
    world_size: int
    groups: list[tuple[int, ...]]  # group index -> global ranks in group order
    group_names: list[str | None]  # the pg_name of each group (None: the default, whole world)
    collectives: pl.DataFrame  # one row per logical collective (see logical_collectives)
    participants: pl.DataFrame  # one row per collectives row matched: collective_id, rank, trace_id, op_id, ...
    notes: list[str] = field(default_factory=list)
    rows_skipped: int = 0  # collectives rows of the job left out as invalid (the notes say which)


def load_job(ds: TraceDataset, job: str) -> JobCollectives:
    """Read job `job`'s collectives, process groups and world size through the API and match them."""
    jobs = ds.sql("select world_size from jobs where job_id = ?", [job]).fetchall()
    if not jobs:
        known = [r[0] for r in ds.sql("select job_id from jobs order by 1 limit 20").fetchall()]
        raise InputError(f"no job {job!r} in the dataset; jobs: {', '.join(known)}")
    rows = ds.sql(f"select {_JOINED} where c.job_id = ?", [job]).pl()
    groups = ds.sql("select pg_name, group_size, ranks from process_groups where job_id = ?", [job]).pl()
    return match_job(job, jobs[0][0], rows, groups)


def load_jobs(ds: TraceDataset, jobs: list[str]) -> Iterator[tuple[str, JobCollectives | Exception]]:
    """Each of `jobs` (all in the dataset) as load_job reads it, from three queries for them all; a job
    that cannot be matched gives its InputError instead (or, a bug, the exception it raised)."""

    world = dict(ds.sql("select job_id, world_size from jobs where job_id in (select unnest(?))", [jobs]).fetchall())
    rows = ds.sql(f"select c.job_id, {_JOINED} where c.job_id in (select unnest(?))", [jobs]).pl()
    groups = ds.sql(
        "select job_id, pg_name, group_size, ranks from process_groups where job_id in (select unnest(?))", [jobs]
    ).pl()
    rows_of = rows.partition_by("job_id", as_dict=True, include_key=False)
    groups_of = groups.partition_by("job_id", as_dict=True, include_key=False)
    for job in jobs:
        try:
            yield job, match_job(
                job, world.get(job), rows_of.get((job,), rows.clear().drop("job_id")),
                groups_of.get((job,), groups.clear().drop("job_id")),
            )  # fmt: skip
        except Exception as exc:  # the caller tells an InputError from a bug
            yield job, exc


def match_job(job: str, world_size: int | None, rows: pl.DataFrame, groups: pl.DataFrame) -> JobCollectives:
    """A job's collectives rows (_COLUMNS) and process groups matched into logical collectives."""
    import polars as pl

    notes: list[str] = []
    recorded = rows.height
    rows = rows.with_columns(pl.lit(None, pl.String).alias(c) for c in RECORDED if c not in rows.columns)
    rows = _valid_rows(job, rows, notes)
    world = _world_size(job, world_size, rows, notes)
    named, world = _named_groups(job, groups, world, notes)
    matched = _match(job, rows, named, world, notes)
    matched.rows_skipped = recorded - rows.height
    return matched


def _valid_rows(job: str, rows: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    import polars as pl

    bad_rank = pl.col("rank").is_null() | (pl.col("rank") < 0) | (pl.col("rank") >= MAX_RANKS)
    bad_size = pl.col("in_bytes").is_not_null() & ((pl.col("in_bytes") < 0) | (pl.col("in_bytes") > MAX_BYTES))
    bad_peer = pl.col("comm_type").is_in(P2P) & (
        pl.col("peer").is_null() | (pl.col("peer") < 0) | (pl.col("peer") >= MAX_RANKS)
    )
    one_sided = pl.col("comm_type").is_in(ONE_SIDED)
    bad_type = pl.col("comm_type").is_not_null() & ~pl.col("comm_type").is_in(COMM_TYPES) & ~one_sided
    for expr, what in (
        (bad_rank, f"without a rank in 0..{MAX_RANKS - 1}"),
        (bad_size, f"with in_bytes outside 0..{MAX_BYTES}"),
        (bad_peer, "(send/recv) without a valid peer rank"),
        (one_sided, "of one-sided puts or signals, which the replay does not model"),
        (bad_type, "with a comm_type the replay does not know"),
    ):
        bad = rows.filter(expr)
        if bad.height:
            first = bad.row(0, named=True)
            kind = f" {first['comm_type']!r}" if expr is bad_type or expr is one_sided else ""
            notes.append(
                f"job {job}: skipped {bad.height} collectives row(s) {what}, e.g.{kind} {first['op_name']} "
                f"(trace {first['trace_id']}, op {first['op_id']})"
            )
            rows = rows.filter(~expr)
    return rows.filter(pl.col("comm_type").is_not_null())


def _world_size(job: str, recorded: int | None, rows: pl.DataFrame, notes: list[str]) -> int:
    import polars as pl

    seen = int(rows["rank"].max()) + 1 if rows.height else 0  # type: ignore[arg-type]
    # A peer means something on a send or recv only (checked there, _valid_rows); on any other row it
    # is never read, and must not size the world (2^31 - 1 on an all-reduce: 24 GB).
    peers = rows.filter(pl.col("comm_type").is_in(P2P))["peer"].drop_nulls()
    if peers.len():
        seen = max(seen, int(peers.max()) + 1)  # type: ignore[arg-type]
    if recorded is not None and not 0 < recorded <= MAX_RANKS:
        raise InputError(f"job {job}: world_size {recorded} is outside 1..{MAX_RANKS}")
    world = max(recorded or 0, seen)
    if recorded is None:
        notes.append(f"job {job}: world size not recorded; {world} from the ranks seen")
    elif seen > recorded:
        notes.append(f"job {job}: ranks up to {seen - 1} seen, beyond world_size {recorded}; world taken as {world}")
    return world


def _named_groups(
    job: str, groups: pl.DataFrame, world: int, notes: list[str]
) -> tuple[dict[str, tuple[int, ...]], int]:
    named: dict[str, tuple[int, ...]] = {}
    for row in groups.iter_rows(named=True):
        ranks = row["ranks"] or []
        if len(ranks) > MAX_RANKS or any(r is None or not 0 <= r < MAX_RANKS for r in ranks):
            notes.append(f"job {job}: process group {row['pg_name']!r} lists ranks outside 0..{MAX_RANKS - 1}; ignored")
            continue
        if len(set(ranks)) != len(ranks):
            notes.append(f"job {job}: process group {row['pg_name']!r} lists a rank twice; ignored")
            continue
        if ranks:
            world = max(world, max(ranks) + 1)
        named[row["pg_name"]] = tuple(ranks)  # empty: the whole world, resolved below
    # An empty list of a group smaller than the world names no members (NCCL Inspector gives a
    # communicator's size, not its ranks): such a group is not described.
    for row in groups.iter_rows(named=True):
        size = row["group_size"]
        if named.get(row["pg_name"]) == () and size is not None and 0 < size < world:
            del named[row["pg_name"]]
    return named, world


def _match(
    job: str, rows: pl.DataFrame, named: dict[str, tuple[int, ...]], world: int, notes: list[str]
) -> JobCollectives:
    import polars as pl

    whole = tuple(range(world))
    coll = rows.filter(~pl.col("comm_type").is_in(P2P))
    missing_pg = coll.filter(pl.col("pg_name").is_null()).height
    if missing_pg:
        notes.append(
            f"job {job}: {missing_pg} collectives row(s) name no process group; replayed over the whole world "
            f"({world} ranks)"
        )
    groups: list[tuple[int, ...]] = [whole]
    names: list[str | None] = [None]
    index: dict[str | None, int] = {None: 0}
    for name in coll["pg_name"].drop_nulls().unique().sort().to_list():
        ranks = named.get(name)
        if ranks is None:
            seen = tuple(sorted(coll.filter(pl.col("pg_name") == name)["rank"].unique().to_list()))
            ranks = whole if name == "0" else seen
            if name != "0":
                notes.append(
                    f"job {job}: process group {name!r} is not described; its members are the ranks seen {seen}"
                )
        ranks = ranks or whole
        if ranks == whole:
            index[name] = 0
            continue
        index[name] = len(groups)
        groups.append(ranks)
        names.append(name)
    group_of = pl.DataFrame(
        {"pg_name": list(index), "group": list(index.values())}, schema={"pg_name": pl.String, "group": pl.Int32}
    )
    coll = coll.join(group_of, on="pg_name", how="left", nulls_equal=True)
    coll = coll.with_columns(
        ordinal=pl.int_range(pl.len()).over(["rank", "group"], order_by=["start_us", "op_id"]),
    ).with_columns(
        key=pl.when(pl.col("seq").is_not_null())
        .then(pl.format("s{}", pl.col("seq")))
        .otherwise(pl.format("o{}", pl.col("ordinal"))),
        ordinal=pl.coalesce("seq", "ordinal"),
    )
    members = _membership_check(job, coll, groups, notes)
    coll = coll.filter(members)
    p2p = _p2p(rows)
    logical = _logical(coll, p2p, groups)
    parts = pl.concat(
        [
            coll.select("rank", "trace_id", "op_id", "group", "key", "comm_type"),
            p2p.select("rank", "trace_id", "op_id", "group", "key", "comm_type"),
        ]
    ).join(logical.select("collective_id", "group", "key", "comm_type"), on=["group", "key", "comm_type"])
    parts = parts.join(
        rows.select(
            "rank", "trace_id", "op_id", "in_bytes", "in_splits", "out_splits", "dtype", "in_elems", "start_us"
        ),
        on=["rank", "trace_id", "op_id"],
    )
    partial = logical.filter(pl.col("participants") < pl.col("n")).height
    if partial:
        notes.append(
            f"job {job}: {partial} of {logical.height} collectives were seen on only some of their members "
            "(partial traces); the others' bytes are taken as the collective's size"
        )
    return JobCollectives(job, world, groups, names, logical, parts, notes)


def _membership_check(job: str, coll: pl.DataFrame, groups: list[tuple[int, ...]], notes: list[str]) -> pl.Series:
    """A mask of the rows whose rank belongs to their group."""
    import polars as pl

    member_rows = [(g, r) for g, ranks in enumerate(groups) for r in ranks]
    table = pl.DataFrame(member_rows, schema={"group": pl.Int32, "rank": pl.Int32}, orient="row")
    flags = (
        coll.select("group", "rank")
        .join(table.with_columns(member=pl.lit(True)), on=["group", "rank"], how="left", maintain_order="left")
        .get_column("member")
        .fill_null(False)
    )
    outside = coll.filter(~flags)
    if outside.height:
        first = outside.row(0, named=True)
        notes.append(
            f"job {job}: skipped {outside.height} collectives row(s) whose rank is not in their process group, "
            f"e.g. rank {first['rank']} in {first['pg_name']!r}"
        )
    return flags


def _p2p(rows: pl.DataFrame) -> pl.DataFrame:
    """SEND and RECV rows keyed by (src, dst, k-th message): both sides share a key."""
    import polars as pl

    p2p = rows.filter(pl.col("comm_type").is_in(P2P)).with_columns(
        src=pl.when(pl.col("comm_type") == "SEND").then(pl.col("rank")).otherwise(pl.col("peer")),
        dst=pl.when(pl.col("comm_type") == "SEND").then(pl.col("peer")).otherwise(pl.col("rank")),
    )
    return p2p.with_columns(
        ordinal=pl.int_range(pl.len()).over(["comm_type", "src", "dst"], order_by=["start_us", "op_id"]),
        group=pl.lit(-1, dtype=pl.Int32),
    ).with_columns(
        key=pl.format("p{}-{}-{}", pl.col("src"), pl.col("dst"), pl.col("ordinal")),
        comm_type=pl.lit("SEND"),
    )


def _logical(coll: pl.DataFrame, p2p: pl.DataFrame, groups: list[tuple[int, ...]]) -> pl.DataFrame:
    import polars as pl

    sizes = pl.Series("n", [len(g) for g in groups], dtype=pl.Int32)
    agg = [
        pl.col("op_name").first(),
        pl.col("pg_name").first(),
        pl.col("rank").n_unique().cast(pl.Int32).alias("participants"),
        pl.col("in_bytes").max().alias("size"),
        pl.col("start_us").max().alias("start_us"),
        pl.col("duration_us").max().alias("duration_us"),
        pl.col("is_uneven").any().alias("is_uneven"),
        pl.col("ordinal").min().alias("order"),
        *(pl.col(c).drop_nulls().first().alias(c) for c in RECORDED),
    ]
    grouped = coll.group_by("group", "key", "comm_type").agg(*agg)
    grouped = grouped.join(
        pl.DataFrame({"group": range(len(groups)), "n": sizes}, schema_overrides={"group": pl.Int32}), on="group"
    )
    grouped = grouped.with_columns(src=pl.lit(None, dtype=pl.Int32), dst=pl.lit(None, dtype=pl.Int32))
    pairs = p2p.group_by("group", "key", "comm_type").agg(
        *agg, pl.col("src").first().cast(pl.Int32), pl.col("dst").first().cast(pl.Int32)
    )
    pairs = pairs.with_columns(n=pl.lit(2, dtype=pl.Int32))
    columns = ["group", "key", "comm_type", "op_name", "pg_name", "n", "participants", "size", "start_us"]
    columns += ["duration_us", "is_uneven", "src", "dst", "order", *RECORDED]
    logical = pl.concat([grouped.select(columns), pairs.select(columns)])
    logical = logical.sort(["start_us", "order", "group", "key"], nulls_last=True).with_row_index("collective_id")
    return logical.with_columns(pl.col("collective_id").cast(pl.Int64), pl.col("size").fill_null(0))
