"""The fleet's GPUs per collective against GPUs per job."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import BLUE, GREY, RED, WIDTH, Spec, finish, heading, pow2_ticks
from tracekit.report.page import Figure

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


def group_vs_job(groups: pl.DataFrame) -> Spec:
    """Figure: GPUs per collective against GPUs per job, circle area = calls; the diagonal is 'the whole job'."""
    import altair as alt
    import polars as pl

    high = float(max(groups["job_gpus"].max(), groups["group_size"].max(), 128))  # type: ignore[type-var, arg-type]
    ticks = pow2_ticks(1, high, 10)
    scale = alt.Scale(type="log", base=2, domain=[1, ticks[-1]])
    axis = alt.Axis(values=ticks, format=",")
    dots = (
        alt.Chart(groups)
        .mark_circle(opacity=0.75, color=BLUE)
        .encode(
            x=alt.X("job_gpus:Q", scale=scale, axis=axis, title="GPUs per job"),
            y=alt.Y("group_size:Q", scale=scale, axis=axis, title="GPUs per collective (group size)"),
            size=alt.Size("calls:Q", title="calls", scale=alt.Scale(range=[15, 900])),
            tooltip=[
                alt.Tooltip("job_gpus:Q", title="GPUs per job"),
                alt.Tooltip("group_size:Q", title="GPUs per collective"),
                alt.Tooltip("jobs:Q", title="jobs", format=","),
                alt.Tooltip("calls:Q", title="calls", format=","),
                alt.Tooltip("share:Q", title="share of calls", format=".1%"),
                alt.Tooltip("wire_share:Q", title="share of wire bytes", format=".1%"),
            ],
        )
    )
    diagonal = (
        alt.Chart(pl.DataFrame({"x": [1.0, ticks[-1]], "y": [1.0, ticks[-1]]}))
        .mark_line(color=GREY, strokeDash=[4, 3])
        .encode(x="x:Q", y="y:Q")
    )
    cap = alt.Chart(pl.DataFrame({"y": [128.0], "label": ["128 GPUs"]}))
    rule = cap.mark_rule(color=RED, strokeDash=[2, 2]).encode(y="y:Q")
    label = cap.mark_text(align="left", dx=4, dy=-6, color=RED, fontSize=10).encode(
        x=alt.datum(1.0), y="y:Q", text="label:N"
    )
    chart = (diagonal + rule + label + dots).properties(
        width=WIDTH - 120,
        height=300,
        title=heading(
            "GPUs per collective against GPUs per job",
            "Circle area: calls (all ranks; send/recv left out). Dashed diagonal: a collective over the whole job.",
        ),
    )
    return finish(chart)


def figure(fleet: FleetData) -> Figure:
    return Figure(
        "fig-groups",
        "GPUs per collective against GPUs per job",
        [headlines.group_sizes(fleet.groups)],
        group_vs_job(fleet.groups) if fleet.groups.height else None,
        "no collective records its group size.",
        ["group_size_by_job_size"],
    )


CHART = FleetChart("groups", 60, figure, __doc__ or "")
