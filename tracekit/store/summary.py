"""The headline numbers of a dataset: what `tracekit info`, `summary()` and the end of an ingest print."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

    from tracekit.store.dataset import Dataset


@dataclass
class CollectiveTotal:
    """Collectives of one comm_type in the whole dataset."""

    comm_type: str | None
    count: int
    in_bytes: int | None


@dataclass
class DatasetSummary:
    """The headline numbers of a dataset: what `tracekit info` and the end of an ingest print."""

    jobs: int
    ranks: int
    traces_ok: int
    traces_error: int
    collectives: list[CollectiveTotal]
    errors: list[str]
    missing: list[str]  # a line per job lacking ranks: `job J: ranks 1–7 of 8 missing`


def missing_note(job_id: str, count: int, ranges: str | None, world_size: int | None) -> str:
    """The warning a job lacking ranks gets: `job J: ranks 1–7 of 8 missing`."""
    noun = "rank" if count == 1 else "ranks"
    return f"job {job_id}: {noun} {(ranges or str(count)).replace('-', '–')} of {world_size} missing"


# Collectives by comm_type, from the rollup (the same sums, without reading every collective: 2.6 s
# of adding one job to 30,000). A reader of an older format is shown the rollup computed.
_COLLECTIVE_TOTALS = (
    "select comm_type, sum(calls)::BIGINT, sum(in_bytes::HUGEINT * calls) from collective_sizes "
    "group by comm_type order by 2 desc, 1"
)


def summarize(con: duckdb.DuckDBPyConnection) -> DatasetSummary:
    """Jobs, ranks with a readable trace, traces ok and failed, collectives by comm_type (most
    frequent first, with their input bytes), the one-line error of every failed file, and a line per
    job lacking ranks."""
    one = con.execute(
        "select (select count(*) from jobs), (select count(*) from (select distinct job_id, rank "
        "from traces where status = 'ok')), (select count(*) from traces where status = 'ok'), "
        "(select count(*) from traces where status = 'error')"
    ).fetchone()
    assert one is not None
    by_type = con.execute(_COLLECTIVE_TOTALS).fetchall()
    errors = con.execute(
        "select error from traces where status = 'error' order by job_id, rank nulls last, path"
    ).fetchall()
    missing = con.execute(
        "select job_id, ranks_missing, missing_ranks, world_size from jobs where ranks_missing > 0 order by job_id"
    ).fetchall()
    return DatasetSummary(
        jobs=one[0],
        ranks=one[1],
        traces_ok=one[2],
        traces_error=one[3],
        collectives=[CollectiveTotal(t, n, None if b is None else int(b)) for t, n, b in by_type],
        errors=[e[0] for e in errors],
        missing=[missing_note(*row) for row in missing],
    )


def dataset_summary(dataset: Dataset) -> DatasetSummary | None:
    """The summary of the committed dataset at `dataset`; None when there is none yet."""
    if not dataset.exists():
        return None
    with dataset.connect() as con:
        return summarize(con)
