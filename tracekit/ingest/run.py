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

import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tracekit import executors, interrupts
from tracekit._version import __version__
from tracekit.errors import DatasetError, InputError, Interrupted, TracekitError
from tracekit.ingest.batching import Known, Where, name_of, parse_all
from tracekit.ingest.discover import ARCHIVE, Discovery, InputFile, JobInfo, discover
from tracekit.ingest.finishing import Finishing
from tracekit.ingest.identity import JobIds, join_host_and_device_archives
from tracekit.ingest.jobs import decide_rank
from tracekit.ingest.report import IngestReport, Progress, ProgressCallback
from tracekit.ingest.worker import (
    ParsedFile,
    content_key,
    fewer_gc_passes,
)
from tracekit.parsers.base import ProcessGroup
from tracekit.store import connect
from tracekit.store.changes import RunChanges
from tracekit.store.commit import commit
from tracekit.store.dataset import Dataset
from tracekit.store.summary import dataset_summary, missing_note

_REPLACED_NOTE = "{path}: changed since it was ingested: its earlier rows are replaced"


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
                _run(dataset, found, report, Where(workers, executor), progress, interrupted)
            report.totals = dataset_summary(dataset)
        except TracekitError:
            raise
        except BaseException as exc:
            committed = dataset.committed_run == run_id
            if not committed and connect.out_of_space(exc):
                raise DatasetError(
                    f"{dataset.root}: no space to write the run ({connect.first_line(exc)}); the dataset is unchanged"
                ) from exc
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


def _run(
    dataset: Dataset,
    found: Discovery,
    report: IngestReport,
    where: Where,
    progress: ProgressCallback | None,
    interrupted: Callable[[], bool],
) -> None:
    started = datetime.now(UTC)
    staging = dataset.staging_root / report.run_id
    report.warnings += dataset.warnings  # what recovering an earlier run found and did not follow
    try:
        dataset.new_staging(report.run_id)
        held = [(r["job_id"], r["source"]) for r in dataset.query_rows("select job_id, source from jobs", [])]
        ids = JobIds(held)
        _assign_jobs(found.files, ids)
        known = Known.load(dataset, found.files)
        total, places = len(found.files), _places(found.files)
        with closing(Finishing(dataset, report.run_id, staging, found.files, {j for j, _ in held})) as finishing:
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
    known: Known,
    report: IngestReport,
    where: Where,
    progress: ProgressCallback | None,
    interrupted: Callable[[], bool],
    finishing: Finishing,
) -> _Read:
    """Parse every file, sorting out what is new, by job; jobs whose files are all parsed are
    finished meanwhile (`finishing`), a round at a time, and leave `by_job`."""
    read = _Read()
    total = len(files)
    if progress:
        progress(Progress("parse", 0, total))
    parsing = parse_all(files, staging, known, where, report)
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
    commit(dataset, changes, staging)
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
            held.setdefault(content_key(name_of(row["path"]), row["sha256"]), (row["job_id"], row["path"]))
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
