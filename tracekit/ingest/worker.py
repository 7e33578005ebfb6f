"""Parse a batch of trace files into staged Parquet: the unit of work an executor runs.

A `Batch` carries everything its files need (their bytes or paths, the folder to stage into, the
keys of the files the dataset already holds for them), so a task runs the same in a local process
pool, a Dask worker on another machine, or inline. It returns only small metadata per file (a
`ParsedFile`), never tables: each file's `ops` and `collectives` rows are gathered in memory with
the batch's other files and written once per batch and table, so a fleet of small rank files costs
a few staged files, not one per file. A file too big to hold spills to staged files of its own.

Each file is read once: its bytes are hashed and parsed from memory. A file larger than
`READ_WHOLE_BYTES` is parsed as a stream, and hashed by a thread meanwhile (hashlib releases the GIL)
when the dataset holds nothing it could be (its hash decides only its trace id then); else it is
hashed first, so that a file already held is not parsed. Staged rows carry `_seq`, the file's
position in discovery order, instead of job_id, rank and trace_id: the commit fills those in once
the job is finished (tracekit.store.commit).

A parser (tracekit.parsers.formats) may offer `parse_many(sources, sink) -> list[TraceMeta |
TraceError | None]` besides `parse(source, sink)`: it reads several files at once and hands the
sink batches holding rows of any of them, with an array naming each row's file (its index in
`sources`); see `FilesSink`. The worker uses it for the files of a batch that share its format, so
a vectorised reader amortises its set-up over many small files. A None outcome leaves the file to
`parse`, one by one (a big file then spills to staged files of its own instead of being held).
"""

from __future__ import annotations

import hashlib
import os
import re
import traceback
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import describe
from tracekit.ingest.staged_writer import FLUSH_ROWS, InThread, StagedWriter
from tracekit.parsers import parse_as, parser_for, sniff_format
from tracekit.parsers.base import FilesSink as FilesSink
from tracekit.parsers.base import Source, TraceError, TraceMeta
from tracekit.parsers.formats import ParseMany
from tracekit.sources import BytesSource, FileSource

if TYPE_CHECKING:
    import pyarrow as pa

_RANK_WORD = re.compile(r"(?:rank|worker)[-_.]?(\d+)", re.IGNORECASE)
# Larger trailing numbers are pids or timestamps, not ranks.
_MAX_RANK_IN_NAME = 1 << 20
_NAME_TOKENS = re.compile(r"[._-]")
# A trailing number after one of these words counts steps or versions, not ranks: trace_step.100,
# llama.v3.1, iter_20.
_NOT_RANK_WORDS = re.compile(r"(?:step|steps|iter|iteration|epoch|batch|it|v|ver|version)\d*", re.IGNORECASE)
_STRIP_SUFFIXES = (".gz", ".json", ".et", ".pb", ".trace", ".pt")

# Files up to this size are read into memory once (hashed and parsed from the same bytes).
READ_WHOLE_BYTES = 64 << 20
# Rows of one file held in memory before it spills to staged files of its own.
SPILL_ROWS = 262_144
# Columns the commit fills in from the finished job; staged rows carry SEQ_COLUMN instead.
FILLED_LATER = ("job_id", "rank", "trace_id")
SEQ_COLUMN = "_seq"


@dataclass(slots=True)
class Task:
    """One input file: on disk (`path`) or in memory (`data`, an archive member)."""

    job_id: str
    display: str
    name: str
    path: str | None
    data: bytes | None
    seq: int = 0


@dataclass
class Batch:
    """Files parsed by one task, staged into `staging` (a folder every worker can write)."""

    tasks: list[Task]
    staging: str
    # Trace ids of the files the dataset holds for these files' jobs, and content keys of the files
    # it holds under these files' names: a file found in either is not parsed again.
    known: frozenset[str] = frozenset()
    known_content: frozenset[str] = frozenset()


@dataclass(slots=True)
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
    # The staged files holding the rows of this file's batch, by table (shared by the batch's files).
    staged: dict[str, list[str]] = field(default_factory=dict)
    # The largest group any collective of the file spans: the job's world is at least this big.
    max_group_size: int | None = None
    # Position in discovery order: decides which of two identical files in one run is kept, and
    # names the file's staged rows (SEQ_COLUMN).
    seq: int = 0

    @property
    def content_key(self) -> str:
        return content_key(self.name, self.sha256)


def content_key(name: str, sha256: str) -> str:
    """Identity of a file whatever job it is in: its name and its content."""
    return hashlib.sha256(f"{name}\0{sha256}".encode()).hexdigest()[:20]


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


