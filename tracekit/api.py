"""The notebook-facing API: `tracekit.open(DATASET)` gives every table as a DuckDB relation
(`ds.collectives`, `ds.table("ops")`) or a polars frame (`ds.frame("collectives")`), and runs SQL
with bound parameters (`ds.sql("select ... where job_id = ?", [job])`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit import interrupts
from tracekit.errors import DatasetError, OutputError
from tracekit.schema import TABLES
from tracekit.scope import Scope
from tracekit.store import connect
from tracekit.store.dataset import Dataset
from tracekit.store.summary import CollectiveTotal, DatasetSummary, summarize

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from tracekit.store.repair import Repair
    from tracekit.store.verify import Verdict

__all__ = [
    "CollectiveTotal",
    "DatasetSummary",
    "Scope",
    "ScopedDataset",
    "TraceDataset",
    "open",
    "repair",
    "verify",
    "write_parquet",
]


class TraceDataset:
    """A read-only view of an ingested dataset."""

    def __init__(self, path: str | Path) -> None:
        self.dataset = Dataset(Path(path))
        if not self.dataset.exists():
            raise DatasetError(f"{path}: not a tracekit dataset (no {self.dataset.db_path.name})")
        self._con: duckdb.DuckDBPyConnection | None = None
        self._stamp: tuple[int, ...] | None = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The connection to the dataset as last committed, with every shipped query on it by name.

        Ingest commits by renaming a new DuckDB file over the old one, and an open connection keeps
        reading the file it opened: when the file has changed since, a new connection is opened (the
        old one stays open for the relations that still use it). A dataset of an older format is
        shown as this one (tracekit.store.migrations.present).
        """
        stamp = self._file_stamp()  # before connecting: a commit in between makes the next call reconnect
        if self._con is None or stamp != self._stamp:
            from tracekit.store.queries import catalog_statements

            con = self._connect()
            # Temporary, so they shadow the copies stored in the file, which may be older.
            for statement in catalog_statements(temp=True):
                con.execute(statement)
            self._con, self._stamp = con, stamp
        return self._con

    def _connect(self) -> duckdb.DuckDBPyConnection:
        from tracekit.store import connect

        con = connect.memory()  # a database of its own, so that a commit's new file is seen
        interrupts.watch(con)  # a Ctrl-C during a command stops its statement at once
        try:
            self.dataset.attach_read_only(con, "dataset")
        except BaseException:
            con.close()
            raise
        con.execute("USE dataset")
        return con

    def _file_stamp(self) -> tuple[int, ...]:
        try:
            st = os.stat(self.dataset.db_path)
        except OSError as exc:
            raise DatasetError(f"{self.dataset.root}: cannot read the dataset ({exc.strerror})") from exc
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

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

    def query(self, name: str, params: dict[str, Any] | None = None) -> duckdb.DuckDBPyRelation:
        """The shipped query queries/<name>.sql as a DuckDB relation: `.pl()` gives a polars frame,
        `.fetchall()` rows; it can be filtered, joined and queried further.

        `params` binds the parameters its header declares, e.g. {"start": "2024-01-01", "period_months": 3},
        each checked against its declared type and range first (InputError naming the parameter).

        The relation runs when fetched. Its sums are checked casts to 64 bits, never wrapped: on values
        past them (a hand-edited dataset) the fetch raises DuckDB's ConversionException; a fetch inside
        `with ds.computing(name):` gets a one-line DatasetError instead, as the CLI prints.
        """
        from tracekit.store.queries import query_call

        sql, bound = query_call(name, params)
        return self.con.sql(sql, params=bound or None)

    @contextmanager
    def computing(self, name: str) -> Iterator[None]:
        """Around computing query `name`'s rows (a relation runs when fetched): a DuckDB error then (a
        value of the dataset beyond a query's checked 64-bit cast, say) is a DatasetError naming the
        query and the dataset, one line."""
        import duckdb

        try:
            yield
        except duckdb.Error as exc:
            raise DatasetError(
                f"{self.dataset.root}: query {name} cannot be computed on this dataset's values "
                f"({connect.first_line(exc)})"
            ) from exc

    def summary(self) -> DatasetSummary:
        """Jobs, ranks, traces ok and with errors, collectives by comm_type (count and in_bytes,
        most frequent first), and the one-line error of every file that failed."""
        return summarize(self.con)

    def __getattr__(self, name: str) -> duckdb.DuckDBPyRelation:
        if name in TABLES:
            return self.table(name)
        raise AttributeError(name)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    def __enter__(self) -> TraceDataset:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.close()
        # DuckDB checks a block of the file when a query first reads it: a damaged one can surface
        # in any query, and is named here in one line.
        if exc is not None and connect.damaged(exc):
            raise self.dataset.damaged(exc) from exc


