"""Which job id each source of files gets in the dataset: job ids are unique, and never silently shared.

A job is the files of one place: a folder, an archive, or a manifest's job (`JobInfo.source`). The
rules, for each job that discovery found:

1. `--job NAME` is the user's choice: the files go to job NAME, whatever it already holds.
2. A place the dataset already holds keeps its job: ingesting `sample_traces/chakra` after
   `sample_traces` finds job `chakra/ddp_mlp` for folder `sample_traces/chakra/ddp_mlp`, and its
   files are already present.
3. A free id is taken as discovery named it.
4. An id held by another place (in the dataset, or earlier in the same run) is kept apart: the new
   place's job is named with the folders above it (`week2/run1` for a second `run1`, and
   `fleetB/job-000000` for the jobs of a second generated fleet's manifest), or, failing that,
   `run1~2`. A warning says so, and how to choose instead (`--job`, a manifest).

After parsing, the two archives of one run, one of PyTorch execution traces and one of profiler
(Kineto) traces of the same ranks, side by side in a folder that holds nothing else, become one job
named after the folder, so their collectives are linked as `--job` links them (the layout of
facebookresearch/param's `dlrm_pytorch_et.tar.gz` and `dlrm_kineto.tar.gz`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from tracekit.ingest.discover import ARCHIVE, EXPLICIT, MANIFEST, JobInfo
from tracekit.ingest.worker import ParsedFile
from tracekit.parsers.formats import role_of

_KEPT_APART = re.compile(r"~\d+$")


@dataclass(frozen=True)
class KeptApart:
    given: str
    final: str
    source: str
    holder: str | None  # the place that holds the id, when known
    kind: str


@dataclass
class JobIds:
    """Job ids handed out in one run, against the (job id, source) pairs the dataset holds."""

    existing: Iterable[tuple[str, str | None]] = ()
    taken: dict[str, str | None] = field(default_factory=dict)
    held: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # source -> its ids
    apart: dict[tuple[str, str], str] = field(default_factory=dict)  # (source, id) -> its `id~N`
    chosen: dict[tuple[str, str], str] = field(default_factory=dict)
    kept_apart: list[KeptApart] = field(default_factory=list)

    def __post_init__(self) -> None:
        for job_id, source in self.existing:
            self.taken[job_id] = source
            if source is not None:
                self.held[source].add(job_id)
                base = _KEPT_APART.sub("", job_id)
                if base != job_id:
                    self.apart[(source, base)] = job_id

    def assign(self, job: JobInfo) -> JobInfo:
        """The job as it goes into the dataset: `job` itself, or a copy with a distinct id."""
        if job.kind == EXPLICIT:
            self.taken.setdefault(job.job_id, job.source)
            return job
        key = (job.job_id, job.source)
        final = self.chosen.get(key)
        if final is None:
            final = self._known_place(job) or self._free(job)
            self.chosen[key] = final
        return job if final == job.job_id else replace(job, job_id=final)

    def _known_place(self, job: JobInfo) -> str | None:
        """The id the dataset holds this place under: as given, as rule 4 named it, or as the same
        folder given from a level higher (`chakra/ddp_mlp` for `ddp_mlp`)."""
        held = self.held.get(job.source)
        if not held:
            return None
        found = next((c for c in (job.job_id, *_qualified(job)) if c in held), None)
        return found or self.apart.get((job.source, job.job_id))

    def _free(self, job: JobInfo) -> str:
        final = job.job_id
        holder = self.taken.get(final, job.source)
        if holder != job.source:
            final = next(c for c in _candidates(job) if c not in self.taken)
            self.kept_apart.append(KeptApart(job.job_id, final, job.source, holder, job.kind))
        self.taken[final] = job.source
        return final

    def warnings(self) -> list[str]:
        """One line per job kept apart; the jobs of one manifest in one line."""
        lines: list[str] = []
        by_manifest: dict[str, list[KeptApart]] = defaultdict(list)
        for moved in self.kept_apart:
            if moved.kind == MANIFEST:
                by_manifest[moved.source].append(moved)
                continue
            lines.append(
                f"job {moved.given} already holds files from {moved.holder or 'another place'}: "
                f"the files from {moved.source} are kept apart as job {moved.final} "
                f"(to add them to job {moved.given}, use --job {moved.given}; or name jobs in a manifest)"
            )
        for manifest, jobs in by_manifest.items():
            first = jobs[0]
            more = f" and {len(jobs) - 1} more" if len(jobs) > 1 else ""
            lines.append(
                f"{manifest}: {len(jobs)} job id(s) already in the dataset from another place "
                f"({first.given}{more}) are kept apart as {first.final}{more}; "
                "to choose the ids, edit the manifest's job_id column"
            )
        return lines


def _qualified(job: JobInfo) -> list[str]:
    """The job's id prefixed by the folders above its place, nearest first: `week2/run1`, `data/week2/run1`."""
    path = PurePath(job.source)
    folders = list((path.parent if job.kind in (ARCHIVE, MANIFEST) else path).parts[1:])
    given = job.job_id.split("/")
    if folders[-len(given) :] == given:  # a folder job is named by the folders it lies in
        folders = folders[: -len(given)]
    return ["/".join([*folders[-depth:], job.job_id]) for depth in range(1, len(folders) + 1)]


