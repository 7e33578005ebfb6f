"""Parse one trace file in memory, without a dataset: for notebooks, tests and converters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.parsers import detect_format, parser_for
from tracekit.parsers.base import MemorySink, TraceMeta
from tracekit.sources import BytesSource, FileSource, source_for

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class ParsedTrace:
    format: str
    meta: TraceMeta
    ops: pa.Table
    collectives: pa.Table


def parse_file(path: str | Path | None = None, *, data: bytes | None = None, name: str = "trace") -> ParsedTrace:
    """Detect the format of one file (or of `data`) and parse it. Raises TraceError on bad input."""
    source: FileSource | BytesSource = source_for(path) if path is not None else BytesSource(data or b"", name, name)
    with source.open() as stream:
        head = stream.read(1 << 16)
    fmt = detect_format(head, source.name)
    sink = MemorySink()
    meta = parser_for(fmt).parse(source, sink)
    return ParsedTrace(fmt, meta, sink.table("ops"), sink.table("collectives"))
