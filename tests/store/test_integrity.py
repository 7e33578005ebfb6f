"""Integrity you can check (issue 22, item 1): a damaged log, DuckDB file or Parquet file is noticed by
every command, named by `tracekit verify`, and rebuilt by `tracekit repair` from the whole copy."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracekit
from tests.builders import write_et_job
from tests.conftest import cli
from tracekit.ingest import ingest
from tracekit.store import parquet_files
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


# What every run records of its Parquet files (tracekit.store.written_files), and what verify makes of it.


def _records(dataset: Path) -> list[tuple[object, ...]]:
    """Every record, in order: run, path, rows, bytes, sha256."""
    con = duckdb.connect(str(dataset / "tracekit.duckdb"), read_only=True)
    try:
        return con.execute("select run_id, path, rows, bytes, sha256 from written_files order by seq").fetchall()
    finally:
        con.close()


def _expected(dataset: Path) -> dict[str, tuple[object, ...]]:
    """The files the records say the dataset holds now: the latest record of each path, unless it is a removal."""
    latest: dict[str, tuple[object, ...]] = {}
    for run_id, path, rows, size, sha in _records(dataset):
        latest[str(path)] = (run_id, rows, size, sha)
    return {path: found for path, found in latest.items() if found[3] is not None}


def _parquet_files(dataset: Path) -> set[str]:
    return {p.relative_to(dataset).as_posix() for p in dataset.rglob("*.parquet") if ".staging" not in p.parts}


def test_every_run_records_each_parquet_file_it_writes_and_the_records_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More than one small file is merged: the second run merges the first run's files into one and
    # removes them; the third (merging as usual) rewrites the file holding jobA's replaced rows in place.
    monkeypatch.setattr(parquet_files, "MAX_SMALL_FILES", 1)
    dataset = _two_runs(tmp_path)
    records = _records(dataset)
    first, second = dict.fromkeys(r[0] for r in records)
    removed = {r[1] for r in records if r[0] == second and r[4] is None}
    assert {"collectives", "ops", "traces"} == {str(p).split("/")[0] for p in removed}
    assert removed <= {r[1] for r in records if r[0] == first}
    monkeypatch.setattr(parquet_files, "MAX_SMALL_FILES", 8)
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 6)  # its content changed
    ingest([tmp_path / "in" / "jobA"], dataset)
    third = _records(dataset)[-1][0]
    rewritten = {r[1] for r in _records(dataset) if r[0] == third} & {r[1] for r in records if r[0] == second}
    assert f"collectives/part-{second}.parquet" in rewritten
    expected = _expected(dataset)
    assert set(expected) == _parquet_files(dataset)
    for path, (_, rows, size, sha) in expected.items():
        assert (dataset / path).stat().st_size == size
        assert hashlib.sha256((dataset / path).read_bytes()).hexdigest() == sha
        assert pq.read_metadata(dataset / path).num_rows == rows
    with tracekit.open(dataset) as ds:
        for table in ("traces", "collectives", "ops", "jobs", "runs"):
            held = [
                rows for path, (_, rows, _, _) in expected.items() if path.split("/")[0] in (table, f"{table}.parquet")
            ]
            assert ds.sql(f"select count(*) from {table}").fetchall() == [(sum(held),)], table  # type: ignore[arg-type]
        assert {r[0] for r in _records(dataset)} == {r[0] for r in ds.sql("select run_id from runs").fetchall()}
    done = cli("verify", dataset)
    assert done.returncode == 0, done.stderr
    assert "note:" not in done.stdout


def _rewrite_with_one_value_changed(path: Path) -> None:
    rows = pq.read_table(path)
    column = rows.column("in_bytes").to_pylist()
    column[0] += 1
    pq.write_table(
        rows.set_column(rows.schema.get_field_index("in_bytes"), "in_bytes", pa.array(column, pa.int64())), path
    )


def _edit_the_footer_in_place(path: Path) -> None:
    """The same rows, the same size, other bytes: the writer's name in the footer edited."""
    data = path.read_bytes()
    at = data.rindex(b"DuckDB")
    path.write_bytes(data[:at] + b"duckdb" + data[at + 6 :])


