"""The ingest pipeline: discover → name jobs → parse in a process pool → finish each job → commit.

files → parsers → Arrow batches → staged Parquet → job finishing → dataset (Parquet + DuckDB).

What a run promises (the CLI turns it into exit codes):
- every input file is read, or gets an error row saying why (`report.errors`); a path that does not
  exist is an error of the run, never a job; an error row is not "already present": the next run
  reads the file again and replaces the row;
- a file already in the dataset is skipped, and the same file (name and content) found in another
  job is reported, not added twice;
- nothing found to ingest, or a manifest that cannot be read, raises InputError before anything is
  written; Ctrl-C before the commit raises Interrupted with the dataset as it was and its staging
  folder removed.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from tracekit import interrupts
from tracekit._version import __version__
from tracekit.dataset import Dataset, DatasetSummary, RunChanges, dataset_summary, missing_note
from tracekit.errors import InputError, Interrupted, TracekitError
from tracekit.ingest.discover import ARCHIVE, Discovery, InputFile, JobInfo, discover, with_data
from tracekit.ingest.identity import JobIds, join_host_and_device_archives
from tracekit.ingest.jobs import decide_rank, finish_job
from tracekit.ingest.worker import ParsedFile, Task, content_key, make_trace_id, parse_batch, set_known, start_worker

# Below this many files the pool's start-up costs more than it saves.
_POOL_THRESHOLD = 4
# A unit of work: files of one job, few enough to spread over the workers, many enough that a
# fleet of small rank files costs few tasks and few staged files.
_BATCH_FILES = 32
_BATCH_BYTES = 64 << 20


@dataclass(frozen=True)
class Progress:
    """Where a run is: stage 'parse' (`done` of `total` files, `name` the last one) then 'write'."""

    stage: str
    done: int = 0
    total: int = 0
    name: str = ""


ProgressCallback = Callable[[Progress], None]


@dataclass
class IngestReport:
    """What a run did, and what the dataset holds after it."""

    dataset: Path
    run_id: str
    files_seen: int = 0
    files_added: int = 0
    files_skipped: int = 0
    files_duplicate: int = 0
    # Inputs not read: paths that do not exist, then files with error rows (by job, rank, path).
    errors: list[str] = field(default_factory=list)
    # Notes that did not stop the run: jobs kept apart or joined, duplicates, manifest rows that
    # match nothing, files read with notes (also in traces.warnings).
    warnings: list[str] = field(default_factory=list)
    # One line per job of the run that lacks ranks: `job J: ranks 1–7 of 8 missing`.
    missing: list[str] = field(default_factory=list)
    jobs_touched: int = 0
    written: bool = False
    totals: DatasetSummary | None = None

    @property
    def ok(self) -> bool:
        """Every input was read."""
        return not self.errors

    @property
    def complete(self) -> bool:
        """No job of the run lacks ranks."""
        return not self.missing


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

    Files already in the dataset are skipped. Files that fail get a `traces` row with status
    'error' and the rest is ingested (`report.ok` is False). Raises InputError when there is
    nothing to ingest or the manifest cannot be read (nothing written), DatasetError when the
    dataset cannot be written, Interrupted on Ctrl-C before the commit (dataset unchanged).
    """
    dataset = Dataset(Path(out))
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    with interrupts.noted() as interrupted:
        try:
            found = discover(
                [Path(p) for p in paths], job=job, label=label, manifest=Path(manifest) if manifest else None
            )
            if not found.files:
                raise InputError(_nothing_to_ingest(paths, found))
            report = IngestReport(dataset.root, run_id, errors=list(found.errors), warnings=list(found.warnings))
            with dataset.writing():
                _run(dataset, found, report, workers, progress, interrupted)
            report.totals = dataset_summary(dataset)
        except TracekitError:
            raise
        except BaseException as exc:
            committed = dataset.committed_run == run_id
            if not committed and (isinstance(exc, KeyboardInterrupt) or interrupted()):
                raise Interrupted() from exc
            raise
    return report


