"""A job's all-to-all(v) volume matrix, when it has all-to-alls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import JobChart
from tracekit.report.charts.style import Spec, finish, heading
from tracekit.report.page import Figure, slug

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import JobData


def job_matrix(frame: pl.DataFrame, job_id: str, ranks_per_cell: int) -> Spec:
    """Figure: the all-to-all(v) volume matrix, sender rows, receiver columns."""
    import altair as alt

    unit = "rank" if ranks_per_cell == 1 else f"host ({ranks_per_cell} ranks, first rank shown)"
    chart = (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("dst:O", title=f"receiving {unit}"),
            y=alt.Y("src:O", title=f"sending {unit}"),
            color=alt.Color("bytes:Q", title="bytes", scale=alt.Scale(scheme="blues"), legend=alt.Legend(format=".2s")),
            tooltip=[
                alt.Tooltip("src:O", title="from"),
                alt.Tooltip("dst:O", title="to"),
                alt.Tooltip("bytes:Q", format=",.0f"),
                alt.Tooltip("calls:Q", format=","),
            ],
        )
        .properties(
            width=alt.Step(max(8, min(28, 360 // max(1, frame["dst"].n_unique())))),
            height=alt.Step(max(8, min(28, 360 // max(1, frame["src"].n_unique())))),
            title=heading(
                f"{job_id}: all-to-all volume matrix",
                "Bytes from the recorded per-peer splits; the diagonal stays on the sender.",
            ),
        )
    )
    return finish(chart)


def figure(job: JobData) -> Figure | None:
    job_id = job.job["job_id"]
    if not job.matrix.height:
        return None
    return Figure(
        f"fig-job-{slug(job_id)}-matrix",
        f"{job_id}: all-to-all volume matrix",
        [headlines.job_matrix(job)],
        job_matrix(job.matrix, job_id, job.ranks_per_cell),
        queries=[("alltoallv_matrix", {"job_id": job_id, "ranks_per_cell": job.ranks_per_cell})],
    )


CHART = JobChart("job-matrix", 50, figure, __doc__ or "")
