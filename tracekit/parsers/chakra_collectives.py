"""The `collectives` rows of a block of Chakra nodes, built column-wise from their wire bytes.

`chakra_et.collective_row` reads one communication node at a time through upb, attribute by
attribute: it is the reference. Here the `attr` messages of every communication node of a decoded
block are decoded together (chakra_columns.decode_attributes) and the block's rows built as Arrow
columns, reading each attribute as the reference does: the last attribute of a name wins, integers
from whichever integer, bool or integral float member carries them (`attribute_ints`), pg_name from
its string or as the decimal text of an integer.

A row the value rules would change or note (tracekit.parsers.common.values: an id beyond int64, a
peer beyond the ranks, a size out of bounds), a pg_name given as bytes, a node carrying split lists
(tracekit's `in_splits`/`out_splits`: lists are not read column-wise, and only all-to-allv nodes
written by tracekit have them), or a block whose attributes the column decoder leaves to upb makes
its nodes *irregular*: the caller reads the records around
them through the reference path, which notes the warnings in their order. Regular rows need no
check, so a fleet's millions of collectives cost numpy and Arrow calls per block, not Python per row.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

import numpy as np
import pyarrow as pa  # noqa: TID253 (parser modules are imported lazily by the registry)
import pyarrow.compute as pc  # noqa: TID253

from tracekit.parsers import et_def_pb2
from tracekit.parsers.chakra_columns import (
    BYTES_VAL,
    STRING_VAL,
    AttributeColumns,
    NodeColumns,
    attribute_ints,
    decode_attributes,
    gather,
    ranges,
)
from tracekit.parsers.common.names import CHAKRA_COMM_TYPES, SPLIT_ATTRS
from tracekit.parsers.common.rows import CollectiveRow, collectives_batch
from tracekit.parsers.common.values import ROW_BOUNDS, Bound
from tracekit.schema import arrow_schema

COMM_SEND_NODE = et_def_pb2.COMM_SEND_NODE
COMM_RECV_NODE = et_def_pb2.COMM_RECV_NODE
COMM_COLL_NODE = et_def_pb2.COMM_COLL_NODE
SOURCE = "chakra_node"

_ATTRS = ("comm_type", "comm_src", "comm_dst", "comm_size", "rf_id", "pg_name", *SPLIT_ATTRS)
_CODES = np.array(sorted(CHAKRA_COMM_TYPES), np.int64)
_LABELS = [CHAKRA_COMM_TYPES[int(code)] for code in _CODES] + ["SEND", "RECV"]
_SEND_LABEL, _RECV_LABEL = len(_CODES), len(_CODES) + 1
_OFFSET_HIGH = (1 << 31) - 1


class CollectiveColumns:
    """The collective rows of a block's communication nodes: `batch` holds the rows of `records`
    (the nodes giving one, in order) except where `irregular` (sorted records) says otherwise."""

    __slots__ = ("batch", "irregular", "records")

    def __init__(self, records: list[int], batch: pa.RecordBatch | None, irregular: list[int]) -> None:
        self.records, self.batch, self.irregular = records, batch, irregular

    def regular(self, low: int, high: int) -> bool:
        """Whether the rows of records [low, high) are all in `batch` as the reference gives them."""
        irregular = self.irregular
        return self.batch is not None and (not irregular or bisect_left(irregular, low) == bisect_left(irregular, high))

    def span(self, low: int, high: int) -> tuple[int, int]:
        """The rows of `batch` that records [low, high) give."""
        return bisect_left(self.records, low), bisect_left(self.records, high)


def collective_columns(buf: np.ndarray, nodes: NodeColumns, comm: list[int]) -> CollectiveColumns:
    """The collective rows of the communication nodes `comm` (sorted records) of decoded `nodes`."""
    records = np.asarray(comm, np.int64)
    attrs = _NodeAttributes.read(buf, nodes, records)
    name_offsets, name_bytes = gather(buf, nodes.name_starts[records], nodes.name_ends[records])
    if attrs is None or name_offsets[-1] > _OFFSET_HIGH:
        return CollectiveColumns([], None, comm)
    types = nodes.types[records]
    send, recv, coll = types == COMM_SEND_NODE, types == COMM_RECV_NODE, types == COMM_COLL_NODE
    code, has_code, big_code = attrs.integer("comm_type")
    rows = ~coll | has_code  # a COMM_COLL_NODE without comm_type is no collective
    label = np.full(len(records), -1, np.int64)
    known = coll & has_code & ~big_code & np.isin(code, _CODES)
    label[known] = np.searchsorted(_CODES, code[known])
    label[send], label[recv] = _SEND_LABEL, _RECV_LABEL

    dst, src = attrs.integer("comm_dst"), attrs.integer("comm_src")
    peer = np.where(send, dst[0], src[0])
    has_peer = (send & dst[1]) | (recv & src[1])
    big_peer = (send & dst[2]) | (recv & src[2])
    size, has_size, big_size = attrs.integer("comm_size")
    rf_id, has_rf_id, big_rf_id = attrs.integer("rf_id")
    ids = nodes.ids[records]
    pg_kind = attrs.kind("pg_name")
    pg_number, pg_numeric, pg_big = attrs.integer("pg_name")
    bad_peer = _outside(ROW_BOUNDS["peer"], peer, has_peer, big_peer)
    bad_size = _outside(ROW_BOUNDS["in_bytes"], size, has_size, big_size)
    bad_rf_id = _outside(ROW_BOUNDS["rf_id"], rf_id, has_rf_id, big_rf_id)
    big_id = ids > np.uint64(ROW_BOUNDS["op_id"].high)
    splits = attrs.has(SPLIT_ATTRS[0]) | attrs.has(SPLIT_ATTRS[1])
    irregular = big_id | bad_peer | bad_size | bad_rf_id | (pg_kind == BYTES_VAL) | (pg_numeric & pg_big) | splits
    # An irregular row's values are never read (its records go to the reference): nulls suffice.
    keep = np.flatnonzero(rows)
    starts, durations = nodes.starts[records[keep]], nodes.durations[records[keep]]
    columns = {
        "op_id": pa.array(ids[keep].astype(np.int64)),
        "op_name": _strings(name_offsets, name_bytes).take(pa.array(keep)),
        "comm_type": pa.array(_LABELS, pa.string()).take(pa.array(label[keep], mask=label[keep] < 0)),
        "pg_name": _pg_names(buf, attrs, keep, pg_number[keep], (pg_numeric & ~pg_big)[keep]),
        "peer": pa.array(peer[keep], pa.int32(), mask=~(has_peer & ~bad_peer)[keep]),
        "in_bytes": pa.array(size[keep], mask=~(has_size & ~bad_size)[keep]),
        "start_us": pa.array(starts.astype(np.float64), mask=starts == 0),
        "duration_us": pa.array(durations.astype(np.float64)),
        "rf_id": pa.array(rf_id[keep], mask=~(has_rf_id & ~bad_rf_id)[keep]),
    }
    return CollectiveColumns(records[keep].tolist(), _batch(columns, len(keep)), records[rows & irregular].tolist())


class _NodeAttributes:
    """The attributes of each node of a block, read by name as `collective_row` reads them: the last
    attribute of a name wins; integers as `attr_int` reads them (`attribute_ints`)."""

    def __init__(self, columns: AttributeColumns, slots: dict[str, np.ndarray]) -> None:
        self.columns, self.slots = columns, slots
        self.ints, self.present, self.beyond = attribute_ints(columns)

    @classmethod
    def read(cls, buf: np.ndarray, nodes: NodeColumns, records: np.ndarray) -> _NodeAttributes | None:
        """The attributes of nodes `records`; None when the column decoder leaves them to upb."""
        offsets = nodes.attr_offsets
        per_node, index = ranges(offsets[records], offsets[records + 1])
        columns = decode_attributes(buf, nodes.attr_starts[index], nodes.attr_ends[index])
        if columns is None:
            return None
        name_offsets, name_bytes = gather(buf, columns.name_starts, columns.name_ends)
        if name_offsets[-1] > _OFFSET_HIGH:
            return None
        codes = pc.index_in(_strings(name_offsets, name_bytes), value_set=pa.array(_ATTRS)).fill_null(-1)
        owners = np.repeat(np.arange(len(records)), np.diff(per_node))
        named = codes.to_numpy()
        return cls(columns, {name: _last_of_name(named == j, owners, len(records)) for j, name in enumerate(_ATTRS)})

    def integer(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(value, present, beyond int64) of each node's attribute `name` as an integer."""
        slot = self.slots[name]
        return _at(self.ints, slot), _at(self.present, slot), _at(self.beyond, slot)

    def has(self, name: str) -> np.ndarray:
        """Whether each node has an attribute `name`, of any kind."""
        return self.slots[name] >= 0

    def kind(self, name: str) -> np.ndarray:
        """The `value` member each node's attribute `name` sets (0: none, or no such attribute)."""
        return _at(self.columns.kinds, self.slots[name])


