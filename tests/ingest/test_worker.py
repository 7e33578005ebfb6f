"""The worker: a batch of files shares staged files; a failing file adds no rows, however big."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tracekit.ingest.worker as worker
from tests.builders import et_bytes
from tracekit.ingest.worker import Task, parse_batch


def _task(tmp_path: Path, name: str, data: bytes) -> Task:
    path = tmp_path / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Task("job", str(path), name, str(path), None, str(tmp_path / "staging"))


def _staged_rows(tmp_path: Path, table: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in (tmp_path / "staging" / table).glob("*.parquet"):
        for trace_id in pq.read_table(path, columns=["trace_id"]).column("trace_id").to_pylist():
            counts[trace_id] = counts.get(trace_id, 0) + 1
    return counts


@pytest.mark.parametrize("spill_rows", [1_000_000, 1_000])
def test_failed_files_add_no_rows_whether_buffered_or_spilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spill_rows: int
) -> None:
    monkeypatch.setattr(worker, "SPILL_ROWS", spill_rows)
    big = et_bytes([("ALL_REDUCE", 64)] * 35_000)  # 70,000 nodes: past the parser's first ops batch
    tasks = [
        _task(tmp_path, "t.0.et", big),
        _task(tmp_path, "t.1.et", big[:-5]),  # fails at its last record, after rows were handed over
        _task(tmp_path, "t.2.et", et_bytes([("ALL_GATHER", 8)])),
    ]
    results = parse_batch(tasks)
    assert [r.error is None for r in results] == [True, False, True]
    ops = _staged_rows(tmp_path, "ops")
    assert ops == {results[0].trace_id: 70_000, results[2].trace_id: 2}
    assert _staged_rows(tmp_path, "collectives") == {results[0].trace_id: 35_000, results[2].trace_id: 1}
    files = {p.name for p in (tmp_path / "staging" / "ops").glob("*.parquet")}
    # Small traces share the batch's file; a spilled one has its own.
    assert len(files) == (1 if spill_rows > 70_000 else 2)
