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
from typing import TYPE_CHECKING, Any

from tracekit import executors, interrupts
from tracekit._version import __version__
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
from tracekit.store.changes import RunChanges
from tracekit.store.dataset import Dataset
from tracekit.store.summary import DatasetSummary, dataset_summary, missing_note

if TYPE_CHECKING:
    import duckdb

# Below this many files the pool's start-up costs more than it saves.
_POOL_THRESHOLD = 4
# A unit of work: files in discovery order (of one job or several), up to this many files or bytes:
# many enough that a fleet of small rank files costs few tasks and few staged files, few enough to
# spread over the workers (a run of few files gets smaller batches, so that every worker has some).
_BATCH_FILES = 256
_BATCH_BYTES = 64 << 20
# Batches per worker, at least, when a run has few files.
_BATCHES_PER_WORKER = 4
# Jobs are finished in rounds of about this many files: each round's rows are written to staging
# and its parsed files are let go, so a fleet's rows are never held in memory all at once.
_FINISH_FILES = 16_384
# Files handed to the workers and not yet received, at most: about a round's worth, so the workers
# parse on while this process finishes a round (with a few batches in flight, they sat idle
# through every round: 30,000 jobs took 234 s to parse where each worker needed 140 s of CPU).
_IN_FLIGHT_FILES = _FINISH_FILES
# The warning for a file the dataset held with other content at the same path.
_REPLACED_NOTE = "{path}: changed since it was ingested: its earlier rows are replaced"


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
    # Files the dataset held with other content at the same path: their earlier rows are replaced.
    files_replaced: list[str] = field(default_factory=list)
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
            stopped = isinstance(exc, KeyboardInterrupt) or interrupted()
            if stopped and not committed:
                raise Interrupted() from exc
            if stopped and not isinstance(exc, KeyboardInterrupt):
                # Past the commit, an error the Ctrl-C caused (DuckDB's `RuntimeError: Query
                # interrupted`) is the Ctrl-C: the run is written.
                raise KeyboardInterrupt from exc
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
        total, places = len(found.files), _places(found.files)
        with closing(_Finishing(dataset, report.run_id, staging, found.files, {j for j, _ in held})) as finishing:
            read = _read_all(found.files, staging, known, report, where, progress, interrupted, finishing)
            by_job = read.by_job  # the jobs not finished while parsing: archives, and the last ones
            finishing.drop_repeats(by_job)
            joined = join_host_and_device_archives(
                by_job, places, _archive_ranks(by_job), ids, {job_id for job_id, _ in held}
            )
            finishing.finish(by_job, sorted(by_job))
            changes = finishing.done(report)
        duplicates = read.duplicates + finishing.dropped
        report.files_duplicate = len(duplicates)
        report.warnings += ids.warnings() + _duplicate_notes(dataset, duplicates) + joined + finishing.notes()
        report.warnings += [_REPLACED_NOTE.format(path=path) for path in report.files_replaced]
        touched = finishing.touched
        report.files_added = finishing.files_added
        report.jobs_touched = len(touched)
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


# What stands in the discovery list for a file once read.
_READ = InputFile(JobInfo("", ""), "", "")


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
    finishing: _Finishing,
) -> _Read:
    """Parse every file, sorting out what is new, by job; jobs whose files are all parsed are
    finished meanwhile (`finishing`), a round at a time, and leave `by_job`."""
    read = _Read()
    total = len(files)
    if progress:
        progress(Progress("parse", 0, total))
    parsing = _parse_all(files, staging, known, where, report)
    with closing(parsing):  # an interrupt between two files stops the pool too
        for parsed in parsing:
            item = files[parsed.seq]
            files[parsed.seq] = _READ  # the record is handed over: a fleet's records go as they are read
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
                finishing.kept(parsed)
            finishing.received(parsed.seq, read.by_job)
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
        "files_failed": changes.failed,
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


