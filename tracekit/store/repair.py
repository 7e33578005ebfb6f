"""`tracekit repair`: a damaged copy of a dataset rebuilt from the whole one (tracekit.store.verify says which).

- The DuckDB file lacks rows (a damaged log lost runs) or cannot be opened, and every Parquet file is
  whole: a new DuckDB file is built from the Parquet files (rollups recomputed, the query catalogue
  stored, the fleet replay's tables copied from the old file where it opens) and swapped in by rename.
- The Parquet files are damaged or missing, and the DuckDB file is whole: every table's Parquet files
  are written again from it and moved over the old ones.

Either way the repair records the Parquet files the dataset then holds (tracekit.store.written_files,
under the repair's id): the rewritten ones, in the DuckDB file's records, before they move into
place (a dataset of format 9 and earlier has no records table: the next ingest creates it); the
ones a new DuckDB file is built from, in its own.

Nothing is deleted that held data: the old DuckDB file and its log are first copied to
DATASET/.damaged/<repair id>/. Both steps follow the commit's protocol (a marker in staging, then the
rename and the moves), so a repair killed midway is finished or dropped by the next command that
writes the dataset (`Dataset.recover`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit import interrupts
from tracekit.errors import DatasetError
from tracekit.schema import REPLAY_TABLES, ROLLUPS, TABLES, arrow_schema
from tracekit.store import connect, dataset_format, staging_marker, written_files
from tracekit.store.commit import fsync, refresh_rollups, store_queries
from tracekit.store.connect import STORAGE_VERSION, ident, sql_list, sql_path
from tracekit.store.dataset import (
    COMMIT_MARKER,
    DB_NAME,
    REPAIR_PREFIX,
    Dataset,
    inode,
    remove_replaced_log,
)
from tracekit.store.migrations import Upgrade
from tracekit.store.parquet_files import ORDER, PARQUET_TABLES, REWRITTEN_TABLES, Plan, apply_plan, table_files
from tracekit.store.verify import Verdict, verify

if TYPE_CHECKING:
    import duckdb

DAMAGED = ".damaged"
_OPTIONS = "FORMAT parquet, COMPRESSION zstd"
_REPLAY_AGAIN = "run `tracekit replay DATASET --fleet` again"


@dataclass
class Repair:
    """What `repair` found (`before`), what it rebuilt ('duckdb', 'parquet' or None), where it kept the
    old DuckDB file (`kept`), and what `verify` finds after (`after`)."""

    before: Verdict
    rebuilt: str | None
    kept: Path | None
    after: Verdict
    notes: list[str]


def repair(dataset: Dataset) -> Repair:
    """Rebuild the damaged copy of `dataset` from the whole one; DatasetError where neither is whole."""
    dataset.check_runs = False
    with dataset.writing():
        before = verify(dataset)
        if not before.problems:
            return Repair(before, None, None, before, [])
        repair_id = f"{REPAIR_PREFIX}{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
        notes: list[str] = []
        if not before.duckdb_whole and before.parquet_whole:
            kept = _keep_old(dataset, repair_id)
            _rebuild_duckdb(dataset, dataset.new_staging(repair_id), notes)
            rebuilt = "duckdb"
        elif before.duckdb_whole and not before.parquet_whole:
            kept = None
            _rewrite_parquet(dataset, dataset.new_staging(repair_id))
            rebuilt = "parquet"
        else:
            raise DatasetError(
                f"{dataset.root}: both copies are damaged (the DuckDB file and the Parquet files): "
                "restore one from a backup, or ingest the jobs again into a new dataset"
            )
    dataset.check_runs = True
    return Repair(before, rebuilt, kept, verify(dataset), notes)


def _keep_old(dataset: Dataset, repair_id: str) -> Path | None:
    """A copy of the DuckDB file and its log in DATASET/.damaged/<repair id>/ (None: there is none)."""
    if not dataset.exists():
        return None
    kept = dataset.root / DAMAGED / repair_id
    kept.mkdir(parents=True)
    for path in (dataset.db_path, dataset.wal_path):
        if path.exists():
            shutil.copyfile(path, kept / path.name)
    return kept


def _rebuild_duckdb(dataset: Dataset, staging: Path, notes: list[str]) -> None:
    con = connect.memory()
    try:
        connect.attach(con, staging / DB_NAME, "d", storage_version=STORAGE_VERSION)
        step = Upgrade(con, dataset.root)
        for table in TABLES:
            step.create(table)
        dataset_format.stamp(con, "d")
        held: list[Path] = []
        for table in PARQUET_TABLES:
            files = table_files(dataset.root, table)
            held += files
            if files:
                source = f"read_parquet({sql_list([str(p) for p in files])})"
                con.execute(f"INSERT INTO d.{table} BY NAME SELECT * FROM {source}")
        written_files.record_files(con, "d", staging.name, dataset.root, held)
        _copy_replay_tables(dataset, con, staging, notes)
        store_queries(con)
        refresh_rollups(con, list(ROLLUPS))
        con.execute("CHECKPOINT d")
        con.execute("DETACH d")
    finally:
        con.close()
    fsync(staging / DB_NAME)
    _write_marker(staging, Plan(), inode(staging / DB_NAME))
    with interrupts.deferred():  # a Ctrl-C waits while the file is swapped in (as a commit's does)
        os.replace(staging / DB_NAME, dataset.db_path)
        remove_replaced_log(dataset.wal_path)
        dataset.discard(staging)


def _copy_replay_tables(dataset: Dataset, con: duckdb.DuckDBPyConnection, staging: Path, notes: list[str]) -> None:
    """The fleet replay's rows (held by the DuckDB file only) from the old file without its log."""
    import duckdb

    old = staging / "old.duckdb"
    try:
        shutil.copyfile(dataset.db_path, old)
        connect.attach(con, old, "old", read_only=True)
    except (OSError, duckdb.Error):
        notes.append(f"the fleet replay's tables could not be read from the old file: {_REPLAY_AGAIN}")
        return
    try:
        for table in REPLAY_TABLES:
            if connect.has_table(con, table, "old"):
                held = connect.columns(con, table, "old")
                columns = ", ".join(ident(n) for n in arrow_schema(table).names if n in held)
                con.execute(f"INSERT INTO d.{table} ({columns}) SELECT {columns} FROM old.{table}")
    except duckdb.Error as exc:
        notes.append(f"the fleet replay's tables were not copied ({connect.first_line(exc)}): {_REPLAY_AGAIN}")
    finally:
        con.execute("DETACH old")


