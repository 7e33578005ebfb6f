"""A job's bytes on the wire per process group, the busiest groups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import JobChart, positive
from tracekit.report.charts.style import BLUE, WIDTH, Spec, finish, heading
from tracekit.report.page import Figure, slug

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import JobData


MAX_GROUPS_SHOWN = 20


def job_groups(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: a job's wire bytes per process group (the busiest groups)."""
    import altair as alt
    import polars as pl

    data = (
        frame.filter(pl.col("wire_bytes") > 0)
        .sort("wire_bytes", descending=True)
        .head(MAX_GROUPS_SHOWN)
        .with_columns(
            pl.format(
                "{} · {} · {} GPUs",
                pl.col("pg_name").fill_null("?"),
                pl.col("pg_desc").fill_null("–"),
                pl.col("group_size").cast(pl.String).fill_null("?"),
            ).alias("group"),
            pl.col("comm_types").list.join(", ").alias("collectives"),
        )
    )
    chart = (
        alt.Chart(data.select("group", "wire_bytes", "wire_share", "calls", "collectives"))
        .mark_bar(color=BLUE)
        .encode(
            y=alt.Y("group:N", sort="-x", title=None),
            x=alt.X("wire_share:Q", title="share of the job's bytes on the wire", axis=alt.Axis(format="%")),
            tooltip=[
                "group:N",
                "collectives:N",
                alt.Tooltip("calls:Q", format=","),
                alt.Tooltip("wire_bytes:Q", title="wire bytes", format=",.0f"),
                alt.Tooltip("wire_share:Q", title="share", format=".1%"),
            ],
        )
        .properties(
            width=WIDTH - 200,
            height=alt.Step(18),
            title=heading(
                f"{job_id}: bytes on the wire per process group",
                f"Group name · description · size; the {MAX_GROUPS_SHOWN} busiest groups at most.",
            ),
        )
    )
    return finish(chart)


def figure(job: JobData) -> Figure:
    job_id = job.job["job_id"]
    return Figure(
        f"fig-job-{slug(job_id)}-groups",
        f"{job_id}: bytes by process group",
        [headlines.job_groups(job)],
        job_groups(job.by_group, job_id) if positive(job.by_group, "wire_bytes") else None,
        "no collective with a known size and group.",
        [("job_bytes_by_group", {"job_id": job_id})],
    )


CHART = JobChart("job-groups", 20, figure, __doc__ or "")
