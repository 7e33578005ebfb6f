"""Many small Chakra .et files read together: a fleet's rank files, a few dozen records each.

`parse_many` gives each file the rows, metadata, warnings and error `parse`
(tracekit.parsers.chakra.et) gives it alone: small files are laid end to end and framed together,
their records validated by upb in one call and their node records decoded column-wise in one
call; the rules are taken per file over its records (`NodeRows.check_records`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa  # noqa: TID253 (parser modules are imported lazily by the registry)
from google.protobuf.message import DecodeError  # noqa: TID253

from tracekit.parsers.base import BatchSink, FilesSink, Source, TraceError, TraceMeta
from tracekit.parsers.chakra import et
from tracekit.parsers.chakra.collectives import CollectivePieces
from tracekit.parsers.chakra.columns import NodeColumns, decode_nodes
from tracekit.parsers.chakra.et import FORMAT, METADATA_TAG, NODE_BLOCK, NODE_TAG
from tracekit.parsers.chakra.framing import decode_varint, first_record_is_node, where
from tracekit.parsers.chakra.rows import DECODE_ROWS, Findings, NodeRows, ops_batch
from tracekit.parsers.common.limits import MAX_RECORD_BYTES

# parse_many decodes together the files of at most this many bytes whose node records fit in one
# DECODE_ROWS group (so the rules take each file in one group, as `parse` does); it decodes at most
# MANY_GROUP_BYTES of them in one call. Any other file is read by `parse`.
MANY_FILE_BYTES = 1 << 20
MANY_GROUP_BYTES = 16 << 20
# Files are framed in lockstep (record k of every file at once) while at least this many are left;
# a step costs about as much as framing this many records one by one, which the rest are.
LOCKSTEP_MIN_FILES = 32
# Record lengths of more than 4 varint bytes (beyond MAX_RECORD_BYTES unless written with needless
# continuation bytes) are left to `parse`, which says what is wrong.
_LENGTH_BYTES = 4


class _FileSink:
    """The BatchSink of one file whose rows go to a FilesSink."""

    def __init__(self, sink: FilesSink, index: int) -> None:
        self.sink, self.index = sink, index

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        self.sink.write(table, batch, pa.repeat(pa.scalar(self.index, pa.int32()), batch.num_rows))


def parse_many(sources: Sequence[Source], sink: FilesSink) -> list[TraceMeta | TraceError | None]:
    """Read many .et files (a fleet's rank files: a few dozen records each) together, giving each
    file the rows, metadata, warnings and error `parse` gives it alone; `sink` gets batches holding
    rows of any of them, with each row's file (its index in `sources`). Rows of a file that fails
    may be among them: its outcome says to drop them. A file too big to hold gets None: the caller
    reads it with `parse` (where its rows can spill).

    Small files are laid end to end and framed together (`_frame_files`), then their records
    validated by upb in one call and their node records decoded column-wise in one call; the rules
    (untyped records, ids, special nodes) are taken per file over its records
    (`NodeRows.check_records`), as `parse` takes them. A small file the shared path cannot take
    whole (empty, corrupt compression, a framing or decode error, more than one group of node
    records, records the column decoder leaves to upb) is read by `parse` here.
    """
    outcomes: list[TraceMeta | TraceError | None] = [None] * len(sources)
    group: list[tuple[int, bytes]] = []
    size = 0
    for index, source in enumerate(sources):
        data = _read_small(source)
        if data is None:
            continue  # too big to hold: left to the caller
        if not data:
            outcomes[index] = _parse_alone(source, _FileSink(sink, index))
            continue
        group.append((index, data))
        size += len(data)
        if size >= MANY_GROUP_BYTES:
            _parse_group(group, sources, sink, outcomes)
            group, size = [], 0
    if group:
        _parse_group(group, sources, sink, outcomes)
    return outcomes


def _parse_alone(source: Source, sink: BatchSink) -> TraceMeta | TraceError:
    try:
        return et.parse(source, sink)  # looked up here: a test may stand in for it
    except TraceError as exc:
        return exc


def _read_small(source: Source) -> bytes | None:
    """The file's bytes; None when it is too big to hold; b"" when `parse` must read it (empty, or
    corrupt compression: `parse` says where)."""
    try:
        with source.open() as stream:
            data = stream.read(MANY_FILE_BYTES + 1)
    except TraceError:
        return b""
    return None if len(data) > MANY_FILE_BYTES else data


class _Framed:
    """Files laid end to end in `data` and framed: each record's frame start, body and end (positions
    in `data`, in order) and whether it is a Node (else its file's GlobalMetadata), each file's
    first node record among node records (`first_nodes`, with their count at the end), and the
    files `parse` must read (`damaged`: positions in the list of files)."""

    __slots__ = ("bodies", "damaged", "data", "ends", "file_starts", "first_nodes", "has_metadata", "is_node", "starts")

    def __init__(self, datas: list[bytes]) -> None:
        self.data = b"".join(datas)
        sizes = np.fromiter((len(d) for d in datas), np.int64, len(datas))
        file_ends = np.cumsum(sizes)
        self.file_starts = file_ends - sizes
        self.starts, self.bodies, self.ends, damaged = _frame_files(self.data, self.file_starts, file_ends)
        self.damaged: list[int] = np.flatnonzero(damaged).tolist()
        if not self.damaged:
            self._find_nodes()

    def _find_nodes(self) -> None:
        """Which first records are GlobalMetadata; files with more than one group of node records
        are damaged."""
        data = self.data
        first = np.searchsorted(self.starts, self.file_starts)
        heads = zip(self.bodies[first].tolist(), self.ends[first].tolist(), strict=True)
        self.has_metadata = [not first_record_is_node(data[body:end]) for body, end in heads]
        self.is_node = np.ones(len(self.starts), bool)
        self.is_node[first[np.array(self.has_metadata, bool)]] = False
        bounds = np.append(first, len(self.starts))
        self.first_nodes = bounds - np.cumsum(np.append(0, ~self.is_node))[bounds]
        self.damaged = np.flatnonzero(np.diff(self.first_nodes) > DECODE_ROWS).tolist()


def _frame_files(
    data: bytes, file_starts: np.ndarray, file_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(frame starts, bodies, ends, damaged) of the records of the (non-empty) files laid end to end
    in `data` at [file_starts, file_ends): record k of every file at once while LOCKSTEP_MIN_FILES
    are left, the rest record by record. A file is damaged (left to `parse`) when its framing is
    not clean or it holds more records than a GlobalMetadata and one DECODE_ROWS group."""
    buf = np.frombuffer(data + bytes(_LENGTH_BYTES), np.uint8)
    most = DECODE_ROWS + 1
    cursor = file_starts.copy()
    counts = np.zeros(len(file_starts), np.int64)
    damaged = np.zeros(len(file_starts), bool)
    pieces: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    active = np.flatnonzero(cursor < file_ends)
    while active.size >= LOCKSTEP_MIN_FILES:
        pos = cursor[active]
        lengths, bodies, unfinished = _lengths(buf, pos)
        ends = bodies + lengths
        counts[active] += 1
        bad = unfinished | (lengths > MAX_RECORD_BYTES) | (ends > file_ends[active]) | (counts[active] > most)
        damaged[active[bad]] = True
        good = ~bad
        for piece, values in zip(pieces, (pos, bodies, ends), strict=True):
            piece.append(values[good])
        active, ends = active[good], ends[good]
        cursor[active] = ends
        active = active[ends < file_ends[active]]
    for file in active.tolist():
        frames = _frame_rest(data, int(cursor[file]), int(file_ends[file]), most - int(counts[file]))
        if frames is None:
            damaged[file] = True
        else:
            for piece, values in zip(pieces, frames, strict=True):
                piece.append(np.array(values, np.int64))
    starts, bodies, ends = (np.concatenate(piece) if piece else np.zeros(0, np.int64) for piece in pieces)
    order = np.argsort(starts, kind="stable")
    return starts[order], bodies[order], ends[order], damaged


def _lengths(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, positions after, still unfinished after _LENGTH_BYTES) of the varints at `pos`."""
    byte = buf[pos]
    values = (byte & 0x7F).astype(np.int64)
    after = pos + 1
    more = np.flatnonzero(byte >= 0x80)
    for k in range(1, _LENGTH_BYTES):
        if not more.size:
            break
        byte = buf[pos[more] + k]
        values[more] |= (byte & 0x7F).astype(np.int64) << (7 * k)
        after[more] += 1
        more = more[byte >= 0x80]
    unfinished = np.zeros(len(pos), bool)
    unfinished[more] = True
    return values, after, unfinished


def _frame_rest(data: bytes, pos: int, end: int, room: int) -> tuple[list[int], list[int], list[int]] | None:
    """(frame starts, bodies, ends) of the records in data[pos:end], one by one; None when the
    framing is not clean or there are more than `room` records."""
    starts: list[int] = []
    bodies: list[int] = []
    ends: list[int] = []
    while pos < end:
        try:
            length, body = decode_varint(data, pos)
        except (IndexError, ValueError):
            return None
        stop = body + length
        if body > end or stop > end or length > MAX_RECORD_BYTES or len(starts) == room:
            return None
        starts.append(pos)
        bodies.append(body)
        ends.append(stop)
        pos = stop
    return starts, bodies, ends


def _parse_group(
    files: list[tuple[int, bytes]],
    sources: Sequence[Source],
    sink: FilesSink,
    outcomes: list[TraceMeta | TraceError | None],
) -> None:
    """Files (index in `sources`, bytes) framed and decoded together. A file whose framing is
    damaged is read by `parse`; a group upb or the column decoder refuses is halved until the files
    at fault are alone, and those are read by `parse`."""
    framed = _Framed([data for _, data in files])
    if framed.damaged:
        for position in framed.damaged:
            index = files[position][0]
            outcomes[index] = _parse_alone(sources[index], _FileSink(sink, index))
        damaged = set(framed.damaged)
        files = [file for position, file in enumerate(files) if position not in damaged]
        if files:
            _parse_group(files, sources, sink, outcomes)
        return
    decoded = _decode_together(framed)
    if decoded is None:
        if len(files) == 1:
            index = files[0][0]
            outcomes[index] = _parse_alone(sources[index], _FileSink(sink, index))
        else:
            half = len(files) // 2
            _parse_group(files[:half], sources, sink, outcomes)
            _parse_group(files[half:], sources, sink, outcomes)
        return
    columns, arrays, nodes, metadata, padded = decoded
    findings = Findings(columns, padded)
    collectives = CollectivePieces(
        lambda batch, which: sink.write("collectives", batch, pa.array(which)), flush_rows=sys.maxsize
    )
    node_starts = framed.starts[framed.is_node]
    first_nodes = framed.first_nodes.tolist()
    file_starts = framed.file_starts.tolist()
    metadata_read = 0
    for position, (index, _) in enumerate(files):
        low, high = first_nodes[position], first_nodes[position + 1]
        rows = NodeRows(_FileSink(sink, index), FORMAT, collectives=collectives)
        skipped = 0
        if framed.has_metadata[position]:
            rows.add_metadata(metadata[metadata_read])
            metadata_read += 1
            skipped = 1
        collectives.file = index
        try:
            if high > low:
                place = _placer(low, skipped, node_starts, file_starts[position])
                rows.check_records(columns, findings, nodes, low, high, place)
            outcomes[index] = rows.meta
        except TraceError as exc:
            outcomes[index] = exc
    which = np.repeat(np.array([index for index, _ in files], np.int32), np.diff(framed.first_nodes))
    if len(which):
        sink.write("ops", ops_batch([arrays], len(which)), pa.array(which))
    collectives.flush()


def _placer(low: int, skipped: int, node_starts: np.ndarray, file_start: int) -> Callable[[int], str]:
    """Where node record i of a group is, in error messages, for the file whose first node record
    is the group's record `low` (after `skipped` GlobalMetadata records)."""
    return lambda i: where(i - low + skipped, int(node_starts[i]) - file_start)


def _decode_together(framed: _Framed) -> tuple[NodeColumns, dict[str, pa.Array], Any, Any, np.ndarray] | None:
    """(columns, ops arrays, upb Node messages, upb GlobalMetadata messages, the padded bytes the
    columns point into) of framed files, or None when upb refuses one of their records or the column
    decoder leaves one to upb. The records are validated by upb in one call: with a tag put before
    each frame, the files are one message, their nodes in one repeated field, their GlobalMetadata
    records in another."""
    segment = np.frombuffer(framed.data, np.uint8)
    tags = np.where(framed.is_node, NODE_TAG, METADATA_TAG).astype(np.uint8)
    try:
        block = NODE_BLOCK.FromString(np.insert(segment, framed.starts, tags).tobytes())
    except DecodeError:
        return None
    padded = np.concatenate((segment, np.zeros(16, np.uint8)))
    is_node = framed.is_node
    columns = decode_nodes(padded, framed.bodies[is_node], framed.ends[is_node])
    if columns is None:
        return None
    arrays = NodeRows._column_arrays(padded, columns)
    if arrays is None:
        return None
    return columns, arrays, block.nodes, block.metadata, padded
