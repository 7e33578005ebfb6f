"""The waves timing of a collective's flows, and the plans it keeps per process.

A shape's flows are cut into its steps (waves); every flow of a step moves at its max-min fair share
of the links the step's flows cross (one fair-share solve for all steps), and starts after the flows
it waits for. What that needs besides the bytes (routing, latencies, steps, rates) is a `WavePlan`,
kept in `PLANS` by a digest of the shape's structure and the network, so collectives of the same
structure and other sizes share it. tracekit.replay.timing builds and uses the plans.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from tracekit.fabric.topology import Network


@dataclass
class Wave:
    """One step's flows and what they wait for, laid out for the times pass: `flat` the flows waited
    for, grouped by waiter (`starts` where each waiting member's group begins, `waiting` which
    members wait at all), and whether any of them is in the same step (then passes repeat)."""

    members: Any
    flat: Any
    starts: Any
    waiting: Any
    inside: bool


@dataclass
class WavePlan:
    """What the waves timing of a shape needs besides its sizes: its routing, latencies, steps, each
    flow's fair-share rate in its step and the steps' dependencies. None of it depends on the bytes,
    so collectives of the same structure and any sizes (the same group and algorithm in another job,
    another message size) share it."""

    incidence: Any
    latency: Any
    rates: Any  # bytes/s per flow (0 for a flow crossing no link)
    has_links: Any
    waves: list[Wave]

    @classmethod
    def build(cls, incidence: Any, capacity: Any, latency: Any, step: Any, ptr: Any, idx: Any) -> WavePlan:
        import numpy as np

        count = len(step)
        order = np.lexsort((np.arange(count), step))
        bounds = np.flatnonzero(np.r_[True, step[order][1:] != step[order][:-1], True])
        rates = _step_rates(incidence, capacity, count, order, bounds)
        has_links = np.bincount(incidence.flow, minlength=count) > 0
        return cls(incidence, latency, rates, has_links, _waves(order, bounds, step, ptr, idx))

    def nbytes(self) -> int:
        arrays = [self.latency, self.rates, self.has_links, *vars(self.incidence).values()]
        arrays += [a for w in self.waves for a in (w.members, w.flat, w.starts, w.waiting)]
        return sum(int(getattr(a, "nbytes", 0)) for a in arrays) + 200 * len(self.waves)

    def times(self, sizes: Any, release: Any) -> tuple[Any, Any]:
        """Start and end of every flow: each after the flows it waits for, moving its bytes at its
        step's rate. Dependencies inside one step (a PXN relay and its send) are followed in a few passes."""
        import numpy as np

        with np.errstate(divide="ignore", invalid="ignore"):
            moving = np.where(sizes > 0, sizes / self.rates, 0.0)
        durations = self.latency + np.where(self.has_links, moving, 0.0)
        count = len(sizes)
        start = np.zeros(count)
        end = np.full(count, np.inf)
        for wave in self.waves:
            members = wave.members
            duration = durations[members]
            ready = release[members].astype(np.float64)
            for _ in range(8 if wave.inside else 1):  # inside a step: a few hops at most (PXN relay, send)
                waited = ready.copy()
                if len(wave.flat):
                    latest = np.maximum.reduceat(end[wave.flat], wave.starts)
                    waited[wave.waiting] = np.maximum(waited[wave.waiting], latest)
                settled = np.array_equal(start[members], waited) and np.isfinite(waited).all()
                start[members] = waited
                end[members] = waited + duration
                if settled or not len(wave.flat):
                    break
        return start, end


def _waves(order: Any, bounds: Any, step: Any, ptr: Any, idx: Any) -> list[Wave]:
    """Each step's Wave (see Wave), in step order."""
    import numpy as np

    from tracekit.fabric.fairshare import ranges

    out = []
    for w in range(len(bounds) - 1):
        members = order[bounds[w] : bounds[w + 1]]
        counts = ptr[members + 1] - ptr[members]
        flat = idx[ranges(ptr[members], counts)] if counts.sum() else np.zeros(0, dtype=np.int64)
        waiting = np.flatnonzero(counts > 0)
        starts = (np.cumsum(counts) - counts)[waiting]
        inside = bool(len(flat)) and bool((step[flat] == step[members[0]]).any())
        out.append(Wave(members, flat, starts, waiting, inside))
    return out


