"""A tracekit dataset on disk: one DuckDB file plus Parquet for every table, committed atomically.

Layout of DATASET/:
    tracekit.duckdb     every table, by name (opens in the DuckDB shell), and every shipped query
    *.parquet, traces/, collectives/ and ops/*.parquet  the same rows as Parquet (tracekit.store.parquet_files)

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
another process holds the file read-write, a reader opens a snapshot (tracekit.store.snapshot).
A reader of an older format is shown it as this format, in memory (tracekit.store.migrations).
The commit itself is tracekit.store.commit.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tracekit.errors import MAX_MESSAGE_CHARS, DatasetError, one_line
from tracekit.schema import arrow_schema
from tracekit.store import connect, dataset_format, integrity, migrations, staging_marker
from tracekit.store.parquet_files import apply_plan
from tracekit.store.snapshot import attach_snapshot

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa


DB_NAME = "tracekit.duckdb"
WAL_NAME = DB_NAME + ".wal"
# A run that leaves more than this in DuckDB's write-ahead log checkpoints it into the file.
WAL_CHECKPOINT_BYTES = 16 << 20
STAGING = ".staging"
COMMIT_MARKER = "COMMIT.json"
# The staging folders of `tracekit repair` (tracekit.store.repair): its marker's moves are followed
# whatever the runs table holds, since a repair adds no run.
REPAIR_PREFIX = "repair-"
# How the line saying another program holds the DuckDB file ends, for an ingest (whose --out names
# the dataset); the fleet replay, whose --out is something else, says its own.
BUSY_ADVICE = "close it or use --out elsewhere"
# The tables every dataset tracekit wrote has (the rollups came later: see tracekit.store.dataset_format).
CORE_TABLES = ("traces", "jobs", "process_groups", "collectives", "ops", "runs")


class Dataset:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # The run whose commit point this object passed: its staging folder must survive a failure
        # after that point, for `recover` to finish the moves.
        self.committed_run: str | None = None
        # What `recover` found and did not follow (a torn or foreign commit marker), one line each.
        self.warnings: list[str] = []
        # Opening refuses a DuckDB file that lacks runs runs.parquet lists (tracekit.store.integrity);
        # `tracekit repair`, which rebuilds it, turns that off.
        self.check_runs = True

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
    def writing(self, advice: str = BUSY_ADVICE) -> Iterator[None]:
        """Hold the dataset's write lock; finish or discard an earlier interrupted run first.
        `advice` ends the line that says another program holds the DuckDB file (`connect`)."""
        if self.root.exists() and not self.root.is_dir():
            raise DatasetError(f"{self.root}: exists and is not a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatasetError(f"{self.root}: cannot write ({exc.strerror})") from exc
        with open_lock(self.root / ".lock") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise DatasetError(
                    f"{self.root}: another tracekit command (an ingest or a fleet replay) is writing this dataset: "
                    "run again when it is done"
                ) from exc
            self.recover()
            if self.check_runs and self.exists():
                self.connect(advice=advice).close()  # a DuckDB file that lost runs is never written over
            yield

    def new_staging(self, run_id: str) -> Path:
        path = self.staging_root / run_id
        path.mkdir(parents=True)
        return path

    def recover(self) -> None:
        """Finish the file moves of a committed run, drop the staging of uncommitted ones.

        The folder is untrusted (on shared storage every worker can write it): a commit marker is
        followed only where `staging_marker.read` finds it whole and naming the dataset's own files;
        any other is named in `warnings` and its staging folder removed."""
        if self.staging_root.is_symlink() or (self.staging_root.exists() and not self.staging_root.is_dir()):
            self.warnings.append(f"{self.staging_root}: not a folder; removed, not followed")
            self.staging_root.unlink()
            return
        if not self.staging_root.is_dir():
            return
        markers: dict[Path, staging_marker.Marker] = {}
        for staging in sorted(self.staging_root.iterdir()):
            path = staging / COMMIT_MARKER
            if staging.is_symlink() or not path.is_file():
                continue
            try:
                markers[staging] = staging_marker.read(path, self.root, staging)
            except staging_marker.MarkerError as exc:
                self.warnings.append(f"{path}: {exc}; ignored and removed")
        swapped_in = any(m.db_inode is not None and inode(self.db_path) == m.db_inode for m in markers.values())
        if swapped_in and self._log_is_stale():
            remove_replaced_log(self.wal_path)  # the run's copy was swapped in: the log is stale
        committed = self._committed_runs() if markers else set()
        for staging in self.staging_root.iterdir():
            found = markers.get(staging)
            if found is not None and (found.run_id in committed or found.run_id.startswith(REPAIR_PREFIX)):
                apply_plan(found.plan)
            self.discard(staging)

    def pending_runs(self) -> list[Path]:
        """Staging folders of runs interrupted after their commit marker was written (`recover` finishes them)."""
        if not self.staging_root.is_dir() or self.staging_root.is_symlink():
            return []
        return sorted(p for p in self.staging_root.iterdir() if (p / COMMIT_MARKER).is_file())

    def _log_is_stale(self) -> bool:
        """DuckDB refuses the log beside the file as written for an earlier state of it. Asked of
        DuckDB, not of the marker alone: a marker planted with the file's inode must not make a
        recovery delete a log that holds committed runs."""
        import duckdb

        if not self.wal_path.exists():
            return False
        try:
            connect.open_file(self.db_path, read_only=True).close()
        except duckdb.Error as exc:
            return connect.stale_log(exc)
        return False

    def _log_replaced(self) -> bool:
        """A whole commit marker says the DuckDB file is the copy its run swapped in (its log is stale)."""
        current = inode(self.db_path)
        for staging in self.pending_runs():
            try:
                marker = staging_marker.read(staging / COMMIT_MARKER, self.root, staging)
            except staging_marker.MarkerError:
                continue
            if marker.db_inode is not None and marker.db_inode == current:
                return True
        return False

    def _committed_runs(self) -> set[str]:
        if not self.exists():
            return set()
        with self.connect() as con:
            return {r[0] for r in con.execute("select run_id from runs").fetchall()}

    def connect(
        self, read_only: bool = True, advice: str = BUSY_ADVICE, _retried: bool = False
    ) -> duckdb.DuckDBPyConnection:
        """A connection to the DuckDB file itself (for the ingest that writes it; readers use
        `attach_read_only`), checked to be a tracekit dataset. Read-only, a dataset of an older
        format is shown as this one (tracekit.store.migrations.present)."""
        import duckdb

        try:
            con = connect.open_file(self.db_path, read_only)
        except duckdb.Error as exc:
            holder = connect.holder(exc)
            if holder is not None:
                raise DatasetError(f"{self.root}: the dataset is open in another program ({holder}): {advice}") from exc
            raise self._unusable(exc) from exc
        try:
            catalog = connect.current(con)
            self._check_tables(con, catalog)
            if read_only:
                self.present(con, catalog)
            lost = integrity.lost_runs(con, f"{connect.ident(catalog)}.runs", self.root) if self.check_runs else []
        except duckdb.Error as exc:
            con.close()
            if connect.damaged(exc):
                raise self.damaged(exc) from exc
            raise
        except BaseException:
            con.close()
            raise
        if lost:
            con.close()
            if _retried:  # still: not a commit that landed between reading the two copies
                raise integrity.lost_runs_error(self.root, lost)
            return self.connect(read_only, advice, _retried=True)
        return con

    def attach_read_only(
        self, con: duckdb.DuckDBPyConnection, alias: str, prefix: str = "", check_runs: bool = True
    ) -> dict[str, str]:
        """Attach the committed dataset to `con` as `alias`, read-only: the file itself, or, while
        another process holds it read-write, a snapshot of it (tracekit.store.snapshot). Returns
        where to read each table from (`present`). A DuckDB file that lacks runs runs.parquet lists
        is refused (`check_runs`: tracekit.store.integrity), after one retry: a commit may have
        landed between reading the two."""
        check_runs = check_runs and self.check_runs
        lost: list[str] = []
        import duckdb

        for _ in range(2):
            tables = self._attach_read_only(con, alias, prefix)
            try:
                lost = integrity.lost_runs(con, f"{connect.ident(alias)}.runs", self.root) if check_runs else []
            except duckdb.Error as exc:
                con.execute(f"DETACH {connect.ident(alias)}")
                if connect.damaged(exc):
                    raise self.damaged(exc) from exc
                raise
            if not lost:
                return tables
            con.execute(f"DETACH {connect.ident(alias)}")
        raise integrity.lost_runs_error(self.root, lost)

    def _attach_read_only(self, con: duckdb.DuckDBPyConnection, alias: str, prefix: str) -> dict[str, str]:
        import duckdb

        try:
            connect.attach(con, self.db_path, alias, read_only=True)
        except duckdb.Error as exc:
            holder = connect.holder(exc)
            if holder is not None:
                attach_snapshot(con, self.db_path, self.wal_path, alias, holder)
            elif connect.stale_log(exc) and self._log_replaced():
                # A run swapped its copy in and was killed before removing the old log: the file
                # is the committed state, the log stale (the next writer removes it). Read the file alone.
                attach_snapshot(con, self.db_path, None, alias, "an interrupted run")
            else:
                raise self._unusable(exc) from exc
        try:
            self._check_tables(con, alias)
            return self.present(con, alias, prefix)
        except BaseException:
            con.execute(f"DETACH {alias}")
            raise

    def present(self, con: duckdb.DuckDBPyConnection, catalog: str, prefix: str = "") -> dict[str, str]:
        """Show a reader the dataset attached as `catalog` as this format, in memory: where it is of an
        older one, temporary stand-ins named `prefix` + table (the file is never written). Returns
        where to read each table from."""
        found = dataset_format.read(con, catalog, self.root)
        if found > dataset_format.FORMAT:
            raise newer_format(self.root, found)
        return migrations.present(con, catalog, self.root, found, prefix)

    def _unusable(self, exc: BaseException) -> DatasetError:
        """The error for a DuckDB file that cannot be opened, for a reason other than another holder."""
        text = str(exc)
        if "not a valid DuckDB database file" in text:
            empty = size(self.db_path) == 0
            return DatasetError(
                f"{self.db_path}: not a tracekit dataset ({'an empty file' if empty else 'not a DuckDB database file'})"
            )
        if connect.damaged(exc):
            return self.damaged(exc)
        return DatasetError(f"{self.db_path}: cannot open ({connect.first_line(exc)})")

    def damaged(self, exc: BaseException) -> DatasetError:
        """The error for a DuckDB file that DuckDB found damaged (`connect.damaged`), in one line."""
        return DatasetError(
            f"{self.db_path}: damaged ({one_line(connect.first_line(exc), MAX_MESSAGE_CHARS)}): "
            f"`tracekit repair {self.root}` rebuilds it from the Parquet files"
        )

    def _check_tables(self, con: duckdb.DuckDBPyConnection, catalog: str) -> None:
        """DatasetError unless the database attached as `catalog` has tracekit's tables."""
        found = connect.objects(con, catalog)
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
        import duckdb

        try:
            cursor = con.execute(sql, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        except duckdb.Error as exc:
            if connect.damaged(exc):  # DuckDB reads a block when a query needs it, and checks it then
                raise self.damaged(exc) from exc
            raise

    def rows_by_job(
        self, table: str, job_ids: list[str], con: duckdb.DuckDBPyConnection | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The committed rows of `table` for each of `job_ids` (one query for all of them)."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        rows = self.query_rows(f"select * from {table} where job_id in (select unnest(?::VARCHAR[]))", [job_ids], con)
        for row in rows:
            grouped.setdefault(row["job_id"], []).append(row)
        return grouped

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
        """Remove a run's staging folder (and the staging root once empty); a symlink is removed,
        never followed."""
        if staging.is_symlink() or staging.is_file():
            staging.unlink(missing_ok=True)
        else:
            shutil.rmtree(staging, ignore_errors=True)
        try:
            self.staging_root.rmdir()
        except OSError:
            pass


def open_lock(path: Path) -> IO[bytes]:
    """The lock file, opened to write without following a symlink and only if it is a regular file
    (the folder is untrusted: a `.lock` linked elsewhere must not be created or truncated there)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise DatasetError(f"{path}: not a regular file (a symlink, folder or device): remove it") from exc
        raise DatasetError(f"{path.parent}: cannot write ({exc.strerror})") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DatasetError(f"{path}: not a regular file (a symlink, folder or device): remove it")
    return os.fdopen(fd, "wb")


def newer_format(root: Path, found: int) -> DatasetError:
    """The error for a dataset that a later tracekit wrote, in a format this one does not know."""
    return DatasetError(
        f"{root}: written by a later tracekit (dataset format {found}; this one reads formats up to "
        f"{dataset_format.FORMAT}): upgrade tracekit to read it"
    )


def remove_replaced_log(wal: Path) -> None:
    """The log of a DuckDB file that a checkpointed copy replaced (DuckDB refuses to open the pair)."""
    wal.unlink(missing_ok=True)


def inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
