"""The sentence above each chart: its finding in numbers computed from the same frames it draws.

Each function returns a Sentence (text and Num parts); every Num carries a key and its exact value,
which the page keeps beside the text (tests check them against the queries).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tracekit.report.format import (
    Num,
    Sentence,
    comm_name,
    fmax,
    fmin,
    fsum,
    gbps,
    human_bytes,
    human_count,
    microseconds,
    names_list,
    percent,
    period_name,
    plural,
    ratio,
)

if TYPE_CHECKING:
    import polars as pl

    from tracekit.report.data import FleetData, JobData, Period

COVERING_SHARE = 0.9
MAIN_SHARE = 0.1


def fleet_summary(overview: dict[str, Any]) -> Sentence:
    return [
        Num("jobs", overview["jobs"], human_count(overview["jobs"])),
        f" {plural(overview['jobs'], 'job')} on ",
        Num("ranks", overview["ranks_seen"], human_count(overview["ranks_seen"])),
        f" {plural(overview['ranks_seen'], 'rank')} issued ",
        Num("calls", overview["calls"], human_count(overview["calls"])),
        f" collective {plural(overview['calls'], 'call')}, which passed in ",
        Num("in_bytes", overview["in_bytes"], human_bytes(overview["in_bytes"])),
        " and sent ",
        Num("wire_bytes", overview["wire_bytes"], human_bytes(overview["wire_bytes"])),
        " on the wire.",
    ]


def job_sizes(sizes: pl.DataFrame) -> Sentence:
    if sizes.is_empty():
        return []
    jobs = int(sizes["jobs"].sum())
    multiple = float(sizes.filter(sizes["multiple_of_8"])["jobs"].sum()) / jobs
    top = sizes.sort(["jobs", "job_gpus"], descending=[True, False]).row(0, named=True)
    median = int(fmin(sizes.filter(sizes["cum_share"] >= 0.5)["job_gpus"]))
    largest = int(fmax(sizes["job_gpus"]))
    return [
        Num("jobs_multiple_of_8_share", multiple, percent(multiple)),
        " of jobs use a multiple of 8 GPUs (whole 8-GPU servers). The most common size is ",
        Num("most_common_job_gpus", top["job_gpus"], human_count(top["job_gpus"])),
        " GPUs (",
        Num("most_common_job_share", top["share"], percent(top["share"])),
        " of jobs); the median job uses ",
        Num("median_job_gpus", median, human_count(median)),
        " GPUs and the largest ",
        Num("max_job_gpus", largest, human_count(largest)),
        ".",
    ]


def classes(jobs: pl.DataFrame) -> Sentence:
    if jobs.is_empty():
        return []
    total = jobs.height
    counts = (
        jobs.group_by("class", maintain_order=True).len().sort(["len", "class"], descending=[True, False]).to_dicts()
    )
    parts: Sentence = []
    for i, row in enumerate(counts):
        if i:
            parts.append(", " if i < len(counts) - 1 else " and ")
        parts += [
            Num(f"class_share:{row['class']}", row["len"] / total, percent(row["len"] / total)),
            f" {row['class']}",
        ]
    inferred = int((jobs["class_source"] == "inferred").sum())
    labelled = total - inferred
    overridden = int(jobs["overridden"].sum())
    parts += [
        f" {plural(total, 'job')}. The class of ",
        Num("jobs_class_inferred", inferred, human_count(inferred)),
        f" {plural(inferred, 'job')} is inferred from the collectives alone, that of ",
        Num("jobs_class_from_label", labelled, human_count(labelled)),
        " taken from the label",
    ]
    if labelled:
        parts += [
            ", which overrides a different inference for ",
            Num("jobs_label_overrides", overridden, human_count(overridden)),
        ]
    parts.append(".")
    return parts


def agreement(agree: pl.DataFrame) -> Sentence:
    if agree.is_empty():
        return []
    total = int(agree["jobs"].sum())
    same = int(agree.filter(agree["agrees"])["jobs"].sum())
    return [
        "On the labelled jobs the inference agrees with the label for ",
        Num("class_agreement", same / total, percent(same / total)),
        f" ({human_count(same)} of {human_count(total)}).",
    ]


def mix(mix_frame: pl.DataFrame, jobs: pl.DataFrame) -> Sentence:
    if mix_frame.is_empty():
        return []
    order = (
        jobs.group_by("class", maintain_order=True)
        .len()
        .sort(["len", "class"], descending=[True, False])["class"]
        .to_list()
    )
    parts: Sentence = []
    for cls in order:
        rows = mix_frame.filter(mix_frame["class"] == cls).sort(["calls", "comm_type"], descending=[True, False])
        if rows.is_empty():
            continue
        covered, names = 0.0, []
        for row in rows.iter_rows(named=True):
            names.append(comm_name(row["comm_type"]))
            covered += row["share"]
            if covered >= COVERING_SHARE:
                break
        parts += [
            "In " if not parts else "; in ",
            f"{cls} jobs, {names_list(names)} make{'s' if len(names) == 1 else ''} up ",
            Num(f"mix_top_share:{cls}", covered, percent(covered)),
            " of collective calls",
        ]
    return [*parts, "."] if parts else []


def wire(mix_frame: pl.DataFrame) -> Sentence:
    """The collective whose share of a class's bytes changes most between bytes passed in and on the wire."""
    import polars as pl

    if mix_frame.is_empty() or not mix_frame["wire_bytes"].sum():
        return []
    shares = mix_frame.with_columns(
        (pl.col("in_bytes") / pl.col("in_bytes").sum().over("class")).fill_nan(0).alias("in_share")
    ).with_columns((pl.col("wire_share") - pl.col("in_share")).abs().alias("gap"))
    shares = shares.filter(pl.col("gap").is_not_null())  # a collective of no known size has no share
    if shares.is_empty():
        return []
    row = shares.sort(["gap", "class", "comm_type"], descending=[True, False, False]).row(0, named=True)
    if row["gap"] < 0.05:
        return []
    name = comm_name(row["comm_type"])
    return [
        f"Counted on the wire rather than as bytes passed in, {name} carries ",
        Num(f"wire_share:{row['class']}:{row['comm_type']}", row["wire_share"], percent(row["wire_share"])),
        f" of {row['class']} jobs' traffic, not ",
        Num(f"in_share:{row['class']}:{row['comm_type']}", row["in_share"], percent(row["in_share"])),
        f" ({_wire_reason(row['comm_type'])}).",
    ]