def _last_of_name(hit: np.ndarray, owners: np.ndarray, count: int) -> np.ndarray:
    """For each node, its last attribute (in wire order) among `hit`; -1 for none. Attributes are
    laid out node by node in wire order, so the last of each run of one owner is the one kept."""
    chosen = np.flatnonzero(hit)
    slot = np.full(count, -1, np.int64)
    if chosen.size:
        owner = owners[chosen]
        last = np.append(owner[1:] != owner[:-1], True)
        slot[owner[last]] = chosen[last]
    return slot


def _at(values: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """values[slot], 0 where slot is -1 (none)."""
    out = np.zeros(len(slot), values.dtype)
    has = slot >= 0
    out[has] = values[slot[has]]
    return out


def _outside(bound: Bound, values: np.ndarray, present: np.ndarray, beyond: np.ndarray) -> np.ndarray:
    """The values present that the row rule would null: beyond int64, or outside `bound`."""
    return present & (beyond | (values < bound.low) | (values > bound.high))


def _strings(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    return pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


def _pg_names(
    buf: np.ndarray, attrs: _NodeAttributes, keep: np.ndarray, numbers: np.ndarray, numeric: np.ndarray
) -> pa.Array:
    """pg_name of rows `keep`: a string attribute's text, an integer attribute's decimal text (as
    str() writes it), else null."""
    slot = attrs.slots["pg_name"][keep]
    text = _at(attrs.columns.kinds, slot) == STRING_VAL
    starts = np.where(text, _at(attrs.columns.value_starts, slot), 0)
    ends = np.where(text, _at(attrs.columns.value_ends, slot), 0)
    offsets, data = gather(buf, starts, ends)
    valid = pa.py_buffer(np.packbits(text, bitorder="little"))
    names = pa.StringArray.from_buffers(len(text), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), valid)
    if numeric.any():
        names = pc.if_else(pa.array(numeric), pa.array(numbers).cast(pa.string()), names)
    return names


def _batch(columns: dict[str, pa.Array], count: int) -> pa.RecordBatch:
    """A `collectives` batch of the rows' columns; the others are null, `inferred` empty lists."""
    columns["source"] = pa.array([SOURCE], pa.string()).take(pa.array(np.zeros(count, np.int64)))
    columns["inferred"] = pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)), pa.array([], pa.string()))
    schema = arrow_schema("collectives")
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(count, f.type) for f in schema], schema=schema
    )


