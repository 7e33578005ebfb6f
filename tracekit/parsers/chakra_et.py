"""Chakra execution traces (.et): varint-framed protobuf records, one file per rank.

Framing: each record is a base-128 varint length followed by that many bytes of a serialized
message. The first record is a `GlobalMetadata`, except in early ASTRA-sim files, which start
directly with a `Node`; every later record is a `Node`. There is no header, trailer or index, and a
zero-length record is valid (an all-default Node, or an empty GlobalMetadata when first), so the
reader stops only at the true end of the stream, never at an empty record.

The stream is read in chunks (memory is bounded by the chunk size plus the largest record), and each
record is decoded into a *fresh* upb message: reusing one message grows memory about four-fold.

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

from collections.abc import Iterator
from typing import IO, Any

import pyarrow as pa  # noqa: TID253 (parser modules are imported lazily by the registry)
from google.protobuf.message import DecodeError  # noqa: TID253

from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import BatchSink, Source, TraceError, TraceMeta
from tracekit.parsers.common.groups import merge_groups, read_process_groups
from tracekit.parsers.common.limits import MAX_RECORD_BYTES, UntypedRecords
from tracekit.parsers.common.names import CHAKRA_COMM_TYPES, PG_INIT_MARK
from tracekit.parsers.common.rows import CollectiveBuffer, CollectiveRow, finished
from tracekit.parsers.common.values import INT64, Checker
from tracekit.schema import arrow_schema

FORMAT = "chakra_et"

CHUNK_SIZE = 1 << 20
MAX_VARINT_BYTES = 10
FLUSH_ROWS = 65_536
# Nodes decoded before they become columns: bounds the memory held in upb messages.
DECODE_ROWS = 4_096
COLLECTIVE_FLUSH_ROWS = 8_192

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
    metadata nodes get per-node Python (collectives are rare).
    """

    def __init__(self, sink: BatchSink, fmt: str, flush_rows: int = FLUSH_ROWS, decode_rows: int = DECODE_ROWS) -> None:
        self.sink = sink
        self.meta = TraceMeta(format=fmt)
        self.checker = Checker(self.meta)
        self.flush_rows = flush_rows
        self.decode_rows = min(decode_rows, flush_rows)
        self.collectives = CollectiveBuffer(sink, min(flush_rows, COLLECTIVE_FLUSH_ROWS))
        self.pending: list[Any] = []
        self._ops_schema = arrow_schema("ops")
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

    def _write_ops(self) -> None:
        chunks, count = self._chunks, self._chunk_rows
        if not count:
            return
        self._chunks, self._chunk_rows = [], 0
        arrays = []
        for field in self._ops_schema:
            if field.name in chunks[0]:
                parts = [chunk[field.name] for chunk in chunks]
                arrays.append(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))
            else:
                arrays.append(pa.nulls(count, field.type))
        self.sink.write("ops", pa.RecordBatch.from_arrays(arrays, schema=self._ops_schema))

    def _special(self, node: Any, node_type: int) -> None:
        if node_type == METADATA_NODE:
            if PG_INIT_MARK in node.name:
                groups = read_process_groups(node.inputs.values, self.checker, _where(node))
                self.meta.process_groups = merge_groups(self.meta.process_groups, groups)
            return
        row = collective_row(node, node_type)
        if row is not None:
            self.collectives.append(finished(row, self.checker, _where(node)))

    def finish(self) -> TraceMeta:
        """Flush what is pending and return the file's metadata."""
        self.flush()
        self._write_ops()
        self.collectives.flush()
        return self.meta


class _TypeNames(dict[int, str]):
    """NodeType names; unknown integers (schema extensions) are kept as NODE_TYPE_<n>."""

    def __missing__(self, key: int) -> str:
        return f"NODE_TYPE_{key}"


_TYPE_NAMES = _TypeNames(NODE_TYPE_NAMES)
_SPECIAL_NODE_TYPES = frozenset((METADATA_NODE, *_COMM_NODE_TYPES))


def _where(node: Any) -> str:
    return f"node id {node.id}"


def collective_row(node: Any, node_type: int) -> CollectiveRow | None:
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
    return CollectiveRow(
        op_id=node.id,
        op_name=node.name,
        comm_type=comm_type,
        pg_name=_pg_name(attrs.get("pg_name")),
        peer=peer,
        in_bytes=_int_attr(attrs, "comm_size"),
        start_us=float(start) if start else None,
        duration_us=float(node.duration_micros),
        rf_id=_int_attr(attrs, "rf_id"),
        source="chakra_node",
    )


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


# ---------------------------------------------------------------------------------------------
# Parser


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one .et file (gzip handled by the source) into `sink`; see the module docstring."""
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
