"""The numbers behind the report: the shipped queries, run over a dataset (or the jobs a scope
selects), as small aggregated polars frames.

Everything is aggregated in DuckDB by the queries in queries/; no per-collective row of a fleet ever
reaches Python. A scope (--job, --label, --since, --until) is applied once, under the queries: a
scoped dataset's `jobs`, `collectives`, ... are views of the selected jobs' rows, so every query
answers for the selection unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from tracekit.api import TraceDataset
from tracekit.errors import InputError
from tracekit.scope import Scope

if TYPE_CHECKING:
    import polars as pl

# Per-job sections: at most this many jobs chosen by the report (the user's --job list is not capped
# by it, but by MAX_JOB_SECTIONS).
AUTO_JOB_SECTIONS = 4
MAX_JOB_SECTIONS = 12
# The jobs table lists the jobs with the most bytes on the wire first, this many.
JOBS_TABLE_ROWS = 100
# A rank x rank all-to-allv matrix up to this many ranks; above it, one cell per 8-rank host.
MATRIX_RANKS = 64
# A period of the time trend is compared (its headline, its chart) only when at least this many jobs
# started in it, and two fleets only when each has as many: the median of a handful of jobs says
# nothing of a fleet (four captured CPU jobs of 2026, against a 2023-24 fleet, once reversed the trend).
TREND_MIN_JOBS = 10
# A job section replays the job (tracekit.replay, default placement: 8 GPUs per host) for its host x
# host traffic matrix when that takes at most this many flows; `tracekit replay` does bigger jobs.
REPLAY_MAX_FLOWS = 2_000_000


@dataclass(frozen=True)
class ReportStep:
    """How far a report is: `done` of the `total` steps of `stage` (a query, a job's replay, the page)."""

    stage: str
    done: int
    total: int


class Steps:
    """Counts the steps of one stage for a progress callback: (0, total) first, then one per step."""

    def __init__(self, progress: Callable[[ReportStep], None] | None, stage: str, total: int) -> None:
        self.progress = progress if total > 0 else None
        self.stage, self.total, self.done = stage, total, 0
        self._report()

    def tick(self) -> None:
        self.done += 1
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(ReportStep(self.stage, self.done, self.total))


# The steps of `load_fleet` (job_class, then 10 queries, the trend one where jobs have dates) and of
# `load_job` (5 queries and the replay of the job).
FLEET_STEPS = 11
JOB_STEPS = 6


class Runner:
    """Runs queries on one dataset and keeps the time they took (the benchmark compares it to the whole report)."""

    def __init__(self, ds: TraceDataset, steps: Steps | None = None) -> None:
        self.ds = ds
        self.seconds = 0.0
        self.runs: list[tuple[str, float]] = []
        self.steps = steps

    def tick(self) -> None:
        if self.steps is not None:
            self.steps.tick()

    def frame(self, name: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
        """The query's result as a polars frame, with 128-bit integers and decimals as floats."""
        import polars as pl

        began = time.perf_counter()
        with self.ds.computing(name):
            frame = self.ds.query(name, params).pl()
        took = time.perf_counter() - began
        self.seconds += took
        self.runs.append((name, took))
        self.tick()
        wide = [c for c, t in frame.schema.items() if t == pl.Int128 or isinstance(t, pl.Decimal)]
        return frame.with_columns(pl.col(wide).cast(pl.Float64)) if wide else frame


@dataclass
class Period:
    """The periods the time trend is cut into."""

    start: date
    months: int

    def params(self) -> dict[str, Any]:
        return {"start": self.start.isoformat(), "period_months": self.months}


@dataclass
class FleetData:
    """Everything the fleet part of the report shows, as small frames."""

    overview: dict[str, Any]
    jobs: pl.DataFrame
    sizes: pl.DataFrame
    mix: pl.DataFrame
    cdf: pl.DataFrame
    percentiles: pl.DataFrame
    groups: pl.DataFrame
    agreement: pl.DataFrame
    trend: pl.DataFrame | None
    period: Period | None
    fabrics: pl.DataFrame | None = None  # fabric_slowdown_by_class: empty until `tracekit replay --fleet` ran
    query_seconds: float = 0.0

    @property
    def empty(self) -> bool:
        return not self.overview.get("jobs")


@dataclass
class HostTraffic:
    """A job's collectives replayed as flows, summed host to host (the paper's Figure 3)."""

    matrix: pl.DataFrame  # src_host, dst_host, bytes, share: network bytes only
    bytes: int  # every flow's bytes, NVLink inside a host included
    intra_host_bytes: int
    gpus_per_host: int
    hosts: int
    note: str | None = None  # why there is no replay (too large, nothing to replay)


@dataclass
class JobData:
    """One job's section."""

    job: dict[str, Any]
    by_collective: pl.DataFrame
    by_group: pl.DataFrame
    bandwidth: pl.DataFrame
    stragglers: pl.DataFrame
    matrix: pl.DataFrame
    ranks_per_cell: int
    hosts: HostTraffic | None = None
    query_seconds: float = 0.0


@dataclass
class ReportData:
    fleet: FleetData
    job_sections: list[JobData] = field(default_factory=list)
    missing_jobs: list[str] = field(default_factory=list)


def counted_periods(trend_frame: pl.DataFrame) -> pl.DataFrame:
    """The periods of a group_size_trend frame that the trend compares: at least TREND_MIN_JOBS jobs
    started in them, and their collectives record group sizes."""
    import polars as pl

    return trend_frame.filter((pl.col("calls") > 0) & (pl.col("jobs") >= TREND_MIN_JOBS))


def choose_period(first: datetime | date | None, last: datetime | date | None) -> Period | None:
    """Calendar-aligned periods of 1, 3, 6 or 12 months: the shortest that cut the span into at most 12."""
    if first is None or last is None:
        return None
    span = (last.year - first.year) * 12 + (last.month - first.month) + 1
    months = next((m for m in (1, 3, 6, 12) if -(-span // m) <= 12), 12 * (-(-span // 144)))
    month0 = (first.month - 1) // months * months + 1 if months <= 12 else 1
    return Period(date(first.year, month0, 1), months)


def classify_once(run: Runner) -> None:
    """Compute job_class once for the whole report: most queries read it, and it is the costly part of
    each (it reads every collective). The connection's job_class becomes a table of its rows."""
    from tracekit.store.queries import catalog_statement

    began = time.perf_counter()
    con = run.ds.con
    con.execute(catalog_statement("job_class", temp=True))  # the query itself, whatever was done before
    con.execute("CREATE OR REPLACE TEMP TABLE report_job_class AS SELECT * FROM job_class")
    con.execute("CREATE OR REPLACE TEMP VIEW job_class AS SELECT * FROM report_job_class")
    run.seconds += time.perf_counter() - began
    run.tick()


def load_fleet(
    ds: TraceDataset, progress: Callable[[ReportStep], None] | None = None, stage: str = "fleet queries"
) -> FleetData:
    run = Runner(ds, Steps(progress, stage, FLEET_STEPS))
    classify_once(run)
    overview_frame = run.frame("dataset_overview")
    overview = overview_frame.to_dicts()[0] if overview_frame.height else {}
    period = choose_period(overview.get("first_started_at"), overview.get("last_started_at"))
    fleet = FleetData(
        overview=overview,
        jobs=run.frame("job_overview"),
        sizes=run.frame("job_size_histogram"),
        mix=run.frame("collective_mix_by_class"),
        cdf=run.frame("message_size_cdf"),
        percentiles=run.frame("message_size_percentiles"),
        groups=run.frame("group_size_by_job_size"),
        agreement=run.frame("class_agreement"),
        trend=run.frame("group_size_trend", period.params()) if period else None,
        period=period,
        fabrics=run.frame("fabric_slowdown_by_class"),
    )
    if period is None:
        run.tick()  # no dates: no trend to query
    fleet.query_seconds = run.seconds
    return fleet


def load_job(ds: TraceDataset, job: dict[str, Any], steps: Steps | None = None) -> JobData:
    run = Runner(ds, steps)
    job_id = job["job_id"]
    gpus = job.get("job_gpus") or 0
    cell = 1 if gpus <= MATRIX_RANKS else 8
    data = JobData(
        job=job,
        by_collective=run.frame("job_bytes_by_collective", {"job_id": job_id}),
        by_group=run.frame("job_bytes_by_group", {"job_id": job_id}),
        bandwidth=run.frame("job_bandwidth", {"job_id": job_id}),
        stragglers=run.frame("job_stragglers", {"job_id": job_id}),
        matrix=run.frame("alltoallv_matrix", {"job_id": job_id, "ranks_per_cell": cell}),
        ranks_per_cell=cell,
        hosts=host_traffic(ds, job_id),
    )
    run.tick()
    data.query_seconds = run.seconds
    return data


def host_traffic(ds: TraceDataset, job_id: str) -> HostTraffic:
    """The job replayed with the default placement, summed host to host."""
    import polars as pl

    from tracekit.errors import TracekitError
    from tracekit.replay import Placement, host_matrix, replay
    from tracekit.report.format import exact_sum

    placement = Placement()
    try:
        result = replay(ds, job_id, placement=placement, max_flows=REPLAY_MAX_FLOWS)
    except TracekitError as exc:
        empty = pl.DataFrame(
            schema={"src_host": pl.Int64, "dst_host": pl.Int64, "bytes": pl.Int64, "share": pl.Float64}
        )
        return HostTraffic(empty, 0, 0, placement.gpus_per_host, 0, note=str(exc))
    flows = result.flows
    inside = flows.filter(pl.col("src_host") == pl.col("dst_host"))
    hosts = pl.concat([flows["src_host"], flows["dst_host"]]).n_unique() if flows.height else 0
    return HostTraffic(
        host_matrix(result),
        exact_sum(flows["bytes"]),
        exact_sum(inside["bytes"]),
        placement.gpus_per_host,
        hosts,
    )


def pick_jobs(jobs: pl.DataFrame, wanted: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """The jobs that get a section: those asked for (and the names not found), or else the largest
    job (GPUs, then bytes on the wire) of each class, the most common classes first."""
    import polars as pl

    if wanted:
        found = {row["job_id"]: row for row in jobs.filter(pl.col("job_id").is_in(list(wanted))).to_dicts()}
        picked = [found[j] for j in dict.fromkeys(wanted) if j in found]
        return picked[:MAX_JOB_SECTIONS], [j for j in dict.fromkeys(wanted) if j not in found]
    if jobs.is_empty():
        return [], []
    classes = (
        jobs.group_by("class", maintain_order=True)
        .len()
        .sort(["len", "class"], descending=[True, False])["class"]
        .to_list()
    )
    ranked = jobs.sort(["job_gpus", "wire_bytes", "job_id"], descending=[True, True, False], nulls_last=True)
    picked = []
    for cls in classes[:AUTO_JOB_SECTIONS]:
        picked.append(ranked.filter(pl.col("class") == cls).row(0, named=True))
    return picked, []


def load_report(ds: TraceDataset, scope: Scope, progress: Callable[[ReportStep], None] | None = None) -> ReportData:
    fleet = load_fleet(ds, progress)
    picked, missing = pick_jobs(fleet.jobs, scope.jobs)
    if scope.jobs and not picked:
        raise InputError(f"no job named {', '.join(scope.jobs)} (`tracekit query job_overview` lists them)")
    steps = Steps(progress, "job sections", JOB_STEPS * len(picked))
    return ReportData(fleet, [load_job(ds, job, steps) for job in picked], missing)