@pytest.mark.parametrize("change", [_rewrite_with_one_value_changed, _edit_the_footer_in_place])
def test_a_parquet_file_whose_bytes_changed_but_still_reads_is_named_by_its_checksum_and_written_again(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    dataset = _two_runs(tmp_path)
    before = _answers(dataset)
    path = sorted((dataset / "collectives").glob("*.parquet"))[0]
    change(path)
    pq.read_table(path)  # it still reads
    checked = cli("verify", dataset)
    assert checked.returncode == 3
    [line] = [line for line in checked.stderr.splitlines() if str(path) in line]
    assert "checksum" in line
    repaired = cli("repair", dataset)
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt the Parquet files, from the DuckDB file" in repaired.stdout
    assert cli("verify", dataset).returncode == 0
    assert _answers(dataset) == before
    assert set(_expected(dataset)) == _parquet_files(dataset)  # the repair recorded what it wrote
    assert all(str(run).startswith("repair-") for run, *_ in _expected(dataset).values())


def test_a_changed_duckdb_row_is_blamed_on_the_duckdb_file_and_rebuilt_from_the_parquet_files(tmp_path: Path) -> None:
    dataset = _two_runs(tmp_path)
    before = _answers(dataset)
    con = duckdb.connect(str(dataset / "tracekit.duckdb"))
    con.execute("update collectives set in_bytes = in_bytes + 1 where rank = 0 and op_id = 1 and job_id = 'jobA'")
    con.close()
    checked = cli("verify", dataset)
    assert checked.returncode == 3
    assert "collectives: the DuckDB file holds rows the Parquet files" in checked.stderr
    assert "the DuckDB file is the damaged copy" in checked.stderr
    repaired = cli("repair", dataset)
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt the DuckDB file, from the Parquet files" in repaired.stdout
    assert _answers(dataset) == before
    assert cli("verify", dataset).returncode == 0
    assert set(_expected(dataset)) == _parquet_files(dataset)
    # The rebuilt file's records (the repair's, of every file) still tell a stray file from the runs'.
    stray = _extra_copy_of_a_traces_file(dataset)
    checked = cli("verify", dataset)
    assert checked.returncode == 3 and stray in checked.stderr
    assert "copy.parquet: a stray file (no run recorded writing it)" in checked.stderr


def test_a_file_a_later_run_removed_found_again_is_named_as_stray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parquet_files, "MAX_SMALL_FILES", 1)
    dataset = tmp_path / "ds"
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    ingest([tmp_path / "in" / "jobA"], dataset)
    [old] = (dataset / "collectives").glob("*.parquet")
    kept = old.read_bytes()
    write_et_job(tmp_path / "in" / "jobB", [0, 1], [("ALL_GATHER", 1 << 16)] * 3)
    ingest([tmp_path / "in" / "jobB"], dataset)
    assert not old.exists()  # merged into one file with jobB's
    old.write_bytes(kept)
    checked = cli("verify", dataset)
    assert checked.returncode == 3
    assert f"{old}: a stray file (run " in checked.stderr and "removed it)" in checked.stderr
    assert cli("repair", dataset).returncode == 0
    assert not old.exists() and cli("verify", dataset).returncode == 0


RING_INSPECTOR = Path(__file__).parents[1] / "replay" / "observed" / "ring_2x2"


def _observed(dataset: Path) -> list[tuple[object, ...]]:
    with tracekit.open(dataset) as ds:
        return sorted(ds.sql("select * from observed_transfers").fetchall(), key=repr)


def test_observed_transfers_are_verified_and_repaired_like_every_table(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    assert ingest([RING_INSPECTOR], dataset).ok
    before = _observed(dataset)
    assert len(before) == 16
    [path] = sorted((dataset / "observed_transfers").glob("*.parquet"))
    _truncate_half(path)
    checked = cli("verify", dataset)
    assert checked.returncode == 3 and path.name in checked.stderr
    assert cli("repair", dataset).returncode == 0
    assert cli("verify", dataset).returncode == 0 and _observed(dataset) == before
    (dataset / "tracekit.duckdb").write_bytes(b"\x5a" * 16384)  # and the DuckDB copy rebuilt from the Parquet one
    repaired = cli("repair", dataset)
    assert repaired.returncode == 0 and "rebuilt the DuckDB file" in repaired.stdout, repaired.stderr
    assert _observed(dataset) == before