def _rewrite_parquet(dataset: Dataset, staging: Path) -> None:
    """Every core table's Parquet files written again from the DuckDB file, recorded in it, then
    moved into place. The DuckDB file is written (its records), so no other program may hold it."""
    out = staging / "out"
    plan = Plan()
    con = connect.memory()
    try:
        _attach_to_record(dataset, con)
        for table in PARQUET_TABLES:
            single = table in REWRITTEN_TABLES
            target = out / (f"{table}.parquet" if single else f"{table}/part-{staging.name}.parquet")
            target.parent.mkdir(parents=True, exist_ok=True)
            con.execute(f"COPY (SELECT * FROM d.{table} ORDER BY {ORDER[table]}) TO '{sql_path(target)}' ({_OPTIONS})")
            dst = dataset.root / target.relative_to(out)
            plan.moves.append((str(target), str(dst)))
            plan.removals += [str(p) for p in table_files(dataset.root, table) if p != dst]
        recording = connect.has_table(con, written_files.TABLE, "d")
        _write_marker(staging, plan, None)
        with interrupts.deferred():
            if recording:
                con.execute("BEGIN TRANSACTION")
                written_files.record_plan(con, "d", staging.name, dataset.root, plan)
                con.execute("COMMIT")
            con.execute("DETACH d")
            apply_plan(plan)
            dataset.discard(staging)
    finally:
        con.close()


def _attach_to_record(dataset: Dataset, con: duckdb.DuckDBPyConnection) -> None:
    """The dataset's DuckDB file attached read-write as `d`; DatasetError where another program holds it."""
    import duckdb

    try:
        connect.attach(con, dataset.db_path, "d")
    except duckdb.Error as exc:
        holder = connect.holder(exc)
        if holder is not None:
            raise DatasetError(
                f"{dataset.root}: the dataset is open in another program ({holder}): the repair records the "
                "files it writes in the DuckDB file: close it and run `tracekit repair` again"
            ) from exc
        raise DatasetError(f"{dataset.db_path}: cannot open ({connect.first_line(exc)})") from exc


def _write_marker(staging: Path, plan: Plan, db_inode: int | None) -> None:
    marker = staging / COMMIT_MARKER
    marker.write_text(staging_marker.text(staging.name, plan, db_inode, staging.parent.parent))
    fsync(marker)
