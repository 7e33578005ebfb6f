"""Kineto (PyTorch profiler) Chrome-trace JSON: every complete event, and each collective once.

Decoding: the whole document is decoded in one call into typed msgspec Structs (`_Event`); only
`ph`, `name`, `cat`, `pid`, `tid`, `ts`, `dur` become Python objects, and `args` stays raw JSON
(`msgspec.Raw`) that is decoded only for the few events the collective logic needs (NCCL kernels,
`record_param_comms`, `nccl:`/`gloo:` annotations, `c10d::` ops, kernel launches). If a field has
an unexpected type (a string `pid`, a numeric `name`, ...) the typed decode fails and a tolerant
path re-reads the document untyped and coerces each event, so odd files cost time, not
correctness. A `ts`/`dur` that is not a number is an error naming the event index.

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
sizes from `Input Dims`/`Input type` (`_allgather_base_`, `_reduce_scatter_base_`, `alltoall_base_`
list the output first; a TensorList has no dtype, the annotation's tensor gives it) and all-to-all
splits from `Concrete Inputs` ('[4, 2, 5, 3]'). start/duration come from the paired annotation (the
actual transfer), else from the op. An annotation belongs to the c10d op with the greatest
`Record function id` below its own not yet paired; without ids, to the c10d op enclosing it, else
first-in-first-out per kind (`_pair_annotations`). A `Record function id` of 0 (G4 writes 0 on every
event) is unknown: rf_id is null then, so joins on it cannot false-match.

Fallbacks, each taking only what the level above did not explain: `nccl:`/`gloo:` annotations
paired with no c10d op (source 'annotation'), then `c10d::` ops with neither an anchor nor an
annotation (source 'c10d', CPU time), then NCCL kernels matched to nothing (source 'kernel';
comm_type and dtype from the kernel name, marked inferred, unless the kernel carries G3+ comm args).
SendRecv and Generic kernels alone cannot be classified (send, recv and all-to-all all run as
SendRecv) and are skipped; the number skipped is logged at INFO level.

`started_at`: Kineto writes `ts` relative to `baseTimeNanoseconds`, a wall-clock epoch time
(system_clock, floored to a 3-month interval so that ns timestamps stay exact as doubles; see
libkineto output_json.h `ChromeTraceBaseTime` / `transToRelativeTime`). So the trace's first
complete event (ph "X"; metadata events may carry ts 0) happened at baseTimeNanoseconds + min(ts)
µs, UTC. Without that key the `ts` origin is unknown (older traces write absolute epoch µs, but
nothing in the file says so), and started_at is None.

Known gaps: 'B'/'E' duration pairs are not turned into ops (Kineto writes 'X'); kernels whose
launch is missing and whose External id matches no anchor are not matched by stream order; the
whole document is decoded at once (peak memory ~5x the JSON size), not streamed.
"""

from __future__ import annotations

import logging
import math
import re
from bisect import bisect_right
from collections import defaultdict, deque
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tracekit.comms import (
    backend_name,
    comm_type_of,
    is_nccl_kernel,
    is_uneven_name,
    normalize_dtype,
    parse_nccl_kernel,
    times,
)
from tracekit.parsers.base import ProcessGroup, Source, TableBuffer, TraceError, TraceMeta

FORMAT = "kineto"

log = logging.getLogger(__name__)

OPS_BATCH_ROWS = 65_536
# Float slack when testing that one span lies inside another (ts ~ 4e12 µs has ~1e-3 µs ulp).
_EPS = 0.01
# How many earlier spans on a thread to look at when searching for the innermost enclosing one.
_MAX_WALK = 64
_COMM_PREFIXES = ("nccl:", "gloo:", "mpi:", "ucc:")
_GPU_CATS = frozenset({"kernel", "gpu_user_annotation", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})


class _Event(msgspec.Struct, gc=False):
    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    pid: int | float | str | None = None
    tid: int | float | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # noqa: N815 (the format's key)
    schemaVersion: int | float | str | None = None  # noqa: N815
    distributedInfo: msgspec.Raw = msgspec.Raw(b"")  # noqa: N815
    baseTimeNanoseconds: int | float | None = None  # noqa: N815


class _LaunchArgs(msgspec.Struct):
    correlation: int | None = None


_LAUNCH_DECODER = msgspec.json.Decoder(_LaunchArgs)
_TRACE_DECODER = msgspec.json.Decoder(_Trace)
_ANY_DECODER = msgspec.json.Decoder()
_BYTE_AT = re.compile(r"\(byte (\d+)\)")


# --------------------------------------------------------------------------------------------
# Decoding


