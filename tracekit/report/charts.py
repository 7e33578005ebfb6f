"""The report's figures as Vega-Lite specs (built with Altair) from the small frames of report.data.

Every builder takes aggregated frames and returns a spec dict with its data inline; sizes span orders
of magnitude, so byte and GPU axes are logarithmic (base 2) and labelled in binary units.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tracekit.report.data import TREND_MIN_JOBS
from tracekit.report.format import COMM_COLORS, COMM_NAMES, fmax, fmin

if TYPE_CHECKING:
    import altair as alt
    import polars as pl

Spec = dict[str, Any]

WIDTH = 640
FONT = "Helvetica Neue, Helvetica, Arial, sans-serif"
BLUE, RED, GREY = "#4e79a7", "#e15759", "#9d9d9d"
# Vega expression: a byte count in binary units (axis labels of byte scales).
BYTES_LABEL = (
    "datum.value >= 1099511627776 ? format(datum.value / 1099511627776, '~g') + ' TiB' : "
    "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB' : "
    "datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB' : "
    "datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB' : format(datum.value, '~g') + ' B'"
)
MICROSECONDS_LABEL = (
    "datum.value >= 1e6 ? format(datum.value / 1e6, '~g') + ' s' : "
    "datum.value >= 1e3 ? format(datum.value / 1e3, '~g') + ' ms' : format(datum.value, '~g') + ' µs'"
)
MAX_SIZES_SHOWN = 40
MAX_MODELS_SHOWN = 9
OTHER_MODELS = "other models"
MODEL_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
MAX_GROUPS_SHOWN = 20


def _finish(chart: Any) -> Spec:
    spec: Spec = (
        chart.configure(font=FONT)
        .configure_axis(labelFontSize=11, titleFontSize=12, titleFontWeight="normal", gridColor="#ececec")
        .configure_title(fontSize=14, anchor="start", subtitleFontSize=11, subtitleColor="#555", offset=10)
        .configure_legend(labelFontSize=11, titleFontSize=11, titleFontWeight="normal", labelLimit=220)
        .configure_view(stroke="#ddd")
        .to_dict()
    )
    for values in spec.get("datasets", {}).values():
        for row in values:
            for key, value in row.items():
                if isinstance(value, float):
                    row[key] = round_float(value)
    return spec


def round_float(value: float) -> float:
    """Twelve significant digits: enough for any chart, and the same page for the same data (DuckDB's parallel
    sums of doubles may differ in their last bits from run to run)."""
    return float(f"{value:.12g}") if math.isfinite(value) else value


def _title(text: str, subtitle: str | list[str]) -> alt.TitleParams:
    import altair as alt

    return alt.TitleParams(text, subtitle=subtitle)


def _pow2_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Powers of two, every 2^step-th, from one at or below `low` to one at or above `high`: at most `most`."""
    lo = math.floor(math.log2(low)) if low > 0 else 0
    hi = max(math.ceil(math.log2(high)) if high > 0 else 1, lo + 1)
    # Steps that divide 10, so that 1 KiB, 1 MiB, 1 GiB are ticks whenever they can be.
    step = next((k for k in (1, 2, 5, 10, 20, 40) if -(-(hi - lo) // k) + 1 <= most), 40)
    start = lo - lo % step
    end = start + step * -(-(hi - start) // step)
    return [2.0**k for k in range(start, end + 1, step)]


def _comm_scale(names: list[str]) -> alt.Scale:
    import altair as alt

    domain = [n for n in COMM_COLORS if n in names] + sorted(n for n in names if n not in COMM_COLORS)
    return alt.Scale(domain=domain, range=[COMM_COLORS.get(n, GREY) for n in domain])


def with_comm_names(frame: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return frame.with_columns(pl.col("comm_type").replace_strict(COMM_NAMES, default=pl.col("comm_type")))


# Fleet ------------------------------------------------------------------------------------------


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
        title=_title("GPUs per job", "Share of jobs by size. Blue: multiples of 8 GPUs (whole 8-GPU servers)."),
    )
    return _finish(chart)


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
            title=_title("Jobs per parallelism class", "Class from the job's collectives (job_class), or its label."),
        )
    )
    return _finish(chart)


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
    scale = _comm_scale(long["comm_type"].unique().to_list())
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
        title=_title(
            "Collective mix per class",
            "Share of calls (all ranks), of bytes passed in (in_bytes) and of bytes sent on the wire "
            "(textbook ring/direct, collective_wire_bytes).",
        )
    )
    return _finish(chart)


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
        ticks = _pow2_ticks(low, high, 7)
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
            title=_title(
                f"Message sizes per collective and model, in {unit}",
                "Share of calls (all ranks) smaller than each size (log2 bins); Recv left out: it mirrors Send.",
            )
        )
    )
    return _finish(chart)


