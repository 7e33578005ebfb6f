"""When each flow starts and ends.

Inside a collective: its flows run on the fabric (tracekit.fabric: by default the ideal
non-blocking fabric at the placement's NIC speed, with each GPU's NVLink ports to its host's
NVSwitch) under max-min fair sharing. The flows of one step of the collective (a ring step on
every channel, a wave of a pipelined tree, every pair of an all-to-all with its PXN relays) are
in flight together: their rates are the max-min fair share of every link they cross, so the
flows of a step that share a NIC or an NVLink port share its bandwidth. A flow starts when the
flows it waits for have ended (the collective's steps, pipeline pieces and PXN hops), pays
NCCL's per-hop latency for its link class, algorithm and protocol (tuning.cc hwLat; a pipeline
piece that follows an earlier one on the same edge pays none, as NCCL overlaps them), then moves
its bytes at its step's rate. Rates are fixed per step, not recomputed whenever a flow of the
step ends: for the symmetric steps of collectives this is what the event-driven fluid model
(tracekit.fabric.fluid, run with `exact=True`) gives, at a cost of one fair-share solve per step
instead of one per event (tests compare the two). The collective adds NCCL's base latency
(tuning.cc baseLat) and lasts until its last flow ends. Collectives with the same flows (same
members, algorithm, sizes) are timed once. LL moves 8 bytes of flags per 8 of data and LL128 8
per 120: their flows occupy links for that much more.

The collective itself starts:

* at its trace timestamp when every collective of the job has one: the latest start among its
  participants (no data moves before the last member arrives), relative to the job's first
  collective (start_s = 0 there);
* otherwise at the time a replay of the job's ops gives it. The replay follows ASTRA-sim's workload
  semantics (astra-sim/workload/Workload.cc): an op is ready when its control and data dependencies
  (within its trace) have finished; compute ops run one at a time per rank for their recorded
  duration_us (missing: 0); the collectives of one process group run in issue order on each rank
  (one NCCL stream per communicator); a collective starts when it is ready on every participant that has a
  trace and lasts its modelled duration. A trace whose ops record no dependencies at all runs in op_id
  order. Ranks waiting on each other in a cycle (inconsistent traces) are unblocked by starting
  the waiting collective with the ranks that arrived; the notes say how often.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import Network
    from tracekit.replay.collectives import JobCollectives
    from tracekit.replay.placement import Placement
    from tracekit.replay.shapes import JobShapes

# Ops a dependency replay walks per job at most; beyond it only the communication ops are replayed.
MAX_REPLAY_OPS = 5_000_000


WIRE_FACTOR = {"LL": 2.0, "LL128": 128 / 120, "Simple": 1.0}
LINK_CLASS = {"nvlink": "nvlink", "pcie": "pcie", "network": "net"}


def schedule(
    flows: pl.DataFrame, shapes: JobShapes, network: Network | None = None, routing: str | None = None,
    seed: int = 0, exact: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """Flows with offset_s (start within their collective) and duration_s, and per collective model_duration_s.

    `network` is the fabric the flows run on (default: the ideal fabric of the job's hosts).
    """
    import numpy as np
    import polars as pl

    network = network if network is not None else ideal_network(shapes)
    run = Timer(shapes).run(network, routing, seed, exact)
    ids = flows["collective_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(ids)] if len(ids) else starts
    where = {int(ids[lo]): (lo, hi) for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)}
    offset = np.zeros(len(ids))
    duration = np.zeros(len(ids))
    per_collective: dict[int, float] = {}
    for shape, (start, end, total) in zip(shapes.shapes, run.solved, strict=True):
        for cid in shape.collective_ids:
            per_collective[cid] = total
            if cid in where:
                lo, hi = where[cid]
                offset[lo:hi] = start
                duration[lo:hi] = end - start
    flows = flows.with_columns(offset_s=pl.Series(offset), duration_s=pl.Series(duration))
    table = pl.DataFrame(
        {"collective_id": list(per_collective), "model_duration_s": list(per_collective.values())},
        schema={"collective_id": pl.Int64, "model_duration_s": pl.Float64},
    )
    return flows, table


@dataclass
class TimedRun:
    """One timing of a job's shapes on one network: per shape its flows' start and end and its duration,
    and the bytes each link of the network carried over all the job's collectives."""

    solved: list[tuple[Any, Any, float]]
    link_bytes: Any  # float64 per link of the network

    def durations(self, shapes: JobShapes) -> list[float]:
        """Each shape's duration (one per distinct collective, in the shapes' order)."""
        return [total for _, _, total in self.solved]

    def communication_s(self, shapes: JobShapes) -> float:
        """The job's collectives one after another: sum over shapes of duration × count, in the shapes' order."""
        return float(sum(total * shape.count for (_, _, total), shape in zip(self.solved, shapes.shapes, strict=True)))


class Timer:
    """A job's distinct collectives timed on a network (see the module docstring)."""

    def __init__(self, shapes: JobShapes) -> None:
        from tracekit.replay.algorithms.base import NET

        self.shapes = shapes
        # A shape with no network flow runs on its hosts' NVLink ports alone, the same on every fabric
        # and routing: timed once (a single-host job's collectives, most of a fleet's jobs).
        self._inside = [not bool((shape.flows["link"] == NET).any()) for shape in shapes.shapes]
        self._timed_inside: dict[tuple[int, bool, float], tuple[Any, Any, float]] = {}
        self._structures: dict[int, bytes] = {}  # a shape's structure digest, taken once for all its runs

    def run(self, network: Network, routing: str | None = None, seed: int = 0, exact: bool = False) -> TimedRun:
        import numpy as np

        from tracekit.fabric.routing import link_loads
        from tracekit.replay.nccl.tuning import BASE_LATENCY, PROTOCOLS

        solved = []
        link_bytes = np.zeros(network.links)
        for index, shape in enumerate(self.shapes.shapes):
            key = (index, exact, float(network.endpoints.nvlink_Bps))
            if self._inside[index] and key in self._timed_inside:
                solved.append(self._timed_inside[key])
                incidence, sizes = _routed(shape.flows, shape.protocol, network, routing, seed)
                link_bytes += link_loads(incidence, sizes) * shape.count
                continue
            protocol = shape.protocol if shape.protocol in PROTOCOLS else "Simple"
            base = BASE_LATENCY.get(shape.algorithm, (0.0, 0.0, 0.0))[PROTOCOLS.index(protocol)] * 1e-6
            if index not in self._structures:
                self._structures[index] = structure_digest(shape.flows)
            start, end, total, incidence, sizes = _solve(
                shape.flows, shape.algorithm, protocol, base, network, routing, seed, exact,
                self.shapes.placement.intra_host, self._structures[index],
            )  # fmt: skip
            solved.append((start, end, total))
            if self._inside[index]:
                self._timed_inside[key] = (start, end, total)
            link_bytes += link_loads(incidence, sizes) * shape.count
        return TimedRun(solved, link_bytes)

    def has_choices(self, network: Network) -> bool:
        """Whether any network flow of the job has more than one equal-cost path on `network`: where
        none has, every routing and hash seed routes (and times) the job alike."""
        import numpy as np

        from tracekit.fabric.routing import route

        for index, shape in enumerate(self.shapes.shapes):
            if not self._inside[index] and bool(np.any(route(network, _ends(shape.flows), "spray").weight < 1.0)):
                return True
        return False


def ideal_network(shapes: JobShapes) -> Network:
    """The ideal non-blocking fabric at the placement's NIC speed over the job's hosts."""
    from tracekit.fabric.topology import FabricSpec

    return FabricSpec("ideal").build(shapes.network())


def endpoints(placement: Placement, flows: pl.DataFrame) -> Any:
    """The fabric's view of the hosts a flows table uses (tracekit.fabric.Endpoints)."""
    hosts = 1
    if flows.height:
        hosts = int(max(flows["src_host"].max(), flows["dst_host"].max())) + 1  # type: ignore[arg-type, type-var]
    return endpoints_of(placement, hosts)


def endpoints_of(placement: Placement, hosts: int) -> Any:
    """The fabric's view of `hosts` hosts of the placement."""
    import numpy as np

    from tracekit.fabric.endpoints import Endpoints

    return Endpoints(
        hosts=max(hosts, 1),
        gpus_per_host=placement.gpus_per_host,
        nics_per_host=placement.nics,
        nic_Bps=placement.nic_Bps,
        nvlink_Bps=placement.intra_Bps,
        pcie_Bps=float("inf"),
        nic_rail=tuple(int(r) for r in placement.rail_of_nic(np.arange(placement.nics))),
        hosts_per_rack=placement.hosts_per_rack,
    )


def _ends(flows: dict[str, Any]) -> Any:
    """The fabric's view of a shape's flows (NCCL's QPs are per channel: what varies the 5-tuple)."""
    from tracekit.fabric.routing import FlowEnds
    from tracekit.replay.algorithms.base import NET

    return FlowEnds(
        src_nic=flows["src_nic"],
        dst_nic=flows["dst_nic"],
        src_gpu=flows["src_gpu"],
        dst_gpu=flows["dst_gpu"],
        qp=flows["channel"] * 128 + flows["qp"],
        kind=(flows["link"] == NET).astype("int64"),
    )


def _routed(flows: dict[str, Any], protocol: str, network: Network, routing: str | None, seed: int) -> tuple[Any, Any]:
    """A shape's flows routed, and their sizes on the wire."""
    from tracekit.fabric.routing import route

    return route(network, _ends(flows), routing, seed), flows["bytes"] * WIRE_FACTOR.get(protocol, 1.0)


def _solve(
    flows: dict[str, Any], algorithm: str, protocol: str, base_s: float, network: Network, routing: str | None,
    seed: int, exact: bool = False, intra_link: str = "nvlink", structure: bytes | None = None,
) -> tuple[Any, Any, float, Any, Any]:  # fmt: skip
    """Start and end (relative to the collective's start) of a shape's flows, the collective's duration,
    and the flows' incidence and wire sizes on the network."""
    import numpy as np

    from tracekit.fabric.fluid import simulate

    ptr, idx = flows["dep_ptr"], flows["dep_idx"]
    sizes = flows["bytes"] * WIRE_FACTOR[protocol]
    release = np.full(len(sizes), base_s)
    if exact:
        incidence, latency = _routing_and_latency(flows, algorithm, protocol, network, routing, seed, intra_link)
        result = simulate(incidence, network.capacity_Bps, sizes, release, latency, ptr, idx)
        start, end = result.start_s, result.end_s
    else:
        plan = _plan(flows, algorithm, protocol, network, routing, seed, intra_link, structure)
        incidence, latency = plan.incidence, plan.latency
        start, end = plan.times(sizes, release)
        start, end = _within_capacity(start, end, incidence, sizes, network.capacity_Bps, base_s, latency)
    end = np.where(np.isfinite(end), end, base_s)
    return start, end, float(end.max(initial=base_s)), incidence, sizes


def _routing_and_latency(
    flows: dict[str, Any], algorithm: str, protocol: str, network: Network, routing: str | None, seed: int,
    intra_link: str,
) -> tuple[Any, Any]:  # fmt: skip
    """A shape's flows routed on the network, and the latency each pays before moving its bytes."""
    import numpy as np

    from tracekit.fabric.routing import route
    from tracekit.replay.algorithms.base import NET

    incidence = route(network, _ends(flows), routing, seed)
    inside, across = _hop_latencies(algorithm, protocol, intra_link)
    latency = np.where(flows["link"] == NET, across, inside)
    latency = np.where(_follows(flows, flows["dep_ptr"], flows["dep_idx"]), 0.0, latency) + incidence.path_latency_s
    return incidence, latency


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


_PLANS = PlanCache(PLAN_CACHE_BYTES)
_NETWORK_KEYS: WeakKeyDictionary[Network, bytes] = WeakKeyDictionary()
# The flow columns a plan depends on (everything but the bytes).
_STRUCTURE = ("link", "src_nic", "dst_nic", "src_gpu", "dst_gpu", "src_rank", "dst_rank", "channel", "qp", "step",
              "dep_ptr", "dep_idx")  # fmt: skip


def _hop_latencies(algorithm: str, protocol: str, intra_link: str) -> tuple[float, float]:
    """NCCL's per-hop latency (s) of a flow inside a host and across the network (tuning.cc hwLat)."""
    from tracekit.replay.nccl import in_network, tuning

    if algorithm in in_network.ALGORITHMS:
        inside_us, across_us = in_network.hop_latencies_us(algorithm)
        return inside_us * 1e-6, across_us * 1e-6
    p = tuning.PROTOCOLS.index(protocol)
    table = "tree" if algorithm == "tree" else "ring"
    return tuning.HW_LATENCY[LINK_CLASS[intra_link]][table][p] * 1e-6, tuning.HW_LATENCY["net"][table][p] * 1e-6


def _plan(
    flows: dict[str, Any], algorithm: str, protocol: str, network: Network, routing: str | None, seed: int,
    intra_link: str, structure: bytes | None = None,
) -> WavePlan:  # fmt: skip
    key = _digest(
        [],
        structure if structure is not None else structure_digest(flows),
        repr((_hop_latencies(algorithm, protocol, intra_link), routing, seed)).encode(),
        _network_key(network),
    )
    plan = _PLANS.get(key)
    if plan is None:
        incidence, latency = _routing_and_latency(flows, algorithm, protocol, network, routing, seed, intra_link)
        plan = WavePlan.build(incidence, network.capacity_Bps, latency, flows["step"], flows["dep_ptr"],
                              flows["dep_idx"])  # fmt: skip
        _PLANS.put(key, plan)
    return plan


def structure_digest(flows: dict[str, Any]) -> bytes:
    """A digest of what a shape's timing depends on besides its bytes and the network."""
    return _digest([flows[name] for name in _STRUCTURE])


def _network_key(network: Network) -> bytes:
    key = _NETWORK_KEYS.get(network)
    if key is None:
        import numpy as np

        fields = vars(network)
        arrays = [v for v in fields.values() if isinstance(v, np.ndarray)]
        scalars = repr(sorted((k, repr(v)) for k, v in fields.items() if not isinstance(v, np.ndarray))).encode()
        key = _NETWORK_KEYS[network] = _digest(arrays, scalars)
    return key


def _digest(arrays: list[Any], *extra: bytes) -> bytes:
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


def _within_capacity(
    start: Any, end: Any, incidence: Any, sizes: Any, capacity: Any, base_s: float, latency: Any
) -> tuple[Any, Any]:
    """The waves' times stretched, where needed, so that no link carries more than its capacity over
    the collective: steps solved apart may overlap in time on a link (a chain slowed by an ECMP
    collision lags behind the others), which the per-step rates do not see."""
    import numpy as np

    from tracekit.fabric.routing import link_loads

    finite = np.isfinite(end)
    if not finite.any():
        return start, end
    span = float(end[finite].max()) - base_s
    busiest = float((link_loads(incidence, sizes) / capacity).max(initial=0.0))
    floor = busiest + float(latency[finite].min())
    if span <= 0 or floor <= span:
        return start, end
    stretch = floor / span
    return base_s + (start - base_s) * stretch, base_s + (end - base_s) * stretch


def _follows(flows: dict[str, Any], ptr: Any, idx: Any) -> Any:
    """Flows that wait for an earlier piece on the same edge and channel (pipelined: latency overlapped)."""
    import numpy as np

    count = len(flows["bytes"])
    owner = np.repeat(np.arange(count), np.diff(ptr))
    same = np.ones(len(owner), dtype=bool)
    for name in ("src_rank", "dst_rank", "channel"):
        column = flows[name]
        same &= column[owner] == column[idx]
    out = np.zeros(count, dtype=bool)
    out[owner[same]] = True
    return out


def collective_starts(
    ds: TraceDataset, job: JobCollectives, durations: dict[int, float], notes: list[str]
) -> tuple[dict[int, float], str]:
    """collective_id -> start in seconds, and how it was found ('trace timestamps' or 'dependency replay')."""
    colls = job.collectives
    starts = colls["start_us"]
    if colls.height and starts.null_count() == 0:
        t0 = float(starts.min())  # type: ignore[arg-type]
        return {
            cid: (start - t0) / 1e6
            for cid, start in zip(colls["collective_id"].to_list(), starts.to_list(), strict=True)
        }, "trace timestamps"
    if starts.null_count() < colls.height:
        notes.append(
            f"job {job.job}: {starts.null_count()} of {colls.height} collectives have no timestamp: "
            "the whole job is timed by a replay of its ops"
        )
    return _replay_ops(ds, job, durations, notes), "dependency replay"


def _replay_ops(
    ds: TraceDataset, job: JobCollectives, durations: dict[int, float], notes: list[str]
) -> dict[int, float]:
    import polars as pl

    parts = job.participants.select("collective_id", "trace_id", "op_id")
    traces = parts["trace_id"].unique().to_list()
    total = ds.sql(
        "select count(*) from ops where job_id = ? and trace_id in (select unnest(?::VARCHAR[]))", [job.job, traces]
    ).fetchall()
    count = int(total[0][0]) if total else 0
    if count > MAX_REPLAY_OPS or count == 0:
        if count:
            notes.append(
                f"job {job.job}: {count:,} ops is past the replay limit of {MAX_REPLAY_OPS:,}; only the "
                "communication ops are replayed, in program order"
            )
        ops = parts.rename({"collective_id": "_cid"}).select(
            "trace_id",
            "op_id",
            pl.lit(0.0).alias("duration_us"),
            pl.lit(None, dtype=pl.List(pl.Int64)).alias("ctrl_deps"),
            pl.lit(None, dtype=pl.List(pl.Int64)).alias("data_deps"),
        )
    else:
        ops = ds.sql(
            "select trace_id, op_id, duration_us, ctrl_deps, data_deps from ops "
            "where job_id = ? and trace_id in (select unnest(?::VARCHAR[]))",
            [job.job, traces],
        ).pl()
    comm = {(t, o): c for c, t, o in parts.iter_rows()}
    group_of = dict(zip(job.collectives["collective_id"].to_list(), job.collectives["group"].to_list(), strict=True))
    expected: dict[int, int] = {}
    for cid in parts["collective_id"].to_list():
        expected[cid] = expected.get(cid, 0) + 1
    sim = _Replay(comm, expected, durations, group_of)
    for (trace_id,), nodes in ops.sort("op_id").partition_by("trace_id", as_dict=True).items():
        sim.add_trace(str(trace_id), nodes)
    starts = sim.run()
    if sim.forced:
        notes.append(f"job {job.job}: the ops replay unblocked {sim.forced} collective(s) that not all ranks reached")
    missing = [c for c in expected if c not in starts]
    if missing:
        end = max(starts.values(), default=0.0)
        notes.append(
            f"job {job.job}: {len(missing)} collective(s) never became ready in the ops replay; placed at the end"
        )
        for cid in missing:
            starts[cid] = end
    for cid in durations:
        starts.setdefault(cid, 0.0)
    return starts


class _Replay:
    """Discrete-event replay of every rank's ops (see the module docstring)."""

    def __init__(
        self,
        comm: dict[tuple[str, int], int],
        expected: dict[int, int],
        durations: dict[int, float],
        group_of: dict[int, int],
    ) -> None:
        self.comm = comm
        self.group_of = group_of
        self.expected = expected
        self.durations = durations
        self.traces: list[dict[str, Any]] = []
        self.events: list[tuple[float, int, int, int]] = []  # (time, seq, trace, node)
        self.seq = 0
        self.arrivals: dict[int, list[tuple[int, int, float]]] = {}
        self.starts: dict[int, float] = {}
        self.forced = 0

    def add_trace(self, trace_id: str, nodes: pl.DataFrame) -> None:
        ids = nodes["op_id"].to_list()
        index = {op: i for i, op in enumerate(ids)}
        ctrl = nodes["ctrl_deps"].to_list()
        data = nodes["data_deps"].to_list()
        has_deps = any(c for c in ctrl) or any(d for d in data)
        colls = [self.comm.get((trace_id, op)) for op in ids]
        children: list[list[int]] = [[] for _ in ids]
        indegree = [0] * len(ids)
        last_on_stream: dict[int, int] = {}  # a group's collectives run in issue order (one stream each)
        for i in range(len(ids)):
            if has_deps:
                parents = {index[d] for d in (ctrl[i] or []) + (data[i] or []) if d in index and index[d] != i}
            else:
                parents = {i - 1} if i else set()
            cid = colls[i]
            if cid is not None:
                stream = self.group_of.get(cid, -1)
                if stream in last_on_stream:
                    parents.add(last_on_stream[stream])
                last_on_stream[stream] = i
            for p in parents:
                children[p].append(i)
            indegree[i] = len(parents)
        durations = [max(d or 0.0, 0.0) / 1e6 for d in nodes["duration_us"].to_list()]
        self.traces.append(
            {
                "ids": ids,
                "coll": colls,
                "children": children,
                "indegree": indegree,
                "duration": durations,
                "queue": [],
                "busy": False,
            }
        )

    def run(self) -> dict[int, float]:
        for t, trace in enumerate(self.traces):
            for i, degree in enumerate(trace["indegree"]):
                if degree == 0:
                    self._ready(t, i, 0.0)
            self._compute(t, 0.0)
        while True:
            while self.events:
                time, _, t, i = heapq.heappop(self.events)
                self._finish(t, i, time)
            if not self._unblock():
                return self.starts

    def _push(self, time: float, t: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, self.seq, t, i))

    def _ready(self, t: int, i: int, time: float) -> None:
        trace = self.traces[t]
        cid = trace["coll"][i]
        if cid is None:
            heapq.heappush(trace["queue"], (time, i))
            return
        arrived = self.arrivals.setdefault(cid, [])
        arrived.append((t, i, time))
        if len(arrived) == self.expected.get(cid, 1):
            self._start(cid)

    def _start(self, cid: int) -> None:
        arrived = self.arrivals.pop(cid)
        start = max(time for _, _, time in arrived)
        self.starts[cid] = start
        for t, i, _ in arrived:
            self._push(start + self.durations.get(cid, 0.0), t, i)

    def _compute(self, t: int, time: float) -> None:
        trace = self.traces[t]
        if trace["busy"] or not trace["queue"]:
            return
        ready, i = heapq.heappop(trace["queue"])
        trace["busy"] = True
        self._push(max(time, ready) + trace["duration"][i], t, i)

    def _finish(self, t: int, i: int, time: float) -> None:
        trace = self.traces[t]
        if trace["coll"][i] is None:
            trace["busy"] = False
        for child in trace["children"][i]:
            trace["indegree"][child] -= 1
            if trace["indegree"][child] == 0:
                self._ready(t, child, time)
        self._compute(t, time)

    def _unblock(self) -> bool:
        """Start the pending collective whose last arrival is earliest; False when none is pending."""
        if not self.arrivals:
            return False
        cid = min(self.arrivals, key=lambda c: max(time for _, _, time in self.arrivals[c]))
        self.forced += 1
        self._start(cid)
        return True
