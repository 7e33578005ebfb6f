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

import math
import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from tracekit import executors, interrupts
from tracekit._version import __version__
from tracekit.dataset import Dataset, DatasetSummary, RunChanges, dataset_summary, missing_note
from tracekit.errors import InputError, Interrupted, TracekitError
from tracekit.ingest.discover import ARCHIVE, Discovery, InputFile, JobInfo, discover, with_data
from tracekit.ingest.identity import JobIds, join_host_and_device_archives
from tracekit.ingest.jobs import decide_rank, finish_job
from tracekit.ingest.worker import (
    Batch,
    BatchResult,
    ParsedFile,
    Task,
    content_key,
    fewer_gc_passes,
    make_trace_id,
    parse_batch,
)
from tracekit.parsers.base import ProcessGroup

# Below this many files the pool's start-up costs more than it saves.
_POOL_THRESHOLD = 4
# A unit of work: files in discovery order (of one job or several), up to this many files or bytes:
# many enough that a fleet of small rank files costs few tasks and few staged files, few enough to
# spread over the workers (a run of few files gets smaller batches, so that every worker has some).
_BATCH_FILES = 256
_BATCH_BYTES = 64 << 20
# Batches per worker, at least, when a run has few files.
_BATCHES_PER_WORKER = 4
# Jobs are finished in rounds of about this many files: each round's rows become Arrow tables and
# its parsed files are let go, so a fleet's rows never exist as Python objects all at once.
_FINISH_FILES = 65_536


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
    # What the parsing cost, in the workers (wherever they ran): CPU seconds, the largest peak RSS.
    parse_cpu_seconds: float = 0.0
    parse_peak_rss: int = 0

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
    executor: str | None = None,
    progress: ProgressCallback | None = None,
) -> IngestReport:
    """Ingest trace files, folders and tar/tgz archives into the dataset at `out`.

    `executor` says where files are parsed (tracekit.executors): None or "local" for a process pool
    of `workers` processes (default: the CPU count, at most 4), "dask-local" for a Dask LocalCluster
    of as many, "dask://HOST:PORT" for a Dask scheduler's workers. Files already in the dataset are
    skipped. Files that fail get a `traces` row with status
    'error' and the rest is ingested (`report.ok` is False). Raises InputError when there is
    nothing to ingest or the manifest cannot be read (nothing written), DatasetError when the
    dataset cannot be written, Interrupted on Ctrl-C before the commit (dataset unchanged).
    """
    executors.check(executor)
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
            with dataset.writing(), fewer_gc_passes():
                _run(dataset, found, report, _Where(workers, executor), progress, interrupted)
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


@dataclass(frozen=True)
class _Where:
    """Where files are parsed: `executor` (tracekit.executors) with `workers` processes."""

    workers: int | None
    executor: str | None


