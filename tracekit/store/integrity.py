"""Whether a dataset's two copies agree: the DuckDB file (with its write-ahead log) and the Parquet files.

Every run writes its rows into both (tracekit.store.dataset), and `runs.parquet`, rewritten by each
run, lists every run committed. DuckDB replays a damaged log (tracekit.duckdb.wal truncated, emptied,
its header overwritten) only up to the damage, silently: the runs it held vanish from the DuckDB file
while runs.parquet still lists them. `lost_runs` is that check, cheap enough for every open (one
small file); tracekit.store.verify compares every table of both copies, row count and content.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import DatasetError

if TYPE_CHECKING:
    import duckdb

RUNS_FILE = "runs.parquet"


def recorded_runs(con: duckdb.DuckDBPyConnection, root: Path) -> set[str] | None:
    """The run ids runs.parquet lists; None where it is absent or unreadable (`verify` names that)."""
    import duckdb

    path = root / RUNS_FILE
    if not path.is_file():
        return None
    try:
        return {row[0] for row in con.execute("SELECT run_id FROM read_parquet(?)", [str(path)]).fetchall()}
    except duckdb.Error:
        return None


def held_runs(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    """The run ids of the runs table `table` (a qualified name) of the DuckDB copy."""
    return {row[0] for row in con.execute(f"SELECT run_id FROM {table}").fetchall()}


def lost_runs(con: duckdb.DuckDBPyConnection, runs_table: str, root: Path) -> list[str]:
    """Runs that runs.parquet lists and the DuckDB copy (its table `runs_table`) lacks."""
    recorded = recorded_runs(con, root)
    if not recorded:
        return []
    return sorted(recorded - held_runs(con, runs_table))


def lost_runs_error(root: Path, lost: list[str]) -> DatasetError:
    shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
    noun = "run" if len(lost) == 1 else "runs"
    return DatasetError(
        f"{root}: the DuckDB file lacks {len(lost)} committed {noun} that {RUNS_FILE} lists ({shown}): "
        f"its log (tracekit.duckdb.wal) or the file was damaged; the Parquet files still hold the rows: "
        f"run `tracekit repair {root}`"
    )
