"""The fleet's message sizes per collective and model, in bytes: a CDF per collective, and its
percentile table.

The same figure in elements is charts.messages_elements; both draw with `message_cdf`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tracekit.report import headlines
from tracekit.report.charts import FleetChart
from tracekit.report.charts.style import BYTES_LABEL, GREY, Spec, finish, heading, pow2_ticks, with_comm_names
from tracekit.report.format import comm_name, fmax, fmin, human_bytes, human_count, human_elems
from tracekit.report.page import Figure, table_html

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData


MAX_MODELS_SHOWN = 9
OTHER_MODELS = "other models"
MODEL_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]


def _model_lines(cdf: pl.DataFrame) -> pl.DataFrame:
    """The CDF points with one line per model (the most-called models by name, the rest merged), each
    line starting at 0 at the lower edge of its first bin; Recv is left out (it mirrors Send)."""
    import polars as pl

    data = cdf.filter(pl.col("comm_type") != "RECV").with_columns(
        pl.when(pl.col("model").is_null())
        .then(pl.format("{} (no label)", pl.col("class")))
        .otherwise(pl.col("model"))
        .alias("line")
    )
    calls = (
        data.group_by("line", maintain_order=True)
        .agg(pl.col("calls").sum())
        .sort(["calls", "line"], descending=[True, False])
    )
    keep = calls["line"].head(MAX_MODELS_SHOWN).to_list()
    if calls.height > MAX_MODELS_SHOWN:
        data = data.with_columns(
            pl.when(pl.col("line").is_in(keep)).then(pl.col("line")).otherwise(pl.lit(OTHER_MODELS)).alias("line")
        )
    binned = data.group_by("comm_type", "line", "log2_bin", "size_lo", "size_hi", maintain_order=True).agg(
        pl.col("calls").sum()
    )
    binned = binned.sort("log2_bin").with_columns(
        (pl.col("calls").cum_sum().over("comm_type", "line") / pl.col("calls").sum().over("comm_type", "line")).alias(
            "cum_share"
        )
    )
    starts = (
        binned.group_by("comm_type", "line", maintain_order=True)
        .agg(pl.col("size_lo").min().alias("size"))
        .with_columns(pl.lit(0.0).alias("cum_share"), pl.lit(0, pl.Int64).alias("calls"))
    )
    points = binned.select("comm_type", "line", pl.col("size_hi").alias("size"), "cum_share", "calls")
    return pl.concat([starts.select(points.columns), points.with_columns(pl.col("calls").cast(pl.Int64))]).sort(
        "comm_type", "line", "size"
    )


def message_cdf(cdf: pl.DataFrame, unit: str) -> Spec | None:
    """Figure: CDF of message sizes per collective (one panel each, the most-called first), one line per
    model, log size axis; None when only Recv records sizes (it is left out: it mirrors Send)."""
    import altair as alt
    import polars as pl

    data = with_comm_names(_model_lines(cdf.filter(pl.col("unit") == unit)))
    if data.is_empty():
        return None
    low, high = fmin(data["size"]), fmax(data["size"])
    if unit == "bytes":
        ticks = pow2_ticks(low, high, 7)
        axis = alt.Axis(values=ticks, labelExpr=BYTES_LABEL, labelAngle=0)
        x_title, scale = "bytes passed in per call", alt.Scale(type="log", base=2, domain=[ticks[0], ticks[-1]])
    else:
        ticks = [10.0**k for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]
        axis = alt.Axis(values=ticks, format="~s", labelAngle=0)
        x_title, scale = "elements per call", alt.Scale(type="log", base=10, domain=[ticks[0], ticks[-1]])
    panels = (
        cdf.filter(pl.col("unit") == unit)
        .pipe(with_comm_names)
        .group_by("comm_type", maintain_order=True)
        .agg(pl.col("calls").sum())
        .sort(["calls", "comm_type"], descending=[True, False])["comm_type"]
        .to_list()
    )
    lines = [
        line
        for line in data.group_by("line", maintain_order=True)
        .agg(pl.col("calls").sum())
        .sort(["calls", "line"], descending=[True, False])["line"]
        .to_list()
        if line != OTHER_MODELS
    ]
    domain = lines + ([OTHER_MODELS] if OTHER_MODELS in data["line"].to_list() else [])
    colors = [MODEL_COLORS[i % len(MODEL_COLORS)] for i in range(len(lines))] + [GREY] * (len(domain) - len(lines))
    chart = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=16), strokeWidth=1.6)
        .encode(
            x=alt.X("size:Q", scale=scale, axis=axis, title=x_title),
            y=alt.Y(
                "cum_share:Q", title="share of calls below", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])
            ),
            color=alt.Color("line:N", title="model", scale=alt.Scale(domain=domain, range=colors)),
            tooltip=[
                alt.Tooltip("comm_type:N", title="collective"),
                alt.Tooltip("line:N", title="model"),
                alt.Tooltip("size:Q", title=f"{unit} below", format=","),
                alt.Tooltip("cum_share:Q", title="share of calls", format=".1%"),
            ],
        )
        .properties(width=170, height=150)
        .facet(facet=alt.Facet("comm_type:N", title=None, sort=panels, header=alt.Header(labelFontSize=12)), columns=3)
        .properties(
            title=heading(
                f"Message sizes per collective and model, in {unit}",
                "Share of calls (all ranks) smaller than each size (log2 bins); Recv left out: it mirrors Send.",
            )
        )
    )
    return finish(chart)


def figure(fleet: FleetData) -> Figure:
    import polars as pl

    data = fleet.cdf.filter(pl.col("unit") == "bytes")
    return Figure(
        "fig-messages",
        "Message sizes per collective and model",
        [headlines.message_sizes(fleet.cdf, fleet.percentiles)],
        message_cdf(fleet.cdf, "bytes") if data.height else None,
        "no collective records its size.",
        ["message_size_cdf", "message_size_percentiles"],
        after=percentile_table(fleet.percentiles),
    )


def percentile_table(percentiles: pl.DataFrame) -> str:
    if percentiles.is_empty():
        return ""
    rows = []
    for r in percentiles.sort(["class", "model", "comm_type"], nulls_last=True).iter_rows(named=True):
        rows.append(
            [
                r["class"],
                r["model"] or "(no label)",
                comm_name(r["comm_type"]),
                human_count(r["calls"]),
                human_bytes(r["p50_bytes"]),
                human_bytes(r["p90_bytes"]),
                human_bytes(r["p99_bytes"]),
                human_elems(r["p50_elems"]) if r["p50_elems"] is not None else "–",
                human_bytes(r["p50_wire_bytes"]),
                human_bytes(r["wire_bytes"]),
            ]
        )
    headers = [
        "class",
        "model",
        "collective",
        "calls",
        "p50 size",
        "p90 size",
        "p99 size",
        "p50 elements",
        "p50 on the wire",
        "total on the wire",
    ]
    return (
        "<details><summary>Percentiles per class, model and collective</summary>"
        + table_html(headers, rows, set(range(3, 10)))
        + "</details>"
    )


CHART = FleetChart("messages", 40, figure, __doc__ or "")