def group_vs_job(groups: pl.DataFrame) -> Spec:
    """Figure: GPUs per collective against GPUs per job, circle area = calls; the diagonal is 'the whole job'."""
    import altair as alt
    import polars as pl

    high = float(max(groups["job_gpus"].max(), groups["group_size"].max(), 128))  # type: ignore[type-var, arg-type]
    ticks = _pow2_ticks(1, high, 10)
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
        title=_title(
            "GPUs per collective against GPUs per job",
            "Circle area: calls (all ranks; send/recv left out). Dashed diagonal: a collective over the whole job.",
        ),
    )
    return _finish(chart)


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
    ticks = _pow2_ticks(1, max(high, 2), 10)
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
            title=_title(
                "GPUs per job and per collective over time",
                f"Per period of job start, periods of at least {TREND_MIN_JOBS} jobs. Solid: job sizes; dashed: "
                "collective group sizes (send/recv left out).",
            ),
        )
    )
    return _finish(chart)


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


# One job ----------------------------------------------------------------------------------------


X_TITLE = "bytes per rank (all its calls of the type)"


def job_collectives(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: a job's bytes per rank by collective, passed in and on the wire, as a dot plot (log axis)."""
    import altair as alt
    import polars as pl

    data = with_comm_names(frame)
    long = pl.concat(
        [
            data.select(
                "comm_type", (pl.col("in_bytes") / pl.col("ranks")).alias("bytes"), pl.lit("passed in").alias("measure")
            ),
            data.select(
                "comm_type", pl.col("wire_bytes_per_rank").alias("bytes"), pl.lit("on the wire").alias("measure")
            ),
        ]
    ).filter(pl.col("bytes") > 0)
    ticks = _pow2_ticks(fmin(long["bytes"]), fmax(long["bytes"]), 7)
    xscale = alt.Scale(type="log", base=2, domain=[ticks[0], ticks[-1]])
    x = alt.X("bytes:Q", scale=xscale, axis=alt.Axis(values=ticks, labelExpr=BYTES_LABEL), title=X_TITLE)
    order = data.sort("wire_bytes", descending=True, nulls_last=True)["comm_type"].to_list()
    y = alt.Y("comm_type:N", title=None, sort=order)
    span = (
        alt.Chart(long)
        .mark_rule(color="#c8c8c8", strokeWidth=2)
        .encode(
            x=alt.X("min(bytes):Q", scale=xscale, axis=alt.Axis(values=ticks, labelExpr=BYTES_LABEL), title=X_TITLE),
            x2="max(bytes):Q",
            y=y,
        )
    )
    dots = (
        alt.Chart(long)
        .mark_circle(size=110, opacity=1)
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "measure:N", sort=["passed in", "on the wire"], scale=alt.Scale(range=["#9d9d9d", BLUE]), title=None
            ),
            tooltip=[
                alt.Tooltip("comm_type:N", title="collective"),
                "measure:N",
                alt.Tooltip("bytes:Q", title="bytes per rank", format=",.0f"),
            ],
        )
    )
    chart = (span + dots).properties(
        width=WIDTH - 160,
        height=alt.Step(26),
        title=_title(f"{job_id}: bytes per rank by collective", "Bytes passed in (in_bytes) and sent on the wire."),
    )
    return _finish(chart)


