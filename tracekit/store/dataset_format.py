"""The dataset's format number: which layout of tables, columns and files a dataset has.

`FORMAT` is the layout this code writes. Every commit leaves the number in the DuckDB file, in a
one-row table `dataset_format` (column `format`), written in the same transaction as the run's rows:
the number and the layout it names are committed together or not at all, travel with the file
when the folder is copied, and read as plain SQL in the DuckDB shell. (A JSON file beside it would
not commit atomically with the rows; DuckDB keeps no user version in a database file.)

The formats, each the layout of the releases named (tracekit.store.migrations holds the step to
each from the one before):
    1  six tables (traces, jobs, process_groups, collectives, ops, runs); traces in one traces.parquet
    2  jobs.ranks_missing and jobs.missing_ranks
    3  rollup tables collective_sizes, collective_ranks, job_classes (issue 9's builds: ops a view)
    4  ops a table of the DuckDB file again
    5  rollup collective_ops
    6  traces appended per run in traces/*.parquet
    7  collective_ops.in_bytes an int128; rollups collective_groups, collective_peers; job_classes of
       the structural class rule
    8  tables replay_jobs and replay_fabrics (a fleet replay's)
    9  replay_jobs.switch_bytes; the number stamped in the file
    10 table written_files: each run's Parquet files, rows, bytes and SHA-256 (none for earlier runs)
    11 table observed_transfers (NCCL Inspector's proxy records; empty for earlier runs)
    12 table observed_collectives (NCCL Inspector's per-operation algorithm, protocol and bandwidths;
       empty for earlier runs)

A file without the table was written before the number existed: `guess` reads its format from what
it holds, once, here; from its next commit on it carries the number.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.store import connect
from tracekit.store.connect import VIEW, ident

if TYPE_CHECKING:
    import duckdb

FORMAT = 12
TABLE = "dataset_format"


def read(con: duckdb.DuckDBPyConnection, catalog: str, root: Path) -> int:
    """The format of the dataset attached as `catalog` whose folder is `root`."""
    found = connect.objects(con, catalog)
    if TABLE not in found:
        return guess(con, catalog, root, found)
    row = con.execute(f"SELECT format FROM {ident(catalog)}.main.{TABLE}").fetchone()
    value = None if row is None else row[0]
    if not isinstance(value, int) or value < 1:  # a hand-edited or damaged file: no commit writes one
        from tracekit.errors import DatasetError

        held = "no row" if row is None else repr(value)
        raise DatasetError(f"{root}: its {TABLE} table holds no format number ({held}): not a dataset tracekit wrote")
    return value


def guess(con: duckdb.DuckDBPyConnection, catalog: str, root: Path, found: dict[str, str]) -> int:
    """The format of a dataset written before the number was stamped: the first thing (oldest
    first) that it lacks of each later format says which it is."""
    if "ranks_missing" not in connect.columns(con, "jobs", catalog):
        return 1
    if "collective_sizes" not in found:
        return 2
    if found.get("ops") == VIEW:
        return 3
    if "collective_ops" not in found:
        return 4
    if (root / "traces.parquet").exists():
        return 5
    if "collective_groups" not in found:
        return 6
    if "replay_jobs" not in found:
        return 7
    if "switch_bytes" not in connect.columns(con, "replay_jobs", catalog):
        return 8
    return 9


def stamp(con: duckdb.DuckDBPyConnection, catalog: str) -> None:
    """Write `FORMAT` into the database attached as `catalog` (inside the caller's transaction)."""
    con.execute(f"CREATE OR REPLACE TABLE {ident(catalog)}.main.{TABLE} (format INTEGER NOT NULL)")
    con.execute(f"INSERT INTO {ident(catalog)}.main.{TABLE} VALUES ({FORMAT})")
