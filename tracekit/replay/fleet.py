"""Every job of a dataset replayed and timed on candidate fabrics: the fleet's network indicators.

    import tracekit.replay.fleet as fleet

    result = fleet.replay_fleet("fleet.dataset", workers=2)   # result.jobs, result.fabrics: polars frames
    fleet.store(result, "fleet.dataset")                       # tables replay_jobs and replay_fabrics

A map over jobs on ingest's executor seam (tracekit.executors: a local process pool, or Dask): each
task takes a chunk of jobs, reads them with one query per table, decomposes each job's distinct
collectives once (decompose(unique=True): a collective of the same group, type and size is stamped
once and counted as often as it occurs) and gives, per job, the indicators of `tracekit replay`
(job_indicators: locality, NIC balance, cross-rail bytes, peers, connections and QPs per GPU and NIC,
ECMP collisions) and the what-if table (whatif.time_shapes) on each fabric × routing: the same
functions the single-job commands call, so a job's row is the one its own replay gives.

The results go to two tables of the dataset (schemas/tables.toml: replay_jobs, replay_fabrics) that
SQL and the report read; a fleet replay replaces both whole, and an ingest drops the rows of the
jobs it touches (their traffic changed). A job that cannot be replayed is listed with its reason,
and the rest go on; so is a job whose replay raised an exception of its own (a bug: the reason says
so, with the exception's first line), the chunk it was in replayed job by job when the exception
came from the queries they share. Only a Ctrl-C, whatever error it turned into, ends the run.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.placement import Placement

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay.collectives import JobCollectives
    from tracekit.replay.indicators import JobFacts
    from tracekit.scope import Scope
    from tracekit.store.dataset import Dataset

# What a fleet replay times every job on unless told: a plain two-tier Clos and a rail-optimised
# fabric (tracekit.fabric.presets), each under ECMP and spraying.
DEFAULT_FABRICS = ("clos2-1to1", "dgx-h100-superpod")
DEFAULT_ROUTINGS = ("ecmp", "spray")
DEFAULT_SEEDS = 4
# Jobs per task: enough that a task's three queries and its pickling cost little per job.
CHUNK_JOBS = 16


@dataclass(frozen=True)
class FleetSettings:
    """How every job is replayed and timed (sent to the workers as is)."""

    placement: Placement = field(default_factory=Placement)
    options: NcclOptions = field(default_factory=NcclOptions)
    algorithm: str = "auto"
    fabrics: tuple[FabricSpec, ...] = field(default_factory=lambda: default_fabrics())  # () for none
    routings: tuple[str, ...] | None = DEFAULT_ROUTINGS
    seeds: int = DEFAULT_SEEDS
    ecmp_trials: int = 64
    max_flows: int = 50_000_000

    def described(self) -> str:
        """The settings as JSON (stored beside the results)."""
        return json.dumps(
            {"placement": self.placement.describe(), "nccl": self.options.describe(), "algorithm": self.algorithm,
             "fabrics": [{"label": f.label, **f.describe()} for f in self.fabrics],
             "routings": list(self.routings) if self.routings else None, "seeds": self.seeds},
            default=str, sort_keys=True,
        )  # fmt: skip


def default_fabrics() -> tuple[FabricSpec, ...]:
    from tracekit.fabric.presets import preset

    return tuple(preset(name) for name in DEFAULT_FABRICS)


@dataclass
class JobOutcome:
    """One job's results, or why it has none."""

    job: str
    row: dict[str, Any] | None = None
    fabrics: pl.DataFrame | None = None
    error: str | None = None


@dataclass
class FleetReplay:
    jobs: pl.DataFrame  # replay_jobs rows: one per job replayed
    fabrics: pl.DataFrame  # replay_fabrics rows: job × fabric × routing × comm_type ('all': the job)
    skipped: list[tuple[str, str]]  # (job, why)
    settings: FleetSettings


