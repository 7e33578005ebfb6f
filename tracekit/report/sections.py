"""The report's sections: which figure shows which frame, under which headline, and the tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import charts, headlines
from tracekit.report.data import JOBS_TABLE_ROWS, TREND_MIN_JOBS, counted_periods
from tracekit.report.format import Sentence, comm_name, human_bytes, human_count, human_elems, names_list, percent
from tracekit.report.page import Figure, Section, escape, table_html
from tracekit.store.queries import query_comment

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData, HostTraffic, JobData, ReportData


def fleet_section(fleet: FleetData) -> Section:
    lines = headlines.fleet_headlines(fleet)
    figures = [
        Figure(
            "fig-sizes",
            "GPUs per job",
            [lines["sizes"]],
            charts.job_sizes(fleet.sizes) if fleet.sizes.height else None,
            "no job has a known size.",
            ["job_size_histogram"],
        ),
        Figure(
            "fig-classes",
            "Jobs per parallelism class",
            [lines["classes"]],
            charts.classes(fleet.jobs),
            queries=["job_class", "class_agreement"],
        ),
        Figure(
            "fig-mix",
            "Collective mix per class",
            [lines["mix"], lines["wire"]],
            charts.mix(fleet.mix) if fleet.mix.height else None,
            "the jobs issued no collectives.",
            ["collective_mix_by_class"],
        ),
        message_figure(fleet, "bytes"),
    ]
    if fleet.overview.get("elems_known_share"):
        figures.append(message_figure(fleet, "elements"))
    figures += [
        Figure(
            "fig-groups",
            "GPUs per collective against GPUs per job",
            [lines["groups"]],
            charts.group_vs_job(fleet.groups) if fleet.groups.height else None,
            "no collective records its group size.",
            ["group_size_by_job_size"],
        ),
        trend_figure(fleet, lines["trend"]),
        Figure(
            "fig-fabrics",
            "Slowdown per fabric and routing",
            [lines["fabrics"]],
            charts.fabric_slowdown(fleet.fabrics) if fleet.fabrics is not None and fleet.fabrics.height else None,
            "no job has been timed on fabrics: `tracekit replay DATASET --fleet -o OUT` times every job on a "
            "two-tier Clos and a rail-optimised fabric under ECMP and spraying.",
            ["fabric_slowdown_by_class"],
        ),
    ]
    return Section("fleet", "The fleet", [], figures)


def message_figure(fleet: FleetData, unit: str) -> Figure:
    import polars as pl

    data = fleet.cdf.filter(pl.col("unit") == unit)
    if unit == "bytes":
        return Figure(
            "fig-messages",
            "Message sizes per collective and model",
            [headlines.message_sizes(fleet.cdf, fleet.percentiles)],
            charts.message_cdf(fleet.cdf, "bytes") if data.height else None,
            "no collective records its size.",
            ["message_size_cdf", "message_size_percentiles"],
            after=percentile_table(fleet.percentiles),
        )
    share = fleet.overview["elems_known_share"]
    return Figure(
        "fig-messages-elements",
        "Message sizes in elements (as the Meta paper plots them)",
        [[f"Element counts are known where the trace records the element type: {percent(share)} of calls."]],
        charts.message_cdf(fleet.cdf, "elements") if data.height else None,
        "no collective records its element count.",
        ["message_size_cdf"],
    )


def trend_figure(fleet: FleetData, line: Sentence) -> Figure:
    import polars as pl

    counted = counted_periods(fleet.trend) if fleet.trend is not None else None
    months = fleet.period.months if fleet.period else 0
    if fleet.period is None:
        empty = "no job records when it started."
    elif fleet.trend is None or fleet.trend.filter(pl.col("calls") > 0).is_empty():
        empty = "no collective records its group size."
    else:
        empty = f"no period holds at least {TREND_MIN_JOBS} jobs whose collectives record their group size."
    return Figure(
        "fig-trend",
        "GPUs per job and per collective over time",
        [line],
        charts.trend(counted) if counted is not None and counted.height else None,
        empty,
        [("group_size_trend", {"start": fleet.period.start.isoformat(), "period_months": months})]
        if fleet.period
        else ["group_size_trend"],
    )


def percentile_table(percentiles: pl.DataFrame) -> str:
    if percentiles.is_empty():
        return ""
    rows = []
    for r in percentiles.sort(["class", "model", "comm_type"], nulls_last=True).iter_rows(named=True):
        rows.append(
            [
                r["class"],
                r["model"] or "(no label)",
                comm_name(r["comm_type"]),
                human_count(r["calls"]),
                human_bytes(r["p50_bytes"]),
                human_bytes(r["p90_bytes"]),
                human_bytes(r["p99_bytes"]),
                human_elems(r["p50_elems"]) if r["p50_elems"] is not None else "–",
                human_bytes(r["p50_wire_bytes"]),
                human_bytes(r["wire_bytes"]),
            ]
        )
    headers = [
        "class",
        "model",
        "collective",
        "calls",
        "p50 size",
        "p90 size",
        "p99 size",
        "p50 elements",
        "p50 on the wire",
        "total on the wire",
    ]
    return (
        "<details><summary>Percentiles per class, model and collective</summary>"
        + table_html(headers, rows, set(range(3, 10)))
        + "</details>"
    )


def job_section(job: JobData) -> Section:
    info = job.job
    job_id = info["job_id"]
    label = f" · label {info['label']}" if info["label"] else ""
    figures = [
        Figure(
            f"fig-job-{_slug(job_id)}-collectives",
            f"{job_id}: bytes by collective",
            [headlines.job_collectives(job)],
            charts.job_collectives(job.by_collective, job_id) if _positive(job.by_collective, "wire_bytes") else None,
            "the job issued no collective with a known size and group.",
            [("job_bytes_by_collective", {"job_id": job_id})],
        ),
        Figure(
            f"fig-job-{_slug(job_id)}-groups",
            f"{job_id}: bytes by process group",
            [headlines.job_groups(job)],
            charts.job_groups(job.by_group, job_id) if _positive(job.by_group, "wire_bytes") else None,
            "no collective with a known size and group.",
            [("job_bytes_by_group", {"job_id": job_id})],
        ),
        Figure(
            f"fig-job-{_slug(job_id)}-bandwidth",
            f"{job_id}: bus bandwidth",
            [headlines.job_bandwidth(job)],
            charts.job_bandwidth(job.bandwidth, job_id) if job.bandwidth.height else None,
            "the traces record no collective durations.",
            [("job_bandwidth", {"job_id": job_id})],
        ),
        Figure(
            f"fig-job-{_slug(job_id)}-stragglers",
            f"{job_id}: start spread across ranks",
            [headlines.job_stragglers(job)],
            charts.job_stragglers(job.stragglers, job_id) if job.stragglers.height else None,
            "no collective has start times on two or more ranks.",
            [("job_stragglers", {"job_id": job_id})],
        ),
    ]
    if job.matrix.height:
        figures.append(
            Figure(
                f"fig-job-{_slug(job_id)}-matrix",
                f"{job_id}: all-to-all volume matrix",
                [headlines.job_matrix(job)],
                charts.job_matrix(job.matrix, job_id, job.ranks_per_cell),
                queries=[("alltoallv_matrix", {"job_id": job_id, "ranks_per_cell": job.ranks_per_cell})],
            )
        )
    if job.hosts is not None:
        figures.append(host_figure(job, job.hosts))
    return Section(f"job-{_slug(job_id)}", f"Job {job_id}{label}", [headlines.job_intro(job)], figures)


def host_figure(job: JobData, traffic: HostTraffic) -> Figure:
    job_id = job.job["job_id"]
    if traffic.note:
        empty = f"the job could not be replayed here ({traffic.note})."
    elif not traffic.bytes:
        empty = "the job has no collective to replay."
    else:
        empty = f"no byte crosses the network: the job fits in one host of {traffic.gpus_per_host} GPUs."
    return Figure(
        f"fig-job-{_slug(job_id)}-hosts",
        f"{job_id}: traffic between hosts",
        [headlines.job_hosts(job)],
        charts.job_hosts(traffic.matrix, job_id, traffic.gpus_per_host) if traffic.matrix.height else None,
        empty,
        replay_job=job_id,
    )


def _positive(frame: pl.DataFrame, column: str) -> bool:
    return frame.height > 0 and bool(frame[column].sum())


def _slug(text: str) -> str:
    """An HTML id for a job: readable, and unique through a hash of the whole name."""
    import hashlib

    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in text)[:40] + f"-{digest}"


def jobs_table(jobs: pl.DataFrame, pinned: list[str]) -> Section:
    import polars as pl

    if jobs.is_empty():
        return Section("jobs", "Jobs", [["No jobs."]])
    ordered = pl.concat(
        [
            jobs.filter(pl.col("job_id").is_in(pinned)),
            jobs.filter(~pl.col("job_id").is_in(pinned)).sort(["wire_bytes", "job_id"], descending=[True, False]),
        ]
    ).head(max(JOBS_TABLE_ROWS, len(pinned)))
    rows = []
    for r in ordered.iter_rows(named=True):
        cls = r["class"] + (f" (label; inferred {r['inferred_class']})" if r["overridden"] else "")
        rows.append(
            [
                r["job_id"],
                r["label"] or "",
                cls,
                human_count(r["job_gpus"]),
                human_count(r["ranks_seen"]),
                r["started_at"].strftime("%Y-%m-%d") if r["started_at"] else "",
                human_count(r["calls"]),
                human_bytes(r["in_bytes"]),
                human_bytes(r["wire_bytes"]),
                human_count(r["max_group_size"]),
                names_list([comm_name(c) for c in r["comm_types"]]),
            ]
        )
    headers = [
        "job",
        "label",
        "class",
        "GPUs",
        "ranks seen",
        "started",
        "calls",
        "passed in",
        "on the wire",
        "largest group",
        "collectives",
    ]
    shown = len(rows)
    intro = (
        f"All {shown} jobs, those with the most bytes on the wire first."
        if shown == jobs.height
        else f"The {shown} jobs with the most bytes on the wire (of {human_count(jobs.height)}); "
        "`tracekit query job_overview` lists them all."
    )
    return Section("jobs", "Jobs", [[intro]], html=table_html(headers, rows, {3, 4, 6, 7, 8, 9}))


def method_section() -> Section:
    items = []
    for name, title in (
        ("collective_wire_bytes", "Bytes on the wire"),
        ("job_class", "Parallelism class"),
        ("collective_bandwidth", "Bus bandwidth"),
    ):
        items.append(
            f"<dt>{escape(title)}: queries/{escape(name)}.sql</dt><dd><pre>{escape(query_comment(name))}</pre></dd>"
        )
    return Section(
        "method",
        "How the numbers are made",
        [
            [
                "Every figure is one of tracekit's queries (queries/*.sql), run over the dataset; its caption gives "
                "the command that prints the same numbers. Calls are counted on every rank that issued them. "
                "in_bytes is what a rank passes into a collective (Chakra's comm_size); bytes on the wire are "
                "what it sends under the textbook algorithms below."
            ]
        ],
        html=f'<div class="method"><dl>{"".join(items)}</dl></div>',
    )


def coverage(overview: dict[str, object]) -> Sentence:
    def share(key: str) -> str:
        value = overview.get(key)
        return percent(float(value)) if isinstance(value, int | float) else "–"

    if not overview.get("calls"):
        failed, traces = overview.get("traces_failed", 0), overview.get("traces", 0)
        return [f"No collective calls. {failed} of {traces} trace files failed to parse."]
    return [
        f"Of the collective calls, {share('group_size_known_share')} record their group size, "
        f"{share('elems_known_share')} their element count and {share('timed_share')} their duration. "
        f"{overview.get('traces_failed', 0)} of {overview.get('traces', 0)} trace files failed to parse."
    ]


def report_sections(data: ReportData) -> list[Section]:
    fleet = data.fleet
    sections = [fleet_section(fleet)]
    sections += [job_section(job) for job in data.job_sections]
    sections.append(jobs_table(fleet.jobs, [j.job["job_id"] for j in data.job_sections]))
    sections.append(method_section())
    return sections


def no_data_section(reason: str) -> Section:
    return Section("nodata", "No data", html=f'<p class="nodata">No data: {escape(reason)}</p>')
