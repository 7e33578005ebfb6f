"""Integrity you can check (issue 22, item 1): a damaged log, DuckDB file or Parquet file is noticed by
every command, named by `tracekit verify`, and rebuilt by `tracekit repair` from the whole copy."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import tracekit
from tests.builders import write_et_job
from tests.conftest import cli
from tracekit.ingest import ingest
from tracekit.store.dataset import WAL_NAME


def _two_runs(tmp_path: Path) -> Path:
    """A dataset of two runs, the second one's rows in the write-ahead log only (a small run leaves them there)."""
    dataset = tmp_path / "ds"
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    write_et_job(tmp_path / "in" / "jobB", [0, 1, 2, 3], [("ALL_GATHER", 1 << 16)] * 3)
    ingest([tmp_path / "in" / "jobA"], dataset)
    ingest([tmp_path / "in" / "jobB"], dataset)
    assert (dataset / WAL_NAME).stat().st_size > 0
    return dataset


def _answers(dataset: Path) -> dict[str, list[tuple[object, ...]]]:
    with tracekit.open(dataset) as ds:
        return {
            table: sorted(ds.sql(f"select * from {table}").fetchall(), key=repr)
            for table in ("jobs", "traces", "collectives", "process_groups", "runs", "collective_sizes", "job_class")
        }


def _truncate_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _empty(path: Path) -> None:
    os.truncate(path, 0)


def _overwrite_header(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"\0" * 16)


WAL_DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate_half,
    "emptied": _empty,
    "header overwritten": _overwrite_header,
}


@pytest.mark.parametrize("damage", list(WAL_DAMAGE))
def test_a_damaged_log_is_noticed_by_every_command_and_repaired_from_the_parquet_files(
    tmp_path: Path, damage: str
) -> None:
    dataset = _two_runs(tmp_path)
    before = _answers(dataset)
    runs_parquet = (dataset / "runs.parquet").read_bytes()
    WAL_DAMAGE[damage](dataset / WAL_NAME)
    # Before: DuckDB replayed the log up to the damage and `info` said one job, exit 0.
    commands: list[list[str | Path]] = [
        ["info", dataset],
        ["query", "job_overview", dataset],
        ["report", dataset, "-o", tmp_path / "r.html"],
    ]
    for args in commands:
        done = cli(*args)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert "lacks 1 committed run" in done.stderr and "tracekit repair" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    # An ingest never writes over it (it would rewrite runs.parquet without the lost run).
    write_et_job(tmp_path / "in" / "jobC", [0, 1], [("ALL_REDUCE", 64)])
    done = cli("ingest", tmp_path / "in" / "jobC", "--out", dataset)
    assert done.returncode == 3 and "lacks 1 committed run" in done.stderr
    assert (dataset / "runs.parquet").read_bytes() == runs_parquet
    checked = cli("verify", dataset)
    assert checked.returncode == 3
    assert "jobs: the DuckDB file holds 1 rows, the Parquet files" in checked.stderr
    repaired = cli("repair", dataset)
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt the DuckDB file, from the Parquet files" in repaired.stdout
    kept = list((dataset / ".damaged").iterdir())
    assert len(kept) == 1 and (kept[0] / WAL_NAME).exists()  # the damaged files are kept, not deleted
    assert _answers(dataset) == before
    assert cli("verify", dataset).returncode == 0
    assert "nothing to repair" in cli("repair", dataset).stdout
    assert cli("ingest", tmp_path / "in" / "jobC", "--out", dataset).returncode == 0


def test_a_healthy_dataset_verifies_and_nothing_is_written(tmp_path: Path) -> None:
    dataset = _two_runs(tmp_path)
    stamps = {p: p.stat().st_mtime_ns for p in dataset.rglob("*") if p.is_file()}
    done = cli("verify", dataset)
    assert done.returncode == 0, done.stderr
    assert "ok:" in done.stdout and "2 runs" in done.stdout and "both copies agree" in done.stdout
    assert {p: p.stat().st_mtime_ns for p in dataset.rglob("*") if p.is_file()} == stamps


def _damage_a_collectives_file(dataset: Path) -> str:
    path = sorted((dataset / "collectives").glob("*.parquet"))[0]
    _truncate_half(path)
    return path.name


