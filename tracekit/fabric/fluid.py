"""Time on the fabric: a fluid model of flows sharing links max-min fairly, with dependencies.

The model (times in seconds, sizes in bytes, rates in bytes/s). Flow f becomes ready at
`start_s[f] = max(release_s[f], latest end of its dependencies)`. It then waits `latency_s[f]`
(path latency plus whatever per-message latency the caller adds), then drains its bytes at the
rate max-min fair sharing gives it: every link l it crosses carries `weight[f, l] * rate[f]`, the
sum of these on a link never exceeds its capacity, and no flow's rate can grow without lowering
that of a flow with a smaller or equal rate. Rates change only at events (a flow starting to
drain or finishing) and are constant in between. A flow ends when its last byte has drained:
`end_s[f]`.

Edge cases, all deterministic:
* A zero-byte flow, and a flow crossing no link (or only links of infinite capacity), ends as
  soon as its latency has passed.
* A flow crossing a zero-capacity link never ends (`end_s` is inf), and nor does anything that
  depends on it, directly or not (`start_s` is inf); so does a flow in a dependency cycle.
* Completions close together are one event: a flow finishing within `rtol` of its own drain
  time after an event of its part ends at that event, at its own finish time; the others' new
  rates start at the event (they gain its last bytes' share that much early). The default 1e-3
  saves most events where flows finish spread out (an all-to-all under ECMP: 2,975 events exact,
  200 at 1e-3, same makespan) and moves results less than the model's own sensitivity: in rings
  of dependent flows sharing links, perturbing event times by 1e-9 already moves the makespan by
  about 1% (max-min sharing with dependencies amplifies the order of near-simultaneous events).
  rtol=1e-9 gives the exact event order.

Solver. The incidence splits into independent parts (flows sharing links, transitively:
`fairshare.components`); their rates never depend on each other, only their dependencies link
them, and a dependant waits at least the least latency L of the flows still waiting. So each
step takes the earliest event t, and advances by one event every part whose next event comes
before t + L, recomputing the rates of all those parts in one pass (`fairshare.max_min_rates`,
progressive filling). Same events as one at a time in time order, fewer steps: a ring over
8-GPU hosts has one part per NVLink pair and per NIC pair, and they move together.

Cost: steps x (flows of the moving parts x filling rounds), plus O(active flows) per step.
Steps are at least the events of the busiest part, and about makespan / L where parts are many
and busy. Memory: the incidence, a few arrays per flow and per used link, and the optional series
(at most MAX_SERIES_CELLS cells); the debug log keeps every step's rates (small runs only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tracekit.errors import InputError
from tracekit.fabric.fairshare import components, max_min_rates, ranges, unique
from tracekit.fabric.routing import Incidence

Int64s = NDArray[np.int64]
Floats = NDArray[np.float64]
MAX_SERIES_BUCKETS = 10_000
MAX_SERIES_CELLS = 1 << 24  # buckets x links of the utilisation series (float64 while accumulating)
_EMPTY = np.zeros(0, dtype=np.int64)
_NOISE = 1e-12  # relative: times this close to an event are at it (floating-point noise)


@dataclass(frozen=True, eq=False)
class UtilisationSeries:
    """Busy fraction of `links` (global ids) per time bucket: `utilisation[b, k]` is the bytes link
    `links[k]` carried in [edges_s[b], edges_s[b + 1]) over its capacity times the bucket width."""

    edges_s: Floats
    links: Int64s
    utilisation: NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class FluidEvent:
    """Debug log entry, one per solver step: after the step at `time_s` (its earliest event), the
    active `flows` drain at `rate_Bps` until their part's next event. A link belongs to one part,
    so the loads these rates put on links are the loads in force at that point."""

    time_s: float
    flows: Int64s
    rate_Bps: Floats


@dataclass(frozen=True, eq=False)
class FluidResult:
    """Per flow: `start_s` (ready) and `end_s` (last byte drained); inf where never reached.
    Per link: `link_bytes`, `link_utilisation` (bytes / (capacity x makespan)) and `link_peak`
    (max over events of load / capacity). `makespan_s` runs from the first ready time to the last
    finite end; `events` counts solver steps (each moves every part that can move, see the module
    docstring): the figure the cost goes with."""

    start_s: Floats
    end_s: Floats
    link_bytes: Floats
    link_utilisation: Floats
    link_peak: Floats
    makespan_s: float
    events: int
    series: UtilisationSeries | None = None
    log: tuple[FluidEvent, ...] = ()

    @property
    def unfinished(self) -> int:
        """Flows that never end (a zero-capacity link, or a dependency that never ends)."""
        return int(np.count_nonzero(~np.isfinite(self.end_s)))


def simulate(
    incidence: Incidence,
    capacity_Bps: NDArray[np.floating],
    bytes: NDArray[np.floating] | NDArray[np.integer],
    release_s: NDArray[np.floating],
    latency_s: NDArray[np.floating],
    dep_ptr: NDArray[np.integer] | None = None,
    dep_idx: NDArray[np.integer] | None = None,
    *,
    rtol: float = 1e-3,
    series_buckets: int = 0,
    debug: bool = False,
) -> FluidResult:
    """Start and end of every flow under max-min fair sharing (see the module docstring).

    Per flow: `bytes`, `release_s` (earliest start), `latency_s` (paid before its bytes move).
    Per link: `capacity_Bps` (inf: unconstrained). Dependencies in CSR form: flow f waits for
    flows `dep_idx[dep_ptr[f]:dep_ptr[f + 1]]` (none when both are None). `rtol`: completions
    this close, relative to a flow's drain time, are one event. `series_buckets` > 0 adds a
    utilisation-over-time series in at most that many buckets; `debug` keeps every step's rates
    in `log` (for tests: memory grows with steps x active flows).
    """
    problem = _Problem(incidence, capacity_Bps, bytes, release_s, latency_s, dep_ptr, dep_idx, rtol)
    return _Solver(problem, series_buckets, debug).run()


class _Problem:
    """The inputs checked, and the incidence in the solver's form: CSR by flow over local link ids
    (links some flow crosses, minus those of infinite capacity)."""

    def __init__(
        self,
        inc: Incidence,
        capacity: NDArray[np.floating],
        sizes: NDArray[np.floating] | NDArray[np.integer],
        release: NDArray[np.floating],
        latency: NDArray[np.floating],
        dep_ptr: NDArray[np.integer] | None,
        dep_idx: NDArray[np.integer] | None,
        rtol: float,
    ) -> None:
        flows, links = inc.num_flows, inc.num_links
        self.flows, self.links = flows, links
        self.capacity = _vector("capacity_Bps", capacity, links, minimum=0.0, allow_inf=True)
        self.bytes = _vector("bytes", sizes, flows, minimum=0.0)
        self.release = _vector("release_s", release, flows)
        self.latency = _vector("latency_s", latency, flows, minimum=0.0)
        if not (isinstance(rtol, float | int) and 1e-12 <= rtol <= 0.1):
            raise InputError(f"simulate: rtol must be in [1e-12, 0.1], not {rtol!r}")
        self.rtol = float(rtol)
        self._incidence(inc)
        self.dep_ptr, self.dep_idx = _dependencies(dep_ptr, dep_idx, flows)

    def _incidence(self, inc: Incidence) -> None:
        flow, link, weight = (np.asarray(a) for a in (inc.flow, inc.link, inc.weight))
        if not (flow.shape == link.shape == weight.shape and flow.ndim == 1):
            raise InputError("simulate: the incidence's flow, link and weight arrays differ in shape")
        if flow.size and (flow.min() < 0 or flow.max() >= self.flows or link.min() < 0 or link.max() >= self.links):
            raise InputError("simulate: the incidence names a flow or link out of range")
        if flow.size and not (np.all(np.isfinite(weight)) and weight.min() > 0):
            raise InputError("simulate: incidence weights must be positive and finite")
        keep = np.isfinite(self.capacity[link])  # an infinite link constrains nothing
        flow, link, weight = flow[keep], link[keep], weight[keep].astype(np.float64)
        if flow.size and np.any(np.diff(flow) < 0):
            order = np.argsort(flow, kind="stable")
            flow, link, weight = flow[order], link[order], weight[order]
        self.used, self.local_link = np.unique(link, return_inverse=True)
        self.local_link = self.local_link.astype(np.int64).ravel()
        self.local_capacity = self.capacity[self.used]
        self.weight = weight
        self.entries = np.bincount(flow, minlength=self.flows).astype(np.int64)
        self.ptr = np.concatenate(([0], np.cumsum(self.entries))).astype(np.int64)
        self.entry_flow = flow.astype(np.int64)


def _vector(name: str, values: object, n: int, minimum: float | None = None, allow_inf: bool = False) -> Floats:
    a = np.asarray(values, dtype=np.float64)
    if a.shape != (n,):
        raise InputError(f"simulate: {name} must have {n} values, not shape {a.shape}")
    bad = np.isnan(a) | (~np.isfinite(a) if not allow_inf else np.isneginf(a))
    if minimum is not None:
        bad |= a < minimum
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"simulate: {name}[{i}] = {a[i]!r} is not a valid value")
    return a


def _dependencies(ptr: object, idx: object, flows: int) -> tuple[Int64s, Int64s]:
    if ptr is None and idx is None:
        return np.zeros(flows + 1, dtype=np.int64), _EMPTY
    p, i = np.asarray(ptr), np.asarray(idx)
    if p.shape != (flows + 1,) or i.ndim != 1 or (p.size and p.dtype.kind not in "iu"):
        raise InputError(f"simulate: dep_ptr must be {flows + 1} integers and dep_idx a 1-D integer array")
    if i.size and i.dtype.kind not in "iu":
        raise InputError("simulate: dep_idx must be integers")
    p, i = p.astype(np.int64), i.astype(np.int64)
    if p[0] != 0 or p[-1] != i.size or np.any(np.diff(p) < 0):
        raise InputError("simulate: dep_ptr must start at 0, never decrease and end at len(dep_idx)")
    if i.size and (i.min() < 0 or i.max() >= flows):
        raise InputError("simulate: dep_idx names a flow out of range")
    return p, i


class _Solver:
    """The event loop. Between its own events every active flow drains at a constant rate, so its
    finish time is known. Independent parts of the incidence (`components`) only meet through
    dependencies, and a dependency adds at least `min latency` before its dependant moves: so each
    step advances, by one event each, every part whose next event comes before the earliest
    event plus that latency, and recomputes their rates in one pass. Exact: the same events as
    one-at-a-time in time order, fewer steps."""

    def __init__(self, p: _Problem, series_buckets: int, debug: bool) -> None:
        self.p = p
        f = p.flows
        self.start = np.full(f, np.inf)
        self.end = np.full(f, np.inf)
        self.rate = np.zeros(f)
        self.left = p.bytes.copy()  # bytes left at time `since`
        self.since = np.zeros(f)
        self.finish = np.full(f, np.inf)
        self.waiting = np.diff(p.dep_ptr)  # unfinished dependencies per flow
        self.ready_at = p.release.copy()
        self.children_ptr, self.children = _reverse(p.dep_ptr, p.dep_idx, f)
        self.by_latency = np.argsort(p.latency, kind="stable")
        self.latency_cursor = 0
        self.part, self.link_part = components(p.entry_flow, p.local_link, f, len(p.used))
        parts = int(max(self.part.max(initial=-1), self.link_part.max(initial=-1))) + 1
        self.part_link_ptr, self.part_links = _group(self.link_part, parts)
        self.part_clock = np.zeros(parts)
        self.part_next = np.full(parts, np.inf)
        self.drain_start = np.zeros(f)
        self.active = _EMPTY
        self.pool = _Pool()
        self.load = np.zeros(len(p.used))
        self.peak = np.zeros(len(p.used))
        self.series = _Series(series_buckets, p.local_capacity) if series_buckets > 0 else None
        self.log: list[FluidEvent] | None = [] if debug else None
        self.events = 0
        roots = np.flatnonzero(self.waiting == 0)
        self.start[roots] = p.release[roots]
        self.pool.add_sorted(roots, p.release[roots] + p.latency[roots])

    def run(self) -> FluidResult:
        while True:
            t_min = min(self.pool.earliest(), float(self.finish[self.active].min(initial=np.inf)))
            if not math.isfinite(t_min):
                break
            parts, times = self._advancing(t_min)
            self._complete()
            self._activate()
            self._recompute(parts)
            self.part_next[parts] = np.inf
            self.events += 1
            if self.log is not None:
                self.log.append(FluidEvent(t_min, self.active.copy(), self.rate[self.active]))
        return self._result()

    def _advancing(self, t_min: float) -> tuple[Int64s, Floats]:
        """The parts that move this step and the time of each one's next event: every part whose
        next event comes before t_min + the least latency of a flow still waiting (nothing that
        happens now can start a flow earlier than that)."""
        horizon = t_min + self._least_waiting_latency()
        now = t_min + _NOISE * abs(t_min)
        due_flows = self.active[(self.finish[self.active] < horizon) | (self.finish[self.active] <= now)]
        pool_ids, pool_times = self.pool.before(horizon, now)
        ids = np.concatenate((due_flows, pool_ids))
        times = np.concatenate((self.finish[due_flows], pool_times))
        labels = self.part[ids]
        np.minimum.at(self.part_next, labels, times)
        parts = unique(labels)
        return parts, self.part_next[parts]

    def _least_waiting_latency(self) -> float:
        """The least latency of a flow still waiting for a dependency (a cursor over the flows in
        latency order: a flow stops waiting once, so the cursor only moves forward)."""
        order, waiting, step = self.by_latency, self.waiting, 64
        while self.latency_cursor < len(order):
            chunk = waiting[order[self.latency_cursor : self.latency_cursor + step]]
            still = np.flatnonzero(chunk)
            if len(still):
                self.latency_cursor += int(still[0])
                return float(self.p.latency[order[self.latency_cursor]])
            self.latency_cursor += len(chunk)
            step *= 2
        return math.inf

    def _part_time(self, ids: Int64s) -> Floats:
        """The event time of the part of each flow in `ids` this step (inf where it does not move)."""
        return self.part_next[self.part[ids]]

    def _complete(self) -> None:
        """Active flows of the moving parts that finish by their part's event time, or within rtol
        of their own drain time after it, end at their own finish times. The part's new rates
        start at the event: the last bytes of the flows that end a little after it stop
        constraining the others that much early (at most rtol of a drain time)."""
        if not len(self.active):
            return
        event = self._part_time(self.active)
        moving = np.flatnonzero(np.isfinite(event))
        ids, event = self.active[moving], event[moving]
        finish = self.finish[ids]
        slack = self.p.rtol * (finish - self.drain_start[ids]) + _NOISE * np.abs(event)
        done = np.isfinite(finish) & (finish <= event + slack)
        if not done.any():
            return
        finished = ids[done]
        keep = np.ones(len(self.active), dtype=np.bool_)
        keep[moving[done]] = False
        self.active = self.active[keep]
        self.left[finished] = 0.0
        self.rate[finished] = 0.0
        self._finish(finished, finish[done])

    def _activate(self) -> None:
        """Flows of the moving parts whose latency ends at their part's event time start draining;
        those with nothing to drain end then (their dependants wait at least the least latency)."""
        p = self.p

        def due(ids: Int64s, t: Floats) -> NDArray[np.bool_]:
            event = self._part_time(ids)
            return np.isfinite(event) & (t <= event + _NOISE * np.abs(event))

        ids, when = self.pool.take(due)
        if not len(ids):
            return
        instant = (p.bytes[ids] == 0) | (p.entries[ids] == 0)
        moving = ids[~instant]
        self.active = np.concatenate((self.active, moving))
        self.rate[moving] = 0.0
        self.since[moving] = self.drain_start[moving] = self._part_time(moving)
        self.left[ids[instant]] = 0.0
        self._finish(ids[instant], when[instant])

    def _recompute(self, parts: Int64s) -> None:
        """New rates for the active flows of the moving parts, each at its part's event time."""
        p = self.p
        times = self.part_next[parts]
        t = self._part_time(self.active)
        ids, t = self.active[np.isfinite(t)], t[np.isfinite(t)]
        self.left[ids] = np.maximum(self.left[ids] - self.rate[ids] * (t - self.since[ids]), 0.0)
        self.since[ids] = t
        ef, el, ew = _gather(p, ids)
        rates = max_min_rates(ef, el, ew, len(ids), p.local_capacity)
        self.rate[ids] = rates
        with np.errstate(divide="ignore"):
            self.finish[ids] = np.where(rates > 0, t + self.left[ids] / np.where(rates > 0, rates, 1.0), np.inf)
        lens = self.part_link_ptr[parts + 1] - self.part_link_ptr[parts]
        links = self.part_links[ranges(self.part_link_ptr[parts], lens)]
        if self.series is not None:
            clock = np.repeat(self.part_clock[parts], lens)
            self.series.add(clock, np.repeat(times, lens), links, self.load[links])
        self.part_clock[parts] = times
        self.load[links] = 0.0
        self.load += np.bincount(el, ew * rates[ef], minlength=len(self.load))
        cap = p.local_capacity[links]
        busy = np.divide(self.load[links], cap, out=np.zeros(len(links)), where=cap > 0)
        self.peak[links] = np.maximum(self.peak[links], busy)

    def _finish(self, ids: Int64s, times: Floats) -> None:
        """Flows `ids` end at `times`; their dependants whose last dependency this was get ready."""
        if not len(ids):
            return
        self.end[ids] = times
        lens = self.children_ptr[ids + 1] - self.children_ptr[ids]
        if not lens.any():
            return
        kids = self.children[ranges(self.children_ptr[ids], lens)]
        np.maximum.at(self.ready_at, kids, np.repeat(times, lens))
        np.subtract.at(self.waiting, kids, 1)
        kids = unique(kids)
        ready = kids[self.waiting[kids] == 0]
        self.start[ready] = self.ready_at[ready]
        self.pool.add(ready, self.ready_at[ready] + self.p.latency[ready])

    def _result(self) -> FluidResult:
        p = self.p
        drained = p.bytes - self.left
        local_bytes = np.bincount(p.local_link, p.weight * drained[p.entry_flow], minlength=len(p.used))
        link_bytes = np.zeros(p.links)
        link_bytes[p.used] = local_bytes
        peak = np.zeros(p.links)
        peak[p.used] = self.peak
        finite_end = self.end[np.isfinite(self.end)]
        finite_start = self.start[np.isfinite(self.start)]
        makespan = float(finite_end.max() - finite_start.min()) if finite_end.size else 0.0
        busy = p.capacity * makespan
        utilisation = np.divide(link_bytes, busy, out=np.zeros(p.links), where=(busy > 0) & np.isfinite(busy))
        series = self.series.result(p.used) if self.series is not None else None
        return FluidResult(
            self.start, self.end, link_bytes, utilisation, peak, makespan, self.events, series, tuple(self.log or ())
        )


