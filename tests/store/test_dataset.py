"""How a run's rows reach the DuckDB file: a small run stays in DuckDB's write-ahead log (a checkpoint
of a big file costs seconds whatever the run adds), which every reader replays, the DuckDB shell too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest

import tracekit
import tracekit.store.commit
from tests.builders import write_et_job
from tests.cli.test_cli import DUCKDB
from tracekit.ingest import ingest
from tracekit.store.dataset import DB_NAME, WAL_NAME


def _job(root: Path, name: str) -> Path:
    write_et_job(root / name, [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    return root / name


def _counts(dataset: Path) -> tuple[int, int]:
    with tracekit.open(dataset) as ds:
        [(jobs, collectives)] = ds.sql(
            "select (select count(*) from jobs), (select count(*) from collectives)"
        ).fetchall()
        return jobs, collectives


def test_a_small_run_added_to_a_dataset_stays_in_the_write_ahead_log(tmp_path: Path) -> None:
    ingest([_job(tmp_path / "a", "jobA")], tmp_path / "ds")
    assert not (tmp_path / "ds" / WAL_NAME).exists()  # a new dataset is written whole
    ingest([_job(tmp_path / "b", "jobB")], tmp_path / "ds")
    assert (tmp_path / "ds" / WAL_NAME).is_file()
    assert _counts(tmp_path / "ds") == (2, 20)


def test_a_run_past_the_log_limit_is_checkpointed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ingest([_job(tmp_path / "a", "jobA")], tmp_path / "ds")
    monkeypatch.setattr(tracekit.store.commit, "WAL_CHECKPOINT_BYTES", 0)
    ingest([_job(tmp_path / "b", "jobB")], tmp_path / "ds")
    assert not (tmp_path / "ds" / WAL_NAME).exists()
    assert _counts(tmp_path / "ds") == (2, 20)


@pytest.mark.skipif(DUCKDB is None, reason="the duckdb shell (pip install duckdb-cli) is not installed")
def test_the_duckdb_shell_reads_what_the_log_holds(tmp_path: Path) -> None:
    ingest([_job(tmp_path / "a", "jobA")], tmp_path / "ds")
    ingest([_job(tmp_path / "b", "jobB")], tmp_path / "ds")
    assert DUCKDB is not None
    shell = subprocess.run(
        [DUCKDB, "-readonly", "-csv", "-noheader", str(tmp_path / "ds" / DB_NAME), "-c", "select count(*) from jobs"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.strip() == "2"


def test_a_run_while_a_reader_holds_a_dataset_with_a_log_keeps_what_the_log_holds(tmp_path: Path) -> None:
    ingest([_job(tmp_path / "a", "jobA")], tmp_path / "ds")
    ingest([_job(tmp_path / "b", "jobB")], tmp_path / "ds")
    with tracekit.open(tmp_path / "ds") as held:
        held.sql("select count(*) from jobs").fetchall()  # open: the next run writes a copy, swapped in
        ingest([_job(tmp_path / "c", "jobC")], tmp_path / "ds")
    assert not (tmp_path / "ds" / WAL_NAME).exists()  # the copy was checkpointed: the old log is gone
    assert _counts(tmp_path / "ds") == (3, 30)


def test_a_crash_between_the_swap_and_removing_the_old_log_is_finished_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest([_job(tmp_path / "a", "jobA")], tmp_path / "ds")
    ingest([_job(tmp_path / "b", "jobB")], tmp_path / "ds")

    def crash(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tracekit.store.commit, "remove_replaced_log", crash)
    with tracekit.open(tmp_path / "ds") as held:
        held.sql("select count(*) from jobs").fetchall()
        with pytest.raises(KeyboardInterrupt):
            ingest([_job(tmp_path / "c", "jobC")], tmp_path / "ds")
    monkeypatch.undo()
    report = ingest([tmp_path / "c"], tmp_path / "ds")  # recovers: the old log goes, jobC is there
    assert report.files_added == 0
    assert _counts(tmp_path / "ds") == (3, 30)


def test_the_summary_counts_collectives_as_the_table_holds_them(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1, 2], [("ALL_REDUCE", 1 << 20), ("BROADCAST", 64), ("ALL_REDUCE", 8)])
    write_et_job(tmp_path / "in" / "jobB", [0, 1], [("ALL_GATHER", 4096)])
    report = ingest([tmp_path / "in"], tmp_path / "ds")
    assert report.totals is not None
    with tracekit.open(tmp_path / "ds") as ds:
        scanned = ds.sql(
            "select comm_type, count(*), sum(in_bytes) from collectives group by comm_type order by 2 desc, 1"
        ).fetchall()
    assert [(t.comm_type, t.count, t.in_bytes) for t in report.totals.collectives] == scanned


def _table_and_files(dataset: Path, table: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The rows of `table` in the DuckDB file and in its Parquet files, each sorted."""
    files = str(dataset / table / "*.parquet")
    with tracekit.open(dataset) as ds:
        held = ds.sql(f"select * from {table}").fetchall()
        names = [d[0] for d in ds.sql(f"select * from {table} limit 0").description]
        written = ds.sql(f"select {', '.join(names)} from read_parquet(?)", params=[files]).fetchall()
    return sorted(held, key=repr), sorted(written, key=repr)


