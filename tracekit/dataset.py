"""A tracekit dataset on disk: Parquet for every table plus one DuckDB file, committed atomically.

Layout of DATASET/:
    tracekit.duckdb              every table, by name (opens in the DuckDB shell)
    traces.parquet, jobs.parquet, process_groups.parquet, runs.parquet     (rewritten per run)
    collectives/run-<id>.parquet, ops/run-<id>.parquet                     (one file added per run)

The DuckDB file holds its own copy of the data, so the dataset keeps working when the folder is
moved or copied (views over Parquet paths would not). A run prepares a complete new DuckDB file and
the new Parquet files in DATASET/.staging/, then replaces the DuckDB file with one rename: that is
the commit. The Parquet files are moved into place after it; a run interrupted before the rename
leaves the previous dataset whole, and one killed after it is finished by the next run (`recover`).
Ctrl-C (SIGINT) waits while the rename and the moves run, so it never splits them. The DuckDB
file is written in a storage format that the DuckDB 1.5 shell reads.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit import interrupts
from tracekit.errors import DatasetError
from tracekit.schema import TABLES, arrow_schema, table_from_rows

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

DB_NAME = "tracekit.duckdb"
# What `pip install duckdb-cli` (1.5.x) reads; DuckDB 2.x would otherwise write a newer format.
STORAGE_VERSION = "v1.5.0"
APPENDED_TABLES = ("collectives", "ops")
REWRITTEN_TABLES = ("traces", "jobs", "process_groups", "runs")
STAGING = ".staging"
_ORDER = {
    "collectives": "job_id, rank, trace_id, op_id",
    "ops": "job_id, rank, trace_id, op_id",
    "traces": "job_id, rank, path",
    "jobs": "job_id",
    "process_groups": "job_id, pg_name",
    "runs": "committed_at",
}


@dataclass
class RunChanges:
    """Everything one ingest run adds or replaces."""

    run_id: str
    traces: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    process_groups: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[pa.Table] = field(default_factory=list)
    staged_ops: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)


class Dataset:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # The run whose commit point this object passed: its staging folder must survive a failure
        # after that point, for `recover` to finish the moves.
        self.committed_run: str | None = None

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def staging_root(self) -> Path:
        return self.root / STAGING

    def exists(self) -> bool:
        return self.db_path.is_file()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the dataset's write lock; finish or discard an earlier interrupted run first."""
        if self.root.exists() and not self.root.is_dir():
            raise DatasetError(f"{self.root}: exists and is not a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = open(self.root / ".lock", "w")
        except OSError as exc:
            raise DatasetError(f"{self.root}: cannot write ({exc.strerror})") from exc
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise DatasetError(f"{self.root}: another ingest is writing this dataset") from exc
            self.recover()
            yield

    def new_staging(self, run_id: str) -> Path:
        path = self.staging_root / run_id
        path.mkdir(parents=True)
        return path

    def recover(self) -> None:
        """Finish the file moves of a committed run, drop the staging of uncommitted ones."""
        if not self.staging_root.is_dir():
            return
        committed = self._committed_runs()
        for staging in self.staging_root.iterdir():
            marker = staging / "COMMIT.json"
            if marker.is_file():
                plan = json.loads(marker.read_text())
                if plan["run_id"] in committed:
                    _apply_moves(plan["moves"])
            self.discard(staging)

    def _committed_runs(self) -> set[str]:
        if not self.exists():
            return set()
        with self.connect() as con:
            return {r[0] for r in con.execute("select run_id from runs").fetchall()}

    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        import duckdb

        try:
            return duckdb.connect(str(self.db_path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise DatasetError(
                    f"{self.root}: the dataset is open in another program: close it or use --out elsewhere"
                ) from exc
            raise DatasetError(f"{self.db_path}: cannot open ({_first_line(exc)})") from exc

    def query_rows(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        """Rows of a query against the committed dataset, as dicts; none when there is no dataset."""
        if not self.exists():
            return []
        with self.connect() as con:
            cursor = con.execute(sql, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def rows_by_job(self, table: str, job_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The committed rows of `table` for each of `job_ids` (one query for all of them)."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        rows = self.query_rows(f"select * from {table} where job_id in (select unnest(?::VARCHAR[]))", [job_ids])
        for row in rows:
            grouped.setdefault(row["job_id"], []).append(row)
        return grouped

    def known_trace_ids(self) -> frozenset[str]:
        """Files the dataset holds and read well: a file with an error row is read again."""
        return frozenset(r["trace_id"] for r in self.query_rows("select trace_id from traces where status = 'ok'", []))

    def commit(self, changes: RunChanges, staging: Path) -> None:
        """Write the run into a new DuckDB file and Parquet files, then swap them in."""
        new_db = staging / DB_NAME
        if self.exists():
            shutil.copyfile(self.db_path, new_db)
        out = staging / "out"
        moves = self._build(changes, new_db, out)
        marker = staging / "COMMIT.json"
        marker.write_text(json.dumps({"run_id": changes.run_id, "moves": moves}))
        _fsync(marker)
        _fsync(new_db)
        with interrupts.deferred():  # past the commit point the run finishes
            os.replace(new_db, self.db_path)  # the commit point
            self.committed_run = changes.run_id
            _fsync_dir(self.root)
            _apply_moves(moves)
            self.discard(staging)

    def discard(self, staging: Path) -> None:
        """Remove a run's staging folder (and the staging root once empty)."""
        shutil.rmtree(staging, ignore_errors=True)
        try:
            self.staging_root.rmdir()
        except OSError:
            pass

    def _build(self, changes: RunChanges, new_db: Path, out: Path) -> list[tuple[str, str]]:
        import duckdb

        con = duckdb.connect()
        try:
            with interrupts.interrupting(con):
                return self._write(con, changes, new_db, out)
        finally:
            con.close()

    def _write(
        self, con: duckdb.DuckDBPyConnection, changes: RunChanges, new_db: Path, out: Path
    ) -> list[tuple[str, str]]:
        con.execute("SET enable_progress_bar = false")  # it would draw on the user's terminal
        fresh = not new_db.exists()
        option = f" (STORAGE_VERSION '{STORAGE_VERSION}')" if fresh else ""
        con.execute(f"ATTACH '{_sql_path(new_db)}' AS d{option}")
        for table in TABLES:
            con.register("empty_table", arrow_schema(table).empty_table())
            con.execute(f"CREATE TABLE IF NOT EXISTS d.{table} AS SELECT * FROM empty_table")
            _add_new_columns(con, table)
            con.unregister("empty_table")
        touched = sorted({j["job_id"] for j in changes.jobs})
        con.register("new_traces", table_from_rows("traces", changes.traces))
        con.execute("CREATE TEMP TABLE touched AS SELECT unnest(?::VARCHAR[]) AS job_id", [touched])
        # Rows that describe a whole job are recomputed for every job the run touched (datasets of
        # earlier versions hold one error row per missing rank, with no path).
        con.execute("DELETE FROM d.traces WHERE path IS NULL AND job_id IN (SELECT job_id FROM touched)")
        # A file read again replaces its error row (or its row, if it failed the same way again).
        con.execute(
            "DELETE FROM d.traces t WHERE t.trace_id IN (SELECT trace_id FROM new_traces) OR (t.status = 'error' "
            "AND EXISTS (SELECT 1 FROM new_traces n WHERE n.job_id = t.job_id AND n.path = t.path))"
        )
        for table in ("jobs", "process_groups"):
            con.execute(f"DELETE FROM d.{table} WHERE job_id IN (SELECT job_id FROM touched)")
        con.execute("INSERT INTO d.traces BY NAME SELECT * FROM new_traces")
        self._insert_rows(con, "jobs", changes.jobs)
        self._insert_rows(con, "process_groups", changes.process_groups)
        self._insert_rows(con, "runs", [changes.run])
        if changes.staged_ops:
            con.execute(
                "INSERT INTO d.ops BY NAME SELECT s.* REPLACE (t.job_id AS job_id, t.rank AS rank) "
                "FROM read_parquet(?) s JOIN new_traces t USING (trace_id)",
                [changes.staged_ops],
            )
        for index, collectives in enumerate(changes.collectives):
            con.register(f"collectives_{index}", collectives)
            con.execute(f"INSERT INTO d.collectives BY NAME SELECT * FROM collectives_{index}")
        moves = self._export(con, changes.run_id, out)
        _store_queries(con)
        con.execute("CHECKPOINT d")
        con.execute("DETACH d")
        return moves

    @staticmethod
    def _insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            con.register(f"new_{table}", table_from_rows(table, rows))
            con.execute(f"INSERT INTO d.{table} BY NAME SELECT * FROM new_{table}")

    def _export(self, con: duckdb.DuckDBPyConnection, run_id: str, out: Path) -> list[tuple[str, str]]:
        moves: list[tuple[str, str]] = []
        for table in APPENDED_TABLES:
            query = (
                f"SELECT * FROM d.{table} WHERE trace_id IN (SELECT trace_id FROM new_traces) ORDER BY {_ORDER[table]}"
            )
            if con.execute(f"SELECT count(*) FROM ({query})").fetchone()[0] == 0:  # type: ignore[index]
                continue
            target = out / table / f"run-{run_id}.parquet"
            moves.append(self._copy(con, query, target, self.root / table / target.name))
        for table in REWRITTEN_TABLES:
            query = f"SELECT * FROM d.{table} ORDER BY {_ORDER[table]}"
            target = out / f"{table}.parquet"
            moves.append(self._copy(con, query, target, self.root / target.name))
        return moves

    @staticmethod
    def _copy(con: duckdb.DuckDBPyConnection, query: str, target: Path, final: Path) -> tuple[str, str]:
        target.parent.mkdir(parents=True, exist_ok=True)
        con.execute(f"COPY ({query}) TO '{_sql_path(target)}' (FORMAT parquet, COMPRESSION zstd)")
        return (str(target), str(final))


def _add_new_columns(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Columns the data model gained since the dataset was written (null in its existing rows)."""
    have = {row[0] for row in con.execute(f"DESCRIBE d.{table}").fetchall()}
    for name, duck_type, *_ in con.execute("DESCRIBE empty_table").fetchall():
        if name not in have:
            con.execute(f'ALTER TABLE d.{table} ADD COLUMN "{name}" {duck_type}')


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _store_queries(con: duckdb.DuckDBPyConnection) -> None:
    """Every queries/*.sql as a view or table macro of the dataset, for users of the DuckDB shell."""
    from tracekit.queries import catalog_statements

    con.execute("USE d")
    for statement in catalog_statements():
        con.execute(statement)
    con.execute("USE memory")


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def _apply_moves(moves: list[tuple[str, str]]) -> None:
    for src, dst in moves:
        if os.path.exists(src):
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync(path)
    except OSError:
        pass


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
    by_type = con.execute(
        "select comm_type, count(*), sum(in_bytes) from collectives group by comm_type order by 2 desc, 1"
    ).fetchall()
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
