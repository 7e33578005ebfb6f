"""Two fleets side by side (`tracekit report DATASET --compare OTHER`): job sizes, class mix, message
sizes and group sizes of both, with the differences stated in numbers.

OTHER is another dataset, or a period of the same one written SINCE..UNTIL; both sides are read with
the same queries, so the comparison is of like with like.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.report import headlines
from tracekit.report.charts import style
from tracekit.report.data import TREND_MIN_JOBS
from tracekit.report.format import Num, Sentence, comm_name, fmax, fmin, human_bytes, human_count, percent, ratio
from tracekit.report.page import Figure, Section, table_html
from tracekit.scope import Scope

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData

PERIOD = re.compile(r"^(\d{4}-\d{2}-\d{2})?\.\.(\d{4}-\d{2}-\d{2})?$")
COLORS = ["#4e79a7", "#f28e2b"]


def resolve_other(dataset: str | Path, scope: Scope, compare: str | Path) -> tuple[Path, Scope, str]:
    """The other side: (dataset path, scope, name). A period SINCE..UNTIL keeps the dataset and the other filters."""
    text = str(compare)
    match = PERIOD.match(text)
    if match and text != "..":
        since, until = (date.fromisoformat(d) if d else None for d in match.groups())
        other = replace(scope, since=since, until=until)
        return Path(dataset), other, f"{Path(dataset).resolve().name} ({other.describe()})"
    path = Path(compare)
    if not (path / "tracekit.duckdb").is_file():
        raise InputError(f"--compare {text}: neither a tracekit dataset nor a period SINCE..UNTIL (e.g. 2024-01-01..)")
    return path, scope, path.resolve().name if scope.is_everything() else f"{path.resolve().name} ({scope.describe()})"


def _both(a: pl.DataFrame, b: pl.DataFrame, names: tuple[str, str]) -> pl.DataFrame:
    import polars as pl

    return pl.concat([a.with_columns(pl.lit(names[0]).alias("fleet")), b.with_columns(pl.lit(names[1]).alias("fleet"))])


def _fleet_color(names: tuple[str, str]) -> Any:
    import altair as alt

    return alt.Color(
        "fleet:N", title=None, scale=alt.Scale(domain=list(names), range=COLORS), legend=alt.Legend(orient="top")
    )


def _median_gpus(sizes: pl.DataFrame) -> float | None:
    if sizes.is_empty():
        return None
    return fmin(sizes.filter(sizes["cum_share"] >= 0.5)["job_gpus"])


def _change(key: str, a: float | None, b: float | None, fmt: Any) -> Sentence:
    if a is None or b is None:
        return [fmt(a) if a is not None else "–", " → ", fmt(b) if b is not None else "–"]
    parts: Sentence = [Num(f"{key}:a", a, fmt(a)), " → ", Num(f"{key}:b", b, fmt(b))]
    if a and b and a != b and fmt is not percent:
        parts += [" (", Num(f"{key}:ratio", b / a, ratio(b / a)), ")"]
    if fmt is percent:
        points = (b - a) * 100
        parts += [f" ({points:+.0f} points)"]
    return parts


def sizes_figure(a: FleetData, b: FleetData, names: tuple[str, str]) -> Figure:
    import altair as alt

    data = _both(a.sizes, b.sizes, names)
    line: Sentence = []
    if a.sizes.height and b.sizes.height:
        multiple = [
            float(f.sizes.filter(f.sizes["multiple_of_8"])["jobs"].sum()) / float(f.sizes["jobs"].sum()) for f in (a, b)
        ]
        line = [
            "Jobs: ",
            *_change("compare_jobs", a.overview["jobs"], b.overview["jobs"], human_count),
            "; median job size: ",
            *_change("compare_median_job_gpus", _median_gpus(a.sizes), _median_gpus(b.sizes), human_count),
            " GPUs; largest: ",
            *_change("compare_max_job_gpus", fmax(a.sizes["job_gpus"]), fmax(b.sizes["job_gpus"]), human_count),
            " GPUs; jobs on a multiple of 8 GPUs: ",
            *_change("compare_multiple_of_8", multiple[0], multiple[1], percent),
            ".",
        ]
    spec = None
    if data.height:
        order = sorted(set(data["job_gpus"].to_list()))
        chart = (
            alt.Chart(data)
            .mark_bar()
            .encode(
                x=alt.X("job_gpus:O", sort=order, title="GPUs per job", axis=alt.Axis(labelAngle=0)),
                xOffset=alt.XOffset("fleet:N", sort=list(names)),
                y=alt.Y("share:Q", title="share of jobs", axis=alt.Axis(format="%")),
                color=_fleet_color(names),
                tooltip=[
                    "fleet:N",
                    "job_gpus:O",
                    alt.Tooltip("jobs:Q", format=","),
                    alt.Tooltip("share:Q", format=".1%"),
                ],
            )
            .properties(
                width=style.WIDTH, height=220, title=style.heading("GPUs per job", "Share of each fleet's jobs.")
            )
        )
        spec = style.finish(chart)
    return Figure(
        "fig-compare-sizes",
        "GPUs per job",
        [line],
        spec,
        "neither fleet has jobs of known size.",
        ["job_size_histogram"],
    )


def classes_figure(a: FleetData, b: FleetData, names: tuple[str, str]) -> Figure:
    import altair as alt
    import polars as pl

    def shares(fleet: FleetData) -> pl.DataFrame:
        if fleet.jobs.is_empty():
            return pl.DataFrame(schema={"class": pl.String, "jobs": pl.UInt32, "share": pl.Float64})
        return (
            fleet.jobs.group_by("class", maintain_order=True)
            .len("jobs")
            .with_columns((pl.col("jobs") / pl.col("jobs").sum()).alias("share"))
        )

    sa, sb = shares(a), shares(b)
    joined = sa.join(sb, on="class", how="full", coalesce=True, suffix="_b").fill_null(0).sort("class")
    line: Sentence = []
    for row in joined.iter_rows(named=True):
        line += ["; " if line else "Share of jobs per class: ", f"{row['class']} "]
        line += _change(f"compare_class_share:{row['class']}", row["share"], row["share_b"], percent)
    if line:
        line.append(".")
    data = _both(sa, sb, names)
    spec = None
    if data.height:
        chart = (
            alt.Chart(data)
            .mark_bar()
            .encode(
                y=alt.Y("class:N", title=None),
                yOffset=alt.YOffset("fleet:N", sort=list(names)),
                x=alt.X("share:Q", title="share of jobs", axis=alt.Axis(format="%")),
                color=_fleet_color(names),
                tooltip=["fleet:N", "class:N", alt.Tooltip("jobs:Q", format=","), alt.Tooltip("share:Q", format=".1%")],
            )
            .properties(
                width=style.WIDTH - 100,
                height=alt.Step(14),
                title=style.heading("Jobs per class", "Share of each fleet's jobs."),
            )
        )
        spec = style.finish(chart)
    return Figure(
        "fig-compare-classes", "Jobs per parallelism class", [line], spec, "neither fleet has jobs.", ["job_class"]
    )


def _fleet_cdf(fleet: FleetData) -> pl.DataFrame:
    """Message-size CDF per collective over the whole fleet (all classes and models)."""
    import polars as pl

    data = fleet.cdf.filter((pl.col("unit") == "bytes") & (pl.col("comm_type") != "RECV"))
    binned = (
        data.group_by("comm_type", "log2_bin", "size_hi", maintain_order=True)
        .agg(pl.col("calls").sum())
        .sort("log2_bin")
    )
    return binned.with_columns(
        (pl.col("calls").cum_sum().over("comm_type") / pl.col("calls").sum().over("comm_type")).alias("cum_share")
    )


def messages_figure(a: FleetData, b: FleetData, names: tuple[str, str]) -> Figure:
    import altair as alt
    import polars as pl

    ca, cb = _fleet_cdf(a), _fleet_cdf(b)
    line: Sentence = []
    common = sorted(set(ca["comm_type"].to_list()) & set(cb["comm_type"].to_list()))
    totals = (
        ca.filter(pl.col("comm_type").is_in(common))
        .group_by("comm_type", maintain_order=True)
        .agg(pl.col("calls").sum())
        .sort(["calls", "comm_type"], descending=[True, False])
    )
    for comm_type in totals["comm_type"].to_list()[:3]:
        halves = [
            fmin(c.filter((pl.col("comm_type") == comm_type) & (pl.col("cum_share") >= 0.5))["size_hi"])
            for c in (ca, cb)
        ]
        line += ["; " if line else "Half of the calls pass in less than: ", f"{comm_name(comm_type)} "]
        line += _change(f"compare_median_bin_hi:{comm_type}", halves[0], halves[1], human_bytes)
    if line:
        line.append(".")
    data = style.with_comm_names(_both(ca, cb, names))
    spec = None
    if data.height:
        ticks = style.pow2_ticks(fmin(data["size_hi"]) / 2, fmax(data["size_hi"]), 7)
        chart = (
            alt.Chart(data)
            .mark_line(point=alt.OverlayMarkDef(size=16))
            .encode(
                x=alt.X(
                    "size_hi:Q",
                    scale=alt.Scale(type="log", base=2, domain=[ticks[0], ticks[-1]]),
                    axis=alt.Axis(values=ticks, labelExpr=style.BYTES_LABEL),
                    title="bytes passed in per call",
                ),
                y=alt.Y("cum_share:Q", title="share of calls below", axis=alt.Axis(format="%")),
                color=_fleet_color(names),
                tooltip=[
                    "fleet:N",
                    "comm_type:N",
                    alt.Tooltip("size_hi:Q", format=","),
                    alt.Tooltip("cum_share:Q", format=".1%"),
                ],
            )
            .properties(width=170, height=140)
            .facet(facet=alt.Facet("comm_type:N", title=None), columns=3)
            .properties(
                title=style.heading(
                    "Message sizes per collective", "Share of calls smaller than each size (log2 bins)."
                )
            )
        )
        spec = style.finish(chart)
    return Figure(
        "fig-compare-messages",
        "Message sizes per collective",
        [line],
        spec,
        "no collective records its size.",
        ["message_size_cdf"],
    )


def groups_figure(a: FleetData, b: FleetData, names: tuple[str, str]) -> Figure:
    import altair as alt
    import polars as pl

    def by_size(fleet: FleetData) -> pl.DataFrame:
        return (
            fleet.groups.group_by("group_size", maintain_order=True)
            .agg(pl.col("calls").sum(), pl.col("share").sum())
            .sort("group_size")
        )

    ga, gb = by_size(a), by_size(b)
    line: Sentence = []
    if ga.height and gb.height:
        le128 = [float(g.filter(pl.col("group_size") <= 128)["share"].sum()) for g in (ga, gb)]
        sub = [
            float(f.groups.filter(pl.col("group_size") < pl.col("job_gpus"))["calls"].sum())
            / float(f.groups["calls"].sum())
            for f in (a, b)
        ]
        line = [
            "Calls over at most 128 GPUs: ",
            *_change("compare_calls_le_128", le128[0], le128[1], percent),
            "; calls in groups smaller than their job: ",
            *_change("compare_calls_subgroup", sub[0], sub[1], percent),
            "; largest collective: ",
            *_change("compare_max_group", fmax(ga["group_size"]), fmax(gb["group_size"]), human_count),
            " GPUs.",
        ]
    data = _both(ga, gb, names)
    spec = None
    if data.height:
        chart = (
            alt.Chart(data)
            .mark_bar()
            .encode(
                x=alt.X("group_size:O", title="GPUs per collective", axis=alt.Axis(labelAngle=0)),
                xOffset=alt.XOffset("fleet:N", sort=list(names)),
                y=alt.Y("share:Q", title="share of calls", axis=alt.Axis(format="%")),
                color=_fleet_color(names),
                tooltip=[
                    "fleet:N",
                    "group_size:O",
                    alt.Tooltip("calls:Q", format=","),
                    alt.Tooltip("share:Q", format=".1%"),
                ],
            )
            .properties(
                width=style.WIDTH,
                height=220,
                title=style.heading("GPUs per collective", "Share of each fleet's calls (send/recv left out)."),
            )
        )
        spec = style.finish(chart)
    return Figure(
        "fig-compare-groups",
        "GPUs per collective",
        [line],
        spec,
        "no collective records its group size.",
        ["group_size_by_job_size"],
    )


def summary_table(a: FleetData, b: FleetData, names: tuple[str, str]) -> str:
    rows = []
    for label, key, fmt in (
        ("jobs", "jobs", human_count),
        ("ranks seen", "ranks_seen", human_count),
        ("collective calls", "calls", human_count),
        ("bytes passed in", "in_bytes", human_bytes),
        ("bytes on the wire", "wire_bytes", human_bytes),
    ):
        rows.append([label, fmt(a.overview.get(key)), fmt(b.overview.get(key))])
    return table_html(["", names[0], names[1]], rows, {1, 2})


def compare_sections(a: FleetData, b: FleetData, name_a: str, name_b: str) -> list[Section]:
    names = (name_a, name_b) if name_a != name_b else (f"{name_a} (1)", f"{name_b} (2)")
    intro: list[Sentence] = [[f"Left/blue: {names[0]}. Right/orange: {names[1]}."]]
    if a.empty and b.empty:
        intro.append(["Neither side has any job: there is nothing to compare."])
    few = [(name, int(f.overview.get("jobs") or 0)) for f, name in ((a, names[0]), (b, names[1]))]
    few = [(name, jobs) for name, jobs in few if jobs < TREND_MIN_JOBS]
    if few and not (a.empty and b.empty):
        sides = " and ".join(f"{name} has {human_count(jobs)} {'job' if jobs == 1 else 'jobs'}" for name, jobs in few)
        intro.append(
            [
                f"{sides}: fewer than {TREND_MIN_JOBS} jobs, too few for their distributions to say something "
                "of a fleet. The figures show both sides; their differences are not stated."
            ]
        )
    figures = [
        sizes_figure(a, b, names),
        classes_figure(a, b, names),
        messages_figure(a, b, names),
        groups_figure(a, b, names),
    ]
    if few:
        figures = [replace(f, headline=[]) for f in figures]
    section = Section("compare", "Two fleets side by side", intro, figures, html=summary_table(a, b, names))
    return [section, *[_side(f, n) for f, n in ((a, names[0]), (b, names[1]))]]


def _side(fleet: FleetData, name: str) -> Section:
    """One side's own headlines, for reference under the comparison."""
    lines = headlines.fleet_headlines(fleet)
    intro = [lines[k] for k in ("summary", "sizes", "classes", "mix", "groups", "trend") if lines[k]]
    import hashlib

    key = hashlib.sha1(name.encode()).hexdigest()[:8]
    return Section(f"side-{key}", f"{name} on its own", intro or [["No jobs."]])