class CollectivePieces:
    """A parse's collective rows in node order: rows read by the reference path (`append`) and
    spans of the rows a block built column-wise (`add_span`), each noted with `file` (its index in
    parse_many's sources), handed to `emit` as batches of about `flush_rows` rows (and at `flush`)."""

    def __init__(self, emit: Callable[[pa.RecordBatch, np.ndarray], None], flush_rows: int) -> None:
        self.emit = emit
        self.flush_rows = flush_rows
        self.file = 0
        self._rows: list[CollectiveRow] = []
        self._row_files: list[int] = []
        self._spans: list[list] = []  # [block, first row, end row, file]
        self._span_rows = 0

    def append(self, row: CollectiveRow) -> None:
        if self._spans:
            self._emit_spans()
        self._rows.append(row)
        self._row_files.append(self.file)
        if len(self._rows) >= self.flush_rows:
            self._emit_rows()

    def add_span(self, block: CollectiveColumns, low: int, high: int) -> None:
        """The rows of records [low, high) of `block` (all regular)."""
        first, end = block.span(low, high)
        if first == end:
            return
        if self._rows:
            self._emit_rows()
        last = self._spans[-1] if self._spans else None
        if last is not None and last[0] is block and last[2] == first and last[3] == self.file:
            last[2] = end
        else:
            self._spans.append([block, first, end, self.file])
        self._span_rows += end - first
        if self._span_rows >= self.flush_rows:
            self._emit_spans()

    def flush(self) -> None:
        self._emit_rows()
        self._emit_spans()

    def _emit_rows(self) -> None:
        if self._rows:
            self.emit(collectives_batch(self._rows), np.array(self._row_files, np.int32))
            self._rows, self._row_files = [], []

    def _emit_spans(self) -> None:
        spans, self._spans, self._span_rows = self._spans, [], 0
        while spans:
            block = spans[0][0]
            mine = [span for span in spans if span[0] is block]
            spans = [span for span in spans if span[0] is not block]
            firsts = np.array([span[1] for span in mine], np.int64)
            ends = np.array([span[2] for span in mine], np.int64)
            files = np.repeat(np.array([span[3] for span in mine], np.int32), ends - firsts)
            assert block.batch is not None
            if len(mine) == 1 and firsts[0] == 0 and ends[0] == block.batch.num_rows:
                self.emit(block.batch, files)
            else:
                self.emit(block.batch.take(pa.array(ranges(firsts, ends)[1])), files)