def replay_jobs(ds: TraceDataset, jobs: list[str], settings: FleetSettings) -> Iterator[JobOutcome]:
    """Each of `jobs` replayed and timed as the fleet replay does it (see the module docstring)."""
    from tracekit.errors import TracekitError
    from tracekit.replay.collectives import load_jobs
    from tracekit.replay.indicators import job_facts

    try:
        facts = job_facts(ds, jobs)
        loaded = load_jobs(ds, jobs)
        first = next(loaded, None)  # the queries of the chunk's jobs run here
    except TracekitError:
        raise  # the dataset cannot be read: the run's error
    except Exception as exc:
        _unless_interrupted(exc)
        if len(jobs) == 1:
            yield JobOutcome(jobs[0], error=unexpected(jobs[0], exc))
        else:
            for job in jobs:  # which job's rows the queries failed on: each alone
                yield from replay_jobs(ds, [job], settings)
        return
    if first is None:
        return
    for job, matched in itertools.chain([first], loaded):
        if isinstance(matched, TracekitError):
            yield JobOutcome(job, error=str(matched))
        elif isinstance(matched, Exception):
            _unless_interrupted(matched)
            yield JobOutcome(job, error=unexpected(job, matched))
        else:
            try:
                outcome = _replay_job(job, matched, facts[job], settings)
            except TracekitError as exc:
                outcome = JobOutcome(job, error=str(exc))
            except Exception as exc:
                _unless_interrupted(exc)
                outcome = JobOutcome(job, error=unexpected(job, exc))
            yield outcome


def unexpected(job: str, exc: BaseException) -> str:
    """The one line a fleet replay gives for a job whose replay raised an exception of its own."""
    from tracekit.errors import MAX_MESSAGE_CHARS, one_line

    first = next(iter(str(exc).splitlines()), "")
    text = (
        f"job {job}: unexpected {type(exc).__name__}: {first}"
        if first
        else f"job {job}: unexpected {type(exc).__name__}"
    )
    return one_line(text, MAX_MESSAGE_CHARS) + " (a bug of the replay: please report it)"


def _unless_interrupted(exc: BaseException) -> None:
    """Raise `exc` again when it is a Ctrl-C that a library turned into an error of its own."""
    from tracekit import interrupts

    if interrupts.arrived():
        raise exc


def _replay_job(job: str, matched: JobCollectives, facts: JobFacts, settings: FleetSettings) -> JobOutcome:
    """One job's row and what-if table; TracekitError when it cannot be replayed."""
    from tracekit.replay.decompose import decompose
    from tracekit.replay.fabric_whatif import time_shapes
    from tracekit.replay.indicators import job_indicators
    from tracekit.replay.shapes import job_shapes

    if matched.rows_skipped and not matched.collectives.height:  # nothing left: a row of zeros would hide it
        why = "".join(f"; {note}" for note in matched.notes)
        return JobOutcome(job, error=f"job {job}: all {matched.rows_skipped:,} collectives row(s) left out{why}")
    parts = decompose(matched, settings.placement, settings.options, settings.algorithm,
                      settings.max_flows, unique=True)  # fmt: skip
    comm_type = dict(zip(matched.collectives["collective_id"].to_list(),
                         matched.collectives["comm_type"].to_list(), strict=True))  # fmt: skip
    shapes = job_shapes(job, matched.world_size, parts, comm_type, settings.placement)
    row = job_indicators(job, facts, matched.collectives.height, settings.options.qps, shapes,
                         trials=settings.ecmp_trials)  # fmt: skip
    table = None
    if settings.fabrics:
        table, _ = time_shapes(shapes, list(settings.fabrics), list(settings.routings or []) or None,
                               settings.seeds)  # fmt: skip
    return JobOutcome(job, row, table)