def waves(
    incidence: Any, capacity: Any, sizes: Any, release: Any, latency: Any, ptr: Any, idx: Any, step: Any
) -> tuple[Any, Any]:
    """Start and end of every flow: the max-min fair rates of each step's flows in flight together, then
    every flow after the flows it waits for (see the module docstring)."""
    return WavePlan.build(incidence, capacity, latency, step, ptr, idx).times(sizes, release)


# Wave plans kept per process, by the structure of the shape and the network (a fleet's jobs repeat
# their groups and algorithms with other sizes: 4,911 distinct structures among the 19,795 shapes
# timed for 300 generated jobs), least recently used dropped beyond this many bytes.
PLAN_CACHE_BYTES = 256 << 20


class PlanCache:
    """Wave plans by key, least recently used first, their bytes kept under a budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._plans: OrderedDict[bytes, tuple[WavePlan, int]] = OrderedDict()
        self._bytes = 0

    def get(self, key: bytes) -> WavePlan | None:
        hit = self._plans.get(key)
        if hit is None:
            return None
        self._plans.move_to_end(key)
        return hit[0]

    def put(self, key: bytes, plan: WavePlan) -> None:
        size = plan.nbytes()
        if size > self.budget // 4:  # one plan never takes over the cache
            return
        self._plans[key] = (plan, size)
        self._bytes += size
        while self._bytes > self.budget:
            _, (_, dropped) = self._plans.popitem(last=False)
            self._bytes -= dropped

    def clear(self) -> None:
        self._plans.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._plans)


PLANS = PlanCache(PLAN_CACHE_BYTES)
_NETWORK_KEYS: WeakKeyDictionary[Network, bytes] = WeakKeyDictionary()
# The flow columns a plan depends on (everything but the bytes).
_STRUCTURE = ("link", "src_nic", "dst_nic", "src_gpu", "dst_gpu", "src_rank", "dst_rank", "channel", "qp", "step",
              "dep_ptr", "dep_idx")  # fmt: skip


def structure_digest(flows: dict[str, Any]) -> bytes:
    """A digest of what a shape's timing depends on besides its bytes and the network."""
    return digest([flows[name] for name in _STRUCTURE])


def network_key(network: Network) -> bytes:
    key = _NETWORK_KEYS.get(network)
    if key is None:
        import numpy as np

        fields = vars(network)
        arrays = [v for v in fields.values() if isinstance(v, np.ndarray)]
        scalars = repr(sorted((k, repr(v)) for k, v in fields.items() if not isinstance(v, np.ndarray))).encode()
        key = _NETWORK_KEYS[network] = digest(arrays, scalars)
    return key


def digest(arrays: list[Any], *extra: bytes) -> bytes:
    """A digest of arrays (their dtype, shape and values) and some bytes."""
    import hashlib

    import numpy as np

    h = hashlib.blake2b(digest_size=20)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    for e in extra:
        h.update(len(e).to_bytes(8, "little"))
        h.update(e)
    return h.digest()


def _step_rates(incidence: Any, capacity: Any, count: int, order: Any, bounds: Any) -> Any:
    """Every flow's max-min fair rate among the flows of its step, all steps in one solve: each step
    gets its own copy of the links it uses (steps do not share bandwidth, and the fair share of
    disjoint parts is each part's own)."""
    import numpy as np

    from tracekit.fabric.fairshare import max_min_rates

    wave = np.empty(count, dtype=np.int64)
    wave[order] = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    links = len(capacity)
    copies, link = np.unique(wave[incidence.flow] * links + incidence.link, return_inverse=True)
    by_flow = np.argsort(incidence.flow, kind="stable")
    return max_min_rates(incidence.flow[by_flow], link.reshape(-1)[by_flow], incidence.weight[by_flow], count,
                         capacity[copies % links])  # fmt: skip
