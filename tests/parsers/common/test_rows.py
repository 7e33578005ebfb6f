"""tracekit.parsers.common.rows: the typed row and its one conversion to Arrow."""

from __future__ import annotations

from tracekit.parsers.base import MemorySink
from tracekit.parsers.common.rows import ROW_COLUMNS, CollectiveBuffer, CollectiveRow
from tracekit.schema import arrow_schema


def test_row_columns_are_the_table_columns_a_file_can_know() -> None:
    names = arrow_schema("collectives").names
    assert set(ROW_COLUMNS) <= set(names)
    assert set(names) - set(ROW_COLUMNS) == {"job_id", "rank", "trace_id", "linked_trace_id"}


def test_buffer_writes_batches_of_the_schema() -> None:
    sink = MemorySink()
    buffer = CollectiveBuffer(sink, flush_rows=2)
    for i in range(5):
        buffer.append(CollectiveRow(op_id=i, comm_type="SEND", source="c10d", peer=i, in_splits=[i]))
    buffer.flush()
    assert [b.num_rows for b in sink.batches["collectives"]] == [2, 2, 1]
    table = sink.table("collectives")
    assert table.schema == arrow_schema("collectives")
    rows = table.to_pylist()
    assert [r["peer"] for r in rows] == [0, 1, 2, 3, 4] and rows[0]["inferred"] == []
    assert rows[0]["job_id"] is None and rows[4]["in_splits"] == [4]
