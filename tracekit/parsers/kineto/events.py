"""Kineto events: which events may be collectives, and which host event each device kernel belongs to.

A unit is a host (CPU) event that may stand for one collective: a `record_param_comms` anchor, a
backend annotation, or a `c10d::` op, with the annotation and c10d op around it and the NCCL kernels
it launched. Kernels are owned by the launch whose `correlation` they share, when the launch lies
inside a unit's span on its thread; else by `External id` (G3+: kernel and anchor share it). A
kernel owned by nothing is loose (see `Kernels` and the package docstring for what becomes of it).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tracekit.parsers.common.names import C10D_PREFIX, RECORD_PARAM_COMMS, is_backend_annotation, is_nccl_kernel
from tracekit.parsers.common.values import as_int
from tracekit.parsers.kineto.args import COLLECTIVE_NAME, CORRELATION, EXTERNAL_ID
from tracekit.parsers.kineto.decode import Event, Events, event_args, launch_correlation

# Float slack when testing that one span lies inside another (ts ~ 4e12 µs has ~1e-3 µs ulp).
EPS = 0.01
# How many earlier spans on a thread to look at when searching for the innermost enclosing one.
_MAX_WALK = 64
_GPU_CATS = frozenset({"kernel", "gpu_user_annotation", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})

KERNEL, ANCHOR, ANNOTATION, C10D, LAUNCH = 1, 2, 3, 4, 5


def name_kind(name: str | None) -> int:
    """Which list an event of this name may go to (0: none); the category is checked after."""
    if not name:
        return 0
    if is_nccl_kernel(name):
        return KERNEL
    if name == RECORD_PARAM_COMMS:
        return ANCHOR
    if is_backend_annotation(name):
        return ANNOTATION
    if name.startswith(C10D_PREFIX):
        return C10D
    if "aunch" in name:
        return LAUNCH
    return 0


@dataclass
class Candidates:
    """Indices of the complete events that may take part in a collective, by kind."""

    anchors: list[int] = field(default_factory=list)
    annotations: list[int] = field(default_factory=list)
    c10d_ops: list[int] = field(default_factory=list)
    kernels: list[int] = field(default_factory=list)
    launches: list[int] = field(default_factory=list)


def classify(events: list[Event], complete: list[int]) -> Candidates:
    found = Candidates()
    lists = (None, found.kernels, found.anchors, found.annotations, found.c10d_ops, found.launches)
    kind_of: dict[str | None, int] = {}  # names repeat: classify each distinct name once
    for i in complete:
        e = events[i]
        name = e.name
        kind = kind_of.get(name)
        if kind is None:
            kind = kind_of[name] = name_kind(name)
        if not kind or e.ts is None:
            continue
        cat = e.cat
        if kind == KERNEL:
            if cat != "kernel":
                continue
        elif kind == LAUNCH:
            if cat not in _LAUNCH_CATS:
                continue
        elif cat in _GPU_CATS:
            continue  # gpu_user_annotation nccl:* mirrors the host annotation on the stream
        bucket = lists[kind]
        assert bucket is not None  # kind 0 was skipped above
        bucket.append(i)
    return found


def thread(ev: Event) -> tuple[str, str]:
    return (str(ev.pid), str(ev.tid))


def start(ev: Event) -> float:
    """`ts` of an event known to have one (candidates all do)."""
    return ev.ts or 0.0


def end(ev: Event) -> float:
    return (ev.ts or 0.0) + (ev.dur or 0.0)


class Spans:
    """Spans per thread, for 'the innermost span on this thread that contains [start, end]'."""

    def __init__(self, events: Events, indices: list[int]) -> None:
        by_thread: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
        for i in indices:
            e = events[i]
            by_thread[thread(e)].append((start(e), end(e), i))
        for spans in by_thread.values():
            # Equal starts: the longer (outer) span first, so walking back meets the inner first.
            spans.sort(key=lambda s: (s[0], -s[1]))
        self._by_thread = by_thread
        self._starts = {t: [s[0] for s in spans] for t, spans in by_thread.items()}

    def innermost(self, ev: Event, point: bool = False) -> int | None:
        """The innermost span on `ev`'s thread around `ev` (around its start, if `point`)."""
        spans = self._by_thread.get(thread(ev))
        if not spans:
            return None
        first, last = start(ev), start(ev) if point else end(ev)
        j = bisect_right(self._starts[thread(ev)], first) - 1
        stop = max(-1, j - _MAX_WALK)
        while j > stop:
            s_start, s_end, item = spans[j]
            if s_end + EPS >= last and s_start <= first:
                return item
            j -= 1
        return None


class Unit:
    """A host event that may stand for one collective, and the kernels it launched."""

    __slots__ = ("index", "source", "args", "annotation", "c10d", "kernels")

    def __init__(self, index: int, source: str, args: dict[str, Any]) -> None:
        self.index = index
        self.source = source
        self.args = args
        self.annotation: int | None = None
        self.c10d: int | None = None
        self.kernels: list[int] = []


def anchor_units(events: Events, found: Candidates) -> tuple[dict[int, Unit], list[int]]:
    """Units of the anchors, with the annotation inside (or around) each; the loose annotations."""
    units = {i: Unit(i, RECORD_PARAM_COMMS, event_args(events[i])) for i in found.anchors}
    anchor_spans = Spans(events, found.anchors)
    loose = []
    for i in found.annotations:
        owner = anchor_spans.innermost(events[i])
        if owner is None:
            loose.append(i)
        elif units[owner].annotation is None:
            units[owner].annotation = i
    if loose and found.anchors:
        # An annotation that encloses an anchor (the other nesting order) describes it too.
        enclosing = _around_anchors(events, found, units, Spans(events, loose), "annotation")
        loose = [i for i in loose if i not in enclosing]
    return units, loose


