"""Column-wise decoding of Chakra `Node` records: many records at once, one numpy pass per field.

A .et file holds millions of small Node records. Decoding each into a upb message and reading its
fields back one by one costs Python per node and per field; here the `ops` columns (id, name,
type, ctrl_deps, data_deps, start/duration) are read straight from the wire bytes of a whole block
of records in lockstep: step k decodes the k-th field of every record still open, with numpy over
all of them (tag, then the varint, length or fixed width its wire type says), so the Python cost is
per step (about the number of fields of a node), not per node.

The decoder reads only what it knows exactly: the wire types proto3 gives these fields (repeated
ids packed or not, in wire order; a scalar written twice keeps its last value, as upb does) and
unknown fields of wire types 0, 1, 2 and 5, which it skips. Anything else (a group, a known field
under another wire type, a record with more than MAX_STEPS fields) returns None, and the caller
reads that block through upb messages instead. Validation is not this module's job: the caller has
the block parsed by upb first (one call for the whole block), so a record upb refuses never gets
here, and strings here are valid UTF-8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_STEPS = 64
_U64 = np.uint64
_SEVEN = np.uint64(0x7F)


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


class _Unusual(Exception):
    """A record shape the column decoder leaves to upb."""


def decode_nodes(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> NodeColumns | None:
    """The columns of the Node records buf[begins[i]:ends[i]]; None when a record is unusual.

    `buf` is uint8 with at least 10 bytes of padding after the last record, so that reading a
    varint's bytes never runs off its end (a varint running past its record is caught by position).
    """
    try:
        return _decode(buf, begins.astype(np.int64), ends.astype(np.int64))
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


def _decode(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> NodeColumns:
    count = len(begins)
    ids = np.zeros(count, _U64)
    types = np.zeros(count, _U64)
    starts = np.zeros(count, _U64)
    durations = np.zeros(count, _U64)
    name_starts = np.zeros(count, np.int64)
    name_ends = np.zeros(count, np.int64)
    deps: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {4: ([], []), 5: ([], [])}
    cursor = begins.copy()
    open_ = np.flatnonzero(cursor < ends)
    for _ in range(MAX_STEPS):
        if not open_.size:
            break
        limit = ends[open_]
        tag, pos = varints(buf, cursor[open_])
        field = tag >> _U64(3)
        wire = tag & _U64(7)
        after = np.empty_like(pos)

        varint = np.flatnonzero(wire == 0)
        if varint.size:
            values, after[varint] = varints(buf, pos[varint])
            fields, records = field[varint], open_[varint]
            if np.isin(fields, (2, 8, 9, 10)).any():
                raise _Unusual
            for number, column in ((1, ids), (3, types), (6, starts), (7, durations)):
                hit = fields == number
                if hit.any():
                    column[records[hit]] = values[hit]
            for number, (owners, items) in deps.items():
                hit = fields == number
                if hit.any():
                    owners.append(records[hit])
                    items.append(values[hit])

        delimited = np.flatnonzero(wire == 2)
        if delimited.size:
            lengths, body = varints(buf, pos[delimited])
            room = (limit[delimited] - body).astype(_U64)
            if (lengths > room).any():
                raise _Unusual  # upb refused it already; never trust a length here
            end = body + lengths.astype(np.int64)
            after[delimited] = end
            fields, records = field[delimited], open_[delimited]
            if np.isin(fields, (1, 3, 6, 7)).any():
                raise _Unusual
            named = fields == 2
            if named.any():
                name_starts[records[named]] = body[named]
                name_ends[records[named]] = end[named]
            for number, (owners, items) in deps.items():
                hit = (fields == number) & (end > body)
                if hit.any():
                    owner, values = _packed(buf, records[hit], body[hit], end[hit])
                    owners.append(owner)
                    items.append(values)

        for wire_type, width in ((1, 8), (5, 4)):
            fixed = np.flatnonzero(wire == wire_type)
            if fixed.size:
                if (field[fixed] <= 10).any():
                    raise _Unusual
                after[fixed] = pos[fixed] + width
        if (wire > 2).any() and not np.isin(wire, (0, 1, 2, 5)).all():
            raise _Unusual  # groups (3, 4) and invalid wire types
        if (after > limit).any():
            raise _Unusual
        cursor[open_] = after
        open_ = open_[after < limit]
    else:
        if open_.size:
            raise _Unusual
    ctrl_offsets, ctrl_values = _lists(count, *deps[4])
    data_offsets, data_values = _lists(count, *deps[5])
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
    )


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


def _lists(count: int, owners: list[np.ndarray], items: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """List offsets and values from (owner, value) pieces found in wire order, step by step."""
    if not owners:
        return np.zeros(count + 1, np.int64), np.zeros(0, _U64)
    owner = np.concatenate(owners)
    values = np.concatenate(items)
    order = np.argsort(owner, kind="stable")  # pieces are in step (= wire) order within a record
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=count), out=offsets[1:])
    return offsets, values[order]


def gather(buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bytes) of the byte ranges [begins, ends) laid end to end (for Arrow strings)."""
    lengths = ends - begins
    offsets = np.zeros(len(begins) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    index = np.arange(total, dtype=np.int64) + np.repeat(begins - offsets[:-1], lengths)
    return offsets, buf[index]
