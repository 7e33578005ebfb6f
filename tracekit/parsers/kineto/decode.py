"""Kineto decoding: the JSON document into typed events, and the trace's own metadata.

The whole document is decoded in one call into msgspec Structs (`Event`); only `ph`, `name`,
`cat`, `pid`, `tid`, `ts`, `dur` become Python objects, and `args` stays raw JSON decoded only for
the few events the collective logic needs. If a field has an unexpected type (a string `pid`, a
numeric `name`, a string `ts`) the typed decode fails and a tolerant path re-reads the document
untyped and coerces each event; a `ts`/`dur` that is no finite number is null, with a warning.
A document nested deeper than msgspec can follow is a TraceError (tracekit.parsers.common.limits).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import msgspec

from tracekit.parsers.base import TraceError, TraceMeta
from tracekit.parsers.common.groups import read_process_groups
from tracekit.parsers.common.limits import too_deep
from tracekit.parsers.common.values import INT64, MAX_TEXT_CHARS, RANK, SIZE, Checker, as_number


class Event(msgspec.Struct, gc=False):
    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    pid: int | float | str | None = None
    tid: int | float | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class Events(Protocol):
    """Events by their index in traceEvents: the list, or (a trace read in pieces) the kept ones."""

    def __getitem__(self, index: int, /) -> Event: ...


def detached(ev: Event) -> Event:
    """`ev` holding its own copy of its args (a Raw otherwise keeps its whole piece alive)."""
    return msgspec.structs.replace(ev, args=msgspec.Raw(bytes(ev.args)))


class Trace(msgspec.Struct):
    traceEvents: list[Event] | None = None  # noqa: N815 (the format's key)
    schemaVersion: int | float | str | None = None  # noqa: N815
    distributedInfo: msgspec.Raw = msgspec.Raw(b"")  # noqa: N815
    baseTimeNanoseconds: int | float | None = None  # noqa: N815


class _LaunchArgs(msgspec.Struct):
    correlation: int | None = None


_LAUNCH_DECODER = msgspec.json.Decoder(_LaunchArgs)
_TRACE_DECODER = msgspec.json.Decoder(Trace)
_ANY_DECODER = msgspec.json.Decoder()
_BYTE_AT = re.compile(r"\(byte (\d+)\)")


def decode(data: bytes | bytearray, checker: Checker) -> Trace:
    try:
        trace = _TRACE_DECODER.decode(data)
    except msgspec.ValidationError:
        try:
            trace = _decode_tolerant(data, checker)
        except RecursionError:
            raise too_deep() from None
    except msgspec.DecodeError as exc:
        raise _json_error(exc, data) from exc
    except RecursionError:
        raise too_deep() from None
    if trace.traceEvents is None:
        raise TraceError("no traceEvents list in the Kineto trace", "traceEvents")
    return trace


def _json_error(exc: msgspec.DecodeError, data: bytes | bytearray) -> TraceError:
    text = str(exc)
    match = _BYTE_AT.search(text)
    if match:
        where = f"byte offset {match.group(1)}"
    elif "truncated" in text:
        where = f"byte offset {len(data)}"
    else:
        where = None
    return TraceError(f"invalid JSON: {_BYTE_AT.sub('', text).strip()}", where)


def _decode_tolerant(data: bytes | bytearray, checker: Checker) -> Trace:
    """Untyped decode, then coerce field by field."""
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
    events = coerce_events(raw_events, checker)
    dist = doc.get("distributedInfo")
    base = doc.get("baseTimeNanoseconds")
    version = doc.get("schemaVersion")
    return Trace(
        traceEvents=events,
        schemaVersion=version if isinstance(version, int | float | str) and not isinstance(version, bool) else None,
        distributedInfo=msgspec.Raw(msgspec.json.encode(dist)) if isinstance(dist, dict) else msgspec.Raw(b""),
        baseTimeNanoseconds=as_number(base),
    )


def coerce_events(raw_events: list[Any], checker: Checker, first: int = 0) -> list[Event]:
    """Events of an untyped traceEvents list (its items numbered from `first`), coerced field by field."""
    events = []
    for i, ev in enumerate(raw_events, first):
        if not isinstance(ev, dict):
            raise TraceError(f"event {i} is a {type(ev).__name__}, not an object", f"traceEvents[{i}]")
        args = ev.get("args")
        events.append(
            Event(
                ph=_str_or_none(ev.get("ph")),
                name=_str_or_none(ev.get("name")),
                cat=_str_or_none(ev.get("cat")),
                pid=_id_value(ev.get("pid")),
                tid=_id_value(ev.get("tid")),
                ts=checker.time(ev.get("ts"), "ts", f"traceEvents[{i}]"),
                dur=checker.time(ev.get("dur"), "dur", f"traceEvents[{i}]"),
                args=msgspec.Raw(msgspec.json.encode(args)) if isinstance(args, dict) else msgspec.Raw(b""),
            )
        )
    return events


def _str_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode() if isinstance(value, list | dict) else str(value)


def _id_value(value: Any) -> int | float | str | None:
    if value is None or isinstance(value, int | float | str) and not isinstance(value, bool):
        return value
    return _str_or_none(value)


def event_args(ev: Event) -> dict[str, Any]:
    """An event's `args` object, decoded on demand ({} when there is none)."""
    raw = ev.args
    if not raw:
        return {}
    try:
        value = _ANY_DECODER.decode(raw)
    except msgspec.DecodeError:  # pragma: no cover - raw came out of a valid document
        return {}
    except RecursionError:  # decoded as part of the document, but from deeper in the stack
        raise too_deep() from None
    return value if isinstance(value, dict) else {}