def _nothing_to_ingest(paths: Sequence[str | Path], found: Discovery) -> str:
    if found.errors:
        return "nothing to ingest: " + "; ".join(found.errors)
    where = ", ".join(str(p) for p in paths)
    return (
        f"nothing to ingest: no trace files under {where} "
        "(looked for .et, .json and .pb files, plain or gzipped, and .tar/.tgz archives)"
    )


def _run(
    dataset: Dataset,
    found: Discovery,
    report: IngestReport,
    workers: int | None,
    progress: ProgressCallback | None,
    interrupted: Callable[[], bool],
) -> None:
    started = datetime.now(UTC)
    staging = dataset.staging_root / report.run_id
    try:
        dataset.new_staging(report.run_id)
        held = [(r["job_id"], r["source"]) for r in dataset.query_rows("select job_id, source from jobs", [])]
        ids = JobIds(held)
        _assign_jobs(found.files, ids)
        read = _read_all(dataset, found.files, staging, report, workers, progress, interrupted)
        by_job = read.by_job
        duplicates = read.duplicates + _drop_repeats(by_job)
        report.files_duplicate = len(duplicates)
        report.warnings += ids.warnings() + _duplicate_notes(dataset, duplicates)
        report.warnings += join_host_and_device_archives(
            by_job, _places(found.files), _ranks(by_job), ids, {job_id for job_id, _ in held}
        )
        changes = _finish(dataset, by_job, report.run_id)
        _report_rows(report, changes, by_job)
        if by_job:
            if progress:
                progress(Progress("write", report.files_seen, len(found.files)))
            _stop_if(interrupted)
            _commit(dataset, changes, report, started, staging)
        else:
            dataset.discard(staging)
        report.missing = _missing_ranks(dataset, list(by_job), read.skipped)
    except BaseException:
        report.written = dataset.committed_run == report.run_id
        if not report.written:
            with interrupts.deferred():  # a second Ctrl-C (or a library's echo of the first) waits
                dataset.discard(staging)
        raise


@dataclass
class _Read:
    by_job: dict[str, tuple[JobInfo, list[ParsedFile]]] = field(default_factory=dict)
    duplicates: list[ParsedFile] = field(default_factory=list)  # already in the dataset, in another job
    skipped: list[str] = field(default_factory=list)  # trace ids already in the dataset


def _read_all(
    dataset: Dataset,
    files: list[InputFile],
    staging: Path,
    report: IngestReport,
    workers: int | None,
    progress: ProgressCallback | None,
    interrupted: Callable[[], bool],
) -> _Read:
    """Parse every file, sorting out what is new, by job."""
    read = _Read()
    total = len(files)
    if progress:
        progress(Progress("parse", 0, total))
    parsing = _parse_all(files, staging, dataset.known_trace_ids(), _known_content(dataset), workers)
    with closing(parsing):  # an interrupt between two files stops the pool too
        for parsed, info in parsing:
            _stop_if(interrupted)
            report.files_seen += 1
            if progress:
                progress(Progress("parse", report.files_seen, total, parsed.name))
            if parsed.skipped:
                report.files_skipped += 1
                read.skipped.append(parsed.trace_id)
            elif parsed.duplicate:
                read.duplicates.append(parsed)
            else:
                read.by_job.setdefault(info.job_id, (info, []))[1].append(parsed)
    return read


def _commit(dataset: Dataset, changes: RunChanges, report: IngestReport, started: datetime, staging: Path) -> None:
    changes.run = {
        "run_id": report.run_id,
        "started_at": started,
        "committed_at": datetime.now(UTC),
        "files_seen": report.files_seen,
        "files_added": report.files_added,
        "files_failed": len([t for t in changes.traces if t["status"] == "error"]),
        "tracekit_version": __version__,
    }
    for row in changes.traces:
        row["ingested_at"] = changes.run["committed_at"]
    dataset.commit(changes, staging)
    report.written = True


def _stop_if(interrupted: Callable[[], bool]) -> None:
    """A Ctrl-C that came while an exception was being handled (so it did not raise) stops the run here."""
    if interrupted():
        raise KeyboardInterrupt


