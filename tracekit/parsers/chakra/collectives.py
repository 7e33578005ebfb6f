"""The `collectives` rows of a block of Chakra nodes, built column-wise from their wire bytes.

`rules.collective_row` reads one communication node at a time through upb, attribute by
attribute: it is the reference. Here the `attr` messages of every communication node of a decoded
block are decoded together (columns.decode_attributes) and the block's rows built as Arrow
columns, by the same tables of tracekit.parsers.chakra.rules (attribute names, the comm type of
each node type, the attribute naming a send's or recv's peer), reading each attribute as the
reference does: the last attribute of a name wins, integers
from whichever integer, bool or integral float member carries them (`attribute_ints`), pg_name from
its string or as the decimal text of an integer, dtype from its string; the split sizes of the few
nodes that carry them are decoded node by node.

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

from tracekit.parsers.chakra.columns import (
    BYTES_VAL,
    STRING_VAL,
    AttributeColumns,
    NodeColumns,
    attribute_ints,
    decode_attributes,
    gather,
    ranges,
    varints,
)
from tracekit.parsers.chakra.rules import (
    COMM_COLL_NODE,
    COMM_SIZE,
    COMM_TYPE,
    DTYPE,
    NODE_COMM_TYPES,
    OUT_ELEMS,
    PEER_ATTRS,
    PG_NAME,
    RF_ID,
    ROW_ATTRS,
    SOURCE,
    SPLIT_ATTRS,
)
from tracekit.parsers.common.names import CHAKRA_COMM_TYPES, dtype_bytes, is_uneven_name, normalize_dtype
from tracekit.parsers.common.rows import CollectiveRow, collectives_batch
from tracekit.parsers.common.values import ROW_BOUNDS, Bound
from tracekit.schema import arrow_schema

_INT64_LIST = 10  # AttributeProto.int64_list
_CODES = np.array(sorted(CHAKRA_COMM_TYPES), np.int64)
# The comm types a row may have: a collective's by its code (its position in _CODES), then those of
# the node types that fix theirs (SEND, RECV).
_LABELS = [CHAKRA_COMM_TYPES[int(code)] for code in _CODES] + list(NODE_COMM_TYPES.values())
_NODE_LABELS = {node_type: len(_CODES) + i for i, node_type in enumerate(NODE_COMM_TYPES)}
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
    coll = types == COMM_COLL_NODE
    code, has_code, big_code = attrs.integer(COMM_TYPE)
    rows = ~coll | has_code  # rules.gives_row: a COMM_COLL_NODE without comm_type is no collective
    label = np.full(len(records), -1, np.int64)
    known = coll & has_code & ~big_code & np.isin(code, _CODES)
    label[known] = np.searchsorted(_CODES, code[known])
    for node_type, fixed in _NODE_LABELS.items():
        label[types == node_type] = fixed

    peer, has_peer, big_peer = _peers(attrs, types)
    size, has_size, big_size = attrs.integer(COMM_SIZE)
    rf_id, has_rf_id, big_rf_id = attrs.integer(RF_ID)
    ids = nodes.ids[records]
    pg_kind = attrs.kind(PG_NAME)
    pg_number, pg_numeric, pg_big = attrs.integer(PG_NAME)
    bad_peer = _outside(ROW_BOUNDS["peer"], peer, has_peer, big_peer)
    bad_size = _outside(ROW_BOUNDS["in_bytes"], size, has_size, big_size)
    bad_rf_id = _outside(ROW_BOUNDS["rf_id"], rf_id, has_rf_id, big_rf_id)
    big_id = ids > np.uint64(ROW_BOUNDS["op_id"].high)
    # A code Chakra 0.0.4 does not name: the reference keeps it as its integer, with a warning.
    unknown_code = coll & has_code & ~known
    irregular = big_id | bad_peer | bad_size | bad_rf_id | (pg_kind == BYTES_VAL) | (pg_numeric & pg_big) | unknown_code
    typed = _Typed(buf, attrs, size, has_size & ~bad_size)
    irregular |= typed.irregular
    splits = _Splits(buf, attrs, records, rows & ~irregular, typed, name_offsets, name_bytes, label)
    irregular |= splits.irregular
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
        **typed.columns(keep),
        **splits.columns(keep),
    }
    return CollectiveColumns(records[keep].tolist(), _batch(columns, len(keep)), records[rows & irregular].tolist())


def _peers(attrs: _NodeAttributes, types: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, present, beyond int64) of each node's peer: the attribute rules.PEER_ATTRS names for
    its node type (none for a collective)."""
    count = len(types)
    peer, present, beyond = np.zeros(count, np.int64), np.zeros(count, bool), np.zeros(count, bool)
    for node_type, name in PEER_ATTRS.items():
        mine = types == node_type
        value, has, big = attrs.integer(name)
        peer = np.where(mine, value, peer)
        present |= mine & has
        beyond |= mine & big
    return peer, present, beyond