def bound_args(events: Events, found: Any, checker: Checker) -> None:
    """Drop the args of the candidate events (`found`: tracekit.parsers.kineto.events.Candidates)
    that hold a string longer than MAX_TEXT_CHARS, noted on the file, before any rule reads them.
    Only args whose JSON text is longer can hold one: the others are not decoded here."""
    for index in (*found.kernels, *found.anchors, *found.annotations, *found.c10d_ops):
        ev = events[index]
        if len(ev.args) <= MAX_TEXT_CHARS:
            continue
        args = event_args(ev)
        where = f"traceEvents[{index}]"
        kept = {
            key: value for key, value in args.items() if checker.text(value, key, where) is not None or value is None
        }
        if len(kept) < len(args):
            ev.args = msgspec.Raw(msgspec.json.encode(kept))


def launch_correlation(ev: Event) -> int | None:
    """The `correlation` arg of a kernel launch (typed decode: launches are many)."""
    if not ev.args:
        return None
    try:
        return _LAUNCH_DECODER.decode(ev.args).correlation
    except msgspec.DecodeError:
        return None
    except RecursionError:
        raise too_deep() from None


def read_meta(trace: Trace, meta: TraceMeta, checker: Checker, count: int, first_ts: float | None) -> None:
    """Fill `meta` from the document (version, distributedInfo) and from what the caller read of its
    events: their `count` and the least `ts` of a complete one (`first_ts`: the start time)."""
    meta.node_count = count
    if trace.schemaVersion is not None:
        meta.schema_version = checker.text(str(trace.schemaVersion), "schemaVersion", "top-level object")
    dist: dict[str, Any] = {}
    if trace.distributedInfo:
        try:
            value = _ANY_DECODER.decode(trace.distributedInfo)
        except msgspec.DecodeError:  # pragma: no cover
            value = None
        except RecursionError:
            raise too_deep() from None
        dist = value if isinstance(value, dict) else {}
    meta.rank = checker.integer(dist.get("rank"), "rank", RANK, "distributedInfo")
    meta.world_size = checker.integer(dist.get("world_size"), "world_size", SIZE, "distributedInfo")
    meta.process_groups = read_process_groups(dist.get("pg_config"), checker, "distributedInfo.pg_config")
    base = checker.integer(trace.baseTimeNanoseconds, "baseTimeNanoseconds", INT64, "baseTimeNanoseconds")
    meta.started_at = _started_at(base, first_ts)
    meta.epoch_offset_us = base / 1000 if base is not None else None


def _started_at(base: int | None, first: float | None) -> datetime | None:
    """baseTimeNanoseconds (wall clock, ns, within int64) + the first complete event's ts (µs), UTC."""
    if base is None:
        return None
    if first is None or not math.isfinite(first):
        return None
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=base // 1000 + first)
    except (OverflowError, ValueError):
        return None  # beyond what datetime holds (year 1 to 9999)
