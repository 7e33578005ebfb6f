"""`tracekit verify`: the DuckDB copy and the Parquet copy of a dataset compared, table by table.

For each table: its Parquet files whole (tracekit.store.parquet_files.check_whole), and the row count
and a content hash (the bit_xor of every row's hash) equal in both copies; runs.parquet's runs all
in the DuckDB file (tracekit.store.integrity) and the other way round. Where the copies differ, the
DuckDB file is blamed where it lacks runs runs.parquet lists (a damaged log) or cannot be opened,
else the Parquet files: DuckDB checks every block it reads, these Parquet pages carry no checksum,
and a stray or copied file in a table's folder adds rows to every reader of the folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import DatasetError
from tracekit.store import connect
from tracekit.store.connect import sql_list
from tracekit.store.dataset import CORE_TABLES, Dataset
from tracekit.store.integrity import RUNS_FILE, held_runs, lost_runs_error, recorded_runs
from tracekit.store.parquet_files import check_whole, table_files

if TYPE_CHECKING:
    import duckdb


@dataclass
class TableCheck:
    """One table in both copies: rows and a content hash (bit_xor of the rows' hashes)."""

    table: str
    files: int
    duckdb_rows: int | None = None
    parquet_rows: int | None = None
    same_content: bool | None = None


@dataclass
class Verdict:
    """What `verify` found: `problems`, one line each (none: the copies agree), and per table what it compared."""

    problems: list[str] = field(default_factory=list)
    tables: list[TableCheck] = field(default_factory=list)
    runs: int = 0
    # Which copy is whole where one is not: what `tracekit repair` rebuilds from.
    duckdb_whole: bool = True
    parquet_whole: bool = True
    # A table whose copies differ: blamed on the DuckDB file where it lost runs, else on the Parquet files.
    mismatched: bool = False


def verify(dataset: Dataset) -> Verdict:
    """Compare the DuckDB file and the Parquet files of `dataset`, table by table (never writes)."""
    verdict = Verdict()
    for staging in dataset.pending_runs():
        verdict.problems.append(
            f"{staging}: an interrupted run is pending: the next ingest or `tracekit repair` finishes or drops it"
        )
    con = connect.memory()
    try:
        tables = _attach(dataset, con, verdict)
        for table in CORE_TABLES:
            files = table_files(dataset.root, table)
            whole = []
            for path in files:
                try:
                    check_whole(path)
                    whole.append(str(path))
                except DatasetError as exc:
                    verdict.problems.append(str(exc).split("; ")[0])
                    verdict.parquet_whole = False
            check = TableCheck(table, len(files))
            verdict.tables.append(check)
            parquet = _count_and_hash(con, f"read_parquet({sql_list(whole)})", verdict, table) if whole else (0, 0)
            if whole and parquet is None:
                verdict.parquet_whole = False
            duck = _count_and_hash(con, tables[table], verdict, table) if table in tables else None
            if table in tables and duck is None:
                verdict.duckdb_whole = False
            _compare(dataset.root, check, duck, parquet, len(whole) < len(files), verdict)
        if tables:
            _compare_runs(dataset.root, con, tables["runs"], verdict)
    finally:
        con.close()
    if verdict.mismatched and verdict.duckdb_whole:
        verdict.parquet_whole = False
    return verdict


def _attach(dataset: Dataset, con: duckdb.DuckDBPyConnection, verdict: Verdict) -> dict[str, str]:
    """The DuckDB copy attached as `d` (where to read each table), or {} naming why it cannot be."""
    if not dataset.exists():
        verdict.problems.append(f"{dataset.db_path}: missing")
        verdict.duckdb_whole = False
        return {}
    try:
        return dataset.attach_read_only(con, "d", check_runs=False)
    except DatasetError as exc:
        verdict.problems.append(str(exc))
        verdict.duckdb_whole = False
        return {}


def _count_and_hash(
    con: duckdb.DuckDBPyConnection, source: str, verdict: Verdict, table: str
) -> tuple[int, int] | None:
    import duckdb

    try:
        found = con.execute(f"SELECT count(*), coalesce(bit_xor(hash(t)), 0) FROM {source} t").fetchone()
    except duckdb.Error as exc:
        copy = "the Parquet files" if source.startswith("read_parquet") else "the DuckDB file"
        verdict.problems.append(f"{table}: {copy} cannot be read ({connect.first_line(exc)})")
        return None
    assert found is not None
    return int(found[0]), int(found[1])


def _compare(
    root: Path,
    check: TableCheck,
    duck: tuple[int, int] | None,
    parquet: tuple[int, int] | None,
    parquet_damaged: bool,
    verdict: Verdict,
) -> None:
    if duck is None or parquet is None:
        return
    check.duckdb_rows, check.parquet_rows = duck[0], parquet[0]
    check.same_content = duck == parquet
    if check.same_content or parquet_damaged:
        return
    where = f"{root / check.table}{'.parquet' if check.table in _SINGLE else '/'}"
    if check.files == 0:
        verdict.problems.append(f"{where}: missing (the DuckDB file holds {duck[0]:,} rows of {check.table})")
    elif duck[0] != parquet[0]:
        verdict.problems.append(
            f"{check.table}: the DuckDB file holds {duck[0]:,} rows, the Parquet files ({where}) {parquet[0]:,}"
        )
    else:
        verdict.problems.append(f"{check.table}: the DuckDB file and the Parquet files ({where}) differ in content")
    verdict.mismatched = True


_SINGLE = ("jobs", "process_groups", "runs")


def _compare_runs(root: Path, con: duckdb.DuckDBPyConnection, runs_table: str, verdict: Verdict) -> None:
    import duckdb

    recorded = recorded_runs(con, root)
    try:
        held = held_runs(con, runs_table)
    except duckdb.Error:
        verdict.duckdb_whole = False  # named by the table comparison already
        return
    verdict.runs = len(held)
    if recorded is None:
        return
    lost = sorted(recorded - held)
    if lost:
        verdict.problems.append(str(lost_runs_error(root, lost)))
        verdict.duckdb_whole = False
    unlisted = sorted(held - recorded)
    if unlisted:
        shown = ", ".join(unlisted[:3])
        verdict.problems.append(f"{root / RUNS_FILE}: lacks {len(unlisted)} run(s) the DuckDB file holds ({shown})")
        verdict.parquet_whole = False
