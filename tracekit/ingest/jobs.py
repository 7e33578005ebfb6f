"""Job-level finishing: what no single file can decide on its own.

Per job: which rank each file is, the job's world size and process groups, group sizes that only
the process group records, the ranks that have no trace, and the linking of a rank's host trace
(PyTorch ET) with its device trace (Kineto) so each collective is counted once, with sizes from
whichever carries them and timing from the profiler; then of a rank's communication log (Flight
Recorder) with its traces, the log's entries that a trace holds counted as the trace's
(tracekit.ingest.logs).

Ranks come from the content first: Kineto `distributedInfo.rank` ('content'), else the rank
argument of the default group's collectives in a PyTorch ET ('collective_args'). A rank in the file
name ('file_name') is used only where the content says nothing, and is refused, with a warning on
the file, when it contradicts the content or is not below the job's world size.

The parser's `rank_hint` is the caller's rank in the default group, or, when the file's collectives
run in one group only, in that group: a global rank only when the file records no group but the
whole world. A file that records sub-groups (tensor or pipeline parallel) may hold a group-local
hint, so there the name comes first and the hint only fills in where the name says nothing.

The world size is the largest of: what the traces state, the largest group any collective or
process group of the job spans, and the ranks seen (marked inferred unless a trace states it).
Ranks without a trace are counted on the job row (`ranks_missing`, `missing_ranks` as ranges),
with bookkeeping proportional to the ranks present, never to a world size a file claims.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from tracekit.ingest.discover import JobInfo
from tracekit.ingest.logs import Clock, has_logs, link_logs
from tracekit.ingest.worker import ParsedFile, rank_from_name
from tracekit.parsers.base import ProcessGroup, TraceMeta, describe
from tracekit.parsers.formats import parsers, role_of

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from tracekit.rows import JobsRow, ProcessGroupsRow, TracesRow

# Columns a linked row takes from the device trace even when the host trace has them.
_TIMING = ("start_us", "duration_us")
# Ranks and sizes are stored as int32: a value outside this range cannot be a rank or a world size.
_INT32_MAX = (1 << 31) - 1
# A whole-world group recorded with an empty rank list gets its ranks listed only up to this size;
# beyond it the list stays empty (group_size says how many), so a world size a file claims never
# sizes an allocation.
FILL_WORLD_RANKS_MAX = 1 << 16


@dataclass
class JobResult:
    traces: list[TracesRow] = field(default_factory=list)
    process_groups: list[ProcessGroupsRow] = field(default_factory=list)
    job: JobsRow = field(default_factory=lambda: cast("JobsRow", {}))
    # How the commit fills the staged rows of each file read well (see `StagedFile`) ...
    files: list[StagedFile] = field(default_factory=list)
    # ... except the collectives of a job whose host and device traces are linked: finished here.
    collectives: pa.Table | None = None
    # The dataset's `traces` rows of the job that these rows replace (the commit deletes them, and
    # the rows of theirs in other tables).
    replaced: list[TracesRow] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StagedFile:
    """What the commit needs to turn a file's staged rows into dataset rows.

    `group_size_without_pg`: the group size of a collective that names no process group and records
    no size (ASTRA-sim's reading of a Chakra collective with no process group: all ranks of the
    world); null for other formats. `collectives_staged`: False when this file's collectives are
    in `JobResult.collectives` instead.
    """

    seq: int
    trace_id: str
    job_id: str
    rank: int | None
    group_size_without_pg: int | None
    collectives_staged: bool


@dataclass(frozen=True)
class RankChoice:
    rank: int | None
    source: str | None
    warning: str | None = None


def _checked(value: int | None) -> int | None:
    """A rank or size as the dataset can store it; None for values no job can have."""
    if value is None or isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        return None
    return value


def content_rank(parsed: ParsedFile) -> RankChoice:
    """The global rank the file's content records, if any (see the module docstring)."""
    meta = parsed.meta
    if meta is None:
        return RankChoice(None, None)
    if _checked(meta.rank) is not None:
        return RankChoice(meta.rank, "content")
    if _checked(meta.rank_hint) is not None and _only_whole_world_groups(meta):
        return RankChoice(meta.rank_hint, "collective_args")
    return RankChoice(None, None)


