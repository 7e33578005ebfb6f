"""Datasets of every older format open, and the next ingest upgrades them to this one.

tests/store/fixtures/format-N.tar.gz is a dataset of format N (tracekit.store.dataset_format), written
by tracekit's own code of that time from the four PyTorch ET files of sample_traces/captured/ddp_mlp
(fixtures/README.md names the commit of each). Each is upgraded by an ingest of a second job and
compared row for row, every table and every Parquet file, with a dataset this code ingests from the
same traces in the same two runs.
"""

from __future__ import annotations

import math
import shutil
import tarfile
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

import tracekit
from tracekit.errors import DatasetError
from tracekit.ingest import ingest
from tracekit.schema import TABLES, arrow_schema
from tracekit.store import dataset_format
from tracekit.store.migrations import STEPS

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLES = Path(__file__).parents[2] / "sample_traces" / "captured"
OLDER = range(1, dataset_format.FORMAT)  # format 9 as written before the number was stamped
LATEST_FIXTURE = OLDER[-1]
# Columns that differ for reasons other than the format: when the run committed, and which run.
RUN_COLUMNS = {"run_id", "ingested_at", "committed_at", "replayed_at"}
RUN_STARTS = {"runs": {"started_at"}}
# jobs.source is the job's folder as found, which was where the fixture was made.
PLACE_COLUMNS = {"source"}
# What format 1 could not know: jobs.ranks_missing and missing_ranks are null in its jobs (and
# format 1 kept jobs.source as given, a relative path).
UNKNOWN = {1: {"jobs": {"ranks_missing", "missing_ranks"}}}


def _fixture(n: int, into: Path) -> Path:
    with tarfile.open(FIXTURES / f"format-{n}.tar.gz") as archive:
        archive.extractall(into, filter="data")
    return into / f"format-{n}"


def _traces(root: Path) -> tuple[Path, Path]:
    """The fixture's traces (in/ddp_mlp, given as `in` from `root` like when it was made) and a second job."""
    first, second = root / "in" / "ddp_mlp", root / "in2" / "pp"
    for folder, sample in ((first, "ddp_mlp"), (second, "pipeline_p2p")):
        folder.mkdir(parents=True)
        for path in sorted((SAMPLES / sample).glob("et_rank*.json.gz")):
            shutil.copy(path, folder)
    return Path("in"), Path("in2")


def _rows(con: duckdb.DuckDBPyConnection, sql: str, skip: set[str]) -> tuple[list[str], list[tuple[Any, ...]]]:
    relation = con.sql(sql)
    names = [c for c in relation.columns if c not in skip]
    rows = relation.select(*[duckdb.ColumnExpression(n) for n in names]).fetchall()
    return names, sorted((tuple(_rounded(v) for v in row) for row in rows), key=repr)


def _rounded(value: Any) -> Any:
    # Sums and spreads of floats come out in the last digit as DuckDB's threads add them up.
    return round(value, 9) if isinstance(value, float) and math.isfinite(value) else value


