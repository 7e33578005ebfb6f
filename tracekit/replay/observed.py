"""What NCCL sent beside what the replay says it sends: the job's observed transfers (NCCL
Inspector's proxy_op records, table observed_transfers) against the replay's network flows, per
operation, rank, direction, peer and channel (queries/replay/observed_vs_replay.sql).

An observed peer is a global rank when its communicator is the file's largest; else it is the
communicator's rank, which becomes a global one through the replay's members of that communicator
(process_groups.ranks, or the ranks seen calling on it, in rank order: the order in which
PyTorch's new_group ranks a subgroup's members); a record whose communicator the replay does not
know keeps a null peer and is counted in a note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.replay.result import Replay

# The columns of the replay's `observed` table (OUT/replay.duckdb).
OBSERVED_COLUMNS = ("rank", "pg_name", "parent_type", "parent_op", "parent_seq", "channel", "peer", "direction",
                    "bytes", "steps_dropped")  # fmt: skip
# Within this share of the observed bytes a cell agrees.
AGREEMENT = 0.01


def observed_schema() -> pl.Schema:
    """The `observed` table's columns, typed as schemas/tables.toml declares observed_transfers'."""
    import polars as pl

    from tracekit.schema import arrow_schema

    declared = arrow_schema("observed_transfers")
    return pl.DataFrame(declared.empty_table().select(list(OBSERVED_COLUMNS))).schema


def load_observed(
    ds: TraceDataset, job: str, groups: list[tuple[int, ...]], group_names: list[str | None], notes: list[str]
) -> pl.DataFrame:
    """Job `job`'s observed transfers with global peers (module docstring); a note for those left
    without one."""
    import polars as pl

    rows = ds.sql(
        f"select {', '.join(OBSERVED_COLUMNS)}, list_contains(inferred, 'peer') as local_peer "
        "from observed_transfers where job_id = ? order by rank, trace_id, record_id",
        [job],
    ).pl()
    if not rows.height:
        return pl.DataFrame(schema=observed_schema())
    members = {name: ranks for name, ranks in zip(group_names, groups, strict=True) if name is not None}
    local = rows.filter(pl.col("local_peer").fill_null(False))
    mapping = pl.DataFrame(
        [(name, i, rank) for name in local["pg_name"].drop_nulls().unique().to_list() for i, rank in
         enumerate(members.get(name, ()))],
        schema={"pg_name": pl.String, "_local": pl.Int32, "_global": pl.Int32}, orient="row",
    )  # fmt: skip
    rows = rows.join(mapping, left_on=["pg_name", "peer"], right_on=["pg_name", "_local"], how="left")
    peer = pl.when(pl.col("local_peer").fill_null(False)).then(pl.col("_global")).otherwise(pl.col("peer"))
    unplaced = rows.filter(pl.col("local_peer").fill_null(False) & pl.col("_global").is_null()).height
    if unplaced:
        notes.append(
            f"job {job}: {unplaced:,} observed transfers name a peer by its rank in a communicator the replay "
            "does not know the members of: compared with a null peer"
        )
    return rows.with_columns(peer.cast(pl.Int32).alias("peer")).select(OBSERVED_COLUMNS)


def compare(result: Replay) -> pl.DataFrame:
    """queries/replay/observed_vs_replay.sql over the replay's flows, collectives and observed transfers."""
    from tracekit.store import connect
    from tracekit.store.queries import load_query

    con = connect.memory()
    try:
        con.register("flows", result.flows.select("collective_id", "src_rank", "dst_rank", "channel", "link",
                                                  "bytes").to_arrow())  # fmt: skip
        con.register("collectives", result.collectives.select("collective_id", "comm_type", "op_name", "pg_name",
                                                              "match_key").to_arrow())  # fmt: skip
        con.register("observed", result.observed.to_arrow())
        return con.sql(load_query("observed_vs_replay", folder="replay")).pl()
    finally:
        con.close()


@dataclass(frozen=True)
class Agreement:
    """How far the replay's per-(operation, rank, direction, peer, channel) bytes are from NCCL's."""

    records: int  # observed transfers
    operations: int  # operations they belong to that the replay holds
    unmatched: int  # observed transfers of no operation the replay holds
    cells: int  # rows of the comparison with an operation
    agreeing: int  # of those, within AGREEMENT of the observed bytes (and 0 where 0 was observed)
    observed_bytes: int
    replay_bytes: int

    def lines(self, job: str, table: pl.DataFrame, shown: int = 5) -> list[str]:
        """The comparison in a few lines: the totals, then the largest differences."""
        import polars as pl

        head = (
            f"job {job}: {_count(self.records, 'observed transfer')} of {_count(self.operations, 'operation')}, "
            f"{self.observed_bytes:,} bytes; the replay's {self.replay_bytes:,} for the same ranks, peers and "
            f"channels: {self.agreeing:,} of {self.cells:,} (operation, rank, direction, peer, channel) agree "
            f"within {AGREEMENT:.0%}"
        )
        lines = [head]
        if self.unmatched:
            lines.append(
                f"{_count(self.unmatched, 'observed transfer')} of no operation the replay holds (Inspector names "
                "a collective by kind and sequence number only, and several of that number were recorded): left out"
            )
        matched = table.filter(pl.col("replay_bytes").is_not_null())
        differing = matched.filter(~_agrees()).sort(pl.col("difference").abs(), descending=True).head(shown)
        for row in differing.iter_rows(named=True):
            name = row["op_name"] if row["seq"] is None else f"{row['op_name']} #{row['seq']}"
            lines.append(
                f"{name} on {row['pg_name']}: rank {row['rank']} {row['direction']} "
                f"{'to' if row['direction'] == 'send' else 'from'} {_text(row['peer'])} channel "
                f"{_text(row['channel'])}: observed {_text(row['observed_bytes'])}, replay "
                f"{_text(row['replay_bytes'])} bytes"
            )
        return lines


def _count(n: int, thing: str) -> str:
    return f"{n:,} {thing}{'' if n == 1 else 's'}"


def _text(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _agrees() -> pl.Expr:
    import polars as pl

    observed, replay = pl.col("observed_bytes"), pl.col("replay_bytes")
    return replay.is_not_null() & ((replay - observed).abs() <= AGREEMENT * observed)


def agreement(result: Replay, table: pl.DataFrame) -> Agreement:
    import polars as pl

    matched = table.filter(pl.col("replay_bytes").is_not_null())
    operations = matched.select("collective_id", "pg_name", "op_name").unique().height
    unmatched_bytes = table.filter(pl.col("replay_bytes").is_null())
    return Agreement(
        records=result.observed.height,
        operations=operations,
        unmatched=_records_of(result.observed, unmatched_bytes),
        cells=matched.height,
        agreeing=matched.filter(_agrees()).height,
        observed_bytes=int(matched["observed_bytes"].sum()),
        replay_bytes=int(matched["replay_bytes"].sum()),
    )


def _records_of(observed: pl.DataFrame, unmatched: pl.DataFrame) -> int:
    """The observed transfers behind the comparison's rows of no operation."""
    import polars as pl

    if not unmatched.height:
        return 0
    keys = unmatched.select("pg_name", "rank", "direction", "peer", "channel").unique()
    coll = observed.filter(pl.col("parent_type") != "p2p")
    return coll.join(keys, on=["pg_name", "rank", "direction", "peer", "channel"], nulls_equal=True).height