class _Pool:
    """Flows waiting for their latency to end: the roots sorted once by time (a cursor walks
    them), and the flows readied later in a small unsorted pool."""

    def __init__(self) -> None:
        self.sorted_ids, self.sorted_times, self.cursor = _EMPTY, np.zeros(0), 0
        self.ids, self.times = _EMPTY, np.zeros(0)

    def add_sorted(self, ids: Int64s, times: Floats) -> None:
        order = np.argsort(times, kind="stable")
        self.sorted_ids, self.sorted_times, self.cursor = ids[order], times[order], 0

    def add(self, ids: Int64s, times: Floats) -> None:
        self.ids = np.concatenate((self.ids, ids))
        self.times = np.concatenate((self.times, times))

    def earliest(self) -> float:
        head = self.sorted_times[self.cursor] if self.cursor < len(self.sorted_times) else np.inf
        return float(min(head, self.times.min(initial=np.inf)))

    def before(self, horizon: float, now: float) -> tuple[Int64s, Floats]:
        """The waiting flows due before `horizon` (or by `now`); moves the roots among them into
        the unsorted pool, where `take` finds them."""
        end = int(np.searchsorted(self.sorted_times, horizon, side="left"))
        end = max(end, int(np.searchsorted(self.sorted_times, now, side="right")))
        if end > self.cursor:
            self.add(self.sorted_ids[self.cursor : end], self.sorted_times[self.cursor : end])
            self.cursor = end
        due = (self.times < horizon) | (self.times <= now)
        return self.ids[due], self.times[due]

    def take(self, due: Callable[[Int64s, Floats], NDArray[np.bool_]]) -> tuple[Int64s, Floats]:
        """Remove and return the pooled flows for which `due(ids, times)` holds."""
        if not len(self.ids):
            return _EMPTY, np.zeros(0)
        mask = due(self.ids, self.times)
        taken = self.ids[mask], self.times[mask]
        self.ids, self.times = self.ids[~mask], self.times[~mask]
        return taken