class _Typed:
    """The element type of each node (`dtype`, a string attribute, as the c10 name normalize_dtype
    gives) and the sizes it tells: in_elems from comm_size, out_elems and out_bytes from
    out_msg_nelems. Irregular: a dtype given as bytes, an out_msg_nelems or out_bytes the row rules
    would null."""

    def __init__(self, buf: np.ndarray, attrs: _NodeAttributes, size: np.ndarray, has_size: np.ndarray) -> None:
        texts = _texts(buf, attrs, DTYPE).dictionary_encode()
        names = [normalize_dtype(text) for text in texts.dictionary.to_pylist()]
        indices = texts.indices.fill_null(0).to_numpy().astype(np.int64)
        known = texts.indices.is_valid().to_numpy(zero_copy_only=False)
        sizes = np.array([dtype_bytes(name) or 0 for name in names] + [0], np.int64)
        self.itemsize = sizes[np.where(known, indices, len(names))]
        self.dtype = pa.array(names + [None], pa.string()).take(pa.array(np.where(known, indices, len(names))))
        typed = self.itemsize > 0
        self.in_elems = np.where(typed, size // np.maximum(self.itemsize, 1), 0)
        self.has_in_elems = typed & has_size & (size % np.maximum(self.itemsize, 1) == 0)
        out, self.has_out, big_out = attrs.integer(OUT_ELEMS)
        self.out_elems = out
        bad_out = _outside(ROW_BOUNDS["out_elems"], out, self.has_out, big_out)
        wide = self.has_out & typed & ~bad_out & (out > ROW_BOUNDS["out_bytes"].high // np.maximum(self.itemsize, 1))
        self.has_out_bytes = self.has_out & typed
        self.irregular = (attrs.kind(DTYPE) == BYTES_VAL) | bad_out | wide

    def columns(self, keep: np.ndarray) -> dict[str, pa.Array]:
        return {
            "dtype": self.dtype.take(pa.array(keep)),
            "in_elems": pa.array(self.in_elems[keep], mask=~self.has_in_elems[keep]),
            "out_elems": pa.array(self.out_elems[keep], mask=~self.has_out[keep]),
            "out_bytes": pa.array((self.out_elems * self.itemsize)[keep], mask=~self.has_out_bytes[keep]),
        }


class _Splits:
    """The all-to-allv split sizes of the nodes that carry them (`in_split_size`, `out_split_size`),
    and is_uneven where they do. Only an int64_list in its canonical form (one packed field) already
    in elements (summing to in_elems / out_elems) within the row bounds is read here, every list of
    the block at once; any other form, a list the split rules would convert or null, or one beyond
    the bounds makes its node irregular."""

    def __init__(
        self,
        buf: np.ndarray,
        attrs: _NodeAttributes,
        records: np.ndarray,
        candidates: np.ndarray,
        typed: _Typed,
        name_offsets: np.ndarray,
        name_bytes: np.ndarray,
        label: np.ndarray,
    ) -> None:
        count = len(records)
        self.irregular = np.zeros(count, bool)
        carried = np.logical_or.reduce([attrs.slots[name] >= 0 for name in SPLIT_ATTRS.values()]) & candidates
        self.carried = carried
        self.lists: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        spread = np.zeros(count, bool)
        for field, elems, has in (
            ("in_splits", typed.in_elems, typed.has_in_elems),
            ("out_splits", typed.out_elems, typed.has_out),
        ):
            attr = SPLIT_ATTRS[field]
            present = carried & (attrs.slots[attr] >= 0)
            lengths, values, bad, differ = _int64_lists(buf, attrs.columns, attrs.slots[attr], present)
            listed = lengths > 0
            sums = np.zeros(count, np.int64)
            if values.size:
                sums[listed] = np.add.reduceat(values.astype(np.int64), _starts(lengths[listed]))
            bad |= listed & ~(has & (elems == sums))  # the split rules would convert them from rows, or null them
            self.irregular |= bad
            spread |= differ
            self.lists[field] = (present, lengths, values)
        self.uneven = spread | _uneven_names(np.flatnonzero(carried), name_offsets, name_bytes, count)

    def columns(self, keep: np.ndarray) -> dict[str, pa.Array]:
        out: dict[str, pa.Array] = {}
        for field, (present, lengths, values) in self.lists.items():
            # Only rows carry lists, and every row is kept: the values are those of the kept rows.
            row_offsets = np.zeros(len(keep) + 1, np.int32)
            np.cumsum(lengths[keep], out=row_offsets[1:])
            # an empty list says the splits are even: no list (is_uneven false), as the node path reads it
            out[field] = pa.ListArray.from_arrays(
                pa.array(row_offsets), pa.array(values.astype(np.int64)),
                mask=pa.array(~present[keep] | (lengths[keep] == 0)),
            )  # fmt: skip
        out["is_uneven"] = pa.array(self.uneven[keep], pa.bool_(), mask=~self.carried[keep])
        return out


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Where each of consecutive segments of `lengths` (none empty) starts."""
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


def _int64_lists(
    buf: np.ndarray, columns: AttributeColumns, slots: np.ndarray, present: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The values of the int64_list attributes at `slots` of the nodes `present`, decoded together:
    (values per node, every value in node order as uint64, nodes that cannot be read here, nodes
    whose values are not all equal)."""
    count = len(slots)
    lengths = np.zeros(count, np.int64)
    bad = np.zeros(count, bool)
    differ = np.zeros(count, bool)
    nodes = np.flatnonzero(present)
    if not nodes.size:
        return lengths, np.zeros(0, np.uint64), bad, differ
    slot = slots[nodes]
    begin = columns.value_starts[slot].astype(np.int64)
    end = columns.value_ends[slot].astype(np.int64)
    listed = columns.kinds[slot] == _INT64_LIST
    empty = listed & (begin == end)
    # Canonical: one packed field (tag 0x0A, length) filling the message.
    framed = listed & ~empty & (buf[np.minimum(begin, len(buf) - 1)] == 0x0A)
    length, after = varints(buf, np.where(framed, begin + 1, 0))
    framed &= after.astype(np.int64) + length.astype(np.int64) == end
    framed &= (end > after) & (buf[np.maximum(end - 1, 0)] < 0x80)
    bad[nodes] = ~(framed | empty)
    good = nodes[framed]
    first, last = after[framed].astype(np.int64), end[framed]
    offsets, index = ranges(first, last)
    if not index.size:
        return lengths, np.zeros(0, np.uint64), bad, differ
    # A varint starts where the byte before it ends one (the payload's first byte follows the length).
    starts_here = buf[index - 1] < 0x80
    values, _ = varints(buf, index[starts_here])
    per_node = np.add.reduceat(starts_here.astype(np.int64), offsets[:-1])
    lengths[good] = per_node
    segment = _starts(per_node)
    # Beyond the row bounds, or too large to sum exactly here: the reference reads those.
    large = (values > np.uint64(_EXACT_SPLIT)).astype(np.int8)
    bad[good] |= (np.maximum.reduceat(large, segment) > 0) | (per_node > _MAX_SPLITS)
    differ[good] = np.maximum.reduceat(values, segment) != np.minimum.reduceat(values, segment)
    return lengths, values, bad, differ


_EXACT_SPLIT = 1 << 40  # split sizes up to here, lists up to _MAX_SPLITS long: their int64 sums are exact
_MAX_SPLITS = 1 << 20


def _uneven_names(nodes: np.ndarray, name_offsets: np.ndarray, name_bytes: np.ndarray, count: int) -> np.ndarray:
    """Nodes among `nodes` named as the variable-split all-to-all (is_uneven_name), each name once."""
    out = np.zeros(count, bool)
    names = _strings(name_offsets, name_bytes).take(pa.array(nodes)).dictionary_encode() if nodes.size else None
    if names is not None:
        named = np.array([is_uneven_name(n) for n in names.dictionary.to_pylist()] + [False], bool)
        out[nodes] = named[names.indices.fill_null(len(named) - 1).to_numpy()]
    return out


def _texts(buf: np.ndarray, attrs: _NodeAttributes, name: str) -> pa.Array:
    """Each node's attribute `name` as text where it is a string member, else null."""
    slot = attrs.slots[name]
    text = _at(attrs.columns.kinds, slot) == STRING_VAL
    starts = np.where(text, _at(attrs.columns.value_starts, slot), 0)
    ends = np.where(text, _at(attrs.columns.value_ends, slot), 0)
    offsets, data = gather(buf, starts, ends)
    valid = pa.py_buffer(np.packbits(text, bitorder="little"))
    return pa.StringArray.from_buffers(len(text), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), valid)


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
        codes = pc.index_in(_strings(name_offsets, name_bytes), value_set=pa.array(ROW_ATTRS)).fill_null(-1)
        owners = np.repeat(np.arange(len(records)), np.diff(per_node))
        named = codes.to_numpy()
        slots = {name: _last_of_name(named == j, owners, len(records)) for j, name in enumerate(ROW_ATTRS)}
        return cls(columns, slots)

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
    names = _texts(buf, attrs, "pg_name").take(pa.array(keep))
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
    many.parse_many's sources), handed to `emit` as batches of about `flush_rows` rows (and at `flush`)."""

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