def consume_c10d_ops(events: Events, found: Candidates, units: dict[int, Unit], c10d_spans: Spans) -> set[int]:
    """c10d ops enclosing an anchor are consumed by it (the anchor is the row)."""
    return _around_anchors(events, found, units, c10d_spans, "c10d")


def _around_anchors(events: Events, found: Candidates, units: dict[int, Unit], spans: Spans, slot: str) -> set[int]:
    """The events of `spans` around an anchor; the innermost one becomes the anchor unit's `slot`."""
    around = set()
    for i in found.anchors:
        outer = spans.innermost(events[i])
        if outer is not None:
            around.add(outer)
            if getattr(units[i], slot) is None:
                setattr(units[i], slot, outer)
    return around


@dataclass
class Kernels:
    """NCCL kernels owned by no unit: `loose` ones (launched from a host event in the trace that is
    no collective unit, or from a trace that records no launches) and `before_window` ones (their
    launch is missing from a trace that records launches: it happened before the profiled window)."""

    args: dict[int, dict[str, Any]]
    loose: list[int] = field(default_factory=list)
    before_window: list[int] = field(default_factory=list)


def assign_kernels(events: Events, found: Candidates, units: dict[int, Unit]) -> Kernels:
    """Give each kernel to the unit that launched it; return the ones no unit owns."""
    result = Kernels({k: event_args(events[k]) for k in found.kernels})
    by_correlation = {}
    for k, a in result.args.items():
        corr = as_int(a.get(CORRELATION))
        if corr is not None:
            by_correlation[corr] = k
    launch_of: dict[int, int] = {}
    recorded: set[int] = set()  # correlation numbers of the launches in the trace
    if by_correlation:
        for i in found.launches:
            corr = launch_correlation(events[i])
            if corr is None:
                continue
            recorded.add(corr)
            if corr in by_correlation:
                launch_of[by_correlation[corr]] = i
    unit_spans = Spans(events, list(units))
    by_external: dict[int, int] = {}
    for i in found.anchors:
        ext = as_int(units[i].args.get(EXTERNAL_ID))
        if ext is not None:
            by_external.setdefault(ext, i)
    for k in found.kernels:
        owner = None
        launch = launch_of.get(k)
        if launch is not None:
            owner = unit_spans.innermost(events[launch], point=True)
        if owner is None and (launch is None or COLLECTIVE_NAME in result.args[k]):
            # G1 kernels carry the correlation number as External id: only trust the External
            # id when no launch says otherwise, or when the kernel has G3+ comm args.
            ext = as_int(result.args[k].get(EXTERNAL_ID))
            owner = by_external.get(ext) if ext is not None else None
            if owner is not None and start(events[k]) < start(events[owner]):
                owner = None  # a kernel cannot run before the host op that launched it
        if owner is not None:
            units[owner].kernels.append(k)
        elif launch is None and recorded and as_int(result.args[k].get(CORRELATION)) is not None:
            result.before_window.append(k)
        else:
            result.loose.append(k)
    return result


class Launches:
    """Kernel launches of a trace read in pieces, as numbers: index, correlation, start, duration and
    thread, about 40 bytes each (a trace can hold millions). `keep` turns the ones the kernels need
    back into events."""

    def __init__(self) -> None:
        from array import array

        self.index = array("q")
        self.correlation = array("q")
        self.ts = array("d")
        self.dur = array("d")
        self.thread = array("l")
        self._threads: dict[tuple[str, str], int] = {}
        self._big: dict[int, int] = {}  # correlations beyond int64, by launch index

    def add(self, index: int, ev: Event) -> None:
        corr = launch_correlation(ev)
        if corr is None:
            return  # a launch without a correlation number matches no kernel
        if not -(1 << 63) <= corr < 1 << 63:
            self._big[index] = corr
            corr = 0
        self.index.append(index)
        self.correlation.append(corr)
        self.ts.append(ev.ts or 0.0)
        self.dur.append(math.nan if ev.dur is None else ev.dur)
        self.thread.append(self._threads.setdefault(thread(ev), len(self._threads)))

    def keep(self, events: dict[int, Event], kernels: list[int]) -> list[int]:
        """Put into `events` the launches whose correlation a kernel carries (and one more, so that
        `assign_kernels` knows the trace records launches); return their indices in order."""
        wanted = set()
        for k in kernels:
            corr = as_int(event_args(events[k]).get(CORRELATION))
            if corr is not None:
                wanted.add(corr)
        threads = {number: key for key, number in self._threads.items()}
        chosen: list[int] = []
        for j, index in enumerate(self.index):
            corr = self._big.get(index, self.correlation[j])
            if corr in wanted or not chosen:
                pid, tid = threads[self.thread[j]]
                dur = self.dur[j]
                events[index] = Event(
                    ph="X",
                    cat="cuda_runtime",
                    pid=pid,
                    tid=tid,
                    ts=self.ts[j],
                    dur=None if math.isnan(dur) else dur,
                    args=msgspec.Raw(msgspec.json.encode({CORRELATION: corr})),
                )
                chosen.append(index)
        return chosen