def _only_whole_world_groups(meta: TraceMeta) -> bool:
    """The file records no process group but the whole world (an empty rank list, or all ranks)."""
    return all(
        not g.ranks or (meta.world_size is not None and len(g.ranks) == meta.world_size) for g in meta.process_groups
    )


def decide_rank(parsed: ParsedFile, world_size: int | None = None) -> RankChoice:
    """The file's rank: from the content; else from its name when below `world_size` (if known)."""
    from_name = _checked(rank_from_name(parsed.name))
    if parsed.error is not None:
        in_world = from_name is not None and (world_size is None or from_name < world_size)
        return RankChoice(from_name if in_world else None, "file_name" if in_world else None)
    chosen = content_rank(parsed)
    if chosen.rank is not None:
        if from_name is not None and from_name != chosen.rank:
            where = "distributedInfo" if chosen.source == "content" else "the default group's collectives"
            note = f"the file name says rank {from_name} but {where} record rank {chosen.rank}: rank {chosen.rank} used"
            return RankChoice(chosen.rank, chosen.source, note)
        return chosen
    hint = _checked(parsed.meta.rank_hint) if parsed.meta is not None else None
    if from_name is None:
        return RankChoice(hint, "collective_args" if hint is not None else None)
    if world_size is not None and from_name >= world_size:
        note = f"rank {from_name} from the file name is not below the job's world size {world_size}: rank left null"
        return RankChoice(None, None, note)
    return RankChoice(from_name, "file_name")


def trace_row(parsed: ParsedFile, run_id: str, world_size: int | None = None) -> TracesRow:
    choice = decide_rank(parsed, world_size)
    meta = parsed.meta
    warnings = [w.describe(parsed.display) for w in meta.warnings] if meta else []
    if choice.warning:
        warnings.append(describe(parsed.display, None, choice.warning))
    return {
        "trace_id": parsed.trace_id,
        "job_id": parsed.job_id,
        "rank": choice.rank,
        "path": parsed.display,
        "format": parsed.format,
        "schema_version": meta.schema_version if meta else None,
        "size_bytes": parsed.size_bytes,
        "sha256": parsed.sha256 or None,
        "node_count": meta.node_count if meta else None,
        "status": "error" if parsed.error else "ok",
        "error": parsed.error,
        "rank_source": choice.source,
        "world_size": _checked(meta.world_size) if meta else None,
        "started_at": meta.started_at if meta else None,
        "run_id": run_id,
        "warnings": warnings,
    }


def _merge_groups(groups: list[ProcessGroup], existing: list[ProcessGroupsRow]) -> dict[str, dict[str, Any]]:
    """One entry per pg_name, keeping the most informative record of each."""
    merged: dict[str, dict[str, Any]] = {}

    def score(g: dict[str, Any]) -> tuple[int, int, int]:
        return (len(g.get("ranks") or []), g.get("group_size") is not None, g.get("pg_desc") is not None)

    candidates: list[dict[str, Any]] = [dict(g) for g in existing] + [
        {
            "pg_name": g.pg_name,
            "pg_desc": g.pg_desc,
            "backend": g.backend,
            "group_size": _checked(g.group_size),
            "ranks": [r for r in g.ranks if _checked(r) is not None],
            "inferred": [],
        }
        for g in groups
    ]
    for group in candidates:
        current = merged.get(group["pg_name"])
        if current is None or score(group) > score(current):
            merged[group["pg_name"]] = group
    return merged


def _largest(values: Iterable[int | None]) -> int | None:
    checked = [v for v in map(_checked, values) if v]
    return max(checked) if checked else None


