"""Kineto (PyTorch profiler) Chrome-trace JSON: every complete event, and each collective once.

The package reads in stages: `decode` (JSON into typed events, the trace's metadata), `events`
(which events may be collectives, which unit owns each kernel), `pairing` (c10d ops and their
backend work), `rows` (one row per collective); `args` names the profiler's arguments per
generation. Every rule of collective semantics comes from tracekit.parsers.common.

Decoding: the whole document is decoded in one call into typed msgspec Structs; only `ph`, `name`,
`cat`, `pid`, `tid`, `ts`, `dur` become Python objects, and `args` stays raw JSON that is decoded
only for the few events the collective logic needs (NCCL kernels, `record_param_comms`, backend
annotations, `c10d::` ops, kernel launches). If a field has an unexpected type (a string `pid`, a
numeric `name`, ...) the typed decode fails and a tolerant path re-reads the document untyped and
coerces each event, so odd files cost time, not correctness. A `ts`/`dur` that is no finite number
is null, with a warning on the file (the rulebook's value policy).

Collectives, one row per logical operation. A call appears as a chain

    cpu_op c10d::allreduce_ -> cpu_op record_param_comms -> user_annotation nccl:all_reduce
        -> (cuda launch on the same thread) -> kernel ncclKernel_* / ncclDevKernel_*

The anchor is `record_param_comms` (source 'record_param_comms'). Its NCCL kernels are found by
the launch: the kernel's `correlation` equals the `correlation` arg of a cudaLaunch* runtime event,
and the launch lies inside the anchor's span on the anchor's thread (this works for every
generation; in G1 traces the kernel's `External id` is the correlation number, so External ids
cannot be trusted there). When a kernel's launch is not in the trace, the kernel is matched by
`External id` (G3+: kernel and record_param_comms share it). Start/duration come from the
kernel(s) (device time), else from the CPU op. `record_param_comms` events that name no
collective (`wait`, `coalesced`, G1 waits with no annotation, c10d op or kernel) give no row but
still own the kernels launched inside them.

Without `record_param_comms` (gloo in torch 2.x emits none) a call is a `c10d::` dispatcher op on
the calling thread plus a `gloo:` work annotation, mostly on a `pt_gloo_runloop` worker thread
(send/recv on the calling thread), which starts after the op and often after it returned. The row
is the c10d op's (source 'c10d'): op_id, `Record function id`, name without `c10d::`, comm_type
(so FSDP's `_reduce_scatter_base_`, which gloo runs as `gloo:all_reduce`, stays REDUCE_SCATTER),
sizes from `Input Dims`/`Input type` read by the op's argument names (tracekit.parsers.common.c10d:
all-gathers, reduce-scatters, gathers, scatters and all-to-alls list the output first; a
TensorList has no dtype, the annotation's tensor gives it) and all-to-all splits from
`Concrete Inputs` ('[4, 2, 5, 3]'). start/duration come from the paired annotation (the actual
transfer), else from the op. Pairing follows tracekit.parsers.common.pairing, within a process. A
`Record function id` of 0 (G4 writes 0 on every event) is unknown: rf_id is null then, so joins on
it cannot false-match.

Fallbacks, each taking only what the level above did not explain: backend annotations paired
with no c10d op (source 'annotation'), then `c10d::` ops with neither an anchor nor an annotation
(source 'c10d', CPU time), then NCCL kernels launched from a host event in the trace that is no
collective op, or from a trace that records no launches at all (a device-only capture): source
'kernel', comm_type and dtype from the kernel name and marked inferred, unless the kernel carries
G3+ comm args. SendRecv and Generic kernels alone cannot be classified (send, recv and all-to-all
all run as SendRecv): they are left out, and the count is noted on the trace.

A device kernel whose host launch lies outside the profiled window (the trace records launches,
but not this kernel's: the window opened after its host op) is left out and noted on the trace, in
every profiler generation, whether or not the kernel carries comm args: its collective was issued
before the window, and a row needs the host op to be the one row per rank of a logical collective
that the host trace (PyTorch ET) also holds.

`started_at`: Kineto writes `ts` relative to `baseTimeNanoseconds`, a wall-clock epoch time
(system_clock, floored to a 3-month interval so that ns timestamps stay exact as doubles; see
libkineto output_json.h `ChromeTraceBaseTime` / `transToRelativeTime`). So the trace's first
complete event (ph "X"; metadata events may carry ts 0) happened at baseTimeNanoseconds + min(ts)
µs, UTC. Without that key the `ts` origin is unknown (older traces write absolute epoch µs, but
nothing in the file says so), and started_at is None.

Memory: a document up to a fifth of the memory budget (tracekit.parsers.common.limits) is decoded at
once (peak ~5x the JSON size); a longer one is read in pieces of whole events
(tracekit.parsers.kineto.stream), ops written piece by piece, and only the events the collective
logic reads are kept (kernel launches as their correlation, time and thread): the same rows.

Known gaps: 'B'/'E' duration pairs are not turned into ops (Kineto writes 'X'); kernels whose
launch is missing and whose External id matches no anchor are not matched by stream order.
"""

