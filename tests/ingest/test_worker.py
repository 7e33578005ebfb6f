"""The worker: a batch of files shares staged files; a failing file adds no rows, however big."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

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
