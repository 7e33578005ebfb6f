"""The fleet's GPUs per job and per collective over time, per period of job start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import WIDTH, Spec, finish, heading, pow2_ticks
from tracekit.report.data import TREND_MIN_JOBS, counted_periods
from tracekit.report.format import fmax, fmin
from tracekit.report.page import Figure

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


TREND_SERIES = {
    "median_job_gpus": ("median job", "jobs"),
    "p90_job_gpus": ("p90 job", "jobs"),
    "max_job_gpus": ("largest job", "jobs"),
    "mean_group_size": ("mean collective (per call)", "collectives"),
    "byte_weighted_group_size": ("mean collective (per wire byte)", "collectives"),
    "max_group_size": ("largest collective", "collectives"),
}


def trend(trend_frame: pl.DataFrame) -> Spec:
    """Figure: GPUs per job and per collective per period, log2 axis."""
    import altair as alt
    import polars as pl

    # Every period between the first and the last, so that a line breaks where a period has no jobs.
    first, last = int(fmin(trend_frame["period"])), int(fmax(trend_frame["period"]))
    periods = pl.DataFrame({"period": list(range(first, last + 1))}, schema={"period": trend_frame.schema["period"]})
    months = _months_between(trend_frame)
    start = trend_frame.row(0, named=True)
    full = periods.join(trend_frame.filter(pl.col("calls") > 0), on="period", how="left").with_columns(
        pl.col("period")
        .map_elements(
            lambda p: _add_months(start["period_start"], (p - start["period"]) * months), return_dtype=pl.Date
        )
        .alias("period_start")
    )
    long = full.unpivot(
        index=["period_start", "jobs"], on=list(TREND_SERIES), variable_name="series", value_name="gpus"
    ).with_columns(
        pl.col("series").replace_strict({k: v[0] for k, v in TREND_SERIES.items()}).alias("label"),
        pl.col("series").replace_strict({k: v[1] for k, v in TREND_SERIES.items()}).alias("of"),
        pl.col("period_start").cast(pl.String),
    )
    high = fmax(long["gpus"]) if long.height else 2.0
    ticks = pow2_ticks(1, max(high, 2), 10)
    labels = [v[0] for v in TREND_SERIES.values()]
    chart = (
        alt.Chart(long)
        .mark_line(point=True, strokeWidth=1.8)
        .encode(
            x=alt.X("period_start:T", title="period start", axis=alt.Axis(format="%Y-%m")),
            y=alt.Y(
                "gpus:Q",
                scale=alt.Scale(type="log", base=2, domain=[1, ticks[-1]]),
                axis=alt.Axis(values=ticks, format=","),
                title="GPUs",
            ),
            color=alt.Color(
                "label:N",
                sort=labels,
                title=None,
                scale=alt.Scale(
                    domain=labels, range=["#4e79a7", "#a0cbe8", "#1f3b5a", "#e15759", "#ff9d9a", "#8b1a1c"]
                ),
            ),
            strokeDash=alt.StrokeDash(
                "of:N",
                title=None,
                scale=alt.Scale(domain=["jobs", "collectives"], range=[[1, 0], [5, 3]]),
                legend=None,  # the subtitle says it: solid for jobs, dashed for collectives
            ),
            tooltip=[
                "period_start:T",
                "label:N",
                alt.Tooltip("gpus:Q", format=",.1f"),
                alt.Tooltip("jobs:Q", title="jobs started", format=","),
            ],
        )
        .properties(
            width=WIDTH - 120,
            height=260,
            title=heading(
                "GPUs per job and per collective over time",
                f"Per period of job start, periods of at least {TREND_MIN_JOBS} jobs. Solid: job sizes; dashed: "
                "collective group sizes (send/recv left out).",
            ),
        )
    )
    return finish(chart)


def _months_between(trend_frame: pl.DataFrame) -> int:
    """Months per period of a group_size_trend frame (from two of its rows; 1 when it has one)."""
    rows = trend_frame.sort("period").to_dicts()
    if len(rows) < 2:
        return 1
    a, b = rows[0], rows[1]
    months = (b["period_start"].year - a["period_start"].year) * 12 + b["period_start"].month - a["period_start"].month
    return max(1, months // max(1, b["period"] - a["period"]))


def _add_months(day: Any, months: int) -> Any:
    month = day.month - 1 + months
    return day.replace(year=day.year + month // 12, month=month % 12 + 1, day=1)


def figure(fleet: FleetData) -> Figure:
    import polars as pl

    counted = counted_periods(fleet.trend) if fleet.trend is not None else None
    months = fleet.period.months if fleet.period else 0
    if fleet.period is None:
        empty = "no job records when it started."
    elif fleet.trend is None or fleet.trend.filter(pl.col("calls") > 0).is_empty():
        empty = "no collective records its group size."
    else:
        empty = f"no period holds at least {TREND_MIN_JOBS} jobs whose collectives record their group size."
    return Figure(
        "fig-trend",
        "GPUs per job and per collective over time",
        [headlines.trend(fleet.trend, fleet.period)],
        trend(counted) if counted is not None and counted.height else None,
        empty,
        [("group_size_trend", {"start": fleet.period.start.isoformat(), "period_months": months})]
        if fleet.period
        else ["group_size_trend"],
    )


CHART = FleetChart("trend", 70, figure, __doc__ or "")
