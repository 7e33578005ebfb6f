"""Handing the run's files to the parse workers: in batches (`Known` gives each batch what the
dataset already holds that its files could be), on the executor when there are enough of them,
with a round's worth of files kept in flight while the ingest process finishes jobs.

A dead worker (the OOM killer, a segfault in a C extension) costs its batch, not the run: the batch
is parsed again in a fresh worker, each of its files alone, and a file whose worker dies again gets an
error row saying how (`worker died: signal 9 (SIGKILL)`). Batches lost only because the death broke
their pool are handed out again as they were. A batch's rows are those of the result it returns, so
a dead worker's staged files (written halfway, or whole but never returned) are never committed,
and each file's rows come from the one parse whose result came back."""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from tracekit import executors, interrupts
from tracekit.errors import describe
from tracekit.ingest.discover import InputFile, with_data
from tracekit.ingest.finishing import FINISH_FILES
from tracekit.ingest.worker import Batch, BatchResult, ParsedFile, Task, content_key, make_trace_id, parse_batch

if TYPE_CHECKING:
    from tracekit.ingest.report import IngestReport
    from tracekit.store.dataset import Dataset

# Below this many files the pool's start-up costs more than it saves.
_POOL_THRESHOLD = 4
# A unit of work: files in discovery order (of one job or several), up to this many files or bytes:
# many enough that a fleet of small rank files costs few tasks and few staged files, few enough to
# spread over the workers (a run of few files gets smaller batches, so that every worker has some).
_BATCH_FILES = 256
_BATCH_BYTES = 64 << 20
# Batches per worker, at least, when a run has few files.
_BATCHES_PER_WORKER = 4
# Files handed to the workers and not yet received, at most: about a round's worth, so the workers
# parse on while this process finishes a round (with a few batches in flight, they sat idle
# through every round: 30,000 jobs took 234 s to parse where each worker needed 140 s of CPU).
_IN_FLIGHT_FILES = FINISH_FILES


@dataclass(frozen=True)
class Where:
    """Where files are parsed: `executor` (tracekit.executors) with `workers` processes."""

    workers: int | None
    executor: str | None


@dataclass
class Known:
    """The files the dataset already holds that a run's files could be: their trace ids by job, and
    their content keys (with sizes) by file name. Each batch is given the part its files can match,
    so no worker ever holds the keys of a whole fleet."""

    ids: dict[str, set[str]] = field(default_factory=dict)
    content: dict[str, list[tuple[int | None, str]]] = field(default_factory=dict)

    @classmethod
    def load(cls, dataset: Dataset, files: list[InputFile]) -> Known:
        known = cls()
        job_ids = sorted({item.job.job_id for item in files})
        rows = dataset.query_rows(
            "select job_id, trace_id from traces where status = 'ok' and job_id in (select unnest(?::VARCHAR[]))",
            [job_ids],
        )
        for row in rows:
            known.ids.setdefault(row["job_id"], set()).add(row["trace_id"])
        names = sorted({item.name for item in files})
        rows = dataset.query_rows(
            "select path, size_bytes, sha256 from traces where status = 'ok' and sha256 is not null "
            "and regexp_extract(path, '[^/!]*$') in (select unnest(?::VARCHAR[]))",
            [names],
        )
        for row in rows:
            name = name_of(row["path"])
            known.content.setdefault(name, []).append((row["size_bytes"], content_key(name, row["sha256"])))
        return known

    def batch(self, tasks: list[Task], sizes: list[int | None], staging: Path) -> Batch:
        ids: set[str] = set()
        for job_id in {task.job_id for task in tasks}:
            ids |= self.ids.get(job_id, set())
        content = {
            key
            for task, size in zip(tasks, sizes, strict=True)
            for held_size, key in self.content.get(task.name, ())
            if size is None or held_size == size
        }
        return Batch(tasks, str(staging), frozenset(ids), frozenset(content))


def name_of(path: str) -> str:
    """The file name of a `traces.path`: archive members are `archive.tgz!dir/name`."""
    return PurePosixPath(path.rsplit("!", 1)[-1]).name


def _task(item: InputFile) -> Task:
    return Task(
        job_id=item.job.job_id,
        display=item.display,
        name=item.name,
        path=item.path if item.member is None else None,
        data=item.data,
        seq=item.seq,
    )


def _refused(item: InputFile) -> ParsedFile:
    """A file refused before parsing (unsafe archive member, corrupt archive)."""
    return ParsedFile(
        item.job.job_id,
        item.display,
        item.name,
        make_trace_id(item.job.job_id, item.display, ""),
        "",
        0,
        error=item.error,
        seq=item.seq,
    )


def parse_all(
    items: list[InputFile], staging: Path, known: Known, where: Where, report: IngestReport
) -> Generator[ParsedFile]:
    """Parse every input, on the executor when there are enough of them; yield as they finish."""
    workers = where.workers or min(4, os.cpu_count() or 1)
    inline = executors.is_local(where.executor) and (len(items) < _POOL_THRESHOLD or workers <= 1)
    per_batch = max(1, min(_BATCH_FILES, math.ceil(len(items) / (workers * _BATCHES_PER_WORKER))))
    batches = _batches(with_data(_numbered(items)), staging, known, per_batch)
    if inline:
        for refused, batch in batches:
            yield from refused
            if batch is not None:
                yield from _account(report, parse_batch(batch))
        return
    with executors.open_executor(where.executor, workers) as run:
        pending = _InFlight(run)
        for refused, batch in batches:
            yield from refused
            while len(pending) >= 2 * run.slots and sum(pending.values()) >= _IN_FLIGHT_FILES:
                yield from _drain(pending, FIRST_COMPLETED, report)
            if batch is not None:
                pending.submit(batch)
        while pending:
            yield from _drain(pending, None, report)
        report.warnings += pending.survived()


