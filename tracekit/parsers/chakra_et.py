"""Chakra execution traces (.et): varint-framed protobuf records, one file per rank.

Framing: each record is a base-128 varint length followed by that many bytes of a serialized
message. The first record is a `GlobalMetadata`, except in early ASTRA-sim files, which start
directly with a `Node`; every later record is a `Node`. There is no header, trailer or index, and a
zero-length record is valid (an all-default Node, or an empty GlobalMetadata when first), so the
reader stops only at the true end of the stream, never at an empty record.

Reading (`parse`): the stream is framed into blocks of FLUSH_ROWS records (memory is bounded by the
block plus the largest record). Each block is validated by upb in one call (a 0x0A tag put before
each frame makes the block one `repeated Node` message), and its `ops` columns are decoded from the
wire bytes column-wise with numpy (tracekit.parsers.chakra_columns): no Python per node and field;
its `collectives` rows too, from the communication nodes' attributes (tracekit.parsers.chakra_collectives),
except around a row whose values the rules must null and note, which the reference path reads.
A block upb refuses, or whose records the column decoder leaves to upb (groups, known fields under
an unexpected wire type), is read record by record exactly as `parse_records` reads every file
(each record decoded into a *fresh* upb message: reusing one grows memory about four-fold), so both
give the same rows, warnings and errors, at the same record (tests/parsers/test_chakra_columns.py).
Count limits, bound checks and collective rows are taken DECODE_ROWS nodes at a time in both.

Row conventions (shared with chakra_json through `NodeRows`, so both formats give identical rows):

* `ops`: one row per Node. proto3 cannot tell an unset uint64 from 0. `start_us` is null when
  `start_time_micros` is 0, because the PyTorch converter never sets start times and a real trace
  does not start every op at clock zero. `duration_us` keeps 0 as 0.0: simulators replay
  `duration_micros` as written, and a zero-duration node (the converter forces `Optimizer.step` to
  0, synthetic collectives carry none) is still what the trace says. Unknown NodeType integers
  (e.g. STORAGE_NODE=8 from an unmerged schema extension) are kept as "NODE_TYPE_8".
* `collectives`: COMM_COLL_NODE carrying a `comm_type` attribute, COMM_SEND_NODE ("SEND") and
  COMM_RECV_NODE ("RECV"). A COMM_COLL_NODE without `comm_type` is an old converter's CPU-side
  c10d op (is_cpu_op=true), not a collective: it gets an `ops` row only. A `comm_type` value outside
  CollectiveCommType still gives a row, with a null comm_type, so its bytes are not lost. The
  `comm_type` attribute on SEND/RECV is ignored (the MSCCL converter writes NodeType numbers there).
  Integer attributes are read from whichever integer oneof variant the producer used.
* Element type and split sizes, where a comm node carries them as attributes named as PyTorch ET's
  comm attrs (Chakra's converter writes none; tracekit's generator does): `dtype` (a c10
  ScalarType name) gives `in_elems` = comm_size / its size (null when that does not divide) and, with
  `out_msg_nelems`, `out_elems` and `out_bytes`; `in_split_size` and `out_split_size` (an integer
  list, or its text) are the all-to-allv's per-peer splits, read by the rulebook's split rules
  (tracekit.parsers.common.sizes), and tell `is_uneven`, which is null on nodes without them.
* METADATA_NODE named `process_group:init`: its payload becomes `TraceMeta.process_groups`
  (tracekit.parsers.common.groups: a bad entry is skipped with a warning).
* Values follow the rulebook's policy (tracekit.parsers.common.values): a node id or dependency
  beyond int64 (they are uint64 in the proto), a comm_size beyond [0, 2**62], a peer beyond
  [0, 2**20) is null, with one warning per field on the file.
* Garbage is refused by count (tracekit.parsers.common.limits): a record length beyond
  MAX_RECORD_BYTES, and records that carry no node type (empty ones included) beyond a small
  share of the records read, so a zero-filled tail costs a few kilobytes of reading, not a row per byte.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import IO, Any

import numpy as np
import pyarrow as pa  # noqa: TID253 (parser modules are imported lazily by the registry)
from google.protobuf.message import DecodeError  # noqa: TID253

from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import BatchSink, FilesSink, ProcessGroup, Source, TraceError, TraceMeta
from tracekit.parsers.chakra_collectives import CollectiveColumns, CollectivePieces, collective_columns
from tracekit.parsers.chakra_columns import NodeColumns, decode_nodes, gather, varints
from tracekit.parsers.common.groups import merge_groups, read_process_groups
from tracekit.parsers.common.limits import MAX_RECORD_BYTES, UntypedRecords
from tracekit.parsers.common.names import CHAKRA_COMM_TYPES, PG_INIT_MARK, elements, normalize_dtype, times
from tracekit.parsers.common.rows import CollectiveRow, finished
from tracekit.parsers.common.sizes import is_uneven, split_sizes
from tracekit.parsers.common.values import INT64, Checker
from tracekit.schema import arrow_schema

FORMAT = "chakra_et"

CHUNK_SIZE = 1 << 20
# The column path reads blocks of records in chunks of this many CHUNK_SIZE.
BLOCK_CHUNKS = 8
MAX_VARINT_BYTES = 10
FLUSH_ROWS = 65_536
# Nodes decoded before they become columns: bounds the memory held in upb messages.
DECODE_ROWS = 4_096
COLLECTIVE_FLUSH_ROWS = 8_192
# Blocks of fewer records are read record by record: the column path's fixed cost (a few dozen
# numpy and Arrow calls) outweighs its gain below about a thousand records (a fleet's rank files
# hold a few dozen).
COLUMN_MIN_RECORDS = 1_024

NODE_TYPE_NAMES: dict[int, str] = dict(
    (value.number, value.name) for value in et_def_pb2.DESCRIPTOR.enum_types_by_name["NodeType"].values
)
METADATA_NODE = 1
COMM_SEND_NODE = 5
COMM_RECV_NODE = 6
COMM_COLL_NODE = 7
_COMM_NODE_TYPES = frozenset((COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE))

_INT_VARIANTS = frozenset(
    (
        "int32_val",
        "int64_val",
        "uint32_val",
        "uint64_val",
        "sint32_val",
        "sint64_val",
        "fixed32_val",
        "fixed64_val",
        "sfixed32_val",
        "sfixed64_val",
        "bool_val",
    )
)
_FLOAT_VARIANTS = frozenset(("double_val", "float_val"))
_INT_LIST_VARIANTS = frozenset(kind.replace("_val", "_list") for kind in _INT_VARIANTS if kind != "bool_val")


def where(index: int, offset: int) -> str:
    """The place of a record in error messages."""
    return f"record {index} (byte offset {offset})"


# ---------------------------------------------------------------------------------------------
# Framing


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the base-128 varint at buf[pos].

    Raises IndexError when buf ends inside the varint, ValueError when it runs past 10 bytes.
    """
    value = 0
    shift = 0
    for i in range(pos, pos + MAX_VARINT_BYTES):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def iter_records(stream: IO[bytes], chunk_size: int = CHUNK_SIZE) -> Iterator[tuple[int, int, bytes]]:
    """Yield (record index, byte offset, payload) for each varint-framed record of `stream`.

    Reads `chunk_size` bytes at a time; zero-length records are yielded as b"". Raises TraceError
    naming the record and its byte offset for a truncated or malformed frame.
    """
    read = stream.read
    buf = b""
    pos = 0  # next unread byte in buf
    base = 0  # stream offset of buf[0]
    eof = False
    index = 0
    while True:
        if not eof and len(buf) - pos < MAX_VARINT_BYTES:
            more = read(chunk_size)
            if more:
                buf = buf[pos:] + more
                base += pos
                pos = 0
                continue
            eof = True
        if pos >= len(buf):
            return
        start = pos
        offset = base + start
        byte = buf[pos]
        if byte < 0x80:
            length = byte
            pos += 1
        else:
            length, pos = _frame_length(buf, pos, index, base)
        end = pos + length
        if end > len(buf):
            if not eof:
                buf, base, pos, end = _fill(read, buf, base, start, pos, end, chunk_size)
            if end > len(buf):
                raise _truncated(index, offset, length, len(buf) - pos)
        yield index, offset, buf[pos:end]
        pos = end
        index += 1


