"""Every query, and the report built from them, on datasets holding the largest values the data model
accepts (byte and element counts up to 2^62, ranks below 2^20, world and group sizes up to 2^20, many
calls of one kind): no query may fail or wrap around, and the sums that can be checked are exact.

One bad trace must never break a query, or the report, for the whole dataset: a sum of byte counts
over calls needs more than 64 bits (three calls of 2^62 - 1 bytes already do)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit
from tests.examples import examples
from tests.synthetic import write_dataset
from tracekit.report import render_report
from tracekit.schema import COMM_TYPES
from tracekit.store.queries import query_names, query_params

BIG = 1 << 62  # the documented bound of element and byte counts (tracekit/parsers/common/values.py)
MAX_RANK = (1 << 20) - 1
MAX_SIZE = 1 << 20
_serial = itertools.count()

sizes = st.one_of(
    st.none(),
    st.sampled_from([0, 1, 4, BIG - 1, BIG]),
    st.integers(0, BIG),
)
calls = st.lists(
    st.tuples(
        st.integers(0, 2),  # job
        st.sampled_from(COMM_TYPES),  # the data model's values (schemas/tables.toml)
        st.sampled_from([None, 1, 2, 8, MAX_SIZE]),  # group size
        sizes,  # in_bytes
        sizes,  # in_elems
        st.integers(1, 4),  # ranks issuing it
        st.sampled_from([0, MAX_RANK - 3]),  # the first of them
        st.one_of(st.none(), st.lists(st.sampled_from([0, 1, BIG - 1, BIG]), min_size=1, max_size=4)),  # splits
        st.sampled_from(["op_a", "op_b"]),
        st.sampled_from([None, 0.0, 1.0, 1e15]),  # duration_us
    ),
    min_size=1,
    max_size=30,
)
JOBS = [
    {"job_id": "j0", "world_size": 4, "label": "ddp:resnet", "started_at": datetime(2024, 1, 5, tzinfo=UTC)},
    {"job_id": "j1", "world_size": MAX_SIZE, "label": None, "started_at": datetime(2024, 9, 1, tzinfo=UTC)},
    {"job_id": "j2", "world_size": MAX_SIZE, "label": "fsdp:llama", "started_at": None},
]
PARAMS = {"start": "2024-01-01", "period_months": 3, "rank": 0, "job_id": "j1", "ranks_per_cell": 8}


def _dataset(tmp: Path, rows: list[tuple[Any, ...]]) -> tuple[Path, list[dict[str, Any]]]:
    collectives = []
    for op_id, (job, comm_type, group_size, in_bytes, in_elems, ranks, first, splits, name, duration) in enumerate(
        rows
    ):
        for rank in range(first, first + ranks):
            collectives.append(
                {
                    "job_id": f"j{job}",
                    "rank": rank,
                    "trace_id": f"t{job}-{rank}",
                    "op_id": op_id,
                    "op_name": name,
                    "comm_type": comm_type,
                    "group_size": group_size,
                    "pg_name": "0",
                    "peer": (rank + 1) % MAX_SIZE if comm_type in ("SEND", "RECV") else None,
                    "in_bytes": in_bytes,
                    "in_elems": in_elems,
                    "dtype": "Float",
                    "in_splits": splits if comm_type == "ALL_TO_ALL" else None,
                    "is_uneven": bool(splits) and comm_type == "ALL_TO_ALL",
                    "start_us": float(op_id),
                    "duration_us": duration,
                }
            )
    traces = [{"trace_id": t, "job_id": j, "rank": r, "path": t, "status": "ok"} for j, r, t in _traces(collectives)]
    groups = [{"job_id": j["job_id"], "pg_name": "0", "group_size": j["world_size"], "ranks": []} for j in JOBS]
    tables = {"jobs": JOBS, "collectives": collectives, "traces": traces, "process_groups": groups}
    return write_dataset(tmp / f"ds{next(_serial)}", tables), collectives


def _traces(collectives: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    return sorted({(c["job_id"], c["rank"], c["trace_id"]) for c in collectives})


def _in_bytes(collectives: list[dict[str, Any]], **where: Any) -> int:
    return sum(c["in_bytes"] or 0 for c in collectives if all(c[k] == v for k, v in where.items()) and c["in_bytes"])


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _rows(relation: Any) -> list[dict[str, Any]]:
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


@pytest.mark.slow
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=calls)
def test_every_query_and_the_report_hold_the_largest_values(tmp_path: Path, rows: list[tuple[Any, ...]]) -> None:
    path, collectives = _dataset(tmp_path, rows)
    with tracekit.open(path) as ds:
        for name in query_names():
            params = {p: PARAMS[p] for p in query_params(name)}
            ds.query(name, params or None).fetchall()  # no error: no overflow, no conversion
        assert _int(_rows(ds.query("dataset_overview"))[0]["in_bytes"]) == _in_bytes(collectives)
        per_job = {r["job_id"]: _int(r["in_bytes"]) for r in _rows(ds.query("job_overview"))}
        assert per_job == {job: _in_bytes(collectives, job_id=job) for job in ("j0", "j1", "j2")}
        by_type = _rows(ds.query("job_bytes_by_collective", {"job_id": "j1"}))
        assert sum(_int(r["in_bytes"]) for r in by_type) == _in_bytes(collectives, job_id="j1")
        by_class = _rows(ds.query("collective_mix_by_class"))
        assert sum(_int(r["in_bytes"]) for r in by_class) == _in_bytes(collectives)
        percentiles = _rows(ds.query("message_size_percentiles"))
        assert sum(_int(r["in_bytes"]) for r in percentiles) == _in_bytes(collectives)
        for op in _rows(ds.query("collective_group_sizes")):
            where = {"job_id": op["job_id"], "op_name": op["op_name"], "comm_type": op["comm_type"]}
            assert _int(op["in_bytes"]) == _in_bytes(collectives, **where)
        for call in _rows(ds.query("collective_bandwidth", {"job_id": "j1"})):
            gathers = call["comm_type"] in ("ALL_GATHER", "GATHER")
            assert _int(call["nccl_bytes"]) == call["in_bytes"] * (call["group_size"] if gathers else 1)
    html, result = render_report(path)
    assert result.jobs == 3 and "Traceback" not in html
    render_report(path, compare="2024-06-01..")  # the compare pages assemble the same frames


def test_three_calls_of_the_largest_size_sum_exactly(tmp_path: Path) -> None:
    """The case hypothesis found: three calls of 2^62 - 1 bytes in one job (their sum needs 64 bits)."""
    path, _ = _dataset(tmp_path, [(0, "ALL_REDUCE", 4, BIG - 1, None, 3, 0, None, "op_a", 1.0)])
    with tracekit.open(path) as ds:
        rows = _rows(ds.query("message_size_percentiles"))
        assert [(r["comm_type"], r["calls"], int(r["in_bytes"])) for r in rows] == [("ALL_REDUCE", 3, 3 * (BIG - 1))]
        assert int(_rows(ds.query("dataset_overview"))[0]["in_bytes"]) == 3 * (BIG - 1)


def test_an_all_gather_of_the_largest_shard_is_paired_without_overflow(tmp_path: Path) -> None:
    """The case hypothesis found: the class rule's AG/RS pairing multiplied a 2^62-element shard by the
    group size in 64 bits (DuckDB: Overflow in multiplication of INT64)."""
    rows = [(0, "ALL_GATHER", 8, BIG, None, 1, 0, None, "op_a", 1.0),
            (0, "REDUCE_SCATTER", 8, None, None, 1, 0, None, "op_b", 1.0)]  # fmt: skip
    path, _ = _dataset(tmp_path, rows)
    with tracekit.open(path) as ds:
        assert [r["job_id"] for r in _rows(ds.query("job_class"))] == ["j0", "j1", "j2"]


@pytest.mark.parametrize("size", [BIG - 1, BIG])
def test_the_report_states_the_largest_sums(tmp_path: Path, size: int) -> None:
    from tracekit.report.data import load_fleet

    path, _ = _dataset(tmp_path, [(0, "ALL_REDUCE", 4, size, None, 4, 0, None, "op_a", 1.0)] * 3)
    with tracekit.open(path) as ds:
        fleet = load_fleet(ds)
    assert fleet.overview["in_bytes"] == pytest.approx(12 * size, rel=1e-15)
    assert fleet.overview["wire_bytes"] == pytest.approx(12 * size * 2 * 3 / 4, rel=1e-15)
    assert sum(fleet.jobs["in_bytes"].to_list()) == pytest.approx(12 * size, rel=1e-15)