def _run(
    dataset: Dataset,
    found: Discovery,
    report: IngestReport,
    where: _Where,
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
        known = _Known.load(dataset, found.files)
        read = _read_all(found.files, staging, known, report, where, progress, interrupted)
        by_job = read.by_job
        duplicates = read.duplicates + _drop_repeats(by_job)
        report.files_duplicate = len(duplicates)
        report.warnings += ids.warnings() + _duplicate_notes(dataset, duplicates)
        total, places = len(found.files), _places(found.files)
        found.files.clear()  # read: let a fleet's file records go before its rows are finished
        report.warnings += join_host_and_device_archives(
            by_job, places, _archive_ranks(by_job), ids, {job_id for job_id, _ in held}
        )
        touched = sorted(by_job)
        report.files_added = sum(len(files) for _, files in by_job.values())
        report.jobs_touched = len(touched)
        changes = _finish(dataset, by_job, report)  # empties by_job
        if touched:
            if progress:
                progress(Progress("write", report.files_seen, total))
            _stop_if(interrupted)
            _commit(dataset, changes, report, started, staging)
        else:
            dataset.discard(staging)
        report.missing = _missing_ranks(dataset, touched, read.skipped)
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
    shared: _Shared = field(default_factory=lambda: _Shared())


def _read_all(
    files: list[InputFile],
    staging: Path,
    known: _Known,
    report: IngestReport,
    where: _Where,
    progress: ProgressCallback | None,
    interrupted: Callable[[], bool],
) -> _Read:
    """Parse every file, sorting out what is new, by job."""
    read = _Read()
    total = len(files)
    if progress:
        progress(Progress("parse", 0, total))
    parsing = _parse_all(files, staging, known, where, report)
    with closing(parsing):  # an interrupt between two files stops the pool too
        for parsed in parsing:
            item = files[parsed.seq]
            info = item.job
            parsed.display, parsed.name = item.display, item.name  # one copy of each string per file
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
                read.shared.intern(parsed)
                read.by_job.setdefault(info.job_id, (info, []))[1].append(parsed)
    return read


@dataclass
class _Shared:
    """One object for values that many files of a fleet repeat (every rank of a job records the same
    process groups, the same schema version), so a run of a million files holds each once."""

    groups: dict[tuple[object, ...], ProcessGroup] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def intern(self, parsed: ParsedFile) -> None:
        parsed.job_id = self.texts.setdefault(parsed.job_id, parsed.job_id)
        meta = parsed.meta
        if meta is None:
            return
        if meta.schema_version is not None:
            meta.schema_version = self.texts.setdefault(meta.schema_version, meta.schema_version)
        meta.process_groups = [
            self.groups.setdefault((g.pg_name, g.pg_desc, g.backend, g.group_size, tuple(g.ranks)), g)
            for g in meta.process_groups
        ]


def _commit(dataset: Dataset, changes: RunChanges, report: IngestReport, started: datetime, staging: Path) -> None:
    changes.run = {
        "run_id": report.run_id,
        "started_at": started,
        "committed_at": datetime.now(UTC),
        "files_seen": report.files_seen,
        "files_added": report.files_added,
        "files_failed": _failed(changes),
        "tracekit_version": __version__,
    }
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


@dataclass
class _Known:
    """The files the dataset already holds that a run's files could be: their trace ids by job, and
    their content keys (with sizes) by file name. Each batch is given the part its files can match,
    so no worker ever holds the keys of a whole fleet."""

    ids: dict[str, set[str]] = field(default_factory=dict)
    content: dict[str, list[tuple[int | None, str]]] = field(default_factory=dict)

    @classmethod
    def load(cls, dataset: Dataset, files: list[InputFile]) -> _Known:
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
            name = _name_of(row["path"])
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


def _archive_ranks(by_job: dict[str, tuple[JobInfo, list[ParsedFile]]]) -> dict[str, int | None]:
    """The rank of each file of an archive job (the jobs that may be joined), by trace id."""
    return {
        p.trace_id: decide_rank(p).rank
        for info, files in by_job.values()
        if info.kind == ARCHIVE
        for p in files
        if p.error is None
    }


def _finish(dataset: Dataset, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]], report: IngestReport) -> RunChanges:
    """Every job's rows, finished in rounds of about _FINISH_FILES files, each job let go from
    `by_job` once finished; the errors and notes of the files go to `report`."""
    changes = RunChanges(report.run_id)
    staged: dict[str, dict[str, None]] = {}
    failed: list[dict[str, Any]] = []
    round_ids: list[str] = []
    round_files = 0
    with closing(_Held(dataset)) as held:
        for job_id in sorted(by_job):
            round_ids.append(job_id)
            round_files += len(by_job[job_id][1])
            if round_files >= _FINISH_FILES:
                _finish_round(held, {j: by_job.pop(j) for j in round_ids}, changes, staged, failed, report)
                round_ids, round_files = [], 0
        if round_ids:
            _finish_round(held, {j: by_job.pop(j) for j in round_ids}, changes, staged, failed, report)
    changes.staged = {table: list(paths) for table, paths in staged.items()}
    failed.sort(key=lambda t: (t["job_id"], t["rank"] is None, t["rank"] or 0, t["path"] or ""))
    report.errors += [t["error"] for t in failed]
    return changes