def _contents(dataset: Path, unknown: dict[str, set[str]]) -> dict[str, Any]:
    """Every table of the DuckDB file and of the Parquet files, less the columns named."""
    found: dict[str, Any] = {}
    con = duckdb.connect(str(dataset / "tracekit.duckdb"), read_only=True)
    # written_files holds what each run wrote (its paths name the run, its checksums hash the run's
    # ids): test_an_older_dataset_verifies_with_one_note_and_the_upgrading_run_records_its_files.
    for table in (*(t for t in TABLES if t != "written_files"), "dataset_format"):
        skip = RUN_COLUMNS | PLACE_COLUMNS | RUN_STARTS.get(table, set()) | unknown.get(table, set())
        found[table] = _rows(con, f"select * from {table}", skip)
    con.close()
    files = duckdb.connect()
    for table in ("traces", "collectives", "ops"):
        found[f"{table}/*.parquet"] = _rows(
            files, f"select * from read_parquet('{dataset / table}/*.parquet')", RUN_COLUMNS
        )
    for table in ("jobs", "process_groups"):
        skip = RUN_COLUMNS | PLACE_COLUMNS | unknown.get(table, set())
        found[f"{table}.parquet"] = _rows(files, f"select * from read_parquet('{dataset / table}.parquet')", skip)
    return found


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two runs, ingested by this code into a new dataset."""
    root = tmp_path_factory.mktemp("fresh")
    first, second = _traces(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        ingest([first], root / "ds", workers=1)
        ingest([second], root / "ds", workers=1)
    return root / "ds"


def test_there_is_a_fixture_and_a_step_for_every_older_format() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.tar.gz")) == sorted(f"format-{n}.tar.gz" for n in OLDER)
    assert [step.FORMAT for step in STEPS] == list(range(2, dataset_format.FORMAT + 1))
    assert LATEST_FIXTURE == dataset_format.FORMAT - 1


@pytest.mark.parametrize("n", OLDER)
def test_a_reader_sees_an_older_dataset_as_this_format_and_writes_nothing(tmp_path: Path, n: int) -> None:
    dataset = _fixture(n, tmp_path)
    before = {p: p.stat().st_mtime_ns for p in dataset.rglob("*")}
    with tracekit.open(dataset) as ds:
        assert ds.summary().traces_ok == 4
        assert ds.query("job_class").pl()["job_id"].to_list() == ["ddp_mlp"]
        for table in TABLES:
            assert ds.frame(table).columns == arrow_schema(table).names, table
        assert ds.sql("select count(*) from collective_sizes").fetchall() == [(5,)]  # sizes of ddp_mlp
    assert {p: p.stat().st_mtime_ns for p in dataset.rglob("*")} == before


@pytest.mark.parametrize("n", OLDER)
def test_the_next_ingest_upgrades_an_older_dataset_to_what_this_code_writes(
    tmp_path: Path, fresh: Path, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = _fixture(n, tmp_path)
    _, second = _traces(tmp_path)
    monkeypatch.chdir(tmp_path)
    ingest([second], dataset, workers=1)
    assert not (dataset / "traces.parquet").exists()
    unknown = UNKNOWN.get(n, {})
    upgraded, expected = _contents(dataset, unknown), _contents(fresh, unknown)
    for name, (columns, rows) in expected.items():
        assert upgraded[name][0] == columns, f"{name}: columns"
        assert upgraded[name][1] == rows, f"{name}: rows"
    con = duckdb.connect(str(dataset / "tracekit.duckdb"), read_only=True)
    assert con.execute("select format from dataset_format").fetchall() == [(dataset_format.FORMAT,)]


def test_an_upgraded_dataset_keeps_its_rollups_in_step_with_the_rule(tmp_path: Path) -> None:
    """Format 6's job_classes has the columns of an earlier class rule: the upgrade classifies the
    jobs it held again, not only those the run adds."""
    dataset = _fixture(6, tmp_path)
    con = duckdb.connect(str(dataset / "tracekit.duckdb"), read_only=True)
    assert "rule" not in [r[0] for r in con.execute("describe job_classes").fetchall()]
    con.close()
    _, second = _traces(tmp_path)
    ingest([tmp_path / second], dataset, workers=1)
    with tracekit.open(dataset) as ds:
        classes = ds.frame("job_classes").sort("job_id")
    assert classes["job_id"].to_list() == ["ddp_mlp", "pp"]
    assert classes["rule"].null_count() == 0


def test_a_dataset_of_a_later_format_is_refused_in_one_line(tmp_path: Path) -> None:
    dataset = _fixture(LATEST_FIXTURE, tmp_path)
    con = duckdb.connect(str(dataset / "tracekit.duckdb"))
    con.execute(f"create or replace table dataset_format as select {dataset_format.FORMAT + 1} as format")
    con.close()
    with pytest.raises(DatasetError, match="written by a later tracekit") as refused:
        tracekit.open(dataset).summary()
    assert "\n" not in str(refused.value)


def test_the_parquet_files_of_an_upgraded_dataset_hold_its_rows(tmp_path: Path) -> None:
    dataset = _fixture(1, tmp_path)
    _, second = _traces(tmp_path)
    ingest([tmp_path / second], dataset, workers=1)
    assert pl.read_parquet(dataset / "traces" / "*.parquet").height == 8


def test_a_fleet_replays_tables_in_an_older_dataset_are_kept_through_the_upgrade(tmp_path: Path) -> None:
    """A fleet replay writes its tables into a dataset of any format, in this format's columns."""
    import pyarrow as pa

    from tracekit.store.dataset import Dataset

    dataset = _fixture(5, tmp_path)
    row = pa.Table.from_pylist([{"job_id": "ddp_mlp", "switch_bytes": 7}], schema=arrow_schema("replay_jobs"))
    held = Dataset(dataset)
    with held.writing():
        held.replace_tables({"replay_jobs": row, "replay_fabrics": arrow_schema("replay_fabrics").empty_table()})
    with tracekit.open(dataset) as ds:
        assert ds.sql("select job_id, switch_bytes from replay_jobs").fetchall() == [("ddp_mlp", 7)]
    _, second = _traces(tmp_path)
    ingest([tmp_path / second], dataset, workers=1)
    with tracekit.open(dataset) as ds:
        assert ds.sql("select job_id, switch_bytes from replay_jobs").fetchall() == [("ddp_mlp", 7)]
        assert ds.sql("select format from dataset_format").fetchall() == [(dataset_format.FORMAT,)]