def _frame_length(buf: bytes, pos: int, index: int, base: int) -> tuple[int, int]:
    try:
        length, after = decode_varint(buf, pos)
    except IndexError:
        raise TraceError("file ends inside a record's length varint", where(index, base + pos)) from None
    except ValueError:
        raise TraceError("bad length varint (more than 10 bytes)", where(index, base + pos)) from None
    if length > MAX_RECORD_BYTES:
        raise TraceError(
            f"record length {length:,} exceeds {MAX_RECORD_BYTES:,} bytes, more than any node (corrupt length)",
            where(index, base + pos),
        )
    return length, after


def _fill(
    read: Any, buf: bytes, base: int, start: int, pos: int, end: int, chunk_size: int
) -> tuple[bytes, int, int, int]:
    """Read until buf holds the record [pos, end) or the stream ends; the buffer restarts at `start`."""
    parts = [buf[start:]]
    have = len(buf) - start
    need = end - start
    while have < need:
        more = read(max(chunk_size, min(need - have, 1 << 26)))
        if not more:
            break
        parts.append(more)
        have += len(more)
    shift = start
    return b"".join(parts), base + shift, pos - shift, end - shift


class Block:
    """Whole records framed in `data`: frame starts, the stream offset of data[0], the index of the
    first record, and the framing error found right after the last one (raised once they are read)."""

    __slots__ = ("base", "data", "end", "error", "frames", "index")

    def __init__(self, data: bytes, frames: list[int], base: int, index: int, end: int, error: TraceError | None):
        self.data, self.frames, self.base, self.index, self.end, self.error = data, frames, base, index, end, error

    def offset(self, i: int) -> int:
        return self.base + self.frames[i]

    def payload(self, i: int) -> bytes:
        length, body = decode_varint(self.data, self.frames[i])
        return self.data[body : body + length]


