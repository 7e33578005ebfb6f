"""The dataset folder as untrusted input (issue 22): planted or torn commit markers, a symlinked lock,
damaged files. Each ends in one line naming what is wrong, and nothing outside the dataset touched."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tests.builders import write_et_job
from tests.cli.test_cli import tracekit as run
from tracekit.errors import DatasetError
from tracekit.ingest import ingest
from tracekit.store.dataset import COMMIT_MARKER, STAGING


def _job(root: Path, name: str) -> Path:
    write_et_job(root / name, [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    return root / name


def _jobs(dataset: Path) -> int:
    with tracekit.open(dataset) as ds:
        [(jobs,)] = ds.sql("select count(*) from jobs").fetchall()
        return int(jobs)


def _committed_run(dataset: Path) -> str:
    with tracekit.open(dataset) as ds:
        [(run_id,)] = ds.sql("select run_id from runs order by committed_at desc limit 1").fetchall()
        return str(run_id)


def _problems(dataset: Path) -> list[str]:
    """What `tracekit verify` finds wrong with the dataset (none on a healthy one)."""
    return tracekit.verify(dataset).problems


def _plant(dataset: Path, run_id: str, text: str) -> Path:
    marker = dataset / STAGING / run_id / COMMIT_MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(text)
    return marker


def _planted_plans(dataset: Path, outside: Path, run_id: str) -> dict[str, dict[str, object]]:
    """Commit markers naming a committed run whose paths lead out of the dataset, each its own way."""
    escape = dataset / STAGING / run_id / "out"
    return {
        "absolute paths": {
            "run_id": run_id,
            "moves": [[str(outside / "src.parquet"), str(outside / "dst.parquet")]],
            "removals": [str(outside / "victim.parquet")],
        },
        "dot-dot": {
            "run_id": run_id,
            "moves": [],
            "removals": [str(dataset / "collectives" / ".." / ".." / "outside" / "victim.parquet")],
        },
        "symlinked staging": {  # the run's own staging folder links out: the source resolves outside
            "run_id": run_id,
            "moves": [[str(escape / "src.parquet"), str(dataset / "collectives" / "x.parquet")]],
            "removals": [],
        },
        "the duckdb file": {  # inside the dataset, but not one of its Parquet files
            "run_id": run_id,
            "moves": [],
            "removals": [str(dataset / "tracekit.duckdb")],
        },
    }


@pytest.mark.parametrize("kind", ["absolute paths", "dot-dot", "symlinked staging", "the duckdb file"])
def test_a_planted_commit_marker_is_never_followed(tmp_path: Path, kind: str) -> None:
    dataset, outside = tmp_path / "ds", tmp_path / "outside"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    outside.mkdir()
    for name in ("src.parquet", "victim.parquet"):
        (outside / name).write_text("not the dataset's")
    run_id = _committed_run(dataset)
    plan = _planted_plans(dataset, outside, run_id)[kind]
    marker = _plant(dataset, run_id, json.dumps(plan))
    if kind == "symlinked staging":
        (marker.parent / "out").symlink_to(outside)
    report = ingest([_job(tmp_path / "b", "jobB")], dataset)
    assert sorted(p.name for p in outside.iterdir()) == ["src.parquet", "victim.parquet"]
    assert (dataset / "tracekit.duckdb").is_file()
    assert [w for w in report.warnings if str(marker) in w] == [w for w in report.warnings if "ignored" in w]
    assert len([w for w in report.warnings if str(marker) in w]) == 1
    assert not (dataset / STAGING).exists()
    assert _jobs(dataset) == 2
    assert _problems(dataset) == []


@pytest.mark.parametrize(
    "text", ['{"run_id": "', "", "\x00" * 64, "[1, 2]", '{"run_id": "r", "moves": "nope"}', "\xff\xfe"]
)
def test_a_torn_commit_marker_is_named_and_cleaned_and_later_ingests_go_on(tmp_path: Path, text: str) -> None:
    dataset = tmp_path / "ds"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    marker = _plant(dataset, "r", text)
    report = ingest([_job(tmp_path / "b", "jobB")], dataset)
    [warning] = [w for w in report.warnings if str(marker) in w]
    assert "\n" not in warning
    assert not (dataset / STAGING).exists()
    ingest([_job(tmp_path / "c", "jobC")], dataset)
    assert _jobs(dataset) == 3
    assert _problems(dataset) == []


def test_a_commit_marker_of_the_real_commit_is_still_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The validation must not refuse what tracekit writes: a kill right after the commit point.
    import tracekit.store.commit

    dataset = tmp_path / "ds"
    ingest([_job(tmp_path / "a", "jobA")], dataset)

    def killed(plan: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tracekit.store.commit, "apply_plan", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest([_job(tmp_path / "b", "jobB")], dataset)
    monkeypatch.undo()
    report = ingest([_job(tmp_path / "c", "jobC")], dataset)
    assert not [w for w in report.warnings if COMMIT_MARKER in w]
    with tracekit.open(dataset) as ds:
        [(in_parquet,)] = ds.sql(
            f"select count(distinct job_id) from read_parquet('{dataset}/collectives/*.parquet')"
        ).fetchall()
    assert in_parquet == 3


def test_a_symlinked_staging_folder_is_removed_not_followed(tmp_path: Path) -> None:
    dataset, outside = tmp_path / "ds", tmp_path / "outside"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    (outside / "run").mkdir(parents=True)
    (outside / "run" / "keep.txt").write_text("not the dataset's")
    (dataset / STAGING).symlink_to(outside)
    ingest([_job(tmp_path / "b", "jobB")], dataset)
    assert (outside / "run" / "keep.txt").read_text() == "not the dataset's"
    assert _jobs(dataset) == 2
    assert _problems(dataset) == []


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "folder", "fifo"])
def test_a_lock_that_is_not_a_regular_file_is_refused_in_one_line_and_nothing_touched(
    tmp_path: Path, kind: str
) -> None:
    dataset, target = tmp_path / "ds", tmp_path / "precious.txt"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    lock = dataset / ".lock"
    lock.unlink()
    target.write_text("precious")
    if kind == "symlink":
        lock.symlink_to(target)
    elif kind == "dangling symlink":
        lock.symlink_to(tmp_path / "created.txt")
    elif kind == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    with pytest.raises(DatasetError) as refused:
        ingest([_job(tmp_path / "b", "jobB")], dataset)
    assert str(lock) in str(refused.value) and "\n" not in str(refused.value)
    assert refused.value.exit_code == 3
    assert target.read_text() == "precious"
    assert not (tmp_path / "created.txt").exists()
    assert _jobs(dataset) == 1
    assert _problems(dataset) == []


def test_the_cli_refuses_a_symlinked_lock_with_exit_3(tmp_path: Path) -> None:
    dataset, target = tmp_path / "ds", tmp_path / "precious.txt"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    (dataset / ".lock").unlink()
    target.write_text("precious")
    (dataset / ".lock").symlink_to(target)
    result = run("ingest", _job(tmp_path / "b", "jobB"), "--out", dataset)
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and ".lock" in result.stderr
    assert target.read_text() == "precious"


def test_duckdb_errors_are_classified_by_type_and_exact_phrase() -> None:
    import duckdb

    from tracekit.store import connect

    corrupt = duckdb.Error(
        "Corrupt database file: computed checksum 1 does not match stored checksum 2 in block at 12288"
    )
    assert not connect.held_elsewhere(corrupt) and connect.damaged(corrupt)
    held = duckdb.IOException('Could not set lock on file "x": Conflicting lock is held in /usr/bin/duckdb (PID 42)')
    assert connect.held_elsewhere(held) and not connect.damaged(held)
    assert not connect.held_elsewhere(duckdb.IOException("blocked by the lockdown"))


@pytest.mark.parametrize("where", ["header block", "second half"])
@pytest.mark.parametrize("command", ["info", "ingest"])
def test_a_damaged_duckdb_file_is_one_line_naming_it_with_exit_3(tmp_path: Path, where: str, command: str) -> None:
    dataset = tmp_path / "ds"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    db = dataset / "tracekit.duckdb"
    offset = 12288 if where == "header block" else db.stat().st_size // 2
    with db.open("r+b") as f:  # the first block after DuckDB's headers (read on open), or the data
        f.seek(offset)
        f.write(b"\x5a" * (4096 if where == "header block" else db.stat().st_size - offset))
    before = sorted((p.relative_to(dataset), p.read_bytes()) for p in dataset.rglob("*") if p.is_file())
    args: list[str | Path] = (
        ["info", dataset] if command == "info" else ["ingest", _job(tmp_path / "b", "jobB"), "--out", dataset]
    )
    result = run(*args)
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and f"{db}: damaged" in result.stderr, result.stderr
    assert "another program" not in result.stderr
    after = sorted((p.relative_to(dataset), p.read_bytes()) for p in dataset.rglob("*") if p.is_file())
    assert after == before
    problems = _problems(dataset)  # one line per table it cannot read, or one for the file
    assert problems and all("DuckDB file" in p or str(db) in p for p in problems), problems


def _files(dataset: Path) -> list[tuple[Path, bytes]]:
    return sorted((p.relative_to(dataset), p.read_bytes()) for p in dataset.rglob("*") if p.is_file())


@pytest.mark.parametrize("damage", ["emptied", "truncated"])
@pytest.mark.parametrize("table", ["traces", "collectives"])
def test_a_damaged_parquet_file_stops_the_next_ingest_in_one_line_naming_it(
    tmp_path: Path, table: str, damage: str
) -> None:
    dataset = tmp_path / "ds"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    [path] = sorted((dataset / table).glob("*.parquet"))
    if damage == "emptied":
        path.write_bytes(b"")
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    before = _files(dataset)
    result = run("ingest", _job(tmp_path / "b", "jobB"), "--out", dataset)
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and f"{path}: damaged" in result.stderr, result.stderr
    assert _files(dataset) == before
    assert [p for p in _problems(dataset) if str(path) in p], _problems(dataset)


def _ingest_with_file_size_limit(limit: int, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tracekit ingest` where no file may grow past `limit` bytes (RLIMIT_FSIZE, SIGXFSZ ignored):
    every write past it fails with EFBIG, as a full disk fails with ENOSPC, in Python, pyarrow and
    DuckDB alike (no small filesystem needed)."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "tracekit", "ingest", *map(str, args)],
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("limit", [200_000, 1_000_000])  # the parse's staged files; the DuckDB file
def test_a_full_disk_is_one_line_with_exit_3_and_the_dataset_unchanged(tmp_path: Path, limit: int) -> None:
    dataset = tmp_path / "ds"
    ingest([_job(tmp_path / "a", "jobA")], dataset)
    write_et_job(tmp_path / "big" / "jobBig", list(range(8)), [("ALL_REDUCE", 1 << 20)] * 20_000)
    before = _files(dataset)
    result = _ingest_with_file_size_limit(limit, tmp_path / "big", "--out", dataset, "-q")
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1 and "no space to write" in result.stderr, result.stderr
    assert _files(dataset) == before
    assert _problems(dataset) == []


def test_a_write_with_no_room_is_told_from_other_errors() -> None:
    import errno

    import duckdb

    from tracekit.store import connect

    assert connect.out_of_space(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert connect.out_of_space(duckdb.IOException('Could not write all bytes to file "x": No space left on device'))
    assert not connect.out_of_space(OSError(errno.EACCES, os.strerror(errno.EACCES)))
    assert not connect.out_of_space(duckdb.IOException("Could not read enough bytes from file"))