def finish_job(
    info: JobInfo,
    parsed: list[ParsedFile],
    existing_traces: list[TracesRow],
    existing_groups: list[ProcessGroupsRow],
    run_id: str,
    existing_largest_group: int | None = None,
) -> JobResult:
    """Everything the job's new files add to the dataset, in data-model rows.

    `existing_*`: what the dataset holds for the job (its trace rows, process groups, and the largest
    group_size its collectives record, not counting those inferred from the world size). A path
    read again in this run (its content changed: an unchanged file is not read) replaces the
    dataset's row for it, unless it now fails and that row was read well: then both stay, so a
    file cut short while being rewritten loses no rows.
    """
    result = JobResult()
    metas = [p.meta for p in parsed if p.meta is not None and p.error is None]
    read_again = {p.display for p in parsed}
    read_well = {p.display for p in parsed if p.error is None}
    kept: list[TracesRow] = []
    for row in existing_traces:
        path = row.get("path")  # None: a whole-job row of an earlier version, recomputed
        stays = path is not None and path not in read_well and (row["status"] == "ok" or path not in read_again)
        (kept if stays else result.replaced).append(row)
    existing_traces = kept
    groups = _merge_groups([g for m in metas for g in m.process_groups], existing_groups)
    stated = _largest(
        [r.get("world_size") for r in existing_traces if r["status"] == "ok"] + [m.world_size for m in metas]
    )
    spanned = _largest(
        [g.get("group_size") for g in groups.values() if "group_size" not in (g.get("inferred") or [])]
        + [p.max_group_size for p in parsed if p.error is None]
        + [existing_largest_group]
    )
    known_world = _largest([stated, spanned])
    new_rows = [trace_row(p, run_id, known_world) for p in parsed]
    all_rows = existing_traces + new_rows
    ranks_seen = sorted({r["rank"] for r in all_rows if r["status"] == "ok" and r["rank"] is not None})

    world_size = _largest([known_world, ranks_seen[-1] + 1 if ranks_seen else None, len(ranks_seen)])
    inferred_job = ["world_size"] if world_size is not None and world_size != stated else []
    _complete_groups(groups, world_size)

    result.traces = new_rows
    result.process_groups = [cast("ProcessGroupsRow", {"job_id": info.job_id, **g}) for g in groups.values()]
    starts = [at for r in all_rows if (at := r.get("started_at")) is not None]
    labels = [m.label for m in metas if m.label]
    started_at: datetime | None = info.started_at or (min(starts) if starts else None)
    missing = missing_ranges(ranks_seen, world_size) if world_size is not None else None
    ranks_missing = world_size - len(ranks_seen) if world_size is not None else None
    result.job = {
        "job_id": info.job_id,
        "world_size": world_size,
        "started_at": started_at,
        "label": info.label or (labels[0] if labels else None),
        "source": info.source,
        "trace_count": len(all_rows),
        "ranks_seen": len(ranks_seen),
        "ranks_missing": ranks_missing,
        "missing_ranks": missing,
        "inferred": inferred_job,
    }
    link = _links(parsed)
    result.files = [
        StagedFile(
            p.seq,
            p.trace_id,
            p.job_id,
            row["rank"],
            world_size if _ungrouped_is_world(p.format) else None,
            not link,
        )
        for p, row in zip(parsed, new_rows, strict=True)
        if row["status"] == "ok"
    ]
    if link:
        result.collectives, notes = _linked_collectives(info.job_id, parsed, new_rows, groups, world_size)
        for row in new_rows:
            if row["trace_id"] in notes:
                row["warnings"] = [*(row["warnings"] or []), describe(row["path"] or "", None, notes[row["trace_id"]])]
    return result


def _links(parsed: list[ParsedFile]) -> bool:
    """The job holds host (PyTorch ET) and device (Kineto) traces, or a log (Flight Recorder) beside
    another trace or log: its collectives may be linked."""
    ok = [role_of(p.format) for p in parsed if p.error is None]
    roles = set(ok)
    return ("host" in roles and "device" in roles) or ("log" in roles and len(ok) > 1)


def _ungrouped_is_world(fmt: str | None) -> bool:
    """Whether the format's collectives that name no process group run on the whole world."""
    parser = parsers().get(fmt or "")
    return parser is not None and parser.ungrouped_is_world


def missing_ranges(seen: list[int], world_size: int) -> str:
    """The ranks below `world_size` not in `seen` (sorted, distinct), as ranges: "1-7, 9".

    One range per gap between ranks seen, so the text grows with the ranks present, whatever the
    world size.
    """
    ranges = []
    start = 0
    for rank in [*seen, world_size]:
        if rank > start:
            ranges.append(str(start) if rank - 1 == start else f"{start}-{rank - 1}")
        start = rank + 1
    return ", ".join(ranges)