def _wire_reason(comm_type: str) -> str:
    return {
        "ALL_GATHER": "each rank passes in only its shard and sends it to n−1 peers",
        "ALL_REDUCE": "a ring all-reduce sends 2(n−1)/n of its input",
        "REDUCE_SCATTER": "a reduce-scatter sends (n−1)/n of its input",
        "ALL_TO_ALL": "1/n of an all-to-all stays local",
        "RECV": "the sender carries a message, not its receiver",
        "SEND": "the sender carries a message, not its receiver",
    }.get(comm_type, "the textbook ring/direct volumes")


def message_sizes(cdf: pl.DataFrame, percentiles: pl.DataFrame) -> Sentence:
    import polars as pl

    in_bytes = cdf.filter(pl.col("unit") == "bytes")
    if in_bytes.is_empty():
        return []
    by_type = (
        in_bytes.group_by("comm_type", "log2_bin", maintain_order=True)
        .agg(pl.col("calls").sum())
        .sort("comm_type", "log2_bin")
    )
    totals = (
        by_type.group_by("comm_type", maintain_order=True)
        .agg(pl.col("calls").sum().alias("total"))
        .sort(["total", "comm_type"], descending=[True, False])
    )
    parts: Sentence = []
    for comm_type in totals["comm_type"].to_list()[:3]:
        rows = by_type.filter(pl.col("comm_type").eq_missing(comm_type))
        cum = rows["calls"].cum_sum() / rows["calls"].sum()
        half_bin = int(fmin(rows.filter(cum >= 0.5)["log2_bin"]))
        size_hi = 2.0 ** (half_bin + 1)
        parts += [
            "Half of " if not parts else "; half of ",
            f"{comm_name(comm_type)} calls pass in less than ",
            Num(f"median_bin_hi:{comm_type}", size_hi, human_bytes(size_hi)),
        ]
    parts.append(".")
    spread = _model_spread(percentiles)
    if spread:
        comm_type, low, high = spread
        orders = math.log10(high["p50_bytes"] / low["p50_bytes"])
        parts += [
            f" Per model, the median {comm_name(comm_type)} message ranges from ",
            Num(f"model_median_low:{comm_type}", low["p50_bytes"], human_bytes(low["p50_bytes"])),
            f" ({_model_name(low)}) to ",
            Num(f"model_median_high:{comm_type}", high["p50_bytes"], human_bytes(high["p50_bytes"])),
            f" ({_model_name(high)}): ",
            Num(f"model_median_orders:{comm_type}", orders, f"{orders:.1f}"),
            " orders of magnitude.",
        ]
    return parts


