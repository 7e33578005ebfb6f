"""The worker: a batch of files shares staged files; a failing file adds no rows, however big."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import tracekit.ingest.staged_writer as staged_writer
import tracekit.ingest.worker as worker
from tests.builders import et_bytes
from tracekit.ingest.worker import SEQ_COLUMN, Batch, Task, parse_batch


def _task(tmp_path: Path, name: str, data: bytes, seq: int) -> Task:
    path = tmp_path / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Task("job", str(path), name, str(path), None, seq)


def _staged_rows(tmp_path: Path, table: str) -> dict[int, int]:
    """Staged rows by the seq of the file they come from."""
    counts: dict[int, int] = {}
    for path in (tmp_path / "staging" / table).glob("*.parquet"):
        for seq in pq.read_table(path, columns=[SEQ_COLUMN]).column(SEQ_COLUMN).to_pylist():
            counts[seq] = counts.get(seq, 0) + 1
    return counts


@pytest.mark.parametrize("spill_rows", [1_000_000, 1_000])
def test_failed_files_add_no_rows_whether_buffered_or_spilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spill_rows: int
) -> None:
    monkeypatch.setattr(worker, "SPILL_ROWS", spill_rows)
    big = et_bytes([("ALL_REDUCE", 64)] * 35_000)  # 70,000 nodes: past the parser's first ops batch
    tasks = [
        _task(tmp_path, "t.0.et", big, 10),
        _task(tmp_path, "t.1.et", big[:-5], 11),  # fails at its last record, after rows were handed over
        _task(tmp_path, "t.2.et", et_bytes([("ALL_GATHER", 8)]), 12),
    ]
    results = parse_batch(Batch(tasks, str(tmp_path / "staging"))).files
    assert [r.error is None for r in results] == [True, False, True]
    assert _staged_rows(tmp_path, "ops") == {10: 70_000, 12: 2}
    assert _staged_rows(tmp_path, "collectives") == {10: 35_000, 12: 1}
    files = {p.name for p in (tmp_path / "staging" / "ops").glob("*.parquet")}
    # Small traces share the batch's file; a spilled one has its own.
    assert len(files) == (1 if spill_rows > 70_000 else 2)


def test_a_parser_reading_many_files_at_once_drops_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser with `parse_many` gets the batch's files of its format in one call; its rows, named
    by file, land as if each file had been parsed alone, and a failed file adds none."""
    import dataclasses

    import pyarrow as pa

    from tracekit.parsers.base import MemorySink, Source, TraceError, TraceMeta
    from tracekit.parsers.chakra import et as chakra_et
    from tracekit.parsers.formats import parsers

    calls: list[int] = []

    def parse_many(sources: Sequence[Source], sink: worker.FilesSink) -> list[TraceMeta | TraceError | None]:
        calls.append(len(sources))
        outcomes: list[TraceMeta | TraceError | None] = []
        for index, source in enumerate(sources):
            one = MemorySink()
            try:
                outcomes.append(chakra_et.parse(source, one))
            except TraceError as exc:
                outcomes.append(exc)
            for table, batches in one.batches.items():
                for batch in batches:
                    sink.write(table, batch, pa.array([index] * batch.num_rows, pa.int32()))
        return outcomes

    tasks = [
        _task(tmp_path, "t.0.et", et_bytes([("ALL_REDUCE", 64)] * 3), 0),
        _task(tmp_path, "t.1.et", et_bytes([("ALL_REDUCE", 64)])[:-2], 1),  # truncated: fails
        _task(tmp_path, "t.2.et", et_bytes([("ALL_GATHER", 8)]), 2),
    ]
    monkeypatch.setitem(parsers(), "chakra_et", dataclasses.replace(parsers()["chakra_et"], parse_many=parse_many))
    results = parse_batch(Batch(tasks, str(tmp_path / "staging"))).files
    assert calls == [3]
    assert [r.error is None for r in results] == [True, False, True]
    assert "truncated" in (results[1].error or "")
    assert _staged_rows(tmp_path, "ops") == {0: 6, 2: 2}
    assert _staged_rows(tmp_path, "collectives") == {0: 3, 2: 1}
    assert results[0].meta is not None and results[0].meta.node_count == 6


