"""The report's sections: the fleet's figures and each job's (from the charts registry), the jobs table,
the method and the coverage line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import charts, headlines
from tracekit.report.data import JOBS_TABLE_ROWS
from tracekit.report.format import Sentence, comm_name, human_bytes, human_count, names_list, percent
from tracekit.report.page import Section, escape, slug, table_html
from tracekit.store.queries import query_comment

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData, JobData, ReportData


def fleet_section(fleet: FleetData) -> Section:
    figures = [f for chart in charts.fleet_charts() if (f := chart.figure(fleet)) is not None]
    return Section("fleet", "The fleet", [], figures)


def job_section(job: JobData) -> Section:
    info = job.job
    job_id = info["job_id"]
    label = f" · label {info['label']}" if info["label"] else ""
    figures = [f for chart in charts.job_charts() if (f := chart.figure(job)) is not None]
    return Section(f"job-{slug(job_id)}", f"Job {job_id}{label}", [headlines.job_intro(job)], figures)


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