def _decode(data: bytes) -> _Trace:
    try:
        trace = _TRACE_DECODER.decode(data)
    except msgspec.ValidationError:
        trace = _decode_tolerant(data)
    except msgspec.DecodeError as exc:
        raise _json_error(exc, data) from exc
    if trace.traceEvents is None:
        raise TraceError("no traceEvents list in the Kineto trace", "traceEvents")
    return trace


def _json_error(exc: msgspec.DecodeError, data: bytes) -> TraceError:
    text = str(exc)
    match = _BYTE_AT.search(text)
    if match:
        where = f"byte offset {match.group(1)}"
    elif "truncated" in text:
        where = f"byte offset {len(data)}"
    else:
        where = None
    return TraceError(f"invalid JSON: {_BYTE_AT.sub('', text).strip()}", where)


def _decode_tolerant(data: bytes) -> _Trace:
    """Untyped decode, then coerce field by field; only non-numeric times are errors."""
    try:
        doc = _ANY_DECODER.decode(data)
    except msgspec.DecodeError as exc:  # pragma: no cover - the typed pass saw valid JSON
        raise _json_error(exc, data) from exc
    if not isinstance(doc, dict):
        raise TraceError(f"top level is a JSON {type(doc).__name__}, not an object", "byte offset 0")
    raw_events = doc.get("traceEvents")
    if raw_events is None:
        raise TraceError("no traceEvents list in the Kineto trace", "traceEvents")
    if not isinstance(raw_events, list):
        raise TraceError(f"traceEvents is a {type(raw_events).__name__}, not a list", "traceEvents")
    events = []
    for i, ev in enumerate(raw_events):
        if not isinstance(ev, dict):
            raise TraceError(f"event {i} is a {type(ev).__name__}, not an object", f"traceEvents[{i}]")
        args = ev.get("args")
        events.append(
            _Event(
                ph=_str_or_none(ev.get("ph")),
                name=_str_or_none(ev.get("name")),
                cat=_str_or_none(ev.get("cat")),
                pid=_id_value(ev.get("pid")),
                tid=_id_value(ev.get("tid")),
                ts=_time_value(ev, "ts", i),
                dur=_time_value(ev, "dur", i),
                args=msgspec.Raw(msgspec.json.encode(args)) if isinstance(args, dict) else msgspec.Raw(b""),
            )
        )
    dist = doc.get("distributedInfo")
    base = doc.get("baseTimeNanoseconds")
    version = doc.get("schemaVersion")
    return _Trace(
        traceEvents=events,
        schemaVersion=version if isinstance(version, (int, float, str)) and not isinstance(version, bool) else None,
        distributedInfo=msgspec.Raw(msgspec.json.encode(dist)) if isinstance(dist, dict) else msgspec.Raw(b""),
        baseTimeNanoseconds=base if isinstance(base, (int, float)) and not isinstance(base, bool) else None,
    )


def _str_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode() if isinstance(value, (list, dict)) else str(value)


def _id_value(value: Any) -> int | float | str | None:
    if value is None or isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return value
    return _str_or_none(value)


def _time_value(ev: dict[str, Any], key: str, index: int) -> float | None:
    value = ev.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(
            f"event {index}: '{key}' is a {type(value).__name__} ({value!r:.40}), expected a number",
            f"traceEvents[{index}]",
        )
    return float(value)


def _args(ev: _Event) -> dict[str, Any]:
    raw = ev.args
    if not raw:
        return {}
    try:
        value = _ANY_DECODER.decode(raw)
    except msgspec.DecodeError:  # pragma: no cover - raw came out of a valid document
        return {}
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------------------------
# Small value helpers


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _int_list(value: Any) -> list[int] | None:
    """A list of ints from a JSON list or a string like "[1, 2, 3]"; None when abbreviated ("...")
    or unreadable, so that a shortened list is never taken for the whole one."""
    if isinstance(value, list):
        items = value
    elif isinstance(value, str):
        text = value.strip()
        if "..." in text or "…" in text:
            return None
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        items = [p for p in (s.strip() for s in text.split(",")) if p]
    else:
        return None
    out = []
    for item in items:
        n = _int(item)
        if n is None:
            return None
        out.append(n)
    return out


def _thread(ev: _Event) -> tuple[str, str]:
    return (str(ev.pid), str(ev.tid))


def _end(ev: _Event) -> float | None:
    if ev.ts is None:
        return None
    return ev.ts + (ev.dur or 0.0)