from __future__ import annotations

import math
from typing import Any

from tracekit.parsers.base import BatchSink, Source, TraceMeta
from tracekit.parsers.common.finish import finished
from tracekit.parsers.common.limits import JsonChunks, whole_document_bytes
from tracekit.parsers.common.rows import CollectiveBuffer, CollectiveRow
from tracekit.parsers.common.values import MAX_TEXT_CHARS, Checker
from tracekit.parsers.kineto.decode import Event, bound_args, decode, detached, event_args, read_meta
from tracekit.parsers.kineto.events import (
    Candidates,
    Events,
    Launches,
    Spans,
    Unit,
    anchor_units,
    assign_kernels,
    classify,
    consume_c10d_ops,
)
from tracekit.parsers.kineto.pairing import pair_annotations
from tracekit.parsers.kineto.rows import Context, kernel_row, unit_row
from tracekit.parsers.kineto.stream import EventStream
from tracekit.sources import known_size

FORMAT = "kineto"

OPS_BATCH_ROWS = 65_536


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one Kineto trace: ops (every complete event) and collectives (each one once)."""
    meta = TraceMeta(format=FORMAT)
    checker = Checker(meta)
    limit = whole_document_bytes()
    with source.open() as stream:
        reader = JsonChunks(stream)
        size = known_size(stream)
        # A file known to be too long streams from its first chunk; a gzip, once `limit` is read.
        data = reader.read_up_to(limit if size is None or size <= limit else 1, size)
        if not reader.eof:
            return _parse_pieces(EventStream(reader, data, checker), sink, meta, checker)
    trace = decode(data, checker)
    del data
    events = trace.traceEvents or []
    complete = [i for i, e in enumerate(events) if e.ph == "X"]
    first_ts = _write_ops(events, complete, sink, checker)
    read_meta(trace, meta, checker, len(events), first_ts)
    _write_collectives(collective_rows(events, complete, Context(events, meta.process_groups, checker)), sink, checker)
    return meta


def _write_collectives(rows: list[CollectiveRow], sink: BatchSink, checker: Checker) -> None:
    buffer = CollectiveBuffer(sink)
    for row in rows:
        buffer.append(finished(row, checker, f"traceEvents[{row.op_id}]"))
    buffer.flush()


def _parse_pieces(stream: EventStream, sink: BatchSink, meta: TraceMeta, checker: Checker) -> TraceMeta:
    """A trace too long to decode whole (tracekit.parsers.kineto.stream): ops are written piece by
    piece, and only the events the collective logic reads are kept (launches as a few numbers)."""
    kept: dict[int, Event] = {}
    found = Candidates()
    launches = Launches()
    count, first_ts = 0, None
    for base, events in stream.pieces():
        complete = [i for i, e in enumerate(events) if e.ph == "X"]
        piece_first = _write_ops(events, complete, sink, checker, base)
        if piece_first is not None and (first_ts is None or piece_first < first_ts):
            first_ts = piece_first
        local = classify(events, complete)
        for name in ("kernels", "anchors", "annotations", "c10d_ops"):
            into = getattr(found, name)
            for i in getattr(local, name):
                kept[base + i] = detached(events[i])
                into.append(base + i)
        for i in local.launches:
            launches.add(base + i, events[i])
        count += len(events)
    assert stream.top is not None  # set once the pieces are read
    read_meta(stream.top, meta, checker, count, first_ts)
    found.launches = launches.keep(kept, found.kernels)
    _write_collectives(collective_rows(kept, [], Context(kept, meta.process_groups, checker), found), sink, checker)
    return meta


def collective_rows(
    events: Events, complete: list[int], ctx: Context, found: Candidates | None = None
) -> list[CollectiveRow]:
    """Each collective once, from the events (or, read in pieces, the `found` candidates among them)."""
    if found is None:
        assert isinstance(events, list)  # read whole
        found = classify(events, complete)
    bound_args(events, found, ctx.checker)
    units, loose_annotations = anchor_units(events, found)
    for i in loose_annotations:
        units[i] = Unit(i, "annotation", event_args(events[i]))
    c10d_spans = Spans(events, found.c10d_ops)
    consumed = consume_c10d_ops(events, found, units, c10d_spans)
    # A loose annotation is the work of a c10d op (gloo runs it on a worker thread): the row is
    # the c10d op's, timed by the annotation. Unpaired c10d ops and annotations stand alone.
    free = {i: event_args(events[i]) for i in found.c10d_ops if i not in consumed}
    paired = pair_annotations(events, free, {i: units[i].args for i in loose_annotations}, c10d_spans)
    for ann, op in paired.items():
        del units[ann]
        units[op] = Unit(op, "c10d", free[op])
        units[op].annotation = ann
    for i, args in free.items():
        if i not in units:
            units[i] = Unit(i, "c10d", args)
    kernels = assign_kernels(events, found, units)

    rows = [row for index in sorted(units) if (row := unit_row(ctx, units[index], kernels.args)) is not None]
    unclassified = 0
    for k in kernels.loose:
        row = kernel_row(ctx, k, kernels.args[k])
        if row is None:
            unclassified += 1
        else:
            rows.append(row)
    if unclassified:
        ctx.checker.meta.warn(
            f"{unclassified} NCCL SendRecv/Generic kernel(s) with no host collective op left out: "
            "the kernel name cannot tell send, recv and all-to-all apart",
            f"traceEvents[{next(k for k in kernels.loose)}]",
        )
    if kernels.before_window:
        count = len(kernels.before_window)
        ctx.checker.meta.warn(
            f"{count} NCCL kernel{'s' if count > 1 else ''} launched before the profiled window left out "
            "(the trace records launches, not theirs)",
            f"traceEvents[{kernels.before_window[0]}]",
        )
    rows.sort(key=lambda r: r.op_id or 0)
    return rows


def _write_ops(events: list[Event], complete: list[int], sink: Any, checker: Checker, base: int = 0) -> float | None:
    """The ops rows of the `complete` events (indices into `events`, in order; the first is event
    `base` of the trace); returns the least `ts` among them (None: none has one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tracekit.schema import arrow_schema

    schema = arrow_schema("ops")
    first: float | None = None
    for lo in range(0, len(complete), OPS_BATCH_ROWS):
        chunk = complete[lo : lo + OPS_BATCH_ROWS]
        n = len(chunk)
        # Indices in order: a run of consecutive ones (every event complete, the usual case) is a slice.
        evs = events[chunk[0] : chunk[-1] + 1] if chunk[-1] - chunk[0] == n - 1 else [events[i] for i in chunk]
        times = [e.ts for e in evs]
        starts = _finite(times, chunk, "ts", checker, base)
        start_us = pa.array(starts, pa.float64())
        # The least ts as read, before times that are no finite number become null (-inf: no start).
        low = pc.min(start_us).as_py() if starts is times else min((t for t in times if t is not None), default=None)
        if low is not None and (first is None or low < first):
            first = low
        given = {
            "op_id": pa.array(chunk, pa.int64()) if not base else pa.array([base + i for i in chunk], pa.int64()),
            "name": _names(evs, "name", chunk, checker, base),
            "type": _names(evs, "cat", chunk, checker, base),
            "start_us": start_us,
            "duration_us": pa.array(_finite([e.dur for e in evs], chunk, "dur", checker, base), pa.float64()),
        }
        arrays = [given[f.name] if f.name in given else pa.nulls(n, f.type) for f in schema]
        sink.write("ops", pa.RecordBatch.from_arrays(arrays, schema=schema))
    return first


def _names(evs: list[Event], field: str, chunk: list[int], checker: Checker, base: int) -> Any:
    """The events' names (or categories) as a column; those longer than MAX_TEXT_CHARS are cut in
    the events themselves, so that the collective logic reads them cut too (noted on the file)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pa.array([getattr(e, field) for e in evs], pa.string())
    longest = pc.max(pc.binary_length(column)).as_py()  # bytes: at least the characters
    if longest is None or longest <= MAX_TEXT_CHARS:
        return column
    for index, ev in zip(chunk, evs, strict=True):
        value = getattr(ev, field)
        if value is not None and len(value) > MAX_TEXT_CHARS:
            setattr(ev, field, checker.name(value, field, f"traceEvents[{base + index}]"))
    return pa.array([getattr(e, field) for e in evs], pa.string())


def _finite(
    values: list[float | None], chunk: list[int], field: str, checker: Checker, base: int = 0
) -> list[float | None]:
    """Times that are not finite (1e999 decodes to inf) become null, with a warning."""
    if math.isfinite(sum(filter(None, values))):
        return values  # the common case, in one C-level pass (a sum that overflows is checked below)
    out: list[float | None] = []
    for index, value in zip(chunk, values, strict=True):
        if value is not None and not math.isfinite(value):
            checker.note(field, "is not a finite number", value, f"traceEvents[{base + index}]")
            value = None
        out.append(value)
    return out
