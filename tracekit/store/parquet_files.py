"""The dataset's Parquet files: which files hold each table, and how they are kept few and large.

    DATASET/jobs.parquet, process_groups.parquet, runs.parquet                        rewritten per run
    DATASET/traces/*.parquet, DATASET/collectives/*.parquet, DATASET/ops/*.parquet   appended per run

A run adds its rows of the appended tables as new files (`run-<id>-<n>.parquet`, split at
`FILE_BYTES`), clustered by job. Small files are compacted as runs accumulate: once a table has
more than `MAX_SMALL_FILES` files under `SMALL_FILE_BYTES`, they are merged into one file sorted
by the table's key (`part-<id>.parquet`), so a dataset grown one job at a time keeps a few large
files and a merge never rewrites more than a bounded amount. Readers list the folder
(`read_parquet('DATASET/collectives/*.parquet')`); no file ever holds a row another holds.
A run that replaces rows (a file read again replaces its error row, or its rows once its content
changed; a job's whole-job `traces` rows are recomputed) rewrites only the earlier files that hold
them. (Datasets of format 5 and earlier have one `traces.parquet`: tracekit.store.migrations.)

Everything here is written into the run's staging folder (`RunFiles`); its `Plan` says what moves
into the dataset, and which files go, once the run has committed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import DatasetError
from tracekit.store.connect import sql_list, sql_path

if TYPE_CHECKING:
    import duckdb

# Tables whose rows the parse workers stage, and the commit finishes and appends.
STAGED_TABLES = ("collectives", "ops", "observed_transfers", "observed_collectives")
REWRITTEN_TABLES = ("jobs", "process_groups", "runs")
ORDER = {
    "collectives": "job_id, rank, trace_id, op_id",
    "ops": "job_id, rank, trace_id, op_id",
    "observed_transfers": "job_id, rank, trace_id, record_id",
    "observed_collectives": "job_id, rank, trace_id, record_id",
    "traces": "job_id, rank, path",
    "jobs": "job_id",
    "process_groups": "job_id, pg_name",
    "runs": "committed_at",
}
# Every table whose rows the Parquet files hold, as the DuckDB file does: what verify compares and
# repair rebuilds.
PARQUET_TABLES = tuple(ORDER)
# A run's rows of an appended table are split into files of about this size.
FILE_BYTES = 512 << 20
# Files below this size count as small; more than MAX_SMALL_FILES of them are merged into one.
SMALL_FILE_BYTES = 64 << 20
MAX_SMALL_FILES = 8
_OPTIONS = "FORMAT parquet, COMPRESSION zstd"
# Files a run stages (its rows by batch and by round) are written once and read once, by the commit:
# snappy costs less CPU on both sides than zstd (2,000-job fleet's rows: 4.0 against 4.7 CPU s
# written and read) at 2.5x the size.
STAGED_CODEC = "snappy"
# A Parquet file starts with these bytes and ends with them (after the footer and its 4-byte length).
_MAGIC = b"PAR1"
_MIN_PARQUET_BYTES = 12


@dataclass
class Plan:
    """What a run does to the dataset's files once it has committed: staged files moved into place
    (in order), then the files they replace removed. Applying it twice does no harm."""

    moves: list[tuple[str, str]] = field(default_factory=list)
    removals: list[str] = field(default_factory=list)


@dataclass
class RunFiles:
    """Where a run writes its Parquet files (`out`, in its staging folder) for the dataset at `root`,
    and what it does with them once it has committed (`plan`)."""

    run_id: str
    root: Path
    out: Path
    plan: Plan = field(default_factory=Plan)


def write_rewritten(con: duckdb.DuckDBPyConnection, db: str, files: RunFiles) -> None:
    """Each table rewritten whole per run, as it stands in the attached database `db`."""
    for table in REWRITTEN_TABLES:
        target = files.out / f"{table}.parquet"
        files.out.mkdir(parents=True, exist_ok=True)
        con.execute(f"COPY (SELECT * FROM {db}.{table} ORDER BY {ORDER[table]}) TO '{sql_path(target)}' ({_OPTIONS})")
        files.plan.moves.append((str(target), str(files.root / target.name)))


def write_appended(
    con: duckdb.DuckDBPyConnection, table: str, query: str, files: RunFiles, replaced: str | None = None
) -> list[str]:
    """The run's rows of `table` (the rows `query` selects) as new files, then a merge of the table's
    small files if there are too many; earlier files holding rows the run replaced (`replaced`: a
    SQL condition on a row) are rewritten without them. Returns the run's new files (to load into
    DuckDB)."""
    run_id, root, plan = files.run_id, files.root, files.plan
    folder = files.out / table
    folder.mkdir(parents=True, exist_ok=True)
    con.execute(
        f"COPY ({query}) TO '{sql_path(folder)}' "
        f"({_OPTIONS}, FILE_SIZE_BYTES {FILE_BYTES}, FILENAME_PATTERN 'run-{run_id}-{{i}}', OVERWRITE_OR_IGNORE)"
    )
    written = sorted(str(p) for p in folder.glob(f"run-{run_id}-*.parquet"))
    held = sorted((root / table).glob("*.parquet"))
    for path in held:
        check_whole(path)
    small = [str(p) for p in held if p.stat().st_size < SMALL_FILE_BYTES]
    small_new = [p for p in written if Path(p).stat().st_size < SMALL_FILE_BYTES]
    if len(small) + len(small_new) > MAX_SMALL_FILES:
        merged = folder / f"part-{run_id}.parquet"
        parts = []
        if small:
            parts.append(
                f"SELECT * FROM read_parquet({sql_list(small)})" + (f" WHERE NOT ({replaced})" if replaced else "")
            )
        if small_new:
            parts.append(f"SELECT * FROM read_parquet({sql_list(small_new)})")
        con.execute(
            f"COPY (SELECT * FROM ({' UNION ALL BY NAME '.join(parts)}) ORDER BY {ORDER[table]}) "
            f"TO '{sql_path(merged)}' ({_OPTIONS})"
        )
        plan.moves.append((str(merged), str(root / table / merged.name)))
        plan.removals += small
        keep = [p for p in written if p not in small_new]
    else:
        small, keep = [], written
    if replaced:
        _drop_replaced(con, [p for p in map(str, held) if p not in small], replaced, folder, plan)
    plan.moves += [(p, str(root / table / Path(p).name)) for p in keep]
    return written


def _drop_replaced(con: duckdb.DuckDBPyConnection, held: list[str], replaced: str, out: Path, plan: Plan) -> None:
    """Each of the `held` files that holds a row the run replaced (`replaced`), rewritten without
    those rows, to move over it: only these files are read whole."""
    if not held:
        return
    query = f"SELECT DISTINCT filename FROM read_parquet({sql_list(held)}, filename = true) WHERE {replaced}"
    for (path,) in con.execute(query).fetchall():
        rewritten = out / f"kept-{Path(path).name}"
        con.execute(
            f"COPY (SELECT * FROM read_parquet('{sql_path(path)}') WHERE NOT ({replaced})) "
            f"TO '{sql_path(rewritten)}' ({_OPTIONS})"
        )
        plan.moves.append((str(rewritten), path))


def check_whole(path: Path) -> None:
    """DatasetError naming `path` unless it looks like a whole Parquet file (its magic bytes at both
    ends): an emptied or truncated file would fail the run later in a DuckDB traceback, or never
    be noticed. Costs two small reads."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_MAGIC))
            end = f.seek(0, os.SEEK_END)
            f.seek(max(end - len(_MAGIC), 0))
            tail = f.read(len(_MAGIC))
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from exc
    if end == 0:
        problem = "an empty file"
    elif head != _MAGIC or tail != _MAGIC or end < _MIN_PARQUET_BYTES:
        problem = "not a whole Parquet file: truncated or overwritten"
    else:
        return
    raise DatasetError(
        f"{path}: damaged ({problem}); the DuckDB file still holds its rows: restore the file, or move it "
        "aside and ingest its jobs again"
    )


def apply_plan(plan: Plan) -> None:
    """Move the run's files into place, then remove the files they replace (harmless twice)."""
    for src, dst in plan.moves:
        if os.path.exists(src):
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    for path in plan.removals:
        Path(path).unlink(missing_ok=True)


def table_files(root: Path, table: str) -> list[Path]:
    """The Parquet files holding `table` in the dataset at `root`, sorted (none where it has none).
    Datasets of format 5 and earlier keep traces in one `traces.parquet`."""
    if table in REWRITTEN_TABLES:
        single = root / f"{table}.parquet"
        return [single] if single.is_file() else []
    folder = root / table
    if folder.is_dir():
        return sorted(p for p in folder.glob("*.parquet") if p.is_file())
    single = root / f"{table}.parquet"
    return [single] if single.is_file() else []