@pytest.mark.slow
def test_a_generated_fleet_ingests_the_same_with_and_without_parse_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chakra ET's parse_many (files of a batch decoded together) writes the dataset that parsing the
    files one by one writes: every table, row for row."""
    import dataclasses

    from tests.ingest.test_executors import TABLES, _rows
    from tracekit.generate import generate_fleet
    from tracekit.ingest import ingest
    from tracekit.parsers.chakra import many as chakra_many
    from tracekit.parsers.formats import parsers

    fleet = tmp_path / "fleet"
    generate_fleet(fleet, 30, 5, "default")  # 1,072 rank files (and 20 jobs 712, as job sizes are drawn now)
    (fleet / "job-000003" / "broken.7.et").write_bytes((fleet / "job-000003").glob("*.et").__next__().read_bytes()[:-5])
    calls: list[int] = []
    many = chakra_many.parse_many

    def counted(sources: Any, sink: Any) -> Any:
        calls.append(len(sources))
        return many(sources, sink)

    monkeypatch.setattr(chakra_many, "parse_many", counted)
    together = ingest([fleet], tmp_path / "together", workers=1)
    assert sum(calls) > 1_000 and len(together.errors) == 1
    monkeypatch.setitem(parsers(), "chakra_et", dataclasses.replace(parsers()["chakra_et"], parse_many=None))
    alone = ingest([fleet], tmp_path / "alone", workers=1)
    assert together.errors == alone.errors
    expected, got = _rows(tmp_path / "alone"), _rows(tmp_path / "together")
    for table in TABLES:
        assert got[table] == expected[table], table


def test_parsing_runs_the_cycle_collector_less_often_and_restores_it() -> None:
    import gc

    from tracekit.ingest.worker import fewer_gc_passes

    before = gc.get_threshold()
    with fewer_gc_passes():
        assert gc.get_threshold()[0] == 100_000
        assert gc.get_threshold()[1:] == before[1:]
    assert gc.get_threshold() == before


@pytest.mark.parametrize("known", [False, True])
def test_a_long_file_is_hashed_the_same_while_it_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, known: bool
) -> None:
    """A file too long to hold is hashed by a thread while it parses, unless the dataset holds files
    it could be (then first, so that a held file is not parsed): the same sha256, size and trace id."""
    import hashlib

    monkeypatch.setattr(worker, "READ_WHOLE_BYTES", 1_000)
    data = et_bytes([("ALL_REDUCE", 64)] * 100)
    tasks = [_task(tmp_path, "t.0.et", data, 0), _task(tmp_path, "t.1.et", et_bytes([("ALL_GATHER", 8)]), 1)]
    batch = Batch(tasks, str(tmp_path / "staging"), known=frozenset({"elsewhere"}) if known else frozenset())
    results = parse_batch(batch).files
    sha = hashlib.sha256(data).hexdigest()
    assert [r.error for r in results] == [None, None]
    assert (results[0].sha256, results[0].size_bytes) == (sha, len(data))
    assert results[0].trace_id == worker.make_trace_id("job", "t.0.et", sha)
    assert results[0].meta is not None and results[0].meta.node_count == 200
    assert _staged_rows(tmp_path, "ops") == {0: 200, 1: 2}


def test_a_long_file_that_cannot_be_hashed_is_an_error_and_adds_no_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracekit
    from tracekit.ingest import ingest

    monkeypatch.setattr(worker, "READ_WHOLE_BYTES", 1_000)

    def fail(f: Any) -> tuple[str, int]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(worker, "_hash_stream", fail)
    task = _task(tmp_path, "t.0.et", et_bytes([("ALL_REDUCE", 64)] * 100), 0)
    (result,) = parse_batch(Batch([task], str(tmp_path / "staging"))).files
    assert result.error == f"{task.display}: cannot read (Input/output error)"
    assert result.meta is None and result.sha256 == ""
    assert result.trace_id == worker.make_trace_id("job", "t.0.et", "")
    # Its rows were staged as it parsed; the commit leaves them out (they belong to no ok file).
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    assert [e.endswith("cannot read (Input/output error)") for e in report.errors] == [True]
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select count(*) from ops").fetchall() == [(0,)]
        assert ds.sql("select status, size_bytes from traces").fetchall() == [("error", 0)]


def test_a_spilled_file_whose_staged_write_fails_is_an_error_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big file's own staged rows are written in a thread while it parses on; a write that fails
    there fails that file (named, with the error), not the batch, and leaves no staged rows of it."""
    monkeypatch.setattr(worker, "SPILL_ROWS", 1_000)
    write = staged_writer.StagedWriter._write

    def fail_in_thread(self: Any, table: str, batches: Any) -> None:
        if self.in_thread:
            raise OSError(28, "No space left on device")
        write(self, table, batches)

    monkeypatch.setattr(staged_writer.StagedWriter, "_write", fail_in_thread)
    tasks = [
        _task(tmp_path, "t.0.et", et_bytes([("ALL_REDUCE", 64)] * 35_000), 0),
        _task(tmp_path, "t.1.et", et_bytes([("ALL_GATHER", 8)]), 1),
    ]
    big, small = parse_batch(Batch(tasks, str(tmp_path / "staging"))).files
    assert big.error is not None and "internal error while staging its rows (OSError" in big.error
    assert "No space left on device" in big.error and small.error is None
    assert _staged_rows(tmp_path, "ops") == {1: 2}


def test_the_kernel_is_asked_to_read_every_file_of_a_batch_before_the_first_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    advise = os.posix_fadvise

    def advised(fd: int, offset: int, length: int, advice: int) -> None:
        events.append(f"advise {os.readlink(f'/proc/self/fd/{fd}').rsplit('/', 1)[-1]}")
        advise(fd, offset, length, advice)

    read = worker._read

    def reading(task: Task, hash_later: bool = False) -> Any:
        events.append(f"read {task.name}")
        return read(task, hash_later)

    monkeypatch.setattr(os, "posix_fadvise", advised)
    monkeypatch.setattr(worker, "_read", reading)
    tasks = [_task(tmp_path, f"t.{rank}.et", et_bytes([("ALL_REDUCE", 64)]), rank) for rank in range(3)]
    tasks.insert(1, Task("job", "gone", "t.9.et", str(tmp_path / "gone.et"), None, 9))
    results = parse_batch(Batch(tasks, str(tmp_path / "staging"))).files
    assert events == [f"advise t.{r}.et" for r in range(3)] + [
        "read t.0.et",
        "read t.9.et",
        "read t.1.et",
        "read t.2.et",
    ]
    assert [r.error is None for r in results] == [True, False, True, True]
    assert "gone: cannot read" in (results[1].error or "")
