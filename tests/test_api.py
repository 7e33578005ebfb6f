"""tracekit.api: the notebook-facing view of a dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tests.builders import write_et_job
from tracekit.api import CollectiveTotal, DatasetSummary
from tracekit.errors import DatasetError
from tracekit.ingest import ingest


def test_summary_counts_jobs_ranks_traces_collectives_and_errors(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "gap", [0, 2], [("ALL_REDUCE", 1 << 20), ("BROADCAST", 8)])
    (tmp_path / "in" / "gap" / "gap.3.et").write_bytes(b"\x05ab")  # truncated record
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    with tracekit.open(tmp_path / "ds") as ds:
        summary = ds.summary()
    assert summary == report.totals
    assert isinstance(summary, DatasetSummary)
    assert (summary.jobs, summary.ranks, summary.traces_ok, summary.traces_error) == (1, 2, 2, 2)
    assert summary.collectives == [CollectiveTotal("ALL_REDUCE", 2, 2 << 20), CollectiveTotal("BROADCAST", 2, 16)]
    assert len(summary.errors) == 2 and any("truncated record" in e for e in summary.errors)
    assert any("rank 1 of 3 has no trace file" in e for e in summary.errors)


def test_open_refuses_what_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not a tracekit dataset"):
        tracekit.open(tmp_path)
