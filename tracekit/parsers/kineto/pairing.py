"""Kineto pairing: c10d dispatcher ops and the backend work annotations that ran for them.

The rules are the rulebook's (tracekit.parsers.common.pairing); here a pair shares the process
(gloo runs the work on a `pt_gloo_runloop` worker thread of the same pid), "before" is by `ts`, a
work is enclosed by the innermost c10d op around it on its own thread, and `Record function id`
0 (what G4 traces write on every event) is no id.
"""

from __future__ import annotations

from typing import Any

from tracekit.parsers.common.names import comm_type_of
from tracekit.parsers.common.pairing import Call, pair_works
from tracekit.parsers.common.values import as_int
from tracekit.parsers.kineto.args import RF_ID
from tracekit.parsers.kineto.decode import Events
from tracekit.parsers.kineto.events import EPS, Spans, start


def rf_id(args: dict[str, Any]) -> int | None:
    """`Record function id`; 0 and below are unknown, so that rf_id joins cannot false-match."""
    value = as_int(args.get(RF_ID))
    return value if value is not None and value > 0 else None


def _call(events: Events, index: int, comm_type: str, args: dict[str, Any]) -> Call:
    ev = events[index]
    return Call(index, comm_type, str(ev.pid), rf_id(args), start(ev), start(ev))


def pair_annotations(
    events: Events,
    ops: dict[int, dict[str, Any]],
    annotations: dict[int, dict[str, Any]],
    c10d_spans: Spans,
) -> dict[int, int]:
    """{annotation index: c10d op index}; `ops` and `annotations` map event index -> args."""
    op_calls = []
    for i, args in ops.items():
        comm_type = comm_type_of(events[i].name)
        if comm_type is not None:
            op_calls.append(_call(events, i, comm_type, args))
    work_calls = []
    enclosing: dict[int, list[int]] = {}
    for i, args in annotations.items():
        comm_type = comm_type_of(events[i].name)
        if comm_type is None:
            continue
        work_calls.append(_call(events, i, comm_type, args))
        around = c10d_spans.innermost(events[i])
        if around is not None:
            enclosing[i] = [around]
    return pair_works(op_calls, work_calls, enclosing, slack=EPS)
