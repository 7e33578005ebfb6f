"""Every way tracekit opens DuckDB, quotes what it puts into SQL text, and asks what a database holds.

Opening: `memory` (an in-memory connection that attaches files: readers, the commit, replay
outputs), `open_file` (a connection to one DuckDB file itself: the ingest's reads and writes of its
dataset) and `attach` (a file into a connection under an alias, read-only or to write, in a given
storage version). Quoting: `sql_path` and `sql_list` for paths in string literals, `ident` for names.
Probes: `objects`, `kind`, `columns` and `has_table` read DuckDB's catalogue functions for one
attached database (`catalog`; None: the connection's current database).
Why DuckDB refused to open a file is read from its error here too (`holder`, `held_elsewhere`, `damaged`,
`out_of_space`).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

# What `pip install duckdb-cli` (1.5.x) reads; DuckDB 2.x would otherwise write a newer format.
STORAGE_VERSION = "v1.5.0"
# DuckDB's error when another process holds the file: `Conflicting lock is held in PROGRAM (PID N)`.
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")
# Its errors when another process holds the file (IOException), or this one has it attached.
_HELD = ("Conflicting lock is held in", "Could not set lock on file")
_ATTACHED = ("already attached", "different configuration")
# Its errors reading a damaged file: a block whose checksum fails, a file shorter than its blocks,
# a header that is not DuckDB's.
_DAMAGED = ("Corrupt database file", "Could not read enough bytes from file", "not a valid DuckDB database file")
# A write that found no room, by errno and as DuckDB and pyarrow word it.
_NO_SPACE_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG))
_NO_SPACE = tuple(os.strerror(code) for code in sorted(_NO_SPACE_ERRNOS))
# DuckDB refusing a log written for an earlier state of its file: a run swapped a checkpointed copy
# in and was killed before removing the log it replaced (tracekit.store.commit).
_STALE_LOG = ("WAL checkpoint iteration does not match", "WAL was created for an older version")
BASE_TABLE = "BASE TABLE"
VIEW = "VIEW"


def sql_path(path: Path | str) -> str:
    """A path as the inside of an SQL string literal."""
    return str(path).replace("'", "''")


def sql_list(paths: list[str]) -> str:
    """Paths as an SQL list of string literals: ['a', 'b']."""
    return "[" + ", ".join(f"'{sql_path(p)}'" for p in paths) + "]"


def ident(name: str) -> str:
    """A name (table, column, alias) as an SQL quoted identifier."""
    return '"' + name.replace('"', '""') + '"'


def memory(progress_bar: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection of its own (an in-memory database), to attach files to. Readers use one rather
    than `duckdb.connect(path)`: DuckDB hands every connect() of one path the same instance while
    one is open, which would keep reading a file that a commit has since replaced."""
    import duckdb

    con = duckdb.connect()
    if not progress_bar:
        con.execute("SET enable_progress_bar = false")  # it would draw on the user's terminal
    return con


def open_file(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file at `path` itself (duckdb.Error when it cannot be opened)."""
    import duckdb

    return duckdb.connect(str(path), read_only=read_only)


def attach(
    con: duckdb.DuckDBPyConnection,
    path: Path | str,
    alias: str,
    read_only: bool = False,
    storage_version: str | None = None,
) -> None:
    """ATTACH the DuckDB file at `path` to `con` as `alias` (a new file in `storage_version`)."""
    options = []
    if read_only:
        options.append("READ_ONLY")
    if storage_version is not None:
        options.append(f"STORAGE_VERSION '{storage_version}'")
    suffix = f" ({', '.join(options)})" if options else ""
    con.execute(f"ATTACH '{sql_path(path)}' AS {ident(alias)}{suffix}")


def current(con: duckdb.DuckDBPyConnection) -> str:
    """The name of the connection's current database."""
    row = con.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


def objects(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> dict[str, str]:
    """The tables and views of the database attached as `catalog` (main schema): name -> BASE TABLE or VIEW."""
    rows = con.execute(
        "SELECT table_name, 'BASE TABLE' FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main' "
        "UNION ALL SELECT view_name, 'VIEW' FROM duckdb_views() WHERE database_name = $db AND schema_name = 'main'",
        {"db": catalog or current(con)},
    ).fetchall()
    return {name: kind for name, kind in rows}


def kind(con: duckdb.DuckDBPyConnection, name: str, catalog: str | None = None) -> str | None:
    """BASE TABLE or VIEW: what `name` is in `catalog`; None where it has no such table or view."""
    return objects(con, catalog).get(name)


def has_table(con: duckdb.DuckDBPyConnection, name: str, catalog: str | None = None) -> bool:
    """Whether `catalog` has a table or a view called `name`."""
    return kind(con, name, catalog) is not None


def columns(con: duckdb.DuckDBPyConnection, table: str, catalog: str | None = None) -> dict[str, str]:
    """The columns of `table` in `catalog`, in order: name -> DuckDB type (empty: no such table)."""
    rows = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = $db AND schema_name = 'main' "
        "AND table_name = $table ORDER BY column_index",
        {"db": catalog or current(con), "table": table},
    ).fetchall()
    return {name: kind for name, kind in rows}


def holder(exc: BaseException) -> str | None:
    """Who holds the file, when that is why DuckDB could not open it: `duckdb, PID 8347`."""
    text = str(exc)
    match = _LOCK_HOLDER.search(text)
    if match:
        return f"{Path(match.group(1)).name}, PID {match.group(2)}"
    if "already attached" in text or "different configuration" in text:
        return f"this process, PID {os.getpid()}"
    return None


def held_elsewhere(exc: BaseException) -> bool:
    """The DuckDB error says another process (or another database of this one) has the file open:
    by its type and DuckDB's exact phrases (a damaged file's "in block" holds the word "lock")."""
    import duckdb

    text = str(exc)
    if isinstance(exc, duckdb.IOException) and any(phrase in text for phrase in _HELD):
        return True
    return isinstance(exc, duckdb.Error) and any(phrase in text for phrase in _ATTACHED)


def damaged(exc: BaseException) -> bool:
    """The DuckDB error says the file is damaged (torn, truncated, overwritten), not held or missing."""
    import duckdb

    if isinstance(exc, duckdb.SerializationException):
        return True
    return isinstance(exc, duckdb.Error) and any(phrase in str(exc) for phrase in _DAMAGED)


def stale_log(exc: BaseException) -> bool:
    """The DuckDB error says the write-ahead log beside the file belongs to an earlier state of it."""
    import duckdb

    return isinstance(exc, duckdb.Error) and any(phrase in str(exc) for phrase in _STALE_LOG)


def out_of_space(exc: BaseException) -> bool:
    """The error is a write that found no room: the disk or a quota full, or past the largest file
    allowed (an OSError from Python or pyarrow, an IOException from DuckDB)."""
    import duckdb

    if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS:
        return True
    text = str(exc)
    return isinstance(exc, (OSError, duckdb.IOException)) and any(phrase in text for phrase in _NO_SPACE)


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