def _complete_groups(groups: dict[str, dict[str, Any]], world_size: int | None) -> None:
    for group in groups.values():
        inferred = list(group.get("inferred") or [])
        if not group.get("ranks") and world_size is not None and group.get("group_size") in (None, world_size):
            # PyTorch records the whole-world group with an empty rank list.
            if group.get("group_size") is None:
                group["group_size"] = world_size
                inferred.append("group_size")
            if world_size <= FILL_WORLD_RANKS_MAX:
                group["ranks"] = list(range(world_size))
                inferred.append("ranks")
        if group.get("group_size") is None and group.get("ranks"):
            group["group_size"] = len(group["ranks"])
            inferred.append("group_size")
        group["inferred"] = sorted(set(inferred))


def _linked_collectives(
    job_id: str,
    parsed: list[ParsedFile],
    rows: list[TracesRow],
    groups: dict[str, dict[str, Any]],
    world_size: int | None,
) -> tuple[pa.Table | None, dict[str, str]]:
    """The job's collectives as dataset rows, host and device traces of a rank linked into one, and a
    log's entries that a trace of the rank holds counted as its; with a note per log not placed."""
    import polars as pl

    from tracekit.ingest.worker import SEQ_COLUMN
    from tracekit.schema import arrow_schema

    ok = [(p, row) for p, row in zip(parsed, rows, strict=True) if row["status"] == "ok"]
    paths = list(dict.fromkeys(path for p, _ in ok for path in p.staged.get("collectives", [])))
    if not paths:
        return None, {}
    per_trace = pl.DataFrame(
        {
            SEQ_COLUMN: [p.seq for p, _ in ok],
            "trace_id": [p.trace_id for p, _ in ok],
            "rank": [row["rank"] for _, row in ok],
            "_world": [_ungrouped_is_world(p.format) for p, _ in ok],
        },
        schema={SEQ_COLUMN: pl.Int64, "trace_id": pl.String, "rank": pl.Int32, "_world": pl.Boolean},
    )
    frame = (
        pl.read_parquet(paths).join(per_trace, on=SEQ_COLUMN, how="inner").with_columns(pl.lit(job_id).alias("job_id"))
    )
    if frame.is_empty():
        return None, {}
    formats = {p.trace_id: p.format for p, _ in ok}
    frame = _fill_group_size(frame, groups, world_size).drop(SEQ_COLUMN)
    merged = link_host_and_device(frame, formats)
    notes: dict[str, str] = {}
    if has_logs(formats):
        merged, notes = link_logs(merged, formats, {p.trace_id: Clock.of(p.meta) for p, _ in ok})
        merged = _fill_group_size(merged, groups, world_size)  # groups a log entry gave a trace's row
    schema = arrow_schema("collectives")
    return merged.select(schema.names).to_arrow().cast(schema), notes


def _fill_group_size(frame: pl.DataFrame, groups: dict[str, dict[str, Any]], world_size: int | None) -> pl.DataFrame:
    """Group sizes the process group (or, for formats whose ungrouped collectives span the world such
    as Chakra ET, the world) records and the op does not."""
    import polars as pl

    sizes = {name: g["group_size"] for name, g in groups.items() if g.get("group_size") is not None}
    from_group = pl.col("pg_name").replace_strict(sizes, default=None, return_dtype=pl.Int32)
    if world_size is not None:
        # ASTRA-sim's reading of a Chakra collective with no process group: all ranks take part.
        whole_world = pl.col("pg_name").is_null() & pl.col("_world")
        from_group = pl.when(whole_world).then(pl.lit(world_size, pl.Int32)).otherwise(from_group)
    fill = pl.col("group_size").is_null() & from_group.is_not_null()
    return frame.with_columns(
        pl.when(fill).then(from_group).otherwise(pl.col("group_size")).alias("group_size"),
        pl.when(fill)
        .then(pl.col("inferred").list.concat(pl.lit(["group_size"])))
        .otherwise(pl.col("inferred"))
        .alias("inferred"),
    )


