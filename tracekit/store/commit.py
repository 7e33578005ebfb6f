"""The commit of an ingest run: its rows into the DuckDB file in one transaction, its Parquet files
into place after the commit point (tracekit.store.dataset's docstring says how and why).

The transaction first brings an older dataset to this format (tracekit.store.migrations), then
replaces what the run replaces, inserts the run's rows (the staged rows finished in SQL: each gets
the job, rank and trace id of its file), stores the query catalogue, refreshes the rollups of
the jobs the run touched, and records every Parquet file the run moves in or removes, with its
size and SHA-256 (tracekit.store.written_files).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit import interrupts
from tracekit.errors import DatasetError
from tracekit.schema import REPLAY_TABLES, ROLLUPS, TABLES, arrow_schema, table_from_rows
from tracekit.store import connect, dataset_format, migrations, staging_marker, written_files
from tracekit.store.changes import SEQ, RunChanges, files_schema
from tracekit.store.connect import STORAGE_VERSION, sql_list, sql_path
from tracekit.store.dataset import (
    COMMIT_MARKER,
    DB_NAME,
    WAL_CHECKPOINT_BYTES,
    WAL_NAME,
    Dataset,
    inode,
    newer_format,
    remove_replaced_log,
    size,
)
from tracekit.store.migrations import Upgrade
from tracekit.store.parquet_files import (
    ORDER,
    STAGED_TABLES,
    Plan,
    RunFiles,
    apply_plan,
    write_appended,
    write_rewritten,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

# The commit's DuckDB memory: it spills to the staging folder beyond this, so that a fleet-sized
# run stays within a bounded footprint. The commit of 30,000 generated jobs peaked at 2.66 GB with
# 1 GB and 2.21 GB with 512 MB, in the same time.
MEMORY_LIMIT = "512MB"


def commit(dataset: Dataset, changes: RunChanges, staging: Path) -> None:
    """Add the run to the dataset: in the DuckDB file in place when no other program has it
    open, else in a copy swapped in by rename (see tracekit.store.dataset)."""
    con = connect.memory()
    try:
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute(f"SET temp_directory = '{sql_path(staging / 'spill')}'")
        logs_stay = _keep_logs(con)
        in_place, new = _attach(dataset, con, staging)
        _register(con, changes)
        with interrupts.interrupting(con):
            if in_place:
                con.execute("BEGIN TRANSACTION")
            plan = _write(con, changes, dataset.root, staging / "out", new)
        if not in_place:
            con.execute("CHECKPOINT d")
            con.execute("DETACH d")
            fsync(staging / DB_NAME)
        marker = staging / COMMIT_MARKER
        # The copy's inode: once the dataset's file has it, the copy was swapped in.
        db_inode = None if in_place else inode(staging / DB_NAME)
        marker.write_text(staging_marker.text(changes.run_id, plan, db_inode, dataset.root))
        fsync(marker)
        with interrupts.deferred():  # past the commit point the run finishes
            if in_place:
                con.execute("COMMIT")  # the commit point
                dataset.committed_run = changes.run_id
                if size(dataset.wal_path) > WAL_CHECKPOINT_BYTES or not logs_stay:
                    con.execute("CHECKPOINT d")
                con.execute("DETACH d")
            else:
                os.replace(staging / DB_NAME, dataset.db_path)  # the commit point
                dataset.committed_run = changes.run_id
                remove_replaced_log(dataset.wal_path)
                _fsync_dir(dataset.root)
            apply_plan(plan)
            dataset.discard(staging)
    finally:
        con.close()


def _attach(dataset: Dataset, con: duckdb.DuckDBPyConnection, staging: Path) -> tuple[bool, bool]:
    """Attach the DuckDB file to write as `d`: the dataset's own (True), or a copy in staging; and
    whether the dataset is new."""
    import duckdb

    if not dataset.exists():
        connect.attach(con, staging / DB_NAME, "d", storage_version=STORAGE_VERSION)
        return False, True
    try:
        connect.attach(con, dataset.db_path, "d")
        return True, False
    except duckdb.Error as exc:
        if connect.damaged(exc):
            raise dataset.damaged(exc) from exc
        if not connect.held_elsewhere(exc):
            raise DatasetError(f"{dataset.db_path}: cannot open ({connect.first_line(exc)})") from exc
    # Others have it open: readers only (a writer elsewhere is an error), so work on a copy.
    try:
        dataset.connect().close()
    except DatasetError as exc:
        if not isinstance(exc.__cause__, duckdb.Error) or "already attached" not in str(exc.__cause__):
            raise
    shutil.copyfile(dataset.db_path, staging / DB_NAME)
    if dataset.wal_path.exists():
        shutil.copyfile(dataset.wal_path, staging / WAL_NAME)
    connect.attach(con, staging / DB_NAME, "d")
    return False, False


def _keep_logs(con: duckdb.DuckDBPyConnection) -> bool:
    """Detaching leaves the write-ahead log as it is (False: this DuckDB cannot be told so)."""
    import duckdb

    try:
        con.execute("SET checkpoint_on_detach = 'DISABLED'")
    except duckdb.Error:
        return False
    return True


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
    touched = sorted({j["job_id"] or "" for j in changes.jobs})
    con.register("touched", pa.table({"job_id": pa.array(touched, pa.string())}))
    ids, statuses = zip(*changes.replaced, strict=True) if changes.replaced else ((), ())
    con.register(
        "run_replaced", pa.table({"trace_id": pa.array(ids, pa.string()), "status": pa.array(statuses, pa.string())})
    )
    con.execute(f"CREATE TEMP VIEW run_files AS SELECT * FROM {_rows_of(con, 'files', files_schema(), changes.files)}")
    schema = arrow_schema("collectives")
    con.register(
        "linked_collectives", pa.concat_tables([schema.empty_table(), *(t.cast(schema) for t in changes.collectives)])
    )


def _rows_of(con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema, files: list[str]) -> str:
    """A FROM item reading the rows written to `files` (none: an empty table of `schema`)."""
    if files:
        return f"read_parquet({sql_list(files)})"
    con.register(f"no_{name}", schema.empty_table())
    return f"no_{name}"


def _write(con: duckdb.DuckDBPyConnection, changes: RunChanges, root: Path, out: Path, new: bool) -> Plan:
    """Everything the run adds, into the database attached as `d`, and the Parquet files (in `out`).
    A new dataset gets every table and the format number; an older one is upgraded first."""
    files = RunFiles(changes.run_id, root, out)
    if new:
        step = Upgrade(con, root, rebuild=list(ROLLUPS))
        for table in TABLES:
            step.create(table)
        dataset_format.stamp(con, "d")
    else:
        found = dataset_format.read(con, "d", root)
        if found > dataset_format.FORMAT:
            raise newer_format(root, found)
        step = migrations.upgrade(con, root, found)  # no step at this format: the number stamped
    files.plan.removals += step.removals
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
    _write_traces(con, files, whole="traces" in step.rewrite)
    for table in STAGED_TABLES:
        query = _finished_rows(table, changes.staged.get(table, []))
        if query is None:
            continue
        _append(con, table, query, files, _REPLACED_ROWS[table] if rows_replaced else None)
    store_queries(con)
    refresh_rollups(con, step.rebuild)
    write_rewritten(con, "d", files)
    written_files.record_plan(con, "d", changes.run_id, root, files.plan)
    return files.plan


# The traces rows the run replaces (table replaced_traces, made by `_write`).
_REPLACED_TRACE = "trace_id IN (SELECT trace_id FROM replaced_traces)"
# The rows of a staged table that belong to a replaced trace: collectives linked to one too (a host
# trace's collectives carry their device trace as linked_trace_id).
_REPLACED_ROWS = {
    "collectives": f"({_REPLACED_TRACE} OR coalesce(linked_trace_id IN (SELECT trace_id FROM replaced_traces), false))",
    "ops": _REPLACED_TRACE,
    "observed_transfers": _REPLACED_TRACE,
    "observed_collectives": _REPLACED_TRACE,
}


def _write_traces(con: duckdb.DuckDBPyConnection, files: RunFiles, whole: bool) -> None:
    """The run's `traces` rows as Parquet files; earlier files lose the rows it replaced. `whole`:
    every row of the table is written (a dataset upgraded from one traces.parquet, m006)."""
    columns = ", ".join(f'"{name}"' for name in arrow_schema("traces").names)
    if whole:
        write_appended(con, "traces", f"SELECT {columns} FROM d.traces ORDER BY {ORDER['traces']}", files)
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


def refresh_rollups(con: duckdb.DuckDBPyConnection, whole: list[str]) -> None:
    """The rollup rows of the jobs the run touched, recomputed (every job's, for tables in `whole`)."""
    from tracekit.store.queries import rollup_query

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
    if table != "collectives":
        if not staged:
            return None
        return (
            f"SELECT {columns} FROM (SELECT s.* EXCLUDE ({SEQ}), f.trace_id, f.job_id, f.rank "
            f"FROM read_parquet({sql_list(staged)}) s JOIN run_files f ON f.{SEQ} = s.{SEQ})"
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
        f"FROM read_parquet({sql_list(staged)}) s JOIN run_files f ON f.{SEQ} = s.{SEQ} AND f.collectives_staged "
        "LEFT JOIN new_process_groups g ON g.job_id = f.job_id AND g.pg_name = s.pg_name) "
        f"UNION ALL {linked}"
    )


def store_queries(con: duckdb.DuckDBPyConnection) -> None:
    """Every queries/*.sql as a view or table macro of the dataset, for users of the DuckDB shell."""
    from tracekit.store.queries import catalog_statements

    con.execute("USE d")
    for statement in catalog_statements():
        con.execute(statement)
    con.execute("USE memory")


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fsync(path)
    except OSError:
        pass