class _Spans:
    """Spans per thread, for 'the innermost span on this thread that contains [ts, end]'."""

    def __init__(self) -> None:
        self._by_thread: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
        self._starts: dict[tuple[str, str], list[float]] = {}

    def add(self, thread: tuple[str, str], start: float, end: float, item: int) -> None:
        self._by_thread[thread].append((start, end, item))

    def freeze(self) -> _Spans:
        for thread, spans in self._by_thread.items():
            # Equal starts: the longer (outer) span first, so walking back meets the inner first.
            spans.sort(key=lambda s: (s[0], -s[1]))
            self._starts[thread] = [s[0] for s in spans]
        return self

    def innermost(self, thread: tuple[str, str], start: float, end: float) -> int | None:
        spans = self._by_thread.get(thread)
        if not spans:
            return None
        j = bisect_right(self._starts[thread], start) - 1
        stop = max(-1, j - _MAX_WALK)
        while j > stop:
            s_start, s_end, item = spans[j]
            if s_end + _EPS >= end and s_start <= start:
                return item
            j -= 1
        return None


# --------------------------------------------------------------------------------------------
# Metadata


def _meta(trace: _Trace) -> TraceMeta:
    events = trace.traceEvents or []
    meta = TraceMeta(format=FORMAT, node_count=len(events))
    if trace.schemaVersion is not None:
        meta.schema_version = str(trace.schemaVersion)
    dist: dict[str, Any] = {}
    if trace.distributedInfo:
        try:
            value = _ANY_DECODER.decode(trace.distributedInfo)
        except msgspec.DecodeError:  # pragma: no cover
            value = None
        dist = value if isinstance(value, dict) else {}
    meta.rank = _int(dist.get("rank"))
    meta.world_size = _int(dist.get("world_size"))
    meta.process_groups = _process_groups(dist.get("pg_config"))
    base = trace.baseTimeNanoseconds
    if isinstance(base, (int, float)) and not isinstance(base, bool):
        first = min((e.ts for e in events if e.ph == "X" and e.ts is not None), default=None)
        if first is not None and math.isfinite(first) and math.isfinite(base):
            try:
                epoch = datetime(1970, 1, 1, tzinfo=UTC)
                meta.started_at = epoch + timedelta(microseconds=int(base) // 1000 + first)
            except (OverflowError, ValueError):
                meta.started_at = None
    return meta


def _process_groups(config: Any) -> list[ProcessGroup]:
    if isinstance(config, dict):
        config = list(config.values())
    if not isinstance(config, list):
        return []
    groups = []
    for entry in config:
        if not isinstance(entry, dict) or entry.get("pg_name") is None:
            continue
        ranks = entry.get("ranks")
        if isinstance(ranks, dict):
            ranks = list(ranks.values())
        rank_list = _int_list(ranks) or []
        desc = entry.get("pg_desc")
        groups.append(
            ProcessGroup(
                pg_name=str(entry["pg_name"]),
                pg_desc=str(desc) if desc is not None else None,
                backend=backend_name(entry.get("backend_config")),
                group_size=_int(entry.get("pg_size", entry.get("group_size"))),
                ranks=rank_list,
            )
        )
    return groups


# --------------------------------------------------------------------------------------------
# ops


def _write_ops(events: list[_Event], complete: list[int], sink: Any) -> None:
    import pyarrow as pa

    from tracekit.schema import arrow_schema

    schema = arrow_schema("ops")
    for lo in range(0, len(complete), OPS_BATCH_ROWS):
        chunk = complete[lo : lo + OPS_BATCH_ROWS]
        evs = [events[i] for i in chunk]
        given = {
            "op_id": pa.array(chunk, pa.int64()),
            "name": pa.array([e.name for e in evs], pa.string()),
            "type": pa.array([e.cat for e in evs], pa.string()),
            "start_us": pa.array([e.ts for e in evs], pa.float64()),
            "duration_us": pa.array([e.dur for e in evs], pa.float64()),
        }
        n = len(chunk)
        arrays = [given[f.name] if f.name in given else pa.nulls(n, f.type) for f in schema]
        sink.write("ops", pa.RecordBatch.from_arrays(arrays, schema=schema))


# --------------------------------------------------------------------------------------------
# collectives


_KERNEL, _ANCHOR, _ANNOTATION, _C10D, _LAUNCH = 1, 2, 3, 4, 5


def _name_kind(name: str | None) -> int:
    """Which list an event of this name may go to (0: none); the category is checked after."""
    if not name:
        return 0
    if is_nccl_kernel(name):
        return _KERNEL
    if name == "record_param_comms":
        return _ANCHOR
    if name.startswith(_COMM_PREFIXES):
        return _ANNOTATION
    if name.startswith("c10d::"):
        return _C10D
    if "aunch" in name:
        return _LAUNCH
    return 0


class _Unit:
    """A CPU-side event that may stand for one collective, and the kernels it launched."""

    __slots__ = ("index", "source", "args", "annotation", "c10d", "kernels")

    def __init__(self, index: int, source: str, args: dict[str, Any]) -> None:
        self.index = index
        self.source = source
        self.args = args
        self.annotation: int | None = None
        self.c10d: int | None = None
        self.kernels: list[int] = []


def _collective_rows(events: list[_Event], complete: list[int], meta: TraceMeta) -> list[dict[str, Any]]:
    anchors: list[int] = []
    annotations: list[int] = []
    c10d_ops: list[int] = []
    kernels: list[int] = []
    launches: list[int] = []
    lists = (None, kernels, anchors, annotations, c10d_ops, launches)
    kind_of: dict[str | None, int] = {}  # names repeat: classify each distinct name once
    for i in complete:
        e = events[i]
        name = e.name
        kind = kind_of.get(name)
        if kind is None:
            kind = kind_of[name] = _name_kind(name)
        if not kind or e.ts is None:
            continue
        cat = e.cat
        if kind == _KERNEL:
            if cat != "kernel":
                continue
        elif kind == _LAUNCH:
            if cat not in _LAUNCH_CATS:
                continue
        elif cat in _GPU_CATS:
            continue  # gpu_user_annotation nccl:* mirrors the host annotation on the stream
        bucket = lists[kind]
        assert bucket is not None  # kind 0 was skipped above
        bucket.append(i)

    # Every index in these lists is of an event with a `ts` (checked above): the `ts or 0.0` below
    # never takes the 0.0, it only tells the type checker so.
    units: dict[int, _Unit] = {i: _Unit(i, "record_param_comms", _args(events[i])) for i in anchors}

    # Annotations inside an anchor describe it; the others stand alone.
    anchor_spans = _spans(events, anchors)
    loose_annotations = []
    for i in annotations:
        e = events[i]
        owner = anchor_spans.innermost(_thread(e), e.ts or 0.0, _end(e) or 0.0)
        if owner is None:
            loose_annotations.append(i)
        elif units[owner].annotation is None:
            units[owner].annotation = i
    if loose_annotations and anchors:
        # An annotation that encloses an anchor (the other nesting order) describes it too.
        outer = _spans(events, loose_annotations)
        enclosing = set()
        for i in anchors:
            e = events[i]
            ann = outer.innermost(_thread(e), e.ts or 0.0, _end(e) or 0.0)
            if ann is not None:
                enclosing.add(ann)
                if units[i].annotation is None:
                    units[i].annotation = ann
        loose_annotations = [i for i in loose_annotations if i not in enclosing]
    for i in loose_annotations:
        units[i] = _Unit(i, "annotation", _args(events[i]))

    # c10d ops enclosing an anchor are consumed by it (the anchor is the row).
    c10d_spans = _spans(events, c10d_ops)
    consumed = set()
    for i in anchors:
        e = events[i]
        op = c10d_spans.innermost(_thread(e), e.ts or 0.0, _end(e) or 0.0)
        if op is not None:
            consumed.add(op)
            if units[i].c10d is None:
                units[i].c10d = op
    # A loose annotation is the work of a c10d op (gloo runs it on a worker thread): the row is
    # the c10d op's, timed by the annotation. Unpaired c10d ops and annotations stand alone.
    free = [i for i in c10d_ops if i not in consumed and comm_type_of(events[i].name) is not None]
    c10d_args = {i: _args(events[i]) for i in free}
    paired = _pair_annotations(events, free, c10d_args, loose_annotations, units, c10d_spans)
    for ann, op in paired.items():
        del units[ann]
        units[op] = _Unit(op, "c10d", c10d_args[op])
        units[op].annotation = ann
    for i in free:
        if i not in units:
            units[i] = _Unit(i, "c10d", c10d_args[i])

    # Kernels: by their launch (correlation) inside a unit's span, else by External id.
    kernel_args = {k: _args(events[k]) for k in kernels}
    by_correlation = {}
    for k, a in kernel_args.items():
        corr = _int(a.get("correlation"))
        if corr is not None:
            by_correlation[corr] = k
    launch_of: dict[int, int] = {}
    if by_correlation:
        for i in launches:
            raw = events[i].args
            if not raw:
                continue
            try:
                corr = _LAUNCH_DECODER.decode(raw).correlation
            except msgspec.DecodeError:
                continue
            if corr in by_correlation:
                launch_of[by_correlation[corr]] = i
    unit_spans = _spans(events, list(units))
    by_external: dict[int, int] = {}
    for i in anchors:
        ext = _int(units[i].args.get("External id"))
        if ext is not None:
            by_external.setdefault(ext, i)
    loose_kernels = []
    for k in kernels:
        owner = None
        launch = launch_of.get(k)
        if launch is not None:
            le = events[launch]
            owner = unit_spans.innermost(_thread(le), le.ts or 0.0, le.ts or 0.0)
        if owner is None and (launch is None or "Collective name" in kernel_args[k]):
            # G1 kernels carry the correlation number as External id: only trust the External
            # id when no launch says otherwise, or when the kernel has G3+ comm args.
            ext = _int(kernel_args[k].get("External id"))
            owner = by_external.get(ext) if ext is not None else None
            if owner is not None and (events[k].ts or 0.0) < (events[owner].ts or 0.0):
                owner = None  # a kernel cannot run before the host op that launched it
        if owner is None:
            loose_kernels.append(k)
        else:
            units[owner].kernels.append(k)

    rows = []
    for index in sorted(units):
        row = _unit_row(events, units[index], kernel_args, meta)
        if row is not None:
            rows.append(row)
    skipped = 0
    for k in loose_kernels:
        row = _kernel_row(events, k, kernel_args[k], meta)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    if skipped:
        log.info("kineto: %d NCCL SendRecv/Generic kernels with no host op left unclassified", skipped)
    rows.sort(key=lambda r: r["op_id"])
    for row in rows:
        _clamp(row)
    return rows


_INT32 = ("group_size", "peer")
_INT64 = ("in_elems", "out_elems", "in_bytes", "out_bytes", "seq", "rf_id")


def _clamp(row: dict[str, Any]) -> None:
    """Integers the Arrow columns cannot hold become null (a hostile or corrupt file, not a crash)."""
    for key in _INT32:
        v = row.get(key)
        if v is not None and not -(2**31) <= v < 2**31:
            row[key] = None
    for key in _INT64:
        v = row.get(key)
        if v is not None and not -(2**63) <= v < 2**63:
            row[key] = None
    for key in ("in_splits", "out_splits"):
        v = row.get(key)
        if v is not None and not all(-(2**63) <= n < 2**63 for n in v):
            row[key] = None


def _rf_id(args: dict[str, Any]) -> int | None:
    """`Record function id`; 0 (what G4 traces write on every event) and below are unknown, so that
    rf_id joins cannot false-match."""
    value = _int(args.get("Record function id"))
    return value if value is not None and value > 0 else None


def _pair_annotations(
    events: list[_Event],
    free: list[int],
    c10d_args: dict[int, dict[str, Any]],
    loose: list[int],
    units: dict[int, _Unit],
    c10d_spans: _Spans,
) -> dict[int, int]:
    """Pair each loose annotation with the c10d op whose work it is: {annotation: c10d op}.

    1. Record function ids: an annotation belongs to the c10d op (same process) with the greatest
       rf id below its own that is not yet paired (annotations taken in rf id order). The kind is
       not compared: gloo runs `_reduce_scatter_base_` as `gloo:all_reduce`.
    2. Annotations without usable ids: the c10d op enclosing the annotation on its thread.
    3. Then first-in-first-out per process and kind: gloo's worker-thread annotation starts after
       the c10d op on the calling thread (often after it returned), so neither encloses the other;
       each goes with the earliest unpaired c10d op of its kind that started before it.
    The annotation's start must not precede the op's."""
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    free_set = set(free)
    by_pid: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i in free:
        rf = _rf_id(c10d_args[i])
        if rf is not None:
            by_pid[str(events[i].pid)].append((rf, i))
    for pid_ops in by_pid.values():
        pid_ops.sort()
    with_ids = set(by_pid)  # processes whose c10d ops carry ids
    keys = {pid: [rf for rf, _ in pid_ops] for pid, pid_ops in by_pid.items()}
    rf_of = {a: _rf_id(units[a].args) for a in loose}
    by_rf = sorted((rf, a) for a, rf in rf_of.items() if rf is not None)
    for rf, a in by_rf:
        pid = str(events[a].pid)
        if pid not in with_ids:
            continue
        candidates = by_pid[pid]
        j = bisect_right(keys[pid], rf - 1) - 1
        if j >= 0 and (events[candidates[j][1]].ts or 0.0) <= (events[a].ts or 0.0) + _EPS:
            pairs[a] = candidates[j][1]
            taken.add(candidates[j][1])
            del candidates[j], keys[pid][j]
    # Rules 2 and 3 only where ids are missing; with ids, an unpaired annotation stands alone.
    rest = [a for a in loose if a not in pairs and (rf_of[a] is None or str(events[a].pid) not in with_ids)]
    later = []
    for a in rest:
        e = events[a]
        encloser = c10d_spans.innermost(_thread(e), e.ts or 0.0, _end(e) or 0.0)
        if encloser is not None and encloser in free_set and encloser not in taken:
            pairs[a] = encloser
            taken.add(encloser)
        else:
            later.append(a)
    waiting: dict[tuple[str, str], deque[int]] = defaultdict(deque)
    for i in sorted((i for i in free if i not in taken), key=lambda i: events[i].ts or 0.0):
        waiting[(str(events[i].pid), comm_type_of(events[i].name) or "")].append(i)
    for a in sorted(later, key=lambda a: events[a].ts or 0.0):
        kind = comm_type_of(events[a].name)
        queue = waiting.get((str(events[a].pid), kind)) if kind is not None else None
        if queue and (events[queue[0]].ts or 0.0) <= (events[a].ts or 0.0):
            op = queue.popleft()
            pairs[a] = op
            taken.add(op)
    return pairs


def _spans(events: list[_Event], indices: list[int]) -> _Spans:
    spans = _Spans()
    for i in indices:
        e = events[i]
        spans.add(_thread(e), e.ts or 0.0, _end(e) or 0.0, i)
    return spans.freeze()


def _unit_row(
    events: list[_Event], unit: _Unit, kernel_args: dict[int, dict[str, Any]], meta: TraceMeta
) -> dict[str, Any] | None:
    ev = events[unit.index]
    if unit.source == "c10d":
        return _c10d_row(events, unit, meta)
    inferred: list[str] = []
    comm_args = unit.args if "Collective name" in unit.args else {}
    if not comm_args:
        for k in unit.kernels:
            if "Collective name" in kernel_args[k]:
                comm_args = kernel_args[k]
                break
    # The kind: Collective name, else the nested annotation, the enclosing c10d op, the own name
    # (annotation / c10d units), and last the kernel name.
    op_name = None
    comm_type = None
    if comm_args:
        op_name = str(comm_args["Collective name"])
        comm_type = comm_type_of(op_name)
        if comm_type is None:
            return None  # wait, coalesced, barrier-less bookkeeping
    else:
        candidates = [unit.annotation, unit.c10d] if unit.source == "record_param_comms" else [unit.index]
        for idx in candidates:
            if idx is not None:
                comm_type = comm_type_of(events[idx].name)
                if comm_type is not None:
                    op_name = events[idx].name
                    break
        if comm_type is None:
            for k in unit.kernels:
                comm_type, _ = parse_nccl_kernel(events[k].name or "")
                if comm_type is not None:
                    op_name = events[k].name
                    inferred.append("comm_type")
                    break
        if comm_type is None:
            return None  # a wait: names no collective anywhere
    row = _fields(comm_type, op_name, comm_args, meta, inferred)
    if not comm_args:
        # G1: sizes only from the tensor shapes recorded with record_shapes.
        for idx in (unit.index, unit.annotation):
            if idx is None:
                continue
            elems, dtype = _dims_type(events[idx], unit.args if idx == unit.index else None)
            if elems is not None:
                row["in_elems"], row["dtype"] = elems, dtype
                row["in_bytes"] = times(elems, dtype)
                inferred += ["dtype", "in_elems", "in_bytes"]
                break
    row["op_id"] = unit.index
    row["source"] = unit.source
    row["rf_id"] = _rf_id(unit.args)
    _timing(row, ev, [events[k] for k in unit.kernels])
    row["inferred"] = inferred
    return row


# c10d ops that take (output, input, ...): Kineto `Input Dims[0]` is the output.
_OUTPUT_FIRST = frozenset({"_allgather_base_", "_reduce_scatter_base_", "alltoall_base_"})
# c10d ops whose one tensor (list) is both what the rank passes in and what it gets back (recv_:
# the message is the input by Chakra's convention and the output it receives); send has no output.
_IN_PLACE = frozenset({"allreduce_", "broadcast_", "recv_", "reduce_"})
# Where the peer (group-local rank) sits among the arguments of send / recv_.
_PEER_ARG = 2


def _c10d_row(events: list[_Event], unit: _Unit, meta: TraceMeta) -> dict[str, Any] | None:
    """A collective from its c10d dispatcher op (backends without record_param_comms, e.g. gloo):
    kind and name from the op, sizes from its `Input Dims` / `Input type` / `Concrete Inputs`,
    time from the paired work annotation (the actual transfer) or kernels, else from the op."""
    ev = events[unit.index]
    name = ev.name or ""
    comm_type = comm_type_of(name)
    if comm_type is None:
        return None
    short = name[len("c10d::") :] if name.startswith("c10d::") else name
    a = unit.args
    ann_args = _args(events[unit.annotation]) if unit.annotation is not None else {}
    inferred: list[str] = []
    row = _fields(comm_type, short, {}, meta, inferred)
    dims, types = a.get("Input Dims"), a.get("Input type")
    concrete = a.get("Concrete Inputs")
    dims = dims if isinstance(dims, list) else []
    types = types if isinstance(types, list) else []
    concrete = concrete if isinstance(concrete, list) else []
    if short in _OUTPUT_FIRST:
        out_elems, out_dtype = _tensor_arg(dims, types, 0)
        in_elems, in_dtype = _tensor_arg(dims, types, 1)
    else:
        in_elems, in_dtype = _tensor_arg(dims, types, 0)
        out_elems, out_dtype = (in_elems, in_dtype) if short in _IN_PLACE else (None, None)
    ann_elems, ann_dtype = (
        _dims_type(events[unit.annotation], ann_args) if unit.annotation is not None and ann_args else (None, None)
    )
    if in_elems is None and ann_elems is not None:
        in_elems = ann_elems  # the work annotation's tensor is the rank's input
        if short in _IN_PLACE:
            out_elems = ann_elems
    # A TensorList argument carries no dtype: the work annotation's tensor does.
    dtype = in_dtype or out_dtype or ann_dtype
    row["dtype"] = dtype
    row["in_elems"], row["out_elems"] = in_elems, out_elems
    row["in_bytes"], row["out_bytes"] = times(in_elems, dtype), times(out_elems, dtype)
    if comm_type == "ALL_TO_ALL":
        if short == "alltoall_base_" and len(concrete) > 4:
            out_splits, in_splits = _split_arg(concrete[3]), _split_arg(concrete[4])
            if out_splits is not None and in_splits is not None:
                row["out_splits"], row["in_splits"] = out_splits or None, in_splits or None
                row["is_uneven"] = any(len(set(s)) > 1 for s in (in_splits, out_splits))
            else:
                row["is_uneven"] = None
        else:
            row["is_uneven"] = None
    groups = meta.process_groups
    if len(groups) == 1:
        # The rank belongs to one group only (pg_config lists every group the rank is in).
        row["pg_name"] = groups[0].pg_name
        inferred.append("pg_name")
        if groups[0].group_size is not None:
            row["group_size"] = groups[0].group_size
            inferred.append("group_size")
    if comm_type in ("SEND", "RECV") and len(concrete) > _PEER_ARG:
        row["peer"] = _peer(_int(concrete[_PEER_ARG]), groups, inferred)
    row["op_id"] = unit.index
    row["source"] = "c10d"
    row["rf_id"] = _rf_id(a)
    kernels = [events[k] for k in unit.kernels]
    _timing(row, events[unit.annotation] if unit.annotation is not None else ev, kernels)
    row["inferred"] = inferred
    return row


def _tensor_arg(dims: list[Any], types: list[Any], index: int) -> tuple[int | None, str | None]:
    """Elements and dtype of the tensor (or TensorList: summed, no dtype) argument at `index`."""
    if index >= len(dims) or index >= len(types) or not isinstance(dims[index], list):
        return None, None
    shape, kind = dims[index], types[index]
    if kind == "TensorList" or (shape and all(isinstance(d, list) for d in shape)):
        if not shape or not all(isinstance(d, list) for d in shape):
            return None, None
        total = 0
        for d in shape:
            n = _elems(d)
            if n is None:
                return None, None
            total += n
        return total, None
    dtype = normalize_dtype(kind) if isinstance(kind, str) else None
    if dtype is None:
        return None, None
    return _elems(shape), dtype


def _elems(shape: list[Any]) -> int | None:
    n = 1
    for d in shape:
        v = _int(d)
        if v is None or v < 0:
            return None
        n *= v
    return n


def _split_arg(value: Any) -> list[int] | None:
    """A split-size list from `Concrete Inputs` ('[4, 2, 5, 3]', '[]'); None when not recorded."""
    if not isinstance(value, str) or not value.strip().startswith("["):
        return None
    return _int_list(value)


def _peer(local: int | None, groups: list[ProcessGroup], inferred: list[str]) -> int | None:
    """Global rank of a send/recv peer given as a group-local rank. The op does not name its group:
    when every group of this rank maps `local` to the same global rank, that is it; otherwise (or
    with no group information) the default group is assumed, where local == global, and the value
    is marked inferred."""
    if local is None or local < 0:
        return None
    readings = set()
    for g in groups:
        size = len(g.ranks) if g.ranks else g.group_size
        if size is not None and local >= size:
            continue
        readings.add(g.ranks[local] if g.ranks else local)
    if len(readings) == 1:
        return readings.pop()
    default = next((g for g in groups if g.pg_name == "0"), None)
    inferred.append("peer")
    if default is not None and default.ranks and local < len(default.ranks):
        return default.ranks[local]
    return local


def _kernel_row(events: list[_Event], k: int, args: dict[str, Any], meta: TraceMeta) -> dict[str, Any] | None:
    ev = events[k]
    inferred: list[str] = []
    if "Collective name" in args:
        op_name = str(args["Collective name"])
        comm_type = comm_type_of(op_name)
        if comm_type is None:
            return None
        row = _fields(comm_type, op_name, args, meta, inferred)
    else:
        comm_type, dtype = parse_nccl_kernel(ev.name or "")
        if comm_type is None:
            return None  # SendRecv / Generic: send, recv or all-to-all, the name cannot tell
        row = _fields(comm_type, ev.name, {}, meta, inferred)
        inferred.append("comm_type")
        if dtype is not None:
            row["dtype"] = dtype
            inferred.append("dtype")
    row["op_id"] = k
    row["source"] = "kernel"
    _timing(row, ev, [ev])
    row["inferred"] = inferred
    return row


def _fields(
    comm_type: str, op_name: str | None, a: dict[str, Any], meta: TraceMeta, inferred: list[str]
) -> dict[str, Any]:
    dtype = normalize_dtype(a.get("dtype")) if isinstance(a.get("dtype"), str) else None
    in_elems = _int(a.get("In msg nelems"))
    out_elems = _int(a.get("Out msg nelems"))
    in_splits = _int_list(a.get("In split size")) or None
    out_splits = _int_list(a.get("Out split size")) or None
    pg_name = a.get("Process Group Name")
    if pg_name is None and a.get("Process Group ID") is not None:
        pg_name = a.get("Process Group ID")
    pg_name = str(pg_name) if pg_name is not None else None
    group = next((g for g in meta.process_groups if g.pg_name == pg_name), None) if pg_name else None
    group_size = _int(a.get("Group size"))
    if group_size is None and group is not None and group.group_size is not None:
        group_size = group.group_size
        inferred.append("group_size")
    if is_uneven_name(op_name):
        is_uneven: bool | None = True
    elif in_splits or out_splits:
        is_uneven = any(s is not None and len(set(s)) > 1 for s in (in_splits, out_splits))
    elif a:
        is_uneven = False
    else:
        # No comm args (G1, kernel names): an all-to-all may or may not have been a v-variant.
        is_uneven = None if comm_type == "ALL_TO_ALL" else False
    peer = None
    if comm_type in ("SEND", "RECV"):
        peer = _int(a.get("Dst Rank" if comm_type == "SEND" else "Src Rank"))
        if peer is None:
            peer = _int(a.get("Src Rank" if comm_type == "SEND" else "Dst Rank"))
        if peer is None:
            local = _int(a.get("Rank"))
            if local is not None:
                ranks = group.ranks if group is not None else None
                if group is not None and not ranks:
                    peer = local  # an empty rank list is the whole world: local == global
                else:
                    if not ranks:
                        ranks = _int_list(a.get("Process Group Ranks"))
                    if ranks and 0 <= local < len(ranks):
                        peer = ranks[local]
                if peer is not None:
                    inferred.append("peer")
    return {
        "op_name": op_name,
        "comm_type": comm_type,
        "is_uneven": is_uneven,
        "pg_name": pg_name,
        "group_size": group_size,
        "peer": peer,
        "dtype": dtype,
        "in_elems": in_elems,
        "out_elems": out_elems,
        "in_bytes": times(in_elems, dtype),
        "out_bytes": times(out_elems, dtype),
        "in_splits": in_splits,
        "out_splits": out_splits,
        "seq": _int(a.get("Seq")),
    }


def _dims_type(ev: _Event, args: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """Elements and dtype of the first tensor input (`Input Dims` / `Input type`), if any."""
    a = args if args is not None else _args(ev)
    dims, types = a.get("Input Dims"), a.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return None, None
    first, dtype = dims[0], normalize_dtype(types[0]) if isinstance(types[0], str) else None
    if dtype is None or not isinstance(first, list) or not first:
        return None, None
    elems = 1
    for d in first:
        n = _int(d)
        if n is None or n < 0:
            return None, None
        elems *= n
    return elems, dtype


def _timing(row: dict[str, Any], cpu: _Event, kernels: list[_Event]) -> None:
    timed = [k for k in kernels if k.ts is not None]
    if len(timed) == 1:
        row["start_us"], row["duration_us"] = timed[0].ts, timed[0].dur
    elif timed:
        # Several kernels (coalesced work): first start to last end, at Kineto's ns resolution
        # (the subtraction of two ~1e12 µs doubles would otherwise show rounding noise).
        start = min(k.ts or 0.0 for k in timed)
        end = max((k.ts or 0.0) + (k.dur or 0.0) for k in timed)
        row["start_us"], row["duration_us"] = start, round(end - start, 3)
    else:
        row["start_us"], row["duration_us"] = cpu.ts, cpu.dur


# --------------------------------------------------------------------------------------------


def parse(source: Source, sink: Any) -> TraceMeta:
    """Read one Kineto trace: ops (every complete event) and collectives (each one once)."""
    data = source.read()
    trace = _decode(data)
    del data
    events = trace.traceEvents or []
    meta = _meta(trace)
    complete = [i for i, e in enumerate(events) if e.ph == "X"]
    _write_ops(events, complete, sink)
    buffer = TableBuffer("collectives", sink)
    for row in _collective_rows(events, complete, meta):
        buffer.append(row)
    buffer.flush()
    return meta
