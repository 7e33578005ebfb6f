"""Chakra execution traces (.et): varint-framed protobuf records, one file per rank.

Framing (tracekit.parsers.chakra.framing): each record is a varint length and a serialized
message, a `GlobalMetadata` first (except in early ASTRA-sim files), then `Node`s.

Reading (`parse`): the stream is framed into blocks of FLUSH_ROWS records (memory is bounded by the
block plus the largest record). Each block is validated by upb in one call (a 0x0A tag put before
each frame makes the block one `repeated Node` message), and its `ops` columns are decoded from the
wire bytes column-wise with numpy (tracekit.parsers.chakra.columns): no Python per node and field;
its `collectives` rows too, from the communication nodes' attributes (tracekit.parsers.chakra.collectives),
except around a row whose values the rules must null and note, which the reference path reads.
A block upb refuses, or whose records the column decoder leaves to upb (groups, known fields under
an unexpected wire type), is read record by record exactly as `parse_records` reads every file
(each record decoded into a *fresh* upb message: reusing one grows memory about four-fold), so both
give the same rows, warnings and errors, at the same record (tests/parsers/chakra/test_columns.py).
Count limits, bound checks and collective rows are taken DECODE_ROWS nodes at a time in both.
Rows follow the rulebook of tracekit.parsers.chakra.rules (shared with the chakra_jsonizer reader
through `NodeRows`, so both formats give identical rows).

Garbage is refused by count (tracekit.parsers.common.limits): a record length beyond
MAX_RECORD_BYTES, and records that carry no node type (empty ones included) beyond a small share
of the records read, so a zero-filled tail costs a few kilobytes of reading, not a row per byte.
Many small files are read together by tracekit.parsers.chakra.many.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError  # noqa: TID253 (parser modules are imported lazily by the registry)

from tracekit.parsers import et_def_pb2
from tracekit.parsers.base import BatchSink, Source, TraceError, TraceMeta
from tracekit.parsers.chakra.columns import decode_nodes, varints
from tracekit.parsers.chakra.framing import CHUNK_SIZE, Block, BlockReader, first_record_is_node, iter_records, where
from tracekit.parsers.chakra.rows import DECODE_ROWS, FLUSH_ROWS, NodeRows

FORMAT = "chakra_et"

# The column path reads blocks of records in chunks of this many CHUNK_SIZE.
BLOCK_CHUNKS = 8
# Blocks of fewer records are read record by record: the column path's fixed cost (a few dozen
# numpy and Arrow calls) outweighs its gain below about a thousand records (a fleet's rank files
# hold a few dozen).
COLUMN_MIN_RECORDS = 1_024


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


NODE_BLOCK = _node_block_class()
# The tags of TracekitNodeBlock's fields put before each frame: nodes = 1, metadata = 2 (wire type 2).
NODE_TAG, METADATA_TAG = 0x0A, 0x12


def _read_block(rows: NodeRows, block: Block) -> None:
    """One block of Node records: validated by upb in one call, columns from chakra.columns; a
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
        nodes = NODE_BLOCK.FromString(np.insert(segment, starts, 0x0A).tobytes()).nodes
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
    column-wise decoder (tracekit.parsers.chakra.columns); a block that upb refuses, or whose
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
            if first.frames and not first_record_is_node(first.payload(0)):
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
                if index == 0 and not first_record_is_node(payload):
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