class _Finishing:
    """The run's jobs finished as soon as every file up to their last one (in discovery order) is
    parsed, a round of about _FINISH_FILES files at a time: each round's rows are written to staging
    (RunChanges) and its parsed files are let go, so a fleet never holds its files' metadata and rows
    in memory all at once. Archive jobs wait for the end: two of them may be joined
    (tracekit.ingest.identity).

    The same file (name and content) read twice in one run is added once: the first in discovery
    order is kept. `first` holds the smallest seq of every content key read well; a job is finished
    only once every file before its last is parsed, so its files' firsts are known by then.
    """

    def __init__(self, dataset: Dataset, run_id: str, staging: Path, files: list[InputFile], held: set[str]) -> None:
        self.held = _Held(dataset, held)
        self.changes = RunChanges(run_id, staging / "rows")
        self.staged: dict[str, dict[str, None]] = {}
        self.failed: list[dict[str, Any]] = []
        self.warnings: dict[str, list[str]] = {}  # the notes of each finished job's files
        self.first: dict[int, int] = {}  # content key (as a number) -> the first seq holding it
        self.dropped: list[ParsedFile] = []  # repeats of a file read earlier in the run
        self.dropped_for: list[int] = []  # ... the seq of that file
        self.touched: list[str] = []
        self.replaced: list[str] = []
        self.files_added = 0
        last: dict[str, int] = {}
        for seq, item in enumerate(files):
            last[item.job.job_id] = seq
        self.order = sorted((seq, job_id) for job_id, seq in last.items())  # jobs by their last file
        self.waiting = {item.job.job_id for item in files if item.job.kind == ARCHIVE}
        self.got = bytearray(len(files))
        self.prefix = 0  # every file before this seq is parsed
        self.next = 0  # jobs in `order` before this one are finished or waiting
        self.ready: list[str] = []
        self.ready_files = 0

    def kept(self, parsed: ParsedFile) -> None:
        """A file new to the dataset, read in this run."""
        if parsed.error is None:
            key = int(parsed.content_key, 16)
            first = self.first.get(key)
            if first is None or parsed.seq < first:
                self.first[key] = parsed.seq

    def received(self, seq: int, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]]) -> None:
        """File `seq` is parsed (whatever came of it): finish the jobs this completes, by rounds."""
        self.got[seq] = 1
        while self.prefix < len(self.got) and self.got[self.prefix]:
            self.prefix += 1
        while self.next < len(self.order) and self.order[self.next][0] < self.prefix:
            job_id = self.order[self.next][1]
            self.next += 1
            if job_id in by_job and job_id not in self.waiting:
                self.ready.append(job_id)
                self.ready_files += len(by_job[job_id][1])
        if self.ready_files >= _FINISH_FILES:
            self.drop_repeats(by_job, self.ready)
            self.finish(by_job, self.ready)
            self.ready, self.ready_files = [], 0

    def drop_repeats(
        self, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]], job_ids: Iterable[str] | None = None
    ) -> None:
        """Drop from these jobs (default: all) the files read earlier in the run; a job left with
        no file leaves `by_job`."""
        for job_id in list(by_job if job_ids is None else job_ids):
            info, files = by_job[job_id]
            kept = []
            for parsed in files:
                first = self.first[int(parsed.content_key, 16)] if parsed.error is None else parsed.seq
                if first == parsed.seq:
                    kept.append(parsed)
                else:
                    self.dropped.append(parsed)
                    self.dropped_for.append(first)
            if kept:
                by_job[job_id] = (info, kept)
            else:
                del by_job[job_id]

    def finish(self, by_job: dict[str, tuple[JobInfo, list[ParsedFile]]], job_ids: list[str]) -> None:
        """Finish these jobs of `by_job` (repeats dropped already) and let them go, in rounds."""
        round_ids: list[str] = []
        round_files = 0
        for job_id in job_ids:
            if job_id not in by_job:
                continue
            round_ids.append(job_id)
            round_files += len(by_job[job_id][1])
            if round_files >= _FINISH_FILES:
                self._round({j: by_job.pop(j) for j in round_ids})
                round_ids, round_files = [], 0
        if round_ids:
            self._round({j: by_job.pop(j) for j in round_ids})

    def _round(self, jobs: dict[str, tuple[JobInfo, list[ParsedFile]]]) -> None:
        job_ids = list(jobs)
        existing = self.held.rows("traces", job_ids)
        groups = self.held.rows("process_groups", job_ids)
        largest = self.held.largest_groups(job_ids)
        traces: list[dict[str, Any]] = []
        files: list[tuple[int, str, str, int | None, int | None, bool]] = []
        changes = self.changes
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
                (f.seq, f.trace_id, f.job_id, f.rank, f.group_size_without_pg, f.collectives_staged)
                for f in result.files
            )
            for p in parsed:
                for table, paths in p.staged.items():
                    self.staged.setdefault(table, {}).update(dict.fromkeys(paths))
            self.warnings[job_id] = [w for t in result.traces for w in t.get("warnings") or []]
            self.touched.append(job_id)
            changes.replaced += [(r["trace_id"], r["status"]) for r in result.replaced]
            self.replaced += [r["path"] for r in result.replaced if r["status"] == "ok" and r.get("path")]
            self.files_added += len(parsed)
        changes.add_traces(traces)
        changes.add_files(files)
        self.failed += [t for t in traces if t["status"] == "error"]

    def done(self, report: IngestReport) -> RunChanges:
        """Every job finished: the run's changes; the files' errors go to `report`."""
        changes = self.changes
        self.first = {}  # every job is finished: a fleet's content keys go before the commit
        changes.staged = {table: list(paths) for table, paths in self.staged.items()}
        self.failed.sort(key=lambda t: (t["job_id"], t["rank"] is None, t["rank"] or 0, t["path"] or ""))
        report.errors += [t["error"] for t in self.failed]
        report.files_replaced = sorted(self.replaced)
        paths = _paths_by_seq(changes, set(self.dropped_for))
        for parsed, first in zip(self.dropped, self.dropped_for, strict=True):
            parsed.duplicate_of = paths.get(first, "?")
        self.touched.sort()
        return changes

    def notes(self) -> list[str]:
        """The notes of the files added, job by job."""
        return [w for job_id in sorted(self.warnings) for w in self.warnings[job_id]]

    def close(self) -> None:
        self.held.close()


