"""Rows: the typed collective row every parser emits, and its one conversion to Arrow.

`CollectiveRow` holds the columns of the `collectives` table that a single file can know; the
ingest layer fills `job_id`, `rank`, `trace_id` and `linked_trace_id`. Every parser passes each
row through tracekit.parsers.common.finish before anything else reads it. `CollectiveBuffer`
turns rows into record batches of the table's declared schema (schemas/tables.toml), one column
at a time. This module imports no other rule: every rule module may name the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from tracekit.parsers.base import BatchSink

# Collective rows are ~1 KB each in Python: a modest buffer keeps a parse's memory bounded.
FLUSH_ROWS = 8_192


@dataclass(slots=True)
class CollectiveRow:
    """One communication operation of one rank, as a parser read it (see schemas/tables.toml)."""

    op_id: int | None
    comm_type: str | None
    source: str
    op_name: str | None = None
    is_uneven: bool | None = None
    pg_name: str | None = None
    group_size: int | None = None
    peer: int | None = None
    dtype: str | None = None
    in_elems: int | None = None
    out_elems: int | None = None
    in_bytes: int | None = None
    out_bytes: int | None = None
    in_splits: list[int] | None = None
    out_splits: list[int] | None = None
    seq: int | None = None
    start_us: float | None = None
    duration_us: float | None = None
    rf_id: int | None = None
    # Columns derived rather than read; the PyTorch ET parser writes null for none (see its docs).
    inferred: list[str] | None = field(default_factory=list)


ROW_COLUMNS = tuple(f.name for f in fields(CollectiveRow))
_ROW_VALUES = attrgetter(*ROW_COLUMNS)


def collectives_batch(rows: list[CollectiveRow]) -> pa.RecordBatch:
    """The rows as one record batch of the `collectives` schema; columns no row holds are null."""
    import pyarrow as pa

    from tracekit.schema import arrow_schema

    schema = arrow_schema("collectives")
    # One attrgetter call per row and a transpose in C, not a getattr per row and column.
    values = dict(zip(ROW_COLUMNS, zip(*map(_ROW_VALUES, rows), strict=True), strict=True)) if rows else {}
    arrays = [
        pa.array(values.get(f.name, ()), f.type) if f.name in ROW_COLUMNS else pa.nulls(len(rows), f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class CollectiveBuffer:
    """Collects rows and hands them to the sink as `collectives` batches of `flush_rows` rows."""

    def __init__(self, sink: BatchSink, flush_rows: int = FLUSH_ROWS) -> None:
        self.sink = sink
        self.flush_rows = flush_rows
        self._rows: list[CollectiveRow] = []

    def append(self, row: CollectiveRow) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.flush_rows:
            self.flush()

    def extend(self, rows: list[CollectiveRow]) -> None:
        for row in rows:
            self.append(row)

    def flush(self) -> None:
        if self._rows:
            self.sink.write("collectives", collectives_batch(self._rows))
            self._rows = []