def write_parquet(relation: duckdb.DuckDBPyRelation, path: str | Path) -> None:
    """A relation's rows into a Parquet file at `path`; OutputError naming it when it cannot be written."""
    import duckdb

    try:
        relation.write_parquet(str(path))
    except duckdb.IOException as exc:  # IO Error: Cannot open file "PATH": Permission denied
        reason = str(exc).strip().splitlines()[0].rpartition('": ')[2] or type(exc).__name__
        raise OutputError(f"{path}: cannot write ({reason})") from exc


class ScopedDataset(TraceDataset):
    """A dataset seen through a scope (tracekit.scope.Scope): its tables hold only the selected jobs'
    rows (`runs` whole), and so does every query on them."""

    def __init__(self, path: str | Path, scope: Scope) -> None:
        self.scope = scope
        super().__init__(path)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        from tracekit.store import connect

        con = connect.memory()
        interrupts.watch(con)
        # Where each table is read from: the file's, or an older format's stand-in (named unscoped_*).
        source = self.dataset.attach_read_only(con, "source", prefix="unscoped_")
        con.execute(
            "CREATE TEMP TABLE scope_jobs AS SELECT job_id FROM source.main.jobs "
            "WHERE (len($jobs) = 0 OR list_contains($jobs, job_id)) "
            "AND (len($labels) = 0 OR list_contains($labels, label) "
            "     OR list_contains($labels, split_part(label, ':', 1))) "
            "AND ($since IS NULL OR started_at >= CAST($since AS TIMESTAMPTZ)) "
            "AND ($until IS NULL OR started_at < CAST($until AS TIMESTAMPTZ))",
            self.scope.parameters(),
        )
        for table in TABLES:
            whole = table in ("runs", "written_files")  # rows of no job
            where = "" if whole else " WHERE job_id IN (SELECT job_id FROM temp.scope_jobs)"
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {source[table]}{where}")
        return con


def open(path: str | Path, scope: Scope | None = None) -> TraceDataset:  # noqa: A001 - mirrors builtins.open
    """Open the dataset that `tracekit ingest` wrote at `path`; with `scope`, only the jobs it selects."""
    if scope is None or scope.is_everything():
        return TraceDataset(path)
    return ScopedDataset(path, scope)


def verify(path: str | Path) -> Verdict:
    """Compare the two copies of the dataset at `path` (its DuckDB file and its Parquet files), table
    by table; never writes. DatasetError where there is no dataset at all."""
    from tracekit.store.verify import verify as compare

    dataset = Dataset(Path(path))
    _must_exist(dataset)
    return compare(dataset)


def repair(path: str | Path) -> Repair:
    """Rebuild the damaged copy of the dataset at `path` from the whole one (tracekit.store.repair)."""
    from tracekit.store.repair import repair as rebuild

    dataset = Dataset(Path(path))
    _must_exist(dataset)
    return rebuild(dataset)


def _must_exist(dataset: Dataset) -> None:
    from tracekit.store.parquet_files import table_files

    if not dataset.root.is_dir() or not (dataset.exists() or table_files(dataset.root, "runs")):
        raise DatasetError(f"{dataset.root}: no dataset here (run `tracekit ingest ... --out {dataset.root}` first)")
