"""The ingest pipeline: discover → parse in a process pool → finish each job → commit.

files → parsers → Arrow batches → staged Parquet → job finishing → dataset (Parquet + DuckDB).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from tracekit._version import __version__
from tracekit.dataset import Dataset, DatasetSummary, RunChanges, dataset_summary
from tracekit.ingest.discover import InputFile, JobInfo, discover
from tracekit.ingest.jobs import finish_job
from tracekit.ingest.worker import ParsedFile, Task, make_trace_id, parse_batch, set_known, start_worker

# Below this many files the pool's start-up costs more than it saves.
_POOL_THRESHOLD = 4
# A unit of work: files of one job, few enough to spread over the workers, many enough that a
# fleet of small rank files costs few tasks and few staged files.
_BATCH_FILES = 32
_BATCH_BYTES = 64 << 20

ProgressCallback = Callable[[ParsedFile], None]


@dataclass
class IngestReport:
    """What a run did, and what the dataset holds after it."""

    dataset: Path
    run_id: str
    files_seen: int = 0
    files_added: int = 0
    files_skipped: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    jobs_touched: int = 0
    totals: DatasetSummary | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def ingest(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    job: str | None = None,
    label: str | None = None,
    manifest: str | Path | None = None,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
) -> IngestReport:
    """Ingest trace files, folders and tar/tgz archives into the dataset at `out`.

    Files already in the dataset (same job, name and content) are skipped. Files that fail get a
    `traces` row with status 'error'; the rest is ingested, and `report.ok` is False.
    """
    dataset = Dataset(Path(out))
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    report = IngestReport(dataset.root, run_id)
    started = datetime.now(UTC)
    with dataset.writing():
        staging = dataset.new_staging(run_id)
        known = dataset.known_trace_ids()
        inputs = discover([Path(p) for p in paths], job=job, label=label, manifest=Path(manifest) if manifest else None)
        by_job: dict[str, tuple[JobInfo, list[ParsedFile]]] = {}
        sources: dict[str, set[str]] = {}
        for parsed, info in _parse_all(inputs, staging, known, workers):
            sources.setdefault(info.job_id, set()).add(info.source)
            report.files_seen += 1
            if progress:
                progress(parsed)
            if parsed.skipped:
                report.files_skipped += 1
                continue
            by_job.setdefault(info.job_id, (info, []))[1].append(parsed)
        changes = _finish(dataset, by_job, run_id)
        report.files_added = sum(len(files) for _, files in by_job.values())
        report.errors = [t["error"] for t in changes.traces if t["status"] == "error"]
        report.warnings = [
            f"job {job_id}: files from {len(found)} places were put in one job ({', '.join(sorted(found))}); "
            "name jobs with --job or a manifest if they are different jobs"
            for job_id, found in sorted(sources.items())
            if len(found) > 1 and job is None
        ]
        report.jobs_touched = len(by_job)
        if by_job:
            changes.run = {
                "run_id": run_id,
                "started_at": started,
                "committed_at": datetime.now(UTC),
                "files_seen": report.files_seen,
                "files_added": report.files_added,
                "files_failed": len([t for t in changes.traces if t["status"] == "error" and t.get("path")]),
                "tracekit_version": __version__,
            }
            for row in changes.traces:
                row["ingested_at"] = changes.run["committed_at"]
            dataset.commit(changes, staging)
        else:
            dataset.discard(staging)
    report.totals = dataset_summary(dataset)
    return report


def _finish(dataset: Dataset, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]], run_id: str) -> RunChanges:
    changes = RunChanges(run_id)
    job_ids = sorted(by_job)
    existing = dataset.rows_by_job("traces", job_ids)
    groups = dataset.rows_by_job("process_groups", job_ids)
    for job_id in job_ids:
        info, parsed = by_job[job_id]
        result = finish_job(info, parsed, existing.get(job_id, []), groups.get(job_id, []), run_id)
        changes.traces.extend(result.traces)
        changes.jobs.append(result.job)
        changes.process_groups.extend(result.process_groups)
        if result.collectives is not None:
            changes.collectives.append(result.collectives)
        changes.staged_ops.extend(dict.fromkeys(p.staged["ops"] for p in parsed if "ops" in p.staged))
    return changes


def _task(item: InputFile, staging: Path) -> Task:
    return Task(
        job_id=item.job.job_id,
        display=item.display,
        name=item.name,
        path=str(item.path) if item.path is not None else None,
        data=item.data,
        staging=str(staging),
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
    )


def _parse_all(
    inputs: Iterator[InputFile], staging: Path, known: frozenset[str], workers: int | None
) -> Iterator[tuple[ParsedFile, JobInfo]]:
    """Parse every input, in a process pool when there are enough of them; yield as they finish."""
    head = list(islice(inputs, _POOL_THRESHOLD))
    workers = workers or min(4, os.cpu_count() or 1)
    batches = _batches(_chain(head, inputs), staging, known)
    if len(head) < _POOL_THRESHOLD or workers <= 1:
        set_known(known)
        for refused, tasks, job in batches:
            yield from ((parsed, job) for parsed in refused + parse_batch(tasks))
        return
    with _pool(workers, known) as pool:
        pending: dict[Future[list[ParsedFile]], JobInfo] = {}
        for refused, tasks, job in batches:
            yield from ((parsed, job) for parsed in refused)
            if len(pending) >= 2 * workers:
                yield from _drain(pending, FIRST_COMPLETED)
            if tasks:
                pending[pool.submit(parse_batch, tasks)] = job
        yield from _drain(pending, None)


def _batches(
    items: Iterator[InputFile], staging: Path, known: frozenset[str]
) -> Iterator[tuple[list[ParsedFile], list[Task], JobInfo]]:
    """Files in batches of one job, up to _BATCH_FILES files or _BATCH_BYTES bytes each.

    Yields (files refused before parsing, tasks to parse, job).
    """
    refused: list[ParsedFile] = []
    tasks: list[Task] = []
    size = 0
    job: JobInfo | None = None
    for item in items:
        if job is not None and (item.job != job or len(tasks) >= _BATCH_FILES or size >= _BATCH_BYTES):
            yield refused, tasks, job
            refused, tasks, size = [], [], 0
        job = item.job
        if item.error:
            parsed = _refused(item)
            parsed.skipped = parsed.trace_id in known
            refused.append(parsed)
            continue
        tasks.append(_task(item, staging))
        size += len(item.data) if item.data is not None else _file_size(item.path)
    if job is not None:
        yield refused, tasks, job


def _file_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _drain(pending: dict[Future[list[ParsedFile]], JobInfo], until: str | None) -> Iterator[tuple[ParsedFile, JobInfo]]:
    done, _ = wait(list(pending), return_when=until or "ALL_COMPLETED")
    for future in done:
        job = pending.pop(future)
        yield from ((parsed, job) for parsed in future.result())


def _chain(head: list[InputFile], rest: Iterator[InputFile]) -> Iterator[InputFile]:
    yield from head
    yield from rest


@contextmanager
def _pool(workers: int, known: frozenset[str]) -> Iterator[Executor]:
    import multiprocessing

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=start_worker,
        initargs=(known, os.getpid()),
    )
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