def _candidates(job: JobInfo) -> Iterator[str]:
    """Distinct ids for `job`: `_qualified`, then `id~2`, `id~3`, ..."""
    yield from _qualified(job)
    n = 2
    while True:
        yield f"{job.job_id}~{n}"
        n += 1


def join_host_and_device_archives(
    by_job: dict[str, tuple[JobInfo, list[ParsedFile]]],
    sources_by_parent: dict[str, set[str]],
    ranks: dict[str, int | None],
    ids: JobIds,
    existing: set[str],
) -> list[str]:
    """Merge the jobs of host/device archive pairs (see the module docstring) in `by_job`.

    `sources_by_parent`: every source of the run by the folder holding it; `ranks`: each parsed
    file's rank by trace id; `existing`: job ids the dataset already holds (never merged).
    Returns one note per merge.
    """
    pairs: dict[str, list[str]] = defaultdict(list)
    for job_id, (info, _) in by_job.items():
        if info.kind == ARCHIVE and info.parent_source is not None and job_id not in existing:
            pairs[info.parent_source].append(job_id)
    notes = []
    for parent, job_ids in sorted(pairs.items()):
        if len(job_ids) != 2 or len(sources_by_parent.get(parent, ())) != 2:
            continue
        first, second = (by_job[j] for j in sorted(job_ids))
        if not _host_and_device(first[1], second[1], ranks):
            continue
        info = first[0]
        assert info.parent_id is not None
        merged = ids.assign(JobInfo(info.parent_id, parent, info.label or second[0].label, info.started_at))
        for job_id in job_ids:
            del by_job[job_id]
        by_job.setdefault(merged.job_id, (merged, []))[1].extend(first[1] + second[1])
        notes.append(
            f"job {merged.job_id}: {first[0].source} and {second[0].source} hold the host and device traces "
            "of the same ranks: ingested as one job, linked"
        )
    return notes


def _host_and_device(a: list[ParsedFile], b: list[ParsedFile], ranks: dict[str, int | None]) -> bool:
    """One side only host traces of one format (PyTorch ET), the other only device traces of one
    (Kineto), the same set of ranks, each rank once."""
    formats = [{p.format for p in side if p.error is None} for side in (a, b)]
    if any(len(f) != 1 for f in formats) or sorted(role_of(next(iter(f))) or "" for f in formats) != ["device", "host"]:
        return False
    rank_lists = [[ranks.get(p.trace_id) for p in side if p.error is None] for side in (a, b)]
    sets = [set(r) for r in rank_lists]
    return (
        None not in sets[0]
        and sets[0] == sets[1]
        and all(len(r) == len(s) for r, s in zip(rank_lists, sets, strict=True))
    )