def link_host_and_device(frame: pl.DataFrame, formats: dict[str, str | None]) -> pl.DataFrame:
    """Merge each rank's host rows (a parser of role "host": PyTorch ET) with its device rows (role
    "device": Kineto) for the same collectives.

    Pairs are made by record-function id where both traces carry it, then in order within each
    comm_type. A pair becomes one row: the host row's values, gaps filled from the device row,
    timing from the device row. Rows without a partner stay as they are.
    """
    import polars as pl

    host_ids = [t for t, f in formats.items() if role_of(f) == "host"]
    device_ids = [t for t, f in formats.items() if role_of(f) == "device"]
    if not host_ids or not device_ids:
        return frame
    trace_rank = frame.select("trace_id", "rank").unique()
    ranks_host = trace_rank.filter(pl.col("trace_id").is_in(host_ids))
    ranks_device = trace_rank.filter(pl.col("trace_id").is_in(device_ids))
    pairs = ranks_host.join(ranks_device, on="rank", suffix="_device").filter(pl.col("rank").is_not_null())
    if pairs.is_empty():
        return frame
    merged_rows: list[pl.DataFrame] = []
    consumed: set[str] = set()
    for host_id, device_id in pairs.select("trace_id", "trace_id_device").unique("trace_id").iter_rows():
        if device_id in consumed:
            continue
        consumed.update((host_id, device_id))
        host = frame.filter(pl.col("trace_id") == host_id)
        device = frame.filter(pl.col("trace_id") == device_id)
        merged_rows.append(_link_pair(host, device))
    rest = frame.filter(~pl.col("trace_id").is_in(list(consumed)))
    return pl.concat([rest, *merged_rows], how="vertical")


def _pair_indices(host: pl.DataFrame, device: pl.DataFrame) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    used_h: set[int] = set()
    used_d: set[int] = set()
    device_by_rf = {rf: i for i, rf in enumerate(device["rf_id"].to_list()) if rf is not None}
    for i, rf in enumerate(host["rf_id"].to_list()):
        j = device_by_rf.get(rf) if rf is not None else None
        if j is not None and j not in used_d and host["comm_type"][i] == device["comm_type"][j]:
            pairs.append((i, j))
            used_h.add(i)
            used_d.add(j)
    host_order = _order(host, used_h)
    device_order = _order(device, used_d)
    for comm_type, h_list in host_order.items():
        pairs.extend(zip(h_list, device_order.get(comm_type, []), strict=False))
    return pairs


def _order(frame: pl.DataFrame, used: set[int]) -> dict[str, list[int]]:
    """Unpaired row indices per comm_type, in issue order (seq, then start time, then op id)."""
    by_type: dict[str, list[tuple[Any, int]]] = {}
    seqs, starts, ops, types = (frame[c].to_list() for c in ("seq", "start_us", "op_id", "comm_type"))
    for i, comm_type in enumerate(types):
        if i in used:
            continue
        key = (
            starts[i] if starts[i] is not None else float("inf"),
            ops[i],
            seqs[i] if seqs[i] is not None else -1,
        )
        by_type.setdefault(comm_type, []).append((key, i))
    return {t: [i for _, i in sorted(v, key=lambda kv: kv[0])] for t, v in by_type.items()}


def _link_pair(host: pl.DataFrame, device: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    pairs = _pair_indices(host, device)
    if not pairs:
        return pl.concat([host, device], how="vertical")
    hosts = host.to_dicts()
    devices = device.to_dicts()
    paired_d = {j for _, j in pairs}
    paired_h = {i for i, _ in pairs}
    out = [_merge_row(hosts[i], devices[j]) for i, j in pairs]
    out += [hosts[i] for i in range(len(hosts)) if i not in paired_h]
    out += [devices[j] for j in range(len(devices)) if j not in paired_d]
    return pl.DataFrame(out, schema=host.schema)


def _merge_row(host: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    row = dict(host)
    inferred = set(host.get("inferred") or [])
    for column, value in device.items():
        if column in _TIMING:
            row[column] = value
        elif row.get(column) is None and value is not None:
            row[column] = value
            if column in (device.get("inferred") or []):
                inferred.add(column)
    row["source"] = "linked"
    row["linked_trace_id"] = device["trace_id"]
    row["inferred"] = sorted(inferred)
    return row