def _remove_jobs_file(dataset: Path) -> str:
    (dataset / "jobs.parquet").unlink()
    return "jobs.parquet: missing"


def _extra_copy_of_a_traces_file(dataset: Path) -> str:
    path = sorted((dataset / "traces").glob("*.parquet"))[0]
    shutil.copyfile(path, path.with_name("copy.parquet"))  # readers of traces/*.parquet would count rows twice
    return "traces: the DuckDB file holds"


@pytest.mark.parametrize("damage", [_damage_a_collectives_file, _remove_jobs_file, _extra_copy_of_a_traces_file])
def test_damaged_parquet_files_are_named_and_written_again_from_the_duckdb_file(
    tmp_path: Path, damage: Callable[[Path], str]
) -> None:
    dataset = _two_runs(tmp_path)
    before = _answers(dataset)
    named = damage(dataset)
    checked = cli("verify", dataset)
    assert checked.returncode == 3 and named in checked.stderr
    repaired = cli("repair", dataset)
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt the Parquet files, from the DuckDB file" in repaired.stdout
    assert cli("verify", dataset).returncode == 0
    assert _answers(dataset) == before
    with tracekit.open(dataset) as ds:  # the Parquet copy alone gives the same rows
        parquet = ds.sql(f"select count(*) from read_parquet('{dataset}/collectives/*.parquet')").fetchall()
    assert parquet == [(len(before["collectives"]),)]


def test_both_copies_damaged_is_one_line_with_exit_3_and_nothing_changed(tmp_path: Path) -> None:
    dataset = _two_runs(tmp_path)
    _empty(dataset / WAL_NAME)
    _damage_a_collectives_file(dataset)
    files = {p: p.read_bytes() for p in dataset.rglob("*") if p.is_file()}
    done = cli("repair", dataset)
    assert done.returncode == 3
    assert "both copies are damaged" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in dataset.rglob("*") if p.is_file()} == files


def test_verify_and_repair_of_no_dataset_are_one_line_with_exit_3(tmp_path: Path) -> None:
    for command in ("verify", "repair"):
        done = cli(command, tmp_path / "nothing")
        assert done.returncode == 3 and "no dataset here" in done.stderr


@pytest.mark.parametrize("where", ["header block", "second half"])
def test_a_damaged_duckdb_file_is_rebuilt_from_the_parquet_files_and_kept_aside(tmp_path: Path, where: str) -> None:
    dataset = _two_runs(tmp_path)
    before = _answers(dataset)
    assert cli("ingest", tmp_path / "in" / "jobA", "--out", dataset).returncode == 0  # a no-op run: log checkpointed?
    db = dataset / "tracekit.duckdb"
    damaged = db.read_bytes()
    offset = 12288 if where == "header block" else len(damaged) // 2
    with db.open("r+b") as f:
        f.seek(offset)
        f.write(b"\x5a" * (4096 if where == "header block" else len(damaged) - offset))
    info = cli("info", dataset)
    assert info.returncode == 3 and "damaged" in info.stderr and "tracekit repair" in info.stderr
    repaired = cli("repair", dataset)
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt the DuckDB file, from the Parquet files" in repaired.stdout
    [kept] = (dataset / ".damaged").iterdir()
    assert (kept / "tracekit.duckdb").stat().st_size == len(damaged)
    assert _answers(dataset) == before
    assert cli("verify", dataset).returncode == 0


def test_a_planted_marker_naming_the_files_inode_never_deletes_a_log_that_holds_runs(tmp_path: Path) -> None:
    dataset = _two_runs(tmp_path)
    before = _answers(dataset)
    planted = dataset / ".staging" / "planted"
    planted.mkdir(parents=True)
    marker = {"run_id": "planted", "moves": [], "removals": [], "db_inode": (dataset / "tracekit.duckdb").stat().st_ino}
    (planted / "COMMIT.json").write_text(json.dumps(marker))
    # Before: the recovery took the log for a swapped-in copy's stale one and removed it: a run lost.
    write_et_job(tmp_path / "in" / "jobC", [0, 1], [("ALL_REDUCE", 64)])
    done = cli("ingest", tmp_path / "in" / "jobC", "--out", dataset)
    assert done.returncode == 0, done.stderr
    after = _answers(dataset)
    assert len(after["jobs"]) == len(before["jobs"]) + 1
    assert cli("verify", dataset).returncode == 0