def _account(report: IngestReport, result: BatchResult) -> list[ParsedFile]:
    report.parse_cpu_seconds += result.cpu_seconds
    report.parse_peak_rss = max(report.parse_peak_rss, result.peak_rss)
    return result.files


def _numbered(items: list[InputFile]) -> Iterator[InputFile]:
    for seq, item in enumerate(items):
        item.seq = seq
        yield item


def _batches(
    items: Iterable[InputFile], staging: Path, known: Known, per_batch: int
) -> Iterator[tuple[list[ParsedFile], Batch | None]]:
    """Files in batches of up to `per_batch` files or _BATCH_BYTES bytes, in discovery order.

    Yields (files refused before parsing, the batch to parse or None).
    """
    tasks: list[Task] = []
    sizes: list[int | None] = []
    total = 0
    for item in items:
        if item.error:
            yield [_refused(item)], None
            continue
        size = (
            len(item.data) if item.data is not None else item.size if item.size is not None else _file_size(item.path)
        )
        tasks.append(_task(item))
        sizes.append(size)
        total += size or 0
        if len(tasks) >= per_batch or total >= _BATCH_BYTES:
            yield [], known.batch(tasks, sizes, staging)
            tasks, sizes, total = [], [], 0
    if tasks:
        yield [], known.batch(tasks, sizes, staging)


def _file_size(path: str | None) -> int | None:
    try:
        return os.stat(path).st_size if path is not None else None
    except OSError:
        return None


def _drain(pending: dict[Future[BatchResult], int], until: str | None, report: IngestReport) -> Iterator[ParsedFile]:
    """Take back the batches done (`until`: FIRST_COMPLETED, or None for all); `pending` is an _InFlight."""
    assert isinstance(pending, _InFlight)
    done, _ = wait(pending, return_when=until or "ALL_COMPLETED")
    for future in done:
        batch, retried = pending.taken_back(future)
        # Looked at outside an `except` block: a Ctrl-C while a broken pool is replaced raises at once.
        if future.exception() is not None and (death := pending.run.death(future)) is not None:
            yield from pending.lost(batch, retried, death)
            continue
        yield from _account(report, future.result())


class _InFlight(dict[Future[BatchResult], int]):
    """The batches handed to the executor and not taken back yet: how many files each holds, by its
    future; what each holds and whether it is a retry (`sent`); the deaths its files survived."""

    def __init__(self, run: executors.Slots) -> None:
        super().__init__()
        self.run = run
        self.sent: dict[Future[BatchResult], tuple[Batch, bool]] = {}
        # Each worker's death: how, the first file it was parsing, the seqs of all of them.
        self.deaths: list[tuple[str, str, list[int]]] = []
        self.failed: set[int] = set()  # the seqs of the files given error rows for deaths
        # Files to parse alone, waiting for the one in flight (where a death may blame bystanders).
        self.waiting: deque[Batch] = deque()

    def submit(self, batch: Batch, retried: bool = False) -> None:
        with interrupts.blocked():  # a worker being spawned is never left half-started
            future = self.run.submit(parse_batch, batch)
        self[future] = len(batch.tasks)
        self.sent[future] = (batch, retried)

    def retry_alone(self, batch: Batch) -> None:
        """Parse a file of a dead worker's batch again; one at a time unless the executor blames
        exactly (else another file's deaths would count against a file only queued beside it)."""
        if self.run.blames_exactly or not any(retried for _, retried in self.sent.values()):
            self.submit(batch, retried=True)
        else:
            self.waiting.append(batch)

    def taken_back(self, future: Future[BatchResult]) -> tuple[Batch, bool]:
        """Forget a batch done (returned, failed or lost); the next file waiting to be parsed alone goes out."""
        del self[future]
        batch, retried = self.sent.pop(future)
        if retried and self.waiting:
            self.submit(self.waiting.popleft(), retried=True)
        return batch, retried

    def lost(self, batch: Batch, retried: bool, death: executors.Death) -> list[ParsedFile]:
        """A batch lost to a worker's death: handed out again, its files alone if its own worker died
        (or each an error row, if that was already their retry)."""
        if death.how is None:  # only lost with its pool
            self.submit(batch, retried)
            return []
        if retried:
            self.failed.update(task.seq for task in batch.tasks)
            return [_died(task, death.how) for task in batch.tasks]
        self.deaths.append((death.how, batch.tasks[0].display, [task.seq for task in batch.tasks]))
        for task in batch.tasks:
            self.retry_alone(Batch([task], batch.staging, batch.known, batch.known_content))
        return []

    def survived(self) -> list[str]:
        """A warning for each death whose files were all read when parsed again (the others' error rows say it)."""
        notes = []
        for how, first, seqs in self.deaths:
            if not self.failed.intersection(seqs):
                if len(seqs) == 1:
                    notes.append(f"{first}: the worker parsing it died ({how}); parsed again, it was read")
                else:
                    notes.append(
                        f"{first} and {len(seqs) - 1} more files: the worker parsing them died ({how}); "
                        "parsed again, each was read"
                    )
        return notes


def _died(task: Task, how: str) -> ParsedFile:
    """The error row of a file whose worker died parsing it, in its batch and again alone."""
    return ParsedFile(
        task.job_id,
        task.display,
        task.name,
        make_trace_id(task.job_id, task.name, ""),
        "",
        0,
        error=describe(task.display, None, f"worker died: {how}, again when the file was parsed alone"),
        seq=task.seq,
    )