def _model_name(row: dict[str, Any]) -> str:
    return f"{row['model']}" if row["model"] else f"unlabelled {row['class']}"


def _model_spread(percentiles: pl.DataFrame) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """The collective whose per-model median message size spans the widest range, over the models for which
    it is a main collective (at least MAIN_SHARE of the model's calls: a model's few loss all-reduces of
    4 bytes say nothing of its messages)."""
    import polars as pl

    best = None
    calls = pl.col("calls").sum().over("class", "model")
    rows = percentiles.filter((pl.col("p50_bytes") > 0) & (pl.col("calls") >= MAIN_SHARE * calls))
    for comm_type in sorted(set(rows["comm_type"].to_list())):
        group = rows.filter(rows["comm_type"] == comm_type).sort(["p50_bytes", "class", "model"], nulls_last=True)
        if group.height < 2:
            continue
        low, high = group.row(0, named=True), group.row(-1, named=True)
        width = high["p50_bytes"] / low["p50_bytes"]
        if width > 1 and (best is None or width > best[0]):
            best = (width, comm_type, low, high)
    return (best[1], best[2], best[3]) if best else None


def group_sizes(groups: pl.DataFrame) -> Sentence:
    import polars as pl

    if groups.is_empty():
        return []
    calls = fsum(groups["calls"])
    wire_total = fsum(groups["wire_bytes"])
    small = groups.filter(pl.col("group_size") <= 128)
    share = fsum(small["calls"]) / calls
    wire_share = fsum(small["wire_bytes"]) / wire_total if wire_total else None
    sub = fsum(groups.filter(pl.col("group_size") < pl.col("job_gpus"))["calls"]) / calls
    largest = int(fmax(groups["group_size"]))
    largest_job = int(fmax(groups["job_gpus"]))
    parts: Sentence = [
        Num("calls_le_128_share", share, percent(share)),
        " of collective calls span at most 128 GPUs",
    ]
    if wire_share is not None:
        parts += [" (", Num("wire_le_128_share", wire_share, percent(wire_share)), " of the bytes on the wire)"]
    parts += [
        ", and ",
        Num("calls_subgroup_share", sub, percent(sub)),
        " run in groups smaller than their job. The largest collective spans ",
        Num("max_group_size", largest, human_count(largest)),
        " GPUs; the largest job has ",
        Num("max_job_gpus_in_groups", largest_job, human_count(largest_job)),
        ".",
    ]
    return parts


