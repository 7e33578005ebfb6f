"""A rank's communication log (a parser of role "log": PyTorch's Flight Recorder) beside a trace of
the same rank: each collective counted once.

A Flight Recorder dump holds the last entries the rank recorded, a profiler or execution trace the
steps someone chose to profile; the two overlap where the profiler was on. The rule, per rank:

* Entries of the same rank read from several logs (the pickle and the JSON of one dump, two dumps
  of one run) are one: the same group, sequence id, type, size and creation time (entries of no
  time, an NCCL log's, are each their own).
* A log entry is covered by a trace of its rank when it was recorded while the trace was: its time
  (wall clock) lies between the trace's first event (traces.started_at) and the end of its last
  collective (the trace's times put on the wall clock by the trace's `epoch_offset_us`: Kineto's
  baseTimeNanoseconds), or, for a trace with no clock that records sequence ids (NCCL's
  record_param_comms in an execution trace), its (group, sequence id) lies within those the trace
  holds for that group (the clock decides where there is one: sequence ids start again with every
  run of a job, times do not). A covered entry is the
  trace's collective: its row is dropped, and the trace's row takes from it what it lacks (sequence
  id, group, sizes, peer), paired by (group, sequence id, type), else in order within each type when
  the counts agree. The trace's row keeps its source, timing and ids.
* An entry outside every trace of its rank stays a row of its own (`source = 'flight_recorder'`):
  the log is the only record of it (the steps before and after the profiled ones).
* A trace that gives neither a clock nor sequence ids (an execution trace alone, a Kineto trace
  without baseTimeNanoseconds) cannot place the entries, nor can a trace's clock place an entry of
  no time (an NCCL INFO log's lines carry none) unless its group and sequence id do: the trace's
  rows stand, the log's rows of that rank are dropped, and the log's `traces.warnings` says how many.
* Several logs of one rank (a Flight Recorder dump, an NCCL Inspector file, an NCCL INFO log) record
  the same collectives under different keys (NCCL's communicators and counters are not PyTorch's
  groups and sequence ids), so nothing pairs their entries. The log of lowest `log_precedence` (its
  parser says: Flight Recorder, then Inspector, then the NCCL log) stands; another log's entry
  recorded within the standing log's span of time (first entry to end of last), or one that no time
  places, is not counted, and its log's `traces.warnings` says how many; an entry placed outside the
  span (Inspector's records of the steps before a dump's ring buffer begins) stays a row of its own.

So counting a job's collectives never counts one twice, whatever sources of a rank it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tracekit.parsers.formats import log_precedence, role_of

if TYPE_CHECKING:
    import polars as pl

    from tracekit.parsers.base import TraceMeta

# A trace row's gaps a covering log entry fills.
FILLED = ("seq", "pg_name", "group_size", "dtype", "in_elems", "out_elems", "in_bytes", "out_bytes", "peer")
# What makes two entries of one rank the same entry (read from two dumps of it).
_ENTRY_KEY = ("rank", "start_us", "pg_name", "seq", "comm_type", "in_bytes")
_P2P = ("SEND", "RECV")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Clock:
    """What places a trace on the wall clock: its first event (µs since the epoch) and the offset of
    its times, when it says."""

    started_us: float | None
    offset_us: float | None

    @classmethod
    def of(cls, meta: TraceMeta | None) -> Clock:
        if meta is None:
            return cls(None, None)
        started = (meta.started_at - _EPOCH).total_seconds() * 1e6 if meta.started_at is not None else None
        return cls(started, meta.epoch_offset_us)


def has_logs(formats: Mapping[str, str | None]) -> bool:
    return any(role_of(f) == "log" for f in formats.values())


def link_logs(
    frame: pl.DataFrame, formats: Mapping[str, str | None], clocks: Mapping[str, Clock]
) -> tuple[pl.DataFrame, dict[str, str]]:
    """The job's rows with each log entry counted once (module docstring); and a note per log trace
    whose entries could not be placed."""
    import polars as pl

    logs = [t for t, f in formats.items() if role_of(f) == "log"]
    if not logs:
        return frame, {}
    is_log = pl.col("trace_id").is_in(logs)
    entries, notes = _best_log_stands(_one_per_entry(frame.filter(is_log), logs), formats)
    traced = frame.filter(~is_log)
    ranks = set(entries["rank"].drop_nulls().to_list()) & set(traced["rank"].drop_nulls().to_list())
    if not ranks:
        return pl.concat([traced, entries], how="vertical"), notes
    keep_traced = traced.filter(~pl.col("rank").is_in(sorted(ranks)))
    keep_entries = entries.filter(~pl.col("rank").is_in(sorted(ranks)))
    parts = [keep_traced, keep_entries]
    unplaced: dict[str, int] = {}
    for rank in sorted(ranks):
        rows = traced.filter(pl.col("rank") == rank).to_dicts()
        own = entries.filter(pl.col("rank") == rank).to_dicts()
        kept, dropped_blind = _link_rank(rows, own, clocks)
        for trace_id, count in dropped_blind.items():
            unplaced[trace_id] = unplaced.get(trace_id, 0) + count
        parts.append(pl.DataFrame(kept, schema=frame.schema))
    notes |= {
        trace_id: (
            f"{_entries(count)} not counted: a trace of the same rank records the rank's "
            "collectives but neither a wall clock nor sequence ids tell which of them it holds"
        )
        for trace_id, count in unplaced.items()
    }
    return pl.concat(parts, how="vertical"), notes


def _entries(count: int) -> str:
    return f"{count:,} entr{'y' if count == 1 else 'ies'}"


def _best_log_stands(entries: pl.DataFrame, formats: Mapping[str, str | None]) -> tuple[pl.DataFrame, dict[str, str]]:
    """The entries without those of a rank's other logs that its best log (lowest
    Parser.log_precedence) holds: an entry recorded within the best log's span of time, or one that no
    time places (nothing else ties two libraries' records: NCCL's communicators and counters are not
    PyTorch's groups and sequence ids); and a note per log so cut."""
    import polars as pl

    precedence = {t: log_precedence(f) for t, f in formats.items()}
    marked = entries.with_columns(
        pl.col("trace_id").replace_strict(precedence, default=1 << 16, return_dtype=pl.Int64).alias("_precedence")
    )
    ranked = marked.filter(pl.col("rank").is_not_null())
    best = ranked.group_by("rank").agg(pl.col("_precedence").min().alias("_best"))
    spans = (
        ranked.join(best, on="rank")
        .filter(pl.col("_precedence") == pl.col("_best"))
        .group_by("rank")
        .agg(
            pl.col("start_us").min().alias("_from"),
            (pl.col("start_us") + pl.col("duration_us").fill_null(0.0)).max().alias("_to"),
            pl.col("trace_id").unique().alias("_best_logs"),
        )
    )
    marked = marked.join(best, on="rank", how="left").join(spans, on="rank", how="left")
    lower = pl.col("_precedence") > pl.col("_best")
    timed = pl.col("start_us").is_not_null()
    within = timed & pl.col("start_us").is_between(pl.col("_from"), pl.col("_to"))
    placed_outside = timed & pl.col("_from").is_not_null() & ~within
    cut = marked.filter(lower.fill_null(False) & ~placed_outside)
    notes: dict[str, str] = {}
    for (trace_id,), rows in cut.group_by("trace_id", maintain_order=True):
        kinds = ", ".join(sorted({str(formats.get(t)) for logs in rows["_best_logs"] for t in logs}))
        reasons = []
        if (count := rows.filter(within).height) > 0:
            reasons.append(
                f"{_entries(count)} not counted: they were recorded while a log of the same rank ({kinds}) was, "
                "which holds them"
            )
        if (count := rows.filter(~timed).height) > 0:
            reasons.append(
                f"{_entries(count)} not counted: a log of the same rank ({kinds}) records the rank's collectives, "
                "and these carry no time to tell which of them it holds"
            )
        if (count := rows.filter(timed & pl.col("_from").is_null()).height) > 0:
            reasons.append(
                f"{_entries(count)} not counted: a log of the same rank ({kinds}) records the rank's collectives, "
                "and its entries carry no time to tell which of these it holds"
            )
        notes[str(trace_id)] = "; ".join(reasons)
    kept = marked.filter(~(lower.fill_null(False) & ~placed_outside))
    return kept.select(entries.columns), notes


def _one_per_entry(entries: pl.DataFrame, order: list[str]) -> pl.DataFrame:
    """One row per log entry of a rank, from the first log (by `order`) that holds it."""
    import polars as pl

    if entries.is_empty():
        return entries
    # Two entries are one only when their creation times agree too: an entry of no time (an NCCL log's
    # line) is its own, however many equal lines precede it (opCount is 0 on one node from NCCL 2.27).
    rank_known = entries.filter(pl.col("rank").is_not_null() & pl.col("start_us").is_not_null())
    untimed = entries.filter(pl.col("rank").is_not_null() & pl.col("start_us").is_null())
    first = {trace_id: i for i, trace_id in enumerate(order)}
    ordered = rank_known.with_columns(
        pl.col("trace_id").replace_strict(first, default=len(order), return_dtype=pl.Int64).alias("_log")
    ).sort("_log", "op_id")
    unique = ordered.unique(subset=list(_ENTRY_KEY), keep="first", maintain_order=True).drop("_log")
    return pl.concat([unique, untimed, entries.filter(pl.col("rank").is_null())], how="vertical")


def _timing_trace(row: Mapping[str, Any]) -> str:
    """The trace whose clock a row's times are on: the device trace of a linked row, else its own."""
    return str(row.get("linked_trace_id") or row["trace_id"])


def _link_rank(
    rows: list[dict[str, Any]], entries: list[dict[str, Any]], clocks: Mapping[str, Clock]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One rank: the trace rows (gaps filled) and the log entries no trace covers; and the entries
    dropped per log because no trace of the rank could place them."""
    windows: list[tuple[float, float]] = []
    ends: dict[str, float] = {}
    for row in rows:
        start = row.get("start_us")
        if start is not None:
            trace = _timing_trace(row)
            end = start + (row.get("duration_us") or 0.0)
            ends[trace] = max(ends.get(trace, end), end)
    for trace, end in ends.items():
        clock = clocks.get(trace)
        if clock is not None and clock.started_us is not None and clock.offset_us is not None:
            windows.append((clock.started_us, end + clock.offset_us))
    seqs: dict[tuple[Any, bool], tuple[int, int]] = {}
    for row in rows:
        if row.get("seq") is not None:
            key = (row.get("pg_name"), row["comm_type"] in _P2P)
            low, high = seqs.get(key, (row["seq"], row["seq"]))
            seqs[key] = (min(low, row["seq"]), max(high, row["seq"]))
    covered: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    blind: dict[str, int] = {}
    for entry in entries:
        placed = _covered(entry, windows, seqs)
        if placed is None:
            blind[entry["trace_id"]] = blind.get(entry["trace_id"], 0) + 1
        elif placed:
            covered.append(entry)
        else:
            kept.append(entry)
    _fill(rows, covered, clocks)
    return rows + kept, blind


def _covered(
    entry: Mapping[str, Any], windows: list[tuple[float, float]], seqs: Mapping[tuple[Any, bool], tuple[int, int]]
) -> bool | None:
    """Whether a trace of the rank holds the entry; None when no trace can tell. The clock decides
    first: sequence ids start again with every run, times do not."""
    start = entry.get("start_us")
    if windows and start is not None:
        return any(low <= start <= high for low, high in windows)
    # An entry with no time (an NCCL log's lines carry none) is placed by its sequence id, or not at all.
    seq_range = seqs.get((entry.get("pg_name"), entry["comm_type"] in _P2P))
    if seq_range is not None and entry.get("seq") is not None:
        return seq_range[0] <= entry["seq"] <= seq_range[1]
    return None


def _fill(rows: list[dict[str, Any]], covered: list[dict[str, Any]], clocks: Mapping[str, Clock]) -> None:
    """Pair the covered entries with the trace rows they are (by group, sequence id and type; else in
    time order within a type when both sides hold as many) and fill the rows' gaps from them."""
    by_seq = {(r.get("pg_name"), r["seq"], r["comm_type"]): r for r in rows if r.get("seq") is not None}
    unpaired: list[dict[str, Any]] = []
    paired_rows: set[int] = set()
    for entry in covered:
        row = by_seq.get((entry.get("pg_name"), entry.get("seq"), entry["comm_type"]))
        if row is not None and id(row) not in paired_rows:
            paired_rows.add(id(row))
            _take_gaps(row, entry)
        else:
            unpaired.append(entry)
    for comm_type in sorted({e["comm_type"] for e in unpaired}):
        mine = sorted((e for e in unpaired if e["comm_type"] == comm_type), key=lambda e: e.get("start_us") or 0.0)
        theirs = sorted(
            (r for r in rows if r["comm_type"] == comm_type and id(r) not in paired_rows),
            key=lambda r: _wall_start(r, clocks),
        )
        if len(mine) == len(theirs):
            for row, entry in zip(theirs, mine, strict=True):
                _take_gaps(row, entry)


def _wall_start(row: Mapping[str, Any], clocks: Mapping[str, Clock]) -> float:
    clock = clocks.get(_timing_trace(row))
    offset = clock.offset_us if clock is not None and clock.offset_us is not None else 0.0
    start = row.get("start_us")
    return start + offset if start is not None else float("inf")


def _take_gaps(row: dict[str, Any], entry: Mapping[str, Any]) -> None:
    for column in FILLED:
        if row.get(column) is None and entry.get(column) is not None:
            row[column] = entry[column]
            if column in (entry.get("inferred") or []):
                row["inferred"] = sorted({*(row.get("inferred") or []), column})
