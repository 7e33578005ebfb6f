"""The fleet's GPUs per job: share of jobs per size, multiples of 8 GPUs in blue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import BLUE, RED, WIDTH, Spec, finish, heading
from tracekit.report.page import Figure

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


MAX_SIZES_SHOWN = 40


def job_sizes(sizes: pl.DataFrame) -> Spec:
    """Figure: share of jobs per GPU count, multiples of 8 in blue (one bar per size, or per power-of-two
    range when there are too many sizes)."""
    import altair as alt
    import polars as pl

    kind = pl.when(pl.col("multiple_of_8")).then(pl.lit("multiple of 8")).otherwise(pl.lit("not a multiple of 8"))
    if sizes.height <= MAX_SIZES_SHOWN:
        data = sizes.with_columns(kind.alias("kind"), pl.col("job_gpus").cast(pl.String).alias("size"))
        order = data["size"].to_list()
        x_title = "GPUs per job"
    else:
        low = (2 ** pl.col("job_gpus").log(2).floor()).cast(pl.Int64)
        data = (
            sizes.with_columns(kind.alias("kind"), low.alias("low"))
            .group_by("low", "kind", maintain_order=True)
            .agg(pl.col("jobs").sum(), pl.col("share").sum())
            .with_columns(
                pl.format("{}–{}", pl.col("low"), pl.col("low") * 2 - 1).alias("size"),
            )
            .sort("low")
        )
        order = list(dict.fromkeys(data["size"].to_list()))
        x_title = "GPUs per job (power-of-two ranges)"
    top = float(data.group_by("size", maintain_order=True).agg(pl.col("share").sum())["share"].max())  # type: ignore[arg-type]
    base = alt.Chart(data).encode(
        x=alt.X("size:N", sort=order, title=x_title, axis=alt.Axis(labelAngle=0)),
    )
    bars = base.mark_bar().encode(
        y=alt.Y(
            "share:Q",
            stack="zero",
            title="share of jobs",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, top * 1.12]),
        ),
        color=alt.Color(
            "kind:N",
            scale=alt.Scale(domain=["multiple of 8", "not a multiple of 8"], range=[BLUE, RED]),
            legend=alt.Legend(title=None, orient="top", direction="horizontal"),
        ),
        tooltip=[
            alt.Tooltip("size:N", title="GPUs"),
            alt.Tooltip("jobs:Q", title="jobs", format=","),
            alt.Tooltip("share:Q", title="share", format=".1%"),
        ],
    )
    totals = data.group_by("size", maintain_order=True).agg(pl.col("share").sum())
    labels = (
        alt.Chart(totals)
        .mark_text(dy=-6, fontSize=10, color="#333")
        .encode(x=alt.X("size:N", sort=order), y=alt.Y("share:Q"), text=alt.Text("share:Q", format=".0%"))
        .transform_filter("datum.share >= 0.005")
    )
    chart = (bars + labels).properties(
        width=WIDTH,
        height=240,
        title=heading("GPUs per job", "Share of jobs by size. Blue: multiples of 8 GPUs (whole 8-GPU servers)."),
    )
    return finish(chart)


def figure(fleet: FleetData) -> Figure:
    return Figure(
        "fig-sizes",
        "GPUs per job",
        [headlines.job_sizes(fleet.sizes)],
        job_sizes(fleet.sizes) if fleet.sizes.height else None,
        "no job has a known size.",
        ["job_size_histogram"],
    )


CHART = FleetChart("sizes", 10, figure, __doc__ or "")
