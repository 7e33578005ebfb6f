"""A job's start spread across ranks, per collective."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import JobChart
from tracekit.report.charts.style import MICROSECONDS_LABEL, WIDTH, Spec, comm_scale, finish, heading, with_comm_names
from tracekit.report.format import fmax
from tracekit.report.page import Figure, slug

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import JobData


def job_stragglers(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: per collective (in start order), how far apart its ranks started it."""
    import altair as alt

    data = with_comm_names(frame)
    scale = comm_scale(data["comm_type"].unique().to_list())
    top = max(fmax(data["start_spread_us"]), 1.0)
    spread_ticks = [0.0] + [10.0**k for k in range(0, math.ceil(math.log10(top)) + 1)]
    chart = (
        alt.Chart(data.select("instance", "comm_type", "ranks", "start_spread_us", "last_rank", "in_bytes"))
        .mark_circle(size=28, opacity=0.8)
        .encode(
            x=alt.X("instance:Q", title="collective (in order of its first start)"),
            y=alt.Y(
                "start_spread_us:Q",
                scale=alt.Scale(type="symlog", domain=[0, spread_ticks[-1]]),
                axis=alt.Axis(values=spread_ticks, labelExpr=MICROSECONDS_LABEL),
                title="start spread across ranks",
            ),
            color=alt.Color("comm_type:N", scale=scale, title="collective"),
            tooltip=[
                "instance:Q",
                alt.Tooltip("comm_type:N", title="collective"),
                "ranks:Q",
                alt.Tooltip("start_spread_us:Q", title="spread µs", format=",.1f"),
                alt.Tooltip("last_rank:Q", title="last rank"),
                alt.Tooltip("in_bytes:Q", title="bytes", format=","),
            ],
        )
        .properties(
            width=WIDTH - 160,
            height=200,
            title=heading(
                f"{job_id}: start spread per collective",
                "Latest minus earliest start of each collective across its ranks (same process group and sequence).",
            ),
        )
    )
    return finish(chart)


def figure(job: JobData) -> Figure:
    job_id = job.job["job_id"]
    return Figure(
        f"fig-job-{slug(job_id)}-stragglers",
        f"{job_id}: start spread across ranks",
        [headlines.job_stragglers(job)],
        job_stragglers(job.stragglers, job_id) if job.stragglers.height else None,
        "no collective has start times on two or more ranks.",
        [("job_stragglers", {"job_id": job_id})],
    )


CHART = JobChart("job-stragglers", 40, figure, __doc__ or "")