def replay_fleet(
    dataset: str | Path,
    settings: FleetSettings | None = None,
    executor: str | None = None,
    workers: int | None = None,
    jobs: list[str] | None = None,
    progress: Callable[[int], None] | None = None,
    scope: Scope | None = None,
) -> FleetReplay:
    """Every job of `dataset` (or those of `jobs`, or those `scope` selects) replayed and timed (see the
    module docstring); `progress` is called with the number of jobs done after each chunk."""
    from tracekit.api import TraceDataset
    from tracekit.executors import open_executor

    settings = settings or FleetSettings()
    names = jobs if jobs is not None else job_ids(dataset, scope)
    chunks = [names[i : i + CHUNK_JOBS] for i in range(0, len(names), CHUNK_JOBS)]
    outcomes: list[JobOutcome] = []
    workers = workers or min(os.cpu_count() or 1, 8)
    if workers == 1 or len(chunks) <= 1:
        with TraceDataset(dataset) as ds:
            for chunk in chunks:
                outcomes.extend(replay_jobs(ds, chunk, settings))
                if progress:
                    progress(len(chunk))
    else:
        with open_executor(executor, workers) as slots:
            futures = [slots.executor.submit(_replay_chunk, str(dataset), chunk, settings) for chunk in chunks]
            for future in futures:
                done = future.result()
                outcomes.extend(done)
                if progress:
                    progress(len(done))
    return _collect(outcomes, settings)


_OPEN: dict[str, Any] = {}


def job_ids(dataset: str | Path, scope: Scope | None = None) -> list[str]:
    """The jobs a fleet replay of `dataset` covers: all, or those `scope` selects."""
    import tracekit.api

    with tracekit.api.open(dataset, scope) as ds:
        return [r[0] for r in ds.sql("select job_id from jobs order by 1").fetchall()]


def _replay_chunk(dataset: str, jobs: list[str], settings: FleetSettings) -> list[JobOutcome]:
    """A worker's task: the dataset opened once per process, the chunk's jobs replayed."""
    from tracekit.api import TraceDataset

    ds = _OPEN.get(dataset)
    if ds is None:
        ds = _OPEN[dataset] = TraceDataset(dataset)
    return list(replay_jobs(ds, jobs, settings))


def _collect(outcomes: list[JobOutcome], settings: FleetSettings) -> FleetReplay:
    import datetime as dt

    import polars as pl

    from tracekit.schema import arrow_schema, table_from_rows

    stamp = {"replayed_at": dt.datetime.now(dt.UTC), "settings": settings.described()}
    rows = [o.row | stamp for o in outcomes if o.row is not None]
    jobs = pl.from_arrow(table_from_rows("replay_jobs", rows))
    tables = [o.fabrics.with_columns(job_id=pl.lit(o.job)) for o in outcomes if o.fabrics is not None]
    declared = pl.from_arrow(arrow_schema("replay_fabrics").empty_table())
    assert isinstance(jobs, pl.DataFrame) and isinstance(declared, pl.DataFrame)
    fabrics = pl.concat(tables, how="vertical") if tables else declared
    fabrics = fabrics.select([pl.col(c).cast(t) for c, t in declared.schema.items()])
    skipped = [(o.job, o.error or "") for o in outcomes if o.row is None]
    return FleetReplay(jobs, fabrics, skipped, settings)


def store(result: FleetReplay, dataset: str | Path, scope: Scope | None = None) -> None:
    """Write the fleet's results into the dataset's replay tables: in place of what they held, or with
    `scope`, in place of the rows of the jobs it selects (the others' rows kept)."""
    from tracekit.store.dataset import Dataset

    with Dataset(Path(dataset)).writing():
        _store(result, Dataset(Path(dataset)), scope)


def _store(result: FleetReplay, dataset: Dataset, scope: Scope | None) -> None:
    import polars as pl

    from tracekit.api import TraceDataset

    tables = {"replay_jobs": result.jobs, "replay_fabrics": result.fabrics}
    if scope is not None and not scope.is_everything():
        covered = [*result.jobs["job_id"].to_list(), *(job for job, _ in result.skipped)]
        with TraceDataset(dataset.root) as whole:
            for name, new in tables.items():
                kept = whole.frame(name).filter(~pl.col("job_id").is_in(covered))
                tables[name] = pl.concat([kept.select(new.columns).cast(new.schema), new], how="vertical")
    dataset.replace_tables({name: frame.to_arrow() for name, frame in tables.items()})