class _BatchRows:
    """Rows of the batch's files that parsed to the end, written out in large pieces."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.shared = StagedWriter(staging, f"batch-{uuid.uuid4().hex}")
        self.held: dict[str, list[pa.RecordBatch]] = {}
        self.held_rows = 0
        self.spilled: list[tuple[str, str]] = []

    def add(self, tables: dict[str, list[pa.RecordBatch]], rows: int) -> None:
        for table, batches in tables.items():
            self.held.setdefault(table, []).extend(batches)
        self.held_rows += rows
        if self.held_rows >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        for table, batches in self.held.items():
            self.shared.write(table, batches)
        self.held.clear()
        self.held_rows = 0

    def close(self) -> dict[str, list[str]]:
        self.flush()
        staged: dict[str, list[str]] = {}
        for table, path in self.shared.close() + self.spilled:
            staged.setdefault(table, []).append(path)
        return staged


class _FileRows:
    """One file's rows, stamped with its seq, held until it parses to the end (a file that fails
    halfway adds no rows); past SPILL_ROWS they go to staged files of its own."""

    def __init__(self, batch: _BatchRows, seq: int) -> None:
        self.batch = batch
        self.seq = seq
        self.held: dict[str, list[pa.RecordBatch]] = {}
        self.rows = 0
        self.own: StagedWriter | None = None
        self.max_group_size: int | None = None

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        self.add(table, _staged(batch, _seq_array(self.seq, batch.num_rows)))

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        if table == "collectives":
            self._note_groups(batch)
        if self.own is not None:
            self.own.write(table, [batch])
            return
        self.held.setdefault(table, []).append(batch)
        self.rows += batch.num_rows
        if self.rows > SPILL_ROWS:
            # Written while the file parses on: its errors come out in this file's parse, at `commit`.
            self.own = StagedWriter(self.batch.staging, f"file-{uuid.uuid4().hex}", in_thread=True)
            for name, batches in self.held.items():
                self.own.write(name, batches)
            self.held.clear()

    def _note_groups(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        self.note_group_size(pc.max(batch.column("group_size")).as_py())

    def note_group_size(self, largest: int | None) -> None:
        """A collective of the file spans `largest` ranks (None: unknown)."""
        if largest is not None and (self.max_group_size is None or largest > self.max_group_size):
            self.max_group_size = largest

    def commit(self) -> None:
        """The file parsed to the end: its rows join the batch's."""
        if self.own is not None:
            self.batch.spilled += self.own.close()
        else:
            self.batch.add(self.held, self.rows)
        self.held = {}

    def discard(self) -> None:
        self.held = {}
        if self.own is not None:
            self.own.remove()
        self.max_group_size = None


def _seq_array(seq: int, rows: int) -> pa.Array:
    import pyarrow as pa

    return pa.repeat(pa.scalar(seq, pa.int64()), rows)


def _staged(batch: pa.RecordBatch, seqs: pa.Array) -> pa.RecordBatch:
    """A parser's batch as staged: the columns filled later dropped, the file's seq added."""
    names = [n for n in batch.schema.names if n not in FILLED_LATER]
    return batch.select(names).append_column(SEQ_COLUMN, seqs)


@dataclass
class BatchResult:
    """A batch's files, and what parsing them cost where they were parsed."""

    files: list[ParsedFile]
    cpu_seconds: float
    # The peak resident memory of the process that parsed them, in bytes (so far in its life).
    peak_rss: int


@contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """Run the cycle collector every 100,000 new objects instead of every 700, then restore.

    Parsing makes millions of short-lived objects and no cycles worth collecting early; at the
    default threshold the collector took about 20% of an ingest's CPU (200 generated jobs, one
    process: 8.3 s of user time, 6.65 s at this threshold, 6.6 s with the collector off).
    """
    import gc

    before = gc.get_threshold()
    gc.set_threshold(100_000, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def parse_batch(batch: Batch) -> BatchResult:
    """Parse a batch's files into shared staged files; never raises for bad input."""
    import resource
    import time

    started = time.process_time()
    with fewer_gc_passes():
        files = _parse_batch(batch)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
    return BatchResult(files, time.process_time() - started, peak)


def _parse_batch(batch: Batch) -> list[ParsedFile]:
    rows = _BatchRows(Path(batch.staging))
    results: list[ParsedFile] = []
    pending: dict[str, list[tuple[ParsedFile, Source]]] = {}
    hashing: list[tuple[ParsedFile, InThread[tuple[str, int]]]] = []
    _read_ahead(batch.tasks)
    for task in batch.tasks:
        parsed, source, hash_later = _open(task, batch)
        results.append(parsed)
        if hash_later is not None:
            hashing.append((parsed, hash_later))
        if source is not None and parsed.format is not None:
            pending.setdefault(parsed.format, []).append((parsed, source))
    for fmt, files in pending.items():
        _parse_format(fmt, files, rows)
    for parsed, hash_later in hashing:
        _take_hash(parsed, hash_later)
    staged = rows.close()
    for parsed in results:
        parsed.staged = staged
    return results


def _read_ahead(tasks: list[Task]) -> None:
    """Ask the kernel to start reading every file of the batch (up to READ_WHOLE_BYTES of each) at
    once. Read one after another, files not in the page cache keep the worker waiting on the disk
    file after file: the 2,000-job fleet read cold took 32.6 and 25.5 s, 22.2 and 21.8 s with this
    (20-21 s warm, where it costs nothing measurable: 3.5 us a file)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for task in tasks:
        if task.path is None:
            continue
        try:
            fd = os.open(task.path, os.O_RDONLY)
        except OSError:
            continue  # reading it reports the error
        try:
            advise(fd, 0, READ_WHOLE_BYTES, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # only advice
        finally:
            os.close(fd)


def _open(task: Task, batch: Batch) -> tuple[ParsedFile, Source | None, InThread[tuple[str, int]] | None]:
    """Read and hash the file, decide whether it is new, name its format: (result, source to parse,
    the hash still being computed)."""
    try:
        # When the dataset holds nothing the file could be, a long file is hashed while it parses.
        data, sha, size = _read(task, hash_later=not batch.known and not batch.known_content)
    except OSError as exc:
        failed = ParsedFile(
            task.job_id,
            task.display,
            task.name,
            make_trace_id(task.job_id, task.name, ""),
            "",
            0,
            error=f"{task.display}: cannot read ({exc.strerror or exc})",
            seq=task.seq,
        )
        return failed, None, None
    if sha is None:
        return _open_hashing(task)
    parsed = ParsedFile(
        task.job_id, task.display, task.name, make_trace_id(task.job_id, task.name, sha), sha, size, seq=task.seq
    )
    if parsed.trace_id in batch.known:
        parsed.skipped = True
        return parsed, None, None
    if parsed.content_key in batch.known_content:
        parsed.duplicate = True
        return parsed, None, None
    source: Source = (
        BytesSource(data, task.display, task.name)
        if data is not None
        else FileSource(Path(task.path or ""), task.display)
    )
    return *_sniffed(parsed, source), None


def _sniffed(parsed: ParsedFile, source: Source) -> tuple[ParsedFile, Source | None]:
    try:
        parsed.format = sniff_format(source)
    except TraceError as exc:
        parsed.error = exc.describe(parsed.display)
        return parsed, None
    return parsed, source


def _open_hashing(task: Task) -> tuple[ParsedFile, Source | None, InThread[tuple[str, int]]]:
    """A long file's result before its hash is known (`_take_hash` fills it in), its source, its hash."""
    hashing = InThread(_hash_file, task.path or "")
    parsed = ParsedFile(task.job_id, task.display, task.name, "", "", 0, seq=task.seq)
    return *_sniffed(parsed, FileSource(Path(task.path or ""), task.display)), hashing


def _take_hash(parsed: ParsedFile, hashing: InThread[tuple[str, int]]) -> None:
    """Wait for the hash of a file hashed while it parsed: its sha256, size and trace id; a file that
    could not be read to the end is an error (its staged rows are left out: they belong to no ok file)."""
    try:
        parsed.sha256, parsed.size_bytes = hashing.result()
    except OSError as exc:
        parsed.error = f"{parsed.display}: cannot read ({exc.strerror or exc})"
        parsed.meta, parsed.format, parsed.sha256 = None, None, ""
    parsed.trace_id = make_trace_id(parsed.job_id, parsed.name, parsed.sha256)


def _read(task: Task, hash_later: bool = False) -> tuple[bytes | None, str | None, int]:
    """(the bytes, when held in memory; their SHA-256, None for a file too long to hold when
    `hash_later`; their size)."""
    if task.data is not None:
        return task.data, hashlib.sha256(task.data).hexdigest(), len(task.data)
    assert task.path is not None
    with open(task.path, "rb") as f:
        size = _size(f)
        if size <= READ_WHOLE_BYTES:
            data = f.read()
            return data, hashlib.sha256(data).hexdigest(), len(data)
        if hash_later:
            return None, None, size
        return None, *_hash_stream(f)


def _hash_file(path: str) -> tuple[str, int]:
    with open(path, "rb") as f:
        return _hash_stream(f)


def _hash_stream(f: Any) -> tuple[str, int]:
    """(SHA-256, size) of what `f` holds from here on, read in pieces into one buffer (a new buffer
    per piece would cost the kernel a page fault per page read)."""
    digest = hashlib.sha256()
    size = 0
    with memoryview(bytearray(1 << 20)) as buffer:
        while got := f.readinto(buffer):
            digest.update(buffer[:got])
            size += got
    return digest.hexdigest(), size


def _size(f: Any) -> int:
    return os.fstat(f.fileno()).st_size


def _parse_format(fmt: str, files: list[tuple[ParsedFile, Source]], rows: _BatchRows) -> None:
    parse_many = parser_for(fmt).parse_many
    if parse_many is not None and len(files) > 1:
        try:
            files = _parse_together(parse_many, files, rows)
        except Exception:  # a bug in the many-file path: read the files one by one, to name the culprit
            pass
    for parsed, source in files:
        _parse_one(fmt, parsed, source, rows)


def _parse_one(fmt: str, parsed: ParsedFile, source: Source, rows: _BatchRows) -> None:
    sink = _FileRows(rows, parsed.seq)
    try:
        # Only TraceError for anything the file holds (a parser's own bug is a ParserBug).
        parsed.meta = parse_as(fmt, source, sink)
        sink.commit()
        parsed.max_group_size = sink.max_group_size
    except TraceError as exc:
        sink.discard()
        parsed.error = exc.describe(parsed.display)
    except Exception as exc:  # staging its rows failed: the rest of the batch must not be lost
        sink.discard()
        last = traceback.extract_tb(exc.__traceback__)[-1]
        parsed.error = describe(
            parsed.display,
            None,
            f"internal error while staging its rows ({type(exc).__name__}: {exc}; "
            f"{Path(last.filename).name}:{last.lineno}); please report",
        )


class _ManyRows:
    """The FilesSink of one `parse_many` call: rows kept by table, split by file once it returns."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, pa.RecordBatch, pa.Array]] = []

    def write(self, table: str, batch: pa.RecordBatch, files: pa.Array) -> None:
        self.parts.append((table, batch, files))


def _parse_together(
    parse_many: ParseMany, files: list[tuple[ParsedFile, Source]], rows: _BatchRows
) -> list[tuple[ParsedFile, Source]]:
    """The files read by `parse_many`, their rows added; returns those it left to `parse`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sink = _ManyRows()
    outcomes: Sequence[TraceMeta | TraceError | None] = parse_many([source for _, source in files], sink)
    if len(outcomes) != len(files):
        raise ValueError("parse_many returned one outcome per file")
    ok = pa.array([isinstance(o, TraceMeta) for o in outcomes], pa.bool_())
    seqs = pa.array([parsed.seq for parsed, _ in files], pa.int64())
    per_file = [_FileRows(rows, parsed.seq) for parsed, _ in files]
    held: dict[str, list[pa.RecordBatch]] = {}
    count = 0
    for table, batch, index in sink.parts:
        keep = pc.take(ok, index)
        batch, index = batch.filter(keep), pc.filter(index, keep)
        staged = _staged(batch, pc.take(seqs, index))
        if table == "collectives":
            _note_group_sizes(per_file, batch.column("group_size"), index)
        held.setdefault(table, []).append(staged)
        count += staged.num_rows
    rows.add(held, count)
    left = []
    for (parsed, source), outcome, file_rows in zip(files, outcomes, per_file, strict=True):
        if isinstance(outcome, TraceMeta):
            parsed.meta = outcome
            parsed.max_group_size = file_rows.max_group_size
        elif isinstance(outcome, TraceError):
            parsed.error = outcome.describe(parsed.display)
        else:
            left.append((parsed, source))
    return left


def _note_group_sizes(per_file: list[_FileRows], sizes: pa.Array, files: pa.Array) -> None:
    """Each file's largest collective group among rows of many files (`files`: each row's file)."""
    import pyarrow as pa

    if sizes.null_count == len(sizes):
        return
    largest = pa.table({"file": files, "size": sizes}).group_by("file").aggregate([("size", "max")])
    for file, size in zip(largest.column("file").to_pylist(), largest.column("size_max").to_pylist(), strict=True):
        per_file[file].note_group_size(size)