def _assign_jobs(files: list[InputFile], ids: JobIds) -> None:
    final: dict[JobInfo, JobInfo] = {}
    for item in files:
        job = final.get(item.job)
        if job is None:
            job = final[item.job] = ids.assign(item.job)
        item.job = job


def _known_content(dataset: Dataset) -> frozenset[str]:
    rows = dataset.query_rows("select path, sha256 from traces where status = 'ok' and sha256 is not null", [])
    return frozenset(content_key(_name_of(r["path"]), r["sha256"]) for r in rows)


def _name_of(path: str) -> str:
    """The file name of a `traces.path`: archive members are `archive.tgz!dir/name`."""
    return PurePosixPath(path.rsplit("!", 1)[-1]).name


def _drop_repeats(by_job: dict[str, tuple[JobInfo, list[ParsedFile]]]) -> list[ParsedFile]:
    """The same file (name and content) twice in one run: the first found is kept, the others dropped."""
    first: dict[str, ParsedFile] = {}
    for _, files in by_job.values():
        for parsed in files:
            if parsed.error is None:
                key = parsed.content_key
                if key not in first or parsed.seq < first[key].seq:
                    first[key] = parsed
    dropped = []
    for job_id in list(by_job):
        info, files = by_job[job_id]
        kept = [p for p in files if p.error is not None or first[p.content_key] is p]
        dropped += [p for p in files if p.error is None and first[p.content_key] is not p]
        if kept:
            by_job[job_id] = (info, kept)
        else:
            del by_job[job_id]
    for parsed in dropped:
        parsed.duplicate_of = first[parsed.content_key].display
    return dropped


def _duplicate_notes(dataset: Dataset, duplicates: list[ParsedFile]) -> list[str]:
    if not duplicates:
        return []
    held: dict[str, tuple[str, str]] = {}
    shas = sorted({p.sha256 for p in duplicates if p.duplicate_of is None})
    if shas:
        rows = dataset.query_rows(
            "select job_id, path, sha256 from traces where status = 'ok' and sha256 in (select unnest(?::VARCHAR[]))",
            [shas],
        )
        for row in rows:
            held.setdefault(content_key(_name_of(row["path"]), row["sha256"]), (row["job_id"], row["path"]))
    notes = []
    for parsed in sorted(duplicates, key=lambda p: p.seq):
        if parsed.duplicate_of is not None:
            where = f"{parsed.duplicate_of}, read in this run"
        else:
            job_id, path = held.get(parsed.content_key, ("?", "?"))
            where = f"{path} in job {job_id}"
        notes.append(f"{parsed.display}: the same file (name and content) as {where}; not added again")
    return notes


def _places(files: list[InputFile]) -> dict[str, set[str]]:
    """Every place files came from, by the folder holding it; a folder holding files counts itself."""
    places: dict[str, set[str]] = defaultdict(set)
    for job in {item.job for item in files}:
        if job.kind == ARCHIVE and job.parent_source is not None:
            places[job.parent_source].add(job.source)
        else:
            places[job.source].add(job.source)
    return places


def _ranks(by_job: dict[str, tuple[JobInfo, list[ParsedFile]]]) -> dict[str, int | None]:
    return {p.trace_id: decide_rank(p).rank for _, files in by_job.values() for p in files if p.error is None}


def _finish(dataset: Dataset, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]], run_id: str) -> RunChanges:
    changes = RunChanges(run_id)
    job_ids = sorted(by_job)
    existing = dataset.rows_by_job("traces", job_ids)
    groups = dataset.rows_by_job("process_groups", job_ids)
    largest = {
        r["job_id"]: r["largest"]
        for r in dataset.query_rows(
            "select job_id, max(group_size) as largest from collectives where job_id in "
            "(select unnest(?::VARCHAR[])) and not list_contains(inferred, 'group_size') group by job_id",
            [job_ids],
        )
    }
    for job_id in job_ids:
        info, parsed = by_job[job_id]
        result = finish_job(info, parsed, existing.get(job_id, []), groups.get(job_id, []), run_id, largest.get(job_id))
        changes.traces.extend(result.traces)
        changes.jobs.append(result.job)
        changes.process_groups.extend(result.process_groups)
        if result.collectives is not None:
            changes.collectives.append(result.collectives)
        changes.staged_ops.extend(dict.fromkeys(p.staged["ops"] for p in parsed if "ops" in p.staged))
    return changes