@dataclass
class FleetRun:
    result: FleetReplay
    files: list[Path]
    not_stored: str | None  # why the tables could not be written into the dataset (they are in OUT)
    warnings: list[str]  # what recovering an earlier interrupted run found and did not follow


def run_fleet(
    dataset: str | Path,
    out: Path,
    settings: FleetSettings | None = None,
    executor: str | None = None,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    scope: Scope | None = None,
) -> FleetRun:
    """`tracekit replay --fleet`: every job (or those `scope` selects) replayed while the dataset's write
    lock is held (no ingest changes the jobs meanwhile), the tables written to OUT, then stored in the
    dataset (with `scope`, in place of those jobs' rows only)."""
    from tracekit.api import TraceDataset
    from tracekit.errors import DatasetError
    from tracekit.store.dataset import Dataset

    with TraceDataset(dataset):  # a missing or unreadable dataset fails here, before any lock
        pass
    where = Dataset(Path(dataset))
    advice = "close it (a shell reading it: duckdb -readonly) and run again"
    with where.writing(advice):
        # another program writing it: say so now, not after the work
        where.connect(read_only=False, advice=advice).close()
        result = replay_fleet(dataset, settings, executor, workers, progress=progress, scope=scope)
        files = write_fleet(result, out)
        try:
            _store(result, where, scope)
        except DatasetError as exc:
            return FleetRun(result, files, str(exc), where.warnings)
    return FleetRun(result, files, None, where.warnings)


def write_fleet(result: FleetReplay, out: Path) -> list[Path]:
    """A fleet replay's tables into `out` (replay_jobs.parquet, replay_fabrics.parquet, skipped.csv,
    replay.json), under the same rules as a job's replay: OUT replaced whole, only when it is empty or
    holds an earlier replay."""
    import polars as pl

    from tracekit.replay.outputs import MARKER, staging_for, swap_in

    staging = staging_for(out)
    try:
        written = [staging / "replay_jobs.parquet", staging / "replay_fabrics.parquet", staging / "skipped.csv"]
        result.jobs.write_parquet(written[0])
        result.fabrics.write_parquet(written[1])
        pl.DataFrame(result.skipped, schema={"job_id": pl.String, "reason": pl.String}, orient="row").write_csv(
            written[2]
        )
        meta = {"fleet": True, "jobs": result.jobs.height, "skipped": len(result.skipped),
                "settings": json.loads(result.settings.described())}  # fmt: skip
        written.append(staging / MARKER)
        written[-1].write_text(json.dumps(meta, indent=2, default=str) + "\n")
        swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / path.relative_to(staging) for path in written]


def fleet_locality(
    dataset: TraceDataset | str | Path, algorithm: str = "auto", placement: Any = None, progress: Any = None
) -> pl.DataFrame:
    """Per class: jobs replayed, bytes, bytes inside a host and their share (a fleet replay, untimed)."""
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.replay.placement import Placement

    path = dataset.dataset.root if isinstance(dataset, TraceDataset) else dataset
    settings = FleetSettings(placement or Placement(), algorithm=algorithm, fabrics=())
    jobs = replay_fleet(path, settings, workers=1, progress=progress).jobs
    return (
        jobs.group_by("class")
        # 128-bit sums: each job's bytes fit int64 (MAX_TOTAL_BYTES), a class of many such jobs need not
        .agg(pl.len().alias("jobs"), pl.col("bytes", "intra_host_bytes").cast(pl.Int128).sum())
        .with_columns(intra_host_share=pl.col("intra_host_bytes") / pl.col("bytes"))
        .sort("class")
    )
