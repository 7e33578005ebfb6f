"""Rows: the typed collective row every parser emits, and its one conversion to Arrow.

`CollectiveRow` holds the columns of the `collectives` table that a single file can know; the
ingest layer fills `job_id`, `rank`, `trace_id` and `linked_trace_id`. Every parser passes each
row through `finished` before anything else reads it: its values are checked against the bounds
(tracekit.parsers.common.values) and its split lists turned into elements
(tracekit.parsers.common.sizes). `CollectiveBuffer` turns rows into record batches of the table's
declared schema (schemas/tables.toml), one column at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING

from tracekit.parsers.common.groups import only_group
from tracekit.parsers.common.peers import group_of_unnamed_peer
from tracekit.parsers.common.sizes import splits_in_elements

if TYPE_CHECKING:
    import pyarrow as pa

    from tracekit.parsers.base import BatchSink, ProcessGroup
    from tracekit.parsers.common.values import Checker

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


def finished(row: CollectiveRow, checker: Checker, where: str | None) -> CollectiveRow:
    """The row as it may be written: values out of bounds null (with a warning), splits in elements
    (splits already in elements, as tracekit's Chakra writer writes them, sum to the element count
    and stay as they are)."""
    checker.row(row, where)
    splits_in_elements(row, checker, where)
    return row


def take_only_group(row: CollectiveRow, groups: list[ProcessGroup], inferred: list[str]) -> None:
    """An op that names no group ran in the rank's only group, when it has one (see groups.only_group)."""
    _take_group(row, only_group(groups), inferred)


def take_peer_group(row: CollectiveRow, local: int | None, groups: list[ProcessGroup], inferred: list[str]) -> None:
    """A send/recv that names no group ran in the group its peer was read in (see
    peers.group_of_unnamed_peer), when the rank's groups tell one."""
    if row.pg_name is None:
        _take_group(row, group_of_unnamed_peer(local, groups), inferred)


def _take_group(row: CollectiveRow, group: ProcessGroup | None, inferred: list[str]) -> None:
    """The row's group (name and size, recorded as inferred) is `group`, when there is one."""
    if group is None:
        return
    row.pg_name = group.pg_name
    inferred.append("pg_name")
    if group.group_size is not None:
        row.group_size = group.group_size
        inferred.append("group_size")


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
