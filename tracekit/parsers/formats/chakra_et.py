"""Chakra execution traces (.et): varint-framed protobuf records; read by tracekit.parsers.chakra.et."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, FilesSink, Source, TraceError, TraceMeta


def looks_like_et(head: bytes) -> bool:
    """A varint length, then a message whose first tag is a known Node/GlobalMetadata field.

    Zero-length records (all-default messages) are valid and skipped; a head of nothing else is
    not taken for a stream (detect_format refuses all-zero heads before this is asked).
    """
    pos = 0
    while pos < len(head):
        length, shift = 0, 0
        while True:
            if pos >= len(head) or shift > 63:
                return False
            byte = head[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if length:
            if pos >= len(head):
                return False
            field, wire = head[pos] >> 3, head[pos] & 7
            # GlobalMetadata: 1 version (len), 2 attr (len); Node: 1 id (varint) ... 10 attr (len).
            return 1 <= field <= 10 and wire in (0, 2)
    return False


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers.chakra import et

    return et.parse(source, sink)


def parse_many(sources: Sequence[Source], sink: FilesSink) -> list[TraceMeta | TraceError | None]:
    from tracekit.parsers.chakra import many

    return many.parse_many(sources, sink)


PARSER = Parser(
    name="chakra_et",
    summary="Chakra execution traces (.et): varint-framed protobuf records, one file per rank",
    content="binary",
    priority=10,
    sniff=looks_like_et,
    suffixes=(".et", ".et.gz"),
    role="graph",
    parse=parse,
    parse_many=parse_many,
    ungrouped_is_world=True,
)