def trend(trend_frame: pl.DataFrame | None, period: Period | None) -> Sentence:
    """The first and the last period of enough jobs compared (data.counted_periods: at least
    TREND_MIN_JOBS jobs), with their job counts, and the periods left out named."""
    from tracekit.report.data import TREND_MIN_JOBS, counted_periods

    if trend_frame is None or period is None or trend_frame.is_empty():
        return []
    dated = trend_frame.filter(trend_frame["calls"] > 0).to_dicts()
    rows = counted_periods(trend_frame).to_dicts()
    left_out = [r for r in dated if r["jobs"] < TREND_MIN_JOBS]
    few = ", ".join(
        f"{period_name(r['period_start'], period.months)} ({human_count(r['jobs'])} {plural(r['jobs'], 'job')})"
        for r in left_out
    )
    if len(dated) == 1:
        name = period_name(dated[0]["period_start"], period.months)
        return [f"All jobs with collectives started in one period ({name}): there is no trend to show."]
    if len(rows) < 2:
        return [
            f"Fewer than two periods hold at least {TREND_MIN_JOBS} jobs with collectives ("
            + (few or "none")
            + "): no trend is stated from so few jobs."
        ]
    first, last = rows[0], rows[-1]
    job_growth = last["median_job_gpus"] / first["median_job_gpus"]
    group_growth = last["mean_group_size"] / first["mean_group_size"]
    rule = f" Only periods in which at least {TREND_MIN_JOBS} jobs started are compared"
    largest: Sentence = (
        ["stayed at ", Num("trend_max_group_last", last["max_group_size"], human_count(last["max_group_size"]))]
        if first["max_group_size"] == last["max_group_size"]
        else [
            "from ",
            Num("trend_max_group_first", first["max_group_size"], human_count(first["max_group_size"])),
            " to ",
            Num("trend_max_group_last", last["max_group_size"], human_count(last["max_group_size"])),
        ]
    )
    return [
        f"From {period_name(first['period_start'], period.months)} (",
        Num("trend_jobs_first", first["jobs"], human_count(first["jobs"])),
        f" {plural(first['jobs'], 'job')}) to {period_name(last['period_start'], period.months)} (",
        Num("trend_jobs_last", last["jobs"], human_count(last["jobs"])),
        f" {plural(last['jobs'], 'job')}) the median job went from ",
        Num("trend_median_job_first", first["median_job_gpus"], human_count(first["median_job_gpus"])),
        " to ",
        Num("trend_median_job_last", last["median_job_gpus"], human_count(last["median_job_gpus"])),
        " GPUs (",
        Num("trend_job_growth", job_growth, ratio(job_growth)),
        "), the mean collective (per call) from ",
        Num("trend_mean_group_first", first["mean_group_size"], human_count(round(first["mean_group_size"], 1))),
        " to ",
        Num("trend_mean_group_last", last["mean_group_size"], human_count(round(last["mean_group_size"], 1))),
        " GPUs (",
        Num("trend_group_growth", group_growth, ratio(group_growth)),
        "), and the largest collective ",
        *largest,
        " GPUs.",
        rule + (f"; left out: {few}." if few else "."),
    ]


def class_lines(fleet: FleetData) -> Sentence:
    """The classes figure's headline: the classes, then how far labels and the inference agree."""
    return [*classes(fleet.jobs), *([" "] if len(fleet.agreement) else []), *agreement(fleet.agreement)]


def fleet_headlines(fleet: FleetData) -> dict[str, Sentence]:
    """Every fleet headline, by the figure it heads."""
    return {
        "summary": fleet_summary(fleet.overview),
        "sizes": job_sizes(fleet.sizes),
        "classes": class_lines(fleet),
        "mix": mix(fleet.mix, fleet.jobs),
        "wire": wire(fleet.mix),
        "messages": message_sizes(fleet.cdf, fleet.percentiles),
        "groups": group_sizes(fleet.groups),
        "trend": trend(fleet.trend, fleet.period),
        "fabrics": fabric_slowdown(fleet.fabrics) if fleet.fabrics is not None else [],
    }


# One job ----------------------------------------------------------------------------------------


def job_intro(job: JobData) -> Sentence:
    info = job.job
    key = info["job_id"]
    gpus: Sentence = (
        [Num(f"job_gpus:{key}", info["job_gpus"], human_count(info["job_gpus"])), " GPUs"]
        if info["job_gpus"]
        else ["An unknown number of GPUs"]
    )
    parts: Sentence = [
        *gpus,
        " (",
        Num(f"job_ranks_seen:{key}", info["ranks_seen"], human_count(info["ranks_seen"])),
        f" {plural(info['ranks_seen'], 'rank')} seen), class {info['class']}",
    ]
    if info["class_source"] == "label" and info["overridden"]:
        parts.append(f" from its label; its collectives alone say {info['inferred_class']}")
    elif info["class_source"] == "label":
        parts.append(", as its label says and its collectives confirm")
    else:
        parts.append(" (inferred from its collectives)")
    parts += [
        ". It issued ",
        Num(f"job_calls:{key}", info["calls"], human_count(info["calls"])),
        f" collective {plural(info['calls'], 'call')}, ",
        Num(f"job_wire_bytes:{key}", info["wire_bytes"], human_bytes(info["wire_bytes"])),
        " on the wire.",
    ]
    return parts


