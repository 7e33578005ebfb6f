"""`tracekit verify`: the DuckDB copy and the Parquet copy of a dataset compared, table by table.

For each table: its Parquet files whole (tracekit.store.parquet_files.check_whole) and each as its
run recorded it in the DuckDB file (tracekit.store.written_files: size and SHA-256; a recorded file
missing, a file no run wrote or a later one removed, named by path), and the row count and a content
hash (the bit_xor of every row's hash) equal in both copies; runs.parquet's runs all in the DuckDB
file (tracekit.store.integrity) and the other way round. Where the copies differ, the DuckDB file is
blamed where it lacks runs runs.parquet lists (a damaged log) or cannot be opened; else the records
decide: a table whose Parquet files are all exactly as recorded has a damaged DuckDB copy, any other
a damaged Parquet copy (these Parquet pages carry no checksum of their own, and a stray or copied
file in a table's folder adds rows to every reader of the folder). The records are not used where
the DuckDB file lost runs or cannot be read (they are part of what is damaged); files of runs before
format 10, which recorded nothing, are checked by count and content only, said in one note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import DatasetError
from tracekit.store import connect
from tracekit.store.connect import sql_list
from tracekit.store.dataset import REPAIR_PREFIX, Dataset
from tracekit.store.integrity import RUNS_FILE, held_runs, lost_runs_error, recorded_runs
from tracekit.store.parquet_files import PARQUET_TABLES, check_whole, table_files
from tracekit.store.written_files import Record, digest, latest, relative, table_of

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
    # A table whose copies differ: blamed on the DuckDB file where it lost runs or the Parquet files
    # are as recorded, else on the Parquet files.
    mismatched: bool = False
    # Things found that are no problem (runs before format 10 recorded no file checksums), one line each.
    notes: list[str] = field(default_factory=list)


@dataclass
class _Records:
    """What the runs recorded of their Parquet files: the latest record of each path; whether every
    run the DuckDB file holds recorded its files or a repair since recorded them all (else a file
    without a record is unchecked, not stray)."""

    latest: dict[str, Record]
    complete: bool
    unchecked: int = 0


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
        held = _compare_runs(dataset.root, con, tables["runs"], verdict) if tables else None
        records = _records(con, tables, held, verdict)
        total = 0
        for table in PARQUET_TABLES:
            files = table_files(dataset.root, table)
            total += len(files)
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
            as_recorded = _check_records(dataset.root, table, files, whole, records, verdict)
            in_parquet = f"read_parquet({sql_list(whole)})"
            columns = _shared_columns(con, in_parquet if whole else None, tables.get(table))
            parquet = _count_and_hash(con, in_parquet, columns, verdict, table) if whole else (0, 0)
            if whole and parquet is None:
                verdict.parquet_whole = False
            duck = _count_and_hash(con, tables[table], columns, verdict, table) if table in tables else None
            if table in tables and duck is None:
                verdict.duckdb_whole = False
            _compare(dataset.root, check, duck, parquet, len(whole) < len(files), as_recorded, verdict)
        if records is not None and records.unchecked:
            verdict.notes.append(
                f"runs before format 10 recorded no file checksums: {records.unchecked:,} of {total:,} Parquet "
                "files checked by row count and content only"
            )
    finally:
        con.close()
    if verdict.mismatched and verdict.duckdb_whole:
        verdict.parquet_whole = False
    return verdict


def _records(
    con: duckdb.DuckDBPyConnection, tables: dict[str, str], held: set[str] | None, verdict: Verdict
) -> _Records | None:
    """The records of the DuckDB file, where it is whole so far (None: not to be trusted)."""
    import duckdb

    if not tables or held is None or not verdict.duckdb_whole:
        return None
    try:
        found, recorded = latest(con, tables["written_files"])
    except duckdb.Error as exc:
        verdict.problems.append(f"written_files: the DuckDB file cannot be read ({connect.first_line(exc)})")
        verdict.duckdb_whole = False
        return None
    # A repair records every Parquet file the dataset then holds: the runs before it are covered.
    return _Records(found, complete=held <= recorded or any(r.startswith(REPAIR_PREFIX) for r in recorded))


def _check_records(
    root: Path, table: str, files: list[Path], whole: list[str], records: _Records | None, verdict: Verdict
) -> bool:
    """Each of the table's Parquet files (`files`, the `whole` ones read) against its record, and every
    file recorded as there; problems named by path. True where all are exactly as recorded."""
    if records is None:
        return False
    as_recorded = True
    named = len(verdict.problems)
    on_disk = set()
    for path in files:
        rel = relative(root, path)
        on_disk.add(rel)
        record = records.latest.get(rel)
        if str(path) not in whole:
            as_recorded = False  # named already
        elif record is None and not records.complete:
            records.unchecked += 1
            as_recorded = False
        elif record is None or record.sha256 is None:
            why = "no run recorded writing it" if record is None else f"run {record.run_id} removed it"
            verdict.problems.append(f"{path}: a stray file ({why}): every reader of {table} counts its rows")
            as_recorded = False
        else:
            size, sha = digest(path)
            if size != record.size:
                verdict.problems.append(
                    f"{path}: {size:,} bytes where run {record.run_id} recorded {_n(record.size)}: checksum differs "
                    "(overwritten or truncated)"
                )
                as_recorded = False
            elif sha != record.sha256:
                verdict.problems.append(
                    f"{path}: its SHA-256 checksum differs from the one run {record.run_id} recorded: its bytes changed"
                )
                as_recorded = False
    for rel, record in sorted(records.latest.items()):
        if table_of(rel) == table and record.sha256 is not None and rel not in on_disk:
            verdict.problems.append(f"{root / rel}: missing (run {record.run_id} wrote it: {_n(record.rows)} rows)")
            as_recorded = False
    if len(verdict.problems) > named:
        verdict.parquet_whole = False
    return as_recorded


def _n(value: int | None) -> str:
    """A count from a record (the DuckDB file is read as untrusted input: it may hold a null)."""
    return "?" if value is None else f"{value:,}"


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


def _shared_columns(con: duckdb.DuckDBPyConnection, parquet: str | None, duck: str | None) -> str:
    """The columns both copies hold, in the Parquet files' order, as a select list ('*' where one copy
    is missing or unreadable). An older dataset's DuckDB copy is shown with the columns later formats
    added (null, tracekit.store.migrations): its Parquet files, written before, lack them."""
    import duckdb

    if parquet is None or duck is None:
        return "*"
    try:
        theirs = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {parquet}").fetchall()]
        ours = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {duck}").fetchall()}
    except duckdb.Error:
        return "*"  # the count says which copy cannot be read
    shared = [connect.ident(name) for name in theirs if name in ours]
    return ", ".join(shared) if shared else "*"


def _count_and_hash(
    con: duckdb.DuckDBPyConnection, source: str, columns: str, verdict: Verdict, table: str
) -> tuple[int, int] | None:
    import duckdb

    try:
        found = con.execute(
            f"SELECT count(*), coalesce(bit_xor(hash(t)), 0) FROM (SELECT {columns} FROM {source}) t"
        ).fetchone()
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
    as_recorded: bool,
    verdict: Verdict,
) -> None:
    if duck is None or parquet is None:
        return
    check.duckdb_rows, check.parquet_rows = duck[0], parquet[0]
    check.same_content = duck == parquet
    if check.same_content or parquet_damaged:
        return
    where = f"{root / check.table}{'.parquet' if check.table in _SINGLE else '/'}"
    if as_recorded:
        held = f"{duck[0]:,} rows" if duck[0] != parquet[0] else "rows"
        verdict.problems.append(
            f"{check.table}: the DuckDB file holds {held} the Parquet files ({where}) do not, and these are "
            "exactly as their runs recorded them (size and checksum): the DuckDB file is the damaged copy"
        )
        verdict.duckdb_whole = False
        return
    if check.files == 0:
        if not any(p.startswith(where) for p in verdict.problems):  # the records named it already
            verdict.problems.append(f"{where}: missing (the DuckDB file holds {duck[0]:,} rows of {check.table})")
    elif duck[0] != parquet[0]:
        verdict.problems.append(
            f"{check.table}: the DuckDB file holds {duck[0]:,} rows, the Parquet files ({where}) {parquet[0]:,}"
        )
    else:
        verdict.problems.append(f"{check.table}: the DuckDB file and the Parquet files ({where}) differ in content")
    verdict.mismatched = True


_SINGLE = ("jobs", "process_groups", "runs")


def _compare_runs(root: Path, con: duckdb.DuckDBPyConnection, runs_table: str, verdict: Verdict) -> set[str] | None:
    """The runs of the DuckDB file (None: unreadable) against those runs.parquet lists."""
    import duckdb

    recorded = recorded_runs(con, root)
    try:
        held = held_runs(con, runs_table)
    except duckdb.Error:
        verdict.duckdb_whole = False  # named by the table comparison
        return None
    verdict.runs = len(held)
    if recorded is None:
        return held
    lost = sorted(recorded - held)
    if lost:
        verdict.problems.append(str(lost_runs_error(root, lost)))
        verdict.duckdb_whole = False
    unlisted = sorted(held - recorded)
    if unlisted:
        shown = ", ".join(unlisted[:3])
        verdict.problems.append(f"{root / RUNS_FILE}: lacks {len(unlisted)} run(s) the DuckDB file holds ({shown})")
        verdict.parquet_whole = False
    return held
