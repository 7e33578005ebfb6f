"""Stages on generated fleets: ingest against the decode floor, 1 worker against 2, adding a job,
every shipped query, the report. `fleet-30k` runs them all on the 30,000-job fleet."""

from __future__ import annotations

import shutil

from bench.suite import Context, Measure, Row, probe, ratio_row, stage


def ingest_rows(ctx: Context, jobs: int, name: str) -> list[Row]:
    fleet = ctx.fleet(jobs)
    floor = probe("decode_floor", {"folder": str(fleet)})
    records = floor.counts["records"]
    rows = []
    # Written where later stages look for the ingested fleet (Context.dataset).
    two = probe("ingest", {"paths": [str(fleet)], "out": str(ctx.fresh(f"dataset-{jobs}")), "workers": 2})
    rows.append(
        ratio_row(
            name,
            f"ingest {jobs} jobs, 2 workers",
            two,
            floor,
            "decode floor, 1 process",
            amount=records,
            unit="records",
            of="wall",
            target="<= 2.5x the decode floor",
            limit=2.5,
        )
    )
    if jobs < 30_000:  # one worker on the 30,000-job fleet: hours
        one = probe("ingest", {"paths": [str(fleet)], "out": str(ctx.fresh(f"ingest-{jobs}-1")), "workers": 1})
        rows.append(ratio_row(name, f"ingest {jobs} jobs, 1 worker", one, floor, "decode floor, 1 process"))
        scaling = ratio_row(name, "scaling: 1 worker / 2 workers (wall)", two, one, "ingest, 1 worker", of="wall")
        if scaling.ratio:
            scaling.ratio = 1 / scaling.ratio
            scaling.target, scaling.met = ">= 1.7x", scaling.ratio >= 1.7
        rows.append(scaling)
    if _has_dask() and not ctx.quick and jobs < 30_000:  # the local pool's figure is the one to beat
        dask = probe(
            "ingest",
            {
                "paths": [str(fleet)],
                "out": str(ctx.fresh(f"ingest-{jobs}-dask")),
                "workers": 2,
                "executor": "dask-local",
            },
        )
        rows.append(ratio_row(name, "ingest, dask-local 2 workers", dask, two, "ingest, local pool of 2", of="wall"))
    rows.append(
        Row(name, "decode floor (the baseline)", floor, records, "records", target=f"{records:,} records, 1 process")
    )
    return rows


def add_job_rows(ctx: Context, jobs: int, name: str) -> list[Row]:
    """One new job added to the ingested fleet (a copy of it, so other stages see the fleet as it was)."""
    source = ctx.dataset(jobs)
    target = ctx.fresh(f"add-to-{jobs}")
    shutil.copytree(source, target)
    one_job = ctx.fleet(1, seed=99, name="one-job")
    added = probe("ingest", {"paths": [str(one_job)], "out": str(target), "workers": 2})
    alone = probe("ingest", {"paths": [str(one_job)], "out": str(ctx.fresh("one-job-alone")), "workers": 2})
    shutil.rmtree(target, ignore_errors=True)
    row = ratio_row(name, f"add 1 job to {jobs} jobs", added, alone, "the same job, empty dataset", of="wall")
    row.target = "<= 5 s on 30,000 jobs"
    row.met = added.wall <= 5 if jobs >= 30_000 else None
    return [row]


def query_rows(ctx: Context, jobs: int, name: str) -> list[Row]:
    import tracekit
    from tracekit.store.queries import query_names, query_params

    dataset = ctx.dataset(jobs)
    with tracekit.open(dataset) as ds:
        job_id = ds.sql("select job_id from collectives group by 1 order by count(*) desc, 1 limit 1").fetchall()[0][0]
        start = ds.sql("select min(started_at)::date::varchar from jobs").fetchall()[0][0] or "2000-01-01"
    values = {"job_id": job_id, "rank": 0, "start": start, "period_months": 3, "ranks_per_cell": 8}
    scan = _timed(probe("scan", {"dataset": str(dataset)}))
    names = query_names()
    calls = [[q, {p: values[p] for p in query_params(q)}] for q in names]
    ran = probe("queries", {"dataset": str(dataset), "queries": calls, "repeat": QUERY_REPEAT})
    seconds, cpu = ran.counts["seconds"], ran.counts["cpu_seconds"]
    rows = []
    for query in names:
        rows.append(_query_row(name, f"query {query}", Measure(seconds[query], cpu[query], ran.peak_mib), scan, jobs))
    slowest = max(names, key=seconds.__getitem__)
    under = sum(seconds[q] < QUERY_SECONDS for q in names)
    measured = Measure(seconds[slowest], cpu[slowest], ran.peak_mib)
    row = _query_row(name, f"slowest: {slowest}", measured, scan, jobs)
    row.target = f"{under} of {len(names)} under {QUERY_SECONDS:g} s; {row.target}"
    rows.append(row)
    return rows


QUERY_SECONDS = 2.0  # the target for every query on the 30,000-job dataset
QUERY_REPEAT = 3  # each query's time is the median of this many runs


def _query_row(stage_name: str, label: str, measured: Measure, scan: Measure, jobs: int) -> Row:
    row = ratio_row(stage_name, label, measured, scan, "one scan of collectives", of="wall")
    row.target = f"< {QUERY_SECONDS:g} s on 30,000 jobs (median of {QUERY_REPEAT})"
    row.met = measured.wall < QUERY_SECONDS if jobs >= 30_000 else None
    return row


def report_rows(ctx: Context, jobs: int, name: str) -> list[Row]:
    dataset = ctx.dataset(jobs)
    alone = probe("report_queries", {"dataset": str(dataset)})
    full = probe("report", {"dataset": str(dataset)})
    row = ratio_row(name, f"tracekit report, {jobs} jobs", full, alone, "its queries alone", of="wall")
    row.target = "< 60 s on 30,000 jobs"
    row.met = full.wall < 60 if jobs >= 30_000 else None
    return [row]


def _timed(measure: Measure) -> Measure:
    """The action's own time (the probe's process start-up and connecting left out)."""
    return Measure(measure.counts.get("seconds", measure.wall), measure.cpu, measure.peak_mib, measure.counts)


def _has_dask() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed") is not None


@stage("ingest", "a generated fleet (--jobs, default 1,000) through `tracekit ingest`, against the decode floor")
def ingest_stage(ctx: Context) -> list[Row]:
    return ingest_rows(ctx, ctx.fleet_jobs, "ingest")


@stage("add-job", "one job added to the ingested fleet, against ingesting it alone")
def add_job_stage(ctx: Context) -> list[Row]:
    return add_job_rows(ctx, ctx.fleet_jobs, "add-job")


@stage("queries", "every query of queries/ on the ingested fleet, against one scan of collectives")
def queries_stage(ctx: Context) -> list[Row]:
    return query_rows(ctx, ctx.fleet_jobs, "queries")


@stage("report", "`tracekit report` on the ingested fleet, against its queries alone")
def report_stage(ctx: Context) -> list[Row]:
    return report_rows(ctx, ctx.fleet_jobs, "report")


@stage("fleet-30k", "all of the above on the 30,000-job fleet (~10 GB in the work folder; long)", default=False)
def fleet_30k_stage(ctx: Context) -> list[Row]:
    jobs = 30_000
    return (
        ingest_rows(ctx, jobs, "fleet-30k")
        + add_job_rows(ctx, jobs, "fleet-30k")
        + query_rows(ctx, jobs, "fleet-30k")
        + report_rows(ctx, jobs, "fleet-30k")
    )
