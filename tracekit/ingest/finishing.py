"""Finishing the run's jobs while others are still parsed: each job's parsed files become its rows
(tracekit.ingest.jobs.finish_job), written a round at a time into the run's changes
(tracekit.store.changes.RunChanges) for the commit."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tracekit.ingest.discover import ARCHIVE, InputFile, JobInfo
from tracekit.ingest.jobs import finish_job
from tracekit.ingest.worker import ParsedFile
from tracekit.store.changes import RunChanges

if TYPE_CHECKING:
    import duckdb

    from tracekit.ingest.report import IngestReport
    from tracekit.rows import ProcessGroupsRow, TracesRow
    from tracekit.store.dataset import Dataset

# Jobs are finished in rounds of about this many files: each round's rows are written to staging
# and its parsed files are let go, so a fleet's rows are never held in memory all at once.
FINISH_FILES = 16_384


class Finishing:
    """The run's jobs finished as soon as every file up to their last one (in discovery order) is
    parsed, a round of about FINISH_FILES files at a time: each round's rows are written to staging
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
        self.failed: list[TracesRow] = []
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
        if self.ready_files >= FINISH_FILES:
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
            if round_files >= FINISH_FILES:
                self._round({j: by_job.pop(j) for j in round_ids})
                round_ids, round_files = [], 0
        if round_ids:
            self._round({j: by_job.pop(j) for j in round_ids})

    def _round(self, jobs: dict[str, tuple[JobInfo, list[ParsedFile]]]) -> None:
        job_ids = list(jobs)
        existing = cast("dict[str, list[TracesRow]]", self.held.rows("traces", job_ids))
        groups = cast("dict[str, list[ProcessGroupsRow]]", self.held.rows("process_groups", job_ids))
        largest = self.held.largest_groups(job_ids)
        traces: list[TracesRow] = []
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
            self.warnings[job_id] = _shared_once(job_id, result.traces)
            self.touched.append(job_id)
            changes.replaced += [(r["trace_id"] or "", r["status"] or "") for r in result.replaced]
            self.replaced += [path for r in result.replaced if r["status"] == "ok" and (path := r.get("path"))]
            self.files_added += len(parsed)
        changes.add_traces(traces)
        changes.add_files(files)
        self.failed += [t for t in traces if t["status"] == "error"]

    def done(self, report: IngestReport) -> RunChanges:
        """Every job finished: the run's changes; the files' errors go to `report`."""
        changes = self.changes
        self.first = {}  # every job is finished: a fleet's content keys go before the commit
        changes.staged = {table: list(paths) for table, paths in self.staged.items()}
        self.failed.sort(key=lambda t: (t["job_id"] or "", t["rank"] is None, t["rank"] or 0, t["path"] or ""))
        report.errors += [t["error"] or "" for t in self.failed]  # a failed file's row always says why
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


def _shared_once(job_id: str, traces: list[Any]) -> list[str]:
    """The warnings of a job's files, one line for a warning several of its files share (each
    file's own line stays in its traces row): `FIRST and N more files of job J at ...: ...`."""
    paths_of: dict[str, list[str]] = {}  # what follows a warning's path (errors.describe) -> the paths
    for trace in traces:
        path = trace.get("path") or ""
        for warning in trace.get("warnings") or []:
            named = bool(path) and warning.startswith(path)
            paths_of.setdefault(warning[len(path) :] if named else warning, []).append(path if named else "")
    lines = []
    for rest, paths in paths_of.items():
        if len(paths) > 1 and paths[0]:
            lines.append(f"{paths[0]} and {len(paths) - 1} more files of job {job_id}{rest}")
        else:
            lines += [f"{path}{rest}" for path in paths]
    return lines


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
