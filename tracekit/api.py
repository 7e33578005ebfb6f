"""The notebook-facing API: `tracekit.open(DATASET)` gives every table as a DuckDB relation
(`ds.collectives`, `ds.table("ops")`) or a polars frame (`ds.frame("collectives")`), and runs SQL
with bound parameters (`ds.sql("select ... where job_id = ?", [job])`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.dataset import CollectiveTotal, Dataset, DatasetSummary, summarize
from tracekit.errors import DatasetError
from tracekit.schema import TABLES

if TYPE_CHECKING:
    import duckdb
    import polars as pl

__all__ = ["CollectiveTotal", "DatasetSummary", "TraceDataset", "open"]


class TraceDataset:
    """A read-only view of an ingested dataset."""

    def __init__(self, path: str | Path) -> None:
        self.dataset = Dataset(Path(path))
        if not self.dataset.exists():
            raise DatasetError(f"{path}: not a tracekit dataset (no {self.dataset.db_path.name})")
        self.con: duckdb.DuckDBPyConnection = self.dataset.connect(read_only=True)

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        """Table `name` (traces, jobs, process_groups, collectives, ops, runs) as a DuckDB relation."""
        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables are {', '.join(TABLES)}")
        return self.con.table(name)

    def frame(self, name: str) -> pl.DataFrame:
        """Table `name` as a polars DataFrame."""
        return self.table(name).pl()

    def sql(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> duckdb.DuckDBPyRelation:
        """Run SQL over the dataset's tables; user values go in `params`, never into the text."""
        if params is None:
            return self.con.sql(query)
        return self.con.sql(query, params=params)

    def query(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of the shipped query queries/<name>.sql, as dicts (see tracekit.queries)."""
        from tracekit.queries import load_query

        relation = self.sql(load_query(name), params or None)
        return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]

    def summary(self) -> DatasetSummary:
        """Jobs, ranks, traces ok and with errors, collectives by comm_type (count and in_bytes,
        most frequent first), and the one-line error of every file that failed."""
        return summarize(self.con)

    def __getattr__(self, name: str) -> duckdb.DuckDBPyRelation:
        if name in TABLES:
            return self.table(name)
        raise AttributeError(name)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> TraceDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open(path: str | Path) -> TraceDataset:  # noqa: A001 - mirrors builtins.open on purpose
    """Open the dataset that `tracekit ingest` wrote at `path`."""
    return TraceDataset(path)
