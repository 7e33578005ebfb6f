"""A job's bytes per rank by collective, passed in and on the wire."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import JobChart, positive
from tracekit.report.charts.style import BLUE, BYTES_LABEL, WIDTH, Spec, finish, heading, pow2_ticks, with_comm_names
from tracekit.report.format import fmax, fmin
from tracekit.report.page import Figure, slug

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import JobData


X_TITLE = "bytes per rank (all its calls of the type)"


def job_collectives(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: a job's bytes per rank by collective, passed in and on the wire, as a dot plot (log axis)."""
    import altair as alt
    import polars as pl

    data = with_comm_names(frame)
    long = pl.concat(
        [
            data.select(
                "comm_type", (pl.col("in_bytes") / pl.col("ranks")).alias("bytes"), pl.lit("passed in").alias("measure")
            ),
            data.select(
                "comm_type", pl.col("wire_bytes_per_rank").alias("bytes"), pl.lit("on the wire").alias("measure")
            ),
        ]
    ).filter(pl.col("bytes") > 0)
    ticks = pow2_ticks(fmin(long["bytes"]), fmax(long["bytes"]), 7)
    xscale = alt.Scale(type="log", base=2, domain=[ticks[0], ticks[-1]])
    x = alt.X("bytes:Q", scale=xscale, axis=alt.Axis(values=ticks, labelExpr=BYTES_LABEL), title=X_TITLE)
    order = data.sort("wire_bytes", descending=True, nulls_last=True)["comm_type"].to_list()
    y = alt.Y("comm_type:N", title=None, sort=order)
    span = (
        alt.Chart(long)
        .mark_rule(color="#c8c8c8", strokeWidth=2)
        .encode(
            x=alt.X("min(bytes):Q", scale=xscale, axis=alt.Axis(values=ticks, labelExpr=BYTES_LABEL), title=X_TITLE),
            x2="max(bytes):Q",
            y=y,
        )
    )
    dots = (
        alt.Chart(long)
        .mark_circle(size=110, opacity=1)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "measure:N", sort=["passed in", "on the wire"], scale=alt.Scale(range=["#9d9d9d", BLUE]), title=None
            ),
            tooltip=[
                alt.Tooltip("comm_type:N", title="collective"),
                "measure:N",
                alt.Tooltip("bytes:Q", title="bytes per rank", format=",.0f"),
            ],
        )
    )
    chart = (span + dots).properties(
        width=WIDTH - 160,
        height=alt.Step(26),
        title=heading(f"{job_id}: bytes per rank by collective", "Bytes passed in (in_bytes) and sent on the wire."),
    )
    return finish(chart)


def figure(job: JobData) -> Figure:
    job_id = job.job["job_id"]
    return Figure(
        f"fig-job-{slug(job_id)}-collectives",
        f"{job_id}: bytes by collective",
        [headlines.job_collectives(job)],
        job_collectives(job.by_collective, job_id) if positive(job.by_collective, "wire_bytes") else None,
        "the job issued no collective with a known size and group.",
        [("job_bytes_by_collective", {"job_id": job_id})],
    )


CHART = JobChart("job-collectives", 10, figure, __doc__ or "")