class BlockReader:
    """Frames a stream into blocks of whole records (`read(limit)`), reading `chunk_size` bytes at a
    time: memory is bounded by the chunk, the block and the largest record. Framing errors are the
    ones `iter_records` raises, at the same record and byte offset."""

    def __init__(self, stream: IO[bytes], chunk_size: int) -> None:
        self._read = stream.read
        self._chunk = chunk_size
        self._data = b""
        self._pos = 0  # next unframed byte of _data
        self._base = 0  # stream offset of _data[0]
        self._index = 0  # record index of the record at _pos
        self._eof = False
        self._done = False

    def rewind(self, block: Block) -> None:
        """Frame `block`'s records again on the next read (its bytes are still held)."""
        if block.frames:
            self._pos = block.frames[0] + block.base - self._base
            self._index = block.index
            self._done = False

    def read(self, limit: int) -> Block | None:
        """Up to `limit` whole records; fewer only at the end of the stream or before a framing error."""
        if self._done:
            return None
        frames: list[int] = []
        while True:
            need, error = self._frame(frames, limit)
            if error is not None or len(frames) >= limit or (self._eof and self._pos >= len(self._data)):
                index = self._index
                self._index += len(frames)
                self._done = error is not None or (self._eof and self._pos >= len(self._data))
                if not frames and error is None:
                    return None
                return Block(self._data, frames, self._base, index, self._pos, error)
            keep = frames[0] if frames else self._pos
            more = self._read(max(self._chunk, need - len(self._data)))
            if not more:
                self._eof = True
                continue
            self._data = self._data[keep:] + more
            self._base += keep
            self._pos -= keep
            frames[:] = [f - keep for f in frames]

    def _frame(self, frames: list[int], limit: int) -> tuple[int, TraceError | None]:
        """Frame records from _pos into `frames`: (bytes of _data needed to go on, error)."""
        data, pos, eof = self._data, self._pos, self._eof
        n = len(data)
        room = limit - len(frames)
        append = frames.append
        try:
            while room and pos < n:
                first = data[pos]
                if first < 0x80:
                    length, body = first, pos + 1
                elif pos + 1 < n and data[pos + 1] < 0x80:
                    length, body = (first & 0x7F) | (data[pos + 1] << 7), pos + 2
                elif not eof and n - pos < MAX_VARINT_BYTES:
                    return pos + MAX_VARINT_BYTES, None
                else:
                    length, body = _frame_length(data, pos, self._index + len(frames), self._base)
                end = body + length
                if end > n:
                    if eof:
                        return 0, _truncated(self._index + len(frames), self._base + pos, length, n - body)
                    return end, None
                append(pos)
                pos = end
                room -= 1
            return 0, None
        except TraceError as exc:
            return 0, exc
        finally:
            self._pos = pos


def _truncated(index: int, offset: int, length: int, available: int) -> TraceError:
    return TraceError(
        f"truncated record: length says {length:,} bytes but only {available:,} remain", where(index, offset)
    )


def _first_record_is_node(payload: bytes) -> bool:
    """Whether the first record is a Node (old files) rather than a GlobalMetadata.

    GlobalMetadata has only fields 1 (version, string) and 2 (attr, message). A Node's id is field 1
    as a varint, and fields 3-10 exist only in Node; field 2 (string name vs attr) is ambiguous.
    """
    pos = 0
    try:
        while pos < len(payload):
            tag, pos = decode_varint(payload, pos)
            field, wire = tag >> 3, tag & 7
            if (field == 1 and wire == 0) or 3 <= field <= 10:
                return True
            pos = _skip_field(payload, pos, wire)
    except (IndexError, ValueError):
        return False
    return False


