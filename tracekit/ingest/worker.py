"""Parse one trace file into staged Parquet: the unit of work that runs in the process pool.

A worker returns only small metadata (a `ParsedFile`), never tables: the `ops` and `collectives`
batches go straight to Parquet files in the run's staging folder, so memory is bounded by one
file's batches whatever the fleet's size.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import describe
from tracekit.parsers import read_trace
from tracekit.parsers.base import TraceError, TraceMeta
from tracekit.sources import BytesSource, FileSource

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

_RANK_WORD = re.compile(r"(?:rank|worker)[-_.]?(\d+)", re.IGNORECASE)
# Larger trailing numbers are pids or timestamps, not ranks.
_MAX_RANK_IN_NAME = 1 << 20
_NAME_TOKENS = re.compile(r"[._-]")
# A trailing number after one of these words counts steps or versions, not ranks: trace_step.100,
# llama.v3.1, iter_20.
_NOT_RANK_WORDS = re.compile(r"(?:step|steps|iter|iteration|epoch|batch|it|v|ver|version)\d*", re.IGNORECASE)
_STRIP_SUFFIXES = (".gz", ".json", ".et", ".pb", ".trace", ".pt")


@dataclass
class Task:
    job_id: str
    display: str
    name: str
    path: str | None
    data: bytes | None
    staging: str
    seq: int = 0


@dataclass
class ParsedFile:
    job_id: str
    display: str
    name: str
    trace_id: str
    sha256: str
    size_bytes: int
    skipped: bool = False
    # The same file (name and content) is already in the dataset, in another job: not parsed.
    duplicate: bool = False
    # ... or was read earlier in the same run (its display): not added.
    duplicate_of: str | None = None
    format: str | None = None
    meta: TraceMeta | None = None
    error: str | None = None
    staged: dict[str, str] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    # The largest group any collective of the file spans: the job's world is at least this big.
    max_group_size: int | None = None
    # Position in discovery order: decides which of two identical files in one run is kept.
    seq: int = 0

    @property
    def content_key(self) -> str:
        return content_key(self.name, self.sha256)


# Trace ids (and content keys) of the files the dataset holds: set once per process (the pool's
# initializer), not per task, since a fleet's set is large and every task would otherwise carry a copy.
_known: frozenset[str] = frozenset()
_known_content: frozenset[str] = frozenset()


def set_known(known: frozenset[str], known_content: frozenset[str] = frozenset()) -> None:
    global _known, _known_content
    _known, _known_content = known, known_content


def content_key(name: str, sha256: str) -> str:
    """Identity of a file whatever job it is in: its name and its content."""
    return hashlib.sha256(f"{name}\0{sha256}".encode()).hexdigest()[:20]


def start_worker(known: frozenset[str], known_content: frozenset[str], ingest_pid: int) -> None:
    """Pool initializer: the files already known, and a watch on the ingest process.

    Ctrl-C is the parent's to handle (it stops the workers itself); any other death of the
    parent ends the worker through the watch.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_known(known, known_content)
    threading.Thread(target=_exit_with, args=(ingest_pid,), name="tracekit-watch-ingest", daemon=True).start()