@pytest.mark.parametrize("first", ["empty", "error only", "rows"])
def test_the_parquet_files_hold_the_rows_of_the_duckdb_file(tmp_path: Path, first: str) -> None:
    # A table with no rows before the run gets the run's rows first and its Parquet files from them;
    # a table with rows gets them from the run's Parquet files: both must hold the same rows.
    if first == "error only":
        (tmp_path / "bad" / "jobX").mkdir(parents=True)
        (tmp_path / "bad" / "jobX" / "jobX.0.et").write_bytes(b"\x07not a trace")
        ingest([tmp_path / "bad"], tmp_path / "ds")
    elif first == "rows":
        ingest([_job(tmp_path / "a", "jobA")], tmp_path / "ds")
    write_et_job(tmp_path / "b" / "jobB", [0, 1, 2], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 64)])
    ingest([tmp_path / "b"], tmp_path / "ds")
    for table in ("traces", "collectives", "ops"):
        held, written = _table_and_files(tmp_path / "ds", table)
        assert held == written
        assert len(held) >= (6 if table == "collectives" else 0)


def test_a_run_rewrites_only_the_traces_files_holding_rows_it_replaces(tmp_path: Path) -> None:
    """`traces` grows by a file per run; a file read again after it failed replaces its error row,
    in the DuckDB file and in the one earlier Parquet file holding that row."""
    bad = tmp_path / "in" / "jobB" / "jobB.1.et"
    _job(tmp_path / "in", "jobA")
    ingest([tmp_path / "in"], tmp_path / "ds")
    write_et_job(tmp_path / "in" / "jobB", [0], [("ALL_REDUCE", 64)])
    bad.write_bytes(b"\x07not a trace")
    ingest([tmp_path / "in" / "jobB"], tmp_path / "ds")
    before = {p.name: p.stat().st_ino for p in (tmp_path / "ds" / "traces").glob("*.parquet")}
    write_et_job(tmp_path / "in" / "jobB", [1], [("ALL_REDUCE", 64)])
    ingest([tmp_path / "in" / "jobB"], tmp_path / "ds")
    held, written = _table_and_files(tmp_path / "ds", "traces")
    assert held == written
    assert [(r[1], r[2], r[9]) for r in sorted(held, key=lambda r: (str(r[1]), r[2] or 0))] == [
        ("jobA", 0, "ok"),
        ("jobA", 1, "ok"),
        ("jobB", 0, "ok"),
        ("jobB", 1, "ok"),
    ]
    after = {p.name: p.stat().st_ino for p in (tmp_path / "ds" / "traces").glob("*.parquet")}
    folder = tmp_path / "ds" / "traces"
    [jobs_file] = [name for name in before if pl.read_parquet(folder / name)["job_id"].to_list()[0] == "jobA"]
    [error_file] = set(before) - {jobs_file}
    assert len(after) == 3 and after[jobs_file] == before[jobs_file]  # jobA's file untouched
    assert after[error_file] != before[error_file]  # rewritten without the error row


def test_a_second_writer_is_told_what_holds_the_dataset(tmp_path: Path) -> None:
    # It said "another ingest" while a fleet replay held the lock (new-user pass).
    from tracekit.errors import DatasetError
    from tracekit.store.dataset import Dataset

    with Dataset(tmp_path / "ds").writing():
        with pytest.raises(DatasetError, match="an ingest or a fleet replay") as refused:
            with Dataset(tmp_path / "ds").writing():
                pass
    assert "\n" not in str(refused.value)
