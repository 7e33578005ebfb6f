"""A reader's snapshot of a DuckDB file that another process holds read-write.

While another process holds the file read-write (the DuckDB shell opened without -readonly, an
ingest committing in place), DuckDB lets nobody else open it, not even read-only, so a reader opens
a snapshot: a copy of the file and its log, taken while neither changed, in the temporary folder and
removed as soon as DuckDB has it open. A holder that keeps writing is named in a one-line error.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import DatasetError
from tracekit.store import connect

if TYPE_CHECKING:
    import duckdb

# Seconds to wait between snapshot copies of a file another process keeps writing, before giving up.
SNAPSHOT_WAITS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


def attach_snapshot(
    con: duckdb.DuckDBPyConnection, db_path: Path, wal_path: Path | None, alias: str, holder: str
) -> None:
    """Attach a copy of the file and its log (None: the file alone) taken while neither changed (the
    holder may be writing: a copy that changed meanwhile may be torn), retrying while the holder writes."""
    import duckdb

    for wait in (0.0, *SNAPSHOT_WAITS):
        time.sleep(wait)
        try:
            folder = tempfile.mkdtemp(prefix="tracekit-snapshot-")
        except OSError as exc:
            raise DatasetError(
                f"{db_path}: {holder} holds it open for writing, and no snapshot can be made in "
                f"{tempfile.gettempdir()} ({exc.strerror})"
            ) from exc
        try:
            watched = (db_path,) if wal_path is None else (db_path, wal_path)
            before = stamps(*watched)
            copy = Path(folder) / db_path.name
            shutil.copyfile(db_path, copy)
            if wal_path is not None and wal_path.exists():
                shutil.copyfile(wal_path, copy.with_name(wal_path.name))
            if stamps(*watched) != before:
                continue
            try:
                connect.attach(con, copy, alias, read_only=True)
                return
            except duckdb.Error:  # torn after all (changed within the clock's resolution)
                continue
        except OSError as exc:
            raise DatasetError(
                f"{db_path}: {holder} holds it open for writing, and no snapshot can be made in "
                f"{folder} ({exc.strerror})"
            ) from exc
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # DuckDB keeps the files it opened
    raise DatasetError(
        f"{db_path}: {holder} holds it open for writing and kept changing it: try again when it "
        "has finished (a DuckDB shell reading it is best opened with duckdb -readonly)"
    )


def stamps(*paths: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """What changes when the file or its log is written: inode, size and modification time."""
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            stamps.append(None)
    return tuple(stamps)
