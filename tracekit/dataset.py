"""A tracekit dataset on disk: one DuckDB file plus Parquet for every table, committed atomically.

Layout of DATASET/:
    tracekit.duckdb     every table, by name (opens in the DuckDB shell), and every shipped query
    *.parquet, traces/, collectives/ and ops/*.parquet  the same rows as Parquet (tracekit.parquet_files)

The DuckDB file holds its own copy of the data, so the dataset keeps working when the folder is
moved or copied (views over Parquet paths would not). A run writes its rows into the DuckDB file in
one transaction, so adding to a big dataset costs what the run adds, not what the dataset holds;
the transaction's COMMIT is the commit point. A run killed before it leaves the dataset as it was
(DuckDB's write-ahead log keeps only committed transactions). A run that leaves less than
`WAL_CHECKPOINT_BYTES` in the log (tracekit.duckdb.wal) leaves it there: every reader replays it,
the DuckDB 1.5 shell too, and a checkpoint of a fleet-sized file costs seconds however little the
run added (6.6 CPU seconds for one row on the 30,000-job dataset); a later run checkpoints.
The run's Parquet files are written in DATASET/.staging/ before the commit and moved into place
after it; a run killed in between is finished by the next one (`recover`). Ctrl-C (SIGINT) waits
while the commit and the moves run, so it never splits them.

DuckDB lets one process write a database file while no other process has it open. When another
program reads the dataset (a notebook's `tracekit.open`, a report being rendered), the run writes a
copy of the DuckDB file (and its log) in staging instead, checkpoints it and swaps it in with one
rename, then removes the log it replaced (a run killed in between: `recover` removes it): that
costs a copy of the file, and readers keep reading the dataset they opened. The DuckDB file is written in a storage
format that the DuckDB 1.5 shell reads.

Readers never need a lock of their own beyond DuckDB's shared one (`attach_read_only`): while
another process holds the file read-write (the DuckDB shell opened without -readonly, an ingest
committing in place), DuckDB lets nobody else open it, not even read-only, so a reader opens a
snapshot: a copy of the file and its log, taken while neither changed, in the temporary folder and
removed as soon as DuckDB has it open. A holder that keeps writing is named in a one-line error.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit import interrupts
from tracekit.errors import DatasetError
from tracekit.parquet_files import (
    ORDER,
    STAGED_CODEC,
    STAGED_TABLES,
    Plan,
    RunFiles,
    sql_path,
    write_appended,
    write_rewritten,
)
from tracekit.schema import REPLAY_TABLES, ROLLUPS, TABLES, arrow_schema, arrow_type, table_from_rows

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

DB_NAME = "tracekit.duckdb"
WAL_NAME = DB_NAME + ".wal"
# A run that leaves more than this in DuckDB's write-ahead log checkpoints it into the file.
WAL_CHECKPOINT_BYTES = 16 << 20
# What `pip install duckdb-cli` (1.5.x) reads; DuckDB 2.x would otherwise write a newer format.
STORAGE_VERSION = "v1.5.0"
STAGING = ".staging"
COMMIT_MARKER = "COMMIT.json"
# The commit's DuckDB memory: it spills to the staging folder beyond this, so that a fleet-sized
# run stays within a bounded footprint. The commit of 30,000 generated jobs peaked at 2.66 GB with
# 1 GB and 2.21 GB with 512 MB, in the same time.
MEMORY_LIMIT = "512MB"
# The tables every dataset tracekit wrote has (the rollups came later: views stand in for them).
CORE_TABLES = ("traces", "jobs", "process_groups", "collectives", "ops", "runs")
# Seconds to wait between snapshot copies of a file another process keeps writing, before giving up.
SNAPSHOT_WAITS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
# DuckDB's error when another process holds the file: `Conflicting lock is held in PROGRAM (PID N)`.
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")
# The column naming a staged row's file (tracekit.ingest.worker.SEQ_COLUMN).
SEQ = "_seq"
_FILE_COLUMNS = {
    SEQ: "int64",
    "trace_id": "string",
    "job_id": "string",
    "rank": "int32",
    "group_size_without_pg": "int32",
    "collectives_staged": "bool",
}


@dataclass
class RunChanges:
    """Everything one ingest run adds or replaces.

    `traces`: the run's `traces` rows, written a round at a time into `folder` as Parquet files
    (`add_traces`; held in memory until the commit, a fleet's rows cost 467 MiB for 30,000 jobs),
    `ingested_at` filled in at the commit. `files`: one row per file read well, in the columns of
    `_FILE_COLUMNS` (`add_files`, written likewise): the file's seq (its staged rows' `_seq`), the
    trace id, job and rank its rows get, the group size of its collectives that name no process
    group and record none, and whether its collectives are staged (False: they are in
    `collectives`, finished already). `staged`: the staged Parquet files, by table. `replaced`: the
    (trace id, status) of each `traces` row the dataset holds that the run replaces
    (tracekit.ingest.jobs.finish_job decides which).
    """

    run_id: str
    folder: Path
    traces: list[str] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    process_groups: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[pa.Table] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    staged: dict[str, list[str]] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    failed: int = 0  # traces rows of files that failed
    replaced: list[tuple[str, str]] = field(default_factory=list)

    def add_traces(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.traces.append(self._write("traces", table_from_rows("traces", rows)))
            self.failed += sum(row["status"] == "error" for row in rows)

    def add_files(self, files: list[tuple[int, str, str, int | None, int | None, bool]]) -> None:
        import pyarrow as pa

        if files:
            columns = dict(zip(_FILE_COLUMNS, map(list, zip(*files, strict=True)), strict=True))
            self.files.append(self._write("files", pa.table(columns, schema=_files_schema())))

    def _write(self, name: str, table: pa.Table) -> str:
        import pyarrow.parquet as pq

        self.folder.mkdir(parents=True, exist_ok=True)
        path = str(self.folder / f"{name}-{len(getattr(self, name))}.parquet")
        pq.write_table(table, path, compression=STAGED_CODEC)
        return path


def _files_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(name, arrow_type(kind)) for name, kind in _FILE_COLUMNS.items()])


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

    @property
    def wal_path(self) -> Path:
        return self.root / WAL_NAME

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
                raise DatasetError(
                    f"{self.root}: another tracekit command (an ingest or a fleet replay) is writing this dataset: "
                    "run again when it is done"
                ) from exc
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
        for marker in self.staging_root.glob(f"*/{COMMIT_MARKER}"):
            plan = json.loads(marker.read_text())
            if plan.get("db_inode") is not None and _inode(self.db_path) == plan["db_inode"]:
                _remove_replaced_log(self.wal_path)  # the run's copy was swapped in: the log is stale
        committed = self._committed_runs()
        for staging in self.staging_root.iterdir():
            marker = staging / COMMIT_MARKER
            if marker.is_file():
                plan = json.loads(marker.read_text())
                if plan["run_id"] in committed:
                    _apply(Plan(plan["moves"], plan.get("removals", [])))
            self.discard(staging)

    def _committed_runs(self) -> set[str]:
        if not self.exists():
            return set()
        with self.connect() as con:
            return {r[0] for r in con.execute("select run_id from runs").fetchall()}

    def connect(
        self, read_only: bool = True, advice: str = "close it or use --out elsewhere"
    ) -> duckdb.DuckDBPyConnection:
        """A connection to the DuckDB file itself (for the ingest that writes it; readers use
        `attach_read_only`), checked to be a tracekit dataset."""
        import duckdb

        try:
            con = duckdb.connect(str(self.db_path), read_only=read_only)
        except duckdb.Error as exc:
            holder = _holder(exc)
            if holder is not None:
                raise DatasetError(f"{self.root}: the dataset is open in another program ({holder}): {advice}") from exc
            raise self._unusable(exc) from exc
        try:
            self._check_tables(con, con.execute("SELECT current_database()").fetchall()[0][0])
        except BaseException:
            con.close()
            raise
        return con

    def attach_read_only(self, con: duckdb.DuckDBPyConnection, alias: str) -> None:
        """Attach the committed dataset to `con` as `alias`, read-only: the file itself, or, while
        another process holds it read-write, a snapshot of it (see the module docstring)."""
        import duckdb

        try:
            con.execute(f"ATTACH '{sql_path(self.db_path)}' AS {alias} (READ_ONLY)")
        except duckdb.Error as exc:
            holder = _holder(exc)
            if holder is None:
                raise self._unusable(exc) from exc
            self._attach_snapshot(con, alias, holder)
        try:
            self._check_tables(con, alias)
        except BaseException:
            con.execute(f"DETACH {alias}")
            raise

    def _attach_snapshot(self, con: duckdb.DuckDBPyConnection, alias: str, holder: str) -> None:
        """Attach a copy of the file and its log taken while neither changed (the holder may be
        writing: a copy that changed meanwhile may be torn), retrying while the holder writes."""
        import duckdb

        for wait in (0.0, *SNAPSHOT_WAITS):
            time.sleep(wait)
            try:
                folder = tempfile.mkdtemp(prefix="tracekit-snapshot-")
            except OSError as exc:
                raise DatasetError(
                    f"{self.db_path}: {holder} holds it open for writing, and no snapshot can be made in "
                    f"{tempfile.gettempdir()} ({exc.strerror})"
                ) from exc
            try:
                before = self._stamps()
                copy = Path(folder) / DB_NAME
                shutil.copyfile(self.db_path, copy)
                if self.wal_path.exists():
                    shutil.copyfile(self.wal_path, copy.with_name(WAL_NAME))
                if self._stamps() != before:
                    continue
                try:
                    con.execute(f"ATTACH '{sql_path(copy)}' AS {alias} (READ_ONLY)")
                    return
                except duckdb.Error:  # torn after all (changed within the clock's resolution)
                    continue
            except OSError as exc:
                raise DatasetError(
                    f"{self.db_path}: {holder} holds it open for writing, and no snapshot can be made in "
                    f"{folder} ({exc.strerror})"
                ) from exc
            finally:
                shutil.rmtree(folder, ignore_errors=True)  # DuckDB keeps the files it opened
        raise DatasetError(
            f"{self.db_path}: {holder} holds it open for writing and kept changing it: try again when it "
            "has finished (a DuckDB shell reading it is best opened with duckdb -readonly)"
        )

    def _stamps(self) -> tuple[tuple[int, int, int] | None, ...]:
        """What changes when the file or its log is written: inode, size and modification time."""
        stamps: list[tuple[int, int, int] | None] = []
        for path in (self.db_path, self.wal_path):
            try:
                st = path.stat()
                stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                stamps.append(None)
        return tuple(stamps)

    def _unusable(self, exc: BaseException) -> DatasetError:
        """The error for a DuckDB file that cannot be opened, for a reason other than another holder."""
        text = str(exc)
        if "not a valid DuckDB database file" in text:
            empty = _size(self.db_path) == 0
            return DatasetError(
                f"{self.db_path}: not a tracekit dataset ({'an empty file' if empty else 'not a DuckDB database file'})"
            )
        return DatasetError(f"{self.db_path}: cannot open ({_first_line(exc)})")

    def _check_tables(self, con: duckdb.DuckDBPyConnection, catalog: str) -> None:
        """DatasetError unless the database attached as `catalog` has tracekit's tables."""
        found = {
            row[0]
            for row in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = $db "
                "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = $db",
                {"db": catalog},
            ).fetchall()
        }
        missing = [table for table in CORE_TABLES if table not in found]
        if missing:
            noun = "table" if len(missing) == 1 else "tables"
            raise DatasetError(f"{self.db_path}: not a tracekit dataset (no {', '.join(missing)} {noun})")

    def query_rows(
        self, sql: str, params: list[Any], con: duckdb.DuckDBPyConnection | None = None
    ) -> list[dict[str, Any]]:
        """Rows of a query against the committed dataset, as dicts; none when there is no dataset.

        `con`: a connection from `connect` to use (one is opened and closed otherwise)."""
        if con is None:
            if not self.exists():
                return []
            with self.connect() as opened:
                return self.query_rows(sql, params, opened)
        cursor = con.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def rows_by_job(
        self, table: str, job_ids: list[str], con: duckdb.DuckDBPyConnection | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The committed rows of `table` for each of `job_ids` (one query for all of them)."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        rows = self.query_rows(f"select * from {table} where job_id in (select unnest(?::VARCHAR[]))", [job_ids], con)
        for row in rows:
            grouped.setdefault(row["job_id"], []).append(row)
        return grouped

    def commit(self, changes: RunChanges, staging: Path) -> None:
        """Add the run to the dataset: in the DuckDB file in place when no other program has it
        open, else in a copy swapped in by rename (see the module docstring)."""
        import duckdb

        con = duckdb.connect()
        try:
            con.execute("SET enable_progress_bar = false")  # it would draw on the user's terminal
            con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            con.execute(f"SET temp_directory = '{sql_path(staging / 'spill')}'")
            logs_stay = _keep_logs(con)
            in_place = self._attach(con, staging)
            _register(con, changes)
            with interrupts.interrupting(con):
                if in_place:
                    con.execute("BEGIN TRANSACTION")
                plan = _write(con, changes, self.root, staging / "out")
            if not in_place:
                con.execute("CHECKPOINT d")
                con.execute("DETACH d")
                _fsync(staging / DB_NAME)
            marker = staging / COMMIT_MARKER
            marker.write_text(
                json.dumps(
                    {
                        "run_id": changes.run_id,
                        "moves": plan.moves,
                        "removals": plan.removals,
                        # The copy's inode: once the dataset's file has it, the copy was swapped in.
                        "db_inode": None if in_place else _inode(staging / DB_NAME),
                    }
                )
            )
            _fsync(marker)
            with interrupts.deferred():  # past the commit point the run finishes
                if in_place:
                    con.execute("COMMIT")  # the commit point
                    self.committed_run = changes.run_id
                    if _size(self.wal_path) > WAL_CHECKPOINT_BYTES or not logs_stay:
                        con.execute("CHECKPOINT d")
                    con.execute("DETACH d")
                else:
                    os.replace(staging / DB_NAME, self.db_path)  # the commit point
                    self.committed_run = changes.run_id
                    _remove_replaced_log(self.wal_path)
                    _fsync_dir(self.root)
                _apply(plan)
                self.discard(staging)
        finally:
            con.close()

    def _attach(self, con: duckdb.DuckDBPyConnection, staging: Path) -> bool:
        """Attach the DuckDB file to write as `d`: the dataset's own (True), or a copy in staging."""
        import duckdb

        if not self.exists():
            con.execute(f"ATTACH '{sql_path(staging / DB_NAME)}' AS d (STORAGE_VERSION '{STORAGE_VERSION}')")
            return False
        try:
            con.execute(f"ATTACH '{sql_path(self.db_path)}' AS d")
            return True
        except duckdb.Error as exc:
            if not _held_elsewhere(exc):
                raise DatasetError(f"{self.db_path}: cannot open ({_first_line(exc)})") from exc
        # Others have it open: readers only (a writer elsewhere is an error), so work on a copy.
        try:
            self.connect().close()
        except DatasetError as exc:
            if not isinstance(exc.__cause__, duckdb.Error) or "already attached" not in str(exc.__cause__):
                raise
        shutil.copyfile(self.db_path, staging / DB_NAME)
        if self.wal_path.exists():
            shutil.copyfile(self.wal_path, staging / WAL_NAME)
        con.execute(f"ATTACH '{sql_path(staging / DB_NAME)}' AS d")
        return False

    def replace_tables(self, tables: dict[str, pa.Table]) -> None:
        """Replace each named table of the DuckDB file with the rows given (declared types), in one
        transaction: all or nothing. The caller holds `writing()`."""
        con = self.connect(read_only=False)
        try:
            con.execute("BEGIN")
            for name, rows in tables.items():
                con.register("incoming", rows.cast(arrow_schema(name)))
                con.execute(f"DROP TABLE IF EXISTS {name}")
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM incoming")
                con.unregister("incoming")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        finally:
            con.close()

    def discard(self, staging: Path) -> None:
        """Remove a run's staging folder (and the staging root once empty)."""
        shutil.rmtree(staging, ignore_errors=True)
        try:
            self.staging_root.rmdir()
        except OSError:
            pass


def _keep_logs(con: duckdb.DuckDBPyConnection) -> bool:
    """Detaching leaves the write-ahead log as it is (False: this DuckDB cannot be told so)."""
    import duckdb

    try:
        con.execute("SET checkpoint_on_detach = 'DISABLED'")
    except duckdb.Error:
        return False
    return True


def _remove_replaced_log(wal: Path) -> None:
    """The log of a DuckDB file that a checkpointed copy replaced (DuckDB refuses to open the pair)."""
    wal.unlink(missing_ok=True)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _holder(exc: BaseException) -> str | None:
    """Who holds the file, when that is why DuckDB could not open it: `duckdb, PID 8347`."""
    text = str(exc)
    match = _LOCK_HOLDER.search(text)
    if match:
        return f"{Path(match.group(1)).name}, PID {match.group(2)}"
    if "already attached" in text or "different configuration" in text:
        return f"this process, PID {os.getpid()}"
    return None


def _held_elsewhere(exc: BaseException) -> bool:
    """The DuckDB error says another process (or another database of this one) has the file open."""
    text = str(exc).lower()
    return "lock" in text or "already attached" in text


def _register(con: duckdb.DuckDBPyConnection, changes: RunChanges) -> None:
    """The run's rows, as tables of this connection (registered before the transaction starts)."""
    import pyarrow as pa

    schema = arrow_schema("traces")
    at = schema.field("ingested_at")
    con.register("run_time", pa.table({at.name: pa.array([changes.run.get("committed_at")], at.type)}))
    con.execute(
        "CREATE TEMP VIEW new_traces AS SELECT t.* REPLACE (r.ingested_at AS ingested_at) "
        f"FROM {_rows_of(con, 'traces', schema, changes.traces)} t, run_time r"
    )
    for table in ("jobs", "process_groups", "runs"):
        rows = [changes.run] if table == "runs" else getattr(changes, table)
        con.register(f"new_{table}", table_from_rows(table, rows))
    con.register("touched", pa.table({"job_id": pa.array(sorted({j["job_id"] for j in changes.jobs}), pa.string())}))
    ids, statuses = zip(*changes.replaced, strict=True) if changes.replaced else ((), ())
    con.register(
        "run_replaced", pa.table({"trace_id": pa.array(ids, pa.string()), "status": pa.array(statuses, pa.string())})
    )
    con.execute(f"CREATE TEMP VIEW run_files AS SELECT * FROM {_rows_of(con, 'files', _files_schema(), changes.files)}")
    schema = arrow_schema("collectives")
    con.register(
        "linked_collectives", pa.concat_tables([schema.empty_table(), *(t.cast(schema) for t in changes.collectives)])
    )


def _rows_of(con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema, files: list[str]) -> str:
    """A FROM item reading the rows written to `files` (none: an empty table of `schema`)."""
    if files:
        return f"read_parquet({_sql_list(files)})"
    con.register(f"no_{name}", schema.empty_table())
    return f"no_{name}"


def _write(con: duckdb.DuckDBPyConnection, changes: RunChanges, root: Path, out: Path) -> Plan:
    """Everything the run adds, into the database attached as `d`, and the Parquet files (in `out`)."""
    files = RunFiles(changes.run_id, root, out)
    # A rollup table new to this dataset, or whose columns changed since it was written (its rule
    # did, or a sum needed more than 64 bits: it is made again, in the declared columns and types),
    # is filled for every job, not only those the run touches.
    stale = [r for r in ROLLUPS if not _has_table(con, r) or _columns_changed(con, r) or _retyped(con, r)]
    for rollup in stale:
        con.execute(f"DROP TABLE IF EXISTS d.{rollup}")
    _ops_view_to_table(con, root)
    for table in TABLES:
        con.register("empty_table", arrow_schema(table).empty_table())
        con.execute(f"CREATE TABLE IF NOT EXISTS d.{table} AS SELECT * FROM empty_table")
        _add_new_columns(con, table)
        con.unregister("empty_table")
    # The rows the run replaces (tracekit.ingest.jobs.finish_job decides which), and any row whose
    # trace id the run adds again: a trace id is stored once.
    con.execute(
        "CREATE TEMP TABLE replaced_traces AS SELECT trace_id, status FROM run_replaced "
        "UNION SELECT trace_id, status FROM d.traces WHERE trace_id IN (SELECT trace_id FROM new_traces)"
    )
    con.execute(f"DELETE FROM d.traces WHERE {_REPLACED_TRACE}")
    rows_replaced = bool(con.execute("SELECT 1 FROM replaced_traces WHERE status = 'ok' LIMIT 1").fetchall())
    if rows_replaced:
        for table in STAGED_TABLES:
            con.execute(f"DELETE FROM d.{table} WHERE {_REPLACED_ROWS[table]}")
    # A fleet replay's rows of a job the run touches describe traffic that has changed: dropped.
    for table in ("jobs", "process_groups", *REPLAY_TABLES):
        con.execute(f"DELETE FROM d.{table} WHERE job_id IN (SELECT job_id FROM touched)")
    for table in ("traces", "jobs", "process_groups", "runs"):
        con.execute(f"INSERT INTO d.{table} BY NAME SELECT * FROM new_{table}")
    _write_traces(con, files)
    for table in STAGED_TABLES:
        query = _finished_rows(table, changes.staged.get(table, []))
        if query is None:
            continue
        _append(con, table, query, files, _REPLACED_ROWS[table] if rows_replaced else None)
    _store_queries(con)
    _refresh_rollups(con, stale)
    write_rewritten(con, "d", files)
    return files.plan


# The traces rows the run replaces (table replaced_traces, made by `_write`).
_REPLACED_TRACE = "trace_id IN (SELECT trace_id FROM replaced_traces)"
# The rows of a staged table that belong to a replaced trace: collectives linked to one too (a host
# trace's collectives carry their device trace as linked_trace_id).
_REPLACED_ROWS = {
    "collectives": f"({_REPLACED_TRACE} OR coalesce(linked_trace_id IN (SELECT trace_id FROM replaced_traces), false))",
    "ops": _REPLACED_TRACE,
}


def _write_traces(con: duckdb.DuckDBPyConnection, files: RunFiles) -> None:
    """The run's `traces` rows as Parquet files; earlier files lose the rows it replaced. A dataset
    written while `traces` was one file rewritten per run gets its rows moved into `traces/`."""
    columns = ", ".join(f'"{name}"' for name in arrow_schema("traces").names)
    legacy = files.root / "traces.parquet"
    if legacy.exists():
        write_appended(con, "traces", f"SELECT {columns} FROM d.traces ORDER BY {ORDER['traces']}", files)
        files.plan.removals.append(str(legacy))
        return
    write_appended(con, "traces", f"SELECT {columns} FROM new_traces", files, replaced=_REPLACED_TRACE)


def _append(con: duckdb.DuckDBPyConnection, table: str, query: str, files: RunFiles, replaced: str | None) -> None:
    """The run's rows of an appended table (`query`), into the DuckDB file and as Parquet files;
    the earlier files holding rows the run replaced (`replaced`, see `write_appended`) lose them.

    A table that held no rows gets them first and its Parquet files written from it (a fleet's
    first run: DuckDB reads its own rows back for 2.6 CPU s less, on 2,000 jobs, than decoding the
    Parquet files it just wrote); otherwise scanning the table would read every earlier run's rows,
    so the Parquet files are written first and loaded from."""
    if not con.execute(f"SELECT 1 FROM d.{table} LIMIT 1").fetchall():
        con.execute(f"INSERT INTO d.{table} BY NAME {query}")
        columns = ", ".join(f'"{name}"' for name in arrow_schema(table).names)
        write_appended(con, table, f"SELECT {columns} FROM d.{table}", files, replaced=replaced)
        return
    written = write_appended(con, table, query, files, replaced=replaced)
    if written:
        con.execute(f"INSERT INTO d.{table} BY NAME SELECT * FROM read_parquet(?)", [written])


def _ops_view_to_table(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Datasets written while `ops` was a view of its Parquet files (by a path relative to the folder,
    which the DuckDB shell resolved against its own working folder) get the table back, filled from
    those files."""
    kinds = con.execute(
        "SELECT table_type FROM information_schema.tables WHERE table_catalog = 'd' AND table_name = 'ops'"
    ).fetchall()
    if kinds != [("VIEW",)]:
        return
    con.execute("DROP VIEW d.ops")
    files = sorted(str(p) for p in (root / "ops").glob("*.parquet"))
    con.register("empty_table", arrow_schema("ops").empty_table())
    con.execute("CREATE TABLE d.ops AS SELECT * FROM empty_table")
    con.unregister("empty_table")
    if files:
        con.execute("INSERT INTO d.ops BY NAME SELECT * FROM read_parquet(?)", [files])


def _has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    query = "SELECT 1 FROM information_schema.tables WHERE table_catalog = 'd' AND table_name = ?"
    return bool(con.execute(query, [table]).fetchall())


def _retyped(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether a stored table has a column whose type differs from the data model's."""
    con.register("model_table", arrow_schema(table).empty_table())
    try:
        model = {row[0]: row[1] for row in con.execute("DESCRIBE model_table").fetchall()}
    finally:
        con.unregister("model_table")
    stored = {row[0]: row[1] for row in con.execute(f"DESCRIBE d.{table}").fetchall()}
    return any(model.get(name, kind) != kind for name, kind in stored.items())


def _columns_changed(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    have = [row[0] for row in con.execute(f"DESCRIBE d.{table}").fetchall()]
    return have != arrow_schema(table).names


def _refresh_rollups(con: duckdb.DuckDBPyConnection, whole: list[str]) -> None:
    """The rollup rows of the jobs the run touched, recomputed (every job's, for tables in `whole`)."""
    from tracekit.queries import rollup_query

    con.execute("USE d")
    for table in ROLLUPS:
        query = rollup_query(table)
        if table in whole:
            con.execute(f"DELETE FROM d.{table}")
            con.execute(f"INSERT INTO d.{table} BY NAME SELECT * FROM ({query})")
        else:
            con.execute(f"DELETE FROM d.{table} WHERE job_id IN (SELECT job_id FROM touched)")
            with _touched_only(con, ("collectives", "jobs", *ROLLUPS)):
                con.execute(f"INSERT INTO d.{table} BY NAME SELECT * FROM ({query})")
    con.execute("USE memory")


@contextmanager
def _touched_only(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> Iterator[None]:
    """The tables holding only the rows of the jobs the run touched, for the queries run meanwhile
    (temporary views shadow the tables, inside the stored views that read them too): a rollup is
    computed per job, and filtering its result instead would compute it for every job of the
    dataset (5.5 s of the 15 s that adding one job to 30,000 took)."""
    for table in tables:
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {table} AS "
            f"SELECT * FROM d.main.{table} WHERE job_id IN (SELECT job_id FROM touched)"
        )
    try:
        yield
    finally:
        for table in tables:
            con.execute(f"DROP VIEW IF EXISTS temp.main.{table}")


def _finished_rows(table: str, staged: list[str]) -> str | None:
    """SQL selecting the run's rows of an appended table, in the table's columns: the staged rows of
    the files kept, with the job, rank and trace id of their file; collectives also get the group
    size of their process group (or, naming none, their file's) where they record none, noted in
    `inferred`, plus the collectives finished already (linked host and device traces)."""
    columns = ", ".join(f'"{name}"' for name in arrow_schema(table).names)
    if table == "ops":
        if not staged:
            return None
        return (
            f"SELECT {columns} FROM (SELECT s.* EXCLUDE ({SEQ}), f.trace_id, f.job_id, f.rank "
            f"FROM read_parquet({_sql_list(staged)}) s JOIN run_files f ON f.{SEQ} = s.{SEQ})"
        )
    linked = f"SELECT {columns} FROM linked_collectives"
    if not staged:
        return linked
    fill = "CASE WHEN s.pg_name IS NULL THEN f.group_size_without_pg ELSE g.group_size END"
    return (
        f"SELECT {columns} FROM (SELECT s.* EXCLUDE ({SEQ}, group_size, inferred), f.trace_id, f.job_id, f.rank, "
        f"CASE WHEN s.group_size IS NULL AND ({fill}) IS NOT NULL THEN {fill} ELSE s.group_size END AS group_size, "
        f"CASE WHEN s.group_size IS NULL AND ({fill}) IS NOT NULL THEN s.inferred || ['group_size'] "
        "ELSE s.inferred END AS inferred "
        f"FROM read_parquet({_sql_list(staged)}) s JOIN run_files f ON f.{SEQ} = s.{SEQ} AND f.collectives_staged "
        "LEFT JOIN new_process_groups g ON g.job_id = f.job_id AND g.pg_name = s.pg_name) "
        f"UNION ALL {linked}"
    )


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join(f"'{sql_path(p)}'" for p in paths) + "]"


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


def _apply(plan: Plan) -> None:
    _apply_moves(plan.moves)
    for path in plan.removals:
        Path(path).unlink(missing_ok=True)


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


# Collectives by comm_type, from the rollup where the dataset has it (the same sums, without reading
# every collective: 2.6 s of adding one job to 30,000), else from the table.
_COLLECTIVE_TOTALS = {
    True: "select comm_type, sum(calls)::BIGINT, sum(in_bytes::HUGEINT * calls) from collective_sizes "
    "group by comm_type order by 2 desc, 1",
    False: "select comm_type, count(*), sum(in_bytes) from collectives group by comm_type order by 2 desc, 1",
}


def _has_rollup(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    query = "select 1 from duckdb_tables() where database_name = current_database() and table_name = ?"
    return bool(con.execute(query, [name]).fetchall())


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
    by_type = con.execute(_COLLECTIVE_TOTALS[_has_rollup(con, "collective_sizes")]).fetchall()
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
