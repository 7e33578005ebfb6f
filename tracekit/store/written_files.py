"""What every run wrote: one row per Parquet file in table `written_files` (rows, bytes, SHA-256),
so that `tracekit verify` can tell a damaged Parquet file from a damaged DuckDB file.

The records live in the DuckDB file only. They vouch for the Parquet copy, so they must not be part
of it: a records file beside the Parquet files would be damaged, removed or copied together with
them, and would need a record of its own. The DuckDB file checks every block it reads, and the
records are written in the transaction of the run's rows (from the staged files, before they move
into place), so they are committed exactly when the rows they describe are. Where the DuckDB file
is the damaged copy its records are not trusted (verify skips them when it lost runs or cannot be
read), and a rebuild records the Parquet files it was built from.

A run records each file it moves into the dataset and each it removes (a row with sha256 null):
files are rewritten in place (a run that replaces rows rewrites the earlier files holding them;
jobs.parquet and the other rewritten tables each run) or removed (merged into one larger file,
replaced by a repair's rewrite), so the records are a log, and the files that should exist now are
those whose latest record (highest `seq`) is not a removal (`expected`).

Datasets of format 9 and earlier have no records for their runs (migration m010 creates the table
empty): a file without a record is then unchecked, not stray, and verify says so in one line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.store.connect import ident
from tracekit.store.parquet_files import Plan

if TYPE_CHECKING:
    import duckdb

TABLE = "written_files"
# Files are hashed in blocks of this size: the memory a hash needs, whatever the file's size.
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Record:
    """The latest record of a path: what the file should hold (sha256 None: it should not exist)."""

    run_id: str
    table: str
    path: str
    rows: int | None
    size: int | None
    sha256: str | None


def digest(path: Path) -> tuple[int, str]:
    """The size and SHA-256 (hex) of the file at `path`, read in blocks (bounded memory)."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()


def relative(root: Path, path: Path | str) -> str:
    """`path` (in the dataset at `root`) as recorded: relative to the dataset, '/'-separated."""
    return Path(path).relative_to(root).as_posix()


def table_of(rel: str) -> str:
    """The table a dataset file holds: its folder (`collectives/x.parquet`) or its name (`jobs.parquet`)."""
    first, _, rest = rel.partition("/")
    return first if rest else first.removesuffix(".parquet")


def record_plan(con: duckdb.DuckDBPyConnection, catalog: str, run_id: str, root: Path, plan: Plan) -> None:
    """Record what `plan` does to the dataset at `root`: each staged file (hashed where it is staged)
    under the path it moves to, and each file it removes. A path both moved to and removed ends
    removed (`apply_plan` moves first)."""
    written: dict[str, Path] = {relative(root, dst): Path(src) for src, dst in plan.moves}
    removed = {relative(root, p) for p in plan.removals}
    _insert(con, catalog, run_id, {p: src for p, src in written.items() if p not in removed}, removed)


def record_files(con: duckdb.DuckDBPyConnection, catalog: str, run_id: str, root: Path, paths: list[Path]) -> None:
    """Record the dataset's files `paths` as they are (a DuckDB file rebuilt from them)."""
    _insert(con, catalog, run_id, {relative(root, p): p for p in paths}, set())


def _insert(
    con: duckdb.DuckDBPyConnection, catalog: str, run_id: str, written: dict[str, Path], removed: set[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracekit.schema import arrow_schema

    rows: list[dict[str, object]] = []
    for rel, source in sorted(written.items()):
        size, sha = digest(source)
        count = pq.read_metadata(source).num_rows
        rows.append(
            {"run_id": run_id, "table_name": table_of(rel), "path": rel, "rows": count, "bytes": size, "sha256": sha}
        )
    rows += [{"run_id": run_id, "table_name": table_of(rel), "path": rel} for rel in sorted(removed)]
    if not rows:
        return
    target = f"{ident(catalog)}.main.{TABLE}"
    [(start,)] = con.execute(f"SELECT coalesce(max(seq), 0) FROM {target}").fetchall()
    for n, row in enumerate(rows, start=int(start) + 1):
        row["seq"] = n
    schema = arrow_schema(TABLE)
    con.register("recorded_files", pa.Table.from_pylist(rows, schema=schema))
    try:
        con.execute(f"INSERT INTO {target} BY NAME SELECT * FROM recorded_files")
    finally:
        con.unregister("recorded_files")


def latest(con: duckdb.DuckDBPyConnection, source: str) -> tuple[dict[str, Record], set[str]]:
    """The latest record of every path in the records at `source` (a qualified table name), and the
    ids of the runs that recorded anything. A row without a path or run (no run writes one: the
    file was edited) says nothing, and a path without a file then stays unrecorded."""
    query = (
        "SELECT run_id, table_name, path, rows, bytes, sha256 FROM "
        f"(SELECT *, row_number() OVER (PARTITION BY path ORDER BY seq DESC NULLS LAST) AS n FROM {source} "
        "WHERE path IS NOT NULL AND run_id IS NOT NULL) WHERE n = 1"
    )
    records = {row[2]: Record(*row) for row in con.execute(query).fetchall()}
    runs = {row[0] for row in con.execute(f"SELECT DISTINCT run_id FROM {source} WHERE run_id IS NOT NULL").fetchall()}
    return records, runs
