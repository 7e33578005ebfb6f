"""A job's traffic between hosts: its collectives replayed as flows (the Meta paper's Figure 3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import JobChart
from tracekit.report.charts.style import Spec, finish, heading
from tracekit.report.page import Figure, slug

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import JobData


def job_hosts(frame: pl.DataFrame, job_id: str, gpus_per_host: int) -> Spec:
    """Figure: network bytes from each host to each other host (the Meta paper's Figure 3)."""
    import altair as alt

    hosts = max(1, frame["src_host"].n_unique(), frame["dst_host"].n_unique())
    chart = (
        alt.Chart(frame.select("src_host", "dst_host", "bytes", "share"))
        .mark_rect()
        .encode(
            x=alt.X("dst_host:O", title="receiving host"),
            y=alt.Y("src_host:O", title="sending host"),
            color=alt.Color(
                "share:Q",
                title="share of the busiest pair",
                scale=alt.Scale(scheme="blues", domain=[0, 1]),
                legend=alt.Legend(format=".0%"),
            ),
            tooltip=[
                alt.Tooltip("src_host:O", title="from host"),
                alt.Tooltip("dst_host:O", title="to host"),
                alt.Tooltip("bytes:Q", format=",.0f"),
                alt.Tooltip("share:Q", format=".0%"),
            ],
        )
        .properties(
            width=alt.Step(max(6, min(28, 420 // hosts))),
            height=alt.Step(max(6, min(28, 420 // hosts))),
            title=heading(
                f"{job_id}: traffic between hosts",
                f"Collectives replayed as flows, {gpus_per_host} GPUs per host; bytes inside a host (NVLink) left out.",
            ),
        )
    )
    return finish(chart)


def figure(job: JobData) -> Figure | None:
    traffic = job.hosts
    if traffic is None:
        return None
    job_id = job.job["job_id"]
    if traffic.note:
        empty = f"the job could not be replayed here ({traffic.note})."
    elif not traffic.bytes:
        empty = "the job has no collective to replay."
    else:
        empty = f"no byte crosses the network: the job fits in one host of {traffic.gpus_per_host} GPUs."
    return Figure(
        f"fig-job-{slug(job_id)}-hosts",
        f"{job_id}: traffic between hosts",
        [headlines.job_hosts(job)],
        job_hosts(traffic.matrix, job_id, traffic.gpus_per_host) if traffic.matrix.height else None,
        empty,
        replay_job=job_id,
    )


CHART = JobChart("job-hosts", 60, figure, __doc__ or "")
