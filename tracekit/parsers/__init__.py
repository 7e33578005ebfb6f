"""Trace parsers, one per format, the content sniffing that picks one, and the guard around both.

Each format is a `Parser` of the registry tracekit.parsers.formats (its name in `traces.format`,
its sniff rule, `parse(source, sink) -> TraceMeta`; see tracekit/parsers/base.py). Callers read a
file through `read_trace`, which raises nothing but TraceError for whatever the file holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.errors import ParserBug
from tracekit.parsers.base import BatchSink, Source, TraceError, TraceMeta
from tracekit.parsers.formats import Parser, parsers, sniff_order

if TYPE_CHECKING:
    import pyarrow as pa

# The format is told from this many first bytes (decompressed).
SNIFF_BYTES = 1 << 16
# A head starting with "[" is no JSON object: before it is refused as a JSON array, the sniff rules of
# binary formats below this priority (text logs, whose lines a launcher tags `[rank0]:` or `[0] `) are
# asked; Chakra ET's varint rule, which some JSON arrays meet, is not.
TEXT_BEFORE_ARRAYS = 10


def format_names() -> tuple[str, ...]:
    """The name of every format a parser reads, in the registry's order."""
    return tuple(parsers())


def parser_for(fmt: str) -> Parser:
    """The parser of format `fmt` (its reader is imported on first parse, so the CLI starts fast)."""
    return parsers()[fmt]


def read_trace(source: Source, sink: BatchSink) -> tuple[str, TraceMeta]:
    """Detect the format of `source` and parse it into `sink`: (format, metadata).

    Raises TraceError, and only TraceError, for any content (see `parse_as`).
    """
    fmt = sniff_format(source)
    return fmt, parse_as(fmt, source, sink)


def sniff_format(source: Source) -> str:
    """The format of `source`, told from its first bytes; raises only TraceError."""
    try:
        with source.open() as stream:
            head = stream.read(SNIFF_BYTES)
        return detect_format(head, source.name)
    except TraceError:
        raise
    except OSError as exc:
        raise TraceError(f"cannot read ({exc.strerror or exc})") from exc
    except Exception as exc:
        raise ParserBug.of(exc, None) from exc


def parse_as(fmt: str, source: Source, sink: BatchSink) -> TraceMeta:
    """Parse `source` as format `fmt` into `sink`.

    Raises TraceError, and only TraceError, for any content: a file that cannot be opened or read
    too (OSError). An exception of a parser's own is a bug; it is raised as `ParserBug` (a
    TraceError naming the parser and the line of code), so that one file never costs a run.
    What the sink raises (the caller's storage) passes through unchanged: it is no fault of the file.
    """
    try:
        return parser_for(fmt).parse(source, _SinkGuard(sink))
    except TraceError:
        raise
    except _SinkFailed as failed:
        raise failed.error from failed.error.__cause__
    except OSError as exc:
        raise TraceError(f"cannot read ({exc.strerror or exc})") from exc
    except MemoryError:
        raise TraceError("out of memory while parsing") from None
    except Exception as exc:
        raise ParserBug.of(exc, fmt) from exc


class _SinkFailed(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _SinkGuard:
    """Marks what the caller's sink raises, so that `read_trace` does not blame it on the file."""

    def __init__(self, sink: BatchSink) -> None:
        self._sink = sink

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        try:
            self._sink.write(table, batch)
        except Exception as exc:
            raise _SinkFailed(exc) from exc


def detect_format(head: bytes, name: str) -> str:
    """Name the format of a file from its first bytes (decompressed), the name only as a tie-break.

    A JSON object is asked of the JSON parsers' sniff rules, any other head of the binary ones',
    each in the registry's priority order; a binary head no rule takes is the format whose
    suffix the name ends with.

    Raises TraceError for empty files and content no parser reads. A run of zero bytes frames
    valid empty Chakra records, yet no writer starts a trace with them: a file whose first bytes
    are all zero (preallocated and never written, half copied) is refused here, whatever its name.
    """
    stripped = head.lstrip()
    if not stripped:
        raise TraceError("empty file" if not head else "file holds only whitespace", "byte 0")
    if not head.strip(b"\0"):
        if len(head) < SNIFF_BYTES:
            size = f"{len(head):,} byte{'s' if len(head) > 1 else ''}"
            raise TraceError(f"file holds only zero bytes ({size}): zero-filled, not a trace", "byte 0")
        raise TraceError(f"first {SNIFF_BYTES >> 10} KiB are zero bytes: zero-filled, not a trace", "byte 0")
    if stripped[:1] == b"{":
        for parser in sniff_order("json"):
            if parser.sniff(head):
                return parser.name
        if b'"workload_graph"' in head:
            raise TraceError("Chakra feeder JSON (workload_graph) is not a supported format", "byte 0")
        raise TraceError("JSON object of no known trace format", "byte 0")
    if stripped[:1] == b"[":
        for parser in sniff_order("binary"):
            if parser.priority < TEXT_BEFORE_ARRAYS and parser.sniff(head):
                return parser.name
        raise TraceError("JSON array: not a known trace format (Chrome traces are read as objects)", "byte 0")
    binary = sniff_order("binary")
    for parser in binary:
        if parser.sniff(head):
            return parser.name
    for parser in binary:
        if parser.names_file(name):
            return parser.name
    raise TraceError("unknown format: not JSON, a Chakra ET protobuf stream or a Flight Recorder pickle", "byte 0")