def job_groups(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: a job's wire bytes per process group (the busiest groups)."""
    import altair as alt
    import polars as pl

    data = (
        frame.filter(pl.col("wire_bytes") > 0)
        .sort("wire_bytes", descending=True)
        .head(MAX_GROUPS_SHOWN)
        .with_columns(
            pl.format(
                "{} · {} · {} GPUs",
                pl.col("pg_name").fill_null("?"),
                pl.col("pg_desc").fill_null("–"),
                pl.col("group_size").cast(pl.String).fill_null("?"),
            ).alias("group"),
            pl.col("comm_types").list.join(", ").alias("collectives"),
        )
    )
    chart = (
        alt.Chart(data.select("group", "wire_bytes", "wire_share", "calls", "collectives"))
        .mark_bar(color=BLUE)
        .encode(
            y=alt.Y("group:N", sort="-x", title=None),
            x=alt.X("wire_share:Q", title="share of the job's bytes on the wire", axis=alt.Axis(format="%")),
            tooltip=[
                "group:N",
                "collectives:N",
                alt.Tooltip("calls:Q", format=","),
                alt.Tooltip("wire_bytes:Q", title="wire bytes", format=",.0f"),
                alt.Tooltip("wire_share:Q", title="share", format=".1%"),
            ],
        )
        .properties(
            width=WIDTH - 200,
            height=alt.Step(18),
            title=_title(
                f"{job_id}: bytes on the wire per process group",
                f"Group name · description · size; the {MAX_GROUPS_SHOWN} busiest groups at most.",
            ),
        )
    )
    return _finish(chart)


def job_bandwidth(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: median bus bandwidth against message size per collective, with its p10–p90 band."""
    import altair as alt

    data = with_comm_names(frame)
    low, high = fmin(data["size_lo"]), fmax(data["size_lo"])
    ticks = _pow2_ticks(low, max(high, low * 2), 7)
    x = alt.X(
        "size_lo:Q",
        scale=alt.Scale(type="log", base=2, domain=[ticks[0], ticks[-1]]),
        axis=alt.Axis(values=ticks, labelExpr=BYTES_LABEL),
        title="message size (nccl-tests' size, log2 bin)",
    )
    scale = _comm_scale(data["comm_type"].unique().to_list())
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
        title=_title(f"{job_id}: bus bandwidth by message size", "Median over calls and ranks; band: p10–p90."),
    )
    return _finish(chart)


def job_stragglers(frame: pl.DataFrame, job_id: str) -> Spec:
    """Figure: per collective (in start order), how far apart its ranks started it."""
    import altair as alt

    data = with_comm_names(frame)
    scale = _comm_scale(data["comm_type"].unique().to_list())
    top = max(fmax(data["start_spread_us"]), 1.0)
    spread_ticks = [0.0] + [10.0**k for k in range(0, math.ceil(math.log10(top)) + 1)]
    chart = (
        alt.Chart(data.select("instance", "comm_type", "ranks", "start_spread_us", "last_rank", "in_bytes"))
        .mark_circle(size=28, opacity=0.8)
        .encode(
            x=alt.X("instance:Q", title="collective (in order of its first start)"),
            y=alt.Y(
                "start_spread_us:Q",
                scale=alt.Scale(type="symlog", domain=[0, spread_ticks[-1]]),
                axis=alt.Axis(values=spread_ticks, labelExpr=MICROSECONDS_LABEL),
                title="start spread across ranks",
            ),
            color=alt.Color("comm_type:N", scale=scale, title="collective"),
            tooltip=[
                "instance:Q",
                alt.Tooltip("comm_type:N", title="collective"),
                "ranks:Q",
                alt.Tooltip("start_spread_us:Q", title="spread µs", format=",.1f"),
                alt.Tooltip("last_rank:Q", title="last rank"),
                alt.Tooltip("in_bytes:Q", title="bytes", format=","),
            ],
        )
        .properties(
            width=WIDTH - 160,
            height=200,
            title=_title(
                f"{job_id}: start spread per collective",
                "Latest minus earliest start of each collective across its ranks (same process group and sequence).",
            ),
        )
    )
    return _finish(chart)


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
            title=_title(
                f"{job_id}: all-to-all volume matrix",
                "Bytes from the recorded per-peer splits; the diagonal stays on the sender.",
            ),
        )
    )
    return _finish(chart)


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
            title=_title(
                f"{job_id}: traffic between hosts",
                f"Collectives replayed as flows, {gpus_per_host} GPUs per host; bytes inside a host (NVLink) left out.",
            ),
        )
    )
    return _finish(chart)


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
            title=_title(
                "Slowdown of each class's collectives per fabric and routing",
                "Jobs that send over the network. Box: p25-p75 over the jobs; whiskers: p10-p90; tick: median.",
            )
        )
    )
    return _finish(chart)
