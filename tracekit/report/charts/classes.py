"""The fleet's jobs per parallelism class, by where the class came from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import BLUE, WIDTH, Spec, finish, heading
from tracekit.report.page import Figure

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


def classes(jobs: pl.DataFrame) -> Spec:
    """Figure: jobs per class, split by where the class came from (inferred, label agreeing, label overriding)."""
    import altair as alt
    import polars as pl

    source = (
        pl.when(pl.col("class_source") == "inferred")
        .then(pl.lit("inferred from collectives"))
        .when(pl.col("overridden"))
        .then(pl.lit("label, overriding the inference"))
        .otherwise(pl.lit("label, confirmed by the inference"))
    )
    data = jobs.with_columns(source.alias("source")).group_by("class", "source", maintain_order=True).len("jobs")
    order = (
        data.group_by("class", maintain_order=True)
        .agg(pl.col("jobs").sum())
        .sort("jobs", descending=True)["class"]
        .to_list()
    )
    domain = ["inferred from collectives", "label, confirmed by the inference", "label, overriding the inference"]
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("class:N", sort=order, title=None),
            x=alt.X("jobs:Q", title="jobs", axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.Color(
                "source:N",
                scale=alt.Scale(domain=domain, range=[BLUE, "#8cd17d", "#f1ce63"]),
                legend=alt.Legend(title="class from", orient="bottom", direction="horizontal"),
            ),
            order=alt.Order("source:O"),
            tooltip=["class:N", "source:N", alt.Tooltip("jobs:Q", format=",")],
        )
        .properties(
            width=WIDTH,
            height=alt.Step(22),
            title=heading("Jobs per parallelism class", "Class from the job's collectives (job_class), or its label."),
        )
    )
    return finish(chart)


def figure(fleet: FleetData) -> Figure:
    return Figure(
        "fig-classes",
        "Jobs per parallelism class",
        [headlines.class_lines(fleet)],
        classes(fleet.jobs),
        queries=["job_class", "class_agreement"],
    )


CHART = FleetChart("classes", 20, figure, __doc__ or "")
