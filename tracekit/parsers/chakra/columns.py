"""Column-wise decoding of Chakra `Node` records: many records at once, one numpy pass per field.

A .et file holds millions of small Node records. Decoding each into a upb message and reading its
fields back one by one costs Python per node and per field; here the `ops` columns (id, name,
type, ctrl_deps, data_deps, start/duration) are read straight from the wire bytes of a whole block
of records in lockstep: step k decodes the k-th field of every record still open, with numpy over
all of them (tag, then the varint, length or fixed width its wire type says), so the Python cost is
per step (about the number of fields of a node), not per node. The `attr` fields of the nodes a
caller asks for (communication nodes, for their collective rows) are decoded the same way, one
lockstep over those `AttributeProto` messages (`decode_attributes`).

The decoder reads only what it knows exactly: the wire types proto3 gives these fields (repeated
ids packed or not, in wire order; a scalar written twice keeps its last value, as upb does; of an
attribute's `value` oneof, the member written last is the one set) and unknown fields of wire types
0, 1, 2 and 5, which it skips. Anything else (a group, a known field under another wire type, a
record with more than MAX_STEPS fields) returns None, and the caller reads those records through
upb messages instead. Validation is not this module's job: the caller has the block parsed by upb
first (one call for the whole block), so a record upb refuses never gets here, and strings here
are valid UTF-8.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

MAX_STEPS = 64
_U64 = np.uint64
_SEVEN = np.uint64(0x7F)
_LOW32 = np.uint64(0xFFFFFFFF)
_SKIPPED_WIRES = (0, 1, 2, 5)


@dataclass
class NodeColumns:
    """The ops columns of a block of Node records, as numpy arrays (one entry per record)."""

    ids: np.ndarray  # uint64
    types: np.ndarray  # int64 (the int32 enum value, sign included)
    name_starts: np.ndarray  # int64 byte positions of each name in the buffer (end == start: "")
    name_ends: np.ndarray
    ctrl_offsets: np.ndarray  # int64, len + 1
    ctrl_values: np.ndarray  # uint64
    data_offsets: np.ndarray
    data_values: np.ndarray
    starts: np.ndarray  # uint64 start_time_micros
    durations: np.ndarray  # uint64 duration_micros
    # The `attr` messages of record i are buf[attr_starts[j]:attr_ends[j]] for j in
    # attr_offsets[i]:attr_offsets[i + 1], in wire order.
    attr_offsets: np.ndarray  # int64, len + 1
    attr_starts: np.ndarray  # int64
    attr_ends: np.ndarray


@dataclass
class AttributeColumns:
    """`AttributeProto` messages as columns (one entry per message)."""

    name_starts: np.ndarray  # int64 byte positions of each name
    name_ends: np.ndarray
    kinds: np.ndarray  # int64: field number of the `value` member set (0: none)
    values: np.ndarray  # uint64: that member's varint, or its little-endian bits (double, fixed...)
    value_starts: np.ndarray  # int64: the bytes of a string, bytes or list member
    value_ends: np.ndarray


class _Unusual(Exception):
    """A record shape the column decoder leaves to upb."""


def _wire_table(wires: dict[int, tuple[int, ...]]) -> np.ndarray:
    """allowed[number, wire]: the wire types proto3 gives each known field number; the last row
    (any number past the known ones) allows the wire types of unknown fields upb skips."""
    top = max(wires) + 1
    allowed = np.zeros((top + 1, 8), bool)
    for number, types in wires.items():
        allowed[number, list(types)] = True
    allowed[top, list(_SKIPPED_WIRES)] = True
    return allowed


# Node: id=1, name=2, type=3, ctrl_deps=4, data_deps=5 (packed or not), start=6, duration=7,
# inputs=8, outputs=9, attr=10.
_NODE_WIRES = _wire_table(
    {1: (0,), 2: (2,), 3: (0,), 4: (0, 2), 5: (0, 2), 6: (0,), 7: (0,), 8: (2,), 9: (2,), 10: (2,)}
)

# AttributeProto: name=1, doc_string=2, then the `value` oneof (3-32): scalars by their encoding,
# the even numbers from 4 and 29-32 length-delimited (lists, string_val, bytes_val).
DOUBLE_VAL, FLOAT_VAL = 3, 5
INT32_VAL, INT64_VAL, UINT32_VAL, UINT64_VAL, SINT32_VAL, SINT64_VAL = 7, 9, 11, 13, 15, 17
FIXED32_VAL, FIXED64_VAL, SFIXED32_VAL, SFIXED64_VAL, BOOL_VAL = 19, 21, 23, 25, 27
STRING_VAL, BYTES_VAL = 29, 31
_ATTR_WIRES = _wire_table(
    {
        1: (2,),
        2: (2,),
        DOUBLE_VAL: (1,),
        FLOAT_VAL: (5,),
        **{number: (0,) for number in (INT32_VAL, INT64_VAL, UINT32_VAL, UINT64_VAL, SINT32_VAL, SINT64_VAL)},
        FIXED32_VAL: (5,),
        FIXED64_VAL: (1,),
        SFIXED32_VAL: (5,),
        SFIXED64_VAL: (1,),
        BOOL_VAL: (0,),
        **{number: (2,) for number in (*range(4, 29, 2), 29, 30, 31, 32)},
    }
)


def decode_nodes(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> NodeColumns | None:
    """The columns of the Node records buf[begins[i]:ends[i]]; None when a record is unusual.

    `buf` is uint8 with at least 10 bytes of padding after the last record, so that reading a
    varint's bytes never runs off its end (a varint running past its record is caught by position).
    """
    try:
        return _decode_nodes(buf, begins.astype(np.int64), ends.astype(np.int64))
    except _Unusual:
        return None


def decode_attributes(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> AttributeColumns | None:
    """The columns of the AttributeProto messages buf[begins[i]:ends[i]] (padded as for
    decode_nodes); None when one is unusual."""
    try:
        return _decode_attributes(buf, begins.astype(np.int64), ends.astype(np.int64))
    except _Unusual:
        return None


def varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, positions after) of the varints starting at `pos` (uint64 arithmetic, as upb: bits
    past the 64th are dropped). Raises _Unusual for a varint longer than 10 bytes."""
    first = buf[pos]
    values = (first & 0x7F).astype(_U64)
    after = pos + 1
    more = np.flatnonzero(first >= 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise _Unusual
        byte = buf[pos[more] + (shift // 7)]
        values[more] |= (byte & _SEVEN).astype(_U64) << _U64(shift)
        after[more] += 1
        more = more[byte >= 0x80]
        shift += 7
    return values, after


@dataclass
class _Step:
    """One field of each record still open: step k holds the k-th field of each."""

    records: np.ndarray  # the record each field belongs to
    numbers: np.ndarray  # uint64 field numbers
    wires: np.ndarray  # uint64 wire types
    values: np.ndarray  # uint64: the varint (wire 0), the little-endian bits (1, 5), the length (2)
    bodies: np.ndarray  # int64: where the value starts (past its tag, and its length for wire 2)
    ends: np.ndarray  # int64: where the field ends


def _fields(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray, allowed: np.ndarray) -> Iterator[_Step]:
    """The fields of the messages buf[begins[i]:ends[i]] in lockstep; raises _Unusual for a wire
    type `allowed` does not give a field, a field running past its message, too many fields."""
    cursor = begins.copy()
    open_ = np.flatnonzero(cursor < ends)
    top = _U64(len(allowed) - 1)
    for _ in range(MAX_STEPS):
        if not open_.size:
            return
        limit = ends[open_]
        tag, pos = varints(buf, cursor[open_])
        numbers = tag >> _U64(3)
        wires = tag & _U64(7)
        if not allowed[np.minimum(numbers, top), wires].all():
            raise _Unusual
        values = np.zeros(len(open_), _U64)
        after = np.empty_like(pos)
        varint = np.flatnonzero(wires == 0)
        if varint.size:
            values[varint], after[varint] = varints(buf, pos[varint])
        delimited = np.flatnonzero(wires == 2)
        if delimited.size:
            lengths, body = varints(buf, pos[delimited])
            room = (limit[delimited] - body).astype(_U64)
            if (lengths > room).any():
                raise _Unusual  # upb refused it already; never trust a length here
            values[delimited] = lengths
            pos[delimited] = body
            after[delimited] = body + lengths.astype(np.int64)
        for wire_type, width in ((1, 8), (5, 4)):
            fixed = np.flatnonzero(wires == wire_type)
            if fixed.size:
                values[fixed] = _little_endian(buf, pos[fixed], width)
                after[fixed] = pos[fixed] + width
        if (after > limit).any():
            raise _Unusual
        yield _Step(open_, numbers, wires, values, pos, after)
        cursor[open_] = after
        open_ = open_[after < limit]
    if open_.size:
        raise _Unusual


def _little_endian(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    values = np.zeros(len(pos), _U64)
    for k in range(width):
        values |= buf[pos + k].astype(_U64) << _U64(8 * k)
    return values


def _decode_nodes(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> NodeColumns:
    count = len(begins)
    ids = np.zeros(count, _U64)
    types = np.zeros(count, _U64)
    starts = np.zeros(count, _U64)
    durations = np.zeros(count, _U64)
    name_starts = np.zeros(count, np.int64)
    name_ends = np.zeros(count, np.int64)
    deps: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {4: ([], []), 5: ([], [])}
    attrs: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for step in _fields(buf, begins, ends, _NODE_WIRES):
        numbers, records, values = step.numbers, step.records, step.values
        for number, column in ((1, ids), (3, types), (6, starts), (7, durations)):
            hit = numbers == number
            if hit.any():
                column[records[hit]] = values[hit]
        named = numbers == 2
        if named.any():
            name_starts[records[named]] = step.bodies[named]
            name_ends[records[named]] = step.ends[named]
        attributed = numbers == 10
        if attributed.any():
            for pieces, column in zip(attrs, (records, step.bodies, step.ends), strict=True):
                pieces.append(column[attributed])
        for number, (owners, items) in deps.items():
            hit = numbers == number
            if not hit.any():
                continue
            scalar = hit & (step.wires == 0)
            if scalar.any():
                owners.append(records[scalar])
                items.append(values[scalar])
            packed = hit & (step.wires == 2) & (step.ends > step.bodies)
            if packed.any():
                owner, packed_values = _packed(buf, records[packed], step.bodies[packed], step.ends[packed])
                owners.append(owner)
                items.append(packed_values)
    ctrl_offsets, (ctrl_values,) = _lists(count, deps[4][0], deps[4][1])
    data_offsets, (data_values,) = _lists(count, deps[5][0], deps[5][1])
    attr_offsets, (attr_starts, attr_ends) = _lists(count, attrs[0], attrs[1], attrs[2])
    return NodeColumns(
        ids=ids,
        types=types.astype(np.uint32).astype(np.int32).astype(np.int64),
        name_starts=name_starts,
        name_ends=name_ends,
        ctrl_offsets=ctrl_offsets,
        ctrl_values=ctrl_values,
        data_offsets=data_offsets,
        data_values=data_values,
        starts=starts,
        durations=durations,
        attr_offsets=attr_offsets,
        attr_starts=attr_starts.astype(np.int64),
        attr_ends=attr_ends.astype(np.int64),
    )


def _decode_attributes(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> AttributeColumns:
    count = len(begins)
    columns = AttributeColumns(
        name_starts=np.zeros(count, np.int64),
        name_ends=np.zeros(count, np.int64),
        kinds=np.zeros(count, np.int64),
        values=np.zeros(count, _U64),
        value_starts=np.zeros(count, np.int64),
        value_ends=np.zeros(count, np.int64),
    )
    for step in _fields(buf, begins, ends, _ATTR_WIRES):
        numbers, records = step.numbers, step.records
        named = numbers == 1
        if named.any():
            columns.name_starts[records[named]] = step.bodies[named]
            columns.name_ends[records[named]] = step.ends[named]
        member = (numbers >= DOUBLE_VAL) & (numbers <= 32)
        if member.any():
            which = records[member]
            columns.kinds[which] = numbers[member]
            columns.values[which] = step.values[member]
            columns.value_starts[which] = step.bodies[member]
            columns.value_ends[which] = step.ends[member]
    return columns


def attribute_ints(columns: AttributeColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each attribute's value as an integer, as `rules.attr_int` reads one: whichever integer
    (or bool) member carries it, or an integral float. (values as int64, whether there is one,
    whether it lies beyond int64: then `values` does not hold it.)"""
    kinds, raw = columns.kinds, columns.values
    values = np.zeros(len(kinds), np.int64)
    present = np.zeros(len(kinds), bool)
    beyond = np.zeros(len(kinds), bool)

    def put(kind: int, converted: np.ndarray) -> None:
        hit = kinds == kind
        if hit.any():
            values[hit] = converted[hit]
            present[hit] = True

    low32 = (raw & _LOW32).astype(np.uint32)
    zigzag64 = (raw >> _U64(1)) ^ (_U64(0) - (raw & _U64(1)))
    zigzag32 = ((low32 >> np.uint32(1)) ^ (np.uint32(0) - (low32 & np.uint32(1)))).view(np.int32)
    put(INT32_VAL, low32.view(np.int32))
    put(INT64_VAL, raw.view(np.int64))
    put(UINT32_VAL, low32)
    put(SINT32_VAL, zigzag32)
    put(SINT64_VAL, zigzag64.view(np.int64))
    put(FIXED32_VAL, low32)
    put(SFIXED32_VAL, low32.view(np.int32))
    put(SFIXED64_VAL, raw.view(np.int64))
    put(BOOL_VAL, (raw != 0).astype(np.int64))
    for kind in (UINT64_VAL, FIXED64_VAL):
        hit = kinds == kind
        put(kind, raw.view(np.int64))
        beyond |= hit & (raw > _U64((1 << 63) - 1))
    with np.errstate(invalid="ignore"):  # NaN payloads
        singles = low32.view(np.float32).astype(np.float64)
    for kind, floats in ((DOUBLE_VAL, raw.view(np.float64)), (FLOAT_VAL, singles)):
        hit = kinds == kind
        if not hit.any():
            continue
        with np.errstate(invalid="ignore"):
            integral = hit & np.isfinite(floats) & (floats == np.floor(floats))
            fits = integral & (floats >= -(2.0**63)) & (floats < 2.0**63)
        values[fits] = floats[fits].astype(np.int64)
        present |= integral
        beyond |= integral & ~fits
    return values, present, beyond


def _packed(
    buf: np.ndarray, records: np.ndarray, begins: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(owner record, value) of every varint in the packed ranges [begins, ends)."""
    lengths = ends - begins
    total = int(lengths.sum())
    first_of_range = np.cumsum(lengths) - lengths
    index = np.arange(total, dtype=np.int64) + np.repeat(begins - first_of_range, lengths)
    byte = buf[index]
    last = byte < 0x80
    if not last[first_of_range + lengths - 1].all():
        raise _Unusual  # a range ending inside a varint
    stops = np.flatnonzero(last)
    heads = np.empty_like(stops)
    heads[0] = 0
    heads[1:] = stops[:-1] + 1
    place = np.arange(total, dtype=np.int64) - np.repeat(heads, stops - heads + 1)
    if place.max(initial=0) > 9:
        raise _Unusual
    parts = (byte & _SEVEN).astype(_U64) << (place * 7).astype(_U64)
    values = np.bitwise_or.reduceat(parts, heads)
    per_range = np.add.reduceat(last.astype(np.int64), first_of_range)
    return np.repeat(records, per_range), values


def _lists(count: int, owners: list[np.ndarray], *items: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """List offsets and values (one array per `items`) from (owner, value) pieces found in wire
    order, step by step."""
    offsets = np.zeros(count + 1, np.int64)
    if not owners:
        return offsets, [np.zeros(0, _U64) for _ in items]
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")  # pieces are in step (= wire) order within a record
    np.cumsum(np.bincount(owner, minlength=count), out=offsets[1:])
    return offsets, [np.concatenate(pieces)[order] for pieces in items]


def ranges(begins: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, index) of the integer ranges [begins, ends) laid end to end: index lists every
    integer of every range in order, offsets[i] where range i starts in it."""
    lengths = ends - begins
    offsets = np.zeros(len(begins) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(begins - offsets[:-1], lengths)
    return offsets, index


def gather(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of the byte ranges [begins, ends) laid end to end (for Arrow strings)."""
    offsets, index = ranges(begins, ends)
    return offsets, buf[index]