def _skip_field(payload: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return decode_varint(payload, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = decode_varint(payload, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise ValueError(f"wire type {wire}")


# ---------------------------------------------------------------------------------------------
# Attributes


def attr_int(attr: Any) -> int | None:
    """An attribute's value as an int, whichever integer (or bool) oneof variant carries it.

    Producers disagree on types (comm_size as int64 or uint64, comm_src as int32 or int64,
    is_cpu_op as bool or int32); integral floats are accepted too. None for anything else.
    """
    kind = attr.WhichOneof("value")
    if kind in _INT_VARIANTS:
        return int(getattr(attr, kind))
    if kind in _FLOAT_VARIANTS:
        value = getattr(attr, kind)
        return int(value) if value == value and value.is_integer() else None
    return None


def attr_str(attr: Any) -> str | None:
    """An attribute's value as a string (string_val, or bytes_val as UTF-8)."""
    kind = attr.WhichOneof("value")
    if kind == "string_val":
        return attr.string_val
    if kind == "bytes_val":
        return attr.bytes_val.decode("utf-8", "replace")
    return None


# ---------------------------------------------------------------------------------------------
# Rows


class NodeRows:
    """Turns decoded GlobalMetadata/Node messages into `ops` and `collectives` batches.

    Shared by the .et and the chakra_jsonizer JSON parsers so that one trace gives the same rows in
    both formats. Nodes are held until `decode_rows` of them are pending and then turned into Arrow
    columns with one comprehension per column: far less Python per node than a dict row each.
    The pending batch is kept small because every decoded upb message owns an arena (about 2 KB);
    the column chunks are joined into `flush_rows`-row batches for the sink. Only communication and
    metadata nodes get per-node Python here; the column path (`add_columns`, `check_records`) builds
    collective rows column-wise too.
    """

    def __init__(
        self,
        sink: BatchSink,
        fmt: str,
        flush_rows: int = FLUSH_ROWS,
        decode_rows: int = DECODE_ROWS,
        collectives: CollectivePieces | None = None,
    ) -> None:
        self.sink = sink
        self.meta = TraceMeta(format=fmt)
        self.checker = Checker(self.meta)
        self.flush_rows = flush_rows
        self.decode_rows = min(decode_rows, flush_rows)
        # `parse_many` gathers the collective rows of many files in one buffer of its own.
        self.collectives = collectives or CollectivePieces(
            lambda batch, _files: sink.write("collectives", batch), min(flush_rows, COLLECTIVE_FLUSH_ROWS)
        )
        self.pending: list[Any] = []
        self._chunks: list[dict[str, pa.Array]] = []
        self._chunk_rows = 0
        self._first_node_record = 0
        self._untyped = UntypedRecords()

    def add_metadata(self, message: Any) -> None:
        """Record the GlobalMetadata: version, or the `schema` attribute when version is empty."""
        self._first_node_record = 1
        version = message.version or None
        if version is None:
            for attr in message.attr:
                if attr.name == "schema":
                    version = attr_str(attr) or None
                    break
        self.meta.schema_version = version

    def add(self, node: Any) -> None:
        """Queue one Node; rows are made when `decode_rows` are pending (or at `finish`)."""
        self.pending.append(node)
        if len(self.pending) >= self.decode_rows:
            self.flush()

    def flush(self) -> None:
        """Turn the pending nodes into `ops` columns and `collectives` rows."""
        nodes = self.pending
        if not nodes:
            return
        self.pending = []
        self.meta.node_count += len(nodes)
        types = [n.type for n in nodes]
        self._untyped.add(len(nodes), types.count(0))  # raises once they are out of proportion
        try:
            columns = self._columns(nodes, types)
        except (OverflowError, pa.ArrowInvalid):
            columns = self._checked_columns(nodes, types)  # a uint64 id beyond int64: rare, slower
        self._chunks.append(columns)
        for node, node_type in zip(nodes, types, strict=True):
            if node_type in _SPECIAL_NODE_TYPES:
                self._special(node, node_type)
        self._chunk_rows += len(nodes)
        if self._chunk_rows >= self.flush_rows:
            self._write_ops()

    @staticmethod
    def _columns(
        nodes: list[Any],
        types: list[int],
        op_ids: list[int | None] | None = None,
        ctrl_deps: list[list[int] | None] | None = None,
        data_deps: list[list[int] | None] | None = None,
        times: bool = True,
    ) -> dict[str, pa.Array]:
        names = _TYPE_NAMES
        columns = {
            "op_id": pa.array([n.id for n in nodes] if op_ids is None else op_ids, pa.int64()),
            "name": pa.array([n.name for n in nodes], pa.string()),
            "type": pa.array([names[t] for t in types], pa.string()),
            "ctrl_deps": pa.array(
                [n.ctrl_deps for n in nodes] if ctrl_deps is None else ctrl_deps, pa.list_(pa.int64())
            ),
            "data_deps": pa.array(
                [n.data_deps for n in nodes] if data_deps is None else data_deps, pa.list_(pa.int64())
            ),
        }
        if times:
            columns["start_us"] = pa.array([n.start_time_micros or None for n in nodes], pa.float64())
            columns["duration_us"] = pa.array([n.duration_micros for n in nodes], pa.float64())
        return columns

    def _checked_columns(self, nodes: list[Any], types: list[int]) -> dict[str, pa.Array]:
        """Columns with every id and dependency checked: those beyond int64 are null, and noted.
        Times (uint64 too) become floats here, which Arrow does not do for ints beyond int64."""
        checker = self.checker
        op_ids = [checker.bounded(n.id, "op_id", INT64, _where(n)) for n in nodes]

        def deps(field: str) -> list[list[int] | None]:
            out: list[list[int] | None] = []
            for n in nodes:
                values = list(getattr(n, field))
                if all(INT64.holds(v) for v in values):
                    out.append(values)
                else:
                    checker.note(field, f"holds an id out of bounds [{INT64.low}, {INT64.high}]", values, _where(n))
                    out.append(None)
            return out

        columns = self._columns(nodes, types, op_ids, deps("ctrl_deps"), deps("data_deps"), times=False)
        columns["start_us"] = pa.array([float(n.start_time_micros) or None for n in nodes], pa.float64())
        columns["duration_us"] = pa.array([float(n.duration_micros) for n in nodes], pa.float64())
        return columns

    @property
    def node_total(self) -> int:
        """Nodes read so far (flushed and pending)."""
        return self.meta.node_count + len(self.pending)

    def add_columns(
        self,
        buf: np.ndarray,
        columns: NodeColumns,
        nodes: Any,
        place: Callable[[int], str],
        final: bool,
    ) -> bool:
        """Rows of a block decoded column-wise (`nodes`: the same records as upb messages, read only
        for communication and metadata nodes). The count limit, the bound checks and the special
        nodes are taken DECODE_ROWS nodes at a time, as `flush` takes them, so that warnings and
        errors are the same; a trailing partial group waits for the end of the stream (`final`).
        False (nothing done) when the block cannot be held as Arrow columns."""
        count = len(columns.ids)
        arrays = self._column_arrays(buf, columns)
        if arrays is None:
            return False
        findings = Findings(columns, buf)
        step = self.decode_rows
        low = 0
        while low < count:
            high = min(count, low + step - self.node_total % step)
            if high - low < step - self.node_total % step and not final:
                break  # a framing error follows: the record-by-record path never flushes these
            self.check_records(columns, findings, nodes, low, high, place)
            low = high
        if low:
            chunk = arrays if low == count else {name: array.slice(0, low) for name, array in arrays.items()}
            self._chunks.append(chunk)
            self._chunk_rows += low
            if self._chunk_rows >= self.flush_rows:
                self._write_ops()
        return True

    def check_records(
        self, columns: NodeColumns, findings: Findings, nodes: Any, low: int, high: int, place: Callable[[int], str]
    ) -> None:
        """Records [low, high) of decoded columns, as `flush` takes a group of pending nodes: counted
        against the untyped limit, their ids beyond int64 noted, their special nodes read from `nodes`
        (their collective rows taken from the columns `findings` built, unless the rules must see
        one of them: then from `nodes`, as `flush` reads them). A TraceError without a place is
        placed at record high - 1."""
        checker = self.checker
        self.meta.node_count += high - low
        try:
            untyped = findings.untyped
            self._untyped.add(high - low, int(untyped[high - 1] - (untyped[low - 1] if low else 0)))
            for i in findings.within(findings.bad_ids, low, high):
                checker.bounded(int(columns.ids[i]), "op_id", INT64, f"node id {columns.ids[i]}")
            for field, bad, offsets, values in (
                ("ctrl_deps", findings.bad_ctrl, columns.ctrl_offsets, columns.ctrl_values),
                ("data_deps", findings.bad_data, columns.data_offsets, columns.data_values),
            ):
                for i in findings.within(bad, low, high):
                    checker.note(
                        field,
                        f"holds an id out of bounds [{INT64.low}, {INT64.high}]",
                        values[offsets[i] : offsets[i + 1]].tolist(),
                        f"node id {columns.ids[i]}",
                    )
            collectives = findings.collectives
            if collectives is not None and collectives.regular(low, high):
                for i in findings.within(findings.metadata, low, high):
                    self._special(nodes[i], METADATA_NODE)
                self.collectives.add_span(collectives, low, high)
            else:
                types = columns.types
                for i in findings.within(findings.special, low, high):
                    self._special(nodes[i], int(types[i]))
        except TraceError as exc:
            if exc.where is None:
                exc.where = place(high - 1)
            raise

    @staticmethod
    def _column_arrays(buf: np.ndarray, c: NodeColumns) -> dict[str, pa.Array] | None:
        """The ops columns of a decoded block (ids and dependencies beyond int64 null), or None when
        its names or dependencies outgrow 32-bit Arrow offsets."""
        offsets, text = gather(buf, c.name_starts, c.name_ends)
        if offsets[-1] > _OFFSET_HIGH or len(c.ctrl_values) > _OFFSET_HIGH or len(c.data_values) > _OFFSET_HIGH:
            return None
        count = len(c.ids)
        if (c.ids > _INT64_HIGH).any():
            ids = pa.array([None if v > INT64.high else v for v in c.ids.tolist()], pa.int64())
        else:
            ids = pa.array(c.ids.astype(np.int64))
        codes, inverse = np.unique(c.types, return_inverse=True)
        labels = pa.array([_TYPE_NAMES[int(code)] for code in codes], pa.string())
        return {
            "op_id": ids,
            "name": pa.StringArray.from_buffers(count, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(text)),
            "type": labels.take(pa.array(inverse.astype(np.int64))),
            "ctrl_deps": _id_lists(c.ctrl_offsets, c.ctrl_values),
            "data_deps": _id_lists(c.data_offsets, c.data_values),
            "start_us": pa.array(c.starts.astype(np.float64), mask=c.starts == 0),
            "duration_us": pa.array(c.durations.astype(np.float64)),
        }

    def _write_ops(self) -> None:
        chunks, count = self._chunks, self._chunk_rows
        if not count:
            return
        self._chunks, self._chunk_rows = [], 0
        self.sink.write("ops", ops_batch(chunks, count))

    def _special(self, node: Any, node_type: int) -> None:
        if node_type == METADATA_NODE:
            if PG_INIT_MARK in node.name:
                payload = node.inputs.values
                known = _groups_read_cleanly(payload) if len(payload) <= _CACHED_PAYLOAD_CHARS else None
                groups = list(known) if known is not None else read_process_groups(payload, self.checker, _where(node))
                self.meta.process_groups = merge_groups(self.meta.process_groups, groups)
            return
        row = collective_row(node, node_type, self.checker)
        if row is not None:
            self.collectives.append(finished(row, self.checker, _where(node)))

    def finish(self) -> TraceMeta:
        """Flush what is pending and return the file's metadata."""
        self.flush()
        self._write_ops()
        self.collectives.flush()
        return self.meta


# Process-group payloads up to this size are read once per process (every rank of a job records
# the same one); the groups are shared, as ingest shares them anyway (never mutated).
_CACHED_PAYLOAD_CHARS = 1 << 16


@lru_cache(maxsize=1024)
def _groups_read_cleanly(payload: str) -> tuple[ProcessGroup, ...] | None:
    """The groups of a process-group payload that reads without a warning; None for one that warns
    (read again on its file, so its warnings name their place)."""
    meta = TraceMeta(format=FORMAT)
    groups = read_process_groups(payload, Checker(meta), None)
    return None if meta.warnings else tuple(groups)


class _TypeNames(dict[int, str]):
    """NodeType names; unknown integers (schema extensions) are kept as NODE_TYPE_<n>."""

    def __missing__(self, key: int) -> str:
        return f"NODE_TYPE_{key}"


_TYPE_NAMES = _TypeNames(NODE_TYPE_NAMES)
_SPECIAL_NODE_TYPES = frozenset((METADATA_NODE, *_COMM_NODE_TYPES))


_SPECIAL_TYPE_CODES = np.array(sorted(_SPECIAL_NODE_TYPES), dtype=np.int64)
_INT64_HIGH = np.uint64(INT64.high)
_OFFSET_HIGH = (1 << 31) - 1


class Findings:
    """What the rules look at in decoded columns, found once for all their records: a running count
    of untyped records, the (sorted) records that are special (metadata among them) or hold ids
    beyond int64, and the collective rows of the communication nodes, built column-wise."""

    __slots__ = ("bad_ctrl", "bad_data", "bad_ids", "collectives", "metadata", "special", "untyped")

    def __init__(self, columns: NodeColumns, buf: np.ndarray) -> None:
        types = columns.types
        self.untyped = np.cumsum(types == 0)
        special = np.flatnonzero(np.isin(types, _SPECIAL_TYPE_CODES))
        self.special: list[int] = special.tolist()
        metadata = types[special] == METADATA_NODE
        self.metadata: list[int] = special[metadata].tolist()
        comm = special[~metadata].tolist()
        self.collectives: CollectiveColumns | None = collective_columns(buf, columns, comm) if comm else None
        self.bad_ids: list[int] = np.flatnonzero(columns.ids > _INT64_HIGH).tolist()
        self.bad_ctrl = _out_of_bounds(columns.ctrl_offsets, columns.ctrl_values)
        self.bad_data = _out_of_bounds(columns.data_offsets, columns.data_values)

    @staticmethod
    def within(records: list[int], low: int, high: int) -> list[int]:
        """The records of a sorted list that lie in [low, high)."""
        return records[bisect_left(records, low) : bisect_left(records, high)]


def ops_batch(chunks: list[dict[str, pa.Array]], count: int) -> pa.RecordBatch:
    """One `ops` batch of `count` rows from column chunks; the columns ingest fills in are null."""
    schema = arrow_schema("ops")
    arrays = []
    for field in schema:
        if field.name in chunks[0]:
            parts = [chunk[field.name] for chunk in chunks]
            arrays.append(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))
        else:
            arrays.append(pa.nulls(count, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _out_of_bounds(offsets: np.ndarray, values: np.ndarray) -> list[int]:
    """The records whose id list holds a value beyond int64."""
    bad = np.flatnonzero(values > _INT64_HIGH)
    if not bad.size:
        return []
    return np.unique(np.searchsorted(offsets, bad, side="right") - 1).tolist()


def _id_lists(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A list<int64> column; a list holding an id beyond int64 is null (its record is noted)."""
    bad = _out_of_bounds(offsets, values)
    if not bad:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(np.int64)))
    lists: list[list[int] | None] = [values[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    for i in bad:
        lists[i] = None
    return pa.array(lists, pa.list_(pa.int64()))


def _where(node: Any) -> str:
    return f"node id {node.id}"


def collective_row(node: Any, node_type: int, checker: Checker) -> CollectiveRow | None:
    """The `collectives` row of a communication node; None for a COMM_COLL_NODE without comm_type."""
    attrs = {attr.name: attr for attr in node.attr}
    peer = None
    if node_type == COMM_COLL_NODE:
        code = _int_attr(attrs, "comm_type")
        if code is None:
            return None  # an old converter's CPU-side c10d node: not a collective
        comm_type = CHAKRA_COMM_TYPES.get(code)
    elif node_type == COMM_SEND_NODE:
        comm_type = "SEND"
        peer = _int_attr(attrs, "comm_dst")
    else:
        comm_type = "RECV"
        peer = _int_attr(attrs, "comm_src")
    start = node.start_time_micros
    dtype = normalize_dtype(attr_str(attrs["dtype"])) if "dtype" in attrs else None
    in_bytes = _int_attr(attrs, "comm_size")
    out_elems = _int_attr(attrs, "out_msg_nelems")
    where = _where(node)
    in_splits = _splits(attrs, "in_split_size", "in_splits", checker, where)
    out_splits = _splits(attrs, "out_split_size", "out_splits", checker, where)
    split = "in_split_size" in attrs or "out_split_size" in attrs
    return CollectiveRow(
        op_id=node.id,
        op_name=node.name,
        comm_type=comm_type,
        is_uneven=is_uneven(node.name, comm_type, in_splits, out_splits, known=True) if split else None,
        pg_name=_pg_name(attrs.get("pg_name")),
        peer=peer,
        dtype=dtype,
        in_elems=elements(in_bytes, dtype),
        out_elems=out_elems,
        in_bytes=in_bytes,
        out_bytes=times(out_elems, dtype),
        in_splits=in_splits or None,  # an empty list says the splits are even: no list, is_uneven false
        out_splits=out_splits or None,
        start_us=float(start) if start else None,
        duration_us=float(node.duration_micros),
        rf_id=_int_attr(attrs, "rf_id"),
        source="chakra_node",
    )


def _splits(attrs: dict[str, Any], name: str, field: str, checker: Checker, where: str) -> list[int] | None:
    """A split-size attribute: any integer list member, or its text (split_sizes reads both)."""
    attr = attrs.get(name)
    if attr is None:
        return None
    kind = attr.WhichOneof("value")
    value = list(getattr(attr, kind).values) if kind in _INT_LISTS else attr_str(attr)
    return split_sizes(value, field, checker, where) if value is not None else None


_INT_LISTS = frozenset({"int32_list", "int64_list", "uint32_list", "uint64_list", "sint32_list", "sint64_list"})
_INT_LISTS |= frozenset({"fixed32_list", "fixed64_list", "sfixed32_list", "sfixed64_list"})


def _pg_name(attr: Any) -> str | None:
    """pg_name is a string; STG's legacy integer group ids are accepted as their decimal text."""
    if attr is None:
        return None
    text = attr_str(attr)
    if text is not None:
        return text
    number = attr_int(attr)
    return str(number) if number is not None else None


def _int_attr(attrs: dict[str, Any], name: str) -> int | None:
    attr = attrs.get(name)
    return attr_int(attr) if attr is not None else None


def _int_list_attr(attrs: dict[str, Any], name: str) -> list[int] | None:
    """A list attribute of integers, whichever integer list variant carries it; None for none."""
    attr = attrs.get(name)
    kind = attr.WhichOneof("value") if attr is not None else None
    if kind not in _INT_LIST_VARIANTS:
        return None
    return list(getattr(attr, kind).values)


# ---------------------------------------------------------------------------------------------
# Parser


def _node_block_class() -> Any:
    """`message TracekitNodeBlock { repeated Node nodes = 1; repeated GlobalMetadata metadata = 2; }`:
    a block of .et records with a 0x0A tag put before each Node frame (0x12 before a GlobalMetadata
    frame) is one such message, which upb parses (and validates) in one call."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.Default()
    try:
        descriptor = pool.FindMessageTypeByName("ChakraProtoMsg.TracekitNodeBlock")
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name="tracekit_node_block.proto",
            package="ChakraProtoMsg",
            syntax="proto3",
            dependency=[et_def_pb2.DESCRIPTOR.name],
        )
        message = proto.message_type.add(name="TracekitNodeBlock")
        for name, number, type_name in (("nodes", 1, "Node"), ("metadata", 2, "GlobalMetadata")):
            message.field.add(
                name=name,
                number=number,
                type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                type_name=f".ChakraProtoMsg.{type_name}",
            )
        pool.AddSerializedFile(proto.SerializeToString())
        descriptor = pool.FindMessageTypeByName("ChakraProtoMsg.TracekitNodeBlock")
    return message_factory.GetMessageClass(descriptor)


_NODE_BLOCK = _node_block_class()
# The tags of TracekitNodeBlock's fields put before each frame: nodes = 1, metadata = 2 (wire type 2).
_NODE_TAG, _METADATA_TAG = 0x0A, 0x12


def _read_block(rows: NodeRows, block: Block) -> None:
    """One block of Node records: validated by upb in one call, columns from chakra_columns; a
    small block, one upb refuses, or one the column decoder leaves to upb goes record by record."""
    if len(block.frames) < COLUMN_MIN_RECORDS:
        _read_records(rows, block, None)
        return
    frames = np.asarray(block.frames, dtype=np.int64)
    low = int(frames[0])
    segment = np.frombuffer(block.data, np.uint8, count=block.end - low, offset=low)
    starts = frames - low
    lengths, bodies = varints(segment, starts)
    try:
        nodes = _NODE_BLOCK.FromString(np.insert(segment, starts, 0x0A).tobytes()).nodes
    except DecodeError:
        _read_records(rows, block, None)  # raises at the record upb refuses
        return
    padded = np.concatenate((segment, np.zeros(16, np.uint8)))
    columns = decode_nodes(padded, bodies, bodies + lengths.astype(np.int64))
    if columns is None or not rows.add_columns(
        padded, columns, nodes, lambda i: where(block.index + i, block.offset(i)), final=block.error is None
    ):
        _read_records(rows, block, nodes)


def _read_records(rows: NodeRows, block: Block, nodes: Any) -> None:
    """A block record by record, as `parse_records` reads it (decoded here unless `nodes` holds them)."""
    node_from = et_def_pb2.Node.FromString
    for i in range(len(block.frames)):
        if nodes is not None:
            node = nodes[i]
        else:
            try:
                node = node_from(block.payload(i))
            except DecodeError as exc:
                raise TraceError(f"cannot decode Node: {exc}", where(block.index + i, block.offset(i))) from exc
        rows.pending.append(node)
        if len(rows.pending) >= rows.decode_rows:
            try:
                rows.flush()
            except TraceError as exc:
                if exc.where is None:
                    exc.where = where(block.index + i, block.offset(i))
                raise


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one .et file (gzip handled by the source) into `sink`; see the module docstring.

    Blocks of FLUSH_ROWS records are validated by upb in one call and turned into columns by the
    column-wise decoder (tracekit.parsers.chakra_columns); a block that upb refuses, or whose
    records the decoder leaves to upb, goes record by record as `parse_records` reads it, so both
    give the same rows, warnings and errors (at the same record).
    """
    rows = NodeRows(sink, FORMAT, FLUSH_ROWS, DECODE_ROWS)
    with source.open() as stream:
        reader = BlockReader(stream, BLOCK_CHUNKS * CHUNK_SIZE)
        block_nodes = rows.flush_rows  # a block is one ops batch: flushed where parse_records flushes
        first = reader.read(1)
        if first is None:
            return rows.finish()
        last = (0, first.offset(0) if first.frames else 0)
        try:
            if first.frames and not _first_record_is_node(first.payload(0)):
                rows.add_metadata(_decode(et_def_pb2.GlobalMetadata.FromString, first.payload(0), 0, last[1]))
            else:
                reader.rewind(first)
            if first.error is not None:
                raise first.error
            while (block := reader.read(block_nodes - rows.node_total % block_nodes)) is not None:
                if block.frames:
                    last = (block.index + len(block.frames) - 1, block.offset(len(block.frames) - 1))
                _read_block(rows, block)
                if block.error is not None:
                    raise block.error
            return rows.finish()
        except TraceError as exc:
            if exc.where is None:  # a count limit of NodeRows: the place is the last record read
                exc.where = where(*last)
            raise


def parse_records(source: Source, sink: BatchSink) -> TraceMeta:
    """`parse` one record at a time through upb messages (the reference the column path matches)."""
    rows = NodeRows(sink, FORMAT, FLUSH_ROWS, DECODE_ROWS)
    node_from = et_def_pb2.Node.FromString
    pending = rows.pending
    decode_rows = rows.decode_rows
    index, offset = 0, 0
    with source.open() as stream:
        try:
            for index, offset, payload in iter_records(stream, CHUNK_SIZE):
                if index == 0 and not _first_record_is_node(payload):
                    rows.add_metadata(_decode(et_def_pb2.GlobalMetadata.FromString, payload, index, offset))
                    continue
                try:
                    pending.append(node_from(payload))
                except DecodeError as exc:
                    raise TraceError(f"cannot decode Node: {exc}", where(index, offset)) from exc
                if len(pending) >= decode_rows:
                    rows.flush()
                    pending = rows.pending
            return rows.finish()
        except TraceError as exc:
            if exc.where is None:  # a count limit of NodeRows: the place is the last record read
                exc.where = where(index, offset)
            raise


def _decode(from_string: Any, payload: bytes, index: int, offset: int) -> Any:
    try:
        return from_string(payload)
    except DecodeError as exc:
        raise TraceError(f"cannot decode GlobalMetadata: {exc}", where(index, offset)) from exc


# ---------------------------------------------------------------------------------------------
# Many files at once

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
        return parse(source, sink)
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
        self.has_metadata = [not _first_record_is_node(data[body:end]) for body, end in heads]
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
    tags = np.where(framed.is_node, _NODE_TAG, _METADATA_TAG).astype(np.uint8)
    try:
        block = _NODE_BLOCK.FromString(np.insert(segment, framed.starts, tags).tobytes())
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