def job_collectives(job: JobData) -> Sentence:
    frame = job.by_collective
    if frame.is_empty() or not frame["wire_bytes"].sum():
        return []
    key = job.job["job_id"]
    top = frame.sort("wire_bytes", descending=True, nulls_last=True).row(0, named=True)
    share = top["wire_bytes"] / frame["wire_bytes"].sum()
    return [
        f"{comm_name(top['comm_type'])} carries ",
        Num(f"job_top_wire_share:{key}", share, percent(share)),
        " of the job's bytes on the wire: ",
        Num(f"job_top_wire_per_rank:{key}", top["wire_bytes_per_rank"], human_bytes(top["wire_bytes_per_rank"])),
        " per rank, in ",
        Num(f"job_top_calls_per_rank:{key}", top["calls_per_rank"], human_count(round(top["calls_per_rank"], 1))),
        " call per rank." if top["calls_per_rank"] == 1 else " calls per rank.",
    ]


def job_groups(job: JobData) -> Sentence:
    frame = job.by_group
    if frame.is_empty() or not frame["wire_bytes"].sum():
        return []
    key = job.job["job_id"]
    top = frame.sort("wire_bytes", descending=True, nulls_last=True).row(0, named=True)
    if top["pg_name"] is None:
        what = "calls whose trace names no group"
    else:
        what = f"group {top['pg_name']}" + (f" ({top['pg_desc']})" if top["pg_desc"] else "")
    size = f" of {human_count(top['group_size'])} GPUs" if top["group_size"] else ""
    return [
        f"{frame.height} process group{'s carry' if frame.height != 1 else ' carries'} traffic; "
        f"the busiest, {what}{size}, carries ",
        Num(f"job_top_group_share:{key}", top["wire_share"], percent(top["wire_share"])),
        " of the bytes on the wire.",
    ]


def job_bandwidth(job: JobData) -> Sentence:
    frame = job.bandwidth
    if frame.is_empty():
        return []
    key = job.job["job_id"]
    parts: Sentence = []
    for comm_type in sorted(set(frame["comm_type"].to_list())):
        row = frame.filter(frame["comm_type"] == comm_type).sort("log2_bin").row(-1, named=True)
        parts += [
            "Median bus bandwidth: " if not parts else "; ",
            f"{comm_name(comm_type)} ",
            Num(f"job_busbw:{key}:{comm_type}", row["p50_busbw_gbps"], gbps(row["p50_busbw_gbps"])),
            f" at {human_bytes(row['size_lo'])}–{human_bytes(row['size_hi'])}",
        ]
    return [*parts, " (nccl-tests' definitions; the largest size seen of each collective)."]


def job_stragglers(job: JobData) -> Sentence:
    frame = job.stragglers
    if frame.is_empty():
        return []
    key = job.job["job_id"]
    spread = frame["start_spread_us"]
    median, p99 = float(spread.median()), float(spread.quantile(0.99, "nearest"))  # type: ignore[arg-type]
    parts: Sentence = [
        f"Over {human_count(frame.height)} collectives matched across ranks, their ranks start a median ",
        Num(f"job_start_spread_p50:{key}", median, microseconds(median)),
        " apart (p99 ",
        Num(f"job_start_spread_p99:{key}", p99, microseconds(p99)),
        ")",
    ]
    late = frame.drop_nulls("last_rank")
    if late.is_empty():
        return [*parts, "; they always start together."]
    last = (
        late.group_by("last_rank", maintain_order=True)
        .len()
        .sort(["len", "last_rank"], descending=[True, False])
        .row(0, named=True)
    )
    share = last["len"] / frame.height
    return [
        *parts,
        f"; rank {last['last_rank']} starts last in ",
        Num(f"job_last_rank_share:{key}", share, percent(share)),
        " of them.",
    ]