def test_a_format_number_older_than_the_columns_reads_through_a_scope(tmp_path: Path) -> None:
    """Found by the dataset fuzzer: a file stamped 8 whose replay_jobs has format 9's switch_bytes (a
    stamp its tables contradict) was promised a stand-in for that table that was never made (no
    column was missing); a scoped reader (`report --job`) failed on `unscoped_replay_jobs does not
    exist` with a traceback."""
    import pyarrow as pa

    from tracekit.scope import Scope
    from tracekit.store.dataset import Dataset

    dataset = _fixture(8, tmp_path)
    row = pa.Table.from_pylist([{"job_id": "ddp_mlp", "switch_bytes": 7}], schema=arrow_schema("replay_jobs"))
    held = Dataset(dataset)
    with held.writing():
        held.replace_tables({"replay_jobs": row, "replay_fabrics": arrow_schema("replay_fabrics").empty_table()})
    con = duckdb.connect(str(dataset / "tracekit.duckdb"))
    con.execute("create table dataset_format as select 8 as format")
    con.close()
    with tracekit.open(dataset, Scope(jobs=("ddp_mlp",))) as ds:
        assert ds.sql("select job_id, switch_bytes from replay_jobs").fetchall() == [("ddp_mlp", 7)]


@pytest.mark.parametrize(
    "change",
    ["delete from dataset_format", "update dataset_format set format = null", "update dataset_format set format = 0"],
)
def test_a_dataset_format_table_without_a_format_number_is_refused_in_one_line(tmp_path: Path, change: str) -> None:
    """Found by the dataset fuzzer: an emptied dataset_format ended a reader on an AssertionError."""
    dataset = _fixture(LATEST_FIXTURE, tmp_path)
    con = duckdb.connect(str(dataset / "tracekit.duckdb"))
    con.execute(f"create or replace table dataset_format as select {dataset_format.FORMAT} as format")
    con.execute(change)
    con.close()
    with pytest.raises(DatasetError, match="holds no format number") as refused:
        tracekit.open(dataset).summary()
    assert "\n" not in str(refused.value) and str(dataset) in str(refused.value)


@pytest.mark.parametrize("n", OLDER)
def test_every_older_dataset_verifies_as_it_was_written(tmp_path: Path, n: int) -> None:
    # Format 1's jobs copy lacks the columns format 2 added: shown with them (null) by the DuckDB side,
    # it was called a mismatch with its own Parquet file. Only the columns both copies hold are compared.
    assert tracekit.verify(_fixture(n, tmp_path)).problems == []


@pytest.mark.parametrize("n", [5, 6, 9])  # the formats before file checksums (10)
def test_an_older_dataset_verifies_with_one_note_and_the_upgrading_run_records_its_files(
    tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs before format 10 recorded no file checksums: verify says so in one line, exit 0; the run
    that upgrades the dataset records the files it writes, and those are checked."""
    from tests.conftest import cli

    dataset = _fixture(n, tmp_path)
    done = cli("verify", dataset)
    assert done.returncode == 0, done.stderr
    [note] = [line for line in done.stdout.splitlines() if line.startswith("note:")]
    assert "runs before format 10 recorded no file checksums" in note
    _, second = _traces(tmp_path)
    monkeypatch.chdir(tmp_path)
    ingest([second], dataset, workers=1)
    con = duckdb.connect(str(dataset / "tracekit.duckdb"), read_only=True)
    recorded = con.execute("select path, sha256 from written_files").fetchall()
    [run] = con.execute("select distinct run_id from written_files").fetchall()
    con.close()
    assert run[0] in {p.stem.removeprefix("run-")[: len(run[0])] for p in (dataset / "ops").glob("*.parquet")}
    assert ("jobs.parquet" in {p for p, _ in recorded}) and all(len(sha or "") in (0, 64) for _, sha in recorded)
    if n <= 5:  # the upgrading run wrote every traces row into traces/ and removed traces.parquet
        assert ("traces.parquet", None) in recorded
    done = cli("verify", dataset)
    assert done.returncode == 0, done.stderr
    assert len([line for line in done.stdout.splitlines() if line.startswith("note:")]) == 1
    # A file the upgrading run wrote is checked: changed, it is named.
    jobs = dataset / "jobs.parquet"
    data = jobs.read_bytes()
    at = data.rindex(b"DuckDB")
    jobs.write_bytes(data[:at] + b"duckdb" + data[at + 6 :])
    done = cli("verify", dataset)
    assert done.returncode == 3 and f"{jobs}: its SHA-256 checksum differs" in done.stderr
