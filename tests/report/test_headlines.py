"""A job section's sentences read as English for one process group and for ranks that start together."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import polars as pl

from tracekit.report.format import Num
from tracekit.report.headlines import job_groups, job_stragglers


def _text(sentence: list[str | Num]) -> str:
    return "".join(part.text if isinstance(part, Num) else part for part in sentence)


def test_one_process_group_carries_the_traffic() -> None:
    frame = pl.DataFrame(
        {"pg_name": ["0"], "pg_desc": ["default_pg"], "group_size": [8], "wire_bytes": [1.0], "wire_share": [1.0]}
    )
    job: Any = SimpleNamespace(by_group=frame, job={"job_id": "j"})
    assert _text(job_groups(job)).startswith("1 process group carries traffic; the busiest, group 0")


def test_ranks_that_start_together() -> None:
    frame = pl.DataFrame(
        {"start_spread_us": [0.0, 0.0], "last_rank": [None, None]}, schema_overrides={"last_rank": pl.Int32}
    )
    job: Any = SimpleNamespace(stragglers=frame, job={"job_id": "j"})
    text = _text(job_stragglers(job))
    assert text == (
        "Over 2 collectives matched across ranks, their ranks start a median 0 µs apart (p99 0 µs); "
        "they always start together."
    )
