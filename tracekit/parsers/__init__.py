"""Trace parsers, one module per format, and the content sniffing that picks one.

Each parser module exposes `FORMAT` (its name in `traces.format`) and
`parse(source, sink) -> TraceMeta` (see tracekit/parsers/base.py).
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from tracekit.parsers.base import TraceError

FORMATS = ("chakra_et", "chakra_json", "pytorch_et", "kineto")

_SNIFF_BYTES = 1 << 16
_KINETO_KEYS = re.compile(rb'"(traceEvents|schemaVersion|deviceProperties|distributedInfo)"\s*:')
_PYTORCH_ET_KEYS = re.compile(rb'"(schema|nodes)"\s*:')
_CHAKRA_JSON_FIRST_KEYS = re.compile(
    rb'^\{\s*"(version|attr|id|name|type|ctrlDeps|dataDeps|startTimeMicros|durationMicros|inputs|outputs)"\s*:'
)


def parser_for(fmt: str) -> ModuleType:
    """The parser module of format `fmt` (imported on first use, so the CLI starts fast)."""
    if fmt not in FORMATS:
        raise KeyError(fmt)
    return importlib.import_module(f"tracekit.parsers.{fmt}")


def detect_format(head: bytes, name: str) -> str:
    """Name the format of a file from its first bytes (decompressed), the name only as a tie-break.

    Raises TraceError for empty files and content no parser reads.
    """
    stripped = head.lstrip()
    if not stripped:
        raise TraceError("empty file" if not head else "file holds only whitespace", "byte 0")
    if stripped[:1] == b"{":
        if _KINETO_KEYS.search(head):
            return "kineto"
        if _CHAKRA_JSON_FIRST_KEYS.match(stripped):
            return "chakra_json"
        if _PYTORCH_ET_KEYS.search(head):
            return "pytorch_et"
        if b'"workload_graph"' in head:
            raise TraceError("Chakra feeder JSON (workload_graph) is not a supported format", "byte 0")
        raise TraceError("JSON object of no known trace format", "byte 0")
    if stripped[:1] == b"[":
        raise TraceError("JSON array: not a known trace format (Chrome traces are read as objects)", "byte 0")
    if _looks_like_et(head) or name.endswith((".et", ".et.gz")):
        return "chakra_et"
    raise TraceError("unknown format: neither JSON nor a Chakra ET protobuf stream", "byte 0")


def _looks_like_et(head: bytes) -> bool:
    """A varint length, then a message whose first tag is a known Node/GlobalMetadata field.

    Zero-length records (all-default messages) are valid and skipped.
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
    return True