def _exit_with(pid: int) -> None:
    """Exit this worker as soon as the ingest process `pid` is gone, whatever killed it.

    A worker killed with its ingest matters beyond the worker: pool workers hold the pipes of the
    task queue and the forkserver's liveness pipe, so while one waits for work that will never
    come, the forkserver and the resource tracker stay alive too.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # the ingest is already gone, or the kernel has no pidfds (before Linux 5.3)
        while _alive(pid):
            time.sleep(0.5)
    else:
        select.select([fd], [], [])  # readable once the process has exited
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rank_from_name(name: str) -> int | None:
    """The rank a file name carries: `rank-3`, `rank_3`, `<prefix>.3.et`, `dlrm_eg_3.json`.

    A trailing number is a rank only when it follows a word or a single number (`job-000012.3`),
    not a run of numbers (a version `2.1.0`, a date `2024-03-01`), a version word (`v3.1`) or a step
    counter (`step.100`, `iter_2`).
    """
    match = _RANK_WORD.search(name)
    if match:
        return int(match.group(1))
    stem = name
    changed = True
    while changed:
        changed = False
        for suffix in _STRIP_SUFFIXES:
            if stem.endswith(suffix):
                stem, changed = stem[: -len(suffix)], True
    tokens = _NAME_TOKENS.split(stem)
    if len(tokens) < 2 or not tokens[-1].isdigit() or _NOT_RANK_WORDS.fullmatch(tokens[-2]):
        return None
    numbers = next((i for i, t in enumerate(reversed(tokens)) if not t.isdigit()), len(tokens))
    if numbers >= 3:
        return None
    rank = int(tokens[-1])
    return rank if rank < _MAX_RANK_IN_NAME else None


def make_trace_id(job_id: str, name: str, sha256: str) -> str:
    """Stable id: the same content under the same name in the same job is the same trace."""
    return hashlib.sha256(f"{job_id}\0{name}\0{sha256}".encode()).hexdigest()[:20]


def _hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


# Rows of one trace held in memory before it spills to staged files of its own.
SPILL_ROWS = 262_144


class BatchWriter:
    """One staged Parquet file per table for a batch of traces, so that a fleet of small rank files
    does not become a fleet of small staged files (each costs a writer here and a file open at
    commit)."""

    def __init__(self, staging: Path, name: str) -> None:
        self.staging = staging
        self.name = name
        self.writers: dict[str, pq.ParquetWriter] = {}

    def path(self, table: str) -> Path:
        return self.staging / table / f"{self.name}.parquet"

    def append(self, table: str, batches: list[pa.RecordBatch]) -> str:
        import pyarrow.parquet as pq

        if table not in self.writers:
            self.path(table).parent.mkdir(parents=True, exist_ok=True)
            self.writers[table] = pq.ParquetWriter(self.path(table), batches[0].schema, compression="zstd")
        for batch in batches:
            self.writers[table].write_batch(batch)
        return str(self.path(table))

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


class ParquetSink:
    """Receives one trace's batches, stamped with its trace id.

    They are held in memory until the trace parses to the end (a file that fails halfway must add
    no rows) and then go to the batch's shared files; a trace too big to hold spills to staged files
    of its own instead, which are deleted if it fails.
    """

    def __init__(self, staging: Path, trace_id: str, shared: BatchWriter) -> None:
        self.staging = staging
        self.trace_id = trace_id
        self.shared = shared
        self.buffered: dict[str, list[pa.RecordBatch]] = {}
        self.buffered_rows = 0
        self.own: BatchWriter | None = None
        self.paths: dict[str, str] = {}
        self.rows: dict[str, int] = {}
        self.max_group_size: int | None = None

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        index = batch.schema.get_field_index("trace_id")
        batch = batch.set_column(index, "trace_id", pa.array([self.trace_id] * batch.num_rows, pa.string()))
        self.rows[table] = self.rows.get(table, 0) + batch.num_rows
        if table == "collectives":
            largest = pc.max(batch.column("group_size")).as_py()
            if largest is not None and (self.max_group_size is None or largest > self.max_group_size):
                self.max_group_size = largest
        if self.own is not None:
            self.paths[table] = self.own.append(table, [batch])
            return
        self.buffered.setdefault(table, []).append(batch)
        self.buffered_rows += batch.num_rows
        if self.buffered_rows > SPILL_ROWS:
            self.own = BatchWriter(self.staging, self.trace_id)
            self._flush_to(self.own)

    def _flush_to(self, writer: BatchWriter) -> None:
        for table, batches in self.buffered.items():
            self.paths[table] = writer.append(table, batches)
        self.buffered.clear()

    def commit(self) -> None:
        """The trace parsed to the end: its rows join the dataset's staged files."""
        if self.own is not None:
            self.own.close()
        else:
            self._flush_to(self.shared)

    def discard(self) -> None:
        self.buffered.clear()
        if self.own is not None:
            self.own.close()
            for table in self.own.writers:
                self.own.path(table).unlink(missing_ok=True)
        self.paths.clear()
        self.rows.clear()
        self.max_group_size = None


def parse_batch(tasks: list[Task]) -> list[ParsedFile]:
    """Parse several files (of one job) into shared staged files: the unit of work of the pool."""
    if not tasks:
        return []
    import uuid

    shared = BatchWriter(Path(tasks[0].staging), f"batch-{uuid.uuid4().hex}")
    try:
        return [parse_task(task, shared) for task in tasks]
    finally:
        shared.close()


def parse_task(task: Task, shared: BatchWriter) -> ParsedFile:
    """Hash, skip if known, sniff the format, parse to staged Parquet. Never raises for bad input."""
    if task.data is not None:
        sha, size = hashlib.sha256(task.data).hexdigest(), len(task.data)
        source: FileSource | BytesSource = BytesSource(task.data, task.display, task.name)
    else:
        assert task.path is not None
        try:
            sha, size = _hash_file(Path(task.path))
        except OSError as exc:
            return ParsedFile(
                task.job_id,
                task.display,
                task.name,
                make_trace_id(task.job_id, task.name, ""),
                "",
                0,
                error=f"{task.display}: cannot read ({exc.strerror})",
                seq=task.seq,
            )
        source = FileSource(Path(task.path), task.display)
    trace_id = make_trace_id(task.job_id, task.name, sha)
    result = ParsedFile(task.job_id, task.display, task.name, trace_id, sha, size, seq=task.seq)
    if result.trace_id in _known:
        result.skipped = True
        return result
    if result.content_key in _known_content:
        result.duplicate = True
        return result
    sink = ParquetSink(Path(task.staging), result.trace_id, shared)
    try:
        # Only TraceError for anything the file holds (a parser's own bug is a ParserBug).
        result.format, result.meta = read_trace(source, sink)
        sink.commit()
        result.staged, result.rows = dict(sink.paths), dict(sink.rows)
        result.max_group_size = sink.max_group_size
    except TraceError as exc:
        sink.discard()
        result.error = exc.describe(task.display)
    except Exception as exc:  # staging its rows failed: the rest of the batch must not be lost
        sink.discard()
        last = traceback.extract_tb(exc.__traceback__)[-1]
        result.error = describe(
            task.display,
            None,
            f"internal error while staging its rows ({type(exc).__name__}: {exc}; "
            f"{Path(last.filename).name}:{last.lineno}); please report",
        )
    return result