def _paths_by_seq(changes: RunChanges, seqs: set[int]) -> dict[int, str]:
    """The path of each file of the run's changes named by its seq."""
    if not seqs or not changes.files:
        return {}
    import pyarrow.parquet as pq

    files = pq.read_table(changes.files, columns=["_seq", "trace_id"], filters=[("_seq", "in", sorted(seqs))])
    seq_of = dict(zip(files.column("trace_id").to_pylist(), files.column("_seq").to_pylist(), strict=True))
    traces = pq.read_table(changes.traces, columns=["trace_id", "path"], filters=[("trace_id", "in", list(seq_of))])
    return {
        seq_of[t]: path
        for t, path in zip(traces.column("trace_id").to_pylist(), traces.column("path").to_pylist(), strict=True)
    }


class _Held:
    """What the dataset holds for jobs being finished: asked only about the jobs it has (`jobs`),
    through one connection for every round (a new fleet asks nothing)."""

    def __init__(self, dataset: Dataset, jobs: set[str]) -> None:
        self.dataset = dataset
        self.jobs = jobs
        self.con: duckdb.DuckDBPyConnection | None = None

    def _ask(self, job_ids: list[str]) -> tuple[duckdb.DuckDBPyConnection, list[str]] | None:
        held = [j for j in job_ids if j in self.jobs]
        if not held:
            return None
        if self.con is None:
            self.con = self.dataset.connect()
        return self.con, held

    def rows(self, table: str, job_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        asked = self._ask(job_ids)
        return self.dataset.rows_by_job(table, asked[1], asked[0]) if asked else {}

    def largest_groups(self, job_ids: list[str]) -> dict[str, int]:
        asked = self._ask(job_ids)
        if asked is None:
            return {}
        rows = self.dataset.query_rows(
            "select job_id, max(group_size) as largest from collectives where job_id in "
            "(select unnest(?::VARCHAR[])) and not list_contains(inferred, 'group_size') group by job_id",
            [asked[1]],
            asked[0],
        )
        return {r["job_id"]: r["largest"] for r in rows}

    def close(self) -> None:
        if self.con is not None:
            self.con.close()  # before the commit, which opens the file to write


def _missing_ranks(dataset: Dataset, job_ids: list[str], trace_ids: list[str]) -> list[str]:
    """`job J: ranks 1–7 of 8 missing` for each job holding the run's inputs (added or already
    present), so that a run repeated gives the same answer."""
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
        pending: dict[Future[BatchResult], int] = {}  # -> its files
        for refused, batch in batches:
            yield from refused
            while len(pending) >= 2 * run.slots and sum(pending.values()) >= _IN_FLIGHT_FILES:
                yield from _drain(pending, FIRST_COMPLETED, report)
            if batch is not None:
                with interrupts.blocked():  # a worker being spawned is never left half-started
                    pending[run.executor.submit(parse_batch, batch)] = len(batch.tasks)
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


def _drain(pending: dict[Future[BatchResult], int], until: str | None, report: IngestReport) -> Iterator[ParsedFile]:
    done, _ = wait(pending, return_when=until or "ALL_COMPLETED")
    for future in done:
        del pending[future]
        yield from _account(report, future.result())
