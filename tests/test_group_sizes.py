"""GPUs per collective: every group-size question counts the same calls (queries/group_size_calls.sql:
send/recv left out, they join two GPUs whatever their group), so their answers agree."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.synthetic import write_dataset
from tracekit.store.queries import query_dependencies

GROUP_SIZE_QUERIES = ["group_size_by_job_size", "group_size_trend", "group_size_vs_job_size"]
PARAMS = {"start": "2024-01-01", "period_months": 3}


def _call(rank: int, op_id: int, comm_type: str, group_size: int, pg: str) -> dict[str, Any]:
    peer = rank ^ 1 if comm_type in ("SEND", "RECV") else None
    return {
        "job_id": "pp",
        "rank": rank,
        "trace_id": f"t{rank}",
        "op_id": op_id,
        "op_name": comm_type.lower(),
        "comm_type": comm_type,
        "group_size": group_size,
        "pg_name": pg,
        "peer": peer,
        "in_bytes": 1 << 20,
    }


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 8-GPU job: all-reduces in data-parallel groups of 2, send/recv in the 8-rank world group."""
    rows = []
    for rank in range(8):
        rows += [_call(rank, 0, "ALL_REDUCE", 2, "dp"), _call(rank, 1, "ALL_REDUCE", 2, "dp")]
        rows.append(_call(rank, 2, "SEND" if rank % 2 == 0 else "RECV", 8, "0"))
    job = {"job_id": "pp", "world_size": 8, "started_at": datetime(2024, 2, 1, tzinfo=UTC)}
    return write_dataset(tmp_path_factory.mktemp("groups") / "ds", {"jobs": [job], "collectives": rows})


@pytest.mark.parametrize("name", GROUP_SIZE_QUERIES)
def test_every_group_size_query_reads_the_one_rule(name: str) -> None:
    assert "group_size_calls" in query_dependencies(name)


def test_send_and_recv_count_in_no_group_size(pipeline: Path) -> None:
    with tracekit.open(pipeline) as ds:
        vs_job = ds.query("group_size_vs_job_size", PARAMS).fetchall()
        trend = ds.query("group_size_trend", PARAMS).pl().row(0, named=True)
        by_job = ds.query("group_size_by_job_size").pl()
    # period, jobs, mean_log2_job_size, mean_log2_group_size, max_group_size, max_job_size
    assert vs_job == [(0, 1, 3.0, 1.0, 2, 8)]
    assert (trend["calls"], trend["mean_group_size"], trend["max_group_size"]) == (16, 2.0, 2)
    assert by_job.select("group_size", "calls").rows() == [(2, 16)]