def _missing_ranks(dataset: Dataset, job_ids: list[str], trace_ids: list[str]) -> list[str]:
    """`job J: ranks 1–7 of 8 missing` for each job holding the run's inputs (added or already
    present), so that a run repeated gives the same answer."""
    columns = "select 1 from information_schema.columns where table_name = 'jobs' and column_name = 'ranks_missing'"
    if not dataset.query_rows(columns, []):
        return []  # written by an earlier version, and this run wrote nothing
    rows = dataset.query_rows(
        "select job_id, world_size, ranks_missing, missing_ranks from jobs where ranks_missing > 0 and "
        "(job_id in (select unnest(?::VARCHAR[])) or job_id in "
        "(select job_id from traces where trace_id in (select unnest(?::VARCHAR[])))) order by job_id",
        [job_ids, trace_ids],
    )
    return [missing_note(r["job_id"], r["ranks_missing"], r["missing_ranks"], r["world_size"]) for r in rows]


def _report_rows(
    report: IngestReport, changes: RunChanges, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]]
) -> None:
    report.files_added = sum(len(files) for _, files in by_job.values())
    report.jobs_touched = len(by_job)
    failed = sorted(
        (t for t in changes.traces if t["status"] == "error"),
        key=lambda t: (t["job_id"], t["rank"] is None, t["rank"] or 0, t["path"] or ""),
    )
    report.errors += [t["error"] for t in failed]
    report.warnings += [w for t in changes.traces for w in t.get("warnings") or []]


def _task(item: InputFile, staging: Path) -> Task:
    return Task(
        job_id=item.job.job_id,
        display=item.display,
        name=item.name,
        path=str(item.path) if item.path is not None and item.member is None else None,
        data=item.data,
        staging=str(staging),
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


def _parse_all(
    items: list[InputFile], staging: Path, known: frozenset[str], known_content: frozenset[str], workers: int | None
) -> Generator[tuple[ParsedFile, JobInfo]]:
    """Parse every input, in a process pool when there are enough of them; yield as they finish."""
    workers = workers or min(4, os.cpu_count() or 1)
    batches = _batches(with_data(_numbered(items)), staging)
    if len(items) < _POOL_THRESHOLD or workers <= 1:
        set_known(known, known_content)
        for refused, tasks, job in batches:
            yield from ((parsed, job) for parsed in refused + parse_batch(tasks))
        return
    with _pool(workers, known, known_content) as pool:
        pending: dict[Future[list[ParsedFile]], JobInfo] = {}
        for refused, tasks, job in batches:
            yield from ((parsed, job) for parsed in refused)
            if len(pending) >= 2 * workers:
                yield from _drain(pending, FIRST_COMPLETED)
            if tasks:
                with interrupts.blocked():  # a worker being spawned is never left half-started
                    pending[pool.submit(parse_batch, tasks)] = job
        yield from _drain(pending, None)


def _numbered(items: list[InputFile]) -> Iterator[InputFile]:
    for seq, item in enumerate(items):
        item.seq = seq
        yield item


def _batches(items: Iterable[InputFile], staging: Path) -> Iterator[tuple[list[ParsedFile], list[Task], JobInfo]]:
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
            refused.append(_refused(item))
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


@contextmanager
def _pool(workers: int, known: frozenset[str], known_content: frozenset[str]) -> Iterator[Executor]:
    import multiprocessing

    interrupts.start_forkserver_ignoring_sigint()
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=start_worker,
        initargs=(known, known_content, os.getpid()),
    )
    try:
        yield pool
    except BaseException:
        # Interrupted or failed: stop the workers now, so none writes into a staging folder that is
        # about to be removed.
        with interrupts.deferred():
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
