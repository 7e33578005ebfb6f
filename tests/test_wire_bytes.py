"""queries/collective_wire_bytes.sql against the algorithms it stands for, simulated step by step.

For every collective type, group size and message size, the wire_bytes of the n ranks of one
collective must add up to what a ring (or direct) run of it sends in total, and for the symmetric
collectives each rank's wire_bytes must be what that rank sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.schema import arrow_schema
from tracekit.store.queries import catalog_statement


def ring_all_reduce(n: int, size: int) -> list[Fraction]:
    """Per-rank bytes sent: a reduce-scatter then an all-gather, each n-1 steps of one S/n chunk to the next rank."""
    sent = [Fraction(0)] * n
    chunk = Fraction(size, n)
    for _phase in ("reduce-scatter", "all-gather"):
        for _step in range(n - 1):
            for rank in range(n):
                sent[rank] += chunk
    return sent


def ring_all_gather(n: int, shard: int) -> list[Fraction]:
    """Each step every rank forwards one shard (its own first, then the one it received) to the next rank."""
    sent = [Fraction(0)] * n
    for _step in range(n - 1):
        for rank in range(n):
            sent[rank] += shard
    return sent


def ring_reduce_scatter(n: int, size: int) -> list[Fraction]:
    sent = [Fraction(0)] * n
    for _step in range(n - 1):
        for rank in range(n):
            sent[rank] += Fraction(size, n)
    return sent


def direct_all_to_all(n: int, size: int) -> list[Fraction]:
    """Every rank sends its 1/n block to each of the n-1 others."""
    return [sum((Fraction(size, n) for peer in range(n) if peer != rank), Fraction(0)) for rank in range(n)]


def ring_broadcast(n: int, size: int, root: int = 0) -> list[Fraction]:
    """The root sends the message to the next rank, which passes it on; the last rank sends nothing."""
    sent = [Fraction(0)] * n
    for hop in range(n - 1):
        sent[(root + hop) % n] += size
    return sent


def direct_to_root(n: int, size: int, root: int = 0) -> list[Fraction]:
    """Reduce or gather done directly: every rank but the root sends its S to the root."""
    return [Fraction(0) if rank == root else Fraction(size) for rank in range(n)]


SIMULATED = {
    "ALL_REDUCE": ring_all_reduce,
    "ALL_GATHER": ring_all_gather,
    "REDUCE_SCATTER": ring_reduce_scatter,
    "ALL_TO_ALL": direct_all_to_all,
    "BROADCAST": ring_broadcast,
    "REDUCE": direct_to_root,
    "GATHER": direct_to_root,
}
SYMMETRIC = {"ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"}


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    connection.register("empty", arrow_schema("collectives").empty_table())
    connection.execute("CREATE TABLE collectives AS SELECT * FROM empty")
    connection.execute(catalog_statement("collective_wire_bytes"))
    yield connection
    connection.close()


def wire_bytes(con: duckdb.DuckDBPyConnection, comm_type: str, n: int, size: int) -> list[float]:
    """wire_bytes of one collective as its n ranks record it (each with in_bytes = size)."""
    con.execute("DELETE FROM collectives")
    con.execute(
        "INSERT INTO collectives (job_id, rank, trace_id, op_id, comm_type, group_size, in_bytes) "
        "SELECT 'j', r, 't' || r, 0, ?, ?, ? FROM range(?) t(r)",
        [comm_type, n, size, n],
    )
    return [row[0] for row in con.sql("SELECT wire_bytes FROM collective_wire_bytes(NULL) ORDER BY rank").fetchall()]


@settings(max_examples=examples(150), deadline=None)
@given(
    comm_type=st.sampled_from(sorted(SIMULATED)),
    n=st.integers(min_value=1, max_value=64),
    size=st.integers(min_value=0, max_value=1 << 40),
)
def test_wire_bytes_add_up_to_the_algorithms_total(
    con: duckdb.DuckDBPyConnection, comm_type: str, n: int, size: int
) -> None:
    simulated = SIMULATED[comm_type](n, size)
    recorded = wire_bytes(con, comm_type, n, size)
    assert sum(recorded) == pytest.approx(float(sum(simulated)), rel=1e-12, abs=1e-6)
    if comm_type in SYMMETRIC:
        assert recorded == pytest.approx([float(s) for s in simulated], rel=1e-12, abs=1e-6)


@given(n=st.integers(min_value=2, max_value=64), size=st.integers(min_value=0, max_value=1 << 40))
def test_a_send_carries_its_message_and_its_recv_nothing(con: duckdb.DuckDBPyConnection, n: int, size: int) -> None:
    assert wire_bytes(con, "SEND", n, size) == [float(size)] * n
    assert wire_bytes(con, "RECV", n, size) == [0.0] * n


def test_unknown_group_size_or_bytes_is_null_not_a_guess(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM collectives")
    con.execute(
        "INSERT INTO collectives (job_id, rank, trace_id, op_id, comm_type, group_size, in_bytes) VALUES "
        "('j', 0, 't', 0, 'ALL_REDUCE', NULL, 100), ('j', 0, 't', 1, 'ALL_REDUCE', 4, NULL), "
        "('j', 0, 't', 2, 'BARRIER', 4, 0)"
    )
    assert [r[0] for r in con.sql("SELECT wire_bytes FROM collective_wire_bytes(NULL) ORDER BY op_id").fetchall()] == [
        None,
        None,
        0.0,
    ]


@pytest.mark.parametrize("comm_type", sorted(SIMULATED))
@pytest.mark.parametrize("group_size", [0, -1, -(1 << 31)])
def test_a_group_of_no_rank_has_unknown_wire_bytes_never_infinite_or_negative(
    con: duckdb.DuckDBPyConnection, comm_type: str, group_size: int
) -> None:
    # Found by the dataset fuzzer (seed 2026, case 4173): a group_size of 0 made an all-to-all's
    # wire_bytes (n-1)/n * S = -inf in job_bytes_by_collective.
    con.execute("DELETE FROM collectives")
    con.execute(
        "INSERT INTO collectives (job_id, rank, trace_id, op_id, comm_type, group_size, in_bytes) "
        "VALUES ('j', 0, 't', 0, ?, ?, 1024)",
        [comm_type, group_size],
    )
    assert con.sql("SELECT wire_bytes FROM collective_wire_bytes(NULL)").fetchall() == [(None,)]


def test_collective_bandwidth_leaves_out_a_group_of_no_rank(con: duckdb.DuckDBPyConnection) -> None:
    # The same hazard as case 4173: a bus factor (n-1)/n of n = 0 is -inf.
    con.execute(catalog_statement("collective_bandwidth"))
    con.execute("DELETE FROM collectives")
    con.execute(
        "INSERT INTO collectives (job_id, rank, trace_id, op_id, comm_type, group_size, in_bytes, duration_us) "
        "VALUES ('j', 0, 't', 0, 'ALL_REDUCE', 0, 1024, 5.0), ('j', 0, 't', 1, 'ALL_GATHER', -3, 1024, 5.0), "
        "('j', 0, 't', 2, 'ALL_REDUCE', 4, 1024, 5.0)"
    )
    rows = con.sql("SELECT op_id, busbw_gbps FROM collective_bandwidth('j')").fetchall()
    assert [op for op, _ in rows] == [2] and rows[0][1] > 0
