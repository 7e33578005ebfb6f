"""A job's bus bandwidth by message size, per collective."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import JobChart
from tracekit.report.charts.style import (
    BYTES_LABEL,
    WIDTH,
    Spec,
    comm_scale,
    finish,
    heading,
    pow2_ticks,
    with_comm_names,
)
from tracekit.report.format import fmax, fmin
from tracekit.report.page import Figure, slug

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import JobData


def job_bandwidth(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: median bus bandwidth against message size per collective, with its p10–p90 band."""
    import altair as alt

    data = with_comm_names(frame)
    low, high = fmin(data["size_lo"]), fmax(data["size_lo"])
    ticks = pow2_ticks(low, max(high, low * 2), 7)
    x = alt.X(
        "size_lo:Q",
        scale=alt.Scale(type="log", base=2, domain=[ticks[0], ticks[-1]]),
        axis=alt.Axis(values=ticks, labelExpr=BYTES_LABEL),
        title="message size (nccl-tests' size, log2 bin)",
    )
    scale = comm_scale(data["comm_type"].unique().to_list())
    base = alt.Chart(data).encode(x=x, color=alt.Color("comm_type:N", scale=scale, title="collective"))
    band = base.mark_area(opacity=0.18).encode(y="p10_busbw_gbps:Q", y2="p90_busbw_gbps:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("p50_busbw_gbps:Q", title="bus bandwidth (GB/s)"),
        tooltip=[
            alt.Tooltip("comm_type:N", title="collective"),
            alt.Tooltip("size_lo:Q", title="size from", format=","),
            alt.Tooltip("calls:Q", format=","),
            alt.Tooltip("p50_busbw_gbps:Q", title="median busbw", format=".3~g"),
            alt.Tooltip("p50_algbw_gbps:Q", title="median algbw", format=".3~g"),
            alt.Tooltip("p50_duration_us:Q", title="median µs", format=".3~g"),
        ],
    )
    chart = (band + line).properties(
        width=WIDTH - 160,
        height=220,
        title=heading(f"{job_id}: bus bandwidth by message size", "Median over calls and ranks; band: p10–p90."),
    )
    return finish(chart)


def figure(job: JobData) -> Figure:
    job_id = job.job["job_id"]
    return Figure(
        f"fig-job-{slug(job_id)}-bandwidth",
        f"{job_id}: bus bandwidth",
        [headlines.job_bandwidth(job)],
        job_bandwidth(job.bandwidth, job_id) if job.bandwidth.height else None,
        "the traces record no collective durations.",
        [("job_bandwidth", {"job_id": job_id})],
    )


CHART = JobChart("job-bandwidth", 30, figure, __doc__ or "")
