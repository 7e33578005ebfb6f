"""Parse one trace file in memory, without a dataset: for notebooks, tests and converters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import TraceError
from tracekit.parsers import read_trace
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
    """Detect the format of one file (or of `data`) and parse it.

    Raises TraceError, and nothing else, for any content (tracekit.parsers.read_trace), its text
    naming the file (`path`, or `name`) and the place: `trace.0.et at record 12: truncated`; a
    `ParserBug` (a TraceError too) is a parser's bug, to be reported.
    """
    try:
        source: FileSource | BytesSource = (
            source_for(path) if path is not None else BytesSource(data or b"", name, name)
        )
        sink = MemorySink()
        fmt, meta = read_trace(source, sink)
    except TraceError as exc:
        exc.file = str(path) if path is not None else name
        raise
    return ParsedTrace(fmt, meta, sink.table("ops"), sink.table("collectives"))


def set_memory_budget(size: str | int) -> int:
    """Set the memory one file's parse may take, in this process and the parse workers it starts
    (TRACEKIT_MEMORY_BUDGET): bytes, or text such as "512M" or "2G". A JSON trace longer than a fifth
    of it is read in pieces (Kineto). Returns the budget in bytes; ValueError for no size."""
    import os

    from tracekit.parsers.common.limits import MEMORY_BUDGET_ENV, parse_size

    value = parse_size(str(size))
    if value is None:
        raise ValueError(f"{size!r} is no size (write e.g. 512M, 2G)")
    os.environ[MEMORY_BUDGET_ENV] = str(value)
    return value
