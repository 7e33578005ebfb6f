"""queries/message_size_percentiles.sql (percentiles found in narrow bins of the size rollup) against
quantile_disc / quantile_cont over every collectives row (tests/queries_from_rows), on random
collectives: sizes that tie, repeat across jobs, sit on bin edges, are zero or null, span 2^0..2^62."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.examples import examples
from tracekit.schema import arrow_schema
from tracekit.store.queries import catalog_statement, rollup_query

ORACLE = Path(__file__).parent / "queries_from_rows" / "message_size_percentiles.sql"
COMM_TYPES = ["ALL_REDUCE", "ALL_GATHER", "ALL_TO_ALL", "RECV", None]
CLASSES = [("ddp", "resnet"), ("ddp", None), ("fsdp", "llama")]


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    connection.register("empty", arrow_schema("collectives").empty_table())
    connection.execute("CREATE TABLE collectives AS SELECT * FROM empty")
    connection.execute("CREATE TABLE job_class (job_id VARCHAR, class VARCHAR, model VARCHAR)")
    connection.execute(catalog_statement("collective_wire_bytes"))
    for rollup in ("collective_sizes", "collective_ranks", "collective_ops"):
        connection.execute(f"CREATE VIEW {rollup} AS {rollup_query(rollup)}")
    connection.execute(catalog_statement("message_size_percentiles"))
    body = "\n".join(line for line in ORACLE.read_text().splitlines() if not line.startswith("--"))
    connection.execute(f"CREATE VIEW rows_message_size_percentiles AS {body.strip().rstrip(';')}")
    yield connection
    connection.close()


def _size() -> st.SearchStrategy[int | None]:
    # bins are floor(64 * v^(1/4)): an edge at each whole fourth root, with its neighbours
    edges = [k**4 + d for k in range(1, 300, 7) for d in (-1, 0, 1)]
    return st.one_of(
        st.none(),
        st.sampled_from([0, 1, 2, 3, 4, 1 << 20, (1 << 20) + 1, *edges, (1 << 62) - 1, 1 << 62]),
        st.integers(0, 1 << 40),
        st.integers(0, 300),
    )


calls = st.lists(
    st.tuples(
        st.integers(0, 5),  # job
        st.sampled_from(COMM_TYPES),
        st.sampled_from([1, 2, 8, None]),  # group size
        _size(),  # in_bytes
        _size(),  # in_elems
        st.integers(1, 4),  # ranks issuing it
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=calls)
def test_percentiles_from_bins_equal_those_over_every_row(con: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    con.execute("DELETE FROM collectives")
    con.execute("DELETE FROM job_class")
    for job in range(6):
        klass, model = CLASSES[job % len(CLASSES)]
        con.execute("INSERT INTO job_class VALUES (?, ?, ?)", [f"j{job}", klass, model])
    for op_id, (job, comm_type, group_size, in_bytes, in_elems, ranks) in enumerate(rows):
        con.execute(
            "INSERT INTO collectives (job_id, rank, trace_id, op_id, op_name, comm_type, group_size, in_bytes, "
            "in_elems) SELECT ?, r, 't' || r, ?, 'op', ?, ?, ?, ? FROM range(?) t(r)",
            [f"j{job}", op_id, comm_type, group_size, in_bytes, in_elems, ranks],
        )
    now = con.sql("SELECT * FROM message_size_percentiles").pl()
    before = con.sql("SELECT * FROM rows_message_size_percentiles").pl()
    assert now.schema == before.schema
    exact = [c for c in now.columns if c != "wire_bytes" and c != "p50_wire_bytes"]
    assert now.select(exact).equals(before.select(exact))
    assert_frame_equal(now, before, check_exact=False, rel_tol=1e-12)


def test_an_empty_dataset_has_no_percentiles(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM collectives")
    assert (
        con.sql("SELECT * FROM message_size_percentiles")
        .pl()
        .equals(con.sql("SELECT * FROM rows_message_size_percentiles").pl())
    )
    assert isinstance(con.sql("SELECT * FROM message_size_percentiles").pl(), pl.DataFrame)
