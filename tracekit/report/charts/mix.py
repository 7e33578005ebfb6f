"""The fleet's collective mix per class: shares of calls, of bytes passed in and of bytes on the wire."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import WIDTH, Spec, comm_scale, finish, heading, with_comm_names
from tracekit.report.page import Figure

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


def mix(mix_frame: pl.DataFrame) -> Spec:
    """Figure: collective mix per class, as shares of calls, of bytes passed in and of bytes on the wire."""
    import altair as alt
    import polars as pl

    data = with_comm_names(mix_frame)
    long = pl.concat(
        [
            data.select(
                "class", "comm_type", pl.col("calls").cast(pl.Float64).alias("value"), pl.lit("calls").alias("m")
            ),
            data.select(
                "class",
                "comm_type",
                pl.col("in_bytes").cast(pl.Float64).alias("value"),
                pl.lit("bytes passed in").alias("m"),
            ),
            data.select(
                "class",
                "comm_type",
                pl.col("wire_bytes").cast(pl.Float64).alias("value"),
                pl.lit("bytes on the wire").alias("m"),
            ),
        ]
    ).with_columns((pl.col("value") / pl.col("value").sum().over("class", "m")).fill_nan(0).alias("share"))
    scale = comm_scale(long["comm_type"].unique().to_list())
    panels = []
    for measure in ("calls", "bytes passed in", "bytes on the wire"):
        panels.append(
            alt.Chart(long.filter(pl.col("m") == measure))
            .mark_bar()
            .encode(
                y=alt.Y("class:N", title=None, axis=alt.Axis(labels=measure == "calls")),
                x=alt.X("share:Q", stack="normalize", title=f"share of {measure}", axis=alt.Axis(format="%")),
                color=alt.Color("comm_type:N", scale=scale, title="collective"),
                order=alt.Order("comm_type:O"),
                tooltip=[
                    "class:N",
                    alt.Tooltip("comm_type:N", title="collective"),
                    alt.Tooltip("share:Q", format=".1%", title=measure),
                ],
            )
            .properties(width=WIDTH // 3 - 10, height=alt.Step(24))
        )
    chart = alt.hconcat(*panels, spacing=12).properties(
        title=heading(
            "Collective mix per class",
            "Share of calls (all ranks), of bytes passed in (in_bytes) and of bytes sent on the wire "
            "(textbook ring/direct, collective_wire_bytes).",
        )
    )
    return finish(chart)


def figure(fleet: FleetData) -> Figure:
    return Figure(
        "fig-mix",
        "Collective mix per class",
        [headlines.mix(fleet.mix, fleet.jobs), headlines.wire(fleet.mix)],
        mix(fleet.mix) if fleet.mix.height else None,
        "the jobs issued no collectives.",
        ["collective_mix_by_class"],
    )


CHART = FleetChart("mix", 30, figure, __doc__ or "")
