"""What every parser shares: the source it reads, the sink it writes to, the metadata it returns.

Parsers know nothing of storage. `parse(source, sink)` reads one per-rank trace file, hands Arrow
record batches of the `ops` and `collectives` tables to `sink` as it goes (so memory stays bounded
by the batch size, not the file size), and returns a `TraceMeta`. The columns `job_id`, `rank` and
`trace_id` are left null: the ingest layer, which knows which job and rank a file is, fills them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Protocol

# A parser's `parse` raises TraceError for a file it cannot read (defined with the other errors).
from tracekit.errors import MAX_MESSAGE_CHARS, MAX_WHERE_CHARS, describe, one_line
from tracekit.errors import TraceError as TraceError

if TYPE_CHECKING:
    import pyarrow as pa


# A file with more to say than this gets a last warning saying so: warnings are one line each.
MAX_WARNINGS = 50


@dataclass(frozen=True)
class TraceWarning:
    """Something in a file that did not stop it being read; stored in `traces.warnings`.

    Cleaned like a TraceError's text (tracekit.errors.one_line): one short line, always writable.
    """

    message: str
    where: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", one_line(self.message, MAX_MESSAGE_CHARS))
        if self.where:
            object.__setattr__(self, "where", one_line(self.where, MAX_WHERE_CHARS))

    def describe(self, display: str) -> str:
        return describe(display, self.where, self.message)


class Source(Protocol):
    """One trace file's content. `open()` gives the decompressed bytes, size-bounded."""

    @property
    def display(self) -> str: ...

    @property
    def name(self) -> str: ...

    def open(self) -> IO[bytes]: ...

    def read(self) -> bytes: ...


class BatchSink(Protocol):
    def write(self, table: str, batch: pa.RecordBatch) -> None: ...


class FilesSink(Protocol):
    """Where a parser's `parse_many` hands its batches: `files[i]` is the index (in the sources
    given) of the file that row i of `batch` was read from."""

    def write(self, table: str, batch: pa.RecordBatch, files: pa.Array) -> None: ...


@dataclass
class ProcessGroup:
    pg_name: str
    pg_desc: str | None = None
    backend: str | None = None
    group_size: int | None = None
    # Global ranks in group order; an empty list means "the whole world" as PyTorch records it.
    ranks: list[int] = field(default_factory=list)


@dataclass
class TraceMeta:
    """What a parser learned about the file as a whole. Only values the content carries."""

    format: str
    schema_version: str | None = None
    rank: int | None = None
    world_size: int | None = None
    started_at: datetime | None = None
    # What to add to the file's times (start_us) for wall-clock µs since the Unix epoch, when it says
    # (Kineto: baseTimeNanoseconds / 1000; Flight Recorder: 0, its times are the wall clock): how a
    # log's entries are placed against a profiler trace of the same rank (tracekit.ingest.logs).
    epoch_offset_us: float | None = None
    node_count: int = 0
    process_groups: list[ProcessGroup] = field(default_factory=list)
    label: str | None = None
    # Group-local rank of this file in the default group, when only a collective's arguments
    # reveal it (PyTorch ET has no rank field); used when the file name carries no rank either.
    rank_hint: int | None = None
    warnings: list[TraceWarning] = field(default_factory=list)

    def warn(self, message: str, where: str | None = None) -> None:
        """Note something in the file that did not stop it being read (one line, at most 50)."""
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(TraceWarning(message, where))
        elif len(self.warnings) == MAX_WARNINGS:
            self.warnings.append(TraceWarning(f"more warnings not listed (only the first {MAX_WARNINGS} are kept)"))


class TableBuffer:
    """Accumulates rows of one data-model table and flushes them to the sink as record batches."""

    def __init__(self, table: str, sink: BatchSink, flush_rows: int = 65_536) -> None:
        self.table = table
        self.sink = sink
        self.flush_rows = flush_rows
        self._rows: list[dict[str, Any]] = []

    def append(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        from tracekit.schema import table_from_rows

        for batch in table_from_rows(self.table, self._rows).to_batches():
            self.sink.write(self.table, batch)
        self._rows = []


class MemorySink:
    """A sink that keeps every batch; for tests and notebooks."""

    def __init__(self) -> None:
        self.batches: dict[str, list[pa.RecordBatch]] = {}

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        self.batches.setdefault(table, []).append(batch)

    def table(self, name: str) -> pa.Table:
        import pyarrow as pa

        from tracekit.schema import arrow_schema

        return pa.Table.from_batches(self.batches.get(name, []), schema=arrow_schema(name))