def _reverse(ptr: Int64s, idx: Int64s, flows: int) -> tuple[Int64s, Int64s]:
    """The dependants of each flow, as CSR (the transpose of the dependency CSR)."""
    owner = np.repeat(np.arange(flows, dtype=np.int64), np.diff(ptr))
    order = np.argsort(idx, kind="stable")
    counts = np.bincount(idx, minlength=flows)
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64), owner[order]


def _group(label: Int64s, groups: int) -> tuple[Int64s, Int64s]:
    """CSR of the positions holding each label 0..groups-1."""
    order = np.argsort(label, kind="stable").astype(np.int64)
    return np.concatenate(([0], np.cumsum(np.bincount(label, minlength=groups)))).astype(np.int64), order


def _gather(p: _Problem, ids: Int64s) -> tuple[Int64s, Int64s, Floats]:
    """The entries of flows `ids`: position of the flow in ids, local link, weight."""
    lens = p.entries[ids]
    at = ranges(p.ptr[ids], lens)
    return np.repeat(np.arange(len(ids), dtype=np.int64), lens), p.local_link[at], p.weight[at]


class _Series:
    """Bytes per (time bucket, used link) with bucket widths that double as the run grows, so that
    the number of buckets stays bounded whatever the span."""

    def __init__(self, buckets: int, capacity: Floats) -> None:
        links = max(len(capacity), 1)
        self.buckets = max(2, min(int(buckets), MAX_SERIES_BUCKETS, MAX_SERIES_CELLS // links)) // 2 * 2
        self.capacity = capacity
        self.acc = np.zeros((self.buckets, len(capacity)))
        self.t0 = math.nan
        self.width = 0.0

    def add(self, t0: Floats, t1: Floats, links: Int64s, load: Floats) -> None:
        """Link links[i] carried load[i] bytes/s from t0[i] to t1[i]."""
        keep = (t1 > t0) & (load > 0)
        t0, t1, links, load = t0[keep], t1[keep], links[keep], load[keep]
        if not len(t0):
            return
        if self.width == 0.0:
            self.t0 = float(t0.min())
            self.width = max(float(t1.max()) - self.t0, 1e-15) / self.buckets
        while float(t1.max()) > self.t0 + self.width * self.buckets * (1 + 1e-12):
            self._coarsen()
        first = np.floor((t0 - self.t0) / self.width).astype(np.int64)
        last = np.minimum(np.floor((t1 - self.t0) / self.width).astype(np.int64), self.buckets - 1)
        span = last - first + 1
        rows = ranges(first, span)
        owner = np.repeat(np.arange(len(t0)), span)
        lo = self.t0 + self.width * rows
        overlap = np.minimum(lo + self.width, t1[owner]) - np.maximum(lo, t0[owner])
        np.add.at(self.acc, (rows, links[owner]), np.maximum(overlap, 0.0) * load[owner])

    def _coarsen(self) -> None:
        half = self.acc.reshape(self.buckets // 2, 2, -1).sum(axis=1)
        self.acc[: self.buckets // 2] = half
        self.acc[self.buckets // 2 :] = 0.0
        self.width *= 2

    def result(self, used: Int64s) -> UtilisationSeries:
        if self.width == 0.0:
            return UtilisationSeries(np.zeros(1), used, np.zeros((0, len(used)), dtype=np.float32))
        filled = np.flatnonzero(self.acc.any(axis=1))
        count = int(filled[-1]) + 1 if filled.size else 1
        edges = (self.t0 + self.width * np.arange(count + 1)).astype(np.float64)
        busy = self.capacity[None, :] * self.width
        util = np.divide(self.acc[:count], busy, out=np.zeros((count, len(used))), where=busy > 0)
        return UtilisationSeries(edges, used, util.astype(np.float32))
