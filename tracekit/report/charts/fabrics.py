"""The fleet's slowdown per fabric and routing, from `tracekit replay --fleet`'s timings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import BLUE, GREY, RED, WIDTH, Spec, finish, heading
from tracekit.report.page import Figure

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


ROUTING_COLORS = {"ecmp": RED, "pinned": "#f28e2b", "spray": BLUE}


def fabric_slowdown(frame: pl.DataFrame) -> Spec:
    """Figure: per class, each fabric's slowdown over the ideal fabric for the jobs that use the network,
    one row per routing: a box from p25 to p75, whiskers from p10 to p90, a tick at the median."""
    import altair as alt
    import polars as pl

    data = frame.with_columns(pl.format("{} · {}", "class", "routing").alias("row"))
    routings = [r for r in ROUTING_COLORS if r in set(data["routing"])] + sorted(
        set(data["routing"]) - set(ROUTING_COLORS)
    )
    color = alt.Color(
        "routing:N",
        scale=alt.Scale(domain=routings, range=[ROUTING_COLORS.get(r, GREY) for r in routings]),
        legend=alt.Legend(title="routing", orient="bottom", direction="horizontal"),
    )
    high = max(float(data["p90"].max() or 1.0), 1.05)  # type: ignore[arg-type]
    x = alt.X(
        "p10:Q", title="slowdown over the ideal fabric (×)", scale=alt.Scale(domain=[1.0, high * 1.02], nice=False)
    )
    y = alt.Y("row:N", title=None, sort=None, axis=alt.Axis(labelLimit=220))
    tooltip: list[Any] = ["class:N", "fabric:N", "routing:N", alt.Tooltip("jobs:Q", format=","),
               *(alt.Tooltip(f"{c}:Q", format=".3f") for c in ("p10", "p25", "median", "p75", "p90", "max")),
               alt.Tooltip("slowed_share:Q", title="jobs slowed > 10%", format=".0%")]  # fmt: skip
    base = alt.Chart(data).encode(y=y, color=color, tooltip=tooltip)
    whiskers = base.mark_rule().encode(x=x, x2="p90:Q")
    box = base.mark_bar(size=10, opacity=0.55).encode(x=alt.X("p25:Q"), x2="p75:Q")
    middle = base.mark_tick(thickness=2, size=14, color="black").encode(x=alt.X("median:Q"))
    chart = (
        alt.layer(whiskers, box, middle)
        .properties(width=WIDTH / 2 - 60, height=alt.Step(16))
        .facet(column=alt.Column("fabric:N", title=None))
        .resolve_scale(x="shared")
        .properties(
            title=heading(
                "Slowdown of each class's collectives per fabric and routing",
                "Jobs that send over the network. Box: p25-p75 over the jobs; whiskers: p10-p90; tick: median.",
            )
        )
    )
    return finish(chart)


def figure(fleet: FleetData) -> Figure:
    return Figure(
        "fig-fabrics",
        "Slowdown per fabric and routing",
        [headlines.fabric_slowdown(fleet.fabrics) if fleet.fabrics is not None else []],
        fabric_slowdown(fleet.fabrics) if fleet.fabrics is not None and fleet.fabrics.height else None,
        "no job has been timed on fabrics: `tracekit replay DATASET --fleet -o OUT` times every job on a "
        "two-tier Clos and a rail-optimised fabric under ECMP and spraying.",
        ["fabric_slowdown_by_class"],
    )


CHART = FleetChart("fabrics", 80, figure, __doc__ or "")