def job_matrix(job: JobData) -> Sentence:
    frame = job.matrix
    if frame.is_empty():
        return []
    key = job.job["job_id"]
    unit = "rank" if job.ranks_per_cell == 1 else f"{job.ranks_per_cell}-rank host"
    total = fsum(frame["bytes"])
    by_src = (
        frame.group_by("src", maintain_order=True)
        .sum()
        .sort(["bytes", "src"], descending=[True, False])
        .row(0, named=True)
    )
    local = fsum(frame.filter(frame["src"] == frame["dst"])["bytes"]) / total
    cross = frame.filter(frame["src"] != frame["dst"])
    parts: Sentence = [
        f"The {unit} sending most is {by_src['src']}, with ",
        Num(f"job_a2a_top_sender:{key}", by_src["bytes"], human_bytes(by_src["bytes"])),
        " of ",
        Num(f"job_a2a_total:{key}", total, human_bytes(total)),
        "; ",
        Num(f"job_a2a_local_share:{key}", local, percent(local)),
        f" stays within a {unit}",
    ]
    if cross.height:
        imbalance = fmax(cross["bytes"]) / (fsum(cross["bytes"]) / cross.height)
        parts += [
            ", and the busiest pair carries ",
            Num(f"job_a2a_pair_imbalance:{key}", imbalance, ratio(imbalance)),
            " the mean pair",
        ]
    return [*parts, "."]


def job_hosts(job: JobData) -> Sentence:
    traffic = job.hosts
    if traffic is None or not traffic.bytes:
        return []
    key = job.job["job_id"]
    inside = traffic.intra_host_bytes / traffic.bytes
    parts: Sentence = [
        f"Replayed as flows ({traffic.gpus_per_host} GPUs per host), ",
        Num(f"job_intra_host_share:{key}", inside, percent(inside)),
        " of the bytes the job sends stay inside a host (NVLink)",
    ]
    matrix = traffic.matrix
    if matrix.is_empty():
        if traffic.hosts <= 1:
            return [*parts, ": the job fits in one host."]
        return [*parts, f"; nothing crosses the network between its {human_count(traffic.hosts)} hosts."]
    most = int(fmax(matrix.group_by("src_host").len()["len"]))
    return [
        *parts,
        "; across the network, ",
        Num(f"job_host_pairs:{key}", matrix.height, human_count(matrix.height)),
        f" host {plural(matrix.height, 'pair')} carry traffic and a host sends to at most ",
        Num(f"job_peer_hosts_max:{key}", most, human_count(most)),
        f" other {plural(most, 'host')} (of {human_count(max(traffic.hosts - 1, 0))}).",
    ]


def fabric_slowdown(frame: pl.DataFrame) -> Sentence:
    """The class whose median job gains most from spraying over ECMP, on each fabric, in numbers."""
    import polars as pl

    if frame.is_empty():
        return []
    wide = frame.pivot(on="routing", index=["class", "fabric"], values="median")
    if not {"ecmp", "spray"} <= set(wide.columns):
        return []
    wide = wide.drop_nulls(["ecmp", "spray"]).with_columns(gap=pl.col("ecmp") / pl.col("spray"))
    if wide.is_empty():
        return []
    parts: Sentence = []
    for fabric in sorted(set(wide["fabric"])):
        worst = (
            wide.filter(pl.col("fabric") == fabric).sort(["gap", "class"], descending=[True, False]).row(0, named=True)
        )
        parts += [
            "On " if not parts else "; on ",
            fabric,
            f", the median {worst['class']} job that uses the network takes ",
            Num(f"fabric_ecmp_median:{fabric}:{worst['class']}", worst["ecmp"], f"{worst['ecmp']:.2f}×"),
            " the ideal fabric's time under ECMP and ",
            Num(f"fabric_spray_median:{fabric}:{worst['class']}", worst["spray"], f"{worst['spray']:.2f}×"),
            " under spraying",
        ]
    return [*parts, "."]