class _Held:
    """What the dataset holds for jobs being finished, through one connection for every round."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.con = dataset.connect() if dataset.exists() else None

    def rows(self, table: str, job_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        return self.dataset.rows_by_job(table, job_ids, self.con) if self.con is not None else {}

    def largest_groups(self, job_ids: list[str]) -> dict[str, int]:
        if self.con is None:
            return {}
        rows = self.dataset.query_rows(
            "select job_id, max(group_size) as largest from collectives where job_id in "
            "(select unnest(?::VARCHAR[])) and not list_contains(inferred, 'group_size') group by job_id",
            [job_ids],
            self.con,
        )
        return {r["job_id"]: r["largest"] for r in rows}

    def close(self) -> None:
        if self.con is not None:
            self.con.close()  # before the commit, which opens the file to write


def _finish_round(
    held: _Held,
    jobs: dict[str, tuple[JobInfo, list[ParsedFile]]],
    changes: RunChanges,
    staged: dict[str, dict[str, None]],
    failed: list[dict[str, Any]],
    report: IngestReport,
) -> None:
    job_ids = list(jobs)
    existing = held.rows("traces", job_ids)
    groups = held.rows("process_groups", job_ids)
    largest = held.largest_groups(job_ids)
    traces: list[dict[str, Any]] = []
    files: list[tuple[int, str, str, int | None, int | None, bool]] = []
    for job_id in job_ids:
        info, parsed = jobs[job_id]
        result = finish_job(
            info, parsed, existing.get(job_id, []), groups.get(job_id, []), changes.run_id, largest.get(job_id)
        )
        traces.extend(result.traces)
        changes.jobs.append(result.job)
        changes.process_groups.extend(result.process_groups)
        if result.collectives is not None:
            changes.collectives.append(result.collectives)
        files.extend(
            (f.seq, f.trace_id, f.job_id, f.rank, f.group_size_without_pg, f.collectives_staged) for f in result.files
        )
        for p in parsed:
            for table, paths in p.staged.items():
                staged.setdefault(table, {}).update(dict.fromkeys(paths))
    changes.add_traces(traces)
    changes.add_files(files)
    failed += [t for t in traces if t["status"] == "error"]
    report.warnings += [w for t in traces for w in t.get("warnings") or []]


def _failed(changes: RunChanges) -> int:
    import pyarrow.compute as pc

    return sum(pc.sum(pc.equal(t.column("status"), "error")).as_py() or 0 for t in changes.traces)


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


def _parse_all(
    items: list[InputFile], staging: Path, known: _Known, where: _Where, report: IngestReport
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
        pending: set[Future[BatchResult]] = set()
        for refused, batch in batches:
            yield from refused
            if len(pending) >= 2 * run.slots:
                yield from _drain(pending, FIRST_COMPLETED, report)
            if batch is not None:
                with interrupts.blocked():  # a worker being spawned is never left half-started
                    pending.add(run.executor.submit(parse_batch, batch))
        yield from _drain(pending, None, report)


def _account(report: IngestReport, result: BatchResult) -> list[ParsedFile]:
    report.parse_cpu_seconds += result.cpu_seconds
    report.parse_peak_rss = max(report.parse_peak_rss, result.peak_rss)
    return result.files


def _numbered(items: list[InputFile]) -> Iterator[InputFile]:
    for seq, item in enumerate(items):
        item.seq = seq
        yield item


def _batches(
    items: Iterable[InputFile], staging: Path, known: _Known, per_batch: int
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


def _drain(pending: set[Future[BatchResult]], until: str | None, report: IngestReport) -> Iterator[ParsedFile]:
    done, _ = wait(pending, return_when=until or "ALL_COMPLETED")
    for future in done:
        pending.discard(future)
        yield from _account(report, future.result())
