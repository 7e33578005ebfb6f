"""A commit or repair killed at each point it can stop leaves a dataset every tracekit reader opens,
showing the last committed state, and the next command that writes it finishes the work (issue 22,
item 2). The kill is injected at each point, as tests/ingest/test_interrupted.py does."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import tracekit
import tracekit.store.commit
import tracekit.store.repair
from tests.builders import write_et_job
from tests.conftest import cli
from tracekit.ingest import ingest
from tracekit.store.dataset import WAL_NAME
from tracekit.store.parquet_files import Plan, apply_plan


class Killed(BaseException):
    """The kill: a BaseException, so that nothing on the way catches it as an error."""


def _kill(*args: object) -> None:
    raise Killed


def _half_of_the_moves_then_kill(plan: Plan) -> None:
    apply_plan(Plan(plan.moves[: max(1, len(plan.moves) // 2)], []))
    raise Killed


def _jobs_of(dataset: Path) -> int:
    with tracekit.open(dataset) as ds:
        [(jobs,)] = ds.sql("select count(*) from jobs").fetchall()
        return int(jobs)


@contextmanager
def _held(dataset: Path, reader: bool) -> Iterator[None]:
    """The DuckDB file open in another reader meanwhile (the commit then swaps in a copy), or not."""
    with tracekit.open(dataset) as held:
        if reader:
            held.sql("select count(*) from jobs").fetchall()
        yield


# (where the kill lands, the function it replaces, whether a reader holds the file: the copy path)
KILL_POINTS: dict[str, tuple[str, Callable[..., None], bool]] = {
    "after the copy's swap, before the old log's removal": ("remove_replaced_log", _kill, True),
    "after the commit, before the Parquet moves (in place)": ("apply_plan", _kill, False),
    "after the commit, before the Parquet moves (copy)": ("apply_plan", _kill, True),
    "halfway through the Parquet moves": ("apply_plan", _half_of_the_moves_then_kill, False),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_commit_killed_at_each_point_leaves_a_dataset_readers_open_and_the_next_run_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    dataset = tmp_path / "ds"
    write_et_job(tmp_path / "a" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    write_et_job(tmp_path / "b" / "jobB", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    write_et_job(tmp_path / "c" / "jobC", [0, 1], [("ALL_GATHER", 1 << 10)] * 2)
    ingest([tmp_path / "a"], dataset)
    ingest([tmp_path / "b"], dataset)  # its rows in the log: the copy path must carry them over
    assert (dataset / WAL_NAME).stat().st_size > 0
    name, replacement, reader = KILL_POINTS[point]
    monkeypatch.setattr(tracekit.store.commit, name, replacement)
    with _held(dataset, reader), pytest.raises(Killed):
        ingest([tmp_path / "c"], dataset)
    monkeypatch.undo()
    # Past the commit point: every reader sees the run (before, the stale log made the file unopenable).
    assert _jobs_of(dataset) == 3
    commands: list[list[str | Path]] = [["info", dataset], ["query", "job_overview", dataset]]
    for args in commands:
        done = cli(*args)
        assert done.returncode == 0, (point, args, done.stderr)
    assert cli("verify", dataset).returncode == 3  # the Parquet copy is behind until the next writer
    assert ingest([tmp_path / "c"], dataset).files_added == 0  # finishes the run, adds nothing
    assert not (dataset / ".staging").exists()
    assert cli("verify", dataset).returncode == 0
    assert _jobs_of(dataset) == 3


@pytest.mark.parametrize("point", ["remove_replaced_log", "fsync"])
def test_a_repair_killed_midway_leaves_a_dataset_readers_open_and_the_next_writer_settles_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    dataset = tmp_path / "ds"
    write_et_job(tmp_path / "a" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    write_et_job(tmp_path / "b" / "jobB", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    ingest([tmp_path / "a"], dataset)
    ingest([tmp_path / "b"], dataset)
    os.truncate(dataset / WAL_NAME, 0)  # the second run lost from the DuckDB file
    monkeypatch.setattr(tracekit.store.repair, point, _kill)
    with pytest.raises(Killed):
        tracekit.repair(dataset)
    monkeypatch.undo()
    if point == "remove_replaced_log":  # the rebuilt file is in place: readers see both runs
        assert _jobs_of(dataset) == 2
    else:  # killed before the swap: the damage is still named, not hidden
        assert cli("info", dataset).returncode == 3
    done = cli("repair", dataset)
    assert done.returncode == 0, done.stderr
    assert _jobs_of(dataset) == 2
    assert cli("verify", dataset).returncode == 0


@pytest.mark.parametrize("kill", [_kill, _half_of_the_moves_then_kill])
def test_a_parquet_rewrite_killed_after_recording_its_files_is_finished_by_the_next_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill: Callable[..., None]
) -> None:
    """The repair records the files it rewrites (tracekit.store.written_files) before moving them in:
    killed in between, verify names the files not yet as recorded, and the next writer moves them."""
    dataset = tmp_path / "ds"
    write_et_job(tmp_path / "a" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    write_et_job(tmp_path / "b" / "jobB", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    ingest([tmp_path / "a"], dataset)
    ingest([tmp_path / "b"], dataset)
    (dataset / "jobs.parquet").unlink()
    monkeypatch.setattr(tracekit.store.repair, "apply_plan", kill)
    with pytest.raises(Killed):
        tracekit.repair(dataset)
    monkeypatch.undo()
    assert _jobs_of(dataset) == 2
    checked = cli("verify", dataset)
    assert checked.returncode == 3 and "an interrupted run is pending" in checked.stderr
    write_et_job(tmp_path / "c" / "jobC", [0, 1], [("ALL_GATHER", 1 << 10)] * 2)
    ingest([tmp_path / "c"], dataset)  # recovers first: the repair's moves finished
    assert not (dataset / ".staging").exists()
    done = cli("verify", dataset)
    assert done.returncode == 0, done.stderr
    assert _jobs_of(dataset) == 3


def test_a_dataset_moved_between_a_kill_and_the_next_run_is_still_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_et_job(tmp_path / "a" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20)] * 5)
    monkeypatch.setattr(tracekit.store.commit, "apply_plan", _kill)
    with pytest.raises(Killed):
        ingest([tmp_path / "a"], tmp_path / "ds")
    monkeypatch.undo()
    (tmp_path / "ds").rename(tmp_path / "moved")
    # Before: the marker's absolute paths led outside the moved folder, so it was refused and dropped.
    report = ingest([tmp_path / "a"], tmp_path / "moved")
    assert report.files_added == 0 and not report.warnings
    assert cli("verify", tmp_path / "moved").returncode == 0
    assert _jobs_of(tmp_path / "moved") == 1
